// The synthetic click data set (see synth.h for the planted model).
#include <math.h>
#include <string.h>

#include "appctx.h"
#include "synth.h"

// ---- Zipf by rejection-inversion ---------------------------------------------------------------
// With h(x) = x^-alpha and its antiderivative H(x) = (x^(1-alpha) - 1) / (1 - alpha) (log x at
// alpha = 1), a uniform u on (H(1.5) - 1, H(n + 0.5)] is inverted through H; the rounded value k
// is accepted when it lies within the squeeze s of the inverse, or when u falls under the
// histogram bar of k. The helpers keep H and its inverse accurate as alpha -> 1.

static double expm1_over_x(double x) { return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0); }
static double log1p_over_x(double x) { return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x / 3.0); }

static double zipf_h(const zipf *z, double x) { return exp(-z->alpha * log(x)); }

static double zipf_H(const zipf *z, double x) {
    double lx = log(x);
    return expm1_over_x((1.0 - z->alpha) * lx) * lx;
}

static double zipf_H_inv(const zipf *z, double y) {
    double t = y * (1.0 - z->alpha);
    if (t < -1.0) t = -1.0; // rounding at the lower end of the range
    return exp(log1p_over_x(t) * y);
}

void zipf_init(zipf *z, int64_t n, double alpha) {
    z->n = n;
    z->alpha = alpha;
    z->h_x1 = zipf_H(z, 1.5) - 1.0;
    z->h_n = zipf_H(z, (double)n + 0.5);
    z->s = 2.0 - zipf_H_inv(z, zipf_H(z, 2.5) - zipf_h(z, 2.0));
}

int64_t zipf_draw(const zipf *z, ember_rng *r) {
    for (;;) {
        double u = z->h_n + ember_rng_uniform(r) * (z->h_x1 - z->h_n);
        double x = zipf_H_inv(z, u);
        int64_t k = (int64_t)(x + 0.5);
        if (k < 1) k = 1;
        if (k > z->n) k = z->n;
        if ((double)k - x <= z->s || u >= zipf_H(z, (double)k + 0.5) - zipf_h(z, (double)k)) return k;
    }
}

// ---- The planted model -------------------------------------------------------------------------

enum { STREAM_MODEL = 1, STREAM_EFFECT = 2, STREAM_CALIBRATE = 3, STREAM_SAMPLES = 16, STREAM_REQUESTS = 32 }; // split s: 16 + s, 32 + s

// Draws per feature to calibrate its effects (see synth_create).
#define CALIBRATION_DRAWS 4096

struct synth {
    synth_config cfg;  // rows points into this object
    int64_t *rows;     // [F]
    int64_t *table_rows; // [F] or NULL (cfg.table_rows points here)
    double *w;         // [Dn] dense weights
    double *mu;        // [Dn] dense offsets
    double *sigma;     // [F] per-feature effect standard deviation
    double *center;    // [F] mean of the raw effects under feature f's id distribution
    double *scale;     // [F] sigma_f / their standard deviation (0 when they do not vary)
    uint64_t *perm;    // [2F] a_f, c_f of each feature's id permutation
    zipf *zipf;        // [F]
    double *effects;   // [sum of rows] every id's synth_effect, feature after feature, or NULL
    int64_t *effect_at; // [F] where feature f's effects start
};

// Ids whose effects are kept (8 bytes each): a sample draws one per feature, and an effect costs a
// normal draw (a log, a square root and a cosine). Beyond this the effects are computed per draw.
#define EFFECT_TABLE_MAX (INT64_C(1) << 21)

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// The raw effect of an id: N(0, 1) from (seed, feature, id).
static double raw_effect(const synth *s, int32_t feature, int64_t id) {
    ember_rng r = ember_rng_at(s->cfg.seed, STREAM_EFFECT, ember_rng_key((uint64_t)feature, (uint64_t)id));
    return ember_rng_normal(&r);
}

// Its effect on the logit: centred and scaled (synth_create).
static double effect(const synth *s, int32_t feature, int64_t id) {
    return s->scale[feature] * (raw_effect(s, feature, id) - s->center[feature]);
}

// A Zipf rank through feature f's permutation: (a k + c) mod rows, without overflow.
static int64_t draw_id(const synth *s, int32_t f, ember_rng *r) {
    uint64_t rows = (uint64_t)s->rows[f], k = (uint64_t)zipf_draw(&s->zipf[f], r) - 1;
    return (int64_t)(((unsigned __int128)s->perm[2 * f] * k + s->perm[2 * f + 1]) % rows);
}

void synth_destroy(ember_ctx *ctx, synth *s) {
    if (!s) return;
    ember_ctx_free(ctx, s->rows);
    ember_ctx_free(ctx, s->table_rows);
    ember_ctx_free(ctx, s->w);
    ember_ctx_free(ctx, s->mu);
    ember_ctx_free(ctx, s->sigma);
    ember_ctx_free(ctx, s->center);
    ember_ctx_free(ctx, s->scale);
    ember_ctx_free(ctx, s->perm);
    ember_ctx_free(ctx, s->zipf);
    ember_ctx_free(ctx, s->effects);
    ember_ctx_free(ctx, s->effect_at);
    ember_ctx_free(ctx, s);
}

ember_status synth_create(ember_ctx *ctx, const synth_config *cfg, synth **out) {
    *out = NULL;
    const int32_t nd = cfg->num_dense, nf = cfg->num_sparse;
    APP_CHECK(ctx, nd >= 0 && nf >= 0 && (nf == 0 || cfg->rows), EMBER_ERR_INVALID_ARG,
              "synthetic data: %d dense, %d sparse features", (int)nd, (int)nf);
    APP_CHECK(ctx, isfinite(cfg->zipf_alpha) && cfg->zipf_alpha >= 0.0, EMBER_ERR_INVALID_ARG,
              "synthetic data: zipf alpha %g must be >= 0", cfg->zipf_alpha);
    for (int32_t f = 0; f < nf; f++) {
        APP_CHECK(ctx, cfg->rows[f] >= 1, EMBER_ERR_INVALID_ARG, "synthetic data: feature cat_%d has %lld rows",
                  (int)f, (long long)cfg->rows[f]);
    }
    synth *s = app_alloc(ctx, sizeof *s, "synthetic data set");
    if (!s) return EMBER_ERR_NOMEM;
    memset(s, 0, sizeof *s);
    s->rows = app_alloc(ctx, sizeof(int64_t) * (size_t)nf, "synthetic table sizes");
    s->w = app_alloc(ctx, sizeof(double) * (size_t)nd, "planted dense weights");
    s->mu = app_alloc(ctx, sizeof(double) * (size_t)nd, "planted dense offsets");
    s->sigma = app_alloc(ctx, sizeof(double) * (size_t)nf, "planted effect scales");
    s->center = app_alloc(ctx, sizeof(double) * (size_t)nf, "planted effect centers");
    s->scale = app_alloc(ctx, sizeof(double) * (size_t)nf, "planted effect scales");
    s->perm = app_alloc(ctx, sizeof(uint64_t) * 2 * (size_t)nf, "id permutations");
    s->zipf = app_alloc(ctx, sizeof(zipf) * (size_t)nf, "zipf samplers");
    if (cfg->table_rows) s->table_rows = app_alloc(ctx, sizeof(int64_t) * (size_t)nf, "synthetic table sizes");
    if (!s->rows || !s->w || !s->mu || !s->sigma || !s->center || !s->scale || !s->perm || !s->zipf ||
        (cfg->table_rows && !s->table_rows)) {
        synth_destroy(ctx, s);
        return EMBER_ERR_NOMEM;
    }
    memcpy(s->rows, cfg->rows, sizeof(int64_t) * (size_t)nf);
    s->cfg = *cfg;
    s->cfg.rows = s->rows;
    if (s->table_rows) memcpy(s->table_rows, cfg->table_rows, sizeof(int64_t) * (size_t)nf);
    s->cfg.table_rows = s->table_rows;

    ember_rng r = ember_rng_at(cfg->seed, STREAM_MODEL, 0);
    double norm = 0.0;
    for (int32_t j = 0; j < nd; j++) {
        s->w[j] = ember_rng_normal(&r);
        s->mu[j] = -1.0 + 3.0 * ember_rng_uniform(&r);
        norm += s->w[j] * s->w[j];
    }
    for (int32_t j = 0; j < nd; j++) s->w[j] *= norm > 0.0 ? cfg->dense_scale / sqrt(norm) : 0.0;
    double var = 0.0;
    for (int32_t f = 0; f < nf; f++) {
        s->sigma[f] = 0.25 + ember_rng_uniform(&r); // features matter unequally, none is pure noise
        var += s->sigma[f] * s->sigma[f];
    }
    for (int32_t f = 0; f < nf; f++) s->sigma[f] *= cfg->sparse_scale / sqrt(var);
    for (int32_t f = 0; f < nf; f++) {
        uint64_t n = (uint64_t)s->rows[f];
        uint64_t a = 1 + ember_rng_next(&r) % n;
        while (gcd_u64(a, n) != 1) a = a % n + 1; // 1 is coprime with n: terminates
        s->perm[2 * f] = a;
        s->perm[2 * f + 1] = ember_rng_next(&r) % n;
        zipf_init(&s->zipf[f], s->rows[f], cfg->zipf_alpha);
    }
    // Under Zipf traffic a few hot ids carry most samples, so raw N(0, 1) effects do not average
    // to 0 over samples, nor spread by 1: centre and scale each feature's effects by their mean
    // and deviation under its own id distribution (estimated from the seed), so that the planted
    // logit has mean `bias` and per-id spread `sparse_scale` as configured, whatever the tables.
    for (int32_t f = 0; f < nf; f++) {
        ember_rng c = ember_rng_at(cfg->seed, STREAM_CALIBRATE, (uint64_t)f);
        double sum = 0.0, sum2 = 0.0;
        for (int i = 0; i < CALIBRATION_DRAWS; i++) {
            double e = raw_effect(s, f, draw_id(s, f, &c));
            sum += e;
            sum2 += e * e;
        }
        double mean = sum / CALIBRATION_DRAWS, spread = sum2 / CALIBRATION_DRAWS - mean * mean;
        s->center[f] = mean;
        s->scale[f] = spread > 1e-6 ? s->sigma[f] / sqrt(spread) : 0.0; // one hot id: nothing to learn
    }
    // The effects table (the same values, computed once): when it is small enough to keep.
    int64_t total = 0;
    for (int32_t f = 0; f < nf && total <= EFFECT_TABLE_MAX; f++) total += s->rows[f];
    if (nf > 0 && total <= EFFECT_TABLE_MAX) {
        s->effects = app_alloc(ctx, sizeof(double) * (size_t)total, "planted effects");
        s->effect_at = app_alloc(ctx, sizeof(int64_t) * (size_t)nf, "planted effects");
        if (!s->effects || !s->effect_at) {
            synth_destroy(ctx, s);
            return EMBER_ERR_NOMEM;
        }
        int64_t at = 0;
        for (int32_t f = 0; f < nf; f++) {
            s->effect_at[f] = at;
            at += s->rows[f];
        }
        for (int32_t f = 0; f < nf; f++) {
            double *e = s->effects + s->effect_at[f];
            const int64_t n = s->rows[f];
#pragma omp parallel for schedule(static) if (n >= 4096)
            for (int64_t id = 0; id < n; id++) e[id] = effect(s, f, id);
        }
    }
    *out = s;
    return EMBER_OK;
}

double synth_sigma(const synth *s, int32_t feature) { return s->sigma[feature]; }

double synth_effect(const synth *s, int32_t feature, int64_t id) {
    return s->effects ? s->effects[s->effect_at[feature] + id] : effect(s, feature, id);
}

void synth_fill(const synth *s, int split, int64_t first, int32_t n, dlrm_batch *b) {
    b->has_bags = false;
    APP_ASSERT(n >= 0 && n <= b->capacity && b->num_dense == s->cfg.num_dense &&
                 b->num_sparse == s->cfg.num_sparse);
    const int32_t nd = s->cfg.num_dense, nf = s->cfg.num_sparse;
    b->size = n;
#pragma omp parallel for schedule(static)
    for (int32_t i = 0; i < n; i++) {
        ember_rng r = ember_rng_at(s->cfg.seed, STREAM_SAMPLES + (uint64_t)split, (uint64_t)(first + i));
        double z = s->cfg.bias;
        float *x = b->dense + (size_t)i * (size_t)nd;
        for (int32_t j = 0; j < nd; j++) {
            double u = ember_rng_normal(&r), t = s->mu[j] + u;
            x[j] = (float)(t > 30.0 ? t : log1p(exp(t)));
            z += s->w[j] * u;
        }
        int64_t *ids = b->ids + (size_t)i * (size_t)nf;
        // A user's features: drawn from their request's stream, the same for its candidates.
        const uint64_t users = s->cfg.request_size > 1 ? s->cfg.user_features : 0;
        ember_rng u = users ? ember_rng_at(s->cfg.seed, STREAM_REQUESTS + (uint64_t)split,
                                           (uint64_t)((first + i) / s->cfg.request_size))
                            : r;
        for (int32_t f = 0; f < nf; f++) {
            const int64_t item = draw_id(s, f, (users >> f) & 1 ? &u : &r);
            z += synth_effect(s, f, item);
            ids[f] = item;
            if (s->table_rows) {
                const uint64_t key = ember_splitmix64(s->cfg.seed ^ ((uint64_t)f << 56) ^ (uint64_t)item);
                ids[f] = s->cfg.raw_keys ? (int64_t)key : (int64_t)(key % (uint64_t)s->table_rows[f]);
            }
        }
        b->planted[i] = (float)z;
        b->labels[i] = ember_rng_uniform(&r) < 1.0 / (1.0 + exp(-z)) ? 1.0f : 0.0f;
        b->origin[i] = first + i;
    }
}
