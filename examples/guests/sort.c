/* Sorts N pseudo-random u64 (xorshift, seeded from the input when given)
   with a heap sort; outputs: 0 = 1 if sorted, 1/2 = checksum lo/hi,
   3/4 = minimum lo/hi. */
#include "guest.h"
#define N 2000
static u64 a[N];

static void sift(u64 *v, long start, long end) {
    long root = start;
    while (2 * root + 1 <= end) {
        long child = 2 * root + 1;
        if (child + 1 <= end && v[child] < v[child + 1]) child++;
        if (v[root] < v[child]) { u64 t = v[root]; v[root] = v[child]; v[child] = t; root = child; }
        else return;
    }
}

int main(void) {
    u64 x = 88172645463325252UL;
    for (u64 i = 0; i < input_len(); i++) x = x * 31 + input_bytes()[i];
    u64 sum = 0;
    for (long i = 0; i < N; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; a[i] = x; sum += x * (u64)(i + 1); }
    for (long s = (N - 2) / 2; s >= 0; s--) sift(a, s, N - 1);
    for (long e = N - 1; e > 0; e--) { u64 t = a[0]; a[0] = a[e]; a[e] = t; sift(a, 0, e - 1); }
    int ok = 1;
    u64 check = 0;
    for (long i = 0; i < N; i++) { if (i && a[i - 1] > a[i]) ok = 0; check = check * 1000003 + a[i]; }
    set_output(0, ok);
    set_output(1, (u32)check); set_output(2, (u32)(check >> 32));
    set_output(3, (u32)a[0]); set_output(4, (u32)(a[0] >> 32));
    (void)sum;
    return ok ? 0 : 1;
}
