"""Which tasks a recovery runs again: :func:`hetflow.engine.run.recovery.plan_recovery` on a plan, without a cluster."""

from hetflow.engine.run.lowering import lower
from hetflow.engine.manifest.validate import compile_manifest, loads
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.recovery import plan_recovery
from hetflow.engine.run.workerside import _OnWorker
from hetflow.executors import probe

STEPS = 5


def chain():
    """``x`` then STEPS relus alternating between ``host`` and ``accel``, the last one the output ``y``."""
    stages = ["  x: {op: ones, args: {shape: [4]}, executor: host}"]
    previous = "x"
    for i in range(STEPS):
        stages.append(f"  s{i}: {{op: relu, inputs: [{previous}], executor: {'accel' if i % 2 == 0 else 'host'}}}")
        previous = f"s{i}"
    text = ("version: 1\nname: chain\nexecutors: {host: {vendor: cpu}, accel: {vendor: cpu}}\nstages:\n"
            + "\n".join(stages) + f"\noutputs: {{y: {previous}}}\n")
    p = make_plan(compile_manifest(loads(text, "chain.yaml")), probe)
    return p, lower(p, _OnWorker("chain"))


def everything_ran_then_accel_died(p, g):
    """Every task finished; the output was not gathered yet; the bytes of every export were on accel alone."""
    finished = set(g.dsk) - set(g.output_keys.values())
    missing = frozenset(k for k in finished if k.startswith("export:"))
    return dict(lost={"accel"}, finished=finished, completed=finished, live=set(), missing=missing)


def partitions(keys):
    return sorted(k for k in keys if k.startswith("partition:"))


def test_without_the_cache_the_lost_output_runs_its_whole_chain_again():
    p, g = chain()
    r = plan_recovery(p, g, **everything_ran_then_accel_died(p, g))
    assert partitions(r.rerun) == partitions(g.dsk)
    assert r.restore == frozenset()


def test_a_partition_with_a_cache_entry_is_restored_and_nothing_upstream_runs_again():
    p, g = chain()
    last = g.dsk[g.output_keys["y"]][2]
    r = plan_recovery(p, g, **everything_ran_then_accel_died(p, g), restorable=frozenset(partitions(g.dsk)))
    assert r.rerun == (last, g.output_keys["y"])
    assert r.restore == {last}
    # a restored partition reads nothing: only the output's read of its tensor is expected
    assert r.expect == {"accel": {"tensor:s4": 1}}


def test_only_a_partition_that_ran_or_was_lost_is_restored():
    p, g = chain()
    facts = everything_ran_then_accel_died(p, g)
    # accel died as it exported p3's tensor: p3 ran, host's p4 and what follows had not
    for key in ("export:s2@host", "import:s2@host", "partition:p4", "export:s3@accel", "import:s3@accel",
                "partition:p5"):
        facts["finished"].discard(key)
        facts["completed"].discard(key)
    facts["missing"] = frozenset(k for k in facts["missing"] if k in facts["finished"])
    r = plan_recovery(p, g, **facts, restorable=frozenset(partitions(g.dsk)) - {"partition:p5"})
    assert r.restore == {"partition:p3"}
    assert "partition:p4" in r.rerun and "import:s2@host" in r.rerun
    assert partitions(r.rerun) == ["partition:p3", "partition:p4", "partition:p5"]
    # p4 runs from its inputs: the import it reads is expected once more on host
    assert r.expect["host"] == {"bridge:s2@host": 1, "tensor:s3": 1}


def test_a_task_only_a_restored_partition_would_read_is_dropped_and_released():
    p, g = chain()
    facts = everything_ran_then_accel_died(p, g)
    last = g.dsk[g.output_keys["y"]][2]
    imported = next(a for a in g.dsk[last][1:] if isinstance(a, str) and a.startswith("import:"))
    # the last partition's import had not finished when accel died; the partition itself is in the cache from before
    for key in (imported, last):
        facts["finished"].discard(key)
        facts["completed"].discard(key)
    r = plan_recovery(p, g, **facts, restorable=frozenset({last}))
    assert r.rerun == (last, g.output_keys["y"])
    assert imported in r.release
