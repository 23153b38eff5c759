"""The crash soak (``bench/soak.py``, ``make soak``: 100+ SIGKILLs per configuration), short: a few SIGKILLs
of a real server under mixed load - single and batch publishes with and without idempotency keys, a push
(WebSocket) consumer, a pull consumer, a group with retries and a DLQ - on SQLite and on Postgres (local
log engine), with every check of the long run after every restart and at the end. Any violation fails the
test, listed. (JetStream is in the long run only: its restarts take 5-15 s here, too slow for make test.)"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

KILLS = 5  # per metadata store

_spec = importlib.util.spec_from_file_location(
    "bench_soak", Path(__file__).resolve().parents[2] / "bench" / "soak.py"
)
assert _spec is not None and _spec.loader is not None
soak = sys.modules["bench_soak"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up there
_spec.loader.exec_module(soak)


# The bounded version of make soak (100 kills per store and engine, bench/results/soak.md): make test-long.
# make test keeps the crash tests of each promise (tests/system/test_crash_*.py, test_*_crash.py).
@pytest.mark.long
def test_sigkill_under_mixed_load_breaks_no_promise():
    def run(store: str) -> dict:
        return soak.run_config(soak.ENGINES["local"], store, KILLS, seed=20, log=lambda line: None)

    with ThreadPoolExecutor(2) as pool:  # both stores side by side: half the wall time
        results = list(pool.map(run, ["sqlite", "postgres"]))
    for result in results:
        check(result)


def check(result: dict) -> None:
    counts = result["counts"]
    assert result["violations"] == [] and counts.get("violations", 0) == 0
    # The run did what it says (a soak that checked nothing would pass too).
    assert counts["kills"] == KILLS
    # The kills came with publishes on the wire, not at quiet moments (tests/system/test_crash_acks.py does the
    # same for acks, counted).
    assert counts["publishes cut by a kill (outcome unknown)"] > 0
    assert counts["published (2xx)"] > 100 and counts["message checks"] >= counts["published (2xx)"]
    assert counts["batch checks"] > 0 and counts["replay checks"] > 0
    assert min(counts["deliveries push"], counts["deliveries pull"]) >= result["messages in the log"]
    assert counts["nacks retry"] > 0 and counts["dlq entries"] >= counts["poison messages"] > 0


def test_the_soak_checks_catch_what_they_look_for():
    """The checks themselves, on a made-up log: each kind of broken promise is reported, a sound log is not."""
    ledger = soak.Ledger(rng=random.Random(1))
    ledger.published = {
        "m1": {"partition": 0, "offset": 0, "data": {"t": "1"}},
        "m2": {"partition": 0, "offset": 1, "data": {"b": "9", "i": 0, "of": 2}},
    }
    sound = {
        "m1": {"id": "m1", "partition": 0, "offset": 0, "data": {"t": "1"}},
        "m2": {"id": "m2", "partition": 0, "offset": 1, "data": {"b": "9", "i": 0, "of": 2}},
        "m3": {"id": "m3", "partition": 1, "offset": 0, "data": {"b": "9", "i": 1, "of": 2}},
        "m4": {"id": "m4", "partition": 1, "offset": 1, "data": {"ik": "k"}},
    }
    soak.audit(ledger, sound)
    assert ledger.violations == []

    broken = {
        "m1": {"id": "m1", "partition": 0, "offset": 0, "data": {"t": "changed"}},
        "m2": sound["m2"],
        "m4": sound["m4"],
        "m5": {"id": "m5", "partition": 1, "offset": 2, "data": {"ik": "k"}},
    }
    soak.audit(ledger, broken)
    found = "\n".join(ledger.violations)
    assert (
        "acknowledged m1" in found
        and "batch 9 is partial" in found
        and "key k is in the log 2 times" in found
    )

    ledger.violations.clear()
    ledger.acked["pull"].add("m1")
    soak.delivered(ledger, "pull", {"id": "m1", "attempt": 2})
    ledger.nack_due["retry/m2"] = time.monotonic() + 10
    soak.delivered(ledger, "retry", {"id": "m2", "attempt": 2})
    soak.delivered(ledger, "push", {"id": "m1", "attempt": 1})  # acked by another group: fine
    assert len(ledger.violations) == 2


def test_a_batch_seen_in_part_is_allowed_only_until_its_roll_forward():
    """On JetStream a batch the kill cut shows in part until recovery applies it from its commit record:
    allowed for ``roll_forward_s`` after it was first seen so, a violation when it stays partial, and at
    the end."""
    part = {"m2": {"id": "m2", "partition": 0, "offset": 0, "data": {"b": "9", "i": 0, "of": 2}}}
    whole = {**part, "m3": {"id": "m3", "partition": 1, "offset": 0, "data": {"b": "9", "i": 1, "of": 2}}}
    ledger = soak.Ledger(rng=random.Random(1))
    soak.audit(ledger, part, roll_forward_s=60)
    assert ledger.violations == [] and "9" in ledger.partial
    soak.audit(ledger, whole, roll_forward_s=60)
    assert ledger.violations == [] and not ledger.partial
    assert ledger.counts["batches seen in part, then rolled forward whole"] == 1

    ledger.partial["8"] = time.monotonic() - 61  # first seen partial a minute ago, and still so
    soak.audit(ledger, {"m4": {**part["m2"], "id": "m4", "data": {"b": "8", "i": 0, "of": 2}}}, 60)
    assert ledger.violations and "batch 8 is partial" in ledger.violations[0]
