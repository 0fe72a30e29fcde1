"""ember's embedding tables as PyTorch modules.

``import ember.torch`` needs torch (it is not imported by ``import ember``). The modules hold no
torch parameters: the tables live in ember, and the optimizer is fused into the backward, as
TorchRec's fused optimizers (``apply_optimizer_in_backward``, FBGEMM's TBE) do. ``loss.backward()``
therefore *is* the embedding update; a dense ``torch.optim`` optimizer sees only the dense model.

Inputs: a TorchRec ``KeyedJaggedTensor`` (when torchrec is importable; its keys must be the
collection's feature names, in any order) or plain tensors ``(values, lengths[, weights])`` with
bags feature-major, bag ``f * B + b``. Output: the pooled ``[B, sum D]`` float32 tensor, features in
the collection's order (KeyedTensor layout); a KeyedJaggedTensor input gives a TorchRec
``KeyedTensor`` over the same values.

Autograd: the output requires grad whenever grad is enabled; ``backward`` hands dL/d(out) to
ember's fused backward (exactly as given, no rescaling) and returns the per-id weights' gradient
when the weights require grad (local collection only, in the caller's order also for a
KeyedJaggedTensor with permuted keys; the sharded module refuses weights that require grad with
UnsupportedError on every rank). ``load_state_dict`` checks every table's shape before writing. Each forward must be followed by at most
one backward, with the same batch (ember refuses another). The sharded module's forward and
backward are Collective: every rank must run them, in the same order.

Training as one process on the global batch: with ``grad_convention="mean"`` (the default), give
every rank an equal share of the global batch, make each rank's loss the mean over its share, and
reduce the dense parameters' gradients with :func:`allreduce_dense_grads` before the dense
optimizer's step; the tables' gradients get the same convention inside ember.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np
import torch

import ember

try:  # TorchRec is optional: only its input/output types are used.
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as _TorchRecKJT
    from torchrec.sparse.jagged_tensor import KeyedTensor as _TorchRecKT
except Exception:  # noqa: BLE001 - any import failure means "no torchrec here"
    _TorchRecKJT = None
    _TorchRecKT = None

__all__ = ["EmbeddingBagCollection", "ShardedEmbeddingBagCollection", "QuantEmbeddingBagCollection",
           "allreduce_dense_grads", "to_kjt"]


def _as_numpy(t: torch.Tensor, what: str) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    if t.device.type != "cpu":
        raise ember.InvalidArgumentError(f"{what}: ember runs on the CPU, got a tensor on {t.device}")
    return t.detach().contiguous().numpy()


def _convert(collection: Any, kjt_or_values: Any, lengths: Any = None, weights: Any = None) -> Any:
    """(ember.KJT, the per-id weights tensor in the KJT's value order or None). A KeyedJaggedTensor
    whose keys are the collection's features in another order is reordered here (its weights by
    differentiable indexing, so that their gradient reaches the caller's tensor in its own order)."""
    if _TorchRecKJT is not None and isinstance(kjt_or_values, _TorchRecKJT):
        if lengths is not None or weights is not None:
            raise ember.InvalidArgumentError("a KeyedJaggedTensor carries its own lengths and weights")
        kjt = kjt_or_values
        names = list(collection.feature_names)
        keys = list(kjt.keys())
        values, lens, w = kjt.values(), kjt.lengths(), kjt.weights_or_none()
        B = kjt.stride()
        if keys != names:
            if sorted(keys) != sorted(names) or len(set(keys)) != len(keys):
                raise ember.InvalidArgumentError(
                    f"KeyedJaggedTensor keys {keys} are not the collection's features {names}")
            # Feature k's bags are lengths[k*B:(k+1)*B], its ids one contiguous segment of values.
            lens = lens.reshape(len(keys), B) if B else lens.reshape(len(keys), 0)
            per_key = lens.sum(dim=1, dtype=torch.int64)
            starts = torch.cumsum(per_key, 0) - per_key
            order = [keys.index(n) for n in names]
            idx = torch.cat([torch.arange(int(starts[k]), int(starts[k] + per_key[k]), dtype=torch.int64)
                             for k in order]) if order else torch.zeros(0, dtype=torch.int64)
            values = values[idx]
            w = None if w is None else w[idx]
            lens = lens[order].reshape(-1)
        return (ember.KJT(_as_numpy(values, "values"), lengths=_as_numpy(lens, "lengths"),
                          weights=None if w is None else _as_numpy(w, "weights"), keys=names, batch_size=B),
                w if isinstance(w, torch.Tensor) else None)
    if lengths is None:
        raise ember.InvalidArgumentError("lengths: required with plain tensors (values, lengths[, weights])")
    kjt = ember.KJT(_as_numpy(kjt_or_values, "values"), lengths=_as_numpy(lengths, "lengths"),
                    weights=None if weights is None else _as_numpy(weights, "weights"))
    return kjt, weights if isinstance(weights, torch.Tensor) else None


def to_kjt(collection: Any, kjt_or_values: Any, lengths: Any = None, weights: Any = None) -> "ember.KJT":
    """An ember.KJT sharing the tensors' memory (CPU, contiguous, right dtype; converted otherwise)."""
    return _convert(collection, kjt_or_values, lengths, weights)[0]


class _Lookup(torch.autograd.Function):
    """Pooled lookup whose backward is ember's fused update."""

    @staticmethod
    def forward(ctx: Any, anchor: Any, weights: Any, module: Any, kjt: Any) -> Any:  # torch's signature
        out = module.ebc.forward(kjt)
        ctx.module, ctx.kjt = module, kjt
        ctx.want_weight_grad = weights is not None and weights.requires_grad
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> Any:
        g = grad_out.detach()
        if g.dtype != torch.float32:
            g = g.float()
        if ctx.want_weight_grad:
            gw = torch.from_numpy(ctx.module.ebc.backward(ctx.kjt, g.contiguous().numpy(), grad_weights=True))
        else:
            ctx.module.ebc.backward(ctx.kjt, g.contiguous().numpy())
            gw = None
        ctx.kjt = None
        return None, gw, None, None


class _Base(torch.nn.Module):
    def __init__(self, ebc: Any) -> None:
        super().__init__()
        self.ebc = ebc
        # Not a parameter: it only makes the output part of the autograd graph, so that
        # loss.backward() reaches the fused update (TorchRec's tables do it through their weights).
        self._anchor = torch.empty(0, requires_grad=True)
        self._register_state_dict_hook(_Base._add_tables)
        self._register_load_state_dict_pre_hook(self._take_tables)

    @property
    def feature_names(self) -> list[str]:
        return list(self.ebc.feature_names)

    def _dims(self) -> list[int]:
        dims = []
        for t in self.ebc.tables:
            dims += [t.embedding_dim] * len(t.feature_names or [t.name])
        return dims

    def forward(self, kjt_or_values: Any, lengths: Any = None, weights: Any = None) -> Any:
        kjt, w = _convert(self.ebc, kjt_or_values, lengths, weights)
        if (w is not None and w.requires_grad and torch.is_grad_enabled()
                and isinstance(self.ebc, ember.ShardedEmbeddingBagCollection) and kjt._error is None):
            # Refused inside the collective forward (the KJT carries the refusal), so every rank raises.
            kjt._error = ember.UnsupportedError(
                f"per-id weights that require grad: the sharded collection does not compute dL/dw "
                f"(detach them, or use the local collection) (rank {self.ebc.comm.rank})")
        if torch.is_grad_enabled():
            out = _Lookup.apply(self._anchor, w, self, kjt)
        else:
            out = torch.from_numpy(self.ebc.forward(kjt))
        if _TorchRecKJT is not None and isinstance(kjt_or_values, _TorchRecKJT):
            return _TorchRecKT(keys=self.feature_names, length_per_key=self._dims(), values=out)
        return out

    def set_lr(self, lr: float, table: Optional[Any] = None) -> None:
        """Learning rate of one table (name) or every table (None), for the next steps."""
        self.ebc.set_lr(lr, table)

    # state_dict()/load_state_dict() carry the tables as "embedding_bags.<table>.weight" (TorchRec's
    # keys), fp32 copies; optimizer state stays in ember (its state_dict/checkpoints hold it).
    @staticmethod
    def _add_tables(module: Any, state_dict: Any, prefix: str, local_metadata: Any) -> Any:
        for t in module.ebc.tables:
            arr = module._read_weight(t.name)
            state_dict[f"{prefix}embedding_bags.{t.name}.weight"] = (
                torch.from_numpy(arr) if arr is not None else None)
        return state_dict

    def _take_tables(self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool, missing: list[str],
                     unexpected: list[str], errors: list[str]) -> None:
        # Every table present is checked (its whole [rows, dim] shape) before any is written.
        arrays = []
        for t in self.ebc.tables:
            key = f"{prefix}embedding_bags.{t.name}.weight"
            if key in state_dict:
                arr = _as_numpy(state_dict.pop(key), key)
                want = (t.num_embeddings, t.embedding_dim)
                if tuple(arr.shape) != want:
                    raise ember.InvalidArgumentError(
                        f"{key}: shape {tuple(arr.shape)}, table '{t.name}' is {list(want)}")
                arrays.append((t.name, arr))
            elif strict:
                missing.append(key)
        for name, arr in arrays:
            self._write_weight(name, arr)


class EmbeddingBagCollection(_Base):
    """ember's local EmbeddingBagCollection as a torch.nn.Module (arguments as ember.EmbeddingBagCollection)."""

    def __init__(self, tables: Sequence["ember.TableConfig"], **kwargs: Any) -> None:
        super().__init__(ember.EmbeddingBagCollection(tables, **kwargs))

    def _read_weight(self, name: str) -> Any:
        return self.ebc.read(name, "weight")

    def _write_weight(self, name: str, arr: Any) -> None:
        self.ebc.write(name, "weight", arr.astype(np.float32, copy=False))


class ShardedEmbeddingBagCollection(_Base):
    """ember's sharded collection as a torch.nn.Module (arguments as ember.ShardedEmbeddingBagCollection).

    forward, backward, state_dict() and load_state_dict() are Collective on its communicator.
    """

    def __init__(self, tables: Sequence["ember.TableConfig"], plan: Any = "auto", **kwargs: Any) -> None:
        super().__init__(ember.ShardedEmbeddingBagCollection(tables, plan, **kwargs))

    def _read_weight(self, name: str) -> Any:
        return self.ebc.read(name, "weight", root=-1)

    def _write_weight(self, name: str, arr: Any) -> None:
        self.ebc.write(name, "weight", arr.astype(np.float32, copy=False), root=-1)



class QuantEmbeddingBagCollection(torch.nn.Module):
    """A serving bundle's quantized tables (``ember export``) as an inference module, TorchRec's
    ``QuantEmbeddingBagCollection`` for ember's bundles: no parameters and no autograd (a served
    model does not train). Inputs and outputs as the training modules (a KeyedJaggedTensor gives a
    KeyedTensor). ``bundle``: the bundle directory; ``num_threads``: kernel threads (0: all)."""

    def __init__(self, bundle: Any, num_threads: int = 0) -> None:
        super().__init__()
        self.qebc = ember.QuantEmbeddingBagCollection(bundle, num_threads=num_threads)

    @property
    def feature_names(self) -> list[str]:
        return list(self.qebc.feature_names)

    def forward(self, kjt_or_values: Any, lengths: Any = None, weights: Any = None) -> Any:
        kjt, _ = _convert(self.qebc, kjt_or_values, lengths, weights)
        out = torch.from_numpy(self.qebc.forward(kjt))
        if _TorchRecKJT is not None and isinstance(kjt_or_values, _TorchRecKJT):
            dims = [self.qebc.tables[t]["dim"] for t in self.qebc._feature_table]
            return _TorchRecKT(keys=self.feature_names, length_per_key=dims, values=out)
        return out

def allreduce_dense_grads(parameters: Iterable[torch.nn.Parameter], comm: "ember.Comm",
                          convention: str = "mean") -> None:
    """Reduces the gradients of ``parameters`` over ``comm`` with the gradient convention.

    ``"mean"`` averages them over the ranks (J = (1/W) sum_r L_r), ``"sum"`` adds them, as ember's
    tables do with the same convention. One allreduce of one float32 buffer. A parameter without a
    gradient counts as zeros (and gets one), so every rank reduces the same layout. Collective.
    """
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    # float64 parameters keep their precision: the buffer is float64 when any gradient is.
    dtype = torch.float64 if any(p.grad.dtype == torch.float64 for p in params) else torch.float32
    flat = torch.cat([p.grad.detach().reshape(-1).to(dtype) for p in params])
    comm.allreduce_grads(flat.numpy(), convention)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n
