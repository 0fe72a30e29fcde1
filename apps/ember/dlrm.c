// The DLRM model: assembly, forward and training step.
#include <math.h>
#include <string.h>

#include "appctx.h"
#include "cross.h"
#include "dlrm.h"
#include "ember/rng.h"
#include "interaction.h"
#include "loss.h"

#define DLRM_MAX_WIDTH 65536        // layer widths beyond this are a typo, not a model
#define DLRM_MAX_BATCH (1 << 24)    // local samples per step
#define DLRM_MAX_CROSS_LAYERS 64
enum { STREAM_BOTTOM = 101, STREAM_TOP = 102, STREAM_CROSS = 103 };

struct dlrm_model {
    ember_ctx *ctx;
    dlrm_backend *backend; // borrowed
    int32_t num_sparse, dim, max_batch, inter_width;
    int64_t num_params;
    dlrm_interaction kind;
    float *params;         // [num_params] the dense slab: bottom MLP, cross net (DCN), top MLP
    float *grads;          // [num_params] same layout
    mlp bottom, top;
    interaction ia;        // dot: the interaction's buffers (its T serves the backward)
    cross dcn;             // DCN: the cross net's
    const float *top_in;   // [B, inter_width] the top MLP's input in the last forward
    dense_optim optim;
    const float *dense_out; // [B, D] bottom output of the last forward (owned by `bottom`)
    float *emb;            // [max_batch, F*D] pooled embeddings
    float *inter;          // [max_batch, inter_width] dot: the interaction's output; DCN: dL/d[d, e]
    float *dlogit;         // [max_batch]
    float *dinter;         // [max_batch, inter_width]
    float *ddense;         // [max_batch, D]
    float *demb;           // [max_batch, F*D]
    int32_t *hot;          // [F] ids per bag of each feature
    int64_t *hot_at;       // [F] feature f's first id in a sample's data bag (the hot before it)
    int64_t *rows;         // [F] table rows (the multi-hot draws' range)
    multihot_dist hot_dist;
    int64_t total_hot;     // sum of hot: ids per sample
    bool one_hot;          // every hot is 1: lengths and offsets never change
    int32_t *lengths;      // [F*max_batch] hot[f] for every bag of feature f
    int64_t *offsets;      // [F*max_batch + 1]
    int64_t *values;       // [total_hot*max_batch] feature-major ids
    int32_t *next_lengths; // the next batch's (dlrm_train_step_overlap's prefetch): its size may differ
    int64_t *next_offsets;
    int64_t *next_values;
    ember_kjt kjt;         // the last forward's input
    // Deduplicated features (dlrm_config.dedup): the batch's distinct bags of each, the bag each
    // sample reads (the KJT's feature_batch_sizes and inverse_indices), for this batch and the next.
    uint32_t dedup;
    int32_t *fbs, *inverse, *next_fbs, *next_inverse; // [F], [F*max_batch]
    int32_t *rep;          // [F*max_batch] the first sample of each distinct bag
    int32_t *slots;        // [F*cap] open-addressing tables, one per feature (bag + 1; 0 empty)
    int32_t cap;           // a power of two >= 2 max_batch
    int64_t bags_all, bags_kept; // of the deduplicated features, over every batch so far
};

static ember_status check_sizes(ember_ctx *ctx, const char *flag, const int32_t *sizes, int32_t n) {
    APP_CHECK(ctx, n >= 1 && sizes, EMBER_ERR_INVALID_ARG, "%s: no layer sizes", flag);
    for (int32_t l = 0; l < n; l++) {
        APP_CHECK(ctx, sizes[l] >= 1 && sizes[l] <= DLRM_MAX_WIDTH, EMBER_ERR_INVALID_ARG,
                  "%s: layer %d has size %d, expected 1..%d", flag, (int)l + 1, (int)sizes[l], DLRM_MAX_WIDTH);
    }
    return EMBER_OK;
}

int64_t dlrm_interaction_width(const dlrm_config *c) {
    return c->interaction == DLRM_INTERACTION_DCN ? ((int64_t)c->num_sparse + 1) * c->embedding_dim
                                                  : interaction_out_dim(c->num_sparse, c->embedding_dim);
}

ember_status dlrm_validate(ember_ctx *ctx, const dlrm_config *c) {
    APP_CHECK(ctx, c->num_dense >= 1 && c->num_sparse >= 1, EMBER_ERR_INVALID_ARG,
              "dlrm: %d dense and %d sparse features", (int)c->num_dense, (int)c->num_sparse);
    APP_CHECK(ctx, c->embedding_dim >= 1 && c->embedding_dim <= DLRM_MAX_WIDTH, EMBER_ERR_INVALID_ARG,
              "--embedding_dim %d: expected 1..%d", (int)c->embedding_dim, DLRM_MAX_WIDTH);
    APP_CHECK(ctx, c->max_batch >= 1 && c->max_batch <= DLRM_MAX_BATCH, EMBER_ERR_INVALID_ARG,
              "local batch of %d samples: expected 1..%d per rank", (int)c->max_batch, DLRM_MAX_BATCH);
    APP_TRY(check_sizes(ctx, "--dense_arch_layer_sizes", c->bottom_sizes, c->num_bottom));
    APP_TRY(check_sizes(ctx, "--over_arch_layer_sizes", c->top_sizes, c->num_top));
    APP_CHECK(ctx, c->bottom_sizes[c->num_bottom - 1] == c->embedding_dim, EMBER_ERR_INVALID_ARG,
              "--dense_arch_layer_sizes ends with %d but --embedding_dim is %d: the dense vector meets the "
              "embeddings in the interaction as one more feature, so they must match",
              (int)c->bottom_sizes[c->num_bottom - 1], (int)c->embedding_dim);
    APP_CHECK(ctx, c->top_sizes[c->num_top - 1] == 1, EMBER_ERR_INVALID_ARG,
              "--over_arch_layer_sizes ends with %d: the last layer must be 1 (one logit)",
              (int)c->top_sizes[c->num_top - 1]);
    APP_CHECK(ctx, c->interaction == DLRM_INTERACTION_DOT || c->interaction == DLRM_INTERACTION_DCN,
              EMBER_ERR_INVALID_ARG, "--interaction: unknown kind %d", (int)c->interaction);
    if (c->interaction == DLRM_INTERACTION_DCN) {
        APP_CHECK(ctx, c->dcn_num_layers >= 1 && c->dcn_num_layers <= DLRM_MAX_CROSS_LAYERS, EMBER_ERR_INVALID_ARG,
                  "--dcn_num_layers %d: expected 1..%d", (int)c->dcn_num_layers, DLRM_MAX_CROSS_LAYERS);
        APP_CHECK(ctx, c->dcn_low_rank_dim >= 1 && c->dcn_low_rank_dim <= DLRM_MAX_WIDTH, EMBER_ERR_INVALID_ARG,
                  "--dcn_low_rank_dim %d: expected 1..%d", (int)c->dcn_low_rank_dim, DLRM_MAX_WIDTH);
    }
    for (int32_t f = 0; c->hot_sizes && f < c->num_sparse; f++) {
        APP_CHECK(ctx, c->hot_sizes[f] >= 1 && c->hot_sizes[f] <= MULTIHOT_MAX_HOT, EMBER_ERR_INVALID_ARG,
                  "--multi_hot_sizes: feature cat_%d has %d ids per sample, expected 1..%d", (int)f,
                  (int)c->hot_sizes[f], MULTIHOT_MAX_HOT);
        APP_CHECK(ctx, c->hot_sizes[f] == 1 || (c->rows && c->rows[f] >= 1), EMBER_ERR_INVALID_ARG,
                  "--multi_hot_sizes: feature cat_%d has no row count to draw its ids from", (int)f);
    }
    APP_CHECK(ctx, c->hot_dist == MULTIHOT_UNIFORM || c->hot_dist == MULTIHOT_PARETO, EMBER_ERR_INVALID_ARG,
              "--multi_hot_distribution_type: unknown kind %d", (int)c->hot_dist);
    int64_t inter = dlrm_interaction_width(c);
    APP_CHECK(ctx, inter <= 4 * DLRM_MAX_WIDTH, EMBER_ERR_INVALID_ARG,
              "%d features of dim %d give %lld interaction outputs, too many", (int)c->num_sparse,
              (int)c->embedding_dim, (long long)inter);
    return EMBER_OK;
}

void dlrm_destroy(dlrm_model *m) {
    if (!m) return;
    ember_ctx *ctx = m->ctx;
    mlp_destroy(ctx, &m->bottom);
    mlp_destroy(ctx, &m->top);
    interaction_destroy(&m->ia);
    cross_destroy(&m->dcn);
    dense_optim_destroy(ctx, &m->optim);
    void *bufs[] = {m->params, m->grads,   m->emb,     m->inter,        m->dlogit,       m->dinter,
                    m->ddense, m->demb,    m->hot,     m->hot_at,       m->rows,         m->lengths,      m->offsets,
                    m->values, m->next_lengths, m->next_offsets, m->next_values, m->fbs, m->inverse,
                    m->next_fbs, m->next_inverse, m->rep, m->slots};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember_ctx_free(ctx, bufs[i]);
    ember_ctx_free(ctx, m);
}

ember_status dlrm_create(ember_ctx *ctx, const dlrm_config *cfg, dlrm_backend *backend, dlrm_model **out) {
    *out = NULL;
    APP_TRY(dlrm_validate(ctx, cfg));
    dlrm_model *m = app_alloc(ctx, sizeof *m, "dlrm model");
    if (!m) return EMBER_ERR_NOMEM;
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->backend = backend;
    m->num_sparse = cfg->num_sparse;
    m->dim = cfg->embedding_dim;
    m->max_batch = cfg->max_batch;
    m->kind = cfg->interaction;
    m->inter_width = (int32_t)dlrm_interaction_width(cfg);
    const bool dcn = m->kind == DLRM_INTERACTION_DCN;
    const int64_t nb = mlp_num_params(cfg->num_dense, cfg->bottom_sizes, cfg->num_bottom);
    const int64_t nc = dcn ? cross_num_params(m->inter_width, cfg->dcn_num_layers, cfg->dcn_low_rank_dim) : 0;
    m->num_params = nb + nc + mlp_num_params(m->inter_width, cfg->top_sizes, cfg->num_top);

    const size_t B = (size_t)cfg->max_batch, FD = (size_t)cfg->num_sparse * (size_t)cfg->embedding_dim;
    const size_t F = (size_t)cfg->num_sparse, nbags = F * B, iw = (size_t)m->inter_width;
    int64_t hot_total = 0;
    for (size_t f = 0; f < F; f++) hot_total += cfg->hot_sizes ? cfg->hot_sizes[f] : 1;
    m->total_hot = hot_total;
    m->one_hot = hot_total == (int64_t)F;
    m->hot_dist = cfg->hot_dist;
    const size_t nids = (size_t)hot_total * B;
    ember_status st = EMBER_ERR_NOMEM;
    if (!(m->params = app_alloc(ctx, sizeof(float) * (size_t)m->num_params, "dense parameters")) ||
        !(m->grads = app_calloc(ctx, sizeof(float) * (size_t)m->num_params, "dense gradients")) ||
        !(m->emb = app_alloc(ctx, sizeof(float) * B * FD, "pooled embeddings")) ||
        !(m->inter = app_alloc(ctx, sizeof(float) * B * iw, "interaction output")) ||
        !(m->dlogit = app_alloc(ctx, sizeof(float) * B, "logit gradient")) ||
        !(m->dinter = app_alloc(ctx, sizeof(float) * B * iw, "interaction gradient")) ||
        !(m->ddense = app_alloc(ctx, sizeof(float) * B * (size_t)m->dim, "dense vector gradient")) ||
        !(m->demb = app_alloc(ctx, sizeof(float) * B * FD, "embedding gradient")) ||
        !(m->hot = app_alloc(ctx, sizeof(int32_t) * F, "multi-hot sizes")) ||
        !(m->hot_at = app_alloc(ctx, sizeof(int64_t) * F, "multi-hot offsets")) ||
        !(m->rows = app_calloc(ctx, sizeof(int64_t) * F, "table rows")) ||
        !(m->lengths = app_alloc(ctx, sizeof(int32_t) * nbags, "kjt lengths")) ||
        !(m->offsets = app_alloc(ctx, sizeof(int64_t) * (nbags + 1), "kjt offsets")) ||
        !(m->values = app_alloc(ctx, sizeof(int64_t) * nids, "kjt values")) ||
        !(m->next_lengths = app_alloc(ctx, sizeof(int32_t) * nbags, "next kjt lengths")) ||
        !(m->next_offsets = app_alloc(ctx, sizeof(int64_t) * (nbags + 1), "next kjt offsets")) ||
        !(m->next_values = app_alloc(ctx, sizeof(int64_t) * nids, "next kjt values"))) {
        goto fail;
    }
    m->dedup = cfg->dedup;
    for (m->cap = 2; m->dedup && (size_t)m->cap < 2 * B; m->cap *= 2) {}
    if (m->dedup && (!(m->fbs = app_alloc(ctx, sizeof(int32_t) * F, "kjt batch sizes")) ||
                     !(m->next_fbs = app_alloc(ctx, sizeof(int32_t) * F, "next kjt batch sizes")) ||
                     !(m->inverse = app_alloc(ctx, sizeof(int32_t) * nbags, "kjt inverse indices")) ||
                     !(m->next_inverse = app_alloc(ctx, sizeof(int32_t) * nbags, "next kjt inverse indices")) ||
                     !(m->rep = app_alloc(ctx, sizeof(int32_t) * nbags, "distinct bags")) ||
                     !(m->slots = app_alloc(ctx, sizeof(int32_t) * F * (size_t)m->cap, "dedup tables")))) {
        goto fail;
    }
    if ((st = mlp_create(ctx, cfg->num_dense, cfg->bottom_sizes, cfg->num_bottom, true, cfg->max_batch, m->params,
                         m->grads, &m->bottom)) != EMBER_OK ||
        (st = mlp_create(ctx, m->inter_width, cfg->top_sizes, cfg->num_top, false, cfg->max_batch,
                         m->params + nb + nc, m->grads + nb + nc, &m->top)) != EMBER_OK ||
        (!dcn && (st = interaction_create(ctx, cfg->num_sparse, cfg->embedding_dim, cfg->max_batch, &m->ia)) !=
                     EMBER_OK) ||
        (dcn && (st = cross_create(ctx, m->inter_width, cfg->dcn_num_layers, cfg->dcn_low_rank_dim, cfg->max_batch,
                                   m->params + nb, m->grads + nb, &m->dcn)) != EMBER_OK) ||
        (st = dense_optim_create(ctx, &cfg->optim, m->num_params, &m->optim)) != EMBER_OK) {
        goto fail;
    }
    mlp_init_params(&m->bottom, cfg->seed, STREAM_BOTTOM);
    mlp_init_params(&m->top, cfg->seed, STREAM_TOP);
    if (dcn) cross_init_params(&m->dcn, cfg->seed, STREAM_CROSS);
    for (size_t f = 0; f < F; f++) {
        m->hot[f] = cfg->hot_sizes ? cfg->hot_sizes[f] : 1;
        m->hot_at[f] = f ? m->hot_at[f - 1] + m->hot[f - 1] : 0;
        if (cfg->rows) m->rows[f] = cfg->rows[f];
    }
    // One id per feature: the bag structure never changes (batch_kjt fills it per batch otherwise).
    for (size_t i = 0; m->one_hot && i < nbags; i++) m->lengths[i] = m->next_lengths[i] = 1;
    for (size_t i = 0; m->one_hot && i <= nbags; i++) m->offsets[i] = m->next_offsets[i] = (int64_t)i;
    *out = m;
    return EMBER_OK;
fail:
    dlrm_destroy(m);
    return st;
}

int64_t dlrm_num_dense_params(const dlrm_model *m) { return m->num_params; }
float *dlrm_dense_params(dlrm_model *m) { return m->params; }
const float *dlrm_dense_grads(const dlrm_model *m) { return m->grads; }
dense_optim *dlrm_dense_optim(dlrm_model *m) { return &m->optim; }

void dlrm_dedup_counts(const dlrm_model *m, int64_t *bags_all, int64_t *bags_kept) {
    *bags_all = m->bags_all;
    *bags_kept = m->bags_kept;
}

// Sample i's ids of feature f in the data's bags (MLPerf's archives: has_bags).
static const int64_t *data_bag(const dlrm_model *m, const dlrm_batch *b, int32_t i, int32_t f) {
    return b->bags + (size_t)i * (size_t)b->bag_width + m->hot_at[f];
}

static int64_t sample_id(const dlrm_model *m, const dlrm_batch *b, int32_t i, int32_t f) {
    return b->ids[(size_t)i * (size_t)m->num_sparse + (size_t)f];
}

// Sample i's bag of feature f into out: the data's, or drawn from its id (multihot.h).
static void sample_bag(const dlrm_model *m, const dlrm_batch *b, int32_t i, int32_t f, int64_t *out) {
    if (b->has_bags) memcpy(out, data_bag(m, b, i, f), sizeof(int64_t) * (size_t)m->hot[f]);
    else multihot_bag(m->hot_dist, f, m->rows[f], sample_id(m, b, i, f), m->hot[f], out);
}

// Whether samples i and j have the same bag of feature f. Drawn bags are functions of the
// sample's id; the data's are compared id by id.
static bool same_bag(const dlrm_model *m, const dlrm_batch *b, int32_t f, int32_t i, int32_t j) {
    if (!b->has_bags) return sample_id(m, b, i, f) == sample_id(m, b, j, f);
    return !memcmp(data_bag(m, b, i, f), data_bag(m, b, j, f), sizeof(int64_t) * (size_t)m->hot[f]);
}

static uint64_t bag_hash(const dlrm_model *m, const dlrm_batch *b, int32_t f, int32_t i) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    if (!b->has_bags) return ember_splitmix64(h ^ (uint64_t)sample_id(m, b, i, f));
    const int64_t *x = data_bag(m, b, i, f);
    for (int32_t k = 0; k < m->hot[f]; k++) h = ember_splitmix64(h ^ (uint64_t)x[k]);
    return h;
}

// The KJT of batch b with deduplicated features: feature f's bags are its distinct bags in the
// order first seen (every sample's own for the others), fbs[f] of them; sample i reads bag
// inverse[f*B + i]. lengths and offsets as batch_kjt's.
static ember_kjt dedup_kjt(dlrm_model *m, const dlrm_batch *b, int64_t *values, int32_t *lengths, int64_t *offsets,
                           int32_t *fbs, int32_t *inverse) {
    const int32_t B = b->size, F = m->num_sparse;
    APP_ASSERT(!b->has_bags || b->bag_width == m->total_hot);
    // Distinct bags per feature, each in its own open-addressing table (features run in parallel).
#pragma omp parallel for schedule(dynamic, 1)
    for (int32_t f = 0; f < F; f++) {
        int32_t *inv = inverse + (size_t)f * (size_t)B, *rep = m->rep + (size_t)f * (size_t)B;
        if (!((m->dedup >> f) & 1)) {
            for (int32_t i = 0; i < B; i++) inv[i] = rep[i] = i;
            fbs[f] = B;
            continue;
        }
        int32_t *slot = m->slots + (size_t)f * (size_t)m->cap, n = 0;
        const uint32_t mask = (uint32_t)m->cap - 1;
        memset(slot, 0, sizeof(int32_t) * (size_t)m->cap);
        for (int32_t i = 0; i < B; i++) {
            uint32_t h = (uint32_t)bag_hash(m, b, f, i) & mask;
            while (slot[h] && !same_bag(m, b, f, rep[slot[h] - 1], i)) h = (h + 1) & mask;
            if (!slot[h]) {
                rep[n] = i;
                slot[h] = ++n;
            }
            inv[i] = slot[h] - 1;
        }
        fbs[f] = n;
    }
    // Bags feature after feature; each one's ids (in parallel over a feature's bags).
    int64_t bag = 0, at = 0;
    for (int32_t f = 0; f < F; f++) {
        for (int32_t k = 0; k < fbs[f]; k++, bag++) {
            lengths[bag] = m->hot[f];
            offsets[bag] = at + (int64_t)k * m->hot[f];
        }
        const int32_t *rep = m->rep + (size_t)f * (size_t)B;
#pragma omp parallel for schedule(static)
        for (int32_t k = 0; k < fbs[f]; k++) sample_bag(m, b, rep[k], f, values + at + (int64_t)k * m->hot[f]);
        at += (int64_t)fbs[f] * m->hot[f];
    }
    offsets[bag] = at;
    return (ember_kjt){.num_features = F, .batch_size = B, .lengths = lengths, .offsets = offsets, .values = values,
                       .nnz = at, .feature_batch_sizes = fbs, .inverse_indices = inverse};
}

// The KJT of batch b in `values` (lengths, offsets): feature-major, bag (f, i) is number f*B + i,
// holding sample i's id of feature f, or its multi-hot bag of hot[f] ids (multihot.h).
static ember_kjt batch_kjt(const dlrm_model *m, const dlrm_batch *b, int64_t *values, int32_t *lengths,
                           int64_t *offsets) {
    const int32_t B = b->size, F = m->num_sparse;
    if (m->one_hot) {
#pragma omp parallel for schedule(static)
        for (int32_t i = 0; i < B; i++) {
            const int64_t *ids = b->ids + (size_t)i * (size_t)F;
            for (int32_t f = 0; f < F; f++) values[(size_t)f * (size_t)B + (size_t)i] = ids[f];
        }
    } else {
        int64_t at = 0;
        for (int32_t f = 0; f < F; f++) {
            for (int32_t i = 0; i < B; i++) {
                lengths[(size_t)f * (size_t)B + (size_t)i] = m->hot[f];
                offsets[(size_t)f * (size_t)B + (size_t)i] = at + (int64_t)i * m->hot[f];
            }
            at += (int64_t)B * m->hot[f];
        }
        offsets[(size_t)F * (size_t)B] = at;
        APP_ASSERT(!b->has_bags || b->bag_width == m->total_hot);
#pragma omp parallel for schedule(static)
        for (int32_t i = 0; i < B; i++)
            for (int32_t f = 0; f < F; f++) sample_bag(m, b, i, f, values + offsets[(size_t)f * (size_t)B + (size_t)i]);
    }
    return (ember_kjt){.num_features = F, .batch_size = B, .lengths = lengths, .offsets = offsets,
                       .values = values, .weights = NULL, .nnz = m->total_hot * B};
}

static void progress(dlrm_model *m, bool overlap) {
    if (overlap && m->backend->progress) m->backend->progress(m->backend->impl);
}

// The interaction of the bottom output and the pooled embeddings -> top_in [B, inter_width].
static ember_status interact(dlrm_model *m, int32_t B) {
    if (m->kind == DLRM_INTERACTION_DOT) {
        m->top_in = m->inter;
        return interaction_forward(&m->ia, B, m->dense_out, m->emb, m->inter);
    }
    // DCN: per sample [d, e] (TorchRec's InteractionDCNArch) into the cross net's input, then the net.
    const size_t D = (size_t)m->dim, FD = (size_t)m->num_sparse * D, N = FD + D;
    float *x0 = cross_input(&m->dcn);
#pragma omp parallel for schedule(static) if (B >= 256)
    for (int32_t b = 0; b < B; b++) {
        memcpy(x0 + (size_t)b * N, m->dense_out + (size_t)b * D, sizeof(float) * D);
        memcpy(x0 + (size_t)b * N + D, m->emb + (size_t)b * FD, sizeof(float) * FD);
    }
    return cross_forward(&m->dcn, B, &m->top_in);
}

// The interaction's backward: dinter -> ddense, demb. DCN's dL/d[d, e] goes through `inter`
// (unused by DCN's forward).
static ember_status interact_backward(dlrm_model *m, int32_t B) {
    if (m->kind == DLRM_INTERACTION_DOT) return interaction_backward(&m->ia, B, m->dinter, m->ddense, m->demb);
    APP_TRY(cross_backward(&m->dcn, B, m->dinter, m->inter));
    const size_t D = (size_t)m->dim, FD = (size_t)m->num_sparse * D, N = FD + D;
#pragma omp parallel for schedule(static) if (B >= 256)
    for (int32_t b = 0; b < B; b++) {
        memcpy(m->ddense + (size_t)b * D, m->inter + (size_t)b * N, sizeof(float) * D);
        memcpy(m->demb + (size_t)b * FD, m->inter + (size_t)b * N + D, sizeof(float) * FD);
    }
    return EMBER_OK;
}

// The forward; with `overlap`, the prefetch of `next` (if any) right after the embeddings'.
static ember_status forward(dlrm_model *m, const dlrm_batch *b, const dlrm_batch *next, bool overlap,
                            const float **logits) {
    const int32_t B = b->size, F = m->num_sparse;
    APP_ASSERT(B >= 0 && B <= m->max_batch && b->num_sparse == F);
    if (m->dedup) {
        m->kjt = dedup_kjt(m, b, m->values, m->lengths, m->offsets, m->fbs, m->inverse);
        for (int32_t f = 0; f < F; f++)
            if ((m->dedup >> f) & 1) {
                m->bags_all += B;
                m->bags_kept += m->fbs[f];
            }
    } else {
        m->kjt = batch_kjt(m, b, m->values, m->lengths, m->offsets);
    }
    APP_TRY(mlp_forward(&m->bottom, b->dense, B, &m->dense_out));
    APP_TRY(m->backend->forward(m->backend->impl, &m->kjt, m->emb));
    if (overlap && next && m->backend->prefetch) {
        APP_ASSERT(next->size >= 0 && next->size <= m->max_batch && next->num_sparse == F);
        const ember_kjt nk = m->dedup ? dedup_kjt(m, next, m->next_values, m->next_lengths, m->next_offsets,
                                                  m->next_fbs, m->next_inverse)
                                      : batch_kjt(m, next, m->next_values, m->next_lengths, m->next_offsets);
        APP_TRY(m->backend->prefetch(m->backend->impl, &nk));
    }
    APP_TRY(interact(m, B));
    progress(m, overlap);
    APP_TRY(mlp_forward(&m->top, m->top_in, B, logits));
    return EMBER_OK;
}

ember_status dlrm_forward(dlrm_model *m, const dlrm_batch *b, const float **logits) {
    return forward(m, b, NULL, false, logits);
}

static ember_status train_step(dlrm_model *m, const dlrm_batch *b, const dlrm_batch *next, bool overlap,
                               float loss_scale, double *loss_sum) {
    const int32_t B = b->size;
    const float *logits;
    overlap = overlap && m->backend->backward_start && m->backend->backward_finish;
    APP_TRY(forward(m, b, next, overlap, &logits));
    *loss_sum = bce_with_logits(B, logits, b->labels, loss_scale, m->dlogit);
    APP_TRY(mlp_backward(&m->top, m->top_in, B, m->dlogit, m->dinter));
    progress(m, overlap);
    APP_TRY(interact_backward(m, B));
    // The embedding gradient is known: its exchange travels during the bottom MLP's backward,
    // the dense allreduce and the dense optimizer step.
    if (overlap) APP_TRY(m->backend->backward_start(m->backend->impl, &m->kjt, m->demb));
    APP_TRY(mlp_backward(&m->bottom, b->dense, B, m->ddense, NULL));
    progress(m, overlap);
    APP_TRY(m->backend->reduce_dense_grads(m->backend->impl, m->grads, (size_t)m->num_params));
    // The reduced gradient is the same on every rank, so every rank takes this exit together.
    // The first non-finite element, whatever the thread count: the smallest index.
    const int64_t n = m->num_params;
    int64_t bad = n;
#pragma omp parallel for schedule(static) reduction(min : bad)
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(m->grads[i]) && i < bad) bad = i;
    }
    APP_CHECK(m->ctx, bad == n, EMBER_ERR_NUMERIC,
              "training diverged: dense gradient %lld is %g after step %lld (lower --learning_rate?)",
              (long long)bad, bad < n ? (double)m->grads[bad] : 0.0, (long long)m->optim.step);
    dense_optim_step(&m->optim, m->params, m->grads);
    if (overlap) return m->backend->backward_finish(m->backend->impl);
    return m->backend->backward(m->backend->impl, &m->kjt, m->demb);
}

ember_status dlrm_train_step(dlrm_model *m, const dlrm_batch *b, float loss_scale, double *loss_sum) {
    return train_step(m, b, NULL, false, loss_scale, loss_sum);
}

ember_status dlrm_train_step_overlap(dlrm_model *m, const dlrm_batch *b, const dlrm_batch *next, float loss_scale,
                                     double *loss_sum) {
    return train_step(m, b, next, true, loss_scale, loss_sum);
}
