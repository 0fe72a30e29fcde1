"""Hashed tables' int64 tensors through the extension (docs/hashed.md): the "ids" [rows, 3] map of
a collisionless hashed table is read and written as int64 arrays (buffer format "q", 8-byte items),
and a tensor read in a dtype it is not stored in is refused by name. The package's TableConfig does
not make hashed tables yet (docs/python.md): these tests build them through the extension's table
tuple. The sharded collection's int64 path is dist_cases.py's "hashed" case (test_dist.py)."""

import numpy as np
import pytest

import ember
from ember import _config, _ember

I64 = _config.DTYPES["int64"]
F32 = _config.DTYPES["fp32"]
ROWS, DIM, BUCKET = 32, 4, 4


def hashed_tables():
    """(table tuples, feature tuples): a hashed table "h" (8 buckets of 4 rows, LRU) and a plain one."""
    h = ember.TableConfig("h", ROWS, DIM, init=("uniform", -1.0, 1.0))._c_tuple()
    h += ((BUCKET, 0, _config.EVICT_POLICIES["lru"], 0),)
    r = ember.TableConfig("r", 10, 3)._c_tuple()
    return [h, r], [("h", 0), ("r", 1)]


def batch(ids):
    """KJT arrays of one sample per id in feature "h" and an empty bag of "r" each."""
    ids = np.asarray(ids, np.int64)
    B = len(ids)
    lengths = np.concatenate([np.ones(B, np.int32), np.zeros(B, np.int32)])
    return ids, lengths, B


def forward(ebc, ids):
    values, lengths, B = batch(ids)
    out = np.empty((B, DIM + 3), np.float32)
    ebc.forward(values, lengths, None, None, 2, B, out)
    return out


def read_ids(ebc):
    out = np.empty((ROWS, 3), np.int64)
    ebc.read(0, "ids", 0, ROWS, I64, out)
    return out


KEYS = [2**62 + 5, -7, 123456789012345, -(2**63), 2**63 - 1, 42, -7, 0]


def test_tensors_of_a_hashed_table_name_int64():
    tables, _ = hashed_tables()
    tensors = {name: (rows, cols, dtype) for name, rows, cols, dtype in _ember.table_tensors(tables[0])}
    assert tensors["ids"] == (ROWS, 3, "int64")
    assert tensors["weight"] == (ROWS, DIM, "fp32")


def test_local_ids_read_write_as_int64():
    tables, feats = hashed_tables()
    with_keys = _ember.EBC(tables, feats, 0, 7)
    forward(with_keys, KEYS)
    ids = read_ids(with_keys)
    used = ids[:, 2] > 0
    assert sorted(ids[used, 0].tolist()) == sorted(set(KEYS)), "every distinct key has its row, read as int64"
    # The map written into a fresh collection is the one it then reads, and the one it looks up:
    # with the rows' weights copied too (a fresh row's values follow its id, not its slot), the
    # same keys pool the same rows without admitting anything.
    fresh = _ember.EBC(tables, feats, 0, 7)
    fresh.write(0, "ids", 0, ROWS, I64, ids)
    np.testing.assert_array_equal(read_ids(fresh), ids)
    weight = np.empty((ROWS, DIM), np.float32)
    with_keys.read(0, "weight", 0, ROWS, F32, weight)
    fresh.write(0, "weight", 0, ROWS, F32, weight)
    np.testing.assert_array_equal(forward(fresh, KEYS), forward(with_keys, KEYS))
    with_keys.close()
    fresh.close()


def test_local_int64_tensor_refuses_other_dtypes():
    tables, feats = hashed_tables()
    ebc = _ember.EBC(tables, feats, 0, 7)
    forward(ebc, KEYS)
    with pytest.raises(ember.InvalidArgumentError, match="expected int64 items, got float32"):
        ebc.write(0, "ids", 0, ROWS, I64, np.zeros((ROWS, 3), np.float32))
    with pytest.raises(ember.InvalidArgumentError, match="tensor .ids. cannot be read as fp32"):
        ebc.read(0, "ids", 0, ROWS, F32, np.zeros((ROWS, 3), np.float32))
    with pytest.raises(ember.InvalidArgumentError, match="tensor .weight. cannot be read as int64"):
        ebc.read(0, "weight", 0, ROWS, I64, np.zeros((ROWS, DIM), np.int64))
    with pytest.raises(ember.InvalidArgumentError, match="unknown dtype 99"):
        ebc.read(0, "ids", 0, ROWS, 99, np.zeros((ROWS, 3), np.int64))
    ebc.close()
