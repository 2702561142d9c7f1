#include "isa_test.h"
TEST_BEGIN
    la s0, buf
    li t0, 0x8877665544332211; sd t0, 0(s0); li t0, 0xfffefdfcfbfaf9f8; sd t0, 8(s0)
    li gp, 1; lb x14, 7(s0); li x7, 0xffffffffffffff88; bne x14, x7, fail
    li gp, 2; lbu x14, 7(s0); li x7, 0x88; bne x14, x7, fail
    li gp, 3; lh x14, 6(s0); li x7, 0xffffffffffff8877; bne x14, x7, fail
    li gp, 4; lhu x14, 6(s0); li x7, 0x8877; bne x14, x7, fail
    li gp, 5; lw x14, 4(s0); li x7, 0xffffffff88776655; bne x14, x7, fail
    li gp, 6; lwu x14, 4(s0); li x7, 0x88776655; bne x14, x7, fail
    li gp, 7; ld x14, 0(s0); li x7, 0x8877665544332211; bne x14, x7, fail
    /* misaligned loads, inside one word and across two */
    li gp, 8; lw x14, 1(s0); li x7, 0x55443322; bne x14, x7, fail
    li gp, 9; ld x14, 3(s0); li x7, 0xfaf9f88877665544; bne x14, x7, fail
    li gp, 10; lh x14, 7(s0); li x7, 0xfffffffffffff888; bne x14, x7, fail
    li gp, 11; lwu x14, 6(s0); li x7, 0xf9f88877; bne x14, x7, fail
    /* stores of each width, aligned and misaligned */
    li gp, 12; li t0, 0xa1; sb t0, 16(s0); lbu x14, 16(s0); li x7, 0xa1; bne x14, x7, fail
    li gp, 13; li t0, 0xb2c3; sh t0, 17(s0); lhu x14, 17(s0); li x7, 0xb2c3; bne x14, x7, fail
    li gp, 14; li t0, 0x0102030405060708; sd t0, 21(s0); ld x14, 21(s0); bne x14, t0, fail
    li gp, 15; li t0, 0xdeadbeef; sw t0, 30(s0); lwu x14, 30(s0); bne x14, t0, fail
    li gp, 16; lbu x14, 16(s0); li x7, 0xa1; bne x14, x7, fail      /* neighbours untouched */
    li gp, 17; lbu x14, 20(s0); bnez x14, fail
    /* load into x0 is discarded */
    li gp, 18; ld x0, 0(s0); bnez x0, fail
    /* stack (RAM) access */
    li gp, 19; li t0, 77; addi sp, sp, -16; sd t0, 8(sp); ld x14, 8(sp); addi sp, sp, 16; bne x14, t0, fail
TEST_END
    .data
    .align 4
buf: .space 64
