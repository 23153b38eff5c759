"""The outside checkers (pinned in ``tools/checkers``; ``make checkers`` installs them, ``make test`` runs
this file): each fails on a finding unless ``tools/checkers/accepted-findings.yaml`` lists it with its
reason, and an accepted entry that no longer matches anything fails too, so the file stays honest.

- ``openapi.yaml``: Spectral (``spectral:oas`` and the OWASP API Security ruleset) and Redocly's
  ``recommended`` rules;
- the npm package (``npm pack`` of sdk/js): publint and ``@arethetypeswrong/cli``;
- the Python SDK wheel: ``twine check``, and a customer's typed project (``tests/sdk_consumer``) checked
  against the installed wheel by ``mypy --strict`` and ``pyright`` (strict).

The Go SDK's ``go vet`` runs in ``make test-go``; staticcheck cannot be had (the accepted file's header
says why).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CHECKERS = REPO / "tools" / "checkers"
ACCEPTED = CHECKERS / "accepted-findings.yaml"
BIN = CHECKERS / "node_modules" / ".bin"
TOOLS = {"spectral", "redocly", "publint", "attw", "twine", "mypy", "pyright"}

# Redocly's CLI reports usage to its vendor and checks for updates unless told not to.
QUIET_NODE = {
    **os.environ,
    "REDOCLY_TELEMETRY": "off",
    "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true",
    "NO_COLOR": "1",
}


@dataclass(frozen=True)
class Finding:
    tool: str
    rule: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.tool} {self.rule} at {self.where}: {self.message}"


@dataclass(frozen=True)
class Accepted:
    tool: str
    rule: str
    where: tuple[str, ...]  # fnmatch patterns: ``*`` matches across segments
    reason: str

    def covers(self, finding: Finding) -> bool:
        return (
            self.tool == finding.tool
            and self.rule == finding.rule
            and any(fnmatchcase(finding.where, pattern) for pattern in self.where)
        )


def load_accepted(path: Path = ACCEPTED) -> list[Accepted]:
    entries = yaml.safe_load(path.read_text())["accepted"]
    accepted = []
    for entry in entries:
        where = entry["where"]
        accepted.append(
            Accepted(
                entry["tool"],
                entry["rule"],
                tuple([where] if isinstance(where, str) else where),
                entry["reason"],
            )
        )
    return accepted


def unaccepted(
    tool: str, findings: Iterable[Finding], accepted: list[Accepted]
) -> tuple[list[str], list[str]]:
    """The findings no entry covers, and the entries (of this tool) that cover no finding."""
    findings = list(findings)
    new = [str(f) for f in findings if not any(a.covers(f) for a in accepted)]
    stale = [
        f"{a.rule} at {', '.join(a.where)}"
        for a in accepted
        if a.tool == tool and not any(a.covers(f) for f in findings)
    ]
    return new, stale


def check(tool: str, findings: Iterable[Finding]) -> None:
    new, stale = unaccepted(tool, findings, load_accepted())
    assert not new, (
        f"{tool}: {len(new)} new finding(s); fix them or accept them with a reason in {ACCEPTED}:\n"
        + ("\n".join(new))
    )
    assert not stale, f"{tool}: accepted in {ACCEPTED} but no longer found (remove them):\n" + "\n".join(
        stale
    )


def run(
    args: list[str], *, cwd: Path = CHECKERS, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, check=False, cwd=cwd, env=env or QUIET_NODE, capture_output=True, text=True, timeout=600
    )


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make checkers` (npm ci in tools/checkers)")
    return str(path)


def dotted(segments: Iterable[object]) -> str:
    return ".".join(str(s) for s in segments)


# -- the accepted file itself ---------------------------------------------------------------------------


def test_every_accepted_finding_has_a_known_tool_rule_place_and_reason():
    for entry in load_accepted():
        assert entry.tool in TOOLS, entry
        assert entry.rule and entry.where and all(entry.where), entry
        assert len(entry.reason.split()) >= 4, f"say why: {entry}"


def test_a_new_finding_and_a_stale_acceptance_both_fail():
    accepted = [Accepted("spectral", "rule-a", ("paths./v1/health.*",), "the health check takes no key")]
    seen = Finding("spectral", "rule-a", "paths./v1/health.get.responses", "m")
    other = Finding("spectral", "rule-b", "paths./v1/health.get.responses", "m")
    assert unaccepted("spectral", [seen], accepted) == ([], [])
    assert unaccepted("spectral", [seen, other], accepted)[0] == [str(other)]
    assert unaccepted("spectral", [], accepted)[1] == ["rule-a at paths./v1/health.*"]


# -- openapi.yaml ---------------------------------------------------------------------------------------


def test_openapi_passes_spectral_and_the_owasp_ruleset():
    result = run(
        [tool("spectral"), "lint", "-r", "spectral.yaml", str(REPO / "openapi.yaml"), "-f", "json", "-q"]
    )
    assert result.stdout.strip().startswith("["), result.stdout + result.stderr
    spec = yaml.safe_load((REPO / "openapi.yaml").read_text())
    findings = [
        Finding("spectral", item["code"], dotted(_named(spec, item["path"])), item["message"])
        for item in json.loads(result.stdout)
    ]
    check("spectral", findings)


def _named(spec: dict[str, Any], path: list[Any]) -> list[Any]:
    """A parameter by its name rather than its position (``parameters.cursor``), so an entry names it."""
    named = list(path)
    if len(path) > 4 and path[0] == "paths" and path[3] == "parameters":
        named[4] = spec["paths"][path[1]][path[2]]["parameters"][int(path[4])]["name"]
    return named


def _pointer(location: str) -> str:
    segments = location.removeprefix("#/").split("/")
    return dotted(s.replace("~1", "/").replace("~0", "~") for s in segments)


def test_openapi_passes_redoclys_recommended_rules():
    result = run(
        [tool("redocly"), "lint", str(REPO / "openapi.yaml"), "--extends", "recommended", "--format", "json"]
    )
    report = json.loads(result.stdout)
    findings = [
        Finding("redocly", item["ruleId"], _pointer(item["location"][0]["pointer"]), item["message"])
        for item in report["problems"]
    ]
    check("redocly", findings)


# -- the npm package ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def npm_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``npm pack`` of sdk/js (its prepack builds dist/ first), as it would be published."""
    out = tmp_path_factory.mktemp("npm")
    result = run(["npm", "pack", "--pack-destination", str(out), "--json"], cwd=REPO / "sdk" / "js")
    assert result.returncode == 0, result.stderr
    (tarball,) = out.glob("*.tgz")
    return tarball


def test_the_npm_package_passes_publint(npm_tarball):
    tool("publint")
    result = run(["node", "publint.mjs", str(npm_tarball)])
    assert result.returncode == 0, result.stderr
    findings = []
    for line in result.stdout.splitlines():
        item = json.loads(line)
        findings.append(
            Finding("publint", item["rule"], item["where"], f"({item['level']}) {item['message']}")
        )
    check("publint", findings)


def test_the_npm_package_types_resolve_for_every_consumer_kind(npm_tarball):
    """attw: ESM and CJS consumers under node10, node16 (from CJS and from ESM) and bundler resolution all
    find the implementation and its types."""
    result = run([tool("attw"), str(npm_tarball), "--format", "json"])
    analysis = json.loads(result.stdout)["analysis"]
    findings = []
    if not analysis["types"]:
        findings.append(Finding("attw", "no-types", ".", "the package ships no types"))
    for problem in analysis.get("problems", []):
        where = f"{problem.get('entrypoint', '*')}:{problem.get('resolutionKind', '*')}"
        findings.append(Finding("attw", problem["kind"], where, json.dumps(problem)))
    check("attw", findings)
    resolutions = analysis["entrypoints"]["."]["resolutions"]
    assert set(resolutions) == {"node10", "node16-cjs", "node16-esm", "bundler"}
    for kind, answer in resolutions.items():
        assert answer["resolution"]["fileName"].endswith(".d.ts"), kind
        assert answer["implementationResolution"]["fileName"].endswith(".js"), kind


# -- the Python SDK wheel -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sdk_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The queuecore wheel, built from a copy of sdk/ (as sdk/scripts/test_in_clean_venv.sh builds it)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / "sdk" / name, source / name)
    shutil.copytree(
        REPO / "sdk" / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(source)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = (work / "dist").glob("queuecore-*.whl")
    return wheel


@pytest.fixture(scope="module")
def consumer_python(sdk_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A customer's fresh virtualenv with the wheel installed (and its dependencies, nothing else)."""
    home = tmp_path_factory.mktemp("consumer") / "venv"
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(sdk_wheel)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return python


def test_the_wheel_passes_twine_check(sdk_wheel):
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdk_wheel)],
        check=False,
        capture_output=True,
        text=True,
    )
    findings = [
        Finding("twine", level.lower(), sdk_wheel.name, message.strip())
        for level, message in re.findall(
            r"^(WARNING|ERROR)\s+(.*)$", result.stdout + result.stderr, re.MULTILINE
        )
    ]
    check("twine", findings)
    assert result.returncode == 0 or findings, result.stdout + result.stderr


CONSUMER = REPO / "tests" / "sdk_consumer"


def test_a_typed_consumer_passes_mypy_strict(consumer_python):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "mypy.ini",
            "--python-executable",
            str(consumer_python),
            "--no-incremental",
            "example.py",
        ],
        cwd=CONSUMER,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    findings = [
        Finding("mypy", code, f"{path}:{line}", message)
        for path, line, message, code in re.findall(
            r"^([^:\n]+):(\d+): error: (.*?)\s+\[([a-z-]+)\]$", result.stdout, re.MULTILINE
        )
    ]
    check("mypy", findings)
    assert result.returncode == 0 or findings, result.stdout + result.stderr


def test_a_typed_consumer_passes_pyright_strict(consumer_python):
    result = run(
        [tool("pyright"), "--outputjson", "--pythonpath", str(consumer_python), "-p", "pyrightconfig.json"],
        cwd=CONSUMER,
    )
    report: dict[str, Any] = json.loads(result.stdout)
    findings = [
        Finding(
            "pyright",
            item.get("rule", item["severity"]),
            f"{Path(item['file']).name}:{item['range']['start']['line'] + 1}",
            item["message"],
        )
        for item in report["generalDiagnostics"]
        if item["severity"] in ("error", "warning")
    ]
    check("pyright", findings)
    assert report["summary"]["filesAnalyzed"] == 1, report["summary"]
