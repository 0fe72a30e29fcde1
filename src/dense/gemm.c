// ember_gemm, ember_gemm_batched, ember_colsum: argument checks, B packing, blocks and threads.
// The arithmetic is the context's kernel variant (src/dense/isa/); how a product is cut is in
// src/dense/internal.h.
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "dense/internal.h"

EMBER__ENUM_NAMES(ember_transpose, ember_transpose, "no_trans", "trans")

// Below this many multiply-adds a call runs on one thread (a parallel region costs microseconds).
#define MIN_PARALLEL_FMAS (1 << 16)
// Packing buffers up to this many floats live on the stack (one-thread calls).
#define STACK_FLOATS 2048
// ember_colsum: columns per thread task.
#define COLSUM_CHUNK 256

// ---- checks ----------------------------------------------------------------------------------

static ember_status check_trans(ember_ctx *ctx, const char *fn, const char *name, ember_transpose t) {
    EMBER_CHECK(ctx, t == EMBER_NO_TRANS || t == EMBER_TRANS, EMBER_ERR_INVALID_ARG,
                "%s: %s is %d: expected EMBER_NO_TRANS (0) or EMBER_TRANS (1)", fn, name, (int)t);
    return EMBER_OK;
}

static ember_status check_size(ember_ctx *ctx, const char *fn, const char *name, int64_t v) {
    EMBER_CHECK(ctx, v >= 0, EMBER_ERR_INVALID_ARG, "%s: %s is %lld: must be >= 0", fn, name, (long long)v);
    return EMBER_OK;
}

// An operand of `rows` x `width` elements stored with row stride `ld` (width <= ld), `count`
// times `stride` apart: ld >= max(1, width), a non-NULL float-aligned pointer when it holds
// elements, and an extent whose byte size fits the address space.
static ember_status check_operand(ember_ctx *ctx, const char *fn, const char *name, const void *p, int64_t rows,
                                  int64_t width, const char *ld_name, int64_t ld, const char *width_name,
                                  int64_t count, int64_t stride) {
    EMBER_CHECK(ctx, ld >= 1 && ld >= width, EMBER_ERR_INVALID_ARG, "%s: %s is %lld: below max(1, %s = %lld)", fn,
                ld_name, (long long)ld, width_name, (long long)width);
    if (rows == 0 || width == 0 || count == 0) return EMBER_OK;
    EMBER_CHECK(ctx, p != NULL, EMBER_ERR_INVALID_ARG, "%s: %s is NULL but holds %lld x %lld elements", fn, name,
                (long long)rows, (long long)width);
    EMBER_CHECK(ctx, ((uintptr_t)p & (sizeof(float) - 1)) == 0, EMBER_ERR_INVALID_ARG,
                "%s: %s (%p) is not aligned to 4 bytes (a float array)", fn, name, p);
    // Extent in elements: (count-1)*stride + (rows-1)*ld + width, each step checked.
    const int64_t lim = (int64_t)((SIZE_MAX < (uint64_t)INT64_MAX ? (uint64_t)SIZE_MAX : (uint64_t)INT64_MAX) /
                                  sizeof(float));
    int ok = rows - 1 <= (lim - width) / ld;
    const int64_t ext = ok ? (rows - 1) * ld + width : 0;
    if (ok && count > 1) ok = stride == 0 || count - 1 <= (lim - ext) / stride;
    EMBER_CHECK(ctx, ok, EMBER_ERR_INVALID_ARG, "%s: %s spans more than the address space (%lld x %lld, %s %lld)",
                fn, name, (long long)rows, (long long)width, ld_name, (long long)ld);
    return EMBER_OK;
}

// A vector of n floats (the bias, the column sums): non-NULL and float-aligned when n > 0.
static ember_status check_vector(ember_ctx *ctx, const char *fn, const char *name, const void *p, int64_t n) {
    if (n == 0) return EMBER_OK;
    EMBER_CHECK(ctx, p != NULL, EMBER_ERR_INVALID_ARG, "%s: %s is NULL but holds %lld elements", fn, name,
                (long long)n);
    EMBER_CHECK(ctx, ((uintptr_t)p & (sizeof(float) - 1)) == 0, EMBER_ERR_INVALID_ARG,
                "%s: %s (%p) is not aligned to 4 bytes (a float array)", fn, name, p);
    return EMBER_OK;
}

// ---- packing ---------------------------------------------------------------------------------

// Panel p of op(B) [K][N] into dst + p*K*nr as [K][nr], columns past N zero.
static void pack_panel(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, int64_t nr, int64_t p,
                       float *dst) {
    const int64_t n0 = p * nr, w = N - n0 < nr ? N - n0 : nr;
    float *d = dst + p * K * nr;
    if (!tb) {
        for (int64_t k = 0; k < K; k++) {
            memcpy(d + k * nr, B + k * ldb + n0, sizeof(float) * (size_t)w);
            if (w < nr) memset(d + k * nr + w, 0, sizeof(float) * (size_t)(nr - w));
        }
        return;
    }
    // B(k, n) = B[n*ldb + k]: read each column's k run contiguously, 8 columns at a time.
    for (int64_t j0 = 0; j0 < w; j0 += 8) {
        const int64_t j1 = w - j0 < 8 ? w : j0 + 8;
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = j0; j < j1; j++) d[k * nr + j] = B[(n0 + j) * ldb + k];
    }
    if (w < nr)
        for (int64_t k = 0; k < K; k++) memset(d + k * nr + w, 0, sizeof(float) * (size_t)(nr - w));
}

// ---- products --------------------------------------------------------------------------------

typedef struct batch {
    const ember__dense_kernels *kern;
    ember__gemm_geom g;
    int tb;
    const float *A, *B;
    float *C;
    int64_t ldb, sa, sb, sc, count;
    ember__gemm_op op; // A, Bp and C of product 0
    int64_t npanels, nbm, nbn;
} batch;

// Product i with its packed B at bp.
static ember__gemm_op item(const batch *b, int64_t i, const float *bp) {
    ember__gemm_op op = b->op;
    op.A = b->A ? b->A + i * b->sa : NULL;
    op.C = b->C + i * b->sc;
    op.Bp = bp;
    return op;
}

static void run_block(const batch *b, const ember__gemm_op *op, int64_t blk, float *part) {
    const int64_t bm = blk / b->nbn, bn = blk % b->nbn;
    const int64_t m0 = bm * b->g.mc, n0 = bn * b->g.nc;
    const int64_t mb = b->op.M - m0 < b->g.mc ? b->op.M - m0 : b->g.mc;
    const int64_t nb = b->op.N - n0 < b->g.nc ? b->op.N - n0 : b->g.nc;
    b->kern->block(op, &b->g, m0, mb, n0, nb, part);
}

// Every product on its own thread: each thread packs its products' B into its own buffer.
static void run_items(const batch *b, int nt, float *buf, int64_t bp_floats, int64_t part_floats) {
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        float *bp = buf + (size_t)tid * (size_t)(bp_floats + part_floats);
        float *part = part_floats ? bp + bp_floats : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < b->count; i++) {
            const float *B = b->B ? b->B + i * b->sb : NULL;
            for (int64_t p = 0; p < b->npanels; p++)
                pack_panel(b->tb, b->op.K, b->op.N, B, b->ldb, b->g.nr, p, bp);
            const ember__gemm_op op = item(b, i, bp);
            for (int64_t blk = 0; blk < b->nbm * b->nbn; blk++) run_block(b, &op, blk, part);
        }
    }
}

// One product after the other, the threads sharing each: B packed panel by panel, then the
// blocks of C.
static void run_blocks(const batch *b, int nt, float *buf, int64_t bp_floats, int64_t part_floats) {
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        float *part = part_floats ? buf + bp_floats + (size_t)tid * (size_t)part_floats : NULL;
        for (int64_t i = 0; i < b->count; i++) {
            const float *B = b->B ? b->B + i * b->sb : NULL;
#pragma omp for schedule(static)
            for (int64_t p = 0; p < b->npanels; p++) pack_panel(b->tb, b->op.K, b->op.N, B, b->ldb, b->g.nr, p, buf);
            const ember__gemm_op op = item(b, i, buf);
#pragma omp for schedule(dynamic, 1)
            for (int64_t blk = 0; blk < b->nbm * b->nbn; blk++) run_block(b, &op, blk, part);
        }
    }
}

static ember_status gemm(ember_ctx *ctx, const char *fn, ember_transpose ta, ember_transpose tb, int64_t M, int64_t N,
                         int64_t K, const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb,
                         float *C, int64_t ldc, int64_t sc, int64_t count, const ember_gemm_epilogue *ep) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_trans(ctx, fn, "ta", ta));
    EMBER_TRY(check_trans(ctx, fn, "tb", tb));
    EMBER_TRY(check_size(ctx, fn, "M", M));
    EMBER_TRY(check_size(ctx, fn, "N", N));
    EMBER_TRY(check_size(ctx, fn, "K", K));
    EMBER_TRY(check_size(ctx, fn, "count", count));
    EMBER_TRY(check_size(ctx, fn, "stride_a", sa));
    EMBER_TRY(check_size(ctx, fn, "stride_b", sb));
    EMBER_TRY(check_size(ctx, fn, "stride_c", sc));
    // A is [M][lda] (ta no_trans: rows of K) or [K][lda] (trans: rows of M); B likewise.
    EMBER_TRY(check_operand(ctx, fn, "A", A, ta ? K : M, ta ? M : K, "lda", lda, ta ? "M (ta = trans)" : "K (ta = no_trans)",
                            count, sa));
    EMBER_TRY(check_operand(ctx, fn, "B", B, tb ? N : K, tb ? K : N, "ldb", ldb, tb ? "K (tb = trans)" : "N (tb = no_trans)",
                            count, sb));
    EMBER_TRY(check_operand(ctx, fn, "C", C, M, N, "ldc", ldc, "N", count, sc));
    const ember_gemm_epilogue e = ep ? *ep : (ember_gemm_epilogue)EMBER_GEMM_EPILOGUE_DEFAULT;
    if (e.bias) EMBER_TRY(check_vector(ctx, fn, "ep->bias", e.bias, N));
    if (count > 1 && M > 0 && N > 0)
        EMBER_CHECK(ctx, sc >= (M - 1) * ldc + N, EMBER_ERR_INVALID_ARG,
                    "%s: stride_c %lld < (M - 1) * ldc + N = %lld: the products' outputs would overlap", fn,
                    (long long)sc, (long long)((M - 1) * ldc + N));
    if (M == 0 || N == 0 || count == 0) return EMBER_OK;

    batch b = {.kern = ember__dense_kernels_for(ctx->isa), .tb = tb, .A = A, .B = B, .C = C, .ldb = ldb,
               .sa = sa, .sb = sb, .sc = sc, .count = count};
    EMBER_ASSERT(b.kern != NULL);
    b.kern->geom(M, N, K, ta, &b.g);
    b.op = (ember__gemm_op){.ta = ta, .M = M, .N = N, .K = K, .lda = lda, .ldc = ldc, .bias = e.bias,
                           .relu = e.relu != 0, .accumulate = e.accumulate != 0};
    b.npanels = (N + b.g.nr - 1) / b.g.nr;
    b.nbm = (M + b.g.mc - 1) / b.g.mc;
    b.nbn = (N + b.g.nc - 1) / b.g.nc;

    // Threads: never more than there is work for; the bits do not depend on it.
    const double fmas = (double)M * (double)N * (double)(K > 0 ? K : 1) * (double)count;
    int nt = ember__threads(ctx);
    if (fmas < MIN_PARALLEL_FMAS) nt = 1;
    const int64_t nblocks = b.nbm * b.nbn;
    const int items = count > 1 && (count >= 2 * (int64_t)nt || nblocks < 2);
    const int64_t units = items ? count : nblocks;
    if (units < nt) nt = (int)units;

    // Buffers: packed B (K x npanels*nr) and the partial sums (mc x nc) when K is sliced, each
    // rounded up to 16 floats so that every thread's part starts 64-byte aligned.
    size_t bp_floats = 0, part_floats = 0, per_thread = 0, shared = 0, total = 0;
    int ok = ember__mul_size((size_t)K, (size_t)(b.npanels * b.g.nr), &bp_floats) &&
             ember__mul_size((size_t)b.g.mc, (size_t)b.g.nc, &part_floats) && bp_floats <= SIZE_MAX / 8;
    bp_floats = (bp_floats + 15) / 16 * 16;
    part_floats = K > b.g.kc ? (part_floats + 15) / 16 * 16 : 0;
    if (items) per_thread = bp_floats + part_floats;
    else shared = bp_floats, per_thread = part_floats;
    ok = ok && ember__mul_size(per_thread, (size_t)nt, &total) && total <= SIZE_MAX / sizeof(float) - shared;
    EMBER_CHECK(ctx, ok, EMBER_ERR_NOMEM, "%s: packing buffers for K %lld x N %lld overflow the address space", fn,
                (long long)K, (long long)N);
    total += shared;
    float stack[STACK_FLOATS] __attribute__((aligned(64)));
    float *buf = stack, *heap = NULL;
    if (total > STACK_FLOATS) {
        heap = ember__xalloc(ctx, total * sizeof(float), fn);
        if (!heap) return EMBER_ERR_NOMEM;
        buf = heap;
    }
    if (items) run_items(&b, nt, buf, (int64_t)bp_floats, (int64_t)part_floats);
    else run_blocks(&b, nt, buf, (int64_t)bp_floats, (int64_t)part_floats);
    ember__free(ctx, heap);
    return EMBER_OK;
}

ember_status ember_gemm(ember_ctx *ctx, ember_transpose ta, ember_transpose tb, int64_t M, int64_t N, int64_t K,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                        const ember_gemm_epilogue *ep) {
    return gemm(ctx, "ember_gemm", ta, tb, M, N, K, A, lda, 0, B, ldb, 0, C, ldc, 0, 1, ep);
}

ember_status ember_gemm_batched(ember_ctx *ctx, ember_transpose ta, ember_transpose tb, int64_t M, int64_t N,
                                int64_t K, const float *A, int64_t lda, int64_t stride_a, const float *B, int64_t ldb,
                                int64_t stride_b, float *C, int64_t ldc, int64_t stride_c, int64_t count,
                                const ember_gemm_epilogue *ep) {
    return gemm(ctx, "ember_gemm_batched", ta, tb, M, N, K, A, lda, stride_a, B, ldb, stride_b, C, ldc, stride_c,
                count, ep);
}

ember_status ember_colsum(ember_ctx *ctx, int64_t M, int64_t N, const float *A, int64_t lda, float *out,
                          int32_t accumulate) {
    static const char fn[] = "ember_colsum";
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_size(ctx, fn, "M", M));
    EMBER_TRY(check_size(ctx, fn, "N", N));
    EMBER_TRY(check_operand(ctx, fn, "A", A, M, N, "lda", lda, "N", 1, 0));
    EMBER_TRY(check_vector(ctx, fn, "out", out, N));
    if (N == 0) return EMBER_OK;
    const ember__dense_kernels *kern = ember__dense_kernels_for(ctx->isa);
    EMBER_ASSERT(kern != NULL);
    const int64_t chunks = (N + COLSUM_CHUNK - 1) / COLSUM_CHUNK;
    int nt = ember__threads(ctx);
    if ((double)M * (double)N < MIN_PARALLEL_FMAS) nt = 1;
    if (chunks < nt) nt = (int)chunks;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t n0 = c * COLSUM_CHUNK, n1 = N - n0 < COLSUM_CHUNK ? N : n0 + COLSUM_CHUNK;
        kern->colsum(M, n0, n1, A, lda, out, accumulate != 0);
    }
    return EMBER_OK;
}
