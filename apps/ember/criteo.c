// Streaming Criteo TSV reader.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "appctx.h"
#include "criteo.h"

struct criteo_reader {
    ember_ctx *ctx;
    criteo_config cfg;
    char *path;            // copy of cfg.path
    int64_t rows[DLRM_NUM_SPARSE];
    FILE *file;
    char *block;           // [CRITEO_READ_BYTES] the file's bytes, read a block at a time
    size_t block_pos, block_len; // the next byte of the block, and how many it holds
    int64_t next_line;     // 0-based index of the next line the file will give
    int64_t counted_upto;  // malformed lines below this index are already counted
    int64_t batch;         // index of the next global batch
    bool at_eof;
    criteo_stats stats;
    char line[CRITEO_LINE_MAX + 2]; // the last line read: its text, a '\r' that may end it, a NUL
    // This rank's lines of the current batch, read in order and then parsed on the rank's
    // threads: their text (NUL-terminated, back to back; for a line holding a NUL byte, the text
    // before it), where each starts, its 1-based line number, and whether it fit the line
    // buffer (LINE_TEXT) or not (LINE_TOO_LONG, LINE_NUL). Sized at the first batch.
    char *text;
    size_t text_cap;
    int64_t *start, *number;
    int8_t *fits, *parsed;
    int64_t lines_cap;
};

static const char *const malformed_names[CRITEO_MALFORMED_COUNT] = {"skip", "fatal"};

const char *criteo_malformed_name(criteo_malformed_mode m) {
    return (unsigned)m < CRITEO_MALFORMED_COUNT ? malformed_names[m] : "unknown";
}

ember_status criteo_malformed_parse(const char *name, criteo_malformed_mode *out) {
    const int k = app_name_index(malformed_names, CRITEO_MALFORMED_COUNT, name);
    if (k < 0) return EMBER_ERR_INVALID_ARG;
    *out = (criteo_malformed_mode)k;
    return EMBER_OK;
}

ember_status criteo_open(ember_ctx *ctx, const criteo_config *cfg, criteo_reader **out) {
    *out = NULL;
    APP_CHECK(ctx, cfg->path && cfg->rows, EMBER_ERR_INVALID_ARG, "criteo: no data path");
    APP_CHECK(ctx, cfg->world >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world && cfg->global_batch >= 1 &&
                         cfg->first_line >= 0 && cfg->max_lines >= 0,
                EMBER_ERR_INVALID_ARG, "criteo: world %d, global batch %lld, lines %lld + %lld", (int)cfg->world,
              (long long)cfg->global_batch, (long long)cfg->first_line, (long long)cfg->max_lines);
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        APP_CHECK(ctx, cfg->rows[f] >= 1, EMBER_ERR_INVALID_ARG, "criteo: feature cat_%d has %lld rows", f,
                  (long long)cfg->rows[f]);
    }
    criteo_reader *r = app_alloc(ctx, sizeof *r, "criteo reader");
    if (!r) return EMBER_ERR_NOMEM;
    memset(r, 0, sizeof *r);
    size_t len = strlen(cfg->path) + 1;
    r->path = app_alloc(ctx, len, "criteo path");
    if (!r->path) {
        ember_ctx_free(ctx, r);
        return EMBER_ERR_NOMEM;
    }
    memcpy(r->path, cfg->path, len);
    r->block = app_alloc(ctx, CRITEO_READ_BYTES, "criteo read buffer");
    if (!r->block) {
        ember_ctx_free(ctx, r->path);
        ember_ctx_free(ctx, r);
        return EMBER_ERR_NOMEM;
    }
    r->file = fopen(cfg->path, "rb");
    if (!r->file) {
        int e = errno;
        ember_ctx_free(ctx, r->block);
        ember_ctx_free(ctx, r->path);
        ember_ctx_free(ctx, r);
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "criteo: cannot open '%s': %s", cfg->path, strerror(e));
    }
    setvbuf(r->file, NULL, _IONBF, 0); // whole blocks go straight into r->block
    r->ctx = ctx;
    r->cfg = *cfg;
    r->cfg.path = r->path;
    memcpy(r->rows, cfg->rows, sizeof r->rows);
    r->cfg.rows = r->rows;
    *out = r;
    return EMBER_OK;
}

static void free_lines(ember_ctx *ctx, criteo_reader *r) {
    ember_ctx_free(ctx, r->text);
    ember_ctx_free(ctx, r->start); // number lies in the same block, as parsed does in fits
    ember_ctx_free(ctx, r->fits);
    r->text = NULL;
    r->start = r->number = NULL;
    r->fits = r->parsed = NULL;
    r->text_cap = 0;
    r->lines_cap = 0;
}

void criteo_close(ember_ctx *ctx, criteo_reader *r) {
    if (!r) return;
    free_lines(ctx, r);
    if (r->file) fclose(r->file);
    ember_ctx_free(ctx, r->block);
    ember_ctx_free(ctx, r->path);
    ember_ctx_free(ctx, r);
}

ember_status criteo_rewind(criteo_reader *r) {
    if (fseek(r->file, 0, SEEK_SET) != 0) {
        return ember_ctx_set_error(r->ctx, EMBER_ERR_IO, "criteo: cannot rewind '%s': %s", r->path, strerror(errno));
    }
    clearerr(r->file);
    r->block_pos = r->block_len = 0;
    r->next_line = 0;
    r->batch = 0;
    r->at_eof = false;
    return EMBER_OK;
}

ember_status criteo_seek(criteo_reader *r, int64_t batch) {
    APP_TRY(criteo_rewind(r));
    r->batch = batch;
    return EMBER_OK;
}

void criteo_set_ctx(criteo_reader *r, ember_ctx *ctx) {
    free_lines(r->ctx, r);
    r->ctx = ctx;
}

const criteo_stats *criteo_get_stats(const criteo_reader *r) { return &r->stats; }
const char *criteo_path(const criteo_reader *r) { return r->path; }

enum { LINE_TEXT = 1, LINE_TOO_LONG = -1, LINE_NUL = -2 };

// Reads the next physical line, up to and without its '\n' (and a '\r' before it), into r->line
// (NUL-terminated when it fits). Returns LINE_TEXT, LINE_TOO_LONG (more than
// CRITEO_LINE_MAX bytes; the rest of it is consumed), LINE_NUL (the line holds a NUL byte: its
// text up to there is in r->line), or 0 at the end of the file. Bytes, not C strings, up to the
// '\n': a NUL byte never hides where a line ends.
static int read_line(criteo_reader *r, ember_status *st) {
    *st = EMBER_OK;
    if (r->at_eof) return 0;
    const size_t keep = sizeof r->line - 1; // CRITEO_LINE_MAX, and a '\r' that may follow
    size_t n = 0;
    bool any = false, newline = false;
    for (;;) {
        if (r->block_pos == r->block_len) {
            r->block_pos = 0;
            r->block_len = fread(r->block, 1, CRITEO_READ_BYTES, r->file);
            if (r->block_len == 0) {
                r->at_eof = true;
                if (ferror(r->file)) {
                    *st = ember_ctx_set_error(r->ctx, EMBER_ERR_IO, "criteo: reading '%s' line %lld: %s", r->path,
                                              (long long)r->next_line + 1, strerror(errno));
                    return 0;
                }
                if (!any) return 0;
                break; // the last line, without a newline
            }
        }
        any = true;
        const char *p = r->block + r->block_pos;
        const size_t avail = r->block_len - r->block_pos;
        const char *nl = memchr(p, '\n', avail);
        const size_t take = nl ? (size_t)(nl - p) : avail;
        if (n < keep) memcpy(r->line + n, p, take < keep - n ? take : keep - n);
        n += take;
        r->block_pos += take + (nl ? 1 : 0);
        if (nl) {
            newline = true;
            break;
        }
    }
    r->next_line++;
    if (r->next_line > r->stats.lines_read) r->stats.lines_read = r->next_line;
    if (newline && n > 0 && n <= keep && r->line[n - 1] == '\r') n--;
    if (n > CRITEO_LINE_MAX) return LINE_TOO_LONG;
    r->line[n] = '\0';
    return memchr(r->line, '\0', n) ? LINE_NUL : LINE_TEXT;
}

static const char *feature_name(int field, char *buf, size_t cap) {
    if (field == 0) snprintf(buf, cap, "label");
    else if (field <= DLRM_NUM_DENSE) snprintf(buf, cap, "int_%d", field - 1);
    else snprintf(buf, cap, "cat_%d", field - 1 - DLRM_NUM_DENSE);
    return buf;
}

bool criteo_parse_fields(char *line, criteo_fields *out, char *why, size_t cap) {
    char *field[CRITEO_NUM_FIELDS];
    int nf = 0;
    char *p = line;
    for (;;) {
        if (nf == CRITEO_NUM_FIELDS) {
            nf++; // too many: counted below
            break;
        }
        field[nf++] = p;
        char *tab = strchr(p, '\t');
        if (!tab) break;
        *tab = '\0';
        p = tab + 1;
    }
    if (nf != CRITEO_NUM_FIELDS) {
        if (nf > CRITEO_NUM_FIELDS) snprintf(why, cap, "more than %d tab-separated fields", CRITEO_NUM_FIELDS);
        else snprintf(why, cap, "%d tab-separated fields, expected %d", nf, CRITEO_NUM_FIELDS);
        return false;
    }
    char name[16];
    if (strcmp(field[0], "0") != 0 && strcmp(field[0], "1") != 0) {
        snprintf(why, cap, "field 1 (label): '%.24s' is not 0 or 1", field[0]);
        return false;
    }
    out->label = field[0][0] == '1';
    for (int j = 0; j < DLRM_NUM_DENSE; j++) {
        const char *s = field[1 + j];
        int64_t v = 0;
        bool neg = *s == '-';
        const char *d = neg ? s + 1 : s;
        bool ok = !(neg && *d == '\0');
        for (; ok && *d; d++) {
            if (*d < '0' || *d > '9' || v > (INT64_MAX - 9) / 10) ok = false;
            else v = v * 10 + (*d - '0');
        }
        if (!ok) {
            snprintf(why, cap, "field %d (%s): '%.24s' is not an integer", 2 + j,
                     feature_name(1 + j, name, sizeof name), s);
            return false;
        }
        out->ints[j] = neg ? -v : v;
    }
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        const char *s = field[1 + DLRM_NUM_DENSE + f];
        uint64_t h = 0;
        int digits = 0;
        bool ok = true;
        for (const char *d = s; ok && *d; d++, digits++) {
            int x = *d >= '0' && *d <= '9' ? *d - '0'
                    : *d >= 'a' && *d <= 'f' ? *d - 'a' + 10
                    : *d >= 'A' && *d <= 'F' ? *d - 'A' + 10
                                             : -1;
            if (x < 0 || digits >= 16) ok = false;
            else h = h * 16 + (uint64_t)x;
        }
        if (!ok) {
            snprintf(why, cap, "field %d (%s): '%.24s' is not a hexadecimal number of at most 16 digits",
                     2 + DLRM_NUM_DENSE + f, feature_name(1 + DLRM_NUM_DENSE + f, name, sizeof name), s);
            return false;
        }
        out->hashes[f] = h;
    }
    return true;
}

// Parses `line` (cut up in place) into sample i of b, transformed (criteo.h). Returns false with a
// reason when malformed. Touches nothing of the reader: lines are parsed on several threads at
// once. rows NULL: raw ids (the categorical values as they are).
static bool parse_line(const int64_t *rows, char *line, dlrm_batch *b, int32_t i, char *why, size_t cap) {
    criteo_fields x;
    if (!criteo_parse_fields(line, &x, why, cap)) return false;
    b->labels[i] = x.label ? 1.0f : 0.0f;
    float *dense = b->dense + (size_t)i * DLRM_NUM_DENSE;
    for (int j = 0; j < DLRM_NUM_DENSE; j++) dense[j] = x.ints[j] <= 0 ? 0.0f : (float)log1p((double)x.ints[j]);
    int64_t *ids = b->ids + (size_t)i * DLRM_NUM_SPARSE;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++)
        ids[f] = rows ? (int64_t)(x.hashes[f] % (uint64_t)rows[f]) : (int64_t)x.hashes[f];
    return true;
}

// Records malformed line `line` (1-based; once per line, however many epochs); fatal in
// CRITEO_FATAL mode.
static ember_status malformed(criteo_reader *r, int64_t line, const char *why) {
    if (r->cfg.malformed == CRITEO_FATAL) {
        return ember_ctx_set_error(r->ctx, EMBER_ERR_FORMAT, "criteo: '%s' line %lld: %s", r->path, (long long)line,
                                   why);
    }
    if (line > r->counted_upto) {
        criteo_stats *s = &r->stats;
        if (s->malformed == 0) snprintf(s->first_reason, sizeof s->first_reason, "%s", why);
        if (s->num_lines < CRITEO_MAX_REPORTED) s->lines[s->num_lines++] = line;
        s->malformed++;
        r->counted_upto = line;
    }
    return EMBER_OK;
}

static void move_sample(dlrm_batch *b, int32_t from, int32_t to) {
    memcpy(b->dense + (size_t)to * DLRM_NUM_DENSE, b->dense + (size_t)from * DLRM_NUM_DENSE,
           sizeof(float) * DLRM_NUM_DENSE);
    memcpy(b->ids + (size_t)to * DLRM_NUM_SPARSE, b->ids + (size_t)from * DLRM_NUM_SPARSE,
           sizeof(int64_t) * DLRM_NUM_SPARSE);
    b->labels[to] = b->labels[from];
}

ember_status criteo_next(criteo_reader *r, dlrm_batch *b, bool *eof) {
    APP_ASSERT(b->num_dense == DLRM_NUM_DENSE && b->num_sparse == DLRM_NUM_SPARSE);
    const criteo_config *c = &r->cfg;
    b->size = 0;
    b->has_bags = false;
    *eof = false;
    // The batch's lines [start, end) and this rank's share [mine, mine_end) of them.
    int64_t start = c->first_line + r->batch * c->global_batch;
    int64_t end = start + c->global_batch;
    if (c->max_lines > 0 && end > c->first_line + c->max_lines) end = c->first_line + c->max_lines;
    if (start >= end) {
        *eof = true;
        return EMBER_OK;
    }
    int64_t offset, share = dlrm_share(c->global_batch, c->rank, c->world, &offset);
    int64_t mine = start + offset, mine_end = mine + share;
    if (mine_end > end) mine_end = end;
    APP_ASSERT(share <= b->capacity);
    ember_status st;
    // Skip to the batch start, noting whether the batch has any line at all.
    while (r->next_line < start) {
        int got = read_line(r, &st);
        if (st != EMBER_OK) return st;
        if (got == 0) break;
    }
    if (r->next_line < start || (r->next_line == start && r->at_eof)) {
        *eof = true;
        return EMBER_OK;
    }
    // Peek: the batch exists only if line `start` can be read; read on through our share and
    // keep its lines. Reading is serial (one file); parsing, most of the work, is not.
    if (r->lines_cap < share) {
        free_lines(r->ctx, r);
        const size_t n = (size_t)share;
        r->start = app_alloc(r->ctx, sizeof(int64_t) * 2 * n, "criteo line index");
        r->fits = app_alloc(r->ctx, 2 * n, "criteo line index");
        if (!r->start || !r->fits) {
            free_lines(r->ctx, r);
            return EMBER_ERR_NOMEM;
        }
        r->number = r->start + n;
        r->parsed = r->fits + n;
        r->lines_cap = share;
    }
    int32_t nl = 0;
    size_t used = 0;
    while (r->next_line < mine_end) {
        int got = read_line(r, &st);
        if (st != EMBER_OK) return st;
        if (got == 0) {
            if (r->next_line == start) *eof = true; // not one line of this batch
            break;
        }
        int64_t idx = r->next_line - 1;
        if (idx < mine) continue;
        const size_t len = got == LINE_TOO_LONG ? 1 : strlen(r->line) + 1;
        if (used + len > r->text_cap) {
            size_t cap = r->text_cap ? 2 * r->text_cap : 64 * 1024;
            while (cap < used + len) cap *= 2;
            char *t = app_alloc(r->ctx, cap, "criteo batch text");
            if (!t) return EMBER_ERR_NOMEM;
            if (used) memcpy(t, r->text, used);
            ember_ctx_free(r->ctx, r->text);
            r->text = t;
            r->text_cap = cap;
        }
        if (got == LINE_TOO_LONG) r->text[used] = '\0';
        else memcpy(r->text + used, r->line, len);
        r->start[nl] = (int64_t)used;
        r->number[nl] = r->next_line;
        r->fits[nl] = (int8_t)got;
        used += len;
        nl++;
    }
    // Line k of the share goes to sample k; each is independent of the others.
#pragma omp parallel for schedule(static)
    for (int32_t k = 0; k < nl; k++) {
        char line[CRITEO_LINE_MAX + 1], why[160];
        r->parsed[k] = 0;
        if (r->fits[k] == LINE_TEXT) {
            memcpy(line, r->text + r->start[k], strlen(r->text + r->start[k]) + 1);
            r->parsed[k] = parse_line(r->cfg.raw_ids ? NULL : r->rows, line, b, k, why, sizeof why);
        }
    }
    // In line order: malformed lines are reported (the first one stops a fatal reader) and the
    // samples after them move up.
    for (int32_t k = 0; k < nl; k++) {
        char why[160];
        if (r->fits[k] == LINE_TOO_LONG) {
            snprintf(why, sizeof why, "longer than %d bytes", CRITEO_LINE_MAX);
            APP_TRY(malformed(r, r->number[k], why));
        } else if (r->fits[k] == LINE_NUL) {
            // Its text before the NUL byte is kept: the byte's 1-based position follows.
            snprintf(why, sizeof why, "a NUL byte at byte %zu (text has none: is this file binary?)",
                     strlen(r->text + r->start[k]) + 1);
            APP_TRY(malformed(r, r->number[k], why));
        } else if (!r->parsed[k]) {
            char line[CRITEO_LINE_MAX + 1];
            memcpy(line, r->text + r->start[k], strlen(r->text + r->start[k]) + 1);
            parse_line(r->cfg.raw_ids ? NULL : r->rows, line, b, b->size, why, sizeof why); // again, for the reason
            APP_TRY(malformed(r, r->number[k], why));
        } else {
            if (b->size != k) move_sample(b, k, b->size);
            b->planted[b->size] = NAN;
            b->origin[b->size] = r->number[k];
            b->size++;
        }
    }
    r->batch++;
    return EMBER_OK;
}
