#include "isa_test.h"
TEST_BEGIN
    TEST_RR(1, add, 0, 0, 0)
    TEST_RR(2, add, 0x8000000000000000, 0x7fffffffffffffff, 1)
    TEST_RR(3, sub, 0xffffffffffffffff, 0, 1)
    TEST_RR(4, sll, 0x8000000000000000, 1, 63)
    TEST_RR(5, sll, 2, 1, 65)                  /* only the low 6 bits of rs2 */
    TEST_RR(6, srl, 1, 0x8000000000000000, 63)
    TEST_RR(7, sra, 0xffffffffffffffff, 0x8000000000000000, 63)
    TEST_RR(8, slt, 1, -1, 0)
    TEST_RR(9, sltu, 0, -1, 0)
    TEST_RR(10, xor, 0xff00ff00ff00ff00, 0x0ff00ff00ff00ff0, 0xf0f0f0f0f0f0f0f0)
    TEST_RR(11, or, 0xfff0fff0fff0fff0, 0x0ff00ff00ff00ff0, 0xf0f0f0f0f0f0f0f0)
    TEST_RR(12, and, 0x00f000f000f000f0, 0x0ff00ff00ff00ff0, 0xf0f0f0f0f0f0f0f0)
    TEST_IMM(13, addi, 0xfffffffffffff800, 0, -2048)
    TEST_IMM(14, slti, 1, -5, 3)
    TEST_IMM(15, sltiu, 1, 5, -1)              /* the immediate is sign-extended, then unsigned */
    TEST_IMM(16, xori, 0xffffffffffffff0f, 0xf0, -1)
    TEST_IMM(17, ori, 0x7ff, 0x0ff, 0x700)
    TEST_IMM(18, andi, 0xf0, 0xff0, 0x0ff)
    TEST_IMM(19, slli, 0x8000000000000000, 1, 63)
    TEST_IMM(20, srli, 1, 0x8000000000000000, 63)
    TEST_IMM(21, srai, 0xfffffffffffffffe, 0x8000000000000000, 62)
    /* word forms: low 32 bits, sign-extended result */
    TEST_RR(22, addw, 0xffffffff80000000, 0x7fffffff, 1)
    TEST_RR(23, subw, 0x7fffffff, 0xffffffff80000000, 1)
    TEST_RR(24, sllw, 0xffffffff80000000, 1, 31)
    TEST_RR(25, sllw, 2, 1, 33)                /* low 5 bits */
    TEST_RR(26, srlw, 0x1, 0xffffffff80000000, 31)
    TEST_RR(27, srlw, 0xffffffff80000000, 0x80000000, 0)
    TEST_RR(28, sraw, 0xffffffffffffffff, 0x80000000, 31)
    TEST_IMM(29, addiw, 0xffffffff80000000, 0x7fffffff, 1)
    TEST_IMM(30, slliw, 0xffffffff80000000, 1, 31)
    TEST_IMM(31, srliw, 1, 0x80000000, 31)
    TEST_IMM(32, sraiw, 0xffffffffffffffff, 0x80000000, 31)
    TEST_IMM(33, srliw, 0xffffffff80000000, 0x123456780000000, 0)
    /* x0 stays zero */
    li gp, 34; li x1, 5; add x0, x1, x1; bne x0, zero, fail; addi x0, x0, 1; bnez x0, fail
    /* lui / auipc */
    li gp, 35; lui x14, 0x80000; li x7, 0xffffffff80000000; bne x14, x7, fail
    li gp, 36; 3: auipc x14, 0; la x7, 3b; bne x14, x7, fail
    /* branches */
    li gp, 37; li x1, -1; li x2, 1; blt x2, x1, fail; bgeu x2, x1, fail; bltu x1, x2, fail; bge x1, x2, fail
    li gp, 38; beq x1, x2, fail; bne x1, x1, fail
    /* jal / jalr: link register and target (jalr clears bit 0) */
    li gp, 39; jal x5, 4f; j fail
4:  la x7, 4b; addi x7, x7, -4; bne x5, x7, fail
    li gp, 40; la x6, 5f; addi x6, x6, 1; jalr x5, 0(x6); j fail
5:  li gp, 41; la x6, 6f; jalr x6, 0(x6)            /* rd == rs1 */
6:  la x7, 6b; bne x6, x7, fail
TEST_END
