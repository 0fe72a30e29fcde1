// The pipelined step (ember_sebc_prefetch of the next batch, ember_sebc_backward_start/finish
// around the caller's work) gives bitwise the outputs, weights and optimizer state of the plain
// step, over several steps, on every scheme (mixed plans too; encoded wire precisions too), with seeded random KJTs (empty
// bags, duplicate ids, a one-row table, a rank with an empty batch now and then); a prefetch that
// one rank's forward does not repeat, and a bad KJT after a prefetch, are agreed on by every rank
// without a hang and change nothing.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"
#include "gen.h"
#include "mpi_assert.h"
#include "plans.h"
#include "shard/overlap.h" // the prefetch counters

#define NT 5
#define NF 6
#define K 4 // steps
static const int64_t ROWS[NT] = {7, 1, 50, 13, 20};
static const int32_t DIMS[NT] = {4, 3, 8, 5, 4};
static const int32_t FTAB[NF] = {0, 1, 2, 3, 4, 2};
static int W, R;
static int g_group = 0; // --group G: 2D, tables sharded over groups of G ranks (0: one group)

enum { MIXED = 100 };

// Table t's plan under scheme sc_in (MIXED: every scheme in one collection); ranks in store.
static ember_table_plan make_plan(int sc_in, int t, int32_t *store) {
    const ember_shard_scheme sc = sc_in == MIXED ? (ember_shard_scheme)(t % 5) : (ember_shard_scheme)sc_in;
    return test_plan_for(sc, t, DIMS[t], g_group ? g_group : W, store);
}

typedef struct setup {
    ember_table_config tables[NT];
    ember_feature_config features[NF];
    ember_table_plan plan[NT];
    int32_t ranks[NT][8];
    ember_ebc_config cfg;
    char names[NT + NF][8];
} setup;

static void make_setup(setup *su, int scheme, ember_pooling pool, ember_optim_kind opt) {
    memset(su, 0, sizeof *su);
    for (int t = 0; t < NT; t++) {
        snprintf(su->names[t], 8, "t%d", t);
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = opt;
        o.lr = opt == EMBER_OPT_SGD ? 0.5f : 0.05f;
        ember_pooling p = pool == EMBER_POOL_NONE ? pool : (t % 2 ? EMBER_POOL_MEAN : pool);
        ember_table_config *tc = &su->tables[t];
        *tc = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc->name = su->names[t], tc->rows = ROWS[t], tc->dim = pool == EMBER_POOL_NONE ? 4 : DIMS[t], tc->pooling = p;
        tc->init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f}, tc->optim = o;
        su->plan[t] = make_plan(scheme, t, su->ranks[t]);
    }
    for (int f = 0; f < NF; f++) {
        snprintf(su->names[NT + f], 8, "f%d", f);
        su->features[f] = (ember_feature_config){.name = su->names[NT + f], .table = FTAB[f]};
    }
    su->cfg = (ember_ebc_config){.tables = su->tables, .num_tables = NT, .features = su->features, .num_features = NF,
                                 .bounds = EMBER_BOUNDS_ERROR, .seed = 77};
}

// This rank's batch of step k: 0 to 3 + R samples (rank 0's empty on some steps), weighted or
// not, with its gradient (a value per output element).
typedef struct step_data {
    gen_kjt g;
    float *grad;
    int64_t nout;
} step_data;

static void make_steps(step_data *sd, int n, int D, int seq, int weighted, uint64_t seed) {
    int64_t rows[NF];
    for (int f = 0; f < NF; f++) rows[f] = ROWS[FTAB[f]];
    test_rng rng = {seed * 1000003u + (uint64_t)R * 7919u + 1};
    for (int k = 0; k < n; k++) {
        const int32_t B = (R == 0 && k % 3 == 1) ? 0 : 1 + (int32_t)rng_int(&rng, 3 + R);
        gen_kjt_make(&sd[k].g, &rng, NF, B, rows, 4, 0.3, weighted);
        sd[k].nout = seq ? sd[k].g.kjt.nnz * D : (int64_t)B * D;
        sd[k].grad = malloc(sizeof(float) * (size_t)(sd[k].nout + 1));
        for (int64_t i = 0; i < sd[k].nout; i++) sd[k].grad[i] = (float)(rng_uniform(&rng) * 2 - 1);
    }
}

static void free_steps(step_data *sd, int n) {
    for (int k = 0; k < n; k++) {
        gen_kjt_free(&sd[k].g);
        free(sd[k].grad);
    }
}

// A copy of a KJT in its own memory (the prefetch must not depend on the caller's buffers).
static void copy_kjt(const ember_kjt *k, gen_kjt *c) {
    const int64_t nb = (int64_t)k->num_features * k->batch_size;
    c->lengths = malloc(sizeof(int32_t) * (size_t)(nb + 1));
    c->offsets = malloc(sizeof(int64_t) * (size_t)(nb + 1));
    c->values = malloc(sizeof(int64_t) * (size_t)(k->nnz + 1));
    c->weights = k->weights ? malloc(sizeof(float) * (size_t)(k->nnz + 1)) : NULL;
    memcpy(c->lengths, k->lengths, sizeof(int32_t) * (size_t)nb);
    memcpy(c->values, k->values, sizeof(int64_t) * (size_t)k->nnz);
    if (k->weights) memcpy(c->weights, k->weights, sizeof(float) * (size_t)k->nnz);
    // Offsets only: a different but equal description of the same bags.
    c->offsets[0] = 0;
    for (int64_t i = 0; i < nb; i++) c->offsets[i + 1] = c->offsets[i] + c->lengths[i];
    c->kjt = (ember_kjt){.num_features = k->num_features, .batch_size = k->batch_size, .offsets = c->offsets,
                         .values = c->values, .weights = c->weights, .nnz = k->nnz};
}

static void check_ok(ember_ctx *ctx, ember_status st, const char *what) {
    if (st != EMBER_OK) fprintf(stderr, "rank %d: %s: %s\n", R, what, ember_ctx_errmsg(ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
}

// Every tensor of every table of a and b, gathered: bitwise equal.
static bool tables_equal(ember_ctx *ctx, const setup *su, ember_sebc *a, ember_sebc *b) {
    ember_ebc *ref = NULL;
    assert_int_equal(ember_ebc_create(ctx, &su->cfg, &ref), EMBER_OK); // for the tensors' names and shapes
    bool ok = true;
    for (int t = 0; t < NT; t++) {
        for (int ti = 0; ti < ember_ebc_num_tensors(ref, t); ti++) {
            ember_tensor_info info;
            ember_ebc_tensor_info(ref, t, ti, &info);
            const size_t n = (size_t)(info.rows * info.cols);
            float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
            check_ok(ctx, ember_sebc_read(a, t, info.name, x, -1), "read");
            check_ok(ctx, ember_sebc_read(b, t, info.name, y, -1), "read");
            if (memcmp(x, y, sizeof(float) * n) != 0) {
                fprintf(stderr, "rank %d: table %d %s differs\n", R, t, info.name);
                ok = false;
            }
            free(x);
            free(y);
        }
    }
    ember_ebc_destroy(ref);
    return ok;
}

// The collection under test: 2D with --group.
static ember_status create(ember_comm *comm, const setup *su, ember_grad_convention conv, ember_sebc **s) {
    if (g_group) return ember_sebc_create_2d(comm, &su->cfg, su->plan, conv, g_group, s);
    return ember_sebc_create(comm, &su->cfg, su->plan, conv, s);
}

// The plain loop on A and the pipelined loop on P over the same K steps: outputs bitwise equal
// every step, tables at the end.
static void run_pair_wire(int scheme, ember_pooling pool, ember_optim_kind opt, int weighted,
                          ember_grad_convention conv, uint64_t seed, ember_dtype wire_fwd, ember_dtype wire_bwd) {
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    setup su;
    make_setup(&su, scheme, pool, opt);
    ember_sebc *A = NULL, *P = NULL;
    check_ok(ctx, create(comm, &su, conv, &A), "create");
    check_ok(ctx, create(comm, &su, conv, &P), "create");
    check_ok(ctx, ember_sebc_set_wire_precision(A, wire_fwd, wire_bwd), "wire");
    check_ok(ctx, ember_sebc_set_wire_precision(P, wire_fwd, wire_bwd), "wire");
    const int D = ember_sebc_output_dim(A), seq = pool == EMBER_POOL_NONE;
    step_data sd[K];
    make_steps(sd, K, D, seq, weighted, seed);
    bool ok = true;
    float *oa = NULL, *op = NULL;
    check_ok(ctx, ember_sebc_forward(P, &sd[0].g.kjt, op = malloc(sizeof(float) * (size_t)(sd[0].nout + 1))), "fwd");
    for (int k = 0; k < K; k++) {
        oa = malloc(sizeof(float) * (size_t)(sd[k].nout + 1));
        check_ok(ctx, ember_sebc_forward(A, &sd[k].g.kjt, oa), "plain forward");
        ok = ok && memcmp(oa, op, sizeof(float) * (size_t)sd[k].nout) == 0;
        check_ok(ctx, ember_sebc_backward(A, &sd[k].g.kjt, sd[k].grad), "plain backward");
        // Pipelined: the next batch's prefetch (from a copy freed at once, given as offsets on odd
        // steps; before the backward's start on even steps, between start and finish on odd
        // ones), then backward start, the caller's work, finish.
        gen_kjt c;
        if (k + 1 < K) copy_kjt(&sd[k + 1].g.kjt, &c);
        if (k + 1 < K && k % 2 == 0) check_ok(ctx, ember_sebc_prefetch(P, &sd[k + 1].g.kjt), "prefetch");
        check_ok(ctx, ember_comm_progress(comm), "progress");
        check_ok(ctx, ember_sebc_backward_start(P, &sd[k].g.kjt, sd[k].grad), "backward_start");
        if (k + 1 < K && k % 2 == 1) check_ok(ctx, ember_sebc_prefetch(P, &c.kjt), "prefetch");
        if (k + 1 < K) gen_kjt_free(&c);
        check_ok(ctx, ember_comm_progress(comm), "progress");
        check_ok(ctx, ember_sebc_backward_finish(P), "backward_finish");
        free(oa);
        free(op);
        op = NULL;
        if (k + 1 < K) {
            op = malloc(sizeof(float) * (size_t)(sd[k + 1].nout + 1));
            check_ok(ctx, ember_sebc_forward(P, &sd[k + 1].g.kjt, op), "pipelined forward");
        }
    }
    // Every forward after the first took its prefetch.
    ok = ok && P->ov->taken == K - 1 && P->ov->dropped == 0;
    ok = ok && tables_equal(ctx, &su, A, P);
    if (!ok)
        fprintf(stderr, "rank %d: FAILED scheme %d pool %d opt %d weighted %d conv %d wire %s,%s\n", R, scheme,
                (int)pool, (int)opt, weighted, (int)conv, ember_dtype_name(wire_fwd), ember_dtype_name(wire_bwd));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    free_steps(sd, K);
    ember_sebc_destroy(A);
    ember_sebc_destroy(P);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

static void run_pair(int scheme, ember_pooling pool, ember_optim_kind opt, int weighted, ember_grad_convention conv,
                     uint64_t seed) {
    run_pair_wire(scheme, pool, opt, weighted, conv, seed, EMBER_DTYPE_F32, EMBER_DTYPE_F32);
}

static void pipelined_equals_plain(void **state) {
    (void)state;
    static const ember_optim_kind opts[] = {EMBER_OPT_SGD, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM};
    const int schemes[] = {EMBER_SHARD_DATA_PARALLEL, EMBER_SHARD_TABLE_WISE, EMBER_SHARD_COLUMN_WISE,
                           EMBER_SHARD_ROW_WISE, EMBER_SHARD_TABLE_ROW_WISE, EMBER_SHARD_GRID, MIXED};
    uint64_t seed = 1;
    for (size_t s = 0; s < sizeof schemes / sizeof schemes[0]; s++) {
        if (schemes[s] == EMBER_SHARD_GRID && W < 2) continue; // a grid needs two ranks per row group
        for (int o = 0; o < 3; o++) {
            run_pair(schemes[s], EMBER_POOL_SUM, opts[o], o % 2, (ember_grad_convention)(o % 2), seed++);
            // Sequence outputs: the schemes that keep whole rows.
            if (schemes[s] != EMBER_SHARD_COLUMN_WISE && schemes[s] != EMBER_SHARD_GRID && schemes[s] != MIXED)
                run_pair(schemes[s], EMBER_POOL_NONE, opts[o], (o + 1) % 2, EMBER_GRAD_MEAN, seed++);
        }
    }
    // Encoded exchanges (the gradients' encoded at the start, decoded at the finish): the
    // pipelined step equals the plain step under the same wire precision, bit for bit.
    static const ember_dtype wires[][2] = {{EMBER_DTYPE_F16, EMBER_DTYPE_BF16},
                                           {EMBER_DTYPE_I8, EMBER_DTYPE_FP8_E5M2},
                                           {EMBER_DTYPE_FP8_E4M3, EMBER_DTYPE_I8}};
    for (int i = 0; i < 3; i++) {
        run_pair_wire(MIXED, EMBER_POOL_SUM, opts[i], i % 2, EMBER_GRAD_MEAN, seed++, wires[i][0], wires[i][1]);
        run_pair_wire(EMBER_SHARD_ROW_WISE, EMBER_POOL_NONE, opts[i], 0, EMBER_GRAD_SUM, seed++, wires[i][0],
                      wires[i][1]);
    }
}

// Prefetch, then on the last rank a forward of another batch: every rank redoes the input dist
// and the result is the plain forward's. Then a prefetch followed by a bad KJT on rank 0: the
// error on every rank, nothing changed, and the next forward works. A bad KJT given to the
// prefetch itself: refused everywhere, nothing in flight. The split backward's order is enforced.
static void mismatch_and_errors(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    setup su;
    make_setup(&su, MIXED, EMBER_POOL_SUM, EMBER_OPT_ROWWISE_ADAGRAD);
    ember_sebc *A = NULL, *P = NULL;
    check_ok(ctx, create(comm, &su, EMBER_GRAD_MEAN, &A), "create");
    check_ok(ctx, create(comm, &su, EMBER_GRAD_MEAN, &P), "create");
    const int D = ember_sebc_output_dim(A);
    step_data sd[4];
    make_steps(sd, 4, D, 0, 1, 99);
    float *oa = malloc(sizeof(float) * 64 * (size_t)D), *op = malloc(sizeof(float) * 64 * (size_t)D);
    bool ok = true;
    // Step 0 on both; P prefetches batch 1, but the last rank forwards batch 2 instead (which
    // A forwards too on that rank).
    check_ok(ctx, ember_sebc_forward(A, &sd[0].g.kjt, oa), "fwd");
    check_ok(ctx, ember_sebc_forward(P, &sd[0].g.kjt, op), "fwd");
    check_ok(ctx, ember_sebc_backward(A, &sd[0].g.kjt, sd[0].grad), "bwd");
    check_ok(ctx, ember_sebc_prefetch(P, &sd[1].g.kjt), "prefetch");
    check_ok(ctx, ember_sebc_backward(P, &sd[0].g.kjt, sd[0].grad), "bwd");
    const step_data *mine = R == W - 1 ? &sd[2] : &sd[1];
    check_ok(ctx, ember_sebc_forward(A, &mine->g.kjt, oa), "fwd");
    check_ok(ctx, ember_sebc_forward(P, &mine->g.kjt, op), "fwd after a prefetch of another batch");
    ok = ok && memcmp(oa, op, sizeof(float) * (size_t)mine->nout) == 0;
    // Dropped by the last rank's group (2D: the other groups take theirs).
    const int dropped = !g_group || R / g_group == (W - 1) / g_group;
    ok = ok && P->ov->taken == !dropped && P->ov->dropped == dropped;
    check_ok(ctx, ember_sebc_backward(A, &mine->g.kjt, mine->grad), "bwd");
    check_ok(ctx, ember_sebc_backward(P, &mine->g.kjt, mine->grad), "bwd");
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);

    // Prefetch batch 3, then rank 0 forwards a KJT with an id outside its table.
    check_ok(ctx, ember_sebc_prefetch(P, &sd[3].g.kjt), "prefetch");
    gen_kjt bad;
    copy_kjt(&sd[3].g.kjt, &bad);
    if (bad.kjt.nnz > 0 && R == 0) bad.values[0] = 1000;
    int any = bad.kjt.nnz > 0 && R == 0;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ember_status st = ember_sebc_forward(P, &bad.kjt, op);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, any ? st == EMBER_ERR_OUT_OF_RANGE : st == EMBER_OK);
    if (any) MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "ember_sebc_forward") != NULL);
    // The prefetch of a bad KJT: refused everywhere.
    st = ember_sebc_prefetch(P, &bad.kjt);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, any ? st == EMBER_ERR_OUT_OF_RANGE : st == EMBER_OK);
    if (any) MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "ember_sebc_prefetch") != NULL);
    gen_kjt_free(&bad);
    // The next forward of batch 3 (plain on P: its prefetch was dropped) equals A's.
    check_ok(ctx, ember_sebc_forward(A, &sd[3].g.kjt, oa), "fwd");
    check_ok(ctx, ember_sebc_forward(P, &sd[3].g.kjt, op), "fwd after a refused batch");
    ok = ok && memcmp(oa, op, sizeof(float) * (size_t)sd[3].nout) == 0;
    // Order of the split backward: finish without start, forward between start and finish.
    st = ember_sebc_backward_finish(P);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_STATE);
    check_ok(ctx, ember_sebc_backward_start(P, &sd[3].g.kjt, sd[3].grad), "start");
    st = ember_sebc_forward(P, &sd[3].g.kjt, op);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_STATE);
    st = ember_sebc_backward_start(P, &sd[3].g.kjt, sd[3].grad);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_STATE);
    check_ok(ctx, ember_sebc_backward_finish(P), "finish");
    check_ok(ctx, ember_sebc_backward(A, &sd[3].g.kjt, sd[3].grad), "bwd");
    // A prefetch left pending at destroy is waited for.
    check_ok(ctx, ember_sebc_prefetch(P, &sd[1].g.kjt), "prefetch");
    ok = ok && tables_equal(ctx, &su, A, P);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    free(oa);
    free(op);
    free_steps(sd, 4);
    ember_sebc_destroy(A);
    ember_sebc_destroy(P);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--group")) g_group = atoi(argv[i + 1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pipelined_equals_plain),
        cmocka_unit_test(mismatch_and_errors),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
