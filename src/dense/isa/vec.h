// The kernels written once over a vector variant's vectors (internal.h: dot_fwd, dot_bwd, rank1,
// vecmat), included at the end of avx2.c and avx512.c. The variant defines, before including it,
// VW (floats per vector), its pack_b, and over its vector type dvec:
//   dv_zero(), dv_load(p) (aligned, VW floats), dv_bcast(x), dv_fma(a, b, acc) (one rounding),
//   dv_add(a, b), dv_relu(s) (s <= 0 ? 0 : s, a NaN kept),
//   dv_load_n(p, n) / dv_store_n(p, n, v) (the first min(n, VW) lanes; the others read as 0 and
//   never written), dv_store_lanes(dst, v, lo, hi) (lanes [lo, hi) to dst[0 .. hi - lo)).
// Lane l of an accumulator is exactly one element's chain, so the bits are the generic variant's.
#ifndef EMBER_DENSE_ISA_VEC_H
#define EMBER_DENSE_ISA_VEC_H

// Forward: T transposed once (packed as a transposed B), then up to 8 rows i at a time (MR, a
// constant in each instance: a last group of 3 rows costs 3 chains a lane, not 8) against VW
// columns j of it, one chain per (i, j) lane over d; only the lanes j > i are stored, at the row's
// run of pairs.
static inline __attribute__((always_inline)) void dot_fwd_rows(int64_t R, int64_t D, const float *T, float *z,
                                                               const float *tt, int64_t i0, const int MR) {
    const int64_t RP = ember__dot_padded(R);
    const float *row[8];
    for (int r = 0; r < MR; r++) row[r] = T + (i0 + r) * D;
    for (int64_t jb = (i0 + 1) / VW * VW; jb < R; jb += VW) {
        dvec acc[8];
        for (int r = 0; r < MR; r++) acc[r] = dv_zero();
        for (int64_t k = 0; k < D; k++) {
            const dvec b = dv_load(tt + k * RP + jb);
            for (int r = 0; r < MR; r++) acc[r] = dv_fma(dv_bcast(row[r][k]), b, acc[r]);
        }
        for (int r = 0; r < MR && i0 + r + 1 < R; r++) {
            const int64_t i = i0 + r, lo = jb > i + 1 ? jb : i + 1, hi = jb + VW < R ? jb + VW : R;
            if (lo < hi) dv_store_lanes(z + ember__dot_pair(R, i, lo), acc[r], (int)(lo - jb), (int)(hi - jb));
        }
    }
}

static void dot_fwd(int64_t R, int64_t D, const float *T, float *z, float *tt) {
    pack_b(1, D, R, T, D, ember__dot_padded(R), 0, tt); // tt[k][j] = T[j][k], [D][RP], zero past R
    // Row R-1 has no pair j > i: the groups cover rows 0 .. R-2.
    for (int64_t i0 = 0; i0 + 1 < R; i0 += 8) {
        switch (R - 1 - i0 < 8 ? R - 1 - i0 : 8) {
        case 1: dot_fwd_rows(R, D, T, z, tt, i0, 1); break;
        case 2: dot_fwd_rows(R, D, T, z, tt, i0, 2); break;
        case 3: dot_fwd_rows(R, D, T, z, tt, i0, 3); break;
        case 4: dot_fwd_rows(R, D, T, z, tt, i0, 4); break;
        case 5: dot_fwd_rows(R, D, T, z, tt, i0, 5); break;
        case 6: dot_fwd_rows(R, D, T, z, tt, i0, 6); break;
        case 7: dot_fwd_rows(R, D, T, z, tt, i0, 7); break;
        default: dot_fwd_rows(R, D, T, z, tt, i0, 8); break;
        }
    }
}

// Rows of S a dot_bwd row group gathers at once (8 rows of up to this many entries, on the stack).
#define DOT_BWD_GATHER 512

// Columns [c, c + n) of a backward row group: acc[r] += S_ij T_j over j in order, S_ij read from the
// gathered rows s (G) or through the pair index (ix into gz).
static inline __attribute__((always_inline)) void dot_bwd_chunk(int64_t R, int64_t D, const float *T, int64_t c, int n,
                                                                const float *s, const float *gz,
                                                                const int32_t *const *ix, const int G, dvec *acc) {
    for (int64_t j = 0; j < R; j++) {
        const dvec t = dv_load_n(T + j * D + c, n);
        for (int r = 0; r < 8; r++) acc[r] = dv_fma(dv_bcast(G ? s[r * R + j] : gz[ix[r][j]]), t, acc[r]);
    }
}

// Backward: 8 rows i at a time over VW columns d, the chain over j with S_ij broadcast. With more
// than one chunk of columns (D > VW) the group's S_ij are gathered from gz once (R <=
// DOT_BWD_GATHER) and read back for every chunk: one load an FMA instead of an index and a value.
static void dot_bwd(int64_t R, int64_t D, const float *T, const float *gz, const int32_t *idx, float *d0, float *rest) {
    float s[8 * DOT_BWD_GATHER];
    const int gathered = D > VW && R <= DOT_BWD_GATHER;
    for (int64_t i0 = 0; i0 < R; i0 += 8) {
        const int32_t *ix[8];
        for (int r = 0; r < 8; r++) ix[r] = idx + dot_row(R, i0, r) * R;
        if (gathered)
            for (int r = 0; r < 8; r++)
                for (int64_t j = 0; j < R; j++) s[r * R + j] = gz[ix[r][j]];
        for (int64_t c = 0; c < D; c += VW) {
            const int n = (int)(D - c < VW ? D - c : VW);
            dvec acc[8];
            for (int r = 0; r < 8; r++) acc[r] = dv_zero();
            if (gathered) dot_bwd_chunk(R, D, T, c, n, s, gz, ix, 1, acc);
            else dot_bwd_chunk(R, D, T, c, n, s, gz, ix, 0, acc);
            for (int r = 0; r < 8 && i0 + r < R; r++) {
                const int64_t i = i0 + r;
                dv_store_n((i == 0 ? d0 : rest + (i - 1) * D) + c, n, acc[r]);
            }
        }
    }
}

// The epilogue of n <= VW finished chains s in its order (impl.h: epilogue1): c + s, + bias, relu.
static inline __attribute__((always_inline)) dvec dv_epilogue(dvec s, const float *c, const float *bias, int n,
                                                              int accumulate, int relu) {
    if (accumulate) s = dv_add(dv_load_n(c, n), s);
    if (bias) s = dv_add(s, dv_load_n(bias, n));
    if (relu) s = dv_relu(s);
    return s;
}

// One vector of a rank-1 row: the chain fma(a, b, +0), then the epilogue.
static inline __attribute__((always_inline)) dvec rank1_vec(dvec a, dvec b, const float *c, const float *bias,
                                                            int n, int accumulate, int relu) {
    return dv_epilogue(dv_fma(a, b, dv_zero()), c, bias, n, accumulate, relu);
}

// K = 1: rows [m0, m0 + mb) of C, VW columns at a time (the row's tail under a mask), each
// element the one-step chain fma(A(m,0), B(0,n), +0) and the epilogue (impl.h: rank1_row_b,
// rank1_sa).
static void rank1(const ember__gemm_op *op, int64_t m0, int64_t mb) {
    float bb[RANK1_CHUNK] __attribute__((aligned(64)));
    const float *A = op->A;
    const int64_t N = op->N, ldc = op->ldc, sa = rank1_sa(op);
    const int accumulate = op->accumulate, relu = op->relu, plain = !accumulate && !relu && !op->bias;
    for (int64_t n0 = 0; n0 < N; n0 += RANK1_CHUNK) {
        const int64_t w = N - n0 < RANK1_CHUNK ? N - n0 : RANK1_CHUNK, wv = w / VW * VW;
        const float *b = rank1_row_b(op, n0, w, bb);
        const float *bias = op->bias ? op->bias + n0 : NULL;
        float *c = op->C + m0 * ldc + n0;
        for (int64_t m = m0; m < m0 + mb; m++, c += ldc) {
            const dvec a = dv_bcast(A[m * sa]);
            if (plain)
                for (int64_t j = 0; j < wv; j += VW) dv_store_n(c + j, VW, dv_fma(a, dv_load_n(b + j, VW), dv_zero()));
            else
                for (int64_t j = 0; j < wv; j += VW)
                    dv_store_n(c + j, VW, rank1_vec(a, dv_load_n(b + j, VW), c + j, bias ? bias + j : NULL, VW,
                                                    accumulate, relu));
            if (wv < w) {
                const int n = (int)(w - wv);
                dv_store_n(c + wv, n, rank1_vec(a, dv_load_n(b + wv, n), c + wv, bias ? bias + wv : NULL, n,
                                                accumulate, relu));
            }
        }
    }
}

// M = 1: NV vectors of C's row from column j0 (the last one `last` columns), the NV chains
// advancing together over k (B's row k read in place), then the epilogue. NV is a constant in
// each call below, so the accumulators stay in registers.
static inline __attribute__((always_inline)) void vecmat_group(const ember__gemm_op *op, int64_t j0, const int NV,
                                                               int last) {
    const float *A = op->A, *b = op->B + j0;
    const int64_t K = op->K, ldb = op->ldb, sa = vecmat_sa(op);
    dvec acc[8];
    for (int v = 0; v < NV; v++) acc[v] = dv_zero();
    for (int64_t k = 0; k < K; k++, b += ldb) {
        const dvec a = dv_bcast(A[k * sa]);
        for (int v = 0; v + 1 < NV; v++) acc[v] = dv_fma(a, dv_load_n(b + v * VW, VW), acc[v]);
        acc[NV - 1] = dv_fma(a, dv_load_n(b + (NV - 1) * VW, last), acc[NV - 1]);
    }
    for (int v = 0; v < NV; v++) {
        const int n = v + 1 < NV ? VW : last;
        float *c = op->C + j0 + v * VW;
        dv_store_n(c, n, dv_epilogue(acc[v], c, op->bias ? op->bias + j0 + v * VW : NULL, n, op->accumulate, op->relu));
    }
}

// M = 1: C's row in groups of up to 8 vectors of columns (8 chains in flight: the FMA latency
// times its two ports).
static void vecmat(const ember__gemm_op *op, int64_t n0, int64_t nb) {
    for (int64_t j0 = n0; j0 < n0 + nb; j0 += 8 * VW) {
        const int64_t w = n0 + nb - j0 < 8 * VW ? n0 + nb - j0 : 8 * VW;
        const int nv = (int)((w + VW - 1) / VW), last = (int)(w - (nv - 1) * VW);
        switch (nv) {
        case 1: vecmat_group(op, j0, 1, last); break;
        case 2: vecmat_group(op, j0, 2, last); break;
        case 3: vecmat_group(op, j0, 3, last); break;
        case 4: vecmat_group(op, j0, 4, last); break;
        case 5: vecmat_group(op, j0, 5, last); break;
        case 6: vecmat_group(op, j0, 6, last); break;
        case 7: vecmat_group(op, j0, 7, last); break;
        default: vecmat_group(op, j0, 8, last); break;
        }
    }
}

#endif
