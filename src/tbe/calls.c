// The collection's entry points: validation of the KJT and the gradient, its offsets, the row
// maps' translation of mapped tables' ids, then the backend's kernels (backend.h). Forward and the
// fused backward, public and unchecked (the sharded layer validates once, at the home rank).
#include <string.h>

#include "core/dtype.h"
#include "tbe/backend.h"
#include "tbe/rowmap.h"

ember_status ember__ebc_check_forward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname, int64_t *oor, const ember_kjt **use) {
    *oor = 0;
    *use = kjt;
    const char *const *names = (const char *const *)ebc->feature_names;
    if (ember__kjt_is_vbe(kjt)) {
        EMBER_CHECK(ebc->ctx, !ebc->sequence, EMBER_ERR_UNSUPPORTED,
                    "%s: a KJT with per-feature batch sizes (VBE) for a sequence collection, whose outputs are per id",
                    fn);
        EMBER_TRY(ember__vbe_pad(ebc->ctx, fn, kjt, ebc->F, names, &ebc->vbe_len, &ebc->vbe_kjt));
        *use = &ebc->vbe_kjt;
    }
    EMBER_TRY(ember__kjt_validate(ebc->ctx, fn, *use, ebc->F, ebc->feature_rows, names, ebc->bounds, oor));
    EMBER_CHECK(ebc->ctx, buf != NULL || ember_ebc_output_size(ebc, kjt) == 0, EMBER_ERR_INVALID_ARG, "%s: %s is NULL",
                fn, bufname);
    if (*oor > 0 && ebc->bounds == EMBER_BOUNDS_CLAMP)
        ember__log(ebc->ctx, EMBER_LOG_WARN, "%s: %lld ids outside their tables were clamped", fn, (long long)*oor);
    return EMBER_OK;
}


// The KJT the backend computes on: kjt itself, or with mapped tables its translation (rowmap.h),
// whose ids are storage rows or -1 (absent: the kernels resolve it as SKIP).
static ember_status storage_rows(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off,
                                 enum ember__map_phase phase, const ember_kjt **rows) {
    *rows = kjt;
    if (!ebc->mapped) return EMBER_OK;
    EMBER_TRY(ember__ebc_map(ebc, kjt, off, phase));
    *rows = &ebc->mkjt;
    return EMBER_OK;
}

static ember_status forward_mapped(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int resolve, float *out) {
    const ember_kjt *rows;
    EMBER_TRY(storage_rows(ebc, kjt, off, EMBER__MAP_FORWARD, &rows));
    return ebc->be->forward(ebc, rows, off, resolve || ebc->mapped, out);
}

ember_status ember__ebc_forward_unchecked(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    return forward_mapped(ebc, kjt, kjt->offsets, 0, out);
}

ember_status ember_ebc_prefetch(ember_ebc *ebc, const ember_kjt *kjt) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    int64_t oor;
    const ember_kjt *use;
    const float dummy = 0; // no output: only the KJT is checked
    EMBER_TRY(ember__ebc_check_forward(ebc, "ember_ebc_prefetch", kjt, &dummy, "out", &oor, &use));
    return ember__ebc_prefetch_unchecked(ebc, use);
}

// A VBE call's workspace of n floats: its padded gradient, or output (or an in-place output's scratch).
static float *vbe_io(ember_ebc *ebc, int64_t n) {
    return ember__buf_reserve(ebc->ctx, &ebc->vbe_io, sizeof(float) * (size_t)(n > 0 ? n : 1));
}

ember_status ember_ebc_forward(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    int64_t oor;
    const ember_kjt *use;
    EMBER_TRY(ember__ebc_check_forward(ebc, "ember_ebc_forward", kjt, out, "out", &oor, &use));
    const int64_t *off = ember__ebc_offsets(ebc, use);
    if (!off) return EMBER_ERR_NOMEM;
    if (use == kjt) return forward_mapped(ebc, use, off, oor > 0, out);
    // VBE: the padded KJT's rows, in out itself when they fit (kjt/vbe.c), then each sample's.
    const int in_place = ember__vbe_in_place(kjt, use->batch_size);
    float *ws = vbe_io(ebc, in_place ? ember__vbe_scratch(kjt, ebc->feature_col, ebc->out_dim)
                                     : (int64_t)use->batch_size * ebc->out_dim);
    if (!ws) return EMBER_ERR_NOMEM;
    float *pad = in_place ? out : ws;
    EMBER_TRY(forward_mapped(ebc, use, off, oor > 0, pad));
    ember__vbe_expand(ebc->ctx, kjt, ebc->feature_col, ebc->out_dim, pad, out, ws);
    return EMBER_OK;
}

ember_status ember__ebc_check_backward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const float *grad_out,
                                       const ember_kjt **use) {
    int64_t oor;
    EMBER_TRY(ember__ebc_check_forward(ebc, fn, kjt, grad_out, "grad_out", &oor, use));
    if (*use != kjt)
        return ember__vbe_check_grad(ebc->ctx, fn, kjt, ebc->feature_col, ebc->out_dim,
                                     (const char *const *)ebc->feature_names, grad_out);
    float v = 0;
    const int64_t i = ember__first_nonfinite(EMBER_DTYPE_F32, grad_out, ember_ebc_output_size(ebc, kjt), &v);
    EMBER_CHECK(ebc->ctx, i < 0, EMBER_ERR_NUMERIC, "%s: grad_out[%lld][%lld] is %g", fn,
                (long long)(i / ebc->out_dim), (long long)(i % ebc->out_dim), (double)v);
    return EMBER_OK;
}

ember_status ember_ebc_backward(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out, float *grad_weights) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_ebc_backward";
    const ember_kjt *use;
    EMBER_TRY(ember__ebc_check_backward(ebc, fn, kjt, grad_out, &use));
    EMBER_CHECK(ebc->ctx, !grad_weights || kjt->weights, EMBER_ERR_INVALID_ARG,
                "%s: grad_weights requested but the kjt has no weights", fn);
    if (use != kjt) {
        // The bags' gradients, summed over the samples that read them (kjt/vbe.c).
        float *pad = vbe_io(ebc, (int64_t)use->batch_size * ebc->out_dim);
        if (!pad) return EMBER_ERR_NOMEM;
        ember__vbe_reduce(ebc->ctx, kjt, use->batch_size, ebc->feature_col, ebc->out_dim, grad_out, pad);
        grad_out = pad;
    }
    return ember__ebc_backward_unchecked(ebc, use, grad_out, grad_weights);
}

// What the host can check of a device-memory call.
static ember_status check_device_call(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname) {
    EMBER_CHECK(ebc->ctx, ebc->be->forward_device != NULL, EMBER_ERR_UNSUPPORTED,
                "%s: the collection's tables are on the %s backend (host memory): use the host calls", fn,
                ember_backend_name(ebc->backend));
    EMBER_CHECK(ebc->ctx, kjt && buf, EMBER_ERR_INVALID_ARG, "%s: %s is NULL", fn, kjt ? bufname : "kjt");
    EMBER_CHECK(ebc->ctx, kjt->num_features == ebc->F, EMBER_ERR_INVALID_ARG, "%s: the KJT has %d features, the collection %d",
                fn, (int)kjt->num_features, (int)ebc->F);
    EMBER_CHECK(ebc->ctx, kjt->batch_size >= 0 && kjt->nnz >= 0, EMBER_ERR_INVALID_ARG, "%s: batch_size %d, nnz %lld", fn,
                (int)kjt->batch_size, (long long)kjt->nnz);
    EMBER_CHECK(ebc->ctx, kjt->offsets && (kjt->values || kjt->nnz == 0), EMBER_ERR_INVALID_ARG,
                "%s: a device KJT needs offsets and values", fn);
    EMBER_CHECK(ebc->ctx, !ember__kjt_is_vbe(kjt) && !kjt->inverse_indices, EMBER_ERR_UNSUPPORTED,
                "%s: per-feature batch sizes (VBE) are host calls only", fn);
    EMBER_CHECK(ebc->ctx, !ebc->mapped, EMBER_ERR_UNSUPPORTED, "%s: tables with row maps are cpu-only", fn);
    return EMBER_OK;
}

ember_status ember_ebc_forward_device(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_device_call(ebc, "ember_ebc_forward_device", kjt, out, "out"));
    return ebc->be->forward_device(ebc, kjt, out);
}

ember_status ember_ebc_backward_device(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_device_call(ebc, "ember_ebc_backward_device", kjt, grad_out, "grad_out"));
    EMBER_TRY(ebc->be->backward_device(ebc, kjt, grad_out));
    for (int32_t t = 0; t < ebc->T; t++) ember__dirty_mark_range(&ebc->tables[t], 0, ebc->tables[t].cfg.rows);
    return EMBER_OK;
}

ember_status ember__ebc_backward_unchecked(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out,
                                           float *grad_weights) {
    ember__segments s;
    EMBER_TRY(ember__ebc_backward_prepare(ebc, kjt, &s));
    return ember__ebc_backward_apply(ebc, &s, grad_out, grad_weights);
}

ember_status ember__ebc_backward_prepare(ember_ebc *ebc, const ember_kjt *kjt, ember__segments *s) {
    const int64_t *off = ember__ebc_offsets(ebc, kjt);
    if (!off) return EMBER_ERR_NOMEM;
    const ember_kjt *rows;
    EMBER_TRY(storage_rows(ebc, kjt, off, EMBER__MAP_BACKWARD, &rows));
    return ebc->be->backward_prepare(ebc, rows, off, s);
}

// The rows an update changed, marked (tbe/internal.h, dirty). A tiered table's are marked by id
// when its backward translates them (rowmap.c), never by cache slot here; segments without host
// arrays (a device backend's) mark every row.
static void mark_segments(ember_ebc *ebc, const ember__segments *s) {
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        if (ember__table_cached(tb)) continue;
        if (!s->row || !s->tseg) ember__dirty_mark_range(tb, 0, tb->cfg.rows);
        else
            for (int64_t k = s->tseg[t]; k < s->tseg[t + 1]; k++) ember__dirty_mark(tb, s->row[s->seg[k]]);
    }
}

ember_status ember__ebc_backward_apply(ember_ebc *ebc, const ember__segments *s, const float *grad_out,
                                       float *grad_weights) {
    EMBER_TRY(ebc->be->backward_apply(ebc, s, grad_out, grad_weights));
    mark_segments(ebc, s);
    return EMBER_OK;
}

ember_status ember__ebc_coalesce(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out,
                                 ember__sparse_grad *out) {
    const int64_t *off = ember__ebc_offsets(ebc, kjt);
    if (!off) return EMBER_ERR_NOMEM;
    const ember_kjt *rows;
    EMBER_TRY(storage_rows(ebc, kjt, off, EMBER__MAP_BACKWARD, &rows));
    return ebc->be->coalesce(ebc, rows, off, grad_out, out);
}

ember_status ember__ebc_apply(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad, int64_t n,
                              const float *row_sumsq) {
    EMBER_TRY(ebc->be->apply(ebc, key, goff, grad, n, row_sumsq));
    for (int64_t j = 0; j < n; j++) {
        ember__table *tb = &ebc->tables[ember__ebc_key_table(ebc, key[j])];
        if (!ember__table_cached(tb)) ember__dirty_mark(tb, key[j] - tb->key_base);
    }
    return EMBER_OK;
}

ember_status ember__ebc_row_sumsq(ember_ebc *ebc, const ember__sparse_grad *g, float *out) {
    return ebc->be->row_sumsq(ebc, g, out);
}

