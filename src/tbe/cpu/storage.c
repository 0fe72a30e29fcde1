// The cpu backend's storage (cpu.h): the weight and state slabs, their layout, initial values,
// row reads and writes, dtype changes; and the backend's ops table.
#include <string.h>

#include "core/dtype.h"
#include "tbe/cpu/cpu.h"
#include "tbe/cpu/isa/isa.h"

static void cpu_free(ember_ebc *ebc) {
    ember__cpu *c = ember__cpu_of(ebc);
    if (!c) return;
    ember__free_slab(ebc->ctx, c->slab);
    ember__free_slab(ebc->ctx, c->state);
    ember__free(ebc->ctx, c);
    ebc->bs = NULL;
}

static ember_status cpu_alloc(ember_ebc *ebc) {
    ember_ctx *ctx = ebc->ctx;
    ember__cpu *c = ember__xalloc(ctx, sizeof *c, "collection");
    if (!c) return EMBER_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    ebc->bs = c;
    c->kern = ember__tbe_kernels_for(ember_ctx_isa(ctx));
    EMBER_ASSERT(c->kern != NULL); // the context only runs variants this build holds
    ember__slab_sizes(ebc, &c->slab_bytes, &c->state_floats);
    c->slab = ember__alloc_slab(ctx, c->slab_bytes, "embedding weights");
    if (!c->slab) return EMBER_ERR_NOMEM;
    if (c->state_floats && !(c->state = ember__alloc_slab(ctx, c->state_floats * sizeof(float), "optimizer state")))
        return EMBER_ERR_NOMEM;
    ember__slab_layout(ebc, c->slab, c->state);
    return EMBER_OK;
}

// Initial weights, row by row in global coordinates (parallel: each row is independent), and the
// optimizer's initial state (the slabs start zeroed).
static ember_status cpu_init(ember_ebc *ebc, ember__table *tb) {
    ember_ctx *ctx = ebc->ctx;
    if (tb->m1 && tb->optim->adagrad_init) {
        const size_t n1 = (size_t)tb->slab_rows * (size_t)tb->m1_cols;
        for (size_t i = 0; i < n1; i++) tb->m1[i] = tb->cfg.optim.initial_accumulator;
    }
    if (tb->cfg.init.kind == EMBER_INIT_ZEROS) return EMBER_OK;
    const int32_t D = tb->cfg.dim;
    const int64_t rows = tb->slab_rows;
    int failed = 0;
#pragma omp parallel num_threads(ember__threads(ctx))
    {
        float tmp[1024];
        float *row = D <= 1024 ? tmp : NULL;
        float *heap = NULL;
        if (!row) {
#pragma omp critical(ember_alloc)
            heap = ember__alloc(ctx, sizeof(float) * (size_t)D);
            row = heap;
        }
        if (!row) {
#pragma omp atomic write
            failed = 1;
        } else {
#pragma omp for schedule(static)
            for (int64_t r = 0; r < rows; r++) {
                ember__init_row(ebc, tb, r, row);
                ember__store_row(tb->cfg.dtype, ember__row_ptr(tb, r), row, D);
            }
        }
        if (heap) {
#pragma omp critical(ember_alloc)
            ember__free(ctx, heap);
        }
    }
    return failed ? ember__error(ctx, EMBER_ERR_NOMEM, "ember_ebc_create: table '%s': out of memory", tb->label)
                  : EMBER_OK;
}

static float *state_of(const ember__table *tb, int which) { return which == 1 ? tb->m1 : tb->m2; }
static int32_t cols_of(const ember__table *tb, int which) {
    return which == 0 ? tb->cfg.dim : which == 1 ? tb->m1_cols : tb->m2_cols;
}

static ember_status cpu_read_rows(const ember_ebc *ebc, const ember__table *tb, int which, int64_t r0, int64_t n,
                          ember_dtype dtype, void *dst) {
    (void)ebc;
    const int32_t cols = cols_of(tb, which);
    if (which) {
        memcpy(dst, state_of(tb, which) + (size_t)r0 * (size_t)cols, sizeof(float) * (size_t)n * (size_t)cols);
    } else if (dtype == tb->cfg.dtype) {
        memcpy(dst, ember__row_ptr(tb, r0), (size_t)n * tb->row_bytes);
    } else {
        for (int64_t r = 0; r < n; r++)
            ember__load_row(tb->cfg.dtype, ember__row_ptr(tb, r0 + r), (float *)dst + r * cols, cols);
    }
    return EMBER_OK;
}

static ember_status cpu_write_rows(ember_ebc *ebc, const ember__table *tb, int which, int64_t r0, int64_t n, ember_dtype dtype,
                           const void *src) {
    (void)ebc;
    const int32_t cols = cols_of(tb, which);
    if (which) {
        memcpy(state_of(tb, which) + (size_t)r0 * (size_t)cols, src, sizeof(float) * (size_t)n * (size_t)cols);
    } else if (dtype == tb->cfg.dtype) {
        memcpy(ember__row_ptr(tb, r0), src, (size_t)n * tb->row_bytes);
    } else {
        for (int64_t r = 0; r < n; r++)
            ember__store_row(tb->cfg.dtype, ember__row_ptr(tb, r0 + r), (const float *)src + r * cols, cols);
    }
    return EMBER_OK;
}

static const void *cpu_host_rows(const ember_ebc *ebc, const ember__table *tb) {
    (void)ebc;
    return tb->w;
}

// A prepared dtype change: the new slab and one row of scratch.
typedef struct cpu_change {
    unsigned char *slab;
    size_t bytes;
    float *row;
} cpu_change;

static void cpu_convert_abort(ember_ebc *ebc, ember__dtype_change *c) {
    cpu_change *p = c->prepared;
    if (p) {
        ember__free_slab(ebc->ctx, p->slab);
        ember__free(ebc->ctx, p->row);
        ember__free(ebc->ctx, p);
    }
    c->prepared = NULL;
}

static ember_status cpu_convert_prepare(ember_ebc *ebc, ember__dtype_change *c) {
    c->prepared = NULL;
    size_t bytes = 0;
    int change = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        const ember__table *tb = &ebc->tables[t];
        bytes += ember__weight_block(tb, ember__dtype_change_new(ebc, c, t));
        change |= ember__dtype_change_new(ebc, c, t) != tb->cfg.dtype;
    }
    if (!change) return EMBER_OK;
    cpu_change *p = ember__xalloc(ebc->ctx, sizeof *p, "dtype conversion");
    if (!p) return EMBER_ERR_NOMEM;
    c->prepared = p;
    p->bytes = bytes;
    p->slab = ember__alloc_slab(ebc->ctx, bytes, "embedding weights");
    p->row = p->slab ? ember__xalloc(ebc->ctx, sizeof(float) * (size_t)ebc->max_dim, "dtype conversion") : NULL;
    if (p->row) return EMBER_OK;
    cpu_convert_abort(ebc, c);
    return EMBER_ERR_NOMEM;
}

static void cpu_convert_commit(ember_ebc *ebc, ember__dtype_change *c) {
    cpu_change *p = c->prepared;
    if (!p) return; // no dtype changes
    // The slab is re-laid out for the new dtypes and every table copied over: there is one
    // storage before and after, never a second copy that could drift.
    ember__cpu *cpu = ember__cpu_of(ebc);
    size_t off = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        const ember_dtype dt = ember__dtype_change_new(ebc, c, t);
        const size_t rb = (size_t)tb->cfg.dim * ember_dtype_size(dt);
        unsigned char *dst = p->slab + off;
        if (dt == tb->cfg.dtype) {
            memcpy(dst, tb->w, (size_t)tb->slab_rows * rb);
        } else {
            for (int64_t r = 0; r < tb->slab_rows; r++) {
                ember__load_row(tb->cfg.dtype, ember__row_ptr(tb, r), p->row, tb->cfg.dim);
                ember__store_row(dt, dst + (size_t)r * rb, p->row, tb->cfg.dim);
            }
        }
        tb->cfg.dtype = dt;
        tb->w = dst;
        tb->row_bytes = rb;
        off += ember__weight_block(tb, dt);
    }
    ember__free_slab(ebc->ctx, cpu->slab);
    cpu->slab = p->slab;
    cpu->slab_bytes = p->bytes;
    p->slab = NULL;
    cpu_convert_abort(ebc, c);
}

void ember__cpu_set_kernels(ember_ebc *ebc, const ember__tbe_kernels *kern) { ember__cpu_of(ebc)->kern = kern; }

const ember__backend_ops ember__backend_cpu = {
    .kind = EMBER_BACKEND_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .init = cpu_init,
    .read_rows = cpu_read_rows,
    .write_rows = cpu_write_rows,
    .host_rows = cpu_host_rows,
    .convert_prepare = cpu_convert_prepare,
    .convert_commit = cpu_convert_commit,
    .convert_abort = cpu_convert_abort,
    .forward = ember__cpu_forward,
    .backward_prepare = ember__cpu_backward_prepare,
    .backward_apply = ember__cpu_backward_apply,
    .coalesce = ember__cpu_coalesce,
    .apply = ember__cpu_apply,
    .row_sumsq = ember__cpu_row_sumsq,
};
