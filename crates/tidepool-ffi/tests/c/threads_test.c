/* Many pthreads on one pool: `threads_test CASE` (or `--list`).
 *
 * cross_thread:    producers get objects, buffers and stacks and hand them
 *                  through a queue to consumers, which put them back on
 *                  their own thread; every thread also does local get/put.
 * adopt_race:      threads get with NO_CREATE, build what is missing and
 *                  adopt it, while another thread drains.
 * double_put_race: four threads put the same object at once; exactly one
 *                  put succeeds, the others say DOUBLE_PUT.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "common.h"

#define PRODUCERS 3
#define CONSUMERS 3
#define ITEMS 20000
#define QUEUE 64

enum kind { OBJ, BUF, STACK };

struct item {
    enum kind kind;
    void *ptr;
    tidepool_stack stack;
};

struct queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    struct item items[QUEUE];
    size_t head, len;
    int producers_left;
};

struct shared {
    tidepool_pool *objs, *bufs, *stacks;
    struct counter counter;
    struct queue q;
};

static void push(struct queue *q, struct item it) {
    pthread_mutex_lock(&q->lock);
    while (q->len == QUEUE)
        pthread_cond_wait(&q->not_full, &q->lock);
    q->items[(q->head + q->len) % QUEUE] = it;
    q->len++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

/* 0 once every producer is done and the queue is empty. */
static int pop(struct queue *q, struct item *it) {
    pthread_mutex_lock(&q->lock);
    while (q->len == 0 && q->producers_left > 0)
        pthread_cond_wait(&q->not_empty, &q->lock);
    if (q->len == 0) {
        pthread_mutex_unlock(&q->lock);
        return 0;
    }
    *it = q->items[q->head];
    q->head = (q->head + 1) % QUEUE;
    q->len--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->lock);
    return 1;
}

static void *producer(void *arg) {
    struct shared *s = arg;
    for (int i = 0; i < ITEMS; i++) {
        struct item it;
        memset(&it, 0, sizeof it);
        it.kind = (enum kind)(i % 3);
        switch (it.kind) {
        case OBJ:
            OK(tidepool_obj_get(s->objs, 0, &it.ptr));
            ((struct obj *)it.ptr)->payload = i;
            break;
        case BUF:
            OK(tidepool_buf_get(s->bufs, &it.ptr));
            memset(it.ptr, i & 0xff, 256);
            break;
        case STACK:
            OK(tidepool_stack_get(s->stacks, &it.stack));
            ((volatile char *)it.stack.top)[-1] = (char)i;
            break;
        }
        push(&s->q, it);
        /* And a local round trip, which stays in this thread's cache. */
        void *local;
        OK(tidepool_buf_get(s->bufs, &local));
        OK(tidepool_buf_put(s->bufs, local));
    }
    pthread_mutex_lock(&s->q.lock);
    s->q.producers_left--;
    pthread_cond_broadcast(&s->q.not_empty);
    pthread_mutex_unlock(&s->q.lock);
    return NULL;
}

static void *consumer(void *arg) {
    struct shared *s = arg;
    struct item it;
    while (pop(&s->q, &it)) {
        switch (it.kind) {
        case OBJ:
            CHECK(((struct obj *)it.ptr)->magic == OBJ_ALIVE);
            OK(tidepool_obj_put(s->objs, it.ptr));
            break;
        case BUF:
            OK(tidepool_buf_put(s->bufs, it.ptr));
            break;
        case STACK:
            OK(tidepool_stack_put(s->stacks, &it.stack));
            break;
        }
    }
    return NULL;
}

static void cross_thread(void) {
    static struct shared s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.q.lock, NULL);
    pthread_cond_init(&s.q.not_empty, NULL);
    pthread_cond_init(&s.q.not_full, NULL);
    s.q.producers_left = PRODUCERS;
    tidepool_config cfg = obj_config(&s.counter);
    cfg.batch_size = 8;
    cfg.max_idle = 64;
    OK(tidepool_obj_pool_new(&cfg, &s.objs));
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.object_size = 256;
    cfg.batch_size = 8;
    cfg.max_idle = 64;
    OK(tidepool_buf_pool_new(&cfg, &s.bufs));
    cfg.object_size = 16 * 1024;
    OK(tidepool_stack_pool_new(&cfg, &s.stacks));

    pthread_t threads[PRODUCERS + CONSUMERS];
    for (int i = 0; i < PRODUCERS; i++)
        CHECK(pthread_create(&threads[i], NULL, producer, &s) == 0);
    for (int i = 0; i < CONSUMERS; i++)
        CHECK(pthread_create(&threads[PRODUCERS + i], NULL, consumer, &s) == 0);
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++)
        CHECK(pthread_join(threads[i], NULL) == 0);

    tidepool_pool *pools[] = {s.objs, s.bufs, s.stacks};
    for (int i = 0; i < 3; i++) {
        tidepool_stats st = stats_of(pools[i]);
        CHECK(st.live == 0);
        /* Every thread has exited: their caches are back in the depot. */
        CHECK(st.idle == st.idle_depot);
        /* Reuse, not one object per item: bounded by the queue plus the
         * caches and depot. */
        CHECK(st.created < ITEMS);
        check_counts(pools[i]);
        OK(tidepool_pool_destroy(pools[i]));
    }
    check_all_destroyed(&s.counter);
}

/* --- adoption under contention ------------------------------------------------ */

struct adopt_shared {
    tidepool_pool *pool;
    struct counter counter;
    atomic_int stop;
};

static void *adopter(void *arg) {
    struct adopt_shared *a = arg;
    for (int i = 0; i < 20000; i++) {
        void *got[3];
        for (int k = 0; k < 3; k++) {
            tidepool_status st = tidepool_obj_get(a->pool, TIDEPOOL_GET_NO_CREATE, &got[k]);
            if (st == TIDEPOOL_EMPTY) {
                got[k] = obj_make(&a->counter);
                OK(tidepool_obj_adopt(a->pool, got[k]));
            } else {
                OK(st);
            }
            CHECK(((struct obj *)got[k])->magic == OBJ_ALIVE);
        }
        for (int k = 0; k < 3; k++)
            OK(tidepool_obj_put(a->pool, got[k]));
    }
    return NULL;
}

static void *drainer(void *arg) {
    struct adopt_shared *a = arg;
    while (!atomic_load(&a->stop)) {
        OK(tidepool_pool_drain(a->pool, NULL));
        OK(tidepool_pool_pressure(a->pool, TIDEPOOL_PRESSURE_CRITICAL, NULL));
        sched_yield();
    }
    return NULL;
}

static void adopt_race(void) {
    static struct adopt_shared a;
    memset(&a, 0, sizeof a);
    tidepool_config cfg = obj_config(&a.counter);
    cfg.batch_size = 2;
    cfg.max_idle = 8;
    cfg.pressure_hold_ms = 1;
    OK(tidepool_obj_pool_new(&cfg, &a.pool));
    pthread_t t[4], d;
    CHECK(pthread_create(&d, NULL, drainer, &a) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, adopter, &a) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    atomic_store(&a.stop, 1);
    CHECK(pthread_join(d, NULL) == 0);
    tidepool_stats s = stats_of(a.pool);
    CHECK(s.live == 0 && s.adopted > 0 && s.created == s.adopted && a.counter.created == 0);
    check_counts(a.pool);
    OK(tidepool_pool_destroy(a.pool));
    check_all_destroyed(&a.counter);
}

/* --- racing double puts ------------------------------------------------------ */

#define RACERS 4

struct race {
    pthread_barrier_t start, done;
    tidepool_pool *bufs, *objs, *stacks;
    void *buf, *obj;
    tidepool_stack stack;
    atomic_int ok[3], double_put[3];
    int rounds;
};

static void count(struct race *r, int which, tidepool_status st) {
    if (st == TIDEPOOL_OK)
        atomic_fetch_add(&r->ok[which], 1);
    else if (st == TIDEPOOL_ERR_DOUBLE_PUT)
        atomic_fetch_add(&r->double_put[which], 1);
    else {
        fprintf(stderr, "racing put returned %s\n", tidepool_status_name(st));
        exit(1);
    }
}

static void *racer(void *arg) {
    struct race *r = arg;
    for (int i = 0; i < r->rounds; i++) {
        pthread_barrier_wait(&r->start);
        count(r, 0, tidepool_buf_put(r->bufs, r->buf));
        count(r, 1, tidepool_obj_put(r->objs, r->obj));
        tidepool_stack copy = r->stack;
        count(r, 2, tidepool_stack_put(r->stacks, &copy));
        pthread_barrier_wait(&r->done);
    }
    return NULL;
}

static void double_put_race(void) {
    static struct race r;
    memset(&r, 0, sizeof r);
    struct counter c = {0};
    r.rounds = 2000;
    pthread_barrier_init(&r.start, NULL, RACERS + 1);
    pthread_barrier_init(&r.done, NULL, RACERS + 1);
    tidepool_config cfg = obj_config(&c);
    OK(tidepool_obj_pool_new(&cfg, &r.objs));
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.object_size = 64;
    OK(tidepool_buf_pool_new(&cfg, &r.bufs));
    cfg.object_size = 4096;
    OK(tidepool_stack_pool_new(&cfg, &r.stacks));
    pthread_t t[RACERS];
    for (int i = 0; i < RACERS; i++)
        CHECK(pthread_create(&t[i], NULL, racer, &r) == 0);
    for (int i = 0; i < r.rounds; i++) {
        OK(tidepool_buf_get(r.bufs, &r.buf));
        OK(tidepool_obj_get(r.objs, 0, &r.obj));
        OK(tidepool_stack_get(r.stacks, &r.stack));
        pthread_barrier_wait(&r.start);
        pthread_barrier_wait(&r.done);
    }
    for (int i = 0; i < RACERS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    for (int k = 0; k < 3; k++) {
        CHECK(r.ok[k] == r.rounds);
        CHECK(r.double_put[k] == r.rounds * (RACERS - 1));
    }
    tidepool_pool *pools[] = {r.bufs, r.objs, r.stacks};
    for (int i = 0; i < 3; i++) {
        CHECK(stats_of(pools[i]).live == 0);
        check_counts(pools[i]);
        OK(tidepool_pool_destroy(pools[i]));
    }
    check_all_destroyed(&c);
}

int main(int argc, char **argv) {
    static const struct test_case cases[] = {
        {"cross_thread", cross_thread},
        {"adopt_race", adopt_race},
        {"double_put_race", double_put_race},
    };
    return run_cases(cases, sizeof cases / sizeof cases[0], argc, argv);
}
