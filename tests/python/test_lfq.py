"""ember.LFQ against a naive float64 numpy implementation of ember/lfq.h's formulas.

The oracle below shares nothing with the library: explicit K x D codebooks, a max-shifted softmax
over all K codes, plain means. Gradients are checked by central differences of the objective
``<grad_out, out> + grad_aux * aux`` written with the straight-through estimator made explicit
(``out = project_out(z)`` for the derivative, ``project_out(q)`` for the value). The two-rank
check runs this file under mpiexec (``python test_lfq.py --mpi``).
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ember

ENT_EPS = 1e-5


# ---- the oracle ------------------------------------------------------------------------------


class Ref:
    """The formulas of ember/lfq.h for a module's resolved configuration and parameters."""

    def __init__(self, q):
        c = q.config
        self.dim, self.C, self.D = c["dim"], c["num_codebooks"], c["codebook_dim"]
        self.K = 1 << self.D
        self.s, self.tau = c["codebook_scale"], c["inv_temperature"]
        self.w_e, self.w_c, self.gamma = c["entropy_loss_weight"], c["commitment_loss_weight"], c["diversity_gamma"]
        self.clamp, self.spherical = c["soft_clamp_input_value"], c["spherical"]
        self.softplus, self.offset = c["softplus_entropy_loss"], c["entropy_loss_offset"]
        self.proj, self.bias = c["projection"] == "linear", c["projection_has_bias"]
        self.sq = self.s / np.sqrt(self.D) if self.spherical else self.s
        bits = (np.arange(self.K)[:, None] >> (self.D - 1 - np.arange(self.D))[None, :]) & 1
        self.E = self.sq * (2.0 * bits - 1.0)  # [K, D]
        p = {k: np.array(v, dtype=np.float64) for k, v in q.params().items()}
        CD = self.C * self.D
        self.W_in = p.get("project_in.weight", np.zeros((CD, self.dim)))
        self.b_in = p.get("project_in.bias", np.zeros(CD))
        self.W_out = p.get("project_out.weight", np.zeros((self.dim, CD)))
        self.b_out = p.get("project_out.bias", np.zeros(self.dim))

    def encode(self, x, W_in=None, b_in=None):
        """z [T, C, D] of x [T, dim]."""
        W_in = self.W_in if W_in is None else W_in
        b_in = self.b_in if b_in is None else b_in
        h = x @ W_in.T + b_in if self.proj else x.copy()
        if self.clamp:
            h = self.clamp * np.tanh(h / self.clamp)
        z = h.reshape(len(x), self.C, self.D)
        if self.spherical:
            z = self.s * z / np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-12)
        return z

    def quantise(self, z):
        return np.where(z > 0, self.sq, -self.sq)

    def indices(self, z):
        return ((z > 0) * (1 << (self.D - 1 - np.arange(self.D)))).sum(-1)

    def project_out(self, y):  # y [T, C*D]
        return y @ self.W_out.T + self.b_out if self.proj else y

    def probs(self, z):  # [T, C, K]
        logits = 2 * self.tau * np.einsum("tcd,kd->tck", z, self.E)
        logits -= logits.max(-1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(-1, keepdims=True)

    @staticmethod
    def H(p):
        return -(p * np.log(np.maximum(p, ENT_EPS))).sum(-1)

    def slice_stats(self, x, mask, W_in=None, b_in=None):
        """(count, sum of p [C, K], sum of H(p), sum of (z - q)^2) over a slice's selected tokens."""
        xf = x.reshape(-1, self.dim)
        z = self.encode(xf, W_in, b_in)
        sel = np.ones(len(xf), bool) if mask is None else np.asarray(mask).reshape(-1) != 0
        p = self.probs(z)[sel]
        zq = (z - self.quantise(z))[sel]
        return int(sel.sum()), p.sum(0), self.H(p).sum(), (zq ** 2).sum()

    def losses(self, slices, mean_tokens=False, W_in=None, b_in=None):
        """Per-slice loss dicts of a data-parallel step over `slices` [(x, mask)] (one slice: one
        process). pbar is the mean of per-slice means, or the global token mean."""
        st = [self.slice_stats(x, m, W_in, b_in) for x, m in slices]
        W = len(st)
        if mean_tokens:
            total = sum(n for n, *_ in st)
            pbar = sum(ps for _, ps, _, _ in st) / total if total else np.zeros((self.C, self.K))
        else:
            pbar = sum(ps / n for n, ps, _, _ in st if n) / W if any(n for n, *_ in st) else np.zeros((self.C, self.K))
        cbe = self.H(pbar).mean()
        out = []
        for n, _, hs, cs in st:
            pse = hs / (n * self.C) if n else 0.0
            commit = cs / (n * self.C * self.D) if (n and self.w_c > 0) else 0.0
            e = pse - self.gamma * cbe
            ent = np.log1p(np.exp(e + self.offset)) if self.softplus else e
            out.append(dict(aux=self.w_e * ent + self.w_c * commit, entropy=ent, per_sample_entropy=pse,
                            codebook_entropy=cbe, commitment=commit, tokens=n))
        return out

    def forward(self, x, mask=None):
        """(out, indices, losses) of one process's training forward (out = project_out(q))."""
        B, N, _ = x.shape
        z = self.encode(x.reshape(-1, self.dim))
        q = self.quantise(z)
        out = self.project_out(q.reshape(B * N, -1)).reshape(B, N, -1)
        return out, self.indices(z).reshape(B, N, self.C), self.losses([(x, mask)])[0]

    def surrogate(self, x, G, a, mask=None, W_in=None, b_in=None):
        """<G, out> + a * aux, out written as project_out(z) so that its derivative is the
        straight-through one (z and q differ only where the derivative is not taken)."""
        z = self.encode(x.reshape(-1, self.dim), W_in, b_in)
        lin = self.project_out(z.reshape(len(z), -1))
        return (G.reshape(lin.shape) * lin).sum() + a * self.losses([(x, mask)], W_in=W_in, b_in=b_in)[0]["aux"]

    def grads(self, x, G, a, mask=None, h=1e-6):
        """Central differences of the surrogate: grad_x and project_in's gradients; project_out's
        in closed form (its gradient sees the value q)."""
        def fd(arr, f):
            g = np.zeros_like(arr)
            for i in np.ndindex(arr.shape):
                keep = arr[i]
                arr[i] = keep + h
                up = f()
                arr[i] = keep - h
                down = f()
                arr[i] = keep
                g[i] = (up - down) / (2 * h)
            return g

        x = np.array(x, dtype=np.float64)
        W_in, b_in = self.W_in.copy(), self.b_in.copy()
        f = lambda: self.surrogate(x, G, a, mask, W_in, b_in)  # noqa: E731
        out = {"x": fd(x, f)}
        if self.proj:
            out["project_in.weight"] = fd(W_in, f)
            if self.bias:
                out["project_in.bias"] = fd(b_in, f)
            q = self.quantise(self.encode(x.reshape(-1, self.dim))).reshape(-1, self.C * self.D)
            Gf = G.reshape(-1, self.dim)
            out["project_out.weight"] = Gf.T @ q
            if self.bias:
                out["project_out.bias"] = Gf.sum(0)
        return out


def rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300)) if want.size else 0.0


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- forward ---------------------------------------------------------------------------------

CONFIGS = {
    "proj": dict(dim=5, codebook_size=8, num_codebooks=2),
    "noproj": dict(dim=6, codebook_size=8, num_codebooks=2),
    "linear_nobias": dict(dim=6, codebook_size=8, num_codebooks=2, projection="linear", projection_has_bias=False),
    "spherical": dict(dim=4, codebook_size=16, spherical=True, codebook_scale=1.5),
    "clamp": dict(dim=5, codebook_size=8, num_codebooks=2, soft_clamp_input_value=1.2),
    "softplus": dict(dim=3, codebook_size=8, softplus_entropy_loss=True, entropy_loss_offset=0.5, diversity_gamma=2.0),
}
COMMON = dict(inv_temperature=2.0, entropy_loss_weight=0.3, commitment_loss_weight=0.25, seed=7, dtype="float64")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_matches_oracle_float64(name):
    with ember.LFQ(**{**COMMON, **CONFIGS[name]}) as q:
        ref = Ref(q)
        x = data((3, 4, q.dim), 1)
        out, idx, L = q.forward(x)
        r_out, r_idx, r_L = ref.forward(x)
        assert out.dtype == np.float64 and out.shape == (3, 4, q.dim)
        assert idx.dtype == np.int64 and idx.shape == (3, 4, q.num_codebooks)
        np.testing.assert_array_equal(idx, r_idx)
        assert rel_err(out, r_out) < 1e-12
        for k in ("aux", "entropy", "per_sample_entropy", "codebook_entropy", "commitment"):
            assert L[k] == pytest.approx(r_L[k], rel=1e-10, abs=1e-13), k
        assert L["tokens"] == L["entropy_tokens"] == 12
        # Eval: project_out(q) and no losses.
        e_out, e_idx, e_L = q.forward(x, training=False)
        np.testing.assert_array_equal(e_idx, r_idx)
        assert rel_err(e_out, r_out) < 1e-12
        assert all(v == 0 for v in e_L.values())


def test_forward_float32_close_to_float64_oracle():
    with ember.LFQ(dim=5, codebook_size=16, num_codebooks=2, inv_temperature=3.0, commitment_loss_weight=0.25,
                   seed=3) as q:
        assert q.dtype == np.float32
        ref = Ref(q)
        x = data((4, 5, 5), 2).astype(np.float32)
        out, idx, L = q.forward(x)
        assert out.dtype == np.float32
        r_out, r_idx, r_L = ref.forward(x.astype(np.float64))
        z = ref.encode(x.reshape(-1, 5).astype(np.float64))
        clear = (np.abs(z) > 1e-5).all(-1).reshape(idx.shape)  # no sign decided by rounding
        np.testing.assert_array_equal(idx[clear], r_idx[clear])
        assert rel_err(out, r_out) < 1e-5
        for k in ("aux", "per_sample_entropy", "codebook_entropy", "commitment"):
            assert L[k] == pytest.approx(r_L[k], rel=1e-4, abs=1e-6), k


def test_defaults_are_the_headers():
    with ember.LFQ(codebook_size=16) as q:
        c = q.config
        assert (c["dim"], c["num_codebooks"], c["codebook_dim"], c["projection"]) == (4, 1, 4, "none")
        assert (c["entropy_loss_weight"], c["commitment_loss_weight"], c["diversity_gamma"]) == (0.1, 0.0, 1.0)
        assert (c["inv_temperature"], c["codebook_scale"], c["entropy_loss_offset"]) == (100.0, 1.0, 5.0)
        assert (c["frac_per_sample_entropy"], c["dist_mean"], c["dtype"]) == (1.0, "ranks", "float32")
        assert c["projection_has_bias"] and not c["spherical"] and not c["softplus_entropy_loss"]
        assert q.params() == {} and q.grads() == {}
    with ember.LFQ(dim=3) as q:  # codebook_size 0: 2^dim
        assert q.codebook_size == 8 and q.codebook_dim == 3


def test_projection_init_like_torch_linear():
    with ember.LFQ(dim=7, codebook_size=16, num_codebooks=3, seed=11) as a, \
            ember.LFQ(dim=7, codebook_size=16, num_codebooks=3, seed=11) as b, \
            ember.LFQ(dim=7, codebook_size=16, num_codebooks=3, seed=12) as c:
        pa, pb, pc = a.params(), b.params(), c.params()
        assert {k: v.shape for k, v in pa.items()} == {"project_in.weight": (12, 7), "project_in.bias": (12,),
                                                       "project_out.weight": (7, 12), "project_out.bias": (7,)}
        for k in pa:
            np.testing.assert_array_equal(pa[k], pb[k])
            assert not np.array_equal(pa[k], pc[k])
        bound_in, bound_out = 1 / np.sqrt(7), 1 / np.sqrt(12)
        assert np.abs(pa["project_in.weight"]).max() <= bound_in and np.abs(pa["project_in.bias"]).max() <= bound_in
        assert np.abs(pa["project_out.weight"]).max() <= bound_out
        assert np.abs(pa["project_in.weight"]).max() > 0.5 * bound_in  # spread over the range, not tiny


# ---- backward --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("masked", [False, True], ids=["all", "mask"])
def test_backward_matches_finite_differences(name, masked):
    with ember.LFQ(**{**COMMON, **CONFIGS[name]}) as q:
        ref = Ref(q)
        x = data((2, 3, q.dim), 4)
        G = data((2, 3, q.dim), 5)
        mask = np.array([[1, 0, 1], [1, 1, 0]], bool) if masked else None
        q.forward(x, mask=mask)
        q.zero_grad()
        gx = q.backward(G, grad_aux=0.7)
        want = ref.grads(x, G, 0.7, mask)
        assert gx.shape == x.shape and gx.dtype == np.float64
        assert rel_err(gx, want["x"]) < 1e-7, rel_err(gx, want["x"])
        grads = q.grads()
        assert sorted(grads) == sorted(k for k in want if k != "x")
        for k, g in grads.items():
            assert rel_err(g, want[k]) < 1e-7, (k, rel_err(g, want[k]))


def test_backward_aux_only_and_accumulation():
    with ember.LFQ(**{**COMMON, **CONFIGS["proj"]}) as q:
        ref = Ref(q)
        x = data((2, 2, 5), 6)
        q.forward(x)
        gx = q.backward()  # grad_out None, grad_aux 1: the aux loss alone
        want = ref.grads(x, np.zeros((2, 2, 5)), 1.0)
        assert rel_err(gx, want["x"]) < 1e-6
        g1 = {k: v.copy() for k, v in q.grads().items()}
        np.testing.assert_array_equal(g1["project_out.weight"], 0)  # project_out sees grad_out only
        q.backward()  # again: accumulates
        for k, v in q.grads().items():
            np.testing.assert_allclose(v, 2 * g1[k], rtol=1e-12, atol=0)  # per-token +=: rounding differs
        q.zero_grad()
        assert all(not v.any() for v in q.grads().values())


def test_float32_gradients_close_to_float64():
    kw = dict(dim=5, codebook_size=8, num_codebooks=2, inv_temperature=2.0, commitment_loss_weight=0.25, seed=9)
    x, G = data((3, 4, 5), 7), data((3, 4, 5), 8)
    with ember.LFQ(**kw, dtype="float32") as a, ember.LFQ(**kw, dtype="float64") as b:
        for k, v in b.params().items():  # the same values in both (float32's, widened)
            v[...] = a.params()[k]
        a.forward(x)
        b.forward(x)
        ga, gb = a.backward(G), b.backward(G)
        assert ga.dtype == np.float32
        assert rel_err(ga, gb) < 1e-4
        for k in b.grads():
            assert rel_err(a.grads()[k], b.grads()[k]) < 1e-4, k


def test_params_share_memory_and_writes_take_effect():
    with ember.LFQ(**{**COMMON, **CONFIGS["proj"]}) as q:
        p = q.params()
        p["project_in.weight"][...] = data(p["project_in.weight"].shape, 10)
        p["project_out.bias"][:] = 0.5
        ref = Ref(q)  # reads the written values back through a fresh params()
        np.testing.assert_array_equal(ref.b_out, 0.5)
        x = data((2, 3, 5), 11)
        out, idx, L = q.forward(x)
        r_out, r_idx, r_L = ref.forward(x)
        np.testing.assert_array_equal(idx, r_idx)
        assert rel_err(out, r_out) < 1e-12 and L["aux"] == pytest.approx(r_L["aux"], rel=1e-10)
        g = q.grads()["project_in.bias"]
        q.backward(np.ones_like(x))
        assert g.any()  # the array sees the accumulator
        m = memoryview(q._core.tensor(False, 2))  # project_out.weight through the buffer protocol
        assert (m.format, m.shape, m.strides, m.readonly) == ("d", (5, 6), (48, 8), False)
        assert m.c_contiguous and not m.f_contiguous
        np.testing.assert_array_equal(np.asarray(m), ref.W_out)
        m.release()


# ---- masks -----------------------------------------------------------------------------------


def test_masked_batch_equals_batch_of_selected_tokens():
    kw = {**COMMON, **CONFIGS["proj"]}
    x = data((3, 4, 5), 12)
    mask = np.zeros((3, 4), np.int32)
    mask[0, 1] = mask[1, 0] = mask[1, 3] = mask[2, 2] = 5  # any nonzero selects
    with ember.LFQ(**kw) as a, ember.LFQ(**kw) as b:
        _, _, La = a.forward(x, mask=mask)
        _, _, Lb = b.forward(x[mask != 0][None])
        for k in ("aux", "per_sample_entropy", "codebook_entropy", "commitment", "tokens"):
            assert La[k] == pytest.approx(Lb[k], rel=1e-12, abs=1e-15), k
        assert La["codebook_entropy"] - La["per_sample_entropy"] > 0.1  # not upstream HEAD's CBE == PSE
        ga, gb = a.backward(), b.backward()
        np.testing.assert_array_equal(ga[mask == 0], 0)
        np.testing.assert_allclose(ga[mask != 0], gb[0], rtol=1e-12, atol=1e-15)
        for k in a.grads():
            np.testing.assert_allclose(a.grads()[k], b.grads()[k], rtol=1e-12, atol=1e-15)


def test_mask_selecting_nothing_gives_zero_losses_and_gradients():
    with ember.LFQ(**{**COMMON, **CONFIGS["proj"]}) as q:
        x = data((2, 2, 5), 13)
        out, _, L = q.forward(x, mask=np.zeros((2, 2), bool))
        assert L["tokens"] == 0 and L["aux"] == 0 and L["codebook_entropy"] == 0
        assert rel_err(out, Ref(q).forward(x)[0]) < 1e-12  # out covers every token anyway
        np.testing.assert_array_equal(q.backward(), 0)


# ---- settings, decoding, state -----------------------------------------------------------------


def test_indices_to_codes_decodes_forward():
    with ember.LFQ(**{**COMMON, **CONFIGS["proj"]}) as q:
        ref = Ref(q)
        x = data((2, 3, 5), 14)
        out, idx, _ = q.forward(x, training=False)
        np.testing.assert_allclose(q.indices_to_codes(idx), out, rtol=1e-14, atol=1e-15)
        codes = q.indices_to_codes(idx, project_out=False)
        assert codes.shape == (2, 3, 6)
        np.testing.assert_array_equal(codes, ref.quantise(ref.encode(x.reshape(-1, 5))).reshape(2, 3, 6))
        every = q.indices_to_codes(np.arange(8).reshape(4, 2), project_out=False)
        np.testing.assert_array_equal(every.reshape(8, 3), ref.E)
        with pytest.raises(ember.OutOfRangeError, match="outside"):
            q.indices_to_codes(np.array([[0, 8]]))
        with pytest.raises(ember.InvalidArgumentError):
            q.indices_to_codes(np.zeros((2, 3), np.int64))  # last axis must be C = 2
        with pytest.raises(ember.InvalidArgumentError):
            q.indices_to_codes(np.zeros((2, 2)))  # float indices


def test_inv_temperature_and_seeded_subsampling():
    with ember.LFQ(**{**COMMON, **CONFIGS["noproj"]}) as q:
        x = data((2, 5, 6), 15)
        q.set_inv_temperature(0.5)
        assert q.inv_temperature == 0.5
        _, _, L = q.forward(x)
        assert L["aux"] == pytest.approx(Ref(q).forward(x)[2]["aux"], rel=1e-10)
        with pytest.raises(ember.InvalidArgumentError):
            q.set_inv_temperature(0.0)
    with ember.LFQ(**{**COMMON, **CONFIGS["noproj"]}, frac_per_sample_entropy=0.5) as q:
        x = data((2, 5, 6), 16)
        q.set_seed(5)
        L1 = q.forward(x)[2]
        L2 = q.forward(x)[2]
        q.set_seed(5)
        L3 = q.forward(x)[2]
        assert L1["entropy_tokens"] == 5 and L1["tokens"] == 10
        assert L1 == L3 and L1["aux"] != L2["aux"]


def test_eval_forward_keeps_pending_backward():
    kw = {**COMMON, **CONFIGS["proj"]}
    x, G = data((2, 3, 5), 17), data((2, 3, 5), 18)
    with ember.LFQ(**kw) as a, ember.LFQ(**kw) as b:
        a.forward(x)
        b.forward(x)
        b.forward(data((4, 1, 5), 19), training=False)
        np.testing.assert_array_equal(a.backward(G), b.backward(G))


def test_bitwise_deterministic():
    kw = dict(dim=5, codebook_size=32, num_codebooks=2, seed=1)
    x = data((3, 7, 5), 20).astype(np.float32)
    runs = []
    for _ in range(2):
        with ember.LFQ(**kw) as q:
            out, idx, L = q.forward(x)
            runs.append((out, idx, L, q.backward(np.ones_like(x)), q.grads()["project_in.weight"].copy()))
    for u, v in zip(*runs):
        if isinstance(u, dict):
            assert u == v
        else:
            np.testing.assert_array_equal(u, v)


def unaligned(a):
    """A C-contiguous copy of ``a`` one byte off its items' alignment (numpy's flags.aligned False)."""
    u = np.frombuffer(bytearray(a.nbytes + 1), a.dtype, a.size, offset=1).reshape(a.shape)
    u[...] = a
    assert u.flags.c_contiguous and not u.flags.aligned
    return u


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unaligned_arrays_are_copied(dtype):
    """x, grad_out and indices off their items' alignment give what aligned ones give (the kernels
    read them through typed pointers: the Python layer copies them); the C half refuses one
    itself."""
    kw = dict(dim=5, codebook_size=32, num_codebooks=2, seed=1, dtype=np.dtype(dtype).name)
    x, G = data((3, 7, 5), 23).astype(dtype), data((3, 7, 5), 24).astype(dtype)
    runs = []
    for make in (lambda a: a, unaligned):
        with ember.LFQ(**kw) as q:
            out, idx, L = q.forward(make(x))
            runs.append((out, idx, L, q.backward(make(G)), q.indices_to_codes(make(idx)),
                         q.grads()["project_in.weight"].copy()))
    for u, v in zip(*runs):
        if isinstance(u, dict):
            assert u == v
        else:
            np.testing.assert_array_equal(u, v)
    with ember.LFQ(**kw) as q:
        with pytest.raises(ember.InvalidArgumentError, match="aligned"):
            q._core.forward(unaligned(x), None, True, np.zeros_like(x), np.zeros((3, 7, 2), np.int64))


# ---- bad input ---------------------------------------------------------------------------------


def test_bad_configurations_raise():
    with pytest.raises(ember.InvalidArgumentError, match=r"codebook_size 12 is not a power of two \(suggested 16\)"):
        ember.LFQ(codebook_size=12)
    with pytest.raises(ember.InvalidArgumentError, match=r"\(rank 0\)"):
        ember.LFQ()  # neither dim nor codebook_size
    with pytest.raises(ember.InvalidArgumentError, match="projection"):
        ember.LFQ(dim=4, codebook_size=4, projection="none")  # dim 4 != C*D = 2
    with pytest.raises(ember.InvalidArgumentError, match="'sideways'"):
        ember.LFQ(dim=4, projection="sideways")
    with pytest.raises(ember.InvalidArgumentError, match="dtype"):
        ember.LFQ(dim=4, dtype="float16")
    with pytest.raises(ember.InvalidArgumentError):
        ember.LFQ(dim=4, soft_clamp_input_value=0.5)  # < codebook_scale
    with pytest.raises(ember.InvalidArgumentError):
        ember.LFQ(dim=4, frac_per_sample_entropy=1.5)
    with pytest.raises(ember.InvalidArgumentError):
        ember.LFQ(dim=4, inv_temperature=float("nan"))
    with pytest.raises(ember.InvalidArgumentError):
        ember.LFQ(dim="4")
    with pytest.raises(ember.InvalidArgumentError):
        ember.LFQ(dim=4, seed=-1)
    assert issubclass(ember.InvalidArgumentError, ValueError)


def test_bad_inputs_raise_and_change_nothing():
    with ember.LFQ(**{**COMMON, **CONFIGS["proj"]}) as q:
        x, G = data((2, 3, 5), 21), data((2, 3, 5), 22)
        with pytest.raises(ember.StateError, match="no training forward"):
            q.backward(G)
        q.forward(x)
        before = {k: v.copy() for k, v in q.params().items()}
        bad = [
            (lambda: q.forward(x[0]), ember.InvalidArgumentError, r"x has shape \(3, 5\)"),
            (lambda: q.forward(x[..., :4]), ember.InvalidArgumentError, "dim = 5"),
            (lambda: q.forward(np.zeros((0, 3, 5))), ember.InvalidArgumentError, "B, N >= 1"),
            (lambda: q.forward(x.astype(complex)), ember.InvalidArgumentError, "complex"),
            (lambda: q.forward(np.array([[["a"] * 5] * 3] * 2, object)), ember.InvalidArgumentError, "object"),
            (lambda: q.forward(x, mask=np.ones((3, 2), bool)), ember.InvalidArgumentError, "mask has shape"),
            (lambda: q.forward(x, mask=np.ones((2, 3))), ember.InvalidArgumentError, "mask has dtype float64"),
            (lambda: q.forward(np.where(np.arange(30).reshape(2, 3, 5) == 7, np.nan, x)), ember.NumericError,
             r"x\[b=0, n=1, 2\] = nan"),
            (lambda: q.backward(G[:1]), ember.InvalidArgumentError, r"grad_out has shape \(1, 3, 5\)"),
            (lambda: q.backward(np.full_like(G, np.inf)), ember.NumericError, "grad_out"),
            (lambda: q.backward(G, grad_aux="x"), ember.InvalidArgumentError, "grad_aux"),
            (lambda: q.allreduce_grads("median"), ember.InvalidArgumentError, "median"),
        ]
        for call, exc, pattern in bad:
            with pytest.raises(exc, match=pattern) as info:
                call()
            assert "(rank 0)" in str(info.value)
        for k, v in q.params().items():
            np.testing.assert_array_equal(v, before[k])
        assert not any(v.any() for v in q.grads().values())
        q.backward(G)  # the forward's state survived every refusal
        assert rel_err(q.grads()["project_in.weight"], Ref(q).grads(x, G, 1.0)["project_in.weight"]) < 1e-6


def test_the_private_type_checks_buffers_itself():
    # The C half never trusts the Python layer: wrong dtypes and shapes raise, nothing crashes.
    with ember.LFQ(dim=4, codebook_size=4, num_codebooks=2, dtype="float64") as q:
        core = q._core
        x = np.zeros((1, 2, 4))
        with pytest.raises(ember.InvalidArgumentError, match="float64"):
            core.forward(x.astype(np.float32), None, True, np.zeros((1, 2, 4)), np.zeros((1, 2, 2), np.int64))
        with pytest.raises(ember.InvalidArgumentError, match="out has shape"):
            core.forward(x, None, True, np.zeros((1, 2, 3)), np.zeros((1, 2, 2), np.int64))
        with pytest.raises(ember.InvalidArgumentError, match="indices has shape"):
            core.forward(x, None, True, np.zeros((1, 2, 4)), np.zeros((1, 2, 1), np.int64))
        with pytest.raises(ember.InvalidArgumentError, match="writable"):
            ro = np.zeros((1, 2, 4))
            ro.flags.writeable = False
            core.forward(x, None, True, ro, np.zeros((1, 2, 2), np.int64))
        with pytest.raises(ember.InvalidArgumentError, match="codes"):
            core.indices_to_codes(np.zeros((3, 2), np.int64), False, np.zeros((2, 4)))


def test_threads_share_one_module_safely():
    # The GIL is released inside the calls; the module's lock serialises them.
    import threading

    with ember.LFQ(dim=6, codebook_size=64, num_codebooks=2, seed=2) as q:
        x = data((4, 16, 6), 24).astype(np.float32)
        want_out, want_idx, _ = q.forward(x, training=False)
        failures = []

        def work():
            for _ in range(20):
                out, idx, _ = q.forward(x, training=False)
                codes = q.indices_to_codes(idx)
                if not (np.array_equal(out, want_out) and np.array_equal(idx, want_idx)
                        and np.array_equal(codes, want_out)):
                    failures.append(1)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures


# ---- lifetime ----------------------------------------------------------------------------------


def test_close_leaves_no_outstanding_bytes():
    q = ember.LFQ(dim=6, codebook_size=16, num_codebooks=2, max_tokens=64)
    assert q.bytes_outstanding > 0
    q.forward(data((4, 8, 6), 23))
    q.backward(np.ones((4, 8, 6), np.float32))
    held = q.bytes_outstanding
    assert held > 0
    q.close()
    assert q.closed and q.bytes_outstanding == 0
    with pytest.raises(ember.StateError, match="closed"):
        q.forward(data((1, 1, 6), 0))
    q.close()  # twice is fine


def test_close_with_live_arrays_defers_the_free():
    q = ember.LFQ(dim=6, codebook_size=16, num_codebooks=2)
    w = q.params()["project_in.weight"]
    g = q.grads()["project_in.weight"]
    snapshot = w.copy()
    q.close()
    assert q.closed
    np.testing.assert_array_equal(w, snapshot)  # still the module's memory, still valid
    w[0, 0] = 1.0
    g[...] = 2.0
    assert q.bytes_outstanding > 0
    del w, g
    assert q.bytes_outstanding == 0


# ---- two ranks ---------------------------------------------------------------------------------


def _mpi_main():
    """Run by test_two_ranks_equal_one_process under mpiexec -n 2: every check is made on every rank
    (a failure exits nonzero)."""
    comm = ember.Comm(timeout_s=60.0)
    rank, W = comm.rank, comm.size
    assert W == 2
    kw = dict(dim=5, codebook_size=8, num_codebooks=2, inv_temperature=2.0, commitment_loss_weight=0.25, seed=4)
    Bl, N = 3, 4
    x_all = data((W * Bl, N, 5), 30)
    G_all = data((W * Bl, N, 5), 31)
    mine = slice(rank * Bl, (rank + 1) * Bl)
    for dtype, tol in (("float64", 1e-12), ("float32", 1e-5)):
        with ember.LFQ(**kw, dtype=dtype) as full, ember.LFQ(**kw, dtype=dtype, comm=comm) as dist:
            assert dist.rank == rank and dist.size == W
            f_out, f_idx, fL = full.forward(x_all)
            d_out, d_idx, dL = dist.forward(x_all[mine])
            np.testing.assert_array_equal(d_idx, f_idx[mine])
            np.testing.assert_array_equal(d_out, f_out[mine])
            # The code distribution is the global one: CBE equals the full batch's.
            assert dL["codebook_entropy"] == pytest.approx(fL["codebook_entropy"], rel=tol, abs=1e-14)
            # With a local mean task loss, rank r's dLoss/dout is W times its slice of the global one.
            f_gx = full.backward(G_all)
            d_gx = dist.backward(W * G_all[mine])
            assert rel_err(d_gx, W * f_gx[mine]) < tol, rel_err(d_gx, W * f_gx[mine])
            dist.allreduce_grads("mean")
            for k, g in full.grads().items():
                assert rel_err(dist.grads()[k], g) < tol, (dtype, k, rel_err(dist.grads()[k], g))

    # Unequal masks: both distributed means against the oracle's data-parallel formulas.
    masks = [np.array([[1, 1, 1, 1], [1, 0, 0, 1], [0, 0, 0, 0]], bool), np.ones((Bl, N), bool)]
    for mean in ("ranks", "tokens"):
        with ember.LFQ(**kw, dtype="float64", dist_mean=mean, comm=comm) as dist:
            ref = Ref(dist)
            slices = [(x_all[r * Bl:(r + 1) * Bl], masks[r]) for r in range(W)]
            want = ref.losses(slices, mean_tokens=mean == "tokens")[rank]
            _, _, L = dist.forward(*slices[rank])
            for k in ("aux", "per_sample_entropy", "codebook_entropy", "commitment", "tokens"):
                assert L[k] == pytest.approx(want[k], rel=1e-10, abs=1e-14), (mean, k)

    # A bad input on one rank raises on both, with that rank's message; a refusal by the Python
    # layer (float mask) likewise; nobody hangs.
    with ember.LFQ(**kw, dtype="float64", comm=comm) as dist:
        x = x_all[mine]
        for bad in ("shape", "mask"):
            with pytest.raises(ember.InvalidArgumentError, match=r"\(rank 1\)") as info:
                if rank == 1 and bad == "shape":
                    dist.forward(x[..., :4])
                elif rank == 1:
                    dist.forward(x, mask=np.ones((Bl, N)))
                else:
                    dist.forward(x)
            assert ("x has shape" if bad == "shape" else "mask has dtype") in str(info.value)
        with pytest.raises(ember.InvalidArgumentError, match=r"\(rank 0\)"):
            dist.allreduce_grads("median" if rank == 0 else "mean")
        dist.forward(x)  # still in step
        dist.backward()
    # Ranks configured differently: every rank refuses (at construction, parameter counts differ).
    with pytest.raises(ember.InvalidArgumentError, match="configured differently"):
        ember.LFQ(**{**kw, "dim": 5 + rank}, comm=comm)
    comm.close()
    print(f"rank {rank}: ok", flush=True)


def _mpi_timeout_main():
    """Rank 1 never joins rank 0's training forward: rank 0 gets CollectiveTimeoutError naming
    rank 1, closing the module afterwards frees nothing MPI may still write, and interpreter exit
    exits without finalising MPI (ember/comm.h), so the launcher ends the job, instead of hanging
    or crashing."""
    import time

    comm = ember.Comm(timeout_s=0.5)
    q = ember.LFQ(dim=4, codebook_size=4, num_codebooks=2, comm=comm)
    if comm.rank == 0:
        try:
            q.forward(np.ones((1, 2, 4), np.float32))
        except ember.CollectiveTimeoutError as e:
            print(f"rank 0 timed out: {e}", flush=True)
        q.close()
        del q
    else:
        time.sleep(3)


def _mpiexec(mode):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(["mpiexec", "--oversubscribe", "-n", "2", sys.executable, os.path.abspath(__file__), mode],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="mpiexec not found")
def test_two_ranks_equal_one_process():
    r = _mpiexec("--mpi")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": ok") == 2, r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="mpiexec not found")
def test_two_ranks_timeout_ends_the_job():
    r = _mpiexec("--mpi-timeout")
    assert "rank 0 timed out" in r.stdout and "rank 1 did not arrive" in r.stdout, r.stdout + r.stderr
    assert r.returncode != 0 and "exiting without finalising" in r.stderr, r.stdout + r.stderr
    assert "Segmentation" not in r.stderr and "signal" not in r.stderr, r.stderr


if __name__ == "__main__" and sys.argv[1:] == ["--mpi"]:
    _mpi_main()
elif __name__ == "__main__" and sys.argv[1:] == ["--mpi-timeout"]:
    _mpi_timeout_main()
