// Small helpers shared by the LFQ unit and MPI tests: seeded data and the mapping of a module's
// resolved configuration onto the oracle's.
#ifndef EMBER_TEST_LFQ_UTIL_H
#define EMBER_TEST_LFQ_UTIL_H

#include <stdint.h>

#include "ember/lfq.h"
#include "lfq_oracle.h"

// Deterministic uniform values in [lo, hi) (splitmix64), independent of the library's stream.
static inline void lfq_fill_uniform(double *a, int64_t n, uint64_t seed, double lo, double hi) {
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        a[i] = lo + (hi - lo) * (double)(z >> 11) * 0x1.0p-53;
    }
}

static inline lfq_ref_config lfq_ref_from(const ember_lfq_config *c, int32_t D) {
    lfq_ref_config r;
    r.dim = c->dim;
    r.C = c->num_codebooks;
    r.D = D;
    r.scale = c->codebook_scale;
    r.w_e = c->entropy_loss_weight;
    r.w_c = c->commitment_loss_weight;
    r.gamma = c->diversity_gamma;
    r.tau = c->inv_temperature;
    r.clamp = c->soft_clamp_input_value;
    r.offset = c->entropy_loss_offset;
    r.proj = c->projection == EMBER_LFQ_PROJ_LINEAR;
    r.bias = r.proj && c->projection_has_bias;
    r.spherical = c->spherical;
    r.softplus = c->softplus_entropy_loss;
    r.mean_tokens = c->dist_mean == EMBER_LFQ_MEAN_TOKENS;
    return r;
}

#endif
