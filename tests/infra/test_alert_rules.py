"""The Prometheus alerting rules (infra/prometheus): promtool accepts them and their unit tests pass,
every alert is unit-tested firing and quiet, has a runbook section, and reads only metrics the server
exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "infra" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "infra" / "prometheus" / "alerts_test.yml"
OPERATIONS = ROOT / "docs" / "operations.md"

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="make test installs promtool (Debian's prometheus)"
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    # check=False: the test reports promtool's own output when it fails.
    command = [PROMTOOL, *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=120, cwd=RULES.parent)


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = _promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases = [
        case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]
    ]
    for alert in _alerts():
        name = alert["alert"]
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name} is never tested firing"
        assert any(not case["exp_alerts"] for case in mine), f"{name} is never tested quiet"


def test_every_alert_has_a_runbook_section() -> None:
    headings = {line[4:].strip() for line in OPERATIONS.read_text().splitlines() if line.startswith("### ")}
    for alert in _alerts():
        name = alert["alert"]
        assert name in headings, f"docs/operations.md has no '### {name}' runbook section"
        assert alert["annotations"]["runbook"] == f"docs/operations.md#{name.lower()}"


def test_rules_read_only_metrics_the_server_exports() -> None:
    exported = set(re.findall(r'"(queuecore_[a-z_]+)"', (ROOT / "app" / "api" / "metrics.py").read_text()))
    used = set(re.findall(r"\b(queuecore_[a-z_]+?)(?:_bucket|_count|_sum)?\b", RULES.read_text()))
    assert used, "no queuecore_ metric in the rules"
    assert used <= exported, f"not exported by app/api/metrics.py: {sorted(used - exported)}"
