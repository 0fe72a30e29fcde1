"""EmbeddingBagCollection: a local collection (include/ember/ebc.h) with its fused optimizer."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import _ember
from ._config import (BOUNDS, DTYPES, I32, NP_OF_DTYPE, U64, TableConfig, as_array, as_float, as_index, as_path,
                      c_config, contiguous, dtype_name, invalid, parse_dtype, parse_name, table_index)
from ._kjt import KJT

__all__ = ["EmbeddingBagCollection"]


class _Collection:
    """What the local and the sharded collection share: names, shapes, argument checks."""

    _rank: int | None = None
    _output_dim: int = 0
    _c: Any

    def _setup(self, tables: Any) -> tuple[list[Any], list[Any]]:
        ctab, feats, tables = c_config(tables)
        self._tables = [dataclasses.replace(t) for t in tables]
        self._table_names = [t.name for t in self._tables]
        self._feature_names = [f for f, _ in feats]
        self._feature_dims = [self._tables[t].embedding_dim for _, t in feats]
        self._all_none = all(t.pooling.lower() == "none" for t in self._tables)
        # Tensors of each table: name -> (rows, cols), from the optimizer's descriptor.
        self._tensors = [{n: (r, c) for n, r, c, _ in _ember.table_tensors(ct)} for ct in ctab]
        # The int64 tensors (a hashed table's "ids"): read and written as int64, never as floats.
        self._int64 = [{n for n, _, _, dt in _ember.table_tensors(ct) if dt == "int64"} for ct in ctab]
        self._dtype_codes = [parse_dtype(t.dtype) for t in self._tables]
        return ctab, feats

    @property
    def feature_names(self) -> list[str]:
        """Feature names in output order: tables in order, each table's feature_names in order."""
        return list(self._feature_names)

    @property
    def table_names(self) -> list[str]:
        return list(self._table_names)

    @property
    def tables(self) -> list[TableConfig]:
        """The TableConfigs (copies; set_lr and convert_dtype keep their lr and dtype current)."""
        return [dataclasses.replace(t) for t in self._tables]

    @property
    def output_dim(self) -> int:
        """sum of the features' dims (pooled), or the common dim D (all-"none" collections)."""
        return self._output_dim

    def _t(self, table: Any, what: str = "table") -> int:
        return table_index(table, self._table_names, what, self._rank)

    def _tensor(self, t: int, tensor: Any, what: str) -> tuple[int, int]:
        """(rows, cols) of table t's tensor, or InvalidArgumentError naming the table's tensors."""
        shapes = self._tensors[t]
        if not isinstance(tensor, str) or tensor not in shapes:
            raise invalid(f"{what}: table '{self._table_names[t]}' has no tensor {tensor!r} "
                          f"(tensors: {', '.join(shapes)})", self._rank)
        return shapes[tensor]

    def tensor_names(self, table: Any) -> list[str]:
        """Table's tensors: "weight", then its optimizer's states ("momentum1", "momentum2")."""
        return list(self._tensors[self._t(table)])

    def _kjt_parts(self, kjt: Any) -> tuple[Any, ...]:
        if not isinstance(kjt, KJT):
            raise invalid(f"kjt: expected an ember.KJT, got {type(kjt).__name__}", self._rank)
        return kjt._parts(self._feature_names, self._rank)

    def _out_shape(self, parts: tuple[Any, ...]) -> tuple[int, ...]:
        """The output's shape for a KJT's parts: [nnz, D] (all-"none"), [B, output_dim], or a VBE
        KJT without inverse indices: [sum_f B_f D_f] (each feature's own bags)."""
        values, B, fbs, inv = parts[0], parts[5], parts[6], parts[7]
        if self._all_none:
            return (values.shape[0], self._output_dim)
        if fbs is not None and inv is None:
            return (sum(max(int(b), 0) * d for b, d in zip(fbs, self._feature_dims)),)
        return (B, self._output_dim)

    def _out(self, out: Any, shape: tuple[int, ...], what: str = "out") -> np.ndarray:
        if out is None:
            return np.empty(shape, np.float32)
        if (type(out) is not np.ndarray or out.dtype != np.float32 or out.shape != shape
                or not out.flags.c_contiguous or not out.flags.writeable or not out.flags.aligned):
            got = (f"{out.dtype} {out.shape} (C-contiguous {out.flags.c_contiguous}, writable "
                   f"{out.flags.writeable}, aligned {out.flags.aligned})" if isinstance(out, np.ndarray)
                   else type(out).__name__)
            raise invalid(f"{what}: expected a writable C-contiguous aligned float32 array of shape {shape}, "
                          f"got {got}", self._rank)
        return out

    def _grad(self, grad_out: Any, shape: tuple[int, ...]) -> np.ndarray:
        g = as_array(grad_out, np.float32, "grad_out", ndim=len(shape), rank=self._rank)
        if g.shape != shape:
            raise invalid(f"grad_out: shape {g.shape}, the output's is {shape}", self._rank)
        return g

    def _rows(self, rows: Any, n: int) -> tuple[int, int]:
        if rows is None:
            return 0, n
        if isinstance(rows, slice):
            r0, r1, step = rows.indices(n)
            if step != 1:
                raise invalid(f"rows: slice step {step} (contiguous rows only)", self._rank)
            return r0, max(r0, r1)
        if isinstance(rows, (tuple, list)) and len(rows) == 2:
            r0, r1 = as_index(rows[0], "rows begin", rank=self._rank), as_index(rows[1], "rows end", rank=self._rank)
            if not 0 <= r0 <= r1 <= n:
                raise invalid(f"rows: [{r0}, {r1}) outside [0, {n}]", self._rank)
            return r0, r1
        raise invalid(f"rows: expected None, a slice or (begin, end), got {rows!r}", self._rank)

    def _read_code(self, t: int, tensor: str, dtype: Any) -> int:
        """The dtype code a read of table t's tensor returns: int64 for an int64 tensor (None or
        "int64" given), else float32 (None) or the dtype given."""
        if tensor in self._int64[t]:
            if dtype not in (None, "int64"):
                raise invalid(f"read: table '{self._table_names[t]}' tensor '{tensor}' is int64, not {dtype!r}",
                              self._rank)
            return DTYPES["int64"]
        return parse_dtype("fp32" if dtype is None else dtype)

    def _state_array(self, t: int, tensor: str, array: Any, rows: int | None, what: str) -> tuple[np.ndarray, int]:
        """A state array for table t's tensor as (C-contiguous [n, cols] array, dtype code): the
        weight of a 16-bit table may come in its own dtype (float16, or uint16 bits for bf16); an
        int64 tensor (a hashed table's "ids") is int64."""
        nrows, cols = self._tensor(t, tensor, what)
        code = DTYPES["fp32"]
        native = self._dtype_codes[t]
        if tensor in self._int64[t]:
            a, code = as_array(array, np.int64, what, ndim=2, rank=self._rank), DTYPES["int64"]
        elif (tensor == "weight" and native != code and isinstance(array, np.ndarray)
                and array.dtype == NP_OF_DTYPE[native]):
            a, code = contiguous(array), native
        else:
            if isinstance(array, np.ndarray) and array.ndim == 1 and cols == 1:
                array = array.reshape(-1, 1)
            a = as_array(array, np.float32, what, ndim=2, rank=self._rank)
        if a.ndim == 1 and cols == 1:
            a = a.reshape(-1, 1)
        if a.ndim != 2 or a.shape[1] != cols or (rows is not None and a.shape[0] != rows):
            want = f"[{rows}, {cols}]" if rows is not None else f"[n, {cols}]"
            raise invalid(f"{what}: table '{self._table_names[t]}' tensor '{tensor}' is {want}, the array "
                          f"has shape {a.shape}", self._rank)
        return a, code

    def _check_state_dict(self, d: Mapping[str, Any], strict: bool) -> None:
        if not isinstance(d, Mapping):
            raise invalid(f"state_dict: expected a mapping, got {type(d).__name__}", self._rank)
        expected = {f"{n}.{k}" for t, n in enumerate(self._table_names) for k in (*self._tensors[t], "step")}
        if strict:
            missing = sorted(expected - set(d))
            unexpected = sorted(set(d) - expected)
            if missing or unexpected:
                raise invalid(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}", self._rank)

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"{kind}(tables={self._table_names}, features={self._feature_names}, output_dim={self._output_dim})"


class EmbeddingBagCollection(_Collection):
    """A local collection of embedding tables with the optimizer fused into backward (ember_ebc).

    tables          list of TableConfig; the output has one column block per feature, tables in
                    order and each table's features in order (TorchRec's KeyedTensor layout)
    bounds          ids outside [0, rows): "error" (OutOfRangeError, nothing changes), "clamp",
                    "skip" (dropped; not counted by MEAN)
    seed            initialisation and stochastic rounding: table t's values depend only on the
                    seed, its name and the row (a sharded collection starts from the same values)
    num_threads     kernel OpenMP threads (0: all); results are bitwise identical for any count
    max_batch_size, max_nnz   workspace hints (0: sized on first use)
    ssd_dir         where tiered tables' scratch files go (TableConfig.cache_rows; None: $TMPDIR,
                    else /tmp)

    The collection owns its own library context. Local: no communication. Methods may be called
    from several threads; calls on one collection run one at a time (long calls release the GIL).
    Errors raise ember.errors classes; a failed call changes nothing. Tables are given by name or
    index. Use as a context manager, or close(); garbage collection frees it too.
    """

    _c: _ember.EBC

    def __init__(self, tables: Sequence[TableConfig], *, bounds: str = "error", seed: int = 0,
                 num_threads: int = 0, max_batch_size: int = 0, max_nnz: int = 0,
                 ssd_dir: str | os.PathLike[str] | None = None) -> None:
        self._rank = _ember.world_rank()
        ctab, feats = self._setup(tables)
        b = parse_name(bounds, BOUNDS, "bounds")
        d = None if ssd_dir is None else os.fsdecode(as_path(ssd_dir, "ssd_dir"))
        self._c = _ember.EBC(ctab, feats, b, as_index(seed, "seed", *U64), as_index(num_threads, "num_threads", 0, I32[1]),
                             as_index(max_batch_size, "max_batch_size", 0, I32[1]), as_index(max_nnz, "max_nnz", 0), d)
        self._output_dim = self._c.output_dim

    # ---- forward / backward ------------------------------------------------------------------

    def forward(self, kjt: KJT, out: np.ndarray | None = None) -> np.ndarray:
        """Pools every bag of ``kjt``: float32 [B, output_dim] (all-"none" collections: [nnz, D],
        one row per id in value order). ``out``: a float32 array of that shape to write into.
        Local. Raises InvalidArgumentError (malformed KJT, keys other than feature_names),
        OutOfRangeError (an id outside its table, bounds "error": feature, bag and id named),
        NumericError (a NaN or infinite per-id weight). On error ``out`` is unchanged."""
        parts = self._kjt_parts(kjt)
        o = self._out(out, self._out_shape(parts))
        self._c.forward(parts, o)
        return o

    __call__ = forward

    def backward(self, kjt: KJT, grad_out: Any, grad_weights: bool = False) -> np.ndarray | None:
        """Backward with the fused optimizer: ``grad_out`` = dL/d(out), float32 of forward's output
        shape, taken exactly as given. Duplicate ids are coalesced and every touched row receives
        one update; each table's step counter advances. With ``grad_weights`` (the KJT must carry
        weights) returns float32 [nnz] dL/dw computed with the weights before the update, else
        None. Local. Raises as forward, plus NumericError (NaN/Inf in grad_out, before anything
        changes)."""
        parts = self._kjt_parts(kjt)
        g = self._grad(grad_out, self._out_shape(parts))
        gw = np.empty(parts[0].shape[0], np.float32) if grad_weights else None
        self._c.backward(parts, g, gw)
        return gw

    # ---- optimizer ---------------------------------------------------------------------------

    def set_lr(self, lr: float, table: Any = None) -> None:
        """Learning rate of ``table`` (name or index; None: every table) for the next steps."""
        t = -1 if table is None else self._t(table)
        v = as_float(lr, "set_lr: lr")
        self._c.set_lr(t, v)
        for i in (range(len(self._tables)) if t < 0 else (t,)):
            self._tables[i].lr = v

    def step(self, table: Any) -> int:
        """Backward steps applied to the table (Adam/LAMB bias correction)."""
        return self._c.step(self._t(table))

    def set_step(self, table: Any, step: int) -> None:
        self._c.set_step(self._t(table), as_index(step, "set_step: step"))

    # ---- state -------------------------------------------------------------------------------

    def read(self, table: Any, tensor: str = "weight", rows: Any = None, dtype: Any = None) -> np.ndarray:
        """A copy of rows (None: all; a slice or (begin, end)) of the table's tensor ("weight",
        "momentum1", ...: tensor_names) as [n, cols] (per-row state: cols 1), in float32 (dtype
        None), or for the weight of a 16-bit table in its own dtype ("fp16": float16, "bf16":
        uint16 raw bits); a hashed table's "ids" as int64. Local. Raises InvalidArgumentError
        (unknown table/tensor, bad rows, dtype)."""
        t = self._t(table)
        nrows, cols = self._tensor(t, tensor, "read")
        r0, r1 = self._rows(rows, nrows)
        code = self._read_code(t, tensor, dtype)
        out = np.empty((r1 - r0, cols), NP_OF_DTYPE[code])
        self._c.read(t, tensor, r0, r1, code, out)
        return out

    def write(self, table: Any, tensor: str, array: Any, row_begin: int = 0) -> None:
        """Writes ``array`` [n, cols] into rows [row_begin, row_begin + n) of the table's tensor,
        rounded to nearest-even into 16-bit storage (a float16 array for an fp16 weight, or uint16
        bits for a bf16 one, are stored as they are). Local. Raises InvalidArgumentError."""
        t = self._t(table)
        a, code = self._state_array(t, tensor, array, None, "write")
        # The rows' end must stay within int64 (the library then refuses rows past the table).
        r0 = as_index(row_begin, "write: row_begin", hi=2**63 - 1 - a.shape[0])
        self._c.write(t, tensor, r0, r0 + a.shape[0], code, a)

    def state_dict(self) -> dict[str, Any]:
        """{"<table>.<tensor>": float32 copy, ..., "<table>.step": int} for every table."""
        d: dict[str, Any] = {}
        for t, name in enumerate(self._table_names):
            for tensor in self._tensors[t]:
                d[f"{name}.{tensor}"] = self.read(t, tensor)
            d[f"{name}.step"] = self._c.step(t)
        return d

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Writes every tensor and step of ``state_dict`` (as state_dict() returns it). With strict,
        a missing or unexpected key is refused. Every array is checked before anything is written."""
        self._check_state_dict(state_dict, strict)
        writes: list[tuple[Any, ...]] = []
        for t, name in enumerate(self._table_names):
            for tensor, (rows, _) in self._tensors[t].items():
                key = f"{name}.{tensor}"
                if key in state_dict:
                    writes.append((t, tensor, *self._state_array(t, tensor, state_dict[key], rows, key)))
            key = f"{name}.step"
            if key in state_dict:
                step = as_index(state_dict[key] if not isinstance(state_dict[key], np.ndarray)
                                else state_dict[key].item(), key)
                writes.append((t, None, step, None))
        for t, tensor, a, code in writes:
            if tensor is None:
                self._c.set_step(t, a)
            else:
                self._c.write(t, tensor, 0, a.shape[0], code, a)

    def convert_dtype(self, table: Any, dtype: Any) -> None:
        """Converts the table's weight storage to dtype in place (round to nearest even); its
        optimizer state stays fp32. Raises StateError while a weights_view array is alive."""
        t = self._t(table)
        code = parse_dtype(dtype)
        self._c.convert_dtype(t, code)
        self._dtype_codes[t] = code
        self._tables[t].dtype = dtype_name(code)

    def weights_view(self, table: Any) -> np.ndarray:
        """A read-only [rows, dim] array sharing the table's storage (no copy): float32 for fp32
        tables, float16 for fp16, uint16 raw bits for bf16. Reads see what the next forward uses,
        updates included. It keeps the collection's storage alive (close() waits for it) and
        convert_dtype refuses while it exists."""
        return np.asarray(self._c.weights_view(self._t(table)))

    def table_bytes(self, table: Any) -> tuple[int, int]:
        """(weight bytes, optimizer state bytes) of the table."""
        return self._c.table_bytes(self._t(table))

    def prefetch(self, kjt: KJT) -> None:
        """Asks the kernel to start reading the file pages of the rows ``kjt`` will read of the
        tiered tables that are not cached (a hint: the reads go on while the step runs): call it
        with the next batch after this batch's forward. The numbers are the same with or without
        it. Without a tiered table it does nothing. Local. Raises as forward does for a bad KJT."""
        self._c.prefetch(self._kjt_parts(kjt))

    def tier_stats(self, table: Any) -> dict[str, int]:
        """A tiered table's cumulative cache counters: hits and misses (distinct rows per forward),
        evictions, rows_read / rows_written and bytes_read / bytes_written of its file,
        prefetched (rows a prefetch asked the kernel to read ahead). Local. Raises
        InvalidArgumentError for a table in RAM."""
        return self._c.tier_stats(self._t(table))

    @property
    def bytes_outstanding(self) -> int:
        """Bytes the collection's context holds (ember_ctx_bytes_outstanding); 0 once closed."""
        return self._c.bytes_outstanding

    @property
    def num_threads(self) -> int:
        return self._c.num_threads

    @property
    def isa(self) -> str:
        """The kernel variant the collection runs ("generic", "avx2", "avx512")."""
        return self._c.isa

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        """Frees the tables (at once, or when the last weights_view array goes). Idempotent."""
        self._c.close()

    def __enter__(self) -> EmbeddingBagCollection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
