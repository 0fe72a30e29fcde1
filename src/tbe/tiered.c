// Tiered tables (docs/tiered.md): a table's rows (weights in its dtype, then its optimizer state
// in fp32: one fixed-size record per row) live in a scratch file, reserved whole at creation and
// mapped (the kernel's page cache and writeback move it to and from the disk); the slabs hold a
// cache of slab_rows slots. Each call's distinct rows are made resident together (rowmap.h): resident
// rows are touched, missing rows take free slots, then the slots of the least valuable unpinned
// rows (LRU: least recent call, LFU: fewest uses then least recent; ties by slot), whose rows are
// written back first when an update changed them. A row the file has never held is produced from
// the initialiser, so creating a table costs no I/O and the file stays sparse.
//
// The slot choices depend only on the sequence of calls and their ids, so two collections fed the
// same ids (the column shards of one table) cache the same rows in the same slots. The numbers do
// not depend on the cache at all: a row is the same bytes in a slot or in the file.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ember/rng.h"
#include "core/dtype.h"
#include "tbe/backend.h"
#include "tbe/rowmap.h"

typedef struct tiered {
    ember__rowmap hdr;
    int fd;
    unsigned char *file;       // the file, mapped (rows * rec bytes, reserved at creation)
    size_t file_bytes;
    int64_t rows, cap;         // logical rows, slots
    size_t wbytes, rec;        // weight bytes of a row, record bytes (weights + state)
    size_t page;               // the system's page size (prefetch advice)
    unsigned char *on_disk;    // [rows/8] bit: the file holds this row's record
    int64_t *slot_row;         // [cap] row in the slot, -1 free
    int64_t *last, *uses;      // [cap] call of the last use, uses since loaded
    int64_t *pin;              // [cap] call that pinned it
    unsigned char *dirty;      // [cap]
    int64_t next_free;         // slots [next_free, cap) were never used
    struct hkey *heap;         // [cap] lazy min-heap of used slots by policy key
    int64_t hn;
    int64_t *hkeys, hmask;     // open addressing row -> slot: keys (rows, -1 empty), values
    int64_t *hvals;
    int64_t clock;             // calls so far
    ember_evict_policy policy;
    unsigned char *buf;        // one record
    float *row;                // [dim + m1_cols + m2_cols] fp32 scratch (initial values)
    int64_t *miss, miss_cap;   // this call's missing rows
    int64_t *stash;            // [cap] slots out of the heap during a call
    ember_tier_stats stats;
} tiered;

// ---- row -> slot hash (linear probing, backward-shift deletion) ---------------------------
static inline int64_t hslot(const tiered *m, int64_t row) {
    return (int64_t)(ember_splitmix64((uint64_t)row) & (uint64_t)m->hmask);
}
static int64_t hfind(const tiered *m, int64_t row) {
    for (int64_t i = hslot(m, row);; i = (i + 1) & m->hmask) {
        if (m->hkeys[i] == row) return m->hvals[i];
        if (m->hkeys[i] < 0) return -1;
    }
}
static void hput(tiered *m, int64_t row, int64_t slot) {
    int64_t i = hslot(m, row);
    while (m->hkeys[i] >= 0) i = (i + 1) & m->hmask;
    m->hkeys[i] = row;
    m->hvals[i] = slot;
}
static void hdel(tiered *m, int64_t row) {
    int64_t i = hslot(m, row);
    while (m->hkeys[i] != row) i = (i + 1) & m->hmask;
    for (int64_t j = (i + 1) & m->hmask;; j = (j + 1) & m->hmask) {
        if (m->hkeys[j] < 0) break;
        const int64_t h = hslot(m, m->hkeys[j]);
        // Move j into the hole at i when its home is not cyclically in (i, j].
        if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            m->hkeys[i] = m->hkeys[j];
            m->hvals[i] = m->hvals[j];
            i = j;
        }
    }
    m->hkeys[i] = -1;
}

// ---- eviction order: a lazy binary min-heap of slots ------------------------------------
// Entries carry the key their slot had when pushed (uses, last call); a use only updates the
// slot's arrays. Keys only grow, so when the top's key is stale it goes back in with its current
// key, and the first top that is current is the true minimum: O(1) per use, O(log cache) per
// eviction. Order: LRU (last, slot), LFU (uses, last, slot).
typedef struct hkey {
    int64_t uses, last, slot;
} hkey;

static inline hkey key_of(const tiered *m, int64_t slot) { return (hkey){m->uses[slot], m->last[slot], slot}; }
static inline int before(const tiered *m, hkey a, hkey b) {
    if (m->policy == EMBER_EVICT_LFU && a.uses != b.uses) return a.uses < b.uses;
    if (a.last != b.last) return a.last < b.last;
    return a.slot < b.slot;
}
static void heap_push(tiered *m, int64_t slot) {
    int64_t i = m->hn++;
    const hkey k = key_of(m, slot);
    while (i > 0 && before(m, k, m->heap[(i - 1) / 2])) {
        m->heap[i] = m->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->heap[i] = k;
}
static void heap_pop(tiered *m) {
    const hkey k = m->heap[--m->hn];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, c = l;
        if (l >= m->hn) break;
        if (r < m->hn && before(m, m->heap[r], m->heap[l])) c = r;
        if (!before(m, m->heap[c], k)) break;
        m->heap[i] = m->heap[c];
        i = c;
    }
    if (m->hn > 0) m->heap[i] = k;
}
// The slot to evict: the least by current key among slots not pinned by `call`. Pinned ones
// found on the way are set aside in stash[*ns] (back in the heap after the call).
static int64_t heap_victim(tiered *m, int64_t call, int64_t *ns) {
    for (;;) {
        const hkey top = m->heap[0];
        const hkey now = key_of(m, top.slot);
        heap_pop(m);
        if (m->pin[top.slot] == call) {
            m->stash[(*ns)++] = top.slot;
        } else if (now.uses != top.uses || now.last != top.last) {
            heap_push(m, top.slot); // stale: back with its current key
        } else {
            return top.slot;
        }
    }
}

// ---- records ----------------------------------------------------------------------------
// A record is the row's weights in the table's dtype (wbytes), then its optimizer states in fp32
// (m1_cols, then m2_cols floats): unaligned for a 16-bit table of odd dim, so only memcpy and
// the backend's row calls touch it.
static unsigned char *rec_state(const tiered *m, const ember__table *tb, unsigned char *buf, int which) {
    return buf + m->wbytes + (which == 2 ? sizeof(float) * (size_t)tb->m1_cols : 0);
}

// Record of `row` into buf: from the file, or the initial values and fresh optimizer state. Pure.
static void make_record(const ember_ebc *ebc, const tiered *m, const ember__table *tb, int64_t row, int on_disk,
                        unsigned char *buf) {
    if (on_disk) {
        memcpy(buf, m->file + (size_t)row * m->rec, m->rec);
        return;
    }
    float *w = m->row, *state = m->row + tb->cfg.dim;
    ember__init_row(ebc, tb, row, w);
    ember__store_row(tb->cfg.dtype, buf, w, tb->cfg.dim);
    const float a = tb->optim->adagrad_init ? tb->cfg.optim.initial_accumulator : 0.0f;
    for (int32_t i = 0; i < tb->m1_cols; i++) state[i] = a;
    for (int32_t i = 0; i < tb->m2_cols; i++) state[tb->m1_cols + i] = 0.0f;
    memcpy(buf + m->wbytes, state, sizeof(float) * (size_t)(tb->m1_cols + tb->m2_cols));
}

static inline int is_on_disk(const tiered *m, int64_t row) { return (m->on_disk[row >> 3] >> (row & 7)) & 1; }

static void load_record(const ember_ebc *ebc, tiered *m, const ember__table *tb, int64_t row, unsigned char *buf) {
    const int disk = is_on_disk(m, row);
    make_record(ebc, m, tb, row, disk, buf);
    if (disk) {
        m->stats.rows_read++;
        m->stats.bytes_read += (int64_t)m->rec;
    }
}

static void store_record(tiered *m, int64_t row, const unsigned char *buf) {
    memcpy(m->file + (size_t)row * m->rec, buf, m->rec);
    m->on_disk[row >> 3] |= (unsigned char)(1u << (row & 7));
    m->stats.rows_written++;
    m->stats.bytes_written += (int64_t)m->rec;
}

// A cache slot's row to and from a record, through the backend's row calls (which cannot fail:
// tiered tables live on the cpu backend alone, ember__ebc_check_config).
static void slot_to_record(const ember_ebc *ebc, const tiered *m, const ember__table *tb, int64_t slot,
                           unsigned char *buf) {
    (void)ebc->be->read_rows(ebc, tb, 0, slot, 1, tb->cfg.dtype, buf);
    if (tb->m1_cols) (void)ebc->be->read_rows(ebc, tb, 1, slot, 1, EMBER_DTYPE_F32, rec_state(m, tb, buf, 1));
    if (tb->m2_cols) (void)ebc->be->read_rows(ebc, tb, 2, slot, 1, EMBER_DTYPE_F32, rec_state(m, tb, buf, 2));
}
static void record_to_slot(ember_ebc *ebc, const tiered *m, const ember__table *tb, int64_t slot, unsigned char *buf) {
    (void)ebc->be->write_rows(ebc, tb, 0, slot, 1, tb->cfg.dtype, buf);
    if (tb->m1_cols) (void)ebc->be->write_rows(ebc, tb, 1, slot, 1, EMBER_DTYPE_F32, rec_state(m, tb, buf, 1));
    if (tb->m2_cols) (void)ebc->be->write_rows(ebc, tb, 2, slot, 1, EMBER_DTYPE_F32, rec_state(m, tb, buf, 2));
}

// ---- prefetch ------------------------------------------------------------------------------
static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Puts the slots set aside during victim selection (and the call's new rows) back in the heap.
static void restore_heap(tiered *m, int64_t ns) {
    for (int64_t i = 0; i < ns; i++) heap_push(m, m->stash[i]);
}

static ember_status tiered_map(ember_ebc *ebc, ember__table *tb, const int64_t *ids, int64_t n, int64_t *rows,
                               enum ember__map_phase phase) {
    tiered *m = (tiered *)tb->map;
    const int64_t call = ++m->clock;
    // 1. Pin the resident rows; list the missing ones, each once, ascending.
    if (n > m->miss_cap) {
        int64_t *p = ember__xalloc(ebc->ctx, sizeof(int64_t) * (size_t)n, "tiered table's miss list");
        if (!p) return EMBER_ERR_NOMEM;
        ember__free(ebc->ctx, m->miss);
        m->miss = p;
        m->miss_cap = n;
    }
    int64_t nmiss = 0, npinned = 0;
    for (int64_t j = 0; j < n; j++) { // rows[j]: the slot, -1 for a skipped id, -2 for a miss
        rows[j] = -1;
        if (ids[j] < 0) continue;
        const int64_t s = rows[j] = hfind(m, ids[j]);
        if (s < 0) m->miss[nmiss++] = ids[j], rows[j] = -2;
        else if (m->pin[s] != call) m->pin[s] = call, npinned++;
    }
    if (nmiss > 1) qsort(m->miss, (size_t)nmiss, sizeof(int64_t), cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < nmiss; i++)
        if (i == 0 || m->miss[i] != m->miss[i - 1]) m->miss[u++] = m->miss[i];
    nmiss = u;
    EMBER_CHECK(ebc->ctx, nmiss + npinned <= m->cap, EMBER_ERR_UNSUPPORTED,
                "table '%s': this batch touches %lld distinct rows, its cache holds %lld (raise cache_rows)",
                tb->label, (long long)(nmiss + npinned), (long long)m->cap);
    // 2. Each missing row takes a free slot, else the policy's first unpinned slot (pinned ones
    // met on the way are set aside, as are the new rows, and go back into the heap after).
    int64_t ns = 0;
    for (int64_t i = 0; i < nmiss; i++) {
        const int64_t row = m->miss[i];
        int64_t s;
        if (m->next_free < m->cap) {
            s = m->next_free++;
        } else {
            s = heap_victim(m, call, &ns);
            if (m->dirty[s]) {
                slot_to_record(ebc, m, tb, s, m->buf);
                store_record(m, m->slot_row[s], m->buf);
                m->dirty[s] = 0;
            }
            hdel(m, m->slot_row[s]);
            m->stats.evictions++;
        }
        load_record(ebc, m, tb, row, m->buf);
        record_to_slot(ebc, m, tb, s, m->buf);
        m->slot_row[s] = row;
        m->dirty[s] = 0;
        m->uses[s] = 0;
        m->last[s] = call;
        m->pin[s] = call;
        hput(m, row, s);
        m->stash[ns++] = s;
    }
    restore_heap(m, ns);
    if (phase == EMBER__MAP_FORWARD) { // a backward finds the forward's rows: not counted again
        m->stats.hits += npinned;
        m->stats.misses += nmiss;
    }
    // 3. Translate; a forward touches its rows (recency, uses), a backward marks them changed.
    for (int64_t j = 0; j < n; j++) {
        if (rows[j] == -1) continue;
        const int64_t s = rows[j] == -2 ? (rows[j] = hfind(m, ids[j])) : rows[j];
        if (phase == EMBER__MAP_FORWARD) {
            m->uses[s]++;
            m->last[s] = call;
        } else {
            m->dirty[s] = 1;
        }
    }
    return EMBER_OK;
}

// Advises the kernel to read the file's pages of rows[n] (ascending, distinct; neither cached
// nor only initial values, which the forward makes from the initialiser): MADV_WILLNEED
// queues the reads at once and returns, so they proceed while the caller's step goes on, as
// many at a time as the device takes, and the forward finds the pages in memory. Pages at most
// ADVISE_GAP apart go in one call (a call costs more than the kernel's check of a page already
// in memory; a gap's pages are read too). A hint: nothing to wait for or undo, and a failure
// changes nothing.
enum { ADVISE_GAP = 8 }; // pages between two rows' pages that one call may span

static void tiered_advise(tiered *m, const int64_t *rows, int64_t n) {
    const size_t page = m->page;
    size_t lo = 0, hi = 0; // the pending range of pages
    m->stats.prefetched += n;
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = rows[i];
        const size_t a = (size_t)r * m->rec / page * page, b = ((size_t)(r + 1) * m->rec + page - 1) / page * page;
        if (hi > lo && a <= hi + ADVISE_GAP * page) { // near enough: one call, the gap read too
            hi = b > hi ? b : hi;
            continue;
        }
        if (hi > lo) (void)madvise(m->file + lo, hi - lo, MADV_WILLNEED);
        lo = a, hi = b;
    }
    if (hi > lo) (void)madvise(m->file + lo, hi - lo, MADV_WILLNEED);
}

// The current record of logical row r into m->buf (cached, on file or initial); its slot, or -1.
static int64_t current_record(const ember_ebc *ebc, tiered *m, const ember__table *tb, int64_t r) {
    const int64_t s = hfind(m, r);
    if (s >= 0) slot_to_record(ebc, m, tb, s, m->buf);
    else make_record(ebc, m, tb, r, is_on_disk(m, r), m->buf);
    return s;
}

// Row r of tensor `which` as fp32 (or native weight bits when dtype is the table's) into dst.
static ember_status tiered_read(const ember_ebc *ebc, const ember__table *tb, int which, int64_t r0, int64_t r1,
                                ember_dtype dtype, void *dst) {
    tiered *m = (tiered *)tb->map;
    const int32_t cols = which == 0 ? tb->cfg.dim : which == 1 ? tb->m1_cols : tb->m2_cols;
    for (int64_t r = r0; r < r1; r++) {
        current_record(ebc, m, tb, r);
        const int64_t k = r - r0;
        if (which == 0 && dtype == tb->cfg.dtype) memcpy((char *)dst + (size_t)k * m->wbytes, m->buf, m->wbytes);
        else if (which == 0) ember__load_row(tb->cfg.dtype, m->buf, (float *)dst + k * cols, cols);
        else memcpy((float *)dst + k * cols, rec_state(m, tb, m->buf, which), sizeof(float) * (size_t)cols);
    }
    return EMBER_OK;
}

static ember_status tiered_write(ember_ebc *ebc, ember__table *tb, int which, int64_t r0, int64_t r1,
                                 ember_dtype dtype, const void *src) {
    tiered *m = (tiered *)tb->map;
    const int32_t cols = which == 0 ? tb->cfg.dim : which == 1 ? tb->m1_cols : tb->m2_cols;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t s = current_record(ebc, m, tb, r);
        const int64_t k = r - r0;
        if (which == 0 && dtype == tb->cfg.dtype) memcpy(m->buf, (const char *)src + (size_t)k * m->wbytes, m->wbytes);
        else if (which == 0) ember__store_row(tb->cfg.dtype, m->buf, (const float *)src + k * cols, cols);
        else memcpy(rec_state(m, tb, m->buf, which), (const float *)src + k * cols, sizeof(float) * (size_t)cols);
        if (s >= 0) {
            record_to_slot(ebc, m, tb, s, m->buf);
            m->dirty[s] = 1;
        } else {
            store_record(m, r, m->buf);
        }
    }
    return EMBER_OK;
}

static void tiered_destroy(ember_ctx *ctx, ember__rowmap *map) {
    tiered *m = (tiered *)map;
    if (m->file) munmap(m->file, m->file_bytes);
    if (m->fd >= 0) close(m->fd);
    void *bufs[] = {m->on_disk, m->slot_row, m->last, m->uses, m->pin, m->dirty, m->heap, m->hkeys,
                    m->hvals, m->buf, m->row, m->miss, m->stash};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember__free(ctx, bufs[i]);
    ember__free(ctx, m);
}

static const ember__rowmap_ops tiered_ops = {.map = tiered_map, .read = tiered_read, .write = tiered_write,
                                              .destroy = tiered_destroy};

static ember_status tiered_create(ember_ebc *ebc, ember__table *tb, const ember_ebc_config *cfg, ember__rowmap **out) {
    const char *ssd_dir = cfg->ssd_dir;
    ember_ctx *ctx = ebc->ctx;
    *out = NULL;
    tiered *m = ember__calloc(ctx, sizeof *m);
    if (!m) return ember__error(ctx, EMBER_ERR_NOMEM, "ember_ebc_create: table '%s': out of memory", tb->label);
    m->hdr.ops = &tiered_ops;
    m->fd = -1;
    m->rows = tb->cfg.rows;
    m->cap = tb->slab_rows;
    m->policy = tb->cfg.cache_policy;
    m->wbytes = tb->row_bytes;
    m->rec = m->wbytes + sizeof(float) * (size_t)(tb->m1_cols + tb->m2_cols);
    const char *env = getenv("TMPDIR"), *dir = ssd_dir && ssd_dir[0] ? ssd_dir : env && env[0] ? env : "/tmp";
    int64_t hsize = 16;
    while (hsize < 2 * m->cap) hsize *= 2;
    m->hmask = hsize - 1;
    const size_t C = (size_t)m->cap;
    m->on_disk = ember__calloc(ctx, (size_t)(m->rows + 7) / 8);
    m->slot_row = ember__alloc(ctx, sizeof(int64_t) * C);
    m->last = ember__calloc(ctx, sizeof(int64_t) * C);
    m->uses = ember__calloc(ctx, sizeof(int64_t) * C);
    m->pin = ember__calloc(ctx, sizeof(int64_t) * C);
    m->dirty = ember__calloc(ctx, C);
    m->heap = ember__alloc(ctx, sizeof(hkey) * C);
    m->stash = ember__alloc(ctx, sizeof(int64_t) * C);
    m->hkeys = ember__alloc(ctx, sizeof(int64_t) * (size_t)hsize);
    m->hvals = ember__alloc(ctx, sizeof(int64_t) * (size_t)hsize);
    m->buf = ember__alloc(ctx, m->rec);
    m->row = ember__alloc(ctx, sizeof(float) * (size_t)(tb->cfg.dim + tb->m1_cols + tb->m2_cols));
    if (!m->on_disk || !m->slot_row || !m->last || !m->uses || !m->pin || !m->dirty || !m->heap ||
        !m->stash || !m->hkeys || !m->hvals || !m->buf || !m->row) {
        tiered_destroy(ctx, &m->hdr);
        return ember__error(ctx, EMBER_ERR_NOMEM, "ember_ebc_create: table '%s': out of memory for its cache",
                            tb->label);
    }
    for (size_t i = 0; i < C; i++) m->slot_row[i] = -1;
    for (int64_t i = 0; i < hsize; i++) m->hkeys[i] = -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/ember-tiered-XXXXXX", dir);
    m->fd = mkstemp(path);
    if (m->fd >= 0) unlink(path); // scratch: gone with the descriptor, whatever happens to the process
    // The whole file is reserved now: a full disk fails here, never later in a mapped write
    // (which the kernel would answer with SIGBUS).
    m->file_bytes = (size_t)m->rows * m->rec;
    const long page = sysconf(_SC_PAGESIZE);
    m->page = page > 0 ? (size_t)page : 4096;
    int e = m->fd < 0 ? errno : posix_fallocate(m->fd, 0, (off_t)m->file_bytes);
    if (e == 0) {
        m->file = mmap(NULL, m->file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
        if (m->file == MAP_FAILED) {
            e = errno;
            m->file = NULL;
        } else {
            // Rows are read one by one at scattered places: without this, each fault of a page
            // that is not in memory reads the pages around it too (read-around), many times the
            // row, and evicts other rows' pages when memory is short. Advice only: no failure.
            (void)madvise(m->file, m->file_bytes, MADV_RANDOM);
        }
    }
    if (e != 0) {
        const char *what = m->fd < 0 ? "create" : "reserve";
        const double mb = (double)m->file_bytes / 1e6;
        tiered_destroy(ctx, &m->hdr);
        return ember__error(ctx, EMBER_ERR_IO, "ember_ebc_create: table '%s': cannot %s its file of %.4g MB in '%s': %s",
                            tb->label, what, mb, dir, strerror(e));
    }
    *out = &m->hdr;
    return EMBER_OK;
}

const ember__rowmap_kind ember__rowmap_tiered = {.name = "tiered", .ids = EMBER_IDS_ROWS, .create = tiered_create};

ember_status ember_ebc_tier_stats(const ember_ebc *ebc, int32_t table, ember_tier_stats *out) {
    if (!ebc || !out) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ebc->ctx, table >= 0 && table < ebc->T, EMBER_ERR_INVALID_ARG,
                "ember_ebc_tier_stats: table %d outside [0, %d)", (int)table, (int)ebc->T);
    const ember__table *tb = &ebc->tables[table];
    EMBER_CHECK(ebc->ctx, tb->map && tb->map->ops == &tiered_ops, EMBER_ERR_INVALID_ARG,
                "ember_ebc_tier_stats: table '%s' is not tiered", tb->label);
    *out = ((const tiered *)tb->map)->stats;
    return EMBER_OK;
}

int ember__ebc_tiered(const ember_ebc *ebc) {
    for (int32_t t = 0; ebc && t < ebc->T; t++)
        if (ebc->tables[t].map && ebc->tables[t].map->ops == &tiered_ops) return 1;
    return 0;
}

ember_status ember__ebc_prefetch_unchecked(ember_ebc *ebc, const ember_kjt *kjt) {
    if (!ember__ebc_tiered(ebc)) return EMBER_OK;
    const int64_t *off = ember__ebc_offsets(ebc, kjt);
    int64_t *rows = ember__ws_get(ebc, 14, sizeof(int64_t) * (size_t)(kjt->nnz > 0 ? kjt->nnz : 1));
    if (!off || !rows) return EMBER_ERR_NOMEM;
    const int32_t B = kjt->batch_size;
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        if (!tb->map || tb->map->ops != &tiered_ops) continue;
        tiered *m = (tiered *)tb->map;
        int64_t n = 0; // the rows the file holds and the cache does not: usually a few of the ids
        for (int32_t f = 0; f < ebc->F; f++) {
            if (ebc->feature_table[f] != t) continue;
            for (int64_t j = off[(int64_t)f * B]; j < off[(int64_t)(f + 1) * B]; j++) {
                const int64_t r = ember__resolve_id(kjt->values[j], tb->cfg.rows, ebc->bounds);
                if (r >= 0 && is_on_disk(m, r) && hfind(m, r) < 0) rows[n++] = r;
            }
        }
        if (n > 1) qsort(rows, (size_t)n, sizeof(int64_t), cmp_i64);
        int64_t u = 0;
        for (int64_t i = 0; i < n; i++)
            if (i == 0 || rows[i] != rows[i - 1]) rows[u++] = rows[i];
        tiered_advise(m, rows, u);
    }
    return EMBER_OK;
}
