// Naive LFQ aux-loss oracle (see lfq_oracle.h). Written for clarity, not speed.
#include "lfq_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ENT_EPS 1e-5

static double clamped_entropy(const double *p, int K) {
    double h = 0;
    for (int k = 0; k < K; k++) h -= p[k] * log(p[k] > ENT_EPS ? p[k] : ENT_EPS);
    return h;
}

// z [C*D] for token x [dim].
static void encode(const lfq_ref_config *c, const double *w_in, const double *b_in, const double *x, double *z) {
    int CD = c->C * c->D;
    for (int o = 0; o < CD; o++) {
        double h;
        if (c->proj) {
            h = c->bias ? b_in[o] : 0.0;
            for (int i = 0; i < c->dim; i++) h += w_in[o * c->dim + i] * x[i];
        } else {
            h = x[o];
        }
        if (c->clamp > 0) h = c->clamp * tanh(h / c->clamp);
        z[o] = h;
    }
    if (c->spherical) {
        for (int cb = 0; cb < c->C; cb++) {
            double n = 0;
            for (int j = 0; j < c->D; j++) n += z[cb * c->D + j] * z[cb * c->D + j];
            n = sqrt(n);
            if (n < 1e-12) n = 1e-12;
            for (int j = 0; j < c->D; j++) z[cb * c->D + j] = c->scale * z[cb * c->D + j] / n;
        }
    }
}

double lfq_ref_aux(const lfq_ref_config *c, const double *w_in, const double *b_in, int W,
                   const lfq_ref_slice *slices, lfq_ref_losses *per_slice) {
    const int K = 1 << c->D, CD = c->C * c->D;
    const double cb = c->spherical ? c->scale / sqrt((double)c->D) : c->scale;
    double *codebook = malloc(sizeof(double) * (size_t)K * c->D);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < c->D; j++) codebook[k * c->D + j] = ((k >> (c->D - 1 - j)) & 1) ? cb : -cb;
    double *z = malloc(sizeof(double) * (size_t)CD), *l = malloc(sizeof(double) * (size_t)K);
    double *psum = calloc((size_t)W * c->C * K, sizeof(double));
    double *pse = calloc((size_t)W, sizeof(double)), *commit = calloc((size_t)W, sizeof(double));
    int *count = calloc((size_t)W, sizeof(int));

    for (int r = 0; r < W; r++) {
        const lfq_ref_slice *s = &slices[r];
        for (int t = 0; t < s->B * s->N; t++) {
            if (s->mask && !s->mask[t]) continue;
            count[r]++;
            encode(c, w_in, b_in, s->x + (size_t)t * c->dim, z);
            for (int b = 0; b < c->C; b++) {
                const double *zc = z + b * c->D;
                double m = -INFINITY, sum = 0;
                for (int k = 0; k < K; k++) {
                    double d = 0;
                    for (int j = 0; j < c->D; j++) d += zc[j] * codebook[k * c->D + j];
                    l[k] = 2 * c->tau * d;
                    if (l[k] > m) m = l[k];
                }
                for (int k = 0; k < K; k++) sum += (l[k] = exp(l[k] - m));
                for (int k = 0; k < K; k++) {
                    l[k] /= sum;
                    psum[((size_t)r * c->C + b) * K + k] += l[k];
                }
                pse[r] += clamped_entropy(l, K);
                for (int j = 0; j < c->D; j++) {
                    double q = zc[j] > 0 ? cb : -cb;
                    commit[r] += (zc[j] - q) * (zc[j] - q);
                }
            }
        }
    }
    // The code distribution every rank sees.
    double *pbar = calloc((size_t)c->C * K, sizeof(double));
    int total = 0;
    for (int r = 0; r < W; r++) total += count[r];
    for (int r = 0; r < W; r++)
        for (int i = 0; i < c->C * K; i++) {
            double v = psum[(size_t)r * c->C * K + i];
            if (c->mean_tokens)
                pbar[i] += total > 0 ? v / total : 0;
            else
                pbar[i] += count[r] > 0 ? v / count[r] / W : 0;
        }
    double cbe = 0;
    for (int b = 0; b < c->C; b++) cbe += clamped_entropy(pbar + b * K, K);
    cbe /= c->C;

    double objective = 0;
    for (int r = 0; r < W; r++) {
        lfq_ref_losses L;
        L.pse = count[r] ? pse[r] / (count[r] * c->C) : 0;
        L.cbe = cbe;
        double e = L.pse - c->gamma * cbe;
        L.entropy = c->softplus ? log(1 + exp(e + c->offset)) : e;
        L.commit = (c->w_c > 0 && count[r]) ? commit[r] / ((double)count[r] * CD) : 0;
        L.aux = c->w_e * L.entropy + c->w_c * L.commit;
        objective += L.aux;
        if (per_slice) per_slice[r] = L;
    }
    free(codebook);
    free(z);
    free(l);
    free(psum);
    free(pse);
    free(commit);
    free(count);
    free(pbar);
    return objective;
}

static double central(const lfq_ref_config *c, double *w_in, double *b_in, int W, const lfq_ref_slice *slices,
                      double *v, double h) {
    double keep = *v;
    *v = keep + h;
    double up = lfq_ref_aux(c, w_in, b_in, W, slices, NULL);
    *v = keep - h;
    double down = lfq_ref_aux(c, w_in, b_in, W, slices, NULL);
    *v = keep;
    return (up - down) / (2 * h);
}

void lfq_ref_fd(const lfq_ref_config *c, double *w_in, double *b_in, int W, const lfq_ref_slice *slices,
                double *x_r, int64_t n_x, double h, double *grad_x, double *grad_w, double *grad_b) {
    const int CD = c->C * c->D;
    if (grad_x)
        for (int64_t i = 0; i < n_x; i++) grad_x[i] = central(c, w_in, b_in, W, slices, &x_r[i], h);
    if (grad_w && c->proj)
        for (int i = 0; i < CD * c->dim; i++) grad_w[i] = central(c, w_in, b_in, W, slices, &w_in[i], h);
    if (grad_b && c->proj && c->bias)
        for (int i = 0; i < CD; i++) grad_b[i] = central(c, w_in, b_in, W, slices, &b_in[i], h);
}
