// libFuzzer target: ember_kjt_validate (include/ember/kjt.h) on KJTs decoded from the input, and
// ember_ebc_forward on the ones shaped for a small collection.
//
// Input: a flags byte (lengths / offsets / weights / rows given, bounds mode, NULL values), F and
// the expected feature count, B, then lengths, offsets (the lengths' prefix sums, possibly bent,
// or raw), nnz, ids, weights (NaN, infinities, subnormals among them) and table sizes. Every
// array the KJT points to really has the length its header promises for the decoded F, B and
// nnz (nnz <= MAX_NNZ), so any fault is the library's. What the fuzzer explores is everything
// else: inconsistent lengths and offsets, negative and overflowing lengths, offsets not from 0,
// sums that miss nnz, ids outside or at the edge of their tables, tables of 0 or negative rows.
//
// Oracle: a naive re-statement of the header's contract gives the expected status class (OK,
// INVALID_ARG, OUT_OF_RANGE) and, under CLAMP/SKIP, the count of ids out of range; a validated
// KJT's bag starts (ember_kjt_bag_start) are its prefix sums; an error leaves a message. When
// the KJT has the 3 features of the collection below and its table sizes were used, forward
// under the same bounds mode must agree with the validator, and (finite weights) give the naive
// pooled sums within float rounding.
#define _GNU_SOURCE // mkdtemp (fuzz_input.h)
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ebc.h"
#include "ember/kjt.h"
#include "fuzz_input.h"

#define MAX_F 32
#define MAX_B 32
#define MAX_NNZ 4096

// The collection forward runs on: one per bounds mode, 3 features on 3 tables.
#define NT 3
static const int64_t EBC_ROWS[NT] = {5, 1, 9};
static const int32_t EBC_DIMS[NT] = {3, 2, 17};
static const ember_pooling EBC_POOL[NT] = {EMBER_POOL_SUM, EMBER_POOL_MEAN, EMBER_POOL_MEAN};
static const ember_dtype EBC_DTYPE[NT] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16};

static ember_ctx *ctx;
static ember_ebc *ebc[3];                    // [bounds mode]
static float *ebc_weights[3][NT];            // each table's rows in fp32, as forward reads them

static void quiet(void *user, ember_log_level level, const char *msg) {
    (void)user, (void)level, (void)msg; // CLAMP warns once per call: no flood on stderr
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = 1;
    cc.log = quiet;
    if (ember_ctx_create(&cc, &ctx) != EMBER_OK) abort();
    static const char *const names[NT] = {"a", "b", "c"};
    ember_table_config tc[NT];
    ember_feature_config fc[NT];
    for (int t = 0; t < NT; t++) {
        tc[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc[t].name = names[t];
        tc[t].rows = EBC_ROWS[t];
        tc[t].dim = EBC_DIMS[t];
        tc[t].pooling = EBC_POOL[t];
        tc[t].dtype = EBC_DTYPE[t];
        tc[t].init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1.0f, .b = 1.0f};
        fc[t] = (ember_feature_config){.name = names[t], .table = t};
    }
    for (int m = 0; m < 3; m++) {
        ember_ebc_config ec = EMBER_EBC_CONFIG_DEFAULT;
        ec.tables = tc;
        ec.num_tables = NT;
        ec.features = fc;
        ec.num_features = NT;
        ec.bounds = (ember_bounds_mode)m;
        ec.seed = 11;
        if (ember_ebc_create(ctx, &ec, &ebc[m]) != EMBER_OK) abort();
        for (int t = 0; t < NT; t++) {
            ebc_weights[m][t] = malloc(sizeof(float) * (size_t)(EBC_ROWS[t] * EBC_DIMS[t]));
            if (!ebc_weights[m][t] ||
                ember_ebc_read(ebc[m], t, "weight", 0, EBC_ROWS[t], EMBER_DTYPE_F32, ebc_weights[m][t]) != EMBER_OK)
                abort();
        }
    }
    return 0;
}

// The feature of bag i: i / B, or (a batch size per feature) the one whose bags hold it.
static int64_t bag_feature(const ember_kjt *k, int64_t i) {
    if (!k->feature_batch_sizes) return i / k->batch_size;
    int64_t f = 0;
    for (int64_t end = k->feature_batch_sizes[0]; i >= end; end += k->feature_batch_sizes[++f]) {}
    return f;
}

// The contract of ember_kjt_validate, restated naively (no early exits, 128-bit sums).
static ember_status expected_status(const ember_kjt *k, int32_t expected_features, const int64_t *rows,
                                    ember_bounds_mode mode, int64_t *bad_ids) {
    *bad_ids = 0;
    if (!(mode == EMBER_BOUNDS_ERROR || mode == EMBER_BOUNDS_CLAMP || mode == EMBER_BOUNDS_SKIP))
        return EMBER_ERR_INVALID_ARG;
    if (k->num_features != expected_features || k->batch_size < 0 || k->nnz < 0) return EMBER_ERR_INVALID_ARG;
    if (!k->lengths && !k->offsets) return EMBER_ERR_INVALID_ARG;
    if (k->nnz > 0 && !k->values) return EMBER_ERR_INVALID_ARG;
    int64_t nbags = k->num_features > 0 ? (int64_t)k->num_features * k->batch_size : 0;
    if (k->inverse_indices && !k->feature_batch_sizes) return EMBER_ERR_INVALID_ARG;
    if (k->feature_batch_sizes) { // VBE: B_f >= 0 each, every inverse index in range, every bag read
        nbags = 0;
        for (int32_t f = 0; f < k->num_features; f++) {
            if (k->feature_batch_sizes[f] < 0) return EMBER_ERR_INVALID_ARG;
            nbags += k->feature_batch_sizes[f];
        }
        for (int32_t f = 0; k->inverse_indices && f < k->num_features; f++)
            for (int32_t bag = 0; bag < k->feature_batch_sizes[f]; bag++) {
                bool read = false;
                for (int32_t b = 0; b < k->batch_size; b++) {
                    const int32_t v = k->inverse_indices[(int64_t)f * k->batch_size + b];
                    if (v < 0 || v >= k->feature_batch_sizes[f]) return EMBER_ERR_INVALID_ARG;
                    read |= v == bag;
                }
                if (!read) return EMBER_ERR_INVALID_ARG;
            }
        for (int32_t f = 0; k->inverse_indices && f < k->num_features; f++) // also where no bag is
            for (int32_t b = 0; b < k->batch_size; b++) {
                const int32_t v = k->inverse_indices[(int64_t)f * k->batch_size + b];
                if (v < 0 || v >= k->feature_batch_sizes[f]) return EMBER_ERR_INVALID_ARG;
            }
    }
    if (k->offsets && k->offsets[0] != 0) return EMBER_ERR_INVALID_ARG;
    __int128 sum = 0;
    for (int64_t i = 0; i < nbags; i++) {
        __int128 len;
        if (k->offsets) {
            len = (__int128)k->offsets[i + 1] - k->offsets[i];
            if (k->lengths && len != k->lengths[i]) return EMBER_ERR_INVALID_ARG;
        } else {
            len = k->lengths[i];
        }
        if (len < 0) return EMBER_ERR_INVALID_ARG;
        sum += len;
    }
    if (sum != k->nnz) return EMBER_ERR_INVALID_ARG;
    for (int64_t j = 0; k->weights && j < k->nnz; j++) // every per-id weight must be finite
        if (!isfinite(k->weights[j])) return EMBER_ERR_NUMERIC;
    if (!rows) return EMBER_OK;
    int64_t j = 0;
    for (int64_t i = 0; i < nbags; i++) {
        const int64_t len = k->offsets ? k->offsets[i + 1] - k->offsets[i] : k->lengths[i];
        const int64_t f = bag_feature(k, i);
        // A negative size accepts every id (a hashed table's).
        for (int64_t e = j + len; j < e; j++) *bad_ids += rows[f] >= 0 && (k->values[j] < 0 || k->values[j] >= rows[f]);
    }
    return mode == EMBER_BOUNDS_ERROR && *bad_ids > 0 ? EMBER_ERR_OUT_OF_RANGE : EMBER_OK;
}

// Forward on the collection of `mode` against a naive pooling of the same fp32 rows.
// With a batch size per feature, samples read bags through the inverse indices (without them,
// "sample" b of feature t is its bag b, out as [B_t, D_t] blocks: row stride D_t, not sum_dims).
static void check_forward(const ember_kjt *k, ember_bounds_mode mode, ember_status validated) {
    int32_t sum_dims = 0;
    for (int t = 0; t < NT; t++) sum_dims += EBC_DIMS[t];
    const int32_t *fbs = k->feature_batch_sizes, *inv = k->inverse_indices;
    const bool blocks = fbs && !inv; // each feature's own bags out
    int32_t B = k->batch_size > 0 ? k->batch_size : 0; // a negative one fails validation
    if (blocks) { // the output's rows: enough for the largest feature's bags, columns per feature
        B = 0;
        for (int t = 0; t < NT; t++) B = fbs[t] > B ? fbs[t] : B;
    }
    int64_t bag0[NT + 1] = {0}; // first bag of feature t
    for (int t = 0; t < NT; t++) bag0[t + 1] = bag0[t] + (fbs ? (fbs[t] > 0 ? fbs[t] : 0) : k->batch_size);
    if (k->batch_size >= 0 && !blocks && (!fbs || validated == EMBER_OK))
        FUZZ_REQUIRE(ember_ebc_output_size(ebc[mode], k) == (int64_t)B * sum_dims, "output size");
    if (blocks && validated == EMBER_OK) {
        int64_t n = 0;
        for (int t = 0; t < NT; t++) n += (int64_t)fbs[t] * EBC_DIMS[t];
        FUZZ_REQUIRE(ember_ebc_output_size(ebc[mode], k) == n, "output size of the bags");
    }
    float *out = malloc(sizeof(float) * (size_t)(B ? B * sum_dims : 1));
    double *ref = calloc((size_t)(B ? B * sum_dims : 1), sizeof(double));
    double *mag = calloc((size_t)(B ? B * sum_dims : 1), sizeof(double)); // sum of |terms|, then the bound
    if (!out || !ref || !mag) abort();
    const ember_status st = ember_ebc_forward(ebc[mode], k, out);
    FUZZ_REQUIRE(st == validated, "forward %s, the validator %s", ember_status_name(st), ember_status_name(validated));
    bool finite = true;
    for (int64_t j = 0; k->weights && j < k->nnz; j++) finite &= isfinite(k->weights[j]) != 0;
    if (st == EMBER_OK && finite) {
        int64_t block = 0; // blocks: feature t's first float
        for (int t = 0, col = 0; t < NT; block += blocks ? (int64_t)fbs[t] * EBC_DIMS[t] : 0, col += EBC_DIMS[t], t++) {
            const int32_t rows_t = blocks ? fbs[t] : B;
            for (int32_t b = 0; b < rows_t; b++) {
                const int64_t bag = bag0[t] + (inv ? inv[(int64_t)t * k->batch_size + b] : b);
                const int64_t len = k->offsets ? k->offsets[bag + 1] - k->offsets[bag] : k->lengths[bag];
                int64_t counted = 0, j = ember_kjt_bag_start(k, bag);
                const size_t at = blocks ? (size_t)(block + (int64_t)b * EBC_DIMS[t]) : (size_t)b * sum_dims + col;
                double *y = ref + at, *m = mag + at;
                for (int64_t e = j + len; j < e; j++) {
                    int64_t id = k->values[j];
                    if (id < 0 || id >= EBC_ROWS[t]) {
                        if (mode == EMBER_BOUNDS_SKIP) continue;
                        id = id < 0 ? 0 : EBC_ROWS[t] - 1; // CLAMP (ERROR failed above)
                    }
                    const double w = k->weights ? k->weights[j] : 1.0;
                    for (int32_t d = 0; d < EBC_DIMS[t]; d++) {
                        y[d] += w * ebc_weights[mode][t][(size_t)id * EBC_DIMS[t] + d];
                        m[d] += fabs(w * ebc_weights[mode][t][(size_t)id * EBC_DIMS[t] + d]);
                    }
                    counted++;
                }
                // MEAN scales the fp32 sum: whether the sum may overflow is decided before the scale.
                if (EBC_POOL[t] == EMBER_POOL_MEAN && counted > 0)
                    for (int32_t d = 0; d < EBC_DIMS[t]; d++)
                        y[d] /= (double)counted, m[d] = m[d] > 1e37 ? INFINITY : m[d] / (double)counted;
                // fp32 products and a running fp32 sum of n terms: error <= (n + 1) u sum|terms|
                // (u = 2^-24), doubled; the mean's division adds one rounding more.
                for (int32_t d = 0; d < EBC_DIMS[t]; d++)
                    m[d] = m[d] > 1e37 ? INFINITY : m[d] * (double)(counted + 3) * 0x1p-23;
            }
        }
        // Sums whose terms reach float's range may overflow on the way, and are not compared.
        const int64_t nout = blocks ? block : (int64_t)B * sum_dims;
        for (int64_t i = 0; i < nout; i++) {
            if (isinf(mag[i])) continue;
            FUZZ_REQUIRE(fabs((double)out[i] - ref[i]) <= mag[i] + 1e-37,
                         "output %lld: %.9g, expected %.9g (bound %.3g)", (long long)i, (double)out[i], ref[i], mag[i]);
        }
    }
    free(out);
    free(ref);
    free(mag);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes in = {data, size};
    const uint8_t flags = fuzz_u8(&in);
    const bool has_lengths = flags & 1, has_offsets = flags & 2, has_weights = flags & 4, has_rows = flags & 8;
    const uint8_t mode_sel = (flags >> 4) & 3;
    const bool null_values = (flags & 0xc0) == 0xc0; // one input in four of those with both high bits
    const ember_bounds_mode mode = mode_sel < 3 ? (ember_bounds_mode)mode_sel : (ember_bounds_mode)(int8_t)fuzz_u8(&in);

    const int32_t F = (int32_t)(fuzz_u8(&in) % (MAX_F + 3)) - 2; // -2 .. MAX_F
    const uint8_t e = fuzz_u8(&in);
    const int32_t expected = e < 240 ? F : F + (int32_t)e - 247;
    const int32_t B = (int32_t)(fuzz_u8(&in) % (MAX_B + 3)) - 2; // -2 .. MAX_B
    const int64_t nbags = F > 0 && B > 0 ? (int64_t)F * B : 0;

    // Lengths mostly small and valid; the offsets their prefix sums, unless the input bends one
    // entry or gives them raw.
    int32_t *lengths = malloc(sizeof(int32_t) * (size_t)(nbags + 1));
    int64_t *offsets = malloc(sizeof(int64_t) * (size_t)(nbags + 1));
    if (!lengths || !offsets) abort();
    __int128 total = 0;
    for (int64_t i = 0; i < nbags; i++) {
        lengths[i] = fuzz_i32(&in, 0) % 1000003; // small values stay small
        if (fuzz_u8(&in) < 230) lengths[i] = (int32_t)((uint32_t)lengths[i] % 8);
        total += lengths[i];
    }
    const uint8_t off_mode = fuzz_u8(&in);
    offsets[0] = 0;
    for (int64_t i = 0; i < nbags; i++)
        offsets[i + 1] = off_mode < 200 ? offsets[i] + lengths[i] : fuzz_i64(&in, -2);
    if (off_mode < 200 && off_mode >= 150 && nbags >= 0) {
        const int64_t at = (int64_t)(fuzz_raw(&in, 2) % (uint64_t)(nbags + 1));
        offsets[at] = fuzz_i64(&in, -8);
    }
    // nnz: the sum of the lengths when it is a size we can back with arrays, else the input's.
    int64_t nnz = total >= 0 && total <= MAX_NNZ ? (int64_t)total : 0;
    const uint8_t nnz_mode = fuzz_u8(&in);
    if (nnz_mode >= 220) nnz = fuzz_i64(&in, -4);
    if (nnz > MAX_NNZ) nnz = MAX_NNZ;
    const int64_t n_alloc = nnz > 0 ? nnz : 0;
    int64_t *values = malloc(sizeof(int64_t) * (size_t)(n_alloc + 1));
    float *weights = malloc(sizeof(float) * (size_t)(n_alloc + 1));
    if (!values || !weights) abort();

    // Table sizes: the collection's when F is 3 and the input says so, else its own.
    int64_t rows[MAX_F + 1];
    const bool ebc_shape = F == NT && fuzz_u8(&in) < 128;
    for (int32_t f = 0; f < (F > 0 ? F : 0); f++) {
        rows[f] = ebc_shape ? EBC_ROWS[f] : fuzz_i64(&in, -1);
        if (!ebc_shape && rows[f] >= -1 && rows[f] < 15) rows[f] += 2; // mostly >= 1
    }
    for (int64_t j = 0; j < n_alloc; j++) {
        values[j] = fuzz_i64(&in, -1);
        weights[j] = has_weights ? fuzz_f32(&in) : 1.0f;
    }

    ember_kjt k = {.num_features = F, .batch_size = B, .lengths = has_lengths ? lengths : NULL,
                   .offsets = has_offsets ? offsets : NULL, .values = null_values ? NULL : values,
                   .weights = has_weights ? weights : NULL, .nnz = nnz};
    // A batch size per feature (VBE), when the input's last byte asks: B_f read from the input
    // (now and then -1) within the F*B bags the arrays hold, and inverse indices mostly reading
    // every bag, now and then out of range or leaving one unread. Inputs of older corpora end
    // before it: no VBE.
    int32_t fbs[MAX_F + 1], *inverse = malloc(sizeof(int32_t) * (size_t)(nbags + 1));
    if (!inverse) abort();
    const uint8_t vbe = fuzz_u8(&in);
    if ((vbe & 3) != 0 && F > 0 && B >= 0) {
        int64_t left = nbags;
        for (int32_t f = 0; f < F; f++) {
            const uint8_t x = fuzz_u8(&in);
            fbs[f] = x == 255 ? -1 : (int32_t)(x % (uint32_t)(B + 2));
            if (fbs[f] > left) fbs[f] = (int32_t)left;
            left -= fbs[f] > 0 ? fbs[f] : 0;
        }
        k.feature_batch_sizes = fbs;
        if ((vbe & 3) != 1) {
            for (int32_t f = 0; f < F; f++)
                for (int32_t b = 0; b < B; b++) {
                    const uint8_t x = fuzz_u8(&in);
                    const int32_t n = fbs[f] > 0 ? fbs[f] : 1;
                    inverse[(int64_t)f * B + b] =
                        x >= 250 ? (int32_t)x - 252 + n : b < n ? b : (int32_t)(x % (uint32_t)n);
                }
            k.inverse_indices = inverse;
        }
    } else if (vbe == 0x80 && F > 0 && B >= 0) {
        k.inverse_indices = inverse; // without batch sizes: refused
        memset(inverse, 0, sizeof(int32_t) * (size_t)(nbags + 1));
    }
    int64_t bad = -1, bad_expected = 0;
    const int64_t *rows_arg = has_rows || ebc_shape ? rows : NULL;
    const ember_status want = expected_status(&k, expected, rows_arg, mode, &bad_expected);
    const ember_status st = ember_kjt_validate(ctx, &k, expected, rows_arg, mode, &bad);
    FUZZ_REQUIRE(st == want, "status %s, the contract says %s (F %d, expected %d, B %d, nnz %lld)",
                 ember_status_name(st), ember_status_name(want), (int)F, (int)expected, (int)B, (long long)nnz);
    if (st != EMBER_OK) {
        FUZZ_REQUIRE(ember_ctx_errmsg(ctx)[0] != '\0', "an error without a message");
    } else {
        FUZZ_REQUIRE(bad == (mode == EMBER_BOUNDS_ERROR ? 0 : rows_arg ? bad_expected : 0),
                     "%lld ids out of range reported, %lld expected", (long long)bad, (long long)bad_expected);
        int64_t start = 0, kbags = nbags;
        if (k.feature_batch_sizes) {
            kbags = 0;
            for (int32_t f = 0; f < F; f++) kbags += fbs[f];
        }
        for (int64_t i = 0; i < kbags; i++) {
            FUZZ_REQUIRE(ember_kjt_bag_start(&k, i) == start, "bag %lld starts at %lld, expected %lld", (long long)i,
                         (long long)ember_kjt_bag_start(&k, i), (long long)start);
            start += k.lengths ? k.lengths[i] : k.offsets[i + 1] - k.offsets[i];
        }
    }
    if (ebc_shape && expected == NT && mode_sel < 3) check_forward(&k, mode, st);
    if (flags == 0xff) { // null context and KJT: refused, not dereferenced
        FUZZ_REQUIRE(ember_kjt_validate(NULL, &k, expected, NULL, EMBER_BOUNDS_ERROR, NULL) == EMBER_ERR_INVALID_ARG,
                     "null ctx");
        FUZZ_REQUIRE(ember_kjt_validate(ctx, NULL, expected, NULL, EMBER_BOUNDS_ERROR, NULL) == EMBER_ERR_INVALID_ARG,
                     "null kjt");
    }
    free(lengths);
    free(offsets);
    free(values);
    free(weights);
    free(inverse);
    return 0;
}
