"""The dependency audit's judgement of pip-audit's report (infra/audit.py)."""

from __future__ import annotations

from pathlib import Path

from infra.audit import ACCEPTED, accepted_ids, judge

REPORT = {
    "dependencies": [
        {"name": "alpha", "version": "1.0", "vulns": []},
        {
            "name": "beta",
            "version": "2.0",
            "vulns": [
                {"id": "PYSEC-1", "aliases": ["CVE-2026-1"], "fix_versions": ["2.1"]},
                {"id": "GHSA-aaaa", "aliases": [], "fix_versions": []},
            ],
        },
        {"name": "gamma", "skip_reason": "Dependency not found on PyPI and could not be audited: gamma (3)"},
    ],
    "fixes": [],
}


def test_an_unaccepted_finding_fails_and_names_its_fix() -> None:
    failing, waived, skipped, audited = judge(REPORT, {})
    assert failing == [
        "beta 2.0: PYSEC-1, CVE-2026-1 (fixed in 2.1)",
        "beta 2.0: GHSA-aaaa (no fix released)",
    ]
    assert waived == [] and skipped == ["gamma"] and audited == 2


def test_a_finding_is_accepted_by_its_id_or_an_alias(tmp_path: Path) -> None:
    listed = tmp_path / "accepted.txt"
    listed.write_text("# header\n\nCVE-2026-1  only the CLI is affected (jane, 2026-11-24)\n")
    failing, waived, _, _ = judge(REPORT, accepted_ids(listed))
    assert failing == ["beta 2.0: GHSA-aaaa (no fix released)"]
    assert waived == [
        "beta 2.0: PYSEC-1, CVE-2026-1 (fixed in 2.1); accepted: only the CLI is affected (jane, 2026-11-24)"
    ]


def test_the_committed_list_parses() -> None:
    assert all(advisory[:4] in ("PYSE", "GHSA", "CVE-") for advisory in accepted_ids(ACCEPTED))
