// Seeded random inputs for tests: KJTs with empty bags, duplicate ids and weights.
#ifndef EMBER_TEST_GEN_H
#define EMBER_TEST_GEN_H

#include <stdint.h>

#include "ember.h"

typedef struct test_rng { uint64_t s; } test_rng;
uint64_t rng_next(test_rng *r);
double rng_uniform(test_rng *r);          // [0, 1)
int64_t rng_int(test_rng *r, int64_t n);  // [0, n)

// An owned KJT. lengths and offsets are both filled; use_offsets_only/lengths_only to test each.
typedef struct gen_kjt {
    ember_kjt kjt;
    int32_t *lengths;
    int64_t *offsets;
    int64_t *values;
    float *weights;
} gen_kjt;

// F features, batch B, feature f's ids in [0, rows[f]); bag lengths uniform in [0, max_len]
// (about one bag in five empty); with probability dup_p an id repeats an earlier id of the batch.
void gen_kjt_make(gen_kjt *g, test_rng *r, int32_t F, int32_t B, const int64_t *rows, int max_len, double dup_p,
                  int weighted);
void gen_kjt_free(gen_kjt *g);

// A KJT with variable batch size per feature (VBE, ember/kjt.h) and its equivalents written out
// by the test's own loops. F features, B samples; feature f has bsz[f] bags (lengths uniform in
// [0, max_len], about one in five empty, ids in [0, rows[f]) repeating earlier ids of the feature
// with probability dup_p, weights when asked); sample b of feature f reads bag inv[f*B + b]
// (every bag read by some sample, the rest uniform: 0 < bsz[f] <= B when B > 0; bit f of in_order:
// sample b reads bag b, bsz[f] = B).
//   kjt       VBE with inverse indices: its output is expanded's, [B, sum D]
//   kjt_bags  VBE without: its output is each feature's bags, [bsz[f], D_f] after one another
//   expanded  the ordinary KJT of B samples, each sample's bag copied; src[j] is the VBE position of
//             its id j (a VBE id's dL/dw is the sum over its copies)
//   padded    the ordinary KJT of max bsz samples: feature f's bags, then empty ones
typedef struct gen_vbe {
    int32_t F, B, Bp;        // Bp = max bsz
    int32_t *bsz, *inv, *lengths;
    int64_t *values;
    float *weights;
    ember_kjt kjt, kjt_bags;
    gen_kjt expanded, padded;
    int64_t *src;
} gen_vbe;
void gen_vbe_make(gen_vbe *v, test_rng *r, int32_t F, int32_t B, const int32_t *bsz, const int64_t *rows, int max_len,
                  double dup_p, int weighted, uint32_t in_order);
void gen_vbe_free(gen_vbe *v);

// The global batch one process trains on, from W ranks' local batches: rank q has B[q] samples,
// bag lengths len[q] ([NF * B[q]], feature-major) and ids ids[q] in bag order. Writes the
// concatenation feature-major, each feature's bags in rank order: glen [NF * sum B], gids; returns
// its nnz. first[q] (when not NULL) receives rank q's first global sample.
int64_t gen_global_batch(int W, int NF, const int32_t *B, const int32_t *const *len, const int64_t *const *ids,
                         int32_t *glen, int64_t *gids, int32_t *first);

#endif
