// TorchRec's preprocessed Criteo day files (criteo_npy.h).
#define _POSIX_C_SOURCE 200809L

#include "criteo_npy.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "appctx.h"
#include "floormod.h"
#include "npy.h"

enum { DENSE = CRITEO_NPY_DENSE, SPARSE = CRITEO_NPY_SPARSE, LABELS = CRITEO_NPY_LABELS, NFILES = CRITEO_NPY_FILES };
const char *const criteo_npy_file[CRITEO_NPY_FILES] = {"dense", "sparse", "labels"};
const char *const criteo_npy_descr[CRITEO_NPY_FILES] = {"<f4", "<i4", "<i4"};
const int criteo_npy_cols[CRITEO_NPY_FILES] = {DLRM_NUM_DENSE, DLRM_NUM_SPARSE, 1};

typedef struct npy_day {
    npy_array a[NFILES];               // a[SPARSE] unused with multi-hot archives
    npy_array hot[DLRM_NUM_SPARSE];    // the multi-hot archive's arrays
    int64_t first, n; // the split's rows [start, start + n) of this day start at split row `first`
    int64_t start;
    int32_t day;
} npy_day;

struct criteo_npy {
    criteo_npy_config cfg;
    char dir[400];
    int64_t rows[DLRM_NUM_SPARSE];
    floormod_row mod;      // v mod rows[f] without a division, for 32-bit values (a row's 26 at once)
    int32_t hot[DLRM_NUM_SPARSE];
    int32_t hot_total;     // ids per sample
    bool npz;              // the categorical features come from the multi-hot archives
    npy_day *days;
    int32_t ndays;
    int64_t total;
    int64_t batch; // next global batch
};

static void day_path(char *buf, size_t cap, const char *dir, int32_t day, int kind) {
    snprintf(buf, cap, "%s/day_%d_%s.npy", dir, (int)day, criteo_npy_file[kind]);
}

static void npz_path(char *buf, size_t cap, const char *dir, int32_t day) {
    snprintf(buf, cap, "%s/day_%d_sparse_multi_hot.npz", dir, (int)day);
}

bool criteo_npy_multi_hot(const criteo_npy *r) { return r->npz; }

// The day's multi-hot arrays: integers of shape [N, k_f] ([N] for k_f 1), N the day's.
static ember_status open_multi_hot(ember_ctx *ctx, const criteo_npy *r, npy_day *d) {
    char p[512];
    npz_path(p, sizeof p, r->dir, d->day);
    const int64_t N = d->a[DENSE].shape[0];
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        char name[8];
        snprintf(name, sizeof name, "%d", f);
        APP_TRY(npy_open_npz(ctx, p, name, &d->hot[f]));
        const npy_array *h = &d->hot[f];
        const int64_t k = h->ndim == 2 ? h->shape[1] : 1;
        APP_CHECK(ctx, (h->kind == 'i' || h->kind == 'u') && h->ndim >= 1 && h->shape[0] == N, EMBER_ERR_FORMAT,
                  "'%s': %s of shape (%lld, %lld): expected integers of shape (%lld, k) for feature cat_%d (N from "
                  "'%s')", h->path, h->descr, (long long)h->shape[0], (long long)h->shape[1], (long long)N, f,
                  d->a[DENSE].path);
        APP_CHECK(ctx, k == r->hot[f], EMBER_ERR_FORMAT,
                  "'%s': feature cat_%d has %lld ids per sample, --multi_hot_sizes says %d", h->path, f, (long long)k,
                  (int)r->hot[f]);
    }
    return EMBER_OK;
}

int32_t criteo_npy_last_day(const char *dir) {
    char p[512];
    int32_t d = 0;
    for (;; d++) {
        day_path(p, sizeof p, dir, d, DENSE);
        if (access(p, F_OK) != 0) break;
    }
    return d - 1;
}

// The checks of one day's three files: dtypes, shapes, and one N (npz: the multi-hot archive stands
// in for the sparse file, checked by open_multi_hot).
static ember_status check_day(ember_ctx *ctx, const npy_day *d, bool npz) {
    const npy_array *x = &d->a[DENSE], *s = &d->a[SPARSE], *l = &d->a[LABELS];
    APP_CHECK(ctx, x->kind == 'f' && x->itemsize == 4 && x->ndim == 2 && x->shape[1] == DLRM_NUM_DENSE,
              EMBER_ERR_FORMAT, "'%s': %s of shape (%lld, %lld): expected float32 (<f4) of shape (N, %d)", x->path,
              x->descr, (long long)x->shape[0], (long long)x->shape[1], DLRM_NUM_DENSE);
    APP_CHECK(ctx, npz || ((s->kind == 'i' || s->kind == 'u') && s->itemsize >= 4 && s->ndim == 2 &&
                           s->shape[1] == DLRM_NUM_SPARSE),
              EMBER_ERR_FORMAT, "'%s': %s of shape (%lld, %lld): expected int32 or int64 of shape (N, %d)", s->path,
              s->descr, (long long)s->shape[0], (long long)s->shape[1], DLRM_NUM_SPARSE);
    APP_CHECK(ctx, (l->kind == 'i' || l->kind == 'u' || l->kind == 'b') && (l->ndim == 1 || (l->ndim == 2 && l->shape[1] == 1)),
              EMBER_ERR_FORMAT, "'%s': %s of shape (%lld, %lld): expected integers of shape (N,) or (N, 1)", l->path,
              l->descr, (long long)l->shape[0], (long long)l->shape[1]);
    APP_CHECK(ctx, (npz || x->shape[0] == s->shape[0]) && x->shape[0] == l->shape[0], EMBER_ERR_FORMAT,
              "day %d of '%s': the files disagree on the rows: dense %lld, sparse %lld, labels %lld", (int)d->day,
              x->path, (long long)x->shape[0], (long long)(npz ? x->shape[0] : s->shape[0]), (long long)l->shape[0]);
    return EMBER_OK;
}

void criteo_npy_close(ember_ctx *ctx, criteo_npy *r) {
    if (!r) return;
    for (int32_t i = 0; r->days && i < r->ndays; i++) {
        for (int k = 0; k < NFILES; k++) npy_close(&r->days[i].a[k]);
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) npy_close(&r->days[i].hot[f]);
    }
    ember_ctx_free(ctx, r->days);
    ember_ctx_free(ctx, r);
}

ember_status criteo_npy_open(ember_ctx *ctx, const criteo_npy_config *cfg, criteo_npy **out) {
    *out = NULL;
    APP_CHECK(ctx, cfg->dir && cfg->rows && cfg->world >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world &&
                       cfg->global_batch >= 1 && cfg->first_day >= 0 && cfg->num_days >= 1 && cfg->max_rows >= 0 &&
                       (cfg->part == NPY_DAYS || cfg->num_days == 1),
              EMBER_ERR_INVALID_ARG, "criteo npy reader: bad configuration");
    criteo_npy *r = app_calloc(ctx, sizeof *r, "criteo npy reader");
    if (!r) return EMBER_ERR_NOMEM;
    r->cfg = *cfg;
    snprintf(r->dir, sizeof r->dir, "%s", cfg->dir);
    r->cfg.dir = r->dir;
    memcpy(r->rows, cfg->rows, sizeof r->rows);
    int64_t divisors[DLRM_NUM_SPARSE];
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) divisors[f] = r->rows[f] >= 1 ? r->rows[f] : 1;
    floormod_row_init(&r->mod, divisors, DLRM_NUM_SPARSE, ember_ctx_isa(ctx) >= EMBER_ISA_AVX2);
    r->cfg.rows = r->rows;
    r->cfg.hot = NULL;
    bool multi = false;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        r->hot[f] = cfg->hot ? cfg->hot[f] : 1;
        r->hot_total += r->hot[f];
        multi = multi || r->hot[f] != 1;
    }
    char p[512];
    npz_path(p, sizeof p, r->dir, cfg->first_day);
    r->npz = multi && access(p, F_OK) == 0;
    r->days = app_calloc(ctx, sizeof(npy_day) * (size_t)cfg->num_days, "criteo npy reader");
    if (!r->days) {
        criteo_npy_close(ctx, r);
        return EMBER_ERR_NOMEM;
    }
    ember_status st = EMBER_OK;
    for (int32_t i = 0; i < cfg->num_days && st == EMBER_OK; i++) {
        npy_day *d = &r->days[i];
        d->day = cfg->first_day + i;
        r->ndays = i + 1; // what close must unmap
        for (int k = 0; k < NFILES && st == EMBER_OK; k++) {
            if (k == SPARSE && r->npz) continue;
            day_path(p, sizeof p, r->dir, d->day, k);
            st = npy_open(ctx, p, &d->a[k]);
            if (st != EMBER_OK && k == SPARSE && access(p, F_OK) != 0) {
                // MLPerf's multi-hot directories hold the archive instead of the one-hot file.
                char z[512];
                npz_path(z, sizeof z, r->dir, d->day);
                if (access(z, F_OK) == 0) {
                    st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot open: %s, but '%s' is there: give "
                                             "--multi_hot_sizes (MLPerf's: 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,"
                                             "12,100,27,10,3,1,1) to read it", p, "No such file or directory", z);
                }
            }
        }
        if (st == EMBER_OK) st = check_day(ctx, d, r->npz);
        if (st == EMBER_OK && r->npz) st = open_multi_hot(ctx, r, d);
        if (st != EMBER_OK) break;
        const int64_t N = d->a[DENSE].shape[0];
        d->start = cfg->part == NPY_SECOND_HALF ? (N + 1) / 2 : 0; // TorchRec: ceil(N/2) rows validate
        d->n = cfg->part == NPY_FIRST_HALF ? (N + 1) / 2 : N - d->start;
        d->first = r->total;
        r->total += d->n;
    }
    if (st != EMBER_OK) {
        criteo_npy_close(ctx, r);
        return st;
    }
    if (cfg->max_rows > 0 && r->total > cfg->max_rows) r->total = cfg->max_rows;
    *out = r;
    return EMBER_OK;
}

void criteo_npy_seek(criteo_npy *r, int64_t batch) { r->batch = batch; }

int64_t criteo_npy_rows(const criteo_npy *r) { return r->total; }

// Categorical value (i, j) of array a as feature f's id: v mod rows_f, floored (numpy's, TorchRec's
// `hashes`: its int32 files hold hashes of 2^31 and above as negative numbers), or v with raw ids.
static inline int64_t id_of(const criteo_npy *r, const npy_array *a, int64_t i, int64_t j, int f) {
    if (a->kind == 'i' && a->itemsize == 4) { // TorchRec's and ember preprocess's int32 files
        int32_t v;
        memcpy(&v, a->data + ((size_t)i * (size_t)a->shape[1] + (size_t)j) * 4, sizeof v);
        return r->cfg.raw_ids ? v : floormod32(v, &r->mod.f[f]);
    }
    const int64_t v = npy_get_i64(a, i, j), m = v % r->rows[f];
    return r->cfg.raw_ids ? v : m < 0 ? m + r->rows[f] : m;
}

// The day holding split row `row` (days in order, their first rows ascending).
static const npy_day *day_of(const criteo_npy *r, int64_t row) {
    int32_t lo = 0, hi = r->ndays - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if (r->days[mid].first <= row) lo = mid;
        else hi = mid - 1;
    }
    return &r->days[lo];
}

void criteo_npy_where(const criteo_npy *r, int64_t row, char *buf, size_t cap) {
    const npy_day *d = day_of(r, row);
    snprintf(buf, cap, "row %lld of '%s/day_%d_*.npy'", (long long)(d->start + row - d->first), r->dir, (int)d->day);
}

ember_status criteo_npy_next(ember_ctx *ctx, criteo_npy *r, dlrm_batch *b, bool *eof) {
    APP_ASSERT(b->num_dense == DLRM_NUM_DENSE && b->num_sparse == DLRM_NUM_SPARSE);
    const criteo_npy_config *c = &r->cfg;
    b->size = 0;
    b->has_bags = r->npz;
    APP_ASSERT(!r->npz || b->bag_width >= r->hot_total);
    const int64_t start = r->batch * c->global_batch;
    int64_t end = start + c->global_batch;
    if (end > r->total) end = r->total;
    *eof = start >= end;
    if (*eof) return EMBER_OK;
    int64_t offset, share = dlrm_share(c->global_batch, c->rank, c->world, &offset);
    APP_ASSERT(share <= b->capacity);
    int64_t mine = start + offset, mine_end = mine + share;
    if (mine_end > end) mine_end = end;
    int32_t n = 0;
    for (int64_t row = mine; row < mine_end; row++, n++) {
        const npy_day *d = day_of(r, row);
        const int64_t i = d->start + row - d->first;
        float *x = b->dense + (size_t)n * DLRM_NUM_DENSE;
        memcpy(x, d->a[DENSE].data + (size_t)i * DLRM_NUM_DENSE * sizeof(float), sizeof(float) * DLRM_NUM_DENSE);
        int64_t *ids = b->ids + (size_t)n * DLRM_NUM_SPARSE;
        int64_t *bag = r->npz ? b->bags + (size_t)n * (size_t)b->bag_width : NULL;
        const npy_array *s = &d->a[SPARSE];
        if (!r->npz && s->kind == 'i' && s->itemsize == 4 && !c->raw_ids) { // the common case, unrolled
            floormod_row_apply(&r->mod, (const int32_t *)(const void *)(s->data + (size_t)i * DLRM_NUM_SPARSE * 4), ids);
        } else if (!r->npz) {
            for (int f = 0; f < DLRM_NUM_SPARSE; f++) ids[f] = id_of(r, s, i, f, f);
        } else {
            for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
                for (int32_t j = 0; j < r->hot[f]; j++) {
                    const int64_t id = id_of(r, &d->hot[f], i, j, f);
                    if (j == 0) ids[f] = id;
                    *bag++ = id;
                }
            }
        }
        const int64_t y = npy_get_i64(&d->a[LABELS], i, 0);
        if (y != 0 && y != 1) {
            b->size = 0;
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s' row %lld: label %lld (0 or 1 expected)",
                                       d->a[LABELS].path, (long long)i, (long long)y);
        }
        b->labels[n] = (float)y;
        b->planted[n] = NAN;
        b->origin[n] = row;
    }
    b->size = n;
    r->batch++;
    return EMBER_OK;
}

// ---- Writing a day ---------------------------------------------------------------------------

static int writer_fail(criteo_npy_writer *w, const char *what, int k) {
    snprintf(w->error, sizeof w->error, "'%s.partial': cannot %s: %s", w->path[k], what, strerror(errno));
    return -1;
}

int criteo_npy_writer_open(criteo_npy_writer *w, const char *dir, int day, const char *sparse_name) {
    memset(w, 0, sizeof *w);
    for (int k = 0; k < NFILES; k++) {
        snprintf(w->path[k], sizeof w->path[k], "%s/day_%d_%s.npy", dir, day,
                 k == SPARSE ? sparse_name : criteo_npy_file[k]);
        char p[1100];
        snprintf(p, sizeof p, "%s.partial", w->path[k]);
        w->f[k] = fopen(p, "wb");
        // A placeholder header of the final one's size: the row count is known at the end.
        if (!w->f[k] || npy_write_header(w->f[k], criteo_npy_descr[k], 0, criteo_npy_cols[k]) != 0)
            return writer_fail(w, "write", k);
    }
    return 0;
}

int criteo_npy_writer_row(criteo_npy_writer *w, const float *dense, const int32_t *sparse, int32_t label) {
    if (fwrite(dense, sizeof(float) * DLRM_NUM_DENSE, 1, w->f[DENSE]) != 1) return writer_fail(w, "write", DENSE);
    if (fwrite(sparse, sizeof(int32_t) * DLRM_NUM_SPARSE, 1, w->f[SPARSE]) != 1) return writer_fail(w, "write", SPARSE);
    if (fwrite(&label, sizeof label, 1, w->f[LABELS]) != 1) return writer_fail(w, "write", LABELS);
    w->rows++;
    return 0;
}

int criteo_npy_writer_close(criteo_npy_writer *w) {
    for (int k = 0; k < NFILES; k++) {
        FILE *f = w->f[k];
        if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0 ||
            npy_write_header(f, criteo_npy_descr[k], w->rows, criteo_npy_cols[k]) != 0 || fflush(f) != 0 ||
            fsync(fileno(f)) != 0)
            return writer_fail(w, "write", k);
        w->f[k] = NULL;
        if (fclose(f) != 0) return writer_fail(w, "write", k);
    }
    return 0;
}

int criteo_npy_writer_commit(criteo_npy_writer *w) {
    for (int k = 0; k < NFILES; k++) {
        char p[1100];
        snprintf(p, sizeof p, "%s.partial", w->path[k]);
        if (rename(p, w->path[k]) != 0) return writer_fail(w, "rename into place", k);
    }
    return 0;
}

void criteo_npy_writer_abort(criteo_npy_writer *w) {
    for (int k = 0; k < NFILES; k++) {
        if (w->f[k]) fclose(w->f[k]);
        w->f[k] = NULL;
        char p[1100];
        snprintf(p, sizeof p, "%s.partial", w->path[k]);
        unlink(p);
    }
}
