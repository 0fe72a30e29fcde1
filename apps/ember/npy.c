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

ember_status npy_open(ember_ctx *ctx, const char *path, npy_array *a) {
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "%s", path);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot open: %s", path, strerror(errno));
    struct stat st;
    unsigned char head[4096];
    ssize_t got = fstat(fd, &st) == 0 ? pread(fd, head, sizeof head, 0) : -1;
    if (got < 0) {
        const int e = errno;
        close(fd);
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot read: %s", path, strerror(e));
    }
    char why[200];
    size_t off = 0;
    if (npy_parse_header(head, (size_t)got, a, &off, why, sizeof why) != 0) {
        close(fd);
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "'%s': %s", path, why);
    }
    // The data's bytes: shape's product times the item size, checked for overflow.
    uint64_t n = (uint64_t)a->itemsize;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != 0 && n > UINT64_MAX / (uint64_t)a->shape[i]) n = UINT64_MAX;
        else n *= (uint64_t)a->shape[i];
    }
    if ((uint64_t)st.st_size < off || (uint64_t)st.st_size - off != n) {
        close(fd);
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                                   "'%s': %lld bytes of data after the header, its shape (%lld, %lld) of %s needs %llu",
                                   path, (long long)((uint64_t)st.st_size > off ? (uint64_t)st.st_size - off : 0),
                                   (long long)a->shape[0], (long long)a->shape[1], a->descr, (unsigned long long)n);
    }
    if (n > 0) {
        a->map_bytes = (size_t)st.st_size;
        a->map = mmap(NULL, a->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (a->map == MAP_FAILED) {
            const int e = errno;
            a->map = NULL;
            close(fd);
            return ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': cannot map: %s", path, strerror(e));
        }
        a->data = (const unsigned char *)a->map + off;
    }
    close(fd); // the mapping stays
    return EMBER_OK;
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
