// Checkpoints in global coordinates (include/ember/state.h): rank 0 streams each table's global
// tensors (gathered with ember_sebc_read) to the file, and on load reads them back and scatters
// them with ember_sebc_write into whatever sharding the collection has.
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ember/shard.h"
#include "ember/state.h"
#include "state/durable.h"

// Only the public API: the collection's communicator, tables, step counters and state dict.
#define CHECK(ctx, cond, st, ...) \
    do {                          \
        if (!(cond)) return ember_ctx_set_error((ctx), (st), __VA_ARGS__); \
    } while (0)
#define TRY(expr)                       \
    do {                                \
        const ember_status st_ = (expr); \
        if (st_ != EMBER_OK) return st_; \
    } while (0)

// A grow-only scratch buffer from the context's allocator.
typedef struct scratch {
    void *p;
    size_t cap;
} scratch;

static void *reserve(ember_ctx *ctx, scratch *b, size_t bytes) {
    if (bytes <= b->cap && b->p) return b->p;
    ember_ctx_free(ctx, b->p);
    b->p = ember_ctx_alloc(ctx, bytes ? bytes : 1);
    b->cap = b->p ? bytes : 0;
    if (!b->p) ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "checkpoint: cannot allocate %zu bytes", bytes);
    return b->p;
}

static void release(ember_ctx *ctx, scratch *b) {
    ember_ctx_free(ctx, b->p);
    b->p = NULL;
    b->cap = 0;
}

#define MAGIC "EMBERCK1"
#define VERSION 1u

// Tensors of table t: weight plus its optimizer's states (names and columns from the optimizer
// descriptor, ember_table_tensors).
static int tensors_of(const ember_table_config *t, int32_t cols[EMBER_MAX_TENSORS],
                      const char *names[EMBER_MAX_TENSORS]) {
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int32_t n = ember_table_tensors(t, ti);
    for (int32_t i = 0; i < n; i++) {
        cols[i] = ti[i].cols;
        names[i] = ti[i].name;
    }
    return n;
}

typedef struct writer {
    ember__dfile d; // rank 0's file (a durable file: the previous checkpoint stays until commit)
    uint64_t h;
} writer;

static void put(writer *w, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) w->h = (w->h ^ b[i]) * 1099511628211ull;
    ember__dfile_write(&w->d, p, n);
}

static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); }
static void put_str(writer *w, const char *s) {
    put_u32(w, (uint32_t)strlen(s));
    put(w, s, strlen(s));
}

ember_status ember_checkpoint_save(ember_sebc *s, const char *path) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), T = ember_sebc_num_tables(s);
    (void)T;
    const char *fn = "ember_checkpoint_save";
    ember_status st = EMBER_OK;
    writer w; // rank 0's file
    memset(&w, 0, sizeof w);
    w.h = 1469598103934665603ull;
    int opened = 0;
    if (!path) st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: path is NULL", fn);
    else if (rank == 0 && ember__dfile_open(&w.d, path) != 0)
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: cannot open '%s.partial' for writing: %s", fn, path,
                                 strerror(w.d.err));
    else opened = rank == 0;
    TRY(ember_comm_agree(comm, st));
    scratch buf = {0};
    if (rank == 0) {
        put(&w, MAGIC, 8);
        put_u32(&w, VERSION);
        put_u32(&w, (uint32_t)T);
    }
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        int32_t cols[EMBER_MAX_TENSORS] = {0};
        const char *tensor_name[EMBER_MAX_TENSORS] = {0};
        const int nt = tensors_of(tc, cols, tensor_name);
        int64_t step = 0;
        st = ember_sebc_step(s, t, &step);
        if (st != EMBER_OK) break;
        if (rank == 0) {
            put_str(&w, tc->name);
            put(&w, &tc->rows, 8);
            put(&w, &tc->dim, 4);
            int32_t k = (int32_t)tc->optim.kind, dt = (int32_t)tc->dtype;
            put(&w, &k, 4);
            put(&w, &dt, 4);
            put(&w, &step, 8);
            put_u32(&w, (uint32_t)nt);
        }
        for (int i = 0; i < nt && st == EMBER_OK; i++) {
            const size_t n = (size_t)tc->rows * (size_t)cols[i];
            float *data = NULL;
            ember_status a = EMBER_OK;
            if (rank == 0 && !(data = reserve(ctx, &buf, sizeof(float) * n))) a = EMBER_ERR_NOMEM;
            st = ember_comm_agree(comm, a);
            if (st == EMBER_OK) st = ember_sebc_read(s, t, tensor_name[i], data, 0);
            if (st == EMBER_OK && rank == 0) {
                put_str(&w, tensor_name[i]);
                put(&w, &cols[i], 4);
                put(&w, data, sizeof(float) * n);
            }
        }
    }
    release(ctx, &buf);
    if (opened) {
        uint64_t h = w.h;
        put(&w, &h, 8);
        // The commit: only a complete, fsync'd file replaces the previous checkpoint.
        if (st != EMBER_OK) ember__dfile_abort(&w.d);
        else if (ember__dfile_commit(&w.d) != 0)
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: writing '%s' failed: %s (the previous checkpoint is kept)",
                                     fn, path, strerror(w.d.err));
    }
    return ember_comm_agree(comm, st);
}

// Rank 0's view of one table in the file.
typedef struct entry {
    char name[256];
    int64_t rows, step;
    int32_t dim, kind, dtype, ntensors;
    long offset[3]; // file offsets of each tensor's data
    int32_t cols[3];
} entry;

typedef struct reader {
    FILE *f;
    uint64_t h;
    int ok;
} reader;

static void get(reader *r, void *p, size_t n) {
    if (!r->ok || fread(p, 1, n, r->f) != n) {
        r->ok = 0;
        memset(p, 0, n);
        return;
    }
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) r->h = (r->h ^ b[i]) * 1099511628211ull;
}

// Hashes and skips n bytes of data.
static void skip(reader *r, size_t n) {
    unsigned char tmp[4096];
    while (n > 0 && r->ok) {
        size_t k = n < sizeof tmp ? n : sizeof tmp;
        get(r, tmp, k);
        n -= k;
    }
}

static void get_str(reader *r, char *dst, size_t cap) {
    uint32_t n = 0;
    get(r, &n, 4);
    if (n >= cap) {
        r->ok = 0;
        return;
    }
    get(r, dst, n);
    dst[n] = '\0';
}

// Reads and checks the whole file (structure and checksum), indexing each table.
static ember_status index_file(ember_sebc *s, const char *path, FILE *f, entry **out, uint32_t *count,
                               scratch *ebuf) {
    ember_ctx *ctx = ember_comm_ctx(ember_sebc_comm(s));
    const char *fn = "ember_checkpoint_load";
    reader r = {f, 1469598103934665603ull, 1};
    char magic[8];
    uint32_t version = 0, n = 0;
    get(&r, magic, 8);
    get(&r, &version, 4);
    get(&r, &n, 4);
    CHECK(ctx, r.ok && memcmp(magic, MAGIC, 8) == 0 && version == VERSION && n < 1000000,
                EMBER_ERR_FORMAT, "%s: '%s' is not an ember checkpoint (version %u)", fn, path, version);
    entry *e = reserve(ctx, ebuf, sizeof(entry) * (n ? n : 1));
    if (!e) return EMBER_ERR_NOMEM;
    for (uint32_t i = 0; i < n && r.ok; i++) {
        get_str(&r, e[i].name, sizeof e[i].name);
        get(&r, &e[i].rows, 8);
        get(&r, &e[i].dim, 4);
        get(&r, &e[i].kind, 4);
        get(&r, &e[i].dtype, 4);
        get(&r, &e[i].step, 8);
        uint32_t nt = 0;
        get(&r, &nt, 4);
        if (nt > 3 || e[i].rows < 0 || e[i].dim < 0) r.ok = 0;
        e[i].ntensors = (int32_t)nt;
        for (uint32_t k = 0; k < nt && r.ok; k++) {
            char tn[32];
            get_str(&r, tn, sizeof tn);
            get(&r, &e[i].cols[k], 4);
            static const char *const file_names[EMBER_MAX_TENSORS] = {"weight", "momentum1", "momentum2"};
            if (strcmp(tn, file_names[k]) != 0 || e[i].cols[k] < 1) r.ok = 0;
            e[i].offset[k] = ftell(f);
            skip(&r, sizeof(float) * (size_t)e[i].rows * (size_t)e[i].cols[k]);
        }
    }
    uint64_t want = r.h, got = 0;
    if (r.ok && fread(&got, 1, 8, f) != 8) r.ok = 0;
    CHECK(ctx, r.ok, EMBER_ERR_FORMAT, "%s: '%s' is truncated or malformed", fn, path);
    CHECK(ctx, got == want, EMBER_ERR_FORMAT, "%s: '%s' fails its checksum", fn, path);
    *out = e;
    *count = n;
    return EMBER_OK;
}

ember_status ember_checkpoint_load(ember_sebc *s, const char *path) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), T = ember_sebc_num_tables(s);
    (void)T;
    const char *fn = "ember_checkpoint_load";
    ember_status st = EMBER_OK;
    FILE *f = NULL;
    entry *e = NULL;
    uint32_t n = 0;
    scratch ebuf = {0}, buf = {0}, meta = {0};
    // Per collection table: index of its entry in the file, step, dtype (rank 0 fills them).
    int64_t *m = reserve(ctx, &meta, sizeof(int64_t) * 3 * (size_t)T);
    if (!m) st = EMBER_ERR_NOMEM;
    if (st == EMBER_OK && !path) st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: path is NULL", fn);
    if (st == EMBER_OK && rank == 0) {
        if (!(f = fopen(path, "rb")))
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(errno));
        if (st == EMBER_OK) st = index_file(s, path, f, &e, &n, &ebuf);
        for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
            const ember_table_config *tc = ember_sebc_table(s, t);
            int64_t found = -1;
            for (uint32_t i = 0; i < n; i++)
                if (strcmp(e[i].name, tc->name) == 0) found = i;
            if (found < 0) {
                st = ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' is not in '%s'", fn, tc->name, path);
                break;
            }
            const entry *x = &e[found];
            int32_t cols[EMBER_MAX_TENSORS] = {0};
            const char *names[EMBER_MAX_TENSORS] = {0};
            const int nt = tensors_of(tc, cols, names);
            int same = x->rows == tc->rows && x->dim == tc->dim && x->kind == (int32_t)tc->optim.kind &&
                       x->ntensors == nt;
            for (int k = 0; k < nt && same; k++) same = x->cols[k] == cols[k];
            if (!same) {
                st = ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                                  "%s: table '%s' is %lld x %d with optimizer %d in '%s', %lld x %d with %d here", fn,
                                  tc->name, (long long)x->rows, (int)x->dim, (int)x->kind, path, (long long)tc->rows,
                                  (int)tc->dim, (int)tc->optim.kind);
                break;
            }
            m[3 * t] = found;
            m[3 * t + 1] = x->step;
            m[3 * t + 2] = x->dtype;
        }
    }
    st = ember_comm_agree(comm, st);
    if (st == EMBER_OK) st = ember_comm_bcast(comm, m, sizeof(int64_t) * 3 * (size_t)T, 0);
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        if ((int64_t)tc->dtype != m[3 * t + 2]) st = ember_sebc_convert_dtype(s, t, (ember_dtype)m[3 * t + 2]);
        int32_t cols[EMBER_MAX_TENSORS] = {0};
        const char *tensor_name[EMBER_MAX_TENSORS] = {0};
        const int nt = tensors_of(tc, cols, tensor_name);
        for (int k = 0; k < nt && st == EMBER_OK; k++) {
            const size_t cnt = (size_t)tc->rows * (size_t)cols[k];
            float *data = NULL;
            ember_status a = EMBER_OK;
            if (rank == 0) {
                const entry *x = &e[m[3 * t]];
                data = reserve(ctx, &buf, sizeof(float) * cnt);
                if (!data) a = EMBER_ERR_NOMEM;
                else if (fseek(f, x->offset[k], SEEK_SET) != 0 || fread(data, sizeof(float), cnt, f) != cnt)
                    a = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: reading table '%s' from '%s' failed: %s", fn,
                                            tc->name, path, ferror(f) ? strerror(errno) : "file shorter than indexed");
            }
            st = ember_comm_agree(comm, a);
            if (st == EMBER_OK) st = ember_sebc_write(s, t, tensor_name[k], data, 0);
        }
        if (st == EMBER_OK) ember_sebc_set_step(s, t, m[3 * t + 1]);
    }
    if (f) fclose(f);
    release(ctx, &ebuf);
    release(ctx, &buf);
    release(ctx, &meta);
    return st;
}
