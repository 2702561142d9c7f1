# A counted loop for benchmarks: 3 steps per iteration, 100,000,000
# iterations (300 M steps) unless the input holds a u64 count.
# Public output 0 is the low word of the sum count + (count-1) + ... + 1.
    .section .text.init
    .globl _start
_start:
    ld t0, 0(a0)            # the input's length
    li a2, 100000000
    beqz t0, 1f
    ld a2, 8(a0)            # the count, from the input
1:  li a3, 0
2:  add a3, a3, a2
    addi a2, a2, -1
    bnez a2, 2b
    sw a3, 0(a1)
    li a0, 0
    li a7, 93
    ecall
