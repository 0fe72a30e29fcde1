// Plan files (planfile.h): a table plan to JSON and back, checked against the model and the run.
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "appctx.h"
#include "ember/plan.h"
#include "planfile.h"

#define NUM_SCHEMES EMBER_SHARD_COUNT // the values of ember_shard_scheme

ember_status planfile_write(ember_ctx *ctx, const char *path, const ember_ebc_config *ec,
                            const ember_table_plan *plan, int32_t world) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "world_size", world);
    cJSON *tables = cJSON_AddArrayToObject(root, "tables");
    for (int32_t t = 0; t < ec->num_tables; t++) {
        const ember_table_plan *p = &plan[t];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", ec->tables[t].name);
        cJSON_AddStringToObject(e, "scheme", ember_shard_scheme_name(p->scheme));
        const unsigned uses = ember_shard_scheme_plan_fields(p->scheme);
        if (uses & EMBER_PLAN_USES_SHARDS) cJSON_AddNumberToObject(e, "shards", p->num_shards);
        if (uses & EMBER_PLAN_USES_GROUP) cJSON_AddNumberToObject(e, "group", p->group_size);
        cJSON *ranks = cJSON_AddArrayToObject(e, "ranks");
        for (int32_t i = 0; i < p->num_ranks; i++) cJSON_AddItemToArray(ranks, cJSON_CreateNumber(p->ranks[i]));
        cJSON_AddItemToArray(tables, e);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "--output '%s': cannot format the plan", path);
    FILE *f = fopen(path, "w");
    ember_status st = EMBER_OK;
    if (!f) {
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "--output: cannot create '%s': %s", path, strerror(errno));
    } else {
        fprintf(f, "%s\n", text);
        if (fclose(f) != 0) st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "--output '%s': write failed", path);
    }
    cJSON_free(text);
    return st;
}

// The file's contents, NUL-terminated (free with free()), or NULL with the error recorded.
static char *slurp(ember_ctx *ctx, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ember_ctx_set_error(ctx, EMBER_ERR_IO, "--plan: cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
        len += got;
        if (len + 1 == cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (!buf || failed) {
        free(buf);
        ember_ctx_set_error(ctx, failed ? EMBER_ERR_IO : EMBER_ERR_NOMEM, "--plan: cannot read '%s'", path);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

// An integer member of a table entry, or `dflt` when absent; false when present but not an integer.
static bool get_int(const cJSON *e, const char *key, int32_t dflt, int32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    *out = dflt;
    if (!v) return true;
    // In range before the conversion: an out-of-range double to int is undefined (1e999 parses as inf).
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= INT32_MIN && v->valuedouble <= INT32_MAX) ||
        v->valuedouble != (double)(int32_t)v->valuedouble)
        return false;
    *out = (int32_t)v->valuedouble;
    return true;
}

// One table entry into p; `name` is the table's name, for messages.
static ember_status read_entry(ember_ctx *ctx, const char *path, const cJSON *e, const char *name,
                               const ember_table_config *tc, int32_t world, ember_table_plan *p) {
    const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(e, "scheme");
    int s = 0;
    while (s < NUM_SCHEMES && !(cJSON_IsString(scheme) &&
                                strcmp(scheme->valuestring, ember_shard_scheme_name((ember_shard_scheme)s)) == 0)) {
        s++;
    }
    if (s == NUM_SCHEMES) {
        char known[160] = "";
        for (int k = 0, n = 0; k < NUM_SCHEMES && n >= 0 && (size_t)n < sizeof known; k++)
            n += snprintf(known + n, sizeof known - (size_t)n, "%s%s", k ? ", " : "",
                          ember_shard_scheme_name((ember_shard_scheme)k));
        return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "--plan '%s': table '%s': scheme '%s' is not one of %s",
                                   path, name, cJSON_IsString(scheme) ? scheme->valuestring : "(missing)", known);
    }
    p->scheme = (ember_shard_scheme)s;
    APP_CHECK(ctx, get_int(e, "shards", 0, &p->num_shards) && get_int(e, "group", 0, &p->group_size),
              EMBER_ERR_INVALID_ARG, "--plan '%s': table '%s': shards and group must be integers", path, name);
    const unsigned uses = ember_shard_scheme_plan_fields(p->scheme);
    if (uses & EMBER_PLAN_USES_SHARDS) {
        APP_CHECK(ctx, p->num_shards >= 1 && p->num_shards <= tc->dim, EMBER_ERR_INVALID_ARG,
                  "--plan '%s': table '%s': shards %d, expected 1 to %d", path, name, (int)p->num_shards, (int)tc->dim);
    }
    if (uses & EMBER_PLAN_USES_GROUP) {
        APP_CHECK(ctx, p->group_size >= 1 && p->group_size <= world, EMBER_ERR_INVALID_ARG,
                  "--plan '%s': table '%s': group %d, expected 1 to the %d ranks of this run", path, name,
                  (int)p->group_size, (int)world);
    }
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(e, "ranks");
    const int32_t want = ember_table_plan_ranks_needed(p), got = cJSON_IsArray(ranks) ? cJSON_GetArraySize(ranks) : 0;
    APP_CHECK(ctx, got == want, EMBER_ERR_INVALID_ARG, "--plan '%s': table '%s': %d ranks listed, %s takes %d", path,
              name, (int)got, ember_shard_scheme_name(p->scheme), (int)want);
    if (want > 0) {
        p->ranks = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)want);
        APP_CHECK(ctx, p->ranks, EMBER_ERR_NOMEM, "--plan '%s': table '%s': out of memory for %d ranks", path, name,
                  (int)want);
        p->num_ranks = want;
    }
    for (int32_t i = 0; i < want; i++) {
        const cJSON *r = cJSON_GetArrayItem(ranks, i);
        APP_CHECK(ctx, cJSON_IsNumber(r) && r->valuedouble >= 0 && r->valuedouble < world &&
                           r->valuedouble == (double)(int32_t)r->valuedouble,
                  EMBER_ERR_INVALID_ARG, "--plan '%s': table '%s': rank %g is not one of the %d ranks of this run",
                  path, name, cJSON_IsNumber(r) ? r->valuedouble : -1.0, (int)world);
        p->ranks[i] = (int32_t)r->valuedouble;
    }
    return EMBER_OK;
}

static ember_status read_plan(ember_ctx *ctx, const char *path, const cJSON *root, const ember_ebc_config *ec,
                              int32_t world, ember_table_plan *plan) {
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(root, "world_size");
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(root, "tables");
    APP_CHECK(ctx, cJSON_IsNumber(ws) && cJSON_IsArray(tables), EMBER_ERR_INVALID_ARG,
              "--plan '%s': expected an object with world_size and tables (ember plan --output writes one)", path);
    APP_CHECK(ctx, ws->valuedouble == world, EMBER_ERR_INVALID_ARG,
              "--plan '%s': world_size %g, but this run has %d ranks", path, ws->valuedouble, (int)world);
    const int32_t n = cJSON_GetArraySize(tables);
    APP_CHECK(ctx, n == ec->num_tables, EMBER_ERR_INVALID_ARG, "--plan '%s': %d tables, the model has %d", path,
              (int)n, (int)ec->num_tables);
    for (int32_t i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(tables, i), *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        APP_CHECK(ctx, cJSON_IsString(name), EMBER_ERR_INVALID_ARG, "--plan '%s': entry %d of tables has no name",
                  path, (int)i);
        int32_t t = 0;
        while (t < ec->num_tables && strcmp(ec->tables[t].name, name->valuestring) != 0) t++;
        APP_CHECK(ctx, t < ec->num_tables, EMBER_ERR_INVALID_ARG,
                  "--plan '%s': table '%s' is not a table of the model (%s to %s)", path, name->valuestring,
                  ec->tables[0].name, ec->tables[ec->num_tables - 1].name);
        for (int32_t j = 0; j < i; j++) {
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tables, j), "name");
            APP_CHECK(ctx, strcmp(other->valuestring, name->valuestring) != 0, EMBER_ERR_INVALID_ARG,
                      "--plan '%s': table '%s' is listed twice", path, name->valuestring);
        }
        APP_TRY(read_entry(ctx, path, e, name->valuestring, &ec->tables[t], world, &plan[t]));
    }
    return EMBER_OK;
}

ember_status planfile_read(ember_ctx *ctx, const char *path, const ember_ebc_config *ec, int32_t world,
                           ember_table_plan *plan) {
    char *text = slurp(ctx, path);
    if (!text) return ember_ctx_last_status(ctx);
    cJSON *root = cJSON_Parse(text);
    ember_status st;
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "--plan '%s': not valid JSON (at byte %ld)", path,
                                 at && at >= text ? (long)(at - text) : -1L);
    } else {
        for (int32_t t = 0; t < ec->num_tables; t++) plan[t] = (ember_table_plan){0};
        st = read_plan(ctx, path, root, ec, world, plan);
        if (st != EMBER_OK) ember_plan_release(ctx, plan, ec->num_tables);
    }
    cJSON_Delete(root);
    free(text);
    return st;
}
