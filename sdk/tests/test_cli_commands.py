"""The ``queuecore`` commands beyond the basics: read across partitions and its formats, follow, group
config, nack, exit-at-end, overview, bench, saved contexts, help examples. Subprocesses against the real
server, as in test_cli.py."""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sdk_support import unique
from test_cli import lines, run

from queuecore import BatchMessage, QueueCore

pytestmark = pytest.mark.integration


@pytest.fixture
def env(server, tmp_path: Path) -> dict[str, str]:
    env = server.client_env(server.keys["sdk-test"]["staging"])
    env["QUEUECORE_CONFIG"] = str(tmp_path / "queuecore-config.json")
    return env


@pytest.fixture
def client(env):
    with QueueCore(api_key=env["QUEUECORE_API_KEY"], base_url=env["QUEUECORE_BASE_URL"]) as c:
        yield c


@pytest.fixture
def spread_topic(client) -> str:
    """Three partitions, two messages on each: data {"p": partition, "i": index}."""
    name = unique("cli")
    client.topics.create(name, partitions=3)
    client.publish_batch(
        name, [BatchMessage(data={"p": p, "i": i}, partition=p) for i in range(2) for p in range(3)]
    )
    return name


class TestRead:
    def test_every_partition_by_default_and_a_choice_with_p(self, env, spread_topic):
        everything = run(env, "read", spread_topic)
        assert everything.returncode == 0, everything.stderr
        got = lines(everything.stdout)
        assert sorted((m["partition"], m["offset"]) for m in got) == [
            (p, o) for p in range(3) for o in range(2)
        ]
        assert all(m["data"]["p"] == m["partition"] for m in got)
        some = lines(run(env, "read", spread_topic, "-p", "0,2").stdout)
        assert sorted({m["partition"] for m in some}) == [0, 2] and len(some) == 4
        repeated = lines(run(env, "read", spread_topic, "-p", "1", "-p", "2", "-e").stdout)
        assert sorted({m["partition"] for m in repeated}) == [1, 2]
        missing = run(env, "read", spread_topic, "-p", "3")
        assert missing.returncode == 2 and "no partition 3" in missing.stderr

    def test_start_points_and_limit(self, env, spread_topic):
        assert run(env, "read", spread_topic, "--from", "latest").stdout == ""
        second = lines(run(env, "read", spread_topic, "--from-offset", "1").stdout)
        assert sorted(m["partition"] for m in second) == [0, 1, 2] and {m["offset"] for m in second} == {1}
        by_time = lines(run(env, "read", spread_topic, "--from-timestamp", "0").stdout)
        assert len(by_time) == 6
        assert len(lines(run(env, "read", spread_topic, "--limit", "4").stdout)) == 4
        both = run(env, "read", spread_topic, "--from", "latest", "--from-offset", "1")
        assert both.returncode == 2

    def test_an_offset_beyond_the_end_is_the_apis_refusal_not_silence(self, env, spread_topic):
        beyond = run(env, "read", spread_topic, "-p", "0", "--from-offset", "999")
        assert beyond.returncode == 1, beyond.stderr
        assert beyond.stdout == ""
        assert "OFFSET_OUT_OF_RANGE" in beyond.stderr and "999" in beyond.stderr
        # At the end exactly is no error: nothing to print yet.
        at_end = run(env, "read", spread_topic, "-p", "0", "--from-offset", "2")
        assert at_end.returncode == 0 and at_end.stdout == ""

    def test_output_formats(self, env, client):
        topic = unique("cli")
        client.topics.create(topic, partitions=1)
        client.publish_batch(topic, ["plain text", {"orderId": "ord_1"}])
        assert run(env, "read", topic, "-o", "data").stdout == '"plain text"\n{"orderId":"ord_1"}\n'
        assert run(env, "read", topic, "-o", "raw").stdout == 'plain text\n{"orderId":"ord_1"}\n'
        human = run(env, "read", topic, "-o", "human").stdout
        assert f"{topic}/0@0" in human and f"{topic}/0@1" in human and '"ord_1"' in human
        assert "\x1b[" not in human  # not a terminal: no colour
        default = lines(run(env, "read", topic).stdout)  # a pipe: JSON lines, as before
        assert [m["offset"] for m in default] == [0, 1]

    def test_human_is_the_default_on_a_terminal_coloured_unless_no_color(self, env, client):
        import pty

        topic = unique("cli")
        client.topics.create(topic, partitions=1)
        client.publish(topic, {"n": 1}, key="k1")

        def on_a_terminal(extra_env: dict[str, str]) -> str:
            leader, follower = pty.openpty()
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", "queuecore", "read", topic],
                    env={**env, **extra_env},
                    stdout=follower,
                    stderr=subprocess.PIPE,
                    timeout=60,
                    check=False,
                )
                assert proc.returncode == 0, proc.stderr
                return os.read(leader, 65536).decode()
            finally:
                os.close(leader)
                os.close(follower)

        coloured = on_a_terminal({})
        assert "\x1b[" in coloured and "key=k1" in coloured and f"{topic}/0@0" in coloured
        plain = on_a_terminal({"NO_COLOR": "1"})
        assert "\x1b[" not in plain and f"{topic}/0@0  key=k1" in plain

    def test_follow_prints_new_messages(self, env, client):
        topic = unique("cli")
        client.topics.create(topic, partitions=2)
        client.publish(topic, {"n": 0}, partition=0)
        proc = subprocess.Popen(
            [sys.executable, "-m", "queuecore", "read", topic, "-f", "-o", "data"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen: list[dict] = []
        reader = threading.Thread(target=lambda: seen.extend(json.loads(x) for x in proc.stdout))
        reader.start()
        try:
            deadline = time.monotonic() + 30
            while not seen and time.monotonic() < deadline:
                time.sleep(0.05)
            assert seen == [{"n": 0}]
            client.publish(topic, {"n": 1}, partition=1)
            client.topics.update(topic, partitions=3)  # a partition added while following is read too
            client.publish(topic, {"n": 2}, partition=2)
            while len(seen) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert seen == [{"n": 0}, {"n": 1}, {"n": 2}]
            assert proc.poll() is None  # still following
            proc.terminate()
            assert proc.wait(timeout=30) == 143  # SIGTERM ends it quietly: 128 + 15
            assert proc.stderr.read() == ""
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(timeout=10)


def on_a_terminal(env: dict[str, str], *args: str) -> str:
    """The CLI's stdout when stdout is a terminal (a pty), colour off."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "queuecore", *args],
            env={**env, "NO_COLOR": "1"},
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        # The process has exited: whatever it wrote is buffered already (nothing at all is possible).
        ready, _, _ = select.select([leader], [], [], 0)
        return os.read(leader, 65536).decode().replace("\r\n", "\n") if ready else ""
    finally:
        os.close(leader)
        os.close(follower)


class TestListings:
    def test_tables_on_a_terminal_json_lines_in_a_pipe_or_with_o_json(self, env, client, spread_topic):
        client.consumer_groups.update(spread_topic, "tabled", dead_letter={"maxRetries": 0})
        commands = {
            ("topics", "list"): ["NAME", "PARTITIONS", "REPLICAS"],
            ("groups", "list", spread_topic): ["GROUP", "CONSUMERS", "LAG"],
            ("offsets", "get", spread_topic, "-g", "tabled"): ["PARTITION", "CURRENT", "LATEST", "LAG"],
            ("dlq", "list", spread_topic, "-g", "tabled"): [],
        }
        for command, headers in commands.items():
            shown = on_a_terminal(env, *command)
            assert not shown.lstrip().startswith("{"), (command, shown)
            first = shown.splitlines()[0].split()
            assert first[: len(headers)] == headers or shown.strip() == "(none)", (command, shown)
            piped = run(env, *command)
            assert piped.returncode == 0, piped.stderr
            assert all(line.startswith("{") for line in piped.stdout.splitlines()), (command, piped.stdout)
            forced = on_a_terminal(env, *command, "-o", "json")
            assert all(line.startswith("{") for line in forced.splitlines()), (command, forced)
        assert spread_topic in on_a_terminal(env, "topics", "list")
        offsets = on_a_terminal(env, "offsets", "get", spread_topic, "-g", "tabled").splitlines()
        assert [row.split() for row in offsets[1:]] == [[str(p), "0", "2", "2"] for p in range(3)]

    def test_a_missing_key_names_the_flag_and_the_variable(self, env):
        bare = {k: v for k, v in env.items() if k != "QUEUECORE_API_KEY"}
        missing = run(bare, "topics", "list")
        assert missing.returncode == 2
        assert "--api-key" in missing.stderr and "QUEUECORE_API_KEY" in missing.stderr
        assert "api_key=" not in missing.stderr


class TestGroupConfig:
    def test_create_update_delete(self, env, spread_topic):
        group = unique("g")
        created = run(
            env, "groups", "create", spread_topic, group, "--ack-timeout", "45s", "--max-retries", "2",
            "--retry-delay", "5s",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        config = json.loads(created.stdout)["config"]
        assert config["ackTimeout"] == "45s"
        assert config["deadLetter"]["maxRetries"] == 2 and config["deadLetter"]["retryDelay"] == "5s"

        again = run(env, "groups", "create", spread_topic, group)
        assert again.returncode == 1 and "groups update" in again.stderr

        updated = run(
            env, "groups", "update", spread_topic, group, "--session-timeout", "20s", "--no-dead-letter"
        )
        assert updated.returncode == 0, updated.stderr
        config = json.loads(updated.stdout)["config"]
        assert config["sessionTimeout"] == "20s" and config["ackTimeout"] == "45s"
        assert config.get("deadLetter") is None

        nothing = run(env, "groups", "update", spread_topic, group)
        assert nothing.returncode == 2
        clash = run(env, "groups", "update", spread_topic, group, "--no-dead-letter", "--max-retries", "1")
        assert clash.returncode == 2

        deleted = run(env, "groups", "delete", spread_topic, group)
        assert deleted.returncode == 0 and json.loads(deleted.stdout)["deleted"] is True
        gone = run(env, "groups", "describe", spread_topic, group)
        assert gone.returncode == 1 and "GROUP_NOT_FOUND" in gone.stderr

    def test_set_flow_control_and_filter_then_remove_them(self, env, spread_topic):
        group = unique("g")
        flow = run(
            env, "groups", "set", spread_topic, group, "--max-in-flight", "500", "--rate", "12.5",
            "--filter", 'headers.region IN ("eu", "uk") AND NOT hasPrefix(key, "test-")',
        )  # fmt: skip
        assert flow.returncode == 0, flow.stderr
        answer = json.loads(flow.stdout)
        assert (answer["config"]["maxInFlight"], answer["config"]["rate"]) == (500, 12.5)
        assert answer["config"]["filter"] == 'headers.region IN ("eu", "uk") AND NOT hasPrefix(key, "test-")'
        assert answer["filterAppliesFrom"] == [{"partition": p, "offset": 0} for p in range(3)]

        bad = run(env, "groups", "set", spread_topic, group, "--filter", "headers.region = eu")
        assert bad.returncode == 1 and "at position 18" in bad.stderr and "filter" in bad.stderr
        assert run(env, "groups", "set", spread_topic, group, "--rate", "0").returncode == 2
        clash = run(env, "groups", "set", spread_topic, group, "--rate", "1", "--no-rate")
        assert clash.returncode == 2 and "--no-rate" in clash.stderr

        removed = run(
            env, "groups", "set", spread_topic, group, "--no-max-in-flight", "--no-rate", "--no-filter"
        )
        assert removed.returncode == 0, removed.stderr
        config = json.loads(removed.stdout)["config"]
        assert (config["maxInFlight"], config["rate"], config["filter"]) == (None, None, None)


class TestGroupPause:
    def test_pause_until_and_resume(self, env, spread_topic):
        group = unique("g")
        assert run(env, "groups", "create", spread_topic, group).returncode == 0
        paused = run(env, "groups", "pause", spread_topic, group, "--until", "2099-01-01T00:00:00Z")
        assert paused.returncode == 0, paused.stderr
        answer = json.loads(paused.stdout)
        assert (answer["group"], answer["paused"]) == (group, True)
        assert answer["until"].startswith("2099-01-01T00:00:00")
        described = json.loads(run(env, "groups", "describe", spread_topic, group).stdout)
        assert (described["paused"], described["pausedReason"]) == (True, "user")
        resumed = run(env, "groups", "resume", spread_topic, group)
        assert resumed.returncode == 0 and json.loads(resumed.stdout)["paused"] is False
        assert json.loads(run(env, "groups", "describe", spread_topic, group).stdout)["paused"] is False
        bad = run(env, "groups", "pause", spread_topic, group, "--until", "soon")
        assert bad.returncode == 1 and "until" in bad.stderr
        missing = run(env, "groups", "resume", spread_topic, unique("missing"))
        assert missing.returncode == 1 and "GROUP_NOT_FOUND" in missing.stderr


class TestConsumeOptions:
    def test_exit_at_end_stops_once_the_lag_is_zero(self, env, spread_topic):
        group = unique("g")
        got = run(
            env, "consume", spread_topic, "-g", group, "--from", "earliest", "-e", "-o", "data", timeout=60
        )
        assert got.returncode == 0, got.stderr
        assert sorted((d["p"], d["i"]) for d in lines(got.stdout)) == [
            (p, i) for p in range(3) for i in range(2)
        ]
        lag = lines(run(env, "offsets", "get", spread_topic, "-g", group).stdout)
        assert sum(p["lag"] for p in lag) == 0

    def test_nack_sends_the_message_to_the_dead_letter_queue(self, env, client):
        topic = unique("cli")
        client.topics.create(topic, partitions=1)
        group = unique("g")
        assert run(env, "groups", "create", topic, group, "--max-retries", "0").returncode == 0
        client.publish(topic, {"n": 1})
        got = run(
            env, "consume", topic, "-g", group, "--from", "earliest", "--nack", "--reason", "cli says no",
            "--count", "1", timeout=60,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        assert [m["data"] for m in lines(got.stdout)] == [{"n": 1}]
        deadline = time.monotonic() + 20
        entries: list[dict] = []
        while not entries and time.monotonic() < deadline:
            entries = lines(run(env, "dlq", "list", topic, "-g", group).stdout)
            time.sleep(0.2)
        assert [(e["data"], e["reason"]) for e in entries] == [({"n": 1}, "cli says no")]

    def test_nack_options_need_nack(self, env, spread_topic):
        result = run(env, "consume", spread_topic, "-g", "g", "--reason", "x")
        assert result.returncode == 2


class TestOverview:
    def test_json_and_table(self, env, spread_topic):
        group = unique("g")
        assert (
            run(env, "consume", spread_topic, "-g", group, "--from", "earliest", "--count", "1").returncode
            == 0
        )
        overview = run(env, "overview", spread_topic, "-o", "json")
        assert overview.returncode == 0, overview.stderr
        data = json.loads(overview.stdout)
        assert data["topic"]["name"] == spread_topic and data["topic"]["partitions"] == 3
        assert data["topic"]["replicas"] == 1
        assert [(p["id"], p["messages"]) for p in data["partitions"]] == [(0, 2), (1, 2), (2, 2)]
        [summary] = data["groups"]
        assert summary["name"] == group and summary["lag"] == 5 and summary["consumers"] == 0
        assert sorted(p["partition"] for p in summary["partitions"]) == [0, 1, 2]
        assert sum(p["lag"] for p in summary["partitions"]) == 5
        human = run(env, "overview", spread_topic, "-o", "human").stdout
        assert "PARTITION" in human and "LAG" in human and group in human
        assert f"{spread_topic}  3 partitions, 1 replica, retention 7d," in human


class TestTopicsDescribe:
    def test_json_by_default_off_a_terminal_and_tables_of_partitions_and_copies(self, env, spread_topic):
        described = run(env, "topics", "describe", spread_topic)
        assert described.returncode == 0, described.stderr
        detail = json.loads(described.stdout)
        copies = [r for p in detail["partitionDetails"] for r in p["replicas"]]
        # The test server's local engine: one copy per partition, leading, in no zone.
        assert [(r["leader"], r["current"], r["zone"], r["lag"]) for r in copies] == [
            (True, True, None, 0)
        ] * 3
        human = run(env, "topics", "describe", spread_topic, "-o", "human")
        assert human.returncode == 0, human.stderr
        out = human.stdout.splitlines()
        assert out[0].startswith(f"{spread_topic}  3 partitions, 1 replica, retention 7d,")
        header = next(i for i, line in enumerate(out) if line.split()[:3] == ["PARTITION", "SERVER", "ZONE"])
        rows = [line.split() for line in out[header + 1 :]]
        server = copies[0]["server"]
        assert rows == [[str(p), server, "-", "leader", "yes", "0"] for p in range(3)]


class TestBench:
    def test_publish_and_consume_report(self, env, client):
        topic = unique("cli")
        client.topics.create(topic, partitions=2)
        result = run(
            env, "bench", topic, "--messages", "60", "--size", "200", "--batch-size", "20", "--consume",
            "-o", "json", timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["messages"] == 60 and report["batchSize"] == 20
        assert set(report["publish"]["batchLatencyMs"]) == {"p50", "p95", "p99"}
        assert report["publish"]["messagesPerSecond"] > 0
        assert report["consume"]["received"] == 60
        assert set(report["consume"]["endToEndMs"]) == {"p50", "p95", "p99"}
        detail = client.topics.describe(topic)
        assert sum(p.messages for p in detail.partition_details) == 60
        assert client.consumer_groups.list(topic) == []  # the bench group is cleaned up
        payload = client.messages.read(topic, 0, limit=1).data[0].data
        assert 190 <= len(json.dumps(payload)) <= 210


class TestContexts:
    def test_add_list_use_remove_and_precedence(self, env, server, tmp_path: Path):
        key = env["QUEUECORE_API_KEY"]
        bare = {k: v for k, v in env.items() if k not in ("QUEUECORE_API_KEY", "QUEUECORE_BASE_URL")}
        added = run(bare, "context", "add", "staging", "--base-url", server.url, stdin=key + "\n")
        assert added.returncode == 0, added.stderr
        path = Path(env["QUEUECORE_CONFIG"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text())["contexts"]["staging"]["apiKey"] == key  # stripped

        key_file = tmp_path / "bad.key"
        key_file.write_text("pq_test_sk_" + "z" * 32 + "\n")
        bad = run(bare, "context", "add", "broken", "--base-url", server.url, "--api-key-file", str(key_file))
        assert bad.returncode == 0, bad.stderr

        listed = lines(run(bare, "context", "list").stdout)
        assert [(c["name"], c["current"]) for c in listed] == [("broken", False), ("staging", True)]
        assert listed[1]["apiKey"] == f"{key[:11]}…{key[-4:]}"
        assert key not in run(bare, "context", "list").stdout

        # The current context supplies what nothing else does.
        assert run(bare, "topics", "list").returncode == 0
        # An explicit --context outranks the variables; the variables outrank the current context.
        assert run(env, "--context", "broken", "topics", "list").returncode == 1
        assert run(bare, "context", "use", "broken").returncode == 0
        assert run(bare, "topics", "list").returncode == 1
        assert run(env, "topics", "list").returncode == 0
        # A flag outranks everything.
        assert run(bare, "--api-key", key, "topics", "list").returncode == 0

        unknown = run(bare, "--context", "nope", "topics", "list")
        assert unknown.returncode == 2 and "no context named 'nope'" in unknown.stderr
        assert run(bare, "context", "remove", "broken").returncode == 0
        assert [c["name"] for c in lines(run(bare, "context", "list").stdout)] == ["staging"]

    def test_a_config_file_readable_by_others_is_warned_about(self, env, server):
        path = Path(env["QUEUECORE_CONFIG"])
        path.write_text(json.dumps({"current": None, "contexts": {}}))
        path.chmod(0o644)
        listed = run(env, "context", "list")
        assert listed.returncode == 0
        assert "readable by others" in listed.stderr and "chmod 600" in listed.stderr


def _subcommand_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*path, name), child
                yield from _subcommand_parsers(child, (*path, name))


def test_every_command_help_has_an_example():
    from queuecore._cli._parser import build_parser

    parser = build_parser()
    commands = list(_subcommand_parsers(parser))
    assert len(commands) > 40
    missing = [" ".join(path) for path, child in commands if "Example" not in child.format_help()]
    assert missing == []
    assert "Example" in parser.format_help()
