"""ONNX's operator conformance cases as hetflow manifests, run through the CLI.

The ``onnx`` wheel ships its node test cases (``onnx.backend.test.case.node``):
a model of one node, or of Constants feeding one node, with its inputs and
the outputs ONNX's reference gives. This module turns each case whose op type
means what a hetflow op means into stages of a manifest, runs many cases in one
manifest through ``python -m hetflow.engine.cli run``, and compares what the
run wrote with ONNX's outputs.

Translation. The translators are the importer's own, one per op type in
:data:`hetflow.engine.importers.onnxops.TRANSLATORS` (``hetflow import onnx`` writes
a model's nodes with them); this module gives them a case's node through
:class:`_Builder`. Every input the node reads from the graph becomes a ``load``
stage of an ``.npz`` written beside the manifest, with ONNX's dtype named in
``dtype:`` (values of bf16, fp8 and int4 travel as the float32 or int8 that
holds them exactly). An input whose value the case fixes and hetflow takes as
an argument (Clip's ``min``/``max``, Reshape's ``shape``, a reduction's
``axes``, Slice's ``starts``...) becomes that argument. The node becomes one
stage, or a short chain where ONNX packs several hetflow ops into one
(variadic ``Max`` -> chained ``maximum``, a Slice over three axes -> three
``slice`` stages); the last stage of each output names ONNX's output dtype.
A case that cannot be written so is :class:`Inexpressible`, with a one-line
reason: a dtype hetflow lacks (uint16, uint4, float8 "fnuz"...), an input or
attribute with no hetflow counterpart (attention's ``past_key``, ``softcap``).

Running. Case ``i`` gets the stage names ``c{i}_...`` and the outputs
``c{i}_o{k}`` (plain: inputs and op on executor ``a``) and ``c{i}_b{k}``
(bridged: inputs on ``a``, the op on ``b``, so a bridge carries every input),
each stage on one line of the manifest. A diagnostic of ``validate`` names a
line, hence a case; a failed run names its failed stages in the record, hence
their cases. Those cases are set aside with the message and the rest run again,
until a run succeeds.

Comparing. Shape and dtype exactly; values exactly for ops that only move,
select, compare or cast, and for integer and bool results; otherwise within
rtol 1e-4 / atol 1e-5 (NaN equal to NaN); for an output narrower than fp32,
within two units in its last place: hetflow computes fp16 and bf16 in float32
and rounds once, where ONNX's reference rounds its intermediates to the narrow
type (``attention_4d_causal_bf16``: the exact value 0.481159 rounds to
0.480469 in bf16, hetflow's result; ONNX's reference gives 0.484375). The
bridged output must have the same bytes as the plain one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

import ml_dtypes
import numpy as np

from hetflow.engine.importers.onnxops import CARRIED, TRANSLATORS, Inexpressible, NodeContext, flow, hetflow_dtype, stage_spec

__all__ = ["Inexpressible", "Translation", "Outcome", "TODAY", "NEW", "ALSO_NEW", "DOCUMENTED", "hetflow_dtype",
           "collect", "translate", "run_cases", "summarize", "CHUNK"]

CHUNK = 60
"""Cases per manifest: one CLI process runs them all."""

TODAY = ("Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Where", "Relu", "Gelu", "Swish", "Exp", "Log",
         "Sqrt", "Tanh", "Sigmoid", "Cast", "CastLike", "Identity", "MatMul", "Attention", "RotaryEmbedding",
         "Softmax", "RMSNormalization", "LayerNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ArgMax",
         "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "QuantizeLinear",
         "DequantizeLinear", "Sum", "Mean", "Range", "ConstantOfShape")
"""ONNX op types that a hetflow op of today means (or a short chain of them: Sum, Mean)."""

NEW = ("Gather", "ArgMin", "ReduceMin", "Min", "Max", "Abs", "Pow", "Erf", "Clip")
"""The nine ONNX op types issue 28 adds ops for."""

ALSO_NEW = ("Neg", "Mod")
"""ONNX op types the issue's new ops (``neg``, ``mod``) also cover."""

DOCUMENTED: dict[str, str] = {}
"""Expressible cases whose difference from ONNX is hetflow's documented rule where ONNX defines none."""

_EXACT_OPS = frozenset({"Cast", "CastLike", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                        "Concat", "Split", "Slice", "Gather", "Where", "Equal", "Less", "Greater", "ArgMax", "ArgMin",
                        "ReduceMax", "ReduceMin", "Max", "Min", "Abs", "Neg", "Clip", "ConstantOfShape", "Relu"})
"""Op types that only move, select, compare or cast: their results must be equal, not close."""


def _array(value: Any) -> Any:
    from onnx import numpy_helper

    if isinstance(value, np.generic):
        return np.asarray(value)
    return numpy_helper.to_array(value) if hasattr(value, "dims") else value


@dataclass
class Translation:
    """One case as stages: ``loads`` (local name -> array, dtype), ``stages`` (local name -> spec), ``outputs``."""

    name: str
    op_type: str
    loads: dict[str, tuple[np.ndarray, str]] = field(default_factory=dict)
    stages: dict[str, dict] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    expected: list[np.ndarray] = field(default_factory=list)
    exact: bool = False


@dataclass
class Outcome:
    """What became of one case: ``status`` is ``inexpressible``, ``passed`` or ``failed``; ``reason`` says why."""

    name: str
    op_type: str
    status: str
    reason: str = ""


# -- collecting and translating -------------------------------------------------------------------------------


def collect(op_types: Iterable[str] | None = None) -> list[Any]:
    """ONNX's node cases whose graph is one node (after its Constants) of a mapped op type, in ONNX's order."""
    from onnx.backend.test.case.node import collect_testcases

    wanted = set(op_types) if op_types is not None else set(TRANSLATORS)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = collect_testcases(None)
    picked = []
    for case in found:
        main = [n for n in case.model.graph.node if n.op_type != "Constant"]
        if len(main) == 1 and main[0].op_type in wanted:
            picked.append(case)
    return picked


def op_type_of(case: Any) -> str:
    return next(n.op_type for n in case.model.graph.node if n.op_type != "Constant")


class _Builder(NodeContext):
    """One case's node as the product's translators see it: every input's value is the case's."""

    def __init__(self, case: Any):
        from onnx import helper

        node = next(n for n in case.model.graph.node if n.op_type != "Constant")
        super().__init__(node, _opset(case))
        self.case = case
        if len(case.data_sets) != 1:
            raise Inexpressible(f"{len(case.data_sets)} data sets")
        inputs, outputs = case.data_sets[0]
        self.values: dict[str, Any] = {}
        for info, value in zip(case.model.graph.input, inputs):
            self.values[info.name] = _array(value)
        self.constants: set[str] = set()
        for n in case.model.graph.node:
            if n.op_type == "Constant":
                if len(n.attribute) != 1 or n.attribute[0].name != "value":
                    raise Inexpressible(f"a Constant with {n.attribute[0].name}")
                self.values[n.output[0]] = _array(helper.get_attribute_value(n.attribute[0]))
                self.constants.add(n.output[0])
        self.t = Translation(case.name, self.node.op_type)
        for value in outputs:
            value = _array(value)
            if not isinstance(value, np.ndarray):
                raise Inexpressible(f"an output of type {type(value).__name__} "
                                    "(sequences and optionals have no hetflow type)")
            self.t.expected.append(value)
        if len(self.t.expected) != self.n_outputs():
            raise Inexpressible("outputs the case does not give")
        for i, name in enumerate(self.node.input):
            if name:
                value = self.values.get(name)
                if not isinstance(value, np.ndarray):
                    raise Inexpressible(f"input {i} of type {type(value).__name__} "
                                        "(sequences and optionals have no hetflow type)")
                if hetflow_dtype(value) is None:
                    raise Inexpressible(f"dtype {value.dtype}, which hetflow lacks")
        for k, value in enumerate(self.t.expected):
            if hetflow_dtype(value) is None:
                raise Inexpressible(f"dtype {value.dtype}, which hetflow lacks")
        self._count = 0

    # inputs: a case's graph inputs are data the test loads, yet known here, so they serve as arguments too

    def value(self, i: int) -> np.ndarray | None:
        """The value the case gives input ``i`` (None where the node leaves it out)."""
        return self.values[self.node.input[i]] if self.has(i) else None

    def const(self, i: int) -> np.ndarray:
        return self.value(i)  # type: ignore[return-value]

    def folded(self, i: int) -> np.ndarray | None:
        # only a Constant node's value is the model's constant; graph inputs stay loaded, so the cases keep
        # running the two-operand kernels they test
        return self.value(i) if self.has(i) and self.node.input[i] in self.constants else None

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.value(i).shape)  # type: ignore[union-attr]

    def dtype(self, i: int) -> str:
        return hetflow_dtype(self.value(i))  # type: ignore[return-value]

    def input(self, i: int) -> str:
        """A ``load`` stage for input ``i``."""
        local = f"in{i}"
        if local not in self.t.loads:
            array = self.value(i)
            self.t.loads[local] = (array, self.dtype(i))
        return local

    # stages

    def stage(self, op: str, inputs: list[str], args: dict | None = None, dtype: str | None = None) -> str:
        self._count += 1
        local = f"s{self._count}"
        self.t.stages[local] = stage_spec(op, inputs, args, dtype)
        return local

    def _slot(self, k: int) -> int:
        """The case's outputs are the node's outputs that are there: output position ``k``'s place among them."""
        return sum(1 for name in self.node.output[:k] if name)

    def out_dtype(self, k: int = 0) -> str:
        return hetflow_dtype(self.t.expected[self._slot(k)])  # type: ignore[return-value]

    def out_shape(self, k: int = 0) -> list[int]:
        return [int(n) for n in self.t.expected[self._slot(k)].shape]

    def output(self, local: str, k: int | None = None) -> None:
        self.t.outputs.append(local)   # translators give outputs in the order of their positions


def _opset(case: Any) -> int:
    return max((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def translate(case: Any) -> Translation:
    """Case ``case`` as stages; :class:`Inexpressible` with the reason when it cannot be."""
    b = _Builder(case)
    TRANSLATORS[b.node.op_type](b)
    b.t.exact = b.node.op_type in _EXACT_OPS or all(hetflow_dtype(e) not in _FLOATS for e in b.t.expected)
    return b.t


_FLOATS = frozenset({"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp64"})


# -- manifests, runs, comparison --------------------------------------------------------------------------------


def write_manifest(batch: dict[int, Translation], folder: str, name: str) -> tuple[str, dict[int, int]]:
    """Write ``name``.yaml and its ``.npz`` into ``folder``; return its path and line -> case index."""
    arrays, lines, owner = {}, ["version: 1", f"name: {name}", "executors: {a: {vendor: cpu}, b: {vendor: cpu}}",
                                "stages:"], {}
    outputs = []
    for i, t in batch.items():
        def emit(text: str) -> None:
            lines.append(text)
            owner[len(lines)] = i

        for local, (array, dtype) in t.loads.items():
            key = f"c{i}_{local}"
            carried = CARRIED.get(dtype)
            arrays[key] = np.asarray(array).astype(carried) if carried is not None else np.asarray(array)
            spec = {"op": "load", "args": {"path": f"{name}.npz", "key": key}, "dtype": dtype, "executor": "a"}
            emit(f"  {key}: {flow(spec)}")
        for variant, executor in (("o", "a"), ("b", "b")):
            if variant == "b" and not t.loads:
                # a source op has no input to carry: the bridge carries its result to b instead
                for k, local in enumerate(t.outputs):
                    spec = {"op": "reshape", "inputs": [f"c{i}_o_{local}"],
                            "args": {"shape": [int(n) for n in t.expected[k].shape]},
                            "dtype": hetflow_dtype(t.expected[k]), "executor": "b"}
                    emit(f"  c{i}_b_{local}: {flow(spec)}")
            else:
                for local, spec in t.stages.items():
                    spec = dict(spec, executor=executor)
                    if "inputs" in spec:
                        spec["inputs"] = [f"c{i}_{x}" if x in t.loads else f"c{i}_{variant}_{x}"
                                          for x in spec["inputs"]]
                    emit(f"  c{i}_{variant}_{local}: {flow(spec)}")
            for k, local in enumerate(t.outputs):
                outputs.append((i, f"c{i}_{variant}{k}", f"c{i}_{variant}_{local}"))
    lines.append("outputs:")
    for i, out, stage in outputs:
        lines.append(f"  {out}: {stage}")
        owner[len(lines)] = i
    path = os.path.join(folder, f"{name}.yaml")
    np.savez(os.path.join(folder, f"{name}.npz"), **arrays)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path, owner


def _cli(path: str, runs: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", path, "--runs-dir", runs, "--no-cache",
                           "--quiet", "--json"], capture_output=True, text=True, timeout=600)
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"hetflow run {path} printed no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}")


_STAGE = re.compile(r"stage '?c(\d+)_")


def run_batch(batch: dict[int, Translation], folder: str, name: str) -> tuple[dict[int, str], dict[int, tuple]]:
    """Run ``batch`` through the CLI: (case -> why it failed, case -> (plain outputs, bridged outputs))."""
    from hetflow.engine.store.records import load_output

    failed: dict[int, str] = {}
    pending = dict(batch)
    for attempt in range(len(batch) + 1):
        if not pending:
            return failed, {}
        path, owner = write_manifest(pending, folder, f"{name}_{attempt}")
        result = _cli(path, os.path.join(folder, "runs"))
        if result.get("status") == "error":
            blamed = {}
            for d in result.get("diagnostics") or []:
                i = owner.get(d.get("line")) if d.get("file", "").endswith(".yaml") else None
                if i is None:
                    found = _STAGE.search(d.get("message", ""))
                    i = int(found.group(1)) if found else None
                if i is not None and i in pending:
                    blamed.setdefault(i, f"validate: {d['message']}")
            if not blamed:
                raise RuntimeError(f"hetflow run {path} refused it without naming a case: {result.get('message')}")
        elif result.get("status") == "succeeded":
            run_dir = os.path.dirname(result["record"])
            got = {}
            for i, t in pending.items():
                got[i] = tuple([load_output(run_dir, f"c{i}_{v}{k}") for k in range(len(t.outputs))] for v in "ob")
            return failed, got
        else:
            with open(result["record"], encoding="utf-8") as f:
                record = json.load(f)
            blamed = {}
            for stage, node in record.get("nodes", {}).items():
                found = _STAGE.match(stage)
                if node.get("status") == "failed" and found and int(found.group(1)) in pending:
                    blamed.setdefault(int(found.group(1)), f"run: {node.get('error', '')}")
            if not blamed:
                found = _STAGE.search(result.get("error", ""))
                if not found:
                    raise RuntimeError(f"hetflow run {path} failed without naming a case: {result.get('error')}")
                blamed[int(found.group(1))] = f"run: {result.get('error')}"
        for i, why in blamed.items():
            failed[i] = why.splitlines()[0]
            pending.pop(i)
    return failed, {}


def compare(t: Translation, got: list, bridged: list) -> str | None:
    """Why ``got`` is not ONNX's result (or the bridged run's bytes differ), or None."""
    for k, (want, have, other) in enumerate(zip(t.expected, got, bridged)):
        tag = f"output {k}: " if len(t.expected) > 1 else ""
        if tuple(have.shape) != tuple(want.shape):
            return f"{tag}shape {list(have.shape)}, ONNX {list(want.shape)}"
        if hetflow_dtype(have) != hetflow_dtype(want):
            return f"{tag}dtype {hetflow_dtype(have)}, ONNX {hetflow_dtype(want)}"
        if have.tobytes() != other.tobytes():
            return f"{tag}the bridged run gave other bytes than the plain one"
        problem = _values(t, want, have)
        if problem:
            return tag + problem
    return None


def _values(t: Translation, want: np.ndarray, have: np.ndarray) -> str | None:
    dtype = hetflow_dtype(want)
    if dtype in _FLOATS:
        w, h = want.astype(np.float64), have.astype(np.float64)
        if t.exact:
            bad = ~((w == h) | (np.isnan(w) & np.isnan(h)))
        else:
            rtol = max(1e-4, 2 * float(ml_dtypes.finfo(want.dtype).eps)) if dtype not in ("fp32", "fp64") else 1e-4
            bad = ~np.isclose(h, w, rtol=rtol, atol=1e-5, equal_nan=True)
    else:
        w, h = want.astype(np.int64), have.astype(np.int64)
        bad = w != h
    if not bad.any():
        return None
    where = tuple(int(v) for v in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} values differ{' (exact op)' if t.exact and dtype in _FLOATS else ''}; "
            f"first at {list(where)}: got {h[where]!r}, ONNX {w[where]!r}")


def run_cases(cases: list[Any], folder: str, chunk: int = CHUNK) -> list[Outcome]:
    """Translate, run and compare ``cases``; one :class:`Outcome` per case, in order."""
    outcomes: list[Outcome | None] = [None] * len(cases)
    expressible: dict[int, Translation] = {}
    for i, case in enumerate(cases):
        try:
            expressible[i] = translate(case)
        except Inexpressible as e:
            outcomes[i] = Outcome(case.name, op_type_of(case), "inexpressible", str(e))
    order = sorted(expressible, key=lambda i: (expressible[i].op_type, i))
    for start in range(0, len(order), chunk):
        batch = {i: expressible[i] for i in order[start:start + chunk]}
        failed, got = run_batch(batch, folder, f"onnx{start // chunk}")
        for i, t in batch.items():
            why = failed.get(i) or compare(t, *got[i])
            outcomes[i] = Outcome(t.name, t.op_type, "failed" if why else "passed", why or "")
    return outcomes  # type: ignore[return-value]


def summarize(outcomes: list[Outcome]) -> str:
    """A table per op type (cases, expressible, passed, failed), totals per group, and the reasons grouped."""
    rows: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        rows[o.op_type]["cases"] += 1
        rows[o.op_type][o.status] += 1
    lines = [f"{'op type':<20} {'cases':>5} {'expr':>5} {'pass':>5} {'fail':>5}"]
    for group, types in (("today's op types", TODAY), ("issue 28's nine", NEW), ("also new (neg, mod)", ALSO_NEW)):
        total = Counter()
        for op_type in types:
            if op_type not in rows:
                continue
            r = rows[op_type]
            expr = r["passed"] + r["failed"]
            total.update({"types": 1, "cases": r["cases"], "expr": expr, "passed": r["passed"], "failed": r["failed"]})
            lines.append(f"{op_type:<20} {r['cases']:>5} {expr:>5} {r['passed']:>5} {r['failed']:>5}")
        lines.append(f"{'= ' + group:<20} {total['cases']:>5} {total['expr']:>5} {total['passed']:>5} "
                     f"{total['failed']:>5}   ({total['types']} op types)")
        lines.append("")
    all_expr = sum(o.status != "inexpressible" for o in outcomes)
    passed, failed = (sum(o.status == s for o in outcomes) for s in ("passed", "failed"))
    lines.append(f"total: {len(outcomes)} cases, {all_expr} expressible, {passed} pass, {failed} fail")
    for status in ("failed", "inexpressible"):
        groups: dict[str, list[str]] = defaultdict(list)
        for o in outcomes:
            if o.status == status:
                groups[f"{o.op_type}: {_general(o.reason)}"].append(o.name.removeprefix("test_"))
        if groups:
            lines.append("")
            lines.append(f"{status}, grouped by reason:")
            for reason, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                lines.append(f"  {len(names):>3}  {reason}")
                lines.append(f"       {', '.join(names)}")
    return "\n".join(lines)


def _general(reason: str) -> str:
    """A reason with its case-specific details (stage names, positions, values) blurred, so like ones group."""
    reason = re.sub(r"c\d+_[ob]?_?\w*", "STAGE", reason)
    reason = re.sub(r"\.yaml:\d+:\d+", ".yaml", reason)
    reason = re.sub(r"first at .*", "", reason)
    return re.sub(r"^\d+ of \d+ values", "values", reason).strip()
