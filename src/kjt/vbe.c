// Variable batch size per feature (include/ember/kjt.h): a VBE KJT is computed as its padded
// KJT (every feature given max_f B_f bags, the missing ones empty: the ids keep their order, so
// values and weights are the caller's), whose pooled rows are then placed in the caller's layout
// (expanded through the inverse indices, or per feature), and whose gradient is the caller's
// summed onto the bags, sample by sample in order (the same sums on any number of threads).
#include <string.h>

#include "core/dtype.h"
#include "kjt/internal.h"

ember_status ember__vbe_pad(ember_ctx *ctx, const char *fn, const ember_kjt *kjt, int32_t expected_features,
                            const char *const *feature_names, ember__buf *lengths, ember_kjt *out) {
    char fb[96];
    EMBER_CHECK(ctx, kjt != NULL, EMBER_ERR_INVALID_ARG, "%s: kjt is NULL", fn);
    const int32_t F = kjt->num_features, B = kjt->batch_size, *fbs = kjt->feature_batch_sizes;
    EMBER_CHECK(ctx, F == expected_features, EMBER_ERR_INVALID_ARG,
                "%s: kjt has %d features, the collection expects %d", fn, (int)F, (int)expected_features);
    EMBER_CHECK(ctx, !kjt->inverse_indices || B >= 0, EMBER_ERR_INVALID_ARG, "%s: negative batch size %d", fn, (int)B);
    EMBER_CHECK(ctx, kjt->lengths || kjt->offsets, EMBER_ERR_INVALID_ARG, "%s: kjt has neither lengths nor offsets",
                fn);
    int32_t Bp = 0;
    for (int32_t f = 0; f < F; f++) {
        EMBER_CHECK(ctx, fbs[f] >= 0, EMBER_ERR_INVALID_ARG, "%s: %s: negative batch size %d", fn,
                    ember__feature_name(feature_names, f, fb, sizeof fb), (int)fbs[f]);
        if (fbs[f] > Bp) Bp = fbs[f];
    }
    if (kjt->offsets)
        EMBER_CHECK(ctx, kjt->offsets[0] == 0, EMBER_ERR_INVALID_ARG, "%s: offsets[0] = %lld, expected 0", fn,
                    (long long)kjt->offsets[0]);
    const int64_t nlen = (int64_t)F * Bp > 0 ? (int64_t)F * Bp : 1;
    int32_t *len = ember__buf_reserve(ctx, lengths, sizeof(int32_t) * (size_t)nlen);
    if (!len) return EMBER_ERR_NOMEM;
    if (kjt->inverse_indices) {
        // Every bag must be some sample's: a bag nobody reads would still touch its rows (an exact
        // optimizer updates them, gradient zero or not), which the expanded batch does not. The
        // padded lengths mark the bags read, before they are written.
        for (int32_t f = 0; f < F; f++) {
            int32_t *seen = len + (int64_t)f * Bp;
            memset(seen, 0, sizeof(int32_t) * (size_t)fbs[f]);
            for (int32_t b = 0; b < B; b++) {
                const int32_t i = kjt->inverse_indices[(int64_t)f * B + b];
                EMBER_CHECK(ctx, i >= 0 && i < fbs[f], EMBER_ERR_INVALID_ARG,
                            "%s: %s sample %d: inverse index %d outside its %d bags", fn,
                            ember__feature_name(feature_names, f, fb, sizeof fb), (int)b, (int)i, (int)fbs[f]);
                seen[i] = 1;
            }
            for (int32_t b = 0; b < fbs[f]; b++)
                EMBER_CHECK(ctx, seen[b], EMBER_ERR_INVALID_ARG,
                            "%s: %s bag %d: no sample reads it (every bag needs an inverse index)", fn,
                            ember__feature_name(feature_names, f, fb, sizeof fb), (int)b);
        }
    }
    int64_t bag = 0; // the caller's bag number
    for (int32_t f = 0; f < F; f++) {
        for (int32_t b = 0; b < fbs[f]; b++, bag++) {
            int64_t n;
            if (kjt->offsets) {
                const int64_t a = kjt->offsets[bag], z = kjt->offsets[bag + 1];
                n = z < INT64_MIN + a ? INT64_MIN : z - a; // saturates as the validator's
                EMBER_CHECK(ctx, !kjt->lengths || n == kjt->lengths[bag], EMBER_ERR_INVALID_ARG,
                            "%s: %s bag %d: length %d disagrees with offsets", fn,
                            ember__feature_name(feature_names, f, fb, sizeof fb), (int)b, (int)kjt->lengths[bag]);
                EMBER_CHECK(ctx, n <= INT32_MAX, EMBER_ERR_INVALID_ARG, "%s: %s bag %d: length %lld beyond 2^31 - 1",
                            fn, ember__feature_name(feature_names, f, fb, sizeof fb), (int)b, (long long)n);
            } else {
                n = kjt->lengths[bag];
            }
            EMBER_CHECK(ctx, n >= 0, EMBER_ERR_INVALID_ARG, "%s: %s bag %d: negative length %lld", fn,
                        ember__feature_name(feature_names, f, fb, sizeof fb), (int)b, (long long)n);
            len[(int64_t)f * Bp + b] = (int32_t)n;
        }
        for (int32_t b = fbs[f]; b < Bp; b++) len[(int64_t)f * Bp + b] = 0;
    }
    *out = (ember_kjt){.num_features = F, .batch_size = Bp, .lengths = len, .values = kjt->values,
                       .weights = kjt->weights, .nnz = kjt->nnz};
    return EMBER_OK;
}

// Columns of feature f: [fcol[f], fcol[f] + width).
static int32_t width(const int32_t *fcol, int32_t F, int32_t out_dim, int32_t f) {
    return (f + 1 < F ? fcol[f + 1] : out_dim) - fcol[f];
}

int64_t ember__vbe_output_size(const ember_kjt *kjt, const int32_t *fcol, int32_t out_dim) {
    if (kjt->inverse_indices) return (int64_t)kjt->batch_size * out_dim;
    int64_t n = 0;
    for (int32_t f = 0; f < kjt->num_features; f++)
        n += (int64_t)kjt->feature_batch_sizes[f] * width(fcol, kjt->num_features, out_dim, f);
    return n;
}

// Whether sample b of feature f reads bag b (every sample its own bag, in order): that feature's
// columns of the padded rows are already the caller's.
static int identity(const ember_kjt *kjt, int32_t f) {
    const int32_t B = kjt->batch_size;
    if (kjt->feature_batch_sizes[f] != B) return 0;
    const int32_t *inv = kjt->inverse_indices + (int64_t)f * B;
    for (int32_t b = 0; b < B; b++)
        if (inv[b] != b) return 0;
    return 1;
}

int64_t ember__vbe_scratch(const ember_kjt *kjt, const int32_t *fcol, int32_t out_dim) {
    int64_t n = 0;
    for (int32_t f = 0; kjt->inverse_indices && f < kjt->num_features; f++)
        if (!identity(kjt, f)) {
            const int64_t m = (int64_t)kjt->feature_batch_sizes[f] * width(fcol, kjt->num_features, out_dim, f);
            if (m > n) n = m;
        }
    return n;
}

void ember__vbe_expand(ember_ctx *ctx, const ember_kjt *kjt, const int32_t *fcol, int32_t out_dim, const float *padded,
                       float *out, float *scratch) {
    const int32_t F = kjt->num_features, B = kjt->batch_size;
    if (kjt->inverse_indices && padded == out) {
        // In place: a feature whose samples read their own bags is done; another's bags go to
        // the scratch first, then every sample's row is read from there.
        for (int32_t f = 0; f < F; f++) {
            if (identity(kjt, f)) continue;
            const int32_t D = width(fcol, F, out_dim, f), *inv = kjt->inverse_indices + (int64_t)f * B;
            for (int32_t k = 0; k < kjt->feature_batch_sizes[f]; k++)
                memcpy(scratch + (int64_t)k * D, out + (int64_t)k * out_dim + fcol[f], sizeof(float) * (size_t)D);
#pragma omp parallel for schedule(static) num_threads(ember__threads(ctx))
            for (int32_t b = 0; b < B; b++)
                memcpy(out + (int64_t)b * out_dim + fcol[f], scratch + (int64_t)inv[b] * D, sizeof(float) * (size_t)D);
        }
        return;
    }
    if (kjt->inverse_indices) {
#pragma omp parallel for schedule(static) num_threads(ember__threads(ctx))
        for (int32_t b = 0; b < B; b++)
            for (int32_t f = 0; f < F; f++) {
                const int64_t bag = kjt->inverse_indices[(int64_t)f * B + b];
                memcpy(out + (int64_t)b * out_dim + fcol[f], padded + bag * out_dim + fcol[f],
                       sizeof(float) * (size_t)width(fcol, F, out_dim, f));
            }
        return;
    }
    int64_t base = 0;
    for (int32_t f = 0; f < F; f++) {
        const int32_t D = width(fcol, F, out_dim, f);
        for (int32_t b = 0; b < kjt->feature_batch_sizes[f]; b++)
            memcpy(out + base + (int64_t)b * D, padded + (int64_t)b * out_dim + fcol[f], sizeof(float) * (size_t)D);
        base += (int64_t)kjt->feature_batch_sizes[f] * D;
    }
}

void ember__vbe_reduce(ember_ctx *ctx, const ember_kjt *kjt, int32_t padded_batch, const int32_t *fcol, int32_t out_dim,
                       const float *grad, float *padded) {
    const int32_t F = kjt->num_features, B = kjt->batch_size;
    const int64_t n = (int64_t)padded_batch * out_dim;
    if (!kjt->inverse_indices) {
        memset(padded, 0, sizeof(float) * (size_t)n);
        int64_t base = 0;
        for (int32_t f = 0; f < F; f++) {
            const int32_t D = width(fcol, F, out_dim, f);
            for (int32_t b = 0; b < kjt->feature_batch_sizes[f]; b++)
                memcpy(padded + (int64_t)b * out_dim + fcol[f], grad + base + (int64_t)b * D,
                       sizeof(float) * (size_t)D);
            base += (int64_t)kjt->feature_batch_sizes[f] * D;
        }
        return;
    }
    // Features whose samples read their own bags take the caller's rows as they are (then the
    // padded batch is the caller's: one copy of every row); the others' bags are sums.
    int some_identity = 0;
    for (int32_t f = 0; f < F && !some_identity; f++) some_identity = identity(kjt, f);
    if (some_identity) memcpy(padded, grad, sizeof(float) * (size_t)n);
    else memset(padded, 0, sizeof(float) * (size_t)n);
    // Features own disjoint columns: one per thread, each summing its samples in order.
#pragma omp parallel for schedule(dynamic, 1) num_threads(ember__threads(ctx))
    for (int32_t f = 0; f < F; f++) {
        if (some_identity && identity(kjt, f)) continue;
        const int32_t D = width(fcol, F, out_dim, f);
        if (some_identity)
            for (int32_t k = 0; k < padded_batch; k++)
                memset(padded + (int64_t)k * out_dim + fcol[f], 0, sizeof(float) * (size_t)D);
        for (int32_t b = 0; b < B; b++) {
            float *dst = padded + (int64_t)kjt->inverse_indices[(int64_t)f * B + b] * out_dim + fcol[f];
            const float *src = grad + (int64_t)b * out_dim + fcol[f];
            for (int32_t d = 0; d < D; d++) dst[d] += src[d];
        }
    }
}

ember_status ember__vbe_check_grad(ember_ctx *ctx, const char *fn, const ember_kjt *kjt, const int32_t *fcol,
                                   int32_t out_dim, const char *const *feature_names, const float *grad) {
    float v = 0;
    const int64_t i = ember__first_nonfinite(EMBER_DTYPE_F32, grad, ember__vbe_output_size(kjt, fcol, out_dim), &v);
    if (i < 0) return EMBER_OK;
    if (kjt->inverse_indices)
        return ember__error(ctx, EMBER_ERR_NUMERIC, "%s: grad_out[%lld][%lld] is %g", fn, (long long)(i / out_dim),
                            (long long)(i % out_dim), (double)v);
    char fb[96];
    int64_t base = 0;
    int32_t f = 0;
    for (; f + 1 < kjt->num_features; f++) {
        const int64_t n = (int64_t)kjt->feature_batch_sizes[f] * width(fcol, kjt->num_features, out_dim, f);
        if (i < base + n) break;
        base += n;
    }
    const int32_t D = width(fcol, kjt->num_features, out_dim, f);
    return ember__error(ctx, EMBER_ERR_NUMERIC, "%s: grad_out of %s bag %lld column %lld is %g", fn,
                        ember__feature_name(feature_names, f, fb, sizeof fb), (long long)((i - base) / D),
                        (long long)((i - base) % D), (double)v);
}
