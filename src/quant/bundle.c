// Serving bundles (include/ember/quant.h, "Bundles"): a quantized collection and the caller's
// blobs in one directory, written as checkpoints are (durable files, a generation-numbered data
// file, the manifest's rename as the commit) and read back with every part's CRC-32 checked.
#define _POSIX_C_SOURCE 200809L

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "quant/internal.h"
#include "state/durable.h"
#include "state/internal.h"

#define BUNDLE_MANIFEST "bundle.json"
#define BUNDLE_FORMAT "ember-quant/1"
#define MAX_MANIFEST_BYTES ((size_t)1 << 28)

static int join(char *dst, size_t cap, const char *dir, const char *name) {
    const int n = snprintf(dst, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static void data_name(char *dst, size_t cap, int64_t generation) { snprintf(dst, cap, "q%" PRId64 ".bin", generation); }

// A part of the data file: where it is and its CRC-32.
typedef struct part {
    uint64_t offset, bytes;
    uint32_t crc;
} part;

static uint32_t crc_of(uint32_t crc, const void *p, uint64_t n) {
    const unsigned char *c = p;
    while (n > 0) {
        const uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, c, k);
        c += k;
        n -= k;
    }
    return crc;
}

// Appends n bytes to the data file as one part.
static int put(ember__dfile *df, uint64_t *at, const void *p, uint64_t n, part *out) {
    *out = (part){.offset = *at, .bytes = n, .crc = crc_of((uint32_t)crc32(0, Z_NULL, 0), p, n)};
    *at += n;
    return n ? ember__dfile_write(df, p, (size_t)n) : df->err;
}

static cJSON *part_json(const part *p) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "offset", (double)p->offset);
    cJSON_AddNumberToObject(o, "bytes", (double)p->bytes);
    cJSON_AddNumberToObject(o, "crc32", (double)p->crc);
    return o;
}

// The generation of the bundle in dir now (0 if none): the highest of its manifest's and of any
// data file's (a killed save's leftovers included), so that a new one never reuses a name.
static int64_t current_generation(const char *dir) {
    int64_t g = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        long long x = 0;
        if (sscanf(e->d_name, "q%lld.bin", &x) == 1 && x > g && x < INT64_MAX / 4) g = x;
    }
    closedir(d);
    return g;
}

// After the commit: every data file (and temporary) but generation g's.
static void collect_garbage(const char *dir, int64_t g) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[EMBER__PATH_MAX], keep[64];
    data_name(keep, sizeof keep, g);
    for (struct dirent *e; (e = readdir(d));) {
        long long x = 0;
        const char *n = e->d_name;
        const int ours = sscanf(n, "q%lld.bin", &x) == 1 && strcmp(n, keep) != 0;
        if ((ours || strcmp(n, BUNDLE_MANIFEST ".partial") == 0) && join(path, sizeof path, dir, n) == 0) unlink(path);
    }
    closedir(d);
}

ember_status ember_qebc_save(const ember_qebc *q, const char *dir, const ember_checkpoint_blob *blobs,
                             int32_t num_blobs) {
    static const char fn[] = "ember_qebc_save";
    if (!q) return EMBER_ERR_INVALID_ARG;
    ember_ctx *ctx = q->ctx;
    EMBER_CHECK(ctx, dir && dir[0], EMBER_ERR_INVALID_ARG, "%s: dir is NULL or empty", fn);
    EMBER_CHECK(ctx, strlen(dir) < EMBER__PATH_MAX - 64, EMBER_ERR_INVALID_ARG, "%s: '%s': path too long", fn, dir);
    EMBER_CHECK(ctx, num_blobs >= 0 && (num_blobs == 0 || blobs), EMBER_ERR_INVALID_ARG, "%s: %d blobs at %p", fn,
                (int)num_blobs, (const void *)blobs);
    for (int32_t i = 0; i < num_blobs; i++) {
        EMBER_CHECK(ctx, ember__ckpt_blob_name_ok(blobs[i].name), EMBER_ERR_INVALID_ARG,
                    "%s: blob %d's name '%s' is not 1..127 letters, digits and '._-'", fn, (int)i,
                    blobs[i].name ? blobs[i].name : "(null)");
        EMBER_CHECK(ctx, blobs[i].data || blobs[i].bytes == 0, EMBER_ERR_INVALID_ARG, "%s: blob '%s' has no data", fn,
                    blobs[i].name);
        for (int32_t k = 0; k < i; k++)
            EMBER_CHECK(ctx, strcmp(blobs[k].name, blobs[i].name) != 0, EMBER_ERR_INVALID_ARG,
                        "%s: blob '%s' is given twice", fn, blobs[i].name);
    }
    int created = 0;
    if (mkdir(dir, 0777) == 0) created = 1;
    else if (errno != EEXIST)
        return ember__error(ctx, EMBER_ERR_IO, "%s: cannot create directory '%s': %s", fn, dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ember__error(ctx, EMBER_ERR_IO, "%s: '%s' is not a directory", fn, dir);
    const int64_t g = current_generation(dir) + 1;
    char name[64], path[EMBER__PATH_MAX], mpath[EMBER__PATH_MAX];
    data_name(name, sizeof name, g);
    join(path, sizeof path, dir, name);
    join(mpath, sizeof mpath, dir, BUNDLE_MANIFEST);

    ember_status st = EMBER_OK;
    int64_t *pairs = NULL;
    char *text = NULL;
    cJSON *root = cJSON_CreateObject(), *tables = cJSON_CreateArray(), *features = cJSON_CreateArray(),
          *bl = cJSON_CreateArray();
    ember__dfile df;
    ember__dfile_open(&df, path);
    uint64_t at = 0;
    if (!root || !tables || !features || !bl) st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: the manifest", fn);
    for (int32_t t = 0; t < q->T && st == EMBER_OK && !df.err; t++) {
        const ember__qtable *tb = &q->tables[t];
        part rows, map = {0};
        put(&df, &at, tb->rows, (uint64_t)tb->rb * (uint64_t)tb->cfg.rows, &rows);
        const int64_t kept = ember__qebc_remap_pairs(q, t, NULL, NULL);
        if (tb->map.kind != EMBER_QREMAP_NONE) {
            // (id, row) pairs, int64 little-endian: [kept][2] (ids and rows first, then interleaved).
            const size_t k = (size_t)(kept > 0 ? kept : 1);
            pairs = ember__alloc(ctx, sizeof(int64_t) * 4 * k);
            if (!pairs) {
                st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s': %lld remap pairs", fn, tb->cfg.name,
                                  (long long)kept);
                break;
            }
            int64_t *inter = pairs + 2 * k;
            ember__qebc_remap_pairs(q, t, pairs, pairs + k);
            for (int64_t i = 0; i < kept; i++) inter[2 * i] = pairs[i], inter[2 * i + 1] = pairs[k + (size_t)i];
            put(&df, &at, inter, sizeof(int64_t) * 2 * (uint64_t)kept, &map);
            ember__free(ctx, pairs);
            pairs = NULL;
        }
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(tables, o)) {
            cJSON_Delete(o);
            st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: the manifest", fn);
            break;
        }
        cJSON_AddStringToObject(o, "name", tb->cfg.name);
        cJSON_AddStringToObject(o, "qtype", ember_qtype_name(tb->cfg.qtype));
        cJSON_AddNumberToObject(o, "rows", (double)tb->cfg.rows);
        cJSON_AddNumberToObject(o, "dim", tb->cfg.dim);
        cJSON_AddStringToObject(o, "pooling", ember_pooling_name(tb->cfg.pooling));
        cJSON_AddNumberToObject(o, "num_embeddings", (double)tb->cfg.num_embeddings);
        cJSON_AddStringToObject(o, "remap", ember_qremap_kind_name(tb->map.kind));
        cJSON_AddNumberToObject(o, "kept", (double)kept);
        cJSON_AddItemToObject(o, "rows_data", part_json(&rows));
        if (tb->map.kind != EMBER_QREMAP_NONE) cJSON_AddItemToObject(o, "remap_data", part_json(&map));
    }
    for (int32_t f = 0; f < q->F && st == EMBER_OK; f++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(features, o)) {
            cJSON_Delete(o);
            st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: the manifest", fn);
            break;
        }
        cJSON_AddStringToObject(o, "name", q->feature_names[f]);
        cJSON_AddNumberToObject(o, "table", q->feature_table[f]);
    }
    for (int32_t i = 0; i < num_blobs && st == EMBER_OK && !df.err; i++) {
        part p;
        put(&df, &at, blobs[i].data, blobs[i].bytes, &p);
        cJSON *o = part_json(&p);
        if (!o || !cJSON_AddItemToArray(bl, o)) {
            cJSON_Delete(o);
            st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: the manifest", fn);
            break;
        }
        cJSON_AddStringToObject(o, "name", blobs[i].name);
    }
    if (st == EMBER_OK && df.err)
        st = ember__error(ctx, EMBER_ERR_IO, "%s: cannot write '%s': %s", fn, path, strerror(df.err));
    if (st == EMBER_OK && ember__dfile_commit(&df) != 0)
        st = ember__error(ctx, EMBER_ERR_IO, "%s: cannot write '%s': %s", fn, path, strerror(df.err));
    if (st == EMBER_OK) {
        cJSON_AddStringToObject(root, "format", BUNDLE_FORMAT);
        cJSON_AddNumberToObject(root, "generation", (double)g);
        cJSON_AddStringToObject(root, "data", name);
        cJSON_AddStringToObject(root, "bounds", ember_bounds_mode_name(q->bounds));
        cJSON_AddStringToObject(root, "output_dtype", ember_dtype_name(q->out_dtype));
        cJSON_AddItemToObject(root, "tables", tables);
        cJSON_AddItemToObject(root, "features", features);
        cJSON_AddItemToObject(root, "blobs", bl);
        tables = features = bl = NULL;
        text = cJSON_Print(root);
        if (!text) st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: the manifest", fn);
    }
    if (st == EMBER_OK) {
        ember__dfile mf;
        ember__dfile_open(&mf, mpath);
        ember__dfile_write(&mf, text, strlen(text));
        if (ember__dfile_commit(&mf) != 0)
            st = ember__error(ctx, EMBER_ERR_IO, "%s: cannot write '%s': %s", fn, mpath, strerror(mf.err));
    }
    if (st != EMBER_OK) {
        // The bundle there before (if any) is untouched; what this save wrote goes.
        ember__dfile_abort(&df);
        unlink(path);
        if (created) rmdir(dir);
    } else {
        collect_garbage(dir, g);
    }
    ember__free(ctx, pairs);
    cJSON_free(text);
    cJSON_Delete(root);
    cJSON_Delete(tables);
    cJSON_Delete(features);
    cJSON_Delete(bl);
    return st;
}

// ---- reading ------------------------------------------------------------------------------------

// A parsed manifest: its JSON and the data file's path.
typedef struct bundle {
    cJSON *root;
    char data[EMBER__PATH_MAX];
    FILE *f;
} bundle;

static void bundle_close(bundle *b) {
    if (b->f) fclose(b->f);
    cJSON_Delete(b->root);
    memset(b, 0, sizeof *b);
}

static ember_status bad(ember_ctx *ctx, const char *dir, const char *what) {
    return ember__error(ctx, EMBER_ERR_FORMAT, "bundle '%s': %s", dir, what);
}

static ember_status bundle_open(ember_ctx *ctx, const char *dir, bundle *b) {
    memset(b, 0, sizeof *b);
    char path[EMBER__PATH_MAX];
    if (!dir || join(path, sizeof path, dir, BUNDLE_MANIFEST) != 0)
        return ember__error(ctx, EMBER_ERR_INVALID_ARG, "bundle '%s': path too long or NULL", dir ? dir : "(null)");
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT)
        return ember__error(ctx, EMBER_ERR_FORMAT, "bundle '%s' has no %s: not a serving bundle (ember export)", dir,
                            BUNDLE_MANIFEST);
    if (!f) return ember__error(ctx, EMBER_ERR_IO, "bundle '%s': cannot open '%s': %s", dir, path, strerror(errno));
    char *text = NULL;
    long n = -1;
    ember_status st = EMBER_OK;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        st = ember__error(ctx, EMBER_ERR_IO, "bundle '%s': cannot read '%s': %s", dir, path, strerror(errno));
    else if ((size_t)n > MAX_MANIFEST_BYTES)
        st = bad(ctx, dir, "bundle.json is larger than 256 MiB");
    else if (!(text = ember__alloc(ctx, (size_t)n + 1)))
        st = ember__error(ctx, EMBER_ERR_NOMEM, "bundle '%s': cannot allocate %ld bytes", dir, n);
    else if (fread(text, 1, (size_t)n, f) != (size_t)n)
        st = ember__error(ctx, EMBER_ERR_IO, "bundle '%s': cannot read '%s'", dir, path);
    fclose(f);
    if (st == EMBER_OK) {
        text[n] = '\0';
        b->root = cJSON_ParseWithLength(text, (size_t)n);
        if (!b->root) st = bad(ctx, dir, "bundle.json is not JSON");
    }
    ember__free(ctx, text);
    if (st != EMBER_OK) return st;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(b->root, "format");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(b->root, "data");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, BUNDLE_FORMAT) != 0)
        st = bad(ctx, dir, "\"format\" is not \"" BUNDLE_FORMAT "\"");
    else if (!cJSON_IsString(data) || strchr(data->valuestring, '/') || join(b->data, sizeof b->data, dir, data->valuestring))
        st = bad(ctx, dir, "\"data\" is not a file name");
    else if (!(b->f = fopen(b->data, "rb")))
        st = ember__error(ctx, EMBER_ERR_IO, "bundle '%s': cannot open '%s': %s", dir, b->data, strerror(errno));
    if (st != EMBER_OK) bundle_close(b);
    return st;
}

// An integer member in [lo, hi].
static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < (double)lo || v->valuedouble > (double)hi ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return -1;
    *out = (int64_t)v->valuedouble;
    return 0;
}

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int get_part(const cJSON *o, const char *key, part *p) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    int64_t off, n, crc;
    if (!cJSON_IsObject(v) || get_int(v, "offset", 0, INT64_MAX / 2, &off) || get_int(v, "bytes", 0, INT64_MAX / 2, &n) ||
        get_int(v, "crc32", 0, UINT32_MAX, &crc))
        return -1;
    *p = (part){(uint64_t)off, (uint64_t)n, (uint32_t)crc};
    return 0;
}

// Reads part p of the data file into dst (p->bytes bytes) and checks its CRC-32.
static ember_status read_part(ember_ctx *ctx, const char *dir, bundle *b, const part *p, void *dst, const char *what) {
    if (fseeko(b->f, (off_t)p->offset, SEEK_SET) != 0 || fread(dst, 1, (size_t)p->bytes, b->f) != p->bytes)
        return ember__error(ctx, EMBER_ERR_FORMAT, "bundle '%s': %s: '%s' is shorter than the manifest says", dir, what,
                            b->data);
    if (crc_of((uint32_t)crc32(0, Z_NULL, 0), dst, p->bytes) != p->crc)
        return ember__error(ctx, EMBER_ERR_FORMAT, "bundle '%s': %s fails its CRC-32: the file is damaged", dir, what);
    return EMBER_OK;
}

#define MAX_TABLES 4096

ember_status ember_qebc_load(ember_ctx *ctx, const char *dir, ember_qebc **out) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, out != NULL, EMBER_ERR_INVALID_ARG, "ember_qebc_load: out is NULL");
    *out = NULL;
    bundle b;
    EMBER_TRY(bundle_open(ctx, dir, &b));
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(b.root, "tables");
    const cJSON *features = cJSON_GetObjectItemCaseSensitive(b.root, "features");
    const int T = cJSON_GetArraySize(tables), F = cJSON_GetArraySize(features);
    ember_qtable_config *tc = NULL;
    ember_feature_config *fc = NULL;
    part *rows_at = NULL, *map_at = NULL;
    ember_qremap_kind *kinds = NULL;
    int64_t *kept = NULL, *pairs = NULL;
    ember_qebc *q = NULL;
    ember_status st = EMBER_OK;
    char what[160];
    if (!cJSON_IsArray(tables) || !cJSON_IsArray(features) || T < 1 || F < 1 || T > MAX_TABLES || F > MAX_TABLES)
        st = bad(ctx, dir, "\"tables\" and \"features\" must be non-empty arrays");
    if (st == EMBER_OK) {
        tc = ember__calloc(ctx, sizeof *tc * (size_t)T);
        fc = ember__calloc(ctx, sizeof *fc * (size_t)F);
        rows_at = ember__calloc(ctx, sizeof *rows_at * (size_t)T);
        map_at = ember__calloc(ctx, sizeof *map_at * (size_t)T);
        kinds = ember__calloc(ctx, sizeof *kinds * (size_t)T);
        kept = ember__calloc(ctx, sizeof *kept * (size_t)T);
        if (!tc || !fc || !rows_at || !map_at || !kinds || !kept)
            st = ember__error(ctx, EMBER_ERR_NOMEM, "bundle '%s': its description", dir);
    }
    ember_qebc_config cfg = EMBER_QEBC_CONFIG_DEFAULT;
    const char *bounds = get_str(b.root, "bounds"), *odt = get_str(b.root, "output_dtype");
    if (st == EMBER_OK && (!bounds || ember_bounds_mode_parse(bounds, &cfg.bounds) != EMBER_OK || !odt ||
                           ember_dtype_parse(odt, &cfg.output_dtype) != EMBER_OK))
        st = bad(ctx, dir, "\"bounds\" or \"output_dtype\" missing or unknown");
    for (int t = 0; t < T && st == EMBER_OK; t++) {
        const cJSON *o = cJSON_GetArrayItem(tables, t);
        ember_qtable_config *c = &tc[t];
        *c = (ember_qtable_config)EMBER_QTABLE_CONFIG_DEFAULT;
        int64_t dim = 0;
        const char *qt = get_str(o, "qtype"), *pool = get_str(o, "pooling"), *rk = get_str(o, "remap");
        c->name = get_str(o, "name");
        snprintf(what, sizeof what, "table %d ('%.64s')", t, c->name ? c->name : "?");
        if (!c->name || !qt || ember_qtype_parse(qt, &c->qtype) != EMBER_OK || !pool ||
            ember_pooling_parse(pool, &c->pooling) != EMBER_OK || !rk || ember_qremap_kind_parse(rk, &kinds[t]) != EMBER_OK ||
            get_int(o, "rows", 1, INT64_MAX / 2, &c->rows) || get_int(o, "dim", 1, INT32_MAX, &dim) ||
            get_int(o, "num_embeddings", 0, INT64_MAX / 2, &c->num_embeddings) ||
            get_int(o, "kept", 0, INT64_MAX / 32, &kept[t]) || get_part(o, "rows_data", &rows_at[t]) ||
            (kinds[t] != EMBER_QREMAP_NONE && get_part(o, "remap_data", &map_at[t]))) {
            ember__error(ctx, EMBER_ERR_FORMAT, "bundle '%s': %s: a field is missing or out of range", dir, what);
            st = EMBER_ERR_FORMAT;
            break;
        }
        c->dim = (int32_t)dim;
        if (rows_at[t].bytes != (uint64_t)ember_qtype_row_bytes(c->qtype, c->dim) * (uint64_t)c->rows ||
            (kinds[t] != EMBER_QREMAP_NONE && map_at[t].bytes != 16 * (uint64_t)kept[t])) {
            ember__error(ctx, EMBER_ERR_FORMAT, "bundle '%s': %s: its data sizes do not match its rows and kept ids", dir,
                         what);
            st = EMBER_ERR_FORMAT;
        }
    }
    for (int f = 0; f < F && st == EMBER_OK; f++) {
        const cJSON *o = cJSON_GetArrayItem(features, f);
        int64_t t = 0;
        fc[f].name = get_str(o, "name");
        if (!fc[f].name || get_int(o, "table", 0, T - 1, &t)) {
            ember__error(ctx, EMBER_ERR_FORMAT, "bundle '%s': feature %d: a field is missing or out of range", dir, f);
            st = EMBER_ERR_FORMAT;
        }
        fc[f].table = (int32_t)t;
    }
    if (st == EMBER_OK) {
        cfg.tables = tc, cfg.num_tables = T, cfg.features = fc, cfg.num_features = F;
        st = ember_qebc_create(ctx, &cfg, &q);
        if (st == EMBER_ERR_INVALID_ARG) st = EMBER_ERR_FORMAT; // the manifest described an impossible collection
    }
    for (int t = 0; t < T && st == EMBER_OK; t++) {
        snprintf(what, sizeof what, "table '%.64s' rows", tc[t].name);
        st = read_part(ctx, dir, &b, &rows_at[t], q->tables[t].rows, what);
        if (st != EMBER_OK || kinds[t] == EMBER_QREMAP_NONE) continue;
        pairs = ember__alloc(ctx, sizeof(int64_t) * 2 * (size_t)(kept[t] > 0 ? kept[t] : 1) * 2);
        if (!pairs) {
            st = ember__error(ctx, EMBER_ERR_NOMEM, "bundle '%s': table '%s': %lld remap pairs", dir, tc[t].name,
                              (long long)kept[t]);
            break;
        }
        snprintf(what, sizeof what, "table '%.64s' remap", tc[t].name);
        st = read_part(ctx, dir, &b, &map_at[t], pairs, what);
        if (st == EMBER_OK) {
            int64_t *ids = pairs + 2 * kept[t], *rws = ids + kept[t];
            for (int64_t i = 0; i < kept[t]; i++) ids[i] = pairs[2 * i], rws[i] = pairs[2 * i + 1];
            st = ember_qebc_set_remap(q, t, kinds[t], kept[t], ids, rws);
            if (st == EMBER_ERR_INVALID_ARG) st = EMBER_ERR_FORMAT;
        }
        ember__free(ctx, pairs);
        pairs = NULL;
    }
    if (st != EMBER_OK) {
        ember_qebc_destroy(q);
        q = NULL;
    }
    *out = q;
    ember__free(ctx, tc);
    ember__free(ctx, fc);
    ember__free(ctx, rows_at);
    ember__free(ctx, map_at);
    ember__free(ctx, kinds);
    ember__free(ctx, kept);
    bundle_close(&b);
    return st;
}

ember_status ember_qebc_read_blob(ember_ctx *ctx, const char *dir, const char *name, void *dst, size_t cap,
                                  size_t *bytes) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, name != NULL, EMBER_ERR_INVALID_ARG, "ember_qebc_read_blob: name is NULL");
    bundle b;
    EMBER_TRY(bundle_open(ctx, dir, &b));
    const cJSON *blobs = cJSON_GetObjectItemCaseSensitive(b.root, "blobs"), *o = NULL;
    cJSON_ArrayForEach(o, blobs) {
        const char *n = get_str(o, "name");
        if (n && strcmp(n, name) == 0) break;
    }
    ember_status st = EMBER_OK;
    part p;
    char what[160];
    snprintf(what, sizeof what, "blob '%.127s'", name);
    if (!o) st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "bundle '%s' has no blob '%s'", dir, name);
    if (st == EMBER_OK) {
        int64_t off, n, crc;
        if (get_int(o, "offset", 0, INT64_MAX / 2, &off) || get_int(o, "bytes", 0, INT64_MAX / 2, &n) ||
            get_int(o, "crc32", 0, UINT32_MAX, &crc))
            st = bad(ctx, dir, "a blob's offset, bytes or crc32 is missing");
        else p = (part){(uint64_t)off, (uint64_t)n, (uint32_t)crc};
    }
    if (st == EMBER_OK && bytes) *bytes = (size_t)p.bytes;
    if (st == EMBER_OK && dst) {
        if (cap < p.bytes)
            st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "bundle '%s': blob '%s' is %llu bytes, room for %zu", dir, name,
                              (unsigned long long)p.bytes, cap);
        else st = read_part(ctx, dir, &b, &p, dst, what);
    }
    bundle_close(&b);
    return st;
}
