/* QEMU's coroutine pool, replaced by tidepool.
 *
 * QEMU pools whole coroutines (control block, guarded stack, context). Its
 * pool seam in util/qemu-coroutine.c has this contract, which the seam
 * below keeps:
 *
 *   - coroutine_pool_get() may return NULL; the caller then makes a
 *     coroutine itself (qemu_coroutine_new) and later puts it like any other;
 *   - coroutine_pool_put() runs on whichever thread the coroutine ended on,
 *     right after its last switch;
 *   - a thread-exit notifier deletes the thread's pooled coroutines;
 *   - qemu_coroutine_inc/dec_pool_size() grow and shrink the pool as devices
 *     come and go.
 *
 * The coroutine code (make, enter, terminate) is written here the way QEMU's
 * is shaped, on ucontext; so is a QEMU-style two-level pool (per-thread
 * batches over a global list of batches behind a lock) to compare with.
 *
 *   qemu_coroutine_pool lifecycle POOL N     N create + enter + terminate
 *   qemu_coroutine_pool nesting POOL DEPTH N N nestings DEPTH deep; prints
 *                                            the time and coroutines made
 *   qemu_coroutine_pool cross_thread         coroutines end on another thread
 *   qemu_coroutine_pool signalfd             a blocked SIGALRM reaches a signalfd
 *   qemu_coroutine_pool resize               inc/dec of the pool size
 *   qemu_coroutine_pool thread_exit          the notifier deletes the cache
 *
 * POOL is `tidepool`, `qemu` (the QEMU-style pool at QEMU's default size),
 * or `qemu-equal` (given the room tidepool has by default, as
 * `qemu_coroutine_inc_pool_size(1024)` does in virtio-blk).
 *
 * Build (tidepool installed by bin/c-install.sh, PKG_CONFIG_PATH set):
 *   cc -std=c11 -O2 -Wall -Wextra qemu_coroutine_pool.c \
 *      $(pkg-config --cflags --libs tidepool) -o qemu_coroutine_pool
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "tidepool.h"

#define TRY(call)                                                                         \
    do {                                                                                  \
        tidepool_status st_ = (call);                                                     \
        if (st_ != TIDEPOOL_OK) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
                    tidepool_last_error());                                               \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);      \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* --- coroutines, shaped like QEMU's -------------------------------------- */

#define STACK_SIZE (64 * 1024)

typedef void CoroutineEntry(void *opaque);

typedef struct Coroutine {
    ucontext_t ctx;
    ucontext_t *caller;
    CoroutineEntry *entry;
    void *opaque;
    int terminated;
    void *stack; /* the guard page, then STACK_SIZE usable bytes */
    struct Coroutine *pool_next; /* the QEMU-style pool's link */
} Coroutine;

static atomic_long made, deleted;
static __thread Coroutine *current;

/* A coroutine with a guarded stack: two VMAs, as QEMU's. */
static Coroutine *qemu_coroutine_new(void) {
    long page = sysconf(_SC_PAGESIZE);
    Coroutine *co = calloc(1, sizeof *co);
    CHECK(co != NULL);
    co->stack = mmap(NULL, STACK_SIZE + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    CHECK(co->stack != MAP_FAILED);
    CHECK(mprotect(co->stack, page, PROT_NONE) == 0);
    atomic_fetch_add(&made, 1);
    return co;
}

static void coroutine_delete(Coroutine *co) {
    CHECK(munmap(co->stack, STACK_SIZE + sysconf(_SC_PAGESIZE)) == 0);
    free(co);
    atomic_fetch_add(&deleted, 1);
}

/* --- the pool seam over tidepool: what replaces QEMU's pool section ---- */

static tidepool_pool *coroutine_pool;

static void coroutine_pool_delete(void *ctx, void *co) {
    (void)ctx;
    coroutine_delete(co);
}

/* From a constructor, before main, as QEMU sets its pool up. */
__attribute__((constructor)) static void coroutine_pool_init(void) {
    tidepool_config cfg = {
        .size = sizeof cfg,
        .flags = TIDEPOOL_OBJ_UNCHECKED | TIDEPOOL_OBJ_ACCEPT_FOREIGN,
        .destroy = coroutine_pool_delete,
        .maps_per_object = 2, /* caps from vm.max_map_count */
    };
    TRY(tidepool_obj_pool_new(&cfg, &coroutine_pool));
}

static Coroutine *tidepool_coroutine_pool_get(void) {
    void *co = NULL;
    tidepool_obj_get(coroutine_pool, TIDEPOOL_GET_NO_CREATE, &co);
    return co; /* NULL: the caller makes one and puts it back later */
}

static void tidepool_coroutine_pool_put(Coroutine *co) {
    tidepool_obj_put(coroutine_pool, co);
}

static void tidepool_coroutine_pool_thread_exit(void) {
    tidepool_pool_thread_exit(coroutine_pool, TIDEPOOL_THREAD_EXIT_DESTROY, NULL);
}

void qemu_coroutine_inc_pool_size(unsigned int n) {
    tidepool_pool_adjust_max_idle(coroutine_pool, (intptr_t)n, NULL);
}

void qemu_coroutine_dec_pool_size(unsigned int n) {
    tidepool_pool_adjust_max_idle(coroutine_pool, -(intptr_t)n, NULL);
}

/* --- a QEMU-style pool, to compare with ---------------------------------- */

/* The mechanism of QEMU's own pool (2024): each thread keeps at most two
 * batches of coroutines, linked through the coroutines themselves; a batch
 * header is allocated when a put needs one and freed when a get empties it;
 * a full batch beyond the two goes to a global list of batches behind a
 * mutex, capped at `global_max` coroutines (past it, deleted); a get whose
 * thread has none takes one whole batch from the global list. Thread-local
 * state is reached through a call that is not inlined, as QEMU's
 * coroutine-safe TLS accessors are. */
#define BATCH_MAX 128

struct batch {
    struct batch *next;
    Coroutine *list; /* linked through Coroutine.pool_next */
    unsigned size;
};

struct local_pool {
    struct batch *first; /* at most two batches */
};

static __thread struct local_pool local_pool;
static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct batch *global_list;
static unsigned global_size, global_max = BATCH_MAX; /* QEMU's default size */

__attribute__((noinline)) static struct local_pool *get_local_pool(void) {
    return &local_pool;
}

static void batch_delete(struct batch *b) {
    while (b->list) {
        Coroutine *co = b->list;
        b->list = co->pool_next;
        coroutine_delete(co);
    }
    free(b);
}

__attribute__((noinline)) static Coroutine *qemu_pool_get(void) {
    struct local_pool *local = get_local_pool();
    struct batch *b = local->first;
    if (!b) {
        pthread_mutex_lock(&global_lock);
        b = global_list;
        if (b) {
            global_list = b->next;
            global_size -= b->size;
        }
        pthread_mutex_unlock(&global_lock);
        if (!b)
            return NULL;
        b->next = NULL;
        local->first = b;
    }
    Coroutine *co = b->list;
    b->list = co->pool_next;
    if (--b->size == 0) {
        local->first = b->next;
        free(b);
    }
    return co;
}

static void qemu_pool_put(Coroutine *co) {
    struct local_pool *local = get_local_pool();
    struct batch *b = local->first;
    if (!b || b->size == BATCH_MAX) {
        if (b && b->next) { /* two already: the full one goes global */
            local->first = b->next;
            b->next = NULL;
            pthread_mutex_lock(&global_lock);
            int kept = global_size < global_max;
            if (kept) {
                b->next = global_list;
                global_list = b;
                global_size += b->size;
            }
            pthread_mutex_unlock(&global_lock);
            if (!kept)
                batch_delete(b);
        }
        b = malloc(sizeof *b);
        CHECK(b != NULL);
        b->list = NULL;
        b->size = 0;
        b->next = local->first;
        local->first = b;
    }
    co->pool_next = b->list;
    b->list = co;
    b->size++;
}

static void qemu_pool_thread_exit(void) {
    struct local_pool *local = get_local_pool();
    while (local->first) {
        struct batch *b = local->first;
        local->first = b->next;
        batch_delete(b);
    }
}

static void qemu_pool_destroy(void) {
    qemu_pool_thread_exit();
    while (global_list) {
        struct batch *g = global_list;
        global_list = g->next;
        batch_delete(g);
    }
    global_size = 0;
}

/* --- QEMU's create / enter / terminate, over whichever pool -------------- */

static int use_qemu_pool;

static Coroutine *coroutine_pool_get(void) {
    return use_qemu_pool ? qemu_pool_get() : tidepool_coroutine_pool_get();
}

static void coroutine_pool_put(Coroutine *co) {
    if (use_qemu_pool)
        qemu_pool_put(co);
    else
        tidepool_coroutine_pool_put(co);
}

static void coroutine_trampoline(void) {
    Coroutine *co = current;
    co->entry(co->opaque);
    co->terminated = 1;
    setcontext(co->caller); /* the last switch */
    abort();
}

static Coroutine *qemu_coroutine_create(CoroutineEntry *entry, void *opaque) {
    Coroutine *co = coroutine_pool_get();
    if (!co)
        co = qemu_coroutine_new();
    co->entry = entry;
    co->opaque = opaque;
    co->terminated = 0;
    CHECK(getcontext(&co->ctx) == 0);
    co->ctx.uc_stack.ss_sp = (char *)co->stack + sysconf(_SC_PAGESIZE);
    co->ctx.uc_stack.ss_size = STACK_SIZE;
    co->ctx.uc_link = NULL;
    makecontext(&co->ctx, coroutine_trampoline, 0);
    return co;
}

/* Runs `co` until it yields or terminates; a terminated one goes back to
 * the pool here, right after its last switch, on this thread. */
static void qemu_coroutine_enter(Coroutine *co) {
    ucontext_t here;
    Coroutine *outer = current;
    co->caller = &here;
    current = co;
    CHECK(swapcontext(&here, &co->ctx) == 0);
    current = outer;
    if (co->terminated)
        coroutine_pool_put(co);
}

static void qemu_coroutine_yield(void) {
    Coroutine *co = current;
    CHECK(swapcontext(&co->ctx, co->caller) == 0);
}

/* --- lifecycle: the loop the instruction budget counts ------------------- */

static void nop(void *opaque) {
    (void)opaque;
}

/* Named for callgrind's --toggle-collect: only this loop is counted. */
__attribute__((noinline)) static void measured_loop(long n) {
    for (long i = 0; i < n; i++)
        qemu_coroutine_enter(qemu_coroutine_create(nop, NULL));
}

static int lifecycle(long n) {
    qemu_coroutine_enter(qemu_coroutine_create(nop, NULL)); /* prime */
    measured_loop(n);
    CHECK(atomic_load(&made) == 1); /* one coroutine served every request */
    printf("ok lifecycle\n");
    return 0;
}

/* --- nesting: QEMU's /perf/nesting ---------------------------------------- */

struct nest {
    unsigned depth, max;
};

static void nest(void *opaque) {
    struct nest *n = opaque;
    if (n->depth < n->max) {
        n->depth++;
        qemu_coroutine_enter(qemu_coroutine_create(nest, n));
        n->depth--;
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int nesting(unsigned depth, long n) {
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        struct nest s = {0, depth};
        qemu_coroutine_enter(qemu_coroutine_create(nest, &s));
    }
    double took = now_s() - t0;
    printf("nesting %u deep x %ld: %.3f s, %ld coroutines made\n", depth, n, took,
           atomic_load(&made));
    if (!use_qemu_pool) {
        /* The working set is depth + 1 coroutines: each is made once. */
        CHECK(atomic_load(&made) == (long)depth + 1);
    }
    printf("ok nesting\n");
    return 0;
}

/* --- cross_thread: coroutines end on another thread ---------------------- */

#define HANDOFF 64

static Coroutine *mailbox[HANDOFF];
static atomic_int mailbox_full;
static atomic_int ended;

static void yield_once(void *opaque) {
    (void)opaque;
    qemu_coroutine_yield();
    atomic_fetch_add(&ended, 1);
}

static void *finisher(void *arg) {
    (void)arg;
    for (int round = 0; round < 100; round++) {
        while (!atomic_load(&mailbox_full))
            sched_yield();
        for (int i = 0; i < HANDOFF; i++)
            qemu_coroutine_enter(mailbox[i]); /* terminates, put here */
        atomic_store(&mailbox_full, 0);
    }
    tidepool_coroutine_pool_thread_exit();
    return NULL;
}

static int cross_thread(void) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, finisher, NULL) == 0);
    for (int round = 0; round < 100; round++) {
        while (atomic_load(&mailbox_full))
            sched_yield();
        for (int i = 0; i < HANDOFF; i++) {
            mailbox[i] = qemu_coroutine_create(yield_once, NULL);
            qemu_coroutine_enter(mailbox[i]); /* runs to its yield */
        }
        atomic_store(&mailbox_full, 1);
    }
    CHECK(pthread_join(t, NULL) == 0);
    tidepool_stats s = {.size = sizeof s};
    TRY(tidepool_pool_stats(coroutine_pool, &s));
    CHECK(atomic_load(&ended) == 100 * HANDOFF);
    CHECK(s.live == 0 && s.live + s.idle == s.created - s.destroyed);
    CHECK(s.created == (unsigned long long)atomic_load(&made));
    CHECK(s.destroyed == (unsigned long long)atomic_load(&deleted));
    TRY(tidepool_pool_destroy(coroutine_pool));
    CHECK(atomic_load(&made) == atomic_load(&deleted)); /* each deleted once */
    printf("ok cross_thread\n");
    return 0;
}

/* --- signalfd: tidepool's threads take none of the process's signals ---- */

static int signalfd_case(void) {
    /* The pool (made before main) has started tidepool's reclaimer. */
    qemu_coroutine_enter(qemu_coroutine_create(nop, NULL));
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    CHECK(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0);
    int fd = signalfd(-1, &set, SFD_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(kill(getpid(), SIGALRM) == 0); /* process-directed */
    struct signalfd_siginfo info;
    CHECK(read(fd, &info, sizeof info) == (ssize_t)sizeof info);
    CHECK(info.ssi_signo == SIGALRM);
    close(fd);
    printf("ok signalfd\n");
    return 0;
}

/* --- resize and thread exit ---------------------------------------------- */

static int resize(void) {
    tidepool_stats s = {.size = sizeof s};
    TRY(tidepool_pool_stats(coroutine_pool, &s));
    unsigned long long base = s.max_idle;
    qemu_coroutine_inc_pool_size(1024);
    TRY(tidepool_pool_stats(coroutine_pool, &s));
    CHECK(s.max_idle == base + 1024);
    qemu_coroutine_dec_pool_size(1024);
    TRY(tidepool_pool_stats(coroutine_pool, &s));
    CHECK(s.max_idle == base);
    /* Below what a batch needs: refused, nothing changed. */
    CHECK(tidepool_pool_adjust_max_idle(coroutine_pool, -(intptr_t)base, NULL) ==
          TIDEPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(tidepool_last_error(), "max_idle") != NULL);
    TRY(tidepool_pool_stats(coroutine_pool, &s));
    CHECK(s.max_idle == base);
    printf("ok resize\n");
    return 0;
}

static void *one_request(void *arg) {
    (void)arg;
    qemu_coroutine_enter(qemu_coroutine_create(nop, NULL));
    tidepool_coroutine_pool_thread_exit(); /* the notifier */
    return NULL;
}

static int thread_exit_case(void) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, one_request, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    tidepool_stats s = {.size = sizeof s};
    TRY(tidepool_pool_stats(coroutine_pool, &s));
    CHECK(atomic_load(&made) == 1 && atomic_load(&deleted) == 1);
    CHECK(s.idle == 0 && s.live == 0 && s.destroyed == 1);
    printf("ok thread_exit\n");
    return 0;
}

static void choose_pool(const char *name) {
    if (strcmp(name, "tidepool") == 0)
        return;
    use_qemu_pool = 1;
    if (strcmp(name, "qemu-equal") == 0)
        global_max += 1024; /* qemu_coroutine_inc_pool_size(1024) */
    else
        CHECK(strcmp(name, "qemu") == 0);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    int rc = 2;
    if (strcmp(what, "lifecycle") == 0 && argc == 4) {
        choose_pool(argv[2]);
        rc = lifecycle(atol(argv[3]));
    } else if (strcmp(what, "nesting") == 0 && argc == 5) {
        choose_pool(argv[2]);
        rc = nesting((unsigned)atoi(argv[3]), atol(argv[4]));
    } else if (strcmp(what, "cross_thread") == 0) {
        rc = cross_thread();
    } else if (strcmp(what, "signalfd") == 0) {
        rc = signalfd_case();
    } else if (strcmp(what, "resize") == 0) {
        rc = resize();
    } else if (strcmp(what, "thread_exit") == 0) {
        rc = thread_exit_case();
    } else {
        fprintf(stderr, "usage: see the top of %s\n", __FILE__);
        return 2;
    }
    if (use_qemu_pool)
        qemu_pool_destroy();
    return rc;
}
