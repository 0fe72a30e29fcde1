// Naive reference for the quantized inference tables (tests/support/quant_oracle.h).
#include "quant_oracle.h"

#include <math.h>
#include <string.h>

double qoracle_half(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0) return s * ldexp((double)m, -24);
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * ldexp(1024.0 + m, e - 25);
}

size_t qoracle_row_bytes(ember_qtype t, int32_t dim) {
    switch (t) {
    case EMBER_QTYPE_FP32: return 4 * (size_t)dim;
    case EMBER_QTYPE_FP16: return 2 * (size_t)dim;
    case EMBER_QTYPE_INT8: return (size_t)dim + 8;
    case EMBER_QTYPE_INT4: return ((size_t)dim + 1) / 2 + 4;
    case EMBER_QTYPE_INT2: return ((size_t)dim + 3) / 4 + 4;
    }
    return 0;
}

void qoracle_decode(ember_qtype t, int32_t dim, const unsigned char *row, double *out, double *scale, double *mag) {
    *scale = 0.0;
    if (t == EMBER_QTYPE_FP32) {
        for (int32_t d = 0; d < dim; d++) {
            float x;
            memcpy(&x, row + 4 * d, 4);
            out[d] = x;
            if (mag) mag[d] = fabs(x);
        }
        return;
    }
    if (t == EMBER_QTYPE_FP16) {
        for (int32_t d = 0; d < dim; d++) {
            out[d] = qoracle_half((uint16_t)(row[2 * d] | row[2 * d + 1] << 8));
            if (mag) mag[d] = fabs(out[d]);
        }
        return;
    }
    double s, b;
    if (t == EMBER_QTYPE_INT8) {
        float fs, fb;
        memcpy(&fs, row + dim, 4);
        memcpy(&fb, row + dim + 4, 4);
        s = fs, b = fb;
        for (int32_t d = 0; d < dim; d++) {
            out[d] = s * row[d] + b;
            if (mag) mag[d] = fabs(s * row[d]) + fabs(b);
        }
    } else {
        const int bits = t == EMBER_QTYPE_INT4 ? 4 : 2, per = 8 / bits;
        const unsigned char *sb = row + (dim + per - 1) / per;
        s = qoracle_half((uint16_t)(sb[0] | sb[1] << 8));
        b = qoracle_half((uint16_t)(sb[2] | sb[3] << 8));
        for (int32_t d = 0; d < dim; d++) {
            const int q = (row[d / per] >> (bits * (d % per))) & ((1 << bits) - 1);
            out[d] = s * q + b;
            if (mag) mag[d] = fabs(s * q) + fabs(b);
        }
    }
    *scale = s;
}

// The row id reads, or -1.
static int64_t row_of(const qoracle_table *t, int64_t id, ember_bounds_mode bounds) {
    if (t->kind == EMBER_QREMAP_HASH) {
        for (int64_t i = 0; i < t->n; i++)
            if (t->ids[i] == id) return t->map_rows[i];
        return -1;
    }
    const int64_t space = t->kind == EMBER_QREMAP_ARRAY ? t->num_embeddings : t->rows;
    if (id < 0 || id >= space) {
        if (bounds == EMBER_BOUNDS_SKIP) return -1;
        id = id < 0 ? 0 : space - 1;
    }
    if (t->kind == EMBER_QREMAP_NONE) return id;
    for (int64_t i = 0; i < t->n; i++)
        if (t->ids[i] == id) return t->map_rows[i];
    return -1;
}

void qoracle_forward(const qoracle_table *tables, const int32_t *ftab, int32_t F, ember_bounds_mode bounds,
                     const ember_kjt *kjt, double *out, double *mag) {
    const int32_t B = kjt->batch_size;
    int32_t out_dim = 0;
    for (int32_t f = 0; f < F; f++) out_dim += tables[ftab[f]].dim;
    memset(out, 0, sizeof(double) * (size_t)B * (size_t)out_dim);
    if (mag) memset(mag, 0, sizeof(double) * (size_t)B * (size_t)out_dim);
    int64_t pos = 0;
    int32_t col = 0;
    double v[4096], vm[4096], s;
    for (int32_t f = 0; f < F; f++) {
        const qoracle_table *t = &tables[ftab[f]];
        const size_t rb = qoracle_row_bytes(t->qtype, t->dim);
        for (int32_t b = 0; b < B; b++) {
            const int64_t bag = (int64_t)f * B + b;
            const int64_t n = kjt->lengths ? kjt->lengths[bag] : kjt->offsets[bag + 1] - kjt->offsets[bag];
            double *o = out + (size_t)b * out_dim + col, *m = mag ? mag + (size_t)b * out_dim + col : NULL;
            int64_t kept = 0;
            for (int64_t j = pos; j < pos + n; j++) {
                const int64_t r = row_of(t, kjt->values[j], bounds);
                if (r < 0) continue;
                kept++;
                qoracle_decode(t->qtype, t->dim, t->data + (size_t)r * rb, v, &s, vm);
                const double w = kjt->weights ? kjt->weights[j] : 1.0;
                for (int32_t d = 0; d < t->dim; d++) {
                    o[d] += w * v[d];
                    if (m) m[d] += fabs(w) * vm[d];
                }
            }
            if (t->pooling == EMBER_POOL_MEAN && kept > 0)
                for (int32_t d = 0; d < t->dim; d++) {
                    o[d] /= (double)kept;
                    if (m) m[d] /= (double)kept;
                }
            pos += n;
        }
        col += t->dim;
    }
}
