"""Translation of a guest's blocks into LLVM IR: the compiler half of the
``native`` backend (:mod:`.native_blocks` finds the blocks and cuts them
into parts; :mod:`.native_ir` emits each instruction; :mod:`.native`
compiles what this emits; :mod:`.native_main` and :mod:`.native` run it).

:func:`emit_modules` writes one module per part and a driver,
``hf_run(regs, st, mem, rbuf, ctx, counts, rtab, obuf, hist)``, which
dispatches on pc to the part holding the block that starts there.  In a
part, guest registers x1..x31, the step, the counters and the min-trace
position live in local variables (LLVM keeps them in host registers),
blocks branch straight to each other and ``jalr`` goes through one
``switch`` on pc over the part's blocks.  A run stops when the step count
reaches ``stop`` and returns a status:

* ``N_STOP``  — exactly ``stop`` steps were reached: a block that does
  not fit before ``stop`` (one compare per block, at its head) runs in its
  part's stepwise function (``e_<part>``, :func:`_emit_edge`), which
  compares before each instruction, so chunk
  boundaries fall on the exact step in translated code, and the next run
  resumes inside the block through that copy's entry for the pc;
* ``N_SHORT`` — a block of writable code does not fit before ``stop``
  (a part returns it to the driver for any block, which hands a block in
  read-only code to the stepwise function): the interpreter runs the
  steps up to ``stop``;
* ``N_SIDE``  — the instruction at pc needs the interpreter: a load or
  store outside one aligned word of a region with the right permission
  (a fault, a misaligned access across words), a store to the UART or
  ``tohost``, a store into a page of translated writable code, an
  exhausted min trace on replay, or an untranslated instruction;
* ``N_MISS``  — pc is not the first instruction of a block, or its block
  lies in writable code whose page was invalidated;
* ``N_CONT``  — (between a part and the driver only) control left the
  part: the driver dispatches again.

With ``ctx[CTX_CHUNK]`` set (the main execution), a stop at the current
chunk's end is not a return: the driver appends the chunk's record and
runs on to the next chunk's end (:func:`_chunk_boundary`).

Each block adds its step count and its per-class counter increments
once, at its end (the step of its i-th instruction is the block's first
step plus i); a side exit at the i-th instruction adds only the first
i instructions'.  A block in read-only code is entered in the middle
through the stepwise function; one in writable code at its first instruction
only (the runtime lets the interpreter finish it).
The code is specialised on ``mode``: with ``REC_READS`` every loaded
word is appended to the min-trace buffer (and, for an instruction in
writable code, the word or two holding it, as the interpreters record
fetches from writable memory), with ``REPLAY`` it is taken from it
instead of memory (and stores leave memory alone), with ``LOG_OPS`` each
access appends (word address, step, is_write), with ``LOG_PCS`` each
instruction bumps its histogram slot.

Writable code: the page table at ``ctx[CTX_PAGES]`` has a byte per
4 KiB page of flat memory (0 no translated code, 1 translated code in
use, 2 invalidated).  A block in writable code checks its pages are 1 at
its head (else ``N_MISS``); a store checks its page is not 1 (else
``N_SIDE``: the interpreter stores, and the runtime invalidates the page
if its bytes changed).

Semantics follow :mod:`.fast` (and so the reference) bit for bit; division
is guarded so LLVM never sees a zero divisor or a signed overflow.
"""

from __future__ import annotations

from .isa import CLASSES, USE_RD, USE_RS1, USE_RS2, operand_use
from .layout import (CTX_CEND, CTX_CHUNK, CTX_LIMIT, CTX_NREC, CTX_RCAP, CTX_RECS, LOG_OPS, LOG_PCS, REC_COUNTS, REC_PC,
                     REC_RPOS, REC_STEP, WITNESS, record_width)
from .native_blocks import _BRANCHES, _LOADS, _STORES, _ALU, MAX_BLOCK, Block, Insn, find_blocks, parts  # noqa: F401
from .native_ir import (CTX_NREG, CTX_OPOS, CTX_PAGES, CTX_RLEN, CTX_RPOS, CTX_STOP, CTX_TOHOST, N_CONT,  # noqa: F401
                        N_CTX, N_MISS, N_SHORT, N_SIDE, N_STOP, PAGE_SHIFT, _alu, _Emitter, _fetch, _i64, _memory)

__all__ = ["emit_modules", "find_blocks", "parts", "N_CONT", "N_STOP", "N_SIDE", "N_SHORT", "N_MISS", "MAX_BLOCK",
           "CTX_STOP", "CTX_RPOS", "CTX_RLEN", "CTX_OPOS", "CTX_NREG", "CTX_TOHOST", "CTX_PAGES", "N_CTX", "PAGE_SHIFT"]

_HEADER = """\
define internal i64 @hf_find(i64 %addr, i64 %size, i64 %perm, i64* noalias %rtab, i64 %nreg) noinline cold {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %more = icmp slt i64 %i, %nreg
  br i1 %more, label %body, label %none
body:
  %k = mul i64 %i, 4
  %pb = getelementptr inbounds i64, i64* %rtab, i64 %k
  %base = load i64, i64* %pb
  %k1 = add i64 %k, 1
  %ps = getelementptr inbounds i64, i64* %rtab, i64 %k1
  %size1 = load i64, i64* %ps
  %d = sub i64 %addr, %base
  %lim = sub i64 %size1, %size
  %c0 = icmp sge i64 %d, 0
  %c1 = icmp sle i64 %d, %lim
  %in = and i1 %c0, %c1
  br i1 %in, label %found, label %next
next:
  %i1 = add i64 %i, 1
  br label %loop
found:
  %k3 = add i64 %k, 3
  %pp = getelementptr inbounds i64, i64* %rtab, i64 %k3
  %p = load i64, i64* %pp
  %has = and i64 %p, %perm
  %ok = icmp eq i64 %has, %perm
  %r = select i1 %ok, i64 %i, i64 -1
  ret i64 %r
none:
  ret i64 -1
}
"""

_STATE = ["step", "bstep", "xpc", "jpc", "rpos", "opos", "status", "lbase", "lsize", "loff", "sbase", "ssize",
          "soff", "lc", "lk"]


_PARAMS = ("i64* noalias %regs, i64* noalias %st, i8* noalias %mem, i64* noalias %rbuf, i64* noalias %ctx, "
           "i64* noalias %counts, i64* noalias %rtab, i64* noalias %obuf, i64* noalias %hist")
_ARGS = ("i64* %regs, i64* %st, i8* %mem, i64* %rbuf, i64* %ctx, i64* %counts, i64* %rtab, i64* %obuf, "
         "i64* %hist")


def emit_modules(blocks: list[Block], mode: int, part_insns: int | None = None) -> list[str]:
    """The translation as LLVM module texts: one per part, then the driver
    ``i64 hf_run(regs, st, mem, rbuf, ctx, counts, rtab, obuf, hist)``.

    ``hf_run`` is a loop that dispatches on pc to the part (a function,
    :func:`parts`) holding the block that starts there; a part runs until
    control leaves it (``N_CONT``: ``hf_run`` dispatches again) or it stops
    with one of the statuses ``hf_run`` returns.  LLVM's code generation
    costs more than linearly in a function's size, so parts keep a large
    program's translation time proportional to its size; and a part is
    named after its first block, so its text (and its compiled object) is
    the same in a later translation that adds blocks elsewhere."""
    groups = parts(blocks, part_insns)
    heads = {b.pc for b in blocks}
    names = [f"hf_p{group[0].pc:x}" for group in groups]
    pages = any(ins.fetch >= 0 for b in blocks for ins in b.insns)
    # a run that stopped inside a block resumes there: each later instruction of a block in read-only code
    # (the first block holding it) is an entry of its part's stepwise function
    entries: list[dict[int, Block]] = []
    taken = set(heads)
    for group in groups:
        mids = {}
        for b in group:
            if any(ins.fetch >= 0 for ins in b.insns):
                continue
            for ins in b.insns:
                if ins.pc == b.pc or ins.pc not in taken:
                    taken.add(ins.pc)
                    mids[ins.pc] = b
        entries.append(mids)
    modules = [_HEADER + _emit_part(name, group, mode, heads, pages) + _emit_edge(name, mids, mode, heads, pages)
               for name, group, mids in zip(names, groups, entries)]
    lines = [f"declare i64 @{pre}{name}({_PARAMS})" for name in names for pre in ("", "e_")]
    lines += [f"define i64 @hf_run({_PARAMS}) nounwind {{", "entry:", "  br label %loop", "loop:",
              "  %pc = load i64, i64* %st"]
    cases = " ".join([f"i64 {_i64(b.pc)}, label %P{k}" for k, group in enumerate(groups) for b in group] +
                     [f"i64 {_i64(pc)}, label %Q{k}" for k, mids in enumerate(entries) for pc in sorted(mids)
                      if pc not in heads])
    lines.append(f"  switch i64 %pc, label %none [ {cases} ]")
    lines += ["none:", "  br label %done"]
    incoming = [f"[{N_MISS}, %none]"]
    for k, name in enumerate(names):
        # a block that does not fit before stop (N_SHORT) runs in the part's stepwise function, where a run
        # stopped inside a block resumes too
        lines += [f"P{k}:", f"  %s{k} = call i64 @{name}({_ARGS})", f"  %c{k} = icmp eq i64 %s{k}, {N_CONT}",
                  f"  br i1 %c{k}, label %loop, label %R{k}", f"R{k}:",
                  f"  %h{k} = icmp eq i64 %s{k}, {N_SHORT}", f"  br i1 %h{k}, label %Q{k}, label %done",
                  f"Q{k}:", f"  %q{k} = call i64 @e_{name}({_ARGS})", f"  %d{k} = icmp eq i64 %q{k}, {N_CONT}",
                  f"  br i1 %d{k}, label %loop, label %done"]
        incoming += [f"[%s{k}, %R{k}]", f"[%q{k}, %Q{k}]"]
    lines += ["done:", f"  %status = phi i64 {', '.join(incoming)}", *_chunk_boundary(), "}"]
    return modules + ["\n".join(lines) + "\n"]


def _chunk_boundary() -> list[str]:
    """The driver's exit: where the run stopped at the current chunk's end
    (``ctx[CTX_CEND]``, with ``ctx[CTX_CHUNK]`` not 0), the chunk's record
    (:data:`~.layout.REC_PC` ...) is appended to the buffer at
    ``ctx[CTX_RECS]`` and the chunk's counters zeroed, and the run goes
    on to the next chunk's end (or the step limit) while the buffer has
    room for another record and the min-trace buffer for another chunk's
    reads (three words a step at most); else it returns ``N_STOP``.  Any
    other stop returns its status to the runtime, which steps in (the
    interpreter, a retranslation) or closes the chunk itself."""
    ncls = len(CLASSES)
    width = record_width(ncls)

    def at(ptr: str, i: int) -> str:
        return f"getelementptr inbounds i64, i64* %{ptr}, i64 {i}"

    out = [f"  %pchunk = {at('ctx', CTX_CHUNK)}", "  %chunk = load i64, i64* %pchunk",
           f"  %pcend = {at('ctx', CTX_CEND)}", "  %cend = load i64, i64* %pcend",
           f"  %pstep = {at('st', 1)}", "  %step = load i64, i64* %pstep",
           "  %on = icmp sgt i64 %chunk, 0", "  %there = icmp eq i64 %step, %cend",
           "  %bound = and i1 %on, %there", "  br i1 %bound, label %record, label %out",
           "out:", "  ret i64 %status",
           "record:",
           f"  %pnrec = {at('ctx', CTX_NREC)}", "  %nrec = load i64, i64* %pnrec",
           f"  %precs = {at('ctx', CTX_RECS)}", "  %irecs = load i64, i64* %precs",
           "  %recs = inttoptr i64 %irecs to i64*", f"  %roff = mul i64 %nrec, {width}",
           "  %row = getelementptr inbounds i64, i64* %recs, i64 %roff",
           f"  %ppc = {at('st', 0)}", "  %npc = load i64, i64* %ppc",
           f"  %prpos = {at('ctx', CTX_RPOS)}", "  %rpos = load i64, i64* %prpos"]
    for i, v in ((REC_PC, "%npc"), (REC_STEP, "%step"), (REC_RPOS, "%rpos")):
        out += [f"  %w{i} = {at('row', i)}", f"  store i64 {v}, i64* %w{i}"]
    for c in range(ncls):
        out += [f"  %pn{c} = {at('counts', c)}", f"  %vn{c} = load i64, i64* %pn{c}",
                f"  %wn{c} = {at('row', REC_COUNTS + c)}", f"  store i64 %vn{c}, i64* %wn{c}",
                f"  store i64 0, i64* %pn{c}"]
    for r in range(32):
        out += [f"  %px{r} = {at('regs', r)}", f"  %vx{r} = load i64, i64* %px{r}",
                f"  %wx{r} = {at('row', REC_COUNTS + ncls + r)}", f"  store i64 %vx{r}, i64* %wx{r}"]
    out += ["  %nrec1 = add i64 %nrec, 1", "  store i64 %nrec1, i64* %pnrec",
            "  %cend1 = add i64 %cend, %chunk", "  store i64 %cend1, i64* %pcend",
            f"  %plimit = {at('ctx', CTX_LIMIT)}", "  %limit = load i64, i64* %plimit",
            "  %below = icmp slt i64 %cend1, %limit", "  %stop1 = select i1 %below, i64 %cend1, i64 %limit",
            f"  %pstop = {at('ctx', CTX_STOP)}", "  store i64 %stop1, i64* %pstop",
            f"  %prcap = {at('ctx', CTX_RCAP)}", "  %rcap = load i64, i64* %prcap",
            f"  %prlen = {at('ctx', CTX_RLEN)}", "  %rlen = load i64, i64* %prlen",
            "  %span = sub i64 %stop1, %step", "  %need = mul i64 %span, 3", "  %upto = add i64 %rpos, %need",
            "  %m1 = icmp sgt i64 %span, 0", "  %m2 = icmp slt i64 %nrec1, %rcap", "  %m3 = icmp sle i64 %upto, %rlen",
            "  %m12 = and i1 %m1, %m2", "  %more = and i1 %m12, %m3",
            "  br i1 %more, label %loop, label %full",
            "full:", f"  ret i64 {N_STOP}"]
    return out


def _prologue(e: _Emitter, name: str, pages: bool) -> None:
    """A function's entry: the state into local variables."""
    ncls = len(CLASSES)
    e.out.append(f"define i64 @{name}({_PARAMS}) noinline nounwind {{")
    e.label("entry")
    for r in range(1, 32):
        e.e(f"%x{r} = alloca i64")
    for v in _STATE + [f"c{c}" for c in range(ncls)]:
        e.e(f"%{v} = alloca i64")
    for r in range(1, 32):
        e.store(f"x{r}", e.op(f"load i64, i64* {e.elem('regs', str(r))}"))
    for c in range(ncls):
        e.store(f"c{c}", e.op(f"load i64, i64* {e.elem('counts', str(c))}"))
    e.e(f"%stop = load i64, i64* {e.elem('ctx', str(CTX_STOP))}")
    e.e(f"%rlen = load i64, i64* {e.elem('ctx', str(CTX_RLEN))}")
    e.e(f"%nreg = load i64, i64* {e.elem('ctx', str(CTX_NREG))}")
    e.e(f"%tohost = load i64, i64* {e.elem('ctx', str(CTX_TOHOST))}")
    if pages:
        where = e.elem("ctx", str(CTX_PAGES))
        e.e(f"%pages = inttoptr i64 {e.op(f'load i64, i64* {where}')} to i8*")
    e.store("rpos", e.op(f"load i64, i64* {e.elem('ctx', str(CTX_RPOS))}"))
    e.store("opos", e.op(f"load i64, i64* {e.elem('ctx', str(CTX_OPOS))}"))
    e.store("step", e.op(f"load i64, i64* {e.elem('st', '1')}"))
    e.store("jpc", e.op(f"load i64, i64* {e.elem('st', '0')}"))
    for v in ("lbase", "lsize", "loff", "sbase", "ssize", "soff"):
        e.store(v, 0)
    e.e("br label %dispatch")


def _epilogue(e: _Emitter) -> None:
    """A function's exit: the state back to the arrays, the status returned."""
    e.label("exit")
    for r in range(1, 32):
        e.e(f"store i64 {e.load(f'x{r}')}, i64* {e.elem('regs', str(r))}")
    for c in range(len(CLASSES)):
        e.e(f"store i64 {e.load(f'c{c}')}, i64* {e.elem('counts', str(c))}")
    e.e(f"store i64 {e.load('xpc')}, i64* {e.elem('st', '0')}")
    e.e(f"store i64 {e.load('step')}, i64* {e.elem('st', '1')}")
    e.e(f"store i64 {e.load('rpos')}, i64* {e.elem('ctx', str(CTX_RPOS))}")
    e.e(f"store i64 {e.load('opos')}, i64* {e.elem('ctx', str(CTX_OPOS))}")
    e.e(f"ret i64 {e.load('status')}")
    e.out.append("}")


def _emit_part(name: str, blocks: list[Block], mode: int, all_heads: set[int], pages: bool = False) -> str:
    """One part: its blocks branch to each other directly; a transfer out of
    it stops with ``N_CONT``; a block that does not fit before ``stop`` with
    ``N_SHORT`` (the driver runs it in the part's stepwise function)."""
    e = _Emitter(mode, pages)
    ncls = len(CLASSES)
    heads = {b.pc for b in blocks}
    _prologue(e, name, pages)
    e.label("dispatch")
    t = e.load("jpc")
    cases = " ".join(f"i64 {_i64(pc)}, label %H_{pc:x}" for pc in sorted(heads))
    e.e(f"switch i64 {t}, label %miss [ {cases} ]")
    e.label("miss")
    e.store("xpc", e.load("jpc"))
    e.store("status", N_CONT)
    e.e("br label %exit")

    def prefix(b: Block, i: int) -> list[int]:
        k = [0] * ncls
        for ins in b.insns[:i]:
            k[ins.cls] += 1
        return k

    def goto(pc: int) -> str:
        """The label a transfer to pc goes to: its block, an exit to another
        part's, or a miss exit if untranslated."""
        if pc in heads:
            return f"H_{pc:x}"
        if pc in all_heads:
            conts.add(pc)
            return f"C_{pc:x}"
        return f"M_{pc:x}"

    conts: set[int] = set()           # transfers to another part's block
    misses: set[int] = set()          # transfers to an untranslated pc
    falls: set[int] = set()           # fall-through into an untranslated instruction
    for b in blocks:
        n = len(b.insns)
        # head: the whole block must fit before stop
        e.label(f"H_{b.pc:x}")
        # writable code runs translated only while its pages are unchanged since the translation
        for page in sorted({(at + 8 * k) >> PAGE_SHIFT for ins in b.insns if ins.fetch >= 0 for at in [ins.fetch]
                            for k in (0, 1) if k == 0 or (ins.size == 4 and ins.pc & 7 == 6)}):
            pg = e.op(f"load i8, i8* {e.op(f'getelementptr inbounds i8, i8* %pages, i64 {page}')}")
            e.e(f"br i1 {e.op(f'icmp eq i8 {pg}, 1')}, label %H_{b.pc:x}_{page:x}, label %V_{b.pc:x}")
            e.label(f"H_{b.pc:x}_{page:x}")
        s = e.load("step")
        e.store("bstep", s)
        fits = e.op(f"icmp sge i64 {e.op(f'sub i64 %stop, {s}')}, {n}")
        e.e(f"br i1 {fits}, label %I_{b.pc:x}, label %S_{b.pc:x}")
        e.label(f"S_{b.pc:x}")                       # does not fit: the stepwise function runs up to stop
        e.store("xpc", _i64(b.pc))
        e.store("status", N_SHORT)
        e.e("br label %exit")
        if any(ins.fetch >= 0 for ins in b.insns):
            e.label(f"V_{b.pc:x}")                   # invalidated: the interpreter runs it from memory
            e.store("xpc", _i64(b.pc))
            e.store("status", N_MISS)
            e.e("br label %exit")
        for j, ins in enumerate(b.insns):
            if ins.name not in _LOADS and ins.name not in _STORES:
                continue
            # a side exit before this instruction: the first j instructions are done
            e.label(f"X_{ins.pc:x}")
            e.store("xpc", _i64(ins.pc))
            e.store("step", e.op(f"add i64 {e.load('bstep')}, {j}"))
            for c, k in enumerate(prefix(b, j)):
                e.add_to(f"c{c}", k)
            e.store("status", N_SIDE)
            e.e("br label %exit")
        if _self_loop(b, mode):
            _emit_self_loop(e, b, prefix(b, n), goto, misses)
            continue
        for j, ins in enumerate(b.insns):
            lab = f"I_{ins.pc:x}"
            e.label(lab)
            term = _body(e, ins, j, lab, f"X_{ins.pc:x}")
            if j < n - 1:
                e.e(f"br label %I_{b.insns[j + 1].pc:x}")
                continue
            # the block's end: its steps and counters, then where it goes
            e.store("step", e.op(f"add i64 {e.load('bstep')}, {n}"))
            for c, k in enumerate(prefix(b, n)):
                e.add_to(f"c{c}", k)
            _leave(e, ins, term, goto, falls, misses)
    for kind, status, pcs in (("N", N_SIDE, falls), ("M", N_MISS, misses), ("C", N_CONT, conts)):
        for pc in sorted(pcs):
            e.label(f"{kind}_{pc:x}")
            e.store("xpc", _i64(pc))
            e.store("status", status)
            e.e("br label %exit")

    _epilogue(e)
    return "\n".join(e.out) + "\n"


def _body(e: _Emitter, ins: Insn, j: int, lab: str, side: str):
    """An instruction's work, the ``j``-th of its block (its step is
    ``bstep + j``); for a block's last instruction, how it leaves: None (it
    falls through), ``("br", cond, taken, not_taken)``, ``("jump", pc)`` or
    ``("indirect",)`` (to the pc in ``jpc``)."""
    term = None
    e.access = (0, 0, "0", "0", "0")
    if e.mode & WITNESS:              # the row's operands are the registers before the step
        use = operand_use(ins.op)
        before = [e.reg(r) if use & u else "0" for r, u in ((ins.rs1, USE_RS1), (ins.rs2, USE_RS2))]
    if ins.name not in _LOADS and ins.name not in _STORES:
        _fetch(e, ins, j)
    if ins.name in _ALU:
        e.set_reg(ins.rd, _alu(e, ins))
    elif ins.name in _LOADS or ins.name in _STORES:
        _memory(e, ins, j, lab, side)
    elif ins.name in _BRANCHES:
        c = e.op(f"icmp {_BRANCHES[ins.name]} i64 {e.reg(ins.rs1)}, {e.reg(ins.rs2)}")
        term = ("br", c, ins.pc + ins.imm, ins.pc + ins.size)
    elif ins.name == "jal":
        e.set_reg(ins.rd, str(_i64(ins.pc + ins.size)))
        term = ("jump", ins.pc + ins.imm)
    elif ins.name == "jalr":
        target = e.op(f"and i64 {e.op(f'add i64 {e.reg(ins.rs1)}, {ins.imm}')}, -2")
        e.set_reg(ins.rd, str(_i64(ins.pc + ins.size)))
        e.store("jpc", target)
        term = ("indirect",)
    if e.mode & LOG_PCS:
        p = e.elem("hist", str(ins.hslot))
        old = e.op(f"load i64, i64* {p}")
        e.e(f"store i64 {e.op(f'add i64 {old}, 1')}, i64* {p}")
    if e.mode & WITNESS:
        _witness_row(e, ins, j, term, before, use)
    return term


def _witness_row(e: _Emitter, ins: Insn, j: int, term, before: list[str], use: int) -> None:
    """The step's witness row (:data:`~.witness.COLUMNS`, as :mod:`.fast`
    writes them) into ``obuf``, row ``bstep + j - opos``: in witness mode
    ``obuf`` is the chunk's table and ``ctx[CTX_OPOS]`` the chunk's first
    step (no operation is logged then).  Translated code takes no trap, so
    ``trap`` is -1 and the access is :func:`_memory`'s, or none."""
    step = e.op(f"add i64 {e.load('bstep')}, {j}")
    rd = ins.rd if use & USE_RD else 0
    if term is None:
        npc = str(_i64(ins.pc + ins.size))
    elif term[0] == "br":
        npc = e.op(f"select i1 {term[1]}, i64 {_i64(term[2])}, i64 {_i64(term[3])}")
    elif term[0] == "jump":
        npc = str(_i64(term[1]))
    else:
        npc = e.load("jpc")
    row = [step, str(_i64(ins.pc)), str(ins.word), str(ins.op), str(ins.cls), str(rd), e.reg(rd), *before,
           *(str(v) for v in e.access), "-1", npc]
    first = e.load("opos")
    at = e.op(f"mul i64 {e.op(f'sub i64 {step}, {first}')}, {len(row)}")
    for k, v in enumerate(row):
        e.e(f"store i64 {v}, i64* {e.elem('obuf', e.op(f'add i64 {at}, {k}'))}")


def _leave(e: _Emitter, ins: Insn, term, goto, falls: set[int], misses: set[int]) -> None:
    """The branch out of a block whose last instruction is ``ins``."""
    if term is None:
        nxt = ins.pc + ins.size
        target = goto(nxt)
        if target.startswith("M_"):          # untranslated: the interpreter runs it
            target = f"N_{nxt:x}"
            falls.add(nxt)
        e.e(f"br label %{target}")
    elif term[0] == "br":
        for pc in term[2:]:
            if goto(pc).startswith("M_"):
                misses.add(pc)
        e.e(f"br i1 {term[1]}, label %{goto(term[2])}, label %{goto(term[3])}")
    elif term[0] == "jump":
        if goto(term[1]).startswith("M_"):
            misses.add(term[1])
        e.e(f"br label %{goto(term[1])}")
    else:
        e.e("br label %dispatch")


def _self_loop(b: Block, mode: int) -> bool:
    """Whether ``b`` is a loop of its own that :func:`_emit_self_loop`
    runs: it branches back to its first instruction and has nothing that
    needs the step inside it (no load or store, no writable code, no
    operation or pc logs)."""
    last = b.insns[-1]
    return (last.name in _BRANCHES and last.pc + last.imm == b.pc and not mode & (LOG_OPS | LOG_PCS | WITNESS)
            and all(ins.fetch < 0 and ins.name not in _LOADS and ins.name not in _STORES for ins in b.insns))


def _emit_self_loop(e: _Emitter, b: Block, per: list[int], goto, misses: set[int], unroll: int = 4) -> None:
    """A block that loops on itself: the iterations that fit before
    ``stop`` are counted once at the head (a division by the block's
    length), and the loop body is ``unroll`` copies of the block, each
    leaving on the guest's branch and only the last comparing with that
    count; the step and the counters (``per``: the block's per-class
    counts) are added once the loop leaves, for all its iterations.  With
    fewer than ``unroll`` iterations before ``stop`` the block goes to
    the stepwise function (``N_SHORT``); leaving because the next copies
    would pass ``stop`` goes back to the head."""
    n = len(b.insns)
    e.label(f"I_{b.pc:x}")
    left = e.op(f"sub i64 %stop, {e.load('bstep')}")
    k = e.op(f"sdiv i64 {left}, {n}")
    e.store("lk", k)
    e.store("lc", 0)
    e.e(f"br i1 {e.op(f'icmp sge i64 {k}, {unroll}')}, label %L_{b.pc:x}_0, label %S_{b.pc:x}")
    other = None
    for u in range(unroll):
        e.label(f"L_{b.pc:x}_{u}")
        term = None
        for j, ins in enumerate(b.insns):
            term = _body(e, ins, j, f"L_{ins.pc:x}_{u}", f"X_{ins.pc:x}")
        _, cond, taken, other = term
        c = e.op(f"add i64 {e.load('lc')}, 1")
        e.store("lc", c)
        if u < unroll - 1:
            e.e(f"br i1 {cond}, label %L_{b.pc:x}_{u + 1}, label %LF_{b.pc:x}")
        else:
            more = e.op(f"icmp sle i64 {e.op(f'add i64 {c}, {unroll}')}, {e.load('lk')}")
            e.e(f"br i1 {cond}, label %LM_{b.pc:x}, label %LF_{b.pc:x}")
            e.label(f"LM_{b.pc:x}")
            e.e(f"br i1 {more}, label %L_{b.pc:x}_0, label %LB_{b.pc:x}")
    if goto(other).startswith("M_"):
        misses.add(other)
    for lab, to in ((f"LF_{b.pc:x}", goto(other)), (f"LB_{b.pc:x}", f"H_{b.pc:x}")):
        e.label(lab)
        # opaque to LLVM's loop strength reduction, which would otherwise turn these products back into a
        # step and counters raised at every iteration
        c = e.op(f'call i64 asm "", "=r,0"(i64 {e.load("lc")})')
        e.store("step", e.op(f"add i64 {e.load('bstep')}, {e.op(f'mul i64 {c}, {n}')}"))
        for k, v in enumerate(per):
            if v:
                e.store(f"c{k}", e.op(f"add i64 {e.load(f'c{k}')}, {e.op(f'mul i64 {c}, {v}')}"))
        e.e(f"br label %{to}")


def _emit_edge(name: str, mids: dict[int, Block], mode: int, all_heads: set[int], pages: bool) -> str:
    """The part's stepwise function ``e_<name>``: from pc (any instruction
    of a block in read-only code, ``mids``: pc -> its block) to its block's
    end one instruction at a time, the step compared with ``stop`` before
    each and the step and the instruction's class counter raised after
    each.  A block that does not fit before ``stop`` runs here, so a chunk
    boundary falls on its exact step in translated code, and the next run
    resumes here.  It returns ``N_STOP`` at ``stop``, ``N_SIDE`` before an
    instruction that needs the interpreter, ``N_CONT`` at the block's end
    (``N_SIDE`` or ``N_MISS`` where that leads to untranslated code, as in
    the part) and ``N_SHORT`` for a pc it does not hold.  A function apart
    from the part, so that the part's code and its compile time stay as
    they are."""
    e = _Emitter(mode, pages)
    _prologue(e, f"e_{name}", pages)
    e.label("dispatch")
    t = e.load("jpc")
    cases = " ".join(f"i64 {_i64(pc)}, label %E_{b.pc:x}_{pc:x}" for pc, b in sorted(mids.items()))
    e.e(f"switch i64 {t}, label %miss [ {cases} ]")
    e.label("miss")
    e.store("xpc", e.load("jpc"))
    e.store("status", N_SHORT)
    e.e("br label %exit")

    def out(pc: int, fall: bool) -> int:
        return N_CONT if pc in all_heads else N_SIDE if fall else N_MISS

    def leave(ins: Insn, term) -> None:
        if term is None:
            nxt = ins.pc + ins.size
            e.store("xpc", _i64(nxt))
            e.store("status", out(nxt, True))
        elif term[0] == "br":
            c, taken, other = term[1:]
            e.store("xpc", e.op(f"select i1 {c}, i64 {_i64(taken)}, i64 {_i64(other)}"))
            e.store("status", e.op(f"select i1 {c}, i64 {out(taken, False)}, i64 {out(other, False)}"))
        elif term[0] == "jump":
            e.store("xpc", _i64(term[1]))
            e.store("status", out(term[1], False))
        else:
            e.store("xpc", e.load("jpc"))
            e.store("status", N_CONT)
        e.e("br label %exit")

    for b in dict.fromkeys(mids.values()):
        _emit_stepwise(e, b, leave, {pc for pc, at in mids.items() if at is b})
    _epilogue(e)
    return "\n".join(e.out) + "\n"


def _emit_stepwise(e: _Emitter, b: Block, leave, entries: set[int]) -> None:
    """Block ``b`` one instruction at a time, from the first of ``entries``
    (entry ``E_<block>_<pc>`` for each)."""
    first = min(entries)
    for j, ins in enumerate(b.insns):
        if ins.pc < first:
            continue
        tag = f"{b.pc:x}_{ins.pc:x}"
        e.label(f"E_{tag}")
        s = e.load("step")
        e.e(f"br i1 {e.op(f'icmp slt i64 {s}, %stop')}, label %EI_{tag}, label %ES_{tag}")
        e.label(f"ES_{tag}")
        e.store("xpc", _i64(ins.pc))
        e.store("status", N_STOP)
        e.e("br label %exit")
        if ins.name in _LOADS or ins.name in _STORES:
            e.label(f"EX_{tag}")                 # the side exit: the steps before this one are counted
            e.store("xpc", _i64(ins.pc))
            e.store("status", N_SIDE)
            e.e("br label %exit")
        e.label(f"EI_{tag}")
        e.store("bstep", s)
        term = _body(e, ins, 0, f"EB_{tag}", f"EX_{tag}")
        e.store("step", e.op(f"add i64 {s}, 1"))
        e.add_to(f"c{ins.cls}", 1)
        if j < len(b.insns) - 1:
            e.e(f"br label %E_{b.pc:x}_{b.insns[j + 1].pc:x}")
        else:
            leave(ins, term)
