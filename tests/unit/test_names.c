// The vocabulary of the API: every public enum's _name / _parse pair round-trips over the whole
// enum, refuses what is not a name (leaving *out as it was) and names a value outside the enum
// "unknown"; the dtype traits; a table's id space and the tensors its row map adds.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"

// One enum's pair, through int so that one loop checks them all.
typedef struct names {
    const char *type;
    int count;
    const char *(*name)(int);
    ember_status (*parse)(const char *, int *);
} names;

#define PAIR(type, enum_type, count)                                                                          \
    static const char *type##_n(int v) { return ember_##type##_name((enum_type)v); }                          \
    static ember_status type##_p(const char *s, int *out) {                                                     \
        enum_type v = (enum_type)*out;                                                                           \
        const ember_status st = ember_##type##_parse(s, &v);                                                     \
        *out = (int)v;                                                                                           \
        return st;                                                                                               \
    }
PAIR(dtype, ember_dtype, EMBER_DTYPE_COUNT)
PAIR(pooling, ember_pooling, EMBER_POOL_COUNT)
PAIR(init_kind, ember_init_kind, EMBER_INIT_COUNT)
PAIR(weight_decay_mode, ember_weight_decay_mode, EMBER_WD_COUNT)
PAIR(evict_policy, ember_evict_policy, EMBER_EVICT_COUNT)
PAIR(id_space, ember_id_space, EMBER_IDS_COUNT)
PAIR(bounds_mode, ember_bounds_mode, EMBER_BOUNDS_COUNT)
PAIR(grad_convention, ember_grad_convention, EMBER_GRAD_COUNT)
PAIR(isa, ember_isa, EMBER_ISA_COUNT)
PAIR(optim, ember_optim_kind, EMBER_OPT_COUNT)
PAIR(shard_scheme, ember_shard_scheme, EMBER_SHARD_COUNT)
PAIR(transpose, ember_transpose, EMBER_TRANSPOSE_COUNT)
#undef PAIR

static const names ALL[] = {
    {"dtype", EMBER_DTYPE_COUNT, dtype_n, dtype_p},
    {"pooling", EMBER_POOL_COUNT, pooling_n, pooling_p},
    {"init_kind", EMBER_INIT_COUNT, init_kind_n, init_kind_p},
    {"weight_decay_mode", EMBER_WD_COUNT, weight_decay_mode_n, weight_decay_mode_p},
    {"evict_policy", EMBER_EVICT_COUNT, evict_policy_n, evict_policy_p},
    {"id_space", EMBER_IDS_COUNT, id_space_n, id_space_p},
    {"bounds_mode", EMBER_BOUNDS_COUNT, bounds_mode_n, bounds_mode_p},
    {"grad_convention", EMBER_GRAD_COUNT, grad_convention_n, grad_convention_p},
    {"isa", EMBER_ISA_COUNT, isa_n, isa_p},
    {"optim", EMBER_OPT_COUNT, optim_n, optim_p},
    {"shard_scheme", EMBER_SHARD_COUNT, shard_scheme_n, shard_scheme_p},
    {"transpose", EMBER_TRANSPOSE_COUNT, transpose_n, transpose_p},
};

static void every_enum_round_trips(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++) {
        const names *e = &ALL[i];
        for (int v = 0; v < e->count; v++) {
            const char *nm = e->name(v);
            assert_non_null(nm);
            assert_string_not_equal(nm, "unknown");
            for (int u = 0; u < v; u++) assert_string_not_equal(nm, e->name(u)); // names are unique
            int back = -7;
            assert_int_equal(e->parse(nm, &back), EMBER_OK);
            assert_int_equal(back, v);
        }
        assert_string_equal(e->name(e->count), "unknown");
        assert_string_equal(e->name(-1), "unknown");
        int keep = 1;
        assert_int_equal(e->parse("no such name", &keep), EMBER_ERR_INVALID_ARG);
        assert_int_equal(keep, 1);
        assert_int_equal(e->parse(NULL, &keep), EMBER_ERR_INVALID_ARG);
        assert_int_equal(e->parse("unknown", &keep), EMBER_ERR_INVALID_ARG);
        assert_int_equal(keep, 1);
    }
}

static void dtype_traits(void **state) {
    (void)state;
    assert_int_equal(ember_dtype_size(EMBER_DTYPE_F32), 4);
    assert_int_equal(ember_dtype_size(EMBER_DTYPE_F16), 2);
    assert_int_equal(ember_dtype_size(EMBER_DTYPE_BF16), 2);
    assert_int_equal(ember_dtype_size(EMBER_DTYPE_I64), 8);
    assert_int_equal(ember_dtype_size(EMBER_DTYPE_F64), 8);
    assert_int_equal(ember_dtype_size((ember_dtype)EMBER_DTYPE_COUNT), 0);
    int n16 = 0, storage = 0;
    for (int d = 0; d < EMBER_DTYPE_COUNT; d++) {
        n16 += ember_dtype_is_16bit((ember_dtype)d);
        storage += ember_dtype_is_storage((ember_dtype)d);
        assert_true(!ember_dtype_is_16bit((ember_dtype)d) || ember_dtype_size((ember_dtype)d) == 2);
    }
    assert_int_equal(n16, 2);
    assert_int_equal(storage, 3);
    assert_false(ember_dtype_is_storage(EMBER_DTYPE_I64));
    assert_false(ember_dtype_is_storage((ember_dtype)-1));
}

static void id_space_from_the_configuration(void **state) {
    (void)state;
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t", t.rows = 64, t.dim = 4;
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    assert_int_equal(ember_table_id_space(&t), EMBER_IDS_ROWS);
    assert_int_equal(ember_table_tensors(&t, ti), 1); // SGD: the weight alone
    t.cache_rows = 8;                                  // tiered: still rows
    assert_int_equal(ember_table_id_space(&t), EMBER_IDS_ROWS);
    assert_int_equal(ember_table_tensors(&t, ti), 1);
    t.cache_rows = 0, t.hash.enabled = 1, t.optim.kind = EMBER_OPT_ADAM;
    assert_int_equal(ember_table_id_space(&t), EMBER_IDS_HASHED);
    assert_int_equal(ember_table_tensors(&t, ti), 4); // weight, momentum1, momentum2, ids
    assert_string_equal(ti[3].name, "ids");
    assert_int_equal(ti[3].dtype, EMBER_DTYPE_I64);
    assert_int_equal(ti[3].cols, 3);
    t.hash.min_count = 2;
    assert_int_equal(ember_table_tensors(&t, ti), 5);
    assert_string_equal(ti[4].name, "candidates");
    assert_int_equal(ember_table_id_space(NULL), EMBER_IDS_ROWS);
}

// A collection refuses a hashed table whose bucket cannot be collisionless (one row), naming it.
static void one_row_buckets_refused(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "clicks", t.rows = 8, t.dim = 2, t.hash.enabled = 1, t.hash.bucket_rows = 1;
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config c = EMBER_EBC_CONFIG_DEFAULT;
    c.tables = &t, c.num_tables = 1, c.features = &f, c.num_features = 1;
    ember_ebc *e = (ember_ebc *)&c; // must be reset to NULL
    assert_int_equal(ember_ebc_create(ctx, &c, &e), EMBER_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "'clicks'"));
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "bucket_rows 1"));
    t.hash.bucket_rows = 2;
    assert_int_equal(ember_ebc_create(ctx, &c, &e), EMBER_OK);
    ember_ebc_destroy(e);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_enum_round_trips),
        cmocka_unit_test(dtype_traits),
        cmocka_unit_test(id_space_from_the_configuration),
        cmocka_unit_test(one_row_buckets_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
