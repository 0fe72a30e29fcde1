"""Hashed tables from the package (docs/hashed.md): TableConfig(hashed=True) makes a collisionless
hashed table whose "ids" map [rows, 3] is read, written and carried in state dicts as int64; any
int64 key is looked up; a state dict loaded into a fresh collection gives its outputs back; the
ember.torch module over one trains as the numpy one (when torch imports). Through the extension:
the int64 tensors' buffers (format "q", 8-byte items) and a tensor read in a dtype it is not
stored in refused by name. The sharded collection's int64 path is dist_cases.py's "hashed" case
(test_dist.py)."""

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
    ebc.forward((values, lengths, None, None, 2, B, None, None), out)
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


# ---- the package's TableConfig(hashed=True) --------------------------------------------------

def package_tables(**kw):
    return [ember.TableConfig("h", ROWS, DIM, init=("uniform", -1.0, 1.0), optimizer="adagrad", lr=0.1, hashed=True,
                              hash_bucket_rows=BUCKET, **kw),
            ember.TableConfig("r", 10, 3)]


def package_kjt(keys):
    values, lengths, B = batch(keys)
    return ember.KJT(values, lengths=lengths, batch_size=B)


def test_package_hashed_table_trains_and_its_state_dict_carries_int64_ids():
    before = ember.bytes_outstanding()  # what other tests of this process still hold
    ebc = ember.EmbeddingBagCollection(package_tables(), seed=7)
    assert ebc.tensor_names("h")[-1] == "ids"
    out = ebc.forward(package_kjt(KEYS))
    ebc.backward(package_kjt(KEYS), np.ones_like(out))
    sd = ebc.state_dict()
    assert sd["h.ids"].dtype == np.int64 and sd["h.ids"].shape == (ROWS, 3)
    used = sd["h.ids"][:, 2] > 0
    assert sorted(sd["h.ids"][used, 0].tolist()) == sorted(set(KEYS))
    assert ebc.read("h", "ids").dtype == np.int64 and ebc.read("h").dtype == np.float32
    fresh = ember.EmbeddingBagCollection(package_tables(), seed=99)
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(fresh.read("h", "ids"), sd["h.ids"])
    np.testing.assert_array_equal(fresh.forward(package_kjt(KEYS)), ebc.forward(package_kjt(KEYS)))
    with pytest.raises(ember.InvalidArgumentError, match="tensor 'ids' is int64"):
        ebc.read("h", "ids", dtype="fp32")
    ebc.close()
    fresh.close()
    assert ember.bytes_outstanding() == before


def test_package_hashed_config_refusals():
    with pytest.raises(ember.InvalidArgumentError, match="hash_policy: unknown 'fifo'"):
        ember.TableConfig("h", ROWS, DIM, hashed=True, hash_policy="fifo")
    with pytest.raises(ember.InvalidArgumentError, match="hashed: expected a bool"):
        ember.TableConfig("h", ROWS, DIM, hashed="yes")
    with pytest.raises(ember.InvalidArgumentError, match="bucket"):
        ember.EmbeddingBagCollection([ember.TableConfig("h", ROWS, DIM, hashed=True, hash_bucket_rows=5)])


def test_torch_module_over_a_hashed_table():
    torch = pytest.importorskip("torch", reason="ember.torch needs torch")
    import ember.torch as et
    m = et.EmbeddingBagCollection(package_tables(), seed=7)
    ref = ember.EmbeddingBagCollection(package_tables(), seed=7)
    values, lengths, _ = batch(KEYS)
    out = m(torch.from_numpy(values), torch.from_numpy(lengths))
    out.sum().backward()
    want = ref.forward(package_kjt(KEYS))
    ref.backward(package_kjt(KEYS), np.ones_like(want))
    np.testing.assert_array_equal(out.detach().numpy(), want)
    for tensor in ("weight", "ids"):
        np.testing.assert_array_equal(m.ebc.read("h", tensor), ref.read("h", tensor))
    sd = m.state_dict()
    assert sd["embedding_bags.h.weight"].shape == (ROWS, DIM) and sd["embedding_bags.h.ids"].dtype == torch.int64
    assert "embedding_bags.r.ids" not in sd
    fresh = et.EmbeddingBagCollection(package_tables(), seed=99)
    fresh.load_state_dict(sd)
    with torch.no_grad():
        np.testing.assert_array_equal(fresh(torch.from_numpy(values), torch.from_numpy(lengths)).numpy(),
                                      ref.forward(package_kjt(KEYS)))
    for x in (m, fresh):
        x.ebc.close()
    ref.close()
