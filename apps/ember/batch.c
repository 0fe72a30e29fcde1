// Batch buffers and the rank share of a global batch.
#include <math.h>
#include <string.h>

#include "batch.h"
#include "appctx.h"

ember_status dlrm_batch_create(ember_ctx *ctx, int32_t capacity, int32_t num_dense, int32_t num_sparse,
                               dlrm_batch *b) {
    memset(b, 0, sizeof *b);
    APP_CHECK(ctx, capacity >= 1 && num_dense >= 0 && num_sparse >= 0, EMBER_ERR_INVALID_ARG,
              "batch: capacity %d, %d dense and %d sparse features", (int)capacity, (int)num_dense,
              (int)num_sparse);
    size_t cap = (size_t)capacity;
    b->dense = app_alloc(ctx, sizeof(float) * cap * (size_t)num_dense, "batch dense features");
    b->ids = app_alloc(ctx, sizeof(int64_t) * cap * (size_t)num_sparse, "batch ids");
    b->labels = app_alloc(ctx, sizeof(float) * cap, "batch labels");
    b->planted = app_alloc(ctx, sizeof(float) * cap, "batch planted logits");
    b->origin = app_alloc(ctx, sizeof(int64_t) * cap, "batch sample origins");
    if (!b->dense || !b->ids || !b->labels || !b->planted || !b->origin) {
        dlrm_batch_destroy(ctx, b);
        return EMBER_ERR_NOMEM;
    }
    b->capacity = capacity;
    b->num_dense = num_dense;
    b->num_sparse = num_sparse;
    for (size_t i = 0; i < cap; i++) {
        b->planted[i] = NAN;
        b->origin[i] = -1;
    }
    return EMBER_OK;
}

int32_t dlrm_batch_first_nonfinite(const dlrm_batch *b, int32_t *feature) {
    const size_t n = (size_t)b->size * (size_t)b->num_dense;
    *feature = -1;
    for (size_t k = 0; k < n; k++) {
        // Finite floats have an exponent below all ones: one comparison per value.
        if (!isfinite(b->dense[k])) {
            *feature = (int32_t)(k % (size_t)b->num_dense);
            return (int32_t)(k / (size_t)b->num_dense);
        }
    }
    return b->size;
}

ember_status dlrm_batch_reserve_bags(ember_ctx *ctx, dlrm_batch *b, int32_t width) {
    APP_ASSERT(width >= 1 && b->capacity >= 1);
    int64_t *bags = app_alloc(ctx, sizeof(int64_t) * (size_t)b->capacity * (size_t)width, "batch multi-hot bags");
    if (!bags) return EMBER_ERR_NOMEM;
    ember_ctx_free(ctx, b->bags);
    b->bags = bags;
    b->bag_width = width;
    return EMBER_OK;
}

void dlrm_batch_destroy(ember_ctx *ctx, dlrm_batch *b) {
    ember_ctx_free(ctx, b->bags);
    ember_ctx_free(ctx, b->dense);
    ember_ctx_free(ctx, b->ids);
    ember_ctx_free(ctx, b->labels);
    ember_ctx_free(ctx, b->planted);
    ember_ctx_free(ctx, b->origin);
    memset(b, 0, sizeof *b);
}

void dlrm_batch_copy(dlrm_batch *dst, const dlrm_batch *src) {
    APP_ASSERT(src->size <= dst->capacity && src->num_dense == dst->num_dense && src->num_sparse == dst->num_sparse &&
               !src->has_bags);
    const size_t n = (size_t)src->size;
    memcpy(dst->dense, src->dense, sizeof(float) * n * (size_t)src->num_dense);
    memcpy(dst->ids, src->ids, sizeof(int64_t) * n * (size_t)src->num_sparse);
    memcpy(dst->labels, src->labels, sizeof(float) * n);
    memcpy(dst->planted, src->planted, sizeof(float) * n);
    memcpy(dst->origin, src->origin, sizeof(int64_t) * n);
    dst->size = src->size;
    dst->has_bags = false;
}

int64_t dlrm_share(int64_t g, int32_t rank, int32_t world, int64_t *first) {
    int64_t base = g / world, extra = g % world;
    *first = rank * base + (rank < extra ? rank : extra);
    return base + (rank < extra ? 1 : 0);
}
