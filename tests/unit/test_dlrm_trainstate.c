// trainer.json (apps/ember/trainstate.h): every option of `ember train` is recorded or declared
// free to change on resume; every recorded field reads back as written; a checkpoint of an older
// ember (without the fields added since) reads with their defaults; a resume refuses each changed
// model or data field by name and takes each changed free one; a foreign format is quoted.
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "cli.h"
#include "commands.h"
#include "trainstate.h"

static const trainstate_field *row_named(const char *flag, bool with_also) {
    int n;
    const trainstate_field *f = trainstate_fields(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(f[i].flag, flag) == 0 || (with_also && f[i].also && strcmp(f[i].also, flag) == 0)) return &f[i];
    }
    return NULL;
}

// The free list's entry of `flag` ("flag: why"), or NULL.
static const char *free_entry(const char *flag) {
    const size_t len = strlen(flag);
    for (const char *const *e = trainstate_free_flags(); *e; e++) {
        if (strncmp(*e, flag, len) == 0 && (*e)[len] == ':') return *e;
    }
    return NULL;
}

static const cli_flag *train_flag(const char *name) {
    int n;
    const cli_flag *flags = cmd_train_flags(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    }
    return NULL;
}

// Every option of ember train has a decision: recorded in trainer.json (a row, or the `also` of
// one) or free to change on resume; never both. A new option without one fails here by name.
static void every_train_flag_is_recorded_or_free(void **state) {
    (void)state;
    int n, bad = 0;
    const cli_flag *flags = cmd_train_flags(&n);
    assert_true(n > 40);
    for (int i = 0; i < n; i++) {
        const bool recorded = row_named(flags[i].name, true) != NULL, free_to_change = free_entry(flags[i].name);
        if (recorded == free_to_change) {
            fprintf(stderr, "--%s: %s\n", flags[i].name,
                    recorded ? "both recorded and declared free"
                             : "neither a row of trainstate.c's fields nor in its free_flags: decide whether a "
                               "resume may change it");
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

// The table names real options, and each row's field is the one its option fills.
static void rows_and_free_flags_name_real_options(void **state) {
    (void)state;
    int n;
    const trainstate_field *f = trainstate_fields(&n);
    for (int i = 0; i < n; i++) {
        const cli_flag *c = train_flag(f[i].flag);
        if (!c) fprintf(stderr, "row %s.%s: no option --%s\n", f[i].section, f[i].key, f[i].flag);
        assert_non_null(c);
        assert_true(f[i].at + f[i].size <= sizeof(train_options));
        if (c->at != f[i].at || c->size != f[i].size)
            fprintf(stderr, "--%s fills offset %zu (%zu bytes), its row %zu (%zu)\n", f[i].flag, c->at, c->size,
                    f[i].at, f[i].size);
        assert_int_equal(c->at, f[i].at);
        assert_int_equal(c->size, f[i].size);
        if (f[i].also) assert_non_null(train_flag(f[i].also));
        if (f[i].rule == TS_SAME) assert_non_null(f[i].what);
        for (int j = 0; j < i; j++)
            assert_false(strcmp(f[i].section, f[j].section) == 0 && strcmp(f[i].key, f[j].key) == 0);
    }
    for (const char *const *e = trainstate_free_flags(); *e; e++) {
        char name[64];
        const char *colon = strchr(*e, ':');
        assert_non_null(colon);
        snprintf(name, sizeof name, "%.*s", (int)(colon - *e), *e);
        if (!train_flag(name)) fprintf(stderr, "free flag '%s' is no option of ember train\n", name);
        assert_non_null(train_flag(name));
    }
}

// ---- Values ----------------------------------------------------------------------------------

static int64_t get_i(const train_options *o, const trainstate_field *f) {
    const char *p = (const char *)o + f->at;
    if (f->size == sizeof(bool)) return *(const bool *)p;
    if (f->size == sizeof(int32_t)) {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void set_i(train_options *o, const trainstate_field *f, int64_t v) {
    char *p = (char *)o + f->at;
    if (f->size == sizeof(bool)) {
        *(bool *)p = v != 0;
    } else if (f->size == sizeof(int32_t)) {
        const int32_t x = (int32_t)v;
        memcpy(p, &x, sizeof x);
    } else {
        memcpy(p, &v, sizeof v);
    }
}

static int name_count(const trainstate_field *f) {
    int k = 0;
    while (f->names(k)) k++;
    return k;
}

// Changes row f's value in o to another valid one (`salt` picks which).
static void change(train_options *o, const trainstate_field *f, int salt) {
    char *p = (char *)o + f->at;
    switch (f->kind) {
    case TS_INT: {
        const int64_t v = get_i(o, f);
        set_i(o, f, v + 1 + salt <= f->hi ? v + 1 + salt : f->lo);
        break;
    }
    case TS_SEED: *(uint64_t *)p += 1000003u + (uint64_t)salt; break;
    case TS_REAL:
        if (f->size == sizeof(float)) *(float *)p += 0.25f + (float)salt;
        else *(double *)p += 0.25 + salt;
        break;
    case TS_NAME: set_i(o, f, (get_i(o, f) + 1 + salt) % name_count(f)); break;
    case TS_PATH: {
        static const char *const paths[] = {"/data/a.tsv", "/data/b.tsv", "/data/c.tsv"};
        const char *s = paths[salt % 3];
        memcpy(p, &s, sizeof s);
        break;
    }
    case TS_ROWS: o->rows[(3 + salt) % DLRM_NUM_SPARSE] += 7; break;
    case TS_LAYERS: ((int32_t *)p)[0] += 3 + salt; break;
    case TS_HOTS: ((int32_t *)p)[(3 + salt) % DLRM_NUM_SPARSE] += 1 + salt; break;
    case TS_TABLES: *(uint32_t *)p ^= 5u << salt; break;
    }
}

static bool same(const train_options *a, const train_options *b, const trainstate_field *f) {
    const char *x = (const char *)a + f->at, *y = (const char *)b + f->at;
    if (f->kind == TS_PATH) {
        const char *s, *t;
        memcpy(&s, x, sizeof s);
        memcpy(&t, y, sizeof t);
        return s == t || (s && t && strcmp(s, t) == 0);
    }
    if (f->kind == TS_LAYERS) {
        int32_t na, nb;
        memcpy(&na, (const char *)a + f->count_at, sizeof na);
        memcpy(&nb, (const char *)b + f->count_at, sizeof nb);
        return na == nb && memcmp(x, y, sizeof(int32_t) * (size_t)na) == 0;
    }
    if (f->kind == TS_REAL && f->size == sizeof(float)) return *(const float *)x == *(const float *)y;
    return memcmp(x, y, f->size) == 0;
}

// The context's message starts with `want` (the library adds the rank).
static void assert_message(ember_ctx *ctx, const char *want) {
    if (strncmp(ember_ctx_errmsg(ctx), want, strlen(want)) != 0) fprintf(stderr, "%s\n", ember_ctx_errmsg(ctx));
    assert_int_equal(strncmp(ember_ctx_errmsg(ctx), want, strlen(want)), 0);
}

static ember_ctx *new_ctx(void) {
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    return ctx;
}

// A state whose every recorded field differs from the default (TS_TABLES: tables 0 and 2 on disk).
static trainstate changed_state(void) {
    trainstate ts;
    memset(&ts, 0, sizeof ts);
    train_options_default(&ts.cfg);
    ts.cfg.checkpoint_interval = 10;
    ts.cfg.keep_checkpoints = 3;
    int n;
    const trainstate_field *f = trainstate_fields(&n);
    for (int i = 0; i < n; i++) change(&ts.cfg, &f[i], 0);
    ts.world_size = 3;
    ts.num_dense_params = 1234;
    ts.pos = (train_position){.epoch = 1, .next_batch = 7, .steps = 40, .samples = 40960, .skipped_batches = 2};
    ts.dense_step = 40;
    ts.digest_losses = 0x0123456789abcdefull;
    ts.digest_outputs = 0xfedcba9876543210ull;
    return ts;
}

// Every recorded field, changed from its default, reads back as written.
static void every_field_reads_back(void **state) {
    (void)state;
    ember_ctx *ctx = new_ctx();
    trainstate ts = changed_state(), back;
    char *text = NULL;
    assert_int_equal(trainstate_encode(ctx, &ts, &text), EMBER_OK);
    assert_int_equal(trainstate_decode(ctx, "ck", text, &back), EMBER_OK);
    int n;
    const trainstate_field *f = trainstate_fields(&n);
    for (int i = 0; i < n; i++) {
        if (!same(&ts.cfg, &back.cfg, &f[i])) fprintf(stderr, "%s.%s did not read back\n", f[i].section, f[i].key);
        assert_true(same(&ts.cfg, &back.cfg, &f[i]));
    }
    assert_int_equal(back.world_size, 3);
    assert_int_equal(back.pos.next_batch, 7);
    assert_true(back.digest_outputs == ts.digest_outputs);
    trainstate_free(&back);
    trainstate_text_free(text);
    ember_ctx_destroy(ctx);
}

// trainer.json of an older ember has none of the added fields (nor the storage section): they
// read as train_options_default's, the rest as written.
static void absent_added_fields_mean_the_defaults(void **state) {
    (void)state;
    ember_ctx *ctx = new_ctx();
    trainstate ts = changed_state(), back;
    char *text = NULL;
    assert_int_equal(trainstate_encode(ctx, &ts, &text), EMBER_OK);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    int n;
    const trainstate_field *f = trainstate_fields(&n);
    for (int i = 0; i < n; i++) {
        cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, f[i].section);
        if (f[i].added) cJSON_DeleteItemFromObjectCaseSensitive(sec, f[i].key);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "storage");
    char *old = cJSON_Print(root);
    assert_int_equal(trainstate_decode(ctx, "ck", old, &back), EMBER_OK);
    train_options dflt;
    train_options_default(&dflt);
    for (int i = 0; i < n; i++) assert_true(same(f[i].added ? &dflt : &ts.cfg, &back.cfg, &f[i]));
    trainstate_free(&back);
    // A field that was always there is still required.
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "data"), "seed");
    char *older = cJSON_Print(root);
    assert_int_equal(trainstate_decode(ctx, "ck", older, &back), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "field data.seed is missing"));
    trainstate_free(&back);
    cJSON_free(older);
    cJSON_free(old);
    cJSON_Delete(root);
    trainstate_text_free(text);
    ember_ctx_destroy(ctx);
}

// Another format is quoted from the text (the message was once formatted from a freed tree).
static void foreign_format_is_quoted(void **state) {
    (void)state;
    ember_ctx *ctx = new_ctx();
    trainstate back;
    const char *text = "{\"format\": \"ember-train/9-with-a-longer-name\", \"world_size\": 1}";
    assert_int_equal(trainstate_decode(ctx, "ck", text, &back), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_ctx_errmsg(ctx),
                           "'ck': trainer.json has format 'ember-train/9-with-a-longer-name', this ember reads "
                           "'ember-train/1'"));
    trainstate_free(&back);
    assert_int_equal(trainstate_decode(ctx, "ck", "[1, 2]", &back), EMBER_ERR_FORMAT);
    trainstate_free(&back);
    ember_ctx_destroy(ctx);
}

// A number JSON holds that its field cannot (found by fuzz_trainstate: 1e308 read into the float
// learning rate became infinity, which trainer.json then wrote as null): refused by name.
static void numbers_beyond_their_type_are_refused(void **state) {
    (void)state;
    ember_ctx *ctx = new_ctx();
    trainstate ts = changed_state(), back;
    char *text = NULL;
    assert_int_equal(trainstate_encode(ctx, &ts, &text), EMBER_OK);
    static const struct {
        const char *section, *key, *value;
    } cases[] = {{"training", "learning_rate", "1e308"}, {"training", "embedding_learning_rate", "-3.5e38"},
                 {"data", "zipf_alpha", "1e999"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *root = cJSON_Parse(text);
        cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, cases[i].section);
        cJSON_ReplaceItemInObjectCaseSensitive(sec, cases[i].key, cJSON_CreateRaw(cases[i].value));
        char *bad = cJSON_Print(root);
        assert_int_equal(trainstate_decode(ctx, "ck", bad, &back), EMBER_ERR_FORMAT);
        char want[128];
        snprintf(want, sizeof want, "'ck': trainer.json: field %s.%s is not a finite number of its type",
                 cases[i].section, cases[i].key);
        assert_message(ctx, want);
        trainstate_free(&back);
        cJSON_free(bad);
        cJSON_Delete(root);
    }
    trainstate_text_free(text);
    ember_ctx_destroy(ctx);
}

// Each model or data field changed on resume is refused naming it (its `when` holding for the
// checkpoint); each other one is taken.
static void resume_refuses_each_model_field_and_takes_the_rest(void **state) {
    (void)state;
    ember_ctx *ctx = new_ctx();
    int n;
    const trainstate_field *f = trainstate_fields(&n);
    int refused = 0;
    for (int i = 0; i < n; i++) {
        trainstate ts;
        memset(&ts, 0, sizeof ts);
        train_options_default(&ts.cfg);
        if (f[i].when == TS_COLLISIONLESS) ts.cfg.collisionless = true;
        if (f[i].when == TS_DCN) ts.cfg.interaction = DLRM_INTERACTION_DCN;
        train_options here = ts.cfg;
        change(&here, &f[i], 0);
        const ember_status st = trainstate_check(ctx, &ts, &here);
        if (f[i].rule == TS_SAME) {
            if (st != EMBER_ERR_INVALID_ARG) fprintf(stderr, "--%s changed: taken\n", f[i].flag);
            assert_int_equal(st, EMBER_ERR_INVALID_ARG);
            char want[256];
            snprintf(want, sizeof want, "--resume: %s", f[i].kind == TS_ROWS ? "feature cat_3" : f[i].what);
            if (!strstr(ember_ctx_errmsg(ctx), want)) fprintf(stderr, "%s\n", ember_ctx_errmsg(ctx));
            assert_non_null(strstr(ember_ctx_errmsg(ctx), want));
            refused++;
        } else {
            if (st != EMBER_OK) fprintf(stderr, "--%s changed: %s\n", f[i].flag, ember_ctx_errmsg(ctx));
            assert_int_equal(st, EMBER_OK);
        }
    }
    assert_true(refused >= 17);
    ember_ctx_destroy(ctx);
}

// The hashing fields name their options and both values; they are not compared for a checkpoint
// of modulo tables, nor the synthetic ones for a Criteo run.
static void resume_names_hash_fields_where_they_count(void **state) {
    (void)state;
    ember_ctx *ctx = new_ctx();
    trainstate ts;
    memset(&ts, 0, sizeof ts);
    train_options_default(&ts.cfg);
    ts.cfg.collisionless = true;
    ts.cfg.hash.policy = EMBER_EVICT_LRU;
    train_options here = ts.cfg;
    here.hash.policy = EMBER_EVICT_LFU;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_ERR_INVALID_ARG);
    assert_message(ctx,
                   "--resume: hashed tables' eviction policy (--hash_policy) is lru in the checkpoint, lfu here");
    here = ts.cfg;
    here.synth_items = 4;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_ERR_INVALID_ARG);
    assert_message(ctx,
                   "--resume: synthetic items per table row (--synth_items) are 1 in the checkpoint, 4 here");
    here = ts.cfg;
    here.collisionless = false;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_ERR_INVALID_ARG);
    assert_message(ctx,
                   "--resume: hashing of categorical values (--hash) is collisionless in the checkpoint, modulo "
                   "here");
    ts.cfg.collisionless = false;
    here = ts.cfg;
    here.hash.ttl_steps = 9;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_OK);
    // The cross net's shape counts only for a checkpoint of DLRM-DCNv2.
    here = ts.cfg;
    here.dcn_low_rank_dim = 7;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_OK);
    here.interaction = DLRM_INTERACTION_DCN;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_ERR_INVALID_ARG);
    assert_message(ctx, "--resume: interaction (--interaction) is dot in the checkpoint, dcn here");
    ts.cfg.interaction = DLRM_INTERACTION_DCN;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_ERR_INVALID_ARG);
    assert_message(ctx, "--resume: cross layers' rank (--dcn_low_rank_dim) is 512 in the checkpoint, 7 here");
    ts.cfg.interaction = DLRM_INTERACTION_DOT;
    ts.cfg.dataset = TRAIN_CRITEO;
    ts.cfg.eval_data_path = "eval.tsv";
    here = ts.cfg;
    here.zipf_alpha = 2.0;
    assert_int_equal(trainstate_check(ctx, &ts, &here), EMBER_OK);
    ember_ctx_destroy(ctx);
}

// eval --load takes every recorded field of the checkpoint.
static void apply_copies_every_recorded_field(void **state) {
    (void)state;
    trainstate ts = changed_state();
    train_options o;
    train_options_default(&o);
    trainstate_apply(&ts, &o);
    int n;
    const trainstate_field *f = trainstate_fields(&n);
    for (int i = 0; i < n; i++) assert_true(same(&ts.cfg, &o, &f[i]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_train_flag_is_recorded_or_free),
        cmocka_unit_test(rows_and_free_flags_name_real_options),
        cmocka_unit_test(every_field_reads_back),
        cmocka_unit_test(absent_added_fields_mean_the_defaults),
        cmocka_unit_test(foreign_format_is_quoted),
        cmocka_unit_test(numbers_beyond_their_type_are_refused),
        cmocka_unit_test(resume_refuses_each_model_field_and_takes_the_rest),
        cmocka_unit_test(resume_names_hash_fields_where_they_count),
        cmocka_unit_test(apply_copies_every_recorded_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
