/* The SDK's example guest: printf, the heap, a constructor, 64- and
   128-bit division (libgcc's __udivti3).  Public outputs: [0] the number
   of list nodes summed, [1..2] a 128-bit quotient's low 64 bits. */
#include "guest.h"

static int ready;
__attribute__((constructor)) static void init(void) { ready = 42; }

struct node { uint64_t value; struct node *next; };

int main(void) {
    assert(ready == 42);
    struct node *head = NULL;
    for (uint64_t i = 1; i <= 100; i++) {
        struct node *n = malloc(sizeof *n);
        assert(n != NULL);
        n->value = i * i;
        n->next = head;
        head = n;
    }
    uint64_t sum = 0, count = 0;
    while (head) {
        struct node *next = head->next;
        sum += head->value;
        count++;
        free(head);
        head = next;
    }
    char *s = calloc(64, 1);
    s = realloc(s, 4096);
    snprintf(s, 4096, "%s", "heap ok");

    volatile uint64_t big = 0xFFFFFFFFFFFFFFFFULL, seven = 7;
    volatile __int128 wide = ((__int128)big << 20) + 12345;
    unsigned __int128 q = (unsigned __int128)wide / (unsigned __int128)seven;
    printf("sum of squares 1..%lu = %lu, %s\n", (unsigned long)count, (unsigned long)sum, s);
    printf("64-bit: %llu / %llu = %llu rem %llu\n", (unsigned long long)big, (unsigned long long)seven,
           (unsigned long long)(big / seven), (unsigned long long)(big % seven));
    printf("128-bit: high 0x%lx low 0x%016lx\n", (unsigned long)(q >> 64), (unsigned long)q);
    printf("[%5d] [%-5d] [%05d] [%x] [%X] [%c] [%zu] [%lld] [%s]\n", 42, -7, -42, 0xbeef, 0xbeef, 'z',
           sizeof(struct node), -9000000000LL, "str");
    printf("pointer %p\n", (void *)s);
    set_output(0, (uint32_t)count);
    set_output(1, (uint32_t)q);
    set_output(2, (uint32_t)(q >> 32));
    free(s);
    return sum == 338350 ? 0 : 1;
}
