// LFQ kernels, written once over a scalar type. kernels.c includes this file twice with
//   real       float | double
//   SFX        f32   | f64
//   ALLREDUCE  ember_comm_allreduce_sum_f32 | _f64
// No include guard on purpose. Inputs are validated by lfq.c before any kernel runs.
//
// The maths (include/ember/lfq.h has the definitions; docs/lfq.md the derivations):
//
// Flip space. The codebook is the sign hypercube, so the logit of code k for a token's codebook
// vector z is l_k = 2 tau s' sum_j sign_kj z_j. Its maximum is reached at the token's own code
// `idx` (the sign pattern of z), and every other code k differs from it by the set of flipped
// components f = k XOR idx:   l_k - l_idx = -sum_{j in f} a_j,   a_j = 4 tau s' |z_j|.
// Working with delta(f) = -sum_{j in f} a_j avoids the cancellation of l_k - max_k l_k (all
// terms are non-positive), and the partition function factorises exactly:
//   Z = sum_f exp(delta(f)) = prod_j (1 + exp(-a_j)),   log p_k = delta(k ^ idx) - log Z.
// The clamped entropy does not factorise (the clamp acts on each of the K probabilities), nor
// does the batch mixture pbar, so both still visit all K codes: O(K) per token and codebook.

#define CAT2_(a, b) a##_##b
#define CAT2(a, b) CAT2_(a, b)
#define FN(name) CAT2(name, SFX)

// |codebook entry| s' = s, or s / sqrt(D) on the sphere (q = s q / ||q|| with q = ±s).
static real FN(corner)(const ember_lfq *q) {
    const real s = (real)q->cfg.codebook_scale;
    return q->cfg.spherical ? s / sqrt((real)q->D) : s;
}

// y[t, o] = b[o] + sum_i x[t, i] W[o, i]   (torch.nn.Linear; b may be NULL).
static void FN(linear)(const real *x, int64_t T, int32_t in, int32_t out, const real *W, const real *b, real *y) {
    for (int64_t t = 0; t < T; t++) {
        const real *xt = x + t * in;
        real *yt = y + t * out;
        for (int32_t o = 0; o < out; o++) {
            const real *w = W + (int64_t)o * in;
            real acc = 0;
            for (int32_t i = 0; i < in; i++) acc += xt[i] * w[i];
            yt[o] = b ? acc + b[o] : acc;
        }
    }
}

// Backward of linear for dy [T, out]:
//   dx[t, i] = sum_o dy[t, o] W[o, i]   (overwritten; skipped when dx is NULL)
//   dW[o, i] += sum_t dy[t, o] x[t, i],   db[o] += sum_t dy[t, o]   (db may be NULL)
static void FN(linear_backward)(const real *x, const real *dy, int64_t T, int32_t in, int32_t out, const real *W,
                                real *dx, real *dW, real *db) {
    for (int64_t t = 0; t < T; t++) {
        const real *xt = x + t * in, *dyt = dy + t * out;
        if (dx) {
            real *dxt = dx + t * in;
            for (int32_t i = 0; i < in; i++) dxt[i] = 0;
            for (int32_t o = 0; o < out; o++) {
                const real *w = W + (int64_t)o * in;
                for (int32_t i = 0; i < in; i++) dxt[i] += dyt[o] * w[i];
            }
        }
        for (int32_t o = 0; o < out; o++) {
            real *dw = dW + (int64_t)o * in;
            for (int32_t i = 0; i < in; i++) dw[i] += dyt[o] * xt[i];
            if (db) db[o] += dyt[o];
        }
    }
}

// Fills delta[f] for the K = 2^D flip sets of codebook vector zc[D] (component j is bit D-1-j
// of f, as of the code index), and returns log Z. *idx receives the token's code.
static real FN(flip_logits)(const real *zc, int32_t D, real a_scale, real *delta, int64_t *idx) {
    int64_t code = 0;
    real log_z = 0;
    delta[0] = 0;
    // Doubling, most significant component first: each prefix i splits into 2i (component j
    // kept) and 2i + 1 (flipped, logit lower by a_j). Descending i keeps the reads ahead of
    // the writes.
    for (int32_t j = 0; j < D; j++) {
        real a = a_scale * fabs(zc[j]);
        code = (code << 1) | (zc[j] > 0);
        log_z += log1p(exp(-a));
        for (int64_t i = ((int64_t)1 << j) - 1; i >= 0; i--) {
            delta[2 * i + 1] = delta[i] - a;
            delta[2 * i] = delta[i];
        }
    }
    *idx = code;
    return log_z;
}

// H_eps(p) for one token and codebook; adds p to psum_c[K] (indexed by code k = f ^ idx).
static real FN(token_entropy)(const real *zc, int32_t D, real a_scale, real *delta, real *psum_c) {
    const int64_t K = (int64_t)1 << D;
    const real eps = (real)LFQ_ENTROPY_EPS, log_eps = log((real)LFQ_ENTROPY_EPS);
    int64_t idx;
    real log_z = FN(flip_logits)(zc, D, a_scale, delta, &idx);
    real h = 0;
    for (int64_t f = 0; f < K; f++) {
        real lp = delta[f] - log_z, p = exp(lp);
        h -= p * (p >= eps ? lp : log_eps);
        psum_c[f ^ idx] += p;
    }
    return h;
}

// Adds the entropy terms' dJ/dz for one token and codebook to dzc[D].
//   dJ/dp_k = w_pse * H_eps'(p_k) + u_c[k],  H_eps'(p) = -log p - 1 (p >= eps), -log eps (p < eps)
// (w_pse = dJ/dPSE / (|E| C); u_c = dJ/dpbar_c * dpbar_c/dp_t, already reduced over ranks).
// Softmax: dJ/dl_k = p_k (dp_k - sum_g p_g dp_g). With f = 0 the token's own code (p_0 close to 1
// at high tau) the difference is formed against dp_0, which keeps it accurate in float:
//   dJ/dl(f) = p_f (Delta_f - S),  Delta_f = dp_f - dp_0,  S = sum_g p_g Delta_g   (sum_g p_g = 1).
// Then dJ/dz_j = 2 tau s' sum_k sign_kj dJ/dl_k, sign_kj = sigma_j (1 - 2 [j in f]), sigma_j the
// sign of z_j: a butterfly that folds the least significant component first.
static void FN(token_entropy_backward)(const real *zc, int32_t D, real a_scale, real l_scale, real w_pse,
                                       const real *u_c, real *kbuf, real *dzc) {
    const int64_t K = (int64_t)1 << D;
    const real eps = (real)LFQ_ENTROPY_EPS, log_eps = log((real)LFQ_ENTROPY_EPS);
    real *delta = kbuf, *g = kbuf + K;
    int64_t idx;
    real log_z = FN(flip_logits)(zc, D, a_scale, delta, &idx);
    real dp0 = 0, s = 0;
    for (int64_t f = 0; f < K; f++) {
        real lp = delta[f] - log_z, p = exp(lp);
        real dp = w_pse * (p >= eps ? -lp - 1 : -log_eps) + u_c[f ^ idx];
        if (f == 0) dp0 = dp;
        g[f] = p;
        delta[f] = dp - dp0; // Delta_f (0 for f = 0)
        s += p * delta[f];
    }
    for (int64_t f = 0; f < K; f++) g[f] *= delta[f] - s;
    for (int32_t j = D - 1; j >= 0; j--) {
        int64_t half = (int64_t)1 << j;
        real acc = 0;
        for (int64_t i = 0; i < half; i++) {
            acc += g[2 * i] - g[2 * i + 1];
            g[i] = g[2 * i] + g[2 * i + 1];
        }
        dzc[j] += l_scale * (zc[j] > 0 ? acc : -acc);
    }
}

// H_eps of a distribution p[K] (double accumulator: loss scalars are reported as double).
static double FN(entropy)(const real *p, int64_t K) {
    const real eps = (real)LFQ_ENTROPY_EPS, log_eps = log((real)LFQ_ENTROPY_EPS);
    double h = 0;
    for (int64_t k = 0; k < K; k++) h -= (double)(p[k] * (p[k] >= eps ? log(p[k]) : log_eps));
    return h;
}

// Marks the entropy set: every selected token, or m = floor(|T| f) of them drawn uniformly
// without replacement (partial Fisher-Yates) from the module's stream for this forward.
static int64_t FN(select_entropy_tokens)(ember_lfq *q, int64_t T, int64_t n_sel, int32_t rank) {
    ember__lfq_ws *ws = &q->ws;
    double f = q->cfg.frac_per_sample_entropy;
    if (f >= 1.0) {
        for (int64_t t = 0; t < T; t++)
            if (ws->sel[t] & LFQ_SEL_T) ws->sel[t] |= LFQ_SEL_E;
        return n_sel;
    }
    int64_t m = (int64_t)((double)n_sel * f), n = 0;
    for (int64_t t = 0; t < T; t++)
        if (ws->sel[t] & LFQ_SEL_T) ws->perm[n++] = t;
    uint64_t st = q->sample_seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(rank + 1)) ^
                  (0x8CB92BA72F3D8DD7ull * ++q->sample_counter);
    for (int64_t i = 0; i < m; i++) {
        int64_t j = i + (int64_t)(ember__lfq_mix(&st) % (uint64_t)(n - i));
        int64_t tmp = ws->perm[i];
        ws->perm[i] = ws->perm[j];
        ws->perm[j] = tmp;
        ws->sel[ws->perm[i]] |= LFQ_SEL_E;
    }
    return m;
}

// The token pipeline for T tokens: project in, soft clamp, split, sphere, quantise. Writes hc,
// z, nrm (spherical only) and y: the straight-through value z + (q - z) when training (q up to
// one rounding), q itself in eval.
static void FN(encode)(const ember_lfq *q, const real *x, int64_t T, bool training, real *hc, real *z, real *nrm,
                       real *y) {
    const ember_lfq_config *cfg = &q->cfg;
    const int32_t dim = cfg->dim, C = cfg->num_codebooks, D = q->D, CD = q->CD;
    const real s = (real)cfg->codebook_scale, s1 = FN(corner)(q);
    const real *params = q->params;
    if (q->proj)
        FN(linear)(x, T, dim, CD, params + q->off[EMBER_LFQ_PROJ_IN_WEIGHT],
                   q->bias ? params + q->off[EMBER_LFQ_PROJ_IN_BIAS] : NULL, hc);
    else
        memcpy(hc, x, (size_t)(T * CD) * sizeof(real));
    if (cfg->soft_clamp_input_value > 0) {
        const real v = (real)cfg->soft_clamp_input_value;
        for (int64_t i = 0; i < T * CD; i++) hc[i] = v * tanh(hc[i] / v);
    }
    if (cfg->spherical) {
        // z = s u / max(||u||, eps) per codebook (F.normalize, then the scale).
        for (int64_t tc = 0; tc < T * C; tc++) {
            const real *u = hc + tc * D;
            real ss = 0;
            for (int32_t j = 0; j < D; j++) ss += u[j] * u[j];
            real n = sqrt(ss);
            if (n < (real)LFQ_L2NORM_EPS) n = (real)LFQ_L2NORM_EPS;
            nrm[tc] = n;
            for (int32_t j = 0; j < D; j++) z[tc * D + j] = s * (u[j] / n);
        }
    } else {
        memcpy(z, hc, (size_t)(T * CD) * sizeof(real));
    }
    for (int64_t i = 0; i < T * CD; i++) {
        real qi = z[i] > 0 ? s1 : -s1;
        y[i] = training ? z[i] + (qi - z[i]) : qi;
    }
}

// out = project_out(y) for T tokens; indices (may be NULL) from the signs of z.
static void FN(decode)(const ember_lfq *q, const real *y, const real *z, int64_t T, real *out, int64_t *indices) {
    const int32_t C = q->cfg.num_codebooks, D = q->D, CD = q->CD;
    const real *params = q->params;
    if (q->proj)
        FN(linear)(y, T, CD, q->cfg.dim, params + q->off[EMBER_LFQ_PROJ_OUT_WEIGHT],
                   q->bias ? params + q->off[EMBER_LFQ_PROJ_OUT_BIAS] : NULL, out);
    else
        memcpy(out, y, (size_t)(T * CD) * sizeof(real));
    if (indices) {
        for (int64_t tc = 0; tc < T * C; tc++) {
            int64_t code = 0;
            for (int32_t j = 0; j < D; j++) code = (code << 1) | (z[tc * D + j] > 0);
            indices[tc] = code;
        }
    }
}

// Eval: one token at a time through the row scratch, leaving the workspace (and the state a
// pending backward needs) untouched.
static void FN(forward_eval)(ember_lfq *q, const void *xv, int64_t T, void *outv, int64_t *indices) {
    const int32_t dim = q->cfg.dim, C = q->cfg.num_codebooks, CD = q->CD;
    const real *x = xv;
    real *out = outv, *hc = q->row, *z = hc + CD, *y = z + CD, *nrm = y + CD;
    for (int64_t t = 0; t < T; t++) {
        FN(encode)(q, x + t * dim, 1, false, hc, z, nrm, y);
        FN(decode)(q, y, z, 1, out + t * dim, indices ? indices + t * C : NULL);
    }
}

// Training: the whole batch through the workspace, the losses, and the saved state.
static ember_status FN(forward_train)(ember_lfq *q, const void *xv, int32_t B, int32_t N, const uint8_t *mask,
                                      ember_comm *comm, void *out, int64_t *indices, ember_lfq_losses *losses) {
    const ember_lfq_config *cfg = &q->cfg;
    const int64_t T = (int64_t)B * N, K = cfg->codebook_size;
    const int32_t C = cfg->num_codebooks, D = q->D, CD = q->CD;
    const real s1 = FN(corner)(q);
    ember__lfq_ws *ws = &q->ws;
    real *z = ws->z;

    const real *x = xv;
    if (q->proj) {
        memcpy(ws->x, xv, (size_t)(T * cfg->dim) * sizeof(real)); // dW_in needs it in backward
        x = ws->x;
    }
    FN(encode)(q, x, T, true, ws->hc, z, ws->nrm, ws->y);

    // Token sets: T (mask) for the commitment, E (T or a subsample) for the entropy terms.
    int64_t n_sel = 0;
    for (int64_t t = 0; t < T; t++) {
        ws->sel[t] = (uint8_t)((!mask || mask[t]) ? LFQ_SEL_T : 0);
        n_sel += ws->sel[t] != 0;
    }
    int64_t n_ent = FN(select_entropy_tokens)(q, T, n_sel, comm ? ember_comm_rank(comm) : 0);

    // Per-token distributions: PSE and the batch sum of p per codebook.
    const real a_scale = (real)(4.0 * cfg->inv_temperature) * s1;
    real *psum = q->psum, *pbar = q->pbar;
    memset(psum, 0, (size_t)(C * K) * sizeof(real));
    double pse_sum = 0;
    for (int64_t t = 0; t < T; t++) {
        if (!(ws->sel[t] & LFQ_SEL_E)) continue;
        for (int32_t c = 0; c < C; c++)
            pse_sum += (double)FN(token_entropy)(z + t * CD + c * D, D, a_scale, q->kbuf, psum + c * K);
    }
    double commit_sum = 0;
    if (cfg->commitment_loss_weight > 0) {
        for (int64_t t = 0; t < T; t++) {
            if (!(ws->sel[t] & LFQ_SEL_T)) continue;
            for (int32_t i = 0; i < CD; i++) {
                real d = z[t * CD + i] - (z[t * CD + i] > 0 ? s1 : -s1);
                commit_sum += (double)(d * d);
            }
        }
    }

    // The code distribution, averaged over the ranks by a differentiable all-reduce whose result
    // is used (docs/lfq.md). An empty entropy set contributes a zero mean.
    double denom;
    if (comm && cfg->dist_mean == EMBER_LFQ_MEAN_TOKENS) {
        int64_t n_glob = n_ent;
        EMBER_TRY(ember__comm_allreduce_sum_i64(comm, &n_glob, 1));
        EMBER_TRY(ALLREDUCE(comm, psum, (size_t)(C * K)));
        for (int64_t i = 0; i < C * K; i++) pbar[i] = n_glob > 0 ? psum[i] / (real)n_glob : 0;
        denom = (double)n_glob; // dpbar/dp_t = 1 / sum_r |E_r|
    } else {
        for (int64_t i = 0; i < C * K; i++) pbar[i] = n_ent > 0 ? psum[i] / (real)n_ent : 0;
        int32_t W = comm ? ember_comm_size(comm) : 1;
        if (W > 1) {
            EMBER_TRY(ALLREDUCE(comm, pbar, (size_t)(C * K)));
            for (int64_t i = 0; i < C * K; i++) pbar[i] /= (real)W;
        }
        denom = (double)W * (double)n_ent; // dpbar/dp_t = 1 / (W |E_r|)
    }
    double cbe = 0;
    for (int32_t c = 0; c < C; c++) cbe += FN(entropy)(pbar + c * K, K);
    cbe /= C;

    ember_lfq_losses L = {0};
    L.per_sample_entropy = n_ent > 0 ? pse_sum / ((double)n_ent * C) : 0;
    L.codebook_entropy = cbe;
    double e_raw = L.per_sample_entropy - cfg->diversity_gamma * cbe;
    if (cfg->softplus_entropy_loss) {
        double a = e_raw + cfg->entropy_loss_offset;
        L.entropy = a > 0 ? a + log1p(exp(-a)) : log1p(exp(a));
    } else {
        L.entropy = e_raw;
    }
    L.commitment = n_sel > 0 ? commit_sum / ((double)n_sel * CD) : 0;
    L.aux = cfg->entropy_loss_weight * L.entropy + cfg->commitment_loss_weight * L.commitment;
    L.tokens = n_sel;
    L.entropy_tokens = n_ent;
    q->saved = (ember__lfq_saved){true, B, N, n_sel, n_ent, denom, e_raw, cfg->inv_temperature, comm};

    // Outputs last, after the only step that can fail.
    FN(decode)(q, ws->y, z, T, out, indices);
    if (losses) *losses = L;
    return EMBER_OK;
}

static ember_status FN(backward)(ember_lfq *q, const void *grad_out_v, double grad_aux, void *grad_x_v) {
    const ember_lfq_config *cfg = &q->cfg;
    const ember__lfq_saved *sv = &q->saved;
    const int64_t T = (int64_t)sv->B * sv->N, K = cfg->codebook_size;
    const int32_t dim = cfg->dim, C = cfg->num_codebooks, D = q->D, CD = q->CD;
    const real s = (real)cfg->codebook_scale, s1 = FN(corner)(q);
    const real *grad_out = grad_out_v, *params = q->params;
    real *grads = q->grads, *grad_x = grad_x_v;
    ember__lfq_ws *ws = &q->ws;
    const real *hc = ws->hc, *z = ws->z, *y = ws->y, *nrm = ws->nrm;
    real *dz = ws->dz;

    // Scalar chain: aux = w_e E_aux + w_c L_commit, E_aux = [softplus](PSE - gamma CBE + [offset]).
    double d_e = grad_aux * cfg->entropy_loss_weight;
    if (cfg->softplus_entropy_loss) d_e /= 1.0 + exp(-(sv->e_raw + cfg->entropy_loss_offset));
    const double d_cbe = -cfg->diversity_gamma * d_e;

    // dJ/dpbar on this rank, then the backward of the all-reduce: the sum over ranks of every
    // rank's dL_s/dpbar (never the local value alone), divided as the forward divided.
    real *u = q->gpbar;
    const real *pbar = q->pbar;
    const real eps = (real)LFQ_ENTROPY_EPS, log_eps = log((real)LFQ_ENTROPY_EPS);
    for (int64_t i = 0; i < C * K; i++) {
        real p = pbar[i];
        u[i] = (real)(d_cbe / C) * (p >= eps ? -log(p) - 1 : -log_eps);
    }
    if (sv->comm && ember_comm_size(sv->comm) > 1) EMBER_TRY(ALLREDUCE(sv->comm, u, (size_t)(C * K)));
    for (int64_t i = 0; i < C * K; i++) u[i] = sv->pbar_denom > 0 ? u[i] / (real)sv->pbar_denom : 0;

    // Straight-through: dJ/dz starts as dJ/dy, from the task gradient through project_out.
    if (!grad_out) {
        memset(dz, 0, (size_t)(T * CD) * sizeof(real));
    } else if (q->proj) {
        FN(linear_backward)(y, grad_out, T, CD, dim, params + q->off[EMBER_LFQ_PROJ_OUT_WEIGHT], dz,
                            grads + q->off[EMBER_LFQ_PROJ_OUT_WEIGHT],
                            q->bias ? grads + q->off[EMBER_LFQ_PROJ_OUT_BIAS] : NULL);
    } else {
        memcpy(dz, grad_out, (size_t)(T * CD) * sizeof(real));
    }

    // Entropy terms, through the softmax of every token of E.
    const real a_scale = (real)(4.0 * sv->tau) * s1;
    const real l_scale = (real)(2.0 * sv->tau) * s1;
    const real w_pse = sv->n_ent > 0 ? (real)(d_e / ((double)sv->n_ent * C)) : 0;
    for (int64_t t = 0; t < T; t++) {
        if (!(ws->sel[t] & LFQ_SEL_E)) continue;
        for (int32_t c = 0; c < C; c++)
            FN(token_entropy_backward)(z + t * CD + c * D, D, a_scale, l_scale, w_pse, u + c * K, q->kbuf,
                                       dz + t * CD + c * D);
    }
    // Commitment: d/dz mean (z - sg(q))^2 = 2 (z - q) / (|T| C D); no gradient reaches q.
    if (cfg->commitment_loss_weight > 0 && sv->n_sel > 0) {
        const real w = (real)(2.0 * grad_aux * cfg->commitment_loss_weight / ((double)sv->n_sel * CD));
        for (int64_t t = 0; t < T; t++) {
            if (!(ws->sel[t] & LFQ_SEL_T)) continue;
            for (int32_t i = 0; i < CD; i++) {
                real zi = z[t * CD + i];
                dz[t * CD + i] += w * (zi - (zi > 0 ? s1 : -s1));
            }
        }
    }
    // Sphere: for z = s u / n, n = ||u|| > eps: du = (s / n) (dz - zhat <zhat, dz>), zhat = u / n;
    // with the norm clamped at eps, z = s u / eps is linear.
    if (cfg->spherical) {
        for (int64_t tc = 0; tc < T * C; tc++) {
            const real *uu = hc + tc * D;
            real *g = dz + tc * D, n = nrm[tc];
            real dot = 0;
            if (n > (real)LFQ_L2NORM_EPS)
                for (int32_t j = 0; j < D; j++) dot += (uu[j] / n) * g[j];
            for (int32_t j = 0; j < D; j++) g[j] = (s / n) * (g[j] - (uu[j] / n) * dot);
        }
    }
    // Soft clamp: d/dh v tanh(h / v) = 1 - tanh^2 = 1 - (hc / v)^2.
    if (cfg->soft_clamp_input_value > 0) {
        const real v = (real)cfg->soft_clamp_input_value;
        for (int64_t i = 0; i < T * CD; i++) {
            real th = hc[i] / v;
            dz[i] *= 1 - th * th;
        }
    }
    // Project in.
    if (q->proj) {
        FN(linear_backward)(ws->x, dz, T, dim, CD, params + q->off[EMBER_LFQ_PROJ_IN_WEIGHT], grad_x,
                            grads + q->off[EMBER_LFQ_PROJ_IN_WEIGHT],
                            q->bias ? grads + q->off[EMBER_LFQ_PROJ_IN_BIAS] : NULL);
    } else if (grad_x) {
        memcpy(grad_x, dz, (size_t)(T * CD) * sizeof(real));
    }
    return EMBER_OK;
}

static void FN(indices_to_codes)(const ember_lfq *q, const int64_t *indices, int64_t n, bool project_out,
                                 void *codes_v) {
    const int32_t C = q->cfg.num_codebooks, D = q->D, CD = q->CD, dim = q->cfg.dim;
    const real s1 = FN(corner)(q);
    const bool proj = project_out && q->proj;
    const real *params = q->params;
    real *codes = codes_v, *row = q->row;
    for (int64_t t = 0; t < n; t++) {
        real *r = proj ? row : codes + t * CD;
        for (int32_t c = 0; c < C; c++)
            for (int32_t j = 0; j < D; j++) r[c * D + j] = (indices[t * C + c] >> (D - 1 - j)) & 1 ? s1 : -s1;
        if (proj)
            FN(linear)(row, 1, CD, dim, params + q->off[EMBER_LFQ_PROJ_OUT_WEIGHT],
                       q->bias ? params + q->off[EMBER_LFQ_PROJ_OUT_BIAS] : NULL, codes + t * dim);
    }
}

// torch.nn.Linear's initialisation: weights and biases uniform in ±1/sqrt(fan_in).
static void FN(init_params)(ember_lfq *q) {
    uint64_t st = q->cfg.seed;
    real *p = q->params;
    for (int id = 0; id < EMBER_LFQ_NUM_PARAMS; id++) {
        if (q->off[id] < 0) continue;
        int32_t fan_in = id <= EMBER_LFQ_PROJ_IN_BIAS ? q->cfg.dim : q->CD;
        double bound = 1.0 / sqrt((double)fan_in);
        for (int64_t i = 0; i < q->numel[id]; i++) {
            double u01 = (double)(ember__lfq_mix(&st) >> 11) * 0x1.0p-53;
            p[q->off[id] + i] = (real)((2 * u01 - 1) * bound);
        }
    }
}

static int64_t FN(find_nonfinite)(const void *buf, int64_t n, double *value) {
    const real *b = buf;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(b[i])) {
            *value = (double)b[i];
            return i;
        }
    }
    return -1;
}

const ember__lfq_kernels CAT2(ember__lfq_kernels, SFX) = {
    FN(forward_train), FN(forward_eval), FN(backward), FN(indices_to_codes), FN(init_params), FN(find_nonfinite),
};

#undef FN
#undef CAT2
#undef CAT2_
