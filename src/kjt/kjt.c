// KJT validation at the API boundary (docs/semantics.md §1).
#include <math.h>
#include <string.h>

#include "kjt/internal.h"

EMBER__ENUM_NAMES(ember_bounds_mode, ember_bounds_mode, "error", "clamp", "skip")

int64_t ember_kjt_bag_start(const ember_kjt *kjt, int64_t bag) {
    if (kjt->offsets) return kjt->offsets[bag];
    int64_t s = 0;
    for (int64_t i = 0; i < bag; i++) s += kjt->lengths[i];
    return s;
}

const char *ember__feature_name(const char *const *names, int32_t f, char *buf, size_t n) {
    if (names && names[f]) snprintf(buf, n, "feature '%s'", names[f]);
    else snprintf(buf, n, "feature %d", (int)f);
    return buf;
}

// Bag i's length from the offsets. Wherever the validator asks, offsets[i] >= 0 (offsets[0] is 0
// and no earlier length was negative), so only an offsets[i + 1] near INT64_MIN could overflow
// the difference: it saturates to INT64_MIN, a negative length all the same.
static int64_t offsets_len(const int64_t *offsets, int64_t i) {
    return offsets[i + 1] < INT64_MIN + offsets[i] ? INT64_MIN : offsets[i + 1] - offsets[i];
}

ember_status ember__kjt_validate(ember_ctx *ctx, const char *caller, const ember_kjt *kjt, int32_t expected_features,
                                 const int64_t *rows_per_feature, const char *const *feature_names,
                                 ember_bounds_mode mode, int64_t *num_out_of_range) {
    char fb[96];
    EMBER_CHECK(ctx, kjt != NULL, EMBER_ERR_INVALID_ARG, "%s: kjt is NULL", caller);
    EMBER_CHECK(ctx, kjt->num_features == expected_features, EMBER_ERR_INVALID_ARG,
                "%s: kjt has %d features, the collection expects %d", caller, (int)kjt->num_features,
                (int)expected_features);
    EMBER_CHECK(ctx, kjt->batch_size >= 0, EMBER_ERR_INVALID_ARG, "%s: negative batch size %d", caller,
                (int)kjt->batch_size);
    EMBER_CHECK(ctx, !kjt->inverse_indices && !kjt->feature_batch_sizes, EMBER_ERR_INVALID_ARG,
                "%s: %s", caller,
                kjt->feature_batch_sizes ? "a KJT with feature_batch_sizes (VBE) goes through its padded KJT"
                                         : "inverse_indices without feature_batch_sizes");
    EMBER_CHECK(ctx, kjt->nnz >= 0, EMBER_ERR_INVALID_ARG, "%s: negative nnz %lld", caller, (long long)kjt->nnz);
    EMBER_CHECK(ctx, kjt->lengths || kjt->offsets, EMBER_ERR_INVALID_ARG, "%s: kjt has neither lengths nor offsets",
                caller);
    EMBER_CHECK(ctx, kjt->nnz == 0 || kjt->values, EMBER_ERR_INVALID_ARG, "%s: values is NULL with nnz %lld",
                caller, (long long)kjt->nnz);
    const int32_t B = kjt->batch_size;
    const int64_t nbags = (int64_t)kjt->num_features * B;
    if (kjt->offsets) {
        EMBER_CHECK(ctx, kjt->offsets[0] == 0, EMBER_ERR_INVALID_ARG, "%s: offsets[0] = %lld, expected 0", caller,
                    (long long)kjt->offsets[0]);
    }
    int64_t sum = 0;
    for (int64_t i = 0; i < nbags; i++) {
        int64_t len;
        if (kjt->lengths) {
            len = kjt->lengths[i];
            if (kjt->offsets && offsets_len(kjt->offsets, i) != len) {
                return ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: %s bag %lld: length %lld disagrees with offsets",
                                    caller,
                                    ember__feature_name(feature_names, (int32_t)(i / (B ? B : 1)), fb, sizeof fb),
                                    (long long)(i % (B ? B : 1)), (long long)len);
            }
        } else {
            len = offsets_len(kjt->offsets, i);
        }
        if (len < 0) {
            return ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: %s bag %lld: negative length %lld", caller,
                                ember__feature_name(feature_names, (int32_t)(i / B), fb, sizeof fb), (long long)(i % B),
                                (long long)len);
        }
        sum += len;
        if (sum > kjt->nnz) break;
    }
    EMBER_CHECK(ctx, sum == kjt->nnz, EMBER_ERR_INVALID_ARG, "%s: sum of lengths %s nnz %lld", caller,
                sum > kjt->nnz ? "exceeds" : "is less than", (long long)kjt->nnz);
    if (kjt->weights && kjt->nnz > 0) {
        // One pass over the weights; only a failure walks the bags to name the one holding it.
        int64_t first = kjt->nnz;
        for (int64_t j = 0; j < kjt->nnz; j++)
            if (!isfinite(kjt->weights[j])) {
                first = j;
                break;
            }
        if (first < kjt->nnz) {
            int64_t bag = 0, start = 0;
            for (; bag < nbags; bag++) {
                int64_t len = kjt->lengths ? kjt->lengths[bag] : kjt->offsets[bag + 1] - kjt->offsets[bag];
                if (first < start + len) break;
                start += len;
            }
            return ember__error(ctx, EMBER_ERR_NUMERIC, "%s: %s bag %lld: weight %lld of the bag is %g (not finite)",
                                caller, ember__feature_name(feature_names, (int32_t)(bag / B), fb, sizeof fb),
                                (long long)(bag % B), (long long)(first - start), (double)kjt->weights[first]);
        }
    }
    int64_t bad = 0;
    if (rows_per_feature && kjt->nnz > 0) {
        int64_t start = 0;
        for (int32_t f = 0; f < kjt->num_features; f++) {
            const int64_t rows = rows_per_feature[f]; // < 0: any id (a hashed table)
            int64_t end = start;
            for (int32_t b = 0; b < B; b++) {
                int64_t bag = (int64_t)f * B + b;
                int64_t len = kjt->lengths ? kjt->lengths[bag] : kjt->offsets[bag + 1] - kjt->offsets[bag];
                for (int64_t j = end; j < end + len; j++) {
                    int64_t id = kjt->values[j];
                    if (rows >= 0 && (id < 0 || id >= rows)) {
                        if (mode == EMBER_BOUNDS_ERROR) {
                            return ember__error(ctx, EMBER_ERR_OUT_OF_RANGE,
                                                "%s: %s bag %d: id %lld outside [0, %lld)", caller,
                                                ember__feature_name(feature_names, f, fb, sizeof fb), (int)b,
                                                (long long)id,
                                                (long long)rows);
                        }
                        bad++;
                    }
                }
                end += len;
            }
            start = end;
        }
    }
    if (num_out_of_range) *num_out_of_range = bad;
    return EMBER_OK;
}

ember_status ember_kjt_validate(ember_ctx *ctx, const ember_kjt *kjt, int32_t expected_features,
                                const int64_t *rows_per_feature, ember_bounds_mode mode, int64_t *num_out_of_range) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_kjt_validate";
    EMBER_CHECK(ctx, mode >= EMBER_BOUNDS_ERROR && mode <= EMBER_BOUNDS_SKIP, EMBER_ERR_INVALID_ARG,
                "%s: unknown bounds mode %d", fn, (int)mode);
    if (!ember__kjt_is_vbe(kjt))
        return ember__kjt_validate(ctx, fn, kjt, expected_features, rows_per_feature, NULL, mode, num_out_of_range);
    ember__buf lengths = {0};
    ember_kjt padded;
    ember_status st = ember__vbe_pad(ctx, fn, kjt, expected_features, NULL, &lengths, &padded);
    if (st == EMBER_OK)
        st = ember__kjt_validate(ctx, fn, &padded, expected_features, rows_per_feature, NULL, mode, num_out_of_range);
    ember__buf_free(ctx, &lengths);
    return st;
}

// Four independent lanes of multiply-xorshift mixing, so the digest runs at memory speed.
#define DIGEST_K 0x9E3779B97F4A7C15ull
static void mix(uint64_t h[4], const uint64_t *v, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) h[k] = (h[k] ^ v[i + k]) * DIGEST_K;
    for (; i < n; i++) h[0] = (h[0] ^ v[i]) * DIGEST_K;
}

uint64_t ember__kjt_digest(const ember_kjt *kjt) {
    uint64_t h[4] = {1, 2, 3, 4};
    const uint64_t head[3] = {(uint64_t)kjt->num_features, (uint64_t)kjt->batch_size, (uint64_t)kjt->nnz};
    mix(h, head, 3);
    int64_t nbags = (int64_t)kjt->num_features * kjt->batch_size;
    if (ember__kjt_is_vbe(kjt)) {
        nbags = 0;
        for (int32_t f = 0; f < kjt->num_features; f++) {
            nbags += kjt->feature_batch_sizes[f];
            h[f & 3] = (h[f & 3] ^ ((uint64_t)kjt->feature_batch_sizes[f] | (1ull << 41))) * DIGEST_K;
        }
        const int32_t *inv = kjt->inverse_indices;
        const int64_t ninv = inv ? (int64_t)kjt->num_features * kjt->batch_size : 0;
        h[0] = (h[0] ^ (inv ? 3u : 5u)) * DIGEST_K;
        for (int64_t i = 0; i < ninv; i++) h[i & 3] = (h[i & 3] ^ ((uint64_t)inv[i] | (1ull << 42))) * DIGEST_K;
    }
    for (int64_t i = 0; i < nbags; i++) {
        uint64_t len = kjt->lengths ? (uint64_t)kjt->lengths[i] : (uint64_t)(kjt->offsets[i + 1] - kjt->offsets[i]);
        h[i & 3] = (h[i & 3] ^ len) * DIGEST_K;
    }
    if (kjt->nnz > 0) mix(h, (const uint64_t *)kjt->values, kjt->nnz);
    if (kjt->weights)
        for (int64_t j = 0; j < kjt->nnz; j++) {
            uint32_t bits;
            memcpy(&bits, &kjt->weights[j], sizeof bits);
            h[j & 3] = (h[j & 3] ^ (bits | (1ull << 40))) * DIGEST_K;
        }
    uint64_t d = h[0] ^ (h[1] >> 7) ^ (h[2] << 11) ^ (h[3] >> 29);
    d ^= d >> 31;
    return d * DIGEST_K;
}

void ember__kjt_offsets(const ember_kjt *kjt, int64_t *offsets) {
    const int64_t nbags = (int64_t)kjt->num_features * kjt->batch_size;
    if (kjt->offsets) {
        for (int64_t i = 0; i <= nbags; i++) offsets[i] = kjt->offsets[i];
        return;
    }
    offsets[0] = 0;
    for (int64_t i = 0; i < nbags; i++) offsets[i + 1] = offsets[i] + kjt->lengths[i];
}
