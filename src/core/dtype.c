// The dtype traits table: one row per ember_dtype, the only place a dtype's size, name or class
// is written down.
#include <string.h>

#include "core/dtype.h"
#include "core/internal.h"

static const struct {
    const char *name;
    size_t size;
    int is_16bit, storage, wire;
} TRAITS[EMBER_DTYPE_COUNT] = {
    [EMBER_DTYPE_F32] = {"fp32", 4, 0, 1, 1},
    [EMBER_DTYPE_F16] = {"fp16", 2, 1, 1, 1},
    [EMBER_DTYPE_BF16] = {"bf16", 2, 1, 1, 1},
    [EMBER_DTYPE_I64] = {"int64", 8, 0, 0, 0},
    [EMBER_DTYPE_F64] = {"fp64", 8, 0, 0, 0},
    [EMBER_DTYPE_I8] = {"int8", 1, 0, 0, 1},
    [EMBER_DTYPE_FP8_E4M3] = {"fp8_e4m3", 1, 0, 0, 1},
    [EMBER_DTYPE_FP8_E5M2] = {"fp8_e5m2", 1, 0, 0, 1},
};

static int known(ember_dtype dt) { return (int)dt >= 0 && (int)dt < EMBER_DTYPE_COUNT; }

size_t ember_dtype_size(ember_dtype dt) { return known(dt) ? TRAITS[dt].size : 0; }
const char *ember_dtype_name(ember_dtype dt) { return known(dt) ? TRAITS[dt].name : "unknown"; }
int ember_dtype_is_16bit(ember_dtype dt) { return known(dt) && TRAITS[dt].is_16bit; }
int ember_dtype_is_storage(ember_dtype dt) { return known(dt) && TRAITS[dt].storage; }
int ember_dtype_is_wire(ember_dtype dt) { return known(dt) && TRAITS[dt].wire; }

ember_status ember_dtype_parse(const char *name, ember_dtype *out) {
    for (int d = 0; name && out && d < EMBER_DTYPE_COUNT; d++)
        if (strcmp(name, TRAITS[d].name) == 0) {
            *out = (ember_dtype)d;
            return EMBER_OK;
        }
    return EMBER_ERR_INVALID_ARG;
}

void ember__store_row(ember_dtype dt, void *dst, const float *src, int32_t n) {
    switch (dt) {
    case EMBER_DTYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case EMBER_DTYPE_BF16:
        for (int32_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ember__f32_to_bf16(src[i]);
        break;
    case EMBER_DTYPE_F16:
        for (int32_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ember__f32_to_f16(src[i]);
        break;
    default: break; // not a storage dtype: refused where a table is configured
    }
}

int64_t ember__first_nonfinite(ember_dtype dt, const void *src, int64_t n, float *value) {
    if (dt == EMBER_DTYPE_F32 && src) {
        // fp32 (dL/dy: megabytes each backward): first one pass testing the exponent bits with an
        // OR, which vectorises (a float test with an early exit would not); only a failure is
        // walked again below, in order, to find the first.
        uint32_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, (const float *)src + i, 4);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (!bad) return -1;
    }
    for (int64_t i = 0; src && i < n; i++) {
        float v;
        switch (dt) {
        case EMBER_DTYPE_F32: memcpy(&v, (const float *)src + i, sizeof v); break;
        case EMBER_DTYPE_BF16: v = ember__bf16_to_f32(((const uint16_t *)src)[i]); break;
        case EMBER_DTYPE_F16: v = ember__f16_to_f32(((const uint16_t *)src)[i]); break;
        default: return -1;
        }
        if ((ember__f32_bits(v) & 0x7f800000u) == 0x7f800000u) { // exponent all ones: Inf or NaN
            *value = v;
            return i;
        }
    }
    return -1;
}

void ember__load_row(ember_dtype dt, const void *src, float *dst, int32_t n) {
    switch (dt) {
    case EMBER_DTYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case EMBER_DTYPE_BF16:
        for (int32_t i = 0; i < n; i++) dst[i] = ember__bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case EMBER_DTYPE_F16:
        for (int32_t i = 0; i < n; i++) dst[i] = ember__f16_to_f32(((const uint16_t *)src)[i]);
        break;
    default: break; // not a storage dtype
    }
}
