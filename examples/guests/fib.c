/* Fibonacci: n from the first input byte (default 90); fib(n) mod 2^64
   as outputs 0 (low u32) and 1 (high u32). */
#include "guest.h"

int main(void) {
    u64 n = input_len() ? input_bytes()[0] : 90;
    u64 a = 0, b = 1;
    for (u64 i = 0; i < n; i++) { u64 t = a + b; a = b; b = t; }
    set_output(0, (u32)a);
    set_output(1, (u32)(a >> 32));
    set_output(2, (u32)n);
    puts_("fib done\n");
    return 0;
}
