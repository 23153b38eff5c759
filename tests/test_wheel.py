"""The server as a wheel (what the container image and a plain `pip install` get), installed into a fresh
virtualenv: `queuecore-server migrate` finds its migrations there (the wheel's data files under
<prefix>/share/queuecore-server), not in a checkout, and brings a new database to the newest schema."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # a wheel build and a virtualenv


def test_an_installed_wheel_migrates_a_new_database(tmp_path: Path) -> None:
    wheels, venv, data = tmp_path / "wheels", tmp_path / "venv", tmp_path / "data"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = wheels.glob("queuecore_server-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # The wheel alone goes into the new environment; its dependencies are read from this one's
    # site-packages (PYTHONPATH: no .pth runs there, so this checkout's editable install stays out).
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "-q", str(wheel)],
        check=True,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
    env.update(PYTHONPATH=sysconfig.get_path("purelib"), QUEUECORE_DATA_DIR=str(data))
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import app, app.cli; print(app.__file__, app.cli.migrations_root())"],
        check=True, capture_output=True, text=True, cwd=tmp_path, env=env,
    ).stdout.split()  # fmt: skip
    assert where[0].startswith(str(venv)), where  # the installed package, not this checkout
    assert where[1] == str(venv / "share" / "queuecore-server"), where
    subprocess.run([str(venv / "bin" / "queuecore-server"), "migrate"], check=True, cwd=tmp_path, env=env)
    revisions, parents = set(), set()
    for migration in (ROOT / "migrations" / "versions").glob("*.py"):
        text = migration.read_text()
        revisions |= set(re.findall(r'^revision: str = "(\w+)"', text, re.MULTILINE))
        parents |= set(re.findall(r'^down_revision: str \| None = "(\w+)"', text, re.MULTILINE))
    with sqlite3.connect(data / "metadata.db") as db:
        (version,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {version} == revisions - parents  # the newest migration
    assert {"topics", "consumer_groups", "api_keys"} <= tables, tables
