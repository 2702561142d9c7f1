"""What blocks and ``defaults:`` cost the load and check of a manifest, side by side in one process (issue 32).

Rows (ratio = baseline seconds / subject seconds; best of several each,
taken turn about):

* ``decoder``: ``examples/decoder/decoder.yaml`` at 32 layers (one block,
  repeated) against the same stages written out flat (the expanded
  manifest's resolved tree dumped as YAML), both through
  ``compile_manifest(load(...))``;
* ``plain``: a 20,000-stage chain without blocks, against the same with the
  expansion pass replaced by one that hands the tree back: what the pass
  costs a manifest that does not use it;
* ``defaults``: the chain with ``defaults: {retries: 1, cache: true}``
  against the same keys written on every stage.

    python bench/run.py blocks          # 32 layers, 20,000 stages
    python bench/run.py blocks --quick  # 8 layers, 2,000 stages
"""

from __future__ import annotations

import os
import tempfile
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DECODER = os.path.join(REPO, "examples", "decoder", "decoder.yaml")


def _turns(a, b, rounds: int) -> tuple[float, float]:
    """The best seconds of ``a()`` and of ``b()`` over ``rounds`` rounds taken turn about."""
    ta, tb = [], []
    for _ in range(rounds):
        for fn, out in ((a, ta), (b, tb)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return min(ta), min(tb)


def _row(name: str, baseline: str, base_s: float, subject: str, subject_s: float, notes: str) -> dict:
    return {"name": name, "baseline": baseline, "baseline_s": base_s, "subject": subject, "subject_s": subject_s,
            "ratio": base_s / subject_s, "notes": notes}


def chain(n: int) -> str:
    return ("version: 1\nname: big\nexecutors: {h: {vendor: cpu}}\nstages:\n  s0: {op: zeros, args: {shape: [2]}}\n"
            + "".join(f"  s{i}: {{op: relu, inputs: [s{i - 1}]}}\n" for i in range(1, n))
            + f"outputs: {{y: s{n - 1}}}\n")


def run(quick: bool) -> list[dict]:
    from hetflow.engine.manifest import blocks
    from hetflow.engine.manifest.validate import compile_manifest, load, loads

    layers, n, rounds = (8, 2_000, 5) if quick else (32, 20_000, 7)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-blocks-") as folder:
        # the decoder and weights for its layers in a folder of the bench's own (the example ships 4 layers')
        import shutil
        import subprocess
        import sys

        decoder = os.path.join(folder, "decoder.yaml")
        shutil.copy(DECODER, decoder)
        subprocess.run([sys.executable, os.path.join(os.path.dirname(DECODER), "make_weights.py"), "--layers",
                        str(layers), "-o", os.path.join(folder, "weights.safetensors")], check=True, capture_output=True)
        m = compile_manifest(load(decoder), {"layers": layers})
        flat = {k: v for k, v in m.resolved.items() if k not in ("defaults", "blocks")}
        flat["params"] = {}
        flat_path = os.path.join(folder, "flat.yaml")
        with open(flat_path, "w", encoding="utf-8") as f:
            yaml.safe_dump(flat, f, sort_keys=False)
        assert set(compile_manifest(load(flat_path)).stages) == set(m.stages), "the flat copy has other stages"
        flat_s, blocks_s = _turns(lambda: compile_manifest(load(flat_path)),
                                  lambda: compile_manifest(load(decoder), {"layers": layers}), rounds)
        rows.append(_row(f"decoder, {layers} layers ({len(m.stages)} stages), with a block", "the same stages "
                         "written out", flat_s, "one block, repeated", blocks_s,
                         f"compile_manifest(load(...)), best of {rounds} turn about"))

        text = chain(n)
        real = blocks.expand
        try:
            def without() -> None:
                blocks.expand = lambda tree, doc: (tree, doc, [])
                try:
                    compile_manifest(loads(text, "big.yaml"))
                finally:
                    blocks.expand = real

            without_s, with_s = _turns(without, lambda: compile_manifest(loads(text, "big.yaml")), max(3, rounds - 2))
        finally:
            blocks.expand = real
        rows.append(_row(f"{n} plain stages, the expansion pass", "the pass skipped", without_s,
                         "the pass run (no blocks, no defaults)", with_s,
                         f"what the pass costs a manifest that uses neither; best of {max(3, rounds - 2)} turn about"))

        with_defaults = text.replace("stages:\n", "defaults: {retries: 1, cache: true}\nstages:\n", 1)
        head, _, body = text.partition("stages:\n")
        written = head + "stages:\n" + body.replace("}}\n", "}, retries: 1, cache: true}\n").replace(
            "]}\n", "], retries: 1, cache: true}\n")
        a = compile_manifest(loads(written, "w.yaml"))
        b = compile_manifest(loads(with_defaults, "d.yaml"))
        assert a.stages[f"s{n // 2}"].retries == b.stages[f"s{n // 2}"].retries == 1
        written_s, defaults_s = _turns(lambda: compile_manifest(loads(written, "w.yaml")),
                                       lambda: compile_manifest(loads(with_defaults, "d.yaml")), max(3, rounds - 2))
        rows.append(_row(f"{n} stages, defaults: {{retries: 1, cache: true}}", "the keys written on every stage",
                         written_s, "defaults:", defaults_s, f"best of {max(3, rounds - 2)} turn about"))
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    for row in run(parser.parse_args().quick):
        print(f"{row['name']}: {row['subject_s'] * 1e3:.1f} ms against {row['baseline_s'] * 1e3:.1f} ms, "
              f"ratio {row['ratio']:.3f}")
