#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t bag_len(const ember_kjt *k, int64_t i) {
    if (k->offsets) return k->offsets[i + 1] - k->offsets[i];
    return k->lengths[i];
}

static int64_t bag_begin(const ember_kjt *k, int64_t i) {
    if (k->offsets) return k->offsets[i];
    int64_t s = 0;
    for (int64_t q = 0; q < i; q++) s += k->lengths[q];
    return s;
}

// -1: skip this id; otherwise the row it reads.
static int64_t row_of(const oracle *o, int64_t id, int64_t rows) {
    if (id >= 0 && id < rows) return id;
    if (o->bounds == EMBER_BOUNDS_SKIP) return -1;
    return id < 0 ? 0 : rows - 1;
}

oracle *oracle_create(const ember_ebc_config *cfg, const ember_ebc *ebc) {
    oracle *o = calloc(1, sizeof *o);
    o->T = cfg->num_tables;
    o->F = cfg->num_features;
    o->bounds = cfg->bounds;
    o->t = calloc((size_t)o->T, sizeof *o->t);
    o->ftab = calloc((size_t)o->F, sizeof(int));
    o->fcol = calloc((size_t)o->F, sizeof(int));
    o->seq = cfg->tables[0].pooling == EMBER_POOL_NONE;
    for (int t = 0; t < o->T; t++) {
        oracle_table *ot = &o->t[t];
        ot->cfg = cfg->tables[t];
        int64_t n = ot->cfg.rows * ot->cfg.dim;
        float *tmp = malloc(sizeof(float) * (size_t)n);
        ot->w = calloc((size_t)n, sizeof(double));
        ember_ebc_read(ebc, t, "weight", 0, ot->cfg.rows, EMBER_DTYPE_F32, tmp);
        for (int64_t i = 0; i < n; i++) ot->w[i] = tmp[i];
        ember_ebc_step(ebc, t);
        ot->step = ember_ebc_step(ebc, t);
        for (int s = 1; s < ember_ebc_num_tensors(ebc, t); s++) {
            ember_tensor_info info;
            ember_ebc_tensor_info(ebc, t, s, &info);
            if (strcmp(info.name, "momentum1") != 0 && strcmp(info.name, "momentum2") != 0) continue; // "ids"
            int64_t m = info.rows * info.cols;
            double *d = calloc((size_t)m, sizeof(double));
            ember_ebc_read(ebc, t, info.name, 0, info.rows, EMBER_DTYPE_F32, tmp);
            for (int64_t i = 0; i < m; i++) d[i] = tmp[i];
            if (strcmp(info.name, "momentum1") == 0) ot->m1 = d;
            else ot->m2 = d;
        }
        free(tmp);
    }
    int col = 0;
    for (int f = 0; f < o->F; f++) {
        o->ftab[f] = cfg->features[f].table;
        o->fcol[f] = o->seq ? 0 : col;
        col += cfg->tables[o->ftab[f]].dim;
    }
    o->out_dim = o->seq ? cfg->tables[o->ftab[0]].dim : col;
    return o;
}

void oracle_destroy(oracle *o) {
    if (!o) return;
    for (int t = 0; t < o->T; t++) {
        free(o->t[t].w);
        free(o->t[t].m1);
        free(o->t[t].m2);
    }
    free(o->t);
    free(o->ftab);
    free(o->fcol);
    free(o);
}

void oracle_forward(const oracle *o, const ember_kjt *k, double *out) {
    const int B = k->batch_size;
    if (o->seq) memset(out, 0, sizeof(double) * (size_t)(k->nnz * o->out_dim));
    else memset(out, 0, sizeof(double) * (size_t)B * (size_t)o->out_dim);
    for (int f = 0; f < o->F; f++) {
        const oracle_table *ot = &o->t[o->ftab[f]];
        const int D = ot->cfg.dim;
        for (int b = 0; b < B; b++) {
            int64_t bag = (int64_t)f * B + b, s = bag_begin(k, bag), n = bag_len(k, bag), cnt = 0;
            for (int64_t j = s; j < s + n; j++) {
                int64_t r = row_of(o, k->values[j], ot->cfg.rows);
                if (r < 0) continue;
                cnt++;
                double w = k->weights ? k->weights[j] : 1.0;
                for (int d = 0; d < D; d++) {
                    if (o->seq) out[j * D + d] = w * ot->w[r * D + d];
                    else out[(int64_t)b * o->out_dim + o->fcol[f] + d] += w * ot->w[r * D + d];
                }
            }
            if (!o->seq && ot->cfg.pooling == EMBER_POOL_MEAN && cnt > 0)
                for (int d = 0; d < D; d++) out[(int64_t)b * o->out_dim + o->fcol[f] + d] /= (double)cnt;
        }
    }
}

static void step_row(oracle_table *ot, int64_t r, double *g) {
    const ember_optim_config *c = &ot->cfg.optim;
    const int D = ot->cfg.dim;
    double *w = ot->w + r * D;
    double lr = c->lr, wd = c->weight_decay, eps = c->eps, b1 = c->beta1, b2 = c->beta2;
    double dec = c->weight_decay_mode == EMBER_WD_DECOUPLED ? wd : 0.0;
    if (c->kind == EMBER_OPT_LARS_SGD) {
        // LARS (FBGEMM's LARS_SGD): rate lr * eta |w| / (|g| + l2 |w|), 1 when a norm is 0; momentum
        // velocity in m1; L2 weight decay inside the formula.
        double l2 = c->weight_decay_mode == EMBER_WD_L2 ? wd : 0.0, wn = 0, gn = 0;
        for (int d = 0; d < D; d++) {
            wn += w[d] * w[d];
            gn += g[d] * g[d];
        }
        wn = sqrt(wn);
        gn = sqrt(gn);
        double local = wn > 0 && gn > 0 ? c->eta * wn / (gn + l2 * wn) : 1.0;
        for (int d = 0; d < D; d++) {
            double *v = &ot->m1[r * D + d];
            *v = c->momentum * *v + lr * local * (g[d] + l2 * w[d]);
            w[d] = w[d] - *v - lr * dec * w[d];
        }
        return;
    }
    if (c->weight_decay_mode == EMBER_WD_L2)
        for (int d = 0; d < D; d++) g[d] += wd * w[d];
    double t = (double)ot->step;
    const int rowwise_m2 = c->kind == EMBER_OPT_PARTIAL_ROWWISE_ADAM || c->kind == EMBER_OPT_PARTIAL_ROWWISE_LAMB;
    const int trust = c->kind == EMBER_OPT_LAMB || c->kind == EMBER_OPT_PARTIAL_ROWWISE_LAMB;
    if (c->kind == EMBER_OPT_SGD) {
        for (int d = 0; d < D; d++) w[d] = w[d] - lr * g[d] - lr * dec * w[d];
    } else if (c->kind == EMBER_OPT_ADAGRAD) {
        for (int d = 0; d < D; d++) {
            ot->m1[r * D + d] += g[d] * g[d];
            w[d] = w[d] - lr * g[d] / (sqrt(ot->m1[r * D + d]) + eps) - lr * dec * w[d];
        }
    } else if (c->kind == EMBER_OPT_ROWWISE_ADAGRAD) {
        double mean_sq = 0;
        for (int d = 0; d < D; d++) mean_sq += g[d] * g[d] / D;
        ot->m1[r] += mean_sq;
        for (int d = 0; d < D; d++) w[d] = w[d] - lr * g[d] / (sqrt(ot->m1[r]) + eps) - lr * dec * w[d];
    } else {
        // Adam family with bias correction at the table's global step.
        double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
        double *upd = malloc(sizeof(double) * (size_t)D);
        double row_v = 0;
        if (rowwise_m2) {
            double mean_sq = 0;
            for (int d = 0; d < D; d++) mean_sq += g[d] * g[d] / D;
            ot->m2[r] = b2 * ot->m2[r] + (1 - b2) * mean_sq;
            row_v = ot->m2[r];
        }
        for (int d = 0; d < D; d++) {
            double *m = &ot->m1[r * D + d];
            *m = b1 * *m + (1 - b1) * g[d];
            double v;
            if (rowwise_m2) {
                v = row_v;
            } else {
                double *vv = &ot->m2[r * D + d];
                *vv = b2 * *vv + (1 - b2) * g[d] * g[d];
                v = *vv;
            }
            upd[d] = (*m / c1) / (sqrt(v / c2) + eps) + dec * w[d];
        }
        double ratio = 1;
        if (trust) {
            double wn = 0, un = 0;
            for (int d = 0; d < D; d++) {
                wn += w[d] * w[d];
                un += upd[d] * upd[d];
            }
            if (wn > 0 && un > 0) ratio = sqrt(wn) / sqrt(un);
        }
        for (int d = 0; d < D; d++) w[d] -= lr * ratio * upd[d];
        free(upd);
    }
}

void oracle_backward(oracle *o, const ember_kjt *k, const float *grad_out, double *grad_weights) {
    const int B = k->batch_size;
    // Dense gradient per table, then one update per touched row.
    double **g = calloc((size_t)o->T, sizeof(double *));
    char **touched = calloc((size_t)o->T, sizeof(char *));
    for (int t = 0; t < o->T; t++) {
        g[t] = calloc((size_t)(o->t[t].cfg.rows * o->t[t].cfg.dim), sizeof(double));
        touched[t] = calloc((size_t)o->t[t].cfg.rows, 1);
    }
    for (int f = 0; f < o->F; f++) {
        int t = o->ftab[f];
        oracle_table *ot = &o->t[t];
        const int D = ot->cfg.dim;
        for (int b = 0; b < B; b++) {
            int64_t bag = (int64_t)f * B + b, s = bag_begin(k, bag), n = bag_len(k, bag), cnt = 0;
            for (int64_t j = s; j < s + n; j++)
                if (row_of(o, k->values[j], ot->cfg.rows) >= 0) cnt++;
            double c = (!o->seq && ot->cfg.pooling == EMBER_POOL_MEAN && cnt > 0) ? 1.0 / (double)cnt : 1.0;
            for (int64_t j = s; j < s + n; j++) {
                int64_t r = row_of(o, k->values[j], ot->cfg.rows);
                if (r < 0) {
                    if (grad_weights) grad_weights[j] = 0;
                    continue;
                }
                const float *go = o->seq ? grad_out + j * D : grad_out + (int64_t)b * o->out_dim + o->fcol[f];
                double w = k->weights ? k->weights[j] : 1.0, dot = 0;
                for (int d = 0; d < D; d++) {
                    g[t][r * D + d] += w * c * go[d];
                    dot += go[d] * ot->w[r * D + d];
                }
                if (grad_weights) grad_weights[j] = c * dot;
                touched[t][r] = 1;
            }
        }
    }
    for (int t = 0; t < o->T; t++) {
        oracle_table *ot = &o->t[t];
        ot->step++;
        for (int64_t r = 0; r < ot->cfg.rows; r++)
            if (touched[t][r]) step_row(ot, r, g[t] + r * ot->cfg.dim);
        free(g[t]);
        free(touched[t]);
    }
    free(g);
    free(touched);
}

double rel_err_f(const float *a, const double *b, int64_t n, double atol, double rtol) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(e <= worst)) worst = e; // NaN propagates as the worst
    }
    return worst;
}
