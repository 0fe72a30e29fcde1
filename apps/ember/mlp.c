// Fully connected layers on cblas_sgemm (OpenBLAS), on the caller's OpenMP threads.
//
// Every product is cut into tiles of fixed size, and each tile is one single-threaded BLAS call;
// the threads share out the tiles. A tile's bits depend only on its inputs, never on which
// thread runs it or how many threads there are, so the layers give the same bits for any thread
// count. OpenBLAS's own threading cannot promise that: it splits a product by its thread count
// and its sums round differently (for the default top MLP's dW, 64 x 367 over batches of 256 to
// 2048, 1 and 2 OpenBLAS threads disagree in the last bit on 18% to 70% of the elements). It
// would also run a second pool of spinning threads beside OpenMP's (Debian's default OpenBLAS
// is the pthread build), the two pools taking each other's cores.
#include <math.h>
#include <string.h>

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "appctx.h"
#include "mlp.h"
#include "ember/rng.h"

// Rows of the batch per tile in y = x W^T and dx = g W: 16 tiles for the default 2048 samples,
// few enough that the repacked W (up to 64 x 367 for the default top MLP) stays a few percent of
// a tile's work, and enough for 8 threads on each rank's half of a batch.
#define MLP_ROW_TILE 128
// dW = g^T x is tiled over its [out, in] output: the batch is the sum's dimension and is never
// split, so every element is one BLAS dot product over the whole batch.
#define MLP_OUT_TILE 64
#define MLP_IN_TILE 64
// Bias gradients: columns per task (one cache line of floats).
#define MLP_COL_TILE 16

// OpenBLAS runs each call on the calling thread from here on. In OpenBLAS's OpenMP build,
// openblas_set_num_threads also sets OpenMP's default team size: put the caller's back.
static void blas_single_threaded(void) {
#ifdef _OPENMP
    int keep = omp_get_max_threads();
    openblas_set_num_threads(1);
    omp_set_num_threads(keep);
#else
    openblas_set_num_threads(1);
#endif
}

static inline int32_t tiles(int32_t n, int32_t tile) { return (n + tile - 1) / tile; }

int64_t mlp_num_params(int32_t in, const int32_t *sizes, int32_t n) {
    int64_t total = 0;
    for (int32_t l = 0; l < n; l++) {
        total += (int64_t)sizes[l] * in + sizes[l];
        in = sizes[l];
    }
    return total;
}

ember_status mlp_create(ember_ctx *ctx, int32_t in, const int32_t *sizes, int32_t n, bool relu_last,
                        int32_t max_batch, float *params, float *grads, mlp *m) {
    memset(m, 0, sizeof *m);
    blas_single_threaded();
    APP_CHECK(ctx, n >= 1 && in >= 1 && max_batch >= 1, EMBER_ERR_INVALID_ARG,
              "mlp: %d layers, input width %d, batch %d", (int)n, (int)in, (int)max_batch);
    m->layers = app_alloc(ctx, sizeof(mlp_layer) * (size_t)n, "mlp layers");
    if (!m->layers) return EMBER_ERR_NOMEM;
    memset(m->layers, 0, sizeof(mlp_layer) * (size_t)n);
    m->num_layers = n;
    m->in = in;
    m->max_batch = max_batch;
    int32_t width = in, widest = in;
    for (int32_t l = 0; l < n; l++) {
        mlp_layer *L = &m->layers[l];
        APP_CHECK(ctx, sizes[l] >= 1, EMBER_ERR_INVALID_ARG, "mlp: layer %d has size %d", (int)l, (int)sizes[l]);
        L->in = width;
        L->out = sizes[l];
        L->relu = l < n - 1 || relu_last;
        L->w = params;
        L->dw = grads;
        params += (size_t)L->out * (size_t)L->in;
        grads += (size_t)L->out * (size_t)L->in;
        L->b = params;
        L->db = grads;
        params += L->out;
        grads += L->out;
        L->y = app_alloc(ctx, sizeof(float) * (size_t)max_batch * (size_t)L->out, "mlp activations");
        if (!L->y) {
            mlp_destroy(ctx, m);
            return EMBER_ERR_NOMEM;
        }
        width = L->out;
        if (width > widest) widest = width;
    }
    for (int i = 0; i < 2; i++) {
        m->scratch[i] = app_alloc(ctx, sizeof(float) * (size_t)max_batch * (size_t)widest, "mlp scratch");
        if (!m->scratch[i]) {
            mlp_destroy(ctx, m);
            return EMBER_ERR_NOMEM;
        }
    }
    return EMBER_OK;
}

void mlp_destroy(ember_ctx *ctx, mlp *m) {
    if (m->layers) {
        for (int32_t l = 0; l < m->num_layers; l++) ember_ctx_free(ctx, m->layers[l].y);
        ember_ctx_free(ctx, m->layers);
    }
    ember_ctx_free(ctx, m->scratch[0]);
    ember_ctx_free(ctx, m->scratch[1]);
    memset(m, 0, sizeof *m);
}

void mlp_init_params(mlp *m, uint64_t seed, uint64_t stream) {
    for (int32_t l = 0; l < m->num_layers; l++) {
        mlp_layer *L = &m->layers[l];
        double bound = 1.0 / sqrt((double)L->in);
        ember_rng r = ember_rng_at(seed, stream, (uint64_t)l);
        size_t nw = (size_t)L->out * (size_t)L->in;
        for (size_t i = 0; i < nw; i++) L->w[i] = (float)((2.0 * ember_rng_uniform(&r) - 1.0) * bound);
        for (int32_t i = 0; i < L->out; i++) L->b[i] = (float)((2.0 * ember_rng_uniform(&r) - 1.0) * bound);
    }
}

const float *mlp_forward(mlp *m, const float *x, int32_t batch) {
    APP_ASSERT(batch >= 0 && batch <= m->max_batch);
    const int32_t row_tiles = tiles(batch, MLP_ROW_TILE);
    // One team for the whole stack; the barrier after each layer's loop orders the layers.
#pragma omp parallel if (row_tiles > 1)
    {
        const float *in = x;
        for (int32_t l = 0; l < m->num_layers; l++) {
            mlp_layer *L = &m->layers[l];
#pragma omp for schedule(static)
            for (int32_t t = 0; t < row_tiles; t++) {
                const int32_t r0 = t * MLP_ROW_TILE, rows = batch - r0 < MLP_ROW_TILE ? batch - r0 : MLP_ROW_TILE;
                float *y = L->y + (size_t)r0 * (size_t)L->out;
                // y = b (broadcast over rows), then y += x W^T.
                for (int32_t i = 0; i < rows; i++) memcpy(y + (size_t)i * (size_t)L->out, L->b, sizeof(float) * (size_t)L->out);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L->out, L->in, 1.0f,
                            in + (size_t)r0 * (size_t)L->in, L->in, L->w, L->in, 1.0f, y, L->out);
                if (L->relu) {
                    const size_t n = (size_t)rows * (size_t)L->out;
                    for (size_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
                }
            }
            in = L->y;
        }
    }
    return m->layers[m->num_layers - 1].y;
}

void mlp_backward(mlp *m, const float *x, int32_t batch, const float *dy, float *dx) {
    APP_ASSERT(batch >= 0 && batch <= m->max_batch);
    const int32_t row_tiles = tiles(batch, MLP_ROW_TILE);
#pragma omp parallel
    {
        // g is dL/d(output of layer l); it lives in the caller's dy or in scratch[cur].
        const float *g = dy;
        int cur = -1;
        for (int32_t l = m->num_layers - 1; l >= 0; l--) {
            mlp_layer *L = &m->layers[l];
            if (L->relu) {
                // Through the ReLU: dL/dz = dL/dy where y > 0 (torch's convention: 0 at z = 0).
                if (cur < 0) cur = 0;
                float *gz = m->scratch[cur];
#pragma omp for schedule(static)
                for (int32_t t = 0; t < row_tiles; t++) {
                    const size_t i0 = (size_t)t * MLP_ROW_TILE * (size_t)L->out;
                    const size_t i1 = t == row_tiles - 1 ? (size_t)batch * (size_t)L->out
                                                         : i0 + (size_t)MLP_ROW_TILE * (size_t)L->out;
                    for (size_t i = i0; i < i1; i++) gz[i] = L->y[i] > 0.0f ? g[i] : 0.0f;
                }
                g = gz;
            }
            const float *in = l > 0 ? m->layers[l - 1].y : x;
            // dW = g^T x ([out, B] x [B, in]), tile by tile of its output; db = column sums of
            // g in row order. Both only read g: one loop, no barrier between them. The tasks
            // differ in size (a last narrow tile, the small db ones): handed out one at a time.
            const int32_t out_tiles = tiles(L->out, MLP_OUT_TILE), in_tiles = tiles(L->in, MLP_IN_TILE);
            const int32_t dw_tasks = out_tiles * in_tiles, db_tasks = tiles(L->out, MLP_COL_TILE);
#pragma omp for schedule(dynamic, 1)
            for (int32_t k = 0; k < dw_tasks + db_tasks; k++) {
                if (k < dw_tasks) {
                    const int32_t o0 = (k / in_tiles) * MLP_OUT_TILE, i0 = (k % in_tiles) * MLP_IN_TILE;
                    const int32_t no = L->out - o0 < MLP_OUT_TILE ? L->out - o0 : MLP_OUT_TILE;
                    const int32_t ni = L->in - i0 < MLP_IN_TILE ? L->in - i0 : MLP_IN_TILE;
                    float *dw = L->dw + (size_t)o0 * (size_t)L->in + (size_t)i0;
                    if (batch > 0) {
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, no, ni, batch, 1.0f, g + o0, L->out,
                                    in + i0, L->in, 0.0f, dw, L->in);
                    } else {
                        for (int32_t o = 0; o < no; o++) memset(dw + (size_t)o * (size_t)L->in, 0, sizeof(float) * (size_t)ni);
                    }
                } else {
                    const int32_t j0 = (k - dw_tasks) * MLP_COL_TILE;
                    const int32_t j1 = L->out - j0 < MLP_COL_TILE ? L->out : j0 + MLP_COL_TILE;
                    for (int32_t j = j0; j < j1; j++) L->db[j] = 0.0f;
                    for (int32_t i = 0; i < batch; i++) {
                        const float *gi = g + (size_t)i * (size_t)L->out;
                        for (int32_t j = j0; j < j1; j++) L->db[j] += gi[j];
                    }
                }
            }
            if (l == 0 && !dx) break;
            // dx = g W ([B, out] x [out, in]) into the buffer g does not occupy.
            const int next = cur == 0 ? 1 : 0;
            float *dst = l > 0 ? m->scratch[next] : dx;
#pragma omp for schedule(static)
            for (int32_t t = 0; t < row_tiles; t++) {
                const int32_t r0 = t * MLP_ROW_TILE, rows = batch - r0 < MLP_ROW_TILE ? batch - r0 : MLP_ROW_TILE;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, L->in, L->out, 1.0f,
                            g + (size_t)r0 * (size_t)L->out, L->out, L->w, L->in, 0.0f,
                            dst + (size_t)r0 * (size_t)L->in, L->in);
            }
            g = dst;
            cur = next;
        }
    }
}
