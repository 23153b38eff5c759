"""Audit the installed Python dependencies against PyPI's advisory data (``pip-audit``), in ``make test``.

    .venv/bin/python -m infra.audit [--require-coverage]

Runs ``pip-audit`` on the virtualenv (our own editable packages skipped), then judges its findings:

- a vulnerability whose id (or one of its aliases) is listed in ``infra/audit-accepted.txt`` is accepted
  and printed as such; any other finding fails the audit (exit 1), with the fix versions pip-audit knows;
- a dependency the advisory service could not answer for is counted and named. If it answered for none,
  the audit says in capitals that it checked nothing (this workplace's PyPI mirror answers 404 to the
  per-version JSON that pip-audit asks for); ``--require-coverage`` makes that a failure too, for a
  machine that reaches pypi.org.

To accept a finding, add a line to ``infra/audit-accepted.txt``: the advisory id, then why it does not
apply or when it will be fixed, who accepted it and the date (see that file's header).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ACCEPTED = ROOT / "infra" / "audit-accepted.txt"


def accepted_ids(path: Path = ACCEPTED) -> dict[str, str]:
    """Accepted advisory ids and the reason given for each (the rest of the line)."""
    accepted: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            advisory, _, reason = line.partition(" ")
            accepted[advisory] = reason.strip()
    return accepted


def judge(report: dict[str, Any], accepted: dict[str, str]) -> tuple[list[str], list[str], list[str], int]:
    """(unaccepted findings, accepted findings, dependencies not audited, dependencies audited)."""
    failing: list[str] = []
    waived: list[str] = []
    skipped: list[str] = []
    audited = 0
    for dependency in report["dependencies"]:
        if "skip_reason" in dependency:
            skipped.append(dependency["name"])
            continue
        audited += 1
        for vuln in dependency.get("vulns", []):
            ids = [vuln["id"], *vuln.get("aliases", [])]
            line = f"{dependency['name']} {dependency['version']}: {', '.join(ids)}"
            fixes = vuln.get("fix_versions") or []
            line += f" (fixed in {', '.join(fixes)})" if fixes else " (no fix released)"
            reason = next((accepted[i] for i in ids if i in accepted), None)
            if reason is None:
                failing.append(line)
            else:
                waived.append(f"{line}; accepted: {reason}")
    return failing, waived, skipped, audited


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--require-coverage", action="store_true", help="fail if no dependency was audited")
    args = parser.parse_args()
    run = subprocess.run(
        [str(Path(sys.executable).parent / "pip-audit"), "--skip-editable", "--progress-spinner", "off"]
        + ["--vulnerability-service", "pypi", "--format", "json"],
        check=False,  # it exits 1 on any finding; the findings are judged here
        capture_output=True,
        text=True,
    )
    if not run.stdout.strip():
        print(f"pip-audit gave no report (exit {run.returncode}):\n{run.stderr}", file=sys.stderr)
        return 1
    failing, waived, skipped, audited = judge(json.loads(run.stdout), accepted_ids())
    print(
        f"dependency audit: {audited} audited, {len(skipped)} could not be audited, {len(failing)} findings"
    )
    for line in waived:
        print(f"  accepted  {line}")
    for line in failing:
        print(f"  VULNERABLE  {line}")
    if skipped:
        print(f"  not audited (no advisory data answered): {', '.join(skipped)}")
    if audited == 0:
        print("  THE AUDIT CHECKED NOTHING: the advisory service answered for none of the dependencies.")
        if args.require_coverage:
            return 1
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
