#include "isa_test.h"
/* Traps and mret: ecall, ebreak, illegal instructions, U-mode, faults. */
TEST_BEGIN
    la t0, handler; csrw mtvec, t0
    csrr t0, mtvec; la t1, handler; bne t0, t1, fail
    /* CSRs */
    li gp, 1; li t0, 0x1234; csrw mscratch, t0; csrrs x14, mscratch, zero; li x7, 0x1234; bne x14, x7, fail
    li gp, 2; csrrc x14, mscratch, t0; csrr x14, mscratch; bnez x14, fail
    li gp, 3; csrr x14, misa; li x7, 0x8000000000101105; bne x14, x7, fail
    li gp, 4; csrr x14, mhartid; bnez x14, fail
    li gp, 5; csrr a1, cycle; csrr a2, instret; bgeu a1, a2, fail      /* counters count steps */
    li gp, 6; csrwi medeleg, 0; csrwi mideleg, 0; csrw satp, zero; csrw pmpaddr0, t0; csrw pmpcfg0, zero; csrr x14, mip
    bnez x14, fail
    li gp, 7; csrr x14, marchid; li x7, 0xfffeeee; bne x14, x7, fail
    /* ecall from M (a7 not exit/write): mcause 11 */
    li gp, 8; li a7, 0; li s2, 0; ecall; li x7, 11; bne s2, x7, fail
    /* ebreak: mcause 3 */
    li gp, 9; ebreak; li x7, 3; bne s2, x7, fail
    /* illegal instruction: mcause 2, mtval = the word */
    li gp, 10; .word 0xffffffff; li x7, 2; bne s2, x7, fail; li x7, 0xffffffff; bne s3, x7, fail
    /* load access fault on an unmapped address: mcause 5, mtval = address */
    li gp, 11; li t0, 0x10; ld t1, 0(t0); li x7, 5; bne s2, x7, fail; li x7, 0x10; bne s3, x7, fail
    /* store into the read-only input region: mcause 7 */
    li gp, 12; li t0, 0x40000000; sd t0, 0(t0); li x7, 7; bne s2, x7, fail
    /* IALIGN = 16 (C): a jump to an address that is 2 mod 4 runs, no trap, and links */
    li gp, 13; li s2, 0; li t4, 0; la t0, 13f; jalr t4, 0(t0)
    .balign 4
    .option push
    .option rvc
    c.nop
13: c.nop
    .option pop
    bnez s2, fail; beqz t4, fail
    /* misaligned AMO: mcause 6 */
    li gp, 14; la t0, scratch; addi t0, t0, 1; amoadd.d t1, t1, (t0); li x7, 6; bne s2, x7, fail
    /* enter U-mode with mret; MPP = U */
    li gp, 15; li t0, 3 << 11; csrc mstatus, t0; la t0, user; csrw mepc, t0; mret
user:
    /* in U-mode a CSR access to an M CSR is illegal */
    li gp, 16; li s2, 0; csrr t0, mstatus; li x7, 2; bne s2, x7, fail
    /* the cycle counter is readable from U */
    li gp, 17; csrr t0, cycle
    /* mret in U-mode is illegal */
    li gp, 18; li s2, 0; mret; li x7, 2; bne s2, x7, fail
    /* ecall from U: mcause 8; the handler returns to M-mode (a7 = 1) */
    li gp, 19; li a7, 1; ecall; li x7, 8; bne s2, x7, fail
    li gp, 20; li s2, 0; csrr t0, mstatus; bnez s2, fail; li t1, 0x1800; and t0, t0, t1; bnez t0, fail   /* back in M; mret left MPP = U */
    j pass

handler:
    csrr s2, mcause
    csrr s3, mtval
    li t5, 8; bne s2, t5, 9f
    li t5, 1; bne a7, t5, 9f
    /* ecall from U with a7 = 1: return to the instruction after it, in M-mode */
    li t5, 3 << 11; csrs mstatus, t5
9:  csrr t5, mepc; addi t5, t5, 4; csrw mepc, t5
    mret
TEST_END
    .data
    .align 4
scratch: .dword 0, 0
