"""The ``native`` backend: the guest's code translated to host code with LLVM.

Algorithm
---------
The backend has two runtimes over the same generated code, and neither
imports numba:

* the main execution (MT) runs in :mod:`.native_main` (ctypes buffers,
  the reference interpreter for what translated code leaves; no numpy,
  numba or llvmlite when the translation is in the disk cache), which
  also translates writable code and invalidates it when it is written;
* the MO and RH runners, chunk re-execution and witness rows run in
  :mod:`.native_runners` (:class:`NativeMachine` is its ``Runner``): the
  state in numpy arrays, the translation of the program's *read-only*
  executable segments for the run's mode (``LOG_OPS``, ``LOG_PCS``,
  ``REPLAY``, ``REPLAY | WITNESS``: the op log, the histogram, the reads
  popped from the min trace, each step's witness row written into the
  chunk's table), and the reference interpreter for the rest, writable
  code included (a replay's memory is the program's image, not the code a
  guest may have rewritten, and its fetches from writable code come from
  the min trace, so replay always interprets it).

Both runtimes compile through :mod:`.native_compile`:
:func:`translate_regions` finds the blocks (:mod:`.native_blocks`), emits
one LLVM module per part and a driver (:mod:`.native_translate`),
optimises each with a short pipeline and generates object code, links the
objects into a shared object where the host has a linker, and loads it
with ctypes (else through LLVM's MCJIT).  This module is the backend as
its callers know it: the runs, the replay and the runners, with the
compiler's and the cache's names re-exported; nothing below imports it.

Where either runtime falls back to the reference interpreter, one step at
a time unless said:

* an instruction that is not translated: ``ecall`` (exit, write),
  ``ebreak``, ``mret``, CSR instructions, LR/SC and AMOs, illegal words;
* a load or store that would fault, that is misaligned across two words,
  that stores to the UART or ``tohost``, or (on replay) finds the min
  trace exhausted: the interpreter runs it and raises or records exactly
  what the other backends do;
* the steps before a chunk boundary that a whole block of writable
  code would overrun (all of them at once); in read-only code the part's
  stepwise function runs them (:func:`.native_translate.emit_modules`), so
  every chunk ends on its exact step and a replay may start inside a block;
* a pc outside translated code: in writable memory up to 256 steps at a
  time; in read-only code that discovery did not reach (an indirect jump
  target) one step, and after :data:`.native_main.RETRANSLATE_AFTER` such
  misses the code is translated again with the missed pcs as extra seeds.

A step the interpreter runs logs its operations and pcs, and writes its
witness row, where translated code would have (:mod:`.native_runners`),
so every output is the fast and reference backends', array for array.

The compiled code is cached on disk (:func:`.cache.cache_dir`),
like numba's cache: each part's object code under the digest of its IR
text, and per translation key (the code digest, the host's identity, the
mode and the seeds) the shared object and its description, so a run of a
program seen before loads it instead of translating.  The last
translation's cost is :func:`last_translation` (seconds, blocks,
instructions, whether it came from the cache).
"""

from __future__ import annotations

import numpy as np

from . import machine as M
from . import native_main, native_runners
# the cache and the compiler, re-exported: this module is the backend as its callers know it
from .cache import VERSION, cache_dir, llvm_host  # noqa: F401
from .elf import Program
from .native_compile import (Translation, _loaded, code_digest, last_translation,  # noqa: F401
                             translate_regions, translation, warm_up)
from .native_runners import Image, Runner as NativeMachine
from .output import EmuTrace

__all__ = ["NativeMachine", "Translation", "run", "replay_chunk", "mem_ops_runner", "rom_histogram_runner",
           "last_translation", "cache_dir", "warm_up", "translate_regions", "VERSION"]


def run(program: Program, input_bytes: bytes = b"", chunk_steps: int = 1 << 18, max_steps: int = M.DEFAULT_MAX_STEPS,
        deadline: float | None = None, timeout: float | None = None):
    """Main execution (MT) on translated code (:func:`.native_main.run`)."""
    return native_main.run(program, input_bytes, chunk_steps, max_steps, deadline, timeout)


def replay_chunk(program: Program, trace: EmuTrace, input_size: int = 0, image: Image | None = None,
                 mode: int = 0, out: np.ndarray | None = None):
    """Re-execute one chunk from its min trace on translated code, writing
    its witness rows with ``WITNESS`` in ``mode`` (:func:`.native_runners.replay_chunk`)."""
    return native_runners.replay_chunk(program, trace, input_size, image, mode, out)


def mem_ops_runner(image: Image, program: Program, max_steps: int, deadline: float | None = None,
                   timeout: float | None = None, max_output: int = M.DEFAULT_MAX_OUTPUT) -> np.ndarray:
    """MO on translated code (:func:`.native_runners.mem_ops_runner`)."""
    return native_runners.mem_ops_runner(image, program, max_steps, deadline, timeout, max_output)


def rom_histogram_runner(image: Image, program: Program, max_steps: int, deadline: float | None = None,
                         timeout: float | None = None, max_output: int = M.DEFAULT_MAX_OUTPUT):
    """RH on translated code (:func:`.native_runners.rom_histogram_runner`)."""
    return native_runners.rom_histogram_runner(image, program, max_steps, deadline, timeout, max_output)
