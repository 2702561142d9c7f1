"""Count ONNX's node cases hetflow expresses and passes, per op type: ``python bench/onnx_coverage.py [OP_TYPE...]``.

The same translation and runs as ``tests/test_onnx_nodes.py`` (through the
CLI, with and without a bridge), for all mapped op types or those named
(``Gather ArgMin``). Prints the table and the failing and inexpressible
cases grouped by reason; ``--keep`` leaves the manifests and runs in a
folder it names. Exit 1 when an expressible case fails beyond the
documented exceptions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import onnxcases  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op_types", nargs="*", help="ONNX op types (default: every mapped one)")
    parser.add_argument("--keep", action="store_true", help="keep the manifests, data and runs")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.op_types) - set(onnxcases.TRANSLATORS))
    if unknown:
        parser.error(f"no translation for {', '.join(unknown)} (known: {', '.join(sorted(onnxcases.TRANSLATORS))})")
    start = time.perf_counter()
    cases = onnxcases.collect(args.op_types or None)
    folder = tempfile.mkdtemp(prefix="hetflow-onnx-")
    try:
        outcomes = onnxcases.run_cases(cases, folder)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(onnxcases.summarize(outcomes))
    print(f"\n{time.perf_counter() - start:.1f} s" + (f"; manifests and runs in {folder}" if args.keep else ""))
    return 1 if any(o.status == "failed" and o.name not in onnxcases.DOCUMENTED for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
