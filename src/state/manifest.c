// The checkpoint format (include/ember/state.h, docs/checkpoints.md): manifest.json's text for a
// save; its parse for open and load with every structural check (fields in range, records inside
// their tensor, of its size and dtype, tiling it exactly once, in this generation's files); and
// the checks of what a load relies on beyond the structure, shared by verify and load (every
// table's tensors those its configuration keeps, blob names valid and unique, a table at least).
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "state/internal.h"

#define MAX_MANIFEST ((size_t)1 << 30)
// The largest tensor a manifest may describe (1 EiB): rows x cols x element size, and a table's
// EMBER_MAX_TENSORS of them, then fit in 64 bits (the area and byte checks cannot wrap).
#define MAX_TENSOR_BYTES ((uint64_t)1 << 60)

void ember__ckpt_data_name(char *dst, size_t cap, int64_t generation, int32_t rank) {
    snprintf(dst, cap, "g%" PRId64 "-r%d.bin", generation, (int)rank);
}

int ember__ckpt_blob_name_ok(const char *name) {
    if (!name) return 0;
    const size_t n = strlen(name);
    if (n == 0 || n >= EMBER__CKPT_MAX_BLOB_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

int ember__ckpt_join(char *dst, size_t cap, const char *dir, const char *name) {
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

// "g<G>-r<R>.bin" of a generation of c's chain (base_generation <= G <= generation) and a rank
// of its world: R (and *gen = G), or -1.
static int32_t file_rank(const ember_checkpoint *c, const char *name, int64_t *gen) {
    long long g = -1;
    int r = -1, end = 0;
    if (sscanf(name, "g%lld-r%d.bin%n", &g, &r, &end) != 2 || name[end] != '\0' || g < c->base_generation ||
        g > c->generation || r < 0 || r >= c->world)
        return -1;
    char again[64];
    ember__ckpt_data_name(again, sizeof again, g, r); // canonical spelling only (no "+1", no leading zeros)
    *gen = g;
    return strcmp(again, name) == 0 ? r : -1;
}

static int parse_record(parser *p, ember_checkpoint *c, const cJSON *r, const char *where,
                        const ember__ckpt_table *t, const ember__ckpt_tensor *k, ember__ckpt_record *out) {
    char file[64];
    int64_t off = 0, r0 = 0, r1 = 0, c0 = 0, c1 = 0, bytes = 0, crc = 0, count = 0;
    if (!cJSON_IsObject(r)) return bad(p, where, "records", "holds a non-object");
    if (!get_str(p, r, where, "file", file, sizeof file) || !get_int(p, r, where, "offset", 0, INT64_MAX / 2, &off) ||
        !get_range(p, r, where, "rows", t->rows, &r0, &r1) || !get_range(p, r, where, "cols", k->cols, &c0, &c1) ||
        !get_int(p, r, where, "bytes", 0, INT64_MAX / 2, &bytes) || !get_int(p, r, where, "crc32", 0, UINT32_MAX, &crc))
        return 0;
    if (cJSON_GetObjectItemCaseSensitive(r, "count") && !get_int(p, r, where, "count", 1, r1 - r0, &count)) return 0;
    int64_t gen = 0;
    const int32_t rank = file_rank(c, file, &gen);
    if (rank < 0) return bad(p, where, "file", "is not a data file of this checkpoint's generations");
    // A row list: count row numbers, then count rows; else rows [r0, r1).
    const uint64_t nrows = (uint64_t)(count ? count : r1 - r0);
    if ((uint64_t)bytes != nrows * (uint64_t)(c1 - c0) * ember_dtype_size(k->dtype) + (count ? 8 * nrows : 0))
        return bad(p, where, "bytes", "does not match its rows, columns and dtype");
    *out = (ember__ckpt_record){rank, gen, off, r0, r1, (int32_t)c0, (int32_t)c1, (uint64_t)bytes, (uint32_t)crc, count};
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
static int records_disjoint(ember_checkpoint *c, const ember__ckpt_tensor *k) {
    const int32_t n = k->count;
    if (n < 2) return 1;
    const ember__ckpt_record *r = c->records + k->first;
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

// ---- The manifest as a whole (ember__ckpt_parse) ------------------------------------------------

// The top-level fields; *tables and *blobs are the two arrays. 1 when all are well.
static int parse_header(parser *p, ember_checkpoint *c, const cJSON *root, const cJSON **tables, const cJSON **blobs) {
    char fmt[32], chain[24];
    int64_t version = 0, gen = 0, world = 0, base = 0;
    *tables = cJSON_GetObjectItemCaseSensitive(root, "tables");
    *blobs = cJSON_GetObjectItemCaseSensitive(root, "blobs");
    if (get_str(p, root, "", "format", fmt, sizeof fmt) && strcmp(fmt, EMBER__CKPT_FORMAT) != 0)
        bad(p, "", "format", "is not \"" EMBER__CKPT_FORMAT "\"");
    if (p->st == EMBER_OK && get_int(p, root, "", "version", 0, INT32_MAX, &version) && version != 2 &&
        version != EMBER__CKPT_VERSION)
        bad(p, "", "version", "is not 2 or 3 (written by another ember version)");
    if (p->st == EMBER_OK) get_int(p, root, "", "generation", 1, INT64_MAX / 2, &gen);
    base = gen; // version 2: no deltas
    c->chain = 0;
    if (p->st == EMBER_OK && version >= 3 && get_int(p, root, "", "base_generation", 1, gen, &base) &&
        get_str(p, root, "", "chain", chain, sizeof chain)) {
        char *end = NULL;
        c->chain = strtoull(chain, &end, 16);
        if (strlen(chain) != 16 || *end != '\0') bad(p, "", "chain", "is not 16 hexadecimal digits");
    }
    if (p->st == EMBER_OK) get_int(p, root, "", "world_size", 1, 1 << 24, &world);
    if (p->st == EMBER_OK && !cJSON_IsArray(*tables)) bad(p, "", "tables", "is missing or not an array");
    if (p->st == EMBER_OK && !cJSON_IsArray(*blobs)) bad(p, "", "blobs", "is missing or not an array");
    c->generation = gen;
    c->base_generation = base;
    c->world = (int32_t)world;
    return p->st == EMBER_OK;
}

// Counts the records (at most INT32_MAX) and allocates c's tables, blobs and records.
static void allocate(parser *p, ember_checkpoint *c, const cJSON *tables, const cJSON *blobs) {
    int32_t nrec = 0;
    const cJSON *tj, *kj;
    cJSON_ArrayForEach(tj, tables) {
        cJSON_ArrayForEach(kj, cJSON_GetObjectItemCaseSensitive(tj, "tensors")) {
            const int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(kj, "records"));
            if (n > INT32_MAX - nrec) bad(p, "", "records", "are too many");
            else nrec += n;
        }
    }
    c->ntables = cJSON_GetArraySize(tables);
    c->nblobs = cJSON_GetArraySize(blobs);
    c->tables = ember__calloc(c->ctx, sizeof(ember__ckpt_table) * (size_t)c->ntables);
    c->blobs = ember__calloc(c->ctx, sizeof(ember__ckpt_blob) * (size_t)c->nblobs);
    c->records = ember__calloc(c->ctx, sizeof(ember__ckpt_record) * (size_t)nrec);
    if (p->st == EMBER_OK && (!c->tables || !c->blobs || !c->records))
        p->st = ember_ctx_set_error(c->ctx, EMBER_ERR_NOMEM, "checkpoint '%s': cannot allocate its manifest", c->dir);
}

// Tensor kj of table t (its records appended to c->records). 1 to go on with the next tensor.
static int parse_tensor(parser *p, ember_checkpoint *c, const cJSON *kj, ember__ckpt_table *t, const char *where) {
    ember__ckpt_tensor *k = &t->tensors[t->ntensors++];
    int64_t cols = 0;
    char kdt[16];
    if (!cJSON_IsObject(kj) || !get_str(p, kj, where, "name", k->name, sizeof k->name) ||
        !get_int(p, kj, where, "cols", 1, t->dim > 3 ? t->dim : 3, &cols) || // 3: a hashed table's ids
        !get_str(p, kj, where, "dtype", kdt, sizeof kdt))
        return 0;
    k->cols = (int32_t)cols;
    if (ember_dtype_parse(kdt, &k->dtype) != 0)
        return bad(p, where, "dtype", "of a tensor is not fp32, fp16, bf16 or int64");
    if ((uint64_t)t->rows > MAX_TENSOR_BYTES / ember_dtype_size(k->dtype) / (uint64_t)k->cols)
        return bad(p, where, k->name, "is larger than 2^60 bytes (rows x cols x its dtype's size)");
    const cJSON *recs = cJSON_GetObjectItemCaseSensitive(kj, "records"), *rj;
    if (!cJSON_IsArray(recs)) return bad(p, where, "records", "is missing or not an array");
    k->first = c->nrecords;
    uint64_t area = 0;
    ember__ckpt_tensor base = *k; // the records of its first generation
    cJSON_ArrayForEach(rj, recs) {
        ember__ckpt_record *r = &c->records[c->nrecords];
        if (!parse_record(p, c, rj, where, t, k, r)) break;
        if (k->count > 0 && r->gen < r[-1].gen) {
            bad(p, where, k->name, "records are not in the order of their generations");
            break;
        }
        if (r->gen == c->records[k->first].gen) {
            if (r->count) {
                bad(p, where, k->name, "records of its first generation hold a row list (only a delta's may)");
                break;
            }
            area += (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0);
            base.count++;
        }
        c->nrecords++;
        k->count++;
        t->bytes += r->bytes;
        t->nrecords++;
    }
    // The first generation's records tile the tensor: inside it (checked above), of its area, and
    // disjoint. A delta's, after them, lie inside it.
    if (p->st == EMBER_OK && area != (uint64_t)t->rows * (uint64_t)k->cols)
        bad(p, where, k->name, "records do not cover the tensor exactly once");
    const int disjoint = p->st == EMBER_OK ? records_disjoint(c, &base) : 1;
    if (disjoint < 0)
        p->st = ember_ctx_set_error(c->ctx, EMBER_ERR_NOMEM, "checkpoint '%s': cannot allocate its manifest", c->dir);
    else if (!disjoint)
        bad(p, where, k->name, "records do not cover the tensor exactly once");
    return p->st == EMBER_OK;
}

// Table number ti (c->tables[ti]; the ones before it parsed). 1 to go on with the next table.
static int parse_table(parser *p, ember_checkpoint *c, const cJSON *tj, int32_t ti) {
    ember__ckpt_table *t = &c->tables[ti];
    char where[EMBER__CKPT_MAX_NAME + 64];
    snprintf(where, sizeof where, "table %d", (int)ti);
    char opt[64], dt[16];
    int64_t dim = 0;
    if (!cJSON_IsObject(tj) || !get_str(p, tj, where, "name", t->name, sizeof t->name))
        return bad(p, where, "name", "is missing");
    snprintf(where, sizeof where, "table '%s'", t->name);
    if (!get_int(p, tj, where, "rows", 1, INT64_MAX / 2, &t->rows) ||
        !get_int(p, tj, where, "dim", 1, INT32_MAX, &dim) ||
        !get_int(p, tj, where, "step", 0, INT64_MAX / 2, &t->step) ||
        !get_str(p, tj, where, "optimizer", opt, sizeof opt) || !get_str(p, tj, where, "dtype", dt, sizeof dt))
        return 0;
    t->dim = (int32_t)dim;
    if (ember_optim_parse(opt, &t->optim) != EMBER_OK) {
        ember_ctx_clear_error(c->ctx); // ember_optim_parse names it; the manifest's error is ours
        return bad(p, where, "optimizer", "is not an optimizer this ember knows");
    }
    if (ember_dtype_parse(dt, &t->dtype) != EMBER_OK || !ember_dtype_is_storage(t->dtype))
        return bad(p, where, "dtype", "is not fp32, fp16 or bf16");
    for (int32_t j = 0; j < ti; j++)
        if (strcmp(c->tables[j].name, t->name) == 0) bad(p, where, "name", "appears twice");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(tj, "tensors"), *kj;
    if (!cJSON_IsArray(tensors) || cJSON_GetArraySize(tensors) < 1 || cJSON_GetArraySize(tensors) > EMBER_MAX_TENSORS) {
        char what[64];
        snprintf(what, sizeof what, "is not an array of 1 to %d tensors", EMBER_MAX_TENSORS);
        return bad(p, where, "tensors", what);
    }
    cJSON_ArrayForEach(kj, tensors) {
        if (!parse_tensor(p, c, kj, t, where)) break;
    }
    return p->st == EMBER_OK;
}

// Blob number bi (c->blobs[bi]). 1 to go on with the next blob.
static int parse_blob(parser *p, ember_checkpoint *c, const cJSON *bj, int32_t bi) {
    ember__ckpt_blob *b = &c->blobs[bi];
    char file[64];
    int64_t off = 0, bytes = 0, crc = 0;
    if (!cJSON_IsObject(bj) || !get_str(p, bj, "blob", "name", b->name, sizeof b->name) ||
        !get_str(p, bj, b->name, "file", file, sizeof file) ||
        !get_int(p, bj, b->name, "offset", 0, INT64_MAX / 2, &off) ||
        !get_int(p, bj, b->name, "bytes", 0, INT64_MAX / 2, &bytes) ||
        !get_int(p, bj, b->name, "crc32", 0, UINT32_MAX, &crc))
        return 0;
    b->file = file_rank(c, file, &b->gen);
    if (b->file < 0) return bad(p, b->name, "file", "is not a data file of this checkpoint's generations");
    b->offset = off;
    b->bytes = (uint64_t)bytes;
    b->crc = (uint32_t)crc;
    return 1;
}

ember_status ember__ckpt_parse(ember_checkpoint *c, const char *text, size_t len) {
    parser p = {c->ctx, c->dir, EMBER_OK};
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT, "checkpoint '%s': manifest.json is not valid JSON", c->dir);
    }
    const cJSON *tables, *blobs, *x;
    if (parse_header(&p, c, root, &tables, &blobs)) allocate(&p, c, tables, blobs);
    int32_t i = 0;
    if (p.st == EMBER_OK) {
        cJSON_ArrayForEach(x, tables) {
            if (!parse_table(&p, c, x, i++)) break;
        }
    }
    i = 0;
    if (p.st == EMBER_OK) {
        cJSON_ArrayForEach(x, blobs) {
            if (!parse_blob(&p, c, x, i++)) break;
        }
    }
    cJSON_Delete(root);
    return p.st;
}

ember_status ember__ckpt_read_manifest(ember_ctx *ctx, const char *dir, char **text, size_t *len) {
    char path[EMBER__PATH_MAX];
    *text = NULL;
    *len = 0;
    if (ember__ckpt_join(path, sizeof path, dir, EMBER__CKPT_MANIFEST) != 0)
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
    if (!f)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "checkpoint '%s': cannot open '%s': %s", dir, path,
                                   strerror(errno));
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

// ---- What a load relies on beyond the structure (ember__ckpt_check) -----------------------------

// The configuration of the table a manifest's table describes, as far as its tensors go: rows,
// dim, dtype and optimizer, hashed when it holds a hashed table's "ids" or "candidates" (the
// latter only with min_count > 1: include/ember/ebc.h, "Local state dict"). Nothing else of a
// configuration changes ember_table_tensors' answer (a tiered table's tensors are a plain one's).
static ember_table_config table_config(const ember__ckpt_table *t) {
    ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
    tc.name = t->name;
    tc.rows = t->rows;
    tc.dim = t->dim;
    tc.dtype = t->dtype;
    tc.optim.kind = t->optim;
    for (int32_t k = 0; k < t->ntensors; k++) {
        const int ids = strcmp(t->tensors[k].name, "ids") == 0, cand = strcmp(t->tensors[k].name, "candidates") == 0;
        if (ids || cand) tc.hash.enabled = 1;
        if (cand) tc.hash.min_count = 2;
    }
    return tc;
}

// Index of `name` among names[0 .. n), or -1.
static int32_t name_index(const char *const *names, int32_t n, const char *name) {
    for (int32_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

// "a, b, c" into dst.
static void name_list(char *dst, size_t cap, const char *const *names, int32_t n) {
    size_t at = 0;
    dst[0] = '\0';
    for (int32_t i = 0; i < n && at < cap; i++) {
        const int w = snprintf(dst + at, cap - at, "%s%s", i ? ", " : "", names[i]);
        at += w > 0 ? (size_t)w : 0;
    }
}

// Table t's tensors are those ember_table_tensors lists for the table it describes, in that
// order, each of the columns and dtype the list gives (the weight: dim columns, the table's
// dtype; the optimizer's state: dim or 1 column, fp32; a hashed table's: 3 columns, int64).
static ember_status check_table(ember_checkpoint *c, const ember__ckpt_table *t) {
    const ember_table_config tc = table_config(t);
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int32_t n = ember_table_tensors(&tc, ti);
    char desc[EMBER__CKPT_MAX_NAME + 96];
    snprintf(desc, sizeof desc, "table '%s' (dim %d, %s, %s%s)", t->name, (int)t->dim, ember_dtype_name(t->dtype),
             ember_optim_name(t->optim), tc.hash.enabled ? ", hashed" : "");
    const char *want[EMBER_MAX_TENSORS], *have[EMBER_MAX_TENSORS];
    for (int32_t k = 0; k < n; k++) want[k] = ti[k].name;
    for (int32_t k = 0; k < t->ntensors; k++) have[k] = t->tensors[k].name;
    for (int32_t k = 0; k < n || k < t->ntensors; k++) {
        if (k < n && k < t->ntensors && strcmp(want[k], have[k]) == 0) continue;
        char wl[EMBER_MAX_TENSORS * 34], hl[EMBER_MAX_TENSORS * 34], why[64];
        name_list(wl, sizeof wl, want, n);
        name_list(hl, sizeof hl, have, t->ntensors);
        if (k < n && name_index(have, t->ntensors, want[k]) < 0) snprintf(why, sizeof why, "'%s' is missing", want[k]);
        else if (name_index(want, n, have[k]) < 0) snprintf(why, sizeof why, "'%s' is not one of them", have[k]);
        else if (name_index(have, k, have[k]) >= 0) snprintf(why, sizeof why, "'%s' appears twice", have[k]);
        else snprintf(why, sizeof why, "'%s' is out of place", have[k]);
        return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                   "checkpoint '%s': manifest.json %s: tensors [%s], not the ones it keeps [%s]: %s",
                                   c->dir, desc, hl, wl, why);
    }
    for (int32_t k = 0; k < n; k++) {
        const ember__ckpt_tensor *x = &t->tensors[k];
        if (x->cols != ti[k].cols)
            return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                       "checkpoint '%s': manifest.json %s: tensor '%s' has %d columns, not %d", c->dir,
                                       desc, x->name, (int)x->cols, (int)ti[k].cols);
        if (x->dtype != ti[k].dtype)
            return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                       "checkpoint '%s': manifest.json %s: tensor '%s' is %s, not %s", c->dir, desc,
                                       x->name, ember_dtype_name(x->dtype), ember_dtype_name(ti[k].dtype));
    }
    return EMBER_OK;
}

ember_status ember__ckpt_check(ember_checkpoint *c) {
    if (c->ntables < 1)
        return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                   "checkpoint '%s': manifest.json: 'tables' is empty (a checkpoint holds at least one "
                                   "table)",
                                   c->dir);
    for (int32_t t = 0; t < c->ntables; t++) EMBER_TRY(check_table(c, &c->tables[t]));
    for (int32_t i = 0; i < c->nblobs; i++) {
        const char *name = c->blobs[i].name;
        if (!ember__ckpt_blob_name_ok(name))
            return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                       "checkpoint '%s': manifest.json blob '%s': 'name' is not 1 to %d letters, "
                                       "digits, '.', '_' or '-'",
                                       c->dir, name, EMBER__CKPT_MAX_BLOB_NAME - 1);
        for (int32_t j = 0; j < i; j++)
            if (strcmp(c->blobs[j].name, name) == 0)
                return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                           "checkpoint '%s': manifest.json blob '%s': 'name' appears twice (blobs %d "
                                           "and %d)",
                                           c->dir, name, (int)j, (int)i);
    }
    return EMBER_OK;
}

// ---- Writing ----------------------------------------------------------------------------------

int32_t ember__ckpt_find_table(const ember_checkpoint *c, const char *name) {
    for (int32_t i = 0; i < c->ntables; i++)
        if (strcmp(c->tables[i].name, name) == 0) return i;
    return -1;
}

// One record of a manifest's tensor.
static void add_record(cJSON *recs, int64_t gen, int32_t rank, int64_t offset, int64_t r0, int64_t r1, int32_t c0,
                       int32_t c1, uint64_t bytes, uint32_t crc, int64_t count) {
    char file[64];
    cJSON *rj = cJSON_CreateObject();
    cJSON_AddItemToArray(recs, rj);
    ember__ckpt_data_name(file, sizeof file, gen, rank);
    cJSON_AddStringToObject(rj, "file", file);
    cJSON_AddNumberToObject(rj, "offset", (double)offset);
    const double rows[2] = {(double)r0, (double)r1}, cols[2] = {c0, c1};
    cJSON_AddItemToObject(rj, "rows", cJSON_CreateDoubleArray(rows, 2));
    cJSON_AddItemToObject(rj, "cols", cJSON_CreateDoubleArray(cols, 2));
    if (count) cJSON_AddNumberToObject(rj, "count", (double)count);
    cJSON_AddNumberToObject(rj, "bytes", (double)bytes);
    cJSON_AddNumberToObject(rj, "crc32", crc);
}

char *ember__ckpt_manifest_text(ember_sebc *s, int64_t generation, uint64_t chain, const ember__ckpt_base *base,
                                const int64_t *steps, const ember__ckpt_wrote *all, int64_t n,
                                const ember_checkpoint_options *o) {
    const int32_t T = ember_sebc_num_tables(s);
    cJSON *root = cJSON_CreateObject();
    char file[64], hex[24];
    snprintf(hex, sizeof hex, "%016" PRIx64, chain);
    cJSON_AddStringToObject(root, "format", EMBER__CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "version", EMBER__CKPT_VERSION);
    cJSON_AddNumberToObject(root, "generation", (double)generation);
    cJSON_AddNumberToObject(root, "base_generation", (double)(base ? base->c->base_generation : generation));
    cJSON_AddStringToObject(root, "chain", hex);
    cJSON_AddNumberToObject(root, "world_size", ember_comm_size(ember__sebc_shard_comm(s)));
    cJSON *tables = cJSON_AddArrayToObject(root, "tables");
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
        // A delta: the base's records first (a save checked that the table is there, of this shape).
        const int32_t bt = base && !base->whole[t] ? ember__ckpt_find_table(base->c, tc->name) : -1;
        for (int32_t k = 0; k < nt; k++) {
            cJSON *kj = cJSON_CreateObject();
            cJSON_AddItemToArray(tensors, kj);
            cJSON_AddStringToObject(kj, "name", ti[k].name);
            cJSON_AddNumberToObject(kj, "cols", ti[k].cols);
            cJSON_AddStringToObject(kj, "dtype", ember_dtype_name(ti[k].dtype));
            cJSON *recs = cJSON_AddArrayToObject(kj, "records");
            if (bt >= 0) {
                const ember__ckpt_tensor *bk = &base->c->tables[bt].tensors[k];
                for (int32_t j = bk->first; j < bk->first + bk->count; j++) {
                    const ember__ckpt_record *r = &base->c->records[j];
                    add_record(recs, r->gen, r->file, r->offset, r->r0, r->r1, r->c0, r->c1, r->bytes, r->crc,
                               r->count);
                }
            }
            for (int64_t j = 0; j < n; j++) {
                const ember__ckpt_wrote *x = &all[j];
                if (x->table == t && x->tensor == k)
                    add_record(recs, generation, x->file, x->offset, x->r0, x->r1, x->c0, x->c1, x->bytes, x->crc,
                               x->count);
            }
        }
    }
    cJSON *blobs = cJSON_AddArrayToObject(root, "blobs");
    for (int64_t j = 0; j < n; j++) {
        const ember__ckpt_wrote *x = &all[j];
        if (x->table != -1) continue;
        cJSON *bj = cJSON_CreateObject();
        cJSON_AddItemToArray(blobs, bj);
        cJSON_AddStringToObject(bj, "name", o->blobs[x->tensor].name);
        ember__ckpt_data_name(file, sizeof file, generation, x->file);
        cJSON_AddStringToObject(bj, "file", file);
        cJSON_AddNumberToObject(bj, "offset", (double)x->offset);
        cJSON_AddNumberToObject(bj, "bytes", (double)x->bytes);
        cJSON_AddNumberToObject(bj, "crc32", x->crc);
    }
    char *text = cJSON_Print(root); // NULL when any allocation above failed
    cJSON_Delete(root);
    return text;
}
