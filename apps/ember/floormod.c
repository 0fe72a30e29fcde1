// floormod.c — floormod_row (floormod.h): the 26 columns of a day-file row reduced at once, with
// an AVX2 path chosen at run time (compiled for it by a target attribute; the rest of the program
// assumes nothing of the CPU).
#include "floormod.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FLOORMOD_HAVE_AVX2 1

__attribute__((target("avx2"))) static void apply_avx2(const floormod_row *m, const int32_t *v, int64_t *out) {
    const __m256d zero = _mm256_setzero_pd(), two52 = _mm256_set1_pd(4503599627370496.0);
    const __m256i two52_bits = _mm256_set1_epi64x(0x4330000000000000LL);
    int i = 0;
    for (; i + 4 <= m->n; i += 4) {
        const __m256d d = _mm256_loadu_pd(m->d + i), inv = _mm256_loadu_pd(m->inv + i);
        const __m256d x = _mm256_cvtepi32_pd(_mm_loadu_si128((const __m128i *)(const void *)(v + i)));
        const __m256d q = _mm256_cvtepi32_pd(_mm256_cvttpd_epi32(_mm256_mul_pd(x, inv))); // |q| <= 2^31
        __m256d r = _mm256_sub_pd(x, _mm256_mul_pd(q, d));                                  // in (-2d, 2d)
        r = _mm256_add_pd(r, _mm256_and_pd(_mm256_cmp_pd(r, zero, _CMP_LT_OQ), d));
        r = _mm256_add_pd(r, _mm256_and_pd(_mm256_cmp_pd(r, zero, _CMP_LT_OQ), d));
        r = _mm256_sub_pd(r, _mm256_and_pd(_mm256_cmp_pd(r, d, _CMP_GE_OQ), d)); // in [0, d)
        // r + 2^52 holds r's integer in its low mantissa bits.
        const __m256i o = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(r, two52)), two52_bits);
        _mm256_storeu_si256((__m256i *)(void *)(out + i), o);
    }
    for (; i < m->n; i++) out[i] = floormod32(v[i], &m->f[i]);
}
#endif

void floormod_row_init(floormod_row *m, const int64_t *divisors, int n, int vec) {
    m->n = n;
    m->vec = 0;
#ifdef FLOORMOD_HAVE_AVX2
    m->vec = vec;
#else
    (void)vec;
#endif
    for (int i = 0; i < n; i++) {
        m->f[i] = floormod_of(divisors[i]);
        m->d[i] = (double)divisors[i];
        m->inv[i] = 1.0 / m->d[i];
        if (!m->f[i].small) m->vec = 0;
    }
}

void floormod_row_apply(const floormod_row *m, const int32_t *v, int64_t *out) {
#ifdef FLOORMOD_HAVE_AVX2
    if (m->vec) {
        apply_avx2(m, v, out);
        return;
    }
#endif
    for (int i = 0; i < m->n; i++) out[i] = floormod32(v[i], &m->f[i]);
}
