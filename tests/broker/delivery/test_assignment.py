"""Sticky assignment: every partition to one live member, balanced, fewest moves."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.broker.delivery.assignment import assign


def loads(result: dict[int, str | None]) -> dict[str | None, int]:
    out: dict[str | None, int] = {}
    for member in result.values():
        out[member] = out.get(member, 0) + 1
    return out


class TestAssign:
    def test_no_members_owns_nothing(self):
        assert assign(3, [], {0: "a"}) == {0: None, 1: None, 2: None}

    def test_one_member_takes_everything(self):
        assert assign(3, ["a"], {}) == {0: "a", 1: "a", 2: "a"}

    def test_a_joiner_takes_only_what_balance_needs(self):
        before = {0: "a", 1: "a", 2: "a", 3: "a"}
        after = assign(4, ["a", "b"], before)
        assert loads(after) == {"a": 2, "b": 2}
        assert sum(before[p] != after[p] for p in after) == 2

    def test_a_leaver_gives_only_its_own_partitions(self):
        before = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
        after = assign(6, ["a", "b"], before)
        assert all(after[p] == before[p] for p in before if before[p] != "c")
        assert loads(after) == {"a": 3, "b": 3}

    def test_more_members_than_partitions(self):
        after = assign(2, ["a", "b", "c"], {0: "c", 1: "c"})
        assert after[0] == "c" and after[1] in {"a", "b"}  # c keeps one; one member idles

    def test_new_partitions_go_to_the_least_loaded(self):
        after = assign(4, ["a", "b"], {0: "a", 1: "b", 2: "a"})
        assert after[3] == "b"
        assert {p: after[p] for p in range(3)} == {0: "a", 1: "b", 2: "a"}

    @given(
        partitions=st.integers(1, 40),
        members=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=8, unique=True),
        owners=st.lists(st.sampled_from("abcdefghxyz"), max_size=40),
    )
    def test_exactly_one_live_owner_balanced_and_sticky(self, partitions, members, owners):
        current = {p: o for p, o in enumerate(owners[:partitions])}
        after = assign(partitions, members, current)
        assert set(after) == set(range(partitions))
        assert all(after[p] in members for p in after)
        counts = [sum(1 for v in after.values() if v == m) for m in members]
        assert max(counts) - min(counts) <= 1
        # Sticky: a partition moves only if its owner is gone or held more than its fair share.
        share = -(-partitions // len(members))
        for m in members:
            kept = [p for p, o in current.items() if o == m and after[p] == m]
            had = [p for p, o in current.items() if o == m]
            assert len(kept) >= min(len(had), partitions // len(members))
            assert len(kept) <= share
