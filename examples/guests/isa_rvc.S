#include "isa_test.h"
/* The C extension: every compressed form, HINTs, reserved encodings, and
   4-byte instructions at addresses that are 2 mod 4 and 6 mod 8. */
    .option rvc
TEST_BEGIN
    la t0, handler; csrw mtvec, t0
    la s0, scratch
    /* quadrant 0 */
    li gp, 1; mv s1, sp; la sp, scratch; c.addi4spn a0, sp, 8; la a1, scratch + 8; bne a0, a1, fail; mv sp, s1
    li gp, 2; li a0, -5; c.sw a0, 4(s0); c.lw a2, 4(s0); li x7, -5; bne a2, x7, fail
    li gp, 3; li a0, 0x123456789a; c.sd a0, 8(s0); c.ld a3, 8(s0); bne a3, a0, fail
    /* quadrant 1 */
    li gp, 4; li a0, 7; c.addi a0, -8; li x7, -1; bne a0, x7, fail
    li gp, 5; li a0, 0x7fffffff; c.addiw a0, 1; li x7, -0x80000000; bne a0, x7, fail
    li gp, 6; c.li a0, -32; li x7, -32; bne a0, x7, fail
    li gp, 7; mv s1, sp; c.addi16sp sp, -512; addi x7, s1, -512; bne sp, x7, fail; c.addi16sp sp, 496; c.addi16sp sp, 16; bne sp, s1, fail
    li gp, 8; c.lui a0, 0xfffe1; li x7, -0x1f000; bne a0, x7, fail
    li gp, 9; li a0, -16; c.srli a0, 60; li x7, 15; bne a0, x7, fail
    li gp, 10; li a0, -16; c.srai a0, 2; li x7, -4; bne a0, x7, fail
    li gp, 11; li a0, -1; c.andi a0, -3; li x7, -3; bne a0, x7, fail
    li gp, 12; li a0, 10; li a1, 3; c.sub a0, a1; li x7, 7; bne a0, x7, fail
    li gp, 13; li a0, 12; li a1, 10; c.xor a0, a1; li x7, 6; bne a0, x7, fail
    li gp, 14; li a0, 12; li a1, 10; c.or a0, a1; li x7, 14; bne a0, x7, fail
    li gp, 15; li a0, 12; li a1, 10; c.and a0, a1; li x7, 8; bne a0, x7, fail
    li gp, 16; li a0, -0x80000000; li a1, 1; c.subw a0, a1; li x7, 0x7fffffff; bne a0, x7, fail
    li gp, 17; li a0, 0x7fffffff; li a1, 1; c.addw a0, a1; li x7, -0x80000000; bne a0, x7, fail
    li gp, 18; c.j 1f; j fail
1:  li gp, 19; li a0, 0; c.beqz a0, 1f; j fail
1:  li gp, 20; li a0, 1; c.beqz a0, fail; c.bnez a0, 1f; j fail
1:  li gp, 21; li a0, 0; c.bnez a0, fail
    /* quadrant 2 */
    li gp, 22; li a0, 3; c.slli a0, 62; li x7, 0xc000000000000000; bne a0, x7, fail
    li gp, 23; mv s1, sp; mv sp, s0; li a0, -7; c.swsp a0, 16(sp); c.lwsp a4, 16(sp); li x7, -7; bne a4, x7, fail
    li gp, 24; li a0, -0x123456789; c.sdsp a0, 24(sp); c.ldsp a5, 24(sp); bne a5, a0, fail; mv sp, s1
    li gp, 25; la a0, 1f; c.jr a0; j fail
1:  li gp, 26; la a0, 2f; c.jalr a0
1:  j 3f
2:  la x7, 1b; bne ra, x7, fail; ret                 /* c.jalr links pc + 2 */
3:  li gp, 27; li a1, 99; c.mv a0, a1; li x7, 99; bne a0, x7, fail
    li gp, 28; li a0, 1; li a1, 2; c.add a0, a1; li x7, 3; bne a0, x7, fail
    /* HINTs execute as no-ops: c.nop with an immediate, c.li x0, c.slli x0, c.mv x0 */
    li gp, 29; .2byte 0x0005; .2byte 0x4015; .2byte 0x0016; .2byte 0x802e
    /* c.ebreak: mcause 3, mtval = pc */
    li gp, 30; li s2, 0; 1: c.ebreak; li x7, 3; bne s2, x7, fail; la x7, 1b; bne s3, x7, fail
    /* the all-zero parcel is illegal: mtval = the 16 bits (0) */
    li gp, 31; li s2, 0; li s3, -1; .2byte 0x0000; li x7, 2; bne s2, x7, fail; bnez s3, fail
    /* reserved: c.addi16sp 0, c.lwsp rd=0, c.jr x0, c.fld (no D) */
    li gp, 32; li s2, 0; .2byte 0x6101; li x7, 2; bne s2, x7, fail; li x7, 0x6101; bne s3, x7, fail
    li gp, 33; li s2, 0; .2byte 0x4002; li x7, 2; bne s2, x7, fail
    li gp, 34; li s2, 0; .2byte 0x8002; li x7, 2; bne s2, x7, fail
    li gp, 35; li s2, 0; .2byte 0x2000; li x7, 2; bne s2, x7, fail
    /* 4-byte instructions at 2 mod 4 and across an 8-byte word */
    li gp, 36; .balign 8; c.nop; addi a0, x0, 41; c.nop; addi a0, a0, 1; li x7, 42; bne a0, x7, fail
    /* a 4-byte illegal word at 6 mod 8: mtval holds all 32 bits */
    li gp, 37; li s2, 0; .balign 8; c.nop; c.nop; c.nop; .word 0xffffffff; li x7, 2; bne s2, x7, fail
    li x7, 0xffffffff; bne s3, x7, fail
    /* a compressed instruction in writable code is rewritten and the new one runs */
    li gp, 38; la t0, 1f; li t1, 0x4505; sh t1, 0(t0); li a0, 0
1:  c.li a0, 0; li x7, 1; bne a0, x7, fail
    /* mepc bit 0 is always zero, bit 1 is kept */
    li gp, 39; li t0, 7; csrw mepc, t0; csrr t1, mepc; li x7, 6; bne t1, x7, fail
    j pass

handler:
    csrr s2, mcause
    csrr s3, mtval
    csrr t5, mepc
    lhu t6, 0(t5); andi t6, t6, 3; li t4, 3
    addi t5, t5, 2; bne t6, t4, 1f; addi t5, t5, 2       /* skip a 2- or a 4-byte instruction */
1:  csrw mepc, t5
    mret
TEST_END
    .data
    .align 4
scratch: .dword 0, 0, 0, 0, 0, 0
