// libFuzzer target: plan files, `ember train --plan FILE` (apps/ember/planfile.h: planfile_read,
// with planfile_write for the round trip), and what the CLI does next with a plan it read: the
// memory check's per-rank bytes (ember_shard_rank_bytes) and the plan's description.
//
// Input: a 2-byte header, then the file's bytes (written to this process's directory on /dev/shm
// per input).
//   byte 0   world size 1..8 (low 3 bits + 1)
//   byte 1   tables: bit 7 set, 3 tables (t_cat_0..t_cat_2); else 26, as the CLI's model;
//            bits 0-1: dim 1, 4, 16 or 64; bits 2-3: rows 1, 7, 1000 or 2^40; bit 4: tables on
//            disk behind a 64-row cache; bit 5: the rows of table 1 are 3 (an odd table)
// fuzz/planfile.dict holds the members, the schemes' names and number shapes. Checked:
//   - the status is EMBER_OK or EMBER_ERR_INVALID_ARG (a message naming --plan and the file),
//     or EMBER_ERR_NOMEM; a refusal leaves nothing allocated on the context;
//   - a plan read has, for every table, a known scheme, exactly ember_table_plan_ranks_needed
//     ranks, each in [0, world);
//   - ember_shard_rank_bytes of every rank answers EMBER_OK, or EMBER_ERR_INVALID_ARG or
//     EMBER_ERR_UNSUPPORTED (a plan the collection would refuse: a tiered table data-parallel),
//     and ember_plan_describe fits what it said it needs;
//   - planfile_write then planfile_read give the same plan back;
//   - ember_plan_release leaves nothing allocated.
#define _GNU_SOURCE // mkdtemp (fuzz_input.h)
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/plan.h"
#include "fuzz_input.h"
#include "planfile.h"

#define MAX_TABLES 26

static ember_ctx *ctx;
static size_t baseline;
static char path[512], back_path[512];

static void quiet(void *user, ember_log_level level, const char *msg) { (void)user, (void)level, (void)msg; }

static void finalize(void) { ember_ctx_destroy(ctx); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = 1;
    cc.log = quiet;
    const char *dir = fuzz_dir("planfile");
    if (!dir || ember_ctx_create(&cc, &ctx) != EMBER_OK) abort();
    snprintf(path, sizeof path, "%s/plan.json", dir);
    snprintf(back_path, sizeof back_path, "%s/back.json", dir);
    baseline = ember_ctx_bytes_outstanding(ctx);
    atexit(finalize);
    return 0;
}

static bool same_plan(const ember_table_plan *a, const ember_table_plan *b) {
    if (a->scheme != b->scheme || a->num_ranks != b->num_ranks) return false;
    const unsigned uses = ember_shard_scheme_plan_fields(a->scheme);
    if ((uses & EMBER_PLAN_USES_SHARDS) && a->num_shards != b->num_shards) return false;
    if ((uses & EMBER_PLAN_USES_GROUP) && a->group_size != b->group_size) return false;
    return a->num_ranks == 0 || memcmp(a->ranks, b->ranks, sizeof(int32_t) * (size_t)a->num_ranks) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const int32_t world = 1 + (data[0] & 7);
    const uint8_t shape = data[1];
    const int32_t nt = shape & 0x80 ? 3 : MAX_TABLES;
    static const int32_t dims[4] = {1, 4, 16, 64};
    static const int64_t rows[4] = {1, 7, 1000, (int64_t)1 << 40};
    if (fuzz_write_file(path, data + 2, size - 2) != 0) abort();

    char names[MAX_TABLES][16];
    ember_table_config tables[MAX_TABLES];
    ember_feature_config features[MAX_TABLES];
    for (int32_t t = 0; t < nt; t++) {
        snprintf(names[t], sizeof names[t], "t_cat_%d", (int)t);
        ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
        tc.name = names[t];
        tc.rows = (shape & 0x20) && t == 1 ? 3 : rows[(shape >> 2) & 3];
        tc.dim = dims[shape & 3];
        if (shape & 0x10) tc.cache_rows = 64;
        tables[t] = tc;
        features[t] = (ember_feature_config){.name = names[t], .table = t};
    }
    ember_ebc_config ec = EMBER_EBC_CONFIG_DEFAULT;
    ec.tables = tables, ec.num_tables = nt, ec.features = features, ec.num_features = nt;

    ember_table_plan plan[MAX_TABLES];
    const ember_status st = planfile_read(ctx, path, &ec, world, plan);
    FUZZ_REQUIRE(st == EMBER_OK || st == EMBER_ERR_INVALID_ARG || st == EMBER_ERR_NOMEM, "status %s",
                 ember_status_name(st));
    if (st != EMBER_OK) {
        FUZZ_REQUIRE(strncmp(ember_ctx_errmsg(ctx), "--plan", 6) == 0, "message '%s'", ember_ctx_errmsg(ctx));
        FUZZ_REQUIRE(ember_ctx_bytes_outstanding(ctx) == baseline, "a refusal left %zu bytes on the context",
                     ember_ctx_bytes_outstanding(ctx) - baseline);
        return 0;
    }
    for (int32_t t = 0; t < nt; t++) {
        const ember_table_plan *p = &plan[t];
        FUZZ_REQUIRE((unsigned)p->scheme < EMBER_SHARD_COUNT, "table %d: scheme %d", (int)t, (int)p->scheme);
        FUZZ_REQUIRE(p->num_ranks == ember_table_plan_ranks_needed(p), "table %d: %d ranks, the scheme takes %d",
                     (int)t, (int)p->num_ranks, (int)ember_table_plan_ranks_needed(p));
        for (int32_t i = 0; i < p->num_ranks; i++)
            FUZZ_REQUIRE(p->ranks[i] >= 0 && p->ranks[i] < world, "table %d: rank %d of %d", (int)t,
                         (int)p->ranks[i], (int)world);
        for (int32_t r = 0; r < world; r++) {
            size_t w = 0, s = 0;
            const ember_status b = ember_shard_rank_bytes(ctx, &tables[t], p, world, r, &w, &s);
            // EMBER_ERR_UNSUPPORTED: a tiered table planned data-parallel, which the collection
            // refuses too (its header lists INVALID_ARG for such plans).
            FUZZ_REQUIRE(b == EMBER_OK || b == EMBER_ERR_INVALID_ARG || b == EMBER_ERR_UNSUPPORTED, "rank bytes: %s",
                         ember_status_name(b));
        }
    }
    char text[4096];
    const size_t need = ember_plan_describe(&ec, plan, text, sizeof text);
    FUZZ_REQUIRE(need < sizeof text ? strlen(text) == need : strlen(text) == sizeof text - 1,
                 "describe: needs %zu, wrote %zu", need, strlen(text));

    // Written and read back: the same plan.
    FUZZ_REQUIRE(planfile_write(ctx, back_path, &ec, plan, world) == EMBER_OK, "write: %s", ember_ctx_errmsg(ctx));
    ember_table_plan back[MAX_TABLES];
    FUZZ_REQUIRE(planfile_read(ctx, back_path, &ec, world, back) == EMBER_OK, "what it wrote does not read: %s",
                 ember_ctx_errmsg(ctx));
    for (int32_t t = 0; t < nt; t++) FUZZ_REQUIRE(same_plan(&plan[t], &back[t]), "table %d changed", (int)t);
    ember_plan_release(ctx, back, nt);
    ember_plan_release(ctx, plan, nt);
    FUZZ_REQUIRE(ember_ctx_bytes_outstanding(ctx) == baseline, "%zu bytes left on the context",
                 ember_ctx_bytes_outstanding(ctx) - baseline);
    return 0;
}
