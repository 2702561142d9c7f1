# Stores into its own read-only code segment with no trap handler:
# the run fails with a store access fault.
    .section .text.init
    .globl _start
_start:
    la t0, _start
    sw zero, 0(t0)
    li a7, 93
    ecall
