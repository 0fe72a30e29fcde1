"""KJT: the keyed jagged tensor of one rank's batch (include/ember/kjt.h), over numpy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._config import as_array, as_index, invalid
from .errors import EmberError

__all__ = ["KJT"]


class KJT:
    """A batch of sparse features, bags feature-major: bag ``f * B + b`` is feature f of sample b.

    values   int64 [nnz]        row ids of each feature's table, bag after bag
    lengths  int32 [F*B]        ids per bag (or None when offsets is given)
    offsets  int64 [F*B + 1]    exclusive prefix sum of lengths, offsets[0] = 0 (or None)
    weights  float32 [nnz]      per-id weights, or None (every weight is 1)
    keys     feature names in order (optional): when given, a collection checks that they equal its
             own feature names, in order
    batch_size  B (optional): otherwise the number of bags / F, where F is len(keys) or the
             collection's feature count; needed only to tell B apart when there are no bags

    Variable batch size per feature (TorchRec's stride_per_key and inverse_indices;
    include/ember/kjt.h): with ``feature_batch_sizes`` (int32 [F]) feature f has B_f bags of its
    own, still feature-major (lengths [sum B_f]); with ``inverse_indices`` (int32 [F, B] or
    [F*B]) sample b of feature f reads bag inverse_indices[f, b] of f, every bag read by some
    sample, and the output is the expanded batch's, [B, output_dim] (B: batch_size, else the
    inverse indices' columns); without, the output holds each feature's own bags, a flat float32
    array of sum_f B_f D_f (feature f's [B_f, D_f] after the features before it). A user's
    features repeated over the candidates of a request are then looked up once.

    Arrays are kept without a copy when they already are C-contiguous of the right dtype; other
    inputs are converted, but a conversion that changes meaning is refused (float ids, float
    lengths, booleans, complex, objects). A refused input does not raise here: the collection's
    call raises it (InvalidArgumentError, on every rank of a sharded collection), so that a bad
    batch on one rank never leaves the others waiting.
    """

    __slots__ = ("values", "lengths", "offsets", "weights", "keys", "batch_size", "feature_batch_sizes",
                 "inverse_indices", "_error")

    values: np.ndarray
    lengths: np.ndarray | None
    offsets: np.ndarray | None
    weights: np.ndarray | None
    keys: list[str] | None
    batch_size: int | None
    feature_batch_sizes: np.ndarray | None
    inverse_indices: np.ndarray | None

    def __init__(self, values: Any, lengths: Any = None, offsets: Any = None, weights: Any = None, *,
                 keys: Sequence[str] | None = None, batch_size: int | None = None,
                 feature_batch_sizes: Any = None, inverse_indices: Any = None) -> None:
        self._error: EmberError | None = None
        self.values = np.zeros(0, np.int64)
        self.lengths = self.offsets = self.weights = None
        self.feature_batch_sizes = self.inverse_indices = None
        self.keys = None
        self.batch_size = None
        try:
            self.values = as_array(values, np.int64, "KJT values")
            if lengths is not None:
                self.lengths = as_array(lengths, np.int32, "KJT lengths")
            if offsets is not None:
                self.offsets = as_array(offsets, np.int64, "KJT offsets")
            if weights is not None:
                self.weights = as_array(weights, np.float32, "KJT weights")
            if keys is not None:
                if isinstance(keys, str):
                    keys = [keys]
                self.keys = [str(k) for k in keys]
            if batch_size is not None:
                self.batch_size = as_index(batch_size, "KJT batch_size")
                if self.batch_size < 0:
                    raise invalid(f"KJT batch_size: negative {self.batch_size}")
            if feature_batch_sizes is not None:
                self.feature_batch_sizes = as_array(feature_batch_sizes, np.int32, "KJT feature_batch_sizes")
            if inverse_indices is not None:
                two_d = getattr(inverse_indices, "ndim", np.ndim(inverse_indices)) == 2
                inv = as_array(inverse_indices, np.int32, "KJT inverse_indices", ndim=2 if two_d else 1)
                if self.batch_size is None and inv.ndim == 2:
                    self.batch_size = int(inv.shape[1])
                self.inverse_indices = np.ascontiguousarray(inv.reshape(-1))
                if self.feature_batch_sizes is None:
                    raise invalid("KJT: inverse_indices without feature_batch_sizes")
            if self.lengths is None and self.offsets is None:
                raise invalid("KJT: neither lengths nor offsets given")
        except EmberError as e:
            self._error = e

    @property
    def num_bags(self) -> int:
        """F * B (or sum B_f): entries of lengths (or of offsets, less one)."""
        if self.lengths is not None:
            return int(self.lengths.shape[0])
        return max(int(self.offsets.shape[0]) - 1, 0) if self.offsets is not None else 0

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    def _parts(self, features: Sequence[str], rank: int | None = None) -> tuple[Any, ...]:
        """(values, lengths, offsets, weights, F, B, feature_batch_sizes, inverse_indices) for a
        collection with these features; raises the refused input or InvalidArgumentError (keys
        other than the features, bags not F*B, nor sum B_f)."""
        if self._error is not None:
            raise self._error
        F = len(features)
        if self.keys is not None and self.keys != list(features):
            raise invalid(f"KJT keys {self.keys} differ from the collection's features {list(features)}", rank)
        bags = self.num_bags
        fbs, inv = self.feature_batch_sizes, self.inverse_indices
        if fbs is not None:
            if fbs.shape[0] != F:
                raise invalid(f"KJT feature_batch_sizes: {fbs.shape[0]} entries for {F} features", rank)
            if inv is None:
                B = self.batch_size or 0
            elif self.batch_size is not None:
                B = self.batch_size
            else:
                B = inv.shape[0] // F if F else 0
            return self.values, self.lengths, self.offsets, self.weights, F, B, fbs, inv
        if self.batch_size is not None:
            B = self.batch_size
            if bags != F * B:
                raise invalid(f"KJT: {bags} bags for {F} features x batch_size {B} = {F * B}", rank)
        elif F == 0 or bags == 0:
            B = 0
        elif bags % F:
            raise invalid(f"KJT: {bags} bags are not a multiple of the {F} features "
                          f"({', '.join(features)})", rank)
        else:
            B = bags // F
        return self.values, self.lengths, self.offsets, self.weights, F, B, None, None

    def __repr__(self) -> str:
        if self._error is not None:
            return f"KJT(<refused: {self._error.message}>)"
        parts = [f"nnz={self.nnz}", f"bags={self.num_bags}"]
        if self.keys is not None:
            parts.append(f"keys={self.keys}")
        if self.batch_size is not None:
            parts.append(f"batch_size={self.batch_size}")
        if self.feature_batch_sizes is not None:
            parts.append(f"feature_batch_sizes={self.feature_batch_sizes.tolist()}")
        if self.inverse_indices is not None:
            parts.append("inverse_indices")
        if self.weights is not None:
            parts.append("weighted")
        return f"KJT({', '.join(parts)})"
