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
