// The DLRM backend on a serving bundle's quantized tables (include/ember/quant.h): `ember eval
// --load BUNDLE`. Forward only: every rank loads the whole bundle (serving replicates the tables)
// and pools its local batch on its own; no collective, no backward, no save.
#include <string.h>

#include "appctx.h"
#include "backend.h"
#include "ember/quant.h"

typedef struct quant_backend {
    ember_comm *comm; // borrowed
    ember_qebc *q;
    int32_t T, F;
    char names[64][64];  // the model's tables, as the bundle must hold them
    int32_t dims[64];
    int32_t feature_table[64];
} quant_backend;

static ember_status forward(void *impl, const ember_kjt *kjt, float *out) {
    return ember_qebc_forward(((quant_backend *)impl)->q, kjt, out);
}

// Loads the bundle on every rank and checks that it holds the model's tables (names, dims, and
// the features reading them) in fp32 output. Collective: every rank returns the same status.
static ember_status load(void *impl, const char *dir) {
    quant_backend *b = impl;
    ember_ctx *ctx = ember_comm_ctx(b->comm);
    ember_qebc_destroy(b->q);
    b->q = NULL;
    ember_status st = ember_qebc_load(ctx, dir, &b->q);
    if (st == EMBER_OK && (ember_qebc_num_tables(b->q) != b->T || ember_qebc_num_features(b->q) != b->F))
        st = ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "--load '%s': the bundle has %d tables and %d features, the "
                                 "model %d and %d", dir, (int)ember_qebc_num_tables(b->q),
                                 (int)ember_qebc_num_features(b->q), (int)b->T, (int)b->F);
    for (int32_t t = 0; t < b->T && st == EMBER_OK; t++) {
        const ember_qtable_config *c = ember_qebc_table(b->q, t);
        if (strcmp(c->name, b->names[t]) != 0 || c->dim != b->dims[t])
            st = ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "--load '%s': table %d is '%s' of dim %d in the bundle, "
                                     "'%s' of dim %d in the model", dir, (int)t, c->name, (int)c->dim, b->names[t],
                                     (int)b->dims[t]);
    }
    return ember_comm_agree(b->comm, st);
}

static void destroy(void *impl) {
    quant_backend *b = impl;
    if (!b) return;
    ember_qebc_destroy(b->q);
    ember_ctx_free(ember_comm_ctx(b->comm), b);
}

ember_status dlrm_backend_quant_create(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                                       ember_grad_convention conv, int32_t group_size, dlrm_backend *out) {
    (void)plan, (void)conv, (void)group_size;
    memset(out, 0, sizeof *out);
    ember_ctx *ctx = ember_comm_ctx(comm);
    quant_backend *b = NULL;
    ember_status st = EMBER_OK;
    if (cfg->num_tables > 64 || cfg->num_features > 64)
        st = ember_ctx_set_error(ctx, EMBER_ERR_UNSUPPORTED, "a bundle's model has at most 64 tables");
    else if (!(b = app_calloc(ctx, sizeof *b, "embedding backend")))
        st = EMBER_ERR_NOMEM;
    st = ember_comm_agree(comm, st);
    if (st != EMBER_OK) {
        ember_ctx_free(ctx, b);
        return st;
    }
    b->comm = comm;
    b->T = cfg->num_tables;
    b->F = cfg->num_features;
    for (int32_t t = 0; t < b->T; t++) {
        snprintf(b->names[t], sizeof b->names[t], "%s", cfg->tables[t].name);
        b->dims[t] = cfg->tables[t].dim;
    }
    out->impl = b;
    out->forward = forward;
    out->load = load;
    out->destroy = destroy;
    return EMBER_OK;
}
