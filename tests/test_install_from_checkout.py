"""The "from a clone of this repository" install lines of the SDK READMEs and docs/spark.md, run as
written on a clean copy of the repository (its tracked and unignored files: no .venv, no node_modules, no
dist/), then the installed package imported by a fresh project. ``/path/to/queuecore`` and
``/path/to/your-app`` in the docs stand for the copy and a new project directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = ROOT / ".venv" / "bin"
BLOCK = re.compile(r"<!-- from-a-checkout -->\n```(?:sh|bash)\n(.*?)```", re.DOTALL)

pytestmark = pytest.mark.slow  # fresh virtualenvs, npm ci, go mod tidy


def install_lines(doc: str) -> str:
    (block,) = BLOCK.findall((ROOT / doc).read_text())
    return block


def run_doc(doc: str, clone: Path, app: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = (
        install_lines(doc).replace("/path/to/queuecore", str(clone)).replace("/path/to/your-app", str(app))
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{doc}:\n{script}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a clean clone holds: the tracked files and new unignored ones, as in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    out = tmp_path_factory.mktemp("clone")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = out / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    assert not (out / "sdk" / "js" / "dist").exists() and not (out / "sdk" / "js" / "node_modules").exists()
    return out


class TestPython:
    def test_the_sdk_readme_line_installs_an_importable_sdk_and_its_cli(self, clone, tmp_path):
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
        run_doc("sdk/README.md", clone, tmp_path, env)
        imported = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import queuecore; print(queuecore.QueueCore.__name__)"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert imported.stdout.strip() == "QueueCore", imported.stderr
        helped = subprocess.run(
            [str(venv / "bin" / "queuecore"), "--help"], capture_output=True, text=True, check=False
        )
        assert helped.returncode == 0, helped.stderr

    def test_the_spark_doc_line_names_installable_projects(self, clone, tmp_path):
        # pyspark is half a gigabyte: resolve and build what the line names, install nothing.
        block = install_lines("docs/spark.md").strip()
        assert block == "pip install ./sdk ./spark"
        resolved = subprocess.run(
            [str(VENV_BIN / "pip"), "install", "--dry-run", "--no-deps", "./sdk", "./spark"],
            cwd=clone,
            capture_output=True,
            text=True,
            check=False,
        )
        assert resolved.returncode == 0, resolved.stderr
        assert "queuecore" in resolved.stdout and "queuecore-spark" in resolved.stdout


class TestNode:
    def test_npm_pack_builds_dist_and_the_tarball_imports_as_esm_and_commonjs(self, clone, tmp_path):
        app = tmp_path / "app"
        app.mkdir()
        env = dict(os.environ)
        subprocess.run(["npm", "init", "-y"], cwd=app, check=True, capture_output=True)
        run_doc("sdk/js/README.md", clone, app, env)
        for program in (
            "import('@queuecore/sdk').then((m) => console.log(typeof m.QueueCore))",
            "console.log(typeof require('@queuecore/sdk').QueueCore)",
        ):
            ran = subprocess.run(
                ["node", "-e", program], cwd=app, capture_output=True, text=True, check=False
            )
            assert ran.stdout.strip() == "function", ran.stderr


GO_MAIN = """package main

import (
	"fmt"

	queuecore "github.com/queuecore/queuecore-go"
)

func main() { fmt.Println(queuecore.ErrTopicNotFound != nil) }
"""


class TestGo:
    def test_a_replace_to_the_clone_builds_a_program_using_the_sdk(self, clone, tmp_path):
        proxy = ROOT / ".go" / "proxy"
        if not proxy.is_dir():
            pytest.skip("no Go module proxy for gorilla/websocket: make go-deps")
        app = tmp_path / "app"
        app.mkdir()
        env = {
            **os.environ,
            "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
            "GOTOOLCHAIN": "local",
            "GOPATH": str(tmp_path / "gopath"),
            "GOCACHE": str(ROOT / ".go" / "cache"),
            "GOPROXY": f"file://{proxy}",
            "GOSUMDB": "off",
            "GOFLAGS": "-modcacherw",
        }
        subprocess.run(
            ["go", "mod", "init", "example.com/app"], cwd=app, env=env, check=True, capture_output=True
        )
        (app / "main.go").write_text(GO_MAIN)
        run_doc("sdk/go/README.md", clone, app, env)
        ran = subprocess.run(
            ["go", "run", "."], cwd=app, env=env, capture_output=True, text=True, check=False
        )
        assert ran.stdout.strip() == "true", ran.stderr
