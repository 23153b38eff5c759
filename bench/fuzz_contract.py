"""Fuzz the API from its contract: schemathesis over the committed ``openapi.yaml`` against a real server.

Starts one ``queuecore-server`` (embedded default, a temp data dir, a project with limits high enough that
rate limits never hide an answer), gives the fuzzer a real topic and group to aim at, and runs every
schemathesis phase (examples, coverage, fuzzing, stateful) with a fixed seed. The checks: no 5xx, every
status documented, every answer's content type, headers and body matching its schema (so every non-2xx is
the error envelope), unsupported methods answered 405 with the contract's ``Allow``; no ERROR line in the
server's log; and no API key or server secret in any log line or any response of the run.

    python bench/fuzz_contract.py                      # the long run (make fuzz): figures to bench/results/
    python bench/fuzz_contract.py --max-examples 20 --no-report    # the bounded run of make test

Exit status: schemathesis's (0 when every check held).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
from bench_server import BIN, BenchServer

REPO = Path(__file__).resolve().parents[1]
# positive_data_acceptance_documented is schemathesis's positive_data_acceptance (ST202) less the
# rejections the contract cannot express, each with its reason (bench/fuzz_contract_checks.py).
# negative_data_rejection (ST201) stays off: in three places the contract is narrower than the server on
# purpose - idempotency keys of printable ASCII (the server takes any printable character), integers
# within +-2^53 (it takes 64 bits), a message key's 4096 counted in characters (it counts UTF-8 bytes) -
# so requests the schema calls invalid that the server rightly takes exist by design.
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_headers_conformance,response_schema_conformance,unsupported_method,"
    "missing_required_header,positive_data_acceptance_documented"
)
LIMITS = "publish=1000000,consume=1000000,admin=1000000"
ADMIN_TARGET = "fuzz-admin"


def _config(key: str, admin_token: str) -> str:
    """schemathesis.toml: the contract's two credentials (a project key; the operators' token for the
    admin API), real resources to aim at, and the documented exclusions."""
    lines = [
        "[auth.openapi.ApiKey]",
        f'bearer = "{key}"',
        "",
        "[auth.openapi.AdminToken]",
        f'bearer = "{admin_token}"',
        "",
        "[parameters]",
        # Aim at real resources, or nearly every call would be a 404 about a topic that does not exist.
        '"path.name" = "fuzz.topic"',
        '"path.group" = "g"',
        f'"path.project" = "{ADMIN_TARGET}"',
        "",
        # Deletes aim elsewhere: the real topic and group stay for every other operation.
        "[[operations]]",
        'include-name = "DELETE /v1/topics/{name}"',
        'parameters = { "path.name" = "fuzz.doomed" }',
        "",
        "[[operations]]",
        'include-name = "DELETE /v1/topics/{name}/groups/{group}"',
        'parameters = { "path.group" = "doomed" }',
        "",
        # A Server-Sent Events stream answers 200 and never ends while the member consumes: a fuzzer
        # waiting for its body would wait for ever. Its refusals are tested in tests/api/test_events.py.
        "[[operations]]",
        'include-name = "GET /v1/topics/{name}/groups/{group}/events"',
        "enabled = false",
    ]
    return "\n".join(lines) + "\n"


def run(max_examples: int, seed: int, report: bool) -> int:
    server = BenchServer("fuzz", limits=LIMITS)
    admin_token = secrets.token_urlsafe(32)
    server.env["QUEUECORE_ADMIN_TOKEN"] = admin_token
    try:
        server.start()
        # The admin API's target: a project of its own, so a tier the fuzzer sets never throttles the run.
        server.cli("bootstrap", "--project", ADMIN_TARGET, "--json")
        keys, url = server.keys, server.url
        headers = {"Authorization": f"Bearer {keys['production']}"}
        with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
            http.post("/v1/topics", json={"name": "fuzz.topic", "partitions": 3}).raise_for_status()
            http.post("/v1/topics", json={"name": "fuzz.doomed", "partitions": 1}).raise_for_status()
            http.put("/v1/topics/fuzz.topic/groups/doomed", json={}).raise_for_status()
            batch = {"messages": [{"data": {"n": i}, "key": f"k{i}"} for i in range(50)]}
            http.post("/v1/topics/fuzz.topic/messages/batch", json=batch).raise_for_status()
            http.put(
                "/v1/topics/fuzz.topic/groups/g", json={"deadLetter": {"maxRetries": 1}}
            ).raise_for_status()
        config = server.dir / "schemathesis.toml"
        # Aim at real resources, or nearly every call would be a 404 about a topic that does not exist.
        config.write_text(_config(keys["production"], admin_token))
        command = [
            str(BIN / "schemathesis"),
            "--config-file",
            str(config),
            "run",
            str(REPO / "openapi.yaml"),
            "--url",
            url,
            "--checks",
            CHECKS,
            "--max-examples",
            str(max_examples),
            "--seed",
            str(seed),
            "--workers",
            "1",
            "--no-color",
            # Every response kept, unredacted, so that it can be searched for key and secret material.
            "--report",
            "har",
            "--report-har-path",
            str(server.dir / "run.har"),
            "--output-sanitize",
            "false",
        ]
        started = time.monotonic()
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "fuzz_contract_checks"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "bench"), env.get("PYTHONPATH")]))
        result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        elapsed = time.monotonic() - started
        output = result.stdout + result.stderr
        print(output[-6000:])
        log = server.log_path.read_text()
        errors = [x for x in log.splitlines() if '"level":"error"' in x]
        if errors:
            print(f"{len(errors)} ERROR lines in the server log, e.g.:\n" + "\n".join(errors[:5]))
        # No key or server secret in any log line or any response of the whole run.
        material = [*keys.values(), admin_token, (server.dir / "secret_key").read_text().strip()]
        answers = [
            json.dumps(e["response"])
            for e in json.loads((server.dir / "run.har").read_text())["log"]["entries"]
        ]
        leaks = [f"log: {s[:12]}…" for s in material if s in log]
        leaks += [f"response: {s[:12]}…" for s in material for a in answers if s in a]
        if leaks or not answers:
            print(f"secret material leaked ({len(answers)} responses searched): {sorted(set(leaks))}")
            errors.append("leak")
        if report:
            _write_report(
                output, elapsed, max_examples, seed, result.returncode, len(errors), len(answers), leaks
            )
        return result.returncode or (1 if errors else 0)
    finally:
        server.stop()


def _write_report(
    output: str,
    elapsed: float,
    max_examples: int,
    seed: int,
    code: int,
    errors: int,
    searched: int,
    leaks: list[str],
) -> None:
    cases = re.search(r"(\d+) generated, (\d+) (?:passed|found)", output)
    generated = int(cases.group(1)) if cases else 0
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        "# Contract fuzzing (schemathesis over openapi.yaml)",
        "",
        (
            f"`python bench/fuzz_contract.py --max-examples {max_examples} --seed {seed}` at {commit}: "
            "every phase (examples, coverage, fuzzing, stateful), one real server on the embedded default."
        ),
        "",
        "| figure | value |",
        "|---|---:|",
        f"| test cases generated | {generated:,} |",
        f"| wall time | {elapsed:.0f} s |",
        f"| schemathesis exit code (0: every check held) | {code} |",
        f"| ERROR lines in the server log | {errors - (1 if leaks else 0)} |",
        f"| responses (and the whole server log) searched for API keys and the server secret | {searched:,} |",
        f"| key or secret material found | {len(leaks)} |",
        "",
        f"Checks: {CHECKS.replace(',', ', ')}.",
        "",
        "```",
        output[output.rfind("\n", 0, output.rfind("SUMMARY")) + 1 :].strip()
        if "SUMMARY" in output
        else output[-3000:].strip(),
        "```",
        "",
    ]
    (REPO / "bench" / "results" / "fuzz.md").write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-examples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261124)
    parser.add_argument("--no-report", action="store_true", help="do not write bench/results/fuzz.md")
    args = parser.parse_args()
    return run(args.max_examples, args.seed, not args.no_report)


if __name__ == "__main__":
    sys.exit(main())
