// rng.h — counter-based random numbers for the DLRM app.
//
// Every value is a pure function of (seed, stream, index): the synthetic data set and the dense
// initial weights are identical on every rank and for every world size, and any sample can be
// generated without generating the ones before it. The generator is splitmix64 (Steele, Lea and
// Flood, "Fast splittable pseudorandom number generators", 2014): a Weyl sequence through a
// 64-bit finaliser, which passes BigCrush and costs a few multiplies.
#ifndef EMBER_APP_RNG_H
#define EMBER_APP_RNG_H

#include <math.h>
#include <stdint.h>

#define RNG_GAMMA 0x9e3779b97f4a7c15ull

static inline uint64_t rng_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// A key from two words; rng_key(rng_key(a, b), c) chains more.
static inline uint64_t rng_key(uint64_t a, uint64_t b) { return rng_mix(rng_mix(a + RNG_GAMMA) ^ (b * RNG_GAMMA)); }

typedef struct rng {
    uint64_t state;
} rng;

static inline rng rng_at(uint64_t seed, uint64_t stream, uint64_t index) {
    rng r = {rng_key(rng_key(seed, stream), index)};
    return r;
}

static inline uint64_t rng_next(rng *r) {
    r->state += RNG_GAMMA;
    return rng_mix(r->state);
}

// Uniform in [0, 1) with 53 random bits.
static inline double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

// Standard normal (Box-Muller; one of the pair is dropped to keep draws independent of order).
static inline double rng_normal(rng *r) {
    double u1 = 1.0 - rng_uniform(r); // (0, 1]: log is finite
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
