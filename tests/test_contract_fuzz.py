"""The API fuzzed from its contract, bounded: schemathesis over ``openapi.yaml`` against a real server, every
phase (the coverage phase included), a fixed seed (``bench/fuzz_contract.py``; ``make fuzz`` runs the long
version). No 5xx, every status documented, every answer matching its schema and content type (every non-2xx
is the envelope); every request the contract calls valid is accepted, less the rejections it cannot express
(``bench/fuzz_contract_checks.py``, each with its reason); a call without its credential is 401. A long run: ``make test-long`` (not ``make test``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.long
def test_schemathesis_finds_no_failure():
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fuzz_contract.py"), "--max-examples", "20", "--no-report"],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "generated" in result.stdout
