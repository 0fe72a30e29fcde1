// The trainer's part of a checkpoint and the save directories (trainstate.h).
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "appctx.h"
#include "trainstate.h"

#define BLOB_PARAMS "dense.params"
#define BLOB_M1 "dense.m1"
#define BLOB_M2 "dense.m2"

void trainstate_free(trainstate *ts) {
    free(ts->data_path);
    free(ts->eval_data_path);
    ts->data_path = ts->eval_data_path = NULL;
    ts->cfg.data_path = ts->cfg.eval_data_path = NULL;
}

// ---- trainer.json ------------------------------------------------------------------------------

// First line of the training window of a Criteo file: the held-out eval head, or 0.
static int64_t held_out_lines(const train_options *o) {
    return o->dataset == TRAIN_CRITEO && !o->eval_data_path ? o->limit_val_batches * o->batch_size : 0;
}

static cJSON *int_array(const int32_t *v, int32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static void add_string_or_null(cJSON *o, const char *key, const char *value) {
    if (value) cJSON_AddStringToObject(o, key, value);
    else cJSON_AddNullToObject(o, key);
}

static void add_u64(cJSON *o, const char *key, uint64_t v, bool hex) {
    char text[32];
    snprintf(text, sizeof text, hex ? "%016" PRIx64 : "%" PRIu64, v);
    cJSON_AddStringToObject(o, key, text);
}

ember_status trainstate_encode(ember_ctx *ctx, const trainstate *ts, char **text) {
    const train_options *o = &ts->cfg;
    *text = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", TRAINSTATE_FORMAT);
    cJSON_AddNumberToObject(root, "world_size", ts->world_size);

    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddNumberToObject(model, "embedding_dim", o->embedding_dim);
    cJSON *rows = cJSON_AddArrayToObject(model, "rows");
    for (int f = 0; rows && f < DLRM_NUM_SPARSE; f++) cJSON_AddItemToArray(rows, cJSON_CreateNumber((double)o->rows[f]));
    cJSON_AddItemToObject(model, "dense_arch_layer_sizes", int_array(o->bottom, o->num_bottom));
    cJSON_AddItemToObject(model, "over_arch_layer_sizes", int_array(o->top, o->num_top));
    cJSON_AddNumberToObject(model, "dense_parameters", (double)ts->num_dense_params);
    cJSON_AddStringToObject(model, "dense_optimizer", dense_optim_name(o->dense_optimizer));
    cJSON_AddStringToObject(model, "embedding_optimizer", ember_optim_name(o->embedding_optimizer));
    cJSON_AddStringToObject(model, "grad_convention", ember_grad_convention_name(o->grad_convention));

    cJSON *data = cJSON_AddObjectToObject(root, "data");
    cJSON_AddStringToObject(data, "dataset", train_dataset_name(o->dataset));
    add_u64(data, "seed", o->seed, false);
    cJSON_AddNumberToObject(data, "zipf_alpha", o->zipf_alpha);
    add_string_or_null(data, "data_path", o->data_path);
    add_string_or_null(data, "eval_data_path", o->eval_data_path);
    cJSON_AddNumberToObject(data, "held_out_lines", (double)held_out_lines(o));
    cJSON_AddStringToObject(data, "malformed", criteo_malformed_name(o->malformed));
    cJSON_AddNumberToObject(data, "batch_size", (double)o->batch_size);

    cJSON *training = cJSON_AddObjectToObject(root, "training");
    cJSON_AddNumberToObject(training, "epochs", o->epochs);
    cJSON_AddNumberToObject(training, "limit_train_batches", (double)o->limit_train_batches);
    cJSON_AddNumberToObject(training, "limit_val_batches", (double)o->limit_val_batches);
    cJSON_AddNumberToObject(training, "eval_interval", (double)o->eval_interval);
    cJSON_AddNumberToObject(training, "learning_rate", (double)o->learning_rate);
    cJSON_AddNumberToObject(training, "embedding_learning_rate", (double)o->embedding_learning_rate);
    cJSON_AddNumberToObject(training, "checkpoint_interval", (double)o->checkpoint_interval);
    cJSON_AddNumberToObject(training, "keep_checkpoints", o->keep_checkpoints);

    cJSON *pos = cJSON_AddObjectToObject(root, "position");
    cJSON_AddNumberToObject(pos, "epoch", ts->pos.epoch);
    cJSON_AddNumberToObject(pos, "next_batch", (double)ts->pos.next_batch);
    cJSON_AddNumberToObject(pos, "steps", (double)ts->pos.steps);
    cJSON_AddNumberToObject(pos, "samples", (double)ts->pos.samples);
    cJSON_AddNumberToObject(pos, "skipped_batches", (double)ts->pos.skipped_batches);

    cJSON *opt = cJSON_AddObjectToObject(root, "dense_optimizer");
    cJSON_AddStringToObject(opt, "kind", dense_optim_name(o->dense_optimizer));
    cJSON_AddNumberToObject(opt, "step", (double)ts->dense_step);

    cJSON *digest = cJSON_AddObjectToObject(root, "digest");
    add_u64(digest, "losses", ts->digest_losses, true);
    add_u64(digest, "outputs", ts->digest_outputs, true);

    cJSON_AddStringToObject(root, "random_generators",
                            "none with mutable state: samples are a pure function of (seed, split, index), "
                            "initial values of the seed");
    *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!*text) return ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "cannot format %s", TRAINSTATE_BLOB);
    return EMBER_OK;
}

void trainstate_text_free(char *text) { cJSON_free(text); }

// ---- Reading it back ---------------------------------------------------------------------------

typedef struct reader {
    ember_ctx *ctx;
    const char *dir;
    ember_status st;
} reader;

static ember_status bad_field(reader *r, const char *section, const char *key, const char *what) {
    if (r->st == EMBER_OK) {
        r->st = ember_ctx_set_error(r->ctx, EMBER_ERR_FORMAT, "'%s': %s: field %s.%s %s", r->dir, TRAINSTATE_BLOB,
                                    section, key, what);
    }
    return r->st;
}

static const cJSON *member(reader *r, const cJSON *obj, const char *section, const char *key) {
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!v) bad_field(r, section, key, "is missing");
    return v;
}

// An integer in [lo, hi] (JSON numbers are doubles: exact to 2^53).
static int64_t get_int(reader *r, const cJSON *obj, const char *section, const char *key, int64_t lo, int64_t hi) {
    const cJSON *v = member(r, obj, section, key);
    if (!v) return lo;
    const double d = cJSON_IsNumber(v) ? v->valuedouble : -1e300;
    if (!(d >= (double)lo && d <= (double)hi && d == (double)(int64_t)d)) {
        bad_field(r, section, key, "is not an integer in range");
        return lo;
    }
    return (int64_t)d;
}

static double get_double(reader *r, const cJSON *obj, const char *section, const char *key) {
    const cJSON *v = member(r, obj, section, key);
    if (v && !cJSON_IsNumber(v)) bad_field(r, section, key, "is not a number");
    return v && cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char *get_string(reader *r, const cJSON *obj, const char *section, const char *key, bool nullable) {
    const cJSON *v = member(r, obj, section, key);
    if (!v) return NULL;
    if (nullable && cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsString(v) || !v->valuestring) {
        bad_field(r, section, key, nullable ? "is not a string or null" : "is not a string");
        return NULL;
    }
    return v->valuestring;
}

static uint64_t get_u64(reader *r, const cJSON *obj, const char *section, const char *key, bool hex) {
    const char *s = get_string(r, obj, section, key, false);
    if (!s) return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
    if (errno != 0 || end == s || *end != '\0' || *s == '-') {
        bad_field(r, section, key, hex ? "is not a hexadecimal number" : "is not an unsigned integer");
        return 0;
    }
    return (uint64_t)v;
}

static int32_t get_layers(reader *r, const cJSON *obj, const char *section, const char *key, int32_t *out) {
    const cJSON *v = member(r, obj, section, key);
    if (!v) return 0;
    const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 1 || n > TRAIN_MAX_LAYERS) {
        bad_field(r, section, key, "is not a list of 1 to 16 layer sizes");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > 65536 ||
            e->valuedouble != (double)(int32_t)e->valuedouble) {
            bad_field(r, section, key, "holds something other than a layer size");
            return 0;
        }
        out[i] = (int32_t)e->valuedouble;
    }
    return n;
}

static char *copy_string(const char *s) {
    if (!s) return NULL;
    const size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static ember_status decode(ember_ctx *ctx, const char *dir, const char *text, trainstate *ts) {
    memset(ts, 0, sizeof *ts);
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s': %s is not a JSON object", dir, TRAINSTATE_BLOB);
    }
    reader r = {ctx, dir, EMBER_OK};
    const char *format = get_string(&r, root, "", "format", false);
    if (format && strcmp(format, TRAINSTATE_FORMAT) != 0) {
        // The message before the tree goes: format points into it.
        ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s': %s has format '%.64s', this ember reads '%s'", dir,
                            TRAINSTATE_BLOB, format, TRAINSTATE_FORMAT);
        cJSON_Delete(root);
        return EMBER_ERR_FORMAT;
    }
    train_options *o = &ts->cfg;
    ts->world_size = (int32_t)get_int(&r, root, "", "world_size", 1, INT32_MAX);

    const cJSON *model = member(&r, root, "", "model");
    o->embedding_dim = (int32_t)get_int(&r, model, "model", "embedding_dim", 1, 65536);
    const cJSON *rows = member(&r, model, "model", "rows");
    if (rows && (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) != DLRM_NUM_SPARSE)) {
        bad_field(&r, "model", "rows", "is not a list of 26 row counts");
    } else if (rows) {
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
            const cJSON *e = cJSON_GetArrayItem(rows, f);
            double d = cJSON_IsNumber(e) ? e->valuedouble : 0.0;
            if (!(d >= 1.0 && d <= (double)((int64_t)1 << 48) && d == (double)(int64_t)d)) {
                bad_field(&r, "model", "rows", "holds something other than a row count");
                break;
            }
            o->rows[f] = (int64_t)d;
        }
    }
    o->num_bottom = get_layers(&r, model, "model", "dense_arch_layer_sizes", o->bottom);
    o->num_top = get_layers(&r, model, "model", "over_arch_layer_sizes", o->top);
    ts->num_dense_params = get_int(&r, model, "model", "dense_parameters", 0, (int64_t)1 << 52);
    // The names' parsers leave the zero default (the first name) on a wrong one.
    if (dense_optim_parse(get_string(&r, model, "model", "dense_optimizer", false), &o->dense_optimizer) != EMBER_OK)
        bad_field(&r, "model", "dense_optimizer", "is not sgd, adagrad or adam");
    const char *eo = get_string(&r, model, "model", "embedding_optimizer", false);
    if (eo && ember_optim_parse(eo, &o->embedding_optimizer) != EMBER_OK) {
        bad_field(&r, "model", "embedding_optimizer", "is not an optimizer of this library");
    }
    if (ember_grad_convention_parse(get_string(&r, model, "model", "grad_convention", false), &o->grad_convention) !=
        EMBER_OK)
        bad_field(&r, "model", "grad_convention", "is not mean or sum");

    const cJSON *data = member(&r, root, "", "data");
    if (train_dataset_parse(get_string(&r, data, "data", "dataset", false), &o->dataset) != EMBER_OK)
        bad_field(&r, "data", "dataset", "is not synthetic or criteo");
    o->seed = get_u64(&r, data, "data", "seed", false);
    o->zipf_alpha = get_double(&r, data, "data", "zipf_alpha");
    const char *data_path = get_string(&r, data, "data", "data_path", true);
    const char *eval_data_path = get_string(&r, data, "data", "eval_data_path", true);
    ts->data_path = copy_string(data_path);
    ts->eval_data_path = copy_string(eval_data_path);
    if ((data_path && !ts->data_path) || (eval_data_path && !ts->eval_data_path)) {
        r.st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "'%s': %s: cannot copy the data paths", dir, TRAINSTATE_BLOB);
    }
    o->data_path = ts->data_path;
    o->eval_data_path = ts->eval_data_path;
    if (criteo_malformed_parse(get_string(&r, data, "data", "malformed", false), &o->malformed) != EMBER_OK)
        bad_field(&r, "data", "malformed", "is not skip or fatal");
    o->batch_size = get_int(&r, data, "data", "batch_size", 1, (int64_t)1 << 40);

    const cJSON *training = member(&r, root, "", "training");
    o->epochs = (int32_t)get_int(&r, training, "training", "epochs", 1, INT32_MAX);
    o->limit_train_batches = get_int(&r, training, "training", "limit_train_batches", 0, (int64_t)1 << 40);
    o->limit_val_batches = get_int(&r, training, "training", "limit_val_batches", 0, (int64_t)1 << 40);
    o->eval_interval = get_int(&r, training, "training", "eval_interval", 0, (int64_t)1 << 40);
    o->learning_rate = (float)get_double(&r, training, "training", "learning_rate");
    o->embedding_learning_rate = (float)get_double(&r, training, "training", "embedding_learning_rate");
    o->checkpoint_interval = get_int(&r, training, "training", "checkpoint_interval", 0, (int64_t)1 << 40);
    o->keep_checkpoints = (int32_t)get_int(&r, training, "training", "keep_checkpoints", 1, INT32_MAX);

    const cJSON *pos = member(&r, root, "", "position");
    ts->pos.epoch = (int32_t)get_int(&r, pos, "position", "epoch", 0, INT32_MAX);
    ts->pos.next_batch = get_int(&r, pos, "position", "next_batch", 0, (int64_t)1 << 52);
    ts->pos.steps = get_int(&r, pos, "position", "steps", 0, (int64_t)1 << 52);
    ts->pos.samples = get_int(&r, pos, "position", "samples", 0, (int64_t)1 << 52);
    ts->pos.skipped_batches = get_int(&r, pos, "position", "skipped_batches", 0, (int64_t)1 << 52);

    const cJSON *opt = member(&r, root, "", "dense_optimizer");
    dense_optim_kind kind = DENSE_OPT_SGD;
    const ember_status known = dense_optim_parse(get_string(&r, opt, "dense_optimizer", "kind", false), &kind);
    if (r.st == EMBER_OK && (known != EMBER_OK || kind != o->dense_optimizer)) {
        bad_field(&r, "dense_optimizer", "kind", "is not model.dense_optimizer");
    }
    ts->dense_step = get_int(&r, opt, "dense_optimizer", "step", 0, (int64_t)1 << 52);

    const cJSON *digest = member(&r, root, "", "digest");
    ts->digest_losses = get_u64(&r, digest, "digest", "losses", true);
    ts->digest_outputs = get_u64(&r, digest, "digest", "outputs", true);
    cJSON_Delete(root);
    return r.st;
}

// Index of blob `name` in c, its size in *bytes; -1 when absent.
static int32_t find_blob(const ember_checkpoint *c, const char *name, size_t *bytes) {
    const int32_t n = ember_checkpoint_num_blobs(c);
    for (int32_t i = 0; i < n; i++) {
        const char *bn = NULL;
        size_t b = 0;
        if (ember_checkpoint_blob_info(c, i, &bn, &b) == EMBER_OK && bn && strcmp(bn, name) == 0) {
            *bytes = b;
            return i;
        }
    }
    return -1;
}

ember_status trainstate_read(ember_ctx *ctx, ember_checkpoint *c, const char *dir, trainstate *ts) {
    memset(ts, 0, sizeof *ts);
    size_t bytes = 0;
    APP_CHECK(ctx, find_blob(c, TRAINSTATE_BLOB, &bytes) >= 0, EMBER_ERR_FORMAT,
              "'%s' is not a checkpoint of ember train: it has no %s", dir, TRAINSTATE_BLOB);
    APP_CHECK(ctx, bytes <= ((size_t)1 << 24), EMBER_ERR_FORMAT, "'%s': %s is %zu bytes, more than a trainer writes",
              dir, TRAINSTATE_BLOB, bytes);
    char *text = app_alloc(ctx, bytes + 1, TRAINSTATE_BLOB);
    if (!text) return EMBER_ERR_NOMEM;
    ember_status st = ember_checkpoint_read_blob(c, TRAINSTATE_BLOB, text, bytes, NULL);
    if (st == EMBER_OK) {
        text[bytes] = '\0';
        st = decode(ctx, dir, text, ts);
    }
    ember_ctx_free(ctx, text);
    return st;
}

// ---- The model must be the same ---------------------------------------------------------------

static void format_layers(const int32_t *v, int32_t n, char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (int32_t i = 0; i < n && used < cap; i++) {
        int w = snprintf(out + used, cap - used, "%s%d", i ? "," : "", (int)v[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

#define MISMATCH(ctx, what, fmt, a, b)                                                                  \
    ember_ctx_set_error((ctx), EMBER_ERR_INVALID_ARG, "--resume: %s " fmt " in the checkpoint, " fmt " here", \
                        (what), (a), (b))

ember_status trainstate_check(ember_ctx *ctx, const trainstate *ts, const train_options *here) {
    const train_options *c = &ts->cfg;
    if (c->embedding_dim != here->embedding_dim) {
        return MISMATCH(ctx, "embedding dim is", "%d", (int)c->embedding_dim, (int)here->embedding_dim);
    }
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        if (c->rows[f] != here->rows[f]) {
            char what[64];
            snprintf(what, sizeof what, "feature cat_%d (table t_cat_%d) has", f, f);
            return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                       "--resume: %s %lld rows in the checkpoint, %lld here", what,
                                       (long long)c->rows[f], (long long)here->rows[f]);
        }
    }
    char a[128], b[128];
    if (c->num_bottom != here->num_bottom ||
        memcmp(c->bottom, here->bottom, sizeof(int32_t) * (size_t)c->num_bottom) != 0) {
        format_layers(c->bottom, c->num_bottom, a, sizeof a);
        format_layers(here->bottom, here->num_bottom, b, sizeof b);
        return MISMATCH(ctx, "dense arch layer sizes are", "%s", a, b);
    }
    if (c->num_top != here->num_top || memcmp(c->top, here->top, sizeof(int32_t) * (size_t)c->num_top) != 0) {
        format_layers(c->top, c->num_top, a, sizeof a);
        format_layers(here->top, here->num_top, b, sizeof b);
        return MISMATCH(ctx, "over arch layer sizes are", "%s", a, b);
    }
    if (c->dense_optimizer != here->dense_optimizer) {
        return MISMATCH(ctx, "dense optimizer is", "%s", dense_optim_name(c->dense_optimizer),
                        dense_optim_name(here->dense_optimizer));
    }
    if (c->embedding_optimizer != here->embedding_optimizer) {
        return MISMATCH(ctx, "embedding optimizer is", "%s", ember_optim_name(c->embedding_optimizer),
                        ember_optim_name(here->embedding_optimizer));
    }
    if (c->grad_convention != here->grad_convention) {
        return MISMATCH(ctx, "gradient convention is", "%s", ember_grad_convention_name(c->grad_convention),
                        ember_grad_convention_name(here->grad_convention));
    }
    if (c->batch_size != here->batch_size) {
        return MISMATCH(ctx, "global batch size is", "%lld", (long long)c->batch_size, (long long)here->batch_size);
    }
    if (c->dataset != here->dataset) {
        return MISMATCH(ctx, "dataset is", "%s", train_dataset_name(c->dataset), train_dataset_name(here->dataset));
    }
    if (c->seed != here->seed) {
        return MISMATCH(ctx, "seed is", "%llu", (unsigned long long)c->seed, (unsigned long long)here->seed);
    }
    if (c->dataset == TRAIN_SYNTHETIC && c->zipf_alpha != here->zipf_alpha) {
        return MISMATCH(ctx, "synthetic data's zipf alpha is", "%.17g", c->zipf_alpha, here->zipf_alpha);
    }
    if (held_out_lines(c) != held_out_lines(here)) {
        return MISMATCH(ctx, "the held-out head of --data_path (eval lines before the training data) is", "%lld lines",
                        (long long)held_out_lines(c), (long long)held_out_lines(here));
    }
    return EMBER_OK;
}

// ---- Dense blobs ------------------------------------------------------------------------------

static bool host_little_endian(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

// Swaps the byte order of n 32-bit words in place (big-endian hosts only).
static void swap32(void *p, int64_t n) {
    unsigned char *b = p;
    for (int64_t i = 0; i < n; i++, b += 4) {
        unsigned char t0 = b[0], t1 = b[1];
        b[0] = b[3];
        b[1] = b[2];
        b[2] = t1;
        b[3] = t0;
    }
}

ember_status trainstate_dense_blobs(ember_ctx *ctx, dlrm_model *m, ember_checkpoint_blob *blobs, int32_t *n,
                                    void **scratch) {
    const dense_optim *opt = dlrm_dense_optim(m);
    const int64_t np = dlrm_num_dense_params(m);
    const size_t bytes = sizeof(float) * (size_t)np;
    const float *src[3] = {dlrm_dense_params(m), opt->m1, opt->m2};
    static const char *const names[3] = {BLOB_PARAMS, BLOB_M1, BLOB_M2};
    *scratch = NULL;
    *n = 0;
    int32_t count = 0;
    for (int i = 0; i < 3; i++) {
        if (src[i]) count++;
    }
    unsigned char *copy = NULL;
    if (!host_little_endian()) {
        copy = app_alloc(ctx, bytes * (size_t)count + 1, "little-endian dense blobs");
        if (!copy) return EMBER_ERR_NOMEM;
        *scratch = copy;
    }
    for (int i = 0; i < 3; i++) {
        if (!src[i]) continue;
        const void *data = src[i];
        if (copy) {
            unsigned char *dst = copy + bytes * (size_t)*n;
            memcpy(dst, src[i], bytes);
            swap32(dst, np);
            data = dst;
        }
        blobs[(*n)++] = (ember_checkpoint_blob){.name = names[i], .data = data, .bytes = bytes};
    }
    return EMBER_OK;
}

ember_status trainstate_read_dense(ember_ctx *ctx, ember_checkpoint *c, const char *flag, const char *dir,
                                   dlrm_model *m, int64_t dense_step) {
    dense_optim *opt = dlrm_dense_optim(m);
    const int64_t np = dlrm_num_dense_params(m);
    const size_t want = sizeof(float) * (size_t)np;
    float *dst[3] = {dlrm_dense_params(m), opt->m1, opt->m2};
    static const char *const names[3] = {BLOB_PARAMS, BLOB_M1, BLOB_M2};
    for (int i = 0; i < 3; i++) {
        if (!dst[i]) continue;
        size_t bytes = 0;
        APP_CHECK(ctx, find_blob(c, names[i], &bytes) >= 0, EMBER_ERR_FORMAT,
                  "%s '%s': the checkpoint has no %s (the %s optimizer's state)", flag, dir, names[i],
                  dense_optim_name(opt->cfg.kind));
        APP_CHECK(ctx, bytes == want, EMBER_ERR_FORMAT,
                  "%s '%s': %s holds %zu bytes, the model's %lld dense parameters need %zu", flag, dir, names[i],
                  bytes, (long long)np, want);
        APP_TRY(ember_checkpoint_read_blob(c, names[i], dst[i], want, NULL));
        if (!host_little_endian()) swap32(dst[i], np);
    }
    opt->step = dense_step;
    return EMBER_OK;
}

// ---- Save directories --------------------------------------------------------------------------

bool ckpt_step_path(const char *save_dir, int64_t step, char *out, size_t cap) {
    int n = snprintf(out, cap, "%s/step-%010lld", save_dir, (long long)step);
    return n > 0 && (size_t)n < cap;
}

int64_t ckpt_step_of(const char *name) {
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *d = name + 5;
    size_t n = 0;
    int64_t v = 0;
    for (; d[n]; n++) {
        if (d[n] < '0' || d[n] > '9' || n >= 18) return -1;
        v = v * 10 + (d[n] - '0');
    }
    return n >= 10 ? v : -1;
}

ember_status ckpt_make_save_dir(ember_ctx *ctx, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "--save_dir '%s': cannot create it: %s", dir, strerror(errno));
    }
    struct stat sb;
    APP_CHECK(ctx, stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), EMBER_ERR_IO, "--save_dir '%s' is not a directory",
              dir);
    return EMBER_OK;
}

// "a/b" into out[cap]; false when it does not fit.
static bool join(char *out, size_t cap, const char *a, const char *b) {
    const int n = snprintf(out, cap, "%s/%s", a, b);
    return n > 0 && (size_t)n < cap;
}

static bool has_manifest(const char *dir) {
    char path[TRAINSTATE_PATH_MAX + 32];
    struct stat sb;
    return join(path, sizeof path, dir, "manifest.json") && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int by_step_desc(const void *a, const void *b) {
    const int64_t x = ((const ckpt_entry *)a)->step, y = ((const ckpt_entry *)b)->step;
    return (x < y) - (x > y);
}

ember_status ckpt_list(ember_ctx *ctx, const char *flag, const char *dir, ckpt_entry **out, int32_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s '%s': cannot open it: %s", flag, dir, strerror(errno));
    int32_t cap = 0;
    ember_status st = EMBER_OK;
    for (struct dirent *e; st == EMBER_OK && (e = readdir(d)) != NULL;) {
        const int64_t step = ckpt_step_of(e->d_name);
        if (step < 0) continue;
        char path[TRAINSTATE_PATH_MAX + 32];
        struct stat sb;
        if (!join(path, sizeof path, dir, e->d_name) || lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_entry *p = realloc(*out, sizeof *p * (size_t)cap);
            if (!p) {
                st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s '%s': cannot list it", flag, dir);
                break;
            }
            *out = p;
        }
        (*out)[(*n)++] = (ckpt_entry){step, has_manifest(path)};
    }
    closedir(d);
    if (st == EMBER_OK && *n > 1) qsort(*out, (size_t)*n, sizeof **out, by_step_desc);
    return st;
}

ember_status ckpt_resolve(ember_ctx *ctx, const char *flag, const char *dir, char path[TRAINSTATE_PATH_MAX],
                          char save_dir[TRAINSTATE_PATH_MAX]) {
    const size_t len = strlen(dir);
    APP_CHECK(ctx, len > 0 && len + 32 < TRAINSTATE_PATH_MAX, EMBER_ERR_INVALID_ARG,
              "%s '%s': expected a path of 1 to %d bytes", flag, dir, TRAINSTATE_PATH_MAX - 32);
    // Without trailing slashes, so that its last component names it.
    char clean[TRAINSTATE_PATH_MAX];
    memcpy(clean, dir, len + 1);
    for (size_t n = len; n > 1 && clean[n - 1] == '/'; n--) clean[n - 1] = '\0';
    if (has_manifest(clean)) {
        snprintf(path, TRAINSTATE_PATH_MAX, "%s", clean);
        save_dir[0] = '\0';
        const char *slash = strrchr(clean, '/');
        if (ckpt_step_of(slash ? slash + 1 : clean) >= 0) {
            if (!slash) snprintf(save_dir, TRAINSTATE_PATH_MAX, ".");
            else if (slash == clean) snprintf(save_dir, TRAINSTATE_PATH_MAX, "/");
            else snprintf(save_dir, TRAINSTATE_PATH_MAX, "%.*s", (int)(slash - clean), clean);
        }
        return EMBER_OK;
    }
    ckpt_entry *steps = NULL;
    int32_t n = 0;
    APP_TRY(ckpt_list(ctx, flag, clean, &steps, &n));
    int32_t unfinished = 0, unopened = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!steps[i].committed) {
            unfinished++;
            continue;
        }
        ckpt_step_path(clean, steps[i].step, path, TRAINSTATE_PATH_MAX);
        ember_checkpoint *c = NULL;
        if (ember_checkpoint_open(ctx, path, &c) == EMBER_OK) {
            ember_checkpoint_close(c);
            free(steps);
            snprintf(save_dir, TRAINSTATE_PATH_MAX, "%s", clean);
            return EMBER_OK;
        }
        unopened++;
    }
    free(steps);
    path[0] = save_dir[0] = '\0';
    return ember_ctx_set_error(ctx, EMBER_ERR_IO,
                               "%s '%s': no committed checkpoint: neither a manifest.json nor a step-* directory "
                               "whose manifest opens (%d step-* director%s, %d unfinished, %d that did not open)",
                               flag, clean, (int)n, n == 1 ? "y" : "ies", (int)unfinished, (int)unopened);
}

// Removes directory `path` and the files in it (a checkpoint's: manifest, data files, leftovers).
// Returns 0, an errno with what failed (path itself, or a file in it) in what[cap], or -1 for a
// file name too long to join.
static int remove_files_and_dir(const char *path, char *what, size_t cap) {
    snprintf(what, cap, "%s", path);
    DIR *d = opendir(path);
    if (!d) return errno;
    int err = 0;
    for (struct dirent *e; err == 0 && (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (!join(what, cap, path, e->d_name)) err = -1;
        else if (unlink(what) != 0 && errno != ENOENT) err = errno;
    }
    closedir(d);
    if (err) return err;
    snprintf(what, cap, "%s", path);
    return rmdir(path) != 0 ? errno : 0;
}

static ember_status remove_dir(ember_ctx *ctx, const char *path) {
    char what[TRAINSTATE_PATH_MAX + 300];
    const int err = remove_files_and_dir(path, what, sizeof what);
    if (err == 0) return EMBER_OK;
    if (err < 0) return ember_ctx_set_error(ctx, EMBER_ERR_IO, "removing old checkpoint '%s': a path too long", path);
    if (strcmp(what, path) != 0) {
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "removing old checkpoint file '%s': %s", what, strerror(err));
    }
    return ember_ctx_set_error(ctx, EMBER_ERR_IO, "removing old checkpoint '%s': %s", path, strerror(err));
}

ember_status ckpt_make_step_dir(ember_ctx *ctx, const char *path, bool *made) {
    *made = mkdir(path, 0777) == 0;
    APP_CHECK(ctx, *made || errno == EEXIST, EMBER_ERR_IO, "--save_dir: cannot create '%s': %s", path,
              strerror(errno));
    return EMBER_OK;
}

bool ckpt_discard_step_dir(const char *path) {
    char what[TRAINSTATE_PATH_MAX + 300];
    const int err = remove_files_and_dir(path, what, sizeof what);
    return err == 0 || (err == ENOENT && strcmp(what, path) == 0); // gone already
}

ember_status ckpt_prune(ember_ctx *ctx, const char *dir, int64_t step, int32_t keep, int32_t *removed) {
    if (removed) *removed = 0;
    ckpt_entry *steps = NULL;
    int32_t n = 0;
    APP_TRY(ckpt_list(ctx, "--save_dir", dir, &steps, &n));
    ember_status st = EMBER_OK;
    int32_t kept = 0;
    for (int32_t i = 0; i < n && st == EMBER_OK; i++) {
        const ckpt_entry *e = &steps[i];
        if (e->step > step) continue; // newer than the one just committed: never ours to judge
        bool drop = e->committed ? ++kept > keep : e->step < step;
        if (e->step == step) drop = false;
        if (!drop) continue;
        char path[TRAINSTATE_PATH_MAX + 32];
        ckpt_step_path(dir, e->step, path, sizeof path);
        st = remove_dir(ctx, path);
        if (st == EMBER_OK && removed) (*removed)++;
    }
    free(steps);
    return st;
}
