"""Every ```python block of sdk/README.md runs as written, in order, each in a fresh interpreter, against the
real server (QUEUECORE_API_KEY and QUEUECORE_BASE_URL set in the environment, as the README says)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_readme_has_examples():
    blocks = python_blocks()
    assert len(blocks) >= 10
    assert any("publish_batch" in b for b in blocks)


def test_every_python_block_runs(server, tmp_path):
    env = server.client_env(server.keys["sdk-test"]["production"])
    for number, code in enumerate(python_blocks(), start=1):
        result = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"README python block {number} failed:\n{code}\n---\n{result.stderr}"
        assert result.stdout.strip() or "print(" not in code, f"block {number} printed nothing"
