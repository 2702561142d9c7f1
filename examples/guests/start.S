# C runtime for hetflow guests: sp is set by the emulator (top of RAM),
# a0 = INPUT_ADDR, a1 = OUTPUT_ADDR.  main(input, output) returns the
# exit code, which goes to the exit ecall (a7 = 93).
    .section .text.init
    .globl _start
_start:
    call main
    li a7, 93
    ecall
1:  j 1b
