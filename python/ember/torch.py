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

The lookups are torch operators (``ember::lookup``, ``ember::lookup_backward``,
``ember::quant_lookup``) with fake kernels: ``torch.compile`` traces a model using these modules
without a graph break and ``torch.export`` captures it (docs/python.md). ``from_torchrec`` converts
TorchRec's EmbeddingBagCollection (configs, weights, in-backward optimizer, plan) and
``to_torchrec_state_dict`` goes back.

Training as one process on the global batch: with ``grad_convention="mean"`` (the default), give
every rank an equal share of the global batch, make each rank's loss the mean over its share, and
reduce the dense parameters' gradients with :func:`allreduce_dense_grads` before the dense
optimizer's step; the tables' gradients get the same convention inside ember.
"""

from __future__ import annotations

import itertools
import os
import weakref
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import torch

import ember
from ember import _ember

try:  # TorchRec is optional: only its input/output types are used.
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as _TorchRecKJT
    from torchrec.sparse.jagged_tensor import KeyedTensor as _TorchRecKT
except Exception:  # noqa: BLE001 - any import failure means "no torchrec here"
    _TorchRecKJT = None
    _TorchRecKT = None

__all__ = ["EmbeddingBagCollection", "ShardedEmbeddingBagCollection", "QuantEmbeddingBagCollection",
           "InteractionArch", "TrainPipeline", "allreduce_dense_grads", "close_bundles", "dot_interaction",
           "from_torchrec", "plan_from_torchrec", "to_kjt", "to_torchrec_state_dict", "wire_precision_from_qcomms"]


def _as_numpy(t: torch.Tensor, what: str) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    if t.device.type != "cpu":
        raise ember.InvalidArgumentError(f"{what}: ember runs on the CPU, got a tensor on {t.device}")
    return t.detach().contiguous().numpy()


def _split(kjt_or_values: Any, names: Sequence[str], lengths: Any = None,
           weights: Any = None) -> tuple[Any, Any, Any, int]:
    """(values, lengths, weights or None, batch size or -1) as the collection's features order them.
    A KeyedJaggedTensor whose keys are the collection's features in another order is reordered here
    (its weights by differentiable indexing, so that their gradient reaches the caller's tensor in
    its own order)."""
    if _TorchRecKJT is not None and isinstance(kjt_or_values, _TorchRecKJT):
        if lengths is not None or weights is not None:
            raise ember.InvalidArgumentError("a KeyedJaggedTensor carries its own lengths and weights")
        kjt = kjt_or_values
        if kjt.variable_stride_per_key():
            raise ember.UnsupportedError(
                "a KeyedJaggedTensor with a batch size per feature (stride_per_key_per_rank): the torch "
                "modules take one batch size; pass an ember.KJT with feature_batch_sizes and inverse_indices "
                "to the collection itself (ember.EmbeddingBagCollection, ember.ShardedEmbeddingBagCollection)")
        names = list(names)
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
        return values, lens, w, B
    if lengths is None:
        raise ember.InvalidArgumentError("lengths: required with plain tensors (values, lengths[, weights])")
    return (_as_tensor(kjt_or_values, "values"), _as_tensor(lengths, "lengths"),
            None if weights is None else _as_tensor(weights, "weights"), -1)


def _as_tensor(x: Any, what: str) -> Any:
    """A tensor as it is; an array or a sequence as a tensor (sharing an array's memory)."""
    if isinstance(x, torch.Tensor):
        return x
    try:
        return torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError, RuntimeError) as e:
        raise ember.InvalidArgumentError(f"{what}: not a tensor, array or sequence of numbers ({e})") from None


def _kjt(values: Any, lengths: Any, weights: Any, batch_size: int, names: Optional[Sequence[str]]) -> "ember.KJT":
    return ember.KJT(_as_numpy(values, "values"), lengths=_as_numpy(lengths, "lengths"),
                     weights=None if weights is None else _as_numpy(weights, "weights"),
                     keys=names if batch_size >= 0 else None, batch_size=batch_size if batch_size >= 0 else None)


def to_kjt(collection: Any, kjt_or_values: Any, lengths: Any = None, weights: Any = None) -> "ember.KJT":
    """An ember.KJT sharing the tensors' memory (CPU, contiguous, right dtype; converted otherwise)."""
    values, lens, w, B = _split(kjt_or_values, collection.feature_names, lengths, weights)
    return _kjt(values, lens, w, B, list(collection.feature_names))


# ---- custom operators -------------------------------------------------------------------------
#
# The modules' lookups are torch operators (torch.library), so that torch.compile traces through
# them without a graph break and torch.export captures them: ember::lookup (forward; its autograd
# formula calls ember::lookup_backward, the fused update) and ember::quant_lookup (serving). An
# operator takes tensors and plain values only, so a training module is named by a handle, its
# number in this process (a graph holding one runs in this process only); a quantized one by its
# bundle's directory, loaded on first use in any process that imported ember.torch (a program
# saved with torch.export.save runs in another one). The fake kernels give the output's shape
# from the inputs' (dynamic batch sizes included).

_modules: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
# Every lookup's first input: no parameter, it only makes the output part of the autograd graph, so
# that loss.backward() reaches the fused update (TorchRec's tables do it through their weights). One
# for all modules, outside them; a captured program (torch.export, for serving) gets one that does
# not require grad (torch.export warns of a constant that does).
_ANCHOR = torch.empty(0, requires_grad=True)
_NO_ANCHOR = torch.empty(0)
_handles = itertools.count(1)


def _module(handle: int) -> Any:
    m = _modules.get(handle)
    if m is None:
        raise ember.StateError(f"ember.torch: no module with handle {handle} in this process (closed, or the "
                               f"graph was captured in another process)")
    return m


def _rows_out(num_features: int, all_none: bool, values: Any, lengths: Any, batch_size: int) -> Any:
    """The pooled output's rows (the fake kernels'): the batch size (lengths / features when not
    given); for an all-"none" collection one row per id."""
    if all_none:
        return values.shape[0]
    if batch_size >= 0:
        return batch_size
    return lengths.shape[0] // num_features if num_features else 0


@torch.library.custom_op("ember::lookup", mutates_args=())
def _lookup(anchor: torch.Tensor, handle: int, values: torch.Tensor, lengths: torch.Tensor,
            weights: Optional[torch.Tensor], batch_size: int, refuse_weight_grad: bool) -> torch.Tensor:
    m = _module(handle)
    kjt = _kjt(values, lengths, weights, batch_size, m.ebc._feature_names)
    if refuse_weight_grad and kjt._error is None:
        # Refused inside the collective forward (the KJT carries the refusal), so every rank raises.
        kjt._error = ember.UnsupportedError(
            f"per-id weights that require grad: the sharded collection does not compute dL/dw "
            f"(detach them, or use the local collection) (rank {m.ebc.comm.rank})")
    return torch.from_numpy(m.ebc.forward(kjt))


@_lookup.register_fake
def _lookup_fake(anchor: Any, handle: int, values: Any, lengths: Any, weights: Any, batch_size: int,
                 refuse_weight_grad: bool) -> Any:
    ebc = _module(handle).ebc
    rows = _rows_out(len(ebc._feature_names), ebc._all_none, values, lengths, batch_size)
    return values.new_empty((rows, ebc._output_dim), dtype=torch.float32)


@torch.library.custom_op("ember::lookup_backward", mutates_args=())
def _lookup_backward(handle: int, grad: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                     weights: Optional[torch.Tensor], batch_size: int,
                     weight_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused update; returns (the anchor's gradient: empty, dL/dw or empty). Its first output
    is the anchor's gradient, a graph output: a compiler never drops the call as unused."""
    m = _module(handle)
    kjt = _kjt(values, lengths, weights, batch_size, m.ebc._feature_names)
    g = grad.detach().to(torch.float32).contiguous().numpy()
    if m._pipeline is not None:  # a TrainPipeline step: the exchange starts here, finishes after
        m.ebc.backward_start(kjt, g)
        m._pipeline._started.append(m)
        return torch.zeros(0), torch.zeros(0)
    gw = m.ebc.backward(kjt, g, grad_weights=True) if weight_grad else m.ebc.backward(kjt, g)
    return torch.zeros(0), torch.from_numpy(gw) if weight_grad else torch.zeros(0)


@_lookup_backward.register_fake
def _lookup_backward_fake(handle: int, grad: Any, values: Any, lengths: Any, weights: Any, batch_size: int,
                          weight_grad: bool) -> Any:
    return (grad.new_empty(0, dtype=torch.float32),
            grad.new_empty(values.shape[0] if weight_grad else 0, dtype=torch.float32))


def _lookup_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, handle, values, lengths, weights, batch_size, _ = inputs
    ctx.handle, ctx.batch_size = handle, batch_size
    ctx.weight_grad = bool(ctx.needs_input_grad[4])
    ctx.save_for_backward(values, lengths, weights)


def _lookup_grad(ctx: Any, grad_out: Any) -> Any:
    values, lengths, weights = ctx.saved_tensors
    ga, gw = torch.ops.ember.lookup_backward(ctx.handle, grad_out, values, lengths, weights, ctx.batch_size,
                                             ctx.weight_grad)
    return ga, None, None, None, gw if ctx.weight_grad else None, None, None


_lookup.register_autograd(_lookup_grad, setup_context=_lookup_setup)


class _Base(torch.nn.Module):
    def __init__(self, ebc: Any) -> None:
        super().__init__()
        self.ebc = ebc
        self._handle = next(_handles)
        self._pipeline: Optional[TrainPipeline] = None  # set during a TrainPipeline step
        _modules[self._handle] = self
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
        values, lens, w, B = _split(kjt_or_values, self.ebc._feature_names, lengths, weights)
        refuse = (isinstance(w, torch.Tensor) and w.requires_grad and torch.is_grad_enabled()
                  and isinstance(self.ebc, ember.ShardedEmbeddingBagCollection))
        anchor = _NO_ANCHOR if torch.compiler.is_exporting() else _ANCHOR
        out = torch.ops.ember.lookup(anchor, self._handle, values, lens, w, B, refuse)
        if _TorchRecKJT is not None and isinstance(kjt_or_values, _TorchRecKJT):
            return _TorchRecKT(keys=self.feature_names, length_per_key=self._dims(), values=out)
        return out

    def set_lr(self, lr: float, table: Optional[Any] = None) -> None:
        """Learning rate of one table (name) or every table (None), for the next steps."""
        self.ebc.set_lr(lr, table)

    # state_dict()/load_state_dict() carry the tables as "embedding_bags.<table>.weight" (TorchRec's
    # keys), fp32 copies, and a hashed table's id map as "embedding_bags.<table>.ids" (int64
    # [rows, 3]); optimizer state stays in ember (its state_dict/checkpoints hold it).
    def _carried(self) -> list[tuple[str, str, tuple[int, int]]]:
        """(table, tensor, shape) of every tensor the module's state dict carries."""
        out = []
        for t in self.ebc.tables:
            out.append((t.name, "weight", (t.num_embeddings, t.embedding_dim)))
            if t.hashed:
                out.append((t.name, "ids", (t.num_embeddings, 3)))
        return out

    @staticmethod
    def _add_tables(module: Any, state_dict: Any, prefix: str, local_metadata: Any) -> Any:
        for name, tensor, _ in module._carried():
            arr = module._read(name, tensor)
            state_dict[f"{prefix}embedding_bags.{name}.{tensor}"] = torch.from_numpy(arr) if arr is not None else None
        return state_dict

    def _take_tables(self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool, missing: list[str],
                     unexpected: list[str], errors: list[str]) -> None:
        # Every tensor present is checked (its whole shape) before any is written.
        arrays = []
        for name, tensor, want in self._carried():
            key = f"{prefix}embedding_bags.{name}.{tensor}"
            if key in state_dict:
                arr = _as_numpy(state_dict.pop(key), key)
                if tuple(arr.shape) != want:
                    raise ember.InvalidArgumentError(
                        f"{key}: shape {tuple(arr.shape)}, table '{name}' {tensor} is {list(want)}")
                arrays.append((name, tensor, arr.astype(np.int64 if tensor == "ids" else np.float32, copy=False)))
            elif strict:
                missing.append(key)
        for name, tensor, arr in arrays:
            self._write(name, tensor, arr)


class EmbeddingBagCollection(_Base):
    """ember's local EmbeddingBagCollection as a torch.nn.Module (arguments as ember.EmbeddingBagCollection)."""

    def __init__(self, tables: Sequence["ember.TableConfig"], **kwargs: Any) -> None:
        super().__init__(ember.EmbeddingBagCollection(tables, **kwargs))

    def _read(self, name: str, tensor: str) -> Any:
        return self.ebc.read(name, tensor)

    def _write(self, name: str, tensor: str, arr: Any) -> None:
        self.ebc.write(name, tensor, arr)


class ShardedEmbeddingBagCollection(_Base):
    """ember's sharded collection as a torch.nn.Module (arguments as ember.ShardedEmbeddingBagCollection).

    forward, backward, state_dict() and load_state_dict() are Collective on its communicator.
    """

    def __init__(self, tables: Sequence["ember.TableConfig"], plan: Any = "auto", **kwargs: Any) -> None:
        super().__init__(ember.ShardedEmbeddingBagCollection(tables, plan, **kwargs))

    def _read(self, name: str, tensor: str) -> Any:
        return self.ebc.read(name, tensor, root=-1)

    def _write(self, name: str, tensor: str, arr: Any) -> None:
        self.ebc.write(name, tensor, arr, root=-1)



# Quantized collections by (bundle directory, threads): the modules' own (held by the modules), and
# those loaded for a program naming a bundle no module of this process has open (torch.export.load;
# held until close_bundles()).
_module_bundles: "weakref.WeakValueDictionary[tuple[str, int], Any]" = weakref.WeakValueDictionary()
_loaded_bundles: dict[tuple[str, int], Any] = {}


def _bundle(bundle: str, num_threads: int) -> Any:
    key = (bundle, num_threads)
    q = _module_bundles.get(key) or _loaded_bundles.get(key)
    if q is None or q.closed:
        q = _loaded_bundles[key] = ember.QuantEmbeddingBagCollection(bundle, num_threads=num_threads)
    return q


def close_bundles() -> None:
    """Closes the bundles that ``ember::quant_lookup`` loaded for programs (not the modules')."""
    while _loaded_bundles:
        _loaded_bundles.popitem()[1].close()


@torch.library.custom_op("ember::quant_lookup", mutates_args=())
def _quant_lookup(bundle: str, num_threads: int, values: torch.Tensor, lengths: torch.Tensor,
                  weights: Optional[torch.Tensor], batch_size: int) -> torch.Tensor:
    q = _bundle(bundle, num_threads)
    return torch.from_numpy(q.forward(_kjt(values, lengths, weights, batch_size, q.feature_names)))


@_quant_lookup.register_fake
def _quant_lookup_fake(bundle: str, num_threads: int, values: Any, lengths: Any, weights: Any,
                       batch_size: int) -> Any:
    q = _bundle(bundle, num_threads)
    rows = _rows_out(len(q.feature_names), False, values, lengths, batch_size)
    return values.new_empty((rows, q.output_dim), dtype=torch.float32)


class QuantEmbeddingBagCollection(torch.nn.Module):
    """A serving bundle's quantized tables (``ember export``) as an inference module, TorchRec's
    ``QuantEmbeddingBagCollection`` for ember's bundles: no parameters and no autograd (a served
    model does not train). Inputs and outputs as the training modules (a KeyedJaggedTensor gives a
    KeyedTensor). ``bundle``: the bundle directory; ``num_threads``: kernel threads (0: all).
    Its lookup is the operator ``ember::quant_lookup``, which names the bundle by its absolute
    path: ``torch.export`` captures a model using this module, and the saved program runs in any
    process that imported ember.torch and can read the bundle there."""

    def __init__(self, bundle: Any, num_threads: int = 0) -> None:
        super().__init__()
        self._bundle = os.path.abspath(os.fsdecode(bundle)) if isinstance(bundle, (str, bytes, os.PathLike)) \
            else bundle
        self._threads = int(num_threads)
        self.qebc = ember.QuantEmbeddingBagCollection(self._bundle, num_threads=self._threads)
        _module_bundles[(self._bundle, self._threads)] = self.qebc

    @property
    def feature_names(self) -> list[str]:
        return list(self.qebc.feature_names)

    def forward(self, kjt_or_values: Any, lengths: Any = None, weights: Any = None) -> Any:
        values, lens, w, B = _split(kjt_or_values, self.qebc.feature_names, lengths, weights)
        out = torch.ops.ember.quant_lookup(self._bundle, self._threads, values, lens, w, B)
        if _TorchRecKJT is not None and isinstance(kjt_or_values, _TorchRecKJT):
            dims = [self.qebc.tables[t]["dim"] for t in self.qebc._feature_table]
            return _TorchRecKT(keys=self.feature_names, length_per_key=dims, values=out)
        return out


# ---- the training pipeline ------------------------------------------------------------------

class TrainPipeline:
    """TorchRec's ``TrainPipelineSparseDist`` for ember's sharded modules: each step trains batch i
    with batch i+1's input distribution in flight (started right after batch i's forward), and the
    embedding gradients' exchange started inside the backward as soon as the pooled gradients exist
    and finished after the rest of the dense backward and the dense gradients' allreduce. The
    numbers are bitwise those of the plain loop::

        loss = loss_fn(model, batch); optimizer.zero_grad(); loss.backward()
        allreduce_dense_grads(dense_parameters, comm, grad_convention); optimizer.step()

    ``sparse``: the ShardedEmbeddingBagCollection modules the model calls (one or a list);
    ``sparse_input(batch)``: for each of them, the arguments its forward will get from ``batch``
    (values, lengths[, weights], or a KeyedJaggedTensor; a list with one entry per module), so
    the next batch's ids can be sent ahead: a prefetch that differs from what the forward then
    gets is dropped, never a different result. ``loss_fn(model, batch)``: the rank's loss.
    ``dense_parameters``: what allreduce_dense_grads reduces (default: the model's parameters).
    ``progress(iterator)`` trains one batch and returns its loss (detached); StopIteration when
    the iterator is exhausted. Collective: every rank runs the same steps."""

    def __init__(self, model: torch.nn.Module, optimizer: Any, sparse: Any, sparse_input: Any, loss_fn: Any,
                 comm: "ember.Comm", grad_convention: str = "mean",
                 dense_parameters: Optional[Iterable[torch.nn.Parameter]] = None) -> None:
        self.model, self.optimizer, self.loss_fn, self.comm = model, optimizer, loss_fn, comm
        self.sparse = list(sparse) if isinstance(sparse, (list, tuple)) else [sparse]
        for m in self.sparse:
            if not isinstance(m, ShardedEmbeddingBagCollection):
                raise ember.InvalidArgumentError(f"TrainPipeline: sparse module {type(m).__name__} is not an "
                                                 f"ember.torch.ShardedEmbeddingBagCollection")
        self.sparse_input = sparse_input
        self.grad_convention = grad_convention
        self.dense_parameters = list(dense_parameters if dense_parameters is not None else model.parameters())
        self._next: Any = None
        self._have_next = False
        self._started: list[Any] = []

    def _prefetch(self, batch: Any) -> None:
        inputs = self.sparse_input(batch)
        if len(self.sparse) == 1:
            inputs = [inputs]
        for m, arg in zip(self.sparse, inputs):
            parts = arg if isinstance(arg, (list, tuple)) else (arg,)
            m.ebc.prefetch(to_kjt(m.ebc, *parts))

    def progress(self, iterator: Any) -> torch.Tensor:
        batch = self._next if self._have_next else next(iterator)
        self._next, self._have_next = None, False
        try:
            self._next, self._have_next = next(iterator), True
        except StopIteration:
            pass
        for m in self.sparse:
            m._pipeline = self
        self._started = []
        try:
            loss = self.loss_fn(self.model, batch)
            if self._have_next:
                self._prefetch(self._next)
            self.optimizer.zero_grad()
            loss.backward()
            allreduce_dense_grads(self.dense_parameters, self.comm, self.grad_convention)
        finally:
            for m in self.sparse:
                m._pipeline = None
            started, self._started = self._started, []
            for m in started:  # also after a failure: nothing is left in flight
                m.ebc.backward_finish()
        self.optimizer.step()
        return loss.detach()


# ---- the dot interaction --------------------------------------------------------------------

def _interaction_shapes(dense: Any, emb: Any) -> tuple[Any, Any, Any]:
    B, D = dense.shape[0], dense.shape[1]
    F = emb.shape[1] // D if emb.dim() == 2 else emb.shape[1]
    return B, F, D


@torch.library.custom_op("ember::dot_interaction", mutates_args=())
def _dot_interaction(dense: torch.Tensor, emb: torch.Tensor, num_threads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B, D + (F+1)F/2], T [B, F+1, D] for the backward)."""
    B, F, D = _interaction_shapes(dense, emb)
    fits = emb.shape[2] == D if emb.dim() == 3 else emb.dim() == 2 and emb.shape[1] == F * D
    if dense.dim() != 2 or not fits or emb.shape[0] != B or F < 1:
        raise ember.InvalidArgumentError(f"dot interaction: dense {tuple(dense.shape)} and sparse "
                                         f"{tuple(emb.shape)}: expected [B, D] and [B, F, D] (or [B, F*D]), F >= 1")
    out = torch.empty(B, D + (F + 1) * F // 2)
    t = torch.empty(B, F + 1, D)
    _ember.dot_interaction(False, num_threads, B, F, D, _as_numpy(dense.to(torch.float32), "dense"),
                           _as_numpy(emb.to(torch.float32), "sparse"), out.numpy(), t.numpy())
    return out, t


@_dot_interaction.register_fake
def _dot_interaction_fake(dense: Any, emb: Any, num_threads: int) -> Any:
    B, F, D = _interaction_shapes(dense, emb)
    return (dense.new_empty((B, D + (F + 1) * F // 2), dtype=torch.float32),
            dense.new_empty((B, F + 1, D), dtype=torch.float32))


@torch.library.custom_op("ember::dot_interaction_backward", mutates_args=())
def _dot_interaction_backward(t: torch.Tensor, grad: torch.Tensor,
                              num_threads: int) -> tuple[torch.Tensor, torch.Tensor]:
    B, R, D = t.shape
    ddense, demb = torch.empty(B, D), torch.empty(B, (R - 1) * D)
    _ember.dot_interaction(True, num_threads, B, R - 1, D, t.numpy(), _as_numpy(grad.to(torch.float32), "grad"),
                           ddense.numpy(), demb.numpy())
    return ddense, demb


@_dot_interaction_backward.register_fake
def _dot_interaction_backward_fake(t: Any, grad: Any, num_threads: int) -> Any:
    B, R, D = t.shape
    return t.new_empty((B, D)), t.new_empty((B, (R - 1) * D))


def _dot_interaction_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    # T (the second output) never gets a gradient: without this, autograd would fill a zero
    # gradient of its [B, F+1, D] floats every step.
    ctx.set_materialize_grads(False)
    ctx.emb_shape, ctx.num_threads = inputs[1].shape, inputs[2]
    ctx.dtypes = inputs[0].dtype, inputs[1].dtype
    ctx.save_for_backward(output[1])


def _dot_interaction_grad(ctx: Any, grad_out: Any, grad_t: Any) -> Any:
    if grad_out is None:  # only T reached the loss (it is not differentiable: nothing flows)
        return None, None, None
    (t,) = ctx.saved_tensors
    ddense, demb = torch.ops.ember.dot_interaction_backward(t, grad_out, ctx.num_threads)
    return ddense.to(ctx.dtypes[0]), demb.reshape(ctx.emb_shape).to(ctx.dtypes[1]), None


_dot_interaction.register_autograd(_dot_interaction_grad, setup_context=_dot_interaction_setup)


def dot_interaction(dense: torch.Tensor, sparse: torch.Tensor, num_threads: int = 0) -> torch.Tensor:
    """DLRM's dot interaction in ember's kernels: ``torch.cat([dense, Z[:, i, j] for i < j])`` with
    ``Z = T T^T``, ``T = [dense; sparse]`` per sample (TorchRec's InteractionArch; pairs in
    ``torch.triu_indices(F+1, F+1, 1)`` order). dense [B, D], sparse [B, F, D] or [B, F*D] (an
    embedding collection's pooled output) -> float32 [B, D + (F+1)F/2]. Forward and backward are
    ember_dot_interaction_forward/backward (ember/dense.h): each dot product and each gradient one
    fused multiply-add chain in a fixed order, the same bits on every host and thread count, within
    float rounding of torch's ``bmm`` expression. ``num_threads``: kernel threads (0: all OpenMP
    threads). A torch operator (ember::dot_interaction): torch.compile and torch.export keep it."""
    return torch.ops.ember.dot_interaction(dense, sparse, int(num_threads))[0]


class InteractionArch(torch.nn.Module):
    """TorchRec's ``InteractionArch`` (DLRM's dot interaction) with :func:`dot_interaction`:
    forward(dense_features [B, D], sparse_features [B, F, D] or [B, F*D]) -> [B, D + (F+1)F/2]."""

    def __init__(self, num_sparse_features: int, num_threads: int = 0) -> None:
        super().__init__()
        self.F, self.num_threads = int(num_sparse_features), int(num_threads)

    def forward(self, dense_features: torch.Tensor, sparse_features: torch.Tensor) -> torch.Tensor:
        D = dense_features.shape[-1]
        F = sparse_features.shape[1] if sparse_features.dim() == 3 else sparse_features.shape[-1] // D
        if F != self.F:
            raise ember.InvalidArgumentError(f"InteractionArch: sparse features {tuple(sparse_features.shape)} hold "
                                             f"{F} features of dim {D}, expected {self.F}")
        return dot_interaction(dense_features, sparse_features, self.num_threads)


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


from ember._torchrec_convert import (from_torchrec, plan_from_torchrec, to_torchrec_state_dict,  # noqa: E402
                                     wire_precision_from_qcomms)
