"""Table configurations and the conversions every object shares (names of the C enums, arrays)."""

from __future__ import annotations

import dataclasses
import operator
import os
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from . import _ember
from .errors import InvalidArgumentError


def enum_values(type_name: str) -> dict[str, int]:
    """The library's names of enum ``ember_<type_name>`` mapped to their values (its _name function)."""
    return {name: k for k, name in enumerate(_ember.enum_names(type_name))}


# Every enum table of the package, by the library's type name (tests/python/test_names.py checks
# each against the library's _name and _parse functions).
ENUMS: dict[str, dict[str, int]] = {t: enum_values(t) for t in (
    "pooling", "dtype", "init_kind", "weight_decay_mode", "bounds_mode", "grad_convention", "evict_policy", "optim",
    "lfq_projection", "lfq_dist_mean")}
POOLING = ENUMS["pooling"]
DTYPES = ENUMS["dtype"]
STORAGE_DTYPES = {k: DTYPES[k] for k in ("fp32", "fp16", "bf16")}  # what a table's weights are stored in
# What the sharded collection's wire carries (ember_sebc_set_wire_precision): the library says.
WIRE_DTYPES = {k: v for k, v in DTYPES.items() if _ember.dtype_is_wire(v)}
DTYPE_ALIASES = {"float32": "fp32", "f32": "fp32", "float16": "fp16", "f16": "fp16", "half": "fp16",
                 "bfloat16": "bf16", "float64": "fp64", "f64": "fp64"}
INIT_KINDS = ENUMS["init_kind"]
WD_MODES = ENUMS["weight_decay_mode"]
BOUNDS = ENUMS["bounds_mode"]
CONVENTIONS = ENUMS["grad_convention"]
EVICT_POLICIES = ENUMS["evict_policy"]
CACHE_POLICIES = {k: EVICT_POLICIES[k] for k in ("lru", "lfu")}  # the policies a tiered table's cache takes
OPTIMIZERS = ENUMS["optim"]
# numpy dtype of an array read or written in each dtype (bf16: its raw bits), by the library's name.
NP_DTYPE_OF_NAME: dict[str, np.dtype[Any]] = {
    "fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(np.uint16),
    "int64": np.dtype(np.int64), "fp64": np.dtype(np.float64)}
NP_OF_DTYPE: dict[int, np.dtype[Any]] = {DTYPES[k]: v for k, v in NP_DTYPE_OF_NAME.items()}
# The parameters of each init kind, by the library's name: ("uniform", a, b), ("normal", std), ("zeros",).
INIT_PARAMS: dict[str, tuple[str, ...]] = {"zeros": (), "uniform": ("a", "b"), "normal": ("std",)}

InitSpec = Union[tuple[Any, ...], list[Any], str]


def rank_tag(rank: int | None = None) -> str:
    return f" (rank {_ember.world_rank() if rank is None else rank})"


def invalid(message: str, rank: int | None = None) -> InvalidArgumentError:
    """InvalidArgumentError in the library's style: what, which, the value, then "(rank R)"."""
    return InvalidArgumentError(message + rank_tag(rank))


def parse_name(value: Any, table: dict[str, int], what: str, aliases: dict[str, str] | None = None) -> int:
    """The C value of an enum given by name (case-insensitive); InvalidArgumentError otherwise."""
    if isinstance(value, str):
        key = value.lower()
        if aliases:
            key = aliases.get(key, key)
        if key in table:
            return table[key]
    raise invalid(f"{what}: unknown {value!r} (one of {', '.join(table)})")


def parse_dtype(value: Any, what: str = "dtype") -> int:
    """A storage dtype: "fp32" | "fp16" | "bf16" (or float32/float16/bfloat16, numpy's float32/float16)."""
    if not isinstance(value, str):
        try:
            value = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16"}.get(np.dtype(value), value)
        except TypeError:
            pass
    return parse_name(value, STORAGE_DTYPES, what, DTYPE_ALIASES)


def parse_wire_dtype(value: Any, what: str = "wire_precision") -> int:
    """A wire precision: "fp32" | "fp16" | "bf16" | "fp8_e4m3" | "fp8_e5m2" | "int8" (and the
    storage dtypes' aliases)."""
    return parse_name(value, WIRE_DTYPES, what, DTYPE_ALIASES)


def enum_name(table: dict[str, int], code: int) -> str:
    """The name of value ``code`` in one of the tables above (the library's name)."""
    for name, value in table.items():
        if value == code:
            return name
    raise KeyError(code)


def dtype_name(code: int) -> str:
    return enum_name(DTYPES, code)


I32 = (-2**31, 2**31 - 1)
I64 = (-2**63, 2**63 - 1)
U64 = (0, 2**64 - 1)


def as_index(value: Any, what: str, lo: int | None = None, hi: int | None = None, rank: int | None = None) -> int:
    """An integer argument within [lo, hi] (default: the int64 range, what the library takes),
    bool refused; InvalidArgumentError naming ``what`` and the value otherwise."""
    if isinstance(value, (bool, np.bool_)):
        raise invalid(f"{what}: expected an integer, got {value!r}", rank)
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid(f"{what}: expected an integer, got {type(value).__name__} {value!r}", rank) from None
    lo = I64[0] if lo is None else lo
    hi = I64[1] if hi is None else hi
    if not lo <= v <= hi:
        raise invalid(f"{what}: {v} outside [{lo}, {hi}]", rank)
    return v


def as_float(value: Any, what: str, rank: int | None = None) -> float:
    """A real-number argument (int, float, numpy scalars; bool and strings refused) as a Python
    float; InvalidArgumentError naming ``what`` and the value otherwise. The library checks the
    value itself (NaN, sign, range) where it matters."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise invalid(f"{what}: expected a number, got {type(value).__name__} {value!r}", rank)
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise invalid(f"{what}: expected a number, got {type(value).__name__} {value!r}", rank) from None


def as_path(value: Any, what: str, rank: int | None = None) -> bytes:
    """A file-system path (str, bytes or os.PathLike) as bytes; InvalidArgumentError otherwise."""
    try:
        path = os.fsencode(value)
    except TypeError:
        raise invalid(f"{what}: expected a path (str, bytes or os.PathLike), got {type(value).__name__} "
                      f"{value!r}", rank) from None
    if not path or b"\0" in path:
        raise invalid(f"{what}: {value!r} is not a path (empty, or a NUL byte in it)", rank)
    return path


_INT_KINDS = "iu"
_REFUSED = {"b": "booleans", "c": "complex numbers", "O": "Python objects", "U": "strings", "S": "bytes",
            "V": "structured records", "M": "datetimes", "m": "timedeltas"}


def contiguous(a: Any, dtype: Any = None) -> np.ndarray:
    """``a`` as a C-contiguous array of ``dtype`` (None: its own) whose data is aligned to its items,
    without a copy when it already is one. The library reads arrays through typed pointers: an
    unaligned one (np.frombuffer at an odd offset, a packed record's field) is copied."""
    return np.require(a, dtype, ["C_CONTIGUOUS", "ALIGNED"])


def as_array(x: Any, dtype: Any, what: str, ndim: int = 1, rank: int | None = None) -> np.ndarray:
    """``x`` as a C-contiguous, aligned array of ``dtype`` with ``ndim`` dimensions, without a copy
    when it already is one. Conversions that change meaning are refused with InvalidArgumentError:
    floats to integers (ids, lengths, offsets), booleans, complex numbers, objects, strings, and
    integers outside the target's range."""
    dt = np.dtype(dtype)
    if (type(x) is np.ndarray and x.dtype == dt and x.ndim == ndim and x.flags.c_contiguous
            and x.flags.aligned):
        return x
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists, objects numpy cannot read
        raise invalid(f"{what}: cannot be converted to an array ({e})", rank) from None
    if a.size == 0 and a.ndim != ndim:
        a = a.reshape((0,) * ndim if ndim == 1 else (0, 0)[:ndim])
    if a.ndim != ndim:
        got = f"{type(x).__name__} {x!r}" if a.ndim == 0 else f"shape {a.shape}"
        raise invalid(f"{what}: expected a {ndim}-D array, got {got}", rank)
    kind = a.dtype.kind
    if a.size and kind in _REFUSED:
        raise invalid(f"{what}: {_REFUSED[kind]} are not {dt.name} values (dtype {a.dtype})", rank)
    if dt.kind in _INT_KINDS:
        if a.size and kind == "f":
            raise invalid(f"{what}: float values are not {dt.name} ids or counts (dtype {a.dtype}: convert "
                          f"explicitly if they are whole numbers)", rank)
        if a.size and kind in _INT_KINDS and (a.dtype.itemsize > dt.itemsize or
                                              (kind == "u" and a.dtype.itemsize >= dt.itemsize)):
            info = np.iinfo(dt)
            lo, hi = int(a.min()), int(a.max())
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise invalid(f"{what}: value {bad} outside the {dt.name} range", rank)
    if not a.size:
        return np.zeros(a.shape, dt)
    return contiguous(a, dt)


@dataclasses.dataclass
class TableConfig:
    """One embedding table (TorchRec's EmbeddingBagConfig, plus ember's fused optimizer).

    name            unique within a collection
    num_embeddings  rows (>= 1); embedding_dim: columns (>= 1)
    feature_names   the features that read this table, in order (None: [name])
    pooling         "sum" | "mean" (divides by the id count, as FBGEMM) | "none" (one row per id)
    dtype           storage: "fp32" | "fp16" | "bf16" (updates accumulate in fp32)
    init            ("uniform", a, b) | ("normal", std) | ("zeros",)
    optimizer       sgd adagrad rowwise_adagrad adam partial_rowwise_adam lamb partial_rowwise_lamb
                    lars_sgd, with lr, eps, beta1, beta2, weight_decay, weight_decay_mode ("none" |
                    "l2" | "decoupled"), initial_accumulator (Adagrad), momentum and eta (LARS-SGD)
    stochastic_rounding  16-bit storage: round updates stochastically (seeded)
    cache_rows      > 0: a tiered table, its rows in a scratch file on disk (the collection's
                    ssd_dir) behind a DRAM cache of this many rows; the numbers are bitwise those
                    of the table in RAM (docs/tiered.md). 0 (default): in RAM
    cache_policy    which cached rows leave first: "lru" | "lfu"
    hashed          a collisionless hashed table (docs/hashed.md): ids are any int64 keys, each
                    gets a row of its own among num_embeddings (the capacity), in buckets of
                    hash_bucket_rows rows (0: 16); an id is admitted at its hash_min_count-th
                    occurrence (<= 1: at once); a full bucket evicts by hash_policy ("lru" | "lfu"
                    | "ttl": rows unused for hash_ttl_steps steps leave first). Its id map is the
                    int64 tensor "ids" [rows, 3] of the state dict

    The library checks the values (sizes, hyper-parameters) when a collection is created; names
    are checked here (InvalidArgumentError).
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    feature_names: list[str] | None = None
    pooling: str = "sum"
    dtype: str = "fp32"
    init: InitSpec = ("uniform", -0.01, 0.01)
    optimizer: str = "sgd"
    lr: float = 0.01
    eps: float = 1e-8
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    weight_decay_mode: str = "none"
    initial_accumulator: float = 0.0
    momentum: float = 0.9
    eta: float = 0.001
    stochastic_rounding: bool = False
    cache_rows: int = 0
    cache_policy: str = "lru"
    hashed: bool = False
    hash_bucket_rows: int = 0
    hash_min_count: int = 0
    hash_policy: str = "lru"
    hash_ttl_steps: int = 0

    _FLOATS = ("lr", "eps", "beta1", "beta2", "weight_decay", "initial_accumulator", "momentum", "eta")

    def __post_init__(self) -> None:
        self._c_tuple()

    def _c_tuple(self) -> tuple[Any, ...]:
        """Checks the fields (names, types, the ranges of the C types) and returns the extension's
        table tuple (internal.h: ember_py_config_parse). Run at construction and again by every
        collection, so that a field changed afterwards is checked too: InvalidArgumentError naming
        the table, the field and its value."""
        if not isinstance(self.name, str) or not self.name:
            raise invalid(f"TableConfig: name must be a non-empty string, got {self.name!r}")
        if "\0" in self.name:  # the library takes C strings
            raise invalid(f"TableConfig: name {self.name!r} has a NUL byte")
        if self.feature_names is None:
            self.feature_names = [self.name]
        elif isinstance(self.feature_names, str):
            self.feature_names = [self.feature_names]
        else:
            try:
                self.feature_names = list(self.feature_names)
            except TypeError:
                raise invalid(f"table '{self.name}': feature_names {self.feature_names!r} is not a list of "
                              f"names") from None
        for f in self.feature_names:
            if not isinstance(f, str) or not f:
                raise invalid(f"table '{self.name}': feature name {f!r} is not a non-empty string")
            if "\0" in f:
                raise invalid(f"table '{self.name}': feature name {f!r} has a NUL byte")
        what = f"table '{self.name}'"
        self.num_embeddings = as_index(self.num_embeddings, f"{what} num_embeddings")
        self.embedding_dim = as_index(self.embedding_dim, f"{what} embedding_dim", *I32)
        for field in self._FLOATS:
            setattr(self, field, as_float(getattr(self, field), f"{what} {field}"))
        if not isinstance(self.stochastic_rounding, (bool, np.bool_, int, np.integer)):
            raise invalid(f"{what} stochastic_rounding: expected a bool, got {self.stochastic_rounding!r}")
        pooling = parse_name(self.pooling, POOLING, f"{what} pooling")
        dtype = parse_dtype(self.dtype, f"{what} dtype")
        optimizer = parse_name(self.optimizer, OPTIMIZERS, f"{what} optimizer")
        wd_mode = parse_name(self.weight_decay_mode, WD_MODES, f"{what} weight_decay_mode")
        self.cache_rows = as_index(self.cache_rows, f"{what} cache_rows")
        policy = parse_name(self.cache_policy, CACHE_POLICIES, f"{what} cache_policy")
        kind, a, b, std = self._init_values()
        if not isinstance(self.hashed, (bool, np.bool_, int, np.integer)):
            raise invalid(f"{what} hashed: expected a bool, got {self.hashed!r}")
        c = (self.name, self.num_embeddings, self.embedding_dim, pooling, dtype, kind, a, b, std, optimizer,
             self.lr, self.eps, self.beta1, self.beta2, self.weight_decay, wd_mode, self.initial_accumulator,
             self.momentum, self.eta, int(bool(self.stochastic_rounding)), self.cache_rows, policy)
        if not self.hashed:
            return c
        self.hash_bucket_rows = as_index(self.hash_bucket_rows, f"{what} hash_bucket_rows", *I32)
        self.hash_min_count = as_index(self.hash_min_count, f"{what} hash_min_count")
        self.hash_ttl_steps = as_index(self.hash_ttl_steps, f"{what} hash_ttl_steps")
        hpolicy = parse_name(self.hash_policy, EVICT_POLICIES, f"{what} hash_policy")
        return c + ((self.hash_bucket_rows, self.hash_min_count, hpolicy, self.hash_ttl_steps),)

    def _init_values(self) -> tuple[int, float, float, float]:
        what = f"table '{self.name}' init"
        if isinstance(self.init, str):
            init: tuple[Any, ...] = (self.init,)
        else:
            try:
                init = tuple(self.init)
            except TypeError:
                raise invalid(f"{what}: {self.init!r} is not (\"uniform\", a, b), (\"normal\", std) or "
                              f"(\"zeros\",)") from None
        if not init:
            raise invalid(f"{what}: empty (\"uniform\", a, b), (\"normal\", std) or (\"zeros\",) expected")
        kind = parse_name(init[0], INIT_KINDS, what)
        names = INIT_PARAMS[enum_name(INIT_KINDS, kind)]
        if len(init) != 1 + len(names):
            raise invalid(f"{what}: {init!r} has {len(init) - 1} parameter(s), {init[0]!r} takes {len(names)}")
        params = {n: as_float(v, f"{what} {init[0]!r} parameter") for n, v in zip(names, init[1:])}
        return kind, params.get("a", 0.0), params.get("b", 0.0), params.get("std", 0.0)

    def tensor_names(self) -> list[str]:
        """The tensors a table of this configuration holds: "weight", then its optimizer's states."""
        return [t[0] for t in _ember.table_tensors(self._c_tuple())]


def c_config(tables: Any) -> tuple[list[tuple[Any, ...]], list[tuple[str, int]], list[TableConfig]]:
    """The extension's (tables, features) tuples of a list of TableConfig, and the list itself."""
    if isinstance(tables, TableConfig):
        tables = [tables]
    try:
        tables = list(tables)
    except TypeError:
        raise invalid(f"tables: expected a list of TableConfig, got {type(tables).__name__}") from None
    if not tables:
        raise invalid("tables: empty list (a collection needs at least one TableConfig)")
    for i, t in enumerate(tables):
        if not isinstance(t, TableConfig):
            raise invalid(f"tables[{i}]: expected a TableConfig, got {type(t).__name__}")
    ctab = [t._c_tuple() for t in tables]
    feats = [(f, i) for i, t in enumerate(tables) for f in (t.feature_names or [t.name])]
    return ctab, feats, tables


def table_index(table: Any, names: Sequence[str], what: str = "table", rank: int | None = None) -> int:
    """A table given by name or index -> its index; InvalidArgumentError naming the known tables."""
    if isinstance(table, str):
        try:
            return list(names).index(table)
        except ValueError:
            raise invalid(f"{what}: unknown table {table!r} (tables: {', '.join(names)})", rank) from None
    if isinstance(table, (bool, np.bool_)):
        raise invalid(f"{what}: expected a table name or index, got {table!r}", rank)
    try:
        t = operator.index(table)
    except TypeError:
        raise invalid(f"{what}: expected a table name or index, got {type(table).__name__}", rank) from None
    if not 0 <= t < len(names):
        raise invalid(f"{what}: table index {t} outside [0, {len(names)})", rank)
    return t
