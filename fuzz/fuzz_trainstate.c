// libFuzzer target: trainer.json, the trainer's part of a checkpoint of `ember train`
// (apps/ember/trainstate.h: trainstate_decode, which `ember ckpt info`, `ember eval --load` and
// `ember train --resume` run on the blob), and what the CLI does with what it decodes.
//
// Input: the blob's text itself (NUL-terminated by the harness, in a buffer of its exact size).
// fuzz/trainstate.dict holds its members, names and value shapes. Checked:
//   - the status is EMBER_OK or EMBER_ERR_FORMAT (a message on the context), nothing else;
//   - nothing stays allocated on the context, and trainstate_free frees the rest (the leak check);
//   - a decoded state is one the trainer could have written: encoded again and decoded, every
//     field of trainstate_fields() and the position read back the same (a value that does not
//     survive the round trip, such as a number JSON cannot print, must have been refused);
//   - the decoded options resume themselves (trainstate_check) and eval --load takes them
//     (trainstate_apply gives the same fields).
#define _GNU_SOURCE // mkdtemp (fuzz_input.h)
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "trainstate.h"

static ember_ctx *ctx;
static size_t baseline;

static void quiet(void *user, ember_log_level level, const char *msg) { (void)user, (void)level, (void)msg; }

static void finalize(void) { ember_ctx_destroy(ctx); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = 1;
    cc.log = quiet;
    if (ember_ctx_create(&cc, &ctx) != EMBER_OK) abort();
    baseline = ember_ctx_bytes_outstanding(ctx);
    atexit(finalize);
    return 0;
}

// Row f of a and b hold the same value.
static bool same_field(const trainstate_field *f, const train_options *a, const train_options *b) {
    const char *x = (const char *)a + f->at, *y = (const char *)b + f->at;
    switch (f->kind) {
    case TS_PATH: {
        const char *s, *t;
        memcpy(&s, x, sizeof s);
        memcpy(&t, y, sizeof t);
        return (!s && !t) || (s && t && strcmp(s, t) == 0);
    }
    case TS_LAYERS: {
        int32_t na, nb;
        memcpy(&na, (const char *)a + f->count_at, sizeof na);
        memcpy(&nb, (const char *)b + f->count_at, sizeof nb);
        return na == nb && na >= 1 && na <= TRAIN_MAX_LAYERS && memcmp(x, y, sizeof(int32_t) * (size_t)na) == 0;
    }
    case TS_REAL:
        if (f->size == sizeof(float)) {
            float u, v;
            memcpy(&u, x, sizeof u);
            memcpy(&v, y, sizeof v);
            return u == v;
        } else {
            double u, v;
            memcpy(&u, x, sizeof u);
            memcpy(&v, y, sizeof v);
            return u == v;
        }
    case TS_INT:
    case TS_SEED:
    case TS_NAME:
    case TS_ROWS:
    case TS_HOTS:
    case TS_TABLES: return memcmp(x, y, f->size) == 0;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    trainstate ts;
    const ember_status st = trainstate_decode(ctx, "fuzz", text, &ts);
    free(text);
    FUZZ_REQUIRE(st == EMBER_OK || st == EMBER_ERR_FORMAT, "status %s", ember_status_name(st));
    FUZZ_REQUIRE(st == EMBER_OK || ember_ctx_errmsg(ctx)[0] != '\0', "a refusal without a message");
    FUZZ_REQUIRE(ember_ctx_bytes_outstanding(ctx) == baseline, "%zu bytes left on the context",
                 ember_ctx_bytes_outstanding(ctx) - baseline);
    if (st == EMBER_OK) {
        int n;
        const trainstate_field *f = trainstate_fields(&n);
        char *again = NULL;
        FUZZ_REQUIRE(trainstate_encode(ctx, &ts, &again) == EMBER_OK, "encode: %s", ember_ctx_errmsg(ctx));
        trainstate back;
        const ember_status st2 = trainstate_decode(ctx, "fuzz", again, &back);
        FUZZ_REQUIRE(st2 == EMBER_OK, "what it decoded, encoded, does not decode: %s", ember_ctx_errmsg(ctx));
        for (int i = 0; i < n; i++) {
            FUZZ_REQUIRE(same_field(&f[i], &ts.cfg, &back.cfg), "%s.%s changed in a round trip", f[i].section,
                         f[i].key);
        }
        FUZZ_REQUIRE(memcmp(&ts.pos, &back.pos, sizeof ts.pos) == 0 && ts.world_size == back.world_size &&
                         ts.num_dense_params == back.num_dense_params && ts.dense_step == back.dense_step &&
                         ts.digest_losses == back.digest_losses && ts.digest_outputs == back.digest_outputs,
                     "the position, world size or digests changed in a round trip");
        trainstate_free(&back);
        trainstate_text_free(again);
        FUZZ_REQUIRE(trainstate_check(ctx, &ts, &ts.cfg) == EMBER_OK, "does not resume itself: %s",
                     ember_ctx_errmsg(ctx));
        train_options o;
        train_options_default(&o);
        trainstate_apply(&ts, &o);
        for (int i = 0; i < n; i++)
            FUZZ_REQUIRE(same_field(&f[i], &ts.cfg, &o), "apply: %s.%s not copied", f[i].section, f[i].key);
        FUZZ_REQUIRE(ember_ctx_bytes_outstanding(ctx) == baseline, "%zu bytes left on the context after encoding",
                     ember_ctx_bytes_outstanding(ctx) - baseline);
    }
    trainstate_free(&ts);
    return 0;
}
