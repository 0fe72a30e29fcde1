// The generic dense variant: portable C, one fmaf per step of each element's chain (C99's fmaf
// rounds once, as the vector instructions do; glibc runs the hardware instruction where the CPU
// has one). The reference the wider variants are compared against bit for bit; correct rather
// than fast.
#define EMBER__DENSE_COLSUM_W 16
#include "dense/isa/impl.h"

#define MR 4
#define NR 8

static void geom(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g) {
    (void)M, (void)N, (void)K, (void)ta;
    *g = (ember__gemm_geom){.mr = MR, .nr = NR, .kc = 256, .mc = 64, .nc = 256};
}

static inline void copy_short(float *d, const float *s, int n) {
    for (int i = 0; i < n; i++) d[i] = s[i];
}

static void pack_b(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, int64_t nr, int64_t p, float *dst) {
    pack_b_portable(tb, K, N, B, ldb, nr, p, dst);
}

static void gemv(const ember__gemm_op *op, int64_t m0, int64_t mb) { gemv_portable(op, m0, mb); }

static void rank1(const ember__gemm_op *op, int64_t m0, int64_t mb) { rank1_portable(op, m0, mb); }

static void vecmat(const ember__gemm_op *op, int64_t n0, int64_t nb) { vecmat_portable(op, n0, nb); }

static void dot_fwd(int64_t R, int64_t D, const float *T, float *z, float *tt) {
    (void)tt;
    dot_fwd_portable(R, D, T, z);
}

static void dot_bwd(int64_t R, int64_t D, const float *T, const float *gz, const int32_t *idx, float *d0, float *rest) {
    dot_bwd_portable(R, D, T, gz, idx, d0, rest);
}

static void tile(const tile_args *t) {
    float acc[MR][NR];
    for (int r = 0; r < t->mr; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = t->first || j >= t->nr ? 0.0f : t->p[r * t->ldp + j];
    for (int64_t k = 0; k < t->kb; k++) {
        const float *b = t->b + k * t->ldb;
        for (int r = 0; r < t->mr; r++) {
            const float a = t->ta ? t->a[k * t->lda + r] : t->a[r * t->lda + k];
            for (int j = 0; j < t->nr; j++) acc[r][j] = fmaf(a, b[j], acc[r][j]);
        }
    }
    for (int r = 0; r < t->mr; r++) {
        if (!t->last) {
            for (int j = 0; j < t->nr; j++) t->p[r * t->ldp + j] = acc[r][j];
            continue;
        }
        float *c = t->c + r * t->ldc;
        for (int j = 0; j < t->nr; j++)
            c[j] = epilogue1(acc[r][j], t->accumulate ? c + j : NULL, t->bias ? t->bias + j : NULL, t->relu);
    }
}

EMBER__DENSE_KERNELS(generic, EMBER_ISA_GENERIC)
