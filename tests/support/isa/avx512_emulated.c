// The AVX-512 kernel variant compiled with SIMDe (portable implementations of the x86
// intrinsics, Debian's libsimde-dev) for hosts without AVX-512, so that unit.isa runs its code
// paths (masks, permutes, conversions, stochastic rounding) bit for bit against the generic
// variant on every host. Test-only: the library's own avx512.c object is the one that ships.
// The table is ember__tbe_kernels_avx512_emulated; unit.isa installs it on a collection.
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <stdint.h>

// Intrinsics SIMDe 0.7 lacks, built from the host's F16C/AVX2 halves (real conversions, not the
// library's software ones, so the comparison stays independent).
static inline simde__m512i emu_cvtepu16_epi32(simde__m256i h) {
    uint16_t in[16];
    uint32_t out[16];
    simde_mm256_storeu_si256((simde__m256i *)in, h);
    for (int i = 0; i < 16; i++) out[i] = in[i];
    return simde_mm512_loadu_si512(out);
}
static inline simde__m512 emu_cvtph_ps(simde__m256i h) {
    uint16_t in[16];
    float out[16];
    simde_mm256_storeu_si256((simde__m256i *)in, h);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)in)));
    _mm256_storeu_ps(out + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 8))));
    return simde_mm512_loadu_ps(out);
}
static inline simde__m256i emu_cvtps_ph(simde__m512 x, int imm) {
    float in[16];
    uint16_t out[16];
    (void)imm; // always _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC in the kernels
    simde_mm512_storeu_ps(in, x);
    _mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(_mm256_loadu_ps(in), 0));
    _mm_storeu_si128((__m128i *)(out + 8), _mm256_cvtps_ph(_mm256_loadu_ps(in + 8), 0));
    return simde_mm256_loadu_si256((const simde__m256i *)out);
}
static inline simde__mmask16 emu_cmpgt_epu32_mask(simde__m512i a, simde__m512i b) {
    uint32_t x[16], y[16];
    simde__mmask16 m = 0;
    simde_mm512_storeu_si512(x, a);
    simde_mm512_storeu_si512(y, b);
    for (int i = 0; i < 16; i++) m |= (simde__mmask16)((x[i] > y[i]) << i);
    return m;
}
static inline simde__m512 emu_cvtepi32_ps(simde__m512i a) {
    int32_t x[16];
    float y[16];
    simde_mm512_storeu_si512(x, a);
    for (int i = 0; i < 16; i++) y[i] = (float)x[i];
    return simde_mm512_loadu_ps(y);
}
// Truncation; out of range or NaN gives INT32_MIN, the hardware's "integer indefinite".
static inline simde__m512i emu_cvttps_epi32(simde__m512 a) {
    float x[16];
    int32_t y[16];
    simde_mm512_storeu_ps(x, a);
    for (int i = 0; i < 16; i++) y[i] = x[i] > -2147483648.0f && x[i] < 2147483648.0f ? (int32_t)x[i] : INT32_MIN;
    return simde_mm512_loadu_si512(y);
}
static inline simde__m256i emu_cvtepi32_epi16(simde__m512i a) {
    int32_t x[16];
    int16_t y[16];
    simde_mm512_storeu_si512(x, a);
    for (int i = 0; i < 16; i++) y[i] = (int16_t)(uint16_t)(uint32_t)x[i]; // truncation, as vpmovdw
    return simde_mm256_loadu_si256((const simde__m256i *)y);
}
// Masked loads and stores touch only the lanes of the mask (the kernels rely on that at row ends).
static inline simde__m512 emu_maskz_loadu_ps(simde__mmask16 m, const void *p) {
    float y[16];
    for (int i = 0; i < 16; i++) y[i] = (m >> i) & 1 ? ((const float *)p)[i] : 0.0f;
    return simde_mm512_loadu_ps(y);
}
static inline void emu_mask_storeu_ps(void *p, simde__mmask16 m, simde__m512 a) {
    float x[16];
    simde_mm512_storeu_ps(x, a);
    for (int i = 0; i < 16; i++)
        if ((m >> i) & 1) ((float *)p)[i] = x[i];
}
static inline simde__m256i emu_maskz_loadu_epi16(simde__mmask16 m, const void *p) {
    uint16_t y[16];
    for (int i = 0; i < 16; i++) y[i] = (m >> i) & 1 ? ((const uint16_t *)p)[i] : 0;
    return simde_mm256_loadu_si256((const simde__m256i *)y);
}
static inline void emu_mask_storeu_epi16(void *p, simde__mmask16 m, simde__m256i a) {
    uint16_t x[16];
    simde_mm256_storeu_si256((simde__m256i *)x, a);
    for (int i = 0; i < 16; i++)
        if ((m >> i) & 1) ((uint16_t *)p)[i] = x[i];
}
#define _mm512_cvtepi32_epi16 emu_cvtepi32_epi16
#define _mm512_maskz_loadu_ps emu_maskz_loadu_ps
#define _mm512_mask_storeu_ps emu_mask_storeu_ps
#define _mm256_maskz_loadu_epi16 emu_maskz_loadu_epi16
#define _mm256_mask_storeu_epi16 emu_mask_storeu_epi16
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_cvttps_epi32 emu_cvttps_epi32
// 32-bit lane arithmetic wraps (as the hardware does); SIMDe's portable versions compute it in
// signed int, which UndefinedBehaviorSanitizer rightly flags.
#define EMU_U32_OP(name, expr)                                                                      \
    static inline simde__m512i name(simde__m512i a, simde__m512i b) {                              \
        uint32_t x[16], y[16];                                                                      \
        simde_mm512_storeu_si512(x, a);                                                             \
        simde_mm512_storeu_si512(y, b);                                                             \
        for (int i = 0; i < 16; i++) x[i] = (expr);                                                 \
        return simde_mm512_loadu_si512(x);                                                          \
    }
EMU_U32_OP(emu_add_epi32, x[i] + y[i])
EMU_U32_OP(emu_sub_epi32, x[i] - y[i])
EMU_U32_OP(emu_mullo_epi32, x[i] * y[i])
static inline simde__m512i emu_mask_add_epi32(simde__m512i src, simde__mmask16 m, simde__m512i a, simde__m512i b) {
    uint32_t s[16], x[16], y[16];
    simde_mm512_storeu_si512(s, src);
    simde_mm512_storeu_si512(x, a);
    simde_mm512_storeu_si512(y, b);
    for (int i = 0; i < 16; i++) s[i] = (m >> i) & 1 ? x[i] + y[i] : s[i];
    return simde_mm512_loadu_si512(s);
}
#undef _mm512_add_epi32
#define _mm512_add_epi32 emu_add_epi32
#undef _mm512_sub_epi32
#define _mm512_sub_epi32 emu_sub_epi32
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32 emu_mullo_epi32
#undef _mm512_mask_add_epi32
#define _mm512_mask_add_epi32 emu_mask_add_epi32
#undef _mm512_cmpgt_epu32_mask
#define _mm512_cmpgt_epu32_mask emu_cmpgt_epu32_mask
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps emu_cvtph_ps
#undef _mm512_cvtps_ph
#define _mm512_cvtps_ph emu_cvtps_ph

#define ember__tbe_kernels_avx512 ember__tbe_kernels_avx512_emulated
#include "tbe/cpu/isa/avx512.c"
