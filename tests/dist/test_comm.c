// comm: duplication, status agreement naming the failing rank, collectives and byte counts.
#define _POSIX_C_SOURCE 200809L // nanosleep
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include <cmocka.h>

#include "comm/internal.h"
#include "ember.h"
#include "mpi_assert.h"

static void agree_spreads_the_failing_ranks_error(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *c = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &c), EMBER_OK);
    int r = ember_comm_rank(c), w = ember_comm_size(c);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_agree(c, EMBER_OK) == EMBER_OK);
    int bad = w - 1;
    ember_status local = EMBER_OK;
    if (r == bad) local = ember__error(ctx, EMBER_ERR_OUT_OF_RANGE, "feature 'f0' bag 2: id 99 >= rows 8");
    ember_status st = ember_comm_agree(c, local);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_OUT_OF_RANGE);
    char want[64];
    snprintf(want, sizeof want, "(rank %d)", bad);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), want) != NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "id 99") != NULL);
    ember_comm_destroy(c);
    ember_ctx_destroy(ctx);
}

static void collectives_move_the_right_bytes(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *c = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &c), EMBER_OK);
    int r = ember_comm_rank(c), w = ember_comm_size(c);
    float f[3] = {(float)r, 1.0f, 2.0f};
    assert_int_equal(ember_comm_allreduce_sum_f32(c, f, 3), EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, f[0] == (float)(w * (w - 1) / 2) && f[1] == (float)w);
    // alltoallv: rank r sends (r + s) copies of value 100 r + s to rank s.
    int64_t sc[8], rc[8], total_s = 0, total_r = 0;
    for (int s = 0; s < w; s++) { sc[s] = r + s; total_s += sc[s]; }
    assert_int_equal(ember_comm_alltoall_i64(c, sc, rc), EMBER_OK);
    for (int s = 0; s < w; s++) total_r += rc[s];
    int64_t sendbuf[64], recvbuf[64];
    int64_t k = 0;
    for (int s = 0; s < w; s++) for (int j = 0; j < sc[s]; j++) sendbuf[k++] = 100 * r + s;
    ember_comm_reset_bytes_sent(c);
    assert_int_equal(ember_comm_alltoallv(c, sendbuf, sc, recvbuf, rc, sizeof(int64_t)), EMBER_OK);
    bool ok = true;
    k = 0;
    for (int s = 0; s < w; s++) {
        ok = ok && rc[s] == s + r;
        for (int j = 0; j < rc[s]; j++) ok = ok && recvbuf[k++] == 100 * s + r;
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok && k == total_r);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_bytes_sent(c) == (uint64_t)(total_s - sc[r]) * 8);
    int64_t all[8];
    assert_int_equal(ember_comm_allgather_i64(c, r * 10, all), EMBER_OK);
    ok = true;
    for (int s = 0; s < w; s++) ok = ok && all[s] == s * 10;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    ember_comm_destroy(c);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// gatherv: rank r sends r + 1 values r*10 + i; root (the last rank) gets them in rank order.
static void gatherv_collects_onto_the_root(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *c = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &c), EMBER_OK);
    int r = ember_comm_rank(c), w = ember_comm_size(c), root = w - 1;
    int64_t mine[4], all[10], counts[4];
    for (int i = 0; i <= r; i++) mine[i] = r * 10 + i;
    for (int q = 0; q < w; q++) counts[q] = q + 1;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_gatherv(c, mine, r + 1, all, counts, sizeof(int64_t), root) == EMBER_OK);
    bool ok = true;
    if (r == root)
        for (int q = 0, k = 0; q < w; q++)
            for (int i = 0; i <= q; i++) ok = ok && all[k++] == q * 10 + i;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    ember_comm_destroy(c);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

// The watchdog: the last rank arrives 1.5 s late at a collective whose deadline is 0.4 s. Every
// other rank gives up within the deadline plus a little, names that rank, and refuses the
// communicator afterwards; the late rank never enters (MPI cannot cancel the others' part).
static void a_late_rank_times_the_others_out(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *c = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &c), EMBER_OK);
    int r = ember_comm_rank(c), w = ember_comm_size(c), late = w - 1;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_timeout(c) == EMBER_COMM_DEFAULT_TIMEOUT_S);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_set_timeout(c, -1) == EMBER_ERR_INVALID_ARG &&
                                        ember_comm_set_timeout(c, NAN) == EMBER_ERR_INVALID_ARG);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_set_timeout(c, 0.4) == EMBER_OK);
    double x = 1;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_allreduce_sum_f64(c, &x, 1) == EMBER_OK && x == w);
    bool ok = true;
    if (w > 1 && r != late) {
        double t0 = MPI_Wtime();
        ember_status st = ember_comm_allreduce_sum_f64(c, &x, 1);
        double took = MPI_Wtime() - t0;
        char want[64];
        snprintf(want, sizeof want, "rank %d did not arrive", late);
        ok = st == EMBER_ERR_TIMEOUT && took >= 0.4 && took < 1.4 && strstr(ember_ctx_errmsg(ctx), want) &&
             strstr(ember_ctx_errmsg(ctx), "allreduce_sum_f64: collective #");
        if (!ok) fprintf(stderr, "rank %d: %s after %.2f s: %s\n", r, ember_status_name(st), took, ember_ctx_errmsg(ctx));
        ok = ok && ember_comm_barrier(c) == EMBER_ERR_TIMEOUT && strstr(ember_ctx_errmsg(ctx), want) &&
             strstr(ember_ctx_errmsg(ctx), "cannot be used again");
    } else if (w > 1) {
        struct timespec ts = {1, 500000000};
        nanosleep(&ts, NULL);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    // The timed-out rank's request is still pending inside MPI: the communicator is left to the
    // end of the process rather than freed under it.
    if (w == 1) ember_comm_destroy(c);
    (void)ctx;
}

// Split-phase collectives: several in flight at once with a blocking collective between them,
// waited for in another order than started; the data, the byte counts and the blocked time.
static void split_phase_collectives(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *c = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &c), EMBER_OK);
    const int r = ember_comm_rank(c), w = ember_comm_size(c);
    int64_t sc[8], rc[8], snd[64], rcv[64], g[8];
    int32_t snd2[64], rcv2[64];
    assert_true(w <= 8);
    int64_t ns = 0, nr = 0;
    for (int q = 0; q < w; q++) {
        sc[q] = (r + q) % 3; // r sends (r + q) % 3 values to q, each 100 r + q
        rc[q] = (q + r) % 3;
        for (int64_t i = 0; i < sc[q]; i++) {
            snd[ns] = 100 * r + q;
            snd2[ns++] = -(100 * r + q);
        }
        nr += rc[q];
    }
    ember__req a = {.mpi = MPI_REQUEST_NULL}, b = {.mpi = MPI_REQUEST_NULL}, ga = {.mpi = MPI_REQUEST_NULL};
    ember_comm_reset_bytes_sent(c);
    ember_comm_reset_wait_seconds(c);
    bool ok = ember__comm_ialltoallv(c, snd, sc, rcv, rc, sizeof(int64_t), &a) == EMBER_OK && a.pending;
    ok = ok && ember_comm_progress(c) == EMBER_OK;
    double x = 1;
    ok = ok && ember_comm_allreduce_sum_f64(c, &x, 1) == EMBER_OK && x == w; // blocking, in between
    ok = ok && ember__comm_ialltoallv(c, snd2, sc, rcv2, rc, sizeof(int32_t), &b) == EMBER_OK;
    int64_t ones[8];
    for (int q = 0; q < w; q++) ones[q] = 1;
    const int64_t mine = 7 * r;
    ok = ok && ember__comm_iallgatherv(c, &mine, 1, g, ones, sizeof(int64_t), &ga) == EMBER_OK;
    ok = ok && ember_comm_progress(c) == EMBER_OK;
    // A request still in flight cannot be started again.
    ok = ok && ember__comm_ialltoallv(c, snd, sc, rcv, rc, sizeof(int64_t), &b) == EMBER_ERR_STATE;
    ok = ok && ember__comm_wait(c, &ga) == EMBER_OK && ember__comm_wait(c, &b) == EMBER_OK &&
         ember__comm_wait(c, &a) == EMBER_OK && !a.pending && !b.pending && !ga.pending;
    ok = ok && ember__comm_wait(c, &a) == EMBER_OK; // not pending: nothing to do
    int64_t n = 0;
    for (int q = 0; q < w; q++) {
        ok = ok && g[q] == 7 * q;
        for (int64_t i = 0; i < rc[q]; i++, n++) ok = ok && rcv[n] == 100 * q + r && rcv2[n] == -(100 * q + r);
    }
    ok = ok && n == nr;
    uint64_t want = 0;
    for (int q = 0; q < w; q++)
        if (q != r) want += (uint64_t)sc[q] * (sizeof(int64_t) + sizeof(int32_t)) + sizeof(int64_t);
    if (w > 1) want += sizeof(double); // the all-reduce
    ok = ok && ember_comm_bytes_sent(c) == want && ember_comm_wait_seconds(c) >= 0;
    if (!ok) fprintf(stderr, "rank %d: split-phase collectives wrong (%s)\n", r, ember_ctx_errmsg(ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    ember__comm_req_free(c, &a);
    ember__comm_req_free(c, &b);
    ember__comm_req_free(c, &ga);
    ember_comm_destroy(c);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

// The watchdog on a split-phase wait: the last rank never starts the exchange; the others' wait
// gives up within the deadline (counted from the wait) and names it.
static void a_split_phase_wait_times_out(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *c = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &c), EMBER_OK);
    const int r = ember_comm_rank(c), w = ember_comm_size(c), late = w - 1;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_set_timeout(c, 0.4) == EMBER_OK);
    bool ok = true;
    static int64_t snd[8], rcv[8], cnt[8]; // MPI may write rcv after the timeout: not on the stack
    for (int q = 0; q < w; q++) cnt[q] = 1;
    static ember__req a = {.mpi = MPI_REQUEST_NULL};
    if (w > 1 && r != late) {
        ok = ember__comm_ialltoallv(c, snd, cnt, rcv, cnt, sizeof(int64_t), &a) == EMBER_OK;
        struct timespec ts = {0, 200000000}; // computing meanwhile does not count against the deadline
        nanosleep(&ts, NULL);
        const double t0 = MPI_Wtime();
        const ember_status st = ember__comm_wait(c, &a);
        const double took = MPI_Wtime() - t0;
        char want[64];
        snprintf(want, sizeof want, "rank %d did not arrive", late);
        ok = ok && st == EMBER_ERR_TIMEOUT && took >= 0.4 && took < 1.4 && strstr(ember_ctx_errmsg(ctx), want) &&
             strstr(ember_ctx_errmsg(ctx), "alltoallv: collective #") && !a.pending &&
             ember_comm_wait_seconds(c) >= 0.4;
        if (!ok) fprintf(stderr, "rank %d: %s after %.2f s: %s\n", r, ember_status_name(st), took, ember_ctx_errmsg(ctx));
    } else if (w > 1) {
        struct timespec ts = {1, 500000000};
        nanosleep(&ts, NULL);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    if (w == 1) {
        ember_comm_destroy(c);
        ember_ctx_destroy(ctx);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(agree_spreads_the_failing_ranks_error),
        cmocka_unit_test(collectives_move_the_right_bytes),
        cmocka_unit_test(gatherv_collects_onto_the_root),
        cmocka_unit_test(split_phase_collectives),
        cmocka_unit_test(a_split_phase_wait_times_out),
        cmocka_unit_test(a_late_rank_times_the_others_out),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
