"""The capacity model (``bench/capacity_model.py``, fed by ``bench/capacity_inputs.py``): its answers move the
right way with the load, the worked example in ``docs/scaling.md`` is what the model prints, its defaults are
the committed probe figures, and input it cannot answer for is refused."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import math
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` under its own name, as the model imports its inputs when run as a script."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


inputs = _bench_module("capacity_inputs")
cm = _bench_module("capacity_model")

EXAMPLE = inputs.Load(msgs_in_per_s=1_000_000, topics=100_000, consumers=100_000)


def test_units_never_fall_as_the_message_rate_grows() -> None:
    for shape in (
        EXAMPLE,
        inputs.Load(msgs_in_per_s=1, ack_mode="pull"),
        inputs.Load(msgs_in_per_s=1, publish_batch=1),
    ):
        previous = cm.plan(shape.scaled(0.0)).units
        for rate in (1e2, 1e3, 1e4, 1e5, 1e6, 1e7):
            units = cm.plan(dataclasses.replace(shape, msgs_in_per_s=rate)).units
            assert all(units[name] >= previous[name] for name in cm.COMPONENTS), (rate, units, previous)
            previous = units
        assert previous["api"] > cm.plan(shape.scaled(0.0)).units["api"]  # the load does move something


def test_more_topics_need_more_nats_and_bigger_batches_need_no_more_of_anything() -> None:
    base = inputs.Load(msgs_in_per_s=100_000)
    nats = [cm.plan(dataclasses.replace(base, topics=t)).units["nats"] for t in (1, 1_000, 10_000, 100_000)]
    assert nats == sorted(nats) and nats[-1] > nats[0]
    for field in ("publish_batch", "ack_batch"):
        units = [cm.plan(dataclasses.replace(base, **{field: b})).units for b in (1, 10, 100, 1000)]
        for smaller, larger in itertools.pairwise(units):
            assert all(larger[n] <= smaller[n] for n in cm.COMPONENTS), (field, smaller, larger)
    single = cm.plan(dataclasses.replace(base, publish_batch=1)).units
    assert single["api"] > cm.plan(base).units["api"]
    assert single["redis"] >= cm.plan(base).units["redis"]


def test_replicas_set_the_smallest_nats_cluster_and_cost_more() -> None:
    assert cm.plan(inputs.Load(msgs_in_per_s=10, replicas=5)).units["nats"] == 5
    assert (
        cm.plan(inputs.Load(msgs_in_per_s=10, replicas=1)).units["nats"] == 3
    )  # the meta group still wants 3
    heavy = inputs.Load(msgs_in_per_s=2_000_000, topics=1_000, partitions_per_topic=4)
    r1, r3, r5 = (cm.plan(dataclasses.replace(heavy, replicas=r)) for r in (1, 3, 5))
    assert r1.components["nats"].demand["cores"] < r3.components["nats"].demand["cores"]
    assert r3.components["nats"].demand["cores"] < r5.components["nats"].demand["cores"]


def test_every_sized_resource_stays_under_the_utilisation_target() -> None:
    for load in (EXAMPLE, inputs.Load(msgs_in_per_s=300_000, ack_mode="pull", consumers=50)):
        result = cm.plan(load)
        for component in result.components.values():
            for resource, share in component.utilisation.items():
                assert share <= result.capacities.utilisation + 1e-9, (component.name, resource, share)


def test_saturation_is_where_the_reference_fleet_stops_being_enough() -> None:
    load = inputs.Load(msgs_in_per_s=1_000, topics=20, partitions_per_topic=4, consumers=20)
    result = cm.plan(load)
    first = result.first_to_saturate
    rate = result.saturation[first]
    assert 0 < rate < math.inf
    below = cm.plan(dataclasses.replace(load, msgs_in_per_s=rate * 0.99)).units
    above = cm.plan(dataclasses.replace(load, msgs_in_per_s=rate * 1.01)).units
    assert below == result.reference
    assert above[first] > result.reference[first]
    assert all(above[n] == result.reference[n] for n in cm.COMPONENTS if n != first)


def test_what_saturates_first_depends_on_the_shape() -> None:
    # 100k topics with a push member each: the members' beats fill API processes and Postgres, and the
    # streams' Raft heartbeats fill three NATS servers, all before any message; the API is furthest over.
    example = cm.plan(EXAMPLE)
    assert example.first_to_saturate == "api"
    assert example.saturation["api"] == example.saturation["nats"] == example.saturation["postgres"] == 0
    assert example.idle_share["api"] > example.idle_share["postgres"] > 1
    assert example.idle_share["nats"] > 1
    # The same topics before anyone consumes: only the streams weigh, on NATS.
    quiet = cm.plan(inputs.Load(msgs_in_per_s=1_000, msgs_out_per_s=0, topics=100_000, consumers=0))
    assert quiet.first_to_saturate == "nats"
    # One topic, pull consumers: one API process is the first thing to run out, at a positive rate.
    single = cm.plan(inputs.Load(msgs_in_per_s=1_000, ack_mode="pull"))
    assert single.first_to_saturate == "api"
    assert 0 < single.saturation["api"] < single.saturation["nats"]


def _doc_block(marker: str) -> tuple[list[str], str]:
    """The command and the output under ``<!-- marker -->`` in docs/scaling.md."""
    text = (ROOT / "docs" / "scaling.md").read_text()
    match = re.search(
        rf"<!-- {marker} -->\s*```\n\$ \.venv/bin/python bench/capacity_model\.py (.*?)\n(.*?)```",
        text,
        re.DOTALL,
    )
    assert match, f"docs/scaling.md lost its marked block {marker!r}"
    return match.group(1).split(), match.group(2)


@pytest.mark.parametrize("marker", ["capacity-model example", "capacity-model per-unit"])
def test_the_documented_outputs_are_what_the_model_prints(
    marker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, printed = _doc_block(marker)
    assert cm.main(argv) == 0
    assert capsys.readouterr().out == printed


def test_the_documented_example_is_one_million_messages_over_100k_topics(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, _ = _doc_block("capacity-model example")
    cm.main(argv)
    assert capsys.readouterr().out == cm.render(cm.plan(EXAMPLE)) + "\n"
    result = cm.plan(EXAMPLE)
    assert result.load.msgs_in_per_s == 1_000_000 and result.load.out_per_s == 1_000_000
    assert result.load.topics == 100_000


def test_defaults_are_the_committed_probe_figures() -> None:
    probes = json.loads((ROOT / "bench" / "results" / "scaling_probes.json").read_text())
    measured = inputs.Capacities.from_probes(probes)
    defaults = inputs.Capacities()
    # Defaults are the measured figures rounded to two significant digits.
    moved = {
        name: f"default {getattr(defaults, name):.2g}, measured {getattr(measured, name):.2g}"
        for name in inputs.MEASURED_BY_PROBES
        if getattr(defaults, name) != pytest.approx(getattr(measured, name), rel=0.05)
    }
    assert not moved, moved


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"msgs_in_per_s": -1}, "msgs_in_per_s"),
        ({"msgs_in_per_s": math.nan}, "msgs_in_per_s"),
        ({"msgs_in_per_s": True}, "msgs_in_per_s"),
        ({"msgs_out_per_s": -5.0}, "msgs_out_per_s"),
        ({"replicas": 2}, "replicas"),
        ({"topics": 0}, "topics"),
        ({"partitions_per_topic": 1.5}, "partitions_per_topic"),
        ({"publish_batch": 1001}, "at most 1000"),
        ({"ack_batch": 0}, "ack_batch"),
        ({"ack_mode": "maybe-once"}, "ack_mode"),
        ({"consumers": 0}, "no consumers"),
        ({"cross_partition_share": 1.5}, "share"),
    ],
)
def test_bad_loads_are_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(inputs.InvalidInput, match=message):
        cm.plan(dataclasses.replace(inputs.Load(msgs_in_per_s=1000), **change))


@pytest.mark.parametrize(
    "change",
    [
        {"utilisation": 0.0},
        {"utilisation": 1.5},
        {"nats_cores": 0},
        {"pg_cores": -1},
        {"api_cpu_per_published_msg": math.inf},
    ],
)
def test_bad_capacities_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(inputs.InvalidInput):
        cm.plan(inputs.Load(msgs_in_per_s=1000), dataclasses.replace(inputs.Capacities(), **change))


def test_the_cli_refuses_bad_input_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert cm.main(["--in", "1000", "--replicas", "2"]) == 2
    assert "replicas must be 1, 3 or 5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cm.main(["--in", "1000", "--set", "warp_drive=9"])


def test_group_commit_takes_the_raft_rounds_off_single_publishes() -> None:
    # 1M single publishes/s: coalescing 25 appends per write needs fewer NATS servers, never more of anything.
    alone = cm.plan(inputs.Load(msgs_in_per_s=1_000_000, publish_batch=1, topics=1000, consumers=1000))
    grouped = cm.plan(
        inputs.Load(msgs_in_per_s=1_000_000, publish_batch=1, topics=1000, consumers=1000, group_commit=25)
    )
    assert grouped.units["nats"] < alone.units["nats"]
    assert all(grouped.units[c] <= alone.units[c] for c in grouped.units)
    assert grouped.components["nats"].demand["fsyncs"] == pytest.approx(
        alone.components["nats"].demand["fsyncs"] / 25
    )


def test_group_commit_below_one_is_refused() -> None:
    with pytest.raises(inputs.InvalidInput, match="group_commit"):
        cm.plan(inputs.Load(msgs_in_per_s=1000, group_commit=0.5))


def test_single_publishes_are_sized_from_the_cluster_benchmark() -> None:
    # 1M single publishes/s at 0.12 ms of API CPU and 0.09 ms of NATS CPU (three servers) per publish:
    # 120 API cores at 60 % is 200 processes; 90 NATS cores at 60 % of 8 is 19 servers, in threes 21.
    bench = {
        "median": {
            "new": {"cluster_1p": {"api_cpu_ms": 0.12, "nats_cpu_ms": 0.09}},
            "base": {"cluster_1p": {"api_cpu_ms": 0.24, "nats_cpu_ms": 0.15}},
        }
    }
    fleet = cm.single_publish_fleet(1_000_000, bench)
    assert fleet["new"] == {"api": 200, "nats": 21}
    assert fleet["base"] == {"api": 400, "nats": 33}


def test_the_committed_cluster_benchmark_sizes_a_smaller_fleet_than_before() -> None:
    committed = json.loads((ROOT / "bench" / "results" / "cluster.json").read_text())
    fleet = cm.single_publish_fleet(1_000_000, committed)
    assert fleet["new"]["api"] < fleet["base"]["api"] and fleet["new"]["nats"] <= fleet["base"]["nats"]
