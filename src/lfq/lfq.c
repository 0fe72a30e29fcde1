// LFQ module: configuration, parameters, workspace, validation and collective agreement. The
// maths lives in kernels_impl.h (instantiated for float and double by kernels.c).
#include <math.h>
#include <string.h>

#include "lfq/internal.h"

#define LFQ_MAX_BITS 24

static const ember__lfq_kernels *kernels(const ember_lfq *q) {
    return q->cfg.dtype == EMBER_DTYPE_F64 ? &ember__lfq_kernels_f64 : &ember__lfq_kernels_f32;
}

static const char *const param_names[EMBER_LFQ_NUM_PARAMS] = {
    "project_in.weight", "project_in.bias", "project_out.weight", "project_out.bias",
};

EMBER__ENUM_NAMES(ember_lfq_projection, ember_lfq_projection, "auto", "none", "linear")
EMBER__ENUM_NAMES(ember_lfq_dist_mean, ember_lfq_dist_mean, "ranks", "tokens")
_Static_assert(ember_lfq_projection_count_ == EMBER_LFQ_PROJ_COUNT, "a name for every projection");
_Static_assert(ember_lfq_dist_mean_count_ == EMBER_LFQ_MEAN_COUNT, "a name for every dist_mean");

const char *ember_lfq_param_name(ember_lfq_param_id id) {
    return id >= 0 && id < EMBER_LFQ_NUM_PARAMS ? param_names[id] : NULL;
}

// A real setting: finite and satisfying `ok` (described by `rule`), or an error naming it.
static ember_status check_real(ember_ctx *ctx, const char *name, double v, bool ok, const char *rule) {
    EMBER_CHECK(ctx, isfinite(v) && ok, EMBER_ERR_INVALID_ARG, "ember_lfq_create: %s = %g must be finite%s", name, v,
                rule);
    return EMBER_OK;
}

// Fills the defaults, derives dim / codebook_size / projections as upstream's constructor does,
// and checks every field. *bits receives D = log2(K).
static ember_status resolve_config(ember_ctx *ctx, ember_lfq_config *c, int32_t *bits) {
    EMBER_CHECK(ctx, c->dtype == EMBER_DTYPE_F32 || c->dtype == EMBER_DTYPE_F64, EMBER_ERR_INVALID_ARG,
                "ember_lfq_create: unknown dtype %d", (int)c->dtype);
    EMBER_CHECK(ctx, c->projection >= 0 && c->projection < EMBER_LFQ_PROJ_COUNT,
                EMBER_ERR_INVALID_ARG, "ember_lfq_create: unknown projection %d", (int)c->projection);
    EMBER_CHECK(ctx, c->dist_mean >= 0 && c->dist_mean < EMBER_LFQ_MEAN_COUNT,
                EMBER_ERR_INVALID_ARG, "ember_lfq_create: unknown dist_mean %d", (int)c->dist_mean);
    EMBER_CHECK(ctx, c->dim >= 0 && c->codebook_size >= 0 && c->num_codebooks >= 0 && c->max_tokens >= 0,
                EMBER_ERR_INVALID_ARG,
                "ember_lfq_create: negative size (dim %d, codebook_size %d, num_codebooks %d, max_tokens %lld)",
                (int)c->dim, (int)c->codebook_size, (int)c->num_codebooks, (long long)c->max_tokens);
    EMBER_CHECK(ctx, c->dim > 0 || c->codebook_size > 0, EMBER_ERR_INVALID_ARG,
                "ember_lfq_create: either dim or codebook_size must be given");
    if (c->codebook_size == 0) {
        EMBER_CHECK(ctx, c->dim <= LFQ_MAX_BITS, EMBER_ERR_INVALID_ARG,
                    "ember_lfq_create: codebook_size 2^dim = 2^%d exceeds 2^%d (give codebook_size)", (int)c->dim,
                    LFQ_MAX_BITS);
        c->codebook_size = (int32_t)1 << c->dim;
    }
    int32_t K = c->codebook_size;
    if ((K & (K - 1)) != 0) {
        int64_t next = 1;
        while (next < K) next <<= 1;
        return ember__error(ctx, EMBER_ERR_INVALID_ARG,
                            "ember_lfq_create: codebook_size %d is not a power of two (suggested %lld)", (int)K,
                            (long long)next);
    }
    EMBER_CHECK(ctx, K >= 2 && K <= ((int32_t)1 << LFQ_MAX_BITS), EMBER_ERR_INVALID_ARG,
                "ember_lfq_create: codebook_size %d outside [2, 2^%d]", (int)K, LFQ_MAX_BITS);
    int32_t D = 0;
    while (((int32_t)1 << D) < K) D++;
    if (c->num_codebooks == 0) c->num_codebooks = 1;
    EMBER_CHECK(ctx, (int64_t)c->num_codebooks * D <= (1 << 20) && (int64_t)c->num_codebooks * K <= ((int64_t)1 << 28),
                EMBER_ERR_INVALID_ARG, "ember_lfq_create: num_codebooks %d too large for codebook_size %d",
                (int)c->num_codebooks, (int)K);
    int32_t CD = c->num_codebooks * D;
    if (c->dim == 0) c->dim = CD;

    if (c->codebook_scale == 0) c->codebook_scale = 1.0;
    if (c->inv_temperature == 0) c->inv_temperature = 100.0;
    if (c->frac_per_sample_entropy == 0) c->frac_per_sample_entropy = 1.0;
    EMBER_TRY(check_real(ctx, "codebook_scale", c->codebook_scale, c->codebook_scale > 0, " and > 0"));
    EMBER_TRY(check_real(ctx, "inv_temperature", c->inv_temperature, c->inv_temperature > 0, " and > 0"));
    EMBER_TRY(check_real(ctx, "frac_per_sample_entropy", c->frac_per_sample_entropy,
                         c->frac_per_sample_entropy > 0 && c->frac_per_sample_entropy <= 1, " and in (0, 1]"));
    EMBER_TRY(check_real(ctx, "entropy_loss_weight", c->entropy_loss_weight, c->entropy_loss_weight >= 0, " and >= 0"));
    EMBER_TRY(check_real(ctx, "commitment_loss_weight", c->commitment_loss_weight, c->commitment_loss_weight >= 0,
                         " and >= 0"));
    EMBER_TRY(check_real(ctx, "diversity_gamma", c->diversity_gamma, true, ""));
    EMBER_TRY(check_real(ctx, "entropy_loss_offset", c->entropy_loss_offset, true, ""));
    if (c->soft_clamp_input_value != 0) {
        EMBER_CHECK(ctx, isfinite(c->soft_clamp_input_value) && c->soft_clamp_input_value >= c->codebook_scale,
                    EMBER_ERR_INVALID_ARG,
                    "ember_lfq_create: soft_clamp_input_value %g must be >= codebook_scale %g (or 0: no clamp)",
                    c->soft_clamp_input_value, c->codebook_scale);
    }
    if (c->projection == EMBER_LFQ_PROJ_AUTO) c->projection = c->dim != CD ? EMBER_LFQ_PROJ_LINEAR : EMBER_LFQ_PROJ_NONE;
    EMBER_CHECK(ctx, c->projection == EMBER_LFQ_PROJ_LINEAR || c->dim == CD, EMBER_ERR_INVALID_ARG,
                "ember_lfq_create: projection NONE needs dim (%d) == num_codebooks * log2(codebook_size) (%d)",
                (int)c->dim, (int)CD);
    EMBER_CHECK(ctx, !c->comm || ember_comm_ctx(c->comm) == ctx, EMBER_ERR_INVALID_ARG,
                "ember_lfq_create: comm was created on another context");
    *bits = D;
    return EMBER_OK;
}

// Grows the per-token workspace to hold T tokens. The state saved by the last training forward
// is carried over, so that a forward failing on any rank leaves every rank able to backward.
static ember_status ws_reserve(ember_lfq *q, int64_t T, const char *who) {
    ember__lfq_ws *ws = &q->ws;
    if (T <= ws->cap) return EMBER_OK;
    enum { NREG = 8 };
    const int64_t C = q->cfg.num_codebooks, CD = q->CD;
    // Regions in block order: current pointer, element size, elements per token.
    void *const old[NREG] = {ws->x, ws->hc, ws->z, ws->nrm, ws->y, ws->dz, ws->sel, ws->perm};
    const size_t esz[NREG] = {q->esz, q->esz, q->esz, q->esz, q->esz, q->esz, 1, sizeof(int64_t)};
    const int64_t width[NREG] = {q->proj ? q->cfg.dim : 0, CD, CD, q->cfg.spherical ? C : 0, CD, CD, 1,
                                 q->cfg.frac_per_sample_entropy < 1 ? 1 : 0};
    size_t at[NREG], total = 0;
    for (int i = 0; i < NREG; i++) {
        size_t n, b;
        bool ok = ember__mul_size((size_t)T, (size_t)width[i], &n) && ember__mul_size(n, esz[i], &b) &&
                  b <= SIZE_MAX - 64 - total;
        EMBER_CHECK(q->ctx, ok, EMBER_ERR_INVALID_ARG, "%s: workspace for %lld tokens overflows size_t", who,
                    (long long)T);
        at[i] = total;
        total += (b + 63) & ~(size_t)63;
    }
    char *block = ember__xalloc(q->ctx, total, "LFQ workspace");
    if (!block) return EMBER_ERR_NOMEM;
    if (q->saved.valid) {
        const int64_t kept = (int64_t)q->saved.B * q->saved.N;
        for (int i = 0; i < NREG; i++)
            if (width[i] > 0) memcpy(block + at[i], old[i], (size_t)(kept * width[i]) * esz[i]);
    }
    ember__free(q->ctx, ws->block);
    ws->block = block;
    ws->cap = T;
    ws->x = block + at[0];
    ws->hc = block + at[1];
    ws->z = block + at[2];
    ws->nrm = block + at[3];
    ws->y = block + at[4];
    ws->dz = block + at[5];
    ws->sel = (uint8_t *)(block + at[6]);
    ws->perm = (int64_t *)(void *)(block + at[7]);
    return EMBER_OK;
}

void ember_lfq_destroy(ember_lfq *q) {
    if (!q) return;
    ember_ctx *ctx = q->ctx;
    ember__free(ctx, q->ws.block);
    ember__free(ctx, q->params);
    ember__free(ctx, q->grads);
    ember__free(ctx, q->psum);
    ember__free(ctx, q->pbar);
    ember__free(ctx, q->gpbar);
    ember__free(ctx, q->kbuf);
    ember__free(ctx, q->row);
    ember__free(ctx, q);
}

ember_status ember_lfq_create(ember_ctx *ctx, const ember_lfq_config *cfg, ember_lfq **out) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, out != NULL, EMBER_ERR_INVALID_ARG, "ember_lfq_create: out is NULL");
    *out = NULL;
    EMBER_CHECK(ctx, cfg != NULL, EMBER_ERR_INVALID_ARG, "ember_lfq_create: cfg is NULL");
    ember_lfq_config c = *cfg;
    int32_t D = 0;
    EMBER_TRY(resolve_config(ctx, &c, &D));

    ember_lfq *q = ember__xalloc(ctx, sizeof *q, "LFQ module");
    if (!q) return EMBER_ERR_NOMEM;
    memset(q, 0, sizeof *q);
    q->ctx = ctx;
    q->cfg = c;
    q->D = D;
    q->CD = c.num_codebooks * D;
    q->proj = c.projection == EMBER_LFQ_PROJ_LINEAR;
    q->bias = q->proj && c.projection_has_bias;
    q->esz = c.dtype == EMBER_DTYPE_F64 ? sizeof(double) : sizeof(float);
    q->sample_seed = c.seed;

    // One parameter slab in the enum's order; absent parameters have offset -1.
    const int64_t shape[EMBER_LFQ_NUM_PARAMS] = {
        (int64_t)q->CD * c.dim, q->CD, (int64_t)c.dim * q->CD, c.dim};
    const bool present[EMBER_LFQ_NUM_PARAMS] = {q->proj, q->bias, q->proj, q->bias};
    for (int id = 0; id < EMBER_LFQ_NUM_PARAMS; id++) {
        q->off[id] = present[id] ? q->n_params : -1;
        q->numel[id] = present[id] ? shape[id] : 0;
        q->n_params += q->numel[id];
    }
    const size_t CK = (size_t)c.num_codebooks * (size_t)c.codebook_size;
    bool ok = true;
    if (q->n_params > 0) {
        ok = (q->params = ember__xalloc(ctx, (size_t)q->n_params * q->esz, "LFQ parameters")) != NULL &&
             (q->grads = ember__calloc(ctx, (size_t)q->n_params * q->esz)) != NULL;
    }
    ok = ok && (q->psum = ember__alloc(ctx, CK * q->esz)) != NULL &&
         (q->pbar = ember__alloc(ctx, CK * q->esz)) != NULL && (q->gpbar = ember__alloc(ctx, CK * q->esz)) != NULL &&
         (q->kbuf = ember__alloc(ctx, 2 * (size_t)c.codebook_size * q->esz)) != NULL &&
         (q->row = ember__alloc(ctx, (3 * (size_t)q->CD + (size_t)c.num_codebooks) * q->esz)) != NULL;
    if (!ok) {
        ember_lfq_destroy(q);
        return ember__error(ctx, EMBER_ERR_NOMEM, "ember_lfq_create: cannot allocate the module's buffers");
    }
    if (q->n_params > 0) kernels(q)->init_params(q);
    if (c.max_tokens > 0) {
        ember_status st = ws_reserve(q, c.max_tokens, "ember_lfq_create");
        if (st != EMBER_OK) {
            ember_lfq_destroy(q);
            return st;
        }
    }
    *out = q;
    return EMBER_OK;
}

const ember_lfq_config *ember_lfq_get_config(const ember_lfq *q) { return q ? &q->cfg : NULL; }
int32_t ember_lfq_codebook_dim(const ember_lfq *q) { return q ? q->D : 0; }

ember_status ember_lfq_set_comm(ember_lfq *q, ember_comm *comm) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(q->ctx, !comm || ember_comm_ctx(comm) == q->ctx, EMBER_ERR_INVALID_ARG,
                "ember_lfq_set_comm: comm was created on another context");
    q->cfg.comm = comm;
    q->saved.valid = false;
    q->agreed = false;
    return EMBER_OK;
}

ember_status ember_lfq_set_inv_temperature(ember_lfq *q, double tau) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(q->ctx, isfinite(tau) && tau > 0, EMBER_ERR_INVALID_ARG,
                "ember_lfq_set_inv_temperature: %g must be finite and > 0", tau);
    q->cfg.inv_temperature = tau;
    return EMBER_OK;
}

ember_status ember_lfq_set_seed(ember_lfq *q, uint64_t seed) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    q->sample_seed = seed;
    q->sample_counter = 0;
    return EMBER_OK;
}

static void *slab_entry(const ember_lfq *q, void *slab, ember_lfq_param_id id, int64_t *numel) {
    bool ok = q && id >= 0 && id < EMBER_LFQ_NUM_PARAMS && q->off[id] >= 0;
    if (numel) *numel = ok ? q->numel[id] : 0;
    return ok ? (char *)slab + (size_t)q->off[id] * q->esz : NULL;
}

void *ember_lfq_param(ember_lfq *q, ember_lfq_param_id id, int64_t *numel) {
    return slab_entry(q, q ? q->params : NULL, id, numel);
}
void *ember_lfq_grad(ember_lfq *q, ember_lfq_param_id id, int64_t *numel) {
    return slab_entry(q, q ? q->grads : NULL, id, numel);
}
void *ember_lfq_params(ember_lfq *q, int64_t *numel) {
    if (numel) *numel = q ? q->n_params : 0;
    return q ? q->params : NULL;
}
void *ember_lfq_grads(ember_lfq *q, int64_t *numel) {
    if (numel) *numel = q ? q->n_params : 0;
    return q ? q->grads : NULL;
}

ember_status ember_lfq_zero_grad(ember_lfq *q) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    if (q->n_params > 0) memset(q->grads, 0, (size_t)q->n_params * q->esz);
    return EMBER_OK;
}

ember_status ember_lfq_allreduce_grads(ember_lfq *q, ember_grad_convention conv) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_lfq_allreduce_grads";
    ember_comm *comm = q->cfg.comm;
    const ember_status st = conv == EMBER_GRAD_MEAN || conv == EMBER_GRAD_SUM
                                ? EMBER_OK
                                : ember__error(q->ctx, EMBER_ERR_INVALID_ARG, "%s: unknown gradient convention %d", fn,
                                               (int)conv);
    if (!comm) return st;
    // The parameters' count and dtype too: the first training forward agrees on the
    // configuration, but this may come before it.
    const size_t n = (size_t)q->n_params;
    const ember_arg args[] = {{.name = "convention", .value = conv}, {.name = "dtype", .text = ember_dtype_name(q->cfg.dtype)},
                              {.name = "parameters", .value = (int64_t)n}};
    EMBER_TRY(ember_comm_agree_args(comm, st, fn, args, 3));
    if (q->cfg.dtype == EMBER_DTYPE_F64) return ember_comm_allreduce_grads_f64(comm, conv, q->grads, n);
    return ember_comm_allreduce_grads(comm, conv, q->grads, n);
}

// EMBER_ERR_NUMERIC naming the first NaN/Inf of buf [B, N, width], or EMBER_OK.
static ember_status check_finite(ember_lfq *q, const char *who, const char *name, const void *buf, int32_t N,
                                 int64_t T, int32_t width) {
    double v = 0;
    int64_t i = kernels(q)->find_nonfinite(buf, T * width, &v);
    if (i < 0) return EMBER_OK;
    return ember__error(q->ctx, EMBER_ERR_NUMERIC, "%s: %s[b=%lld, n=%lld, %lld] = %g is not finite", who, name,
                        (long long)(i / width / N), (long long)(i / width % N), (long long)(i % width), v);
}

static ember_status validate_forward(ember_lfq *q, const void *x, int32_t B, int32_t N, const void *out) {
    const char *who = "ember_lfq_forward";
    EMBER_CHECK(q->ctx, x != NULL && out != NULL, EMBER_ERR_INVALID_ARG, "%s: %s is NULL", who,
                x ? "out" : "x");
    EMBER_CHECK(q->ctx, B >= 1 && N >= 1, EMBER_ERR_INVALID_ARG, "%s: batch B = %d, N = %d (both must be >= 1)",
                who, (int)B, (int)N);
    return check_finite(q, who, "x", x, N, (int64_t)B * N, q->cfg.dim);
}

// The resolved configuration as fields the ranks of a communicator must agree on (the workspace
// hint max_tokens may differ).
static void describe(const ember_lfq *q, ember__fields *d) {
    const ember_lfq_config *c = &q->cfg;
    ember__fields_add(d, "dim: %d", (int)c->dim);
    ember__fields_add(d, "codebook_size: %d", (int)c->codebook_size);
    ember__fields_add(d, "num_codebooks: %d", (int)c->num_codebooks);
    ember__fields_add(d, "codebook_scale: %.17g", c->codebook_scale);
    ember__fields_add(d, "entropy_loss_weight: %.17g", c->entropy_loss_weight);
    ember__fields_add(d, "commitment_loss_weight: %.17g", c->commitment_loss_weight);
    ember__fields_add(d, "diversity_gamma: %.17g", c->diversity_gamma);
    ember__fields_add(d, "inv_temperature: %.17g", c->inv_temperature);
    ember__fields_add(d, "projection: %s", ember_lfq_projection_name(c->projection));
    ember__fields_add(d, "projection_has_bias: %d", (int)c->projection_has_bias);
    ember__fields_add(d, "soft_clamp_input_value: %.17g", c->soft_clamp_input_value);
    ember__fields_add(d, "spherical: %d", (int)c->spherical);
    ember__fields_add(d, "softplus_entropy_loss: %d", (int)c->softplus_entropy_loss);
    ember__fields_add(d, "entropy_loss_offset: %.17g", c->entropy_loss_offset);
    ember__fields_add(d, "frac_per_sample_entropy: %.17g", c->frac_per_sample_entropy);
    ember__fields_add(d, "dist_mean: %s", ember_lfq_dist_mean_name(c->dist_mean));
    ember__fields_add(d, "dtype: %s", ember_dtype_name(c->dtype));
    ember__fields_add(d, "seed: %llu", (unsigned long long)c->seed);
}

ember_status ember_lfq_forward(ember_lfq *q, const void *x, int32_t B, int32_t N, const uint8_t *mask,
                               bool training, void *out, int64_t *indices, ember_lfq_losses *losses) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    if (!training) {
        // Eval is local and leaves the training state alone.
        EMBER_TRY(validate_forward(q, x, B, N, out));
        kernels(q)->forward_eval(q, x, (int64_t)B * N, out, indices);
        if (losses) *losses = (ember_lfq_losses){0};
        return EMBER_OK;
    }
    // Validate and size locally, agree, and only then overwrite the saved state and communicate.
    ember_comm *comm = q->cfg.comm;
    ember_status st = validate_forward(q, x, B, N, out);
    if (st == EMBER_OK) st = ws_reserve(q, (int64_t)B * N, "ember_lfq_forward");
    if (comm) st = ember_comm_agree(comm, st);
    if (st == EMBER_OK && comm && !q->agreed) {
        ember__fields d = {q->ctx, {NULL, 0}, 0, EMBER_OK};
        describe(q, &d);
        st = ember__comm_agree_fields(comm, "ember_lfq_forward", &d);
        ember__fields_free(&d);
        q->agreed = st == EMBER_OK;
    }
    if (st != EMBER_OK) return st;
    q->saved.valid = false;
    return kernels(q)->forward_train(q, x, B, N, mask, comm, out, indices, losses);
}

ember_status ember_lfq_backward(ember_lfq *q, const void *grad_out, double grad_aux, void *grad_x) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    const char *who = "ember_lfq_backward";
    ember_status st = EMBER_OK;
    if (!q->saved.valid)
        st = ember__error(q->ctx, EMBER_ERR_STATE,
                          "%s: no training forward to differentiate (forward with training = true first)", who);
    else if (!isfinite(grad_aux))
        st = ember__error(q->ctx, EMBER_ERR_NUMERIC, "%s: grad_aux = %g is not finite", who, grad_aux);
    else if (grad_out)
        st = check_finite(q, who, "grad_out", grad_out, q->saved.N, (int64_t)q->saved.B * q->saved.N, q->cfg.dim);
    if (q->cfg.comm) st = ember_comm_agree(q->cfg.comm, st);
    if (st != EMBER_OK) return st;
    return kernels(q)->backward(q, grad_out, grad_aux, grad_x);
}

ember_status ember_lfq_indices_to_codes(ember_lfq *q, const int64_t *indices, int64_t n, bool project_out,
                                        void *codes) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    const char *who = "ember_lfq_indices_to_codes";
    EMBER_CHECK(q->ctx, n >= 0, EMBER_ERR_INVALID_ARG, "%s: n = %lld < 0", who, (long long)n);
    EMBER_CHECK(q->ctx, n == 0 || (indices && codes), EMBER_ERR_INVALID_ARG, "%s: %s is NULL", who,
                indices ? "codes" : "indices");
    const int32_t C = q->cfg.num_codebooks, K = q->cfg.codebook_size;
    for (int64_t i = 0; i < n * C; i++) {
        EMBER_CHECK(q->ctx, indices[i] >= 0 && indices[i] < K, EMBER_ERR_OUT_OF_RANGE,
                    "%s: indices[%lld, %lld] = %lld outside [0, %d)", who, (long long)(i / C), (long long)(i % C),
                    (long long)indices[i], (int)K);
    }
    kernels(q)->indices_to_codes(q, indices, n, project_out, codes);
    return EMBER_OK;
}
