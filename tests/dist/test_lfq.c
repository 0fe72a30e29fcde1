// LFQ under data parallelism, run under mpiexec with W ranks (registered for W = 2 and 4).
// - Golden files (every *.json with distributed.{W}): rank r takes its contiguous slice of the
//   batch; its forward values and local gradients match grads.correct and differ from the three
//   upstream defects (bug_identity, bug_detached, head_discarded) by more than 1e-3 relative;
//   the mean over ranks of the parameter gradients equals the full-batch gradients, and each
//   rank's input gradient is W times the full-batch one. float64 and float32.
// - Unequal batches and masks, softplus, both distributed means: gradients against central
//   differences of the naive oracle's objective sum_s aux_s over all slices.
// - Bad input on one rank fails every rank with the same status, and changes nothing.
// Every assertion is collective (MPI_ASSERT_TRUE).
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
#include "lfq_golden.h"
#include "lfq_oracle.h"
#include "lfq_util.h"
#include "mpi_assert.h"

#define WORLD MPI_COMM_WORLD

typedef struct fixture {
    ember_ctx *ctx;
    ember_comm *comm;
    int rank, size;
} fixture;

static fixture fixture_new(void) {
    fixture f = {0};
    assert_int_equal(ember_ctx_create(NULL, &f.ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(f.ctx, WORLD, &f.comm), EMBER_OK);
    f.rank = ember_comm_rank(f.comm);
    f.size = ember_comm_size(f.comm);
    return f;
}

static void fixture_done(fixture *f) {
    ember_comm_destroy(f->comm);
    MPI_ASSERT_TRUE(WORLD, ember_ctx_bytes_outstanding(f->ctx) == 0);
    ember_ctx_destroy(f->ctx);
}

// ---- golden files -----------------------------------------------------------------------------

typedef struct dist_report {
    double values, grads, min_bug_gap;
    int faint_bugs;
    bool ok;
} dist_report;

static void expect(dist_report *r, bool ok, const char *file, const char *what, double err) {
    if (!ok) {
        int rank = 0;
        MPI_Comm_rank(WORLD, &rank);
        fprintf(stderr, "FAIL rank %d %s: %s (%.3g)\n", rank, file, what, err);
        r->ok = false;
    }
}

// Relative-to-max error of the module buffer against golden tensor path, restricted to golden
// rows [lo, hi) of the leading axis and scaled by `scale` (lo = hi = 0: the whole tensor).
static double golden_err(const cJSON *root, const char *path, const void *got, int64_t n, ember_dtype dt,
                         int64_t lo, int64_t hi, double scale) {
    lfq_tensor t;
    if (!lfq_golden_tensor(root, path, &t)) return INFINITY;
    int64_t row = t.shape[0] > 0 ? t.numel / t.shape[0] : 0, off = 0;
    if (hi > lo) off = lo * row;
    if ((hi > lo ? (hi - lo) * row : t.numel) != n) {
        lfq_tensor_free(&t);
        return INFINITY;
    }
    double *g = malloc((size_t)n * sizeof *g);
    lfq_buf_to_f64(got, n, dt, g);
    for (int64_t i = 0; i < n; i++) t.data[off + i] *= scale;
    double e = lfq_rel_to_max(g, t.data + off, n);
    free(g);
    lfq_tensor_free(&t);
    return e;
}

// Max over x and every parameter of the relative-to-max difference from grads/<which>.
static double grads_err(const cJSON *root, const char *base, const char *which, ember_lfq *q, const void *gx,
                        int64_t nx, ember_dtype dt) {
    char path[256];
    snprintf(path, sizeof path, "%s/grads/%s/x", base, which);
    double e = golden_err(root, path, gx, nx, dt, 0, 0, 1.0);
    for (int id = 0; id < EMBER_LFQ_NUM_PARAMS; id++) {
        int64_t n = 0;
        const void *g = ember_lfq_grad(q, (ember_lfq_param_id)id, &n);
        if (!g) continue;
        snprintf(path, sizeof path, "%s/grads/%s/%s", base, which, ember_lfq_param_name((ember_lfq_param_id)id));
        double ei = golden_err(root, path, g, n, dt, 0, 0, 1.0);
        if (!(ei <= e)) e = ei;
    }
    return e;
}

static void run_golden(fixture *f, const char *file, const cJSON *root, ember_dtype dt, dist_report *r) {
    const int W = f->size, rank = f->rank;
    char base[64];
    snprintf(base, sizeof base, "distributed/%d/ranks/%d", W, rank);
    ember_lfq_config cfg;
    lfq_tensor x, target;
    bool usable = lfq_golden_config(root, dt, &cfg) && lfq_golden_tensor(root, "inputs/x", &x) &&
                  lfq_golden_tensor(root, "inputs/target", &target);
    MPI_ASSERT_TRUE(WORLD, usable);
    cfg.comm = f->comm;
    ember_lfq *q = NULL;
    MPI_ASSERT_TRUE(WORLD, ember_lfq_create(f->ctx, &cfg, &q) == EMBER_OK && lfq_golden_set_params(root, q));
    const double tv = dt == EMBER_DTYPE_F64 ? 1e-12 : 1e-5;
    const double tg = dt == EMBER_DTYPE_F64 ? 1e-10 : (cfg.inv_temperature >= 100 ? 1e-4 : 5e-5);

    // This rank's rows [r0, r1) of the batch.
    char path[256];
    snprintf(path, sizeof path, "%s/rows/0", base);
    const int64_t r0 = (int64_t)lfq_golden_number(root, path, -1);
    snprintf(path, sizeof path, "%s/rows/1", base);
    const int64_t r1 = (int64_t)lfq_golden_number(root, path, -1);
    MPI_ASSERT_TRUE(WORLD, r0 >= 0 && r1 > r0 && r1 <= x.shape[0]);
    const int32_t B = (int32_t)(r1 - r0), N = (int32_t)x.shape[1], dim = (int32_t)x.shape[2];
    const int64_t nx = (int64_t)B * N * dim, off = r0 * N * dim;
    const size_t esz = dt == EMBER_DTYPE_F64 ? sizeof(double) : sizeof(float);
    void *xb = lfq_buf_from_f64(x.data + off, nx, dt), *out = malloc((size_t)nx * esz), *gx = malloc((size_t)nx * esz);

    ember_lfq_losses L;
    MPI_ASSERT_TRUE(WORLD, ember_lfq_forward(q, xb, B, N, NULL, true, out, NULL, &L) == EMBER_OK);
    double *o64 = malloc((size_t)nx * sizeof *o64), *g64 = malloc((size_t)nx * sizeof *g64), recon = 0;
    lfq_buf_to_f64(out, nx, dt, o64);
    for (int64_t i = 0; i < nx; i++) {
        double d = o64[i] - target.data[off + i];
        recon += d * d;
        g64[i] = 2 * d / (double)nx; // local recon = mean over this rank's slice
    }
    recon /= (double)nx;
    static const struct {
        const char *name;
        size_t offset;
    } scalars[] = {
        {"per_sample_entropy", offsetof(ember_lfq_losses, per_sample_entropy)},
        {"codebook_entropy", offsetof(ember_lfq_losses, codebook_entropy)},
        {"entropy_aux_loss", offsetof(ember_lfq_losses, entropy)},
        {"commit_loss", offsetof(ember_lfq_losses, commitment)},
        {"aux_loss", offsetof(ember_lfq_losses, aux)},
    };
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        snprintf(path, sizeof path, "%s/forward/%s", base, scalars[i].name);
        double got = *(const double *)((const char *)&L + scalars[i].offset);
        double e = lfq_rel_scalar(got, lfq_golden_number(root, path, NAN), LFQ_SCALAR_FLOOR);
        if (e > r->values) r->values = e;
        expect(r, e <= tv, file, path, e);
    }
    snprintf(path, sizeof path, "%s/forward/recon_loss", base);
    double e = lfq_rel_scalar(recon, lfq_golden_number(root, path, NAN), LFQ_SCALAR_FLOOR);
    expect(r, e <= tv, file, path, e);
    // HEAD's discarded all-reduce gives another codebook entropy.
    snprintf(path, sizeof path, "%s/forward_head_discarded/codebook_entropy", base);
    e = lfq_rel_scalar(L.codebook_entropy, lfq_golden_number(root, path, NAN), 0);
    expect(r, e > 1e-3, file, "forward differs from head_discarded", e);

    // Local gradients of total_r = aux_r + recon_r.
    void *gout = lfq_buf_from_f64(g64, nx, dt);
    MPI_ASSERT_TRUE(WORLD, ember_lfq_backward(q, gout, 1.0, gx) == EMBER_OK);
    e = grads_err(root, base, "correct", q, gx, nx, dt);
    if (e > r->grads) r->grads = e;
    expect(r, e <= tg, file, "grads.correct", e);
    // The gap to each defect must exceed 1e-3 relative where the file says the defect is visible
    // in its data (checks.<bug>_differs). At tau = 100 the diversity gradient is ~1e-4 of the
    // total and the generator marks the defects indistinguishable: there the float64 gradients
    // must still be 100 times closer to `correct` than to any defect.
    static const char *const bugs[] = {"bug_identity", "bug_detached", "head_discarded"};
    for (int b = 0; b < 3; b++) {
        snprintf(path, sizeof path, "distributed/%d/checks/%s_differs", W, bugs[b]);
        bool visible = lfq_golden_number(root, path, 1) != 0;
        double gap = grads_err(root, base, bugs[b], q, gx, nx, dt);
        if (gap < r->min_bug_gap) r->min_bug_gap = gap;
        if (visible)
            expect(r, gap > 1e-3, file, bugs[b], gap);
        else if (dt == EMBER_DTYPE_F64)
            expect(r, gap > 100 * e, file, bugs[b], gap);
        r->faint_bugs += !visible;
    }

    // Equivalence with the full batch: mean over ranks of parameter gradients (DP averaging)
    // equals the full-batch gradient; the input gradient is W times the full-batch one. Not for
    // a file whose data is not full-batch equivalent by design (the softplus variant, see
    // docs/lfq.md): those are checked against the per-rank `correct` gradients above only.
    snprintf(path, sizeof path, "distributed/%d/checks/full_batch_equivalence_expected", W);
    if (lfq_golden_number(root, path, 1) == 0) {
        if (rank == 0)
            printf("%s: W=%d: full-batch equivalence not expected (softplus variant): per-rank gradients only\n",
                   file, W);
        MPI_ASSERT_TRUE(WORLD, ember_lfq_allreduce_grads(q, EMBER_GRAD_MEAN) == EMBER_OK);
        goto done;
    }
    e = golden_err(root, "grads_total_loss/x", gx, nx, dt, r0, r1, (double)W);
    expect(r, e <= tg, file, "W * full-batch grad x", e);
    MPI_ASSERT_TRUE(WORLD, ember_lfq_allreduce_grads(q, EMBER_GRAD_MEAN) == EMBER_OK);
    for (int id = 0; id < EMBER_LFQ_NUM_PARAMS; id++) {
        int64_t n = 0;
        const void *g = ember_lfq_grad(q, (ember_lfq_param_id)id, &n);
        if (!g) continue;
        snprintf(path, sizeof path, "grads_total_loss/%s", ember_lfq_param_name((ember_lfq_param_id)id));
        e = golden_err(root, path, g, n, dt, 0, 0, 1.0);
        expect(r, e <= tg, file, path, e);
    }

done:
    free(o64);
    free(g64);
    free(gout);
    free(xb);
    free(out);
    free(gx);
    lfq_tensor_free(&x);
    lfq_tensor_free(&target);
    ember_lfq_destroy(q);
}

static void golden_distributed_gradients_are_the_correct_semantics(void **state) {
    (void)state;
    fixture f = fixture_new();
    char dir[1024], key[32];
    char **files = NULL;
    int n = lfq_golden_list(lfq_golden_dir(dir, sizeof dir), &files), used = 0;
    MPI_ASSERT_TRUE(WORLD, n > 0);
    snprintf(key, sizeof key, "distributed/%d", f.size);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        cJSON *root = lfq_golden_load(files[i]);
        MPI_ASSERT_TRUE(WORLD, root != NULL);
        if (lfq_golden_has(root, key)) {
            const char *name = strrchr(files[i], '/') + 1;
            for (int d = 0; d < 2; d++) {
                ember_dtype dt = d == 0 ? EMBER_DTYPE_F64 : EMBER_DTYPE_F32;
                dist_report r = {0, 0, INFINITY, 0, true};
                run_golden(&f, name, root, dt, &r);
                // Report the worst rank.
                double mine[3] = {r.values, r.grads, -r.min_bug_gap}, worst[3];
                MPI_Allreduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, WORLD);
                if (f.rank == 0)
                    printf("dist W=%d %-28s %s  values %.2e  grads %.2e  min gap to bugs %.2e%s\n", f.size, name,
                           d == 0 ? "f64" : "f32", worst[0], worst[1], -worst[2],
                           r.faint_bugs ? " (defects marked indistinguishable in the file)" : "");
                ok = ok && r.ok;
            }
            used++;
        }
        cJSON_Delete(root);
    }
    lfq_golden_free_list(files, n);
    MPI_ASSERT_TRUE(WORLD, used > 0);
    MPI_ASSERT_TRUE(WORLD, ok);
    fixture_done(&f);
}

// ---- unequal slices against the oracle ----------------------------------------------------------

// Slice s has B = s + 1 samples of N = 3 tokens and its own mask; every rank builds all slices.
#define DN 3
static void build_slices(int W, int dim, double **x, uint8_t **mask, lfq_ref_slice *slices) {
    for (int s = 0; s < W; s++) {
        int B = s + 1;
        x[s] = malloc(sizeof(double) * (size_t)(B * DN * dim));
        mask[s] = malloc((size_t)(B * DN));
        lfq_fill_uniform(x[s], (int64_t)B * DN * dim, 1000 + (uint64_t)s, -1, 1);
        for (int t = 0; t < B * DN; t++) mask[s][t] = (uint8_t)((t + s) % 4 != 0);
        slices[s] = (lfq_ref_slice){B, DN, x[s], mask[s]};
    }
}

static void unequal_slices_match_finite_differences_of_the_summed_objective(void **state) {
    (void)state;
    fixture f = fixture_new();
    static const struct {
        const char *name;
        ember_lfq_dist_mean mean;
        bool softplus, spherical;
    } cases[] = {
        {"global token mean, softplus", EMBER_LFQ_MEAN_TOKENS, true, false},
        {"mean of rank means, softplus", EMBER_LFQ_MEAN_RANKS, true, false},
        {"mean of rank means, spherical", EMBER_LFQ_MEAN_RANKS, false, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
        cfg.dim = 6;
        cfg.codebook_size = 16;
        cfg.num_codebooks = 2;
        cfg.inv_temperature = 2.0;
        cfg.entropy_loss_weight = 0.3;
        cfg.commitment_loss_weight = 0.25;
        cfg.entropy_loss_offset = 1.0;
        cfg.softplus_entropy_loss = cases[ci].softplus;
        cfg.spherical = cases[ci].spherical;
        cfg.dist_mean = cases[ci].mean;
        cfg.dtype = EMBER_DTYPE_F64;
        cfg.seed = 5;
        ember_lfq *q = NULL;
        MPI_ASSERT_TRUE(WORLD, ember_lfq_create(f.ctx, &cfg, &q) == EMBER_OK);
        MPI_ASSERT_TRUE(WORLD, ember_lfq_set_comm(q, f.comm) == EMBER_OK);
        lfq_ref_config ref = lfq_ref_from(ember_lfq_get_config(q), ember_lfq_codebook_dim(q));

        double *x[8];
        uint8_t *mask[8];
        lfq_ref_slice slices[8];
        build_slices(f.size, cfg.dim, x, mask, slices);
        const int r = f.rank, B = r + 1;
        const int64_t nx = (int64_t)B * DN * cfg.dim;
        double *out = malloc(sizeof(double) * (size_t)nx), *gx = malloc(sizeof(double) * (size_t)nx);
        double *fx = malloc(sizeof(double) * (size_t)nx);
        ember_lfq_losses L;
        MPI_ASSERT_TRUE(WORLD, ember_lfq_forward(q, x[r], B, DN, mask[r], true, out, NULL, &L) == EMBER_OK);
        MPI_ASSERT_TRUE(WORLD, ember_lfq_backward(q, NULL, 1.0, gx) == EMBER_OK);
        MPI_ASSERT_TRUE(WORLD, ember_lfq_allreduce_grads(q, EMBER_GRAD_SUM) == EMBER_OK); // sum over ranks

        double *w = ember_lfq_param(q, EMBER_LFQ_PROJ_IN_WEIGHT, NULL);
        double *b = ember_lfq_param(q, EMBER_LFQ_PROJ_IN_BIAS, NULL);
        lfq_ref_losses R[8];
        lfq_ref_aux(&ref, w, b, f.size, slices, R);
        MPI_ASSERT_TRUE(WORLD, lfq_rel_scalar(L.aux, R[r].aux, 1e-3) < 1e-12);
        MPI_ASSERT_TRUE(WORLD, lfq_rel_scalar(L.codebook_entropy, R[r].cbe, 1e-3) < 1e-12);

        double fw[8 * 6], fb[8];
        lfq_ref_fd(&ref, w, b, f.size, slices, x[r], nx, 1e-6, fx, fw, fb);
        double ex = lfq_rel_to_max(gx, fx, nx);
        double ew = lfq_rel_to_max(ember_lfq_grad(q, EMBER_LFQ_PROJ_IN_WEIGHT, NULL), fw, 8 * 6);
        double eb = lfq_rel_to_max(ember_lfq_grad(q, EMBER_LFQ_PROJ_IN_BIAS, NULL), fb, 8);
        double mine = fmax(ex, fmax(ew, eb)), worst;
        MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, WORLD);
        if (f.rank == 0) printf("dist W=%d fd %-32s max rel err %.2e\n", f.size, cases[ci].name, worst);
        MPI_ASSERT_TRUE(WORLD, worst < 1e-6);

        for (int s = 0; s < f.size; s++) {
            free(x[s]);
            free(mask[s]);
        }
        free(out);
        free(gx);
        free(fx);
        ember_lfq_destroy(q);
    }
    fixture_done(&f);
}

// ---- bad input on one rank --------------------------------------------------------------------

static void bad_input_on_one_rank_fails_every_rank_and_changes_nothing(void **state) {
    (void)state;
    fixture f = fixture_new();
    ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
    cfg.dim = 5;
    cfg.codebook_size = 8;
    cfg.num_codebooks = 2;
    cfg.comm = f.comm;
    ember_lfq *q = NULL;
    MPI_ASSERT_TRUE(WORLD, ember_lfq_create(f.ctx, &cfg, &q) == EMBER_OK);
    const int32_t B = 2, N = 2;
    float x[20], out[20], gx[20], gx_s[20];
    for (int i = 0; i < 20; i++) {
        x[i] = (float)((i * 7 + f.rank * 3) % 11) / 5.0f - 1.0f;
        gx_s[i] = -1234.5f;
    }
    int64_t np = 0;
    ember_lfq_params(q, &np);
    float *p0 = malloc(sizeof(float) * (size_t)np), *g0 = malloc(sizeof(float) * (size_t)np);
    MPI_ASSERT_TRUE(WORLD, ember_lfq_forward(q, x, B, N, NULL, true, out, NULL, NULL) == EMBER_OK);
    MPI_ASSERT_TRUE(WORLD, ember_lfq_backward(q, NULL, 1.0, gx) == EMBER_OK);
    memcpy(p0, ember_lfq_params(q, NULL), sizeof(float) * (size_t)np);
    memcpy(g0, ember_lfq_grads(q, NULL), sizeof(float) * (size_t)np);

    // Forward: a NaN on the last rank only, in a larger batch (the other ranks grow their
    // workspace before the agreement and must keep the saved state across the move).
    const int bad = f.size - 1;
    float xb[30], ob[30], ob_s[30];
    for (int i = 0; i < 30; i++) {
        xb[i] = x[i % 20];
        ob[i] = ob_s[i] = -99.0f;
    }
    if (f.rank == bad) xb[13] = NAN; // b = 1, n = 0, feature 3
    ember_status st = ember_lfq_forward(q, xb, 3, N, NULL, true, ob, NULL, NULL);
    if (st != EMBER_ERR_NUMERIC) fprintf(stderr, "rank %d: %s %s\n", f.rank, ember_status_name(st), ember_ctx_errmsg(f.ctx));
    MPI_ASSERT_TRUE(WORLD, st == EMBER_ERR_NUMERIC);
    char want[32];
    snprintf(want, sizeof want, "(rank %d)", bad);
    MPI_ASSERT_TRUE(WORLD, strstr(ember_ctx_errmsg(f.ctx), "x[b=1, n=0, 3] = nan") != NULL);
    MPI_ASSERT_TRUE(WORLD, strstr(ember_ctx_errmsg(f.ctx), want) != NULL);
    MPI_ASSERT_TRUE(WORLD, memcmp(ob, ob_s, sizeof ob) == 0);
    MPI_ASSERT_TRUE(WORLD, memcmp(ember_lfq_params(q, NULL), p0, sizeof(float) * (size_t)np) == 0);

    // Backward: a non-finite grad_aux on rank 0 only; gradients and grad_x untouched everywhere.
    memcpy(gx, gx_s, sizeof gx);
    st = ember_lfq_backward(q, NULL, f.rank == 0 ? INFINITY : 1.0, gx);
    MPI_ASSERT_TRUE(WORLD, st == EMBER_ERR_NUMERIC);
    MPI_ASSERT_TRUE(WORLD, strstr(ember_ctx_errmsg(f.ctx), "grad_aux = inf") != NULL);
    MPI_ASSERT_TRUE(WORLD, memcmp(gx, gx_s, sizeof gx) == 0);
    MPI_ASSERT_TRUE(WORLD, memcmp(ember_lfq_grads(q, NULL), g0, sizeof(float) * (size_t)np) == 0);

    // The rejected calls left nothing half-done on any rank: the state of the last good forward
    // is still there, and its backward gives the same gradients again.
    MPI_ASSERT_TRUE(WORLD, ember_lfq_zero_grad(q) == EMBER_OK);
    MPI_ASSERT_TRUE(WORLD, ember_lfq_backward(q, NULL, 1.0, gx) == EMBER_OK);
    MPI_ASSERT_TRUE(WORLD, memcmp(ember_lfq_grads(q, NULL), g0, sizeof(float) * (size_t)np) == 0);

    // Eval is local: only rank 0 calls it, nobody waits.
    if (f.rank == 0) MPI_ASSERT_TRUE(MPI_COMM_SELF, ember_lfq_forward(q, x, 1, 1, NULL, false, out, NULL, NULL) == EMBER_OK);

    // A communicator of another context is refused.
    ember_ctx *other = NULL;
    ember_comm *oc = NULL;
    assert_int_equal(ember_ctx_create(NULL, &other), EMBER_OK);
    MPI_ASSERT_TRUE(WORLD, ember_comm_create(other, WORLD, &oc) == EMBER_OK);
    MPI_ASSERT_TRUE(WORLD, ember_lfq_set_comm(q, oc) == EMBER_ERR_INVALID_ARG);
    ember_comm_destroy(oc);
    ember_ctx_destroy(other);

    free(p0);
    free(g0);
    ember_lfq_destroy(q);
    fixture_done(&f);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_distributed_gradients_are_the_correct_semantics),
        cmocka_unit_test(unequal_slices_match_finite_differences_of_the_summed_objective),
        cmocka_unit_test(bad_input_on_one_rank_fails_every_rank_and_changes_nothing),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
