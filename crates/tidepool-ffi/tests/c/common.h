/* Shared by the C tests: checks that exit with a message, a counting object
 * manager whose callbacks catch double destroys, and a case table. */
#ifndef TIDEPOOL_TEST_COMMON_H
#define TIDEPOOL_TEST_COMMON_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__,        \
                    __LINE__, #cond, tidepool_last_error());                              \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define EXPECT(call, want)                                                                \
    do {                                                                                  \
        tidepool_status got_ = (call);                                                    \
        if (got_ != (want)) {                                                             \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s; last error: %s\n",       \
                    __FILE__, __LINE__, #call, tidepool_status_name(got_),                \
                    tidepool_status_name(want), tidepool_last_error());                   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define OK(call) EXPECT(call, TIDEPOOL_OK)

/* The last error names `what` (a field, a word of the message). */
#define EXPECT_MESSAGE(what)                                                              \
    do {                                                                                  \
        if (!strstr(tidepool_last_error(), (what))) {                                     \
            fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n",         \
                    __FILE__, __LINE__, tidepool_last_error(), (what));                   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static inline tidepool_stats stats_of(tidepool_pool *pool) {
    tidepool_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    OK(tidepool_pool_stats(pool, &s));
    CHECK(s.size == sizeof s);
    return s;
}

/* Exact whenever no thread is inside the pool. */
static inline void check_counts(tidepool_pool *pool) {
    tidepool_stats s = stats_of(pool);
    /* `created` counts adopted objects too. */
    if (s.live + s.idle != s.created - s.destroyed || s.adopted > s.created) {
        fprintf(stderr,
                "counts off: live %llu + idle %llu != created %llu (adopted %llu) - destroyed "
                "%llu\n",
                (unsigned long long)s.live, (unsigned long long)s.idle,
                (unsigned long long)s.created, (unsigned long long)s.adopted,
                (unsigned long long)s.destroyed);
        exit(1);
    }
}

/* --- a counting object manager ------------------------------------------ */

#define OBJ_ALIVE 0x0b1ec7a1u
#define OBJ_DEAD 0xdeadbeefu

struct obj {
    unsigned magic;
    unsigned purged;
    long payload;
};

struct counter {
    atomic_long created;   /* by the create callback */
    atomic_long made;      /* by the test itself, for adoption */
    atomic_long destroyed; /* destroy callback calls */
    atomic_long purged;    /* purge callback calls */
    int fail_with;         /* create returns this when non-zero */
    int return_null;       /* create returns 0 and no object */
};

static inline struct obj *obj_make(struct counter *c) {
    struct obj *o = malloc(sizeof *o);
    CHECK(o != NULL);
    o->magic = OBJ_ALIVE;
    o->purged = 0;
    o->payload = 0;
    atomic_fetch_add(&c->made, 1);
    return o;
}

static inline int counting_create(void *ctx, void **out) {
    struct counter *c = ctx;
    if (c->fail_with)
        return c->fail_with;
    if (c->return_null) {
        *out = NULL;
        return 0;
    }
    struct obj *o = malloc(sizeof *o);
    if (!o)
        return 12;
    o->magic = OBJ_ALIVE;
    o->purged = 0;
    o->payload = 0;
    atomic_fetch_add(&c->created, 1);
    *out = o;
    return 0;
}

/* Objects are never freed, so that a second destroy of one is caught (its
 * magic says DEAD) instead of being a use after free. */
static inline void counting_destroy(void *ctx, void *obj) {
    struct counter *c = ctx;
    struct obj *o = obj;
    if (o->magic != OBJ_ALIVE) {
        fprintf(stderr, "destroy of %p: magic %#x, destroyed twice?\n", obj, o->magic);
        abort();
    }
    o->magic = OBJ_DEAD;
    atomic_fetch_add(&c->destroyed, 1);
}

static inline void counting_purge(void *ctx, void *obj) {
    struct counter *c = ctx;
    struct obj *o = obj;
    CHECK(o->magic == OBJ_ALIVE);
    o->purged++;
    atomic_fetch_add(&c->purged, 1);
}

static inline tidepool_config obj_config(struct counter *c) {
    tidepool_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.flags = TIDEPOOL_NO_BACKGROUND;
    cfg.ctx = c;
    cfg.create = counting_create;
    cfg.destroy = counting_destroy;
    cfg.purge = counting_purge;
    return cfg;
}

/* Every object made was destroyed exactly once (call after destroying the
 * pool). */
static inline void check_all_destroyed(struct counter *c) {
    long made = atomic_load(&c->created) + atomic_load(&c->made);
    long destroyed = atomic_load(&c->destroyed);
    if (made != destroyed) {
        fprintf(stderr, "made %ld objects, destroyed %ld\n", made, destroyed);
        exit(1);
    }
}

/* --- cases ---------------------------------------------------------------- */

struct test_case {
    const char *name;
    void (*run)(void);
};

static inline int run_cases(const struct test_case *cases, size_t n, int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) {
            cases[i].run();
            printf("ok %s\n", cases[i].name);
            fflush(stdout);
            ran++;
        }
    }
    if (!ran) {
        fprintf(stderr, "no case named %s\n", argv[1]);
        return 2;
    }
    return 0;
}

#endif
