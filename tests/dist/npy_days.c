// Writes a small Criteo data set twice, as TorchRec's preprocessed day files and as TSV with the
// same content, for tests/dist/train_npy.sh: `ember train` on either must train the same model.
//
//   npy_days DIR [ROWS_PER_DAY]
//
// DIR/day_{0,1,2}_{dense,sparse,labels}.npy (ROWS_PER_DAY rows each, default 200): dense float32
// (N, 13) = (float)log1p(x) of integer counts x (the TSV reader's transform), sparse (N, 26)
// 32-bit hashes h (int32 on days 0 and 2, where h >= 2^31 reads negative as in TorchRec's files;
// int64 on day 1), labels int32 (N, 1) on day 0, int64 (N,) on day 1, uint8 (N,) on day 2; and
// DIR/train.tsv (days 0 and 1), DIR/val.tsv (the first ceil(N/2) rows of day 2) and DIR/test.tsv
// (the rest), the categoricals in hex. With a table size dividing 2^32 both readers give the same
// ids (the floored modulo of the int32 value). For `ember preprocess`: each day's TSV alone
// (DIR/day{d}.tsv) and what TorchRec's tsv_to_npys makes of it (DIR/expect/day_{d}_*.npy: float32
// log(x + 3), int32 hashes, int32 (N, 1) labels).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h" // the app's header writer: one home for the format

static uint64_t state = 0x5eed1234abcdull;
static uint32_t next_u32(void) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(state >> 33);
}

static FILE *open_or_die(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    return f;
}

// DIR/<prefix>day_<day>_<kind>.npy for dense, sparse, labels, opened for writing.
static void open_day(const char *dir, const char *prefix, int day, FILE *f[3]) {
    static const char *const kind[3] = {"dense", "sparse", "labels"};
    for (int k = 0; k < 3; k++) {
        char name[64];
        snprintf(name, sizeof name, "%sday_%d_%s.npy", prefix, day, kind[k]);
        f[k] = open_or_die(dir, name);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: npy_days DIR [ROWS_PER_DAY]\n");
        return 2;
    }
    const char *dir = argv[1];
    const long long N = argc > 2 ? atoll(argv[2]) : 200;
    FILE *train = open_or_die(dir, "train.tsv"), *val = open_or_die(dir, "val.tsv"), *test = open_or_die(dir, "test.tsv");
    for (int day = 0; day < 3; day++) {
        FILE *in[3], *ex[3];
        open_day(dir, "", day, in);
        FILE *fd = in[0], *fs = in[1], *fl = in[2];
        npy_write_header(fd, "<f4", N, 13);
        npy_write_header(fs, day == 1 ? "<i8" : "<i4", N, 26);
        npy_write_header(fl, day == 0 ? "<i4" : day == 1 ? "<i8" : "|u1", N, day == 0 ? 1 : 0);
        // What `ember preprocess` must write for this day's TSV: TorchRec's tsv_to_npys layout.
        open_day(dir, "expect/", day, ex);
        FILE *xd = ex[0], *xs = ex[1], *xl = ex[2];
        char name[64];
        snprintf(name, sizeof name, "day%d.tsv", day);
        FILE *one = open_or_die(dir, name);
        npy_write_header(xd, "<f4", N, 13);
        npy_write_header(xs, "<i4", N, 26);
        npy_write_header(xl, "<i4", N, 1);
        for (long long i = 0; i < N; i++) {
            FILE *t = day < 2 ? train : i < (N + 1) / 2 ? val : test;
            const int y = next_u32() % 4 == 0;
            fprintf(t, "%d", y);
            fprintf(one, "%d", y);
            const int32_t y32 = y;
            fwrite(&y32, 4, 1, xl);
            for (int j = 0; j < 13; j++) {
                const unsigned x = (next_u32() % 100) * (next_u32() % 100) / 50;
                const float v = (float)log1p((double)x);
                fwrite(&v, 4, 1, fd);
                fprintf(t, "\t%u", x);
                fprintf(one, "\t%u", x);
                const float tr = logf((float)((int32_t)x + 3)); // numpy: (int32 x + 3) in float32, log
                fwrite(&tr, 4, 1, xd);
            }
            for (int c = 0; c < 26; c++) {
                const uint32_t h = next_u32() ^ (next_u32() << 16);
                if (day == 1) {
                    const int64_t v = h;
                    fwrite(&v, 8, 1, fs);
                } else {
                    int32_t v;
                    memcpy(&v, &h, 4); // the bits: h >= 2^31 reads negative
                    fwrite(&v, 4, 1, fs);
                }
                fprintf(t, "\t%x", h);
                fprintf(one, "\t%x", h);
                int32_t lo;
                memcpy(&lo, &h, 4);
                fwrite(&lo, 4, 1, xs);
            }
            fputc('\n', t);
            fputc('\n', one);
            if (day == 0) {
                const int32_t v = y;
                fwrite(&v, 4, 1, fl);
            } else if (day == 1) {
                const int64_t v = y;
                fwrite(&v, 8, 1, fl);
            } else {
                const uint8_t v = (uint8_t)y;
                fwrite(&v, 1, 1, fl);
            }
        }
        fclose(fd);
        fclose(fs);
        fclose(fl);
        fclose(xd);
        fclose(xs);
        fclose(xl);
        fclose(one);
    }
    fclose(train);
    fclose(val);
    fclose(test);
    return 0;
}
