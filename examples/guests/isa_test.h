/* Minimal ISA-test convention (after riscv-tests): gp holds the test
   number; pass writes 1 to tohost, failure of test n writes (n<<1)|1. */
#define TEST_RR(n, inst, res, v1, v2) \
    li gp, n; li x1, v1; li x2, v2; inst x14, x1, x2; li x7, res; bne x14, x7, fail;
#define TEST_IMM(n, inst, res, v1, imm) \
    li gp, n; li x1, v1; inst x14, x1, imm; li x7, res; bne x14, x7, fail;
#define TEST_EQ(n, reg, res) \
    li gp, n; li x7, res; bne reg, x7, fail;

#define TEST_BEGIN \
    .section .text.init; .globl _start; _start: la sp, stack_top;

#define TEST_END \
pass: li t0, 1; la t1, tohost; sw t0, 0(t1); 1: j 1b; \
fail: slli gp, gp, 1; ori gp, gp, 1; la t1, tohost; sw gp, 0(t1); 2: j 2b; \
    .section .tohost, "aw"; .align 6; .globl tohost; tohost: .dword 0; .globl fromhost; fromhost: .dword 0; \
    .section .bss; .align 4; .space 1024; stack_top:;
