"""The real thing: ``queuecore-server serve`` on a socket, driven as a customer drives it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time

import httpx


class TestServeProcess:
    def test_health_and_topic_round_trip(self, server):
        health = httpx.get(server.url + "/v1/health").json()
        assert health["status"] == "ok" and health["checks"]["logEngine"] == "ok"
        headers = {"Authorization": f"Bearer {server.keys['staging']}"}
        created = httpx.post(server.url + "/v1/topics", json={"name": "proc.topic"}, headers=headers)
        assert created.status_code == 201, created.text
        assert created.headers["x-request-id"].startswith("req_")
        assert httpx.get(server.url + "/v1/topics/proc.topic", headers=headers).json()["partitions"] == 3

    def test_logs_are_json_lines_with_request_id_and_no_secret(self, server):
        headers = {"Authorization": f"Bearer {server.keys['production']}", "X-Request-Id": "log-check-1"}
        httpx.get(server.url + "/v1/topics", headers=headers)
        deadline = time.monotonic() + 5
        while True:  # the line is written as the response completes, a moment after the client has it
            text = server.log_path.read_text()
            lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
            mine = [line for line in lines if line.get("requestId") == "log-check-1"]
            if mine or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert mine and mine[0]["route"] == "/v1/topics" and mine[0]["status"] == 200
        assert mine[0]["keyId"].startswith("key_") and "latencyMs" in mine[0]
        assert server.keys["production"] not in text

    async def test_websocket_tokens_are_redacted_from_the_upgrade_log_line(self, server):
        from websockets.asyncio.client import connect

        headers = {"Authorization": f"Bearer {server.keys['production']}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as http:
            created = await http.post("/v1/topics", json={"name": "proc.ws.log", "partitions": 1})
            assert created.status_code == 201, created.text
            minted = await http.post("/v1/tokens/websocket", json={"topic": "proc.ws.log"})
            assert minted.status_code == 201, minted.text
        token = minted.json()["token"]
        ws_url = server.url.replace("http://", "ws://")
        async with connect(f"{ws_url}/v1/topics/proc.ws.log/consume?group=log-check&token={token}") as ws:
            assert json.loads(await ws.recv())["type"] == "welcome"
        deadline = time.monotonic() + 5
        while True:  # uvicorn logs the upgrade as it accepts it
            text = server.log_path.read_text()
            upgrades = [line for line in text.splitlines() if "/v1/topics/proc.ws.log/consume" in line]
            if upgrades or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert upgrades and all("token=[redacted]" in line for line in upgrades), upgrades
        assert token not in text and token.rsplit(".", 1)[1] not in text


class TestReadmeQuickstart:
    def test_curl_quickstart_runs_as_written(self, server, repo_root):
        readme = (repo_root / "README.md").read_text()
        section = readme.split("## Quickstart with curl", 1)[1]
        script = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
        env = dict(os.environ, QUEUECORE_BASE_URL=server.url)
        # The reader pastes the key make run printed; the test substitutes the server's development key.
        script = script.replace("pq_test_sk_...", server.keys["development"])
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        created, listed, error = [json.loads(line) for line in out.stdout.replace("}{", "}\n{").splitlines()]
        assert created["name"] == "order.events" and created["partitions"] == 6
        assert [t["name"] for t in listed["data"]] == ["order.events"]
        assert error["error"]["code"] == "TOPIC_NOT_FOUND"
        assert (
            error["error"]["message"] == "The topic 'user.events' does not exist in the current environment."
        )
