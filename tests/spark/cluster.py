"""A Spark standalone cluster on loopback for the tests: one master and two workers (1 core, 512 MB each),
started from the pyspark installation's ``spark-class``, so jobs run in executors that are not the driver.

Drivers reach it with ``--master spark://127.0.0.1:<port>`` and the cluster's conf dir (``SPARK_CONF_DIR``:
executors of 512 MB running this virtualenv's Python, where ``queuecore_spark`` is installed). Each daemon
is its own process group; ``stop`` ends the groups, the executors and their Python workers with them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.spark.support import free_port

WORKERS = 2


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    root: Path
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def conf_dir(self) -> Path:
        return self.root / "conf"

    @property
    def work_dirs(self) -> list[Path]:
        return [self.root / f"worker-{i}" for i in range(WORKERS)]

    def env(self) -> dict[str, str]:
        """The environment of a driver (spark-submit, the console script) or daemon of this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUECORE_", "PYSPARK_", "SPARK_"))}
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_CONF_DIR": str(self.conf_dir),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "256m",  # the master's and workers' own JVMs
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
            }
        )
        return env

    def start(self) -> None:
        self.conf_dir.mkdir(parents=True)
        (self.conf_dir / "spark-defaults.conf").write_text(
            "\n".join(
                [
                    "spark.executor.memory 512m",
                    "spark.executor.cores 1",
                    "spark.driver.memory 512m",
                    "spark.driver.host 127.0.0.1",
                    f"spark.pyspark.python {sys.executable}",
                    "spark.ui.enabled false",
                    "spark.sql.session.timeZone UTC",
                    # Tasks start once both executors are up, so the work is spread over the two workers.
                    "spark.scheduler.minRegisteredResourcesRatio 1.0",
                    "spark.scheduler.maxRegisteredResourcesWaitingTime 300s",
                    "",
                ]
            )
        )
        (self.conf_dir / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
            "appender.console.type = Console\nappender.console.name = console\n"
            "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n\n"
        )
        spark_class = str(spark_home() / "bin" / "spark-class")
        self._daemon(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.port), "--webui-port", str(self.ui_port)],
        )  # fmt: skip
        for i, work in enumerate(self.work_dirs):
            work.mkdir()
            self._daemon(
                f"worker-{i}",
                [spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "512m", "--webui-port", str(free_port()), "--work-dir", str(work)],
            )  # fmt: skip
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited: {self.log_tail()}")
            try:
                state = httpx.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2).json()
                if state.get("aliveworkers") == WORKERS:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the Spark cluster did not come up in 180 s: {self.log_tail()}")

    def _daemon(self, name: str, command: list[str]) -> None:
        log = (self.root / f"{name}.log").open("ab")
        process = subprocess.Popen(
            command,
            env=self.env(),
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)

    def stop(self) -> None:
        """End every daemon's process group (workers first: their executors and Python workers go too)."""
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):  # an executor it started may outlive it
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()

    def log_tail(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}" for path in self.root.glob("*.log")
        )
