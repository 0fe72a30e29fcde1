// LFQ against the golden files (docs/lfq.md, "Tests"), float64 and float32: every *.json in
// $EMBER_LFQ_GOLDEN_DIR (default $EMBER_TEST_DATA/lfq), so new configurations need no code.
// Per file: training forward (indices exactly; quantized output and the loss breakdown),
// backward of total = aux + mean((out - target)^2) and of aux alone (input and every parameter
// gradient), eval forward, and indices_to_codes against the eval output.
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

// Tolerances of spec §6. Values: relative per scalar (absolute below LFQ_SCALAR_FLOOR) and
// relative to the largest entry per tensor; gradients: relative to the largest entry of each
// tensor.
typedef struct tolerance {
    double values, grads;
} tolerance;

static tolerance tolerance_for(ember_dtype dt, double tau) {
    if (dt == EMBER_DTYPE_F64) return (tolerance){1e-12, 1e-10};
    return (tolerance){1e-5, tau >= 100 ? 1e-4 : 5e-5};
}

// The worst errors seen in one file, and whether every check passed.
typedef struct report {
    const char *file;
    const char *dtype;
    double values, grads;
    bool ok;
} report;

static void note_failure(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_failure(report *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s [%s]: ", r->file, r->dtype);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    r->ok = false;
}

// EMBER_LFQ_GOLDEN_VERBOSE=1 prints every comparison.
static void trace(const report *r, const char *what, double err) {
    const char *v = getenv("EMBER_LFQ_GOLDEN_VERBOSE");
    if (v && *v && *v != '0') printf("  %s [%s] %-40s %.3g\n", r->file, r->dtype, what, err);
}

static void check_value(report *r, const char *what, double err, double tol) {
    trace(r, what, err);
    if (err > r->values || isnan(err)) r->values = err;
    if (!(err <= tol)) note_failure(r, "%s: relative error %.3g > %.3g", what, err, tol);
}

static void check_grad(report *r, const char *what, double err, double tol) {
    trace(r, what, err);
    if (err > r->grads || isnan(err)) r->grads = err;
    if (!(err <= tol)) note_failure(r, "%s: relative-to-max error %.3g > %.3g", what, err, tol);
}

// Compares a module buffer (dtype dt) with the golden tensor at path.
static double tensor_err(const cJSON *root, const char *path, const void *got, int64_t n, ember_dtype dt,
                         report *r) {
    lfq_tensor t;
    if (!lfq_golden_tensor(root, path, &t) || t.numel != n) {
        note_failure(r, "%s: missing or %lld elements, expected %lld", path, (long long)t.numel, (long long)n);
        lfq_tensor_free(&t);
        return INFINITY;
    }
    double *g = malloc((size_t)n * sizeof *g);
    lfq_buf_to_f64(got, n, dt, g);
    double err = lfq_rel_to_max(g, t.data, n);
    free(g);
    lfq_tensor_free(&t);
    return err;
}

static void check_indices(const cJSON *root, const char *path, const int64_t *got, int64_t n, report *r) {
    lfq_tensor t;
    if (!lfq_golden_tensor(root, path, &t) || t.numel != n) {
        note_failure(r, "%s: missing or of the wrong size", path);
    } else {
        for (int64_t i = 0; i < n; i++) {
            if ((double)got[i] != t.data[i]) {
                note_failure(r, "%s[%lld] = %lld, expected %.0f", path, (long long)i, (long long)got[i], t.data[i]);
                break;
            }
        }
    }
    lfq_tensor_free(&t);
}

// Every gradient group ("grads_total_loss", ...): x and each parameter the module has.
static void check_grads(const cJSON *root, const char *group, ember_lfq *q, const void *grad_x, int64_t nx,
                        ember_dtype dt, double tol, report *r) {
    char path[160];
    snprintf(path, sizeof path, "%s/x", group);
    check_grad(r, path, tensor_err(root, path, grad_x, nx, dt, r), tol);
    for (int id = 0; id < EMBER_LFQ_NUM_PARAMS; id++) {
        int64_t n = 0;
        const void *g = ember_lfq_grad(q, (ember_lfq_param_id)id, &n);
        if (!g) continue;
        snprintf(path, sizeof path, "%s/%s", group, ember_lfq_param_name((ember_lfq_param_id)id));
        check_grad(r, path, tensor_err(root, path, g, n, dt, r), tol);
    }
}

static void run_file(const char *path, ember_dtype dt, report *r) {
    cJSON *root = lfq_golden_load(path);
    if (!root) {
        note_failure(r, "cannot load");
        return;
    }
    ember_ctx *ctx = NULL;
    ember_lfq *q = NULL;
    lfq_tensor x = {0}, target = {0}, mask = {0};
    void *xb = NULL, *out = NULL, *gx = NULL, *gout = NULL, *codes = NULL;
    int64_t *idx = NULL;
    uint8_t *m8 = NULL;
    ember_lfq_config cfg;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    if (!lfq_golden_config(root, dt, &cfg) || !lfq_golden_tensor(root, "inputs/x", &x) ||
        !lfq_golden_tensor(root, "inputs/target", &target) || x.ndim != 3) {
        note_failure(r, "config or inputs not usable");
        goto done;
    }
    if (ember_lfq_create(ctx, &cfg, &q) != EMBER_OK) {
        note_failure(r, "create: %s", ember_ctx_errmsg(ctx));
        goto done;
    }
    if (!lfq_golden_set_params(root, q)) {
        note_failure(r, "params");
        goto done;
    }
    const tolerance tol = tolerance_for(dt, cfg.inv_temperature);
    const int32_t B = (int32_t)x.shape[0], N = (int32_t)x.shape[1];
    const int32_t C = ember_lfq_get_config(q)->num_codebooks;
    const int64_t nx = x.numel, ni = (int64_t)B * N * C;
    const size_t esz = dt == EMBER_DTYPE_F64 ? sizeof(double) : sizeof(float);
    if (lfq_golden_number(root, "config/use_mask", 0) != 0) {
        if (!lfq_golden_tensor(root, "inputs/mask", &mask) || mask.numel != (int64_t)B * N) {
            note_failure(r, "inputs/mask missing");
            goto done;
        }
        m8 = malloc((size_t)mask.numel);
        for (int64_t i = 0; i < mask.numel; i++) m8[i] = mask.data[i] != 0;
    }
    xb = lfq_buf_from_f64(x.data, nx, dt);
    out = malloc((size_t)nx * esz);
    gx = malloc((size_t)nx * esz);
    codes = malloc((size_t)nx * esz);
    idx = malloc((size_t)ni * sizeof *idx);

    // Training forward.
    ember_lfq_losses L;
    if (ember_lfq_forward(q, xb, B, N, m8, true, out, idx, &L) != EMBER_OK) {
        note_failure(r, "forward: %s", ember_ctx_errmsg(ctx));
        goto done;
    }
    check_indices(root, "outputs/indices", idx, ni, r);
    check_value(r, "outputs/quantized", tensor_err(root, "outputs/quantized", out, nx, dt, r), tol.values);
    static const struct {
        const char *path;
        size_t offset;
    } scalars[] = {
        {"outputs/per_sample_entropy", offsetof(ember_lfq_losses, per_sample_entropy)},
        {"outputs/codebook_entropy", offsetof(ember_lfq_losses, codebook_entropy)},
        {"outputs/entropy_aux_loss", offsetof(ember_lfq_losses, entropy)},
        {"outputs/commit_loss", offsetof(ember_lfq_losses, commitment)},
        {"outputs/aux_loss", offsetof(ember_lfq_losses, aux)},
    };
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        double got = *(const double *)((const char *)&L + scalars[i].offset);
        double want = lfq_golden_number(root, scalars[i].path, NAN);
        check_value(r, scalars[i].path, lfq_rel_scalar(got, want, LFQ_SCALAR_FLOOR), tol.values);
    }

    // total = aux + recon, recon = mean((out - target)^2): d recon / d out = 2 (out - target) / numel.
    double *o64 = malloc((size_t)nx * sizeof *o64), recon = 0;
    lfq_buf_to_f64(out, nx, dt, o64);
    double *g64 = malloc((size_t)nx * sizeof *g64);
    for (int64_t i = 0; i < nx; i++) {
        double d = o64[i] - target.data[i];
        recon += d * d;
        g64[i] = 2 * d / (double)nx;
    }
    recon /= (double)nx;
    check_value(r, "outputs/recon_loss", lfq_rel_scalar(recon, lfq_golden_number(root, "outputs/recon_loss", NAN), LFQ_SCALAR_FLOOR),
                tol.values);
    check_value(r, "outputs/total_loss",
                lfq_rel_scalar(recon + L.aux, lfq_golden_number(root, "outputs/total_loss", NAN), LFQ_SCALAR_FLOOR), tol.values);
    gout = lfq_buf_from_f64(g64, nx, dt);
    free(o64);
    free(g64);

    assert_int_equal(ember_lfq_zero_grad(q), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, gout, 1.0, gx), EMBER_OK);
    check_grads(root, "grads_total_loss", q, gx, nx, dt, tol.grads, r);
    assert_int_equal(ember_lfq_zero_grad(q), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, NULL, 1.0, gx), EMBER_OK);
    check_grads(root, "grads_aux_loss_only", q, gx, nx, dt, tol.grads, r);

    // Eval forward: q itself, no losses; indices_to_codes decodes to the same output.
    assert_int_equal(ember_lfq_forward(q, xb, B, N, m8, false, out, idx, &L), EMBER_OK);
    check_indices(root, "eval_outputs/indices", idx, ni, r);
    check_value(r, "eval_outputs/quantized", tensor_err(root, "eval_outputs/quantized", out, nx, dt, r), tol.values);
    if (L.aux != 0 || lfq_golden_number(root, "eval_outputs/aux_loss", 0) != 0) note_failure(r, "eval aux != 0");
    assert_int_equal(ember_lfq_indices_to_codes(q, idx, (int64_t)B * N, true, codes), EMBER_OK);
    check_value(r, "indices_to_codes", tensor_err(root, "eval_outputs/quantized", codes, nx, dt, r), tol.values);

done:
    ember_lfq_destroy(q);
    if (ctx) assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    lfq_tensor_free(&x);
    lfq_tensor_free(&target);
    lfq_tensor_free(&mask);
    free(xb);
    free(out);
    free(gx);
    free(gout);
    free(codes);
    free(idx);
    free(m8);
    cJSON_Delete(root);
}

static void run_all(ember_dtype dt) {
    char dir[1024];
    char **files = NULL;
    int n = lfq_golden_list(lfq_golden_dir(dir, sizeof dir), &files);
    if (n <= 0) fprintf(stderr, "no golden files in %s\n", dir);
    assert_true(n > 0);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const char *base = strrchr(files[i], '/');
        report r = {base ? base + 1 : files[i], dt == EMBER_DTYPE_F64 ? "f64" : "f32", 0, 0, true};
        run_file(files[i], dt, &r);
        printf("golden %-28s %s  max rel err: values %.2e  grads %.2e  %s\n", r.file, r.dtype, r.values, r.grads,
               r.ok ? "ok" : "FAILED");
        ok = ok && r.ok;
    }
    lfq_golden_free_list(files, n);
    assert_true(ok);
}

static void golden_files_match_in_float64(void **state) {
    (void)state;
    run_all(EMBER_DTYPE_F64);
}

static void golden_files_match_in_float32(void **state) {
    (void)state;
    run_all(EMBER_DTYPE_F32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_files_match_in_float64),
        cmocka_unit_test(golden_files_match_in_float32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
