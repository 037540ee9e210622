/* Coroutines on pooled stacks, the way QEMU pools them.
 *
 * QEMU keeps whole coroutine objects (control block, guarded stack, saved
 * context) in a pool, takes one per request, and returns it on whichever
 * thread the coroutine ends. Here a tidepool object pool holds the
 * coroutines; its create callback takes a guarded stack from a tidepool
 * stack pool, and its destroy callback gives the stack back. Many short
 * coroutines run; a handful of coroutine objects and stacks serve them all.
 *
 *   coroutines run N     run N coroutines (nested two deep), check reuse
 *   coroutines overflow  recurse on a pooled stack until the guard page
 *                        stops it: the process dies by SIGSEGV instead of
 *                        overwriting the memory below the stack
 *
 * Build (tidepool installed by bin/c-install.sh, PKG_CONFIG_PATH set):
 *   cc -std=c11 -Wall -Wextra coroutines.c \
 *      $(pkg-config --cflags --libs tidepool) -o coroutines
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "tidepool.h"

#define STACK_SIZE (64 * 1024)

#define TRY(call)                                                                         \
    do {                                                                                  \
        tidepool_status st_ = (call);                                                     \
        if (st_ != TIDEPOOL_OK) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
                    tidepool_last_error());                                               \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

typedef void coroutine_fn(void *arg);

typedef struct coroutine {
    ucontext_t ctx;      /* the coroutine's registers while it is suspended */
    ucontext_t *caller;  /* where `yield` and the end of `entry` go */
    tidepool_stack stack;
    coroutine_fn *entry;
    void *arg;
    int done;
} coroutine;

static tidepool_pool *stacks;     /* guarded stacks */
static tidepool_pool *coroutines; /* whole coroutine objects */
static __thread coroutine *current;
static long made, unmade;

/* --- the pool's callbacks: make and unmake a whole coroutine ------------ */

static int coroutine_create(void *ctx, void **out) {
    (void)ctx;
    coroutine *co = calloc(1, sizeof *co);
    if (!co)
        return 12; /* ENOMEM */
    /* Callbacks may call tidepool: the stack comes from the stack pool. */
    if (tidepool_stack_get(stacks, &co->stack) != TIDEPOOL_OK) {
        free(co);
        return 1;
    }
    made++;
    *out = co;
    return 0;
}

static void coroutine_destroy(void *ctx, void *obj) {
    (void)ctx;
    coroutine *co = obj;
    TRY(tidepool_stack_put(stacks, &co->stack));
    free(co);
    unmade++;
}

/* --- a minimal coroutine API on ucontext --------------------------------- */

static void trampoline(void) {
    coroutine *co = current;
    co->entry(co->arg);
    co->done = 1;
    /* Never return (uc_link is read once, by makecontext): switch back to
     * whoever entered us last. */
    setcontext(co->caller);
    abort();
}

static coroutine *coroutine_new(coroutine_fn *entry, void *arg) {
    void *obj;
    TRY(tidepool_obj_get(coroutines, 0, &obj));
    coroutine *co = obj;
    co->entry = entry;
    co->arg = arg;
    co->done = 0;
    if (getcontext(&co->ctx) != 0)
        abort();
    co->ctx.uc_stack.ss_sp = co->stack.base;
    co->ctx.uc_stack.ss_size = co->stack.size;
    co->ctx.uc_link = NULL; /* the trampoline never returns */
    makecontext(&co->ctx, trampoline, 0);
    return co;
}

/* Runs `co` until it yields or ends; returns 1 if it ended (and is back in
 * the pool). */
static int coroutine_enter(coroutine *co) {
    ucontext_t here;
    coroutine *outer = current;
    co->caller = &here;
    current = co;
    if (swapcontext(&here, &co->ctx) != 0)
        abort();
    current = outer;
    if (co->done) {
        TRY(tidepool_obj_put(coroutines, co)); /* to this thread's cache */
        return 1;
    }
    return 0;
}

static void coroutine_yield(void) {
    coroutine *co = current;
    if (swapcontext(&co->ctx, co->caller) != 0)
        abort();
}

/* --- run: many short coroutines, nested ---------------------------------- */

static long sum;

static void leaf(void *arg) {
    volatile char scratch[512]; /* use the stack a little */
    memset((char *)scratch, (int)(long)arg, sizeof scratch);
    sum += scratch[7];
    coroutine_yield();
    sum += 1;
}

static void parent(void *arg) {
    coroutine *child = coroutine_new(leaf, arg);
    coroutine_enter(child); /* runs to its yield */
    coroutine_yield();
    if (!coroutine_enter(child)) /* runs to its end */
        abort();
}

static int run(long n) {
    for (long i = 0; i < n; i++) {
        coroutine *co = coroutine_new(parent, (void *)(i & 0x3f));
        if (coroutine_enter(co))
            abort(); /* it yielded first */
        if (!coroutine_enter(co))
            abort();
    }
    tidepool_stats s = {.size = sizeof s};
    TRY(tidepool_pool_stats(stacks, &s));
    printf("%ld coroutines ran on %llu stacks (%llu mapped, %llu VMAs); "
           "%ld coroutine objects made\n",
           2 * n, (unsigned long long)s.created, (unsigned long long)s.mapped,
           (unsigned long long)s.vmas, made);
    long expected = 0;
    for (long i = 0; i < n; i++)
        expected += (i & 0x3f) + 1;
    /* Two coroutines are alive at once, so two objects (and stacks) do. */
    int ok = sum == expected && made == 2 && s.created == 2 && s.live == 2;
    TRY(tidepool_pool_destroy(coroutines)); /* gives the stacks back */
    TRY(tidepool_pool_stats(stacks, &s));
    ok = ok && unmade == made && s.live == 0;
    TRY(tidepool_pool_destroy(stacks));
    if (!ok) {
        fprintf(stderr, "unexpected: sum %ld (want %ld), made %ld, unmade %ld\n", sum,
                expected, made, unmade);
        return 1;
    }
    printf("ok run\n");
    return 0;
}

/* --- overflow: the guard page stops a runaway recursion ------------------ */

/* Far deeper than any stack here: the guard page ends it first. */
static volatile long max_depth = 1L << 40;

static long depth(long n) {
    volatile char frame[1024];
    frame[0] = (char)n;
    if (n >= max_depth)
        return frame[0];
    return depth(n + 1) + frame[0];
}

static void runaway(void *arg) {
    (void)arg;
    printf("recursing on a pooled stack of %zu bytes\n", current->stack.size);
    fflush(stdout);
    depth(0);
}

static int overflow(void) {
    coroutine *co = coroutine_new(runaway, NULL);
    coroutine_enter(co);
    printf("survived the overflow: the guard page did not stop it\n");
    return 1;
}

int main(int argc, char **argv) {
    tidepool_config cfg = {.size = sizeof cfg, .object_size = STACK_SIZE};
    TRY(tidepool_stack_pool_new(&cfg, &stacks));
    tidepool_config co_cfg = {
        .size = sizeof co_cfg,
        .create = coroutine_create,
        .destroy = coroutine_destroy,
    };
    TRY(tidepool_obj_pool_new(&co_cfg, &coroutines));

    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return run(argc >= 3 ? atol(argv[2]) : 10000);
    if (argc >= 2 && strcmp(argv[1], "overflow") == 0)
        return overflow();
    fprintf(stderr, "usage: coroutines run [N] | coroutines overflow\n");
    return 2;
}
