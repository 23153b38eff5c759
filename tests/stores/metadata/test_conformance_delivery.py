"""The metadata store's delivery protocols (``app/stores/metadata/protocol/``) on SQLite and on Postgres over a
schema the migrations built: groups and their members, partitions, leases and dead letters. (Tenancy,
topics, quotas, alerts and usage are ``test_conformance.py``.)"""

from __future__ import annotations

import dataclasses
import secrets

import pytest

from app.stores.errors import AlreadyExists
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.dead_letter_repositories import DeadLetterRepository
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import (
    DeadLetterAuditRow,
    DeadLetterRow,
    LeaseSettlement,
    LeaseState,
    MemberRow,
)
from tests.stores.metadata.conftest import Rows, now


def _member(group_id: str, member_id: str, expires_at_ms: int, *, push: bool = False) -> MemberRow:
    return MemberRow(
        group_id=group_id,
        id=member_id,
        session_timeout="30s",
        session_timeout_ms=30_000,
        expires_at_ms=expires_at_ms,
        joined_at=now(),
        push=push,
    )


class TestGroups:
    async def test_a_concurrent_create_is_not_an_error(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        group_id = await rows.group(topic, name="orders")
        await rows.group(topic, name="orders")  # the same name again: nothing happens
        async with metadata.session(readonly=True) as session:
            groups = await GroupRepository.from_session(session).list_for_topic(topic.id)
        assert [(g.id, g.name) for g in groups] == [(group_id, "orders")]

    async def test_the_caller_view_reads_group_member_and_soonest_expiry(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        topic = await rows.topic()
        group_id = await rows.group(topic, name="view")
        async with metadata.session() as session:
            groups = GroupRepository.from_session(session)
            await groups.add_member(_member(group_id, "csr_a", 5_000))
            await groups.add_member(_member(group_id, "csr_b", 3_000, push=True))
        async with metadata.session(readonly=True) as session:
            groups = GroupRepository.from_session(session)
            view = await groups.caller_view(topic.id, "view", "csr_a")
            stranger = await groups.caller_view(topic.id, "view", "csr_nobody")
            assert await groups.caller_view(topic.id, "no-such-group", "csr_a") is None
            assert await groups.push_members(group_id, ["csr_a", "csr_b"]) == {"csr_b"}
        assert view is not None and stranger is not None
        assert (view.group_id, view.ack_timeout_ms, view.partition_count) == (group_id, 30_000, 2)
        assert (view.member_expires_at_ms, view.soonest_expiry_ms) == (5_000, 3_000)
        assert (stranger.member_expires_at_ms, stranger.member_session_timeout_ms) == (None, None)

    async def test_members_expire_and_a_touch_never_shortens_an_expiry(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group()
        async with metadata.session() as session:
            groups = GroupRepository.from_session(session)
            for member_id, expires in (("csr_first", 10_000), ("csr_second", 20_000), ("csr_gone", 1_000)):
                await groups.add_member(_member(group_id, member_id, expires))
        async with metadata.session() as session:
            groups = GroupRepository.from_session(session)
            assert await groups.live_members(group_id, 5_000) == ["csr_first", "csr_second"]  # join order
            assert await groups.touch_member(group_id, "csr_first", 5_000, 8_000)  # earlier: kept at 10 000
            assert await groups.touch_member(group_id, "csr_second", 5_000, 30_000)
            assert not await groups.touch_member(group_id, "csr_gone", 5_000, 30_000)  # already expired
            assert await groups.live_member_counts([group_id], 5_000) == {group_id: 2}
            assert await groups.remove_expired_members(group_id, 5_000) == ["csr_gone"]
        async with metadata.session(readonly=True) as session:
            groups = GroupRepository.from_session(session)
            first, second = (
                await groups.get_member(group_id, "csr_first"),
                await groups.get_member(group_id, "csr_second"),
            )
            assert (first.expires_at_ms, second.expires_at_ms) == (10_000, 30_000)  # type: ignore[union-attr]
        async with metadata.session() as session:
            assert await GroupRepository.from_session(session).remove_member(group_id, "csr_first")
            assert not await GroupRepository.from_session(session).remove_member(group_id, "csr_first")

    async def test_a_member_reads_as_a_frozen_row_and_a_rejoin_is_written_back(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group()
        async with metadata.unit() as uow:
            await uow.groups.add_member(_member(group_id, "csr_back", 5_000))
            await uow.flow.set_claim(group_id, "csr_back", 7)  # the flow store's, kept by a rejoin
        async with metadata.unit() as uow:
            member = await uow.groups.get_member(group_id, "csr_back")
            assert await uow.groups.get_member(group_id, "csr_nobody") is None
            assert member is not None
            assert (member.id, member.session_timeout, member.expires_at_ms, member.push) == (
                "csr_back",
                "30s",
                5_000,
                False,
            )
            assert member.in_flight_claim == 7
            rejoined = dataclasses.replace(
                member, session_timeout="1m", session_timeout_ms=60_000, expires_at_ms=90_000, push=True
            )
            await uow.groups.save_member(dataclasses.replace(rejoined, in_flight_claim=None))
        async with metadata.unit(readonly=True) as uow:
            again = await uow.groups.get_member(group_id, "csr_back")
        assert again is not None
        assert (again.session_timeout, again.session_timeout_ms, again.expires_at_ms, again.push) == (
            "1m",
            60_000,
            90_000,
            True,
        )
        assert again.in_flight_claim == 7  # not the member's to write

    async def test_a_member_id_is_taken_once_per_group(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group()
        async with metadata.unit() as uow:
            await uow.groups.add_member(_member(group_id, "csr_twice", 5_000))
        with pytest.raises(AlreadyExists):
            async with metadata.unit() as uow:
                await uow.groups.add_member(_member(group_id, "csr_twice", 6_000))
        async with metadata.unit() as uow:  # another group may have a member of that id
            await uow.groups.add_member(_member(await rows.group(), "csr_twice", 5_000))


class TestPartitions:
    async def test_new_owners_bump_the_epoch_and_checkpoints_are_fenced_by_it(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group(partitions=2)
        async with metadata.session() as session:
            await PartitionRepository.from_session(session).set_owners(group_id, {0: "csr_a", 1: "csr_a"})
        async with metadata.session() as session:
            partitions = PartitionRepository.from_session(session)
            owned = await partitions.owned_partitions(group_id, "csr_a")
            assert [(o.partition, o.epoch, o.held_by) for o in owned] == [(0, 1, None), (1, 1, None)]
            assert await partitions.checkpoint(group_id, "csr_a", 0, 1, 7, release=False)
            assert not await partitions.checkpoint(group_id, "csr_a", 0, 0, 9, release=False)  # stale epoch
            assert not await partitions.checkpoint(group_id, "csr_b", 1, 1, 9, release=False)  # not the owner
        async with metadata.session() as session:  # the move to csr_b keeps csr_a holding partition 0
            await PartitionRepository.from_session(session).set_owners(group_id, {0: "csr_b"}, {0: "csr_a"})
        async with metadata.session() as session:
            partitions = PartitionRepository.from_session(session)
            assert await partitions.lock_partitions(group_id, member_id="csr_b") == []  # held: not yet its
            assert not await partitions.lock_owned(group_id, "csr_b", 0, 2)
            assert not await partitions.checkpoint(group_id, "csr_a", 0, 1, 8, release=False)  # moved away
            assert await partitions.checkpoint(group_id, "csr_a", 0, 1, 8, release=True)  # lets go at 8
            state = {s.partition: s for s in await partitions.lock_partitions(group_id, member_id="csr_b")}
        assert (state[0].member_id, state[0].position, state[0].committed) == ("csr_b", 8, 8)

    async def test_committed_stops_at_the_lowest_unacked_lease(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group(partitions=1)
        async with metadata.session() as session:
            partitions, leases = (
                PartitionRepository.from_session(session),
                LeaseRepository.from_session(session),
            )
            await partitions.set_owners(group_id, {0: "csr_a"})
            await leases.add_leases(group_id, "csr_a", 60_000, [(0, 0), (0, 1), (0, 2)])
            await partitions.set_offsets(group_id, {0: 3}, position_only=True)
            await leases.settle(group_id, "csr_a", 1_000, [(0, 0), (0, 2)], LeaseSettlement(acked=True))
            await partitions.advance_committed(group_id, [0])
            (state,) = await partitions.partitions(group_id)
            left = await leases.leases_among(group_id, [(0, 0), (0, 1), (0, 2)])
        assert (state.committed, state.position) == (1, 3)
        assert sorted(left) == [(0, 1), (0, 2)]  # the acked lease below committed is gone

    async def test_offsets_and_epochs_move_together_on_a_seek(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group(partitions=2)
        async with metadata.session() as session:
            partitions = PartitionRepository.from_session(session)
            await partitions.set_owners(group_id, {0: "csr_a"})
            await partitions.set_offsets(group_id, {0: 5, 1: 6})
            await partitions.bump_epochs(group_id, [0])
            owned = await partitions.owned_partitions(group_id, "csr_a")
            state = await partitions.partitions(group_id)
        assert [(o.partition, o.epoch) for o in owned] == [(0, 2)]
        assert [(s.partition, s.committed, s.position) for s in state] == [(0, 5, 5), (1, 6, 6)]


class TestLeases:
    async def test_settle_matches_only_the_members_live_leases(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group(partitions=1)
        async with metadata.session() as session:
            leases = LeaseRepository.from_session(session)
            await leases.add_leases(group_id, "csr_a", 10_000, [(0, 0), (0, 1)])
            await leases.put_leases(group_id, [LeaseState(0, 2, "csr_a", 1, 2_000, False)])  # deadline passed
            ack = LeaseSettlement(acked=True)
            done = await leases.settle(group_id, "csr_b", 5_000, [(0, 0)], ack)  # not its lease
            assert done == set()
            done = await leases.settle(group_id, "csr_a", 5_000, [(0, 0), (0, 2), (0, 9)], ack)
            assert done == {(0, 0)}
            assert (await leases.unacked_counts())[group_id] == 2

    async def test_settle_gives_back_or_extends_and_leaves_the_rest_as_it_was(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group(partitions=1)
        async with metadata.session() as session:
            leases = LeaseRepository.from_session(session)
            await leases.add_leases(group_id, "csr_a", 10_000, [(0, 0), (0, 1), (0, 2)])
            # A nack: no holder, due at 7_000, with its reason.
            nack = LeaseSettlement(deadline_ms=7_000, released=True, reason="bad payload")
            assert await leases.settle(group_id, "csr_a", 5_000, [(0, 0)], nack) == {(0, 0)}
            # An extend: a later deadline, still the member's.
            extend = LeaseSettlement(deadline_ms=30_000)
            assert await leases.settle(group_id, "csr_a", 5_000, [(0, 1)], extend) == {(0, 1)}
            got = await leases.leases_among(group_id, [(0, 0), (0, 1), (0, 2)])
            (due,) = await leases.due_leases(group_id, [0], 7_000, 10)
        assert (got[(0, 0)].member_id, got[(0, 0)].deadline_ms, got[(0, 0)].acked) == (None, 7_000, False)
        assert (got[(0, 1)].member_id, got[(0, 1)].deadline_ms, got[(0, 1)].acked) == ("csr_a", 30_000, False)
        assert (got[(0, 2)].member_id, got[(0, 2)].deadline_ms, got[(0, 2)].acked) == ("csr_a", 10_000, False)
        assert (got[(0, 0)].attempt, got[(0, 1)].attempt) == (1, 1)  # a settlement counts no attempt
        assert (due.offset, due.member_id, due.reason) == (0, None, "bad payload")

    async def test_due_leases_in_offset_order_renewed_and_rescheduled(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group(partitions=2)
        async with metadata.session() as session:
            leases = LeaseRepository.from_session(session)
            await leases.add_leases(group_id, "csr_a", 1_000, [(1, 4), (0, 3), (0, 1)])
            await leases.add_leases(group_id, "csr_a", 9_000, [(0, 2)])
            due = await leases.due_leases(group_id, [0, 1], 1_000, 10)
            assert [(d.partition, d.offset, d.attempt) for d in due] == [(0, 1, 1), (0, 3, 1), (1, 4, 1)]
            assert await leases.next_deadline(group_id, [0, 1]) == 1_000
            await leases.renew_leases(group_id, "csr_b", 20_000, [(0, 1)])
            await leases.reschedule_leases(group_id, [(0, 3, 15_000, "nacked")])
            # csr_a's session expired: (0, 2) ends now as an ack timeout of its holder; (1, 4) had timed
            # out already and stays as it was.
            await leases.release_member_leases(group_id, ["csr_a"], 2_000)
            got = await leases.leases_among(group_id, [(0, 1), (0, 2), (0, 3), (1, 4)])
        assert (got[(0, 1)].member_id, got[(0, 1)].attempt, got[(0, 1)].deadline_ms) == ("csr_b", 2, 20_000)
        assert (got[(0, 2)].member_id, got[(0, 2)].attempt, got[(0, 2)].deadline_ms) == ("csr_a", 1, 2_000)
        assert (got[(0, 3)].member_id, got[(0, 3)].deadline_ms) == (None, 15_000)
        assert (got[(1, 4)].member_id, got[(1, 4)].attempt, got[(1, 4)].deadline_ms) == ("csr_a", 1, 1_000)

    async def test_a_clean_leave_gives_running_leases_back_unspent(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group(partitions=1)
        async with metadata.session() as session:
            leases = LeaseRepository.from_session(session)
            await leases.put_leases(
                group_id,
                [LeaseState(0, 1, "csr_a", 3, 9_000, False), LeaseState(0, 2, "csr_a", 2, 1_000, False)],
            )
            await leases.release_member_leases(group_id, ["csr_a"], 2_000, clean=True)
            got = await leases.leases_among(group_id, [(0, 1), (0, 2)])
        # Deadline running: no holder, due now, the attempt counted back (the next delivery is attempt 3).
        assert (got[(0, 1)].member_id, got[(0, 1)].attempt, got[(0, 1)].deadline_ms) == (None, 2, 2_000)
        # Timed out before the leave: still an ack timeout of its holder.
        assert (got[(0, 2)].member_id, got[(0, 2)].attempt, got[(0, 2)].deadline_ms) == ("csr_a", 2, 1_000)

    async def test_failure_histories_are_written_with_the_reschedule(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group(partitions=1)
        async with metadata.session() as session:
            leases = LeaseRepository.from_session(session)
            await leases.add_leases(group_id, "csr_a", 1_000, [(0, 1), (0, 2)])
            await leases.reschedule_leases(
                group_id, [(0, 1, 5_000, "nack"), (0, 2, 5_000, "nack")], {(0, 1): '[[1000,"nack"]]'}
            )
            assert await leases.failures_of(group_id, [(0, 1), (0, 2)]) == {(0, 1): '[[1000,"nack"]]'}
            # A key without a new history keeps the one it has.
            await leases.reschedule_leases(group_id, [(0, 1, 6_000, "again")], {})
            due = await leases.due_leases(group_id, [0], 6_000, 10)
        assert [(d.offset, d.failures) for d in due] == [(1, '[[1000,"nack"]]'), (2, None)]

    async def test_replayed_dead_letters_come_back_due_with_their_dlq_offset(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group(partitions=1)
        async with metadata.session() as session:
            leases = LeaseRepository.from_session(session)
            await leases.add_leases(group_id, "csr_a", 1_000, [(0, 5)])
            await leases.mark_acked(group_id, [(0, 5)])
            await leases.add_replayed_leases(group_id, 3_000, [(0, 5, 42)])  # replaces the acked row
            (due,) = await leases.due_leases(group_id, [0], 3_000, 10)
            assert (due.offset, due.attempt, due.member_id, due.replay_offset) == (5, 0, None, 42)
            assert await leases.replay_offsets(group_id, [(0, 5), (0, 6)]) == {(0, 5): 42}
            await leases.drop_partition_leases(group_id, [0])
            assert await leases.leases_among(group_id, [(0, 5)]) == {}

    async def test_leases_past_the_position_are_found_for_a_read_to_skip(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group(partitions=1)
        async with metadata.session() as session:
            partitions, leases = (
                PartitionRepository.from_session(session),
                LeaseRepository.from_session(session),
            )
            await partitions.set_offsets(group_id, {0: 10})
            await leases.put_leases(
                group_id,
                [LeaseState(0, o, None, 1, 0, acked) for o, acked in ((8, False), (10, True), (12, False))],
            )
            assert await leases.leases_from_position(group_id, [0]) == {0: {10, 12}}


class TestDeadLetters:
    async def test_pages_take_depth_and_the_highest_dlq_offset(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group(partitions=1)
        letters = [DeadLetterRow(0, o, 100 + o, "timeout", 3, 1_000 + o) for o in range(4)]
        async with metadata.session() as session:
            dead_letters = DeadLetterRepository.from_session(session)
            await dead_letters.add(group_id, letters)
            assert [r.offset for r in await dead_letters.page(group_id, None, 2)] == [0, 1]
            assert [r.offset for r in await dead_letters.page(group_id, 101, 10)] == [2, 3]
            assert await dead_letters.take(group_id, [(0, 1), (0, 9)]) == [letters[1]]
            assert await dead_letters.depth(group_id) == 3
            assert (await dead_letters.depths())[group_id] == 3
            assert await dead_letters.max_dead_letter_offset(group_id) == 103

    async def test_the_alert_is_armed_until_disarmed(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        group_id = await rows.group(topic, name="alerting")
        async with metadata.session() as session:
            dead_letters = DeadLetterRepository.from_session(session)
            armed, config, project_id, environment, topic_name, group_name = await dead_letters.alert_state(
                group_id
            )
            assert (armed, config, project_id, environment, topic_name, group_name) == (
                True,
                None,
                topic.project_id,
                "production",
                topic.name,
                "alerting",
            )
            await dead_letters.set_alert_armed(group_id, False)
            assert (await dead_letters.alert_state(group_id))[0] is False

    async def test_the_audit_trail_is_newest_first(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group()
        ids = [f"aud_{i:04d}{secrets.token_hex(4)}" for i in range(3)]
        async with metadata.session() as session:
            dead_letters = DeadLetterRepository.from_session(session)
            for audit_id in ids:
                await dead_letters.record(
                    DeadLetterAuditRow(audit_id, group_id, "replay", None, 1, "key", "key_x", now())
                )
            page = await dead_letters.audit_page(group_id, None, 2)
            assert [e.id for e in page] == [ids[2], ids[1]]
            assert all(type(e) is DeadLetterAuditRow for e in page)
            newest = page[0]
            assert (newest.action, newest.message_id, newest.count) == ("replay", None, 1)
            assert (newest.actor_type, newest.actor_id) == ("key", "key_x")
            assert [e.id for e in await dead_letters.audit_page(group_id, ids[1], 10)] == [ids[0]]
