// The lookups behind every enum's _name / _parse pair (EMBER__ENUM_NAMES), and the digests that
// let ranks compare what they were given.
#include <string.h>

#include "core/internal.h"

const char *ember__enum_name(const char *const *names, int n, int v) {
    return v >= 0 && v < n ? names[v] : "unknown";
}

ember_status ember__enum_parse(const char *const *names, int n, const char *name, int *out) {
    if (!name || !out) return EMBER_ERR_INVALID_ARG;
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = i;
            return EMBER_OK;
        }
    return EMBER_ERR_INVALID_ARG;
}

// 4 lanes of 8-byte words, a multiply-xor mix each, folded.
#define DIGEST_K 0x9e3779b97f4a7c15ull

uint64_t ember_digest(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h[4] = {1, 2, 3, 4 ^ (uint64_t)n};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h[(i >> 3) & 3] = (h[(i >> 3) & 3] ^ w) * DIGEST_K;
    }
    uint64_t tail = 0;
    for (size_t k = 0; i + k < n; k++) tail |= (uint64_t)b[i + k] << (8 * k);
    h[0] = (h[0] ^ tail ^ (1ull << 63)) * DIGEST_K;
    uint64_t d = h[0] ^ (h[1] >> 7) ^ (h[2] << 11) ^ (h[3] >> 29);
    d ^= d >> 31;
    return d * DIGEST_K;
}

uint64_t ember__str_digest(const char *s) { return s ? ember_digest(s, strlen(s)) : 0x5eedull; }
