"""One real ``queuecore-server`` for a benchmark run: a temp data dir (embedded default, whatever
``QUEUECORE_*`` the caller's shell has set is ignored), an enterprise project with limits high enough that
rate limits never shape a figure, served on a free port; stopped and removed afterwards.

    server = BenchServer("sdk-go")
    server.start()          # migrate, bootstrap, set the limits, serve, wait until healthy
    ... server.url, server.key (production), server.keys (every environment), server.dir ...
    server.stop()
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
DEFAULT_LIMITS = "publish=100000,consume=100000,admin=10000"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BenchServer:
    def __init__(self, name: str, limits: str = DEFAULT_LIMITS) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"qc-{name}-"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        self.env.update({"QUEUECORE_DATA_DIR": str(self.dir), "QUEUECORE_LOG_LEVEL": "WARNING"})
        self.limits = limits
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.keys: dict[str, str] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def key(self) -> str:
        """The project's production key."""
        return self.keys["production"]

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [str(BIN / "queuecore-server"), *args], env=self.env, capture_output=True, text=True, check=True
        )
        return done.stdout

    def start(self) -> None:
        self.cli("migrate")
        boot = json.loads(self.cli("bootstrap", "--project", "bench", "--tier", "enterprise", "--json"))
        self.cli(
            "projects", "set-tier", "--project", "bench", "--tier", "enterprise", "--limits", self.limits
        )
        self.keys = boot["keys"]
        self.process = subprocess.Popen(
            [str(BIN / "queuecore-server"), "serve", "--port", str(self.port)],
            env=self.env,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for _ in range(300):
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("the server did not start: " + self.log_path.read_text()[-2000:])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
