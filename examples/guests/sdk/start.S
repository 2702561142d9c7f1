# hetflow guest SDK start-up: the emulator enters here with sp at the top
# of RAM, a0 = INPUT_ADDR and a1 = OUTPUT_ADDR (kept for main).
    .section .text.init
    .globl _start
_start:
    .option push
    .option norelax                 # gp is not set yet: this la must not be gp-relative
    la gp, __global_pointer$
    .option pop
    mv s0, a0
    mv s1, a1
    la t0, __bss_start              # clear bss (8-aligned by link.ld)
    la t1, __bss_end
1:  bgeu t0, t1, 2f
    sd zero, 0(t0)
    addi t0, t0, 8
    j 1b
2:  la s2, __init_array_start       # run the constructors, in order
    la s3, __init_array_end
3:  bgeu s2, s3, 4f
    ld t0, 0(s2)
    jalr t0
    addi s2, s2, 8
    j 3b
4:  mv a0, s0
    mv a1, s1
    call main
    call exit                       # main's return value is the exit code
