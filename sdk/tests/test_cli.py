"""The ``queuecore`` command, end to end: a subprocess against the real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sdk_support import free_port, unique

pytestmark = pytest.mark.integration


def run(
    env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "queuecore", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


@pytest.fixture
def env(server, tmp_path: Path) -> dict[str, str]:
    # A config file of the test's own: a developer's saved contexts must not leak in.
    env = server.client_env(server.keys["sdk-test"]["staging"])
    env["QUEUECORE_CONFIG"] = str(tmp_path / "queuecore-config.json")
    return env


@pytest.fixture
def cli_topic(env) -> str:
    name = unique("cli")
    assert run(env, "topics", "create", name, "--partitions", "2").returncode == 0
    return name


class TestTopics:
    def test_lifecycle(self, env):
        name = unique("cli")
        created = run(
            env, "topics", "create", name, "--partitions", "2", "--retention", "30d", "--replicas", "1"
        )
        assert created.returncode == 0, created.stderr
        topic = json.loads(created.stdout)
        assert (topic["name"], topic["partitions"], topic["retention"], topic["replicas"]) == (
            name,
            2,
            "30d",
            1,
        )
        assert topic["id"].startswith("top_") and topic["createdAt"].endswith("Z")

        listed = run(env, "topics", "list", "--page-size", "1")
        assert listed.returncode == 0
        assert name in [t["name"] for t in lines(listed.stdout)]

        updated = run(env, "topics", "update", name, "--partitions", "3")
        assert json.loads(updated.stdout)["partitions"] == 3

        described = json.loads(run(env, "topics", "describe", name).stdout)
        assert [p["id"] for p in described["partitionDetails"]] == [0, 1, 2]
        assert described["replicas"] == 1

        deleted = run(env, "topics", "delete", name)
        assert deleted.returncode == 0
        assert json.loads(deleted.stdout) == {"name": name, "deleted": True}

        missing = run(env, "topics", "describe", name)
        assert missing.returncode == 1
        assert "404 TOPIC_NOT_FOUND" in missing.stderr
        assert "Request req_" in missing.stderr
        assert missing.stdout == ""

    def test_conflict_and_validation(self, env, cli_topic):
        taken = run(env, "topics", "create", cli_topic)
        assert taken.returncode == 1 and "409 TOPIC_ALREADY_EXISTS" in taken.stderr
        # The local engine keeps one copy: more is the server's 400; a count not offered at all is usage.
        three = run(env, "topics", "create", unique("cli"), "--replicas", "3")
        assert three.returncode == 1 and "400 INVALID_REQUEST" in three.stderr
        assert "keeps one copy" in three.stderr
        two = run(env, "topics", "create", unique("cli"), "--replicas", "2")
        assert two.returncode == 2 and "invalid choice" in two.stderr
        bad = run(env, "topics", "update", cli_topic, "--partitions", "1")
        assert bad.returncode == 1 and "400 INVALID_REQUEST" in bad.stderr
        usage = run(env, "topics", "update", cli_topic)
        assert usage.returncode == 2


class TestPublishOne:
    def test_publish_and_get(self, env, cli_topic):
        published = run(
            env,
            "publish",
            cli_topic,
            '{"orderId": "ord_1", "amount": 9900}',
            "--key",
            "ord_1",
            "--header",
            "a=b",
        )
        assert published.returncode == 0, published.stderr
        result = json.loads(published.stdout)
        assert result["id"].startswith("msg_") and result["offset"] == 0 and result["durability"]

        got = run(env, "messages", "get", cli_topic, result["id"])
        message = json.loads(got.stdout)
        assert message["data"] == {"orderId": "ord_1", "amount": 9900}
        assert (message["key"], message["headers"], message["topic"]) == ("ord_1", {"a": "b"}, cli_topic)

    def test_idempotency_key(self, env, cli_topic):
        first = json.loads(run(env, "publish", cli_topic, "1", "--idempotency-key", "k1").stdout)
        again = json.loads(run(env, "publish", cli_topic, "2", "--idempotency-key", "k1").stdout)
        assert again["id"] == first["id"] and again["replayed"] is True

    def test_bad_json_is_a_usage_error(self, env, cli_topic):
        result = run(env, "publish", cli_topic, "{not json")
        assert result.returncode == 2
        assert "not valid JSON" in result.stderr


class TestPublishLines:
    def test_stdin_in_batches_then_read_back(self, env, cli_topic):
        count = 2500
        text = "".join(json.dumps({"n": i}) + "\n" + ("\n" if i % 700 == 0 else "") for i in range(count))
        published = run(env, "publish", cli_topic, "-", "--partition", "1", stdin=text)
        assert published.returncode == 0, published.stderr
        results = lines(published.stdout)
        assert len(results) == count
        assert [r["offset"] for r in results] == list(range(count))
        # stdin is a pipe, not a terminal: progress goes to stderr, ending with the total
        assert "published 2500 messages in 3 batches" in published.stderr

        read = run(env, "read", cli_topic, "--partition", "1")
        assert read.returncode == 0, read.stderr
        messages = lines(read.stdout)
        assert [m["data"]["n"] for m in messages] == list(range(count))
        assert [m["offset"] for m in messages] == list(range(count))

        window = lines(
            run(env, "read", cli_topic, "--partition", "1", "--from-offset", "10", "--limit", "5").stdout
        )
        assert [m["offset"] for m in window] == [10, 11, 12, 13, 14]

        everything = lines(run(env, "read", cli_topic, "-p", "1", "--limit", "2000").stdout)
        assert len(everything) == 2000

    def test_no_message_argument_reads_stdin(self, env, cli_topic):
        result = run(env, "publish", cli_topic, "--quiet", stdin='"a"\n"b"\n')
        assert result.returncode == 0, result.stderr
        assert result.stdout == "" and result.stderr == ""
        detail = json.loads(run(env, "topics", "describe", cli_topic).stdout)
        assert sum(p["messages"] for p in detail["partitionDetails"]) == 2

    def test_one_batch_reports_once(self, env, cli_topic):
        result = run(env, "publish", cli_topic, "-", stdin="1\n2\n3\n")
        assert result.returncode == 0
        assert len(lines(result.stdout)) == 3
        assert result.stderr.splitlines() == [result.stderr.splitlines()[0]]
        assert result.stderr.startswith("published 3 messages in 1 batch,")

    def test_file_with_batch_size_and_idempotent_rerun(self, env, cli_topic, tmp_path: Path):
        source = tmp_path / "orders.jsonl"
        source.write_text("".join(json.dumps({"orderId": f"ord_{i}"}) + "\n" for i in range(25)))
        args = (
            "publish",
            cli_topic,
            "--file",
            str(source),
            "--batch-size",
            "10",
            "--idempotency-key",
            "import-1",
        )
        first = run(env, *args)
        assert first.returncode == 0, first.stderr
        assert "published 25 messages in 3 batches" in first.stderr
        again = run(env, *args)
        assert all(r.get("replayed") for r in lines(again.stdout))
        detail = json.loads(run(env, "topics", "describe", cli_topic).stdout)
        assert sum(p["messages"] for p in detail["partitionDetails"]) == 25

    def test_a_bad_line_publishes_nothing_and_names_the_line(self, env, cli_topic, tmp_path: Path):
        stdin = run(env, "publish", cli_topic, "-", "--partition", "0", stdin="1\n2\n{oops\n4\n")
        assert stdin.returncode == 2
        assert "line 3" in stdin.stderr
        assert stdin.stdout == ""
        source = tmp_path / "bad.jsonl"
        source.write_text("1\n\n2\n3\n[nope\n")
        from_file = run(env, "publish", cli_topic, "--file", str(source), "--partition", "0")
        assert from_file.returncode == 2
        assert "line 5" in from_file.stderr and from_file.stdout == ""
        assert run(env, "read", cli_topic, "--partition", "0").stdout == ""  # nothing was sent

    def test_a_replayed_rerun_says_so(self, env, cli_topic):
        args = ("publish", cli_topic, "-", "--idempotency-key", "rerun-1")
        stdin = "".join(f"{i}\n" for i in range(5))
        first = run(env, *args, stdin=stdin)
        assert first.returncode == 0 and "published 5 messages in 1 batch," in first.stderr
        again = run(env, *args, stdin=stdin)
        assert again.returncode == 0, again.stderr
        assert "0 new, 5 replayed" in again.stderr
        assert "published 5" not in again.stderr

    def test_quiet_single_message(self, env, cli_topic):
        result = run(env, "publish", cli_topic, '{"n": 1}', "-q")
        assert result.returncode == 0, result.stderr
        assert result.stdout == "" and result.stderr == ""


class TestErrorsAndExitCodes:
    def test_no_key(self, env):
        env = {k: v for k, v in env.items() if k != "QUEUECORE_API_KEY"}
        result = run(env, "topics", "list")
        assert result.returncode == 2
        assert "QUEUECORE_API_KEY" in result.stderr

    def test_a_bad_key(self, env):
        result = run(env, "--api-key", "pq_test_sk_" + "z" * 32, "topics", "list")
        assert result.returncode == 1
        assert "401 INVALID_API_KEY" in result.stderr

    def test_unreachable_server(self, env):
        port = free_port()
        result = run(env, "--base-url", f"http://127.0.0.1:{port}", "--max-retries", "0", "topics", "list")
        assert result.returncode == 3
        assert f"Connection error: could not reach 127.0.0.1:{port}" in result.stderr

    def test_missing_message(self, env, cli_topic):
        result = run(env, "messages", "get", cli_topic, "not-an-id")
        assert result.returncode == 1
        assert "400 INVALID_REQUEST" in result.stderr

    def test_usage(self, env):
        assert run(env).returncode == 2
        assert run(env, "read", "t", "--follow", "--exit-at-end").returncode == 2  # one or the other
        assert run(env, "publish", "t", "1", "--batch-size", "1001").returncode == 2

    def test_a_key_ending_in_a_newline_works(self, env):
        env = dict(env, QUEUECORE_API_KEY=env["QUEUECORE_API_KEY"] + "\n")
        result = run(env, "topics", "list")
        assert result.returncode == 0, result.stderr

    def test_a_key_with_inner_whitespace_is_a_usage_error(self, env):
        key = env["QUEUECORE_API_KEY"]
        result = run(dict(env, QUEUECORE_API_KEY=key[:5] + " " + key[5:]), "topics", "list")
        assert result.returncode == 2
        assert "API key" in result.stderr and "server" not in result.stderr

    def test_numeric_options_name_the_option(self, env):
        result = run(env, "topics", "create", "x", "--partitions", "six")
        assert result.returncode == 2
        assert "--partitions: must be a whole number of 1 or more, got 'six'" in result.stderr
        assert "_positive" not in result.stderr
        zero = run(env, "read", "x", "-p", "0", "--limit", "0")
        assert "--limit: must be a whole number of 1 or more, got '0'" in zero.stderr
        negative = run(env, "offsets", "seek", "x", "-g", "g", "-p", "-1", "--offset", "1")
        assert "must be a whole number of 0 or more, got '-1'" in negative.stderr
        timeout = run(env, "--timeout", "soon", "health")
        assert timeout.returncode == 2 and "--timeout: must be a number" in timeout.stderr

    def test_health(self, env):
        result = run(env, "health")
        assert result.returncode == 0
        assert json.loads(result.stdout)["status"] == "ok"


def test_the_console_script_is_installed(env):
    script = Path(sys.executable).parent / ("queuecore.exe" if os.name == "nt" else "queuecore")
    assert script.exists()
    result = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    assert result.stdout.strip() == "queuecore 0.1.0"
    topics = subprocess.run(
        [str(script), "topics", "list"], env=env, capture_output=True, text=True, check=False
    )
    assert topics.returncode == 0, topics.stderr


class TestGroupsAndOffsets:
    def test_lifecycle(self, env, cli_topic):
        for i in range(3):
            assert run(env, "publish", cli_topic, json.dumps({"n": i}), "--partition", "0").returncode == 0
        group = unique("g")
        # A group exists once configured or joined; reset-offsets on a missing one is refused.
        missing = run(env, "groups", "describe", cli_topic, group)
        assert missing.returncode == 1 and "404 GROUP_NOT_FOUND" in missing.stderr

        from queuecore import QueueCore

        with QueueCore(api_key=env["QUEUECORE_API_KEY"], base_url=env["QUEUECORE_BASE_URL"]) as client:
            client.consumer_groups.update(cli_topic, group)

        listed = run(env, "groups", "list", cli_topic)
        assert listed.returncode == 0, listed.stderr
        assert [(g["name"], g["consumers"]) for g in lines(listed.stdout)] == [(group, 0)]

        described = json.loads(run(env, "groups", "describe", cli_topic, group).stdout)
        assert [p["id"] for p in described["partitions"]] == [0, 1]
        assert set(described["config"]) >= {"ackTimeout", "sessionTimeout", "deadLetter"}

        reset = run(env, "groups", "reset-offsets", cli_topic, group, "--to", "latest")
        assert lines(reset.stdout) == [{"partition": 0, "current": 3}, {"partition": 1, "current": 0}]
        bad = run(env, "groups", "reset-offsets", cli_topic, group, "--to", "middle")
        assert bad.returncode == 2

        seek = run(env, "offsets", "seek", cli_topic, "-g", group, "-p", "0", "--offset", "1")
        assert json.loads(seek.stdout) == {"partition": 0, "offset": 1}
        one = run(env, "offsets", "get", cli_topic, "--group", group, "--partition", "0")
        assert json.loads(one.stdout) == {"current": 1, "latest": 3, "lag": 2}
        by_time = run(env, "offsets", "seek", cli_topic, "-g", group, "-p", "0", "--timestamp", "0")
        assert json.loads(by_time.stdout) == {"partition": 0, "offset": 0}
        neither = run(env, "offsets", "seek", cli_topic, "-g", group, "-p", "0")
        assert neither.returncode == 2

        out = run(env, "offsets", "reset", cli_topic, "-g", group, "--to", "latest", "-p", "0")
        assert lines(out.stdout) == [{"partition": 0, "current": 3}]
        every = lines(run(env, "offsets", "get", cli_topic, "-g", group).stdout)
        assert [(o["partition"], o["lag"]) for o in every] == [(0, 0), (1, 0)]


class TestConsume:
    def test_consume_prints_json_lines_and_acks(self, env, cli_topic):
        published = run(
            env, "publish", cli_topic, "-", stdin="\n".join(json.dumps({"n": i}) for i in range(6))
        )
        assert published.returncode == 0, published.stderr
        group = unique("g")
        got = run(
            env, "consume", cli_topic, "--group", group, "--from", "earliest", "--count", "6", timeout=60
        )
        assert got.returncode == 0, got.stderr
        messages = lines(got.stdout)
        assert sorted(m["data"]["n"] for m in messages) == list(range(6))
        assert all(
            m["id"].startswith("msg_") and m["attempt"] == 1 and m["topic"] == cli_topic for m in messages
        )
        lag = lines(run(env, "offsets", "get", cli_topic, "--group", group).stdout)
        assert sum(p["lag"] for p in lag) == 0  # acked before exiting

    def test_no_ack_leaves_the_messages_for_the_group(self, env, cli_topic):
        assert run(env, "publish", cli_topic, '{"n": 1}').returncode == 0
        group = unique("g")
        for transport in ("websocket", "pull", "sse"):
            got = run(
                env,
                "consume",
                cli_topic,
                "--group",
                group,
                "--from",
                "earliest",
                "--count",
                "1",
                "--no-ack",
                "--transport",
                transport,
                timeout=60,
            )
            assert got.returncode == 0, got.stderr
            assert [m["data"] for m in lines(got.stdout)] == [{"n": 1}]
        lag = lines(run(env, "offsets", "get", cli_topic, "--group", group).stdout)
        assert sum(p["lag"] for p in lag) == 1

    @pytest.mark.parametrize("transport", ["websocket", "pull", "sse"])
    def test_count_prints_and_acks_exactly_n_across_partitions(self, env, transport):
        # Handlers of different partitions run concurrently: the count must not be overshot.
        from queuecore import BatchMessage, QueueCore

        topic = unique("cli")
        with QueueCore(api_key=env["QUEUECORE_API_KEY"], base_url=env["QUEUECORE_BASE_URL"]) as client:
            client.topics.create(topic, partitions=4)
            client.publish_batch(topic, [BatchMessage(data={"n": i}, partition=i % 4) for i in range(16)])
        for count in (1, 3):
            group = unique("g")
            got = run(
                env, "consume", topic, "-g", group, "--from", "earliest", "--count", str(count),
                "--transport", transport, timeout=60,
            )  # fmt: skip
            assert got.returncode == 0, got.stderr
            assert len(lines(got.stdout)) == count
            lag = lines(run(env, "offsets", "get", topic, "--group", group).stdout)
            assert sum(p["lag"] for p in lag) == 16 - count

    @pytest.mark.parametrize(("signal_name", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
    def test_a_signal_stops_gracefully(self, env, signal_name, code):
        import signal
        import threading
        import time

        from queuecore import QueueCore

        topic = unique("cli")
        group = unique("g")
        stop = threading.Event()
        client = QueueCore(api_key=env["QUEUECORE_API_KEY"], base_url=env["QUEUECORE_BASE_URL"])
        client.topics.create(topic, partitions=2)

        def publish() -> None:
            n = 0
            while not stop.is_set():
                client.publish(topic, {"n": n}, partition=n % 2)
                n += 1
                time.sleep(0.01)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        proc = subprocess.Popen(
            [sys.executable, "-m", "queuecore", "consume", topic, "-g", group, "--from", "earliest"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        printed: list[dict] = []
        reader = threading.Thread(target=lambda: printed.extend(json.loads(x) for x in proc.stdout))
        reader.start()
        try:
            deadline = time.monotonic() + 30
            while len(printed) < 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(printed) >= 10, proc.stderr.read() if proc.poll() is not None else "no output"
            proc.send_signal(getattr(signal, signal_name))
            assert proc.wait(timeout=30) == code, proc.stderr.read()
            reader.join(timeout=10)
        finally:
            stop.set()
            publisher.join(timeout=10)
            if proc.poll() is None:
                proc.kill()
            client.close()
        # Every printed message is committed, and nothing beyond: committed == printed per partition.
        offsets = lines(run(env, "offsets", "get", topic, "--group", group).stdout)
        for position in offsets:
            shown = sorted(m["offset"] for m in printed if m["partition"] == position["partition"])
            assert shown == list(range(len(shown)))
            assert position["current"] == len(shown)

    def test_consume_refused(self, env):
        got = run(env, "consume", unique("missing"), "--group", "g", timeout=60)
        assert got.returncode == 1 and "TOPIC_NOT_FOUND" in got.stderr


class TestDlq:
    def test_list_replay_delete_replay_all_audit(self, env, server):
        from test_dlq import fill_dlq

        import queuecore

        with queuecore.QueueCore(api_key=env["QUEUECORE_API_KEY"], base_url=server.url) as client:
            topic, group, ids = fill_dlq(client, 3)
        listed = run(env, "dlq", "list", topic, "--group", group)
        assert listed.returncode == 0, listed.stderr
        entries = lines(listed.stdout)
        assert [e["messageId"] for e in entries] == ids and all(e["retryCount"] == 0 for e in entries)
        assert (
            lines(run(env, "dlq", "list", topic, "--group", group, "--limit", "1").stdout)[0]["messageId"]
            == ids[0]
        )
        replayed = run(env, "dlq", "replay", topic, "--group", group, "--message-id", ids[0])
        assert lines(replayed.stdout) == [{"messageId": ids[0], "replayed": True}]
        deleted = run(env, "dlq", "delete", topic, "--group", group, "--message-id", ids[1])
        assert deleted.returncode == 0 and lines(deleted.stdout) == [{"messageId": ids[1], "deleted": True}]
        again = run(env, "dlq", "delete", topic, "--group", group, "--message-id", ids[1])
        assert again.returncode == 1 and "MESSAGE_NOT_FOUND" in again.stderr
        assert lines(run(env, "dlq", "replay-all", topic, "--group", group, "--rate", "50").stdout) == [
            {"replayed": 1}
        ]
        audit = lines(run(env, "dlq", "audit", topic, "--group", group).stdout)
        assert [a["action"] for a in audit] == ["replay_all", "delete", "replay"]
        assert audit[0]["count"] == 1 and "messageId" not in audit[0]


class TestAlerts:
    def test_set_show_test_deliveries_delete(self, env):
        import http.server
        import threading

        received: list[bytes] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
        try:
            created = run(env, "alerts", "set", "--url", url)
            assert created.returncode == 0, created.stderr
            [endpoint] = lines(created.stdout)
            assert endpoint["url"] == url and endpoint["state"] == "closed"
            assert endpoint.get("secret", "whsec_").startswith("whsec_")
            shown = lines(run(env, "alerts", "show").stdout)[0]
            assert "secret" not in shown and shown["url"] == url
            [queued] = lines(run(env, "alerts", "test").stdout)
            assert queued["eventId"].startswith("evt_")
            import time

            deadline = time.monotonic() + 10
            attempts: list[dict] = []
            while time.monotonic() < deadline and not attempts:
                attempts = lines(run(env, "alerts", "deliveries").stdout)
                time.sleep(0.2)
            assert attempts and attempts[0]["eventId"] == queued["eventId"] and attempts[0]["ok"]
            assert received
            assert lines(run(env, "alerts", "delete").stdout) == [{"deleted": True}]
            gone = run(env, "alerts", "show")
            assert gone.returncode == 1 and "ALERT_ENDPOINT_NOT_FOUND" in gone.stderr
            assert "queuecore alerts set --url URL" in gone.stderr and "PUT /v1" not in gone.stderr
        finally:
            receiver.shutdown()
            receiver.server_close()
