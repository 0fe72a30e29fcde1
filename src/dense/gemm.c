// ember_gemm, ember_gemm_batched, ember_colsum: argument checks, B packing, blocks and threads.
// The arithmetic is the context's kernel variant (src/dense/isa/); how a product is cut is in
// src/dense/internal.h.
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dense/internal.h"

EMBER__ENUM_NAMES(ember_transpose, ember_transpose, "no_trans", "trans")

// Below this many multiply-adds (about 10 us on one core) a call runs on one thread: a parallel
// region costs microseconds.
#define MIN_PARALLEL_FMAS (1 << 20)
// Rows per task of the matrix-vector and rank-1 paths, columns per task of the vector-matrix one.
#define ROW_RUN 512
#define VECMAT_COLUMNS 256
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

// ---- products --------------------------------------------------------------------------------

// Blocks a big product is cut into at least, when its shape allows: a layer's dW ([64][367]
// summed over the batch) is one block of the default size, and a block is one thread's work.
#define MIN_BLOCKS 8

// Narrower, then shorter blocks until the product has MIN_BLOCKS (nc stays a multiple of nr, mc
// at least mr): a function of the shape alone, like the rest of the geometry. Block sizes change
// which thread computes an element, never its chain.
static void split_blocks(ember__gemm_geom *g, int64_t M, int64_t N) {
    int64_t nbm = (M + g->mc - 1) / g->mc, nbn = (N + g->nc - 1) / g->nc;
    while (nbm * nbn < MIN_BLOCKS && g->nc > g->nr) {
        const int64_t half = g->nc / 2 / g->nr * g->nr;
        g->nc = half > g->nr ? half : g->nr;
        nbn = (N + g->nc - 1) / g->nc;
    }
    while (nbm * nbn < MIN_BLOCKS && g->mc > g->mr) {
        const int64_t half = (g->mc / 2 + g->mr - 1) / g->mr * g->mr;
        g->mc = half > g->mr ? half : g->mr;
        nbm = (M + g->mc - 1) / g->mc;
    }
}

// How a product runs: in blocks of C (the BLIS nest), or on a path of its own without packing or
// scratch: N = 1 (a matrix-vector product) and K = 1 (a rank-1 product) by runs of rows, M = 1
// with an untransposed B (a weight gradient with one output row) by runs of columns.
typedef enum path { PATH_BLOCKS, PATH_GEMV, PATH_RANK1, PATH_VECMAT } path;

// A call's products and how they are cut.
typedef struct batch {
    const ember__dense_kernels *kern;
    ember__gemm_geom g;
    int64_t sa, sb, sc, count;
    ember__gemm_op op;      // product 0 (A, B, C advance by the strides)
    int64_t npanels, nbm, nbn;
    path path;
} batch;

// A thread's scratch, in floats (multiples of 16): its own packed B (run_items only), the partial
// sums and the packed rows of A of its block (0 when unused).
typedef struct scratch {
    int64_t bp, part, ap;
} scratch;

// Product i (its packed B at bp).
static ember__gemm_op item(const batch *b, int64_t i, const float *bp) {
    ember__gemm_op op = b->op;
    op.A = op.A ? op.A + i * b->sa : NULL;
    op.B = op.B ? op.B + i * b->sb : NULL;
    op.C = op.C + i * b->sc;
    op.Bp = bp;
    return op;
}

static path path_of(const ember__gemm_op *op) {
    if (op->N == 1) return PATH_GEMV;
    if (op->K == 1) return PATH_RANK1;
    if (op->M == 1 && !op->tb && op->K > 1) return PATH_VECMAT;
    return PATH_BLOCKS;
}

static int64_t units_of(const batch *b) {
    switch (b->path) {
    case PATH_BLOCKS: return b->nbm * b->nbn;
    case PATH_VECMAT: return (b->op.N + VECMAT_COLUMNS - 1) / VECMAT_COLUMNS;
    default: return (b->op.M + ROW_RUN - 1) / ROW_RUN;
    }
}

// Work unit u of a product: a block of C, a run of rows or a run of columns.
static void run_unit(const batch *b, const ember__gemm_op *op, int64_t u, const scratch *sz, float *mine) {
    if (b->path == PATH_VECMAT) {
        const int64_t n0 = u * VECMAT_COLUMNS;
        b->kern->vecmat(op, n0, op->N - n0 < VECMAT_COLUMNS ? op->N - n0 : VECMAT_COLUMNS);
        return;
    }
    if (b->path != PATH_BLOCKS) {
        const int64_t m0 = u * ROW_RUN, mb = op->M - m0 < ROW_RUN ? op->M - m0 : ROW_RUN;
        if (b->path == PATH_GEMV) b->kern->gemv(op, m0, mb);
        else b->kern->rank1(op, m0, mb);
        return;
    }
    // Column-major order: consecutive blocks share their columns of the packed B.
    const int64_t bm = u % b->nbm, bn = u / b->nbm;
    const int64_t m0 = bm * b->g.mc, n0 = bn * b->g.nc;
    const int64_t mb = op->M - m0 < b->g.mc ? op->M - m0 : b->g.mc;
    const int64_t nb = op->N - n0 < b->g.nc ? op->N - n0 : b->g.nc;
    b->kern->block(op, &b->g, m0, mb, n0, nb, sz->part ? mine : NULL, sz->ap ? mine + sz->part : NULL);
}

static int packs_b(const batch *b) { return b->path == PATH_BLOCKS && !b->op.bdirect && b->op.K > 0; }

// Product i whole on the calling thread: its B packed into bp, then every unit of C.
static void run_item(const batch *b, int64_t i, float *bp, const scratch *sz) {
    const ember__gemm_op op = item(b, i, bp);
    if (packs_b(b))
        for (int64_t p = 0; p < b->npanels; p++) b->kern->pack_b(op.tb, op.K, op.N, op.B, op.ldb, b->g.nr, p, bp);
    for (int64_t u = 0; u < units_of(b); u++) run_unit(b, &op, u, sz, bp + sz->bp);
}

// One thread, outside any parallel region (entering one, even of one thread, costs about as much
// as a small product): the products in order. The buffer's layout is thread 0's of run_items and
// run_units alike.
static void run_serial(const batch *b, float *buf, const scratch *sz) {
    for (int64_t i = 0; i < b->count; i++) run_item(b, i, buf, sz);
}

// Every product on one thread: each thread packs its products' B into its own buffer.
static void run_items(const batch *b, int nt, float *buf, const scratch *sz) {
#pragma omp parallel num_threads(nt)
    {
        const int tid = ember__thread_id();
        float *bp = buf + (size_t)tid * (size_t)(sz->bp + sz->part + sz->ap);
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < b->count; i++) run_item(b, i, bp, sz);
    }
}

// One product after the other, the threads sharing each: B packed panel by panel, then the
// units of C.
static void run_units(const batch *b, int nt, float *buf, const scratch *sz) {
#pragma omp parallel num_threads(nt)
    {
        const int tid = ember__thread_id();
        float *mine = buf + sz->bp + (size_t)tid * (size_t)(sz->part + sz->ap);
        for (int64_t i = 0; i < b->count; i++) {
            const ember__gemm_op op = item(b, i, buf);
            if (packs_b(b)) {
#pragma omp for schedule(static)
                for (int64_t p = 0; p < b->npanels; p++) b->kern->pack_b(op.tb, op.K, op.N, op.B, op.ldb, b->g.nr, p, buf);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t u = 0; u < units_of(b); u++) run_unit(b, &op, u, sz, mine);
        }
    }
}

// n rounded up to a multiple of 16 floats (64 bytes), false on overflow.
static bool round16(size_t n, size_t *out) {
    if (n > SIZE_MAX / sizeof(float) / 4) return false;
    *out = (n + 15) / 16 * 16;
    return true;
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

    batch b = {.kern = ember__dense_kernels_for(ctx->isa), .sa = sa, .sb = sb, .sc = sc, .count = count};
    EMBER_ASSERT(b.kern != NULL);
    b.kern->geom(M, N, K, ta, &b.g);
    // One tile of rows reads its B once whatever the slice: no partial sums to keep.
    if (M <= b.g.mr && K > b.g.kc) b.g.kc = K;
    if (N > 1 && (double)M * (double)N * (double)K >= MIN_PARALLEL_FMAS) split_blocks(&b.g, M, N);
    // B is read in place when it is not transposed, feeds at most 4 tiles of rows and has whole
    // vectors of columns (N a multiple of 16, every variant's vector width divides it).
    b.op = (ember__gemm_op){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .A = A, .lda = lda, .B = B, .ldb = ldb,
                           .bdirect = !tb && M <= 4 * (int64_t)b.g.mr && N % 16 == 0, .C = C, .ldc = ldc, .bias = e.bias,
                           .relu = e.relu != 0, .accumulate = e.accumulate != 0};
    b.path = path_of(&b.op);
    b.npanels = (N + b.g.nr - 1) / b.g.nr;
    b.nbm = (M + b.g.mc - 1) / b.g.mc;
    b.nbn = (N + b.g.nc - 1) / b.g.nc;

    // Threads: never more than there is work for; the bits do not depend on it.
    const double fmas = (double)M * (double)N * (double)(K > 0 ? K : 1) * (double)count;
    int nt = ember__threads(ctx);
    if (fmas < MIN_PARALLEL_FMAS) nt = 1;
    const int64_t units = units_of(&b);
    const int items = count > 1 && (count >= 2 * (int64_t)nt || units < 2);
    if ((items ? count : units) < nt) nt = (int)(items ? count : units);

    // Buffers: packed B (K x npanels*nr; shared, or per thread for run_items), and per thread the
    // partial sums (mc x nc, when K is sliced) and the packed rows of A (mc rounded to mr x the
    // slice, when a block has several panels), each rounded up to 16 floats so that every part
    // starts 64-byte aligned.
    const int64_t kc = K < b.g.kc ? K : b.g.kc, mb = M < b.g.mc ? M : b.g.mc, mcr = (mb + b.g.mr - 1) / b.g.mr * b.g.mr;
    size_t bp = 0, part = 0, ap = 0, per_thread = 0, shared = 0, total = 0;
    bool ok = ember__mul_size((size_t)K, (size_t)(b.npanels * b.g.nr), &bp) && round16(bp, &bp) &&
              ember__mul_size((size_t)b.g.mc, (size_t)b.g.nc, &part) && round16(part, &part) &&
              ember__mul_size((size_t)mcr, (size_t)kc, &ap) && round16(ap, &ap);
    if (!packs_b(&b)) bp = 0;
    if (b.path != PATH_BLOCKS || K <= b.g.kc) part = 0;
    if (b.path != PATH_BLOCKS || N <= b.g.nr || K == 0) ap = 0;
    if (ok) {
        per_thread = part + ap + (items ? bp : 0);
        shared = items ? 0 : bp;
        ok = ember__mul_size(per_thread, (size_t)nt, &total) && total <= SIZE_MAX / sizeof(float) - shared;
    }
    EMBER_CHECK(ctx, ok, EMBER_ERR_NOMEM, "%s: packing buffers for M %lld x N %lld x K %lld overflow the address space",
                fn, (long long)M, (long long)N, (long long)K);
    total += shared;
    const scratch sz = {.bp = (int64_t)bp, .part = (int64_t)part, .ap = (int64_t)ap};
    float stack[STACK_FLOATS] __attribute__((aligned(64)));
    float *buf = stack, *heap = NULL;
    if (total > STACK_FLOATS) {
        heap = ember__xalloc(ctx, total * sizeof(float), fn);
        if (!heap) return EMBER_ERR_NOMEM;
        buf = heap;
    }
    if (nt == 1) run_serial(&b, buf, &sz);
    else if (items) run_items(&b, nt, buf, &sz);
    else run_units(&b, nt, buf, &sz);
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
