// Every collective of the public headers agrees on what it was told. The test reads
// include/ember/*.h, lists every function whose manual says "Collective", and requires a row of
// CASES for each (a new collective without its row fails the test). A row's cases give one rank
// another value of an argument every rank must give alike and check that every rank returns
// EMBER_ERR_INVALID_ARG with the same message naming the argument, that nothing changed, and that
// the same call with equal arguments then works (nobody is left waiting). A row without cases
// says why the function has no such argument. Collective assertions; W >= 2 (at W = 1 nothing
// can disagree: the scan alone runs).
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ember.h"
#include "mpi_assert.h"

static int W, R;
static const char *g_include = "include/ember"; // --include DIR

// ---- the environment: a context, a communicator, a small sharded collection ------------------
typedef struct env {
    ember_ctx *ctx;
    ember_comm *comm;
    ember_table_config t[2];
    ember_feature_config f[2];
    ember_ebc_config cfg;
    ember_table_plan plan[2];
    int32_t ranks[2];
    ember_sebc *s;
} env;

static void env_open(env *e) {
    memset(e, 0, sizeof *e);
    assert_int_equal(ember_ctx_create(NULL, &e->ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(e->ctx, MPI_COMM_WORLD, &e->comm), EMBER_OK);
    for (int t = 0; t < 2; t++) e->t[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
    e->t[0].name = "a", e->t[0].rows = 12, e->t[0].dim = 4, e->t[0].optim.kind = EMBER_OPT_ADAGRAD;
    e->t[1].name = "b", e->t[1].rows = 9, e->t[1].dim = 3;
    e->f[0] = (ember_feature_config){.name = "fa", .table = 0};
    e->f[1] = (ember_feature_config){.name = "fb", .table = 1};
    e->cfg = (ember_ebc_config)EMBER_EBC_CONFIG_DEFAULT;
    e->cfg.tables = e->t, e->cfg.num_tables = 2, e->cfg.features = e->f, e->cfg.num_features = 2, e->cfg.seed = 3;
    e->plan[0] = (ember_table_plan){.scheme = EMBER_SHARD_ROW_WISE};
    e->ranks[0] = W - 1;
    e->plan[1] = (ember_table_plan){.scheme = EMBER_SHARD_TABLE_WISE, .num_ranks = 1, .ranks = e->ranks};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e->comm, &e->cfg, e->plan, EMBER_GRAD_SUM, &e->s) == EMBER_OK);
}

static void env_close(env *e) {
    ember_sebc_destroy(e->s);
    ember_comm_destroy(e->comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(e->ctx) == 0);
    ember_ctx_destroy(e->ctx);
}

// Every rank returned EMBER_ERR_INVALID_ARG with one message, naming `what`.
static bool refused_naming(env *e, ember_status st, const char *what) {
    const char *msg = ember_ctx_errmsg(e->ctx);
    bool ok = st == EMBER_ERR_INVALID_ARG && strstr(msg, what) != NULL;
    if (!ok) fprintf(stderr, "rank %d: expected INVALID_ARG naming '%s', got %s: %s\n", R, what, ember_status_name(st), msg);
    char mine[512], rank0[512];
    snprintf(mine, sizeof mine, "%s", msg);
    memcpy(rank0, mine, sizeof mine);
    MPI_Bcast(rank0, sizeof rank0, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (strcmp(mine, rank0) != 0) {
        fprintf(stderr, "rank %d: message differs from rank 0's: '%s' vs '%s'\n", R, mine, rank0);
        ok = false;
    }
    return ember_test_all_ok(MPI_COMM_WORLD, ok, what, __FILE__, __LINE__);
}

static bool all_ok(ember_status st, const char *what) {
    if (st != EMBER_OK) fprintf(stderr, "rank %d: %s: %s\n", R, what, ember_status_name(st));
    return ember_test_all_ok(MPI_COMM_WORLD, st == EMBER_OK, what, __FILE__, __LINE__);
}

// The last rank gives `odd`, the others `even`.
#define ODD(even, odd) (R == W - 1 ? (odd) : (even))

// ---- the cases ---------------------------------------------------------------------------------
static bool allreduce_counts(env *e) {
    float f[4] = {1, 2, 3, 4};
    double d[4] = {1, 2, 3, 4};
    int64_t i[4] = {1, 2, 3, 4};
    bool ok = refused_naming(e, ember_comm_allreduce_sum_f32(e->comm, f, ODD(4, 2)), "count");
    ok &= refused_naming(e, ember_comm_allreduce_sum_f64(e->comm, d, ODD(4, 3)), "count");
    ok &= refused_naming(e, ember_comm_allreduce_sum_i64(e->comm, i, ODD(4, 1)), "count");
    ok &= refused_naming(e, ember_comm_allreduce_max_i64(e->comm, i, ODD(4, 0)), "count");
    ok &= ember_test_all_ok(MPI_COMM_WORLD, f[0] == 1 && d[0] == 1 && i[0] == 1, "unchanged", __FILE__, __LINE__);
    ok &= all_ok(ember_comm_allreduce_sum_i64(e->comm, i, 4), "allreduce after") && i[0] == W;
    return ok;
}

static bool alltoallv_args(env *e) {
    int64_t sc[16], rc[16], snd[16] = {0}, rcv[16];
    for (int q = 0; q < W; q++) sc[q] = rc[q] = 1;
    bool ok = refused_naming(e, ember_comm_alltoallv(e->comm, snd, sc, rcv, rc, ODD(8, 4)), "element size");
    // Rank W-1 sends 2 to rank 0, which expects 1.
    if (R == W - 1) sc[0] = 2;
    ok &= refused_naming(e, ember_comm_alltoallv(e->comm, snd, sc, rcv, rc, 8), "expects");
    sc[0] = 1;
    ok &= all_ok(ember_comm_alltoallv(e->comm, snd, sc, rcv, rc, 8), "alltoallv after");
    return ok;
}

static bool allgatherv_args(env *e) {
    int64_t rc[16], snd[2] = {R, R}, rcv[32];
    for (int q = 0; q < W; q++) rc[q] = 1;
    bool ok = refused_naming(e, ember_comm_allgatherv(e->comm, snd, 1, rcv, rc, ODD(8, 4)), "element size");
    if (R == W - 1) rc[0] = 2; // another view of what rank 0 sends
    ok &= refused_naming(e, ember_comm_allgatherv(e->comm, snd, 1, rcv, rc, 8), "recv_counts");
    rc[0] = 1;
    ok &= refused_naming(e, ember_comm_allgatherv(e->comm, snd, ODD(1, 2), rcv, rc, 8), "recv_counts");
    ok &= all_ok(ember_comm_allgatherv(e->comm, snd, 1, rcv, rc, 8), "allgatherv after");
    return ok;
}

static bool gatherv_args(env *e) {
    int64_t rc[16], snd[2] = {R, R}, rcv[32];
    for (int q = 0; q < W; q++) rc[q] = 1;
    bool ok = refused_naming(e, ember_comm_gatherv(e->comm, snd, 1, rcv, rc, 8, ODD(0, 1)), "root");
    ok &= refused_naming(e, ember_comm_gatherv(e->comm, snd, 1, rcv, rc, ODD(8, 4), 0), "element size");
    ok &= refused_naming(e, ember_comm_gatherv(e->comm, snd, ODD(1, 2), rcv, rc, 8, 0), "the root expects");
    ok &= all_ok(ember_comm_gatherv(e->comm, snd, 1, rcv, rc, 8, 0), "gatherv after");
    return ok;
}

static bool bcast_args(env *e) {
    int64_t v[2] = {R, R};
    bool ok = refused_naming(e, ember_comm_bcast(e->comm, v, 8, ODD(0, 1)), "root");
    ok &= refused_naming(e, ember_comm_bcast(e->comm, v, ODD(16, 8), 0), "bytes");
    ok &= ember_test_all_ok(MPI_COMM_WORLD, v[0] == R, "unchanged", __FILE__, __LINE__);
    ok &= all_ok(ember_comm_bcast(e->comm, v, 8, 0), "bcast after") && v[0] == 0;
    return ok;
}

static bool allreduce_grads_args(env *e) {
    float g[20];
    double d[20];
    for (int i = 0; i < 20; i++) g[i] = 1.0f, d[i] = 1.0;
    // The review's case: 20 values on one rank, 10 on another.
    bool ok = refused_naming(e, ember_comm_allreduce_grads(e->comm, EMBER_GRAD_SUM, g, ODD(20, 10)), "count");
    ok &= refused_naming(e, ember_comm_allreduce_grads(e->comm, ODD(EMBER_GRAD_SUM, EMBER_GRAD_MEAN), g, 20),
                         "convention");
    ok &= refused_naming(e, ember_comm_allreduce_grads_f64(e->comm, EMBER_GRAD_SUM, d, ODD(20, 10)), "count");
    ok &= ember_test_all_ok(MPI_COMM_WORLD, g[0] == 1.0f && d[0] == 1.0, "unchanged", __FILE__, __LINE__);
    ok &= all_ok(ember_comm_allreduce_grads(e->comm, EMBER_GRAD_SUM, g, 20), "allreduce_grads after") && g[19] == W;
    return ok;
}

static bool agree_args_args(env *e) {
    const ember_arg a[] = {{.name = "widget", .value = ODD(1, 2)}, {.name = "label", .text = ODD("x", "y")}};
    bool ok = refused_naming(e, ember_comm_agree_args(e->comm, EMBER_OK, "caller", a, 1), "widget");
    ok &= refused_naming(e, ember_comm_agree_args(e->comm, EMBER_OK, "caller", a + 1, 1), "'y' on rank");
    // A rank that refuses before a collective (ember_comm_agree) meets the others' argument
    // agreement inside it: every rank returns its refusal (as a binding's own checks do).
    float g[4] = {1, 1, 1, 1};
    ember_status st;
    if (R == W - 1)
        st = ember_comm_agree(e->comm, ember_ctx_set_error(e->ctx, EMBER_ERR_INVALID_ARG, "caller: widget refused"));
    else
        st = ember_comm_allreduce_grads(e->comm, EMBER_GRAD_SUM, g, 4);
    ok &= refused_naming(e, st, "widget refused");
    ok &= ember_test_all_ok(MPI_COMM_WORLD, g[0] == 1.0f, "unchanged", __FILE__, __LINE__);
    return ok;
}

static bool lfq_allreduce_grads_args(env *e) {
    ember_lfq_config c = EMBER_LFQ_CONFIG_DEFAULT;
    c.codebook_size = 4;
    c.comm = e->comm;
    ember_lfq *q = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_lfq_create(e->ctx, &c, &q) == EMBER_OK);
    bool ok = refused_naming(e, ember_lfq_allreduce_grads(q, ODD(EMBER_GRAD_SUM, EMBER_GRAD_MEAN)), "convention");
    ok &= all_ok(ember_lfq_allreduce_grads(q, EMBER_GRAD_SUM), "lfq allreduce after");
    ember_lfq_destroy(q);
    return ok;
}

static bool topology_args(env *e) {
    int32_t host_of[16];
    bool ok = refused_naming(e, ember_plan_detect_topology(e->comm, host_of, NULL, ODD(0, 64), 1, NULL, NULL, NULL),
                             "probe_bytes");
    ok &= refused_naming(e, ember_plan_detect_topology(e->comm, host_of, NULL, 64, ODD(1, 2), NULL, NULL, NULL), "reps");
    ok &= all_ok(ember_plan_detect_topology(e->comm, host_of, NULL, 0, 1, NULL, NULL, NULL), "topology after");
    return ok;
}

static bool step_args(env *e) {
    int64_t step = 0;
    bool ok = refused_naming(e, ember_sebc_step(e->s, ODD(0, 1), &step), "table");
    ok &= all_ok(ember_sebc_step(e->s, 1, &step), "step after");
    return ok;
}

// The review's cases: table "b" on one rank, "a" on the other; "weight" against "momentum1".
static bool read_args(env *e) {
    float a[12 * 4], b[9 * 3];
    bool ok = refused_naming(e, ember_sebc_read(e->s, ODD(0, 1), "weight", ODD(a, b), -1), "table");
    ok &= refused_naming(e, ember_sebc_read(e->s, 0, ODD("weight", "momentum1"), a, -1), "tensor");
    ok &= refused_naming(e, ember_sebc_read(e->s, 0, "weight", a, ODD(-1, 0)), "root");
    ok &= refused_naming(e, ember_sebc_read_as(e->s, 0, "weight", ODD(EMBER_DTYPE_F32, EMBER_DTYPE_F16), a, -1),
                         "fp16");
    ok &= all_ok(ember_sebc_read(e->s, 0, "weight", a, -1), "read after");
    return ok;
}

static bool write_args(env *e) {
    float a[12 * 4], before[12 * 4], after[12 * 4];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e->s, 0, "weight", before, -1) == EMBER_OK);
    for (int i = 0; i < 12 * 4; i++) a[i] = 0.25f * (float)i;
    bool ok = refused_naming(e, ember_sebc_write(e->s, ODD(0, 1), "weight", a, -1), "table");
    ok &= refused_naming(e, ember_sebc_write(e->s, 0, ODD("weight", "momentum1"), a, -1), "tensor");
    ok &= refused_naming(e, ember_sebc_write(e->s, 0, "weight", a, ODD(0, -1)), "root");
    // root -1: every rank passes the same array; one rank's other values would leave replicas apart.
    if (R == W - 1) a[5] += 1.0f;
    ok &= refused_naming(e, ember_sebc_write(e->s, 0, "weight", a, -1), "the array");
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e->s, 0, "weight", after, -1) == EMBER_OK);
    ok &= ember_test_all_ok(MPI_COMM_WORLD, memcmp(before, after, sizeof before) == 0, "unchanged", __FILE__, __LINE__);
    if (R == W - 1) a[5] -= 1.0f;
    ok &= all_ok(ember_sebc_write(e->s, 0, "weight", a, -1), "write after");
    ok &= refused_naming(e, ember_sebc_write_as(e->s, 1, "weight", ODD(EMBER_DTYPE_F32, EMBER_DTYPE_BF16), a, 0),
                         "bf16");
    return ok;
}

static bool convert_args(env *e) {
    bool ok = refused_naming(e, ember_sebc_convert_dtype(e->s, ODD(0, 1), EMBER_DTYPE_F16), "table");
    ok &= refused_naming(e, ember_sebc_convert_dtype(e->s, 0, ODD(EMBER_DTYPE_F16, EMBER_DTYPE_BF16)), "dtype");
    ember_dtype d[2] = {EMBER_DTYPE_F32, ODD(EMBER_DTYPE_F32, EMBER_DTYPE_F16)};
    ok &= refused_naming(e, ember_sebc_convert_dtypes(e->s, d), "dtypes");
    ok &= ember_test_all_ok(MPI_COMM_WORLD,
                            ember_sebc_table(e->s, 0)->dtype == EMBER_DTYPE_F32 &&
                                ember_sebc_table(e->s, 1)->dtype == EMBER_DTYPE_F32,
                            "unchanged", __FILE__, __LINE__);
    ok &= all_ok(ember_sebc_convert_dtype(e->s, 1, EMBER_DTYPE_BF16), "convert after");
    return ok;
}

static bool wire_args(env *e) {
    bool ok = refused_naming(e, ember_sebc_set_wire_precision(e->s, ODD(EMBER_DTYPE_F32, EMBER_DTYPE_F16), EMBER_DTYPE_F32),
                             "forward precision");
    ok &= refused_naming(e, ember_sebc_set_wire_precision(e->s, EMBER_DTYPE_F32, ODD(EMBER_DTYPE_BF16, EMBER_DTYPE_F16)),
                         "backward precision");
    ember_dtype f, b;
    ember_sebc_wire_precision(e->s, &f, &b);
    ok &= ember_test_all_ok(MPI_COMM_WORLD, f == EMBER_DTYPE_F32 && b == EMBER_DTYPE_F32, "unchanged", __FILE__, __LINE__);
    return ok;
}

// Ranks that give different plans: refused as ember_sebc_create refuses them (naming the plan),
// the collection as it was and usable; then the same plan on every rank moves it.
static bool reshard_args(env *e) {
    ember_table_plan p[2] = {{.scheme = EMBER_SHARD_TABLE_WISE, .num_ranks = 1, .ranks = e->ranks},
                             {.scheme = ODD(EMBER_SHARD_ROW_WISE, EMBER_SHARD_DATA_PARALLEL)}};
    bool ok = refused_naming(e, ember_sebc_reshard(e->s, p, 0, NULL), "table 'b' plan");
    p[1].scheme = EMBER_SHARD_ROW_WISE;
    ok &= all_ok(ember_sebc_reshard(e->s, p, 0, NULL), "reshard after");
    return ok;
}

static bool wire_scale_args(env *e) {
    bool ok = refused_naming(e, ember_sebc_set_wire_loss_scale(e->s, ODD(1.0f, 2.0f), 1.0f), "forward loss scale");
    ok &= refused_naming(e, ember_sebc_set_wire_loss_scale(e->s, 1.0f, ODD(1024.0f, 1024.0001f)), "backward loss scale");
    float f, b;
    ember_sebc_wire_loss_scale(e->s, &f, &b);
    ok &= ember_test_all_ok(MPI_COMM_WORLD, f == 1.0f && b == 1.0f, "unchanged", __FILE__, __LINE__);
    ok &= all_ok(ember_sebc_set_wire_loss_scale(e->s, 0.5f, 1024.0f), "scale after");
    return ok;
}

// A fresh directory every rank sees (rank 0 makes it) in base[cap].
static void shared_dir(char *base, size_t cap) {
    if (R == 0) {
        snprintf(base, cap, "/tmp/ember-collective-args-XXXXXX");
        if (!mkdtemp(base)) base[0] = '\0';
    }
    MPI_Bcast(base, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, base[0] != '\0');
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static bool checkpoint_args(env *e) {
    char base[128], a[160], b[160], cmd[200];
    shared_dir(base, sizeof base);
    snprintf(a, sizeof a, "%s/a", base);
    snprintf(b, sizeof b, "%s/b", base);
    const char text[] = "blob", other[] = "blub";
    ember_checkpoint_blob blob = {.name = "notes", .data = text, .bytes = sizeof text};
    ember_checkpoint_options o = EMBER_CHECKPOINT_OPTIONS_DEFAULT;
    bool ok = refused_naming(e, ember_checkpoint_save(e->s, ODD(a, b), NULL), "directory");
    o.chunk_bytes = (size_t)ODD(1 << 20, 1 << 21);
    ok &= refused_naming(e, ember_checkpoint_save(e->s, a, &o), "chunk_bytes");
    o.chunk_bytes = 0, o.blobs = &blob, o.num_blobs = ODD(1, 0);
    ok &= refused_naming(e, ember_checkpoint_save(e->s, a, &o), "num_blobs");
    o.num_blobs = 1;
    if (R == W - 1) blob.data = other; // rank 0 alone writes the blob: the others' would be lost
    ok &= refused_naming(e, ember_checkpoint_save(e->s, a, &o), "blobs");
    ok &= ember_test_all_ok(MPI_COMM_WORLD, !exists(a) && !exists(b), "nothing created", __FILE__, __LINE__);
    blob.data = text;
    ok &= all_ok(ember_checkpoint_save(e->s, a, &o), "save after");
    MPI_Barrier(MPI_COMM_WORLD);
    o = (ember_checkpoint_options)EMBER_CHECKPOINT_OPTIONS_DEFAULT;
    ok &= refused_naming(e, ember_checkpoint_load(e->s, ODD(a, b), NULL), "directory");
    o.chunk_bytes = (size_t)ODD(1 << 20, 1 << 21);
    ok &= refused_naming(e, ember_checkpoint_load(e->s, a, &o), "chunk_bytes");
    ok &= all_ok(ember_checkpoint_load(e->s, a, NULL), "load after");
    MPI_Barrier(MPI_COMM_WORLD);
    if (R == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    }
    return ok;
}

// ---- the table: every collective of the public headers ------------------------------------
typedef bool (*case_fn)(env *e);
typedef struct row {
    const char *fn;   // the function
    case_fn cases;    // its disagreement cases, or NULL:
    const char *none; // why it has no argument every rank must give alike
} row;

static const row CASES[] = {
    {"ember_comm_create", NULL, "its only argument is the communicator"},
    {"ember_comm_destroy", NULL, "no argument but the communicator"},
    {"ember_comm_agree", NULL, "each rank's status differs by design"},
    {"ember_comm_agree_args", agree_args_args, NULL},
    {"ember_comm_allreduce_sum_f32", allreduce_counts, NULL},
    {"ember_comm_allreduce_sum_f64", allreduce_counts, NULL},
    {"ember_comm_allreduce_sum_i64", allreduce_counts, NULL},
    {"ember_comm_allreduce_max_i64", allreduce_counts, NULL},
    {"ember_comm_alltoallv", alltoallv_args, NULL},
    {"ember_comm_alltoall_i64", NULL, "one int64 to every rank: fixed"},
    {"ember_comm_allgatherv", allgatherv_args, NULL},
    {"ember_comm_gatherv", gatherv_args, NULL},
    {"ember_comm_allgather_i64", NULL, "one int64 from every rank: fixed"},
    {"ember_comm_bcast", bcast_args, NULL},
    {"ember_comm_barrier", NULL, "no arguments"},
    {"ember_comm_allreduce_grads", allreduce_grads_args, NULL},
    {"ember_comm_allreduce_grads_f64", allreduce_grads_args, NULL},
    {"ember_lfq_set_comm", NULL, "Local"},
    {"ember_lfq_allreduce_grads", lfq_allreduce_grads_args, NULL},
    {"ember_lfq_forward", NULL, "each rank's tokens differ by design; the configuration is agreed at the first "
                                "training forward (dist.lfq)"},
    {"ember_lfq_backward", NULL, "each rank's gradients differ by design"},
    {"ember_plan_detect_topology", topology_args, NULL},
    {"ember_sebc_create", NULL, "the whole configuration and plan are agreed at creation (dist.agreement)"},
    {"ember_sebc_create_2d", NULL, "the group size (dist.2d.errors), configuration and plan are agreed at creation"},
    {"ember_sebc_destroy", NULL, "no arguments"},
    {"ember_sebc_output_dim", NULL, "Local"},
    {"ember_sebc_step", step_args, NULL},
    {"ember_sebc_set_step", NULL, "Local"},
    {"ember_sebc_grad_convention", NULL, "Local"},
    {"ember_sebc_forward", NULL, "each rank's batch differs by design"},
    {"ember_sebc_backward", NULL, "the KJT must be the forward's, checked through its digest (dist.agreement)"},
    {"ember_sebc_prefetch", NULL, "each rank's next batch differs by design"},
    {"ember_sebc_backward_start", NULL, "as ember_sebc_backward"},
    {"ember_sebc_backward_finish", NULL, "no arguments"},
    {"ember_sebc_read", read_args, NULL},
    {"ember_sebc_write", write_args, NULL},
    {"ember_sebc_read_as", read_args, NULL},
    {"ember_sebc_write_as", write_args, NULL},
    {"ember_sebc_convert_dtype", convert_args, NULL},
    {"ember_sebc_convert_dtypes", convert_args, NULL},
    {"ember_sebc_set_wire_precision", wire_args, NULL},
    {"ember_sebc_wire_precision", NULL, "Local"},
    {"ember_sebc_set_wire_loss_scale", wire_scale_args, NULL},
    {"ember_sebc_reshard", reshard_args, NULL},
    {"ember_sebc_wire_loss_scale", NULL, "Local"},
    {"ember_checkpoint_save", checkpoint_args, NULL},
    {"ember_checkpoint_load", checkpoint_args, NULL},
};

static const row *find_row(const char *fn) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (strcmp(CASES[i].fn, fn) == 0) return &CASES[i];
    return NULL;
}

// The public functions whose manual (the comment block above their declaration, shared by the
// declarations that follow it) says "Collective", from every header of g_include. Returns their
// count; names in out[max][64].
static int scan_collectives(char (*out)[64], int max) {
    static const char *const headers[] = {"core.h", "dtype.h", "kjt.h", "ebc.h", "comm.h", "shard.h",
                                          "plan.h", "state.h", "lfq.h", "rng.h"};
    int n = 0;
    for (size_t h = 0; h < sizeof headers / sizeof headers[0]; h++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", g_include, headers[h]);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char line[1024];
        int in_block = 0, collective = 0;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "//", 2) == 0) {
                if (!in_block) collective = 0;
                in_block = 1;
                collective |= strstr(line, "Collective") != NULL;
                continue;
            }
            in_block = 0;
            if (strncmp(line, "EMBER_API", 9) != 0 || !collective) continue;
            const char *paren = strchr(line, '(');
            if (!paren) continue;
            const char *end = paren;
            while (end > line && end[-1] == ' ') end--;
            const char *start = end;
            while (start > line && (start[-1] == '_' || (start[-1] >= 'a' && start[-1] <= 'z') ||
                                    (start[-1] >= '0' && start[-1] <= '9')))
                start--;
            if (n < max) snprintf(out[n++], 64, "%.*s", (int)(end - start), start);
        }
        fclose(f);
    }
    return n;
}

static void every_public_collective_has_a_row(void **state) {
    (void)state;
    char names[256][64];
    const int n = scan_collectives(names, 256);
    int missing = 0;
    for (int i = 0; i < n; i++)
        if (!find_row(names[i])) {
            if (R == 0) fprintf(stderr, "%s is documented Collective and has no row in CASES\n", names[i]);
            missing++;
        }
    assert_true(n >= 30); // the scan found the headers' collectives
    assert_int_equal(missing, 0);
}

static void every_argument_is_agreed(void **state) {
    (void)state;
    if (W < 2) {
        if (R == 0) printf("W = 1: nothing can disagree\n");
        return;
    }
    int failed = 0;
    case_fn done[64];
    int ndone = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const case_fn c = CASES[i].cases;
        bool seen = false;
        for (int k = 0; k < ndone; k++) seen |= done[k] == c;
        if (!c || seen) continue;
        done[ndone++] = c;
        env e;
        env_open(&e);
        const bool ok = c(&e);
        if (!ok && R == 0) fprintf(stderr, "FAILED: %s\n", CASES[i].fn);
        failed += !ok;
        env_close(&e);
    }
    assert_int_equal(failed, 0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--include")) g_include = argv[i + 1];
    const struct CMUnitTest tests[] = {cmocka_unit_test(every_public_collective_has_a_row),
                                       cmocka_unit_test(every_argument_is_agreed)};
    const int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
