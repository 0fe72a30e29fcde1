// libFuzzer target: the CLI's .npy and .npz readers (apps/ember/npy.h), which map the arrays of
// TorchRec's and MLPerf's day files in place, on a file holding the input's bytes.
//
// The file is opened as a .npy (npy_open) and as an .npz archive (npy_open_npz, members "0" and
// "1", and one that is never there). Either succeeds, or fails with EMBER_ERR_FORMAT or
// EMBER_ERR_IO and a message naming the file. On success every element of the array is read
// (npy_get_i64 / npy_get_f64 over its shape): an array whose data runs past the file, or a
// mapping that does not hold it, faults here under ASan.
#define _GNU_SOURCE // mkdtemp (fuzz_input.h)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "npy.h"

static ember_ctx *ctx;
static char path[512];

static void quiet(void *user, ember_log_level level, const char *msg) { (void)user, (void)level, (void)msg; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = 1;
    cc.log = quiet;
    const char *dir = fuzz_dir("npz");
    if (!dir || ember_ctx_create(&cc, &ctx) != EMBER_OK) abort();
    snprintf(path, sizeof path, "%s/day_0_sparse_multi_hot.npz", dir);
    return 0;
}

// Every element read; the shape and data checked against the mapping's bytes.
static void read_all(const npy_array *a) {
    FUZZ_REQUIRE(a->ndim >= 0 && a->ndim <= 2 && a->shape[0] >= 0 && a->shape[1] >= 0 && a->itemsize >= 1 &&
                     a->itemsize <= 8 && strstr(a->path, "day_0"),
                 "opened array with ndim %d, shape (%lld, %lld), itemsize %d, path '%s'", a->ndim,
                 (long long)a->shape[0], (long long)a->shape[1], a->itemsize, a->path);
    const uint64_t n = (uint64_t)a->shape[0] * (uint64_t)a->shape[1];
    FUZZ_REQUIRE(n == 0 || (a->data && a->map && a->data >= (const unsigned char *)a->map &&
                            (uint64_t)(a->data - (const unsigned char *)a->map) + n * (uint64_t)a->itemsize <=
                                a->map_bytes),
                 "%llu elements of %d bytes outside the mapping of %zu bytes", (unsigned long long)n, a->itemsize,
                 a->map_bytes);
    volatile double sink = 0.0;
    for (int64_t r = 0; r < a->shape[0]; r++)
        for (int64_t c = 0; c < a->shape[1]; c++)
            sink += a->kind == 'f' ? npy_get_f64(a, r, c) : (double)npy_get_i64(a, r, c);
    (void)sink;
}

static void check(ember_status st, const npy_array *a, const char *what) {
    if (st == EMBER_OK) {
        read_all(a);
        return;
    }
    FUZZ_REQUIRE(st == EMBER_ERR_FORMAT || st == EMBER_ERR_IO, "%s: status %d (%s)", what, (int)st,
                 ember_ctx_errmsg(ctx));
    FUZZ_REQUIRE(strstr(ember_ctx_errmsg(ctx), "day_0_sparse_multi_hot.npz"), "%s: the message does not name the file: %s",
                 what, ember_ctx_errmsg(ctx));
    FUZZ_REQUIRE(!a->map, "%s: failed with a mapping left", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    npy_array a;
    check(npy_open(ctx, path, &a), &a, "npy_open");
    npy_close(&a);
    static const char *const members[] = {"0", "1", "25"};
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        check(npy_open_npz(ctx, path, members[i], &a), &a, members[i]);
        npy_close(&a);
    }
    return 0;
}
