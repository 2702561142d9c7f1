/* Soft-float ABI, hardware float code: its e_flags are those of an
 * rv64imac program, only its RISC-V attributes (rv64...f...d...) say it
 * needs F and D, which the emulator refuses at load.  Built from here,
 * with examples/guests' start.S and link.ld, by zig cc 0.17:
 *   zig cc -target riscv64-freestanding-none -mcpu=generic_rv64+m+a+c+f+d+zicsr
 *     -mabi=lp64 -mcmodel=medany -O2 -g0 -ffreestanding -nostdlib -static
 *     -fno-sanitize=undefined -T ../../../examples/guests/link.ld
 *     ../../../examples/guests/start.S float_lp64.c -o float_lp64.elf
 * (riscv64-unknown-elf-gcc -march=rv64imafdc_zicsr_zifencei -mabi=lp64 makes
 * the same kind of file). */

int main(void) {
    volatile double x = 1.5, s = 0;
    for (int i = 1; i < 20; i++)
        s += x / i;
    return (int)(s * 10) & 0x7f;
}
