"""ember.torch.from_torchrec / to_torchrec_state_dict with real TorchRec objects (need torchrec):

- a TorchRec EmbeddingBagCollection (features sharing a table, a one-row table, SUM and MEAN, an
  empty bag, duplicate ids) converts with its configs, weights and in-backward optimizer: the
  same pooled output, and after training steps in both the same tables (torch's SGD and Adagrad,
  TorchRec's RowWiseAdagrad, applied in backward on the dense gradient);
- the round trip: ember's state dict loads into a fresh TorchRec collection and gives its output;
- a model holding the collection keeps TorchRec's state_dict keys after the in-place conversion;
- TorchRec ParameterSharding plans map to ember's TablePlans; what ember cannot take is refused
  (another sharding type, uneven column slices, no optimizer, an optimizer argument it lacks).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec", reason="torchrec not installed")
import ember  # noqa: E402
import ember.torch as et  # noqa: E402
from torchrec.distributed.types import ParameterSharding  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection  # noqa: E402
from torchrec.optim import RowWiseAdagrad  # noqa: E402
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

KEYS = ["f0", "f1", "f2"]


def _torchrec_ebc(optimizer=torch.optim.SGD, kwargs=None, seed=0):
    torch.manual_seed(seed)
    ebc = EmbeddingBagCollection(tables=[
        EmbeddingBagConfig(name="t0", embedding_dim=4, num_embeddings=13, feature_names=["f0", "f1"]),
        EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=1, feature_names=["f2"],
                           pooling=PoolingType.MEAN)])
    if optimizer is not None:
        apply_optimizer_in_backward(optimizer, ebc.parameters(), kwargs or {"lr": 0.1})
    return ebc


def _kjt(seed, B=4):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 4, 3 * B)
    lengths[0] = 0
    lengths[2 * B] = max(lengths[2 * B], 1)  # the one-row table read at least once
    values = np.concatenate([rng.integers(0, 13, int(lengths[:2 * B].sum())),
                             np.zeros(int(lengths[2 * B:].sum()), np.int64)])
    values[1:3] = values[0] if values.size > 2 else values[1:3]  # duplicate ids
    return KeyedJaggedTensor(keys=KEYS, values=torch.from_numpy(values.astype(np.int64)),
                             lengths=torch.from_numpy(lengths.astype(np.int32)), stride=B)


@pytest.mark.parametrize("opt,kwargs,name", [(torch.optim.SGD, {"lr": 0.1}, "sgd"),
                                             (torch.optim.Adagrad, {"lr": 0.1, "eps": 1e-8}, "adagrad"),
                                             (RowWiseAdagrad, {"lr": 0.1}, "rowwise_adagrad")])
def test_converted_collection_computes_and_trains_as_torchrec(opt, kwargs, name):
    ref = _torchrec_ebc(opt, kwargs)
    conv = et.from_torchrec(ref)
    assert isinstance(conv, et.EmbeddingBagCollection)
    assert [(t.name, t.num_embeddings, t.embedding_dim, t.pooling, t.optimizer) for t in conv.ebc.tables] == [
        ("t0", 13, 4, "sum", name), ("t1", 1, 3, "mean", name)]
    for step in range(3):
        kjt = _kjt(step)
        want, got = ref(kjt).values(), conv(kjt).values()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-7)
        g = torch.from_numpy(np.random.default_rng(10 + step).standard_normal(tuple(want.shape)).astype(np.float32))
        (want * g).sum().backward()
        (got * g).sum().backward()
    sd = et.to_torchrec_state_dict(conv)
    assert sorted(sd) == sorted(ref.state_dict())
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(sd[k].numpy(), v.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert not np.allclose(sd["embedding_bags.t0.weight"].numpy(), _torchrec_ebc(None).state_dict()[
        "embedding_bags.t0.weight"].numpy()), "the tables did not train"


def test_round_trip_into_torchrec():
    conv = et.from_torchrec(_torchrec_ebc())
    kjt = _kjt(7)
    conv(kjt).values().sum().backward()  # trained once in ember
    back = _torchrec_ebc(None, seed=1)
    back.load_state_dict(et.to_torchrec_state_dict(conv))
    for t in ("t0", "t1"):
        assert np.array_equal(back.embedding_bags[t].weight.detach().numpy(), conv.ebc.read(t))
    with torch.no_grad():
        np.testing.assert_allclose(back(_kjt(8)).values().numpy(), conv(_kjt(8)).values().numpy(), rtol=1e-6,
                                   atol=1e-7)


def test_model_converted_in_place_keeps_torchrec_keys():
    class Sparse(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding_bag_collection = _torchrec_ebc()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sparse_arch = Sparse()
            self.over = torch.nn.Linear(11, 1)

        def forward(self, kjt):
            return self.over(self.sparse_arch.embedding_bag_collection(kjt).values())

    model = Model()
    keys = sorted(model.state_dict())
    want = model(_kjt(3)).detach()
    assert et.from_torchrec(model) is model
    assert isinstance(model.sparse_arch.embedding_bag_collection, et.EmbeddingBagCollection)
    assert sorted(et.to_torchrec_state_dict(model)) == keys
    np.testing.assert_allclose(model(_kjt(3)).detach().numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    with pytest.raises(ember.InvalidArgumentError, match="no entry for module 'sparse_arch"):
        et.from_torchrec(Model(), plan={"other": {}})


def test_plans_map_to_ember_table_plans():
    tables = et.from_torchrec(_torchrec_ebc()).ebc.tables

    def ps(kind, ranks):
        return ParameterSharding(sharding_type=kind, compute_kernel="fused", ranks=ranks)

    got = et.plan_from_torchrec({"t0": ps("column_wise", [1, 0]), "t1": ps("table_wise", [1])}, tables)
    assert got == {"t0": ember.TablePlan("cw", (1, 0), num_shards=2), "t1": ember.TablePlan("tw", (1,))}
    got = et.plan_from_torchrec({"embedding_bags.t0": ps("table_row_wise", [0, 1]), "t1": ps("data_parallel", None)},
                                tables)
    assert got == {"t0": ember.TablePlan("twrw", (0, 1), group_size=2), "t1": ember.TablePlan("dp")}
    assert et.plan_from_torchrec({"t0": ps("row_wise", [0, 1]), "t1": ps("row_wise", [0, 1])}, tables)["t0"] == \
        ember.TablePlan("rw")
    with pytest.raises(ember.UnsupportedError, match="t0.*grid_shard"):
        et.plan_from_torchrec({"t0": ps("grid_shard", [0, 1]), "t1": ps("table_wise", [0])}, tables)
    with pytest.raises(ember.UnsupportedError, match="t0.*column slices"):
        et.plan_from_torchrec({"t0": ps("column_wise", [0, 1, 2]), "t1": ps("table_wise", [0])}, tables)
    with pytest.raises(ember.InvalidArgumentError, match="plan's tables"):
        et.plan_from_torchrec({"t0": ps("table_wise", [0])}, tables)


def test_refusals():
    with pytest.raises(ember.InvalidArgumentError, match="table 't0' has no fused optimizer"):
        et.from_torchrec(_torchrec_ebc(None))
    with pytest.raises(ember.UnsupportedError, match="nesterov"):
        et.from_torchrec(_torchrec_ebc(torch.optim.SGD, {"lr": 0.1, "nesterov": True, "momentum": 0.9}))
    conv = et.from_torchrec(_torchrec_ebc(None), optimizer=("rowwise_adagrad", {"lr": 0.05}))
    assert [t.optimizer for t in conv.ebc.tables] == ["rowwise_adagrad"] * 2
    with pytest.raises(ember.InvalidArgumentError, match="holds no TorchRec"):
        et.from_torchrec(torch.nn.Linear(2, 2))


def test_qcomms_map_to_wire_precision():
    from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig
    one = (1.0, 1.0)
    assert et.wire_precision_from_qcomms(QCommsConfig(CommType.FP16, CommType.BF16)) == (("fp16", "bf16"), one)
    assert et.wire_precision_from_qcomms(QCommsConfig(CommType.FP32, CommType.FP32)) == (("fp32", "fp32"), one)
    assert et.wire_precision_from_qcomms(QCommsConfig(CommType.INT8, CommType.INT8)) == (("int8", "int8"), one)
    # TorchRec's FP8: E4M3 forward, E5M2 backward unless fp8_bwd_uses_143; its loss scales.
    assert et.wire_precision_from_qcomms(QCommsConfig(CommType.FP8, CommType.FP8, backward_loss_scale=128.0)) == (
        ("fp8_e4m3", "fp8_e5m2"), (1.0, 128.0))
    assert et.wire_precision_from_qcomms(QCommsConfig(CommType.FP8, CommType.FP8, fp8_bwd_uses_143=True,
                                                      forward_loss_scale=4.0)) == (("fp8_e4m3", "fp8_e4m3"), (4.0, 1.0))
    refusals = [(QCommsConfig(CommType.FP8, CommType.FP16, fp8_quantize_dim=64), "row-wise fp8")]
    if hasattr(CommType, "MX4"):
        refusals.append((QCommsConfig(CommType.FP16, CommType.MX4), "backward_precision 'mx4'"))
    for q, fragment in refusals:
        with pytest.raises(ember.UnsupportedError, match=fragment):
            et.wire_precision_from_qcomms(q)
        with pytest.raises(ember.UnsupportedError, match=fragment):  # refused before any table is made
            et.from_torchrec(_torchrec_ebc(), qcomms=q)
    # One process: nothing crosses a wire, the local collection is made as without qcomms.
    assert isinstance(et.from_torchrec(_torchrec_ebc(), qcomms=QCommsConfig(CommType.FP16, CommType.BF16)),
                      et.EmbeddingBagCollection)
