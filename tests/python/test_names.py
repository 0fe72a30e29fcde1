"""The package keeps no integer of a library enum by hand: every name table it uses
(python/ember/_config.py ENUMS and the tables derived from them, the sharding schemes, the status
classes of ember.errors) is the library's, read through its _name functions, and each name
round-trips through the library's _parse."""

import pytest

import ember
from ember import _config, _ember, _sharded, errors, lfq


@pytest.mark.parametrize("type_name", sorted(_config.ENUMS))
def test_enum_table_is_the_librarys(type_name):
    table = _config.ENUMS[type_name]
    names = _ember.enum_names(type_name)
    assert list(table) == names, "the table lists the library's names in value order"
    assert table == {name: value for value, name in enumerate(names)}
    for name, value in table.items():
        assert _ember.enum_parse(type_name, name) == value, "ember_%s_parse(%r)" % (type_name, name)
        assert _config.enum_name(table, value) == name
    assert _ember.enum_parse(type_name, "no such name") is None
    assert "unknown" not in table


def test_named_tables_are_those_of_enums():
    assert _config.POOLING is _config.ENUMS["pooling"]
    assert _config.DTYPES is _config.ENUMS["dtype"]
    assert _config.INIT_KINDS is _config.ENUMS["init_kind"]
    assert _config.WD_MODES is _config.ENUMS["weight_decay_mode"]
    assert _config.BOUNDS is _config.ENUMS["bounds_mode"]
    assert _config.CONVENTIONS is _config.ENUMS["grad_convention"]
    assert _config.EVICT_POLICIES is _config.ENUMS["evict_policy"]
    assert _config.OPTIMIZERS is _config.ENUMS["optim"]
    assert lfq._PROJECTIONS is _config.ENUMS["lfq_projection"]
    assert lfq._DIST_MEANS is _config.ENUMS["lfq_dist_mean"]


def test_derived_tables_keep_the_librarys_values():
    # Subsets keep the values of their enum; tables keyed by name cover exactly the enum's names.
    for sub, full in ((_config.STORAGE_DTYPES, _config.DTYPES), (_config.WIRE_DTYPES, _config.DTYPES),
                      (_config.CACHE_POLICIES, _config.EVICT_POLICIES)):
        assert all(full[k] == v for k, v in sub.items())
    # Every dtype a tensor can have; the wire-only ones (int8, fp8) are no array's.
    wire_only = set(_config.WIRE_DTYPES) - set(_config.STORAGE_DTYPES)
    assert wire_only == {"int8", "fp8_e4m3", "fp8_e5m2"}
    assert set(_config.NP_DTYPE_OF_NAME) == set(_config.DTYPES) - wire_only
    assert {_config.DTYPES[k]: v for k, v in _config.NP_DTYPE_OF_NAME.items()} == _config.NP_OF_DTYPE
    assert set(_config.INIT_PARAMS) == set(_config.INIT_KINDS)
    assert set(_config.DTYPE_ALIASES.values()) <= set(_config.DTYPES)


def test_schemes_are_the_librarys():
    long_names = _ember.enum_names("shard_scheme")
    assert [n for _, n, _ in _sharded._SCHEMES] == long_names
    for k, (short, long_name, _) in enumerate(_sharded._SCHEMES):
        assert _ember.enum_parse("shard_scheme", short) == k
        assert _ember.enum_parse("shard_scheme", long_name) == k
        assert _sharded._SCHEME_CODE[short] == _sharded._SCHEME_CODE[long_name] == k
    # The plan fields each scheme reads, as bits of the library's EMBER_PLAN_USES_* (shard.h).
    fields = {short: f for short, _, f in _sharded._SCHEMES}
    ranks, shards, group = _ember.PLAN_USES_RANKS, _ember.PLAN_USES_SHARDS, _ember.PLAN_USES_GROUP
    assert (_sharded._USES_RANKS, _sharded._USES_SHARDS, _sharded._USES_GROUP) == (ranks, shards, group)
    assert fields == {"dp": 0, "tw": ranks, "cw": ranks | shards, "rw": 0, "twrw": ranks | group,
                      "grid": ranks | shards | group}


def test_status_classes_carry_the_librarys_codes():
    statuses = {name: code for name, code, _ in _ember.statuses()}
    assert statuses.pop("OK") == 0
    assert set(errors._BY_STATUS) == set(statuses), "one exception class per library status"
    for name, code in statuses.items():
        cls = errors._BY_STATUS[name]
        assert (cls.status, cls.code) == (name, code)
        assert issubclass(cls, ember.EmberError)


def test_unknown_enum_type_is_a_key_error():
    with pytest.raises(KeyError, match="no enum 'colour'"):
        _ember.enum_names("colour")
    with pytest.raises(KeyError):
        _ember.enum_parse("colour", "red")


def test_init_kinds_by_name():
    # Each init kind's parameters by the library's name: the C tuple carries them in its fields.
    for spec, want in ((("uniform", -0.5, 0.25), (-0.5, 0.25, 0.0)), (("normal", 2.0), (0.0, 0.0, 2.0)),
                       (("zeros",), (0.0, 0.0, 0.0))):
        t = ember.TableConfig("t", 3, 2, init=spec)._c_tuple()
        assert t[5] == _config.INIT_KINDS[spec[0]]
        assert t[6:9] == want
    with pytest.raises(ember.InvalidArgumentError, match="'normal' takes 1"):
        ember.TableConfig("t", 3, 2, init=("normal", 1.0, 2.0))


def test_lfq_names_are_the_librarys():
    with ember.LFQ(dim=4, codebook_size=4, num_codebooks=2, projection="auto", dist_mean="tokens") as q:
        c = q.config
        assert c["projection"] in lfq._PROJECTIONS and c["projection"] == "none"  # AUTO resolved, dim == C*D
        assert c["dist_mean"] == "tokens"
    with ember.LFQ(dim=5, codebook_size=4, projection="LINEAR") as q:
        assert q.config["projection"] == "linear" and q.has_projections
    with pytest.raises(ember.InvalidArgumentError, match="'auto', 'none', 'linear'"):
        ember.LFQ(dim=4, codebook_size=4, projection="identity")
