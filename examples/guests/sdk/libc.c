/* The hetflow guest SDK's C library: small, freestanding, written for the
   emulator's guest ABI (guest.h). */
#include "guest.h"

long sys_write(int fd, const void *buf, size_t n) {
    register long a0 asm("a0") = fd;
    register long a1 asm("a1") = (long)buf;
    register long a2 asm("a2") = (long)n;
    register long a7 asm("a7") = 64;
    asm volatile("ecall" : "+r"(a0) : "r"(a1), "r"(a2), "r"(a7) : "memory");
    return a0;
}

void exit(int code) {
    register long a0 asm("a0") = code;
    register long a7 asm("a7") = 93;
    asm volatile("ecall" : : "r"(a0), "r"(a7) : "memory");
    for (;;) {}
}

void abort(void) { exit(134); }   /* 128 + SIGABRT, as a shell reports it */

void __assert_fail(const char *expr, const char *file, int line) {
    printf("%s:%d: assertion failed: %s\n", file, line, expr);
    abort();
}

/* ---- memory and strings (gcc may emit calls to the mem* ones itself) */

void *memcpy(void *dst, const void *src, size_t n) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    if ((((uintptr_t)d | (uintptr_t)s) & 7) == 0) {
        for (; n >= 8; n -= 8, d += 8, s += 8) *(uint64_t *)d = *(const uint64_t *)s;
    }
    while (n--) *d++ = *s++;
    return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    if (d <= s || d >= s + n) return memcpy(dst, src, n);
    while (n--) d[n] = s[n];          /* overlapping with dst above src: copy backwards */
    return dst;
}

void *memset(void *dst, int c, size_t n) {
    uint8_t *d = dst;
    while (n--) *d++ = (uint8_t)c;
    return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    for (; n; n--, x++, y++)
        if (*x != *y) return *x - *y;
    return 0;
}

size_t strlen(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

int strcmp(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return (uint8_t)*a - (uint8_t)*b;
}

int strncmp(const char *a, const char *b, size_t n) {
    for (; n; n--, a++, b++)
        if (*a != *b || !*a) return (uint8_t)*a - (uint8_t)*b;
    return 0;
}

char *strchr(const char *s, int c) {
    for (;; s++) {
        if (*s == (char)c) return (char *)s;
        if (!*s) return NULL;
    }
}

char *strcpy(char *dst, const char *src) {
    char *d = dst;
    while ((*d++ = *src++)) {}
    return dst;
}

/* ---- printf */

struct out { char *buf; size_t size, len; };

static void emit(struct out *o, char c) {
    if (o->len + 1 < o->size) o->buf[o->len] = c;
    o->len++;
}

static void emit_padded(struct out *o, const char *s, size_t n, int width, int left, char pad) {
    int fill = width > (int)n ? width - (int)n : 0;
    /* zero padding goes after a sign */
    if (pad == '0' && n && (*s == '-')) { emit(o, *s++); n--; }
    if (!left) while (fill--) emit(o, pad);
    while (n--) emit(o, *s++);
    if (left) while (fill-- > 0) emit(o, ' ');
}

static size_t utoa(char *end, unsigned long long v, unsigned base, int upper) {
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    size_t n = 0;
    do { *--end = digits[v % base]; v /= base; n++; } while (v);
    return n;
}

int vsnprintf(char *buf, size_t size, const char *fmt, va_list ap) {
    struct out o = {buf, size, 0};
    char tmp[24];
    for (; *fmt; fmt++) {
        if (*fmt != '%') { emit(&o, *fmt); continue; }
        int left = 0, width = 0, lng = 0, size_t_ = 0;
        char pad = ' ';
        for (fmt++; *fmt == '-' || *fmt == '0'; fmt++) {
            if (*fmt == '-') left = 1; else pad = '0';
        }
        if (*fmt == '*') { width = va_arg(ap, int); fmt++; if (width < 0) left = 1, width = -width; }
        for (; *fmt >= '0' && *fmt <= '9'; fmt++) width = width * 10 + (*fmt - '0');
        for (; *fmt == 'l'; fmt++) lng++;
        if (*fmt == 'z') { size_t_ = 1; fmt++; }
        if (left) pad = ' ';
        char *end = tmp + sizeof tmp;
        size_t n;
        switch (*fmt) {
        case 'd': case 'i': {
            long long v = size_t_ ? (long long)va_arg(ap, ptrdiff_t) : lng >= 2 ? va_arg(ap, long long)
                          : lng ? va_arg(ap, long) : va_arg(ap, int);
            unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
            n = utoa(end, u, 10, 0);
            if (v < 0) { *(end - n - 1) = '-'; n++; }
            emit_padded(&o, end - n, n, width, left, pad);
            break;
        }
        case 'u': case 'x': case 'X': case 'o': {
            unsigned long long v = size_t_ ? va_arg(ap, size_t) : lng >= 2 ? va_arg(ap, unsigned long long)
                                   : lng ? va_arg(ap, unsigned long) : va_arg(ap, unsigned);
            unsigned base = *fmt == 'u' ? 10 : *fmt == 'o' ? 8 : 16;
            n = utoa(end, v, base, *fmt == 'X');
            emit_padded(&o, end - n, n, width, left, pad);
            break;
        }
        case 'p': {
            n = utoa(end, (uintptr_t)va_arg(ap, void *), 16, 0);
            *(end - n - 1) = 'x'; *(end - n - 2) = '0'; n += 2;
            emit_padded(&o, end - n, n, width, left, ' ');
            break;
        }
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            emit_padded(&o, s, strlen(s), width, left, ' ');
            break;
        }
        case 'c': tmp[0] = (char)va_arg(ap, int); emit_padded(&o, tmp, 1, width, left, ' '); break;
        case '%': emit(&o, '%'); break;
        case '\0': fmt--; break;
        default: emit(&o, '%'); emit(&o, *fmt); break;
        }
    }
    if (size) buf[o.len < size ? o.len : size - 1] = '\0';
    return (int)o.len;
}

int snprintf(char *buf, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return n;
}

int sprintf(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, (size_t)-1 >> 1, fmt, ap);
    va_end(ap);
    return n;
}

int vprintf(const char *fmt, va_list ap) {
    char small[256];
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < (int)sizeof small) {
        sys_write(1, small, (size_t)n);
    } else {                                  /* longer than the buffer: format once more on the heap */
        char *big = malloc((size_t)n + 1);
        if (big) { vsnprintf(big, (size_t)n + 1, fmt, again); sys_write(1, big, (size_t)n); free(big); }
    }
    va_end(again);
    return n;
}

int printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vprintf(fmt, ap);
    va_end(ap);
    return n;
}

int putchar(int c) { char ch = (char)c; sys_write(1, &ch, 1); return (uint8_t)c; }
int puts(const char *s) { sys_write(1, s, strlen(s)); sys_write(1, "\n", 1); return 0; }

/* ---- the heap: first-fit over a free list, blocks carved from sbrk */

extern char __heap_start[], __heap_end[];
static char *brk_ = __heap_start;

void *sbrk(ptrdiff_t increment) {
    char *old = brk_;
    if (increment > __heap_end - brk_ || increment < __heap_start - brk_) return (void *)-1;
    brk_ += increment;
    return old;
}

struct block { size_t size; struct block *next; };   /* size: bytes after the header */
#define HDR sizeof(struct block)
static struct block *free_list;

void *malloc(size_t n) {
    if (n == 0) n = 1;
    if (n > (size_t)(__heap_end - __heap_start)) return NULL;
    n = (n + 15) & ~(size_t)15;
    for (struct block **p = &free_list; *p; p = &(*p)->next) {
        struct block *b = *p;
        if (b->size >= n) {
            if (b->size >= n + HDR + 16) {          /* split: the tail stays free */
                struct block *rest = (struct block *)((char *)(b + 1) + n);
                rest->size = b->size - n - HDR;
                rest->next = b->next;
                b->size = n;
                *p = rest;
            } else {
                *p = b->next;
            }
            return b + 1;
        }
    }
    struct block *b = sbrk((ptrdiff_t)(n + HDR));
    if (b == (void *)-1) return NULL;
    b->size = n;
    return b + 1;
}

void free(void *p) {
    if (!p) return;
    struct block *b = (struct block *)p - 1;
    /* keep the list in address order and merge neighbours, so freed space is reused whole */
    struct block **q = &free_list;
    while (*q && *q < b) q = &(*q)->next;
    b->next = *q;
    *q = b;
    if (b->next && (char *)(b + 1) + b->size == (char *)b->next) {
        b->size += HDR + b->next->size;
        b->next = b->next->next;
    }
    if (q != &free_list) {
        struct block *prev = (struct block *)((char *)q - offsetof(struct block, next));
        if ((char *)(prev + 1) + prev->size == (char *)b) {
            prev->size += HDR + b->size;
            prev->next = b->next;
        }
    }
}

void *calloc(size_t count, size_t size) {
    if (size && count > (size_t)-1 / size) return NULL;
    void *p = malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

void *realloc(void *p, size_t n) {
    if (!p) return malloc(n);
    if (n == 0) { free(p); return NULL; }
    struct block *b = (struct block *)p - 1;
    if (b->size >= n) return p;
    void *q = malloc(n);
    if (q) { memcpy(q, p, b->size); free(p); }
    return q;
}
