"""ember.torch under torch.compile and torch.export (the lookups are the operators ember::lookup and
ember::lookup_backward, registered through torch.library with fake kernels):

- torch's explain tool finds no graph break in a DLRM-like model with ember tables, for plain
  tensors and for a TorchRec KeyedJaggedTensor;
- compiled training (backend aot_eager: the same aten ops as eager) gives the eager model's losses,
  tables and dense parameters bit for bit, with batch sizes changing from step to step, per-id
  weights whose gradient is taken, an all-"none" (unpooled) collection, and a no-grad evaluation
  between steps; with inductor (torch.compile's default backend) the tables train and the losses
  stay within 1e-5 of eager (inductor fuses the dense ops in another order);
- torch.export captures the model; its program computes the eager output in this process, and a
  module closed before the program runs is refused with StateError naming the handle.
The sharded module compiled on 2 and 3 ranks: torch_cases.py (test_ember_torch.py runs it).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import ember  # noqa: E402
import ember.torch as et  # noqa: E402

F, D, DENSE = 3, 4, 5


def _tables(pooling="sum", optimizer="adagrad"):
    return [ember.TableConfig("t0", 13, D, feature_names=["f0", "f1"], optimizer=optimizer, lr=0.1,
                              pooling=pooling),
            ember.TableConfig("t1", 1, D, feature_names=["f2"], optimizer=optimizer, lr=0.1, pooling=pooling)]


class Model(torch.nn.Module):
    """Bottom MLP, ember tables, the dot interaction, top MLP: DLRM's shape at toy size."""

    def __init__(self, weighted=False):
        super().__init__()
        torch.manual_seed(3)
        self.bottom = torch.nn.Sequential(torch.nn.Linear(DENSE, D), torch.nn.ReLU())
        self.sparse = et.EmbeddingBagCollection(_tables(), seed=7)
        self.top = torch.nn.Linear(D + (F + 1) * F // 2, 1)
        self.weighted = weighted
        pairs = torch.triu_indices(F + 1, F + 1, offset=1)
        self.register_buffer("pairs", pairs[0] * (F + 1) + pairs[1], persistent=False)

    def forward(self, dense, values, lengths, weights=None):
        d = self.bottom(dense)
        e = self.sparse(values, lengths, weights).view(-1, F, D)
        t = torch.cat([d.unsqueeze(1), e], dim=1)
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return self.top(torch.cat([d, z], dim=1)).squeeze(1)


def _batch(rng, B, weighted=False):
    lengths = rng.integers(0, 4, F * B).astype(np.int32)
    lengths[0] = 0  # an empty bag
    rows = (13, 13, 1)
    values = np.concatenate([rng.integers(0, rows[f], int(lengths[f * B:(f + 1) * B].sum()))
                             for f in range(F)]).astype(np.int64)
    w = (torch.from_numpy(rng.uniform(0.5, 2.0, values.shape[0]).astype(np.float32)).requires_grad_()
         if weighted else None)
    return (torch.from_numpy(rng.standard_normal((B, DENSE)).astype(np.float32)), torch.from_numpy(values),
            torch.from_numpy(lengths), w, torch.from_numpy(rng.integers(0, 2, B).astype(np.float32)))


def _train(model, run, steps, weighted=False, seed=0, eval_between=False):
    """Losses and per-id weight gradients of `steps` steps of SGD on `run` (model or its compiled
    form), batch sizes 5, 8, 1, 5, ..."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.SGD([p for n, p in model.named_parameters()], lr=0.1)
    losses, wgrads = [], []
    for step in range(steps):
        dense, values, lengths, w, labels = _batch(rng, (5, 8, 1)[step % 3], weighted)
        if eval_between:
            with torch.no_grad():
                run(*_batch(rng, 4)[:3])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(run(dense, values, lengths, w), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
        if weighted:
            wgrads.append(w.grad.clone())
    return losses, wgrads


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)


def _tables_of(model):
    return [model.sparse.ebc.read(n) for n in ("t0", "t1")]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_explain_finds_no_graph_break():
    rng = np.random.default_rng(1)
    dense, values, lengths, _, _ = _batch(rng, 5)
    e = torch._dynamo.explain(Model())(dense, values, lengths)
    assert e.graph_break_count == 0 and e.graph_count == 1, e.break_reasons
    ops = [str(n.target) for g in e.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("ember.lookup" in o for o in ops), ops


def test_explain_finds_no_graph_break_with_a_keyed_jagged_tensor():
    jt = pytest.importorskip("torchrec.sparse.jagged_tensor", reason="torchrec not installed")
    m = et.EmbeddingBagCollection(_tables(), seed=7)
    rng = np.random.default_rng(2)
    _, values, lengths, _, _ = _batch(rng, 5)
    kjt = jt.KeyedJaggedTensor(keys=["f0", "f1", "f2"], values=values, lengths=lengths, stride=5)
    e = torch._dynamo.explain(lambda k: m(k).values())(kjt)
    assert e.graph_break_count == 0, e.break_reasons
    assert torch.equal(torch.compile(lambda k: m(k).values(), backend="aot_eager")(kjt), m(values, lengths))


@pytest.mark.parametrize("weighted", [False, True])
def test_compiled_training_equals_eager_bitwise(weighted):
    eager, compiled = Model(), Model()
    compiled.load_state_dict(eager.state_dict())
    run = torch.compile(compiled, backend="aot_eager", dynamic=True)
    le, we = _train(eager, eager, 6, weighted, eval_between=True)
    lc, wc = _train(compiled, run, 6, weighted, eval_between=True)
    assert _same(le, lc), (le, lc)
    assert _same(we, wc)
    for a, b in zip(_tables_of(eager), _tables_of(compiled)):
        assert np.array_equal(a, b)
    for (n, p), (_, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        assert torch.equal(p, q), n
    start = Model()
    assert not np.array_equal(_tables_of(compiled)[0], _tables_of(start)[0]), "the tables did not train"
    assert compiled.sparse.ebc.step("t0") == 6


def test_compiled_unpooled_collection():
    m = et.EmbeddingBagCollection(_tables(pooling="none"), seed=7)
    ref = et.EmbeddingBagCollection(_tables(pooling="none"), seed=7)
    run = torch.compile(lambda v, ln: m(v, ln), backend="aot_eager", dynamic=True)
    rng = np.random.default_rng(4)
    for B in (5, 2):
        _, values, lengths, _, _ = _batch(rng, B)
        out, want = run(values, lengths), ref(values, lengths)
        assert out.shape == (values.shape[0], D) and torch.equal(out, want)
        (out * out).sum().backward()
        (want * want).sum().backward()
    assert np.array_equal(m.ebc.read("t0"), ref.ebc.read("t0"))


def test_inductor_trains_like_eager():
    eager, compiled = Model(), Model()
    compiled.load_state_dict(eager.state_dict())
    le, _ = _train(eager, eager, 3)
    lc, _ = _train(compiled, torch.compile(compiled), 3)
    assert all(abs(float(a) - float(b)) <= 1e-5 for a, b in zip(le, lc)), (le, lc)
    for a, b in zip(_tables_of(eager), _tables_of(compiled)):
        assert np.allclose(a, b, rtol=0, atol=1e-5)
    assert compiled.sparse.ebc.step("t0") == 3


def test_export_captures_the_model():
    m = Model()
    rng = np.random.default_rng(5)
    dense, values, lengths, _, _ = _batch(rng, 5)
    auto = torch.export.Dim.AUTO
    ep = torch.export.export(m, (dense, values, lengths), dynamic_shapes=({0: auto}, {0: auto}, {0: auto}))
    assert any("ember.lookup" in str(n.target) for n in ep.graph.nodes)
    other = _batch(rng, 7)
    with torch.no_grad():
        assert torch.equal(ep.module()(*other[:3]), m(*other[:3]))
    m.sparse.ebc.close()
    del m
    import gc
    gc.collect()
    with pytest.raises(ember.StateError, match="no module with handle"):
        ep.module()(*other[:3])
