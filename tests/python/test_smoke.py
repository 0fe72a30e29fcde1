"""Smoke test of the installed package: import, a forward against numpy, one SGD step against its
formula, and a bad id refused by name. The full suites live beside this file."""

import numpy as np
import pytest

import ember


def test_import_version_and_status_table():
    assert ember.__version__.count(".") == 2
    assert ember.isa_best() in ("generic", "avx2", "avx512")
    # Every library status has its exception class, with the library's name and value.
    for name, code, _ in ember._ember.statuses():
        if name == "OK":
            continue
        cls = ember.errors._BY_STATUS[name]
        assert issubclass(cls, ember.EmberError)
        assert (cls.status, cls.code) == (name, code)


def _collection():
    tables = [
        ember.TableConfig("user", 10, 4, init=("normal", 1.0), lr=0.5),
        ember.TableConfig("item", 7, 3, feature_names=["item", "item_hist"], pooling="mean", lr=0.25),
    ]
    return ember.EmbeddingBagCollection(tables, seed=7)


# B = 2 samples, features user, item, item_hist: bag f * 2 + b.
LENGTHS = np.array([1, 2, 0, 3, 2, 1], np.int32)
VALUES = np.array([3, 0, 9, 1, 2, 6, 4, 4, 5], np.int64)
COLUMNS = [("user", 0, 4, False), ("item", 4, 7, True), ("item", 7, 10, True)]


def _numpy_forward(weights):
    out = np.zeros((2, 10), np.float64)
    offsets = np.concatenate([[0], np.cumsum(LENGTHS)])
    for f, (table, c0, c1, mean) in enumerate(COLUMNS):
        for b in range(2):
            ids = VALUES[offsets[f * 2 + b]:offsets[f * 2 + b + 1]]
            if len(ids):
                rows = weights[table][ids].astype(np.float64)
                out[b, c0:c1] = rows.mean(0) if mean else rows.sum(0)
    return out


def test_forward_matches_numpy_sum_and_mean():
    with _collection() as ebc:
        assert ebc.feature_names == ["user", "item", "item_hist"]
        assert ebc.output_dim == 10
        weights = {t: ebc.read(t) for t in ebc.table_names}
        out = ebc.forward(ember.KJT(VALUES, LENGTHS, keys=ebc.feature_names))
        assert out.dtype == np.float32 and out.shape == (2, 10)
        np.testing.assert_allclose(out, _numpy_forward(weights), rtol=1e-6, atol=1e-6)


def test_sgd_backward_applies_the_formula_once_per_touched_row():
    with _collection() as ebc:
        before = {t: ebc.read(t) for t in ebc.table_names}
        kjt = ember.KJT(VALUES, LENGTHS)
        ebc.forward(kjt)
        grad = np.arange(20, dtype=np.float32).reshape(2, 10) / 10
        ebc.backward(kjt, grad)
        # dL/dE[row] = sum over the bags holding the row of (grad of the bag) / (|bag| for mean),
        # duplicates coalesced; SGD: row -= lr * that sum. Untouched rows stay.
        expect = {t: before[t].astype(np.float64) for t in before}
        lr = {"user": 0.5, "item": 0.25}
        offsets = np.concatenate([[0], np.cumsum(LENGTHS)])
        for f, (table, c0, c1, mean) in enumerate(COLUMNS):
            for b in range(2):
                ids = VALUES[offsets[f * 2 + b]:offsets[f * 2 + b + 1]]
                for i in ids:
                    expect[table][i] -= lr[table] * grad[b, c0:c1] / (len(ids) if mean else 1)
        for t in ebc.table_names:
            np.testing.assert_allclose(ebc.read(t), expect[t], rtol=1e-6, atol=1e-6)
            assert ebc.step(t) == 1
        assert np.array_equal(ebc.read("user", rows=slice(4, 9)), before["user"][4:9])


def test_bad_id_raises_out_of_range_naming_the_feature():
    with _collection() as ebc:
        values = VALUES.copy()
        values[4] = 70  # a bag of feature 'item'
        before = ebc.read("item")
        with pytest.raises(ember.OutOfRangeError) as info:
            ebc.forward(ember.KJT(values, LENGTHS))
        err = info.value
        assert isinstance(err, IndexError)
        assert err.status == "OUT_OF_RANGE" and err.code == -2
        assert "'item'" in err.message and "70" in err.message and "(rank " in err.message
        assert np.array_equal(ebc.read("item"), before)


def test_float_ids_are_refused_not_truncated():
    with _collection() as ebc:
        with pytest.raises(ember.InvalidArgumentError, match="KJT values"):
            ebc.forward(ember.KJT(VALUES.astype(np.float64), LENGTHS))
