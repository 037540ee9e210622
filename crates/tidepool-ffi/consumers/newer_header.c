/* A program built against a newer header than the installed library: its
 * tidepool_config has a field this library does not know, and sets it. The
 * library must refuse the config with TIDEPOOL_ERR_STRUCT_SIZE and say why,
 * never read past its own struct as if it knew the field.
 * bin/c-install-check.sh builds it against the installed library. */
#include <stdio.h>
#include <string.h>
#include <tidepool.h>

/* What a newer tidepool.h could declare: the same fields, one appended. */
typedef struct newer_config {
    tidepool_config known;
    uint64_t field_from_the_future;
} newer_config;

int main(void) {
    newer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.known.size = sizeof cfg;
    cfg.known.object_size = 4096;
    cfg.field_from_the_future = 1;
    tidepool_pool *pool = NULL;
    tidepool_status st = tidepool_buf_pool_new(&cfg.known, &pool);
    if (st != TIDEPOOL_ERR_STRUCT_SIZE || pool != NULL) {
        fprintf(stderr, "a newer config was not refused: status %d\n", (int)st);
        return 1;
    }
    printf("refused: %s\n", tidepool_last_error());
    /* The same struct asking for nothing new is accepted. */
    cfg.field_from_the_future = 0;
    st = tidepool_buf_pool_new(&cfg.known, &pool);
    if (st != TIDEPOOL_OK) {
        fprintf(stderr, "a newer config with the new field zero failed: %s\n",
                tidepool_last_error());
        return 1;
    }
    tidepool_pool_destroy(pool);
    printf("ok newer_header\n");
    return 0;
}
