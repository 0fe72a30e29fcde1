// ember/rng.h — the one random generator of the library, its CLI and its benchmarks.
//
// Counter-based, so a value is a pure function of (seed, stream, index): a table's initial
// weights do not depend on how it is sharded, a synthetic sample does not depend on the world
// size, and any value can be drawn without drawing the ones before it. The generator is
// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014): a
// Weyl sequence through a 64-bit finaliser; it passes BigCrush and costs a few multiplies.
// Header-only (static inline): nothing here is part of the library's ABI.
//
//   ember_rng r = ember_rng_at(seed, stream, index);   // an independent stream
//   double u = ember_rng_uniform(&r);                  // [0, 1), 53 bits
//   uint64_t h = ember_splitmix64(x);                  // one value of counter x
#ifndef EMBER_RNG_H
#define EMBER_RNG_H

#include <math.h>
#include <stdint.h>

#define EMBER_RNG_GAMMA 0x9e3779b97f4a7c15ull

// A function callable from CUDA device code as well as the host (the cuda backend's stochastic
// rounding draws the same bits as the host's): empty outside nvcc.
#ifdef __CUDACC__
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif

// splitmix64's output function (a bijection of 64-bit words with full avalanche).
static inline EMBER_HD uint64_t ember_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The value of counter x: ember_mix64(x + gamma).
static inline EMBER_HD uint64_t ember_splitmix64(uint64_t x) { return ember_mix64(x + EMBER_RNG_GAMMA); }

// A key from two words; ember_rng_key(ember_rng_key(a, b), c) chains more.
static inline uint64_t ember_rng_key(uint64_t a, uint64_t b) {
    return ember_mix64(ember_mix64(a + EMBER_RNG_GAMMA) ^ (b * EMBER_RNG_GAMMA));
}

// FNV-1a of a string: a key from a name (a table's initial values are seeded by its name).
static inline uint64_t ember_hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

typedef struct ember_rng {
    uint64_t state;
} ember_rng;

static inline ember_rng ember_rng_at(uint64_t seed, uint64_t stream, uint64_t index) {
    ember_rng r = {ember_rng_key(ember_rng_key(seed, stream), index)};
    return r;
}

static inline uint64_t ember_rng_next(ember_rng *r) {
    r->state += EMBER_RNG_GAMMA;
    return ember_mix64(r->state);
}

// Uniform in [0, 1) with 53 random bits.
static inline double ember_rng_uniform(ember_rng *r) { return (double)(ember_rng_next(r) >> 11) * 0x1.0p-53; }

// Standard normal (Box-Muller; one of the pair is dropped so draws do not depend on order).
static inline double ember_rng_normal(ember_rng *r) {
    double u1 = 1.0 - ember_rng_uniform(r); // (0, 1]: log is finite
    double u2 = ember_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
