"""The native backend's compiler: a program's code to a shared object through LLVM.

:func:`translate_regions` finds the blocks (:mod:`.native_blocks`), emits
one LLVM module per part and a driver (:mod:`.native_translate`),
optimises each with a short pipeline and generates object code, links the
objects into a shared object where the host has a linker, and loads it
with ctypes (else through LLVM's MCJIT).  :func:`translation` keeps one
translation per (code digest, mode) in this process and adds seeds to it
when a runtime finds a pc it missed.

Each part's object code is cached under the digest of its IR text, and
per translation key the shared object and its description
(:mod:`.cache`), so a run of a program seen before loads it instead of
translating.  Both runtimes call in here (:mod:`.native_main` only on a
cache miss, :mod:`.native_runners` for its modes); this module imports
neither, and llvmlite only when it compiles.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from .background import check as check_stop
from .cache import (cache_dir, code_digest as _regions_digest, code_regions, host_identity, remember_seeds,
                    stored_seeds, translation_key, trim, write_atomic, write_meta)
from .native_translate import PAGE_SHIFT, emit_modules, find_blocks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .native_runners import Image

__all__ = ["Translation", "translate_regions", "translation", "code_digest", "last_translation", "warm_up"]


@dataclass
class Translation:
    """One compiled translation of a program's read-only code for one mode."""

    digest: str
    mode: int
    seeds: frozenset
    heads: frozenset              # the blocks' first pcs
    tails: dict                   # any other translated pc -> steps to its block's end
    blocks: int
    seconds: float                # translate + compile, or load from the cache
    cached: bool
    fn: object                    # the ctypes function
    engine: object                # keeps the code alive
    compile_seconds: float = 0.0  # of which LLVM's optimisation and code generation
    pages: list = ()              # flat-memory pages holding translated writable code

    def report(self) -> dict:
        return {"blocks": self.blocks, "instructions": len(self.heads) + len(self.tails), "seconds": self.seconds,
                "cached": self.cached, "digest": self.digest[:16]}


_llvm_lock = threading.RLock()
_llvm = None
_loaded: dict[tuple[str, int], Translation] = {}
_digests: "weakref.WeakKeyDictionary[Image, str]" = weakref.WeakKeyDictionary()
_last: dict = {}
_ARGS = ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_void_p] * 9)     # releases the GIL while it runs


def _init():
    """LLVM's target machine for this host (once; llvmlite loads only here)."""
    global _llvm
    if _llvm is None:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()

        def tm():
            # an execution engine owns (and disposes of) the target machine it is given: one each.
            # Position-independent code, so that the same object links into a shared object.
            return target.create_target_machine(cpu=cpu, features=features, opt=2, reloc="pic",
                                                codemodel="default")
        _llvm = (llvm, tm)
    return _llvm


def _code_regions(image: Image):
    return code_regions(image.regions, image.rslot)


def code_digest(image: Image) -> str:
    """The digest of what translation reads (:func:`.native_main.code_digest`)."""
    d = _digests.get(image)
    if d is None:
        d = _digests[image] = _regions_digest(image.regions, image.rslot, image.rvc)
    return d


def _in_code(image: Image, pc: int) -> bool:
    return any(r.base <= pc < r.end for r, _ in _code_regions(image))


def _link(objects: list[Path], so_path: Path) -> bool:
    """Link the objects into a shared object that :mod:`ctypes` loads
    without LLVM, where the host has a linker (``ld`` or ``cc``)."""
    tool = shutil.which("ld") or shutil.which("cc")
    if tool is None:
        return False
    tmp = so_path.with_name(f"{so_path.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run([tool, "-shared", "-o", str(tmp), *map(str, objects)], capture_output=True, timeout=60)
        if done.returncode != 0:
            return False
        os.replace(tmp, so_path)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        if tmp.exists():
            tmp.unlink()


def _optimise_and_emit(llvm, tm, text: str) -> bytes:
    module = llvm.parse_assembly(text)
    module.verify()
    # A short pipeline: what matters is promoting the guest registers
    # to SSA values and folding each block's arithmetic; the -O2/-O3
    # pipelines cost ten times the compile time here for no speed.
    # a builder per module (its analysis caches refer to this module's
    # functions), and its tuning options alive as long as it
    pto = llvm.create_pipeline_tuning_options(speed_level=1)
    pb = llvm.create_pass_builder(tm, pto)
    fpm = llvm.create_new_function_pass_manager()
    fpm.add_sroa_pass()
    fpm.add_instruction_combine_pass()
    fpm.add_simplify_cfg_pass()
    fpm.add_new_gvn_pass()
    fpm.add_dead_code_elimination_pass()
    for f in module.functions:
        if not f.is_declaration:
            fpm.run(f, pb)
    obj = tm.emit_object(module)
    del fpm, pb, pto
    return obj


def _objects(texts: list[str], identity: str) -> tuple[list[Path], list[bytes], int, float]:
    """Each module's object code, from the disk cache (keyed by the
    module's text) or compiled; how many were compiled, and in how long."""
    paths, objs, compiled, seconds = [], [], 0, 0.0
    for text in texts:
        path = cache_dir() / f"part-{hashlib.sha256(f'{identity}|{text}'.encode()).hexdigest()[:40]}.o"
        try:
            obj = path.read_bytes()
        except OSError:
            check_stop()  # a runner asked to stop compiles no further part (the process may be ending)
            llvm, new_tm = _init()
            t = time.perf_counter()
            obj = _optimise_and_emit(llvm, new_tm(), text)
            seconds += time.perf_counter() - t
            compiled += 1
            write_atomic(path, obj)
        paths.append(path)
        objs.append(obj)
    return paths, objs, compiled, seconds


def translate_regions(regions, rslot, digest: str, mode: int, seeds: set[int], offs=None,
                      excluded=frozenset(), rvc: bool = True) -> Translation:
    """Translate the read-only code of ``regions`` from ``seeds`` for
    ``mode``, or load it from the disk cache: a shared object through
    ctypes where one was linked, else the parts' object code through
    LLVM's MCJIT.  Only the parts whose text is not in the cache are
    compiled (a retranslation that adds blocks recompiles the parts that
    hold them and the driver).  With the regions' flat-memory offsets
    ``offs``, writable executable regions are translated too (their
    ``data`` being memory as it is now), except in the flat-memory pages
    ``excluded``.  Without ``rvc`` (rv64ima) no 16-bit parcel is translated:
    the interpreter meets it and traps."""
    t0 = time.perf_counter()
    blocks = find_blocks(regions, rslot, sorted(seeds), offs, excluded, rvc)
    heads = frozenset(b.pc for b in blocks)
    tails = {ins.pc: len(b.insns) - j for b in blocks for j, ins in enumerate(b.insns) if j}
    base = cache_dir() / translation_key(digest, mode, seeds)
    so_path = Path(f"{base}.so")
    compiled, compile_s = 0, 0.0
    fn, keep = _load_shared(so_path) if so_path.exists() else (None, None)
    wrote = fn is None
    if fn is None:
        paths, objs, compiled, compile_s = _objects(emit_modules(blocks, mode), host_identity())
        check_stop()
        if _link(paths, so_path):
            fn, keep = _load_shared(so_path)
        if fn is None:
            llvm, new_tm = _init()
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_tm())
            refs = [llvm.ObjectFileRef.from_data(obj) for obj in objs]
            for ref in refs:
                engine.add_object_file(ref)
            engine.finalize_object()
            fn = _ARGS(engine.get_function_address("hf_run"))
            keep = (engine, refs, objs)           # the objects' bytes and handles live as long as the engine
    t = Translation(digest, mode, frozenset(seeds), heads, tails, len(blocks), time.perf_counter() - t0,
                    compiled == 0, fn, keep, compile_s)
    t.pages = sorted({(ins.fetch + 8 * k) >> PAGE_SHIFT for b in blocks for ins in b.insns if ins.fetch >= 0
                      for k in (0, 1) if k == 0 or (ins.size == 4 and ins.pc & 7 == 6)})
    meta = {"heads": sorted(heads), "tails": {str(k): v for k, v in tails.items()}, "pages": t.pages,
            "report": {k: v for k, v in t.report().items() if k not in ("seconds", "cached")}}
    write_meta(Path(f"{base}.meta"), meta)
    if wrote:
        trim()
    return t


def _load_shared(so_path: Path):
    """``hf_run`` of a linked translation and the library that keeps it alive, or (None, None)."""
    try:
        lib = ctypes.CDLL(str(so_path))
        return _ARGS(("hf_run", lib)), lib
    except (OSError, AttributeError):
        return None, None


def translation(image: Image, mode: int, pc: int, extra: set[int] = frozenset()) -> Translation:
    """The compiled translation of ``image``'s read-only code for ``mode``
    that covers ``pc`` when pc lies in that code (translating, or loading
    from the disk cache, when needed)."""
    with _llvm_lock:
        digest = code_digest(image)
        t = _loaded.get((digest, mode))
        want = set(extra)
        if _in_code(image, pc) and (t is None or (pc not in t.heads and pc not in t.tails)):
            want.add(pc)
        if t is not None and not want - t.seeds:
            return t
        stored = stored_seeds(digest)
        seeds = want | stored | (set(t.seeds) if t else set())
        t = translate_regions(image.regions, image.rslot, digest, mode, seeds, rvc=image.rvc)
        remember_seeds(digest, seeds)
        _loaded[(digest, mode)] = t
        _last.clear()
        _last.update(t.report())
        return t


def last_translation() -> dict:
    """The cost of the most recent translation this process made or loaded:
    ``{blocks, instructions, seconds, cached, digest}`` (empty before any)."""
    return dict(_last)


def warm_up() -> None:
    """Load LLVM once per process, so that a caller can time a run without
    it (a program's own translation is timed apart, :func:`last_translation`)."""
    with _llvm_lock:
        _init()
