#include "isa_test.h"
#define AMO(n, inst, init, src, old_expect, new_expect) \
    li gp, n; li t0, init; sd t0, 0(s0); li t1, src; inst x14, t1, (s0); li x7, old_expect; bne x14, x7, fail; \
    ld x15, 0(s0); li x7, new_expect; bne x15, x7, fail;
TEST_BEGIN
    la s0, word
    AMO(1, amoswap.d, 5, 7, 5, 7)
    AMO(2, amoadd.d, 5, -7, 5, -2)
    AMO(3, amoxor.d, 0xff, 0x0f, 0xff, 0xf0)
    AMO(4, amoand.d, 0xff, 0x0f, 0xff, 0x0f)
    AMO(5, amoor.d, 0xf0, 0x0f, 0xf0, 0xff)
    AMO(6, amomin.d, -1, 1, -1, -1)
    AMO(7, amomax.d, -1, 1, -1, 1)
    AMO(8, amominu.d, -1, 1, -1, 1)
    AMO(9, amomaxu.d, -1, 1, -1, -1)
    /* word forms: sign-extended old value, upper word untouched */
    AMO(10, amoswap.w, 0x1111111180000000, 7, 0xffffffff80000000, 0x1111111100000007)
    AMO(11, amoadd.w, 0x22222222ffffffff, 1, 0xffffffffffffffff, 0x2222222200000000)
    AMO(12, amoxor.w, 0x0f, 0xff, 0x0f, 0xf0)
    AMO(13, amoand.w, 0xf0, 0xff, 0xf0, 0xf0)
    AMO(14, amoor.w, 0xf0, 0x0f, 0xf0, 0xff)
    AMO(15, amomin.w, 0x80000000, 1, 0xffffffff80000000, 0x80000000)
    AMO(16, amomax.w, 0x80000000, 1, 0xffffffff80000000, 1)
    AMO(17, amominu.w, 0x80000000, 1, 0xffffffff80000000, 1)
    AMO(18, amomaxu.w, 0x80000000, 1, 0xffffffff80000000, 0x80000000)
    /* LR/SC: success, then failure without a reservation */
    li gp, 19; li t0, 40; sd t0, 0(s0); lr.d x14, (s0); addi x14, x14, 2; sc.d x15, x14, (s0); bnez x15, fail
    ld x14, 0(s0); li x7, 42; bne x14, x7, fail
    li gp, 20; li t1, 99; sc.d x15, t1, (s0); beqz x15, fail; ld x14, 0(s0); li x7, 42; bne x14, x7, fail
    li gp, 21; lr.w x14, (s0); li t1, -5; sc.w x15, t1, (s0); bnez x15, fail; lw x14, 0(s0); li x7, -5; bne x14, x7, fail
    /* a reservation at another address does not let sc succeed */
    li gp, 22; addi s1, s0, 8; lr.d x14, (s1); sc.d x15, t1, (s0); beqz x15, fail
    /* a trap-free retry loop, as compilers emit for atomic increments */
    li gp, 23; sd zero, 0(s0); li t2, 10
7:  lr.d t0, (s0); addi t0, t0, 1; sc.d t1, t0, (s0); bnez t1, 7b; addi t2, t2, -1; bnez t2, 7b
    ld x14, 0(s0); li x7, 10; bne x14, x7, fail
TEST_END
    .data
    .align 4
word: .dword 0, 0
