// Core: status table, context lifecycle, allocator accounting, error messages.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "core/internal.h"
#include "fp8_oracle.h"
#include "ember.h"

static void status_names_come_from_one_table(void **state) {
    (void)state;
    assert_string_equal(ember_status_name(EMBER_OK), "OK");
    assert_string_equal(ember_status_name(EMBER_ERR_OUT_OF_RANGE), "OUT_OF_RANGE");
    assert_string_equal(ember_status_str(EMBER_ERR_REMOTE), "another rank failed this call");
    assert_string_equal(ember_status_name((ember_status)-999), "UNKNOWN");
}

static size_t hook_calls;
static void *counting_alloc(void *user, size_t n) { (void)user; hook_calls++; return malloc(n); }
static void counting_free(void *user, void *p) { (void)user; free(p); }

static void allocator_hooks_are_used_and_counted(void **state) {
    (void)state;
    ember_ctx_config cfg = EMBER_CTX_CONFIG_DEFAULT;
    cfg.allocator.alloc = counting_alloc;
    cfg.allocator.free = counting_free;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(&cfg, &ctx), EMBER_OK);
    void *p = ember__alloc(ctx, 1000);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 1000);
    void *s = ember__alloc_slab(ctx, (size_t)4 << 20, "slab");
    assert_int_equal((uintptr_t)s % ((size_t)2 << 20), 0);
    ember__free_slab(ctx, s);
    ember__free(ctx, p);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    assert_true(hook_calls >= 3);
    ember_ctx_destroy(ctx);
}

static void error_message_names_rank(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_string_equal(ember_ctx_errmsg(ctx), "");
    ember_ctx_set_rank(ctx, 3);
    assert_int_equal(ember__error(ctx, EMBER_ERR_INVALID_ARG, "feature %d bad", 7), EMBER_ERR_INVALID_ARG);
    assert_string_equal(ember_ctx_errmsg(ctx), "feature 7 bad (rank 3)");
    assert_int_equal(ember_ctx_last_status(ctx), EMBER_ERR_INVALID_ARG);
    ember_ctx_clear_error(ctx);
    assert_string_equal(ember_ctx_errmsg(ctx), "");
    assert_int_equal(ember_ctx_set_num_threads(ctx, -1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_ctx_set_num_threads(ctx, 2), EMBER_OK);
    assert_int_equal(ember_ctx_num_threads(ctx), 2);
    ember_ctx_destroy(ctx);
}

static void bad_config_is_rejected(void **state) {
    (void)state;
    ember_ctx_config cfg = EMBER_CTX_CONFIG_DEFAULT;
    cfg.num_threads = -2;
    ember_ctx *ctx = (ember_ctx *)&cfg;
    assert_int_equal(ember_ctx_create(&cfg, &ctx), EMBER_ERR_INVALID_ARG);
    assert_null(ctx);
    assert_int_equal(ember_ctx_create(NULL, NULL), EMBER_ERR_INVALID_ARG);
    ember_ctx_destroy(NULL);
    assert_non_null(ember_version());
    assert_non_null(strstr(ember_build_info(), "ember"));
}

// fp8 (the wire's fp8_e4m3 and fp8_e5m2) against the oracle: every code decoded; encoding every
// code's value, the midpoints between neighbours (ties), a step either side of them, log-uniform
// random values over both formats' ranges and beyond, fp32 subnormals, zeros and the non-finite.
static void check_fp8_encode(float x, int e5m2) {
    const uint8_t h = ember__f32_to_fp8(x, e5m2);
    if (isnan(x)) {
        assert_true(isnan(ember__fp8_to_f32(h, e5m2)));
        assert_false(ember__fp8_overflowed(x, h, e5m2));
        return;
    }
    if (isinf(x)) {
        const float back = ember__fp8_to_f32(h, e5m2);
        assert_true(e5m2 ? back == x : isnan(back));
        assert_false(ember__fp8_overflowed(x, h, e5m2));
        return;
    }
    int over = 0;
    const double want = fp8_oracle_round((double)x, e5m2, &over);
    if (over != ember__fp8_overflowed(x, h, e5m2)) fail_msg("fp8 %s %.9g: overflow %d", e5m2 ? "e5m2" : "e4m3", (double)x, over);
    if (over) return;
    const float got = ember__fp8_to_f32(h, e5m2);
    if ((double)got != want || !signbit(got) != !signbit(want))
        fail_msg("fp8 %s %.9g: got %.9g (code 0x%02x), want %.9g", e5m2 ? "e5m2" : "e4m3", (double)x, (double)got, h, want);
}

static void fp8_matches_the_oracle(void **state) {
    (void)state;
    uint64_t rng = 12345;
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        double prev = -1;
        for (unsigned h = 0; h < 256; h++) {
            const double want = fp8_oracle_value(h, e5m2);
            const float got = ember__fp8_to_f32((uint8_t)h, e5m2);
            if (isnan(want)) assert_true(isnan(got));
            else assert_true((double)got == want && !signbit(got) == !signbit(want));
            if (h < 0x80 && isfinite(want)) {
                const float v = (float)want;
                check_fp8_encode(v, e5m2);
                check_fp8_encode(-v, e5m2);
                if (prev >= 0) {
                    const float mid = (float)((prev + want) / 2); // exact: a few bits
                    check_fp8_encode(mid, e5m2);
                    check_fp8_encode(-mid, e5m2);
                    check_fp8_encode(nextafterf(mid, 0), e5m2);
                    check_fp8_encode(nextafterf(mid, INFINITY), e5m2);
                }
                prev = want;
            }
        }
        const float past[] = {448.0f, 464.0f, 465.0f, 480.0f, 57344.0f, 61439.0f, 61440.0f, 65536.0f, 1e30f, 3.4e38f};
        for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) check_fp8_encode(past[i], e5m2), check_fp8_encode(-past[i], e5m2);
        const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 0x1p-126f, INFINITY, -INFINITY, NAN};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) check_fp8_encode(special[i], e5m2);
        for (int i = 0; i < 200000; i++) {
            const uint64_t r = ember_splitmix64(rng++);
            const float mag = ldexpf(1.0f + (float)(r & 0xffffff) * 0x1p-24f, (int)((r >> 24) % 44) - 26);
            check_fp8_encode((r >> 40) & 1 ? -mag : mag, e5m2);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_names_come_from_one_table),
        cmocka_unit_test(allocator_hooks_are_used_and_counted),
        cmocka_unit_test(error_message_names_rank),
        cmocka_unit_test(bad_config_is_rejected),
        cmocka_unit_test(fp8_matches_the_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
