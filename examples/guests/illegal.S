# An illegal instruction with no trap handler.
    .section .text.init
    .globl _start
_start:
    nop
    .word 0
