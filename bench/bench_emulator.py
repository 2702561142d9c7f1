"""Emulator benchmarks (issue 5): steps/s of the reference and fast
backends on the same guests (and the native backend, issue 21:
:func:`_native_rows`), chunk re-execution and witness tables with
1 vs 2 threads, and a pipeline's ``witness`` phase on a Dask cluster of
1 vs 2 worker processes.

``run(quick)`` returns rows ``{name, baseline, baseline_s, subject,
subject_s, ratio, notes}`` with ratio = baseline_s / subject_s, measured
side by side in one process.  The fast backend's compile cost is paid
(or loaded from numba's cache) in a warm-up run before timing.

Two guests: sort.elf, a short run (0.4 M steps, where per-run fixed costs
show), and sha256.elf over a 1 MiB input (92 M steps, a realistic
length).  Each fast run is timed twice at once: the whole ``fast.run``
call (image, memory copy, every chunk's min trace, outputs) and the time
spent inside the compiled loop alone (every call of ``fast._run``,
numba's dispatch included).  Best of N: 30 runs of sort, 20 of sha256
(quick: 10 and 5, with a 256 KiB input).  The reference is far too slow
for 92 M steps: it runs sha256 over 4 KiB of the same input, and its
rate, which does not depend on the length, is scaled to the long run's
steps (the row says so).
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hetflow.executors.emulator import execute, fast, load_elf, reference

HERE = Path(__file__).resolve().parent
GUESTS = HERE.parent / "examples" / "guests"


def _best(fn, repeat):
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def _fast_timed(prog, data, chunk, repeat):
    """Best whole-run and best loop-only seconds of ``fast.run`` over
    ``repeat`` runs, and the last run's result."""
    compiled = fast._run
    spent = [0.0]

    def timed(*args):
        t = time.perf_counter()
        try:
            return compiled(*args)
        finally:
            spent[0] += time.perf_counter() - t

    whole = loop = float("inf")
    result = None
    fast._run = timed                       # _Machine.run looks the loop up at each call
    try:
        for _ in range(repeat):
            spent[0] = 0.0
            t = time.perf_counter()
            result = fast.run(prog, data, chunk)
            whole = min(whole, time.perf_counter() - t)
            loop = min(loop, spent[0])
    finally:
        fast._run = compiled
    return whole, loop, result


def _rate(steps, s):
    return f"{steps / s / 1e6:.3f}" if steps / s < 1e6 else f"{steps / s / 1e6:.1f}"


def _emulate_rows(label, steps, ref_name, ref_s, whole_s, loop_s, how):
    common = f"{steps} steps; {how}; reference {_rate(steps, ref_s)} M steps/s"
    return [{
        "name": f"emulate {label} with min traces",
        "baseline": ref_name, "baseline_s": ref_s, "subject": "fast, whole run", "subject_s": whole_s,
        "ratio": ref_s / whole_s,
        "notes": f"{common}, fast whole run {_rate(steps, whole_s)} M steps/s (one thread, min traces recorded)",
    }, {
        "name": f"emulate {label} with min traces, loop only",
        "baseline": ref_name, "baseline_s": ref_s, "subject": "fast, compiled loop only", "subject_s": loop_s,
        "ratio": ref_s / loop_s,
        "notes": f"{common}, fast compiled loop {_rate(steps, loop_s)} M steps/s; whole-run fixed costs "
                 f"{(whole_s - loop_s) * 1e3:.2f} ms",
    }]


def run(quick: bool) -> list[dict]:
    rows = []
    fast.warm_up()
    n_sort, n_sha = (10, 5) if quick else (30, 20)

    # a short run: sort.elf, 0.4 M steps
    prog = load_elf(GUESTS / "sort.elf")
    chunk = 1 << 16
    fast.run(prog, b"", chunk)
    ref_s, ref = _best(lambda: reference.run(prog, b"", chunk), 1 if quick else 3)
    whole_s, loop_s, fst = _fast_timed(prog, b"", chunk, n_sort)
    steps = ref["steps"]
    assert steps == fst["steps"]
    rows += _emulate_rows("sort.elf", steps, "reference", ref_s, whole_s, loop_s,
                          f"chunk_steps={chunk}, best of {n_sort} (reference: of {1 if quick else 3})")

    # the same run through execute(): MO and RH runners in threads beside it
    def seed_path():
        out = execute(prog, backend="fast", chunk_steps=chunk)
        out.backend.await_mem_plans()
        out.backend.await_rom_histogram()
        return out

    seed_path()
    seed_s, _ = _best(seed_path, n_sort)
    rows.append({
        "name": "emulate sort.elf, execute() with MO and RH runners",
        "baseline": "fast.run (main execution only)", "baseline_s": whole_s,
        "subject": "execute + await_mem_plans + await_rom_histogram", "subject_s": seed_s,
        "ratio": whole_s / seed_s,
        "notes": f"{steps} steps, best of {n_sort}; three threads on this machine's cores: "
                 f"{steps / seed_s / 1e6:.1f} M steps/s end to end",
    })

    # a realistic-length run: SHA-256 of 1 MiB (checked against hashlib)
    sha = load_elf(GUESTS / "sha256.elf")
    size = (256 if quick else 1024) << 10
    data = bytes((i * 131 + (i >> 8)) & 0xFF for i in range(size))
    small = data[:4096]
    chunk = 1 << 18
    fast.run(sha, data, chunk)
    ref_small_s, ref_small = _best(lambda: reference.run(sha, small, chunk), 1 if quick else 3)
    whole_s, loop_s, fst = _fast_timed(sha, data, chunk, n_sha)
    digest = b"".join(v.to_bytes(4, "big") for _, v in fst["pub_outs"][:8])
    assert digest.hex() == hashlib.sha256(data).hexdigest()
    steps = fst["steps"]
    ref_s = ref_small_s * steps / ref_small["steps"]
    rows += _emulate_rows(f"sha256.elf over {size >> 10} KiB", steps,
                          f"reference (timed on 4 KiB, {ref_small['steps']} steps, scaled)", ref_s, whole_s, loop_s,
                          f"chunk_steps={chunk}, best of {n_sha}")

    # witness-style re-execution of every chunk, 1 vs 2 threads (fast replay releases the GIL)
    traces = fast.run(prog, b"", 1 << 14)["traces"]
    steps = sum(t.steps for t in traces)
    image = fast.Image(prog, None, 0)

    def replay(workers):
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda t: fast.replay_chunk(prog, t, 0, image), traces))

    one_s, _ = _best(lambda: replay(1), 3 if quick else 10)
    two_s, _ = _best(lambda: replay(2), 3 if quick else 10)
    rows.append({
        "name": "re-execute sort.elf chunks from min traces",
        "baseline": "fast, 1 thread", "baseline_s": one_s, "subject": "fast, 2 threads", "subject_s": two_s,
        "ratio": one_s / two_s,
        "notes": f"{len(traces)} chunks, {steps} steps; {steps / one_s / 1e6:.1f} vs {steps / two_s / 1e6:.1f} M steps/s",
    })

    # witness tables (one per chunk, the `witness` phase's Dask tasks), 1 vs 2 threads
    from hetflow.executors.emulator.witness import witness_table

    def tables(workers):
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda t: witness_table(prog, t, _image=image), traces))

    tables(1)
    w1_s, _ = _best(lambda: tables(1), 3 if quick else 10)
    w2_s, _ = _best(lambda: tables(2), 3 if quick else 10)
    rows.append({
        "name": "witness tables of sort.elf chunks",
        "baseline": "fast, 1 thread", "baseline_s": w1_s, "subject": "fast, 2 threads", "subject_s": w2_s,
        "ratio": w1_s / w2_s,
        "notes": f"{len(traces)} chunks, {steps} rows x 16 columns; {steps / w1_s / 1e6:.1f} vs "
                 f"{steps / w2_s / 1e6:.1f} M rows/s",
    })
    rows.append(_witness_on_cluster(quick))
    rows += _native_rows(quick)
    rows += native_runner_rows(quick)
    return rows


_BREAKDOWN = """
import json, re, sys, time
t0 = time.perf_counter()
from hetflow.engine.cli import main
t1 = time.perf_counter()
from hetflow.executors.emulator import native_main
t2 = time.perf_counter()
program = native_main.load_program(sys.argv[1])
t3 = time.perf_counter()
m = native_main.MainRun(program, open(sys.argv[2], "rb").read(), translate=False)
t4 = time.perf_counter()
r = m.run(1 << 18, 1 << 40)
t5 = time.perf_counter()
print(json.dumps({"cli import": t1 - t0, "emulator imports": t2 - t1, "ELF load": t3 - t2,
                  "translation load": t4 - t3, "run": t5 - t4,
                  "numpy loaded": "numpy" in sys.modules, "numba loaded": "numba" in sys.modules,
                  "llvmlite loaded": "llvmlite.binding" in sys.modules, "elftools loaded": "elftools" in sys.modules,
                  "steps": r["steps"]}))
"""

_UNICORN_BREAKDOWN = """
import json, sys, time
t0 = time.perf_counter()
import unicorn
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[3])
import unicorn_guest
r = unicorn_guest.run(open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read())
t2 = time.perf_counter()
print(json.dumps({"import unicorn": t1 - t0, "run": t2 - t1}))
"""


def _wall(cmd) -> float:
    return _timed(cmd)[0]


def _timed(cmd) -> tuple[float, float]:
    """Wall seconds of a fresh process and the CPU seconds it used (user + system, from its rusage): the CPU
    time moves less than the wall time when other processes share the cores."""
    import os
    import subprocess
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return wall, usage.ru_utime + usage.ru_stime


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _native_rows(quick: bool) -> list[dict]:
    """The native backend (LLVM-translated guest code, its main execution
    on :mod:`~hetflow.executors.emulator.native_main`) against the fast
    interpreter and the reference on SHA-256 of 1 MiB (256 KiB quick); its
    translation time against code size; and against Unicorn (where
    installed) on loop.elf, 300 M steps (30 M quick): in one process, and
    whole process against whole process (the ``hetflow`` console script
    against ``bench/unicorn_guest.py``, each a fresh Python started from
    the real interpreter, not a pyenv shim), with where each process's
    time goes."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from hetflow.executors.emulator import native_main

    rows = []
    sha = load_elf(GUESTS / "sha256.elf")
    size = (256 if quick else 1024) << 10
    data = bytes((i * 131 + (i >> 8)) & 0xFF for i in range(size))
    chunk = 1 << 18
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("HETFLOW_NATIVE_CACHE")
        os.environ["HETFLOW_NATIVE_CACHE"] = tmp
        try:
            cold = native_main.run(sha, data[:64], chunk)["translation"]
            warm = native_main.run(sha, data[:64], chunk)["translation"]
            rows.append(_translation_row(quick))
        finally:
            if old is None:
                del os.environ["HETFLOW_NATIVE_CACHE"]
            else:
                os.environ["HETFLOW_NATIVE_CACHE"] = old
    repeat = 3 if quick else 10
    fast.warm_up()
    fast.run(sha, data, chunk)
    native_main.run(sha, data[:64], chunk)
    fast_s, fst = _best(lambda: fast.run(sha, data, chunk), repeat)
    nat_s, nat = _best(lambda: native_main.run(sha, data, chunk), repeat)
    digest = b"".join(v.to_bytes(4, "big") for _, v in nat["pub_outs"][:8])
    assert digest.hex() == hashlib.sha256(data).hexdigest() and nat["steps"] == fst["steps"]
    assert all(a == b for a, b in zip(nat["traces"], fst["traces"]))
    steps = nat["steps"]
    small = data[:4096]
    ref_small_s, ref_small = _best(lambda: reference.run(sha, small, chunk), 1)
    ref_s = ref_small_s * steps / ref_small["steps"]
    rows.insert(0, {
        "name": f"emulate sha256.elf over {size >> 10} KiB with min traces, native",
        "baseline": "fast, whole run", "baseline_s": fast_s, "subject": "native, whole run", "subject_s": nat_s,
        "ratio": fast_s / nat_s,
        "notes": f"{steps} steps, chunk_steps={chunk}, best of {repeat}, one thread: native "
                 f"{_rate(steps, nat_s)} M steps/s, fast {_rate(steps, fast_s)} M steps/s, reference "
                 f"{_rate(steps, ref_s)} M steps/s (timed on 4 KiB, scaled; native/reference {ref_s / nat_s:.0f}x); "
                 f"min traces identical. Translation of sha256.elf: {cold['blocks']} blocks, "
                 f"{cold['instructions']} instructions, {cold['seconds'] * 1e3:.0f} ms compiled, "
                 f"{warm['seconds'] * 1e3:.1f} ms loaded from the disk cache (not in the times above)",
    })
    try:
        import unicorn  # noqa: F401
    except ImportError:
        return rows
    import importlib.util
    spec = importlib.util.spec_from_file_location("unicorn_guest", Path(__file__).with_name("unicorn_guest.py"))
    uni = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(uni)
    loop = GUESTS / "loop.elf"
    count = (10 if quick else 100) * 1_000_000
    arg = count.to_bytes(8, "little")
    native_main.run(load_elf(loop), arg, chunk, 1 << 40)
    raw = loop.read_bytes()
    uni_s, u = _best(lambda: uni.run(raw, arg), 1 if quick else 3)
    nat_s, n = _best(lambda: native_main.run(load_elf(loop), arg, chunk, 1 << 40), 1 if quick else 3)
    assert u["pub_outs"] == n["pub_outs"]
    steps = n["steps"]
    rows.append({
        "name": f"loop.elf, {steps // 1_000_000} M steps, in one process",
        "baseline": "Unicorn (records nothing)", "baseline_s": uni_s,
        "subject": "native, min traces recorded", "subject_s": nat_s, "ratio": uni_s / nat_s,
        "notes": f"{_rate(steps, nat_s)} vs {_rate(steps, uni_s)} M steps/s; best of {1 if quick else 3}; "
                 f"{len(n['traces'])} chunks",
    })
    # both sides under one fresh venv holding the built wheel and Unicorn, as a user installs them; the
    # console script itself, not a pyenv shim, which would add its own start
    sys.path.insert(0, str(HERE))
    from user_venv import user_python

    python, under = user_python()
    py = str(python)
    console = python.parent / "hetflow"
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        f.write(arg)
    try:
        hetflow = [str(console), "emulate", str(loop), "--backend", "native", "--input", f.name,
                   "--max-steps", str(4 * count)]
        unicorn_cmd = [py, str(Path(__file__).with_name("unicorn_guest.py")), str(loop), f.name]
        _wall(hetflow)
        _wall(unicorn_cmd)
        n_pairs = 1 if quick else 9
        timed = [(_timed(unicorn_cmd), _timed(hetflow)) for _ in range(n_pairs)]
        pairs = [(u[0], h[0]) for u, h in timed]
        cpu = [(u[1], h[1]) for u, h in timed]
        start = _median([_wall([py, "-c", "pass"]) for _ in range(5)])
        start_s = _median([_wall([py, "-S", "-c", "pass"]) for _ in range(5)])
        # run from elsewhere: ``-c`` puts the working directory first on sys.path, and the checkout's hetflow/
        # folder would shadow the installed package
        elsewhere = tempfile.gettempdir()
        parts = [json.loads(subprocess.run([py, "-c", _BREAKDOWN, str(loop), f.name], check=True, cwd=elsewhere,
                                           capture_output=True, text=True).stdout) for _ in range(3)]
        uparts = [json.loads(subprocess.run([py, "-c", _UNICORN_BREAKDOWN, str(loop), f.name, str(HERE)],
                                            check=True, cwd=elsewhere, capture_output=True, text=True).stdout)
                  for _ in range(3)]
    finally:
        os.unlink(f.name)
    ratios = sorted(u / h for u, h in pairs)
    het_s = _median([h for _, h in pairs])
    where = ", ".join(f"{k} {_median([p[k] for p in parts]) * 1e3:.0f} ms" for k in
                      ("cli import", "emulator imports", "ELF load", "translation load", "run"))
    loaded = ", ".join(k.split()[0] for k in ("numpy loaded", "numba loaded", "llvmlite loaded", "elftools loaded")
                       if parts[0][k])
    uwhere = ", ".join(f"{k} {_median([p[k] for p in uparts]) * 1e3:.0f} ms" for k in ("import unicorn", "run"))
    cpu_ratio = _median([u / h for u, h in cpu])
    rows.append({
        "name": f"loop.elf, {steps // 1_000_000} M steps, whole process",
        "baseline": "python bench/unicorn_guest.py", "baseline_s": _median([u for u, _ in pairs]),
        "subject": "hetflow emulate --backend native (console script)", "subject_s": het_s,
        "ratio": ratios[len(ratios) // 2],
        "notes": f"median of {len(pairs)} alternating pairs (ratio taken pair by pair), each a fresh process "
                 f"{under}; translation and ELF layout from the disk cache. Where hetflow's time goes: Python start {start * 1e3:.0f} ms "
                 f"({start_s * 1e3:.0f} ms without site), {where}; the rest (the console script, the CLI's argument "
                 f"parsing and output) {(het_s - start - sum(_median([p[k] for p in parts]) for k in ('cli import', 'emulator imports', 'ELF load', 'translation load', 'run'))) * 1e3:.0f} ms; "
                 f"loaded: {loaded or 'none of numpy, numba, llvmlite, pyelftools'}. Unicorn: {uwhere}. CPU time "
                 f"(user + system) of the same processes: Unicorn {_median([u for u, _ in cpu]) * 1e3:.0f} ms, hetflow "
                 f"{_median([h for _, h in cpu]) * 1e3:.0f} ms, {cpu_ratio:.2f}x",
    })
    return rows


def _translation_row(quick: bool) -> dict:
    """Translation time (cold: nothing in the disk cache) against code
    size, in parts (:func:`~hetflow.executors.emulator.native_translate.parts`)
    and as one LLVM function (the translation before parts), on guests from
    12 to 1,032 instructions (quick: up to sort's 125)."""
    import os
    import tempfile

    from hetflow.executors.emulator import native_main
    from hetflow.executors.emulator import native_blocks as nt

    names = ["loop", "fib", "sort"] + ([] if quick else ["sha256", "sdk/hello"])
    per = {}
    whole_part = 1 << 30
    for name in names:
        prog = load_elf(GUESTS / f"{name}.elf")
        for label, size in (("parts", nt.PART_INSNS), ("one function", whole_part)):
            if label == "one function" and name != names[-1]:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["HETFLOW_NATIVE_CACHE"] = tmp
                saved = nt.PART_INSNS
                nt.PART_INSNS = size
                try:
                    t = time.perf_counter()
                    m = native_main.MainRun(prog, b"")
                    per[(name, label)] = (time.perf_counter() - t, m.code.report()["instructions"])
                finally:
                    nt.PART_INSNS = saved
    last = names[-1]
    (parts_s, n), (whole_s, _) = per[(last, "parts")], per[(last, "one function")]
    detail = "; ".join(f"{name} {per[(name, 'parts')][1]} instructions {per[(name, 'parts')][0] * 1e3:.0f} ms "
                       f"({per[(name, 'parts')][0] / per[(name, 'parts')][1] * 1e3:.1f} ms each)" for name in names)
    return {
        "name": f"native translation of {last}.elf ({n} instructions), cold",
        "baseline": "one LLVM function for the whole program", "baseline_s": whole_s,
        "subject": f"parts of {nt.PART_INSNS * 4} bytes, one function each", "subject_s": parts_s,
        "ratio": whole_s / parts_s,
        "notes": f"find blocks, emit IR, optimise, generate code, link; cold cache. In parts: {detail}",
    }


def _witness_on_cluster(quick: bool) -> dict:
    """The ``witness`` phase of a pipeline on a local Dask cluster of 1 vs 2 worker processes: measured by
    ``bench_witness.cluster_row`` (SHA-256 of 52 KiB, 8 KiB quick, in 1,024-step chunks: over 4,096 of them),
    one measurement for both modules' tables."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_witness", HERE / "bench_witness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cluster_row(quick)


if __name__ == "__main__":
    import json
    import sys
    if "--native-runners" in sys.argv:
        print(json.dumps(native_runner_rows("--quick" in sys.argv), indent=2))
    else:
        print(json.dumps(run("--quick" in sys.argv), indent=2))
