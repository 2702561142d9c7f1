/* hetflow guest SDK: the guest ABI (hetflow.executors.emulator.machine)
   and the small C library in libc.c.  Build with the Makefile beside it. */
#ifndef HETFLOW_SDK_GUEST_H
#define HETFLOW_SDK_GUEST_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define INPUT_ADDR 0x40000000UL
#define OUTPUT_ADDR 0xa0010000UL
#define N_OUTPUTS 64

/* the guest's input: a u64 length at INPUT_ADDR, then the bytes */
static inline uint64_t input_len(void) { return *(volatile uint64_t *)INPUT_ADDR; }
static inline const uint8_t *input_bytes(void) { return (const uint8_t *)(INPUT_ADDR + 8); }
/* public output i (< 64): the u32 at OUTPUT_ADDR + 4 i */
static inline void set_output(int i, uint32_t v) { ((volatile uint32_t *)OUTPUT_ADDR)[i] = v; }

/* the write ecall (a7 = 64): fd 1 or 2; returns len, -9 (EBADF) or -14 (EFAULT) */
long sys_write(int fd, const void *buf, size_t n);
void exit(int code) __attribute__((noreturn));
void abort(void) __attribute__((noreturn));

void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, size_t n);
char *strchr(const char *s, int c);
char *strcpy(char *dst, const char *src);

/* printf family over the write call: %d %i %u %x %X %o %s %c %p %%, the
   length modifiers l, ll, z, and flags '-' '0' with a width (or '*') */
int vsnprintf(char *buf, size_t size, const char *fmt, va_list ap);
int snprintf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int sprintf(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int vprintf(const char *fmt, va_list ap);
int printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int puts(const char *s);
int putchar(int c);

/* the heap: sbrk between __heap_start and __heap_end (see link.ld) */
void *sbrk(ptrdiff_t increment);
void *malloc(size_t n);
void free(void *p);
void *calloc(size_t count, size_t size);
void *realloc(void *p, size_t n);

void __assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define assert(e) ((e) ? (void)0 : __assert_fail(#e, __FILE__, __LINE__))
#endif
