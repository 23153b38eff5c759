"""A real ``queuecore-server`` for the Spark tests, started through its operator CLI (migrate, bootstrap,
serve) in a temp data dir, as sdk/tests/sdk_support.py does for the SDK's tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pyspark.sql.types import (
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique(prefix: str = "spark") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


@dataclass
class Server:
    data_dir: Path
    port: int = field(default_factory=free_port)
    keys: dict[str, str] = field(default_factory=dict)
    usage_keys: dict[str, str] = field(default_factory=dict)
    projects: dict[str, str] = field(default_factory=dict)
    # QUEUECORE_* settings beyond the data dir: the deployment (log engine, NATS, database), the admin token.
    settings: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        env.update({"QUEUECORE_DATA_DIR": str(self.data_dir), "QUEUECORE_LOG_LEVEL": "WARNING"})
        env.update(self.settings)
        return env

    @property
    def database_url(self) -> str:
        return (
            self.settings.get("QUEUECORE_DATABASE_URL")
            or f"sqlite+aiosqlite:///{self.data_dir / 'metadata.db'}"
        )

    @property
    def admin_token(self) -> str:
        return self.settings["QUEUECORE_ADMIN_TOKEN"]

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [str(BIN / "queuecore-server"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"queuecore-server {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def bootstrap(self, project: str, tier: str = "enterprise") -> dict[str, str]:
        boot = json.loads(self.cli("bootstrap", "--project", project, "--tier", tier, "--json"))
        self.projects[project] = boot["projectId"]
        if tier == "enterprise":
            self.cli(
                "projects", "set-tier", "--project", project, "--tier", tier,
                "--limits", "publish=100000,consume=100000,admin=100000",
            )  # fmt: skip
        keys: dict[str, str] = boot["keys"]
        return keys

    def start(self) -> None:
        log = (self.data_dir / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(BIN / "queuecore-server"), "serve", "--port", str(self.port)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("queuecore-server exited: " + self.log_tail())
            try:
                if httpx.get(self.url + "/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("queuecore-server was not healthy in 60 s: " + self.log_tail())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def log_tail(self) -> str:
        path = self.data_dir / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"


class Api:
    """Direct REST calls of the tests (publishing what Spark should read, checking what it wrote)."""

    def __init__(self, url: str, key: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def create_topic(self, partitions: int = 3) -> str:
        name = unique("t")
        r = self.http.post("/v1/topics", json={"name": name, "partitions": partitions})
        assert r.status_code == 201, r.text
        # Seen once on the shared dev server: a publish right after the 201 answered TOPIC_NOT_FOUND.
        # Wait (bounded) until the topic is visible, so these tests test Spark, not that race.
        for _ in range(50):
            if self.http.get(f"/v1/topics/{name}").status_code == 200:
                break
            time.sleep(0.1)
        return name

    def publish(self, topic: str, items: list[dict[str, object]]) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for i in range(0, len(items), 1000):
            r = self.http.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items[i : i + 1000]})
            assert r.status_code == 201, r.text
            out.extend(r.json()["messages"])
        return out

    def read_all(self, topic: str) -> list[dict[str, object]]:
        """Every message of the topic through the stream read, partition by partition."""
        described = self.http.get(f"/v1/topics/{topic}").json()
        out: list[dict[str, object]] = []
        for p in described["partitionDetails"]:
            offset = p["earliestOffset"]
            while True:
                page = self.http.get(
                    f"/v1/topics/{topic}/partitions/{p['id']}/messages",
                    params={"fromOffset": offset, "limit": 1000},
                ).json()
                if not page["data"]:
                    break
                out.extend(page["data"])
                offset = page["nextOffset"]
        return out


# The connector's columns (``_source.SCHEMA``) as a StructType, for reading a range without Spark planning it.
CONNECTOR_SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", StringType()),
        StructField("data", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("timestamp", TimestampType()),
    ]
)
