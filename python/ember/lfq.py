"""ember.LFQ: Lookup-Free Quantization (MAGVIT-v2) with a data-parallel-correct entropy loss.

The numpy face of ``ember/lfq.h`` (docs/lfq.md is its specification). For ``x [B, N, dim]``::

    h = x W_inᵀ + b_in                     project_in [C*D, dim] (identity without projections)
    h = v tanh(h / v)                      optional soft clamp, v >= s
    z[b,n,c,:] = h[b,n, c*D:(c+1)*D]       C codebooks of D = log2(K) bits each
    z = s z / max(||z||, 1e-12)            optional spherical variant (BSQ), norm over D
    q_j = +s' if z_j > 0 else -s'          s' = s, or s/sqrt(D) if spherical
    index = sum_j [z_j > 0] 2^(D-1-j)      component j = 0 is the most significant bit
    y = z + (q - z)                        training (straight-through); y = q in eval
    out = y W_outᵀ + b_out                 project_out [dim, C*D]

Losses (training only): ``aux = entropy_loss_weight * E_aux + commitment_loss_weight * L_commit``
with ``E_aux = PSE - diversity_gamma * CBE`` (or its softplus), the per-sample entropy and the
codebook entropy of the exact K-way softmax ``p = softmax_k(2 tau <z, E_k>)``, clamped entropies
``-sum p log max(p, 1e-5)``, means over the tokens a mask selects. Under a communicator the code
distribution is averaged over the ranks by a differentiable all-reduce (``dist_mean``).
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, Callable, Optional, TypeVar

import numpy as np
import numpy.typing as npt

from . import _ember
from ._comm import Comm
from ._config import CONVENTIONS, DTYPES, ENUMS, contiguous
from .errors import EmberError, InvalidArgumentError, OutOfMemoryError, OutOfRangeError, StateError

__all__ = ["LFQ"]

_PROJECTIONS = ENUMS["lfq_projection"]
_DIST_MEANS = ENUMS["lfq_dist_mean"]
_NUM_PARAMS = 4
_T = TypeVar("_T")


class _Refusal(Exception):
    """A Python-side refusal: (message, the class of its status), raised through the module's context."""

    def __init__(self, message: str, error: type[EmberError] = InvalidArgumentError) -> None:
        super().__init__(message)
        self.status = error.code


def _name(value: Any, table: dict[str, int], what: str) -> int:
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    raise _Refusal(f"LFQ: {what} = {value!r} is not one of {', '.join(repr(k) for k in table)}")


def _dtype_code(dtype: Any) -> int:
    if isinstance(dtype, str) and dtype.lower() in ("f32", "f64"):
        return DTYPES["fp32" if dtype.lower() == "f32" else "fp64"]
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt == np.float32:
        return DTYPES["fp32"]
    if dt == np.float64:
        return DTYPES["fp64"]
    raise _Refusal(f"LFQ: dtype = {dtype!r} is not 'float32' or 'float64'")


def _int(value: Any, what: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise _Refusal(f"LFQ: {what} = {value!r} is not an integer")
    v = operator.index(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _Refusal(f"LFQ: {what} = {v} outside [{lo}, {hi}]")
    return v


def _real(value: Any, what: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise _Refusal(f"LFQ: {what} = {value!r} is not a real number")
    return float(value)


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise _Refusal(f"LFQ: {what} = {value!r} is not a bool")


def _floats(a: Any, what: str, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """`a` as a C-contiguous, aligned array of the module's dtype (no copy when it already is one)."""
    try:
        arr = np.asarray(a)
    except (TypeError, ValueError) as e:
        raise _Refusal(f"{what} cannot be converted to an array ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise _Refusal(f"{what} has dtype {arr.dtype}, which cannot be read as {np.dtype(dtype).name}")
    try:
        return contiguous(arr, dtype)
    except MemoryError:
        raise _Refusal(f"{what}: no memory to convert {arr.shape} to {np.dtype(dtype).name}",
                       OutOfMemoryError) from None


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class LFQ:
    """Lookup-Free Quantization (``ember/lfq.h``): an implicit codebook of ``num_codebooks``
    sign hypercubes of ``codebook_size`` codes, with the entropy auxiliary loss of
    vector-quantize-pytorch's ``LFQ`` made exact under data parallelism.

    Every ``ember_lfq_config`` field is a keyword of the same name, with the header's default
    (upstream HEAD's); for the fields marked "0: default" a zero means the library default:

    - ``dim``: width of x and out; 0: ``num_codebooks * log2(codebook_size)``.
    - ``codebook_size``: K per codebook, a power of two in [2, 2^24]; 0: ``2**dim``.
    - ``num_codebooks``: C >= 1 (0: 1). ``codebook_scale``: s > 0 (0: 1).
    - ``entropy_loss_weight`` (0.1), ``commitment_loss_weight`` (0), ``diversity_gamma`` (1).
    - ``inv_temperature``: tau > 0 (0: 100); ``set_inv_temperature`` anneals it.
    - ``projection``: ``"auto"`` (projections iff ``dim != C*D``), ``"none"`` (identity; needs
      ``dim == C*D``) or ``"linear"``; ``projection_has_bias`` (True) for both projections.
    - ``soft_clamp_input_value``: v >= s gives ``h <- v tanh(h / v)``; 0: no clamp.
    - ``spherical``: BSQ, z and the codebook on the sphere of radius s.
    - ``softplus_entropy_loss`` with ``entropy_loss_offset`` (5).
    - ``frac_per_sample_entropy``: f in (0, 1] (0: 1); f < 1 takes PSE and the code distribution
      from a random subset of floor(|T| f) selected tokens, drawn from ``seed``, the rank and a
      counter of training forwards.
    - ``dist_mean``: ``"ranks"`` (pbar = sum_r pbar_r / W, upstream's) or ``"tokens"`` (the exact
      global token mean, for masks selecting unequal counts per rank); ignored without ``comm``.
    - ``dtype``: ``"float32"`` or ``"float64"``: every array read or written (x, out, gradients,
      codes, parameters) has it; loss scalars are Python floats (double).
    - ``seed``: projection initialisation (as ``torch.nn.Linear``: uniform in ±1/sqrt(fan_in);
      same seed, same values on every rank) and token subsampling.
    - ``comm``: an ``ember.Comm`` (or an mpi4py communicator, wrapped in one) or None (single
      process). The module derives its own duplicate of that communicator, so construction is
      then Collective on it, and training forward/backward and ``allreduce_grads`` are too.
    - ``max_tokens``: workspace hint, the largest B*N expected; 0: sized on first use.

    The module owns its own ember context (``bytes_outstanding``). One module, one thread at a
    time; forward, backward, decoding and the all-reduce release the GIL.

    Raises ``InvalidArgumentError`` for an unknown name, a value of the wrong type, or a
    configuration ``ember_lfq_create`` refuses (codebook_size not a power of two — the message
    suggests the next one —, K outside [2, 2^24], a scale, temperature or weight out of range,
    ``soft_clamp_input_value < codebook_scale``, ``frac_per_sample_entropy`` outside (0, 1],
    ``projection="none"`` with ``dim != C*D``); ``OutOfMemoryError``. With ``comm`` every rank
    raises when one does (and when the ranks' parameter counts differ), and the message names the
    failing rank.
    """

    def __init__(self, dim: int = 0, codebook_size: int = 0, num_codebooks: int = 1, *,
                 codebook_scale: float = 1.0, entropy_loss_weight: float = 0.1,
                 commitment_loss_weight: float = 0.0, diversity_gamma: float = 1.0,
                 inv_temperature: float = 100.0, projection: str = "auto", projection_has_bias: bool = True,
                 soft_clamp_input_value: float = 0.0, spherical: bool = False,
                 softplus_entropy_loss: bool = False, entropy_loss_offset: float = 5.0,
                 frac_per_sample_entropy: float = 1.0, dist_mean: str = "ranks", dtype: Any = "float32",
                 seed: int = 0, comm: Any = None, max_tokens: int = 0) -> None:
        if comm is not None and not isinstance(comm, Comm):
            comm = Comm(comm)  # an mpi4py communicator (ember.Comm converts it, or refuses)
        self._comm: Optional[Comm] = comm
        core_comm = None if comm is None else comm._c
        i32 = (-2**31, 2**31 - 1)
        try:
            self._core = _ember._LFQ(
                dim=_int(dim, "dim", *i32),
                codebook_size=_int(codebook_size, "codebook_size", *i32),
                num_codebooks=_int(num_codebooks, "num_codebooks", *i32),
                codebook_scale=_real(codebook_scale, "codebook_scale"),
                entropy_loss_weight=_real(entropy_loss_weight, "entropy_loss_weight"),
                commitment_loss_weight=_real(commitment_loss_weight, "commitment_loss_weight"),
                diversity_gamma=_real(diversity_gamma, "diversity_gamma"),
                inv_temperature=_real(inv_temperature, "inv_temperature"),
                projection=_name(projection, _PROJECTIONS, "projection"),
                projection_has_bias=_flag(projection_has_bias, "projection_has_bias"),
                soft_clamp_input_value=_real(soft_clamp_input_value, "soft_clamp_input_value"),
                spherical=_flag(spherical, "spherical"),
                softplus_entropy_loss=_flag(softplus_entropy_loss, "softplus_entropy_loss"),
                entropy_loss_offset=_real(entropy_loss_offset, "entropy_loss_offset"),
                frac_per_sample_entropy=_real(frac_per_sample_entropy, "frac_per_sample_entropy"),
                dist_mean=_name(dist_mean, _DIST_MEANS, "dist_mean"),
                dtype=_dtype_code(dtype),
                seed=_int(seed, "seed", 0, 2**64 - 1),
                max_tokens=_int(max_tokens, "max_tokens", 0, 2**63 - 1),
                comm=core_comm,
            )
        except _Refusal as e:
            # Every rank of comm learns it (the constructor is Collective with a comm): the
            # refusal is agreed where the module's creation would agree.
            _ember._LFQ(comm=core_comm, refuse=str(e))
            raise AssertionError("unreachable: _LFQ(refuse=...) raises") from None
        cfg = self._core.config()
        self._dtype: np.dtype[Any] = np.dtype(cfg["dtype"])
        self._dim: int = cfg["dim"]
        self._C: int = cfg["num_codebooks"]
        self._D: int = cfg["codebook_dim"]
        self._proj: bool = cfg["projection"] == "linear"
        self._names = tuple(_ember._LFQ.param_name(i) for i in range(_NUM_PARAMS))

    # ---- configuration ---------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """The resolved configuration (``ember_lfq_get_config``): dim, codebook_size and
        num_codebooks derived, projection "none" or "linear", zero defaults filled in, the current
        inv_temperature; plus codebook_dim. A new dict each time."""
        return self._core.config()

    @property
    def dim(self) -> int:
        """Width of x and out."""
        return self._dim

    @property
    def codebook_size(self) -> int:
        """K, codes per codebook."""
        return 1 << self._D

    @property
    def num_codebooks(self) -> int:
        """C."""
        return self._C

    @property
    def codebook_dim(self) -> int:
        """D = log2(codebook_size), bits per codebook (``ember_lfq_codebook_dim``); the quantised
        width is ``num_codebooks * codebook_dim``."""
        return self._D

    @property
    def dtype(self) -> np.dtype[Any]:
        """The module's numpy dtype (float32 or float64)."""
        return self._dtype

    @property
    def has_projections(self) -> bool:
        """Whether project_in / project_out exist (projection resolved to "linear")."""
        return self._proj

    @property
    def inv_temperature(self) -> float:
        """tau used by the next forwards."""
        return float(self._core.config()["inv_temperature"])

    @inv_temperature.setter
    def inv_temperature(self, tau: float) -> None:
        self.set_inv_temperature(tau)

    @property
    def comm(self) -> Optional[Comm]:
        """The ``ember.Comm`` given (None: single process)."""
        return self._comm

    @property
    def rank(self) -> int:
        """This process's rank in the module's communicator (0 without one)."""
        return self._core.rank

    @property
    def size(self) -> int:
        """Ranks in the module's communicator (1 without one)."""
        return self._core.size

    @property
    def bytes_outstanding(self) -> int:
        """Bytes held by the module's own ember context (``ember_ctx_bytes_outstanding``). After
        ``close()`` (once no array shares the parameters any more): what the context still held
        when the module was destroyed, 0 unless the library leaked."""
        return self._core.bytes_outstanding

    @property
    def closed(self) -> bool:
        return self._core.closed

    def set_inv_temperature(self, inv_temperature: float) -> None:
        """Sets tau for the next forwards (``ember_lfq_set_inv_temperature``). Local.
        Raises InvalidArgumentError when not finite or <= 0."""
        self._core.set_inv_temperature(self._local(lambda: _real(inv_temperature, "inv_temperature")))

    def set_seed(self, seed: int) -> None:
        """Restarts the token-subsampling stream (``frac_per_sample_entropy < 1``) at ``seed``
        (``ember_lfq_set_seed``), so a subsampled step can be replayed exactly. Local."""
        self._core.set_seed(self._local(lambda: _int(seed, "seed", 0, 2**64 - 1)))

    # ---- forward / backward ------------------------------------------------------------------

    def forward(self, x: npt.ArrayLike, mask: Optional[npt.ArrayLike] = None,
                training: bool = True) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], dict[str, Any]]:
        """Quantises ``x [B, N, dim]`` (``ember_lfq_forward``); returns ``(out, indices, losses)``.

        - ``out [B, N, dim]`` (module dtype): the straight-through output in training,
          ``project_out(q)`` in eval.
        - ``indices [B, N, C]`` int64 codes in [0, K), most significant bit first (for C = 1 the
          last axis has length 1; ``indices[..., 0]`` is upstream's [B, N]).
        - ``losses``: dict of ``aux`` (``w_e * entropy + w_c * commitment``: what ``backward``
          differentiates), ``entropy`` (E_aux, after softplus in that variant),
          ``per_sample_entropy``, ``codebook_entropy`` (after the distributed mean),
          ``commitment`` (0 when its weight is 0), ``tokens`` (|T| on this rank) and
          ``entropy_tokens`` (|E|); all zero in eval.

        ``mask [B, N]`` (bool or integers, nonzero selects a token) restricts every loss mean to
        the selected tokens; out and indices cover every token. ``training=False`` is eval: no
        losses, and the state a pending ``backward`` needs is left alone.

        Collective on the module's comm in training mode (each rank its own B, N and mask; the
        first training forward also checks every rank has the same configuration); Local in eval
        or without comm. Raises InvalidArgumentError (x not [B, N, dim] with B, N >= 1, a mask not
        [B, N] or not bool/integer, an array numpy cannot read as numbers, ranks configured
        differently), NumericError (NaN or Inf in x, named by position), OutOfMemoryError,
        CommunicationError, CollectiveTimeoutError. A bad input on one rank raises on every rank
        with that rank's message; on error nothing changes (a pending backward can still follow).
        """
        collective = bool(training) and self._comm is not None
        try:
            xa = _floats(x, "LFQ.forward: x", self._dtype)
            if xa.ndim != 3 or xa.shape[2] != self._dim or xa.shape[0] < 1 or xa.shape[1] < 1:
                raise _Refusal(f"LFQ.forward: x has shape {_shape(xa.shape)}, expected [B, N, dim = {self._dim}] "
                               "with B, N >= 1")
            B, N = xa.shape[0], xa.shape[1]
            ma = None if mask is None else self._mask(mask, B, N)
            out = np.empty((B, N, self._dim), self._dtype)
            indices = np.empty((B, N, self._C), np.int64)
        except _Refusal as e:
            self._core.refuse(e.status, str(e), collective)
        except MemoryError:
            self._core.refuse(OutOfMemoryError.code, "LFQ.forward: no memory for the outputs", collective)
        losses = self._core.forward(xa, ma, bool(training), out, indices)
        return out, indices, losses

    __call__ = forward

    @staticmethod
    def _mask(mask: npt.ArrayLike, B: int, N: int) -> np.ndarray[Any, Any]:
        try:
            m = np.asarray(mask)
        except (TypeError, ValueError) as e:
            raise _Refusal(f"LFQ.forward: mask cannot be converted to an array ({e})") from None
        if m.shape != (B, N):
            raise _Refusal(f"LFQ.forward: mask has shape {_shape(m.shape)}, expected [B, N] = ({B}, {N})")
        if m.dtype == np.bool_:
            return contiguous(m).view(np.uint8)
        if m.dtype == np.uint8:
            return contiguous(m)
        if m.dtype.kind in "iu":
            return np.asarray(m != 0).view(np.uint8)
        raise _Refusal(f"LFQ.forward: mask has dtype {m.dtype} (bool or integers expected; nonzero selects a "
                       "token: pass mask != 0)")

    def backward(self, grad_out: Optional[npt.ArrayLike] = None, grad_aux: float = 1.0) -> np.ndarray[Any, Any]:
        """Backward of the last training forward (``ember_lfq_backward``) for the objective
        ``<grad_out, out> + grad_aux * aux``; returns ``grad_x [B, N, dim]`` (module dtype).

        ``grad_out [B, N, dim]`` is dJ/d(out) (None: zero, the aux loss alone); ``grad_aux`` is
        dJ/d(aux) (1 for J = task loss + aux). Straight-through into z, then the entropy and
        commitment gradients, the sphere, the clamp and both projections. Parameter gradients are
        accumulated (+=) into ``grads()`` (``zero_grad`` clears them); project_out's come from
        grad_out only. May be called more than once per forward (each call accumulates again).

        Distributed: the objective is summed over ranks (``sum_s L_s``): each rank's gradients are
        those of every rank's losses with respect to its own inputs. With equal token counts (no
        softplus), the mean over ranks of the parameter gradients (``allreduce_grads("mean")``)
        equals the single-process gradient on the concatenated batch, and each rank's ``grad_x``
        is W times the full-batch one.

        Collective on the module's comm when the forward was. Raises StateError (no training
        forward), InvalidArgumentError (grad_out not the forward's [B, N, dim], not numeric),
        NumericError (NaN/Inf in grad_out or grad_aux), CommunicationError,
        CollectiveTimeoutError; on error the gradients are unchanged, on every rank.
        """
        collective = self._comm is not None
        saved = self._core.saved_shape
        if saved is None:  # as the C half and the library say it, on every rank
            self._core.refuse(StateError.code, "LFQ.backward: no training forward to differentiate (forward with "
                              "training=True first)", collective)
        try:
            ga = None if grad_out is None else _floats(grad_out, "LFQ.backward: grad_out", self._dtype)
            try:
                aux = float(grad_aux)
            except (TypeError, ValueError):
                raise _Refusal(f"LFQ.backward: grad_aux = {grad_aux!r} is not a real number") from None
            grad_x = np.empty(saved + (self._dim,), self._dtype)
        except _Refusal as e:
            self._core.refuse(e.status, str(e), collective)
        except MemoryError:
            self._core.refuse(OutOfMemoryError.code, "LFQ.backward: no memory for grad_x", collective)
        self._core.backward(ga, aux, grad_x)
        return grad_x

    # ---- parameters ----------------------------------------------------------------------------

    def params(self) -> dict[str, np.ndarray[Any, Any]]:
        """The parameters, a dict name -> array sharing the module's memory (read/write; writes
        take effect at the next forward): ``project_in.weight [C*D, dim]``, ``project_in.bias
        [C*D]``, ``project_out.weight [dim, C*D]``, ``project_out.bias [dim]`` (linear weights
        [out, in], y = x Wᵀ + b, as torch.nn.Linear), module dtype; only those the configuration
        has (empty without projections). The arrays stay valid after ``close()``. Local."""
        return self._tensors(False)

    def grads(self) -> dict[str, np.ndarray[Any, Any]]:
        """The gradient accumulators, same names, shapes and sharing as ``params()``. Local."""
        return self._tensors(True)

    def _tensors(self, grad: bool) -> dict[str, np.ndarray[Any, Any]]:
        out = {}
        for i, name in enumerate(self._names):
            t = self._core.tensor(grad, i)
            if t is not None:
                out[name] = np.asarray(t)
        return out

    def zero_grad(self) -> None:
        """Sets every gradient accumulator to zero (``ember_lfq_zero_grad``). Local."""
        self._core.zero_grad()

    def allreduce_grads(self, convention: str = "mean") -> None:
        """Data-parallel gradient synchronisation (``ember_lfq_allreduce_grads``): ``"mean"``
        (J = (1/W) sum_r L_r: sums over ranks and divides by W) or ``"sum"``. Collective on the
        module's comm; a no-op without one. Raises InvalidArgumentError (unknown convention: on
        every rank), CommunicationError, CollectiveTimeoutError."""
        if isinstance(convention, str) and convention.lower() in CONVENTIONS:
            self._core.allreduce_grads(CONVENTIONS[convention.lower()])
            return
        self._core.refuse(InvalidArgumentError.code, f"LFQ.allreduce_grads: convention = {convention!r} is not "
                          "'mean' or 'sum'", True)

    def indices_to_codes(self, indices: npt.ArrayLike, project_out: bool = True) -> np.ndarray[Any, Any]:
        """Decodes ``indices [..., C]`` (integers in [0, K)) into codes (``ember_lfq_indices_to_codes``):
        ``[..., C*D]``, the ±s' corners, or with ``project_out`` and projections ``[..., dim]`` =
        project_out(codes) (what an eval forward returns). Module dtype. Local. Raises
        InvalidArgumentError (not integers, last axis not C), OutOfRangeError (an index outside
        [0, K), named by position)."""
        def convert() -> np.ndarray[Any, Any]:
            try:
                a = np.asarray(indices)
            except (TypeError, ValueError) as e:
                raise _Refusal(f"LFQ.indices_to_codes: indices cannot be converted to an array ({e})") from None
            if a.dtype.kind not in "iu":
                raise _Refusal(f"LFQ.indices_to_codes: indices have dtype {a.dtype} (integers expected)")
            if a.ndim < 1 or a.shape[-1] != self._C:
                raise _Refusal(f"LFQ.indices_to_codes: indices have shape {_shape(a.shape)}, expected [..., C = "
                               f"{self._C}]")
            if a.dtype.kind == "u" and a.size and int(a.max()) > 2**63 - 1:
                raise _Refusal(f"LFQ.indices_to_codes: index {int(a.max())} outside [0, {self.codebook_size})",
                               OutOfRangeError)
            return contiguous(a, np.int64)

        a = self._local(convert)
        lead = a.shape[:-1]
        n = int(np.prod(lead, dtype=np.int64))
        width = self._dim if (project_out and self._proj) else self._C * self._D
        codes = np.empty((n, width), self._dtype)
        self._core.indices_to_codes(a.reshape(n, self._C), bool(project_out), codes)
        return codes.reshape(lead + (width,))

    # ---- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Destroys the module (its communicator now; its memory once no array from ``params()``
        or ``grads()`` shares it). Further calls raise StateError. With a comm, every rank should
        close at the same point (the duplicate communicator is freed); also done at garbage
        collection and, before MPI is finalised, at interpreter exit."""
        if self._core is not None:
            self._core.close()

    def __enter__(self) -> LFQ:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "ember.LFQ(closed)"
        c = self._core.config()
        return (f"ember.LFQ(dim={c['dim']}, codebook_size={c['codebook_size']}, num_codebooks={c['num_codebooks']}, "
                f"projection={c['projection']!r}, dtype={c['dtype']!r}, ranks={self.size})")

    def _local(self, make: Callable[[], _T]) -> _T:
        """make(), turning a _Refusal into the library's exception (Local call)."""
        try:
            return make()
        except _Refusal as e:
            self._core.refuse(e.status, str(e), False)

