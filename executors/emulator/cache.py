"""The emulator's disk caches: where they live and what goes in them.

Everything compiled is kept in the user's cache folder (:func:`cache_root`),
never beside the modules: an installed package's folder is shared by every
user and often read-only, and a checkout's is the source tree.  Under it:

* ``numba/``: the fast backend's compiled interpreter (numba's own cache,
  pointed there through ``NUMBA_CACHE_DIR`` when the package is imported);
* ``native/`` (:func:`cache_dir`): the native backend's translations.
  Per translation key (:func:`translation_key`: the code digest, the
  host's identity, the mode and the seeds) the object code (``.o``), the
  shared object linked from it (``.so``) and what the runtime needs to
  know about it (``.meta``); per code digest the seeds earlier runs found
  (``.seeds.meta``); per digest of an ELF file's bytes what a run needs of
  the file (:func:`load_program`), so a program seen before loads without
  pyelftools.

Both the runtime that loads a translation (:mod:`.native_main`) and the
compiler that writes one (:mod:`.native_compile`) import this module, which
imports neither of them, nor numpy, numba or llvmlite (only llvmlite's
version, and LLVM itself on a host without ``/proc/cpuinfo``).
"""

from __future__ import annotations

import marshal
import os
import sys

from .elf import PERM_W, PERM_X, Program, elf_layout, program_of, read_elf

TYPE_CHECKING = False       # typing itself costs ``hetflow emulate`` 3 ms of its start
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["cache_root", "cache_dir", "cache_path", "VERSION", "host_identity", "llvm_host", "code_regions",
           "code_digest", "translation_key", "read_meta", "write_meta", "stored_seeds", "remember_seeds",
           "write_atomic", "ELF_VERSION", "load_program", "MAX_MB", "trim"]

#: bumped whenever generated code changes, so old cache entries are not used
VERSION = 9

try:
    # CPython's own SHA-256, the one hashlib falls back to: importing hashlib initialises OpenSSL and lists
    # its digests, a few milliseconds of every start; the digests are the same
    from _sha2 import sha256
except ImportError:
    try:
        from _sha256 import sha256
    except ImportError:
        from hashlib import sha256


def cache_root() -> str:
    """The user's cache folder for hetflow's compiled code: ``$XDG_CACHE_HOME/hetflow``,
    else the platform's (``~/.cache/hetflow``; ``~/Library/Caches/hetflow`` on macOS,
    ``%LOCALAPPDATA%\\hetflow`` on Windows).  A string: the native backend's run
    from its cache does not import pathlib."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if sys.platform == "darwin":
            base = os.path.join(home, "Library", "Caches")
        elif os.name == "nt":
            base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
        else:
            base = os.path.join(home, ".cache")
    return os.path.join(base, "hetflow")


def cache_dir() -> Path:
    """Where compiled translations are kept: ``$HETFLOW_NATIVE_CACHE``, else
    ``native`` in the user's cache folder (:func:`cache_root`:
    ``$XDG_CACHE_HOME/hetflow/native``, ``~/.cache/hetflow/native``), beside numba's."""
    from pathlib import Path

    return Path(cache_path())


def cache_path() -> str:
    """:func:`cache_dir` as a string: a run from the cache does not import pathlib."""
    if os.environ.get("HETFLOW_NATIVE_CACHE"):
        return os.environ["HETFLOW_NATIVE_CACHE"]
    return os.path.join(cache_root(), "native")


_host: list[str] = []


def host_identity() -> str:
    """What generated code depends on besides the guest: the translator's
    version, llvmlite's, the machine and its CPU's features (read from
    ``/proc/cpuinfo`` where there is one, so that finding a cached
    translation does not load LLVM)."""
    if not _host:
        import llvmlite                       # the package only: its version, not the LLVM library

        cpu = ""
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith(("model name", "flags", "Features", "isa")):
                        cpu += line
                    elif not line.strip() and cpu:
                        break                 # the first processor's lines are enough
        except OSError:
            cpu = llvm_host()                 # no /proc: ask LLVM
        _host.append(f"{VERSION}|llvmlite {llvmlite.__version__}|{os.uname().machine}|"
                     f"{sha256(cpu.encode()).hexdigest()[:16]}")
    return _host[0]


def llvm_host() -> str:
    """LLVM's name for this host's CPU and its features (loads the LLVM library, 0.1 s)."""
    import llvmlite.binding as llvm

    return f"{llvm.get_process_triple()}|{llvm.get_host_cpu_name()}|{llvm.get_host_cpu_features().flatten()}"


def code_regions(regions, slots):
    """The read-only executable regions, each with its first histogram slot."""
    return [(r, int(s)) for r, s in zip(regions, slots) if r.perm & (PERM_W | PERM_X) == PERM_X]


def code_digest(regions, slots, rvc: bool = True) -> str:
    """The digest of what translation reads: read-only executable segments
    (address, bytes, histogram slot), :func:`host_identity`, and whether
    16-bit parcels decode (``rvc``; False under rv64ima)."""
    h = sha256(host_identity().encode())
    if not rvc:                     # only then, so that rv64imac translations keep their cache entries
        h.update(b"rv64ima|")
    for r, slot in code_regions(regions, slots):
        h.update(f"{r.base}:{r.size}:{slot}:".encode())
        h.update(r.data)
    return h.hexdigest()


def translation_key(digest: str, mode: int, seeds) -> str:
    return sha256(f"{digest}|{mode}|{sorted(seeds)}".encode()).hexdigest()[:40]


def read_meta(path: str):
    """A cache file of plain data written by :func:`write_meta`; raises ``OSError`` or ``ValueError``.

    ``marshal``, built into the interpreter, and not ``json``: a cached
    ``hetflow emulate`` then starts without the json modules (1 ms of a
    30 ms process). Data of another Python's marshal format, or a file
    cut short, reads as ``ValueError``: a miss, written again.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        return marshal.loads(data)
    except (EOFError, TypeError) as e:
        raise ValueError(f"{path}: {e}") from None


def write_meta(path, value) -> bool:
    """Write plain data (dicts, lists, tuples, ints, strings) for :func:`read_meta`."""
    return write_atomic(path, marshal.dumps(value))


def _seeds_file(digest: str) -> str:
    return os.path.join(cache_path(), f"{digest[:32]}.seeds.meta")


def stored_seeds(digest: str) -> set[int]:
    """The pcs earlier runs found missing from the translation (indirect
    jump targets): a translation starts from them too."""
    try:
        return set(read_meta(_seeds_file(digest)))
    except (OSError, ValueError, TypeError):
        return set()


def remember_seeds(digest: str, seeds) -> None:
    """Add ``seeds`` to those :func:`stored_seeds` returns."""
    stored = stored_seeds(digest)
    if not set(seeds) <= stored:
        write_meta(_seeds_file(digest), sorted(stored | set(seeds)))


def write_atomic(path: Path | str, data: bytes) -> bool:
    """Write a cache file whole or not at all; False where the cache is not writable."""
    import tempfile

    folder, name = os.path.split(os.fspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        return False             # a read-only cache directory only costs the next run a translation


#: the native cache's cap in MiB unless ``$HETFLOW_NATIVE_CACHE_MAX_MB`` says otherwise (0 there: no cap)
MAX_MB = 1024
# a temporary file older than this was left by a write that never finished (a killed process)
_STALE_TMP_S = 3600.0
# what the native backend writes here: object code, shared objects, descriptions, and their temporary files
_OURS = (".o", ".so", ".meta", ".tmp")


def trim(folder: str | None = None, max_mb: int | None = None) -> int:
    """Keep the native cache within its cap: remove its least recently used files; how many were removed.

    Every program and every set of seeds adds a translation (a shared
    object of a megabyte or more, its parts' object code, its
    description), and a new translator or llvmlite version starts a
    new set beside the old, so without a cap the folder only grows: a
    few GiB within days of development here. Past the cap
    (``$HETFLOW_NATIVE_CACHE_MAX_MB``, else :data:`MAX_MB`) the files
    used longest ago (by their access time: set when a file is made,
    and kept to the day at least by Linux's default ``relatime``) go
    until the cache holds three quarters of it, so that trimming is not
    paid on every translation. A file missing later is a miss that
    translates again, also for a process that was about to read it; a
    process that has a shared object loaded keeps it. Temporary files
    that a killed writer left (older than an hour) go whatever the size.
    Called after a translation was written, never on a run from the cache.
    """
    import time

    folder = folder or cache_path()
    if max_mb is None:
        raw = os.environ.get("HETFLOW_NATIVE_CACHE_MAX_MB", "").strip()
        if not raw:
            max_mb = MAX_MB
        elif raw.isascii() and raw.isdigit():
            max_mb = int(raw)
        else:
            import warnings

            warnings.warn(f"$HETFLOW_NATIVE_CACHE_MAX_MB is {raw!r}, not a whole number of MiB (0: no cap): the "
                          f"native cache in {folder} keeps its default cap of {MAX_MB} MiB", stacklevel=2)
            max_mb = MAX_MB
    now, removed, files, total = time.time(), 0, [], 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_file(follow_symlinks=False) or not entry.name.endswith(_OURS):
            continue                 # $HETFLOW_NATIVE_CACHE may name a folder that holds other files too
        if entry.name.endswith(".tmp"):
            if now - st.st_mtime > _STALE_TMP_S:
                removed += _remove(entry.path)
            continue
        files.append((st.st_atime, st.st_size, entry.path))
        total += st.st_size
    if not max_mb or total <= max_mb << 20:
        return removed
    keep = (max_mb << 20) * 3 // 4
    for _, size, path in sorted(files):
        if total <= keep:
            break
        if _remove(path):
            removed += 1
            total -= size
    return removed


def _remove(path: str) -> int:
    try:
        os.remove(path)
        return 1
    except OSError:
        return 0             # gone already (another process trimmed it), or a folder not ours to change


#: bumped whenever what :func:`load_program` keeps of an ELF file, or which files it accepts, changes
ELF_VERSION = 7


def load_program(source, fetch: str = "executable", isa: str = "rv64imac", memory: str = "protected") -> Program:
    """:func:`~.elf.load_elf` through the disk cache: what a run needs of
    the file (:func:`~.elf.elf_layout`) is kept per digest of its bytes, so
    a file seen before loads without pyelftools.  A changed file has
    another digest and is parsed again, so its errors are ``load_elf``'s."""
    raw, label = read_elf(source)
    path = os.path.join(cache_path(), f"elf{ELF_VERSION}-{sha256(raw).hexdigest()[:40]}.meta")
    try:
        layout = read_meta(path)
        if not isinstance(layout, dict):
            raise ValueError(f"{path}: not a program's layout")
    except (OSError, ValueError):
        layout = elf_layout(raw, label)
        write_meta(path, layout)
    return program_of(layout, raw, label, fetch, isa, memory)
