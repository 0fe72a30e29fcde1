// ember_plan_detect_topology on one machine: every rank shares memory, so one host (all ranks
// agree), a probe measures the pair inside it, none across; bad arguments fail every rank.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdbool.h>
#include <stdio.h>

#include <cmocka.h>

#include "ember.h"
#include "mpi_assert.h"

static void one_machine_is_one_host(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *c = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &c), EMBER_OK);
    const int w = ember_comm_size(c);
    int32_t host_of[8], hosts = -1;
    for (int q = 0; q < 8; q++) host_of[q] = -7;
    double intra = -1, inter = -1, round = -1;
    // No probe: the bandwidths are left alone.
    assert_int_equal(ember_plan_detect_topology(c, host_of, &hosts, 0, 0, &intra, &inter, NULL), EMBER_OK);
    bool ok = hosts == 1 && intra == -1 && inter == -1 && host_of[w] == -7;
    for (int q = 0; q < w; q++) ok = ok && host_of[q] == 0;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    // A 1 MiB probe, 2 rounds: a pair inside the host when there are two ranks; none across.
    assert_int_equal(ember_plan_detect_topology(c, host_of, &hosts, 1 << 20, 2, &intra, &inter, &round), EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, hosts == 1 && inter == 0 && (w == 1 ? intra == 0 : intra > 1e6));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, round > 0 && round < 1);
    // Every rank has the same numbers.
    double mine[4] = {intra, -intra, round, -round}, all[4];
    MPI_Allreduce(mine, all, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, all[0] == intra && -all[1] == intra && all[2] == round && -all[3] == round);
    // The detected topology plans: one host, no time without bandwidths, time with them.
    ember_table_config t[1] = {EMBER_TABLE_CONFIG_DEFAULT};
    t[0].name = "t", t[0].rows = 1000, t[0].dim = 16, t[0].init = (ember_init){.kind = EMBER_INIT_ZEROS};
    ember_feature_config f[1] = {{.name = "f", .table = 0}};
    ember_ebc_config ec = {.tables = t, .num_tables = 1, .features = f, .num_features = 1, .bounds = EMBER_BOUNDS_ERROR,
                           .seed = 1};
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = w;
    pc.host_of = host_of;
    pc.intra_host_bw = w > 1 ? intra : 1e9;
    ember_table_plan plan[1];
    double secs[8];
    ember_plan_stats st = {.step_seconds = secs};
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, &st), EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, secs[0] > 0);
    ember_plan_release(ctx, plan, 1);
    // Bad arguments: every rank fails alike, the outputs untouched.
    host_of[0] = -3;
    assert_int_equal(ember_plan_detect_topology(c, host_of, &hosts, -1, 0, &intra, &inter, NULL), EMBER_ERR_INVALID_ARG);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "probe_bytes -1") != NULL && host_of[0] == -3);
    assert_int_equal(ember_plan_detect_topology(c, NULL, &hosts, 0, 0, NULL, NULL, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_plan_detect_topology(NULL, host_of, &hosts, 0, 0, NULL, NULL, NULL), EMBER_ERR_INVALID_ARG);
    // Still usable afterwards.
    assert_int_equal(ember_plan_detect_topology(c, host_of, NULL, 4096, 1, NULL, NULL, NULL), EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, host_of[0] == 0);
    ember_comm_destroy(c);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_machine_is_one_host),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
