"""Quantized inference tables (include/ember/quant.h): FBGEMM's fused row-wise row formats and a
serving bundle's collection (`ember export`), over numpy arrays."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from . import _ember
from ._config import as_array, as_path, invalid
from ._kjt import KJT

__all__ = ["QTYPES", "row_bytes", "quantize_rows", "dequantize_rows", "QuantEmbeddingBagCollection"]

# Storage types of a quantized table (ember_qtype), and their rows' layouts (FBGEMM's CPU formats):
#   int8        D uint8, then fp32 scale and bias          (FloatToFused8BitRowwiseQuantized)
#   int4, int2  packed values, then fp16 scale and bias     (FloatToFusedNBitRowwiseQuantizedSBHalf)
#   fp16, fp32  the values
QTYPES = tuple(_ember.enum_names("qtype"))


def row_bytes(qtype: str, dim: int) -> int:
    """Bytes of one row of ``dim`` elements stored as ``qtype``."""
    return _ember.qtype_row_bytes(qtype, int(dim))


def quantize_rows(x: Any, qtype: str) -> np.ndarray:
    """float32 rows [n, dim] -> uint8 [n, row_bytes(qtype, dim)], by FBGEMM's reference rule (the
    bytes FBGEMM's CPU quantize functions give). Raises NumericError for a NaN or infinity (row and
    column named), InvalidArgumentError for a bad type or shape."""
    a = as_array(x, np.float32, "quantize_rows: x", ndim=2)
    out = np.empty((a.shape[0], row_bytes(qtype, a.shape[1])), np.uint8)
    _ember.quantize_rows(qtype, a.shape[1], a, out)
    return out


def dequantize_rows(q: Any, qtype: str, dim: int) -> np.ndarray:
    """uint8 rows [n, row_bytes(qtype, dim)] -> float32 [n, dim]: each element fmaf(scale, q, bias),
    the values ember's quantized forward pools."""
    a = as_array(q, np.uint8, "dequantize_rows: q", ndim=2)
    if a.shape[1] != row_bytes(qtype, dim):
        raise invalid(f"dequantize_rows: rows of {a.shape[1]} bytes, {qtype} rows of dim {dim} have "
                      f"{row_bytes(qtype, dim)}")
    out = np.empty((a.shape[0], int(dim)), np.float32)
    _ember.dequantize_rows(qtype, int(dim), a, out)
    return out


class QuantEmbeddingBagCollection:
    """The quantized tables of a serving bundle (``ember export --output DIR``), read-only, pooled
    for inference (TorchRec's QuantEmbeddingBagCollection over FBGEMM's IntNBit TBE).

    bundle       the bundle directory; every part is checked against its CRC-32 on loading
    num_threads  kernel threads (0: all); outputs are bitwise identical for any count

    ``forward(kjt)`` pools every bag: float32 [B, output_dim], features in the bundle's order,
    ids pruned at export contributing nothing (and not counted by MEAN). ``tables`` describes each
    table; ``rows(table)`` gives its stored rows' bytes (the layouts of ``quantize_rows``);
    ``blob(name)`` a blob of the bundle (``trainer.json``, ``dense.params``, ``export.json``).
    Local. Use as a context manager, or close().
    """

    def __init__(self, bundle: str | os.PathLike[str], *, num_threads: int = 0) -> None:
        self._dir = os.fsdecode(as_path(bundle, "bundle"))
        self._c = _ember.QEBC(self._dir, int(num_threads))
        self.tables = [dict(zip(("name", "qtype", "rows", "dim", "pooling", "num_embeddings", "remap", "kept"), t))
                       for t in self._c.tables()]
        with open(os.path.join(self._dir, "bundle.json"), encoding="utf-8") as f:
            features = json.load(f)["features"]
        self.feature_names = [f["name"] for f in features]
        self._feature_table = [int(f["table"]) for f in features]
        self.output_dim = self._c.output_dim

    def forward(self, kjt: KJT) -> np.ndarray:
        if not isinstance(kjt, KJT):
            raise invalid(f"kjt: expected an ember.KJT, got {type(kjt).__name__}")
        parts = kjt._parts(self.feature_names)
        out = np.empty((parts[5], self.output_dim), np.float32)
        self._c.forward(parts, out)
        return out

    __call__ = forward

    def _t(self, table: Any) -> int:
        names = [t["name"] for t in self.tables]
        if isinstance(table, str):
            if table not in names:
                raise invalid(f"no table '{table}' (tables: {names})")
            return names.index(table)
        t = int(table)
        if not 0 <= t < len(names):
            raise invalid(f"table {t} outside [0, {len(names)})")
        return t

    def rows(self, table: Any) -> np.ndarray:
        """Table's stored rows, uint8 [rows, row_bytes]."""
        t = self._t(table)
        d = self.tables[t]
        out = np.empty((d["rows"], row_bytes(d["qtype"], d["dim"])), np.uint8)
        self._c.read_rows(t, out)
        return out

    def blob(self, name: str) -> bytes:
        """Blob ``name`` of the bundle (CRC-32 checked)."""
        return _ember.bundle_blob(self._dir, name)

    @property
    def bytes_outstanding(self) -> int:
        return self._c.bytes_outstanding

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> "QuantEmbeddingBagCollection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
