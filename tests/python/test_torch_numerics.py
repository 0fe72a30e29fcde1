"""ember against torch.nn.EmbeddingBag with the torch optimizers that compute the same update:
SGD (torch.optim.SGD), Adagrad (torch.optim.Adagrad: initial_accumulator_value, eps) and Adam
(torch.optim.SparseAdam: lazy, touched rows only, like ember's exact semantics), for SUM and MEAN
pooling, with per-sample weights (torch: SUM only), empty bags and duplicate ids. torch's weights
are copied in from ember's state dict, then both take the same steps with the same dL/dy.

Also the PyTorch front end (ember.torch): a module with no torch Parameters whose autograd
backward runs the fused update, against the numpy API and against torch.

Skipped when torch does not import.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

# torch's sparse Adagrad warns that it skips its own invariant checks on every step.
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")

import ember  # noqa: E402
from oracle import assert_close, random_batch  # noqa: E402

ROWS, DIM, B = 20, 6, 8


def torch_optimizer(name, param, lr, eps, acc):
    if name == "sgd":
        return torch.optim.SGD([param], lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad([param], lr=lr, initial_accumulator_value=acc, eps=eps)
    if name == "adam":
        return torch.optim.SparseAdam([param], lr=lr, eps=eps)
    raise ValueError(name)


def offsets_of(lengths):
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)


# torch.nn.EmbeddingBag takes per_sample_weights only with mode="sum".
@pytest.mark.parametrize("mode,weighted", [("sum", False), ("sum", True), ("mean", False)])
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_against_torch_embeddingbag(optimizer, mode, weighted):
    torch.manual_seed(0)
    rng = np.random.default_rng({"sgd": 1, "adagrad": 2, "adam": 3}[optimizer] * 10 + (mode == "mean") * 2 + weighted)
    # Adam: ember adds eps to sqrt(m2 / c2), torch to sqrt(m2) (then rescales): with a tiny eps
    # the two updates agree to fp32 rounding.
    eps = 1e-12 if optimizer == "adam" else 1e-8
    lr = {"sgd": 0.1, "adagrad": 0.1, "adam": 0.01}[optimizer]
    acc = 0.1 if optimizer == "adagrad" else 0.0
    table = ember.TableConfig("emb", ROWS, DIM, feature_names=["f"], pooling=mode, optimizer=optimizer, lr=lr,
                              eps=eps, initial_accumulator=acc, init=("uniform", -0.5, 0.5))
    with ember.EmbeddingBagCollection([table], seed=7) as ebc:
        bag = torch.nn.EmbeddingBag(ROWS, DIM, mode=mode, sparse=True)
        with torch.no_grad():
            bag.weight.copy_(torch.from_numpy(ebc.state_dict()["emb.weight"]))
        opt = torch_optimizer(optimizer, bag.weight, lr, eps, acc)
        for step in range(5):
            values, lengths, weights, _ = random_batch(rng, [ROWS], B, max_len=5, weighted=weighted).arrays()
            psw = torch.from_numpy(weights) if weighted else None
            out_t = bag(torch.from_numpy(values), torch.from_numpy(offsets_of(lengths)), per_sample_weights=psw)
            kjt = ember.KJT(values, lengths, weights=weights)
            out_e = ebc.forward(kjt)
            assert_close(out_e, out_t.detach().numpy(), 1e-6, 1e-5, "step %d forward" % step)
            g = rng.standard_normal(out_e.shape).astype(np.float32)
            (out_t * torch.from_numpy(g)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ebc.backward(kjt, g)
            w_t = bag.weight.detach().numpy()
            assert_close(ebc.read("emb"), w_t, 2e-6, 2e-5, "step %d weights" % step)
            st = opt.state[bag.weight]
            if optimizer == "adagrad":
                assert_close(ebc.read("emb", "momentum1"), st["sum"].numpy(), 1e-6, 1e-5, "Adagrad sum")
            if optimizer == "adam":
                assert int(st["step"]) == ebc.step("emb") == step + 1
                assert_close(ebc.read("emb", "momentum1"), st["exp_avg"].numpy(), 1e-7, 1e-5, "exp_avg")
                # ember keeps beta2 in fp32 (0.999f), torch in double: 1 - beta2 differs by 1.3e-5
                # relative, and so does the second moment after a few steps.
                assert_close(ebc.read("emb", "momentum2"), st["exp_avg_sq"].numpy(), 1e-9, 1e-4, "exp_avg_sq")


def test_untouched_rows_not_updated_like_sparse_adam():
    """Lazy Adam: a row absent from a step keeps its weight and moments, in ember as in SparseAdam."""
    table = ember.TableConfig("emb", 4, 3, optimizer="adam", lr=0.1, eps=1e-12)
    with ember.EmbeddingBagCollection([table], seed=1) as ebc:
        bag = torch.nn.EmbeddingBag(4, 3, mode="sum", sparse=True)
        with torch.no_grad():
            bag.weight.copy_(torch.from_numpy(ebc.read("emb")))
        opt = torch.optim.SparseAdam([bag.weight], lr=0.1, eps=1e-12)
        w0 = ebc.read("emb")
        for ids in ([0, 1], [1, 1], [0]):
            v = np.array(ids, np.int64)
            kjt = ember.KJT(v, np.array([len(ids)], np.int32))
            g = np.ones((1, 3), np.float32)
            ebc.forward(kjt)
            ebc.backward(kjt, g)
            (bag(torch.from_numpy(v), torch.zeros(1, dtype=torch.int64)) * torch.from_numpy(g)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            assert_close(ebc.read("emb"), bag.weight.detach().numpy(), 1e-6, 1e-5, "after ids %s" % ids)
        # Rows 2 and 3 were never touched.
        assert np.array_equal(ebc.read("emb")[2:], w0[2:])
        assert np.all(ebc.read("emb", "momentum1")[2:] == 0.0)
        assert np.all(ebc.read("emb", "momentum2")[2:] == 0.0)


# ---- ember.torch -------------------------------------------------------------------------------

def _ember_torch():
    try:
        import ember.torch as et
    except ImportError as e:  # the front end is part of the contract when torch imports
        pytest.fail("torch imports but ember.torch does not: %s" % e)
    return et


def test_ember_torch_module_matches_numpy_api():
    et = _ember_torch()
    tables = [ember.TableConfig("a", 11, 4, feature_names=["fa", "fb"], optimizer="adagrad", lr=0.1),
              ember.TableConfig("b", 5, 3, pooling="mean", optimizer="adam", lr=0.01)]
    rng = np.random.default_rng(5)
    module = et.EmbeddingBagCollection(tables, seed=3)
    ref = ember.EmbeddingBagCollection(tables, seed=3)
    try:
        assert isinstance(module, torch.nn.Module)
        assert list(module.parameters()) == [], "ember.torch keeps no torch Parameters"
        assert isinstance(module.ebc, ember.EmbeddingBagCollection)
        sd = module.state_dict()
        assert "embedding_bags.a.weight" in sd and "embedding_bags.b.weight" in sd
        assert np.array_equal(np.asarray(sd["embedding_bags.a.weight"]), ref.read("a"))
        for step in range(3):
            values, lengths, weights, _ = random_batch(rng, [11, 11, 5], 6, weighted=step == 1).arrays()
            vt, lt = torch.from_numpy(values), torch.from_numpy(lengths)
            wt = torch.from_numpy(weights) if weights is not None else None
            out = module(vt, lt, wt) if wt is not None else module(vt, lt)
            assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (6, 11)
            assert out.requires_grad
            kjt = ember.KJT(values, lengths, weights=weights)
            want = ref.forward(kjt)
            assert np.array_equal(out.detach().numpy(), want)
            g = rng.standard_normal(want.shape).astype(np.float32)
            (out * torch.from_numpy(g)).sum().backward()  # runs the fused update
            ref.backward(kjt, g)
            for t in ("a", "b"):
                assert np.array_equal(module.ebc.read(t), ref.read(t)), "table %s after step %d" % (t, step)
        module.set_lr(0.0)
        before = module.ebc.read("a")
        v = torch.tensor([1, 2, 3], dtype=torch.int64)
        out = module(v, torch.tensor([1, 1, 1], dtype=torch.int32))
        out.sum().backward()
        assert np.array_equal(module.ebc.read("a"), before), "set_lr(0) still moved the weights"
    finally:
        ref.close()


def test_ember_torch_trains_like_torch_sgd():
    """A dense torch layer on top of ember's pooled output, trained end to end: ember's table with
    fused SGD and torch's EmbeddingBag with torch.optim.SGD follow the same trajectory."""
    et = _ember_torch()
    torch.manual_seed(0)
    table = ember.TableConfig("emb", 30, 8, pooling="mean", optimizer="sgd", lr=0.05)
    module = et.EmbeddingBagCollection([table], seed=2)
    bag = torch.nn.EmbeddingBag(30, 8, mode="mean", sparse=True)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(module.ebc.read("emb")))
    head_e = torch.nn.Linear(8, 1)
    head_t = torch.nn.Linear(8, 1)
    head_t.load_state_dict(head_e.state_dict())
    opt_e = torch.optim.SGD(head_e.parameters(), lr=0.05)
    opt_t = torch.optim.SGD(list(head_t.parameters()) + [bag.weight], lr=0.05)
    rng = np.random.default_rng(9)
    for step in range(6):
        values, lengths, _, _ = random_batch(rng, [30], 16, max_len=6).arrays()
        y = torch.from_numpy(rng.standard_normal((16, 1)).astype(np.float32))
        vt = torch.from_numpy(values)
        loss_e = ((head_e(module(vt, torch.from_numpy(lengths))) - y) ** 2).mean()
        loss_t = ((head_t(bag(vt, torch.from_numpy(offsets_of(lengths)))) - y) ** 2).mean()
        assert abs(float(loss_e) - float(loss_t)) <= 1e-5 * (1 + abs(float(loss_t))), "step %d loss" % step
        opt_e.zero_grad()
        opt_t.zero_grad()
        loss_e.backward()
        loss_t.backward()
        opt_e.step()
        opt_t.step()
        assert_close(module.ebc.read("emb"), bag.weight.detach().numpy(), 1e-6, 1e-5, "step %d table" % step)
