// .npy files read in place (npy.h).
#define _POSIX_C_SOURCE 200809L

#include "npy.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "appctx.h"

static const unsigned char MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

// The value text after 'key': in the dict literal h[0, n), or NULL.
static const char *value_of(const char *h, size_t n, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const size_t k = strlen(pat);
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(h + i, pat, k) != 0) continue;
        size_t j = i + k;
        while (j < n && (h[j] == ' ' || h[j] == ':')) j++;
        return j < n ? h + j : NULL;
    }
    return NULL;
}

int npy_parse_header(const unsigned char *buf, size_t len, npy_array *a, size_t *data_offset, char *why,
                     size_t why_len) {
    if (len < 10 || memcmp(buf, MAGIC, sizeof MAGIC) != 0) {
        snprintf(why, why_len, "not a .npy file (no \\x93NUMPY magic)");
        return -1;
    }
    const int major = buf[6];
    if (major < 1 || major > 3) {
        snprintf(why, why_len, "format version %d.%d (1.0, 2.0 or 3.0 expected)", major, buf[7]);
        return -1;
    }
    size_t start = major == 1 ? 10 : 12;
    if (len < start) {
        snprintf(why, why_len, "truncated header");
        return -1;
    }
    const size_t hlen = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                                   : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (hlen > len - start || hlen > (1u << 20)) {
        snprintf(why, why_len, "header of %zu bytes runs past the file", hlen);
        return -1;
    }
    const char *h = (const char *)buf + start;
    if (hlen == 0 || h[hlen - 1] != '\n' || h[0] != '{') {
        snprintf(why, why_len, "header is not a dict literal ending with a newline");
        return -1;
    }
    // 'descr': '<f4'
    const char *d = value_of(h, hlen, "descr");
    const char *end = h + hlen;
    if (!d || *d != '\'') {
        snprintf(why, why_len, "header has no 'descr' string (structured dtypes are not supported)");
        return -1;
    }
    const char *q = memchr(d + 1, '\'', (size_t)(end - d - 1));
    if (!q || q - d - 1 >= (ptrdiff_t)sizeof a->descr || q - d - 1 < 2) {
        snprintf(why, why_len, "header's 'descr' does not parse");
        return -1;
    }
    memcpy(a->descr, d + 1, (size_t)(q - d - 1));
    a->descr[q - d - 1] = 0;
    const char order = a->descr[0], kind = a->descr[1];
    const int size = atoi(a->descr + 2);
    const int sized = (kind == 'i' || kind == 'u') ? (size == 1 || size == 2 || size == 4 || size == 8)
                      : kind == 'f'                ? (size == 4 || size == 8)
                      : kind == 'b'                ? size == 1
                                                   : 0;
    if ((order != '<' && order != '|' && order != '=') || !sized || (size > 1 && order == '|')) {
        snprintf(why, why_len, "dtype '%s' (little-endian integers, booleans or float32/float64 expected)", a->descr);
        return -1;
    }
    a->kind = kind;
    a->itemsize = size;
    // 'fortran_order': False
    const char *f = value_of(h, hlen, "fortran_order");
    const size_t flen = f ? (size_t)(end - f) : 0;
    if (!f || !((flen >= 5 && memcmp(f, "False", 5) == 0) || (flen >= 4 && memcmp(f, "True", 4) == 0))) {
        snprintf(why, why_len, "header has no 'fortran_order' of True or False");
        return -1;
    }
    if (f[0] == 'T') {
        snprintf(why, why_len, "fortran_order is True (C order expected: save a C-contiguous array)");
        return -1;
    }
    // 'shape': (N, C) | (N,) | ()
    const char *s = value_of(h, hlen, "shape");
    if (!s || *s != '(') {
        snprintf(why, why_len, "header has no 'shape' tuple");
        return -1;
    }
    a->ndim = 0;
    a->shape[0] = a->shape[1] = 1;
    const char *p = s + 1;
    for (;;) {
        while (p < end && *p == ' ') p++;
        if (p < end && *p == ')') break;
        if (p >= end || *p < '0' || *p > '9' || a->ndim == 2) {
            snprintf(why, why_len, "shape %.*s (at most 2 dimensions of non-negative integers)",
                     (int)(memchr(s, ')', (size_t)(end - s)) ? (const char *)memchr(s, ')', (size_t)(end - s)) - s + 1
                                                              : 1),
                     s);
            return -1;
        }
        int64_t v = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - 9) / 10) {
                snprintf(why, why_len, "shape dimension too large");
                return -1;
            }
            v = v * 10 + (*p++ - '0');
        }
        while (p < end && (*p == 'L' || *p == ' ')) p++; // Python 2 wrote 100L
        a->shape[a->ndim++] = v;
        if (p < end && *p == ',') p++;
    }
    *data_offset = start + hlen;
    return 0;
}

// The array stored in bytes [at, at + len) of the open file fd, named `label` in a->path and in
// messages: header read and checked, data mapped (from the page holding `at`). fd stays open.
static ember_status open_range(ember_ctx *ctx, int fd, const char *label, uint64_t at, uint64_t len, npy_array *a) {
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "%s", label);
    unsigned char head[4096];
    const ssize_t got = pread(fd, head, len < sizeof head ? (size_t)len : sizeof head, (off_t)at);
    if (got < 0) return ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot read: %s", label, strerror(errno));
    char why[200];
    size_t off = 0;
    if (npy_parse_header(head, (size_t)got, a, &off, why, sizeof why) != 0)
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s': %s", label, why);
    // The data's bytes: shape's product times the item size, checked for overflow.
    uint64_t n = (uint64_t)a->itemsize;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != 0 && n > UINT64_MAX / (uint64_t)a->shape[i]) n = UINT64_MAX;
        else n *= (uint64_t)a->shape[i];
    }
    if (len < off || len - off != n) {
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                                   "'%s': %lld bytes of data after the header, its shape (%lld, %lld) of %s needs %llu",
                                   label, (long long)(len > off ? len - off : 0), (long long)a->shape[0],
                                   (long long)a->shape[1], a->descr, (unsigned long long)n);
    }
    if (n > 0) {
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), base = at / page * page;
        a->map_bytes = (size_t)(at + len - base);
        a->map = mmap(NULL, a->map_bytes, PROT_READ, MAP_PRIVATE, fd, (off_t)base);
        if (a->map == MAP_FAILED) {
            a->map = NULL;
            return ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot map: %s", label, strerror(errno));
        }
        a->data = (const unsigned char *)a->map + (at - base) + off;
    }
    return EMBER_OK;
}

ember_status npy_open(ember_ctx *ctx, const char *path, npy_array *a) {
    memset(a, 0, sizeof *a);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot open: %s", path, strerror(errno));
    struct stat st;
    ember_status s = fstat(fd, &st) == 0 ? open_range(ctx, fd, path, 0, (uint64_t)st.st_size, a)
                                         : ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot read: %s", path,
                                                               strerror(errno));
    close(fd); // the mapping stays
    if (s != EMBER_OK) npy_close(a);
    return s;
}

// ---- .npz: a zip archive of .npy members, each read in place -----------------------------------

static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const unsigned char *p) { return le16(p) | (uint32_t)le16(p + 2) << 16; }
static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

// Reads exactly n bytes at `at`, or fails.
static bool read_at(int fd, void *buf, size_t n, uint64_t at) {
    return pread(fd, buf, n, (off_t)at) == (ssize_t)n;
}

// The central directory of the zip archive in fd (size bytes): its offset, size and entries, from
// the end-of-central-directory record (and its ZIP64 twin when a field overflows). Returns 0 or -1
// with the reason in why.
static int central_directory(int fd, uint64_t size, uint64_t *cd_at, uint64_t *cd_len, char *why, size_t cap) {
    // The record is 22 bytes plus a comment of at most 65535: search the tail for its signature.
    unsigned char tail[22 + 65535];
    const uint64_t span = size < sizeof tail ? size : sizeof tail;
    if (span < 22 || !read_at(fd, tail, (size_t)span, size - span)) {
        snprintf(why, cap, "not a zip archive (too short for its directory)");
        return -1;
    }
    int64_t e = -1;
    for (int64_t i = (int64_t)span - 22; i >= 0 && e < 0; i--)
        if (le32(tail + i) == 0x06054b50u) e = i;
    if (e < 0) {
        snprintf(why, cap, "not a zip archive (no end-of-central-directory record)");
        return -1;
    }
    *cd_len = le32(tail + e + 12);
    *cd_at = le32(tail + e + 16);
    if (*cd_at == 0xffffffffu || *cd_len == 0xffffffffu || le16(tail + e + 10) == 0xffffu) {
        // ZIP64: the locator just before the record names the ZIP64 record.
        const uint64_t rec = size - span + (uint64_t)e;
        unsigned char loc[20], z[56];
        if (rec < 20 || !read_at(fd, loc, sizeof loc, rec - 20) || le32(loc) != 0x07064b50u ||
            !read_at(fd, z, sizeof z, le64(loc + 8)) || le32(z) != 0x06064b50u) {
            snprintf(why, cap, "a ZIP64 archive without a readable ZIP64 directory record");
            return -1;
        }
        *cd_len = le64(z + 40);
        *cd_at = le64(z + 48);
    }
    if (*cd_at > size || *cd_len > size - *cd_at || *cd_len > ((uint64_t)1 << 30)) {
        snprintf(why, cap, "central directory outside the file");
        return -1;
    }
    return 0;
}

// Member `name` of the zip archive in fd: where its stored bytes start and how many there are.
// Returns 0, 1 (no such member) or -1 with the reason in why.
static int find_member(int fd, uint64_t size, const char *name, uint64_t *at, uint64_t *len, char *why, size_t cap) {
    uint64_t cd_at, cd_len;
    if (central_directory(fd, size, &cd_at, &cd_len, why, cap) != 0) return -1;
    unsigned char *cd = malloc(cd_len ? (size_t)cd_len : 1);
    if (!cd || !read_at(fd, cd, (size_t)cd_len, cd_at)) {
        free(cd);
        snprintf(why, cap, "cannot read its central directory");
        return -1;
    }
    const size_t nlen = strlen(name);
    int found = 1;
    for (uint64_t p = 0; found == 1 && p + 46 <= cd_len;) {
        const unsigned char *h = cd + p;
        if (le32(h) != 0x02014b50u) {
            snprintf(why, cap, "corrupt central directory");
            found = -1;
            break;
        }
        const uint32_t n = le16(h + 28), x = le16(h + 30), c = le16(h + 32);
        if (p + 46 + n + x + c > cd_len) {
            snprintf(why, cap, "corrupt central directory");
            found = -1;
            break;
        }
        if (n == nlen && memcmp(h + 46, name, nlen) == 0) {
            uint64_t csize = le32(h + 20), usize = le32(h + 24), local = le32(h + 42);
            // ZIP64 extra field (id 1): the 64-bit values of the fields that overflowed, in order.
            for (const unsigned char *e = h + 46 + n, *end = e + x; e + 4 <= end;) {
                const uint32_t id = le16(e), sz = le16(e + 2);
                const unsigned char *v = e + 4, *vend = v + sz > end ? end : v + sz;
                if (id == 1) {
                    if (usize == 0xffffffffu && v + 8 <= vend) usize = le64(v), v += 8;
                    if (csize == 0xffffffffu && v + 8 <= vend) csize = le64(v), v += 8;
                    if (local == 0xffffffffu && v + 8 <= vend) local = le64(v);
                }
                e += 4 + sz;
            }
            unsigned char lh[30];
            if (le16(h + 10) != 0 || csize != usize) {
                snprintf(why, cap, "member '%s' is compressed (np.savez_compressed): only stored members "
                         "(np.savez) are read in place", name);
                found = -1;
            } else if (local > size || !read_at(fd, lh, sizeof lh, local) || le32(lh) != 0x04034b50u) {
                snprintf(why, cap, "member '%s' has no local header where the directory says", name);
                found = -1;
            } else {
                *at = local + 30 + le16(lh + 26) + le16(lh + 28);
                *len = csize;
                if (*at > size || *len > size - *at) {
                    snprintf(why, cap, "member '%s' runs past the end of the file", name);
                    found = -1;
                } else {
                    found = 0;
                }
            }
        }
        p += 46 + n + x + c;
    }
    free(cd);
    if (found == 1) snprintf(why, cap, "no member '%s'", name);
    return found;
}

ember_status npy_open_npz(ember_ctx *ctx, const char *path, const char *name, npy_array *a) {
    memset(a, 0, sizeof *a);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot open: %s", path, strerror(errno));
    struct stat st;
    char member[64], label[600], why[400];
    snprintf(member, sizeof member, "%s.npy", name);
    uint64_t at = 0, len = 0;
    ember_status s = EMBER_OK;
    if (fstat(fd, &st) != 0) {
        s = ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot read: %s", path, strerror(errno));
    } else if (find_member(fd, (uint64_t)st.st_size, member, &at, &len, why, sizeof why) != 0) {
        s = ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s': %s", path, why);
    } else {
        snprintf(label, sizeof label, "%s[%s]", path, name);
        s = open_range(ctx, fd, label, at, len, a);
    }
    close(fd);
    if (s != EMBER_OK) npy_close(a);
    return s;
}

int npy_write_header(FILE *f, const char *descr, int64_t rows, int cols) {
    char dict[NPY_HEADER_BYTES], shape[64];
    if (cols > 0) snprintf(shape, sizeof shape, "(%lld, %d)", (long long)rows, cols);
    else snprintf(shape, sizeof shape, "(%lld,)", (long long)rows);
    const int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    const int hlen = NPY_HEADER_BYTES - 10; // the dict, spaces, '\n'
    unsigned char head[NPY_HEADER_BYTES];
    memcpy(head, MAGIC, sizeof MAGIC);
    head[6] = 1;
    head[7] = 0;
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8);
    memset(head + 10, ' ', (size_t)hlen);
    memcpy(head + 10, dict, (size_t)len);
    head[NPY_HEADER_BYTES - 1] = '\n';
    return fwrite(head, 1, sizeof head, f) == sizeof head ? 0 : -1;
}

void npy_close(npy_array *a) {
    if (a->map) munmap(a->map, a->map_bytes);
    a->map = NULL;
    a->data = NULL;
}

int64_t npy_get_i64(const npy_array *a, int64_t r, int64_t c) {
    const unsigned char *p = a->data + ((size_t)r * (size_t)a->shape[1] + (size_t)c) * (size_t)a->itemsize;
    if (a->kind == 'f') return (int64_t)npy_get_f64(a, r, c);
    union {
        int8_t i8;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
    } v;
    memcpy(&v, p, (size_t)a->itemsize);
    const bool s = a->kind == 'i';
    switch (a->itemsize) {
    case 1: return s ? (int64_t)v.i8 : (int64_t)v.u8;
    case 2: return s ? (int64_t)v.i16 : (int64_t)v.u16;
    case 4: return s ? (int64_t)v.i32 : (int64_t)v.u32;
    default: return v.i64;
    }
}

double npy_get_f64(const npy_array *a, int64_t r, int64_t c) {
    const unsigned char *p = a->data + ((size_t)r * (size_t)a->shape[1] + (size_t)c) * (size_t)a->itemsize;
    if (a->kind != 'f') return (double)npy_get_i64(a, r, c);
    if (a->itemsize == 4) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    double d;
    memcpy(&d, p, 8);
    return d;
}
