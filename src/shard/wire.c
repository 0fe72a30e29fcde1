// Wire precision of the sharded collection's float exchanges: the output dist (pooled rows,
// owner -> home) and the gradient dist (their gradients, home -> owner) may travel as fp16, bf16,
// fp8 (E4M3, E5M2) or row-wise int8 (ember_sebc_set_wire_precision). Only the blocks that cross
// ranks are encoded: a rank's block for itself is copied in fp32, so one process (and the
// default, fp32, at any W) is bitwise what it was. The float formats round each value once to
// nearest even (tbe/dtype.h's conversions), after multiplying it by the direction's loss scale
// (divided out again on arrival). int8 quantizes each row piece (one route's columns of one
// sample, or one sequence row) by the quantized tables' rule (quant/internal.h: FBGEMM's fused
// 8-bit rows). A value the format cannot carry (a finite value that overflows a float format; a
// non-finite one in int8) is refused before anything is sent: every rank returns
// EMBER_ERR_NUMERIC naming the feature, table, sample and value.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "shard/internal.h"
#include "core/dtype.h"
#include "quant/internal.h"

ember_status ember_sebc_set_wire_precision(ember_sebc *s, ember_dtype forward, ember_dtype backward) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_sebc_set_wire_precision";
    ember_status st = EMBER_OK;
    if (!ember_dtype_is_wire(forward) || !ember_dtype_is_wire(backward))
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG,
                          "%s: %s precision %d is not fp32, fp16, bf16, int8, fp8_e4m3 or fp8_e5m2", fn,
                          ember_dtype_is_wire(forward) ? "backward" : "forward",
                          (int)(ember_dtype_is_wire(forward) ? backward : forward));
    const ember_arg args[] = {EMBER__ARG_STR("forward precision", ember_dtype_name(forward)),
                              EMBER__ARG_STR("backward precision", ember_dtype_name(backward))};
    EMBER_TRY(ember_comm_agree_args(s->world, st, fn, args, 2)); // 2D: every group alike
    s->wire_fwd = forward;
    s->wire_bwd = backward;
    return EMBER_OK;
}

void ember_sebc_wire_precision(const ember_sebc *s, ember_dtype *forward, ember_dtype *backward) {
    if (forward) *forward = s ? s->wire_fwd : EMBER_DTYPE_F32;
    if (backward) *backward = s ? s->wire_bwd : EMBER_DTYPE_F32;
}

ember_status ember_sebc_set_wire_loss_scale(ember_sebc *s, float forward, float backward) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_sebc_set_wire_loss_scale";
    ember_status st = EMBER_OK;
    const int fok = isfinite(forward) && forward > 0.0f, bok = isfinite(backward) && backward > 0.0f;
    if (!fok || !bok)
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "%s: %s loss scale %g is not a positive finite number", fn,
                          fok ? "backward" : "forward", (double)(fok ? backward : forward));
    // Compared as text: "%.9g" round-trips every float.
    char ftext[32], btext[32];
    snprintf(ftext, sizeof ftext, "%.9g", (double)forward);
    snprintf(btext, sizeof btext, "%.9g", (double)backward);
    const ember_arg args[] = {{.name = "forward loss scale", .text = ftext}, {.name = "backward loss scale", .text = btext}};
    EMBER_TRY(ember_comm_agree_args(s->world, st, fn, args, 2)); // 2D: every group alike
    s->wire_scale_fwd = forward;
    s->wire_scale_bwd = backward;
    return EMBER_OK;
}

void ember_sebc_wire_loss_scale(const ember_sebc *s, float *forward, float *backward) {
    if (forward) *forward = s ? s->wire_scale_fwd : 1.0f;
    if (backward) *backward = s ? s->wire_scale_bwd : 1.0f;
}

void ember__wire_free(ember_sebc *s) {
    ember__buf_free(s->ctx, &s->wire_snd);
    ember__buf_free(s->ctx, &s->wire_rcv);
    ember__buf_free(s->ctx, &s->wire_cnt);
}

// ---- the layout of a block: rows of owner o's pieces -------------------------------------------
//
// A pooled block holds rows of local_out_dim[o] values, route k of owner o at columns
// [local_col, local_col + width); a sequence block, rows of out_dim values, one piece each.

static int32_t row_width(const ember_sebc *s, int32_t o) { return s->sequence ? s->out_dim : s->local_out_dim[o]; }
static int32_t row_pieces(const ember_sebc *s, int32_t o) { return s->sequence ? 1 : s->nroutes[o]; }
static int32_t piece_col(const ember_sebc *s, int32_t o, int32_t k) { return s->sequence ? 0 : s->routes[o][k].local_col; }
static int32_t piece_width(const ember_sebc *s, int32_t o, int32_t k) {
    return s->sequence ? s->out_dim : s->routes[o][k].shard->c1 - s->routes[o][k].shard->c0;
}

// Bytes on the wire of a block of n values laid out as owner o's rows.
static int64_t wire_bytes(const ember_sebc *s, ember_dtype dt, int32_t o, int64_t n) {
    if (dt != EMBER_DTYPE_I8) return n * (int64_t)ember_dtype_size(dt);
    const int32_t w = row_width(s, o);
    return w > 0 ? n / w * (w + 8 * (int64_t)row_pieces(s, o)) : 0;
}

// ---- encoding ---------------------------------------------------------------------------------

// A finite value that a 16-bit encoding turned into an infinity (the exponent all ones).
static inline int overflowed16(ember_dtype dt, float x, uint16_t h) {
    const uint16_t e = dt == EMBER_DTYPE_F16 ? 0x7c00u : 0x7f80u;
    return (h & e) == e && (ember__f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

// Whether value x (times the loss scale) can travel as dt: one encoding, tested as encoded.
static int refused(ember_dtype dt, float x) {
    switch (dt) {
    case EMBER_DTYPE_F16: return overflowed16(dt, x, ember__f32_to_f16(x));
    case EMBER_DTYPE_BF16: return overflowed16(dt, x, ember__f32_to_bf16(x));
    case EMBER_DTYPE_FP8_E4M3: return ember__fp8_overflowed(x, ember__f32_to_fp8(x, 0), 0);
    case EMBER_DTYPE_FP8_E5M2: return ember__fp8_overflowed(x, ember__f32_to_fp8(x, 1), 1);
    default: return !isfinite(x); // int8
    }
}

// Encodes the n values at x (owner o's rows) into dst. Returns the index of the first value the
// format cannot carry, or -1. One loop per format, so that each inlines its conversion.
static int64_t encode_block(const ember_sebc *s, ember_dtype dt, float scale, int32_t o, const float *x, int64_t n,
                            unsigned char *dst) {
    const int nt = ember__threads(s->ctx);
    int bad = 0;
    if (dt == EMBER_DTYPE_F16 || dt == EMBER_DTYPE_BF16) {
        uint16_t *h = (uint16_t *)dst; // every block before this one has an even byte count
        if (dt == EMBER_DTYPE_F16) {
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(nt)
            for (int64_t i = 0; i < n; i++) {
                const float v = x[i] * scale;
                h[i] = ember__f32_to_f16(v);
                bad |= overflowed16(EMBER_DTYPE_F16, v, h[i]);
            }
        } else {
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(nt)
            for (int64_t i = 0; i < n; i++) {
                const float v = x[i] * scale;
                h[i] = ember__f32_to_bf16(v);
                bad |= overflowed16(EMBER_DTYPE_BF16, v, h[i]);
            }
        }
    } else if (dt == EMBER_DTYPE_FP8_E4M3 || dt == EMBER_DTYPE_FP8_E5M2) {
        const int e5m2 = dt == EMBER_DTYPE_FP8_E5M2;
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(nt)
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i] * scale;
            dst[i] = ember__f32_to_fp8(v, e5m2);
            bad |= ember__fp8_overflowed(v, dst[i], e5m2);
        }
    } else {
        const int32_t w = row_width(s, o), np = row_pieces(s, o);
        const int64_t rows = w > 0 ? n / w : 0, rb = w + 8 * (int64_t)np;
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(nt)
        for (int64_t r = 0; r < rows; r++) {
            unsigned char *d = dst + r * rb;
            for (int32_t k = 0; k < np; k++) {
                const int32_t pw = piece_width(s, o, k);
                const float *p = x + r * w + piece_col(s, o, k);
                int fin = 1;
                for (int32_t j = 0; j < pw; j++) fin &= isfinite(p[j]) != 0;
                if (fin) ember__quantize_row(EMBER_QTYPE_INT8, pw, p, d);
                bad |= !fin;
                d += pw + 8;
            }
        }
    }
    if (!bad) return -1;
    int64_t i = 0;
    while (!refused(dt, dt == EMBER_DTYPE_I8 ? x[i] : x[i] * scale)) i++;
    return i;
}

// Decodes a block of n values (owner o's rows) from src into y.
static void decode_block(const ember_sebc *s, ember_dtype dt, float scale, int32_t o, const unsigned char *src,
                         int64_t n, float *y) {
    const int nt = ember__threads(s->ctx);
    if (dt == EMBER_DTYPE_F16 || dt == EMBER_DTYPE_BF16) {
        const uint16_t *h = (const uint16_t *)src;
        if (dt == EMBER_DTYPE_F16) {
#pragma omp parallel for schedule(static) num_threads(nt)
            for (int64_t i = 0; i < n; i++) y[i] = ember__f16_to_f32(h[i]) / scale;
        } else {
#pragma omp parallel for schedule(static) num_threads(nt)
            for (int64_t i = 0; i < n; i++) y[i] = ember__bf16_to_f32(h[i]) / scale;
        }
    } else if (dt == EMBER_DTYPE_FP8_E4M3 || dt == EMBER_DTYPE_FP8_E5M2) {
        const int e5m2 = dt == EMBER_DTYPE_FP8_E5M2;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t i = 0; i < n; i++) y[i] = ember__fp8_to_f32(src[i], e5m2) / scale;
    } else {
        const int32_t w = row_width(s, o), np = row_pieces(s, o);
        const int64_t rows = w > 0 ? n / w : 0, rb = w + 8 * (int64_t)np;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t r = 0; r < rows; r++) {
            const unsigned char *d = src + r * rb;
            for (int32_t k = 0; k < np; k++) {
                const int32_t pw = piece_width(s, o, k);
                ember__dequantize_row(EMBER_QTYPE_INT8, pw, d, y + r * w + piece_col(s, o, k));
                d += pw + 8;
            }
        }
    }
}

// The message of value i of the block for rank q (dir as ember__wire_exchange).
static ember_status refusal(ember_sebc *s, int dir, ember_dtype dt, float scale, int32_t q, int64_t i, float x) {
    const char *fn = dir == EMBER__WIRE_FWD ? "ember_sebc_forward" : "ember_sebc_backward";
    const char *what = dir == EMBER__WIRE_FWD ? "pooled value" : "gradient";
    char why[200];
    if (dt == EMBER_DTYPE_I8) {
        snprintf(why, sizeof why, "is not finite: int8 on the wire carries finite values only; use a float wire precision");
    } else {
        const char *lim = dt == EMBER_DTYPE_F16        ? "65504"
                          : dt == EMBER_DTYPE_BF16     ? "3.39e38"
                          : dt == EMBER_DTYPE_FP8_E4M3 ? "448"
                                                       : "57344";
        const char *fix = dt == EMBER_DTYPE_F16    ? "use bf16 or fp32 wire precision"
                          : dt == EMBER_DTYPE_BF16 ? "use fp32 wire precision"
                                                   : "lower the wire loss scale or use a wider wire precision";
        if (scale != 1.0f)
            snprintf(why, sizeof why,
                     "times the loss scale %g overflows %s on the wire (largest finite %s); lower the wire loss scale "
                     "or use a wider wire precision",
                     (double)scale, ember_dtype_name(dt), lim);
        else
            snprintf(why, sizeof why, "overflows %s on the wire (largest finite %s); %s", ember_dtype_name(dt), lim, fix);
    }
    if (s->sequence)
        return ember__error(s->ctx, EMBER_ERR_NUMERIC, "%s: %s %g (row %lld of the block for rank %d, column %lld) %s",
                            fn, what, (double)x, (long long)(i / s->out_dim), (int)q, (long long)(i % s->out_dim), why);
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
                        "%s: %s %g of feature '%s' (table '%s', sample %lld of rank %d, column %d) %s", fn, what,
                        (double)x, s->feature_names[r->feature], s->table_names[r->table], (long long)b, (int)home,
                        (int)(r->shard->c0 + col - r->local_col), why);
}

ember_status ember__wire_start(ember_sebc *s, int dir, const float *send, const int64_t *sc, float *recv,
                               const int64_t *rc, ember__req *req) {
    ember_comm *c = s->comm;
    const ember_dtype dt = dir == EMBER__WIRE_FWD ? s->wire_fwd : s->wire_bwd;
    const int32_t W = s->W, me = s->rank;
    s->wire_inflight = W == 1 ? EMBER_DTYPE_F32 : dt;
    if (s->wire_inflight == EMBER_DTYPE_F32) return ember__comm_ialltoallv(c, send, sc, recv, rc, sizeof(float), req);
    const float scale = dt == EMBER_DTYPE_I8 ? 1.0f : dir == EMBER__WIRE_FWD ? s->wire_scale_fwd : s->wire_scale_bwd;
    s->wire_inflight_scale = scale;
    s->wire_inflight_dir = dir;
    // The encoded exchange's byte counts, and what the finish decodes (the float counts it
    // receives, then the bytes): the self block stays out of it. A block is laid out by its
    // owner's routes: forward, the sender's for what this rank sends and rank q's for what it
    // receives; backward, the other way round.
    int64_t *cnt = ember__buf_reserve(s->ctx, &s->wire_cnt, sizeof(int64_t) * 3 * (size_t)W);
    ember_status st = cnt ? EMBER_OK : EMBER_ERR_NOMEM;
    int64_t ns = 0, nr = 0;
    for (int32_t q = 0; cnt && q < W; q++) {
        cnt[q] = rc[q];
        cnt[W + q] = q == me ? 0 : wire_bytes(s, dt, dir == EMBER__WIRE_FWD ? q : me, rc[q]);
        cnt[2 * W + q] = q == me ? 0 : wire_bytes(s, dt, dir == EMBER__WIRE_FWD ? me : q, sc[q]);
        nr += cnt[W + q];
        ns += cnt[2 * W + q];
    }
    unsigned char *snd = cnt ? ember__buf_reserve(s->ctx, &s->wire_snd, (size_t)(ns > 0 ? ns : 1)) : NULL;
    unsigned char *rcv = cnt ? ember__buf_reserve(s->ctx, &s->wire_rcv, (size_t)(nr > 0 ? nr : 1)) : NULL;
    if (!snd || !rcv) st = EMBER_ERR_NOMEM;
    for (int64_t q = 0, in = 0, out = 0; st == EMBER_OK && q < W; in += sc[q], q++) {
        if (q == me) continue;
        const int64_t bad = encode_block(s, dt, scale, dir == EMBER__WIRE_FWD ? me : (int32_t)q, send + in, sc[q], snd + out);
        if (bad >= 0) st = refusal(s, dir, dt, scale, (int32_t)q, bad, send[in + bad]);
        out += cnt[2 * W + q];
    }
    // Every rank learns of a refusal (or a failed allocation) before anything is sent.
    EMBER_TRY(ember_comm_agree(c, st));
    int64_t self = 0, at = 0;
    for (int32_t q = 0; q < me; q++) self += sc[q], at += rc[q];
    memcpy(recv + at, send + self, sizeof(float) * (size_t)rc[me]);
    return ember__comm_ialltoallv(c, snd, cnt + 2 * W, rcv, cnt + W, 1, req);
}

ember_status ember__wire_finish(ember_sebc *s, float *recv, ember__req *req) {
    EMBER_TRY(ember__comm_wait(s->comm, req));
    if (s->wire_inflight == EMBER_DTYPE_F32) return EMBER_OK;
    const int32_t W = s->W, me = s->rank, dir = s->wire_inflight_dir;
    const int64_t *rc = s->wire_cnt.p, *rb = rc + W;
    int64_t in = 0, at = 0;
    for (int32_t q = 0; q < W; q++) {
        if (q != me)
            decode_block(s, s->wire_inflight, s->wire_inflight_scale, dir == EMBER__WIRE_FWD ? q : me,
                         (const unsigned char *)s->wire_rcv.p + in, rc[q], recv + at);
        in += rb[q];
        at += rc[q];
    }
    return EMBER_OK;
}

ember_status ember__wire_exchange(ember_sebc *s, int dir, const float *send, const int64_t *sc, float *recv,
                                  const int64_t *rc) {
    const ember_dtype dt = dir == EMBER__WIRE_FWD ? s->wire_fwd : s->wire_bwd;
    if (dt == EMBER_DTYPE_F32 || s->W == 1) return ember__comm_alltoallv(s->comm, send, sc, recv, rc, sizeof(float));
    ember__req req = {0};
    ember_status st = ember__wire_start(s, dir, send, sc, recv, rc, &req);
    if (st == EMBER_OK) st = ember__wire_finish(s, recv, &req);
    ember__comm_req_free(s->comm, &req);
    return st;
}
