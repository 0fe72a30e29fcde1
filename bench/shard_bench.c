// `ember bench shard`: bytes per rank per step and step time of every sharding scheme.
#include "shard_bench.h"

#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "ember/rng.h"
#include "report.h"

typedef struct opts {
    int32_t T, D, B, L, iters;
    int64_t E;
    int quick;
    ember_dtype wire_fwd, wire_bwd; // --wire_precision
    double dense_ms; // simulated dense work per step (0: none)
    float scale_fwd, scale_bwd; // --wire_loss_scale
} opts;

static int shard_bench_parse_wire(const char *arg, ember_dtype *fwd, ember_dtype *bwd);
static double wire_bound(const opts *o, int W);

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpiexec -n W ember bench shard [options]\n"
            "  --tables T        tables, one feature each (default 8)\n"
            "  --rows E          rows per table (default 50000)\n"
            "  --dim D           columns (default 64)\n"
            "  --batch_size B    samples per rank (default 512)\n"
            "  --pooling L       ids per bag (default 20)\n"
            "  --iters N         timed steps per scheme and bucketize path after one warm-up (default 10)\n"
            "  --dense_ms X      dense work per step to overlap with, in ms (default 0): a spin on this\n"
            "                    rank's core in two halves (before the backward, and between its start\n"
            "                    and finish), calling ember_comm_progress every ~50 us\n"
            "  --quick           tiny sizes, 2 steps (smoke test)\n"
            "  --wire_precision P[,Q]  fp32 (default), fp16, bf16, fp8_e4m3, fp8_e5m2 or int8: pooled\n"
            "                    outputs (P) and their gradients (Q, default P) between ranks; the residual\n"
            "                    is then checked against the encoding's bound (ember_sebc_set_wire_precision)\n"
            "  --wire_loss_scale S[,T]  the float formats' loss scales (default 1)\n"
            "One JSON line per scheme (dp, tw, cw, rw, twrw, grid) from rank 0: bytes sent per rank per step\n"
            "(max and mean over ranks), ms per step (median over steps of the slowest rank), and the\n"
            "forward's residual against an unsharded collection with the same weights. Steps alternate\n"
            "between the O(nnz) bucketize and the legacy O(W * nnz) one (ms_med vs ms_med_legacy); both\n"
            "report the ids bucketize examined per step on the busiest rank, next to the local nnz.\n"
            "Overlap: a timed step is the dense work, the backward of batch i and the forward of batch\n"
            "i+1 (batch i's forward and batch i+1's backward run untimed around it). Off (ms_med): dense\n"
            "work, ember_sebc_backward, ember_sebc_forward. On (ms_med_overlap): ember_sebc_prefetch of\n"
            "batch i+1, the first half of the dense work, backward_start, the second half, backward_finish,\n"
            "forward (taking the prefetch). comm_ms: time blocked in collectives with overlap off;\n"
            "compute_ms = ms_med - comm_ms; exposed_comm_ms: blocked with overlap on; hidden_fraction =\n"
            "1 - exposed_comm_ms / comm_ms (per step the busiest-waiting rank, median over steps). Steps\n"
            "cycle off, legacy bucketize (off), on.\n");
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){8, 64, 512, 20, 10, 50000, 0, EMBER_DTYPE_F32, EMBER_DTYPE_F32, 0.0, 1.0f, 1.0f};
    static const struct option lo[] = {{"tables", 1, 0, 'T'},     {"rows", 1, 0, 'E'},       {"dim", 1, 0, 'D'},
                                       {"batch_size", 1, 0, 'B'}, {"pooling", 1, 0, 'L'},    {"iters", 1, 0, 'i'},
                                       {"quick", 0, 0, 'q'},      {"help", 0, 0, 'h'},       {"wire_precision", 1, 0, 'w'},
                                       {"dense_ms", 1, 0, 'x'},   {"wire_loss_scale", 1, 0, 's'},
                                       {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'T': o->T = atoi(optarg); break;
        case 'E': o->E = atoll(optarg); break;
        case 'D': o->D = atoi(optarg); break;
        case 'B': o->B = atoi(optarg); break;
        case 'L': o->L = atoi(optarg); break;
        case 'i': o->iters = atoi(optarg); break;
        case 'q': o->quick = 1; break;
        case 'w':
            if (shard_bench_parse_wire(optarg, &o->wire_fwd, &o->wire_bwd) != 0) return 2;
            break;
        case 'x': o->dense_ms = atof(optarg); break;
        case 's': {
            char *end = NULL;
            o->scale_fwd = o->scale_bwd = strtof(optarg, &end);
            if (*end == ',') o->scale_bwd = strtof(end + 1, &end);
            if (*end != '\0') return 2;
            break;
        }
        case 'h': return 1;
        default: return 2;
        }
    }
    if (o->quick) *o = (opts){3, 8, 16, 4, 2, 100, 1, o->wire_fwd, o->wire_bwd, o->dense_ms, o->scale_fwd, o->scale_bwd};
    if (o->T < 1 || o->E < 1 || o->D < 1 || o->B < 1 || o->L < 0 || o->iters < 1 || !(o->dense_ms >= 0) ||
        o->dense_ms > 1e4)
        return 2;
    return 0;
}

// Simulated dense work: ms milliseconds of arithmetic on this core, letting MPI progress the
// exchanges in flight every ~50 us (as a training loop calls ember_comm_progress between layers).
static volatile float dense_sink;
static void dense_work(ember_comm *comm, double ms) {
    if (ms <= 0) return;
    const double end = bench_now_ms() + ms;
    float acc = 1.0f;
    for (double now = bench_now_ms(); now < end; now = bench_now_ms()) {
        for (int i = 0; i < 2000; i++) acc = acc * 0.999999f + 1e-7f;
        (void)ember_comm_progress(comm);
    }
    dense_sink = acc;
}

// One scheme: a collection of T tables, all sharded by `scheme`; returns 0 when it ran.
static int run_scheme(ember_comm *comm, const opts *o, ember_shard_scheme scheme, const char *name) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int W = ember_comm_size(comm), R = ember_comm_rank(comm);
    ember_table_config *tc = calloc((size_t)o->T, sizeof *tc);
    ember_feature_config *fc = calloc((size_t)o->T, sizeof *fc);
    ember_table_plan *plan = calloc((size_t)o->T, sizeof *plan);
    int32_t *rank_pool = calloc((size_t)o->T * (size_t)(W + 4), sizeof *rank_pool);
    char(*names)[16] = calloc((size_t)o->T * 2, 16);
    int have = tc && fc && plan && rank_pool && names; // every rank gives up together
    MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!have) {
        if (R == 0) fprintf(stderr, "ember bench shard: %s: out of memory for the configuration\n", name);
        free(tc), free(fc), free(plan), free(rank_pool), free(names);
        return 1;
    }
    for (int t = 0; t < o->T; t++) {
        snprintf(names[2 * t], 16, "t%d", t);
        snprintf(names[2 * t + 1], 16, "f%d", t);
        ember_optim_config oc = EMBER_OPTIM_CONFIG_DEFAULT;
        oc.kind = EMBER_OPT_ROWWISE_ADAGRAD;
        tc[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT; // uniform(-0.01, 0.01)
        tc[t].name = names[2 * t], tc[t].rows = o->E, tc[t].dim = o->D, tc[t].optim = oc;
        fc[t] = (ember_feature_config){.name = names[2 * t + 1], .table = t};
        // The library's default placement (ember_table_plan_default; twrw: groups of 2 ranks).
        ember_table_plan_default(scheme, t, o->D, W, 2, rank_pool + (size_t)t * (size_t)(W + 4), &plan[t]);
    }
    ember_ebc_config cfg = {.tables = tc, .num_tables = o->T, .features = fc, .num_features = o->T,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 7, .max_batch_size = o->B,
                            .max_nnz = (int64_t)o->B * o->T * o->L};
    ember_sebc *s = NULL;
    ember_ebc *ref = NULL;
    int rc = 1;
    const int64_t nnz = (int64_t)o->T * o->B * o->L, nout = (int64_t)o->B * o->T * o->D;
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)nnz);
    int32_t *len = malloc(sizeof(int32_t) * (size_t)o->T * (size_t)o->B);
    float *out = malloc(sizeof(float) * (size_t)nout), *ref_out = malloc(sizeof(float) * (size_t)nout);
    float *grad = malloc(sizeof(float) * (size_t)nout);
    double *ms = malloc(sizeof(double) * (size_t)o->iters), *ms_legacy = malloc(sizeof(double) * (size_t)o->iters);
    double *ms_on = malloc(sizeof(double) * (size_t)o->iters), *comm_off = malloc(sizeof(double) * (size_t)o->iters);
    double *comm_on = malloc(sizeof(double) * (size_t)o->iters);
    int64_t examined[2] = {0, 0}; // new, legacy: max over ranks
    ember_status st = ember_sebc_create(comm, &cfg, plan, EMBER_GRAD_MEAN, &s);
    if (st == EMBER_OK) st = ember_sebc_set_wire_precision(s, o->wire_fwd, o->wire_bwd);
    if (st == EMBER_OK) st = ember_sebc_set_wire_loss_scale(s, o->scale_fwd, o->scale_bwd);
    if (st != EMBER_OK) {
        if (R == 0) fprintf(stderr, "ember bench shard: %s: %s\n", name, ember_ctx_errmsg(ctx));
        goto done;
    }
    // Uniform ids, different on every rank (the library's generator, one stream per rank).
    ember_rng rng = ember_rng_at(20240611u, 0, (uint64_t)R);
    for (int64_t j = 0; j < nnz; j++) {
        ids[j] = (int64_t)(ember_rng_next(&rng) % (uint64_t)o->E);
    }
    for (int64_t i = 0; i < (int64_t)o->T * o->B; i++) len[i] = o->L;
    for (int64_t i = 0; i < nout; i++) grad[i] = 1e-3f * (float)((i % 7) - 3);
    ember_kjt kjt = {.num_features = o->T, .batch_size = o->B, .lengths = len, .values = ids, .nnz = nnz};
    // Residual: the sharded forward against the unsharded collection (same seed, same weights).
    double residual = 0;
    if (ember_ebc_create(ctx, &cfg, &ref) == EMBER_OK && ember_ebc_forward(ref, &kjt, ref_out) == EMBER_OK) {
        st = ember_sebc_forward(s, &kjt, out);
        for (int64_t i = 0; st == EMBER_OK && i < nout; i++) {
            double e = fabs((double)out[i] - ref_out[i]);
            if (e > residual) residual = e;
        }
    } else {
        residual = NAN; // no room for the reference: reported, not checked
        st = ember_sebc_forward(s, &kjt, out);
    }
    ember_ebc_destroy(ref);
    if (st == EMBER_OK) st = ember_sebc_backward(s, &kjt, grad); // warm-up step
    uint64_t bytes_max = 0;
    double bytes_sum = 0;
    for (int it = 0; st == EMBER_OK && it < 3 * o->iters; it++) {
        const int mode = it % 3; // 0: off, 1: off with the legacy bucketize, 2: on
        ember_sebc_set_reference_bucketize(s, mode == 1);
        st = ember_sebc_forward(s, &kjt, out); // batch i, untimed
        MPI_Barrier(MPI_COMM_WORLD);
        ember_comm_reset_wait_seconds(comm);
        const double t0 = bench_now_ms();
        if (mode == 2) {
            if (st == EMBER_OK) st = ember_sebc_prefetch(s, &kjt);
            dense_work(comm, o->dense_ms / 2);
            if (st == EMBER_OK) st = ember_sebc_backward_start(s, &kjt, grad);
            dense_work(comm, o->dense_ms / 2);
            if (st == EMBER_OK) st = ember_sebc_backward_finish(s);
        } else {
            dense_work(comm, o->dense_ms);
            if (st == EMBER_OK) st = ember_sebc_backward(s, &kjt, grad);
        }
        if (st == EMBER_OK) st = ember_sebc_forward(s, &kjt, out); // batch i+1 (on: takes the prefetch)
        double dt = bench_now_ms() - t0, slowest = 0;
        double waited = 1e3 * ember_comm_wait_seconds(comm), waited_max = 0;
        MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&waited, &waited_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        (mode == 0 ? ms : mode == 1 ? ms_legacy : ms_on)[it / 3] = slowest;
        if (mode == 0) comm_off[it / 3] = waited_max;
        if (mode == 2) comm_on[it / 3] = waited_max;
        if (mode < 2) {
            int64_t ex = ember_sebc_ids_examined_last_step(s), exmax = 0;
            MPI_Allreduce(&ex, &exmax, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
            examined[mode] = exmax;
        }
        if (st == EMBER_OK) st = ember_sebc_backward(s, &kjt, grad); // batch i+1, untimed
        uint64_t b = ember_sebc_bytes_sent_last_step(s), bmax = 0, bsum = 0;
        MPI_Allreduce(&b, &bmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&b, &bsum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (mode == 0) {
            if (bmax > bytes_max) bytes_max = bmax;
            bytes_sum = (double)bsum;
        }
    }
    double worst = residual;
    MPI_Allreduce(&residual, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (st != EMBER_OK) {
        if (R == 0) fprintf(stderr, "ember bench shard: %s: %s\n", name, ember_ctx_errmsg(ctx));
        goto done;
    }
    if (R == 0) {
        bench_json j;
        bench_json_begin(&j, stdout, "shard");
        bench_json_str(&j, "scheme", name);
        bench_json_int(&j, "W", W);
        bench_json_int(&j, "T", o->T);
        bench_json_int(&j, "E", o->E);
        bench_json_int(&j, "D", o->D);
        bench_json_int(&j, "B", o->B);
        bench_json_int(&j, "L", o->L);
        bench_json_str(&j, "optimizer", "rowwise_adagrad");
        bench_json_str(&j, "wire_forward", ember_dtype_name(o->wire_fwd));
        bench_json_str(&j, "wire_backward", ember_dtype_name(o->wire_bwd));
        bench_json_sig(&j, "wire_loss_scale_forward", o->scale_fwd);
        bench_json_sig(&j, "wire_loss_scale_backward", o->scale_bwd);
        bench_json_host(&j, ctx);
        bench_json_int(&j, "bytes_per_rank_max", (long long)bytes_max);
        bench_json_fixed(&j, "bytes_per_rank_mean", bytes_sum / W, 0);
        bench_json_fixed(&j, "ms_min", bench_min(ms, o->iters), 3);
        bench_json_fixed(&j, "ms_med", bench_median(ms, o->iters), 3);
        bench_json_fixed(&j, "ms_min_legacy", bench_min(ms_legacy, o->iters), 3);
        bench_json_fixed(&j, "ms_med_legacy", bench_median(ms_legacy, o->iters), 3);
        const double med_off = bench_median(ms, o->iters), comm_med = bench_median(comm_off, o->iters);
        const double exposed = bench_median(comm_on, o->iters);
        bench_json_fixed(&j, "dense_ms", o->dense_ms, 3);
        bench_json_fixed(&j, "ms_med_overlap", bench_median(ms_on, o->iters), 3);
        bench_json_fixed(&j, "comm_ms", comm_med, 3);
        bench_json_fixed(&j, "compute_ms", med_off - comm_med, 3);
        bench_json_fixed(&j, "exposed_comm_ms", exposed, 3);
        bench_json_fixed(&j, "hidden_fraction", comm_med > 0 ? 1.0 - exposed / comm_med : 0.0, 3);
        bench_json_int(&j, "nnz", nnz);
        bench_json_int(&j, "ids_examined", examined[0]);
        bench_json_int(&j, "ids_examined_legacy", examined[1]);
        bench_json_int(&j, "iters", o->iters);
        bench_json_sig(&j, "residual", worst);
        bench_json_end(&j);
    }
    rc = !(worst <= 1e-5 + wire_bound(o, W)) && !isnan(worst);
done:
    ember_sebc_destroy(s);
    free(tc);
    free(fc);
    free(plan);
    free(rank_pool);
    free(names);
    free(ids);
    free(len);
    free(out);
    free(ref_out);
    free(grad);
    free(ms);
    free(ms_legacy);
    free(ms_on);
    free(comm_off);
    free(comm_on);
    return rc;
}

// The forward's error bound of the wire precision at the first forward (ember/shard.h): each value
// (or row-block partial, at most W of them) is encoded once, and the partials' magnitudes sum to at
// most L * 0.01 (the initial weights' bound). The fp8s add their subnormal half-step per partial
// (over the loss scale); int8 a piece's range (<= 2 L 0.01) / 510 + 1e-8 per partial.
static double wire_bound(const opts *o, int W) {
    const double mag = o->L * 0.01, sc = o->scale_fwd;
    switch (o->wire_fwd) {
    case EMBER_DTYPE_F16: return 0x1p-11 * mag + W * 0x1p-25 / sc;
    case EMBER_DTYPE_BF16: return 0x1p-8 * mag;
    case EMBER_DTYPE_FP8_E4M3: return 0x1p-4 * mag + W * 0x1p-10 / sc;
    case EMBER_DTYPE_FP8_E5M2: return 0x1p-3 * mag + W * 0x1p-17 / sc;
    case EMBER_DTYPE_I8: return W * (2 * mag / 510 + 1e-8);
    default: return 0;
    }
}

// Every scheme in turn.
static int run_all(ember_comm *comm, const void *arg) {
    const opts *o = arg;
    int rc = 0;
    for (int i = 0; i < EMBER_SHARD_COUNT; i++)
        rc |= run_scheme(comm, o, (ember_shard_scheme)i, ember_shard_scheme_short_name((ember_shard_scheme)i));
    return rc;
}

// "P" or "P,Q" of --wire_precision: 0, or -1 for anything else.
static int shard_bench_parse_wire(const char *arg, ember_dtype *fwd, ember_dtype *bwd) {
    char a[16];
    const char *comma = strchr(arg, ',');
    const size_t n = comma ? (size_t)(comma - arg) : strlen(arg);
    if (n >= sizeof a) return -1;
    memcpy(a, arg, n);
    a[n] = '\0';
    if (ember_dtype_parse(a, fwd) != 0) return -1;
    if (!comma) {
        *bwd = *fwd;
        return 0;
    }
    return ember_dtype_parse(comma + 1, bwd);
}

int shard_bench_main(int argc, char **argv) {
    opts o;
    int p = parse(argc, argv, &o);
    return bench_mpi_main(p, usage, run_all, &o);
}

int shard_bench_parse_only(int argc, char **argv) {
    opts o;
    return parse(argc, argv, &o);
}
