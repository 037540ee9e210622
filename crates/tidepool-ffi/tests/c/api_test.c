/* The C API, one case per argument: `api_test CASE` (or `--list`).
 * Run by tests/c.rs, each case in its own process. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static tidepool_config buf_config(size_t size, size_t align) {
    tidepool_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.flags = TIDEPOOL_NO_BACKGROUND;
    cfg.object_size = size;
    cfg.align = align;
    return cfg;
}

static tidepool_config stack_config(size_t size) {
    tidepool_config cfg = buf_config(size, 0);
    return cfg;
}

static tidepool_pool *new_buf_pool(size_t size, size_t align) {
    tidepool_config cfg = buf_config(size, align);
    tidepool_pool *pool = NULL;
    OK(tidepool_buf_pool_new(&cfg, &pool));
    CHECK(pool != NULL);
    return pool;
}

static tidepool_pool *new_stack_pool(size_t size) {
    tidepool_config cfg = stack_config(size);
    tidepool_pool *pool = NULL;
    OK(tidepool_stack_pool_new(&cfg, &pool));
    return pool;
}

static tidepool_pool *new_obj_pool(struct counter *c) {
    tidepool_config cfg = obj_config(c);
    tidepool_pool *pool = NULL;
    OK(tidepool_obj_pool_new(&cfg, &pool));
    return pool;
}

static int return_ctx(void *ctx, void **out) {
    *out = ctx;
    return 0;
}

/* --- round trips ---------------------------------------------------------- */

static void buf_roundtrip(void) {
    tidepool_pool *pool = new_buf_pool(1000, 64);
    void *a = NULL, *b = NULL;
    OK(tidepool_buf_get(pool, &a));
    CHECK(a != NULL && (uintptr_t)a % 64 == 0);
    memset(a, 0xab, 1000);
    OK(tidepool_buf_put(pool, a));
    OK(tidepool_buf_get(pool, &b));
    CHECK(b == a); /* reused from this thread's cache */
    CHECK(((unsigned char *)b)[999] == 0xab);
    tidepool_stats s = stats_of(pool);
    CHECK(s.created == 1 && s.live == 1 && s.idle == 0 && s.hits == 1 && s.misses == 1);
    OK(tidepool_buf_put(pool, b));
    s = stats_of(pool);
    CHECK(s.live == 0 && s.idle == 1 && s.adopted == 0 && s.mapped == 0);
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
}

static void stack_roundtrip(void) {
    tidepool_pool *pool = new_stack_pool(64 * 1024);
    tidepool_stack st;
    OK(tidepool_stack_get(pool, &st));
    CHECK(st.size == 64 * 1024 - 64);
    CHECK((char *)st.top - (char *)st.base == (ptrdiff_t)st.size);
    CHECK((uintptr_t)st.base % 4096 == 0 && (uintptr_t)st.top % 64 == 0);
    CHECK(st.guard_size >= 4096);
    memset(st.base, 0x5a, st.size); /* every usable byte is writable */
    OK(tidepool_stack_put(pool, &st));
    tidepool_stack again;
    OK(tidepool_stack_get(pool, &again));
    CHECK(again.top == st.top); /* the same mapping, reused */
    tidepool_stats s = stats_of(pool);
    CHECK(s.mapped == 1 && s.vmas == 2 && s.live == 1 && s.hits == 1);
    OK(tidepool_stack_put(pool, &again));
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
}

static void obj_roundtrip(void) {
    struct counter c = {0};
    tidepool_pool *pool = new_obj_pool(&c);
    void *a = NULL, *b = NULL;
    OK(tidepool_obj_get(pool, 0, &a));
    CHECK(a != NULL && ((struct obj *)a)->magic == OBJ_ALIVE && c.created == 1);
    OK(tidepool_obj_put(pool, a));
    OK(tidepool_obj_get(pool, 0, &b));
    CHECK(b == a && c.created == 1);
    OK(tidepool_obj_put(pool, b));
    size_t n = 0;
    OK(tidepool_pool_drain(pool, &n));
    CHECK(n == 1 && c.destroyed == 1);
    /* Nothing idle: NO_CREATE makes nothing. */
    void *none = (void *)1;
    EXPECT(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &none), TIDEPOOL_EMPTY);
    CHECK(none == NULL && c.created == 1);
    OK(tidepool_obj_get(pool, 0, &a));
    CHECK(c.created == 2);
    /* NO_CREATE with an idle object at hand takes it. */
    OK(tidepool_obj_put(pool, a));
    OK(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &b));
    CHECK(b == a);
    OK(tidepool_obj_put(pool, b));
    tidepool_stats s = stats_of(pool);
    CHECK(s.created == 2 && s.destroyed == 1 && s.live == 0 && s.idle == 1);
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
}

/* The QEMU pattern: the caller builds what the pool does not have, and the
 * pool keeps it from then on. */
static void obj_adopt(void) {
    struct counter c = {0};
    tidepool_config cfg = obj_config(&c);
    cfg.batch_size = 1;
    cfg.max_idle = 2;
    tidepool_pool *pool = NULL;
    OK(tidepool_obj_pool_new(&cfg, &pool));

    void *got = NULL;
    EXPECT(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &got), TIDEPOOL_EMPTY);
    struct obj *mine = obj_make(&c);
    OK(tidepool_obj_adopt(pool, mine));
    tidepool_stats s = stats_of(pool);
    CHECK(s.adopted == 1 && s.live == 1 && s.idle == 0);
    check_counts(pool);
    EXPECT(tidepool_obj_adopt(pool, mine), TIDEPOOL_ERR_ALREADY_POOLED);
    OK(tidepool_obj_put(pool, mine));
    s = stats_of(pool);
    CHECK(s.live == 0 && s.idle == 1);
    check_counts(pool);
    EXPECT(tidepool_obj_adopt(pool, mine), TIDEPOOL_ERR_ALREADY_POOLED);
    /* An ordinary member now: the next get reuses it, NO_CREATE or not. */
    OK(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &got));
    CHECK(got == mine && c.created == 0);
    OK(tidepool_obj_put(pool, got));
    OK(tidepool_obj_get(pool, 0, &got));
    CHECK(got == mine && c.created == 0);
    OK(tidepool_obj_put(pool, got));
    s = stats_of(pool);
    CHECK(s.created == 1 && s.adopted == 1 && s.empty_gets == 1 && s.misses == 1);
    CHECK(s.idle == s.idle_depot + s.idle_cached);

    /* More adopted objects come back than the pool keeps: the rest are
     * destroyed on put, as the pool's own would be. */
    struct obj *more[8];
    for (int i = 0; i < 8; i++) {
        more[i] = obj_make(&c);
        OK(tidepool_obj_adopt(pool, more[i]));
    }
    for (int i = 0; i < 8; i++)
        OK(tidepool_obj_put(pool, more[i]));
    s = stats_of(pool);
    CHECK(s.adopted == 9 && s.created == 9 && s.live == 0 && s.destroyed > 0);
    CHECK(s.idle + s.destroyed == 9);
    check_counts(pool);
    /* And reclaim reaches them: the depot's go at reclaim_unused. */
    size_t n = 0;
    OK(tidepool_pool_reclaim_unused(pool, &n));
    OK(tidepool_pool_reclaim_unused(pool, &n));
    CHECK(stats_of(pool).idle_depot == 0);
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
}

/* Objects the caller made are ordinary members: a burst of 200 (half
 * adopted, half simply put to a pool that accepts foreign objects), then one
 * object at a time; reclaim passes destroy the burst as they would objects
 * the pool made. */
static void adopted_objects_are_reclaimed(void) {
    struct counter c = {0};
    tidepool_config cfg = obj_config(&c);
    cfg.flags |= TIDEPOOL_OBJ_ACCEPT_FOREIGN;
    cfg.batch_size = 4;
    cfg.reclaim_interval_ms = 1;
    tidepool_pool *pool = NULL;
    OK(tidepool_obj_pool_new(&cfg, &pool));
    void *burst[200];
    for (int i = 0; i < 200; i++) {
        EXPECT(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &burst[i]), TIDEPOOL_EMPTY);
        burst[i] = obj_make(&c);
        if (i % 2 == 0)
            OK(tidepool_obj_adopt(pool, burst[i]));
    }
    for (int i = 0; i < 200; i++)
        OK(tidepool_obj_put(pool, burst[i]));
    tidepool_stats s = stats_of(pool);
    CHECK(s.adopted == 200 && s.created == 200 && s.empty_gets == 200);
    check_counts(pool);
    struct timespec ms2 = {0, 2 * 1000 * 1000};
    while (stats_of(pool).reclaim_passes < 50) {
        void *one = NULL;
        OK(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &one));
        CHECK(one != NULL);
        OK(tidepool_obj_put(pool, one));
        nanosleep(&ms2, NULL);
        OK(tidepool_pool_reclaim(pool, NULL));
    }
    s = stats_of(pool);
    CHECK(s.destroyed >= 190 && c.created == 0);
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
}

/* An unchecked pool that accepts foreign objects counts the one its caller
 * makes at the TIDEPOOL_EMPTY: under max_live the next get says EXHAUSTED,
 * and unreserve gives the place back. */
static void unchecked_pools_reserve_at_empty(void) {
    struct counter c = {0};
    tidepool_config cfg = obj_config(&c);
    cfg.flags |= TIDEPOOL_OBJ_UNCHECKED | TIDEPOOL_OBJ_ACCEPT_FOREIGN;
    cfg.create = NULL;
    cfg.max_live = 2;
    cfg.batch_size = 1;
    cfg.max_idle = 2;
    tidepool_pool *pool = NULL;
    OK(tidepool_obj_pool_new(&cfg, &pool));
    void *a, *b, *none;
    EXPECT(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &a), TIDEPOOL_EMPTY);
    EXPECT(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &b), TIDEPOOL_EMPTY);
    CHECK(stats_of(pool).live == 2);
    EXPECT(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &none), TIDEPOOL_ERR_EXHAUSTED);
    a = obj_make(&c);
    OK(tidepool_obj_put(pool, a)); /* made after the EMPTY, put as is */
    OK(tidepool_obj_unreserve(pool)); /* the second was never made */
    tidepool_stats s = stats_of(pool);
    CHECK(s.live == 0 && s.idle == 1);
    OK(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &b));
    CHECK(b == a);
    OK(tidepool_obj_put(pool, b));
    EXPECT(tidepool_obj_unreserve(pool), TIDEPOOL_ERR_INVALID_ARGUMENT); /* nothing out */
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
    /* A checked pool reserves nothing. */
    cfg = obj_config(&c);
    OK(tidepool_obj_pool_new(&cfg, &pool));
    EXPECT(tidepool_obj_unreserve(pool), TIDEPOOL_ERR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("reserves nothing");
    OK(tidepool_pool_destroy(pool));
}

/* Per-pool thread exit: hand back (0) or destroy; other pools untouched;
 * unknown flags refused. */
static void pool_thread_exit(void) {
    struct counter c = {0};
    tidepool_config cfg = obj_config(&c);
    tidepool_pool *p1 = NULL, *p2 = NULL;
    OK(tidepool_obj_pool_new(&cfg, &p1));
    OK(tidepool_obj_pool_new(&cfg, &p2));
    void *o1, *o2;
    OK(tidepool_obj_get(p1, 0, &o1));
    OK(tidepool_obj_get(p2, 0, &o2));
    OK(tidepool_obj_put(p1, o1));
    OK(tidepool_obj_put(p2, o2));
    size_t n = 9;
    EXPECT(tidepool_pool_thread_exit(p1, 0x10, &n), TIDEPOOL_ERR_INVALID_ARGUMENT);
    CHECK(n == 0 && stats_of(p1).idle_cached == 1);
    OK(tidepool_pool_thread_exit(p1, TIDEPOOL_THREAD_EXIT_DESTROY, &n));
    CHECK(n == 1 && stats_of(p1).destroyed == 1 && stats_of(p1).idle == 0);
    CHECK(stats_of(p2).idle_cached == 1); /* the other pool keeps its cache */
    OK(tidepool_pool_thread_exit(p2, 0, &n));
    tidepool_stats s = stats_of(p2);
    CHECK(n == 1 && s.idle_cached == 0 && s.idle_depot == 1 && s.destroyed == 0);
    OK(tidepool_pool_destroy(p1));
    OK(tidepool_pool_destroy(p2));
    check_all_destroyed(&c);
}

/* max_idle at run time, additive; bad deltas refused with nothing lost. */
static void adjust_max_idle(void) {
    struct counter c = {0};
    tidepool_config cfg = obj_config(&c);
    cfg.batch_size = 2;
    cfg.max_idle = 8;
    tidepool_pool *pool = NULL;
    OK(tidepool_obj_pool_new(&cfg, &pool));
    void *objs[16];
    for (int i = 0; i < 16; i++)
        OK(tidepool_obj_get(pool, 0, &objs[i]));
    for (int i = 0; i < 16; i++)
        OK(tidepool_obj_put(pool, objs[i]));
    OK(tidepool_pool_thread_exit(pool, 0, NULL));
    CHECK(stats_of(pool).idle_depot == 8);
    size_t now = 0;
    OK(tidepool_pool_adjust_max_idle(pool, 100, &now));
    CHECK(now == 108 && stats_of(pool).max_idle == 108);
    OK(tidepool_pool_adjust_max_idle(pool, -104, &now));
    CHECK(now == 4 && stats_of(pool).idle_depot == 4); /* the oldest 4 destroyed */
    EXPECT(tidepool_pool_adjust_max_idle(pool, -3, &now), TIDEPOOL_ERR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("max_idle");
    EXPECT(tidepool_pool_adjust_max_idle(pool, -100, NULL), TIDEPOOL_ERR_INVALID_ARGUMENT);
    EXPECT(tidepool_pool_set_max_idle(pool, 1), TIDEPOOL_ERR_INVALID_ARGUMENT);
    CHECK(stats_of(pool).max_idle == 4 && stats_of(pool).idle_depot == 4);
    OK(tidepool_pool_set_max_idle(pool, 64));
    CHECK(stats_of(pool).max_idle == 64);
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
}

/* --- reclaim_unused, reclaim, purge, drain, pressure, prefill ------------ */

static void maintenance(void) {
    /* prefill and reclaim_unused respect min_idle; drain ignores it. */
    tidepool_config cfg = buf_config(256, 0);
    cfg.batch_size = 2;
    cfg.max_idle = 8;
    cfg.min_idle = 4;
    tidepool_pool *bufs = NULL;
    OK(tidepool_buf_pool_new(&cfg, &bufs));
    size_t n = 99;
    OK(tidepool_pool_prefill(bufs, &n));
    CHECK(n == 4 && stats_of(bufs).idle_depot == 4);
    OK(tidepool_pool_reclaim_unused(bufs, &n));
    CHECK(n == 0 && stats_of(bufs).idle_depot == 4);
    OK(tidepool_pool_reclaim_unused(bufs, NULL)); /* the count is optional */
    OK(tidepool_pool_purge(bufs, &n)); /* buffers have nothing to release */
    OK(tidepool_pool_drain(bufs, &n));
    CHECK(n == 4 && stats_of(bufs).idle == 0);
    check_counts(bufs);
    OK(tidepool_pool_destroy(bufs));

    /* purge calls the purge callback on idle objects in the depot. */
    struct counter c = {0};
    tidepool_config ocfg = obj_config(&c);
    ocfg.batch_size = 1;
    ocfg.max_idle = 16;
    ocfg.reclaim_interval_ms = 1;
    tidepool_pool *objs = NULL;
    OK(tidepool_obj_pool_new(&ocfg, &objs));
    void *held[6];
    for (int i = 0; i < 6; i++)
        OK(tidepool_obj_get(objs, 0, &held[i]));
    for (int i = 0; i < 6; i++)
        OK(tidepool_obj_put(objs, held[i]));
    tidepool_stats s = stats_of(objs);
    CHECK(s.idle == 6 && s.idle_depot >= 1);
    OK(tidepool_pool_purge(objs, &n));
    CHECK(n == s.idle_depot && (size_t)c.purged == n && stats_of(objs).idle_purged == n);

    /* reclaim destroys what sits idle in the depot for two intervals. */
    struct timespec ms2 = {0, 2 * 1000 * 1000};
    size_t reclaimed = 0;
    for (int i = 0; i < 2000 && reclaimed == 0; i++) {
        nanosleep(&ms2, NULL);
        OK(tidepool_pool_reclaim(objs, &n));
        reclaimed += n;
    }
    s = stats_of(objs);
    CHECK(reclaimed > 0 && s.reclaimed == reclaimed && s.reclaim_passes > 0);
    check_counts(objs);

    /* pressure: critical drains to min_idle (0), thread caches included. */
    EXPECT(tidepool_pool_pressure(objs, 3, &n), TIDEPOOL_ERR_INVALID_ARGUMENT);
    OK(tidepool_pool_pressure(objs, TIDEPOOL_PRESSURE_MEDIUM, &n));
    OK(tidepool_pool_pressure(objs, TIDEPOOL_PRESSURE_CRITICAL, &n));
    s = stats_of(objs);
    CHECK(s.idle == 0 && s.pressure_critical == 1 && s.pressure_medium == 1);
    check_counts(objs);
    OK(tidepool_pool_destroy(objs));
    check_all_destroyed(&c);

    OK(tidepool_pressure_notify(TIDEPOOL_PRESSURE_MEDIUM));
    EXPECT(tidepool_pressure_notify(0), TIDEPOOL_ERR_INVALID_ARGUMENT);

    /* Stack pools answer the same calls; purge releases idle stacks' pages. */
    tidepool_config scfg = stack_config(16 * 1024);
    scfg.batch_size = 1;
    tidepool_pool *stacks = NULL;
    OK(tidepool_stack_pool_new(&scfg, &stacks));
    tidepool_stack st[4];
    for (int i = 0; i < 4; i++) {
        OK(tidepool_stack_get(stacks, &st[i]));
        memset(st[i].base, 1, st[i].size);
    }
    for (int i = 0; i < 4; i++)
        OK(tidepool_stack_put(stacks, &st[i]));
    OK(tidepool_pool_purge(stacks, &n));
    CHECK(n == 2 && stats_of(stacks).idle_purged == 2);
    OK(tidepool_pool_drain(stacks, &n));
    CHECK(n == 4 && stats_of(stacks).mapped == 0);
    OK(tidepool_pool_destroy(stacks));
}

/* --- sized structs ---------------------------------------------------------- */

static void config_versions(void) {
    struct counter c = {0};
    tidepool_config full = obj_config(&c);
    tidepool_pool *pool = NULL;

    /* A caller compiled against version 0 (no `purge`): exactly that many
     * bytes, nothing after them. */
    CHECK(TIDEPOOL_CONFIG_SIZE_VER0 < sizeof(tidepool_config));
    CHECK(TIDEPOOL_CONFIG_SIZE_VER1 < TIDEPOOL_CONFIG_SIZE_VER2);
    CHECK(TIDEPOOL_CONFIG_SIZE_VER2 < TIDEPOOL_CONFIG_SIZE_VER3);
    CHECK(TIDEPOOL_CONFIG_SIZE_VER3 == sizeof(tidepool_config));
    unsigned char *v0 = malloc(TIDEPOOL_CONFIG_SIZE_VER0);
    CHECK(v0 != NULL);
    full.size = TIDEPOOL_CONFIG_SIZE_VER0;
    memcpy(v0, &full, TIDEPOOL_CONFIG_SIZE_VER0);
    OK(tidepool_obj_pool_new((const tidepool_config *)(void *)v0, &pool));
    free(v0);
    void *o = NULL;
    OK(tidepool_obj_get(pool, 0, &o));
    OK(tidepool_obj_put(pool, o));
    size_t n = 0;
    OK(tidepool_pool_drain(pool, &n));
    CHECK(n == 1 && c.purged == 0); /* no purge callback in version 0 */
    OK(tidepool_pool_destroy(pool));

    /* A caller compiled against a newer header: accepted while it sets
     * nothing this library does not know. */
    struct {
        tidepool_config config;
        uint64_t newer[2];
    } big;
    memset(&big, 0, sizeof big);
    big.config = obj_config(&c);
    big.config.size = sizeof big;
    OK(tidepool_obj_pool_new(&big.config, &pool));
    OK(tidepool_pool_destroy(pool));
    big.newer[1] = 7;
    pool = (tidepool_pool *)(void *)&big; /* must not be written */
    EXPECT(tidepool_obj_pool_new(&big.config, &pool), TIDEPOOL_ERR_STRUCT_SIZE);
    EXPECT_MESSAGE("tidepool_config.size");
    CHECK(pool == (tidepool_pool *)(void *)&big);

    /* Sizes of no version. */
    size_t bad[] = {0, 8, TIDEPOOL_CONFIG_SIZE_VER0 - 8, TIDEPOOL_CONFIG_SIZE_VER0 + 4};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        full = obj_config(&c);
        full.size = bad[i];
        EXPECT(tidepool_obj_pool_new(&full, &pool), TIDEPOOL_ERR_STRUCT_SIZE);
    }
    check_all_destroyed(&c);
}

static void stats_versions(void) {
    tidepool_pool *pool = new_stack_pool(4096);
    tidepool_stack st;
    OK(tidepool_stack_get(pool, &st));

    /* Version 0: the stack figures are not written. */
    union {
        tidepool_stats stats;
        unsigned char bytes[sizeof(tidepool_stats)];
    } old;
    memset(&old, 0xee, sizeof old);
    old.stats.size = TIDEPOOL_STATS_SIZE_VER0;
    OK(tidepool_pool_stats(pool, &old.stats));
    CHECK(old.stats.size == TIDEPOOL_STATS_SIZE_VER0);
    CHECK(old.stats.created == 1 && old.stats.live == 1);
    for (size_t i = TIDEPOOL_STATS_SIZE_VER0; i < sizeof old; i++)
        CHECK(old.bytes[i] == 0xee);

    /* Version 1: the stack figures, not `trimmed`. */
    CHECK(TIDEPOOL_STATS_SIZE_VER1 < TIDEPOOL_STATS_SIZE_VER2);
    CHECK(TIDEPOOL_STATS_SIZE_VER2 < TIDEPOOL_STATS_SIZE_VER3);
    CHECK(TIDEPOOL_STATS_SIZE_VER3 < TIDEPOOL_STATS_SIZE_VER4);
    CHECK(TIDEPOOL_STATS_SIZE_VER4 < TIDEPOOL_STATS_SIZE_VER5);
    CHECK(TIDEPOOL_STATS_SIZE_VER5 == sizeof(tidepool_stats));
    memset(&old, 0xee, sizeof old);
    old.stats.size = TIDEPOOL_STATS_SIZE_VER1;
    OK(tidepool_pool_stats(pool, &old.stats));
    CHECK(old.stats.size == TIDEPOOL_STATS_SIZE_VER1);
    CHECK(old.stats.mapped == 1 && old.stats.unmap_failures == 0);
    for (size_t i = TIDEPOOL_STATS_SIZE_VER1; i < sizeof old; i++)
        CHECK(old.bytes[i] == 0xee);

    /* Newer: what this library does not know is zeroed. */
    struct {
        tidepool_stats stats;
        uint64_t newer[3];
    } big;
    memset(&big, 0xee, sizeof big);
    big.stats.size = sizeof big;
    OK(tidepool_pool_stats(pool, &big.stats));
    CHECK(big.stats.size == sizeof(tidepool_stats));
    CHECK(big.stats.mapped == 1 && big.stats.vmas == 2);
    CHECK(big.stats.trimmed == 0);
    /* One slab mapped for the stack, none unmapped yet. */
    CHECK(big.stats.mmap_calls == 1 && big.stats.munmap_calls == 0);
    CHECK(big.newer[0] == 0 && big.newer[1] == 0 && big.newer[2] == 0);

    tidepool_stats tiny;
    memset(&tiny, 0, sizeof tiny);
    tiny.size = 16;
    EXPECT(tidepool_pool_stats(pool, &tiny), TIDEPOOL_ERR_STRUCT_SIZE);
    CHECK(tiny.created == 0);

    OK(tidepool_stack_put(pool, &st));
    OK(tidepool_pool_destroy(pool));
}

/* A teardown's system calls, counted per pool: with a release step of one
 * stack, each stack's pages go back with an madvise of their own before the
 * emptied slab's munmap; with no step (SIZE_MAX), the munmap frees them. */
static void teardown_counts(void) {
    const size_t size = 64 * 1024;
    const size_t steps[2] = {64 * 1024, SIZE_MAX};
    for (int i = 0; i < 2; i++) {
        tidepool_config cfg = stack_config(size);
        cfg.release_step = steps[i];
        cfg.flags = TIDEPOOL_NO_BACKGROUND;
        tidepool_pool *pool = NULL;
        OK(tidepool_stack_pool_new(&cfg, &pool));
        tidepool_stack st[4];
        for (int j = 0; j < 4; j++) {
            OK(tidepool_stack_get(pool, &st[j]));
            memset(st[j].base, 1, st[j].size);
        }
        for (int j = 0; j < 4; j++)
            OK(tidepool_stack_put(pool, &st[j]));
        size_t n = 0;
        OK(tidepool_pool_drain(pool, &n));
        CHECK(n == 4);
        tidepool_stats s;
        s.size = sizeof s;
        OK(tidepool_pool_stats(pool, &s));
        CHECK(s.mmap_calls == 1 && s.munmap_calls == 1);
        if (steps[i] == SIZE_MAX)
            CHECK(s.madvise_calls == 0);
        else
            CHECK(s.madvise_calls == 4);
        OK(tidepool_pool_destroy(pool));
    }
}

/* --- errors ------------------------------------------------------------------ */

static void errors_null_and_handles(void) {
    struct counter c = {0};
    tidepool_pool *bufs = new_buf_pool(64, 0);
    tidepool_pool *stacks = new_stack_pool(4096);
    tidepool_pool *objs = new_obj_pool(&c);
    tidepool_config cfg = buf_config(64, 0);
    void *p = (void *)1;
    tidepool_stack st;
    tidepool_stats s;
    s.size = sizeof s;
    tidepool_pool *out = NULL;

    EXPECT(tidepool_buf_pool_new(NULL, &out), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_buf_pool_new(&cfg, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_stack_pool_new(NULL, &out), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_obj_pool_new(NULL, &out), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_buf_get(NULL, &p), TIDEPOOL_ERR_NULL);
    CHECK(p == NULL); /* out-pointers are cleared on failure */
    EXPECT(tidepool_buf_get(bufs, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_buf_put(bufs, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_stack_get(NULL, &st), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_stack_get(stacks, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_stack_put(stacks, NULL), TIDEPOOL_ERR_NULL);
    memset(&st, 0, sizeof st);
    EXPECT(tidepool_stack_put(stacks, &st), TIDEPOOL_ERR_NULL); /* top is NULL */
    EXPECT(tidepool_obj_get(objs, 0, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_obj_put(objs, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_obj_adopt(objs, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_pool_stats(NULL, &s), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_pool_stats(bufs, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_pool_reclaim_unused(NULL, NULL), TIDEPOOL_ERR_NULL);
    EXPECT(tidepool_pool_destroy(NULL), TIDEPOOL_ERR_NULL);

    /* Not a pool: readable memory without the magic. */
    uint64_t fake[16];
    memset(fake, 0, sizeof fake);
    EXPECT(tidepool_buf_get((tidepool_pool *)(void *)fake, &p), TIDEPOOL_ERR_INVALID_POOL);
    EXPECT(tidepool_pool_destroy((tidepool_pool *)(void *)fake), TIDEPOOL_ERR_INVALID_POOL);
    EXPECT(tidepool_pool_drain((tidepool_pool *)(void *)((char *)fake + 1), NULL),
           TIDEPOOL_ERR_INVALID_POOL);

    /* The wrong kind of pool. */
    EXPECT(tidepool_buf_get(stacks, &p), TIDEPOOL_ERR_WRONG_KIND);
    EXPECT_MESSAGE("stack pool");
    EXPECT(tidepool_stack_get(objs, &st), TIDEPOOL_ERR_WRONG_KIND);
    EXPECT(tidepool_obj_get(bufs, 0, &p), TIDEPOOL_ERR_WRONG_KIND);
    EXPECT(tidepool_obj_put(bufs, &p), TIDEPOOL_ERR_WRONG_KIND);

    /* Unknown flags. */
    EXPECT(tidepool_obj_get(objs, 0x10, &p), TIDEPOOL_ERR_INVALID_ARGUMENT);
    CHECK(c.created == 0);

    OK(tidepool_pool_destroy(bufs));
    OK(tidepool_pool_destroy(stacks));
    OK(tidepool_pool_destroy(objs));
}

/* Each refused setting is named in the message. */
static void errors_config(void) {
    struct counter c = {0};
    tidepool_pool *pool = NULL;
    tidepool_config cfg;

    cfg = buf_config(0, 0);
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`object_size`");
    cfg = buf_config(64, 48);
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`align`");
    cfg = buf_config(64, 8192);
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`align`");
    cfg = buf_config(64, 0);
    cfg.create = counting_create;
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`create`");
    cfg = buf_config(64, 0);
    cfg.batch_size = 16;
    cfg.max_idle = 8;
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`max_idle`");
    cfg = buf_config(64, 0);
    cfg.max_idle = 64;
    cfg.min_idle = 65;
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`min_idle`");
    cfg = buf_config(64, 0);
    cfg.batch_size = 1 << 20;
    cfg.max_idle = (size_t)1 << 30;
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`batch_size`");
    cfg = buf_config(64, 0);
    cfg.flags = 0x80;
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`flags`");
    cfg = buf_config(SIZE_MAX - 8, 0);
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`object_size`");

    cfg = stack_config(4096);
    cfg.align = 64;
    EXPECT(tidepool_stack_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`align`");
    cfg = stack_config(0);
    EXPECT(tidepool_stack_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`object_size`");
    cfg = stack_config(SIZE_MAX - 8);
    EXPECT(tidepool_stack_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`object_size`");

    cfg = obj_config(&c);
    cfg.destroy = NULL;
    EXPECT(tidepool_obj_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`destroy`");
    /* No create callback: a pool of objects the caller makes; a get that
     * would need one says so. */
    cfg = obj_config(&c);
    cfg.create = NULL;
    cfg.min_idle = 2;
    OK(tidepool_obj_pool_new(&cfg, &pool));
    void *none = (void *)1;
    EXPECT(tidepool_obj_get(pool, 0, &none), TIDEPOOL_ERR_CREATE);
    EXPECT_MESSAGE("no create callback");
    CHECK(none == NULL);
    EXPECT(tidepool_obj_get(pool, TIDEPOOL_GET_NO_CREATE, &none), TIDEPOOL_EMPTY);
    size_t filled = 9;
    EXPECT(tidepool_pool_prefill(pool, &filled), TIDEPOOL_ERR_CREATE);
    OK(tidepool_pool_destroy(pool));
    /* Object-pool flags on another kind, and an unknown flag. */
    cfg = buf_config(64, 0);
    cfg.flags = TIDEPOOL_OBJ_ACCEPT_FOREIGN;
    EXPECT(tidepool_buf_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`flags`");
    cfg = obj_config(&c);
    cfg.flags = 1u << 20;
    EXPECT(tidepool_obj_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`flags`");
    cfg = stack_config(4096);
    cfg.maps_per_object = 2;
    EXPECT(tidepool_stack_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`maps_per_object`");
    cfg = obj_config(&c);
    cfg.burst = 64;
    cfg.batch_size = 8;
    EXPECT(tidepool_obj_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`burst`");
    cfg = obj_config(&c);
    cfg.object_size = 8;
    EXPECT(tidepool_obj_pool_new(&cfg, &pool), TIDEPOOL_ERR_CONFIG);
    EXPECT_MESSAGE("`object_size`");
    cfg = obj_config(&c);
    cfg.reclaim_interval_ms = 0; /* 0 is the default, fine */
    OK(tidepool_obj_pool_new(&cfg, &pool));
    OK(tidepool_pool_destroy(pool));
}

static void errors_put(void) {
    struct counter c = {0};
    tidepool_pool *bufs = new_buf_pool(128, 64);
    tidepool_pool *bufs2 = new_buf_pool(128, 64);
    tidepool_pool *objs = new_obj_pool(&c);
    tidepool_pool *objs2 = new_obj_pool(&c);
    tidepool_pool *stacks = new_stack_pool(8192);
    tidepool_pool *stacks2 = new_stack_pool(8192);

    /* Buffers. */
    unsigned char *heap = aligned_alloc(64, 256);
    CHECK(heap != NULL);
    memset(heap, 0, 256);
    EXPECT(tidepool_buf_put(bufs, heap + 64), TIDEPOOL_ERR_FOREIGN);
    EXPECT(tidepool_buf_put(bufs, heap + 65), TIDEPOOL_ERR_FOREIGN);
    void *b = NULL;
    OK(tidepool_buf_get(bufs, &b));
    EXPECT(tidepool_buf_put(bufs, (char *)b + 16), TIDEPOOL_ERR_FOREIGN);
    EXPECT(tidepool_buf_put(bufs2, b), TIDEPOOL_ERR_WRONG_POOL);
    OK(tidepool_buf_put(bufs, b));
    EXPECT(tidepool_buf_put(bufs, b), TIDEPOOL_ERR_DOUBLE_PUT);
    EXPECT_MESSAGE("already");
    check_counts(bufs);

    /* Objects. */
    long local = 0;
    EXPECT(tidepool_obj_put(objs, &local), TIDEPOOL_ERR_FOREIGN);
    void *o = NULL;
    OK(tidepool_obj_get(objs, 0, &o));
    EXPECT(tidepool_obj_put(objs2, o), TIDEPOOL_ERR_WRONG_POOL);
    EXPECT(tidepool_obj_adopt(objs2, o), TIDEPOOL_ERR_ALREADY_POOLED);
    EXPECT_MESSAGE("lent out");
    OK(tidepool_obj_put(objs, o));
    EXPECT(tidepool_obj_put(objs, o), TIDEPOOL_ERR_DOUBLE_PUT);
    EXPECT(tidepool_obj_adopt(objs, o), TIDEPOOL_ERR_ALREADY_POOLED);
    EXPECT_MESSAGE("idle in");
    check_counts(objs);

    /* Stacks: a struct get did not fill is refused without reading `top`. */
    tidepool_stack forged;
    memset(&forged, 0, sizeof forged);
    forged.top = (void *)0x1000; /* unmapped: reading it would crash */
    forged._gen = 1;
    forged._check = 2;
    EXPECT(tidepool_stack_put(stacks, &forged), TIDEPOOL_ERR_FOREIGN);
    tidepool_stack st, stale;
    OK(tidepool_stack_get(stacks, &st));
    EXPECT(tidepool_stack_put(stacks2, &st), TIDEPOOL_ERR_WRONG_POOL);
    forged = st;
    forged.top = (char *)st.top - 64;
    EXPECT(tidepool_stack_put(stacks, &forged), TIDEPOOL_ERR_FOREIGN);
    stale = st;
    OK(tidepool_stack_put(stacks, &st));
    EXPECT(tidepool_stack_put(stacks, &st), TIDEPOOL_ERR_DOUBLE_PUT);
    tidepool_stack again;
    OK(tidepool_stack_get(stacks, &again));
    CHECK(again.top == stale.top); /* the same stack, lent again */
    EXPECT(tidepool_stack_put(stacks, &stale), TIDEPOOL_ERR_DOUBLE_PUT);
    EXPECT_MESSAGE("stale");
    OK(tidepool_stack_put(stacks, &again));
    /* A stack that reached the depot and was purged (its header zeroed). */
    tidepool_config cfg = stack_config(8192);
    cfg.batch_size = 1;
    tidepool_pool *purged = NULL;
    OK(tidepool_stack_pool_new(&cfg, &purged));
    tidepool_stack four[4];
    for (int i = 0; i < 4; i++)
        OK(tidepool_stack_get(purged, &four[i]));
    for (int i = 0; i < 4; i++)
        OK(tidepool_stack_put(purged, &four[i]));
    size_t n = 0;
    OK(tidepool_pool_purge(purged, &n));
    CHECK(n == 2);
    int said_purged = 0;
    for (int i = 0; i < 4; i++) {
        EXPECT(tidepool_stack_put(purged, &four[i]), TIDEPOOL_ERR_DOUBLE_PUT);
        said_purged += strstr(tidepool_last_error(), "purged") != NULL;
    }
    CHECK(said_purged == 2);
    check_counts(purged);
    check_counts(stacks);

    OK(tidepool_pool_destroy(purged));
    OK(tidepool_pool_destroy(bufs));
    OK(tidepool_pool_destroy(bufs2));
    OK(tidepool_pool_destroy(objs));
    OK(tidepool_pool_destroy(objs2));
    OK(tidepool_pool_destroy(stacks));
    OK(tidepool_pool_destroy(stacks2));
    free(heap);
    check_all_destroyed(&c);
}

static void errors_create(void) {
    struct counter c = {0};
    tidepool_pool *pool = new_obj_pool(&c);
    void *o = (void *)1;
    c.fail_with = -5;
    EXPECT(tidepool_obj_get(pool, 0, &o), TIDEPOOL_ERR_CREATE);
    EXPECT_MESSAGE("-5");
    CHECK(o == NULL);
    c.fail_with = 0;
    c.return_null = 1;
    EXPECT(tidepool_obj_get(pool, 0, &o), TIDEPOOL_ERR_CREATE);
    EXPECT_MESSAGE("NULL");
    c.return_null = 0;
    tidepool_stats s = stats_of(pool);
    CHECK(s.created == 0 && s.misses == 0 && s.live == 0);

    /* A create that hands out an object some pool already holds. */
    struct counter c2 = {0};
    tidepool_pool *other = new_obj_pool(&c2);
    void *held = NULL;
    OK(tidepool_obj_get(other, 0, &held));
    c.fail_with = 0;
    tidepool_pool *dup = NULL;
    tidepool_config cfg = obj_config(&c);
    cfg.ctx = held;
    cfg.create = return_ctx; /* hands out `ctx` itself */
    cfg.destroy = counting_destroy;
    cfg.purge = NULL;
    OK(tidepool_obj_pool_new(&cfg, &dup));
    EXPECT(tidepool_obj_get(dup, 0, &o), TIDEPOOL_ERR_CREATE);
    EXPECT_MESSAGE("already holds");
    OK(tidepool_pool_destroy(dup));
    OK(tidepool_obj_put(other, held));
    OK(tidepool_pool_destroy(other));
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
    check_all_destroyed(&c2);
}

static void errors_exhausted_and_busy(void) {
    tidepool_config cfg = buf_config(64, 0);
    cfg.max_live = 2;
    cfg.batch_size = 1;
    cfg.max_idle = 2;
    tidepool_pool *bufs = NULL;
    OK(tidepool_buf_pool_new(&cfg, &bufs));
    void *a, *b, *c3;
    OK(tidepool_buf_get(bufs, &a));
    OK(tidepool_buf_get(bufs, &b));
    EXPECT(tidepool_buf_get(bufs, &c3), TIDEPOOL_ERR_EXHAUSTED);
    EXPECT_MESSAGE("max_live");
    EXPECT(tidepool_pool_destroy(bufs), TIDEPOOL_ERR_BUSY);
    EXPECT_MESSAGE("2 object(s) out");
    OK(tidepool_buf_put(bufs, a)); /* still usable after BUSY */
    EXPECT(tidepool_pool_destroy(bufs), TIDEPOOL_ERR_BUSY);
    OK(tidepool_buf_put(bufs, b));
    OK(tidepool_pool_destroy(bufs));

    struct counter c = {0};
    tidepool_config ocfg = obj_config(&c);
    ocfg.max_live = 1;
    ocfg.batch_size = 1;
    ocfg.max_idle = 1;
    tidepool_pool *objs = NULL;
    OK(tidepool_obj_pool_new(&ocfg, &objs));
    void *o, *o2;
    OK(tidepool_obj_get(objs, 0, &o));
    EXPECT(tidepool_obj_get(objs, 0, &o2), TIDEPOOL_ERR_EXHAUSTED);
    /* An adopted object takes a place under max_live: none is left, so
     * it stays the caller's. */
    struct obj *mine = obj_make(&c);
    EXPECT(tidepool_obj_adopt(objs, mine), TIDEPOOL_ERR_EXHAUSTED);
    EXPECT_MESSAGE("still yours");
    OK(tidepool_obj_put(objs, o));
    OK(tidepool_pool_drain(objs, NULL));
    OK(tidepool_obj_adopt(objs, mine));
    EXPECT(tidepool_pool_destroy(objs), TIDEPOOL_ERR_BUSY); /* `mine` is out */
    OK(tidepool_obj_put(objs, mine));
    OK(tidepool_pool_destroy(objs));
    check_all_destroyed(&c);

    tidepool_config scfg = stack_config(4096);
    scfg.max_live = 1;
    scfg.batch_size = 1;
    scfg.max_idle = 1;
    tidepool_pool *stacks = NULL;
    OK(tidepool_stack_pool_new(&scfg, &stacks));
    tidepool_stack s1, s2;
    OK(tidepool_stack_get(stacks, &s1));
    EXPECT(tidepool_stack_get(stacks, &s2), TIDEPOOL_ERR_EXHAUSTED);
    CHECK(s2.top == NULL);
    EXPECT(tidepool_pool_destroy(stacks), TIDEPOOL_ERR_BUSY);
    OK(tidepool_stack_put(stacks, &s1));
    OK(tidepool_pool_destroy(stacks));
}

/* get_timeout at max_live 1, for each kind: with nothing given back the
 * wait runs out (TIMEOUT, out cleared); with a put on another thread 20 ms
 * into a 10 s wait, the waiter is handed that very object. */
struct late_put {
    tidepool_pool *pool;
    enum { LATE_BUF, LATE_OBJ, LATE_STACK } kind;
    void *ptr;
    tidepool_stack stack;
};

static void *put_later(void *arg) {
    struct late_put *p = arg;
    struct timespec ms20 = {0, 20 * 1000 * 1000};
    nanosleep(&ms20, NULL);
    switch (p->kind) {
    case LATE_BUF: OK(tidepool_buf_put(p->pool, p->ptr)); break;
    case LATE_OBJ: OK(tidepool_obj_put(p->pool, p->ptr)); break;
    case LATE_STACK: OK(tidepool_stack_put(p->pool, &p->stack)); break;
    }
    return NULL;
}

static const uint64_t MS = 1000 * 1000;

static void get_timeout(void) {
    pthread_t t;

    tidepool_config cfg = buf_config(64, 0);
    cfg.max_live = 1;
    cfg.batch_size = 1;
    tidepool_pool *bufs = NULL;
    OK(tidepool_buf_pool_new(&cfg, &bufs));
    void *a = NULL, *b = (void *)1;
    OK(tidepool_buf_get_timeout(bufs, 10 * MS, &a)); /* free: no wait */
    EXPECT(tidepool_buf_get_timeout(bufs, 5 * MS, &b), TIDEPOOL_ERR_TIMEOUT);
    CHECK(b == NULL);
    EXPECT_MESSAGE("max_live");
    EXPECT(tidepool_buf_get_timeout(bufs, 0, &b), TIDEPOOL_ERR_TIMEOUT);
    EXPECT(tidepool_buf_get(bufs, &b), TIDEPOOL_ERR_EXHAUSTED); /* plain get fails fast */
    struct late_put lb = {bufs, LATE_BUF, a, {0}};
    CHECK(pthread_create(&t, NULL, put_later, &lb) == 0);
    OK(tidepool_buf_get_timeout(bufs, 10000 * MS, &b));
    CHECK(b == a); /* handed straight to the waiter */
    CHECK(pthread_join(t, NULL) == 0);
    OK(tidepool_buf_put(bufs, b));
    OK(tidepool_pool_destroy(bufs));

    struct counter c = {0};
    tidepool_config ocfg = obj_config(&c);
    ocfg.max_live = 1;
    ocfg.batch_size = 1;
    tidepool_pool *objs = NULL;
    OK(tidepool_obj_pool_new(&ocfg, &objs));
    void *o = NULL, *o2 = (void *)1;
    OK(tidepool_obj_get_timeout(objs, 0, 10 * MS, &o));
    EXPECT(tidepool_obj_get_timeout(objs, 0, 5 * MS, &o2), TIDEPOOL_ERR_TIMEOUT);
    CHECK(o2 == NULL);
    EXPECT(tidepool_obj_get_timeout(objs, 0x80, 5 * MS, &o2), TIDEPOOL_ERR_INVALID_ARGUMENT);
    struct late_put lo = {objs, LATE_OBJ, o, {0}};
    CHECK(pthread_create(&t, NULL, put_later, &lo) == 0);
    OK(tidepool_obj_get_timeout(objs, 0, 10000 * MS, &o2));
    CHECK(o2 == o && c.created == 1);
    CHECK(pthread_join(t, NULL) == 0);
    OK(tidepool_obj_put(objs, o2));
    check_counts(objs);
    OK(tidepool_pool_destroy(objs));
    check_all_destroyed(&c);

    tidepool_config scfg = stack_config(4096);
    scfg.max_live = 1;
    scfg.batch_size = 1;
    tidepool_pool *stacks = NULL;
    OK(tidepool_stack_pool_new(&scfg, &stacks));
    tidepool_stack s1, s2;
    OK(tidepool_stack_get_timeout(stacks, 10 * MS, &s1));
    EXPECT(tidepool_stack_get_timeout(stacks, 5 * MS, &s2), TIDEPOOL_ERR_TIMEOUT);
    CHECK(s2.top == NULL);
    struct late_put ls = {stacks, LATE_STACK, NULL, s1};
    CHECK(pthread_create(&t, NULL, put_later, &ls) == 0);
    OK(tidepool_stack_get_timeout(stacks, 10000 * MS, &s2));
    CHECK(s2.base == s1.base);
    CHECK(pthread_join(t, NULL) == 0);
    OK(tidepool_stack_put(stacks, &s2));
    OK(tidepool_pool_destroy(stacks));
}

/* Memory runs out: a 4 GiB address-space limit, then a buffer and a stack
 * bigger than that. */
static void error_no_memory(void) {
    tidepool_pool *bufs = new_buf_pool((size_t)16 << 30, 0);
    tidepool_pool *stacks = new_stack_pool((size_t)16 << 30);
    struct rlimit lim = {(rlim_t)4 << 30, (rlim_t)4 << 30};
    CHECK(setrlimit(RLIMIT_AS, &lim) == 0);
    void *b = (void *)1;
    EXPECT(tidepool_buf_get(bufs, &b), TIDEPOOL_ERR_NO_MEMORY);
    CHECK(b == NULL);
    tidepool_stack st;
    EXPECT(tidepool_stack_get(stacks, &st), TIDEPOOL_ERR_NO_MEMORY);
    EXPECT_MESSAGE("ENOMEM");
    CHECK(stats_of(stacks).mapped == 0 && stats_of(stacks).reclaim_retries == 1);
    OK(tidepool_pool_destroy(bufs));
    OK(tidepool_pool_destroy(stacks));
}

/* The QEMU 2024 abort, as an error: this process takes every memory mapping
 * `vm.max_map_count` allows, then asks for a stack. */
static void error_map_count(void) {
    tidepool_config cfg = stack_config(4096);
    cfg.max_live = SIZE_MAX; /* no budget: let the kernel refuse */
    tidepool_pool *stacks = NULL;
    OK(tidepool_stack_pool_new(&cfg, &stacks));
    tidepool_stack warm;
    OK(tidepool_stack_get(stacks, &warm)); /* the pool's own bookkeeping */
    OK(tidepool_stack_put(stacks, &warm));
    OK(tidepool_pool_drain(stacks, NULL));

    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    CHECK(f != NULL);
    long limit = 0;
    CHECK(fscanf(f, "%ld", &limit) == 1);
    fclose(f);
    CHECK(limit > 0 && limit <= (1L << 22));
    long page = sysconf(_SC_PAGESIZE);
    size_t len = (size_t)(2 * limit + 2) * (size_t)page;
    char *region = mmap(NULL, len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(region != MAP_FAILED);
    /* Every other page read-only: one mapping each, until the kernel says
     * no more. */
    long split = 0;
    for (long i = 1; i < 2 * limit; i += 2) {
        if (mprotect(region + i * page, (size_t)page, PROT_READ) != 0) {
            CHECK(errno == ENOMEM);
            break;
        }
        split++;
    }
    CHECK(split > 0);
    tidepool_stack st;
    EXPECT(tidepool_stack_get(stacks, &st), TIDEPOOL_ERR_MAP_COUNT);
    EXPECT_MESSAGE("max_map_count");
    CHECK(munmap(region, len) == 0);
    OK(tidepool_stack_get(stacks, &st)); /* room again */
    OK(tidepool_stack_put(stacks, &st));
    tidepool_stats s = stats_of(stacks);
    CHECK(s.reclaim_retries == 1 && s.live == 0);
    OK(tidepool_pool_destroy(stacks));
}

static void *no_error_here(void *arg) {
    (void)arg;
    return (void *)(uintptr_t)(tidepool_last_error()[0] == '\0');
}

static void last_error(void) {
    tidepool_pool *pool = new_buf_pool(64, 0);
    long local;
    EXPECT(tidepool_buf_put(pool, &local), TIDEPOOL_ERR_FOREIGN);
    const char *msg = tidepool_last_error();
    CHECK(strncmp(msg, "TIDEPOOL_ERR_FOREIGN: ", 22) == 0);
    size_t full = strlen(msg);
    char small[10];
    CHECK(tidepool_last_error_copy(small, sizeof small) == full);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, msg, sizeof small - 1) == 0);
    CHECK(tidepool_last_error_copy(NULL, 0) == full);
    /* Success leaves the message alone, as with errno. */
    void *b;
    OK(tidepool_buf_get(pool, &b));
    OK(tidepool_buf_put(pool, b));
    CHECK(strncmp(tidepool_last_error(), "TIDEPOOL_ERR_FOREIGN", 20) == 0);
    /* Per thread. */
    pthread_t t;
    void *clean = NULL;
    CHECK(pthread_create(&t, NULL, no_error_here, NULL) == 0);
    CHECK(pthread_join(t, &clean) == 0);
    CHECK(clean == (void *)1);

    CHECK(strcmp(tidepool_status_name(TIDEPOOL_ERR_DOUBLE_PUT), "TIDEPOOL_ERR_DOUBLE_PUT") == 0);
    CHECK(strcmp(tidepool_status_name(TIDEPOOL_OK), "TIDEPOOL_OK") == 0);
    CHECK(strcmp(tidepool_status_name(12345), "unknown") == 0);
    CHECK(strcmp(tidepool_status_name(TIDEPOOL_ERR_TIMEOUT), "TIDEPOOL_ERR_TIMEOUT") == 0);
    for (int s = TIDEPOOL_ERR_TIMEOUT; s <= TIDEPOOL_EMPTY; s++)
        CHECK(strcmp(tidepool_status_name(s), "unknown") != 0);
    CHECK(strcmp(tidepool_version(), "0.1.0") == 0);
    OK(tidepool_pool_destroy(pool));
}

/* --- callbacks that call back ------------------------------------------------ */

struct reentrant {
    struct counter counter;
    tidepool_pool *self;
    tidepool_pool *bufs;
    atomic_long foreign_in_destroy;
};

static int reentrant_create(void *ctx, void **out) {
    struct reentrant *r = ctx;
    /* Into the pool that is creating: its stats, and an adoption and a put
     * (into this thread's cache, whose access must not be open here). */
    tidepool_stats s = stats_of(r->self);
    (void)s;
    struct obj *extra = obj_make(&r->counter);
    OK(tidepool_obj_adopt(r->self, extra));
    OK(tidepool_obj_put(r->self, extra));
    /* Into another pool. */
    void *b;
    OK(tidepool_buf_get(r->bufs, &b));
    OK(tidepool_buf_put(r->bufs, b));
    return counting_create(&r->counter, out);
}

static void reentrant_destroy(void *ctx, void *obj) {
    struct reentrant *r = ctx;
    /* The object being destroyed is already forgotten (and its live-set
     * shard unlocked): putting it is FOREIGN, not a deadlock. */
    if (tidepool_obj_put(r->self, obj) == TIDEPOOL_ERR_FOREIGN)
        atomic_fetch_add(&r->foreign_in_destroy, 1);
    tidepool_stats s = stats_of(r->self);
    (void)s;
    counting_destroy(&r->counter, obj);
}

static void reentrant_purge(void *ctx, void *obj) {
    struct reentrant *r = ctx;
    tidepool_stats s = stats_of(r->self);
    (void)s;
    counting_purge(&r->counter, obj);
}

static void reentrant_callbacks(void) {
    struct reentrant r;
    memset(&r, 0, sizeof r);
    r.bufs = new_buf_pool(64, 0);
    tidepool_config cfg = obj_config(&r.counter);
    cfg.ctx = &r;
    cfg.create = reentrant_create;
    cfg.destroy = reentrant_destroy;
    cfg.purge = reentrant_purge;
    cfg.batch_size = 2;
    cfg.max_idle = 4;
    OK(tidepool_obj_pool_new(&cfg, &r.self));
    void *held[12];
    for (int i = 0; i < 12; i++)
        OK(tidepool_obj_get(r.self, 0, &held[i]));
    for (int i = 0; i < 12; i++)
        OK(tidepool_obj_put(r.self, held[i])); /* past max_idle: destroys */
    OK(tidepool_pool_purge(r.self, NULL));
    check_counts(r.self);
    OK(tidepool_pool_drain(r.self, NULL));
    check_counts(r.self);
    OK(tidepool_pool_destroy(r.self));
    OK(tidepool_pool_destroy(r.bufs));
    check_all_destroyed(&r.counter);
    CHECK(r.foreign_in_destroy == r.counter.destroyed && r.counter.destroyed > 0);
}

/* --- thread exit ------------------------------------------------------------- */

struct exit_args {
    tidepool_pool *pool;
    struct counter *counter;
};

static void *exit_thread(void *arg) {
    struct exit_args *a = arg;
    void *held[5];
    for (int i = 0; i < 5; i++)
        OK(tidepool_obj_get(a->pool, 0, &held[i]));
    for (int i = 0; i < 5; i++)
        OK(tidepool_obj_put(a->pool, held[i]));
    tidepool_stats s = stats_of(a->pool);
    CHECK(s.idle == 5 && s.idle_depot == 0); /* all in this thread's cache */
    OK(tidepool_thread_exit());
    /* Handed to the depot, not destroyed: other threads reuse them. */
    CHECK(a->counter->destroyed == 0);
    s = stats_of(a->pool);
    CHECK(s.idle == 5 && s.idle_depot == 5 && s.live == 0);
    /* The thread may go on using pools; its new cache goes back at exit. */
    OK(tidepool_obj_get(a->pool, 0, &held[0]));
    OK(tidepool_obj_put(a->pool, held[0]));
    return NULL;
}

static void thread_exit(void) {
    struct counter c = {0};
    tidepool_config cfg = obj_config(&c);
    cfg.batch_size = 8;
    tidepool_pool *pool = NULL;
    OK(tidepool_obj_pool_new(&cfg, &pool));
    struct exit_args args = {pool, &c};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, exit_thread, &args) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    /* The thread's last cache went to the depot when it exited. */
    tidepool_stats s = stats_of(pool);
    CHECK(s.idle == 5 && s.idle_depot == 5);
    /* Reused here without creating. */
    long created = c.created;
    void *obj = NULL;
    OK(tidepool_obj_get(pool, 0, &obj));
    CHECK(c.created == created);
    OK(tidepool_obj_put(pool, obj));
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
}

/* A pool with its background thread is made first (as QEMU's, from a
 * constructor before main blocks its signals); then the application blocks
 * SIGALRM to read it from a signalfd. A process-directed SIGALRM must reach
 * the signalfd: tidepool's thread blocks every signal (else the signal's
 * default action, delivered there, ends the process). */
static void signals_stay_with_the_application(void) {
    struct counter c = {0};
    tidepool_config cfg = obj_config(&c);
    cfg.flags &= ~TIDEPOOL_NO_BACKGROUND;
    tidepool_pool *pool = NULL;
    OK(tidepool_obj_pool_new(&cfg, &pool));
    void *obj = NULL;
    OK(tidepool_obj_get(pool, 0, &obj));
    OK(tidepool_obj_put(pool, obj));
    int signals[] = {SIGALRM, SIGIO};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, signals[i]);
        CHECK(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0);
        int fd = signalfd(-1, &set, SFD_CLOEXEC);
        CHECK(fd >= 0);
        CHECK(kill(getpid(), signals[i]) == 0);
        struct signalfd_siginfo info;
        CHECK(read(fd, &info, sizeof info) == (ssize_t)sizeof info);
        CHECK(info.ssi_signo == (uint32_t)signals[i]);
        close(fd);
    }
    check_counts(pool);
    OK(tidepool_pool_destroy(pool));
    check_all_destroyed(&c);
}

int main(int argc, char **argv) {
    static const struct test_case cases[] = {
        {"buf_roundtrip", buf_roundtrip},
        {"stack_roundtrip", stack_roundtrip},
        {"obj_roundtrip", obj_roundtrip},
        {"obj_adopt", obj_adopt},
        {"adopted_objects_are_reclaimed", adopted_objects_are_reclaimed},
        {"unchecked_pools_reserve_at_empty", unchecked_pools_reserve_at_empty},
        {"pool_thread_exit", pool_thread_exit},
        {"adjust_max_idle", adjust_max_idle},
        {"maintenance", maintenance},
        {"config_versions", config_versions},
        {"stats_versions", stats_versions},
        {"teardown_counts", teardown_counts},
        {"errors_null_and_handles", errors_null_and_handles},
        {"errors_config", errors_config},
        {"errors_put", errors_put},
        {"errors_create", errors_create},
        {"errors_exhausted_and_busy", errors_exhausted_and_busy},
        {"get_timeout", get_timeout},
        {"error_no_memory", error_no_memory},
        {"error_map_count", error_map_count},
        {"last_error", last_error},
        {"reentrant_callbacks", reentrant_callbacks},
        {"thread_exit", thread_exit},
        {"signals_stay_with_the_application", signals_stay_with_the_application},
    };
    return run_cases(cases, sizeof cases / sizeof cases[0], argc, argv);
}
