"""The machine state layout that the ``fast`` and ``native`` backends share.

Both keep a run's state in flat arrays so that compiled code can stop
anywhere and the next call resume: ``regs[32]`` (x0..x31 as signed 64-bit
integers), ``st[N_ST]`` (indices ``S_*``) and one memory buffer holding
every region back to back, 8-byte aligned, described by a region table
(base, size, offset, permission).  This module holds the names of that
layout and nothing that needs numpy or numba, so the native backend's
main execution (:mod:`.native_main`) can start without either.

``mode`` bits say what a call records (see :mod:`.fast`): ``REC_READS``
the min trace, ``LOG_OPS`` memory operations, ``LOG_PCS`` the ROM
histogram, ``REPLAY`` re-execution from a min trace, ``WITNESS`` witness
rows.  ``ST_*`` are the statuses a run of compiled code returns.

Examples
--------
>>> from hetflow.executors.emulator.machine import Region
>>> regions = (Region("code", 0x1000, 16, 5, bytes(16)), Region("ram", 0x2000, 8, 3, bytes(8)))
>>> region_layout(regions, xperm=4)
([0, 16], [0, -1], [0, -1], 9, 8, 24)
>>> region_layout(regions, xperm=0)
([0, 16], [0, -1], [0, 8], 9, 12, 24)
"""

from __future__ import annotations

from .elf import PERM_X

__all__ = ["REC_READS", "LOG_OPS", "LOG_PCS", "REPLAY", "WITNESS", "ST_BUDGET", "ST_END", "ST_TRAP",
           "ST_REPLAY_EXHAUSTED", "ST_GROW", "S_PC", "S_STEP", "S_PRIV", "S_RES", "S_MSTATUS", "S_MTVEC", "S_MEPC",
           "S_MCAUSE", "S_MTVAL", "S_MSCRATCH", "S_MIE", "S_END", "S_CODE", "S_ECAUSE", "S_ETVAL", "S_EINSN",
           "S_NEED", "S_CNEED", "N_ST", "N_STOP", "N_SIDE", "N_SHORT", "N_MISS", "N_CONT", "CTX_STOP", "CTX_RPOS", "CTX_RLEN",
           "CTX_OPOS", "CTX_NREG", "CTX_TOHOST", "CTX_PAGES", "CTX_CHUNK", "CTX_CEND", "CTX_LIMIT", "CTX_RECS",
           "CTX_NREC", "CTX_RCAP", "N_CTX", "REC_PC", "REC_STEP", "REC_RPOS", "REC_COUNTS", "record_width", "PAGE_SHIFT",
           "U64", "to_i64", "region_layout"]

REC_READS, LOG_OPS, LOG_PCS, REPLAY, WITNESS = 1, 2, 4, 8, 16

# statuses a call of compiled code returns
ST_BUDGET, ST_END, ST_TRAP, ST_REPLAY_EXHAUSTED, ST_GROW = 0, 1, 2, 3, 4

# indices into the st array
S_PC, S_STEP, S_PRIV, S_RES = 0, 1, 2, 3
S_MSTATUS, S_MTVEC, S_MEPC, S_MCAUSE, S_MTVAL, S_MSCRATCH, S_MIE = 4, 5, 6, 7, 8, 9, 10
S_END, S_CODE, S_ECAUSE, S_ETVAL, S_EINSN, S_NEED, S_CNEED = 11, 12, 13, 14, 15, 16, 17
N_ST = 18

# the native backend's generated code and its runtime (:mod:`.native_main`, which loads no translator):
# the statuses a translated function returns, the context array's slots (inputs and buffer positions)
N_STOP, N_SIDE, N_SHORT, N_MISS, N_CONT = 0, 1, 2, 3, 4
CTX_STOP, CTX_RPOS, CTX_RLEN, CTX_OPOS, CTX_NREG, CTX_TOHOST, CTX_PAGES = range(7)
# several chunks per call (the main execution only; CTX_CHUNK 0 stops at CTX_STOP): the chunk's length,
# the current chunk's last step + 1, the run's step limit, the chunk-record buffer's address, the records
# it holds and how many it can hold
CTX_CHUNK, CTX_CEND, CTX_LIMIT, CTX_RECS, CTX_NREC, CTX_RCAP = range(7, 13)
N_CTX = 13
# a chunk record, written where a chunk ends inside translated code: the next chunk's pc and first step,
# the min-trace position where the chunk's reads end, the chunk's counters (one per class), then the
# next chunk's x0..x31; :func:`record_width` words in all
REC_PC, REC_STEP, REC_RPOS, REC_COUNTS = 0, 1, 2, 3
#: flat-memory pages: 0 holds no translated code, 1 translated code in use, 2 translated code invalidated
PAGE_SHIFT = 12

U64 = (1 << 64) - 1


def to_i64(v: int) -> int:
    """An unsigned 64-bit value as the signed integer the arrays hold.

    >>> to_i64((1 << 64) - 1), to_i64(5)
    (-1, 5)
    """
    v &= U64
    return v - (1 << 64) if v >> 63 else v


def record_width(n_classes: int) -> int:
    """The words of one chunk record with ``n_classes`` counters.

    >>> record_width(9)
    44
    """
    return REC_COUNTS + n_classes + 32


def region_layout(regions, xperm: int):
    """Where each region lives in the flat memory buffer and its slots.

    Returns ``(offsets, slots, hist_slots, n_slots, n_hist, size)``: decode-cache
    rows and histogram counters are one per 2-byte parcel; executable
    segments have both, numbered alike (the fast path indexes both with
    one slot); under fetch protection "any" (``xperm == 0``) the other
    regions get histogram counters only.  ``n_slots`` counts one extra
    scratch row, ``n_hist`` the counters (at least 1); ``size`` is the
    buffer's length.
    """
    offs, off, slots, slot = [], 0, [], 0
    for r in regions:
        offs.append(off)
        off += r.size
        if r.perm & PERM_X:
            slots.append(slot)
            slot += r.size // 2
        else:
            slots.append(-1)
    hslots, hslot = list(slots), slot
    for i, r in enumerate(regions):
        if hslots[i] < 0 and xperm == 0:
            hslots[i] = hslot
            hslot += r.size // 2
    return offs, slots, hslots, slot + 1, max(hslot, 1), off
