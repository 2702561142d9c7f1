"""Run hetflow's benchmarks side by side with their baselines and report ratios.

Every ``bench/bench_*.py`` module exposes ``run(quick: bool) -> list[dict]``;
each row names a baseline and a subject, both timed in this one process,
and ``ratio = baseline_s / subject_s`` (above 1: the subject is faster).
The table goes to stdout and the rows to ``bench/results.json``, where
they replace that module's rows of an earlier run and leave the other
modules' rows as they were (``runs`` says when each module last ran).

    python bench/run.py            # all benchmarks
    python bench/run.py overhead   # those whose module name contains "overhead"
    python bench/run.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover(patterns: list[str]) -> list[Path]:
    found = sorted(HERE.glob("bench_*.py"))
    return [p for p in found if not patterns or any(s in p.stem for s in patterns)]


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table(rows: list[dict]) -> str:
    head = ["benchmark", "baseline", "baseline s", "subject", "subject s", "ratio"]
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    body = [[r["name"], r["baseline"], num(r["baseline_s"], ".4f"), r["subject"], num(r["subject_s"], ".4f"),
             num(r["ratio"], ".2f") + ("x" if r["ratio"] is not None else "")] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="run only benchmarks whose module name contains one of these")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("-o", "--output", default=str(HERE / "results.json"))
    args = parser.parse_args(argv)
    rows: list[dict] = []
    for path in discover(args.patterns):
        print(f"running {path.stem} ...", file=sys.stderr, flush=True)
        for row in load(path).run(args.quick):
            rows.append({"module": path.stem, **row})
    print(table(rows))
    for r in rows:
        if r.get("notes"):
            print(f"  {r['name']}: {r['notes']}")
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ran = {p.stem for p in discover(args.patterns)}
    # A run of some modules replaces their rows and keeps the others' from earlier runs; ``runs``
    # says when each module's rows were measured.
    kept, runs = [], {}
    try:
        with open(args.output, encoding="utf-8") as f:
            earlier = json.load(f)
        kept = [r for r in earlier.get("rows", []) if r.get("module") not in ran]
        runs = {m: v for m, v in (earlier.get("runs") or {}).items() if m not in ran} if isinstance(earlier.get("runs"), dict) else {}
    except (OSError, ValueError, AttributeError):
        pass
    runs.update({m: {"created": created, "quick": args.quick} for m in sorted(ran)})
    result = {
        "created": created,
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "quick": args.quick,
        "runs": dict(sorted(runs.items())),
        "rows": sorted(kept + rows, key=lambda r: r.get("module", "")),
    }
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
