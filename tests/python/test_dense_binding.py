"""The extension's dot interaction (ember_dot_interaction_forward/backward through
ember._ember.dot_interaction, what ember.torch.dot_interaction calls) on numpy arrays, so that
the sanitized pass (no torch) runs its C path too: output and gradients against a float64 numpy
oracle, an empty batch, the same bits for 1 and 2 threads, wrongly sized buffers refused."""
import numpy as np
import pytest

import ember
from ember import _ember


def _oracle(dense, emb, grad, F, D):
    B = dense.shape[0]
    t = np.concatenate([dense.reshape(B, 1, D), emb.reshape(B, F, D)], 1).astype(np.float64)
    i, j = np.triu_indices(F + 1, 1)
    out = np.concatenate([dense.astype(np.float64), np.einsum("bid,bjd->bij", t, t)[:, i, j]], 1)
    s = np.zeros((B, F + 1, F + 1))
    s[:, i, j] = grad[:, D:]
    s = s + s.transpose(0, 2, 1)
    dt = np.einsum("bij,bjd->bid", s, t)
    return out, grad[:, :D] + dt[:, 0], dt[:, 1:].reshape(B, F * D)


def _run(B, F, D, dense, emb, grad, threads):
    R, W = F + 1, D + (F + 1) * F // 2
    out, t = np.empty((B, W), np.float32), np.empty((B, R, D), np.float32)
    _ember.dot_interaction(False, threads, B, F, D, dense, emb, out, t)
    dd, de = np.empty((B, D), np.float32), np.empty((B, F * D), np.float32)
    _ember.dot_interaction(True, threads, B, F, D, t, grad, dd, de)
    return out, dd, de


@pytest.mark.parametrize("B,F,D", [(6, 3, 4), (0, 2, 2), (2, 1, 1), (65, 26, 16)])
def test_dot_interaction_against_float64(B, F, D):
    r = np.random.default_rng(B + F + D)
    dense = r.standard_normal((B, D)).astype(np.float32)
    emb = r.standard_normal((B, F * D)).astype(np.float32)
    grad = r.standard_normal((B, D + (F + 1) * F // 2)).astype(np.float32)
    got = _run(B, F, D, dense, emb, grad, 1)
    for g, w in zip(got, _oracle(dense, emb, grad, F, D)):
        assert g.shape == w.shape
        assert np.allclose(g, w, rtol=1e-5, atol=1e-5 * max(D, F + 1))
    assert all(np.array_equal(a, b) for a, b in zip(got, _run(B, F, D, dense, emb, grad, 2)))


def test_dot_interaction_refusals():
    before = ember.bytes_outstanding()  # what other tests of this process still hold
    z = np.zeros(64, np.float32)
    with pytest.raises(ember.InvalidArgumentError, match="out holds 64 floats, expected 20"):
        _ember.dot_interaction(False, 1, 2, 3, 4, z[:8], z[:24], z, z[:32])
    with pytest.raises(ember.InvalidArgumentError, match="2 features of dim 0"):
        _ember.dot_interaction(False, 1, 2, 2, 0, z, z, z, z)
    with pytest.raises(ember.InvalidArgumentError, match="ddense"):
        _ember.dot_interaction(True, 1, 1, 1, 1, z[:2], z[:2], z[:2], z[:1])
    assert ember.bytes_outstanding() == before
