// Core: status table, context lifecycle, allocator accounting, error messages.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_names_come_from_one_table),
        cmocka_unit_test(allocator_hooks_are_used_and_counted),
        cmocka_unit_test(error_message_names_rank),
        cmocka_unit_test(bad_config_is_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
