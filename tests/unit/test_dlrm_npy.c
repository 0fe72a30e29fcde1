// The .npy header parser of `--dataset criteo_npy` (apps/ember/npy.h): the versions and spellings
// numpy writes are read, everything else is refused with a reason. The reader's floored modulo
// (floormod.h), one value and a row at a time on each path, against the division.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"
#include "floormod.h"
#include "npy.h"

// A file's first bytes: magic, version major.0, the header's length, the header (padded, '\n').
static size_t make(unsigned char *buf, int major, const char *dict) {
    const size_t pre = major == 1 ? 10 : 12, len = strlen(dict);
    size_t total = pre + len + 1, pad = (64 - total % 64) % 64, hlen = len + pad + 1;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, dict, len);
    memset(buf + pre + len, ' ', pad);
    buf[pre + hlen - 1] = '\n';
    return pre + hlen;
}

static int parse(int major, const char *dict, npy_array *a, size_t *off, char *why) {
    unsigned char buf[512];
    const size_t n = make(buf, major, dict);
    memset(a, 0, sizeof *a);
    return npy_parse_header(buf, n, a, off, why, 200);
}

static void reads_what_numpy_writes(void **state) {
    (void)state;
    npy_array a;
    size_t off;
    char why[200];
    assert_int_equal(parse(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (200, 13), }", &a, &off, why), 0);
    assert_int_equal(off % 64, 0);
    assert_int_equal(a.kind, 'f');
    assert_int_equal(a.itemsize, 4);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 200);
    assert_int_equal(a.shape[1], 13);
    assert_int_equal(parse(2, "{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }", &a, &off, why), 0);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 7);
    assert_int_equal(a.shape[1], 1);
    assert_int_equal(parse(3, "{'descr': '|u1', 'fortran_order': False, 'shape': (), }", &a, &off, why), 0);
    assert_int_equal(a.ndim, 0);
    // Python 2's long literals, and keys in another order.
    assert_int_equal(parse(1, "{'shape': (3L, 26L), 'fortran_order': False, 'descr': '<i4'}", &a, &off, why), 0);
    assert_int_equal(a.shape[1], 26);
    assert_int_equal(a.kind, 'i');
}

static void refuses_the_rest(void **state) {
    (void)state;
    npy_array a;
    size_t off;
    char why[200];
    assert_int_equal(parse(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", &a, &off, why), -1);
    assert_non_null(strstr(why, "'>f4'"));
    assert_int_equal(parse(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", &a, &off, why), -1);
    assert_non_null(strstr(why, "fortran_order"));
    assert_int_equal(parse(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", &a, &off, why), -1);
    assert_non_null(strstr(why, "structured"));
    assert_int_equal(parse(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", &a, &off, why), -1);
    assert_int_equal(parse(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", &a, &off, why), -1);
    assert_non_null(strstr(why, "at most 2"));
    assert_int_equal(parse(4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", &a, &off, why), -1);
    assert_non_null(strstr(why, "version"));
    const unsigned char text[] = "not numpy at all";
    assert_int_equal(npy_parse_header(text, sizeof text, &a, &off, why, sizeof why), -1);
    assert_non_null(strstr(why, "magic"));
    unsigned char buf[512];
    const size_t n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
    assert_int_equal(npy_parse_header(buf, n - 20, &a, &off, why, sizeof why), -1); // cut inside the header
}

// floormod32 equals the floored remainder ((v % d) + d) % d for the edges of int32 and divisors
// from 1 to beyond 2^32 (TorchRec's and MLPerf's row counts among them).
static void floormod_equals_the_division(void **state) {
    (void)state;
    static const int64_t ds[] = {1, 2, 3, 7, 10, 36, 1543, 39060, 65536, 3067956, 40000000, 2147483647,
                                 2147483648LL, 2147483649LL, 4294967295LL, 4294967296LL, 4294967297LL,
                                 (int64_t)1 << 40, (int64_t)1 << 48};
    static const int32_t edges[] = {0, 1, -1, 2, -2, INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1};
    uint64_t x = 12345;
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        const floormod f = floormod_of(ds[k]);
        for (int i = 0; i < 20000; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            const int32_t v = i < 9 ? edges[i] : (int32_t)(uint32_t)(x >> 32);
            const int64_t want = (((int64_t)v % ds[k]) + ds[k]) % ds[k];
            if (floormod32(v, &f) != want)
                fail_msg("%d mod %lld: got %lld, want %lld", v, (long long)ds[k], (long long)floormod32(v, &f),
                         (long long)want);
        }
    }
}

// floormod_row, on its vector path where this CPU runs AVX2 and on the scalar path, equals the
// division for rows of 26 values (random and int32's edges) over divisor sets that mix 1, primes,
// 2^31 +- 1 and 2^32 - 1 (every one below 2^32: the vector path) or include 2^32 and 2^48 (the
// scalar path, whatever vec says).
static void floormod_row_equals_the_division(void **state) {
    (void)state;
    static const int64_t pool[] = {1, 2, 3, 7, 10, 36, 1543, 39060, 65536, 3067956, 40000000, 2147483647,
                                   2147483648LL, 2147483649LL, 4294967295LL};
    static const int32_t edges[] = {0, 1, -1, 2, -2, INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1};
    const int npool = (int)(sizeof pool / sizeof pool[0]);
    const int avx2 = ember_isa_supported(EMBER_ISA_AVX2, NULL, 0);
    uint64_t x = 777;
    for (int set = 0; set < 4; set++) {
        int64_t ds[26];
        for (int f = 0; f < 26; f++) ds[f] = pool[(f * 7 + set * 5) % npool];
        if (set == 3) ds[11] = (int64_t)1 << 32, ds[20] = (int64_t)1 << 48; // the scalar path
        for (int vec = 0; vec <= avx2; vec++) {
            floormod_row m;
            floormod_row_init(&m, ds, 26, vec);
            assert_int_equal(m.vec, vec && set != 3);
            for (int i = 0; i < 3000; i++) {
                int32_t v[26];
                int64_t got[26];
                for (int f = 0; f < 26; f++) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    v[f] = i < 9 ? edges[(i + f) % 9] : (int32_t)(uint32_t)(x >> 32);
                }
                floormod_row_apply(&m, v, got);
                for (int f = 0; f < 26; f++) {
                    const int64_t want = (((int64_t)v[f] % ds[f]) + ds[f]) % ds[f];
                    if (got[f] != want)
                        fail_msg("vec %d: %d mod %lld: got %lld, want %lld", vec, v[f], (long long)ds[f],
                                 (long long)got[f], (long long)want);
                }
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_what_numpy_writes),
        cmocka_unit_test(refuses_the_rest),
        cmocka_unit_test(floormod_equals_the_division),
        cmocka_unit_test(floormod_row_equals_the_division),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
