"""``hetflow emulate`` start-up for short guests, against Unicorn, whole process against whole process.

Each row starts ``hetflow emulate GUEST`` and ``python bench/unicorn_guest.py
GUEST`` (QEMU's RISC-V core under Python, the same memory map and ABI) in
turn, A B A B ..., as fresh processes of one fresh venv that holds the
built wheel and Unicorn, as a user installs them (``bench/user_venv.py``;
the console script beside the interpreter that runs Unicorn, not a pyenv
shim, which would add its own start to one side), and takes the median
wall time of each; the ratio is Unicorn's time over hetflow's (above 1,
hetflow starts faster). The guests are short, so the figure is start-up: Python, the CLI,
the ELF loader and the emulator. A third row runs the fast backend from its
first step (``--no-interpreter-start``), which loads numba's compiled
interpreter, to show what the reference interpreter's first 20,000 steps
spare a short guest; two more run the native backend from its first step
with its translation in the disk cache (the warm-up run of the pair puts
it there), which loads neither numba, llvmlite nor pyelftools.

The pipeline commands' rows (issue 30's start-up goals) start ``hetflow
validate``, ``plan`` and ``run --quiet`` of ``examples/quickstart.yaml``,
``--version`` and ``--help`` against ``python -c "import numpy, yaml"``
(what any YAML-and-arrays tool pays), in turn from the same venv; the goals
are validate and plan within 2x the baseline (ratio >= 0.5), run within 4x
(ratio >= 0.25), ``--version`` and ``--help`` under 0.1 s. The quickstart's
``p16`` stage is bf16, so its run loads ml_dtypes: one more row times
``import numpy, ml_dtypes`` against ``import numpy`` in the venv, whose
ml_dtypes version its notes name (0.7.0 imports 200x slower than 0.6.0).
These rows need no Unicorn.

The default backend's rows (issue 31) start ``hetflow emulate GUEST
--input FILE`` with no ``--backend`` (``auto``: native where llvmlite is)
against Unicorn on longer guests, where the backend's speed shows past
start-up: ``loop.elf`` counted to 40,000 steps (goal ratio >= 1) and
``sha256.elf`` over 4 KiB and 64 KiB of input (goal ratio >= 2), the
translation in the disk cache (the warm-up run of each pair puts it
there), as a user's second run finds it; their notes give each side's
fastest run beside the medians, and the load average.
:func:`compare_scripts` runs the same guests for two installs side by side
(a before and an after), each round all of them in turn.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GUESTS = HERE.parent / "examples" / "guests"
QUICKSTART = HERE.parent / "examples" / "quickstart.yaml"


def _wall(cmd: list[str], cwd: str | None = None, check: bool = False) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=cwd)
    elapsed = time.perf_counter() - t0
    if check and done.returncode != 0:  # a start-up figure of a command that failed early would flatter it
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}")
    return elapsed


def _pair(a: list[str], b: list[str], runs: int, cwd: str | None = None, check: bool = False) -> tuple[float, float]:
    _wall(a, cwd, check), _wall(b, cwd, check)  # warm the page cache and numba's on-disk cache
    times_a, times_b = [], []
    for _ in range(runs):
        times_a.append(_wall(a, cwd, check))
        times_b.append(_wall(b, cwd, check))
    return statistics.median(times_a), statistics.median(times_b)


def _turn_about(cmds: dict[str, list[str]], rounds: int, cwd: str | None = None,
                check: bool = False) -> dict[str, list[float]]:
    """Each command's wall times over ``rounds`` rounds, every round running each command once in turn (after two
    warm-up runs each), so a change in the machine's load falls on all of them alike."""
    for cmd in cmds.values():
        _wall(cmd, cwd, check), _wall(cmd, cwd, check)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            times[name].append(_wall(cmd, cwd, check))
    return times


def _pipeline_rows(python: Path, under: str, runs: int) -> list[dict]:
    """The pipeline commands of the quickstart against ``import numpy, yaml``, and ml_dtypes' import."""
    hetflow = python.parent / "hetflow"
    if not hetflow.exists():
        return []
    version = subprocess.run([str(python), "-c", "from importlib.metadata import version; print(version('ml_dtypes'))"],
                             capture_output=True, text=True, check=False).stdout.strip() or "unknown"
    baseline = [str(python), "-c", "import numpy, yaml"]
    rows = []
    with tempfile.TemporaryDirectory() as work:     # the run's folder and plan's ./runs lookup stay out of the tree
        cases = [("validate", [str(QUICKSTART)], 0.5), ("plan", [str(QUICKSTART)], 0.5),
                 ("run", ["--quiet", "--runs-dir", os.path.join(work, "runs"), str(QUICKSTART)], 0.25),
                 ("--version", [], None), ("--help", [], None)]
        for command, flags, goal in cases:
            subject_s, baseline_s = _pair([str(hetflow), command, *flags], baseline, runs, cwd=work, check=True)
            target = f"goal ratio >= {goal}" if goal else "goal: under 0.1 s"
            rows.append({"name": f"start-up, hetflow {command}" + (" examples/quickstart.yaml" if flags else ""),
                         "baseline": 'python -c "import numpy, yaml", whole process', "baseline_s": baseline_s,
                         "subject": f"hetflow {command}, whole process", "subject_s": subject_s,
                         "ratio": baseline_s / subject_s,
                         "notes": f"{target}; median wall of {runs} fresh processes each, in turn; ml_dtypes "
                                  f"{version} (the run loads it for its bf16 stage); {under}"})
        subject_s, baseline_s = _pair([str(python), "-c", "import numpy, ml_dtypes"],
                                      [str(python), "-c", "import numpy"], runs, cwd=work, check=True)
        rows.append({"name": f"start-up, import ml_dtypes {version}",
                     "baseline": 'python -c "import numpy", whole process', "baseline_s": baseline_s,
                     "subject": 'python -c "import numpy, ml_dtypes", whole process', "subject_s": subject_s,
                     "ratio": baseline_s / subject_s,
                     "notes": f"what the bf16/fp8/int4 dtypes add to a process; median wall of {runs} fresh processes "
                              f"each, in turn; {under}"})
    return rows


def _default_backend_rows(python: Path, under: str, runs: int) -> list[dict]:
    """``hetflow emulate`` on its default backend against Unicorn, whole process, on a 40 k-step guest and SHA-256."""
    hetflow = python.parent / "hetflow"
    backend = subprocess.run([str(python), "-c", "from hetflow.executors.emulator import auto_backend; "
                              "print(*auto_backend(), sep=': ')"], capture_output=True, text=True, check=False,
                             cwd=tempfile.gettempdir()).stdout.strip() or "unknown"
    count = (40_000 - 8) // 3                       # loop.elf: 3 steps an iteration and 8 around them
    cases = [("loop.elf", count.to_bytes(8, "little"), "40 k steps", 1),
             ("sha256.elf", bytes(range(256)) * 16, "over 4 KiB", 2),
             ("sha256.elf", bytes(range(256)) * 256, "over 64 KiB", 2)]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for guest, data, what, goal in cases:
            inp = os.path.join(work, f"{guest}-{len(data)}.bin")
            with open(inp, "wb") as f:
                f.write(data)
            path = str(GUESTS / guest)
            load = os.getloadavg()[0]
            times = _turn_about({"hetflow": [str(hetflow), "emulate", path, "--input", inp],
                                 "unicorn": [str(python), str(HERE / "unicorn_guest.py"), path, inp]}, runs, check=True)
            subject_s, baseline_s = statistics.median(times["hetflow"]), statistics.median(times["unicorn"])
            done = subprocess.run([str(hetflow), "emulate", path, "--input", inp, "--json"], capture_output=True,
                                  text=True, check=True)
            r = json.loads(done.stdout)
            rows.append({"name": f"hetflow emulate, default backend, {guest} {what}",
                         "baseline": "unicorn_guest.py (Unicorn), whole process", "baseline_s": baseline_s,
                         "subject": "hetflow emulate (no --backend), whole process", "subject_s": subject_s,
                         "ratio": baseline_s / subject_s,
                         "notes": f"goal ratio >= {goal}; {r['steps']:,} steps, ran on {r['ran_on']} (auto: "
                                  f"{backend}), translation in the disk cache; median wall of {runs} fresh "
                                  f"processes each, in turn (fastest of each: {min(times['unicorn']) * 1e3:.1f} ms "
                                  f"against {min(times['hetflow']) * 1e3:.1f} ms, "
                                  f"{min(times['unicorn']) / min(times['hetflow']):.2f}x); load average "
                                  f"{load:.1f} at the start; {under}"})
    return rows


def compare_scripts(scripts: dict[str, Path], unicorn_python: Path, rounds: int = 21) -> list[str]:
    """Console scripts of several installs (a before and an after, each a venv of its own wheel) against Unicorn
    on the default backend's guests, all in turn in each round: per guest, each side's fastest and median wall
    time and Unicorn's ratio to it, with the load average before and after.  A shared machine's load moves
    between minutes, so a before and an after are only comparable side by side like this, never across runs.

    ``python -c "import sys; sys.path.insert(0, 'bench'); import bench_startup as b; from pathlib import Path;
    print(*b.compare_scripts({'before': Path('A/bin/hetflow'), 'after': Path('B/bin/hetflow')},
    Path('B/bin/python')), sep=chr(10))"``; set ``HETFLOW_NATIVE_CACHE`` to keep the translations apart.
    """
    count = (40_000 - 8) // 3
    cases = [("loop.elf", count.to_bytes(8, "little"), "40 k steps"),
             ("sha256.elf", bytes(range(256)) * 16, "over 4 KiB"),
             ("sha256.elf", bytes(range(256)) * 256, "over 64 KiB")]
    lines = []
    with tempfile.TemporaryDirectory() as work:
        for guest, data, what in cases:
            inp = os.path.join(work, f"{guest}-{len(data)}.bin")
            with open(inp, "wb") as f:
                f.write(data)
            path = str(GUESTS / guest)
            cmds = {name: [str(script), "emulate", path, "--input", inp] for name, script in scripts.items()}
            cmds["unicorn"] = [str(unicorn_python), str(HERE / "unicorn_guest.py"), path, inp]
            before = os.getloadavg()[0]
            times = _turn_about(cmds, rounds, check=True)
            u_min, u_med = min(times["unicorn"]), statistics.median(times["unicorn"])
            lines.append(f"{guest} {what}: {rounds} rounds in turn, load average {before:.2f} -> "
                         f"{os.getloadavg()[0]:.2f}; Unicorn {u_min * 1e3:.1f} ms fastest, {u_med * 1e3:.1f} ms median")
            for name in scripts:
                t_min, t_med = min(times[name]), statistics.median(times[name])
                lines.append(f"  {name}: {t_min * 1e3:.1f} ms fastest ({u_min / t_min:.2f}x), {t_med * 1e3:.1f} ms "
                             f"median ({u_med / t_med:.2f}x)")
    return lines


def run(quick: bool) -> list[dict]:
    sys.path.insert(0, str(HERE))
    from user_venv import user_python

    try:
        import unicorn  # noqa: F401
    except ImportError:
        python, under = user_python(unicorn=False)
        return _pipeline_rows(python, under, 3 if quick else 9)
    python, under = user_python()
    rows = _pipeline_rows(python, under, 3 if quick else 9)
    # the console script itself, beside the interpreter that runs Unicorn:
    # a pyenv shim in front of either would add its own start-up (~70 ms)
    hetflow = python.parent / "hetflow"
    if not hetflow.exists():
        return rows
    runs = 3 if quick else 9
    cases = [("fib.elf", [], ""), ("sdk/hello.elf", [], ""),
             ("fib.elf", ["--no-interpreter-start"], " (fast backend from the first step)"),
             ("fib.elf", ["--backend", "native", "--no-interpreter-start"],
              " (native backend from the first step, translation in the disk cache)"),
             ("sdk/hello.elf", ["--backend", "native", "--no-interpreter-start"],
              " (native backend from the first step, translation in the disk cache)")]
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("HETFLOW_NATIVE_CACHE")
        os.environ["HETFLOW_NATIVE_CACHE"] = cache         # the warm-up run of each pair fills it
        try:
            rows += _default_backend_rows(python, under, runs)
            for guest, flags, what in cases:
                path = str(GUESTS / guest)
                subject_s, baseline_s = _pair([str(hetflow), "emulate", *flags, path],
                                              [str(python), str(HERE / "unicorn_guest.py"), path], runs)
                label = " ".join(["hetflow emulate", *flags])
                rows.append({"name": f"start-up, {guest}{what}",
                             "baseline": "unicorn_guest.py (Unicorn), whole process", "baseline_s": baseline_s,
                             "subject": f"{label}, whole process", "subject_s": subject_s,
                             "ratio": baseline_s / subject_s,
                             "notes": f"median wall of {runs} fresh processes each, in turn, the console script and "
                                      f"Unicorn, {under}"})
        finally:
            if old is None:
                del os.environ["HETFLOW_NATIVE_CACHE"]
            else:
                os.environ["HETFLOW_NATIVE_CACHE"] = old
    return rows
