"""Timeouts a poll finds (``app/broker/delivery/retries.py::Retries``), on hand-made due leases: retried
now, later, or dead-lettered. Nacks (``after_nack``) need lease rows and are tested through the pull and
push paths (``tests/api/test_dead_letters.py``, ``tests/api/test_ws_acks.py``)."""

from __future__ import annotations

from app.broker import dead_letters
from app.broker.delivery import failures
from app.broker.delivery.retries import Retries
from app.stores.log.protocol import Record
from app.stores.metadata.protocol import DueLease

POLICY = dead_letters.Policy(max_retries=2, retry_delay_ms=1_000, alert_threshold=0)
RECORD = Record(7, 0, b"{}", None, None)


def timed_out(attempt: int, deadline_ms: int) -> DueLease:
    return DueLease(0, 7, attempt, "csr_a", deadline_ms, None, None)


class TestTimedOut:
    def test_a_timeout_waits_for_its_retry_counted_from_the_deadline(self):
        retries = Retries(POLICY)
        assert not retries.timed_out(timed_out(1, 10_000), RECORD, now=10_001)
        ((partition, offset, due_at, reason),) = retries.schedule
        assert (partition, offset, reason) == (0, 7, dead_letters.TIMEOUT_REASON)
        assert 10_000 + 900 <= due_at <= 10_000 + 1_100  # retryDelay, ±10 % jitter
        assert failures.history(retries.histories[(0, 7)]) == [(10_000, dead_letters.TIMEOUT_REASON)]
        assert retries.timeouts == 1 and retries.failures == []

    def test_a_timeout_whose_retry_is_due_already_is_delivered_again_now(self):
        retries = Retries(POLICY)
        assert retries.timed_out(timed_out(1, 10_000), RECORD, now=20_000)
        assert retries.schedule == [] and (0, 7) in retries.histories

    def test_the_last_attempts_timeout_goes_to_the_dlq(self):
        retries = Retries(POLICY)
        assert not retries.timed_out(timed_out(3, 10_000), RECORD, now=10_001)
        (failure,) = retries.failures
        assert (failure.partition, failure.offset, failure.reason) == (0, 7, dead_letters.TIMEOUT_REASON)
        assert retries.schedule == [] and retries.histories == {} and retries.timeouts == 1
