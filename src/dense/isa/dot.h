// The dot interaction's kernels (internal.h: dot_fwd, dot_bwd) for the vector variants, included
// at the end of avx2.c and avx512.c. The variant defines, before including it, VW (floats per
// vector), its pack_b, and over its vector type dvec:
//   dv_zero(), dv_load(p) (aligned, VW floats), dv_bcast(x), dv_fma(a, b, acc) (one rounding),
//   dv_load_n(p, n) / dv_store_n(p, n, v) (the first min(n, VW) lanes; the others read as 0 and
//   never written), dv_store_lanes(dst, v, lo, hi) (lanes [lo, hi) to dst[0 .. hi - lo)).
// Lane l of an accumulator is exactly one element's chain, so the bits are the generic variant's.
#ifndef EMBER_DENSE_ISA_DOT_H
#define EMBER_DENSE_ISA_DOT_H

// Forward: T transposed once (packed as a transposed B), then 8 rows i at a time against VW
// columns j of it, one chain per (i, j) lane over d; only the lanes j > i are stored, at the
// row's run of pairs.
static void dot_fwd(int64_t R, int64_t D, const float *T, float *z, float *tt) {
    const int64_t RP = ember__dot_padded(R);
    pack_b(1, D, R, T, D, RP, 0, tt); // tt[k][j] = T[j][k], [D][RP], zero past R
    for (int64_t i0 = 0; i0 + 1 < R; i0 += 8) {
        const float *row[8];
        for (int r = 0; r < 8; r++) row[r] = T + dot_row(R, i0, r) * D;
        for (int64_t jb = (i0 + 1) / VW * VW; jb < R; jb += VW) {
            dvec acc[8];
            for (int r = 0; r < 8; r++) acc[r] = dv_zero();
            for (int64_t k = 0; k < D; k++) {
                const dvec b = dv_load(tt + k * RP + jb);
                for (int r = 0; r < 8; r++) acc[r] = dv_fma(dv_bcast(row[r][k]), b, acc[r]);
            }
            for (int r = 0; r < 8 && i0 + r + 1 < R; r++) {
                const int64_t i = i0 + r, lo = jb > i + 1 ? jb : i + 1, hi = jb + VW < R ? jb + VW : R;
                if (lo < hi) dv_store_lanes(z + ember__dot_pair(R, i, lo), acc[r], (int)(lo - jb), (int)(hi - jb));
            }
        }
    }
}

// Backward: 8 rows i at a time over VW columns d, the chain over j with S_ij broadcast.
static void dot_bwd(int64_t R, int64_t D, const float *T, const float *gz, const int32_t *idx, float *d0, float *rest) {
    for (int64_t c = 0; c < D; c += VW) {
        const int n = (int)(D - c < VW ? D - c : VW);
        for (int64_t i0 = 0; i0 < R; i0 += 8) {
            const int32_t *ix[8];
            for (int r = 0; r < 8; r++) ix[r] = idx + dot_row(R, i0, r) * R;
            dvec acc[8];
            for (int r = 0; r < 8; r++) acc[r] = dv_zero();
            for (int64_t j = 0; j < R; j++) {
                const dvec t = dv_load_n(T + j * D + c, n);
                for (int r = 0; r < 8; r++) acc[r] = dv_fma(dv_bcast(gz[ix[r][j]]), t, acc[r]);
            }
            for (int r = 0; r < 8 && i0 + r < R; r++) {
                const int64_t i = i0 + r;
                dv_store_n((i == 0 ? d0 : rest + (i - 1) * D) + c, n, acc[r]);
            }
        }
    }
}

#endif
