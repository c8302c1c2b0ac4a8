"""Batch planning: nodes that disrupt nothing at once, control planes alone, the rest within max_parallel and each
group's max_unavailable (a count, or a percentage rounded down but at least 1)."""

from __future__ import annotations

import pytest

from gpu_provision.errors import GpuProvisionError
from gpu_provision.rollout.batches import (
    Batch,
    Candidate,
    parse_max_unavailable,
    plan_batches,
    unavailable_limit,
)


def workers(prefix: str, count: int, group: str = "", disruption: str = "gpu-idle") -> list[Candidate]:
    return [Candidate(f"{prefix}{i}", disruption, group) for i in range(1, count + 1)]  # type: ignore[arg-type]


def names(batches: list[Batch]) -> list[tuple[int, list[str]]]:
    return [(b.index, list(b.nodes)) for b in batches]


@pytest.mark.parametrize(("value", "size", "limit"), [
    (1, 10, 1), (3, 2, 3), ("25%", 8, 2), ("25%", 10, 2), ("25%", 3, 1), ("25%", 1, 1), ("50%", 5, 2),
    ("100%", 7, 7), ("1%", 1000, 10), ("10%", 0, 1),
])
def test_percentages_round_down_but_allow_one_node(value: int | str, size: int, limit: int) -> None:
    assert unavailable_limit(value, size) == limit


@pytest.mark.parametrize(("text", "value"), [("2", 2), ("25%", "25%"), ("100%", "100%"), (3, 3), (" 1 ", 1)])
def test_command_line_values(text: str | int, value: int | str) -> None:
    assert parse_max_unavailable(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "0%", "101%", "25 %", "a", "2.5", ""])
def test_bad_command_line_values_are_errors_naming_the_flag(text: str) -> None:
    with pytest.raises(GpuProvisionError, match="--max-unavailable"):
        parse_max_unavailable(text)


def test_nothing_to_roll_gives_no_batch() -> None:
    assert plan_batches([], 2, "25%") == []


def test_changes_that_disrupt_nothing_go_all_at_once_in_batch_0() -> None:
    batches = plan_batches(workers("q", 5, disruption="none"), 1, 1)
    assert batches == [Batch(0, ("q1", "q2", "q3", "q4", "q5"), disruptive=False)]


def test_one_at_a_time_by_default() -> None:
    assert names(plan_batches(workers("g", 3), 1, "25%")) == [(1, ["g1"]), (2, ["g2"]), (3, ["g3"])]


def test_max_parallel_bounds_a_batch_when_the_group_allows_more() -> None:
    assert names(plan_batches(workers("g", 5), 2, 4)) == [(1, ["g1", "g2"]), (2, ["g3", "g4"]), (3, ["g5"])]


def test_max_unavailable_bounds_a_batch_below_max_parallel() -> None:
    # 8 nodes, 25%: 2 down at once, whatever max_parallel allows.
    assert names(plan_batches(workers("g", 8), 4, "25%")) == [
        (1, ["g1", "g2"]), (2, ["g3", "g4"]), (3, ["g5", "g6"]), (4, ["g7", "g8"])]


def test_each_group_has_its_own_budget_and_batches_mix_groups() -> None:
    candidates = workers("a", 4, "a") + workers("b", 2, "b")
    # a: 4 nodes at 50% -> 2; b: 2 nodes at 50% -> 1; max_parallel 3.
    assert names(plan_batches(candidates, 3, "50%")) == [
        (1, ["a1", "a2", "b1"]), (2, ["a3", "a4", "b2"])]


def test_no_batch_takes_more_of_a_group_than_its_budget() -> None:
    candidates = workers("a", 7, "a") + workers("b", 9, "b") + workers("c", 2, "c")
    for value in (1, 2, "25%", "50%", "10%"):
        for parallel in (1, 2, 3, 5, 20):
            batches = plan_batches(candidates, parallel, value)
            rolled = [n for b in batches for n in b.nodes]
            assert sorted(rolled) == sorted(c.name for c in candidates)
            for batch in batches:
                assert 1 <= len(batch.nodes) <= parallel
                for group, size in (("a", 7), ("b", 9), ("c", 2)):
                    taken = sum(1 for n in batch.nodes if n.startswith(group))
                    assert taken <= unavailable_limit(value, size)


def test_control_plane_nodes_go_alone_before_the_workers() -> None:
    candidates = [*workers("g", 2), Candidate("cp1", "reboot", control_plane=True),
                  Candidate("cp2", "runtime-restart", control_plane=True)]
    assert names(plan_batches(candidates, 4, "100%")) == [(1, ["cp1"]), (2, ["cp2"]), (3, ["g1", "g2"])]


def test_a_control_plane_node_that_disrupts_nothing_goes_with_batch_0() -> None:
    candidates = [Candidate("cp1", "none", control_plane=True), *workers("g", 1)]
    assert plan_batches(candidates, 1, 1) == [Batch(0, ("cp1",), disruptive=False), Batch(1, ("g1",))]


def test_percentages_are_taken_of_the_whole_group_not_of_the_nodes_with_changes() -> None:
    # Two of a group of 8 change: 25% of 8 is 2, so both go together (of 2 alone it would be 1).
    candidates = workers("g", 2, "gpu")
    assert names(plan_batches(candidates, 4, "25%", {"gpu": 8})) == [(1, ["g1", "g2"])]
    assert names(plan_batches(candidates, 4, "25%")) == [(1, ["g1"]), (2, ["g2"])]


def test_inventory_order_is_kept_and_batch_0_comes_first() -> None:
    candidates = [Candidate("g2", "gpu-idle"), Candidate("q1", "none"), Candidate("g1", "reboot"),
                  Candidate("q2", "none")]
    assert names(plan_batches(candidates, 2, 2)) == [(0, ["q1", "q2"]), (1, ["g2", "g1"])]


def test_max_parallel_below_one_is_an_error() -> None:
    with pytest.raises(GpuProvisionError, match="max_parallel"):
        plan_batches(workers("g", 1), 0, 1)
