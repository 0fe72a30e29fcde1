"""The local ember.EmbeddingBagCollection against the float64 oracle (tests/python/oracle.py), and
its contract at the Python boundary (docs/python_api: arrays, errors, state, zero-copy views).

numpy only: nothing here imports torch.
"""
import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
from oracle import (OPTIMIZERS, STATES, Oracle, assert_close, assert_within_ulps, bf16_bits, bf16_value,
                    feature_rows, random_batch, representable, vbe_arrays)

# fp32 arithmetic against float64 over a few steps (sums of a handful of terms of size ~1).
ATOL, RTOL = 2e-6, 2e-5

# Hyper-parameters per optimizer that move the weights visibly in a few steps.
HYPER = {
    "sgd": dict(lr=0.1),
    "adagrad": dict(lr=0.1, initial_accumulator=0.05, eps=1e-6),
    "rowwise_adagrad": dict(lr=0.1, initial_accumulator=0.05),
    "adam": dict(lr=0.02),
    "partial_rowwise_adam": dict(lr=0.02, beta1=0.8, beta2=0.95),
    "lamb": dict(lr=0.02),
    "partial_rowwise_lamb": dict(lr=0.02, beta1=0.85),
    "lars_sgd": dict(lr=0.5, eta=0.01, momentum=0.8),
}


def kjt_arrays(batch, samples=None):
    return batch.arrays(samples)


def make_kjt(arrays, keys=None):
    values, lengths, weights, B = arrays
    return ember.KJT(values, lengths, weights=weights, keys=keys, batch_size=B)


def grad_for(rng, out_shape):
    return rng.standard_normal(out_shape).astype(np.float32)


def compare_state(ebc, oracle, what, atol=ATOL, rtol=RTOL):
    sd = ebc.state_dict()
    for t in oracle.tables:
        assert_close(sd[t.name + ".weight"], t.w, atol, rtol, "%s: %s.weight" % (what, t.name))
        for sname, arr in t.m.items():
            assert_close(sd[t.name + "." + sname], arr, atol, rtol, "%s: %s.%s" % (what, t.name, sname))
        assert int(np.asarray(sd[t.name + ".step"])) == t.step, "%s: %s.step" % (what, t.name)


def train_and_compare(ebc, tables, rng, steps=4, weighted=None, bounds="error", B=7, grad_weights=False):
    """Steps of forward + backward on fresh random batches, each compared with the oracle."""
    oracle = Oracle(tables, ebc.state_dict(), bounds=bounds)
    rows = feature_rows(tables)
    for step in range(steps):
        w = (step % 2 == 1) if weighted is None else weighted
        batch = random_batch(rng, rows, B, weighted=w)
        arrays = kjt_arrays(batch)
        kjt = make_kjt(arrays, keys=ebc.feature_names)
        out = ebc.forward(kjt)
        want = oracle.forward(*arrays)
        assert out.dtype == np.float32 and out.shape == want.shape
        assert_close(out, want, ATOL, RTOL, "step %d forward" % step)
        g = grad_for(rng, out.shape)
        gw = ebc.backward(kjt, g, grad_weights=grad_weights and w)
        gw_want = oracle.backward(arrays[0], arrays[1], arrays[2], g, arrays[3])
        if grad_weights and w:
            assert gw.dtype == np.float32 and gw.shape == (len(arrays[0]),)
            assert_close(gw, gw_want, ATOL, RTOL, "step %d grad_weights" % step)
        compare_state(ebc, oracle, "after step %d" % step)
    return oracle


# ---- forward and training against the oracle ------------------------------------------------

@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pooling", ["sum", "mean", None])
def test_forward_matches_oracle(make_tables, rng, pooling, weighted):
    tables = make_tables(pooling=pooling)
    with ember.EmbeddingBagCollection(tables, seed=3) as ebc:
        assert ebc.feature_names == ["f0", "f1", "f2", "f3"]
        assert ebc.table_names == ["t0", "t1", "t2"]
        assert ebc.output_dim == 8 + 8 + 4 + 6
        assert [t.name for t in ebc.tables] == ["t0", "t1", "t2"]
        oracle = Oracle(tables, ebc.state_dict())
        for B in (1, 9):
            arrays = kjt_arrays(random_batch(rng, feature_rows(tables), B, weighted=weighted))
            out = ebc.forward(make_kjt(arrays))
            assert out.shape == (B, ebc.output_dim) and out.dtype == np.float32
            assert_close(out, oracle.forward(*arrays), 1e-6, 1e-6, "forward B=%d" % B)


def test_forward_empty_bags_and_mean_divisor(make_tables):
    """MEAN divides by the number of ids (not the weight sum); an empty bag gives 0."""
    tables = make_tables("one", pooling="mean")
    with ember.EmbeddingBagCollection(tables, seed=1) as ebc:
        w = ebc.read("t0")
        values = np.array([3, 3, 5, 1], np.int64)
        lengths = np.array([0, 3, 1], np.int32)
        weights = np.array([2.0, 0.5, 1.0, 4.0], np.float32)
        out = ebc.forward(ember.KJT(values, lengths, weights=weights))
        assert np.all(out[0] == 0.0)
        want = (2.0 * w[3].astype(np.float64) + 0.5 * w[3] + 1.0 * w[5]) / 3.0
        assert_close(out[1], want, 1e-7, 1e-6, "weighted mean bag")
        assert_close(out[2], 4.0 * w[1].astype(np.float64), 1e-7, 1e-6, "one-id bag")


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_training_matches_oracle(make_tables, rng, optimizer, pooling):
    tables = make_tables(pooling=pooling, optimizer=optimizer, **HYPER[optimizer])
    with ember.EmbeddingBagCollection(tables, seed=11) as ebc:
        assert ebc.tensor_names("t0") == ["weight"] + [s for s, _ in STATES[optimizer]]
        before = ebc.state_dict()
        if "adagrad" in optimizer:  # the Adagrad family starts at initial_accumulator
            assert np.all(before["t0.momentum1"] == np.float32(HYPER[optimizer]["initial_accumulator"]))
        train_and_compare(ebc, tables, rng, steps=4)
        # Untouched rows and every table moved where touched: some weight changed.
        assert not np.array_equal(ebc.read("t0"), before["t0.weight"])


@pytest.mark.parametrize("mode", ["l2", "decoupled"])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_weight_decay_matches_oracle(make_tables, rng, optimizer, mode):
    tables = make_tables("one", optimizer=optimizer, weight_decay=0.05, weight_decay_mode=mode,
                         **HYPER[optimizer])
    with ember.EmbeddingBagCollection(tables, seed=5) as ebc:
        train_and_compare(ebc, tables, rng, steps=3)


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_grad_weights(make_tables, rng, pooling):
    tables = make_tables(pooling=pooling, optimizer="adagrad", lr=0.1)
    with ember.EmbeddingBagCollection(tables, seed=2) as ebc:
        train_and_compare(ebc, tables, rng, steps=2, weighted=True, grad_weights=True)
        # Without weights in the KJT there is nothing to differentiate by.
        arrays = kjt_arrays(random_batch(rng, feature_rows(tables), 3))
        kjt = make_kjt(arrays)
        out = ebc.forward(kjt)
        before = ebc.state_dict()
        with pytest.raises(ember.InvalidArgumentError, match="weight"):
            ebc.backward(kjt, np.ones_like(out), grad_weights=True)
        assert_states_equal(ebc.state_dict(), before)


def test_sequence_collection(make_tables, rng):
    """All-NONE tables: one output row per id ([nnz, D]), trained like the pooled ones."""
    tables = make_tables("none", optimizer="adam", lr=0.05)
    with ember.EmbeddingBagCollection(tables, seed=4) as ebc:
        assert ebc.output_dim == 4
        oracle = Oracle(tables, ebc.state_dict())
        for step in range(3):
            arrays = kjt_arrays(random_batch(rng, feature_rows(tables), 5, weighted=step == 1))
            kjt = make_kjt(arrays)
            out = ebc.forward(kjt)
            assert out.shape == (len(arrays[0]), 4)
            assert_close(out, oracle.forward(*arrays), ATOL, RTOL, "sequence forward")
            g = grad_for(rng, out.shape)
            ebc.backward(kjt, g)
            oracle.backward(arrays[0], arrays[1], arrays[2], g, arrays[3])
            compare_state(ebc, oracle, "sequence step %d" % step)


def test_duplicate_ids_one_update_per_row(make_tables):
    """A row read by several ids in a batch gets one update with the summed gradient: with Adam
    the first step moves it by exactly lr per element whatever the multiplicity."""
    tables = make_tables("one", optimizer="adam", lr=0.125, init=("zeros",))
    with ember.EmbeddingBagCollection(tables) as ebc:
        values = np.array([4, 4, 4, 7, 4], np.int64)
        lengths = np.array([3, 2], np.int32)
        kjt = ember.KJT(values, lengths)
        out = ebc.forward(kjt)
        ebc.backward(kjt, np.full(out.shape, 0.5, np.float32))
        w = ebc.read("t0")
        assert_close(w[4], np.full(8, -0.125), 1e-7, 1e-6, "row 4 (4 ids)")
        assert_close(w[7], np.full(8, -0.125), 1e-7, 1e-6, "row 7 (1 id)")
        others = np.delete(w, [4, 7], axis=0)
        assert np.all(others == 0.0), "untouched rows changed"
        assert_close(ebc.read("t0", "momentum1")[4], np.full(8, 0.1 * 2.0), 1e-7, 1e-6, "m1 of row 4")


# ---- 16-bit storage ---------------------------------------------------------------------------

@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise_adagrad", "adam", "lamb"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16bit_storage_matches_oracle(make_tables, rng, dtype, optimizer):
    """Each step from the stored values: forward exact up to fp32 summation, the updated weight
    within one ulp of the storage dtype (fp32 and float64 arithmetic may round the last bit apart),
    the fp32 optimizer state as tight as with fp32 storage."""
    tables = make_tables(dtype=dtype, optimizer=optimizer, **HYPER[optimizer])
    with ember.EmbeddingBagCollection(tables, seed=21) as ebc:
        for t in tables:
            v = ebc.weights_view(t.name)
            assert v.dtype == (np.float16 if dtype == "fp16" else np.uint16)
            assert v.shape == (t.num_embeddings, t.embedding_dim)
            assert np.array_equal(to_f32(v, dtype), ebc.read(t.name))
        for step in range(3):
            sd = ebc.state_dict()
            for t in tables:
                assert representable(sd[t.name + ".weight"], dtype), "stored weights are %s values" % dtype
            oracle = Oracle(tables, sd)
            arrays = kjt_arrays(random_batch(rng, feature_rows(tables), 6, weighted=step == 2))
            kjt = make_kjt(arrays)
            out = ebc.forward(kjt)
            assert_close(out, oracle.forward(*arrays), 1e-6, 1e-6, "%s forward" % dtype)
            g = grad_for(rng, out.shape)
            ebc.backward(kjt, g)
            oracle.backward(arrays[0], arrays[1], arrays[2], g, arrays[3])
            after = ebc.state_dict()
            for t in oracle.tables:
                assert_within_ulps(after[t.name + ".weight"], t.w, dtype, 1.0, "%s step %d" % (t.name, step))
                for sname, arr in t.m.items():
                    assert_close(after[t.name + "." + sname], arr, ATOL, RTOL, "%s.%s" % (t.name, sname))


def to_f32(view, dtype):
    view = np.asarray(view)
    if dtype == "bf16":
        return bf16_value(view)
    return view.astype(np.float32)


def test_bf16_read_native_bits(make_tables):
    tables = make_tables("one", dtype="bf16")
    with ember.EmbeddingBagCollection(tables, seed=8) as ebc:
        w32 = ebc.read("t0")
        bits = ebc.read("t0", dtype="bf16")
        assert np.array_equal(np.asarray(bits).view(np.uint16), bf16_bits(w32))
        assert np.array_equal(np.asarray(ebc.weights_view("t0")).view(np.uint16), bf16_bits(w32))
        # A write rounds to nearest even into the storage.
        x = np.full((2, 8), 1.0 + 2.0 ** -9, np.float32)  # a quarter ulp above 1 in bf16
        ebc.write("t0", "weight", x, row_begin=3)
        assert np.all(ebc.read("t0", rows=slice(3, 5)) == 1.0)


def test_fp16_read_native(make_tables):
    tables = make_tables("one", dtype="fp16")
    with ember.EmbeddingBagCollection(tables, seed=8) as ebc:
        w32 = ebc.read("t0")
        h = np.asarray(ebc.read("t0", dtype="fp16"))
        assert np.array_equal(h.view(np.uint16), w32.astype(np.float16).view(np.uint16))


def test_stochastic_rounding(make_tables):
    """bf16 with stochastic rounding: w = 1 + a quarter ulp after the update rounds up with
    probability 1/4; every result is one of the two neighbours; the bits are a function of the
    seed (same seed, same bits)."""
    tables = [ember.TableConfig("t0", 1000, 16, dtype="bf16", optimizer="sgd", lr=1.0, stochastic_rounding=True)]

    def run(seed):
        with ember.EmbeddingBagCollection(tables, seed=seed) as ebc:
            ebc.write("t0", "weight", np.ones((1000, 16), np.float32))
            kjt = ember.KJT(np.arange(1000, dtype=np.int64), np.ones(1000, np.int32))
            out = ebc.forward(kjt)
            ebc.backward(kjt, np.full(out.shape, -(2.0 ** -9), np.float32))  # w <- 1 + 2^-9
            return ebc.read("t0")

    a, b, c = run(1), run(1), run(2)
    assert set(np.unique(a).tolist()) <= {1.0, 1.0 + 2.0 ** -7}
    up = float(np.mean(a > 1.0))
    assert 0.22 < up < 0.28, "fraction rounded up %g, want about 0.25" % up
    assert np.array_equal(a, b), "same seed, different bits"
    assert not np.array_equal(a, c), "another seed gave the same bits"
    # Round to nearest even (the default) keeps every weight at 1.
    tables[0] = dataclasses.replace(tables[0], stochastic_rounding=False)
    assert np.all(run(1) == 1.0)


def test_convert_dtype_trains_the_one_storage(make_tables, rng):
    tables = make_tables("one", optimizer="sgd", lr=0.1)
    with ember.EmbeddingBagCollection(tables, seed=9) as ebc:
        w32 = ebc.read("t0")
        ebc.convert_dtype("t0", "bf16")
        assert ebc.weights_view("t0").dtype == np.uint16
        w16 = ebc.read("t0")
        assert np.array_equal(w16, bf16_value(bf16_bits(w32)))
        assert not np.array_equal(w16, w32)
        arrays = kjt_arrays(random_batch(rng, feature_rows(tables), 5))
        kjt = make_kjt(arrays)
        bf_tables = [dataclasses.replace(tables[0], dtype="bf16")]
        oracle = Oracle(bf_tables, ebc.state_dict())
        out = ebc.forward(kjt)
        assert_close(out, oracle.forward(*arrays), 1e-6, 1e-6, "forward reads the converted storage")
        g = grad_for(rng, out.shape)
        ebc.backward(kjt, g)
        oracle.backward(arrays[0], arrays[1], arrays[2], g, arrays[3])
        assert_within_ulps(ebc.read("t0"), oracle.tables[0].w, "bf16", 1.0, "update lands in bf16 storage")
        assert representable(ebc.read("t0"), "bf16")
        ebc.convert_dtype("t0", "fp32")
        assert ebc.weights_view("t0").dtype == np.float32
        assert representable(ebc.read("t0"), "bf16")  # fp32 holds the bf16 values exactly


# ---- state ------------------------------------------------------------------------------------

def assert_states_equal(a, b):
    assert set(a) == set(b), "keys differ: %s vs %s" % (sorted(a), sorted(b))
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.shape == y.shape and np.array_equal(x, y), "%s differs" % k


@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad", "adam", "partial_rowwise_lamb", "lars_sgd"])
def test_state_dict_round_trip(make_tables, rng, optimizer):
    tables = make_tables(optimizer=optimizer, **HYPER[optimizer])
    rows = feature_rows(tables)
    a = ember.EmbeddingBagCollection(tables, seed=1)
    b = ember.EmbeddingBagCollection(tables, seed=2)
    try:
        assert not np.array_equal(a.read("t0"), b.read("t0")), "seeds 1 and 2 initialised alike"
        for _ in range(2):
            kjt = make_kjt(kjt_arrays(random_batch(rng, rows, 4)))
            out = a.forward(kjt)
            a.backward(kjt, grad_for(rng, out.shape))
        sd = a.state_dict()
        want_keys = set()
        for t in tables:
            want_keys |= {t.name + ".weight", t.name + ".step"} | {t.name + "." + s for s, _ in STATES[optimizer]}
            assert sd[t.name + ".weight"].dtype == np.float32
            assert sd[t.name + ".weight"].shape == (t.num_embeddings, t.embedding_dim)
            assert int(np.asarray(sd[t.name + ".step"])) == 2
        assert set(sd) == want_keys
        b.load_state_dict(sd)
        assert_states_equal(b.state_dict(), sd)
        assert b.step("t0") == 2
        # The same step from the same state: bitwise the same everywhere.
        kjt = make_kjt(kjt_arrays(random_batch(rng, rows, 5, weighted=True)))
        oa, ob = a.forward(kjt), b.forward(kjt)
        assert np.array_equal(oa, ob)
        g = grad_for(rng, oa.shape)
        a.backward(kjt, g)
        b.backward(kjt, g)
        assert_states_equal(a.state_dict(), b.state_dict())
        # The state dict is a copy: changing it changes nothing in the collection.
        sd2 = a.state_dict()
        sd2["t0.weight"][:] = 7.0
        assert not np.any(a.read("t0") == 7.0)
    finally:
        a.close()
        b.close()


def test_read_write_rows_and_state_shapes(make_tables):
    tables = make_tables("one", optimizer="partial_rowwise_adam", lr=0.1)
    with ember.EmbeddingBagCollection(tables, seed=3) as ebc:
        w = ebc.read("t0")
        assert w.shape == (12, 8) and w.dtype == np.float32
        assert np.array_equal(ebc.read("t0", rows=slice(2, 5)), w[2:5])
        assert np.array_equal(ebc.read(0, "weight"), w)  # a table by index
        w[:] = 5.0  # a copy: the table does not change
        assert not np.any(ebc.read("t0") == 5.0)
        w = ebc.read("t0")
        assert ebc.read("t0", "momentum1").shape == (12, 8)
        assert ebc.read("t0", "momentum2").shape == (12, 1)
        x = np.arange(16, dtype=np.float32).reshape(2, 8) / 16
        ebc.write("t0", "weight", x, row_begin=3)
        w2 = ebc.read("t0")
        assert np.array_equal(w2[3:5], x)
        assert np.array_equal(np.delete(w2, [3, 4], axis=0), np.delete(w, [3, 4], axis=0))
        # The next forward reads what was written.
        out = ebc.forward(ember.KJT(np.array([3, 4], np.int64), np.array([2], np.int32)))
        assert_close(out[0], x[0].astype(np.float64) + x[1], 1e-7, 1e-7, "forward after write")
        m2 = np.full((12, 1), 0.25, np.float32)
        ebc.write("t0", "momentum2", m2)
        assert np.array_equal(ebc.read("t0", "momentum2"), m2)
        with pytest.raises(ember.InvalidArgumentError):
            ebc.write("t0", "weight", np.zeros((2, 8), np.float32), row_begin=11)  # past the end
        with pytest.raises(ember.InvalidArgumentError):
            ebc.write("t0", "weight", np.zeros((2, 7), np.float32))  # wrong width
        with pytest.raises(ember.InvalidArgumentError, match="momentum3"):
            ebc.read("t0", "momentum3")
        with pytest.raises(ember.InvalidArgumentError, match="nope"):
            ebc.read("nope")


def test_set_lr_and_steps(make_tables, rng):
    tables = make_tables(optimizer="adam", lr=0.01)
    rows = feature_rows(tables)
    with ember.EmbeddingBagCollection(tables, seed=6) as ebc:
        assert [ebc.step(t) for t in ("t0", "t1", "t2")] == [0, 0, 0]
        # lr 0: the weights stay, the steps and the moments still advance.
        ebc.set_lr(0.0)
        kjt = make_kjt(kjt_arrays(random_batch(rng, rows, 4)))
        w0 = ebc.read("t0")
        out = ebc.forward(kjt)
        ebc.backward(kjt, grad_for(rng, out.shape))
        assert np.array_equal(ebc.read("t0"), w0)
        assert ebc.step("t0") == 1 and ebc.step(2) == 1
        # One table's lr, and a step counter set by hand (Adam's bias correction reads it).
        ebc.set_lr(0.05, table="t0")
        ebc.set_lr(0.02)
        ebc.set_lr(0.05, table="t0")
        ebc.set_step("t2", 10)
        assert ebc.step("t2") == 10
        lrs = {"t0": 0.05, "t1": 0.02, "t2": 0.02}
        oracle = Oracle([dataclasses.replace(t, lr=lrs[t.name]) for t in tables], ebc.state_dict())
        assert oracle.table("t2").step == 10
        arrays = kjt_arrays(random_batch(rng, rows, 6))
        kjt = make_kjt(arrays)
        out = ebc.forward(kjt)
        g = grad_for(rng, out.shape)
        ebc.backward(kjt, g)
        oracle.backward(arrays[0], arrays[1], arrays[2], g, arrays[3])
        compare_state(ebc, oracle, "after set_lr/set_step")
        assert ebc.step("t2") == 11 and ebc.step("t0") == 2
        with pytest.raises(ember.InvalidArgumentError):
            ebc.set_lr(-1.0)
        with pytest.raises(ember.InvalidArgumentError):
            ebc.set_lr(float("nan"), table="t1")
        with pytest.raises(ember.InvalidArgumentError, match="zz"):
            ebc.set_lr(0.1, table="zz")


# ---- bounds -------------------------------------------------------------------------------

def test_bounds_error_names_feature_and_id(make_tables):
    tables = make_tables()
    with ember.EmbeddingBagCollection(tables, seed=1) as ebc:
        before = ebc.state_dict()
        # f3 reads t2 (10 rows); its bag 1 holds id 10.
        values = np.array([0, 1, 0, 0, 2, 10], np.int64)
        lengths = np.array([1, 0, 1, 0, 1, 0, 1, 2], np.int32)
        kjt = ember.KJT(values, lengths)
        with pytest.raises(ember.OutOfRangeError) as ei:
            ebc.forward(kjt)
        e = ei.value
        assert isinstance(e, IndexError) and isinstance(e, ember.EmberError)
        assert e.status == "OUT_OF_RANGE" and e.code == -2
        assert "f3" in e.message and "10" in e.message and "(rank 0)" in e.message
        assert "f3" in str(e)
        with pytest.raises(ember.OutOfRangeError):
            ebc.backward(kjt, np.ones((2, 26), np.float32))
        with pytest.raises(ember.OutOfRangeError, match="-1"):
            ebc.forward(ember.KJT(np.array([0, 0, 0, -1], np.int64), np.array([1, 0, 1, 0, 1, 0, 0, 1], np.int32)))
        assert_states_equal(ebc.state_dict(), before)


@pytest.mark.parametrize("bounds", ["clamp", "skip"])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_bounds_clamp_and_skip(make_tables, rng, bounds, pooling):
    tables = make_tables(pooling=pooling, optimizer="rowwise_adagrad", lr=0.1)
    rows = feature_rows(tables)
    with ember.EmbeddingBagCollection(tables, seed=2, bounds=bounds) as ebc:
        oracle = Oracle(tables, ebc.state_dict(), bounds=bounds)
        for step in range(3):
            batch = random_batch(rng, rows, 6, weighted=step == 1)
            values, lengths, weights, B = batch.arrays()
            # About a third of the ids pushed outside their tables, on both sides.
            bad = rng.random(len(values)) < 0.33
            values = np.where(bad, np.where(rng.random(len(values)) < 0.5, -1 - values, values + 20), values)
            assert bad.any()
            kjt = ember.KJT(values, lengths, weights=weights, batch_size=B)
            out = ebc.forward(kjt)
            assert_close(out, oracle.forward(values, lengths, weights, B), ATOL, RTOL, "%s forward" % bounds)
            g = grad_for(rng, out.shape)
            gw = ebc.backward(kjt, g, grad_weights=weights is not None)
            gw_want = oracle.backward(values, lengths, weights, g, B)
            if weights is not None:
                assert_close(gw, gw_want, ATOL, RTOL, "%s grad_weights" % bounds)
            compare_state(ebc, oracle, "%s step %d" % (bounds, step))


def test_bounds_unknown_mode(make_tables):
    with pytest.raises(ember.InvalidArgumentError, match="bogus"):
        ember.EmbeddingBagCollection(make_tables(), bounds="bogus")


# ---- bad inputs ------------------------------------------------------------------------------

ERROR_TABLE = [
    ("INVALID_ARG", -1, "InvalidArgumentError", (ValueError,)),
    ("OUT_OF_RANGE", -2, "OutOfRangeError", (IndexError,)),
    ("NOMEM", -3, "OutOfMemoryError", (MemoryError,)),
    ("IO", -4, "EmberIOError", (OSError,)),
    ("COMM", -5, "CommunicationError", ()),
    ("REMOTE", -6, "RemoteError", ()),
    ("NUMERIC", -7, "NumericError", (ArithmeticError,)),
    ("UNSUPPORTED", -8, "UnsupportedError", (NotImplementedError,)),
    ("STATE", -9, "StateError", (RuntimeError,)),
    ("FORMAT", -10, "FormatError", (ValueError,)),
    ("TIMEOUT", -11, "CollectiveTimeoutError", (TimeoutError,)),
]


@pytest.mark.parametrize("status,code,name,bases", ERROR_TABLE)
def test_error_classes(status, code, name, bases):
    cls = getattr(ember, name)
    assert issubclass(cls, ember.EmberError) and issubclass(ember.EmberError, Exception)
    for b in bases:
        assert issubclass(cls, b), "%s should subclass %s" % (name, b.__name__)
    from ember import errors
    assert getattr(errors, name) is cls


def _f4(lengths, values, weights=None, **kw):
    return ember.KJT(np.asarray(values), np.asarray(lengths), weights=weights, **kw)


BAD_FORWARD = [
    # (id, kjt builder, exception, message fragments)
    ("float ids", lambda: ember.KJT(np.array([1.0, 2.0]), np.array([1, 0, 1, 0], np.int32)),
     ember.InvalidArgumentError, ["float"]),
    ("float lengths", lambda: ember.KJT(np.array([1, 2], np.int64), np.array([1.0, 0.0, 1.0, 0.0])),
     ember.InvalidArgumentError, ["float"]),
    ("complex weights", lambda: ember.KJT(np.array([1, 2], np.int64), np.array([1, 0, 1, 0], np.int32),
                                          weights=np.array([1 + 1j, 2])),
     ember.InvalidArgumentError, ["complex"]),
    ("object ids", lambda: ember.KJT(np.array([1, "a"], dtype=object), np.array([1, 0, 1, 0], np.int32)),
     ember.InvalidArgumentError, []),
    ("2-d ids", lambda: ember.KJT(np.array([[1, 2]], np.int64), np.array([1, 0, 1, 0], np.int32)),
     ember.InvalidArgumentError, []),
    ("lengths sum above nnz", lambda: _f4([1, 0, 2, 0], np.array([1, 2], np.int64)),
     ember.InvalidArgumentError, ["sum of lengths"]),
    ("lengths sum below nnz", lambda: _f4([1, 0, 0, 0], np.array([1, 2], np.int64)),
     ember.InvalidArgumentError, ["sum of lengths"]),
    ("negative length", lambda: _f4([2, -1, 1, 0], np.array([1, 2], np.int64)),
     ember.InvalidArgumentError, ["negative length", "f0", "-1"]),
    ("bags not a multiple of the features", lambda: _f4([1, 0, 1], np.array([1, 2], np.int64)),
     ember.InvalidArgumentError, []),
    ("weights of another length", lambda: _f4([1, 0, 1, 0], np.array([1, 2], np.int64),
                                              weights=np.ones(3, np.float32)),
     ember.InvalidArgumentError, []),
    ("nan weight", lambda: _f4([0, 2, 0, 0], np.array([1, 2], np.int64),
                               weights=np.array([1.0, np.nan], np.float32)),
     ember.NumericError, ["nan", "f0", "bag 1"]),
    ("keys of another collection", lambda: _f4([1, 0, 1, 0], np.array([1, 2], np.int64), keys=["alpha", "beta"]),
     ember.InvalidArgumentError, ["alpha", "f0"]),
    ("keys in another order", lambda: _f4([1, 0, 1, 0], np.array([1, 2], np.int64), keys=["f1", "f0"]),
     ember.InvalidArgumentError, ["f1", "f0"]),
    ("offsets not starting at 0", lambda: ember.KJT(np.array([1, 2], np.int64), offsets=np.array([1, 1, 2, 2, 2])),
     ember.InvalidArgumentError, ["offsets"]),
    ("offsets and lengths disagree", lambda: ember.KJT(np.array([1, 2], np.int64), np.array([1, 0, 1, 0], np.int32),
                                                       offsets=np.array([0, 1, 1, 1, 2])),
     ember.InvalidArgumentError, ["disagree"]),
]


@pytest.mark.parametrize("name,build,exc,fragments", BAD_FORWARD, ids=[b[0] for b in BAD_FORWARD])
def test_bad_kjt_refused(name, build, exc, fragments):
    """Each refusal raises its class with a message naming what is wrong; nothing changes; the
    collection works afterwards."""
    tables = [ember.TableConfig("t0", 5, 4, feature_names=["f0", "f1"])]
    with ember.EmbeddingBagCollection(tables, seed=1) as ebc:
        before = ebc.state_dict()
        with pytest.raises(exc) as ei:
            ebc.forward(build())
        e = ei.value
        assert isinstance(e, ember.EmberError)
        msg = e.message
        assert isinstance(msg, str) and msg and msg in str(e)
        for frag in fragments:
            assert frag.lower() in msg.lower(), "%r not in %r" % (frag, msg)
        assert e.status == {ember.InvalidArgumentError: "INVALID_ARG", ember.NumericError: "NUMERIC"}[exc]
        assert "(rank 0)" in msg
        assert_states_equal(ebc.state_dict(), before)
        out = ebc.forward(ember.KJT(np.array([1, 2], np.int64), np.array([1, 0, 1, 0], np.int32)))
        assert out.shape == (2, 8)


def test_bad_backward_refused(make_tables, rng):
    tables = make_tables(optimizer="adam", lr=0.1)
    with ember.EmbeddingBagCollection(tables, seed=1) as ebc:
        kjt = make_kjt(kjt_arrays(random_batch(rng, feature_rows(tables), 3)))
        out = ebc.forward(kjt)
        before = ebc.state_dict()
        g = np.ones_like(out)
        g[2, 5] = np.nan
        with pytest.raises(ember.NumericError) as ei:
            ebc.backward(kjt, g)
        assert isinstance(ei.value, ArithmeticError) and ei.value.status == "NUMERIC" and ei.value.code == -7
        assert "nan" in ei.value.message.lower()
        g[2, 5] = np.inf
        with pytest.raises(ember.NumericError):
            ebc.backward(kjt, g)
        with pytest.raises(ember.InvalidArgumentError):
            ebc.backward(kjt, np.ones((3, 25), np.float32))  # one column short
        with pytest.raises(ember.InvalidArgumentError):
            ebc.backward(kjt, np.ones((4, 26), np.float32))  # one row too many
        with pytest.raises(ember.InvalidArgumentError):
            ebc.backward(kjt, np.ones((3, 26), np.complex64))
        assert_states_equal(ebc.state_dict(), before)
        # float64 gradients are converted (their meaning is the same).
        ebc.backward(kjt, np.ones(out.shape, np.float64))
        assert ebc.step("t0") == 1


@pytest.mark.parametrize("field,value,fragments", [
    ("optimizer", "adamax", ["adamax"]),
    ("pooling", "max", ["max"]),
    ("dtype", "fp8", ["fp8"]),
    ("weight_decay_mode", "l3", ["l3"]),
    ("lr", -0.5, ["-0.5"]),
    ("beta2", 1.0, ["1"]),
    ("num_embeddings", 0, ["t0"]),
    ("embedding_dim", -3, ["t0", "-3"]),
    ("init", ("cauchy", 1.0), ["cauchy"]),
    ("name", "t\0x", [repr("t\0x"), "NUL"]),  # the library takes C strings
    ("feature_names", ["f0", "f\0"], ["t0", repr("f\0"), "NUL"]),
])
def test_bad_table_config_refused(field, value, fragments):
    """Refused at TableConfig or at the collection, either way InvalidArgumentError naming the value."""
    with pytest.raises(ember.InvalidArgumentError) as ei:
        t = ember.TableConfig("t0", 5, 4)
        t = dataclasses.replace(t, **{field: value})
        ember.EmbeddingBagCollection([t])
    for frag in fragments:
        assert frag in ei.value.message, "%r not in %r" % (frag, ei.value.message)


def test_bad_collection_config_refused():
    t = ember.TableConfig("t0", 5, 4)
    with pytest.raises(ember.InvalidArgumentError, match="t0"):
        ember.EmbeddingBagCollection([t, ember.TableConfig("t0", 3, 4)])  # duplicate name
    with pytest.raises(ember.InvalidArgumentError):
        ember.EmbeddingBagCollection([t, ember.TableConfig("s", 3, 4, pooling="none")])  # NONE mixed in
    with pytest.raises(ember.InvalidArgumentError):
        ember.EmbeddingBagCollection([])


# ---- arrays: conversion and zero copy ---------------------------------------------------------

def test_kjt_converted_inputs(make_tables, rng):
    """int32 ids, strided ids, lists, int64 lengths, float64 weights and offsets give what the
    canonical arrays give."""
    tables = make_tables()
    with ember.EmbeddingBagCollection(tables, seed=4) as ebc:
        values, lengths, weights, B = random_batch(rng, feature_rows(tables), 5, weighted=True).arrays()
        want = ebc.forward(ember.KJT(values, lengths, weights=weights))
        big = np.zeros(2 * len(values), np.int64)
        big[::2] = values
        strided = big[::2]
        assert not strided.flags.c_contiguous
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        variants = {
            "int32 ids": ember.KJT(values.astype(np.int32), lengths, weights=weights),
            "strided ids": ember.KJT(strided, lengths, weights=weights),
            "lists": ember.KJT(values.tolist(), lengths.tolist(), weights=weights.tolist()),
            "int64 lengths": ember.KJT(values, lengths.astype(np.int64), weights=weights),
            "uint8 ids": ember.KJT(values.astype(np.uint8), lengths, weights=weights),
            "float64 weights": ember.KJT(values, lengths, weights=weights.astype(np.float64)),
            "offsets": ember.KJT(values, offsets=offsets, weights=weights),
            "offsets and lengths": ember.KJT(values, lengths, offsets=offsets, weights=weights),
        }
        for name, kjt in variants.items():
            assert np.array_equal(ebc.forward(kjt), want), name
        # Training through a converted KJT is the same training.
        ebc2 = ember.EmbeddingBagCollection(tables, seed=4)
        try:
            g = grad_for(rng, want.shape)
            ebc.backward(variants["strided ids"], g)
            ebc2.backward(ember.KJT(values, lengths, weights=weights), g)
            assert_states_equal(ebc.state_dict(), ebc2.state_dict())
        finally:
            ebc2.close()


def test_forward_out_buffer(make_tables, rng):
    tables = make_tables()
    with ember.EmbeddingBagCollection(tables, seed=4) as ebc:
        kjt = make_kjt(kjt_arrays(random_batch(rng, feature_rows(tables), 5)))
        want = ebc.forward(kjt)
        buf = np.full((5, 26), 9.0, np.float32)
        got = ebc.forward(kjt, out=buf)
        assert np.shares_memory(got, buf) and np.array_equal(buf, want)
        with pytest.raises(ember.InvalidArgumentError):
            ebc.forward(kjt, out=np.zeros((5, 25), np.float32))
        with pytest.raises(ember.InvalidArgumentError):
            ebc.forward(kjt, out=np.zeros((5, 26), np.float64))
        with pytest.raises(ember.InvalidArgumentError):
            ebc.forward(kjt, out=np.zeros((26, 5), np.float32).T)  # not C-contiguous


def unaligned(a):
    """A C-contiguous copy of ``a`` one byte off its items' alignment (numpy's flags.aligned False),
    as np.frombuffer at an odd offset or a field of a packed record gives."""
    a = np.ascontiguousarray(a)
    u = np.frombuffer(bytearray(a.nbytes + 1), a.dtype, a.size, offset=1).reshape(a.shape)
    u[...] = a
    assert u.flags.c_contiguous and not u.flags.aligned
    return u


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_unaligned_arrays(make_tables, rng, dtype):
    """Arrays off their items' alignment: the library reads ids, lengths and floats through typed
    pointers, where an unaligned one is undefined behaviour (the sanitized run aborts on it), so
    inputs are copied (the same results as aligned ones) and an out= array, written in place, is
    refused naming the alignment; the extension refuses one itself (it never trusts the Python
    layer)."""
    tables = make_tables(dtype=dtype)
    with ember.EmbeddingBagCollection(tables, seed=4) as ebc, ember.EmbeddingBagCollection(tables, seed=4) as ref:
        values, lengths, weights, B = random_batch(rng, feature_rows(tables), 5, weighted=True).arrays()
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        kjt = ember.KJT(values, lengths, weights=weights)
        want = ref.forward(kjt)
        for kjt_u in (ember.KJT(unaligned(values), unaligned(lengths), weights=unaligned(weights)),
                      ember.KJT(unaligned(values), offsets=unaligned(offsets), weights=unaligned(weights))):
            assert np.array_equal(ebc.forward(kjt_u), want)
        g = grad_for(rng, want.shape)
        gw = ebc.backward(kjt_u, unaligned(g), grad_weights=True)
        assert np.array_equal(gw, ref.backward(kjt, g, grad_weights=True))
        assert_states_equal(ebc.state_dict(), ref.state_dict())
        w = ebc.read("t0", dtype=dtype)
        w = (w.astype(np.float32) * 0.5).astype(w.dtype)
        ebc.write("t0", "weight", unaligned(w))  # in the table's own dtype
        ref.write("t0", "weight", w)
        sd = {k: unaligned(v) if isinstance(v, np.ndarray) and v.size else v for k, v in ref.state_dict().items()}
        ebc.load_state_dict(sd)
        assert_states_equal(ebc.state_dict(), ref.state_dict())
        before = np.full_like(want, 7.0)
        buf = unaligned(before)
        with pytest.raises(ember.InvalidArgumentError, match="aligned") as ei:
            ebc.forward(kjt, out=buf)
        assert "out" in ei.value.message and ei.value.message.endswith("(rank 0)")
        assert np.array_equal(buf, before)
        with pytest.raises(ember.InvalidArgumentError, match="aligned"):
            ebc._c.forward((unaligned(values), lengths, None, None, len(ebc.feature_names), B, None, None),
                           np.empty_like(want))
        with pytest.raises(ember.InvalidArgumentError, match="aligned"):
            ebc._c.forward((values, lengths, None, None, len(ebc.feature_names), B, None, None), buf)
        assert np.array_equal(buf, before)
    pf = np.array([1.0, 3.0, 2.0, 5.0], np.float32)
    assert ember.plan(tables, 2, pooling_factor=unaligned(pf)) == ember.plan(tables, 2, pooling_factor=pf)


def test_weights_view_zero_copy(make_tables, rng):
    tables = make_tables()
    with ember.EmbeddingBagCollection(tables, seed=4) as ebc:
        v1 = ebc.weights_view("t0")
        v2 = ebc.weights_view("t0")
        assert v1.dtype == np.float32 and v1.shape == (13, 8)
        assert np.shares_memory(v1, v2), "two views of one table do not share memory"
        assert not v1.flags.writeable
        with pytest.raises(ValueError):
            v1[0, 0] = 1.0
        assert np.array_equal(v1, ebc.read("t0"))
        snap = v1.copy()
        kjt = make_kjt(kjt_arrays(random_batch(rng, feature_rows(tables), 6)))
        out = ebc.forward(kjt)
        ebc.backward(kjt, grad_for(rng, out.shape))
        assert not np.array_equal(v1, snap), "the view did not see the update"
        assert np.array_equal(v1, ebc.read("t0"))
        ebc.write("t0", "weight", np.zeros((1, 8), np.float32), row_begin=12)
        assert np.all(v1[12] == 0.0)
        assert not np.shares_memory(ebc.weights_view("t0"), ebc.weights_view("t2"))


def _run_python(code, timeout=60):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("action", ["close", "convert_dtype", "del"])
def test_weights_view_outliving_storage_does_not_crash(action):
    """A view held while its storage goes away (close, a dtype conversion, garbage collection):
    the interpreter must not crash. Either the call refuses (an ember error) or the view still
    reads the values it showed. The table is large enough (4 MiB) that freed storage is unmapped."""
    code = """
        import gc, numpy as np, ember
        ebc = ember.EmbeddingBagCollection([ember.TableConfig("t0", 4096, 256)], seed=1)
        v = ebc.weights_view("t0")
        snap = v.copy()
        try:
            if "%s" == "close":
                ebc.close()
            elif "%s" == "convert_dtype":
                ebc.convert_dtype("t0", "bf16")
            else:
                del ebc
                gc.collect()
        except ember.EmberError as e:
            print("refused:", type(e).__name__, e)
        x = np.array(v, copy=True)
        print("same" if np.array_equal(x, snap) else "changed")
    """ % (action, action)
    r = _run_python(code)
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr[-2000:])
    last = r.stdout.strip().splitlines()[-1]
    assert last == "same" or r.stdout.startswith("refused"), r.stdout


def test_numpy_api_does_not_import_torch():
    r = _run_python("""
        import sys, ember
        e = ember.EmbeddingBagCollection([ember.TableConfig("t", 3, 2)])
        e.close()
        print("torch" in sys.modules)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# ---- lifetime ----------------------------------------------------------------------------------

def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _asan_loaded():
    """AddressSanitizer runs in this process (scripts/test-python.sh sanitize): its quarantine keeps
    freed memory resident (256 MiB by default), so the RSS says nothing about leaks there."""
    with open("/proc/self/maps") as f:
        return any("libasan" in line for line in f)


def test_create_destroy_loop(rng):
    """Collections made and closed in a loop: the context's outstanding bytes are the same every
    time while alive (forward/backward workspaces included), nothing leaks across iterations."""
    tables = [ember.TableConfig("big", 2000, 64, optimizer="adam"), ember.TableConfig("small", 1, 4)]
    kjt = ember.KJT(rng.integers(0, 1, size=40).astype(np.int64), np.full(4, 10, np.int32))
    seen = set()
    base = ember.bytes_outstanding()

    def once():
        ebc = ember.EmbeddingBagCollection(tables, seed=1, max_batch_size=2, max_nnz=40)
        out = ebc.forward(kjt)
        ebc.backward(kjt, np.ones_like(out))
        seen.add(ebc.bytes_outstanding)
        assert ebc.bytes_outstanding >= 2000 * 64 * 4 * 3  # weights + two Adam moments
        ebc.close()
        ebc.close()  # a second close is harmless
        with pytest.raises(ember.EmberError):
            ebc.forward(kjt)

    for _ in range(10):
        once()
    rss0 = _rss_bytes()
    for _ in range(150):
        once()
    grown = _rss_bytes() - rss0
    assert len(seen) == 1, "outstanding bytes vary between identical collections: %s" % sorted(seen)
    # 150 leaked collections would be 150 x 1.5 MiB (under ASan: ember.bytes_outstanding() alone).
    rss_says = not _asan_loaded()
    assert grown < 32 << 20 or not rss_says, "RSS grew by %d bytes over 150 collections" % grown
    # Context manager and garbage collection free too.
    for _ in range(50):
        with ember.EmbeddingBagCollection(tables, seed=2) as ebc:
            ebc.forward(kjt)
        ember.EmbeddingBagCollection(tables, seed=3).forward(kjt)
    assert _rss_bytes() - rss0 < 32 << 20 or not rss_says
    assert ember.bytes_outstanding() == base


def test_use_after_close_raises_state_error(make_tables):
    ebc = ember.EmbeddingBagCollection(make_tables(), seed=1)
    ebc.close()
    with pytest.raises(ember.StateError):
        ebc.forward(ember.KJT(np.zeros(4, np.int64), np.ones(4, np.int32)))
    with pytest.raises(ember.StateError):
        ebc.read("t0")


# ---- sizes and threads ------------------------------------------------------------------------

def test_empty_batches(make_tables):
    tables = make_tables(optimizer="adam", lr=0.1)
    with ember.EmbeddingBagCollection(tables, seed=1) as ebc:
        before = ebc.state_dict()
        kjt = ember.KJT(np.zeros(0, np.int64), np.zeros(0, np.int32), batch_size=0)
        out = ebc.forward(kjt)
        assert out.shape == (0, 26) and out.dtype == np.float32
        ebc.backward(kjt, np.zeros((0, 26), np.float32))
        assert ebc.step("t0") == 1
        kjt = ember.KJT(np.zeros(0, np.int64), np.zeros(12, np.int32))  # 3 samples, every bag empty
        out = ebc.forward(kjt)
        assert out.shape == (3, 26) and np.all(out == 0.0)
        ebc.backward(kjt, np.ones((3, 26), np.float32))
        after = ebc.state_dict()
        for k in before:
            if not k.endswith(".step"):
                assert np.array_equal(after[k], before[k]), "%s changed without a touched row" % k


def test_thread_counts_give_the_same_bits(make_tables, rng):
    tables = make_tables(optimizer="rowwise_adagrad", lr=0.1)
    batches = [random_batch(rng, feature_rows(tables), 33, weighted=i % 2 == 1).arrays() for i in range(3)]
    grads = [grad_for(rng, (33, 26)) for _ in range(3)]
    results = []
    for threads in (1, 2):
        with ember.EmbeddingBagCollection(tables, seed=7, num_threads=threads) as ebc:
            outs = []
            for arrays, g in zip(batches, grads):
                kjt = make_kjt(arrays)
                outs.append(ebc.forward(kjt))
                ebc.backward(kjt, g)
            results.append((outs, ebc.state_dict()))
    for a, b in zip(results[0][0], results[1][0]):
        assert np.array_equal(a, b)
    assert_states_equal(results[0][1], results[1][1])


def test_one_row_table_and_large_multiplicity():
    """Every id of a one-row table is row 0: hundreds of duplicates coalesce into one update."""
    tables = [ember.TableConfig("u", 1, 3, pooling="mean", optimizer="adagrad", lr=0.5)]
    with ember.EmbeddingBagCollection(tables, seed=1) as ebc:
        oracle = Oracle(tables, ebc.state_dict())
        lengths = np.array([0, 1, 7, 300, 2], np.int32)
        values = np.zeros(int(lengths.sum()), np.int64)
        kjt = ember.KJT(values, lengths)
        out = ebc.forward(kjt)
        assert_close(out, oracle.forward(values, lengths), 1e-6, 1e-6, "forward")
        g = np.arange(15, dtype=np.float32).reshape(5, 3) / 8
        ebc.backward(kjt, g)
        oracle.backward(values, lengths, None, g)
        compare_state(ebc, oracle, "one-row table")


def test_load_state_dict_refusals_change_nothing(make_tables, rng):
    tables = make_tables(optimizer="adagrad", lr=0.1)
    with ember.EmbeddingBagCollection(tables, seed=1) as a, ember.EmbeddingBagCollection(tables, seed=2) as b:
        sd = a.state_dict()
        before = b.state_dict()
        bad_shape = dict(sd, **{"t2.momentum1": np.zeros((10, 5), np.float32)})
        unknown = dict(sd, **{"t9.weight": np.zeros((1, 1), np.float32)})
        missing = {k: v for k, v in sd.items() if k != "t1.weight"}
        for name, d, frag in (("wrong shape", bad_shape, "t2.momentum1"), ("unknown key", unknown, "t9"),
                              ("missing key", missing, "t1.weight")):
            with pytest.raises(ember.InvalidArgumentError) as ei:
                b.load_state_dict(d)
            assert frag in ei.value.message, "%s: %r" % (name, ei.value.message)
            # Checked before anything is written: t0 (first in order) is untouched too.
            assert_states_equal(b.state_dict(), before)
        b.load_state_dict(missing, strict=False)
        got = b.state_dict()
        assert np.array_equal(got["t0.weight"], sd["t0.weight"])
        assert np.array_equal(got["t1.weight"], before["t1.weight"])


def test_table_config_defaults():
    t = ember.TableConfig("user", 7, 3)
    assert (t.pooling, t.dtype, t.optimizer, t.lr, t.weight_decay_mode) == ("sum", "fp32", "sgd", 0.01, "none")
    assert dataclasses.is_dataclass(t)
    with ember.EmbeddingBagCollection([t], seed=1) as ebc:
        assert ebc.feature_names == ["user"]  # feature_names None -> [name]
        w = ebc.read("user")
        assert np.all(np.abs(w) <= 0.01) and np.any(w != 0.0)  # uniform(-0.01, 0.01)
    with ember.EmbeddingBagCollection([dataclasses.replace(t, init=("normal", 2.0))], seed=1) as ebc:
        assert 1.0 < float(np.std(ebc.read("user"))) < 3.5
    with ember.EmbeddingBagCollection([dataclasses.replace(t, init=("zeros",))], seed=1) as ebc:
        assert np.all(ebc.read("user") == 0.0)


GARBAGE = r'''
import numpy as np, ember
ebc = ember.EmbeddingBagCollection([ember.TableConfig("t0", 5, 4, feature_names=["a", "b"])], seed=1)
I, L = np.array([1, 2], np.int64), np.array([1, 0, 1, 0], np.int32)
cases = {
    "values None": lambda: ebc.forward(ember.KJT(None, L)),
    "values str": lambda: ebc.forward(ember.KJT("12", L)),
    "values dict": lambda: ebc.forward(ember.KJT({1: 2}, L)),
    "values ragged": lambda: ebc.forward(ember.KJT([[1], [2, 3]], L)),
    "values bool": lambda: ebc.forward(ember.KJT(np.array([True, False]), L)),
    "values int64 max": lambda: ebc.forward(ember.KJT(np.array([2**63 - 1, 0]), L)),
    "values uint64 huge": lambda: ebc.forward(ember.KJT(np.array([2**64 - 1, 0], np.uint64), L)),
    "values 3-d": lambda: ebc.forward(ember.KJT(np.zeros((1, 1, 2), np.int64), L)),
    "no lengths": lambda: ebc.forward(ember.KJT(I)),
    "lengths huge": lambda: ebc.forward(ember.KJT(I, np.array([2**31 - 1, 0, 1, 0], np.int32))),
    "lengths int64 overflow": lambda: ebc.forward(ember.KJT(I, np.array([2**40, 0, 1, 0], np.int64))),
    "lengths nan": lambda: ebc.forward(ember.KJT(I, np.array([np.nan, 0, 1, 0]))),
    "offsets decreasing": lambda: ebc.forward(ember.KJT(I, offsets=np.array([0, 2, 1, 2, 2]))),
    "offsets past nnz": lambda: ebc.forward(ember.KJT(I, offsets=np.array([0, 1, 5, 6, 9]))),
    "offsets int64 min": lambda: ebc.forward(ember.KJT(I, offsets=np.array([0, -2**63, 0, 0, 2]))),
    "weights str": lambda: ebc.forward(ember.KJT(I, L, weights="ab")),
    "weights inf": lambda: ebc.forward(ember.KJT(I, L, weights=np.array([np.inf, 1.0]))),
    "batch_size negative": lambda: ebc.forward(ember.KJT(I, L, batch_size=-1)),
    "batch_size huge": lambda: ebc.forward(ember.KJT(I, L, batch_size=2**40)),
    "batch_size str": lambda: ebc.forward(ember.KJT(I, L, batch_size="2")),
    "keys int": lambda: ebc.forward(ember.KJT(I, L, keys=[1, 2])),
    "not a kjt": lambda: ebc.forward((I, L)),
    "grad None": lambda: (ebc.forward(ember.KJT(I, L)), ebc.backward(ember.KJT(I, L), None)),
    "grad 1-d": lambda: (ebc.forward(ember.KJT(I, L)), ebc.backward(ember.KJT(I, L), np.ones(16, np.float32))),
    "grad object": lambda: ebc.backward(ember.KJT(I, L), np.array([[object()] * 8] * 2)),
    "read rows reversed": lambda: ebc.read("t0", rows=slice(4, 1)),
    "read rows step": lambda: ebc.read("t0", rows=slice(0, 4, 2)),
    "read rows tuple outside": lambda: ebc.read("t0", rows=(2, 9)),
    "read table -1": lambda: ebc.read(-1),
    "read table 7": lambda: ebc.read(7),
    "read table float": lambda: ebc.read(0.5),
    "read dtype bogus": lambda: ebc.read("t0", dtype="int8"),
    "read bf16 of fp32": lambda: ebc.read("t0", dtype="bf16"),
    "write None": lambda: ebc.write("t0", "weight", None),
    "write row_begin negative": lambda: ebc.write("t0", "weight", np.zeros((1, 4), np.float32), row_begin=-1),
    "write nan": lambda: ebc.write("t0", "weight", np.full((1, 4), np.nan, np.float32)),
    "set_step negative": lambda: ebc.set_step("t0", -3),
    "set_step huge": lambda: ebc.set_step("t0", 2**70),
    "set_lr inf": lambda: ebc.set_lr(float("inf")),
    "set_lr str": lambda: ebc.set_lr("fast"),
    "convert bogus": lambda: ebc.convert_dtype("t0", "fp64"),
    "table config garbage": lambda: ember.EmbeddingBagCollection([ember.TableConfig(None, "x", [])]),
    "tables not a list": lambda: ember.EmbeddingBagCollection(42),
    "num_threads negative": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], num_threads=-4),
    "seed negative": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], seed=-1),
    "seed huge": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], seed=2**64),
    "num_threads huge": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], num_threads=2**40),
    "num_threads str": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], num_threads="4"),
    "max_batch_size huge": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], max_batch_size=2**31),
    "max_nnz huge": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], max_nnz=2**70),
    "max_nnz negative": lambda: ember.EmbeddingBagCollection([ember.TableConfig("t", 2, 2)], max_nnz=-1),
    "num_embeddings str": lambda: ember.TableConfig("t", "x", 2),
    "num_embeddings huge": lambda: ember.TableConfig("t", 2**70, 2),
    "num_embeddings float": lambda: ember.TableConfig("t", 2.5, 2),
    "embedding_dim huge": lambda: ember.TableConfig("t", 2, 2**40),
    "lr str": lambda: ember.TableConfig("t", 2, 2, lr="fast"),
    "eps None": lambda: ember.TableConfig("t", 2, 2, eps=None),
    "init int": lambda: ember.TableConfig("t", 2, 2, init=5),
    "init parameter str": lambda: ember.TableConfig("t", 2, 2, init=("normal", "wide")),
    "feature_names int": lambda: ember.TableConfig("t", 2, 2, feature_names=5),
    "config changed after": lambda: ember.EmbeddingBagCollection([_mutated()]),
    "set_lr None": lambda: ebc.set_lr(None),
    "set_lr complex": lambda: ebc.set_lr(1j),
    "set_step str": lambda: ebc.set_step("t0", "3"),
    "set_step float": lambda: ebc.set_step("t0", 3.0),
    "write row_begin huge": lambda: ebc.write("t0", "weight", np.zeros((1, 4), np.float32), row_begin=2**63 - 1),
    "write row_begin str": lambda: ebc.write("t0", "weight", np.zeros((1, 4), np.float32), row_begin="0"),
    "read rows tuple huge": lambda: ebc.read("t0", rows=(0, 2**70)),
    "plan world_size str": lambda: ember.plan([ember.TableConfig("t", 2, 2)], "2"),
    "plan world_size zero": lambda: ember.plan([ember.TableConfig("t", 2, 2)], 0),
    "plan memory negative": lambda: ember.plan([ember.TableConfig("t", 2, 2)], 2, memory_per_rank=-1),
    "plan batch huge": lambda: ember.plan([ember.TableConfig("t", 2, 2)], 2, batch_size=2**40),
    "plan pooling_factor str": lambda: ember.plan([ember.TableConfig("t", 2, 2)], 2, pooling_factor="x"),
    "plan pooling_factor dict str": lambda: ember.plan([ember.TableConfig("t", 2, 2)], 2, pooling_factor={"t": "x"}),
    "describe_plan world zero": lambda: ember.describe_plan([ember.TableConfig("t", 2, 2)], "tw", world_size=0),
    "TablePlan ranks huge": lambda: ember.TablePlan("tw", ranks=(2**40,)),
    "TablePlan ranks str": lambda: ember.TablePlan("tw", ranks="0"),
    "TablePlan num_shards str": lambda: ember.TablePlan("cw", ranks=(0,), num_shards="1"),
    "Checkpoint dir int": lambda: ember.Checkpoint(5),
    "Checkpoint dir nul": lambda: ember.Checkpoint("a\0b"),
}


def _mutated():
    t = ember.TableConfig("t", 2, 2)
    t.num_embeddings = 2**70
    return t


for name, fn in cases.items():
    try:
        fn()
        print("ok", name)
    except ember.EmberError as e:
        assert e.message and isinstance(e.status, str), name
        print("ember", type(e).__name__, name, "|", e.message)
    except Exception as e:
        print("python", type(e).__name__, name, "|", e)
out = ebc.forward(ember.KJT(I, L))
print("alive", out.shape)
'''


def test_garbage_inputs_never_crash():
    """Odd inputs of every kind: the interpreter survives each one, each either works or raises an
    ember error (scalar arguments of a wrong type or out of range included: InvalidArgumentError
    naming the argument, never a bare TypeError/ValueError/OverflowError), and the collection still
    works afterwards. Runs in a subprocess so that a crash is a failure."""
    r = _run_python(GARBAGE, timeout=120)
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "alive (2, 8)"
    got = {ln.split(" | ")[0].split(" ", 2)[-1] if not ln.startswith("ok") else ln[3:]: ln for ln in lines[:-1]}
    print("\n".join(lines))
    # What must be refused as an ember error (never accepted, never a bare Python error).
    must_refuse = ["values None", "values str", "values dict", "values ragged", "values bool", "values int64 max",
                   "values uint64 huge", "values 3-d", "no lengths", "lengths huge", "lengths int64 overflow",
                   "lengths nan", "offsets decreasing", "offsets past nnz", "offsets int64 min", "weights str",
                   "weights inf", "batch_size negative", "batch_size huge", "not a kjt", "grad None", "grad 1-d",
                   "grad object", "read rows step", "read rows tuple outside", "read table 7", "read dtype bogus",
                   "read bf16 of fp32", "write None", "write row_begin negative", "set_step negative",
                   "set_lr inf", "convert bogus", "tables not a list"]
    for name in must_refuse:
        line = next((ln for ln in lines if ln.endswith(" " + name) or (" " + name + " |") in ln), None)
        assert line is not None, "no line for %s" % name
        assert line.startswith("ember "), "%s: %s" % (name, line)
    # Nothing raises a bare Python error.
    bare = [ln for ln in lines if ln.startswith("python ")]
    assert not bare, "bare Python errors:\n" + "\n".join(bare)
    # Scalar arguments of a wrong type or out of range: InvalidArgumentError naming the argument
    # and the value.
    scalars = {
        "seed negative": ["seed", "-1"], "seed huge": ["seed", str(2**64)],
        "num_threads negative": ["num_threads", "-4"], "num_threads huge": ["num_threads", str(2**40)],
        "num_threads str": ["num_threads", "'4'"], "max_batch_size huge": ["max_batch_size", str(2**31)],
        "max_nnz huge": ["max_nnz", str(2**70)], "max_nnz negative": ["max_nnz", "-1"],
        "num_embeddings str": ["num_embeddings", "'x'"], "num_embeddings huge": ["num_embeddings", str(2**70)],
        "num_embeddings float": ["num_embeddings", "2.5"], "embedding_dim huge": ["embedding_dim", str(2**40)],
        "lr str": ["lr", "'fast'"], "eps None": ["eps", "None"], "init int": ["init", "5"],
        "init parameter str": ["init", "'wide'"], "feature_names int": ["feature_names", "5"],
        "table config garbage": ["name", "None"], "config changed after": ["num_embeddings", str(2**70)],
        "set_lr str": ["lr", "'fast'"], "set_lr None": ["lr", "None"], "set_lr complex": ["lr", "1j"],
        "set_step str": ["step", "'3'"], "set_step float": ["step", "3.0"], "set_step huge": ["step", str(2**70)],
        "write row_begin huge": ["row_begin", str(2**63 - 1)], "write row_begin str": ["row_begin", "'0'"],
        "read rows tuple huge": ["rows", str(2**70)], "batch_size str": ["batch_size", "'2'"],
        "batch_size huge": ["batch_size", str(2**40)],
        "plan world_size str": ["world_size", "'2'"], "plan world_size zero": ["world_size", "0"],
        "plan memory negative": ["memory_per_rank", "-1"], "plan batch huge": ["batch_size", str(2**40)],
        "plan pooling_factor str": ["pooling_factor", "str"], "plan pooling_factor dict str": ["pooling_factor", "'x'"],
        "describe_plan world zero": ["world_size", "0"], "TablePlan ranks huge": ["ranks", str(2**40)],
        "TablePlan ranks str": ["ranks", "'0'"], "TablePlan num_shards str": ["num_shards", "'1'"],
        "Checkpoint dir int": ["dir", "5"], "Checkpoint dir nul": ["dir", "\\x00"],
    }
    for name, fragments in scalars.items():
        line = next((ln for ln in lines if (" " + name + " |") in ln), None)
        assert line is not None and line.startswith("ember InvalidArgumentError "), "%s: %s" % (name, line)
        for frag in fragments:
            assert frag in line.split(" | ", 1)[1], "%s: %r not in %s" % (name, frag, line)


def test_long_calls_release_the_gil():
    """A Python thread keeps running while forward and backward run in C (docs: long calls release
    the GIL). A counting thread's progress during the calls is compared with its progress alone."""
    import threading
    import time
    tables = [ember.TableConfig("big", 200000, 64, optimizer="adagrad")]
    rng = np.random.default_rng(0)
    nnz = 400000
    kjt = ember.KJT(rng.integers(0, 200000, nnz).astype(np.int64), np.full(4000, 100, np.int32))
    count = [0]
    stop = [False]

    def counter():
        while not stop[0]:
            count[0] += 1

    with ember.EmbeddingBagCollection(tables, seed=1, num_threads=1) as ebc:
        ebc.forward(kjt)  # workspaces sized
        th = threading.Thread(target=counter)
        th.start()
        try:
            time.sleep(0.05)
            c0, t0 = count[0], time.perf_counter()
            time.sleep(0.2)
            alone = (count[0] - c0) / (time.perf_counter() - t0)
            c0, t0 = count[0], time.perf_counter()
            for _ in range(3):
                out = ebc.forward(kjt)
                ebc.backward(kjt, np.ones_like(out))
            busy = (count[0] - c0) / (time.perf_counter() - t0)
        finally:
            stop[0] = True
            th.join()
    # Holding the GIL would leave the counter a switch interval (5 ms) per call at most.
    print("counter %.0f/s during the calls, %.0f/s alone" % (busy, alone))
    assert busy > 0.2 * alone, "counter ran at %.0f/s during the calls, %.0f/s alone" % (busy, alone)


def test_tiered_table_is_the_table_in_ram(tmp_path):
    """TableConfig.cache_rows puts a table on disk behind a cache (docs/tiered.md): bitwise the
    same outputs and state as in RAM, the prefetch included; the counters say rows went to the
    file and came back; bad settings are refused naming the table."""
    T = ember.TableConfig
    u = ("uniform", -0.5, 0.5)
    ram = [T("big", 50, 4, optimizer="adam", lr=0.05, init=u), T("small", 5, 3, pooling="mean", init=u)]
    disk = [dataclasses.replace(ram[0], cache_rows=8, cache_policy="lfu"), ram[1]]
    rng = np.random.default_rng(4)
    with ember.EmbeddingBagCollection(ram, seed=9) as a, \
            ember.EmbeddingBagCollection(disk, seed=9, ssd_dir=tmp_path) as b:
        batches = [random_batch(rng, [50, 5], 3, max_len=2) for _ in range(12)]
        for i, batch in enumerate(batches):
            values, lengths, weights, B = batch.arrays(range(3))
            kjt = ember.KJT(values, lengths, batch_size=B)
            assert np.array_equal(a.forward(kjt), b.forward(kjt)), "step %d" % i
            if i + 1 < len(batches):
                nv, nl, _, nB = batches[i + 1].arrays(range(3))
                b.prefetch(ember.KJT(nv, nl, batch_size=nB))
            g = rng.standard_normal((B, a.output_dim)).astype(np.float32)
            a.backward(kjt, g)
            b.backward(kjt, g)
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)
        st = b.tier_stats("big")
        assert st["evictions"] > 0 and st["rows_written"] > 0 and st["rows_read"] > 0
        assert st["hits"] + st["misses"] > 0 and 0 < st["prefetched"] <= st["rows_read"]
        with pytest.raises(ember.errors.InvalidArgumentError, match="small"):
            b.tier_stats("small")
    with pytest.raises(ember.errors.InvalidArgumentError, match="cache_policy"):
        T("x", 10, 4, cache_rows=4, cache_policy="ttl")
    with pytest.raises(ember.errors.EmberIOError, match="big"):
        ember.EmbeddingBagCollection(disk, ssd_dir=tmp_path / "missing")


def test_write_refuses_nan_and_inf():
    """A NaN or an infinity written into a table is refused, as it is in inputs and gradients,
    naming the table, tensor, row and column; the table is unchanged."""
    ebc = ember.EmbeddingBagCollection([ember.TableConfig("t0", 4, 4, optimizer="adagrad")])
    before = {k: np.array(v) for k, v in ebc.state_dict().items()}
    w = np.ones((2, 4), np.float32)
    w[1, 2] = np.nan
    with pytest.raises(ember.NumericError, match=r"table 't0' tensor 'weight' row 2 column 2: nan"):
        ebc.write("t0", "weight", w, row_begin=1)
    w[1, 2] = -np.inf
    with pytest.raises(ember.NumericError, match=r"tensor 'momentum1' row 2 column 2: -inf"):
        ebc.write("t0", "momentum1", w, row_begin=1)
    for k, v in ebc.state_dict().items():
        assert np.array_equal(np.asarray(v), before[k]), k
    w[1, 2] = 3.0
    ebc.write("t0", "weight", w, row_begin=1)
    assert ebc.read("t0")[2, 2] == 3.0


# ---- variable batch size per feature (VBE) --------------------------------------------------

@pytest.mark.parametrize("weighted", [False, True])
def test_vbe_matches_the_expanded_batch(make_tables, rng, weighted):
    """A KJT whose user features (f0, f3: repeated over groups of 4 samples) carry each distinct
    bag once, with inverse indices: bitwise the expanded batch's output while the tables are equal,
    training (and dL/dw, summed over a bag's samples) within the oracle's tolerance of it; without
    inverse indices the output holds each feature's own bags."""
    tables = make_tables(optimizer="adam", lr=0.05)
    users = {0, 3}
    dims = [8, 8, 4, 6]
    with ember.EmbeddingBagCollection(tables, seed=3) as vbe, ember.EmbeddingBagCollection(tables, seed=3) as ref:
        for step in range(4):
            batch = random_batch(rng, feature_rows(tables), 9, weighted=weighted)
            for f in users:
                for s in range(batch.batch_size):
                    batch.bags[f][s] = batch.bags[f][s - s % 4]
            values, lengths, weights, fbs, inv, first = vbe_arrays(batch, range(9), users)
            assert fbs[0] <= 3 and fbs[1] == 9
            kjt = ember.KJT(values, lengths, weights=weights, feature_batch_sizes=fbs, inverse_indices=inv)
            plain = make_kjt(kjt_arrays(batch))
            out, want = vbe.forward(kjt), ref.forward(plain)
            assert out.shape == want.shape == (9, 26)
            if step == 0:
                assert np.array_equal(out, want)
                bags = vbe.forward(ember.KJT(values, lengths, weights=weights, feature_batch_sizes=fbs))
                assert bags.shape == (int(np.dot(fbs, dims)),)
                at = 0
                for f, d in enumerate(dims):
                    col = sum(dims[:f])
                    assert np.array_equal(bags[at:at + fbs[f] * d].reshape(-1, d), want[first[f], col:col + d])
                    at += fbs[f] * d
            else:
                assert_close(out, want, ATOL, RTOL, "step %d forward" % step)
            g = grad_for(rng, out.shape)
            gw = vbe.backward(kjt, g, grad_weights=weighted)
            gw_want = ref.backward(plain, g, grad_weights=weighted)
            if weighted:  # a VBE id's dL/dw: the sum over the samples reading its bag
                assert gw.shape == values.shape
                pos, want_gw = 0, np.zeros(values.shape, np.float64)
                starts = np.concatenate([[0], np.cumsum(lengths)])
                bag0 = np.concatenate([[0], np.cumsum(fbs)])
                for f in range(len(dims)):
                    for s in range(9):
                        n = len(batch.bags[f][s][0])
                        b = bag0[f] + inv[f, s]
                        want_gw[starts[b]:starts[b] + n] += gw_want[pos:pos + n]
                        pos += n
                assert_close(gw, want_gw, ATOL, RTOL, "step %d grad_weights" % step)
        got, ref_sd = vbe.state_dict(), ref.state_dict()
        for k in ref_sd:
            assert_close(got[k], ref_sd[k], ATOL, RTOL, k)


def test_vbe_refusals(make_tables):
    """Malformed VBE KJTs raise InvalidArgumentError naming what is wrong; a sequence collection
    refuses VBE (UnsupportedError); the table is unchanged."""
    tables = make_tables()
    v = np.arange(4, dtype=np.int64) % 1
    lengths = np.ones(4, np.int32)
    with ember.EmbeddingBagCollection(tables, seed=3) as ebc:
        before = ebc.state_dict()
        fbs = np.ones(4, np.int32)
        with pytest.raises(ember.InvalidArgumentError, match="inverse_indices without feature_batch_sizes"):
            ebc.forward(ember.KJT(v, lengths, inverse_indices=np.zeros((4, 2), np.int32)))
        with pytest.raises(ember.InvalidArgumentError, match="feature_batch_sizes: 3 entries for 4 features"):
            ebc.forward(ember.KJT(v[:3], lengths[:3], feature_batch_sizes=fbs[:3]))
        with pytest.raises(ember.InvalidArgumentError, match="sample 1: inverse index 1 outside its 1 bags"):
            ebc.forward(ember.KJT(v, lengths, feature_batch_sizes=fbs,
                                  inverse_indices=np.array([[0, 1]] + [[0, 0]] * 3, np.int32)))
        with pytest.raises(ember.InvalidArgumentError, match="bag 1: no sample reads it"):
            ebc.forward(ember.KJT(np.zeros(5, np.int64), np.ones(5, np.int32), feature_batch_sizes=[2, 1, 1, 1],
                                  inverse_indices=np.zeros((4, 2), np.int32)))
        sd = ebc.state_dict()
        for k in before:
            assert np.array_equal(np.asarray(sd[k]), np.asarray(before[k]))
    with ember.EmbeddingBagCollection(make_tables("none"), seed=3) as seq:
        with pytest.raises(ember.UnsupportedError, match="sequence collection"):
            seq.forward(ember.KJT(np.zeros(2, np.int64), np.ones(2, np.int32), feature_batch_sizes=[1, 1],
                                  inverse_indices=np.zeros((2, 3), np.int32)))
