#include "isa_test.h"
TEST_BEGIN
    TEST_RR(1, mul, 0x0000000000000001, -1, -1)
    TEST_RR(2, mul, 0x8000000000000000, 0x4000000000000000, 2)
    TEST_RR(3, mulh, 0xffffffffffffffff, -1, 1)
    TEST_RR(4, mulh, 0x4000000000000000, 0x8000000000000000, 0x8000000000000000)
    TEST_RR(5, mulhu, 0xfffffffffffffffe, -1, -1)
    TEST_RR(6, mulhsu, 0xffffffffffffffff, -1, -1)
    TEST_RR(7, mulhsu, 0x7ffffffffffffffe, 0x7fffffffffffffff, -1)
    TEST_RR(8, div, -3, 7, -2)                 /* rounds towards zero */
    TEST_RR(9, div, 0xffffffffffffffff, 7, 0)  /* division by zero: all bits set */
    TEST_RR(10, div, 0x8000000000000000, 0x8000000000000000, -1)  /* overflow: the dividend */
    TEST_RR(11, rem, 1, 7, -2)                 /* sign of the dividend */
    TEST_RR(12, rem, -1, -7, 2)
    TEST_RR(13, rem, 7, 7, 0)                  /* remainder of x/0 is x */
    TEST_RR(14, rem, 0, 0x8000000000000000, -1)
    TEST_RR(15, divu, 0x7fffffffffffffff, -1, 2)
    TEST_RR(16, divu, 0xffffffffffffffff, 5, 0)
    TEST_RR(17, remu, 1, -1, 2)
    TEST_RR(18, remu, 5, 5, 0)
    TEST_RR(19, mulw, 0xffffffff80000000, 0x40000000, 2)
    TEST_RR(20, divw, 0xffffffff80000000, 0x80000000, -1)          /* INT32_MIN / -1 */
    TEST_RR(21, divw, 0xffffffffffffffff, 5, 0)
    TEST_RR(22, divuw, 0x7fffffff, 0xffffffff, 2)
    TEST_RR(23, divuw, 0xffffffffffffffff, 5, 0)
    TEST_RR(24, remw, 0, 0x80000000, -1)
    TEST_RR(25, remw, 5, 0x100000005, 0)       /* x/0: the dividend, as a sign-extended word */
    TEST_RR(26, remuw, 1, 0xffffffff, 2)
    TEST_RR(27, remuw, 0xffffffff80000000, 0x80000000, 0)
    TEST_RR(28, div, 0, 0, 0x8000000000000000)
TEST_END
