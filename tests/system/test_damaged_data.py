"""Damaged files under a real ``queuecore-server`` (embedded, local log engine; issue #29's disk faults).

The server is stopped, a bit is flipped in a sealed segment (a failing disk; recovery trusts sealed
segments and reads them lazily), and it is started again: a read that reaches the damaged batch answers 503
in the envelope instead of other bytes than were published, the log says where, health says degraded, and
every other message of the partition is served byte for byte. A bit flipped in a sealed segment's index
misleads no read (tests/stores/log/local/test_crash.py flips each bit of them).
"""

from __future__ import annotations

import httpx
import pytest

from tests.api.test_errors import assert_envelope
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow


def test_a_bit_flipped_in_a_sealed_segment_is_refused_not_served(tmp_path):
    data = tmp_path / "data"
    env = server_env(data, QUEUECORE_LOG__SEGMENT_BYTES="4096")
    cli(env, "migrate")
    key = bootstrap(env, "damaged")["keys"]["production"]
    server = ServerProcess(env=env, port=free_port(), data_dir=data, log_path=tmp_path / "srv.log")
    server.start()
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
            assert http.post("/v1/topics", json={"name": "disk", "partitions": 1}).status_code == 201
            for i in range(60):
                r = http.post("/v1/topics/disk/messages", json={"data": {"n": i, "pad": "x" * 200}})
                assert r.status_code == 201, r.text
        server.stop()
        # The topic's partition (``__usage-0`` is the metering topic's).
        (partition,) = (data / "log").glob("top_*-0")
        segments = sorted(partition.glob("*.log"))
        assert len(segments) > 2, "the first segment must be sealed"
        first = segments[0]
        damaged = bytearray(first.read_bytes())
        damaged[len(damaged) // 2] ^= 0x04
        first.write_bytes(bytes(damaged))
        server.start()
        with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
            r = http.get("/v1/topics/disk/partitions/0/messages", params={"fromOffset": 0, "limit": 100})
            assert r.status_code == 503, r.text[:300]
            error = assert_envelope(r, 503, "SERVICE_UNAVAILABLE")
            assert "checksum" in error["message"] and ".log" not in error["message"]
            health = http.get("/v1/health").json()
            assert (health["status"], health["checks"]["logEngine"]) == ("degraded", "degraded")
            # Past the damaged segment the partition reads as it was published.
            later = http.get("/v1/topics/disk/partitions/0/messages", params={"fromOffset": 40, "limit": 100})
            assert later.status_code == 200, later.text
            assert [m["data"]["n"] for m in later.json()["data"]] == list(range(40, 60))
        assert "damaged data in" in (tmp_path / "srv.log").read_text()
    finally:
        server.stop()
