// Wire precision of the sharded collection's float exchanges: the output dist (pooled rows,
// owner -> home) and the gradient dist (their gradients, home -> owner) may travel as fp16 or
// bf16 (ember_sebc_set_wire_precision). Only the blocks that cross ranks are encoded: a rank's
// block for itself is copied in fp32, so one process (and the default, fp32, at any W) is
// bitwise what it was. Conversions are tbe/dtype.h's, round to nearest even, one rounding per
// value. A finite value that would round to infinity is refused before anything is sent: every
// rank returns EMBER_ERR_NUMERIC naming the feature, table, sample and value.
#include <math.h>
#include <string.h>

#include "shard/internal.h"
#include "core/dtype.h"

static int wire_dtype_ok(ember_dtype dt) {
    return dt == EMBER_DTYPE_F32 || dt == EMBER_DTYPE_F16 || dt == EMBER_DTYPE_BF16;
}

ember_status ember_sebc_set_wire_precision(ember_sebc *s, ember_dtype forward, ember_dtype backward) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_sebc_set_wire_precision";
    ember_status st = EMBER_OK;
    if (!wire_dtype_ok(forward) || !wire_dtype_ok(backward))
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "%s: %s precision %d is not fp32, fp16 or bf16", fn,
                          wire_dtype_ok(forward) ? "backward" : "forward",
                          (int)(wire_dtype_ok(forward) ? backward : forward));
    const ember_arg args[] = {EMBER__ARG_STR("forward precision", ember_dtype_name(forward)),
                              EMBER__ARG_STR("backward precision", ember_dtype_name(backward))};
    EMBER_TRY(ember_comm_agree_args(s->comm, st, fn, args, 2));
    s->wire_fwd = forward;
    s->wire_bwd = backward;
    return EMBER_OK;
}

void ember_sebc_wire_precision(const ember_sebc *s, ember_dtype *forward, ember_dtype *backward) {
    if (forward) *forward = s ? s->wire_fwd : EMBER_DTYPE_F32;
    if (backward) *backward = s ? s->wire_bwd : EMBER_DTYPE_F32;
}

void ember__wire_free(ember_sebc *s) {
    ember__buf_free(s->ctx, &s->wire_snd);
    ember__buf_free(s->ctx, &s->wire_rcv);
}

// A finite value that the encoding turned into an infinity (the 16-bit exponent all ones).
static inline int overflowed(ember_dtype dt, float x, uint16_t h) {
    const uint16_t e = dt == EMBER_DTYPE_F16 ? 0x7c00u : 0x7f80u;
    return (h & e) == e && (ember__f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

// The message of value i of the block for rank q (dir as ember__wire_exchange).
static ember_status overflow_error(ember_sebc *s, int dir, ember_dtype dt, int32_t q, int64_t i, float x) {
    const char *fn = dir == EMBER__WIRE_FWD ? "ember_sebc_forward" : "ember_sebc_backward";
    const char *what = dir == EMBER__WIRE_FWD ? "pooled value" : "gradient";
    const char *lim = dt == EMBER_DTYPE_F16 ? "65504" : "3.39e38";
    if (s->sequence)
        return ember__error(s->ctx, EMBER_ERR_NUMERIC,
                            "%s: %s %g (row %lld of the block for rank %d, column %lld) overflows %s on the wire "
                            "(largest finite %s); use bf16 or fp32 wire precision",
                            fn, what, (double)x, (long long)(i / s->out_dim), (int)q, (long long)(i % s->out_dim),
                            ember_dtype_name(dt), lim);
    // Forward: rank q's samples of this rank's routes; backward: this rank's samples of q's.
    const int32_t owner = dir == EMBER__WIRE_FWD ? s->rank : q, home = dir == EMBER__WIRE_FWD ? q : s->rank;
    const int32_t width = s->local_out_dim[owner];
    const int64_t b = i / width;
    const int32_t col = (int32_t)(i % width);
    const ember__route *r = &s->routes[owner][0];
    for (int32_t k = 0; k < s->nroutes[owner]; k++) {
        const ember__route *t = &s->routes[owner][k];
        if (t->local_col <= col && col < t->local_col + (t->shard->c1 - t->shard->c0)) r = t;
    }
    return ember__error(s->ctx, EMBER_ERR_NUMERIC,
                        "%s: %s %g of feature '%s' (table '%s', sample %lld of rank %d, column %d) overflows %s on the "
                        "wire (largest finite %s); use bf16 or fp32 wire precision",
                        fn, what, (double)x, s->feature_names[r->feature], s->table_names[r->table], (long long)b,
                        (int)home, (int)(r->shard->c0 + col - r->local_col), ember_dtype_name(dt), lim);
}

ember_status ember__wire_exchange(ember_sebc *s, int dir, const float *send, const int64_t *sc, float *recv,
                                  const int64_t *rc) {
    ember_comm *c = s->comm;
    const ember_dtype dt = dir == EMBER__WIRE_FWD ? s->wire_fwd : s->wire_bwd;
    if (dt == EMBER_DTYPE_F32 || s->W == 1) return ember__comm_alltoallv(c, send, sc, recv, rc, sizeof(float));
    const int32_t W = s->W, me = s->rank;
    // The 16-bit exchange's counts (s->cnt[2W, 4W) is free while the callers exchange): the
    // self block stays out of it.
    int64_t *sc16 = s->cnt + 2 * W, *rc16 = s->cnt + 3 * W;
    int64_t ns = 0, nr = 0;
    for (int32_t q = 0; q < W; q++) {
        sc16[q] = q == me ? 0 : sc[q];
        rc16[q] = q == me ? 0 : rc[q];
        ns += sc16[q];
        nr += rc16[q];
    }
    uint16_t *snd = ember__buf_reserve(s->ctx, &s->wire_snd, sizeof(uint16_t) * (size_t)(ns > 0 ? ns : 1));
    uint16_t *rcv = ember__buf_reserve(s->ctx, &s->wire_rcv, sizeof(uint16_t) * (size_t)(nr > 0 ? nr : 1));
    ember_status st = snd && rcv ? EMBER_OK : EMBER_ERR_NOMEM;
    if (st == EMBER_OK) {
        int64_t in = 0, out = 0;
        for (int32_t q = 0; q < W; q++) {
            const int64_t n = sc[q];
            if (q != me) {
                const float *x = send + in;
                uint16_t *h = snd + out;
                int bad = 0;
                // One loop per format, so that each inlines (and may vectorise) its conversion.
                if (dt == EMBER_DTYPE_F16) {
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(ember__threads(s->ctx))
                    for (int64_t i = 0; i < n; i++) {
                        h[i] = ember__f32_to_f16(x[i]);
                        bad |= overflowed(EMBER_DTYPE_F16, x[i], h[i]);
                    }
                } else {
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(ember__threads(s->ctx))
                    for (int64_t i = 0; i < n; i++) {
                        h[i] = ember__f32_to_bf16(x[i]);
                        bad |= overflowed(EMBER_DTYPE_BF16, x[i], h[i]);
                    }
                }
                if (bad) {
                    int64_t i = 0;
                    while (!overflowed(dt, x[i], h[i])) i++;
                    st = overflow_error(s, dir, dt, q, i, x[i]);
                    break;
                }
                out += n;
            }
            in += n;
        }
    }
    // Every rank learns of an overflow (or a failed allocation) before anything is sent.
    EMBER_TRY(ember_comm_agree(c, st));
    EMBER_TRY(ember__comm_alltoallv(c, snd, sc16, rcv, rc16, sizeof(uint16_t)));
    int64_t in = 0, self = 0, at = 0;
    for (int32_t q = 0; q < me; q++) self += sc[q];
    for (int32_t q = 0; q < W; q++) {
        const int64_t n = rc[q];
        float *y = recv + at;
        if (q == me) {
            memcpy(y, send + self, sizeof(float) * (size_t)n);
        } else {
            const uint16_t *h = rcv + in;
            if (dt == EMBER_DTYPE_F16) {
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
                for (int64_t i = 0; i < n; i++) y[i] = ember__f16_to_f32(h[i]);
            } else {
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
                for (int64_t i = 0; i < n; i++) y[i] = ember__bf16_to_f32(h[i]);
            }
            in += n;
        }
        at += n;
    }
    return EMBER_OK;
}
