"""ember.torch.dot_interaction / InteractionArch (ember_dot_interaction_forward/backward, ember/dense.h):

- the output and both gradients against the torch expression in float64 (the oracle: cat the
  dense vector and the upper triangle of T T^T), within the fp32 chains' rounding bound, and
  against the float32 torch expression within 1e-5 relative; an empty batch, one feature of dim 1,
  duplicate rows, the default DLRM shape;
- the same bits for 1, 2 and 3 threads, for [B, F, D] and [B, F*D] inputs, and under
  torch.compile (aot_eager and inductor: the operator is opaque to both) without a graph break;
- refusals: shapes that do not fit, the wrong feature count, wrongly sized buffers at the binding.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import ember  # noqa: E402
import ember.torch as et  # noqa: E402
from ember import _ember  # noqa: E402


def _oracle(dense, sparse, grad):
    """(out, d dense, d sparse) of the torch expression in float64."""
    d = dense.detach().double().requires_grad_()
    e = sparse.detach().double().reshape(dense.shape[0], -1, dense.shape[1]).requires_grad_()
    F = e.shape[1]
    t = torch.cat([d.unsqueeze(1), e], 1)
    i, j = torch.triu_indices(F + 1, F + 1, 1)
    out = torch.cat([d, torch.bmm(t, t.transpose(1, 2))[:, i, j]], 1)
    (out * grad.double()).sum().backward()
    return out.detach(), d.grad, e.grad.reshape(sparse.shape)


def _inputs(B, F, D, seed, flat=False):
    g = torch.Generator().manual_seed(seed)
    dense = torch.randn(B, D, generator=g)
    sparse = torch.randn(B, F, D, generator=g)
    if B > 1 and F > 1:
        sparse[1, 1] = sparse[1, 0]  # two equal rows
    if flat:
        sparse = sparse.reshape(B, F * D)
    grad = torch.randn(B, D + (F + 1) * F // 2, generator=g)
    return dense.requires_grad_(), sparse.requires_grad_(), grad


def _run(dense, sparse, grad, **kw):
    d, s = dense.detach().clone().requires_grad_(), sparse.detach().clone().requires_grad_()
    out = et.dot_interaction(d, s, **kw)
    (out * grad).sum().backward()
    return out.detach(), d.grad, s.grad


@pytest.mark.parametrize("B,F,D", [(5, 3, 4), (0, 3, 4), (3, 1, 1), (7, 5, 33), (512, 26, 16)])
def test_matches_the_torch_expression(B, F, D):
    dense, sparse, grad = _inputs(B, F, D, seed=B + F + D)
    got = _run(dense, sparse, grad)
    assert got[0].shape == (B, D + (F + 1) * F // 2) and got[0].dtype == torch.float32
    assert got[1].shape == dense.shape and got[2].shape == sparse.shape
    # Each value is one fp32 chain of at most max(D, F+1) + 1 terms: a relative bound of that many
    # roundings on the sum of the terms' magnitudes (bounded here by the inputs' sizes).
    if B == 0:
        return
    want = _oracle(dense, sparse, grad)
    scale = float((1 + dense.detach().abs().max() + sparse.detach().abs().max()) ** 2 * (1 + grad.abs().max()))
    bound = (max(D, F + 1) + 2) * 2.0 ** -24 * max(D, F + 1) * scale
    for g, w in zip(got, want):
        assert float((g.double() - w).abs().max()) <= bound
    f32 = dense.detach().requires_grad_(), sparse.detach().requires_grad_()
    t = torch.cat([f32[0].unsqueeze(1), f32[1]], 1)
    i, j = torch.triu_indices(F + 1, F + 1, 1)
    expr = torch.cat([f32[0], torch.bmm(t, t.transpose(1, 2))[:, i, j]], 1)
    assert torch.allclose(got[0], expr, rtol=1e-5, atol=1e-5)


def test_same_bits_for_any_thread_count_layout_and_compile():
    dense, sparse, grad = _inputs(300, 26, 16, seed=3)
    ref = _run(dense, sparse, grad, num_threads=1)
    for kw in ({"num_threads": 2}, {"num_threads": 3}, {}):
        assert all(torch.equal(a, b) for a, b in zip(ref, _run(dense, sparse, grad, **kw)))
    flat = _run(dense, sparse.detach().reshape(300, -1), grad, num_threads=1)
    assert torch.equal(flat[0], ref[0]) and torch.equal(flat[2].reshape(ref[2].shape), ref[2])
    arch = et.InteractionArch(26, num_threads=1)
    torch._dynamo.reset()
    explain = torch._dynamo.explain(arch)(dense, sparse)
    assert explain.graph_break_count == 0, explain.break_reasons
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        run = torch.compile(arch, backend=backend)
        d, s = dense.detach().clone().requires_grad_(), sparse.detach().clone().requires_grad_()
        out = run(d, s)
        (out * grad).sum().backward()
        assert torch.equal(out, ref[0]) and torch.equal(d.grad, ref[1]) and torch.equal(s.grad, ref[2]), backend
    torch._dynamo.reset()


def test_refusals():
    with pytest.raises(ember.InvalidArgumentError, match="expected \\[B, D\\] and \\[B, F, D\\]"):
        et.dot_interaction(torch.ones(4, 3), torch.ones(4, 2, 5))
    with pytest.raises(ember.InvalidArgumentError, match="expected \\[B, D\\]"):
        et.dot_interaction(torch.ones(4, 3), torch.ones(5, 2, 3))
    with pytest.raises(ember.InvalidArgumentError, match="hold 2 features of dim 3, expected 26"):
        et.InteractionArch(26)(torch.ones(4, 3), torch.ones(4, 2, 3))
    z = np.zeros(100, np.float32)
    with pytest.raises(ember.InvalidArgumentError, match="emb holds 100 floats, expected 24"):
        _ember.dot_interaction(False, 1, 2, 3, 4, z[:8], z, z, z)
    with pytest.raises(ember.InvalidArgumentError, match="batch -1"):
        _ember.dot_interaction(True, 1, -1, 3, 4, z, z, z, z)
