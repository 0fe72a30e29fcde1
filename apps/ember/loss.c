// BCE with logits and exact AUC.
#include <math.h>
#include <stdlib.h>

#include "loss.h"

// Samples per partial sum. The partial sums are added in chunk order, and the chunks depend only
// on n, so the total has the same bits for any thread count.
#define BCE_CHUNK 256
#define BCE_MAX_CHUNKS 64

double bce_with_logits(int32_t n, const float *logit, const float *label, float scale, float *dlogit) {
    int32_t chunk = BCE_CHUNK;
    if (n > chunk * BCE_MAX_CHUNKS) chunk = (n + BCE_MAX_CHUNKS - 1) / BCE_MAX_CHUNKS;
    const int32_t chunks = (n + chunk - 1) / chunk;
    double part[BCE_MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int32_t c = 0; c < chunks; c++) {
        const int32_t end = n - c * chunk < chunk ? n : (c + 1) * chunk;
        double sum = 0.0;
        for (int32_t i = c * chunk; i < end; i++) {
            double z = logit[i], y = label[i];
            sum += (z > 0.0 ? z : 0.0) - z * y + log1p(exp(-fabs(z)));
            if (dlogit) {
                // sigmoid without overflow for either sign of z.
                double p = z >= 0.0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
                dlogit[i] = (float)((double)scale * (p - y));
            }
        }
        part[c] = sum;
    }
    double sum = 0.0;
    for (int32_t c = 0; c < chunks; c++) sum += part[c];
    return sum;
}

static int by_score(const void *a, const void *b) {
    float x = ((const auc_pair *)a)->score, y = ((const auc_pair *)b)->score;
    return (x > y) - (x < y);
}

double auc_exact(int64_t n, const float *score, const float *label, auc_pair *scratch) {
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(score[i])) return NAN;
        scratch[i].score = score[i];
        scratch[i].label = label[i] > 0.5f ? 1.0f : 0.0f;
    }
    qsort(scratch, (size_t)n, sizeof *scratch, by_score);
    // Walk groups of equal score upwards: each positive in a group beats every negative below
    // the group and ties with the group's negatives (one half each).
    double wins = 0.0;
    int64_t neg_below = 0, pos = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i, p = 0, q = 0;
        for (; j < n && scratch[j].score == scratch[i].score; j++) {
            if (scratch[j].label > 0.5f) p++;
            else q++;
        }
        wins += (double)p * (double)neg_below + 0.5 * (double)p * (double)q;
        neg_below += q;
        pos += p;
        i = j;
    }
    if (pos == 0 || neg_below == 0) return NAN;
    return wins / ((double)pos * (double)neg_below);
}
