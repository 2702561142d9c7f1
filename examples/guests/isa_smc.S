#include "isa_test.h"
/* Self-modifying code: rewrite an instruction, fence.i, execute it. */
TEST_BEGIN
    li gp, 1
    li a0, 0
    la t0, patch
    lw t1, 0(t0)                      /* addi a0, a0, 1 */
    la t2, newinsn
    lw t2, 0(t2)                      /* addi a0, a0, 5 */
    jal ra, patch                     /* a0 = 1 */
    sw t2, 0(t0)
    fence.i
    jal ra, patch                     /* a0 = 6 */
    li x7, 6; bne a0, x7, fail
    /* patch a loop body 100 times, each time adding its index */
    li gp, 2; li a0, 0; li s1, 0; li s2, 100
    la t0, patch
    lui t3, 0x00100                   /* rs1/imm field step: imm += 1 */
8:  lw t1, 0(t0); add t1, t1, t3; sw t1, 0(t0); fence.i; jal ra, patch; addi s1, s1, 1; blt s1, s2, 8b
    /* patch immediate went 5..105: sum = 5*100 + 100*101/2 + ... compute in-register check */
    li x7, 5550; bne a0, x7, fail
    j pass
patch:
    addi a0, a0, 1
    ret
newinsn:
    addi a0, a0, 5
TEST_END
