// The DLRM test oracle (see naive_dlrm.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "naive_dlrm.h"

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

void naive_mlp(int32_t in, const int32_t *sizes, int32_t n, bool relu_last, const float *params, int32_t batch,
               const double *x, double *y, const double *dy, double *dparams, double *dx) {
    // acts[l] = output of layer l (after its activation); acts[-1] = x.
    double **acts = calloc((size_t)n, sizeof *acts);
    const float **w = calloc((size_t)n, sizeof *w);
    int32_t *ins = calloc((size_t)n, sizeof *ins);
    const float *p = params;
    int32_t width = in;
    for (int32_t l = 0; l < n; l++) {
        ins[l] = width;
        w[l] = p;
        p += (size_t)sizes[l] * (size_t)width + (size_t)sizes[l];
        acts[l] = dalloc((size_t)batch * (size_t)sizes[l]);
        const double *xin = l ? acts[l - 1] : x;
        const float *bias = w[l] + (size_t)sizes[l] * (size_t)width;
        bool relu = l < n - 1 || relu_last;
        for (int32_t i = 0; i < batch; i++) {
            for (int32_t o = 0; o < sizes[l]; o++) {
                double s = bias[o];
                for (int32_t k = 0; k < width; k++) s += xin[(size_t)i * (size_t)width + (size_t)k] * w[l][(size_t)o * (size_t)width + (size_t)k];
                acts[l][(size_t)i * (size_t)sizes[l] + (size_t)o] = relu && s <= 0.0 ? 0.0 : s;
            }
        }
        width = sizes[l];
    }
    memcpy(y, acts[n - 1], sizeof(double) * (size_t)batch * (size_t)sizes[n - 1]);
    if (dy) {
        double *g = dalloc((size_t)batch * (size_t)sizes[n - 1]);
        memcpy(g, dy, sizeof(double) * (size_t)batch * (size_t)sizes[n - 1]);
        double *dp = dparams + (p - params);
        for (int32_t l = n - 1; l >= 0; l--) {
            const int32_t out = sizes[l], wi = ins[l];
            bool relu = l < n - 1 || relu_last;
            const double *xin = l ? acts[l - 1] : x;
            if (relu) {
                for (size_t i = 0; i < (size_t)batch * (size_t)out; i++) {
                    if (acts[l][i] <= 0.0) g[i] = 0.0;
                }
            }
            dp -= (size_t)out * (size_t)wi + (size_t)out;
            double *dw = dp, *db = dp + (size_t)out * (size_t)wi;
            for (int32_t o = 0; o < out; o++) {
                double sb = 0.0;
                for (int32_t i = 0; i < batch; i++) sb += g[(size_t)i * (size_t)out + (size_t)o];
                db[o] = sb;
                for (int32_t k = 0; k < wi; k++) {
                    double s = 0.0;
                    for (int32_t i = 0; i < batch; i++) s += g[(size_t)i * (size_t)out + (size_t)o] * xin[(size_t)i * (size_t)wi + (size_t)k];
                    dw[(size_t)o * (size_t)wi + (size_t)k] = s;
                }
            }
            double *gx = dalloc((size_t)batch * (size_t)wi);
            for (int32_t i = 0; i < batch; i++) {
                for (int32_t k = 0; k < wi; k++) {
                    double s = 0.0;
                    for (int32_t o = 0; o < out; o++) s += g[(size_t)i * (size_t)out + (size_t)o] * w[l][(size_t)o * (size_t)wi + (size_t)k];
                    gx[(size_t)i * (size_t)wi + (size_t)k] = s;
                }
            }
            free(g);
            g = gx;
        }
        if (dx) memcpy(dx, g, sizeof(double) * (size_t)batch * (size_t)in);
        free(g);
    }
    for (int32_t l = 0; l < n; l++) free(acts[l]);
    free(acts);
    free(w);
    free(ins);
}

void naive_interaction(int32_t batch, int32_t num_sparse, int32_t dim, const double *dense, const double *emb,
                       double *out, const double *dout, double *ddense, double *demb) {
    const int32_t rows = num_sparse + 1, width = dim + rows * num_sparse / 2;
    double *t = dalloc((size_t)rows * (size_t)dim), *gt = dalloc((size_t)rows * (size_t)dim);
    for (int32_t b = 0; b < batch; b++) {
        // T = [dense; emb_0; ...; emb_{F-1}]
        for (int32_t c = 0; c < dim; c++) t[c] = dense[(size_t)b * (size_t)dim + (size_t)c];
        for (int32_t f = 0; f < num_sparse; f++) {
            for (int32_t c = 0; c < dim; c++) {
                t[(size_t)(f + 1) * (size_t)dim + (size_t)c] =
                    emb[((size_t)b * (size_t)num_sparse + (size_t)f) * (size_t)dim + (size_t)c];
            }
        }
        double *o = out + (size_t)b * (size_t)width;
        for (int32_t c = 0; c < dim; c++) o[c] = t[c];
        int32_t k = dim;
        for (int32_t i = 0; i < rows; i++) {
            for (int32_t j = i + 1; j < rows; j++) {
                double s = 0.0;
                for (int32_t c = 0; c < dim; c++) s += t[(size_t)i * (size_t)dim + (size_t)c] * t[(size_t)j * (size_t)dim + (size_t)c];
                o[k++] = s;
            }
        }
        if (!dout) continue;
        const double *g = dout + (size_t)b * (size_t)width;
        memset(gt, 0, sizeof(double) * (size_t)rows * (size_t)dim);
        for (int32_t c = 0; c < dim; c++) gt[c] = g[c];
        k = dim;
        for (int32_t i = 0; i < rows; i++) {
            for (int32_t j = i + 1; j < rows; j++, k++) {
                for (int32_t c = 0; c < dim; c++) {
                    gt[(size_t)i * (size_t)dim + (size_t)c] += g[k] * t[(size_t)j * (size_t)dim + (size_t)c];
                    gt[(size_t)j * (size_t)dim + (size_t)c] += g[k] * t[(size_t)i * (size_t)dim + (size_t)c];
                }
            }
        }
        for (int32_t c = 0; c < dim; c++) ddense[(size_t)b * (size_t)dim + (size_t)c] = gt[c];
        for (int32_t f = 0; f < num_sparse; f++) {
            for (int32_t c = 0; c < dim; c++) {
                demb[((size_t)b * (size_t)num_sparse + (size_t)f) * (size_t)dim + (size_t)c] =
                    gt[(size_t)(f + 1) * (size_t)dim + (size_t)c];
            }
        }
    }
    free(t);
    free(gt);
}

void naive_cross(int32_t batch, int32_t width, int32_t num_layers, int32_t rank, const float *params,
                 const double *x0, double *y, const double *dy, double *dparams, double *dx0) {
    const size_t N = (size_t)width, R = (size_t)rank, L = (size_t)num_layers, per = 2 * N * R + N;
    // Per sample: xs[l] the input of layer l (xs[L] the output), us[l] = V_l x_l, ts[l] = W_l us[l] + b_l.
    double *xs = dalloc((L + 1) * N), *us = dalloc(L * R), *ts = dalloc(L * N);
    double *g = dalloc(N), *gt = dalloc(N), *gu = dalloc(R);
    if (dy) memset(dparams, 0, sizeof(double) * L * per); // the sums over the batch start here
    for (int32_t b = 0; b < batch; b++) {
        const double *in = x0 + (size_t)b * N;
        for (size_t i = 0; i < N; i++) xs[i] = in[i];
        for (size_t l = 0; l < L; l++) {
            const float *v = params + l * per, *w = v + R * N, *bias = w + N * R;
            const double *xl = xs + l * N;
            for (size_t k = 0; k < R; k++) {
                double s = 0.0;
                for (size_t i = 0; i < N; i++) s += (double)v[k * N + i] * xl[i];
                us[l * R + k] = s;
            }
            for (size_t i = 0; i < N; i++) {
                double s = bias[i];
                for (size_t k = 0; k < R; k++) s += (double)w[i * R + k] * us[l * R + k];
                ts[l * N + i] = s;
                xs[(l + 1) * N + i] = in[i] * s + xl[i];
            }
        }
        for (size_t i = 0; i < N; i++) y[(size_t)b * N + i] = xs[L * N + i];
        if (!dy) continue;
        double *dx = dx0 + (size_t)b * N;
        for (size_t i = 0; i < N; i++) {
            g[i] = dy[(size_t)b * N + i];
            dx[i] = 0.0;
        }
        for (size_t l = L; l-- > 0;) {
            const float *v = params + l * per, *w = v + R * N;
            double *dv = dparams + l * per, *dw = dv + R * N, *db = dw + N * R;
            const double *xl = xs + l * N;
            for (size_t i = 0; i < N; i++) {
                gt[i] = g[i] * in[i];
                dx[i] += g[i] * ts[l * N + i];
                db[i] += gt[i];
            }
            for (size_t k = 0; k < R; k++) {
                double s = 0.0;
                for (size_t i = 0; i < N; i++) {
                    dw[i * R + k] += gt[i] * us[l * R + k];
                    s += gt[i] * (double)w[i * R + k];
                }
                gu[k] = s;
            }
            // g (dL/dx_l) = g (the residual) + V^T gu.
            for (size_t i = 0; i < N; i++) {
                double s = g[i];
                for (size_t k = 0; k < R; k++) {
                    dv[k * N + i] += gu[k] * xl[i];
                    s += gu[k] * (double)v[k * N + i];
                }
                g[i] = s;
            }
        }
        for (size_t i = 0; i < N; i++) dx[i] += g[i];
    }
    free(xs);
    free(us);
    free(ts);
    free(g);
    free(gt);
    free(gu);
}

double naive_bce(double z, double y) {
    double p = 1.0 / (1.0 + exp(-z));
    // Direct formula; fine for the moderate logits the tests use.
    return -(y * log(p) + (1.0 - y) * log(1.0 - p));
}

double naive_bce_grad(double z, double y) { return 1.0 / (1.0 + exp(-z)) - y; }

double naive_auc(int64_t n, const float *score, const float *label) {
    double wins = 0.0, pairs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (label[i] < 0.5f) continue;
        for (int64_t j = 0; j < n; j++) {
            if (label[j] >= 0.5f) continue;
            pairs += 1.0;
            wins += score[i] > score[j] ? 1.0 : score[i] == score[j] ? 0.5 : 0.0;
        }
    }
    return pairs > 0.0 ? wins / pairs : NAN;
}

void naive_dense_step(int kind, double lr, double eps, double beta1, double beta2, int64_t t, int64_t n, double *w,
                      const double *g, double *m1, double *m2) {
    for (int64_t i = 0; i < n; i++) {
        if (kind == 0) {
            w[i] -= lr * g[i];
        } else if (kind == 1) {
            m1[i] += g[i] * g[i];
            w[i] -= lr * g[i] / (sqrt(m1[i]) + eps);
        } else {
            m1[i] = beta1 * m1[i] + (1.0 - beta1) * g[i];
            m2[i] = beta2 * m2[i] + (1.0 - beta2) * g[i] * g[i];
            double mhat = m1[i] / (1.0 - pow(beta1, (double)t)), vhat = m2[i] / (1.0 - pow(beta2, (double)t));
            w[i] -= lr * mhat / (sqrt(vhat) + eps);
        }
    }
}

// ---- Replicated embedding collection -----------------------------------------------------------

typedef struct naive_table {
    int64_t rows;
    int32_t dim;
    ember_optim_config optim;
    float *w;  // [rows, dim]
    float *m1; // Adagrad/Adam [rows, dim]; row-wise Adagrad [rows]
    float *m2; // Adam [rows, dim]
} naive_table;

typedef struct naive_ebc {
    MPI_Comm comm; // borrowed (the ember_comm's duplicate)
    int world;
    ember_grad_convention conv;
    int32_t num_features;
    int32_t *feature_table; // [F]
    int32_t num_tables;
    naive_table *tables;
    int64_t *col_offset;    // [F+1] column of feature f in the output
    int64_t step;
} naive_ebc;

// xorshift64*: the oracle's own generator.
static uint64_t xs(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static ember_status naive_forward(void *impl, const ember_kjt *kjt, float *out) {
    naive_ebc *e = impl;
    const int64_t B = kjt->batch_size, width = e->col_offset[e->num_features];
    memset(out, 0, sizeof(float) * (size_t)(B * width));
    for (int32_t f = 0; f < e->num_features; f++) {
        const naive_table *t = &e->tables[e->feature_table[f]];
        for (int64_t b = 0; b < B; b++) {
            int64_t bag = f * B + b;
            for (int64_t j = kjt->offsets[bag]; j < kjt->offsets[bag + 1]; j++) {
                const float *row = t->w + kjt->values[j] * t->dim;
                for (int32_t c = 0; c < t->dim; c++) out[b * width + e->col_offset[f] + c] += row[c];
            }
        }
    }
    return EMBER_OK;
}

typedef struct entry {
    int64_t key; // table << 40 | row
    int64_t order;
} entry;

static int by_key(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

static ember_status naive_backward(void *impl, const ember_kjt *kjt, const float *grad_out) {
    naive_ebc *e = impl;
    const int64_t B = kjt->batch_size, width = e->col_offset[e->num_features];
    int32_t maxdim = 0;
    for (int32_t t = 0; t < e->num_tables; t++) maxdim = e->tables[t].dim > maxdim ? e->tables[t].dim : maxdim;
    // Local (key, gradient row) pairs, rows padded to maxdim.
    int64_t n = kjt->offsets[e->num_features * B];
    int64_t *keys = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    float *grads = calloc((size_t)(n ? n : 1) * (size_t)maxdim, sizeof(float));
    int64_t k = 0;
    for (int32_t f = 0; f < e->num_features; f++) {
        const naive_table *t = &e->tables[e->feature_table[f]];
        for (int64_t b = 0; b < B; b++) {
            int64_t bag = f * B + b;
            for (int64_t j = kjt->offsets[bag]; j < kjt->offsets[bag + 1]; j++, k++) {
                keys[k] = ((int64_t)e->feature_table[f] << 40) | kjt->values[j];
                for (int32_t c = 0; c < t->dim; c++) grads[k * maxdim + c] = grad_out[b * width + e->col_offset[f] + c];
            }
        }
    }
    // Everyone gets everyone's pairs (rank order).
    int *counts = malloc(sizeof(int) * (size_t)e->world), *displs = malloc(sizeof(int) * (size_t)e->world);
    int mine = (int)n, total = 0;
    MPI_Allgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, e->comm);
    for (int r = 0; r < e->world; r++) {
        displs[r] = total;
        total += counts[r];
    }
    int64_t *all_keys = malloc(sizeof(int64_t) * (size_t)(total ? total : 1));
    float *all_grads = malloc(sizeof(float) * (size_t)(total ? total : 1) * (size_t)maxdim);
    MPI_Allgatherv(keys, mine, MPI_INT64_T, all_keys, counts, displs, MPI_INT64_T, e->comm);
    MPI_Datatype row;
    MPI_Type_contiguous(maxdim, MPI_FLOAT, &row);
    MPI_Type_commit(&row);
    MPI_Allgatherv(grads, mine, row, all_grads, counts, displs, row, e->comm);
    MPI_Type_free(&row);
    entry *ent = malloc(sizeof(entry) * (size_t)(total ? total : 1));
    for (int i = 0; i < total; i++) ent[i] = (entry){all_keys[i], i};
    qsort(ent, (size_t)total, sizeof *ent, by_key);
    e->step++;
    const double scale = e->conv == EMBER_GRAD_MEAN ? 1.0 / e->world : 1.0;
    double *g = malloc(sizeof(double) * (size_t)maxdim);
    for (int i = 0; i < total;) {
        int j = i;
        memset(g, 0, sizeof(double) * (size_t)maxdim);
        for (; j < total && ent[j].key == ent[i].key; j++) {
            for (int32_t c = 0; c < maxdim; c++) g[c] += all_grads[ent[j].order * maxdim + c];
        }
        naive_table *t = &e->tables[ent[i].key >> 40];
        int64_t r = ent[i].key & (((int64_t)1 << 40) - 1);
        float *w = t->w + r * t->dim;
        const ember_optim_config *o = &t->optim;
        double mean_sq = 0.0;
        for (int32_t c = 0; c < t->dim; c++) {
            g[c] *= scale;
            mean_sq += g[c] * g[c] / t->dim;
        }
        if (o->kind == EMBER_OPT_ROWWISE_ADAGRAD) t->m1[r] += (float)mean_sq;
        for (int32_t c = 0; c < t->dim; c++) {
            size_t at = (size_t)(r * t->dim + c);
            switch (o->kind) {
            case EMBER_OPT_SGD: w[c] -= (float)(o->lr * g[c]); break;
            case EMBER_OPT_ADAGRAD:
                t->m1[at] += (float)(g[c] * g[c]);
                w[c] -= (float)(o->lr * g[c] / (sqrt(t->m1[at]) + o->eps));
                break;
            case EMBER_OPT_ROWWISE_ADAGRAD: w[c] -= (float)(o->lr * g[c] / (sqrt(t->m1[r]) + o->eps)); break;
            default: { // Adam
                t->m1[at] = (float)(o->beta1 * t->m1[at] + (1.0 - o->beta1) * g[c]);
                t->m2[at] = (float)(o->beta2 * t->m2[at] + (1.0 - o->beta2) * g[c] * g[c]);
                double mh = t->m1[at] / (1.0 - pow(o->beta1, (double)e->step));
                double vh = t->m2[at] / (1.0 - pow(o->beta2, (double)e->step));
                w[c] -= (float)(o->lr * mh / (sqrt(vh) + o->eps));
            }
            }
        }
        i = j;
    }
    free(g);
    free(ent);
    free(all_keys);
    free(all_grads);
    free(counts);
    free(displs);
    free(keys);
    free(grads);
    return EMBER_OK;
}

static ember_status naive_reduce(void *impl, float *grad, size_t n) {
    naive_ebc *e = impl;
    MPI_Allreduce(MPI_IN_PLACE, grad, (int)n, MPI_FLOAT, MPI_SUM, e->comm);
    if (e->conv == EMBER_GRAD_MEAN) {
        for (size_t i = 0; i < n; i++) grad[i] /= (float)e->world;
    }
    return EMBER_OK;
}

static void naive_destroy(void *impl) {
    naive_ebc *e = impl;
    if (!e) return;
    for (int32_t t = 0; t < e->num_tables; t++) {
        free(e->tables[t].w);
        free(e->tables[t].m1);
        free(e->tables[t].m2);
    }
    free(e->tables);
    free(e->feature_table);
    free(e->col_offset);
    free(e);
}

ember_status naive_backend_create(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                                  ember_grad_convention conv, int32_t group_size, dlrm_backend *out) {
    (void)plan, (void)group_size;
    naive_ebc *e = calloc(1, sizeof *e);
    e->comm = ember_comm_mpi(comm);
    e->world = ember_comm_size(comm);
    e->conv = conv;
    e->num_tables = cfg->num_tables;
    e->num_features = cfg->num_features;
    e->tables = calloc((size_t)cfg->num_tables, sizeof *e->tables);
    e->feature_table = calloc((size_t)cfg->num_features, sizeof(int32_t));
    e->col_offset = calloc((size_t)cfg->num_features + 1, sizeof(int64_t));
    for (int32_t t = 0; t < cfg->num_tables; t++) {
        const ember_table_config *c = &cfg->tables[t];
        naive_table *nt = &e->tables[t];
        nt->rows = c->rows;
        nt->dim = c->dim;
        nt->optim = c->optim;
        size_t n = (size_t)(c->rows * c->dim);
        nt->w = malloc(sizeof(float) * n);
        uint64_t s = (cfg->seed + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(t + 1) * 0xD1B54A32D192ED03ull;
        if (!s) s = 1;
        for (size_t i = 0; i < n; i++) {
            double u = (double)(xs(&s) >> 11) / 9007199254740992.0;
            nt->w[i] = c->init.kind == EMBER_INIT_UNIFORM ? (float)(c->init.a + (c->init.b - c->init.a) * u) : 0.0f;
        }
        if (c->optim.kind == EMBER_OPT_ROWWISE_ADAGRAD) nt->m1 = calloc((size_t)c->rows, sizeof(float));
        if (c->optim.kind == EMBER_OPT_ADAGRAD || c->optim.kind == EMBER_OPT_ADAM) nt->m1 = calloc(n, sizeof(float));
        if (c->optim.kind == EMBER_OPT_ADAM) nt->m2 = calloc(n, sizeof(float));
    }
    for (int32_t f = 0; f < cfg->num_features; f++) {
        e->feature_table[f] = cfg->features[f].table;
        e->col_offset[f + 1] = e->col_offset[f] + cfg->tables[cfg->features[f].table].dim;
    }
    *out = (dlrm_backend){.impl = e, .forward = naive_forward, .backward = naive_backward,
                          .reduce_dense_grads = naive_reduce, .destroy = naive_destroy};
    return EMBER_OK;
}
