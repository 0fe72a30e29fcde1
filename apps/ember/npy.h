// npy.h — NumPy's .npy files (and .npz archives of them), read in place: the header parsed and checked, the data mapped
// read-only (no load step; the page cache is the only copy).
//
// The format (numpy.lib.format): the magic "\x93NUMPY", a version byte pair (1.0, 2.0 or 3.0), the
// header's length (2 bytes little-endian for 1.0, 4 for 2.0 and 3.0), then the header: a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (N, 13), } padded with spaces to
// a multiple of 64 bytes and ending with '\n'; then the data, C order. Accepted: little-endian (or
// byte-order-free) integers of 1, 2, 4, 8 bytes ('i', 'u'), booleans ('b1') and floats of 4 and 8
// bytes ('f'); 0 to 2 dimensions; fortran_order False. Anything else, a header that does not
// parse, or a file whose size is not header + shape's bytes is EMBER_ERR_FORMAT with a message
// naming the file and what differs.
#ifndef EMBER_APP_NPY_H
#define EMBER_APP_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ember/core.h"

typedef struct npy_array {
    char path[512];
    char kind;            // 'f' float, 'i' signed, 'u' unsigned integer, 'b' boolean
    int itemsize;         // bytes per element
    char descr[16];       // as written ("<f4")
    int ndim;             // 0, 1 or 2
    int64_t shape[2];     // unused dimensions are 1
    const unsigned char *data; // element (r, c) at data + (r * shape[1] + c) * itemsize
    void *map;            // the mapping (NULL for an empty array)
    size_t map_bytes;
} npy_array;

// Opens and maps `path`. Local. Returns EMBER_OK, EMBER_ERR_IO (cannot open, read or map: the
// system's reason), EMBER_ERR_FORMAT (see above). On failure *a holds nothing to close.
ember_status npy_open(ember_ctx *ctx, const char *path, npy_array *a);
void npy_close(npy_array *a);

// Opens array `name` of the .npz archive `path` (numpy.savez: a zip archive whose member NAME.npy
// is that array's .npy file) and maps its data in place; a->path reads "PATH[NAME]". The member
// must be stored (np.savez), not deflated (np.savez_compressed: EMBER_ERR_FORMAT saying so);
// ZIP64 archives (members or archives of 4 GiB and more) are read. Local. Returns as npy_open,
// plus EMBER_ERR_FORMAT for a file that is not a zip archive or lacks the member (named).
ember_status npy_open_npz(ember_ctx *ctx, const char *path, const char *name, npy_array *a);

// Parses the header of a .npy file held in buf[0, len) (len: at least the header's bytes): fills
// a's kind, itemsize, descr, ndim, shape and sets *data_offset. Returns 0, or -1 with the reason
// in why (a sentence fragment, without the path). For npy_open and the tests.
int npy_parse_header(const unsigned char *buf, size_t len, npy_array *a, size_t *data_offset, char *why,
                     size_t why_len);

// Writes a version 1.0 header for an array of `rows` rows of `cols` elements of `descr` ("<f4";
// cols 0: a 1-D array of rows), C order, always NPY_HEADER_BYTES long, so that a writer that does
// not know its rows yet can write a header first and the same-sized true one over it at the end.
// Returns 0, or -1 on a write error (errno set).
#define NPY_HEADER_BYTES 128
int npy_write_header(FILE *f, const char *descr, int64_t rows, int cols);

// Element (r, c) of an integer or boolean array as int64 (unsigned 64-bit values above INT64_MAX
// read as negative), of a float array as its value cast to int64 (callers check kinds first).
int64_t npy_get_i64(const npy_array *a, int64_t r, int64_t c);
// Element (r, c) as double.
double npy_get_f64(const npy_array *a, int64_t r, int64_t c);

#endif
