"""A push member's held partitions and their checkpoints (``app/broker/delivery/checkpoints.py``): what a
``HeldPartition`` says of itself, and what ``checkpoint``, ``release`` and ``materialize`` leave in the
metadata store of each deployment (positions, committed offsets, lease rows), fenced by epoch and owner.

The in-memory state is set up by hand, as the delivery loop and ``acks.py`` would leave it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.broker import message_ids
from app.broker.delivery import checkpoints, membership
from app.broker.delivery.checkpoints import HeldPartition
from app.kit.clock import now_ms
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.protocol import LeaseState, OwnedPartition
from tests.broker.delivery.conftest import MakeTopic, TopicUnderTest

DEADLINE = 1 << 50  # an ack deadline no test reaches


def held(
    position: int, in_flight: dict[int, int], acked: set[int] | None = None, epoch: int = 0
) -> HeldPartition:
    return HeldPartition(0, epoch, position, b"", in_flight=dict(in_flight), acked=set(acked or ()))


class TestHeldPartition:
    def test_the_floor_is_the_first_offset_in_flight(self):
        assert held(6, {2: DEADLINE, 4: DEADLINE}).floor == 2

    def test_with_nothing_in_flight_the_floor_is_the_read_position(self):
        assert held(6, {}).floor == 6

    def test_pending_acks_are_the_acked_offsets_at_or_above_the_floor_in_order(self):
        part = held(9, {3: DEADLINE}, acked={7, 0, 5, 3, 8})
        assert part.pending_acks(part.floor) == [3, 5, 7, 8]

    def test_expired_names_the_offsets_whose_deadline_has_passed(self):
        part = held(4, {0: 100, 1: 300, 2: 200, 3: 301})
        assert checkpoints.expired(part, 300) == [0, 1, 2]
        assert checkpoints.expired(part, 99) == []


# The partition under test: of the topic's two, the one a second member is given (sticky assignment
# leaves the first member partition 0), so that a hand-over can be made.
P = 1


@dataclass
class Member:
    """A push member of group ``g`` owning both partitions of the topic; ``owned`` is partition ``P``."""

    topic: TopicUnderTest
    member_id: str
    group_id: str
    owned: OwnedPartition

    @property
    def metadata(self):
        return self.topic.services.metadata

    def part(self, position: int, in_flight: dict[int, int], acked: set[int] | None = None) -> HeldPartition:
        head = message_ids.partition_prefix(self.topic.ref.id, P, prefix=self.topic.ref.id_prefix)
        return HeldPartition(
            P, self.owned.epoch, position, head, in_flight=dict(in_flight), acked=set(acked or ())
        )

    async def claim(self) -> checkpoints.Claim:
        async with self.metadata.unit(readonly=True) as uow:
            return await checkpoints.read_claim(uow, self.group_id, self.member_id)

    async def rows(self, offsets: range) -> dict[int, LeaseState]:
        async with self.metadata.session(readonly=True) as session:
            found = await LeaseRepository.from_session(session).leases_among(
                self.group_id, [(P, o) for o in offsets]
            )
        return {offset: row for (_, offset), row in found.items()}

    async def stored(self) -> tuple[int | None, int | None]:
        """(position, committed) of the partition as stored."""
        (state,) = [s for s in await self.topic.partitions("g") if s.partition == P]
        return state.position, state.committed

    async def owned_now(self) -> list[OwnedPartition]:
        """Partition ``P`` if the member owns or holds it."""
        return [o for o in (await self.claim()).owned if o.partition == P]


@pytest.fixture
async def member(make_topic: MakeTopic) -> Member:
    topic = await make_topic(partitions=2)
    await topic.publish(6, partition=P)
    services = topic.services
    joined = await membership.join(
        services.metadata, services.log, topic.ref, "g", start_from="earliest", push=True
    )
    async with services.metadata.unit(readonly=True) as uow:
        claim = await checkpoints.read_claim(uow, joined.group_id, joined.member_id)
    (owned,) = [o for o in claim.owned if o.partition == P]
    return Member(topic, joined.member_id, joined.group_id, owned)


class TestCheckpoint:
    async def test_acks_below_the_floor_move_position_and_committed_to_it(self, member: Member):
        part = member.part(6, {3: DEADLINE, 4: DEADLINE, 5: DEADLINE}, acked={0, 1, 2})
        fenced = await checkpoints.checkpoint(member.metadata, member.group_id, member.member_id, [part])
        assert fenced == set()
        assert await member.stored() == (3, 3)
        assert part.acked == set() and part.acked_row_max == -1
        assert await member.rows(range(6)) == {}  # nothing above the floor was acked: no rows

    async def test_acks_above_the_floor_are_written_as_acked_rows_that_a_new_reader_skips(
        self, member: Member
    ):
        part = member.part(6, {0: DEADLINE, 2: DEADLINE}, acked={1, 3, 4, 5})
        assert (
            await checkpoints.checkpoint(member.metadata, member.group_id, member.member_id, [part]) == set()
        )
        assert await member.stored() == (0, 0)
        rows = await member.rows(range(6))
        assert sorted(rows) == [1, 3, 4, 5] and all(row.acked for row in rows.values())
        assert (await member.claim()).ahead == {P: {1, 3, 4, 5}}  # a read from position 0 after a crash
        assert part.acked == set() and part.acked_row_max == 5
        # The two left are acked: the floor passes every row, which the store drops.
        del part.in_flight[0], part.in_flight[2]
        part.acked = {0, 2}
        assert (
            await checkpoints.checkpoint(member.metadata, member.group_id, member.member_id, [part]) == set()
        )
        assert await member.stored() == (6, 6)
        assert await member.rows(range(6)) == {}
        assert part.acked_row_max == -1 and (await member.claim()).ahead.get(P) is None

    async def test_a_checkpoint_of_another_epoch_is_fenced_and_keeps_its_acks(self, member: Member):
        part = member.part(6, {}, acked={0, 1, 2, 3, 4, 5})
        part.epoch += 1  # a seek or a rebalance the member missed
        fenced = await checkpoints.checkpoint(member.metadata, member.group_id, member.member_id, [part])
        assert fenced == {P}
        assert await member.stored() == (0, 0)  # untouched
        assert part.acked == {0, 1, 2, 3, 4, 5}  # kept for after the member reconciles


class TestStartPosition:
    async def test_a_stored_position_wins_else_the_partition_starts_at_its_earliest_offset(
        self, member: Member
    ):
        log, ref = member.topic.services.log, member.topic.ref
        owned = member.owned
        positioned = OwnedPartition(P, owned.member_id, None, owned.epoch, None, 4)
        unset = OwnedPartition(P, owned.member_id, None, owned.epoch, None, None)
        assert await checkpoints.start_position(log, ref, positioned) == 4
        earliest = (await log.partition_info(ref.id, P)).earliest_offset
        assert await checkpoints.start_position(log, ref, unset) == earliest


class TestRelease:
    async def hand_over(self, member: Member) -> OwnedPartition:
        """Another member joins and is given the partition: the push member holds it for it."""
        services = member.topic.services
        other = await membership.join(services.metadata, services.log, member.topic.ref, "g")
        (owned,) = await member.owned_now()
        assert owned.held_by == member.member_id and owned.member_id == other.member_id
        return owned

    async def test_in_flight_leases_become_rows_the_member_still_holds(self, member: Member):
        owned = await self.hand_over(member)
        part = member.part(6, {1: DEADLINE, 4: DEADLINE}, acked={0, 2, 3})
        async with member.metadata.unit() as uow:
            assert await checkpoints.release(uow, member.group_id, member.member_id, part, owned)
        rows = await member.rows(range(6))
        assert rows == {
            1: LeaseState(P, 1, member.member_id, 1, DEADLINE, False),
            2: LeaseState(P, 2, None, 1, 0, True),
            3: LeaseState(P, 3, None, 1, 0, True),
            4: LeaseState(P, 4, member.member_id, 1, DEADLINE, False),
        }
        assert await member.stored() == (6, 1)  # the read position; committed up to the first unacked row
        assert await member.owned_now() == []  # held for no one: the new owner's now

    async def test_without_memory_of_the_partition_it_lets_go_at_the_stored_position(self, member: Member):
        owned = await self.hand_over(member)
        async with member.metadata.unit() as uow:
            assert await checkpoints.release(uow, member.group_id, member.member_id, None, owned)
        assert await member.stored() == (0, 0)
        assert await member.rows(range(6)) == {}
        assert await member.owned_now() == []

    async def test_a_partition_the_member_does_not_hold_is_not_released(self, member: Member):
        part = member.part(6, {1: DEADLINE})
        part.epoch += 5  # neither its epoch nor the one after it
        async with member.metadata.unit() as uow:
            assert not await checkpoints.release(uow, member.group_id, member.member_id, part, member.owned)
        assert await member.rows(range(6)) == {}
        assert await member.stored() == (0, 0)


class TestMaterialize:
    async def test_the_offsets_become_lease_rows_and_the_checkpoint_moves_to_the_new_floor(
        self, member: Member
    ):
        deadline = now_ms() + 60_000
        part = member.part(6, {3: deadline, 4: deadline + 1, 5: deadline + 2}, acked={0, 1, 2})
        ok = await checkpoints.materialize(member.metadata, member.group_id, member.member_id, part, [3, 4])
        assert ok is True
        assert part.in_flight == {5: deadline + 2}
        assert await member.rows(range(6)) == {
            3: LeaseState(P, 3, member.member_id, 1, deadline, False),
            4: LeaseState(P, 4, member.member_id, 1, deadline + 1, False),
        }
        assert await member.stored() == (5, 3)

    async def test_fenced_it_writes_nothing_and_keeps_the_leases_in_memory(self, member: Member):
        part = member.part(6, {3: DEADLINE, 4: DEADLINE})
        part.epoch += 1
        ok = await checkpoints.materialize(member.metadata, member.group_id, member.member_id, part, [3])
        assert ok is False
        assert part.in_flight == {3: DEADLINE, 4: DEADLINE}
        assert await member.rows(range(6)) == {}
        assert await member.stored() == (0, 0)
