// The trainer's part of a checkpoint and the save directories (trainstate.h).
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "appctx.h"
#include "cli.h"
#include "ember/quant.h"
#include "trainstate.h"

#define BLOB_PARAMS "dense.params"
#define BLOB_M1 "dense.m1"
#define BLOB_M2 "dense.m2"

void trainstate_free(trainstate *ts) {
    for (int i = 0; i < TRAINSTATE_MAX_STRINGS; i++) {
        free(ts->strings[i]);
        ts->strings[i] = NULL;
    }
    ts->cfg.data_path = ts->cfg.eval_data_path = NULL;
}

// ---- The configuration: one table -------------------------------------------------------------

#define MAX_ROWS ((int64_t)1 << 48)
#define MAX_COUNT ((int64_t)1 << 40)
#define FIELD(m) .at = offsetof(train_options, m), .size = sizeof(((train_options *)0)->m)
#define SAME(w) .rule = TS_SAME, .what = (w)

// A cache's policy: lru or lfu (ttl is for hashed tables).
static const char *cache_policy_name(int v) { return v < EMBER_EVICT_TTL ? cli_name_evict_policy(v) : NULL; }

static const trainstate_field fields[] = {
    // The model.
    {.flag = "embedding_dim", .section = "model", .key = "embedding_dim", .kind = TS_INT, FIELD(embedding_dim),
     .lo = 1, .hi = 65536, SAME("embedding dim is")},
    {.flag = "num_embeddings_per_feature", .also = "num_embeddings", .section = "model", .key = "rows",
     .kind = TS_ROWS, FIELD(rows), SAME("rows are")},
    {.flag = "dense_arch_layer_sizes", .section = "model", .key = "dense_arch_layer_sizes", .kind = TS_LAYERS,
     FIELD(bottom), .count_at = offsetof(train_options, num_bottom), SAME("dense arch layer sizes are")},
    {.flag = "over_arch_layer_sizes", .section = "model", .key = "over_arch_layer_sizes", .kind = TS_LAYERS,
     FIELD(top), .count_at = offsetof(train_options, num_top), SAME("over arch layer sizes are")},
    {.flag = "interaction", .section = "model", .key = "interaction", .kind = TS_NAME, FIELD(interaction),
     .names = cli_name_interaction, .added = true, SAME("interaction (--interaction) is")},
    {.flag = "dcn_num_layers", .section = "model", .key = "dcn_num_layers", .kind = TS_INT, FIELD(dcn_num_layers),
     .lo = 1, .hi = 64, .when = TS_DCN, .added = true, SAME("cross layers (--dcn_num_layers) are")},
    {.flag = "dcn_low_rank_dim", .section = "model", .key = "dcn_low_rank_dim", .kind = TS_INT,
     FIELD(dcn_low_rank_dim), .lo = 1, .hi = 65536, .when = TS_DCN, .added = true,
     SAME("cross layers' rank (--dcn_low_rank_dim) is")},
    {.flag = "multi_hot_sizes", .section = "model", .key = "multi_hot_sizes", .kind = TS_HOTS, FIELD(multi_hot),
     .lo = 1, .hi = MULTIHOT_MAX_HOT, .added = true, SAME("ids per sample (--multi_hot_sizes) are")},
    {.flag = "multi_hot_distribution_type", .section = "model", .key = "multi_hot_distribution_type",
     .kind = TS_NAME, FIELD(multi_hot_dist), .names = multihot_dist_name, .added = true,
     SAME("multi-hot ids' distribution (--multi_hot_distribution_type) is")},
    {.flag = "dense_optimizer", .also = "adagrad", .section = "model", .key = "dense_optimizer", .kind = TS_NAME,
     FIELD(dense_optimizer), .names = cli_name_dense_optimizer, SAME("dense optimizer is")},
    {.flag = "embedding_optimizer", .also = "adagrad", .section = "model", .key = "embedding_optimizer",
     .kind = TS_NAME, FIELD(embedding_optimizer), .names = cli_name_embedding_optimizer,
     SAME("embedding optimizer is")},
    {.flag = "grad_convention", .section = "model", .key = "grad_convention", .kind = TS_NAME,
     FIELD(grad_convention), .names = cli_name_grad_convention, SAME("gradient convention is")},
    {.flag = "hash", .section = "model", .key = "hash", .kind = TS_NAME, FIELD(collisionless),
     .names = cli_name_hash, .added = true, SAME("hashing of categorical values (--hash) is")},
    {.flag = "hash_bucket_rows", .section = "model", .key = "hash_bucket_rows", .kind = TS_INT,
     FIELD(hash.bucket_rows), .lo = 0, .hi = 1 << 20, .when = TS_COLLISIONLESS, .added = true,
     SAME("rows per hash bucket (--hash_bucket_rows) are")},
    {.flag = "hash_min_count", .section = "model", .key = "hash_min_count", .kind = TS_INT, FIELD(hash.min_count),
     .lo = 0, .hi = MAX_COUNT, .when = TS_COLLISIONLESS, .added = true,
     SAME("occurrences before a value gets a row (--hash_min_count) are")},
    {.flag = "hash_policy", .section = "model", .key = "hash_policy", .kind = TS_NAME, FIELD(hash.policy),
     .names = cli_name_evict_policy, .when = TS_COLLISIONLESS, .added = true,
     SAME("hashed tables' eviction policy (--hash_policy) is")},
    {.flag = "hash_ttl", .section = "model", .key = "hash_ttl", .kind = TS_INT, FIELD(hash.ttl_steps), .lo = 0,
     .hi = MAX_COUNT, .when = TS_COLLISIONLESS, .added = true,
     SAME("hashed rows' time to live in steps (--hash_ttl) is")},
    // The data.
    {.flag = "dataset", .section = "data", .key = "dataset", .kind = TS_NAME, FIELD(dataset),
     .names = cli_name_dataset, SAME("dataset is")},
    {.flag = "seed", .section = "data", .key = "seed", .kind = TS_SEED, FIELD(seed), SAME("seed is")},
    {.flag = "zipf_alpha", .section = "data", .key = "zipf_alpha", .kind = TS_REAL, FIELD(zipf_alpha),
     .when = TS_SYNTHETIC, SAME("synthetic data's zipf alpha is")},
    {.flag = "num_generated_batches", .section = "data", .key = "num_generated_batches", .kind = TS_INT,
     FIELD(num_generated_batches), .lo = 0, .hi = 4096, .when = TS_SYNTHETIC, .added = true,
     SAME("cycle of generated training batches (--num_generated_batches) is")},
    {.flag = "synth_items", .section = "data", .key = "synth_items", .kind = TS_INT, FIELD(synth_items), .lo = 1,
     .hi = 1 << 20, .when = TS_SYNTHETIC, .added = true, SAME("synthetic items per table row (--synth_items) are")},
    {.flag = "candidates_per_request", .section = "data", .key = "candidates_per_request", .kind = TS_INT,
     FIELD(request_size), .lo = 1, .hi = 1 << 20, .when = TS_SYNTHETIC, .added = true,
     SAME("synthetic requests' candidates (--candidates_per_request) are")},
    {.flag = "user_features", .section = "data", .key = "user_features", .kind = TS_TABLES, FIELD(user_features),
     .when = TS_SYNTHETIC, .added = true, SAME("features a synthetic request's candidates share (--user_features) are")},
    {.flag = "data_path", .section = "data", .key = "data_path", .kind = TS_PATH, FIELD(data_path),
     .rule = TS_MAY_CHANGE},
    {.flag = "eval_data_path", .section = "data", .key = "eval_data_path", .kind = TS_PATH, FIELD(eval_data_path),
     .rule = TS_MAY_CHANGE},
    {.flag = "malformed", .section = "data", .key = "malformed", .kind = TS_NAME, FIELD(malformed),
     .names = cli_name_malformed, .rule = TS_MAY_CHANGE},
    {.flag = "data_dir", .section = "data", .key = "data_dir", .kind = TS_PATH, FIELD(data_dir), .added = true,
     .rule = TS_MAY_CHANGE},
    {.flag = "train_days", .section = "data", .key = "train_days", .kind = TS_INT, FIELD(train_days), .lo = 0,
     .hi = 1 << 20, .added = true, .rule = TS_MAY_CHANGE},
    {.flag = "eval_split", .section = "data", .key = "eval_split", .kind = TS_NAME, FIELD(eval_split),
     .names = cli_name_eval_split, .added = true, .rule = TS_MAY_CHANGE},
    {.flag = "batch_size", .section = "data", .key = "batch_size", .kind = TS_INT, FIELD(batch_size), .lo = 1,
     .hi = MAX_COUNT, SAME("global batch size is")},
    // Training.
    {.flag = "epochs", .section = "training", .key = "epochs", .kind = TS_INT, FIELD(epochs), .lo = 1,
     .hi = INT32_MAX, .rule = TS_MAY_CHANGE},
    {.flag = "limit_train_batches", .section = "training", .key = "limit_train_batches", .kind = TS_INT,
     FIELD(limit_train_batches), .lo = 0, .hi = MAX_COUNT, .rule = TS_MAY_CHANGE},
    {.flag = "limit_val_batches", .section = "training", .key = "limit_val_batches", .kind = TS_INT,
     FIELD(limit_val_batches), .lo = 0, .hi = MAX_COUNT, .rule = TS_MAY_CHANGE},
    {.flag = "eval_interval", .section = "training", .key = "eval_interval", .kind = TS_INT, FIELD(eval_interval),
     .lo = 0, .hi = MAX_COUNT, .rule = TS_MAY_CHANGE},
    {.flag = "learning_rate", .section = "training", .key = "learning_rate", .kind = TS_REAL, FIELD(learning_rate),
     .rule = TS_MAY_CHANGE},
    {.flag = "embedding_learning_rate", .section = "training", .key = "embedding_learning_rate", .kind = TS_REAL,
     FIELD(embedding_learning_rate), .rule = TS_MAY_CHANGE},
    {.flag = "checkpoint_interval", .section = "training", .key = "checkpoint_interval", .kind = TS_INT,
     FIELD(checkpoint_interval), .lo = 0, .hi = MAX_COUNT, .rule = TS_MAY_CHANGE},
    {.flag = "keep_checkpoints", .section = "training", .key = "keep_checkpoints", .kind = TS_INT,
     FIELD(keep_checkpoints), .lo = 1, .hi = INT32_MAX, .rule = TS_MAY_CHANGE},
    {.flag = "checkpoint_delta_interval", .section = "training", .key = "checkpoint_delta_interval", .kind = TS_INT,
     FIELD(checkpoint_delta_interval), .lo = -1, .hi = MAX_COUNT, .rule = TS_MAY_CHANGE, .added = true},
    // (-1: absent, an older ember's checkpoint: train_options_default's value; a resume of it
    // saves no deltas unless asked.)
    // Where the tables live: the same numbers in RAM or on disk (docs/tiered.md), so a resume may
    // move them; eval --load keeps them where the run had them.
    {.flag = "ssd_tables", .section = "storage", .key = "ssd_tables", .kind = TS_TABLES, FIELD(ssd_tables),
     .rule = TS_MAY_CHANGE, .added = true},
    {.flag = "cache_rows", .section = "storage", .key = "cache_rows", .kind = TS_INT, FIELD(cache_rows), .lo = 0,
     .hi = MAX_ROWS, .rule = TS_MAY_CHANGE, .added = true},
    {.flag = "cache_policy", .section = "storage", .key = "cache_policy", .kind = TS_NAME, FIELD(cache_policy),
     .names = cache_policy_name, .rule = TS_MAY_CHANGE, .added = true},
};
#define NUM_FIELDS ((int)(sizeof fields / sizeof fields[0]))

// The options trainer.json does not record. A new option of ember train is a row of `fields` or
// one of these (tests/unit/test_dlrm_trainstate.c).
static const char *const free_flags[] = {
    "sharding: the placement (a checkpoint holds tables in global coordinates and reshards)",
    "plan: the placement, as --sharding",
    "intra_gbps: the planner's figure for this machine",
    "inter_gbps: the planner's figure for this machine",
    "disk_gbps: the planner's figure for this machine",
    "wire_precision: not recorded; a resumed run rounds the exchanges as it is told from then on",
    "wire_loss_scale: not recorded, as wire_precision",
    "rebalance_every: the placement, as sharding",
    "sharding_group_size: the placement, as sharding (a 2D run's checkpoint is one group's)",
    "threads: the same numbers with any count",
    "timeout_s: the collectives' deadline",
    "overlap: the same numbers either way",
    "dedup_features: the same numbers up to the order of a bag's samples' gradient sums",
    "prefetch_batches: the same batches in the same order either way",
    "ssd_dir: where this machine keeps tiered tables' scratch files",
    "save_dir: where checkpoints go",
    "resume: the checkpoint itself",
    "metrics: output",
    "mllog: output",
    "target_auc: when to stop (a resumed run may aim elsewhere)",
    "plot: output",
    "progress: output",
    "digest: output",
    "preset: a set of the other options' values, which are recorded",
    NULL,
};

const trainstate_field *trainstate_fields(int *n) {
    *n = NUM_FIELDS;
    return fields;
}

const char *const *trainstate_free_flags(void) { return free_flags; }

static const void *field_of(const train_options *o, const trainstate_field *f) { return (const char *)o + f->at; }
static void *field_in(train_options *o, const trainstate_field *f) { return (char *)o + f->at; }

// An integer field of 1 (bool), 4 or 8 bytes.
static int64_t load_int(const void *p, size_t size) {
    if (size == sizeof(bool)) return *(const bool *)p;
    if (size == sizeof(int32_t)) {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void store_int(void *p, size_t size, int64_t v) {
    if (size == sizeof(bool)) {
        *(bool *)p = v != 0;
    } else if (size == sizeof(int32_t)) {
        const int32_t x = (int32_t)v;
        memcpy(p, &x, sizeof x);
    } else {
        memcpy(p, &v, sizeof v);
    }
}

static double load_real(const void *p, size_t size) {
    if (size == sizeof(float)) {
        float v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void store_real(void *p, size_t size, double v) {
    if (size == sizeof(float)) {
        const float x = (float)v;
        memcpy(p, &x, sizeof x);
    } else {
        memcpy(p, &v, sizeof v);
    }
}

static int32_t layer_count(const train_options *o, const trainstate_field *f) {
    int32_t n;
    memcpy(&n, (const char *)o + f->count_at, sizeof n);
    return n;
}

// The int32 values of a list field: its layers, or one per feature.
static int32_t int32_count(const train_options *o, const trainstate_field *f) {
    return f->kind == TS_HOTS ? DLRM_NUM_SPARSE : layer_count(o, f);
}

void trainstate_apply(const trainstate *ts, train_options *o) {
    for (int i = 0; i < NUM_FIELDS; i++) {
        const trainstate_field *f = &fields[i];
        memcpy(field_in(o, f), field_of(&ts->cfg, f), f->size);
        if (f->kind == TS_LAYERS)
            memcpy((char *)o + f->count_at, (const char *)&ts->cfg + f->count_at, sizeof(int32_t));
    }
}

// ---- trainer.json ------------------------------------------------------------------------------

// First line of the training window of a Criteo file: the held-out eval head, or 0.
static int64_t held_out_lines(const train_options *o) {
    return o->dataset == TRAIN_CRITEO && !o->eval_data_path ? o->limit_val_batches * o->batch_size : 0;
}

static void add_u64(cJSON *o, const char *key, uint64_t v, bool hex) {
    char text[32];
    snprintf(text, sizeof text, hex ? "%016" PRIx64 : "%" PRIu64, v);
    cJSON_AddStringToObject(o, key, text);
}

// Row f of o into object `obj`.
static void encode_field(cJSON *obj, const trainstate_field *f, const train_options *o) {
    const void *p = field_of(o, f);
    switch (f->kind) {
    case TS_INT: cJSON_AddNumberToObject(obj, f->key, (double)load_int(p, f->size)); break;
    case TS_SEED: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        add_u64(obj, f->key, v, false);
        break;
    }
    case TS_REAL: cJSON_AddNumberToObject(obj, f->key, load_real(p, f->size)); break;
    case TS_NAME: {
        const char *name = f->names((int)load_int(p, f->size));
        cJSON_AddStringToObject(obj, f->key, name ? name : "unknown");
        break;
    }
    case TS_PATH: {
        const char *s;
        memcpy(&s, p, sizeof s);
        if (s) cJSON_AddStringToObject(obj, f->key, s);
        else cJSON_AddNullToObject(obj, f->key);
        break;
    }
    case TS_ROWS: {
        cJSON *a = cJSON_AddArrayToObject(obj, f->key);
        for (int t = 0; a && t < DLRM_NUM_SPARSE; t++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)o->rows[t]));
        break;
    }
    case TS_HOTS:
    case TS_LAYERS: {
        cJSON *a = cJSON_AddArrayToObject(obj, f->key);
        const int32_t *v = p;
        for (int32_t i = 0; a && i < int32_count(o, f); i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
        break;
    }
    case TS_TABLES: {
        cJSON *a = cJSON_AddArrayToObject(obj, f->key);
        uint32_t mask;
        memcpy(&mask, p, sizeof mask);
        for (int t = 0; a && t < DLRM_NUM_SPARSE; t++)
            if (mask & (1u << t)) cJSON_AddItemToArray(a, cJSON_CreateNumber(t));
        break;
    }
    }
}

// The object `name` of root, made on first use.
static cJSON *section(cJSON *root, const char *name) {
    cJSON *s = cJSON_GetObjectItemCaseSensitive(root, name);
    return s ? s : cJSON_AddObjectToObject(root, name);
}

ember_status trainstate_encode(ember_ctx *ctx, const trainstate *ts, char **text) {
    const train_options *o = &ts->cfg;
    *text = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", TRAINSTATE_FORMAT);
    cJSON_AddNumberToObject(root, "world_size", ts->world_size);
    for (int i = 0; root && i < NUM_FIELDS; i++) {
        cJSON *s = section(root, fields[i].section);
        if (s) encode_field(s, &fields[i], o);
    }
    // What the options imply, for readers of the file.
    cJSON_AddNumberToObject(section(root, "model"), "dense_parameters", (double)ts->num_dense_params);
    cJSON_AddNumberToObject(section(root, "data"), "held_out_lines", (double)held_out_lines(o));

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
        r->st = ember_ctx_set_error(r->ctx, EMBER_ERR_FORMAT, "'%s': %s: field %s%s%s %s", r->dir, TRAINSTATE_BLOB,
                                    section, *section ? "." : "", key, what);
    }
    return r->st;
}

static const cJSON *member(reader *r, const cJSON *obj, const char *section, const char *key) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!v) bad_field(r, section, key, "is missing");
    return v;
}

// An integer in [lo, hi] (JSON numbers are doubles: exact to 2^53).
static int64_t int_in(reader *r, const cJSON *v, const char *section, const char *key, int64_t lo, int64_t hi) {
    const double d = cJSON_IsNumber(v) ? v->valuedouble : -1e300;
    if (!(d >= (double)lo && d <= (double)hi && d == (double)(int64_t)d)) {
        bad_field(r, section, key, "is not an integer in range");
        return lo;
    }
    return (int64_t)d;
}

static int64_t get_int(reader *r, const cJSON *obj, const char *section, const char *key, int64_t lo, int64_t hi) {
    const cJSON *v = member(r, obj, section, key);
    return v ? int_in(r, v, section, key, lo, hi) : lo;
}

static const char *string_of(reader *r, const cJSON *v, const char *section, const char *key, bool nullable) {
    if (nullable && cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsString(v) || !v->valuestring) {
        bad_field(r, section, key, nullable ? "is not a string or null" : "is not a string");
        return NULL;
    }
    return v->valuestring;
}

static const char *get_string(reader *r, const cJSON *obj, const char *section, const char *key) {
    const cJSON *v = member(r, obj, section, key);
    return v ? string_of(r, v, section, key, false) : NULL;
}

static uint64_t u64_of(reader *r, const cJSON *v, const char *section, const char *key, bool hex) {
    const char *s = string_of(r, v, section, key, false);
    if (!s) return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(s, &end, hex ? 16 : 10);
    if (errno != 0 || end == s || *end != '\0' || *s == '-' || *s == '+' || *s == ' ') {
        bad_field(r, section, key, hex ? "is not a hexadecimal number" : "is not an unsigned integer");
        return 0;
    }
    return (uint64_t)x;
}

static uint64_t get_u64(reader *r, const cJSON *obj, const char *section, const char *key, bool hex) {
    const cJSON *v = member(r, obj, section, key);
    return v ? u64_of(r, v, section, key, hex) : 0;
}

static char *copy_string(const char *s) {
    const size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

// "is not one of a, b, c" for row f.
static void bad_name(reader *r, const trainstate_field *f) {
    char what[256] = "is not one of ";
    size_t n = strlen(what);
    for (int k = 0; f->names(k) && n < sizeof what; k++) {
        const int len = snprintf(what + n, sizeof what - n, "%s%s", k ? ", " : "", f->names(k));
        if (len < 0) break;
        n += (size_t)len;
    }
    bad_field(r, f->section, f->key, what);
}

// Member v of row f into o (strings copied into ts).
static void decode_field(reader *r, const trainstate_field *f, const cJSON *v, trainstate *ts) {
    train_options *o = &ts->cfg;
    void *p = field_in(o, f);
    switch (f->kind) {
    case TS_INT: store_int(p, f->size, int_in(r, v, f->section, f->key, f->lo, f->hi)); break;
    case TS_SEED: {
        const uint64_t x = u64_of(r, v, f->section, f->key, false);
        memcpy(p, &x, sizeof x);
        break;
    }
    case TS_REAL:
        // JSON cannot hold an infinity: 1e999 parses as one, and a float field takes at most FLT_MAX.
        if (!cJSON_IsNumber(v)) bad_field(r, f->section, f->key, "is not a number");
        else if (!(fabs(v->valuedouble) <= (f->size == sizeof(float) ? (double)FLT_MAX : DBL_MAX)))
            bad_field(r, f->section, f->key, "is not a finite number of its type");
        else store_real(p, f->size, v->valuedouble);
        break;
    case TS_NAME: {
        const char *s = string_of(r, v, f->section, f->key, false);
        const int k = s ? cli_name_value(f->names, s) : -1;
        if (k >= 0) store_int(p, f->size, k);
        else if (s) bad_name(r, f);
        break;
    }
    case TS_PATH: {
        const char *s = string_of(r, v, f->section, f->key, true);
        char *copy = NULL;
        if (s) {
            int k = 0;
            while (k < TRAINSTATE_MAX_STRINGS && ts->strings[k]) k++;
            APP_ASSERT(k < TRAINSTATE_MAX_STRINGS);
            copy = ts->strings[k] = copy_string(s);
            if (!copy && r->st == EMBER_OK) {
                r->st = ember_ctx_set_error(r->ctx, EMBER_ERR_NOMEM, "'%s': %s: cannot copy %s.%s", r->dir,
                                            TRAINSTATE_BLOB, f->section, f->key);
            }
        }
        const char *value = copy;
        memcpy(p, &value, sizeof value);
        break;
    }
    case TS_ROWS:
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != DLRM_NUM_SPARSE) {
            bad_field(r, f->section, f->key, "is not a list of 26 row counts");
            break;
        }
        for (int t = 0; t < DLRM_NUM_SPARSE; t++) {
            const cJSON *e = cJSON_GetArrayItem(v, t);
            const double d = cJSON_IsNumber(e) ? e->valuedouble : 0.0;
            if (!(d >= 1.0 && d <= (double)MAX_ROWS && d == (double)(int64_t)d)) {
                bad_field(r, f->section, f->key, "holds something other than a row count");
                break;
            }
            o->rows[t] = (int64_t)d;
        }
        break;
    case TS_HOTS: {
        int32_t hot[DLRM_NUM_SPARSE];
        bool ok = cJSON_IsArray(v) && cJSON_GetArraySize(v) == DLRM_NUM_SPARSE;
        for (int t = 0; ok && t < DLRM_NUM_SPARSE; t++) {
            const cJSON *e = cJSON_GetArrayItem(v, t);
            const double d = cJSON_IsNumber(e) ? e->valuedouble : 0.0;
            ok = d >= (double)f->lo && d <= (double)f->hi && d == (double)(int32_t)d;
            if (ok) hot[t] = (int32_t)d;
        }
        if (ok) memcpy(p, hot, sizeof hot);
        else bad_field(r, f->section, f->key, "is not a list of 26 counts of ids per sample");
        break;
    }
    case TS_LAYERS: {
        const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 1 || n > TRAIN_MAX_LAYERS) {
            bad_field(r, f->section, f->key, "is not a list of 1 to 16 layer sizes");
            break;
        }
        int32_t sizes[TRAIN_MAX_LAYERS];
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1 && e->valuedouble <= 65536) ||
                e->valuedouble != (double)(int32_t)e->valuedouble) {
                bad_field(r, f->section, f->key, "holds something other than a layer size");
                return;
            }
            sizes[i] = (int32_t)e->valuedouble;
        }
        memcpy(p, sizes, sizeof(int32_t) * (size_t)n);
        const int32_t count = n;
        memcpy((char *)o + f->count_at, &count, sizeof count);
        break;
    }
    case TS_TABLES: {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        uint32_t mask = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            const double d = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
            if (!(d >= 0 && d < DLRM_NUM_SPARSE && d == (double)(int)d)) {
                n = -1;
                break;
            }
            mask |= 1u << (int)d;
        }
        if (n < 0) bad_field(r, f->section, f->key, "is not a list of table indices 0 to 25");
        else memcpy(p, &mask, sizeof mask);
        break;
    }
    }
}

ember_status trainstate_decode(ember_ctx *ctx, const char *dir, const char *text, trainstate *ts) {
    memset(ts, 0, sizeof *ts);
    train_options_default(&ts->cfg);
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s': %s is not a JSON object", dir, TRAINSTATE_BLOB);
    }
    reader r = {ctx, dir, EMBER_OK};
    const char *format = get_string(&r, root, "", "format");
    if (format && strcmp(format, TRAINSTATE_FORMAT) != 0) {
        // The message before the tree goes: format points into it.
        ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s': %s has format '%.64s', this ember reads '%s'", dir,
                            TRAINSTATE_BLOB, format, TRAINSTATE_FORMAT);
        cJSON_Delete(root);
        return EMBER_ERR_FORMAT;
    }
    train_options *o = &ts->cfg;
    ts->world_size = (int32_t)get_int(&r, root, "", "world_size", 1, INT32_MAX);

    for (int i = 0; i < NUM_FIELDS && r.st == EMBER_OK; i++) {
        const trainstate_field *f = &fields[i];
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, f->section);
        if (sec && !cJSON_IsObject(sec)) {
            bad_field(&r, "", f->section, "is not an object");
            break;
        }
        const cJSON *v = sec ? cJSON_GetObjectItemCaseSensitive(sec, f->key) : NULL;
        if (v) decode_field(&r, f, v, ts);
        else if (!f->added) bad_field(&r, sec ? f->section : "", sec ? f->key : f->section, "is missing");
    }
    ts->num_dense_params = get_int(&r, cJSON_GetObjectItemCaseSensitive(root, "model"), "model", "dense_parameters", 0,
                                   (int64_t)1 << 52);

    const cJSON *pos = member(&r, root, "", "position");
    ts->pos.epoch = (int32_t)get_int(&r, pos, "position", "epoch", 0, INT32_MAX);
    ts->pos.next_batch = get_int(&r, pos, "position", "next_batch", 0, (int64_t)1 << 52);
    ts->pos.steps = get_int(&r, pos, "position", "steps", 0, (int64_t)1 << 52);
    ts->pos.samples = get_int(&r, pos, "position", "samples", 0, (int64_t)1 << 52);
    ts->pos.skipped_batches = get_int(&r, pos, "position", "skipped_batches", 0, (int64_t)1 << 52);

    const cJSON *opt = member(&r, root, "", "dense_optimizer");
    dense_optim_kind kind = DENSE_OPT_SGD;
    const ember_status known = dense_optim_parse(get_string(&r, opt, "dense_optimizer", "kind"), &kind);
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

// Whether blob `name` is in c, its size in *bytes.
static bool find_blob(ember_ctx *ctx, const saved_model *c, const char *name, size_t *bytes) {
    if (c->bundle) {
        if (ember_qebc_read_blob(ctx, c->bundle, name, NULL, 0, bytes) == EMBER_OK) return true;
        ember_ctx_clear_error(ctx);
        return false;
    }
    const int32_t n = ember_checkpoint_num_blobs(c->ckpt);
    for (int32_t i = 0; i < n; i++) {
        const char *bn = NULL;
        size_t b = 0;
        if (ember_checkpoint_blob_info(c->ckpt, i, &bn, &b) == EMBER_OK && bn && strcmp(bn, name) == 0) {
            *bytes = b;
            return true;
        }
    }
    return false;
}

static ember_status read_blob(ember_ctx *ctx, const saved_model *c, const char *name, void *dst, size_t bytes) {
    return c->bundle ? ember_qebc_read_blob(ctx, c->bundle, name, dst, bytes, NULL)
                     : ember_checkpoint_read_blob(c->ckpt, name, dst, bytes, NULL);
}

ember_status trainstate_read(ember_ctx *ctx, const saved_model *c, const char *dir, trainstate *ts) {
    memset(ts, 0, sizeof *ts);
    size_t bytes = 0;
    APP_CHECK(ctx, find_blob(ctx, c, TRAINSTATE_BLOB, &bytes), EMBER_ERR_FORMAT,
              "'%s' is not a checkpoint of ember train: it has no %s", dir, TRAINSTATE_BLOB);
    APP_CHECK(ctx, bytes <= ((size_t)1 << 24), EMBER_ERR_FORMAT, "'%s': %s is %zu bytes, more than a trainer writes",
              dir, TRAINSTATE_BLOB, bytes);
    char *text = app_alloc(ctx, bytes + 1, TRAINSTATE_BLOB);
    if (!text) return EMBER_ERR_NOMEM;
    ember_status st = read_blob(ctx, c, TRAINSTATE_BLOB, text, bytes);
    if (st == EMBER_OK) {
        text[bytes] = '\0';
        st = trainstate_decode(ctx, dir, text, ts);
    }
    ember_ctx_free(ctx, text);
    return st;
}

// ---- The model must be the same ---------------------------------------------------------------

// Row f's value in o as text, for messages.
static void format_value(const trainstate_field *f, const train_options *o, char *out, size_t cap) {
    const void *p = field_of(o, f);
    out[0] = '\0';
    switch (f->kind) {
    case TS_INT: snprintf(out, cap, "%lld", (long long)load_int(p, f->size)); break;
    case TS_SEED: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        snprintf(out, cap, "%llu", (unsigned long long)v);
        break;
    }
    case TS_REAL: snprintf(out, cap, "%.17g", load_real(p, f->size)); break;
    case TS_NAME: {
        const char *name = f->names((int)load_int(p, f->size));
        snprintf(out, cap, "%s", name ? name : "unknown");
        break;
    }
    case TS_HOTS:
    case TS_LAYERS: {
        const int32_t *v = p;
        size_t used = 0;
        for (int32_t i = 0; i < int32_count(o, f) && used < cap; i++) {
            const int w = snprintf(out + used, cap - used, "%s%d", i ? "," : "", (int)v[i]);
            if (w < 0) break;
            used += (size_t)w;
        }
        break;
    }
    case TS_TABLES: { // the indices, or "none"
        uint32_t mask;
        memcpy(&mask, p, sizeof mask);
        size_t used = 0;
        for (int t = 0; t < DLRM_NUM_SPARSE && used < cap; t++) {
            if (!(mask & (1u << t))) continue;
            const int w = snprintf(out + used, cap - used, "%s%d", used ? "," : "", t);
            if (w < 0) break;
            used += (size_t)w;
        }
        if (!mask) snprintf(out, cap, "none");
        break;
    }
    case TS_PATH:
    case TS_ROWS: break; // never compared as a whole
    }
}

static bool same_value(const trainstate_field *f, const train_options *a, const train_options *b) {
    const void *x = field_of(a, f), *y = field_of(b, f);
    switch (f->kind) {
    case TS_INT:
    case TS_NAME: return load_int(x, f->size) == load_int(y, f->size);
    case TS_REAL: return load_real(x, f->size) == load_real(y, f->size);
    case TS_LAYERS:
        return layer_count(a, f) == layer_count(b, f) &&
               memcmp(x, y, sizeof(int32_t) * (size_t)layer_count(a, f)) == 0;
    case TS_PATH: {
        const char *s, *t;
        memcpy(&s, x, sizeof s);
        memcpy(&t, y, sizeof t);
        return s == t || (s && t && strcmp(s, t) == 0);
    }
    case TS_SEED:
    case TS_ROWS:
    case TS_HOTS:
    case TS_TABLES: return memcmp(x, y, f->size) == 0;
    }
    return false;
}

ember_status trainstate_check(ember_ctx *ctx, const trainstate *ts, const train_options *here) {
    const train_options *c = &ts->cfg;
    for (int i = 0; i < NUM_FIELDS; i++) {
        const trainstate_field *f = &fields[i];
        if (f->rule != TS_SAME || same_value(f, c, here)) continue;
        if ((f->when == TS_SYNTHETIC && c->dataset != TRAIN_SYNTHETIC) ||
            (f->when == TS_COLLISIONLESS && !c->collisionless) ||
            (f->when == TS_DCN && c->interaction != DLRM_INTERACTION_DCN))
            continue;
        if (f->kind == TS_ROWS) {
            for (int t = 0; t < DLRM_NUM_SPARSE; t++) {
                if (c->rows[t] == here->rows[t]) continue;
                return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                           "--resume: feature cat_%d (table t_cat_%d) has %lld rows in the checkpoint, "
                                           "%lld here", t, t, (long long)c->rows[t], (long long)here->rows[t]);
            }
            continue;
        }
        char a[160], b[160];
        format_value(f, c, a, sizeof a);
        format_value(f, here, b, sizeof b);
        return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "--resume: %s %s in the checkpoint, %s here", f->what,
                                   a, b);
    }
    if (held_out_lines(c) != held_out_lines(here)) {
        return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                   "--resume: the held-out head of --data_path (eval lines before the training data) "
                                   "is %lld lines in the checkpoint, %lld lines here",
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

ember_status trainstate_read_dense(ember_ctx *ctx, const saved_model *c, const char *flag, const char *dir,
                                   dlrm_model *m, int64_t dense_step) {
    dense_optim *opt = dlrm_dense_optim(m);
    const int64_t np = dlrm_num_dense_params(m);
    const size_t want = sizeof(float) * (size_t)np;
    float *dst[3] = {dlrm_dense_params(m), opt->m1, opt->m2};
    static const char *const names[3] = {BLOB_PARAMS, BLOB_M1, BLOB_M2};
    for (int i = 0; i < (c->bundle ? 1 : 3); i++) {
        if (!dst[i]) continue;
        size_t bytes = 0;
        APP_CHECK(ctx, find_blob(ctx, c, names[i], &bytes), EMBER_ERR_FORMAT,
                  "%s '%s': the %s has no %s (the %s optimizer's state)", flag, dir, c->bundle ? "bundle" : "checkpoint",
                  names[i], dense_optim_name(opt->cfg.kind));
        APP_CHECK(ctx, bytes == want, EMBER_ERR_FORMAT,
                  "%s '%s': %s holds %zu bytes, the model's %lld dense parameters need %zu", flag, dir, names[i],
                  bytes, (long long)np, want);
        APP_TRY(read_blob(ctx, c, names[i], dst[i], want));
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

static bool has_file(const char *dir, const char *name) {
    char path[TRAINSTATE_PATH_MAX + 32];
    struct stat sb;
    return join(path, sizeof path, dir, name) && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool has_manifest(const char *dir) { return has_file(dir, "manifest.json"); }

bool saved_is_bundle(const char *dir) { return has_file(dir, "bundle.json"); }

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
    if (has_manifest(clean) || saved_is_bundle(clean)) {
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
