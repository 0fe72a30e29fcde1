// digest.h — the hash of `ember train --digest`: FNV-1a over bytes, so that two builds that
// train the same numbers, bit for bit, print the same digest line.
#ifndef EMBER_APP_DIGEST_H
#define EMBER_APP_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define DIGEST_SEED 0xcbf29ce484222325ull

static inline uint64_t digest_fold(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
