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
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from bench_server import BIN, BenchServer

REPO = Path(__file__).resolve().parents[1]
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_headers_conformance,response_schema_conformance,unsupported_method"
)
LIMITS = "publish=1000000,consume=1000000,admin=1000000"


def run(max_examples: int, seed: int, report: bool) -> int:
    server = BenchServer("fuzz", limits=LIMITS)
    try:
        server.start()
        keys, url = server.keys, server.url
        headers = {"Authorization": f"Bearer {keys['production']}"}
        with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
            http.post("/v1/topics", json={"name": "fuzz.topic", "partitions": 3}).raise_for_status()
            batch = {"messages": [{"data": {"n": i}, "key": f"k{i}"} for i in range(50)]}
            http.post("/v1/topics/fuzz.topic/messages/batch", json=batch).raise_for_status()
            http.put(
                "/v1/topics/fuzz.topic/groups/g", json={"deadLetter": {"maxRetries": 1}}
            ).raise_for_status()
        config = server.dir / "schemathesis.toml"
        # Aim at real resources, or nearly every call would be a 404 about a topic that does not exist.
        config.write_text('[parameters]\n"path.name" = "fuzz.topic"\n"path.group" = "g"\n')
        command = [
            str(BIN / "schemathesis"),
            "--config-file",
            str(config),
            "run",
            str(REPO / "openapi.yaml"),
            "--url",
            url,
            "--header",
            f"Authorization: Bearer {keys['production']}",
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
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - started
        output = result.stdout + result.stderr
        print(output[-6000:])
        log = server.log_path.read_text()
        errors = [x for x in log.splitlines() if '"level":"error"' in x]
        if errors:
            print(f"{len(errors)} ERROR lines in the server log, e.g.:\n" + "\n".join(errors[:5]))
        # No key or server secret in any log line or any response of the whole run.
        secrets = [*keys.values(), (server.dir / "secret_key").read_text().strip()]
        answers = [
            json.dumps(e["response"])
            for e in json.loads((server.dir / "run.har").read_text())["log"]["entries"]
        ]
        leaks = [f"log: {s[:12]}…" for s in secrets if s in log]
        leaks += [f"response: {s[:12]}…" for s in secrets for a in answers if s in a]
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
