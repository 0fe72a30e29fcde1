// The ember_checkpoint object (include/ember/state.h, "Inspecting a checkpoint"): open (read and
// parse manifest.json), the descriptions of its tables and blobs, reads of records and blobs
// checked against their CRC-32 (shared with load.c), and verify (the manifest as a load checks
// it, ember__ckpt_check, and every record's and blob's CRC-32).
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <zlib.h>

#include "core/internal.h"
#include "state/internal.h"

ember_status ember__ckpt_new(ember_ctx *ctx, const char *dir, ember_checkpoint **out) {
    *out = NULL;
    if (!dir) return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "checkpoint: directory is NULL");
    if (strlen(dir) + 64 >= EMBER__PATH_MAX)
        return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "checkpoint: directory name of %zu bytes is too long",
                                   strlen(dir));
    ember_checkpoint *c = ember__calloc(ctx, sizeof *c);
    if (!c) return ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "checkpoint: cannot allocate");
    c->ctx = ctx;
    c->f_rank = -1;
    c->size_rank = -1;
    strcpy(c->dir, dir);
    *out = c;
    return EMBER_OK;
}

void ember_checkpoint_close(ember_checkpoint *c) {
    if (!c) return;
    ember_ctx *ctx = c->ctx;
    if (c->f) fclose(c->f);
    ember_ctx_free(ctx, c->tables);
    ember_ctx_free(ctx, c->blobs);
    ember_ctx_free(ctx, c->records);
    ember_ctx_free(ctx, c);
}

ember_status ember_checkpoint_open(ember_ctx *ctx, const char *dir, ember_checkpoint **out) {
    if (!ctx || !out) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(ember__ckpt_new(ctx, dir, out));
    char *text = NULL;
    size_t len = 0;
    ember_status st = ember__ckpt_read_manifest(ctx, dir, &text, &len);
    if (st == EMBER_OK) st = ember__ckpt_parse(*out, text, len);
    ember_ctx_free(ctx, text);
    if (st != EMBER_OK) {
        ember_checkpoint_close(*out);
        *out = NULL;
    }
    return st;
}

int64_t ember_checkpoint_generation(const ember_checkpoint *c) { return c ? c->generation : 0; }
int64_t ember_checkpoint_base_generation(const ember_checkpoint *c) { return c ? c->base_generation : 0; }
int32_t ember_checkpoint_world_size(const ember_checkpoint *c) { return c ? c->world : 0; }
int32_t ember_checkpoint_num_tables(const ember_checkpoint *c) { return c ? c->ntables : 0; }
int32_t ember_checkpoint_num_blobs(const ember_checkpoint *c) { return c ? c->nblobs : 0; }

ember_status ember_checkpoint_table_info(const ember_checkpoint *c, int32_t i, ember_checkpoint_table *out) {
    if (!c || !out || i < 0 || i >= c->ntables) return EMBER_ERR_INVALID_ARG;
    const ember__ckpt_table *t = &c->tables[i];
    *out = (ember_checkpoint_table){t->name, t->rows, t->dim, t->optim, t->dtype, t->step, t->nrecords, t->bytes};
    return EMBER_OK;
}

ember_status ember_checkpoint_blob_info(const ember_checkpoint *c, int32_t i, const char **name, size_t *bytes) {
    if (!c || i < 0 || i >= c->nblobs) return EMBER_ERR_INVALID_ARG;
    if (name) *name = c->blobs[i].name;
    if (bytes) *bytes = (size_t)c->blobs[i].bytes;
    return EMBER_OK;
}

// ---- Reading records and blobs ----------------------------------------------------------------

uint64_t ember__ckpt_held_bytes(ember_checkpoint *c, int64_t gen, int32_t file, int64_t offset, uint64_t bytes) {
    if (c->size_rank != file || c->size_gen != gen) {
        char name[64], path[EMBER__PATH_MAX];
        struct stat sb;
        ember__ckpt_data_name(name, sizeof name, gen, file);
        ember__ckpt_join(path, sizeof path, c->dir, name);
        c->size = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        c->size_rank = file;
        c->size_gen = gen;
    }
    if ((uint64_t)offset >= c->size) return 0;
    return bytes < c->size - (uint64_t)offset ? bytes : c->size - (uint64_t)offset;
}

ember_status ember__ckpt_read_at(ember_checkpoint *c, int64_t gen, int32_t file, int64_t offset, uint64_t bytes,
                                 uint32_t crc, void *dst, size_t cap, const char *what) {
    char name[64], path[EMBER__PATH_MAX];
    ember__ckpt_data_name(name, sizeof name, gen, file);
    ember__ckpt_join(path, sizeof path, c->dir, name); // fits: ember__ckpt_new checked the length
    if (c->f_rank != file || c->f_gen != gen) {
        if (c->f) fclose(c->f);
        c->f_rank = -1;
        if (!(c->f = fopen(path, "rb")))
            return ember_ctx_set_error(c->ctx, EMBER_ERR_IO, "checkpoint '%s': cannot open '%s': %s", c->dir, path,
                                       strerror(errno));
        c->f_rank = file;
        c->f_gen = gen;
    }
    struct stat sb;
    if (fstat(fileno(c->f), &sb) == 0 &&
        ((uint64_t)offset > (uint64_t)sb.st_size || bytes > (uint64_t)sb.st_size - (uint64_t)offset))
        return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                   "checkpoint '%s': '%s' ends before %s (offset %" PRId64 ", %" PRIu64 " bytes)",
                                   c->dir, path, what, offset, bytes);
    if (bytes > cap) // the buffer was sized by held_bytes: the file grew since
        return ember_ctx_set_error(c->ctx, EMBER_ERR_IO, "checkpoint '%s': '%s' changed while it was read", c->dir,
                                   path);
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

static const ember__ckpt_blob *find_blob(const ember_checkpoint *c, const char *name) {
    for (int32_t i = 0; name && i < c->nblobs; i++)
        if (strcmp(c->blobs[i].name, name) == 0) return &c->blobs[i];
    return NULL;
}

ember_status ember_checkpoint_read_blob(ember_checkpoint *c, const char *name, void *dst, size_t cap, size_t *bytes) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    const ember__ckpt_blob *b = find_blob(c, name);
    if (!b)
        return ember_ctx_set_error(c->ctx, EMBER_ERR_INVALID_ARG, "checkpoint '%s' has no blob '%s'", c->dir,
                                   name ? name : "(null)");
    if (bytes) *bytes = (size_t)b->bytes;
    if (b->bytes > cap || (!dst && b->bytes > 0))
        return ember_ctx_set_error(c->ctx, EMBER_ERR_INVALID_ARG, "checkpoint '%s': blob '%s' has %" PRIu64
                                   " bytes, more than the %zu given", c->dir, name, b->bytes, cap);
    char what[EMBER__CKPT_MAX_BLOB_NAME + 16];
    snprintf(what, sizeof what, "blob '%s'", b->name);
    return b->bytes ? ember__ckpt_read_at(c, b->gen, b->file, b->offset, b->bytes, b->crc, dst, cap, what) : EMBER_OK;
}

ember_status ember_checkpoint_verify(ember_checkpoint *c) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(ember__ckpt_check(c)); // the manifest as a load checks it, then every byte it names
    uint64_t most = 1; // the largest record or blob, as far as the files hold it
    for (int32_t i = 0; i < c->nrecords; i++) {
        const uint64_t n = ember__ckpt_held_bytes(c, c->records[i].gen, c->records[i].file, c->records[i].offset, c->records[i].bytes);
        most = n > most ? n : most;
    }
    for (int32_t i = 0; i < c->nblobs; i++) {
        const uint64_t n = ember__ckpt_held_bytes(c, c->blobs[i].gen, c->blobs[i].file, c->blobs[i].offset, c->blobs[i].bytes);
        most = n > most ? n : most;
    }
    void *buf = ember_ctx_alloc(c->ctx, (size_t)most);
    if (!buf) return ember_ctx_set_error(c->ctx, EMBER_ERR_NOMEM, "checkpoint: cannot allocate %" PRIu64 " bytes", most);
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < c->ntables && st == EMBER_OK; t++) {
        const ember__ckpt_table *tb = &c->tables[t];
        for (int32_t k = 0; k < tb->ntensors && st == EMBER_OK; k++) {
            const ember__ckpt_tensor *x = &tb->tensors[k];
            for (int32_t j = x->first; j < x->first + x->count && st == EMBER_OK; j++) {
                const ember__ckpt_record *r = &c->records[j];
                char what[EMBER__CKPT_MAX_NAME + 96];
                snprintf(what, sizeof what, "table '%s' %s rows [%" PRId64 ", %" PRId64 ")", tb->name, x->name, r->r0,
                         r->r1);
                st = ember__ckpt_read_at(c, r->gen, r->file, r->offset, r->bytes, r->crc, buf, (size_t)most, what);
            }
        }
    }
    for (int32_t i = 0; i < c->nblobs && st == EMBER_OK; i++) {
        char what[EMBER__CKPT_MAX_BLOB_NAME + 16];
        snprintf(what, sizeof what, "blob '%s'", c->blobs[i].name);
        if (c->blobs[i].bytes)
            st = ember__ckpt_read_at(c, c->blobs[i].gen, c->blobs[i].file, c->blobs[i].offset, c->blobs[i].bytes, c->blobs[i].crc, buf,
                                     (size_t)most, what);
    }
    ember_ctx_free(c->ctx, buf);
    return st;
}

