// A program outside the project that uses the installed library through its public headers
// only: tests/install.cmake builds it with find_package(ember) and with pkg-config.
#include <stdio.h>

#include <ember.h>

int main(void) {
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(NULL, &ctx) != EMBER_OK) return 1;
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t", t.rows = 10, t.dim = 4, t.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1};
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = &t;
    cfg.num_tables = 1;
    cfg.features = &f;
    cfg.num_features = 1;
    ember_ebc *ebc = NULL;
    if (ember_ebc_create(ctx, &cfg, &ebc) != EMBER_OK) return 2;
    const int32_t lengths[2] = {2, 1};
    const int64_t values[3] = {1, 2, 9};
    ember_kjt kjt = {.num_features = 1, .batch_size = 2, .lengths = lengths, .values = values, .nnz = 3};
    float out[8];
    if (ember_ebc_forward(ebc, &kjt, out) != EMBER_OK) return 3;
    printf("consumer: ember %s, kernel variant %s, out[0] = %g\n", ember_version(), ember_isa_name(ember_ctx_isa(ctx)),
           (double)out[0]);
    ember_ebc_destroy(ebc);
    ember_ctx_destroy(ctx);
    return 0;
}
