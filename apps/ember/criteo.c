// Streaming Criteo TSV reader.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "criteo.h"

struct criteo_reader {
    ember_ctx *ctx;
    criteo_config cfg;
    char *path;            // copy of cfg.path
    int64_t rows[DLRM_NUM_SPARSE];
    FILE *file;
    int64_t next_line;     // 0-based index of the next line the file will give
    int64_t counted_upto;  // malformed lines below this index are already counted
    int64_t batch;         // index of the next global batch
    bool at_eof;
    criteo_stats stats;
    char line[CRITEO_LINE_MAX];
};

ember_status criteo_open(ember_ctx *ctx, const criteo_config *cfg, criteo_reader **out) {
    *out = NULL;
    EMBER_CHECK(ctx, cfg->path && cfg->rows, EMBER_ERR_INVALID_ARG, "criteo: no data path");
    EMBER_CHECK(ctx, cfg->world >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world && cfg->global_batch >= 1 &&
                         cfg->first_line >= 0 && cfg->max_lines >= 0,
                EMBER_ERR_INVALID_ARG, "criteo: rank %d of %d, global batch %lld, lines %lld + %lld", (int)cfg->rank,
                (int)cfg->world, (long long)cfg->global_batch, (long long)cfg->first_line,
                (long long)cfg->max_lines);
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        EMBER_CHECK(ctx, cfg->rows[f] >= 1, EMBER_ERR_INVALID_ARG, "criteo: feature cat_%d has %lld rows", f,
                    (long long)cfg->rows[f]);
    }
    criteo_reader *r = ember__xalloc(ctx, sizeof *r, "criteo reader");
    if (!r) return EMBER_ERR_NOMEM;
    memset(r, 0, sizeof *r);
    size_t len = strlen(cfg->path) + 1;
    r->path = ember__xalloc(ctx, len, "criteo path");
    if (!r->path) {
        ember__free(ctx, r);
        return EMBER_ERR_NOMEM;
    }
    memcpy(r->path, cfg->path, len);
    r->file = fopen(cfg->path, "rb");
    if (!r->file) {
        int e = errno;
        ember__free(ctx, r->path);
        ember__free(ctx, r);
        return ember__error(ctx, EMBER_ERR_IO, "criteo: cannot open '%s': %s", cfg->path, strerror(e));
    }
    r->ctx = ctx;
    r->cfg = *cfg;
    r->cfg.path = r->path;
    memcpy(r->rows, cfg->rows, sizeof r->rows);
    r->cfg.rows = r->rows;
    *out = r;
    return EMBER_OK;
}

void criteo_close(ember_ctx *ctx, criteo_reader *r) {
    if (!r) return;
    if (r->file) fclose(r->file);
    ember__free(ctx, r->path);
    ember__free(ctx, r);
}

ember_status criteo_rewind(criteo_reader *r) {
    if (fseek(r->file, 0, SEEK_SET) != 0) {
        return ember__error(r->ctx, EMBER_ERR_IO, "criteo: cannot rewind '%s': %s", r->path, strerror(errno));
    }
    clearerr(r->file);
    r->next_line = 0;
    r->batch = 0;
    r->at_eof = false;
    return EMBER_OK;
}

const criteo_stats *criteo_get_stats(const criteo_reader *r) { return &r->stats; }

// Reads the next physical line into r->line without its line ending. Returns 1 for a line,
// 0 at the end of the file, -1 for a line that did not fit (the rest of it is consumed).
static int read_line(criteo_reader *r, ember_status *st) {
    *st = EMBER_OK;
    if (r->at_eof) return 0;
    if (!fgets(r->line, sizeof r->line, r->file)) {
        if (ferror(r->file)) *st = ember__error(r->ctx, EMBER_ERR_IO, "criteo: reading '%s' line %lld: %s", r->path,
                                                (long long)r->next_line + 1, strerror(errno));
        r->at_eof = true;
        return 0;
    }
    r->next_line++;
    size_t n = strlen(r->line);
    if (n > 0 && r->line[n - 1] == '\n') {
        r->line[--n] = '\0';
        if (n > 0 && r->line[n - 1] == '\r') r->line[--n] = '\0';
        return 1;
    }
    if (feof(r->file)) return 1; // last line without a newline
    int c;
    while ((c = fgetc(r->file)) != EOF && c != '\n') {
    }
    return -1;
}

static const char *feature_name(int field, char *buf, size_t cap) {
    if (field == 0) snprintf(buf, cap, "label");
    else if (field <= DLRM_NUM_DENSE) snprintf(buf, cap, "int_%d", field - 1);
    else snprintf(buf, cap, "cat_%d", field - 1 - DLRM_NUM_DENSE);
    return buf;
}

// Parses the line in r->line into sample i of b. Returns false with a reason when malformed.
static bool parse_line(criteo_reader *r, dlrm_batch *b, int32_t i, char *why, size_t cap) {
    char *field[CRITEO_NUM_FIELDS];
    int nf = 0;
    char *p = r->line;
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
    b->labels[i] = field[0][0] == '1' ? 1.0f : 0.0f;
    float *dense = b->dense + (size_t)i * DLRM_NUM_DENSE;
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
        dense[j] = neg ? 0.0f : (float)log1p((double)v);
    }
    int64_t *ids = b->ids + (size_t)i * DLRM_NUM_SPARSE;
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
        ids[f] = (int64_t)(h % (uint64_t)r->rows[f]);
    }
    return true;
}

// Records a malformed line (once per line, however many epochs); fatal in CRITEO_FATAL mode.
static ember_status malformed(criteo_reader *r, const char *why) {
    int64_t line = r->next_line; // 1-based number of the line just read
    if (r->cfg.malformed == CRITEO_FATAL) {
        return ember__error(r->ctx, EMBER_ERR_FORMAT, "criteo: '%s' line %lld: %s", r->path, (long long)line, why);
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

ember_status criteo_next(criteo_reader *r, dlrm_batch *b, bool *eof) {
    EMBER_ASSERT(b->num_dense == DLRM_NUM_DENSE && b->num_sparse == DLRM_NUM_SPARSE);
    const criteo_config *c = &r->cfg;
    b->size = 0;
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
    EMBER_ASSERT(share <= b->capacity);
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
    // Peek: the batch exists only if line `start` can be read; read on through our share.
    while (r->next_line < mine_end) {
        int got = read_line(r, &st);
        if (st != EMBER_OK) return st;
        if (got == 0) {
            if (r->next_line == start) *eof = true; // not one line of this batch
            break;
        }
        int64_t idx = r->next_line - 1;
        if (idx < mine) continue;
        char why[160];
        if (got < 0) {
            snprintf(why, sizeof why, "longer than %d bytes", CRITEO_LINE_MAX - 1);
            EMBER_TRY(malformed(r, why));
        } else if (!parse_line(r, b, b->size, why, sizeof why)) {
            EMBER_TRY(malformed(r, why));
        } else {
            b->planted[b->size] = NAN;
            b->size++;
        }
    }
    r->batch++;
    return EMBER_OK;
}
