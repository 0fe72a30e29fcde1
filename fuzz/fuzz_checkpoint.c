// libFuzzer target: checkpoint directories (include/ember/state.h) — the manifest parser and the
// record reader behind ember_checkpoint_open, _table_info, _blob_info, _read_blob, _verify and
// ember_checkpoint_load into a sharded collection (world size 1, MPI initialised once).
//
// Input format: checkpoint_tables.h. Each input becomes manifest.json and one record file in this
// process's directory on /dev/shm (both replaced per input), then:
//   open    -> every table's and blob's description, every blob read back, verify
//   load    -> into the five tables of checkpoint_tables.h under the control byte's plan
// The harness decodes the manifest itself (cJSON) to check what the library promises:
//   - open accepts only manifests whose records cover each tensor exactly once (no overlap);
//   - after open, read_blob succeeds exactly when the blob lies in the file this input wrote and
//     matches its CRC-32, and reads back as its bytes; verify succeeds exactly when every record
//     and blob does and the manifest is one a load takes (state.h: a table at least, each
//     table's tensors those ember_table_tensors lists for the table it describes, blob names
//     valid and unique);
//   - load succeeds exactly when open succeeds, the manifest is one a load takes, and the
//     checkpoint holds the collection's tables with their shapes, optimizers and tensors, their
//     records readable (so a checkpoint that verifies loads when its tables are the
//     collection's); then every tensor holds exactly the records' bytes (read back in the stored
//     dtype) and every table its step;
//   - nothing stays allocated on the context after an input.
#define _GNU_SOURCE // mkdtemp (fuzz_input.h)
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <mpi.h>
#include <sanitizer/lsan_interface.h>

#include "checkpoint_tables.h"
#include "ember/state.h"
#include "fuzz_input.h"

static ember_ctx *ctx;
static ember_comm *comm;
static const char *dir;
static size_t baseline; // the communicator's bytes on the context

static void quiet(void *user, ember_log_level level, const char *msg) { (void)user, (void)level, (void)msg; }

// At exit: no MPI_Finalize. It unloads Open MPI's components and leaves some of their memory
// behind, which the leak check at exit would report against the last input (as "<unknown
// module>"); what MPI_Init allocates is kept out of the leak check by __lsan_disable below.
static void finalize(void) {
    ember_comm_destroy(comm);
    ember_ctx_destroy(ctx);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    // Open MPI's own handlers of SIGSEGV, SIGABRT, ... would print their trace and exit before
    // libFuzzer's: no crash report, no saved input. Its MCA parameter opal_signal lists them.
    setenv("OMPI_MCA_opal_signal", "", 1);
    __lsan_disable(); // what MPI allocates for its lifetime is not the library's to free
    MPI_Init(NULL, NULL);
    __lsan_enable();
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = 1;
    cc.log = quiet;
    if (!(dir = fuzz_dir("checkpoint")) || ember_ctx_create(&cc, &ctx) != EMBER_OK ||
        ember_comm_create(ctx, MPI_COMM_WORLD, &comm) != EMBER_OK)
        abort();
    baseline = ember_ctx_bytes_outstanding(ctx);
    atexit(finalize);
    return 0;
}

// ---- The harness's own reading of the manifest -----------------------------------------------------

// An integer-valued JSON number in [lo, hi], else false.
static bool json_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return false;
    const double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d) return false;
    *out = (int64_t)d;
    return true;
}

static bool json_pair(const cJSON *o, const char *key, int64_t *a, int64_t *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_GetArraySize(v) != 2) return false;
    const cJSON *x = cJSON_GetArrayItem(v, 0), *y = cJSON_GetArrayItem(v, 1);
    if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y)) return false;
    *a = (int64_t)x->valuedouble;
    *b = (int64_t)y->valuedouble;
    return true;
}

typedef struct input {
    const uint8_t *file;   // the record file's bytes
    size_t file_size;
    char file_name[64];    // g<G>-r0.bin
} input;

// The `bytes` bytes at `offset` of the record file, when the named file is this input's and holds them.
static const uint8_t *extent(const input *in, const cJSON *o, uint64_t *bytes_out) {
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(o, "file");
    int64_t off, bytes;
    if (!cJSON_IsString(file) || strcmp(file->valuestring, in->file_name) != 0 ||
        !json_int(o, "offset", 0, INT64_MAX / 2, &off) || !json_int(o, "bytes", 0, INT64_MAX / 2, &bytes) ||
        (uint64_t)off > in->file_size || (uint64_t)bytes > in->file_size - (uint64_t)off)
        return NULL;
    *bytes_out = (uint64_t)bytes;
    return in->file + off;
}

// Whether record/blob o lies in the record file and matches its crc32.
static bool readable(const input *in, const cJSON *o) {
    uint64_t bytes = 0;
    int64_t crc;
    const uint8_t *p = extent(in, o, &bytes);
    return p && json_int(o, "crc32", 0, UINT32_MAX, &crc) && crc32_z(0, p, (z_size_t)bytes) == (uint32_t)crc;
}

// Control bit 3: every record's and blob's crc32 set to the CRC of the bytes it names.
static void fix_crcs(const input *in, cJSON *root) {
    cJSON *t, *k, *r;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(root, "tables")) {
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(t, "tensors")) {
            cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(k, "records")) {
                uint64_t bytes = 0;
                const uint8_t *p = extent(in, r, &bytes);
                cJSON *crc = cJSON_GetObjectItemCaseSensitive(r, "crc32");
                if (p && cJSON_IsNumber(crc)) cJSON_SetNumberValue(crc, (double)crc32_z(0, p, (z_size_t)bytes));
            }
        }
    }
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(root, "blobs")) {
        uint64_t bytes = 0;
        const uint8_t *p = extent(in, r, &bytes);
        cJSON *crc = cJSON_GetObjectItemCaseSensitive(r, "crc32");
        if (p && cJSON_IsNumber(crc)) cJSON_SetNumberValue(crc, (double)crc32_z(0, p, (z_size_t)bytes));
    }
}

// After a successful open: no two records of a tensor overlap (with the library's bounds and
// area checks, that is "exactly once"), and whether every record and blob is readable.
static bool check_manifest(const input *in, const cJSON *root) {
    bool all = true;
    const cJSON *t, *k, *r, *q;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(root, "tables")) {
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(t, "tensors")) {
            cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(k, "records")) {
                int64_t r0, r1, c0, c1;
                FUZZ_REQUIRE(json_pair(r, "rows", &r0, &r1) && json_pair(r, "cols", &c0, &c1),
                             "an accepted record without ranges");
                for (q = r->next; q; q = q->next) {
                    int64_t s0, s1, d0, d1;
                    FUZZ_REQUIRE(json_pair(q, "rows", &s0, &s1) && json_pair(q, "cols", &d0, &d1),
                                 "an accepted record without ranges");
                    FUZZ_REQUIRE(!(r0 < s1 && s0 < r1 && c0 < d1 && d0 < c1),
                                 "open accepted records overlapping: rows [%" PRId64 ", %" PRId64 ") cols [%" PRId64
                                 ", %" PRId64 ") and rows [%" PRId64 ", %" PRId64 ") cols [%" PRId64 ", %" PRId64 ")",
                                 r0, r1, c0, c1, s0, s1, d0, d1);
                }
                all &= readable(in, r);
            }
        }
    }
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(root, "blobs")) {
        int64_t bytes = 0;
        all &= (json_int(r, "bytes", 0, INT64_MAX, &bytes) && bytes == 0) || readable(in, r);
    }
    return all;
}

// The harness's reading of state.h's "a manifest a load takes", on a manifest open accepted: a
// table at least; every table's tensors exactly ember_table_tensors of a table of its rows, dim,
// dtype and optimizer (hashed when it names "ids" or "candidates", min_count 2 with the latter),
// in order, with those columns and dtypes; blob names of 1 to 127 letters, digits, '.', '_', '-',
// each once.
#define BLOB_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
static bool loadable_manifest(const cJSON *root) {
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(root, "tables"), *t, *k;
    if (cJSON_GetArraySize(tables) < 1) return false;
    cJSON_ArrayForEach(t, tables) {
        ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
        int64_t rows = 0, dim = 0;
        FUZZ_REQUIRE(json_int(t, "rows", 1, INT64_MAX, &rows) && json_int(t, "dim", 1, INT32_MAX, &dim) &&
                         ember_optim_parse(cJSON_GetObjectItemCaseSensitive(t, "optimizer")->valuestring,
                                           &tc.optim.kind) == EMBER_OK &&
                         ember_dtype_parse(cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring, &tc.dtype) ==
                             EMBER_OK,
                     "an accepted table's fields");
        tc.rows = rows, tc.dim = (int32_t)dim;
        const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(t, "tensors");
        cJSON_ArrayForEach(k, tensors) {
            const char *name = cJSON_GetObjectItemCaseSensitive(k, "name")->valuestring;
            if (strcmp(name, "ids") == 0 || strcmp(name, "candidates") == 0) tc.hash.enabled = 1;
            if (strcmp(name, "candidates") == 0) tc.hash.min_count = 2;
        }
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(&tc, ti);
        if (cJSON_GetArraySize(tensors) != n) return false;
        for (int32_t i = 0; i < n; i++) {
            const cJSON *x = cJSON_GetArrayItem(tensors, i);
            int64_t cols = 0;
            ember_dtype d;
            FUZZ_REQUIRE(json_int(x, "cols", 1, INT32_MAX, &cols) &&
                             ember_dtype_parse(cJSON_GetObjectItemCaseSensitive(x, "dtype")->valuestring, &d) ==
                                 EMBER_OK,
                         "an accepted tensor's fields");
            if (strcmp(cJSON_GetObjectItemCaseSensitive(x, "name")->valuestring, ti[i].name) != 0 ||
                cols != ti[i].cols || d != ti[i].dtype)
                return false;
        }
    }
    const cJSON *b, *c;
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(root, "blobs")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(b, "name")->valuestring;
        const size_t len = strlen(name);
        if (len < 1 || len > 127 || strspn(name, BLOB_NAME_CHARS) != len) return false;
        for (c = cJSON_GetObjectItemCaseSensitive(root, "blobs")->child; c != b; c = c->next)
            if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring, name) == 0) return false;
    }
    return true;
}

// The manifest's table named `name` (NULL if none).
static const cJSON *find_table(const cJSON *root, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(root, "tables")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return t;
    }
    return NULL;
}

// Whether the checkpoint holds collection table t as the load requires (the header's words:
// same rows, dim and optimizer; the tensors the optimizer keeps, weight in the table's stored
// dtype, state fp32).
static bool table_matches(const ember_checkpoint *c, const cJSON *root, int32_t t, const ember_table_config *tc) {
    for (int32_t i = 0; i < ember_checkpoint_num_tables(c); i++) {
        ember_checkpoint_table info;
        FUZZ_REQUIRE(ember_checkpoint_table_info(c, i, &info) == EMBER_OK, "table_info %d", (int)i);
        if (strcmp(info.name, CK_NAMES[t]) != 0) continue;
        if (info.rows != tc->rows || info.dim != tc->dim || info.optim != tc->optim.kind) return false;
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(find_table(root, CK_NAMES[t]), "tensors");
        if (cJSON_GetArraySize(tensors) != nt) return false;
        for (int32_t k = 0; k < nt; k++) {
            const cJSON *x = cJSON_GetArrayItem(tensors, k);
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name");
            const cJSON *dt = cJSON_GetObjectItemCaseSensitive(x, "dtype");
            int64_t cols;
            ember_dtype d;
            if (!cJSON_IsString(name) || strcmp(name->valuestring, ti[k].name) != 0 ||
                !json_int(x, "cols", 1, INT32_MAX, &cols) || cols != ti[k].cols || !cJSON_IsString(dt) ||
                ember_dtype_parse(dt->valuestring, &d) != 0 || d != (k == 0 ? info.dtype : EMBER_DTYPE_F32))
                return false;
        }
        return true;
    }
    return false;
}

// Whether every record of the manifest's table `name` is readable (a load reads those only).
static bool table_readable(const input *in, const cJSON *root, const char *name) {
    const cJSON *k, *r;
    bool all = true;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(find_table(root, name), "tensors")) {
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(k, "records")) all &= readable(in, r);
    }
    return all;
}

// After a successful load: table t's tensors hold the records' bytes, its step the manifest's.
static void check_loaded(ember_sebc *s, const input *in, const cJSON *root, int32_t t) {
    const cJSON *tj = find_table(root, CK_NAMES[t]), *k;
    int64_t step = -1, got = -2;
    FUZZ_REQUIRE(json_int(tj, "step", 0, INT64_MAX, &step) && ember_sebc_step(s, t, &got) == EMBER_OK && got == step,
                 "table %s: step %" PRId64 " after the load, %" PRId64 " in the manifest", CK_NAMES[t], got, step);
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(tj, "tensors")) {
        int64_t cols;
        ember_dtype d;
        FUZZ_REQUIRE(json_int(k, "cols", 1, INT32_MAX, &cols) &&
                         ember_dtype_parse(cJSON_GetObjectItemCaseSensitive(k, "dtype")->valuestring, &d) == 0,
                     "tensor fields");
        const char *name = cJSON_GetObjectItemCaseSensitive(k, "name")->valuestring;
        const size_t es = ember_dtype_size(d), row = (size_t)cols * es, n = (size_t)CK_ROWS[t] * row;
        uint8_t *want = malloc(n), *have = malloc(n);
        if (!want || !have) abort();
        memset(want, 0xa5, n);
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(k, "records")) {
            int64_t r0, r1, c0, c1;
            uint64_t bytes = 0;
            const uint8_t *p = extent(in, r, &bytes);
            FUZZ_REQUIRE(p && json_pair(r, "rows", &r0, &r1) && json_pair(r, "cols", &c0, &c1), "a loaded record");
            const size_t w = (size_t)(c1 - c0) * es;
            for (int64_t i = r0; i < r1; i++)
                memcpy(want + (size_t)i * row + (size_t)c0 * es, p + (size_t)(i - r0) * w, w);
        }
        FUZZ_REQUIRE(ember_sebc_read_as(s, t, name, d, have, -1) == EMBER_OK, "read_as %s %s", CK_NAMES[t], name);
        for (size_t i = 0; i < n; i++)
            FUZZ_REQUIRE(want[i] == have[i], "table %s %s byte %zu (row %zu): %02x loaded, %02x in the records",
                         CK_NAMES[t], name, i, i / row, have[i], want[i]);
        free(want);
        free(have);
    }
}

// ---- One input -------------------------------------------------------------------------------------

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const uint8_t ctl = data[0];
    const uint8_t *text = data + 1, *nul = memchr(text, 0, size - 1);
    const size_t text_len = nul ? (size_t)(nul - text) : size - 1;
    input in = {nul ? nul + 1 : data + size, nul ? size - 1 - text_len - 1 : 0, ""};

    cJSON *root = cJSON_ParseWithLength((const char *)text, text_len);
    int64_t gen = 1;
    if (!json_int(root, "generation", 1, INT64_MAX / 2, &gen)) gen = 1;
    snprintf(in.file_name, sizeof in.file_name, "g%" PRId64 "-r0.bin", gen);
    char *rewritten = NULL;
    if ((ctl & 8) && root) {
        fix_crcs(&in, root);
        rewritten = cJSON_PrintUnformatted(root);
    }
    const char *manifest = rewritten ? rewritten : (const char *)text;
    const size_t manifest_len = rewritten ? strlen(rewritten) : text_len;
    if (rewritten) { // the oracle reads what the library reads
        cJSON_Delete(root);
        root = cJSON_ParseWithLength(manifest, manifest_len);
    }
    char path[512], bin[512];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    snprintf(bin, sizeof bin, "%s/%s", dir, in.file_name);
    if (fuzz_write_file(path, manifest, manifest_len) != 0 || fuzz_write_file(bin, in.file, in.file_size) != 0) abort();

    // Inspection.
    ember_checkpoint *c = NULL;
    const ember_status open_st = ember_checkpoint_open(ctx, dir, &c);
    bool readable_all = false, verified = false, loadable = false;
    if (open_st == EMBER_OK) {
        FUZZ_REQUIRE(root != NULL, "open accepted text cJSON does not parse");
        readable_all = check_manifest(&in, root);
        loadable = loadable_manifest(root);
        const int32_t nt = ember_checkpoint_num_tables(c), nb = ember_checkpoint_num_blobs(c);
        FUZZ_REQUIRE(nt == cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "tables")) &&
                         nb == cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "blobs")),
                     "%d tables and %d blobs", (int)nt, (int)nb);
        FUZZ_REQUIRE(ember_checkpoint_generation(c) == gen && ember_checkpoint_world_size(c) >= 1, "generation");
        ember_checkpoint_table info;
        for (int32_t i = 0; i < nt; i++)
            FUZZ_REQUIRE(ember_checkpoint_table_info(c, i, &info) == EMBER_OK, "table %d", (int)i);
        FUZZ_REQUIRE(ember_checkpoint_table_info(c, nt, &info) == EMBER_ERR_INVALID_ARG, "table past the end");
        for (int32_t i = 0; i < nb; i++) {
            const char *name = NULL;
            size_t bytes = 0;
            FUZZ_REQUIRE(ember_checkpoint_blob_info(c, i, &name, &bytes) == EMBER_OK && name, "blob %d", (int)i);
            const cJSON *bj = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "blobs"), i);
            uint64_t n = 0;
            const uint8_t *p = extent(&in, bj, &n);
            if (!p && bytes > ((size_t)1 << 20)) continue; // outside the file, and no buffer of its size
            uint8_t *buf = malloc(bytes + 1);
            if (!buf) abort();
            size_t got = 0;
            const ember_status st = ember_checkpoint_read_blob(c, name, buf, bytes, &got);
            // The first blob of a name is the one read_blob finds; later ones of the same name are not compared.
            bool first = true;
            for (int32_t j = 0; j < i && first; j++) {
                const char *other = NULL;
                ember_checkpoint_blob_info(c, j, &other, NULL);
                first = strcmp(other, name) != 0;
            }
            if (first) {
                FUZZ_REQUIRE((st == EMBER_OK) == readable(&in, bj) || bytes == 0, "read_blob '%s': %s", name,
                             ember_status_name(st));
                if (st == EMBER_OK)
                    FUZZ_REQUIRE(got == bytes && (bytes == 0 || memcmp(buf, p, bytes) == 0), "blob '%s' content", name);
            }
            free(buf);
        }
        const ember_status vst = ember_checkpoint_verify(c);
        verified = vst == EMBER_OK;
        FUZZ_REQUIRE(verified == (readable_all && loadable), "verify %s (%s), but the records and blobs are %s and the "
                     "manifest is %s", ember_status_name(vst), vst ? ember_ctx_errmsg(ctx) : "",
                     readable_all ? "all readable" : "not all readable", loadable ? "one a load takes" : "not");
    }

    // Loading.
    ember_sebc *s = NULL;
    if (ck_collection(comm, ctl & 7, 3, &s) != EMBER_OK) abort();
    bool should_load = open_st == EMBER_OK && loadable;
    for (int32_t t = 0; t < CK_T && should_load; t++)
        should_load = table_matches(c, root, t, ember_sebc_table(s, t)) && table_readable(&in, root, CK_NAMES[t]);
    ember_checkpoint_close(c);
    ember_checkpoint_options opts = EMBER_CHECKPOINT_OPTIONS_DEFAULT;
    opts.chunk_bytes = CK_CHUNKS[(ctl >> 4) & 3];
    const ember_status load_st = ember_checkpoint_load(s, dir, &opts);
    FUZZ_REQUIRE((load_st == EMBER_OK) == should_load, "load %s (%s), but open %s, verify %s, tables %s",
                 ember_status_name(load_st), load_st ? ember_ctx_errmsg(ctx) : "", ember_status_name(open_st),
                 verified ? "OK" : "failed", should_load ? "match and are readable" : "differ or are not readable");
    if (load_st == EMBER_OK)
        for (int32_t t = 0; t < CK_T; t++) check_loaded(s, &in, root, t);
    ember_sebc_destroy(s);

    cJSON_Delete(root);
    cJSON_free(rewritten);
    unlink(bin);
    FUZZ_REQUIRE(ember_ctx_bytes_outstanding(ctx) == baseline, "%zu bytes left allocated on the context",
                 ember_ctx_bytes_outstanding(ctx) - baseline);
    return 0;
}
