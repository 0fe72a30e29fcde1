#include "gen.h"

#include <stdlib.h>
#include <string.h>

uint64_t rng_next(test_rng *r) {
    // xorshift64*: independent of the library's generators.
    uint64_t x = r->s ? r->s : 0x2545F4914F6CDD1Dull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

double rng_uniform(test_rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
int64_t rng_int(test_rng *r, int64_t n) { return (int64_t)(rng_uniform(r) * (double)n); }

void gen_kjt_make(gen_kjt *g, test_rng *r, int32_t F, int32_t B, const int64_t *rows, int max_len, double dup_p,
                  int weighted) {
    int64_t nb = (int64_t)F * B;
    g->lengths = malloc(sizeof(int32_t) * (size_t)(nb > 0 ? nb : 1));
    g->offsets = malloc(sizeof(int64_t) * (size_t)(nb + 1));
    g->offsets[0] = 0;
    for (int64_t i = 0; i < nb; i++) {
        int len = rng_int(r, 5) == 0 ? 0 : (int)rng_int(r, max_len + 1);
        g->lengths[i] = len;
        g->offsets[i + 1] = g->offsets[i] + len;
    }
    int64_t nnz = g->offsets[nb];
    g->values = malloc(sizeof(int64_t) * (size_t)(nnz > 0 ? nnz : 1));
    g->weights = weighted ? malloc(sizeof(float) * (size_t)(nnz > 0 ? nnz : 1)) : NULL;
    for (int64_t i = 0; i < nb; i++) {
        int f = (int)(i / B);
        for (int64_t j = g->offsets[i]; j < g->offsets[i + 1]; j++) {
            int64_t first = g->offsets[(int64_t)f * B];
            if (j > first && rng_uniform(r) < dup_p) g->values[j] = g->values[first + rng_int(r, j - first)];
            else g->values[j] = rng_int(r, rows[f]);
            if (weighted) g->weights[j] = (float)(rng_uniform(r) * 2.0 - 0.5);
        }
    }
    g->kjt = (ember_kjt){.num_features = F, .batch_size = B, .lengths = g->lengths, .offsets = g->offsets,
                         .values = g->values, .weights = g->weights, .nnz = nnz};
}

void gen_kjt_free(gen_kjt *g) {
    free(g->lengths);
    free(g->offsets);
    free(g->values);
    free(g->weights);
}

// An owned ordinary KJT from per-bag lengths (offsets built), ids and weights (taken over).
static void own_kjt(gen_kjt *g, int32_t F, int32_t B, int32_t *lengths, int64_t *values, float *weights) {
    const int64_t nb = (int64_t)F * B;
    g->lengths = lengths;
    g->offsets = malloc(sizeof(int64_t) * (size_t)(nb + 1));
    g->offsets[0] = 0;
    for (int64_t i = 0; i < nb; i++) g->offsets[i + 1] = g->offsets[i] + lengths[i];
    g->values = values;
    g->weights = weights;
    g->kjt = (ember_kjt){.num_features = F, .batch_size = B, .lengths = g->lengths, .offsets = g->offsets,
                         .values = g->values, .weights = g->weights, .nnz = g->offsets[nb]};
}

void gen_vbe_make(gen_vbe *v, test_rng *r, int32_t F, int32_t B, const int32_t *bsz, const int64_t *rows, int max_len,
                  double dup_p, int weighted, uint32_t in_order) {
    memset(v, 0, sizeof *v);
    v->F = F, v->B = B;
    v->bsz = malloc(sizeof(int32_t) * (size_t)F);
    int64_t nbags = 0;
    for (int32_t f = 0; f < F; f++) {
        v->bsz[f] = bsz[f];
        nbags += bsz[f];
        if (bsz[f] > v->Bp) v->Bp = bsz[f];
    }
    // The bags, feature after feature; bag_start[i] of the caller's bag i.
    v->lengths = malloc(sizeof(int32_t) * (size_t)(nbags + 1));
    int64_t *start = malloc(sizeof(int64_t) * (size_t)(nbags + 1));
    start[0] = 0;
    for (int64_t i = 0; i < nbags; i++) {
        v->lengths[i] = rng_int(r, 5) == 0 ? 0 : (int32_t)rng_int(r, max_len + 1);
        start[i + 1] = start[i] + v->lengths[i];
    }
    const int64_t nnz = start[nbags];
    v->values = malloc(sizeof(int64_t) * (size_t)(nnz + 1));
    v->weights = weighted ? malloc(sizeof(float) * (size_t)(nnz + 1)) : NULL;
    int64_t bag = 0;
    for (int32_t f = 0; f < F; f++) {
        const int64_t first = start[bag];
        for (int32_t b = 0; b < bsz[f]; b++, bag++)
            for (int64_t j = start[bag]; j < start[bag + 1]; j++) {
                if (j > first && rng_uniform(r) < dup_p) v->values[j] = v->values[first + rng_int(r, j - first)];
                else v->values[j] = rng_int(r, rows[f]);
                if (weighted) v->weights[j] = (float)(rng_uniform(r) * 2.0 - 0.5);
            }
    }
    v->inv = malloc(sizeof(int32_t) * (size_t)((int64_t)F * B + 1));
    for (int32_t f = 0; f < F; f++) {
        int32_t *inv = v->inv + (int64_t)f * B;
        for (int32_t b = 0; b < B; b++) inv[b] = b < bsz[f] ? b : (int32_t)rng_int(r, bsz[f]);
        for (int32_t b = B - 1; b > 0 && !((in_order >> f) & 1); b--) { // shuffled: readers anywhere
            const int32_t j = (int32_t)rng_int(r, b + 1), t = inv[b];
            inv[b] = inv[j];
            inv[j] = t;
        }
    }
    v->kjt_bags = (ember_kjt){.num_features = F, .batch_size = B, .lengths = v->lengths, .values = v->values,
                              .weights = v->weights, .nnz = nnz, .feature_batch_sizes = v->bsz};
    v->kjt = v->kjt_bags;
    v->kjt.inverse_indices = v->inv;
    // Expanded: sample b's bag of feature f is bag inv[f*B + b] of f, written out.
    int32_t *xl = malloc(sizeof(int32_t) * (size_t)((int64_t)F * B + 1));
    int64_t xn = 0, base = 0;
    for (int32_t f = 0; f < F; f++) {
        for (int32_t b = 0; b < B; b++) {
            xl[(int64_t)f * B + b] = v->lengths[base + v->inv[(int64_t)f * B + b]];
            xn += xl[(int64_t)f * B + b];
        }
        base += bsz[f];
    }
    int64_t *xv = malloc(sizeof(int64_t) * (size_t)(xn + 1));
    float *xw = weighted ? malloc(sizeof(float) * (size_t)(xn + 1)) : NULL;
    v->src = malloc(sizeof(int64_t) * (size_t)(xn + 1));
    int64_t n = 0;
    base = 0;
    for (int32_t f = 0; f < F; f++) {
        for (int32_t b = 0; b < B; b++) {
            const int64_t i = base + v->inv[(int64_t)f * B + b];
            for (int64_t j = start[i]; j < start[i + 1]; j++, n++) {
                xv[n] = v->values[j];
                if (weighted) xw[n] = v->weights[j];
                v->src[n] = j;
            }
        }
        base += bsz[f];
    }
    own_kjt(&v->expanded, F, B, xl, xv, xw);
    // Padded: Bp bags per feature, the missing ones empty; the ids in their order.
    int32_t *pl = malloc(sizeof(int32_t) * (size_t)((int64_t)F * v->Bp + 1));
    base = 0;
    for (int32_t f = 0; f < F; f++) {
        for (int32_t b = 0; b < v->Bp; b++) pl[(int64_t)f * v->Bp + b] = b < bsz[f] ? v->lengths[base + b] : 0;
        base += bsz[f];
    }
    int64_t *pv = malloc(sizeof(int64_t) * (size_t)(nnz + 1));
    memcpy(pv, v->values, sizeof(int64_t) * (size_t)nnz);
    float *pw = NULL;
    if (weighted) {
        pw = malloc(sizeof(float) * (size_t)(nnz + 1));
        memcpy(pw, v->weights, sizeof(float) * (size_t)nnz);
    }
    own_kjt(&v->padded, F, v->Bp, pl, pv, pw);
    free(start);
}

void gen_vbe_free(gen_vbe *v) {
    free(v->bsz);
    free(v->inv);
    free(v->lengths);
    free(v->values);
    free(v->weights);
    free(v->src);
    gen_kjt_free(&v->expanded);
    gen_kjt_free(&v->padded);
}

int64_t gen_global_batch(int W, int NF, const int32_t *B, const int32_t *const *len, const int64_t *const *ids,
                         int32_t *glen, int64_t *gids, int32_t *first) {
    int32_t G = 0;
    for (int q = 0; q < W; q++) {
        if (first) first[q] = G;
        G += B[q];
    }
    int64_t n = 0;
    for (int f = 0; f < NF; f++)
        for (int q = 0, q0 = 0; q < W; q0 += B[q], q++) {
            int64_t start = 0; // rank q's ids of its earlier features
            for (int j = 0; j < f * B[q]; j++) start += len[q][j];
            for (int s = 0; s < B[q]; s++) {
                const int32_t l = len[q][f * B[q] + s];
                glen[f * G + q0 + s] = l;
                memcpy(gids + n, ids[q] + start, sizeof(int64_t) * (size_t)l);
                n += l;
                start += l;
            }
        }
    return n;
}
