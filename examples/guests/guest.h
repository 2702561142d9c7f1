/* hetflow guest ABI (see hetflow.executors.emulator.machine). */
#ifndef HETFLOW_GUEST_H
#define HETFLOW_GUEST_H
typedef unsigned long u64;
typedef unsigned int u32;
typedef unsigned char u8;
#define INPUT_ADDR 0x40000000UL
#define OUTPUT_ADDR 0xa0010000UL

static inline u64 input_len(void) { return *(volatile u64 *)INPUT_ADDR; }
static inline const u8 *input_bytes(void) { return (const u8 *)(INPUT_ADDR + 8); }
static inline void set_output(int i, u32 v) { ((volatile u32 *)OUTPUT_ADDR)[i] = v; }

static inline long sys_write(int fd, const void *buf, u64 n) {
    register long a0 asm("a0") = fd;
    register long a1 asm("a1") = (long)buf;
    register long a2 asm("a2") = (long)n;
    register long a7 asm("a7") = 64;
    asm volatile("ecall" : "+r"(a0) : "r"(a1), "r"(a2), "r"(a7) : "memory");
    return a0;
}
static inline u64 strlen_(const char *s) { u64 n = 0; while (s[n]) n++; return n; }
static inline void puts_(const char *s) { sys_write(1, s, strlen_(s)); }
#endif
