// `ember export` (run.h): the restored model's tables quantized (and pruned) into a serving
// bundle (include/ember/quant.h) with the trainer's configuration and dense parameters.
//
// Every table is read whole onto rank 0 (ember_sebc_read_as through the backend), one after the
// other, and rank 0 keeps them all until the collection, sized by their kept rows, is filled: its
// peak is the fp32 tables plus their quantized copies. Pruning (--prune_below X) drops the
// rows whose L2 norm is below X: the table keeps its id space and an array remap sends each kept
// id to its compacted row. A hashed table always gets a hash remap from its id map (rows no id
// holds are dropped).
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <string.h>

#include "appctx.h"
#include "ember/quant.h"
#include "run.h"

#define EXPORT_JSON "export.json"

// Table t's storage type under the spec "TYPE[,TABLE=TYPE...]"; the spec was checked.
static ember_qtype spec_type(const char *spec, const char *table) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec);
    ember_qtype t = EMBER_QTYPE_INT8;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) ember_qtype_parse(tok, &t);
        else if ((*eq = '\0', strcmp(tok, table) == 0)) ember_qtype_parse(eq + 1, &t);
    }
    return t;
}

// Checks the spec against the model's tables: a default type first, then TABLE=TYPE pairs naming
// tables that exist. Local.
static ember_status check_spec(run *R, const char *spec) {
    APP_CHECK(R->ctx, spec && strlen(spec) < 1024, EMBER_ERR_INVALID_ARG,
              "--quantize: expected TYPE[,TABLE=TYPE...] (types fp32, fp16, int8, int4, int2)");
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    int first = 1;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), first = 0) {
        char *eq = strchr(tok, '=');
        ember_qtype t;
        if (eq) *eq = '\0';
        const char *type = eq ? eq + 1 : tok;
        APP_CHECK(R->ctx, ember_qtype_parse(type, &t) == EMBER_OK, EMBER_ERR_INVALID_ARG,
                  "--quantize '%s': unknown type '%s' (fp32, fp16, int8, int4, int2)", spec, type);
        APP_CHECK(R->ctx, first == !eq, EMBER_ERR_INVALID_ARG,
                  "--quantize '%s': '%s%s%s': the default type comes first, then TABLE=TYPE pairs", spec, tok,
                  eq ? "=" : "", eq ? type : "");
        if (!eq) continue;
        int32_t k = 0;
        while (k < DLRM_NUM_SPARSE && strcmp(R->tables[k].name, tok) != 0) k++;
        APP_CHECK(R->ctx, k < DLRM_NUM_SPARSE, EMBER_ERR_INVALID_ARG,
                  "--quantize '%s': the model has no table '%s' (its tables are %s .. %s)", spec, tok, R->tables[0].name,
                  R->tables[DLRM_NUM_SPARSE - 1].name);
    }
    APP_CHECK(R->ctx, !first, EMBER_ERR_INVALID_ARG, "--quantize '%s': no type", spec);
    return EMBER_OK;
}

// What one table became, for the report and export.json.
typedef struct exported {
    ember_qtype qtype;
    int64_t rows, kept;
    double fp32_bytes, bytes;
} exported;

// Rank 0: table t's fp32 weights w [rows][dim] (and a hashed table's id map ids [rows][3]) into
// table t of the bundle collection q, built with `kept` stored rows: kept_of[r] is row r's stored
// row or -1.
static ember_status fill_table(run *R, ember_qebc *q, int32_t t, const float *w, const int64_t *ids,
                               const int64_t *kept_of, int64_t kept) {
    const ember_table_config *c = &R->tables[t];
    const int32_t D = c->dim;
    const bool hashed = ids != NULL, pruned = kept < c->rows;
    int64_t *kid = app_alloc(R->ctx, sizeof(int64_t) * (size_t)(kept > 0 ? kept : 1), "export ids");
    int64_t *krow = app_alloc(R->ctx, sizeof(int64_t) * (size_t)(kept > 0 ? kept : 1), "export rows");
    ember_status st = kid && krow ? EMBER_OK : EMBER_ERR_NOMEM;
    int64_t n = 0;
    for (int64_t r = 0; r < c->rows && st == EMBER_OK; r++) {
        if (kept_of[r] < 0) continue;
        st = ember_qebc_quantize_rows(q, t, kept_of[r], kept_of[r] + 1, w + (size_t)r * (size_t)D);
        kid[n] = hashed ? ids[3 * r] : r;
        krow[n++] = kept_of[r];
    }
    if (st == EMBER_OK && (hashed || pruned))
        st = ember_qebc_set_remap(q, t, hashed ? EMBER_QREMAP_HASH : EMBER_QREMAP_ARRAY, n, kid, krow);
    ember_ctx_free(R->ctx, kid);
    ember_ctx_free(R->ctx, krow);
    return st;
}

// Writes export.json's text: where the bundle came from and what each table became.
static char *export_json(run *R, const exported *ex) {
    const export_options *x = R->export_to;
    size_t cap = 4096 + 160 * DLRM_NUM_SPARSE, n = 0;
    char *s = app_alloc(R->ctx, cap, EXPORT_JSON);
    if (!s) return NULL;
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"format\": \"ember-export/1\", \"source\": \"%s\", \"step\": %lld, \"quantize\": \"%s\", "
                          "\"prune_below\": %.17g, \"tables\": [",
                          R->ckpt_path, (long long)R->ckpt.pos.steps, x->quantize, x->prune_below);
    for (int32_t t = 0; t < DLRM_NUM_SPARSE && n < cap; t++)
        n += (size_t)snprintf(s + n, cap - n, "%s{\"name\": \"%s\", \"qtype\": \"%s\", \"rows\": %lld, \"kept\": %lld}",
                              t ? ", " : "", R->tables[t].name, ember_qtype_name(ex[t].qtype), (long long)ex[t].rows,
                              (long long)ex[t].kept);
    if (n < cap) snprintf(s + n, cap - n, "]}\n");
    return s;
}

ember_status run_export(run *R) {
    const export_options *x = R->export_to;
    const double t0 = app_now_s();
    APP_TRY(ember_comm_agree(R->comm, check_spec(R, x->quantize)));
    APP_CHECK(R->ctx, x->prune_below >= 0.0, EMBER_ERR_INVALID_ARG, "--prune_below %g: must be >= 0", x->prune_below);
    exported ex[DLRM_NUM_SPARSE];
    memset(ex, 0, sizeof ex);
    // The collection's tables: their types, and after each table is read, its kept rows.
    ember_qtable_config qc[DLRM_NUM_SPARSE];
    float *w = NULL;
    int64_t *ids = NULL, *kept_of = NULL;
    ember_qebc *q = NULL;
    ember_status st = EMBER_OK;
    // Pass 1 (every rank): read each table; rank 0 keeps its kept-row map and the rows it needs.
    float *tables[DLRM_NUM_SPARSE] = {0};
    int64_t *maps[DLRM_NUM_SPARSE] = {0}, *idmaps[DLRM_NUM_SPARSE] = {0};
    for (int32_t t = 0; t < DLRM_NUM_SPARSE && st == EMBER_OK; t++) {
        const ember_table_config *c = &R->tables[t];
        const bool hashed = ember_table_id_space(c) == EMBER_IDS_HASHED;
        const size_t len = (size_t)c->rows * (size_t)c->dim;
        w = app_alloc(R->ctx, sizeof(float) * len, "export table");
        ids = hashed ? app_alloc(R->ctx, sizeof(int64_t) * 3 * (size_t)c->rows, "export id map") : NULL;
        kept_of = app_alloc(R->ctx, sizeof(int64_t) * (size_t)c->rows, "export rows");
        st = ember_comm_agree(R->comm, w && kept_of && (ids || !hashed) ? EMBER_OK : EMBER_ERR_NOMEM);
        if (st == EMBER_OK) st = R->backend.read(R->backend.impl, t, "weight", EMBER_DTYPE_F32, w);
        if (st == EMBER_OK && hashed) st = R->backend.read(R->backend.impl, t, "ids", EMBER_DTYPE_I64, ids);
        if (st == EMBER_OK && R->rank == 0) {
            int64_t kept = 0;
            for (int64_t r = 0; r < c->rows; r++) {
                double sq = 0.0;
                for (int32_t d = 0; d < c->dim; d++) sq += (double)w[(size_t)r * c->dim + d] * w[(size_t)r * c->dim + d];
                const bool keep = (!hashed || ids[3 * r + 2] > 0) && !(sqrt(sq) < x->prune_below);
                kept_of[r] = keep ? kept++ : -1;
            }
            ex[t] = (exported){.qtype = spec_type(x->quantize, c->name), .rows = c->rows, .kept = kept,
                               .fp32_bytes = 4.0 * (double)len};
            qc[t] = (ember_qtable_config)EMBER_QTABLE_CONFIG_DEFAULT;
            qc[t].name = c->name, qc[t].dim = c->dim, qc[t].qtype = ex[t].qtype, qc[t].pooling = c->pooling;
            qc[t].rows = kept > 0 ? kept : 1; // a table keeps one (zero) row when every id is pruned
            qc[t].num_embeddings = c->rows;
            ex[t].bytes = (double)ember_qtype_row_bytes(qc[t].qtype, c->dim) * (double)qc[t].rows;
        }
        if (R->rank == 0 && st == EMBER_OK) {
            tables[t] = w, maps[t] = kept_of, idmaps[t] = ids;
            w = NULL, kept_of = ids = NULL;
        }
        ember_ctx_free(R->ctx, w);
        ember_ctx_free(R->ctx, ids);
        ember_ctx_free(R->ctx, kept_of);
        w = NULL, ids = kept_of = NULL;
    }
    // Rank 0: the collection, its rows and remaps, and the bundle.
    char *json = NULL, *info = NULL;
    void *scratch = NULL;
    if (st == EMBER_OK && R->rank == 0) {
        ember_qebc_config cfg = EMBER_QEBC_CONFIG_DEFAULT;
        cfg.tables = qc, cfg.num_tables = DLRM_NUM_SPARSE, cfg.features = R->features;
        cfg.num_features = DLRM_NUM_SPARSE;
        st = ember_qebc_create(R->ctx, &cfg, &q);
        for (int32_t t = 0; t < DLRM_NUM_SPARSE && st == EMBER_OK; t++)
            st = fill_table(R, q, t, tables[t], idmaps[t], maps[t], ex[t].kept);
        ember_checkpoint_blob blobs[5];
        int32_t nd = 0;
        if (st == EMBER_OK) st = trainstate_encode(R->ctx, &R->ckpt, &json);
        if (st == EMBER_OK) st = trainstate_dense_blobs(R->ctx, R->model, blobs + 2, &nd, &scratch);
        if (st == EMBER_OK && !(info = export_json(R, ex))) st = EMBER_ERR_NOMEM;
        if (st == EMBER_OK) {
            blobs[0] = (ember_checkpoint_blob){.name = TRAINSTATE_BLOB, .data = json, .bytes = strlen(json)};
            blobs[1] = (ember_checkpoint_blob){.name = EXPORT_JSON, .data = info, .bytes = strlen(info)};
            // dense.params alone: a served model has no optimizer state.
            st = ember_qebc_save(q, x->output, blobs, 3);
        }
    }
    for (int32_t t = 0; t < DLRM_NUM_SPARSE; t++) {
        ember_ctx_free(R->ctx, tables[t]);
        ember_ctx_free(R->ctx, maps[t]);
        ember_ctx_free(R->ctx, idmaps[t]);
    }
    ember_qebc_destroy(q);
    trainstate_text_free(json);
    ember_ctx_free(R->ctx, info);
    ember_ctx_free(R->ctx, scratch);
    APP_TRY(ember_comm_agree(R->comm, st));
    if (R->rank == 0 && R->rep.out) {
        double fp32 = 0, bytes = 0;
        int64_t rows = 0, kept = 0;
        FILE *o = R->rep.out;
        fprintf(o, "export: %s (step %lld) -> %s\n", R->ckpt_path, (long long)R->ckpt.pos.steps, x->output);
        fprintf(o, "  %-12s %-5s %12s %12s %12s %12s\n", "table", "type", "rows", "kept", "fp32 bytes", "bytes");
        for (int32_t t = 0; t < DLRM_NUM_SPARSE; t++) {
            fprintf(o, "  %-12s %-5s %12lld %12lld %12.0f %12.0f\n", R->tables[t].name, ember_qtype_name(ex[t].qtype),
                    (long long)ex[t].rows, (long long)ex[t].kept, ex[t].fp32_bytes, ex[t].bytes);
            fp32 += ex[t].fp32_bytes, bytes += ex[t].bytes, rows += ex[t].rows, kept += ex[t].kept;
        }
        fprintf(o, "done: %d tables, %lld of %lld rows kept, %.1f MB of fp32 tables in %.1f MB (%.2fx smaller), "
                   "in %.1f s\n",
                DLRM_NUM_SPARSE, (long long)kept, (long long)rows, fp32 / 1e6, bytes / 1e6, bytes > 0 ? fp32 / bytes : 0.0,
                app_now_s() - t0);
        fflush(o);
    }
    return EMBER_OK;
}
