// fuzz_input.h — what the fuzz targets share: reading typed values off the fuzzer's bytes, a
// per-process scratch directory on a memory file system, and the oracle's failure report.
//
// The bytes are consumed front to back; past their end every read gives 0, so any input decodes.
// The "interesting" readers spend one byte choosing between a small value (most of the time: the
// shapes that reach deep code) and an extreme one (limits, sign flips, overflow bait), then
// possibly raw bytes; libFuzzer's comparison tracing finds the rest.
#ifndef EMBER_FUZZ_INPUT_H
#define EMBER_FUZZ_INPUT_H

// Every target defines _GNU_SOURCE before its first include (mkdtemp here, getopt_long).
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fuzz_bytes {
    const uint8_t *p;
    size_t n;
} fuzz_bytes;

static inline uint8_t fuzz_u8(fuzz_bytes *b) {
    if (b->n == 0) return 0;
    b->n--;
    return *b->p++;
}

static inline uint64_t fuzz_raw(fuzz_bytes *b, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)fuzz_u8(b) << (8 * i);
    return v;
}

// Small values [lo, lo + 16) for selectors 0..199, else limits and raw 64-bit patterns.
static inline int64_t fuzz_i64(fuzz_bytes *b, int64_t lo) {
    static const int64_t extreme[] = {INT64_MIN, INT64_MAX,     INT64_MIN + 1, INT64_MAX - 1, INT32_MIN,
                                      INT32_MAX, (int64_t)1 << 31, (int64_t)1 << 32, -1, 0,
                                      INT64_MAX / 2, INT64_MIN / 2, (int64_t)1 << 62, -((int64_t)1 << 40)};
    const uint8_t k = fuzz_u8(b);
    if (k < 200) return lo + (int64_t)(k % 16);
    if (k < 200 + sizeof extreme / sizeof extreme[0]) return extreme[k - 200];
    return (int64_t)fuzz_raw(b, 8);
}

static inline int32_t fuzz_i32(fuzz_bytes *b, int32_t lo) {
    static const int32_t extreme[] = {INT32_MIN, INT32_MAX, INT32_MIN + 1, INT32_MAX - 1, -1, 0, 1 << 30, -(1 << 30)};
    const uint8_t k = fuzz_u8(b);
    if (k < 200) return lo + (int32_t)(k % 16);
    if (k < 200 + sizeof extreme / sizeof extreme[0]) return extreme[k - 200];
    return (int32_t)(uint32_t)fuzz_raw(b, 4);
}

// Floats: ordinary values, signed zeros, NaN (quiet and signalling bits), infinities, subnormals,
// the largest finite, or raw bits.
static inline float fuzz_f32(fuzz_bytes *b) {
    static const uint32_t bits[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x7fc00000u, 0x7f800001u,
                                    0xffc00000u, 0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
                                    0x3f000000u, 0x40490fdbu};
    const uint8_t k = fuzz_u8(b);
    float f;
    uint32_t u;
    if (k < 128) return (float)(k % 32) * 0.25f - 4.0f;
    if (k < 128 + sizeof bits / sizeof bits[0]) u = bits[k - 128];
    else u = (uint32_t)fuzz_raw(b, 4);
    memcpy(&f, &u, sizeof f);
    return f;
}

// The harness's own check failed: the library broke a promise its header makes. Prints and
// aborts, which libFuzzer reports as a crash with the input saved.
#define FUZZ_REQUIRE(cond, ...)                                                                   \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "fuzz oracle: %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

// A fresh directory for this process under $EMBER_FUZZ_TMP (scripts/fuzz.sh sets it), else
// /dev/shm (a memory file system), else $TMPDIR or /tmp; removed with its files at a normal exit
// (a crash leaves it: the script removes its whole $EMBER_FUZZ_TMP). Returns its path, or NULL.
static char fuzz_dir_path[256];

static inline void fuzz_dir_remove(void) {
    if (!fuzz_dir_path[0]) return;
    DIR *d = opendir(fuzz_dir_path);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(fuzz_dir_path);
}

static inline const char *fuzz_dir(const char *tag) {
    if (fuzz_dir_path[0]) return fuzz_dir_path;
    const char *base = getenv("EMBER_FUZZ_TMP");
    if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/ember-fuzz-%s-XXXXXX", base, tag);
    if (!mkdtemp(fuzz_dir_path)) {
        fuzz_dir_path[0] = '\0';
        return NULL;
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

// Writes n bytes to path (replacing it); 0 or -1.
static inline int fuzz_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

// libFuzzer's entry points (the targets define them).
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
