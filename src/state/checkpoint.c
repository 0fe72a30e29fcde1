// Checkpoint directories (include/ember/state.h): every rank streams the pieces it holds into its
// own file, record by record; rank 0 commits the manifest; loading reads the records overlapping
// each piece a rank holds. The public API of the collection (pieces, steps, dtypes) is used, and
// one internal call: converting every table's dtype at once, all or nothing.
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "ember/shard.h"
#include "ember/state.h"
#include "shard/internal.h"
#include "state/durable.h"

#define TRY(expr)                        \
    do {                                 \
        const ember_status st_ = (expr); \
        if (st_ != EMBER_OK) return st_; \
    } while (0)

#define FORMAT_NAME "ember-checkpoint"
#define FORMAT_VERSION 2
#define MANIFEST "manifest.json"
#define MAX_NAME 256       // table names, with the terminating NUL
#define MAX_BLOB_NAME 128
#define MAX_MANIFEST ((size_t)1 << 30)

// ---- The manifest in memory (shared by save, load and inspection) -----------------------------

typedef struct ck_record {
    int32_t file;         // the writing rank: file g<generation>-r<file>.bin
    int64_t offset;
    int64_t r0, r1;       // global rows
    int32_t c0, c1;       // global columns ([0, 1) for per-row tensors)
    uint64_t bytes;
    uint32_t crc;
} ck_record;

typedef struct ck_tensor {
    char name[32];
    int32_t cols;
    ember_dtype dtype;
    int32_t first, count; // its records: records[first .. first + count)
} ck_tensor;

typedef struct ck_table {
    char name[MAX_NAME];
    int64_t rows, step;
    int32_t dim, ntensors;
    ember_optim_kind optim;
    ember_dtype dtype;
    ck_tensor tensors[EMBER_MAX_TENSORS];
    uint64_t bytes;
    int32_t nrecords;
} ck_table;

typedef struct ck_blob {
    char name[MAX_BLOB_NAME];
    int32_t file;
    int64_t offset;
    uint64_t bytes;
    uint32_t crc;
} ck_blob;

struct ember_checkpoint {
    ember_ctx *ctx;
    char dir[EMBER__PATH_MAX];
    int64_t generation;
    int32_t world, ntables, nblobs, nrecords;
    ck_table *tables;
    ck_blob *blobs;
    ck_record *records;
    FILE *f;              // the data file last read, and which one it is
    int32_t f_rank;
    int32_t size_rank;    // the data file last measured (held_bytes), and its size
    uint64_t size;
};

void ember_checkpoint_close(ember_checkpoint *c) {
    if (!c) return;
    ember_ctx *ctx = c->ctx;
    if (c->f) fclose(c->f);
    ember_ctx_free(ctx, c->tables);
    ember_ctx_free(ctx, c->blobs);
    ember_ctx_free(ctx, c->records);
    ember_ctx_free(ctx, c);
}


static void data_name(char *dst, size_t cap, int64_t generation, int32_t rank) {
    snprintf(dst, cap, "g%" PRId64 "-r%d.bin", generation, (int)rank);
}

// "<dir>/<name>" into dst; 0, or ENAMETOOLONG.
static int join(char *dst, size_t cap, const char *dir, const char *name) {
    const size_t a = strlen(dir), b = strlen(name);
    if (a + b + 2 > cap) return ENAMETOOLONG;
    memcpy(dst, dir, a);
    dst[a] = '/';
    memcpy(dst + a + 1, name, b + 1);
    return 0;
}

// ---- Parsing ----------------------------------------------------------------------------------

typedef struct parser {
    ember_ctx *ctx;
    const char *dir;
    ember_status st;
} parser;

// Records the first problem of the manifest (EMBER_ERR_FORMAT) and returns 0.
static int bad(parser *p, const char *where, const char *field, const char *what) {
    if (p->st == EMBER_OK)
        p->st = ember_ctx_set_error(p->ctx, EMBER_ERR_FORMAT, "checkpoint '%s': manifest.json %s: '%s' %s", p->dir,
                                    where, field, what);
    return 0;
}

static int get_int(parser *p, const cJSON *o, const char *where, const char *key, int64_t lo, int64_t hi,
                   int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return bad(p, where, key, "is missing or not a number");
    const double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
        return bad(p, where, key, "is not an integer in range");
    *out = (int64_t)d;
    return 1;
}

static int get_str(parser *p, const cJSON *o, const char *where, const char *key, char *dst, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) return bad(p, where, key, "is missing or not a string");
    const size_t n = strlen(v->valuestring);
    if (n == 0 || n >= cap) return bad(p, where, key, "is empty or too long");
    memcpy(dst, v->valuestring, n + 1);
    return 1;
}

// [a, b) pair of integers.
static int get_range(parser *p, const cJSON *o, const char *where, const char *key, int64_t hi, int64_t *a,
                     int64_t *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) return bad(p, where, key, "is not a [begin, end] pair");
    const double x = cJSON_GetArrayItem(v, 0)->valuedouble, y = cJSON_GetArrayItem(v, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(v, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(v, 1)) || !(x >= 0) ||
        !(y > x) || !(y <= (double)hi) || x != (double)(int64_t)x || y != (double)(int64_t)y)
        return bad(p, where, key, "is not a range inside the tensor");
    *a = (int64_t)x;
    *b = (int64_t)y;
    return 1;
}

// "g<G>-r<R>.bin" of this generation: R, or -1.
static int32_t file_rank(const char *name, int64_t generation, int32_t world) {
    long long g = -1;
    int r = -1, end = 0;
    if (sscanf(name, "g%lld-r%d.bin%n", &g, &r, &end) != 2 || name[end] != '\0' || g != generation || r < 0 ||
        r >= world)
        return -1;
    char again[64];
    data_name(again, sizeof again, generation, r); // canonical spelling only (no "+1", no leading zeros)
    return strcmp(again, name) == 0 ? r : -1;
}

static void *zalloc(ember_ctx *ctx, size_t bytes) {
    void *p = ember_ctx_alloc(ctx, bytes ? bytes : 1);
    if (p) memset(p, 0, bytes ? bytes : 1);
    return p;
}

static int parse_record(parser *p, ember_checkpoint *c, const cJSON *r, const char *where, const ck_table *t,
                        const ck_tensor *k, ck_record *out) {
    char file[64];
    int64_t off = 0, r0 = 0, r1 = 0, c0 = 0, c1 = 0, bytes = 0, crc = 0;
    if (!cJSON_IsObject(r)) return bad(p, where, "records", "holds a non-object");
    if (!get_str(p, r, where, "file", file, sizeof file) || !get_int(p, r, where, "offset", 0, INT64_MAX / 2, &off) ||
        !get_range(p, r, where, "rows", t->rows, &r0, &r1) || !get_range(p, r, where, "cols", k->cols, &c0, &c1) ||
        !get_int(p, r, where, "bytes", 0, INT64_MAX / 2, &bytes) || !get_int(p, r, where, "crc32", 0, UINT32_MAX, &crc))
        return 0;
    out->file = file_rank(file, c->generation, c->world);
    if (out->file < 0) return bad(p, where, "file", "is not a data file of this generation");
    if ((uint64_t)bytes != (uint64_t)(r1 - r0) * (uint64_t)(c1 - c0) * ember_dtype_size(k->dtype))
        return bad(p, where, "bytes", "does not match its rows, columns and dtype");
    *out = (ck_record){out->file, off, r0, r1, (int32_t)c0, (int32_t)c1, (uint64_t)bytes, (uint32_t)crc};
    return 1;
}

// ---- Records tile their tensor -------------------------------------------------------------------

// A sweep over the rows with a segment tree over the columns: each record adds 1 to its columns
// from row r0 and takes it back at r1; two records overlap where a count exceeds 1.
typedef struct sweep_event {
    int64_t row;
    int32_t c0, c1, delta;
} sweep_event;

static int cmp_event(const void *a, const void *b) {
    const sweep_event *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return (x->delta > y->delta) - (x->delta < y->delta); // a record ending before one starting
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

// Adds d to the elementary column intervals [a, b) of node's [lo, hi); mx[node] is the largest
// count in the node, lz[node] what was added to the whole node.
static void seg_add(int32_t *mx, int32_t *lz, int32_t node, int32_t lo, int32_t hi, int32_t a, int32_t b, int32_t d) {
    if (b <= lo || hi <= a) return;
    if (a <= lo && hi <= b) {
        mx[node] += d;
        lz[node] += d;
        return;
    }
    const int32_t mid = lo + (hi - lo) / 2;
    seg_add(mx, lz, 2 * node, lo, mid, a, b, d);
    seg_add(mx, lz, 2 * node + 1, mid, hi, a, b, d);
    mx[node] = lz[node] + (mx[2 * node] > mx[2 * node + 1] ? mx[2 * node] : mx[2 * node + 1]);
}

static int32_t column_index(const int32_t *xs, int32_t m, int32_t c) {
    int32_t lo = 0, hi = m; // the first xs[i] >= c (c is one of them)
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (xs[mid] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Whether no two records of tensor k overlap (1), they do (0), or memory ran out (-1). With every
// record inside the tensor and their areas summing to the tensor's, no overlap means that they
// cover it exactly once (an area check alone takes an overlap and a gap of the same size).
// O(n log n) in the tensor's n records.
static int records_disjoint(ember_checkpoint *c, const ck_tensor *k) {
    const int32_t n = k->count;
    if (n < 2) return 1;
    const ck_record *r = c->records + k->first;
    int32_t *xs = ember_ctx_alloc(c->ctx, sizeof(int32_t) * 2 * (size_t)n);
    sweep_event *ev = ember_ctx_alloc(c->ctx, sizeof(sweep_event) * 2 * (size_t)n);
    int32_t *tree = ember_ctx_alloc(c->ctx, sizeof(int32_t) * 16 * (size_t)n); // mx, lz: 4 * 2n each
    int ok = xs && ev && tree ? 1 : -1;
    if (ok == 1) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++) {
            xs[2 * i] = r[i].c0;
            xs[2 * i + 1] = r[i].c1;
            ev[2 * i] = (sweep_event){r[i].r0, r[i].c0, r[i].c1, 1};
            ev[2 * i + 1] = (sweep_event){r[i].r1, r[i].c0, r[i].c1, -1};
        }
        qsort(xs, 2 * (size_t)n, sizeof *xs, cmp_i32);
        for (int32_t i = 0; i < 2 * n; i++)
            if (i == 0 || xs[i] != xs[m - 1]) xs[m++] = xs[i];
        qsort(ev, 2 * (size_t)n, sizeof *ev, cmp_event);
        int32_t *mx = tree, *lz = tree + 8 * (size_t)n;
        memset(tree, 0, sizeof(int32_t) * 16 * (size_t)n);
        for (int32_t i = 0; i < 2 * n && ok == 1; i++) {
            seg_add(mx, lz, 1, 0, m - 1, column_index(xs, m, ev[i].c0), column_index(xs, m, ev[i].c1), ev[i].delta);
            if (mx[1] > 1) ok = 0;
        }
    }
    ember_ctx_free(c->ctx, xs);
    ember_ctx_free(c->ctx, ev);
    ember_ctx_free(c->ctx, tree);
    return ok;
}

// Parses manifest text into c (c->ctx and c->dir set). EMBER_OK or EMBER_ERR_FORMAT/NOMEM.
static ember_status parse_manifest(ember_checkpoint *c, const char *text, size_t len) {
    parser p = {c->ctx, c->dir, EMBER_OK};
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT, "checkpoint '%s': manifest.json is not valid JSON", c->dir);
    }
    char fmt[32];
    int64_t version = 0, gen = 0, world = 0;
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(root, "tables");
    const cJSON *blobs = cJSON_GetObjectItemCaseSensitive(root, "blobs");
    if (get_str(&p, root, "", "format", fmt, sizeof fmt) && strcmp(fmt, FORMAT_NAME) != 0)
        bad(&p, "", "format", "is not \"" FORMAT_NAME "\"");
    if (p.st == EMBER_OK && get_int(&p, root, "", "version", 0, INT32_MAX, &version) && version != FORMAT_VERSION)
        bad(&p, "", "version", "is not 2 (written by another ember version)");
    if (p.st == EMBER_OK) get_int(&p, root, "", "generation", 1, INT64_MAX / 2, &gen);
    if (p.st == EMBER_OK) get_int(&p, root, "", "world_size", 1, 1 << 24, &world);
    if (p.st == EMBER_OK && !cJSON_IsArray(tables)) bad(&p, "", "tables", "is missing or not an array");
    if (p.st == EMBER_OK && !cJSON_IsArray(blobs)) bad(&p, "", "blobs", "is missing or not an array");
    c->generation = gen;
    c->world = (int32_t)world;
    int32_t nrec = 0;
    const cJSON *tj, *kj;
    if (p.st == EMBER_OK) {
        cJSON_ArrayForEach(tj, tables) {
            cJSON_ArrayForEach(kj, cJSON_GetObjectItemCaseSensitive(tj, "tensors")) {
                const int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(kj, "records"));
                if (n > INT32_MAX - nrec) bad(&p, "", "records", "are too many");
                else nrec += n;
            }
        }
        c->ntables = cJSON_GetArraySize(tables);
        c->nblobs = cJSON_GetArraySize(blobs);
        c->tables = zalloc(c->ctx, sizeof(ck_table) * (size_t)c->ntables);
        c->blobs = zalloc(c->ctx, sizeof(ck_blob) * (size_t)c->nblobs);
        c->records = zalloc(c->ctx, sizeof(ck_record) * (size_t)nrec);
        if (p.st == EMBER_OK && (!c->tables || !c->blobs || !c->records))
            p.st = ember_ctx_set_error(c->ctx, EMBER_ERR_NOMEM, "checkpoint '%s': cannot allocate its manifest", c->dir);
    }
    int32_t ti = 0;
    if (p.st == EMBER_OK) {
        cJSON_ArrayForEach(tj, tables) {
            ck_table *t = &c->tables[ti++];
            char where[MAX_NAME + 64];
            snprintf(where, sizeof where, "table %d", (int)ti - 1);
            char opt[64], dt[16];
            int64_t dim = 0;
            if (!cJSON_IsObject(tj) || !get_str(&p, tj, where, "name", t->name, sizeof t->name)) {
                bad(&p, where, "name", "is missing");
                break;
            }
            snprintf(where, sizeof where, "table '%s'", t->name);
            if (!get_int(&p, tj, where, "rows", 1, INT64_MAX / 2, &t->rows) ||
                !get_int(&p, tj, where, "dim", 1, INT32_MAX, &dim) ||
                !get_int(&p, tj, where, "step", 0, INT64_MAX / 2, &t->step) ||
                !get_str(&p, tj, where, "optimizer", opt, sizeof opt) || !get_str(&p, tj, where, "dtype", dt, sizeof dt))
                break;
            t->dim = (int32_t)dim;
            if (ember_optim_parse(opt, &t->optim) != EMBER_OK) {
                ember_ctx_clear_error(c->ctx); // ember_optim_parse names it; the manifest's error is ours
                bad(&p, where, "optimizer", "is not an optimizer this ember knows");
                break;
            }
            if (ember_dtype_parse(dt, &t->dtype) != EMBER_OK || !ember_dtype_is_storage(t->dtype)) {
                bad(&p, where, "dtype", "is not fp32, fp16 or bf16");
                break;
            }
            for (int32_t j = 0; j < ti - 1; j++)
                if (strcmp(c->tables[j].name, t->name) == 0) bad(&p, where, "name", "appears twice");
            const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(tj, "tensors");
            if (!cJSON_IsArray(tensors) || cJSON_GetArraySize(tensors) < 1 ||
                cJSON_GetArraySize(tensors) > EMBER_MAX_TENSORS) {
                bad(&p, where, "tensors", "is not an array of 1 to 3 tensors");
                break;
            }
            cJSON_ArrayForEach(kj, tensors) {
                ck_tensor *k = &t->tensors[t->ntensors++];
                int64_t cols = 0;
                char kdt[16];
                if (!cJSON_IsObject(kj) || !get_str(&p, kj, where, "name", k->name, sizeof k->name) ||
                    !get_int(&p, kj, where, "cols", 1, dim > 3 ? dim : 3, &cols) || // 3: a hashed table's ids
                    !get_str(&p, kj, where, "dtype", kdt, sizeof kdt))
                    break;
                k->cols = (int32_t)cols;
                if (ember_dtype_parse(kdt, &k->dtype) != 0) {
                    bad(&p, where, "dtype", "of a tensor is not fp32, fp16, bf16 or int64");
                    break;
                }
                const cJSON *recs = cJSON_GetObjectItemCaseSensitive(kj, "records"), *rj;
                if (!cJSON_IsArray(recs)) {
                    bad(&p, where, "records", "is missing or not an array");
                    break;
                }
                k->first = c->nrecords;
                uint64_t area = 0;
                cJSON_ArrayForEach(rj, recs) {
                    ck_record *r = &c->records[c->nrecords];
                    if (!parse_record(&p, c, rj, where, t, k, r)) break;
                    c->nrecords++;
                    k->count++;
                    area += (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0);
                    t->bytes += r->bytes;
                    t->nrecords++;
                }
                // Records tile the tensor: inside it (checked above), of its area, and disjoint.
                if (p.st == EMBER_OK && area != (uint64_t)t->rows * (uint64_t)k->cols)
                    bad(&p, where, k->name, "records do not cover the tensor exactly once");
                const int disjoint = p.st == EMBER_OK ? records_disjoint(c, k) : 1;
                if (disjoint < 0)
                    p.st = ember_ctx_set_error(c->ctx, EMBER_ERR_NOMEM, "checkpoint '%s': cannot allocate its manifest",
                                               c->dir);
                else if (!disjoint)
                    bad(&p, where, k->name, "records do not cover the tensor exactly once");
                if (p.st != EMBER_OK) break;
            }
            if (p.st != EMBER_OK) break;
        }
    }
    int32_t bi = 0;
    const cJSON *bj;
    if (p.st == EMBER_OK) {
        cJSON_ArrayForEach(bj, blobs) {
            ck_blob *b = &c->blobs[bi++];
            char file[64];
            int64_t off = 0, bytes = 0, crc = 0;
            if (!cJSON_IsObject(bj) || !get_str(&p, bj, "blob", "name", b->name, sizeof b->name) ||
                !get_str(&p, bj, b->name, "file", file, sizeof file) ||
                !get_int(&p, bj, b->name, "offset", 0, INT64_MAX / 2, &off) ||
                !get_int(&p, bj, b->name, "bytes", 0, INT64_MAX / 2, &bytes) ||
                !get_int(&p, bj, b->name, "crc32", 0, UINT32_MAX, &crc))
                break;
            b->file = file_rank(file, c->generation, c->world);
            if (b->file < 0) {
                bad(&p, b->name, "file", "is not a data file of this generation");
                break;
            }
            b->offset = off;
            b->bytes = (uint64_t)bytes;
            b->crc = (uint32_t)crc;
        }
    }
    cJSON_Delete(root);
    return p.st;
}

// Reads dir/manifest.json whole into a context buffer (*text, *len). Local.
static ember_status read_manifest(ember_ctx *ctx, const char *dir, char **text, size_t *len) {
    char path[EMBER__PATH_MAX];
    *text = NULL;
    *len = 0;
    if (join(path, sizeof path, dir, MANIFEST) != 0)
        return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "checkpoint '%s': path too long", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "checkpoint '%s': cannot open: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "checkpoint '%s' is not a directory", dir);
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT)
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                                   "checkpoint '%s' has no manifest.json: not a checkpoint, or its first save never "
                                   "committed",
                                   dir);
    if (!f) return ember_ctx_set_error(ctx, EMBER_ERR_IO, "checkpoint '%s': cannot open '%s': %s", dir, path, strerror(errno));
    ember_status st = EMBER_OK;
    long n = -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "checkpoint '%s': cannot read '%s': %s", dir, path, strerror(errno));
    else if ((size_t)n > MAX_MANIFEST)
        st = ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "checkpoint '%s': '%s' is larger than 1 GiB", dir, path);
    else if (!(*text = ember_ctx_alloc(ctx, (size_t)n + 1)))
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "checkpoint '%s': cannot allocate %ld bytes", dir, n);
    else if (fread(*text, 1, (size_t)n, f) != (size_t)n)
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "checkpoint '%s': cannot read '%s': %s", dir, path,
                                 ferror(f) ? strerror(errno) : "file shorter than its size");
    fclose(f);
    if (st != EMBER_OK) {
        ember_ctx_free(ctx, *text);
        *text = NULL;
        return st;
    }
    (*text)[n] = '\0';
    *len = (size_t)n;
    return EMBER_OK;
}

static ember_status new_checkpoint(ember_ctx *ctx, const char *dir, ember_checkpoint **out) {
    *out = NULL;
    if (!dir) return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "checkpoint: directory is NULL");
    if (strlen(dir) + 64 >= EMBER__PATH_MAX)
        return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "checkpoint: directory name of %zu bytes is too long",
                                   strlen(dir));
    ember_checkpoint *c = zalloc(ctx, sizeof *c);
    if (!c) return ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "checkpoint: cannot allocate");
    c->ctx = ctx;
    c->f_rank = -1;
    c->size_rank = -1;
    strcpy(c->dir, dir);
    *out = c;
    return EMBER_OK;
}

ember_status ember_checkpoint_open(ember_ctx *ctx, const char *dir, ember_checkpoint **out) {
    if (!ctx || !out) return EMBER_ERR_INVALID_ARG;
    TRY(new_checkpoint(ctx, dir, out));
    char *text = NULL;
    size_t len = 0;
    ember_status st = read_manifest(ctx, dir, &text, &len);
    if (st == EMBER_OK) st = parse_manifest(*out, text, len);
    ember_ctx_free(ctx, text);
    if (st != EMBER_OK) {
        ember_checkpoint_close(*out);
        *out = NULL;
    }
    return st;
}

int64_t ember_checkpoint_generation(const ember_checkpoint *c) { return c ? c->generation : 0; }
int32_t ember_checkpoint_world_size(const ember_checkpoint *c) { return c ? c->world : 0; }
int32_t ember_checkpoint_num_tables(const ember_checkpoint *c) { return c ? c->ntables : 0; }
int32_t ember_checkpoint_num_blobs(const ember_checkpoint *c) { return c ? c->nblobs : 0; }

ember_status ember_checkpoint_table_info(const ember_checkpoint *c, int32_t i, ember_checkpoint_table *out) {
    if (!c || !out || i < 0 || i >= c->ntables) return EMBER_ERR_INVALID_ARG;
    const ck_table *t = &c->tables[i];
    *out = (ember_checkpoint_table){t->name, t->rows, t->dim, t->optim, t->dtype, t->step, t->nrecords, t->bytes};
    return EMBER_OK;
}

ember_status ember_checkpoint_blob_info(const ember_checkpoint *c, int32_t i, const char **name, size_t *bytes) {
    if (!c || i < 0 || i >= c->nblobs) return EMBER_ERR_INVALID_ARG;
    if (name) *name = c->blobs[i].name;
    if (bytes) *bytes = (size_t)c->blobs[i].bytes;
    return EMBER_OK;
}

// Of the `bytes` bytes at `offset` of rank `file`'s data file, how many the file holds (0 when it
// cannot be measured: reading it fails later, with the reason). Read buffers are sized by this,
// never by the manifest's claim alone: a damaged or foreign manifest ("bytes": 40000000000000)
// cannot make a reader allocate more than the files hold.
static uint64_t held_bytes(ember_checkpoint *c, int32_t file, int64_t offset, uint64_t bytes) {
    if (c->size_rank != file) {
        char name[64], path[EMBER__PATH_MAX];
        struct stat sb;
        data_name(name, sizeof name, c->generation, file);
        join(path, sizeof path, c->dir, name);
        c->size = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        c->size_rank = file;
    }
    if ((uint64_t)offset >= c->size) return 0;
    return bytes < c->size - (uint64_t)offset ? bytes : c->size - (uint64_t)offset;
}

// Reads `bytes` bytes at `offset` of rank `file`'s data file into dst (cap bytes) and checks
// their CRC. A record reaching past the end of its file fails before anything is read.
static ember_status read_at(ember_checkpoint *c, int32_t file, int64_t offset, uint64_t bytes, uint32_t crc,
                            void *dst, size_t cap, const char *what) {
    char name[64], path[EMBER__PATH_MAX];
    data_name(name, sizeof name, c->generation, file);
    join(path, sizeof path, c->dir, name); // fits: new_checkpoint checked the length
    if (c->f_rank != file) {
        if (c->f) fclose(c->f);
        c->f_rank = -1;
        if (!(c->f = fopen(path, "rb")))
            return ember_ctx_set_error(c->ctx, EMBER_ERR_IO, "checkpoint '%s': cannot open '%s': %s", c->dir, path,
                                       strerror(errno));
        c->f_rank = file;
    }
    struct stat sb;
    if (fstat(fileno(c->f), &sb) == 0 &&
        ((uint64_t)offset > (uint64_t)sb.st_size || bytes > (uint64_t)sb.st_size - (uint64_t)offset))
        return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                   "checkpoint '%s': '%s' ends before %s (offset %" PRId64 ", %" PRIu64 " bytes)",
                                   c->dir, path, what, offset, bytes);
    if (bytes > cap) // the buffer was sized by held_bytes: the file grew since
        return ember_ctx_set_error(c->ctx, EMBER_ERR_IO, "checkpoint '%s': '%s' changed while it was read", c->dir, path);
    if (fseeko(c->f, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, (size_t)bytes, c->f) != (size_t)bytes) {
        const int eof = feof(c->f);
        clearerr(c->f);
        if (eof)
            return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                       "checkpoint '%s': '%s' ends before %s (offset %" PRId64 ", %" PRIu64 " bytes)",
                                       c->dir, path, what, offset, bytes);
        return ember_ctx_set_error(c->ctx, EMBER_ERR_IO, "checkpoint '%s': reading '%s' failed: %s", c->dir, path,
                                   strerror(errno));
    }
    const uint32_t got = (uint32_t)crc32_z(0, dst, (z_size_t)bytes);
    if (got != crc)
        return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                   "checkpoint '%s': %s in '%s' fails its CRC-32 (%08x, expected %08x): the file is "
                                   "damaged",
                                   c->dir, what, path, (unsigned)got, (unsigned)crc);
    return EMBER_OK;
}

static const ck_blob *find_blob(const ember_checkpoint *c, const char *name) {
    for (int32_t i = 0; name && i < c->nblobs; i++)
        if (strcmp(c->blobs[i].name, name) == 0) return &c->blobs[i];
    return NULL;
}

ember_status ember_checkpoint_read_blob(ember_checkpoint *c, const char *name, void *dst, size_t cap, size_t *bytes) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    const ck_blob *b = find_blob(c, name);
    if (!b)
        return ember_ctx_set_error(c->ctx, EMBER_ERR_INVALID_ARG, "checkpoint '%s' has no blob '%s'", c->dir,
                                   name ? name : "(null)");
    if (bytes) *bytes = (size_t)b->bytes;
    if (b->bytes > cap || (!dst && b->bytes > 0))
        return ember_ctx_set_error(c->ctx, EMBER_ERR_INVALID_ARG, "checkpoint '%s': blob '%s' has %" PRIu64
                                   " bytes, more than the %zu given", c->dir, name, b->bytes, cap);
    char what[MAX_BLOB_NAME + 16];
    snprintf(what, sizeof what, "blob '%s'", b->name);
    return b->bytes ? read_at(c, b->file, b->offset, b->bytes, b->crc, dst, cap, what) : EMBER_OK;
}

ember_status ember_checkpoint_verify(ember_checkpoint *c) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    uint64_t most = 1; // the largest record or blob, as far as the files hold it
    for (int32_t i = 0; i < c->nrecords; i++) {
        const uint64_t n = held_bytes(c, c->records[i].file, c->records[i].offset, c->records[i].bytes);
        most = n > most ? n : most;
    }
    for (int32_t i = 0; i < c->nblobs; i++) {
        const uint64_t n = held_bytes(c, c->blobs[i].file, c->blobs[i].offset, c->blobs[i].bytes);
        most = n > most ? n : most;
    }
    void *buf = ember_ctx_alloc(c->ctx, (size_t)most);
    if (!buf) return ember_ctx_set_error(c->ctx, EMBER_ERR_NOMEM, "checkpoint: cannot allocate %" PRIu64 " bytes", most);
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < c->ntables && st == EMBER_OK; t++) {
        const ck_table *tb = &c->tables[t];
        for (int32_t k = 0; k < tb->ntensors && st == EMBER_OK; k++) {
            const ck_tensor *x = &tb->tensors[k];
            for (int32_t j = x->first; j < x->first + x->count && st == EMBER_OK; j++) {
                const ck_record *r = &c->records[j];
                char what[MAX_NAME + 96];
                snprintf(what, sizeof what, "table '%s' %s rows [%" PRId64 ", %" PRId64 ")", tb->name, x->name, r->r0,
                         r->r1);
                st = read_at(c, r->file, r->offset, r->bytes, r->crc, buf, (size_t)most, what);
            }
        }
    }
    for (int32_t i = 0; i < c->nblobs && st == EMBER_OK; i++) {
        char what[MAX_BLOB_NAME + 16];
        snprintf(what, sizeof what, "blob '%s'", c->blobs[i].name);
        if (c->blobs[i].bytes)
            st = read_at(c, c->blobs[i].file, c->blobs[i].offset, c->blobs[i].bytes, c->blobs[i].crc, buf, (size_t)most,
                         what);
    }
    ember_ctx_free(c->ctx, buf);
    return st;
}

// ---- Saving -----------------------------------------------------------------------------------

// What a rank wrote, gathered onto every rank for the manifest (fixed layout: exchanged as bytes).
typedef struct wrote {
    int32_t table, tensor; // a blob: table -1, tensor = its index in the options
    int32_t file, c0, c1, pad;
    int64_t offset, r0, r1;
    uint64_t bytes;
    uint32_t crc, pad2;
} wrote;

typedef struct save_state {
    ember_ctx *ctx;
    wrote *list;
    int64_t n, cap;
} save_state;

static int add_wrote(save_state *w, const wrote *x) {
    if (w->n == w->cap) {
        const int64_t cap = w->cap ? 2 * w->cap : 64;
        wrote *p = ember_ctx_alloc(w->ctx, sizeof(wrote) * (size_t)cap);
        if (!p) return 0;
        if (w->n) memcpy(p, w->list, sizeof(wrote) * (size_t)w->n);
        ember_ctx_free(w->ctx, w->list);
        w->list = p;
        w->cap = cap;
    }
    w->list[w->n++] = *x;
    return 1;
}

static int blob_name_ok(const char *name) {
    if (!name) return 0;
    const size_t n = strlen(name);
    if (n == 0 || n >= MAX_BLOB_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

// Columns of tensor info[k] a piece holds: its slice for [rows, dim] tensors, [0, 1) for per-row.
static void piece_cols(const ember_table_config *tc, const ember_tensor_info *ti, const ember_piece *p, int32_t *c0,
                       int32_t *c1) {
    if (ti->cols == tc->dim && ti->dtype != EMBER_DTYPE_I64) { // a hashed table's "ids" is never sliced
        *c0 = p->col_begin;
        *c1 = p->col_end;
    } else {
        *c0 = 0;
        *c1 = ti->cols;
    }
}

static ember_dtype tensor_dtype(const ember_tensor_info *ti) { return ti->dtype; }

// Rank 0: the generation of the checkpoint in dir now (0 if none), creating dir if missing.
static ember_status prepare_dir(ember_ctx *ctx, const char *dir, int64_t *generation) {
    *generation = 0;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: cannot create directory '%s': %s", dir,
                                   strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: '%s' is not a directory", dir);
    // The highest generation named by the manifest or by any data file (a killed save's leftovers
    // included), so a new generation never reuses a name.
    // No readable manifest is no previous checkpoint; being out of memory fails the save.
    ember_checkpoint *c = NULL;
    const ember_status st = ember_checkpoint_open(ctx, dir, &c);
    if (st == EMBER_ERR_NOMEM) return st;
    if (st == EMBER_OK) *generation = c->generation;
    else ember_ctx_clear_error(ctx);
    ember_checkpoint_close(c);
    DIR *d = opendir(dir);
    if (!d)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: cannot list '%s': %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        long long g = 0;
        int r = 0;
        if (sscanf(e->d_name, "g%lld-r%d.bin", &g, &r) == 2 && g > *generation && g < INT64_MAX / 4) *generation = g;
    }
    closedir(d);
    return EMBER_OK;
}

// Rank 0 after the commit: removes every data file (and temporary) of other generations.
static void collect_garbage(const char *dir, int64_t generation) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[EMBER__PATH_MAX];
    for (struct dirent *e; (e = readdir(d));) {
        long long g = 0;
        int r = 0, end = 0;
        const char *n = e->d_name;
        const size_t len = strlen(n);
        const int partial = len > 8 && strcmp(n + len - 8, ".partial") == 0;
        const int ours = sscanf(n, "g%lld-r%d.bin%n", &g, &r, &end) == 2 &&
                         (n[end] == '\0' || strcmp(n + end, ".partial") == 0);
        if ((ours && (g != generation || partial)) || strcmp(n, MANIFEST ".partial") == 0) {
            if (join(path, sizeof path, dir, n) == 0) unlink(path);
        }
    }
    closedir(d);
}

// Opens this rank's data file at its first record (a rank with nothing to write writes no file).
static ember_status open_once(ember_ctx *ctx, ember__dfile *df, const char *path, int *opened) {
    if (*opened) return EMBER_OK;
    if (ember__dfile_open(df, path) != 0)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: cannot open '%s.partial': %s", path,
                                   strerror(df->err));
    *opened = 1;
    return EMBER_OK;
}

// This rank's records: its pieces (the canonical copy of each value: per-row state from the
// col_begin == 0 piece, a data-parallel table from rank t % W) and, on rank 0, the blobs.
static ember_status write_pieces(ember_sebc *s, const char *dir, ember__dfile *df, int *opened, int64_t generation,
                                 size_t chunk, const ember_checkpoint_options *o, save_state *w) {
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), W = ember_comm_size(comm), T = ember_sebc_num_tables(s);
    char name[64], path[EMBER__PATH_MAX];
    data_name(name, sizeof name, generation, rank);
    join(path, sizeof path, dir, name);
    int64_t offset = 0;
    void *buf = NULL;
    size_t cap = 0;
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t) && st == EMBER_OK; i++) {
            ember_piece p;
            st = ember_sebc_piece(s, t, i, &p);
            if (st != EMBER_OK || (p.replicated && t % W != rank)) continue;
            for (int32_t k = 0; k < nt && st == EMBER_OK; k++) {
                int32_t c0, c1;
                piece_cols(tc, &ti[k], &p, &c0, &c1);
                if (c1 - c0 == ti[k].cols && p.col_begin != 0) continue; // per-row state, ids: one copy
                const ember_dtype dt = tensor_dtype(&ti[k]);
                const size_t row_bytes = (size_t)(c1 - c0) * ember_dtype_size(dt);
                const int64_t per = chunk / row_bytes > 0 ? (int64_t)(chunk / row_bytes) : 1;
                const size_t need = row_bytes * (size_t)per; // the chunk, or one row larger than it
                if (need > cap) {
                    ember_ctx_free(ctx, buf);
                    cap = (buf = ember_ctx_alloc(ctx, need)) ? need : 0;
                    if (!buf) {
                        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_save: cannot allocate %zu bytes", need);
                        break;
                    }
                }
                if (st == EMBER_OK) st = open_once(ctx, df, path, opened);
                for (int64_t r = p.row_begin; r < p.row_end && st == EMBER_OK; r += per) {
                    const int64_t e = r + per < p.row_end ? r + per : p.row_end;
                    st = ember_sebc_piece_read(s, t, i, ti[k].name, r, e, dt, buf);
                    if (st != EMBER_OK) break;
                    const uint64_t bytes = (uint64_t)(e - r) * row_bytes;
                    const wrote x = {t, k, rank, c0, c1, 0, offset, r, e, bytes, (uint32_t)crc32_z(0, buf, (z_size_t)bytes), 0};
                    ember__dfile_write(df, buf, (size_t)bytes);
                    offset += (int64_t)bytes;
                    if (!add_wrote(w, &x))
                        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_save: cannot allocate");
                }
            }
        }
    }
    for (int32_t b = 0; rank == 0 && o && b < o->num_blobs && st == EMBER_OK; b++) {
        st = open_once(ctx, df, path, opened);
        if (st != EMBER_OK) break;
        const ember_checkpoint_blob *x = &o->blobs[b];
        const wrote y = {-1, b, rank, 0, 0, 0, offset, 0, 0, x->bytes, (uint32_t)crc32_z(0, x->data, (z_size_t)x->bytes), 0};
        ember__dfile_write(df, x->data, x->bytes);
        offset += (int64_t)x->bytes;
        if (!add_wrote(w, &y)) st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_save: cannot allocate");
    }
    ember_ctx_free(ctx, buf);
    if (st == EMBER_OK && *opened && df->err)
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: writing '%s.partial' failed: %s (the previous checkpoint is kept)", path,
                                 strerror(df->err));
    return st;
}

// Rank 0: the manifest's text (cJSON_Print'ed; free with cJSON_free), or NULL when out of memory.
static char *manifest_text(ember_sebc *s, int64_t generation, const int64_t *steps, const wrote *all, int64_t n,
                           const ember_checkpoint_options *o) {
    const int32_t T = ember_sebc_num_tables(s);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", FORMAT_NAME);
    cJSON_AddNumberToObject(root, "version", FORMAT_VERSION);
    cJSON_AddNumberToObject(root, "generation", (double)generation);
    cJSON_AddNumberToObject(root, "world_size", ember_comm_size(ember_sebc_comm(s)));
    cJSON *tables = cJSON_AddArrayToObject(root, "tables");
    char file[64];
    for (int32_t t = 0; t < T; t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        cJSON *tj = cJSON_CreateObject();
        cJSON_AddItemToArray(tables, tj);
        cJSON_AddStringToObject(tj, "name", tc->name);
        cJSON_AddNumberToObject(tj, "rows", (double)tc->rows);
        cJSON_AddNumberToObject(tj, "dim", tc->dim);
        cJSON_AddStringToObject(tj, "optimizer", ember_optim_name(tc->optim.kind));
        cJSON_AddStringToObject(tj, "dtype", ember_dtype_name(tc->dtype));
        cJSON_AddNumberToObject(tj, "step", (double)steps[t]);
        cJSON *tensors = cJSON_AddArrayToObject(tj, "tensors");
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t k = 0; k < nt; k++) {
            cJSON *kj = cJSON_CreateObject();
            cJSON_AddItemToArray(tensors, kj);
            cJSON_AddStringToObject(kj, "name", ti[k].name);
            cJSON_AddNumberToObject(kj, "cols", ti[k].cols);
            cJSON_AddStringToObject(kj, "dtype", ember_dtype_name(tensor_dtype(&ti[k])));
            cJSON *recs = cJSON_AddArrayToObject(kj, "records");
            for (int64_t j = 0; j < n; j++) {
                const wrote *x = &all[j];
                if (x->table != t || x->tensor != k) continue;
                cJSON *rj = cJSON_CreateObject();
                cJSON_AddItemToArray(recs, rj);
                data_name(file, sizeof file, generation, x->file);
                cJSON_AddStringToObject(rj, "file", file);
                cJSON_AddNumberToObject(rj, "offset", (double)x->offset);
                const double rows[2] = {(double)x->r0, (double)x->r1}, cols[2] = {x->c0, x->c1};
                cJSON_AddItemToObject(rj, "rows", cJSON_CreateDoubleArray(rows, 2));
                cJSON_AddItemToObject(rj, "cols", cJSON_CreateDoubleArray(cols, 2));
                cJSON_AddNumberToObject(rj, "bytes", (double)x->bytes);
                cJSON_AddNumberToObject(rj, "crc32", x->crc);
            }
        }
    }
    cJSON *blobs = cJSON_AddArrayToObject(root, "blobs");
    for (int64_t j = 0; j < n; j++) {
        const wrote *x = &all[j];
        if (x->table != -1) continue;
        cJSON *bj = cJSON_CreateObject();
        cJSON_AddItemToArray(blobs, bj);
        cJSON_AddStringToObject(bj, "name", o->blobs[x->tensor].name);
        data_name(file, sizeof file, generation, x->file);
        cJSON_AddStringToObject(bj, "file", file);
        cJSON_AddNumberToObject(bj, "offset", (double)x->offset);
        cJSON_AddNumberToObject(bj, "bytes", (double)x->bytes);
        cJSON_AddNumberToObject(bj, "crc32", x->crc);
    }
    char *text = cJSON_Print(root); // NULL when any allocation above failed
    cJSON_Delete(root);
    return text;
}

ember_status ember_checkpoint_save(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), W = ember_comm_size(comm), T = ember_sebc_num_tables(s);
    const char *fn = "ember_checkpoint_save";
    const size_t chunk = o && o->chunk_bytes ? o->chunk_bytes : EMBER_CHECKPOINT_CHUNK_DEFAULT;
    ember_status st = EMBER_OK;
    if (!dir) st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: directory is NULL", fn);
    else if (strlen(dir) + 64 >= EMBER__PATH_MAX)
        st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: directory name of %zu bytes is too long", fn, strlen(dir));
    for (int32_t b = 0; st == EMBER_OK && o && b < o->num_blobs; b++) {
        const ember_checkpoint_blob *x = &o->blobs[b];
        if (!blob_name_ok(x->name))
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                     "%s: blob %d name '%s': expected 1 to 127 letters, digits, '.', '_' or '-'", fn,
                                     (int)b, x->name ? x->name : "(null)");
        else if (!x->data && x->bytes)
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: blob '%s' has no data", fn, x->name);
        for (int32_t j = 0; j < b && st == EMBER_OK; j++)
            if (strcmp(o->blobs[j].name, x->name) == 0)
                st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: blob name '%s' appears twice", fn, x->name);
    }
    if (st == EMBER_OK && o && o->num_blobs < 0)
        st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: num_blobs %d < 0", fn, (int)o->num_blobs);
    for (int32_t t = 0; t < T && st == EMBER_OK; t++)
        if (strlen(ember_sebc_table(s, t)->name) >= MAX_NAME)
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: table name '%.40s...' is longer than %d bytes",
                                     fn, ember_sebc_table(s, t)->name, MAX_NAME - 1);
    int64_t generation = 0;
    if (st == EMBER_OK && rank == 0) st = prepare_dir(ctx, dir, &generation);
    TRY(ember_comm_agree(comm, st));
    TRY(ember_comm_bcast(comm, &generation, sizeof generation, 0));
    generation++;
    int64_t *steps = ember_ctx_alloc(ctx, sizeof(int64_t) * (size_t)(T ? T : 1));
    st = ember_comm_agree(comm, steps ? EMBER_OK : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate", fn));
    if (st != EMBER_OK) {
        ember_ctx_free(ctx, steps); // another rank failed
        return st;
    }
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) st = ember_sebc_step(s, t, &steps[t]);

    // 1. Every rank's records, durable under their final names (unreferenced until the commit).
    ember__dfile df;
    memset(&df, 0, sizeof df);
    int opened = 0;
    save_state w = {ctx, NULL, 0, 0};
    if (st == EMBER_OK) st = write_pieces(s, dir, &df, &opened, generation, chunk, o, &w);
    if (opened) {
        if (st != EMBER_OK) ember__dfile_abort(&df);
        else if (ember__dfile_commit(&df) != 0)
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: writing '%s' failed: %s (the previous checkpoint is kept)",
                                     fn, df.path, strerror(df.err));
    }
    st = ember_comm_agree(comm, st);

    // 2. What everyone wrote, onto every rank (small: one entry per record).
    int64_t *counts = st == EMBER_OK ? ember_ctx_alloc(ctx, sizeof(int64_t) * (size_t)W) : NULL;
    wrote *all = NULL;
    int64_t total = 0;
    if (st == EMBER_OK)
        st = ember_comm_agree(comm, counts ? EMBER_OK : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate", fn));
    if (st == EMBER_OK) st = ember_comm_allgather_i64(comm, w.n * (int64_t)sizeof(wrote), counts);
    for (int32_t r = 0; st == EMBER_OK && r < W; r++) total += counts[r];
    if (st == EMBER_OK)
        st = ember_comm_agree(comm, (all = ember_ctx_alloc(ctx, (size_t)total + 1))
                                        ? EMBER_OK
                                        : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate %" PRId64
                                                              " bytes for the records' list", fn, total + 1));
    if (st == EMBER_OK) st = ember_comm_allgatherv(comm, w.list, w.n * (int64_t)sizeof(wrote), all, counts, 1);

    // 3. The commit: rank 0 replaces manifest.json.
    if (st == EMBER_OK && rank == 0) {
        char *text = manifest_text(s, generation, steps, all, total / (int64_t)sizeof(wrote), o);
        char path[EMBER__PATH_MAX];
        join(path, sizeof path, dir, MANIFEST);
        ember__dfile m;
        if (!text) st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot build the manifest", fn);
        else if (ember__dfile_open(&m, path) != 0)
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: cannot open '%s.partial': %s", fn, path, strerror(m.err));
        else {
            ember__dfile_write(&m, text, strlen(text));
            if (ember__dfile_commit(&m) != 0)
                st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: writing '%s' failed: %s (the previous checkpoint is kept)",
                                         fn, path, strerror(m.err));
        }
        cJSON_free(text);
    }
    st = ember_comm_agree(comm, st);
    if (st != EMBER_OK && opened && df.err == 0) unlink(df.path); // this generation never committed
    if (st == EMBER_OK && rank == 0) collect_garbage(dir, generation);
    ember_ctx_free(ctx, steps);
    ember_ctx_free(ctx, counts);
    ember_ctx_free(ctx, all);
    ember_ctx_free(ctx, w.list);
    return st;
}

// ---- Loading ----------------------------------------------------------------------------------

// Checks that the checkpoint holds every table of s with the same shape; indices into c->tables.
static ember_status match_tables(ember_sebc *s, const ember_checkpoint *c, int32_t *index) {
    ember_ctx *ctx = c->ctx;
    const char *fn = "ember_checkpoint_load";
    for (int32_t t = 0; t < ember_sebc_num_tables(s); t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        const ck_table *x = NULL;
        for (int32_t i = 0; i < c->ntables && !x; i++)
            if (strcmp(c->tables[i].name, tc->name) == 0) x = &c->tables[index[t] = i];
        if (!x) return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' is not in checkpoint '%s'", fn, tc->name, c->dir);
        if (x->rows != tc->rows)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' rows: %" PRId64 " in checkpoint '%s', %" PRId64 " here",
                                       fn, tc->name, x->rows, c->dir, tc->rows);
        if (x->dim != tc->dim)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' dim: %d in checkpoint '%s', %d here", fn,
                                       tc->name, (int)x->dim, c->dir, (int)tc->dim);
        if (x->optim != tc->optim.kind)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' optimizer: %s in checkpoint '%s', %s here",
                                       fn, tc->name, ember_optim_name(x->optim), c->dir, ember_optim_name(tc->optim.kind));
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        int same = nt == x->ntensors;
        for (int32_t k = 0; k < nt && same; k++)
            same = strcmp(ti[k].name, x->tensors[k].name) == 0 && ti[k].cols == x->tensors[k].cols &&
                   x->tensors[k].dtype == (k == 0 ? x->dtype : ti[k].dtype);
        if (!same)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' tensors in checkpoint '%s' are not the ones "
                                       "its optimizer %s keeps", fn, tc->name, c->dir, ember_optim_name(tc->optim.kind));
    }
    return EMBER_OK;
}

// Loads piece i of table t, tensor k, from the records overlapping it.
static ember_status load_piece(ember_sebc *s, ember_checkpoint *c, const ck_table *x, int32_t t, int32_t i, int32_t k,
                               const ember_tensor_info *ti, void *rec_buf, size_t rec_cap, void *dst_buf, size_t chunk) {
    const ember_table_config *tc = ember_sebc_table(s, t);
    ember_piece p;
    TRY(ember_sebc_piece(s, t, i, &p));
    int32_t d0, d1;
    piece_cols(tc, ti, &p, &d0, &d1);
    const ck_tensor *kx = &x->tensors[k];
    const size_t es = ember_dtype_size(kx->dtype), dst_row = (size_t)(d1 - d0) * es;
    for (int32_t j = kx->first; j < kx->first + kx->count; j++) {
        const ck_record *r = &c->records[j];
        const int64_t a = r->r0 > p.row_begin ? r->r0 : p.row_begin, b = r->r1 < p.row_end ? r->r1 : p.row_end;
        const int32_t u = r->c0 > d0 ? r->c0 : d0, v = r->c1 < d1 ? r->c1 : d1;
        if (a >= b || u >= v) continue;
        char what[MAX_NAME + 96];
        snprintf(what, sizeof what, "table '%s' %s rows [%" PRId64 ", %" PRId64 ")", x->name, kx->name, r->r0, r->r1);
        TRY(read_at(c, r->file, r->offset, r->bytes, r->crc, rec_buf, rec_cap, what));
        const size_t src_row = (size_t)(r->c1 - r->c0) * es;
        const unsigned char *src = (const unsigned char *)rec_buf + (size_t)(a - r->r0) * src_row;
        if (r->c0 == d0 && r->c1 == d1) { // same columns: the record's rows go in as they are
            TRY(ember_sebc_piece_write(s, t, i, kx->name, a, b, kx->dtype, src));
            continue;
        }
        // Other columns (resharding between column slicings): read, patch and write back the
        // piece's rows, a chunk at a time.
        const int64_t per = chunk / dst_row > 0 ? (int64_t)(chunk / dst_row) : 1;
        for (int64_t r0 = a; r0 < b; r0 += per) {
            const int64_t r1 = r0 + per < b ? r0 + per : b;
            unsigned char *d = dst_buf;
            TRY(ember_sebc_piece_read(s, t, i, kx->name, r0, r1, kx->dtype, d));
            for (int64_t row = r0; row < r1; row++)
                memcpy(d + (size_t)(row - r0) * dst_row + (size_t)(u - d0) * es,
                       src + (size_t)(row - a) * src_row + (size_t)(u - r->c0) * es, (size_t)(v - u) * es);
            TRY(ember_sebc_piece_write(s, t, i, kx->name, r0, r1, kx->dtype, d));
        }
    }
    return EMBER_OK;
}

ember_status ember_checkpoint_load(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), T = ember_sebc_num_tables(s);
    size_t chunk = o && o->chunk_bytes ? o->chunk_bytes : EMBER_CHECKPOINT_CHUNK_DEFAULT;
    // Rank 0 reads the manifest once and every rank parses the same text.
    ember_checkpoint *c = NULL;
    ember_status st = new_checkpoint(ctx, dir, &c);
    char *text = NULL;
    size_t len = 0;
    if (st == EMBER_OK && rank == 0) st = read_manifest(ctx, dir, &text, &len);
    st = ember_comm_agree(comm, st);
    int64_t n = (int64_t)len;
    if (st == EMBER_OK) st = ember_comm_bcast(comm, &n, sizeof n, 0);
    if (st == EMBER_OK && rank != 0 && !(text = ember_ctx_alloc(ctx, (size_t)n + 1)))
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_load: cannot allocate %lld bytes", (long long)n);
    st = ember_comm_agree(comm, st);
    if (st == EMBER_OK) st = ember_comm_bcast(comm, text, (size_t)n, 0);
    if (st == EMBER_OK) st = parse_manifest(c, text, (size_t)n);
    ember_ctx_free(ctx, text);
    int32_t *index = st == EMBER_OK ? zalloc(ctx, sizeof(int32_t) * (size_t)(T ? T : 1)) : NULL;
    if (st == EMBER_OK && !index) st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_load: cannot allocate");
    if (st == EMBER_OK) st = match_tables(s, c, index);
    // Buffers: the largest record of the tables loaded (as far as the files hold it), and one
    // chunk of a destination piece (at least one row of the widest tensor loaded). The checkpoint's
    // other tables are not read and size nothing.
    uint64_t most = 1;
    for (int32_t t = 0; st == EMBER_OK && t < T; t++)
        for (int32_t k = 0; k < c->tables[index[t]].ntensors; k++) {
            const ck_tensor *x = &c->tables[index[t]].tensors[k];
            const size_t row = (size_t)x->cols * ember_dtype_size(x->dtype);
            chunk = row > chunk ? row : chunk;
            for (int32_t j = x->first; j < x->first + x->count; j++) {
                const uint64_t held = held_bytes(c, c->records[j].file, c->records[j].offset, c->records[j].bytes);
                most = held > most ? held : most;
            }
        }
    void *rec_buf = NULL, *dst_buf = NULL;
    ember_dtype *dtypes = NULL;
    if (st == EMBER_OK && (!(rec_buf = ember_ctx_alloc(ctx, (size_t)most)) || !(dst_buf = ember_ctx_alloc(ctx, chunk)) ||
                           !(dtypes = ember_ctx_alloc(ctx, sizeof(ember_dtype) * (size_t)(T ? T : 1)))))
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_load: cannot allocate %" PRIu64 " + %zu bytes",
                                 most, chunk);
    // The stored dtypes, every table at once (the one step that allocates once tables change:
    // all of it before the first write, agreed on by every rank).
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) dtypes[t] = c->tables[index[t]].dtype;
    st = ember__sebc_convert_dtypes(s, dtypes, st);
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        const ck_table *x = &c->tables[index[t]];
        const ember_table_config *tc = ember_sebc_table(s, t);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t) && st == EMBER_OK; i++)
            for (int32_t k = 0; k < nt && st == EMBER_OK; k++)
                st = load_piece(s, c, x, t, i, k, &ti[k], rec_buf, (size_t)most, dst_buf, chunk);
        if (st == EMBER_OK) st = ember_sebc_set_step(s, t, x->step);
        st = ember_comm_agree(comm, st);
    }
    ember_ctx_free(ctx, rec_buf);
    ember_ctx_free(ctx, dst_buf);
    ember_ctx_free(ctx, dtypes);
    ember_ctx_free(ctx, index);
    ember_checkpoint_close(c);
    return st;
}
