"""ShardedEmbeddingBagCollection, TablePlan and the planner (include/ember/shard.h, plan.h, state.h)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any, Callable, TypeVar

import numpy as np

from . import _ember
from ._comm import Comm
from ._config import (BOUNDS, CONVENTIONS, DTYPES, I32, NP_OF_DTYPE, U64, TableConfig, as_array, as_float, as_index,
                      as_path, c_config, dtype_name, enum_name, invalid, parse_dtype, parse_name, parse_wire_dtype)
from ._ebc import _Collection
from ._kjt import KJT

__all__ = ["TablePlan", "ShardedEmbeddingBagCollection", "Topology", "PlanStats", "plan", "predict_plan",
           "describe_plan", "detect_topology", "probe_disk"]

_SCHEMES = _ember.schemes()  # [(short, long, fields)] by ember_shard_scheme
_SCHEME_CODE = {**{s: k for k, (s, _, _) in enumerate(_SCHEMES)}, **{n: k for k, (_, n, _) in enumerate(_SCHEMES)}}
_USES_RANKS, _USES_SHARDS, _USES_GROUP = _ember.PLAN_USES_RANKS, _ember.PLAN_USES_SHARDS, _ember.PLAN_USES_GROUP

R = TypeVar("R")


def _scheme_code(name: Any, what: str) -> int:
    if isinstance(name, str) and name.lower() in _SCHEME_CODE:
        return _SCHEME_CODE[name.lower()]
    names = ", ".join(f"{s} ({n})" for s, n, _ in _SCHEMES)
    raise invalid(f"{what}: unknown sharding scheme {name!r} (one of {names})")


@dataclasses.dataclass
class TablePlan:
    """One table's placement (ember_table_plan).

    scheme      "dp" | "tw" | "cw" | "rw" | "twrw" | "grid" (or the long names "data_parallel",
                "table_wise", "column_wise", "row_wise", "table_row_wise", "grid_shard"); kept as
                the short name
    ranks       tw: (owner,); cw: one rank per column slice; twrw: the group; grid: rank of slice c,
                row block k at c * group_size + k; dp, rw: ()
    num_shards  cw, grid: column slices
    group_size  twrw, grid: ranks in (each slice's) group

    A TablePlan naming only its scheme gets the library's default placement of that scheme for
    table t (ember_table_plan_default, the one rule the CLI and the benchmarks use too): tw on rank
    t mod W, cw in min(W, dim) slices on ranks t, t + 1, ... mod W, twrw over all W ranks, grid
    min(dim, 2) slices x max(1, W // 2) ranks from rank t.
    """

    scheme: str
    ranks: tuple[int, ...] = ()
    num_shards: int = 0
    group_size: int = 0

    def __post_init__(self) -> None:
        self.scheme = _SCHEMES[_scheme_code(self.scheme, "TablePlan")][0]
        if isinstance(self.ranks, (int, np.integer)):
            self.ranks = (int(self.ranks),)
        try:
            ranks = tuple(self.ranks)
        except TypeError:
            raise invalid(f"TablePlan ranks: expected a sequence of ranks, got {self.ranks!r}") from None
        self.ranks = tuple(as_index(r, "TablePlan ranks", *I32) for r in ranks)
        self.num_shards = as_index(self.num_shards, "TablePlan num_shards", *I32)
        self.group_size = as_index(self.group_size, "TablePlan group_size", *I32)

    @property
    def long_name(self) -> str:
        return _SCHEMES[_SCHEME_CODE[self.scheme]][1]

    def _c_tuple(self) -> tuple[Any, ...]:
        return (_SCHEME_CODE[self.scheme], self.num_shards, self.group_size, self.ranks)

    @classmethod
    def _from_c(cls, t: tuple[Any, ...]) -> TablePlan:
        return cls(_SCHEMES[t[0]][0], tuple(t[3]), t[1], t[2])


def _default_plan(scheme: str, t: int, dim: int, W: int) -> TablePlan:
    """A scheme name alone: the library's default placement for table t (ember_table_plan_default)."""
    return TablePlan._from_c(_ember.plan_default(_scheme_code(scheme, "plan"), t, dim, W, 0))


def _resolve_plan(spec: Any, tables: Sequence[TableConfig], W: int, batch_size: int,
                  topology: Topology | None = None) -> list[TablePlan]:
    """A plan argument -> one TablePlan per table ("auto", a scheme name, a list, a dict)."""
    names = [t.name for t in tables]

    def one(p: Any, t: int) -> TablePlan:
        if isinstance(p, str):
            return _default_plan(p, t, tables[t].embedding_dim, W)
        if isinstance(p, TablePlan):
            fields = _SCHEMES[_SCHEME_CODE[p.scheme]][2]
            if fields & _USES_RANKS and not p.ranks and not p.num_shards and not p.group_size:
                return _default_plan(p.scheme, t, tables[t].embedding_dim, W)
            return dataclasses.replace(p)
        raise invalid(f"plan: table '{names[t]}': expected a TablePlan or a scheme name, got {type(p).__name__}")

    if isinstance(spec, str):
        if spec.lower() == "auto":
            return plan(tables, W, batch_size=batch_size, topology=topology)
        return [one(spec, t) for t in range(len(tables))]
    if isinstance(spec, Mapping):
        unknown = [k for k in spec if k not in names]
        missing = [n for n in names if n not in spec]
        if unknown or missing:
            raise invalid(f"plan: the dict's tables {sorted(map(str, spec))} differ from the collection's: "
                          f"missing {missing}, unknown {unknown}")
        return [one(spec[n], t) for t, n in enumerate(names)]
    if isinstance(spec, TablePlan):
        spec = [spec]
    try:
        items = list(spec)
    except TypeError:
        raise invalid(f"plan: expected \"auto\", a scheme name, a list of TablePlan or a dict, got "
                      f"{type(spec).__name__}") from None
    if len(items) != len(tables):
        raise invalid(f"plan: {len(items)} table plans for {len(tables)} tables")
    return [one(p, t) for t, p in enumerate(items)]


@dataclasses.dataclass
class Topology:
    """The machine the planner plans for (ember_plan_config's topology fields; docs/planner.md).

    host_of        every rank's host, hosts numbered 0..H-1 with no gap (None: ranks_per_host)
    ranks_per_host when host_of is None: host h holds ranks [h*n, (h+1)*n) (0: one host)
    intra_host_bw  bytes/s a rank sends to ranks of its host (0: plan on bytes)
    inter_host_bw  bytes/s of one host's link to the others, each direction (needed, with
                   intra_host_bw where a host holds 2 ranks or more, when there are several hosts)
    mem_bw         bytes/s of embedding rows one rank pools and updates (0: 2e9)
    round_s        seconds of one collective round over all ranks (0: none)
    disk_bw        bytes/s a rank moves to and from a tiered table's file (0: 1e9; probe_disk)

    detect_topology(comm) fills it for the ranks of a running job; the planner's messages name a
    value it refuses (a gap in the host numbers, a negative bandwidth, ...).
    """

    host_of: tuple[int, ...] | None = None
    ranks_per_host: int = 0
    intra_host_bw: float = 0.0
    inter_host_bw: float = 0.0
    mem_bw: float = 0.0
    round_s: float = 0.0
    disk_bw: float = 0.0

    def __post_init__(self) -> None:
        if self.host_of is not None:
            try:
                hosts = tuple(self.host_of)
            except TypeError:
                raise invalid(f"Topology host_of: expected a sequence of hosts, got {self.host_of!r}") from None
            self.host_of = tuple(as_index(h, "Topology host_of", *I32) for h in hosts)
        self.ranks_per_host = as_index(self.ranks_per_host, "Topology ranks_per_host", *I32)
        for f in ("intra_host_bw", "inter_host_bw", "mem_bw", "round_s", "disk_bw"):
            setattr(self, f, as_float(getattr(self, f), f"Topology {f}"))

    def _c_tuple(self) -> tuple[Any, ...]:
        return (self.host_of, self.ranks_per_host, self.intra_host_bw, self.inter_host_bw, self.mem_bw,
                self.round_s, self.disk_bw)


@dataclasses.dataclass
class PlanStats:
    """The planner's estimate of a plan, per rank (ember_plan_stats): ``storage_bytes`` (weights +
    optimizer state held), ``step_bytes`` (rows read + bytes sent per step), ``step_seconds``
    (predicted seconds of the embedding part of a step; 0 without bandwidths in the topology)
    and ``inter_bytes`` (of step_bytes, the bytes sent to other hosts)."""

    storage_bytes: list[int]
    step_bytes: list[float]
    step_seconds: list[float]
    inter_bytes: list[float]

    @property
    def step_s(self) -> float:
        """The predicted step: the slowest rank's step_seconds."""
        return max(self.step_seconds)


def _pooling_factor(pooling_factor: Any, feats: Sequence[tuple[Any, ...]], what: str) -> np.ndarray | None:
    """Mean ids per sample in feature order: a sequence, a dict {feature: value} (others 1) or None."""
    if pooling_factor is None:
        return None
    fnames = [f for f, _ in feats]
    if isinstance(pooling_factor, Mapping):
        unknown = [k for k in pooling_factor if k not in fnames]
        if unknown:
            raise invalid(f"{what}: pooling_factor names unknown features {unknown} (features: {fnames})")
        return np.array([as_float(pooling_factor.get(f, 1.0), f"{what}: pooling_factor of '{f}'")
                         for f in fnames], np.float32)
    pf = as_array(pooling_factor, np.float32, f"{what}: pooling_factor")
    if pf.shape[0] != len(fnames):
        raise invalid(f"{what}: pooling_factor has {pf.shape[0]} entries for {len(fnames)} features")
    return pf


def _topology(topology: Any, what: str) -> tuple[Any, ...] | None:
    if topology is None:
        return None
    if not isinstance(topology, Topology):
        raise invalid(f"{what}: topology: expected an ember.Topology, got {type(topology).__name__}")
    return topology._c_tuple()


def plan(tables: Sequence[TableConfig], world_size: int, *, batch_size: int = 512, memory_per_rank: int = 0,
         pooling_factor: Any = None, allow: Sequence[str] | None = None,
         dp_max_bytes: int = 0, topology: Topology | None = None,
         rank_speed: Sequence[float] | None = None) -> list[TablePlan]:
    """The planner (ember_plan_create): one TablePlan per table for ``world_size`` ranks.

    batch_size       local batch size per rank
    memory_per_rank  bytes of embedding storage available on each rank (0: unlimited)
    pooling_factor   mean ids per sample of each feature: a sequence in feature order, a dict
                     {feature: value} (others 1), or None (1 each)
    allow            scheme names the planner may use (None: all but grid)
    dp_max_bytes     data-parallel only for tables up to this size (0: 1 MiB)
    topology         an ember.Topology (hosts and bandwidths: the planner then minimises the
                     predicted time and offers twrw per host, and grid where allowed), or None
                     (one host, plans on bytes)
    rank_speed       each rank's speed relative to the model (world_size numbers > 0; e.g. modelled
                     over measured seconds), or None (all 1): a slow rank's load weighs more, so it
                     gets less (predict_plan's figures stay as modelled)

    Local and deterministic: every rank computes the same plan. predict_plan gives the plan's
    estimates. Raises InvalidArgumentError, and OutOfMemoryError when a table fits on no rank
    within memory_per_rank (the table is named).
    """
    ctab, feats, tables = c_config(tables)
    W = as_index(world_size, "plan: world_size", 1, I32[1])
    pf = _pooling_factor(pooling_factor, feats, "plan")
    mask = 0
    if allow is not None:
        if isinstance(allow, str):
            allow = [allow]
        for name in allow:
            mask |= 1 << _scheme_code(name, "plan: allow")
        if not mask:
            raise invalid("plan: allow is empty")
    result = _ember.plan(ctab, feats, W, as_index(batch_size, "plan: batch_size", *I32),
                         as_index(memory_per_rank, "plan: memory_per_rank", *U64), pf, mask,
                         as_index(dp_max_bytes, "plan: dp_max_bytes", *U64), _topology(topology, "plan"),
                         None if rank_speed is None else [as_float(v, "plan: rank_speed") for v in rank_speed])
    return [TablePlan._from_c(p) for p in result]


def predict_plan(tables: Sequence[TableConfig], plan: Any, world_size: int, *, batch_size: int = 512,
                 pooling_factor: Any = None, topology: Topology | None = None) -> PlanStats:
    """The planner's estimate of ``plan`` (ember_plan_predict): any plan the sharded collection
    takes (a scheme name, a list or dict of TablePlan, a collection's ``.plan``), for
    ``world_size`` ranks of ``batch_size`` samples, the features' ``pooling_factor`` and a
    ``topology`` as plan() takes them. storage_bytes are exact (ember_shard_rank_bytes). Local.
    Raises InvalidArgumentError (a plan the collection would refuse: the table is named)."""
    ctab, feats, tables = c_config(tables)
    W = as_index(world_size, "predict_plan: world_size", 1, I32[1])
    if isinstance(plan, str) and plan.lower() == "auto":
        raise invalid("predict_plan: \"auto\" is not a plan (call ember.plan first)")
    plans = _resolve_plan(plan, tables, W, 512)
    stats = _ember.predict(ctab, feats, [p._c_tuple() for p in plans], W,
                           as_index(batch_size, "predict_plan: batch_size", *I32),
                           _pooling_factor(pooling_factor, feats, "predict_plan"),
                           _topology(topology, "predict_plan"))
    return PlanStats(*stats)


def detect_topology(comm: Any = None, *, probe_bytes: int = 0, reps: int = 3) -> Topology:
    """The hosts of ``comm``'s ranks (ranks that share memory are one host; host 0 holds rank 0)
    and, with ``probe_bytes`` > 0, the measured intra- and inter-host bandwidths and the round
    time of a collective (ember_plan_detect_topology: rank 0 exchanges ``probe_bytes`` with a rank
    of its host and one of host 1, ``reps`` times; 0 where there is no such pair). Every rank gets
    the same Topology, ready for plan(). ``comm``: an ember.Comm, an mpi4py communicator or None
    (MPI_COMM_WORLD). Collective. Raises on every rank InvalidArgumentError (probe_bytes negative
    or over 1 GiB), CommunicationError, CollectiveTimeoutError."""
    c = comm if isinstance(comm, Comm) else Comm(comm)
    try:
        try:
            args = (as_index(probe_bytes, "detect_topology: probe_bytes", 0, 1 << 30, c.rank),
                    as_index(reps, "detect_topology: reps", *I32, rank=c.rank))
        except Exception as e:
            c._c.agree(e)
            raise  # not reached
        host_of, _, intra, inter, round_s = c._c.detect_topology(*args)
    finally:
        if c is not comm:  # the duplicate made here for an mpi4py communicator or the world
            c.close()
    return Topology(tuple(host_of), 0, intra, inter, 0.0, round_s, 0.0)


def probe_disk(dir: str | os.PathLike[str] | None = None, bytes: int = 64 << 20) -> float:
    """The rate (bytes/s) at which a tiered table's file in ``dir`` (None: $TMPDIR, else /tmp)
    moves records, for Topology.disk_bw (ember_plan_probe_disk: a scratch file of ``bytes``, 4 KiB
    to 16 GiB, written, flushed and read back; where the kernel keeps it in the page cache, the
    figure is the page cache's). Local. Raises InvalidArgumentError, EmberIOError (the directory
    cannot hold the file)."""
    d = None if dir is None else as_path(dir, "probe_disk: dir")
    return float(_ember.probe_disk(d, as_index(bytes, "probe_disk: bytes", 4096, 16 << 30)))


def describe_plan(tables: Sequence[TableConfig], plan: Any, *, world_size: int = 1) -> str:
    """One line per table, "name scheme ranks=..." (ember_plan_describe). ``plan`` as the sharded
    collection takes it (scheme names get their default placement over ``world_size`` ranks)."""
    ctab, feats, tables = c_config(tables)
    if isinstance(plan, str) and plan.lower() == "auto":
        raise invalid("describe_plan: \"auto\" is not a plan (call ember.plan first)")
    plans = _resolve_plan(plan, tables, as_index(world_size, "describe_plan: world_size", 1, I32[1]), 512)
    return _ember.describe_plan(ctab, feats, [p._c_tuple() for p in plans])


class ShardedEmbeddingBagCollection(_Collection):
    """An EmbeddingBagCollection sharded over the ranks of a communicator (ember_sebc).

    Every rank passes its own local KJT (local batch sizes may differ) and receives exactly the
    pooled rows of its local batch that an unsharded collection with the same weights gives.
    Backward trains J = (1/W) sum_r L_r (grad_convention "mean") or sum_r L_r ("sum"), applied
    identically to every table whatever its scheme.

    tables           list of TableConfig (the same on every rank)
    plan             "auto" (the planner for comm.size ranks and batch_size_hint), a scheme name
                     for every table, a list of TablePlan (one per table), or a dict {table name:
                     TablePlan or scheme name}; see TablePlan for the default placements
    comm             ember.Comm, an mpi4py communicator, or None (MPI_COMM_WORLD); the collection
                     runs on a duplicate of it and follows its timeout_s
    bounds, seed, num_threads, max_batch_size, max_nnz, ssd_dir: as EmbeddingBagCollection (same
                     seed: the same initial values as the unsharded collection); a tiered table
                     (TableConfig.cache_rows) keeps a file and a cache per piece, and cannot be
                     data-parallel
    topology         an ember.Topology for the planner when plan is "auto" (detect_topology(comm)
                     measures one), or None
    wire_precision   the pooled rows' and their gradients' precision between ranks (TorchRec's
                     QCommsConfig): a dtype for both, or (forward, backward), each "fp32" (default,
                     exact), "fp16", "bf16", "fp8_e4m3", "fp8_e5m2" or "int8"; see set_wire_precision
    wire_loss_scale  the float formats' loss scales: a number for both, or (forward, backward);
                     see set_wire_loss_scale
    sharding_group_size  2D parallelism (TorchRec's DMPCollection): the tables sharded within
                     each group of G consecutive ranks (plan places them on the G ranks of a
                     group) and replicated over the comm.size / G groups; each piece's touched
                     rows' gradients are summed over its replicas before the one update, so the
                     replicas stay bitwise equal and training equals one process. None: one
                     group. Under 2D, hashed and tiered tables, reshard, convert_dtype and writes
                     from one root raise UnsupportedError; save writes one group's checkpoint.

    Collective calls (every rank calls them, in the same order): creation, forward, backward,
    step, read, write, state_dict, load_state_dict, convert_dtype, save, load. Any refusal on one
    rank (a bad KJT, an unknown table name, a wrong shape) raises on every rank, the failing
    rank's message on all; a failed call changes nothing anywhere. Local: set_lr, set_step (call
    them alike on every rank), tier_stats, the properties.
    """

    _c: _ember.SEBC

    def __init__(self, tables: Sequence[TableConfig], plan: Any = "auto", *, comm: Any = None,
                 grad_convention: str = "mean", bounds: str = "error", seed: int = 0, num_threads: int = 0,
                 max_batch_size: int = 0, max_nnz: int = 0, batch_size_hint: int = 512,
                 ssd_dir: str | os.PathLike[str] | None = None, topology: Topology | None = None,
                 wire_precision: Any = None, wire_loss_scale: Any = None,
                 sharding_group_size: int | None = None) -> None:
        self._comm = comm if isinstance(comm, Comm) else Comm(comm)
        self._rank = self._comm.rank
        try:
            ctab, feats = self._setup(tables)
            if topology is not None and not isinstance(topology, Topology):
                raise invalid(f"topology: expected an ember.Topology, got {type(topology).__name__}", self._rank)
            G = 0 if sharding_group_size is None else as_index(sharding_group_size, "sharding_group_size", 1,
                                                                 I32[1], rank=self._rank)
            self._plan = _resolve_plan(plan, self._tables, G or self._comm.size,
                                       as_index(batch_size_hint, "batch_size_hint", *I32, rank=self._rank), topology)
            wire = None if wire_precision is None else self._wire_codes(wire_precision)
            scales = None if wire_loss_scale is None else self._wire_scales(wire_loss_scale)
            self._conv = parse_name(grad_convention, CONVENTIONS, "grad_convention")
            args = (parse_name(bounds, BOUNDS, "bounds"), as_index(seed, "seed", *U64, rank=self._rank),
                    as_index(num_threads, "num_threads", 0, I32[1], rank=self._rank),
                    as_index(max_batch_size, "max_batch_size", 0, I32[1], rank=self._rank),
                    as_index(max_nnz, "max_nnz", 0, rank=self._rank))
            d = None if ssd_dir is None else os.fsdecode(as_path(ssd_dir, "ssd_dir", self._rank))
        except Exception as e:
            self._comm._c.agree(e)
            raise  # not reached: agree raises on every rank
        self._c = _ember.SEBC(self._comm._c, ctab, feats, *args, [p._c_tuple() for p in self._plan], self._conv, d, G)
        self._output_dim = self._c.output_dim
        try:
            if wire is not None:
                self._c.set_wire_precision(*wire)
            if scales is not None:
                self._c.set_wire_loss_scale(*scales)
        except BaseException:
            self._c.close()
            raise

    def _collective(self, prepare: Callable[[], R]) -> R:
        """Runs the Python-side checks of a collective call; a refusal is agreed on every rank."""
        try:
            return prepare()
        except Exception as e:
            self._c.agree(e)
            raise  # not reached

    # ---- forward / backward ------------------------------------------------------------------

    def forward(self, kjt: KJT, out: np.ndarray | None = None) -> np.ndarray:
        """Pools the local batch: float32 [B_local, output_dim] (all-"none": [nnz_local, D]).
        Collective. Raises on every rank InvalidArgumentError (a malformed KJT on any rank),
        OutOfRangeError, NumericError, CommunicationError, CollectiveTimeoutError."""
        def prepare() -> tuple[Any, ...]:
            parts = self._kjt_parts(kjt)
            return parts, self._out(out, self._out_shape(parts))
        parts, o = self._collective(prepare)
        self._c.forward(parts, o)
        result: np.ndarray = o
        return result

    __call__ = forward

    def backward(self, kjt: KJT, grad_out: Any) -> None:
        """Backward + fused optimizer with the same KJT (contents) as the preceding forward;
        ``grad_out`` = dL_r/d(out) of the local loss. Collective. Raises StateError (no forward
        since the last backward), InvalidArgumentError (another KJT), NumericError (NaN/Inf in
        grad_out); on failure nothing changes anywhere."""
        def prepare() -> tuple[Any, ...]:
            parts = self._kjt_parts(kjt)
            return parts, self._grad(grad_out, self._out_shape(parts))
        parts, g = self._collective(prepare)
        self._c.backward(parts, g)

    # ---- the pipelined step (ember_sebc_prefetch / backward_start / backward_finish) -------------
    #
    # Bitwise the plain calls; only when data moves changes. In each step, on every rank:
    #     forward(kjt[i]); prefetch(kjt[i+1]); ... dense forward and backward, where the pooled
    #     gradient is ready: backward_start(kjt[i], grad); ... the rest of the dense backward and
    #     its allreduce; backward_finish(); forward(kjt[i+1]) takes the prefetch.

    def prefetch(self, kjt: KJT) -> None:
        """Starts the NEXT batch's input dist (validated, routed, its exchange in flight); the next
        forward with the same KJT contents on every rank completes it, any other drops it (never a
        different result). Collective. Raises as forward (then nothing is in flight)."""
        self._c.prefetch(self._collective(lambda: self._kjt_parts(kjt)), None)

    def backward_start(self, kjt: KJT, grad_out: Any) -> None:
        """The first half of backward: the checks, then the gradients' exchanges started. Until
        backward_finish only prefetch may be called on the collection (others raise StateError).
        Collective. Raises as backward."""
        def prepare() -> tuple[Any, ...]:
            parts = self._kjt_parts(kjt)
            return parts, self._grad(grad_out, self._out_shape(parts))
        parts, g = self._collective(prepare)
        self._c.backward_start(parts, g)

    def backward_finish(self) -> None:
        """Waits for the started backward's exchanges and applies the fused updates. Collective.
        Raises StateError (no backward started), CommunicationError, CollectiveTimeoutError; on
        failure no table has changed."""
        self._c.backward_finish()

    # ---- optimizer ---------------------------------------------------------------------------

    def _wire_codes(self, spec: Any) -> tuple[int, int]:
        pair = (spec, spec) if isinstance(spec, str) or not isinstance(spec, Sequence) else tuple(spec)
        if len(pair) != 2:
            raise invalid(f"wire_precision: expected a dtype or (forward, backward), got {spec!r}", self._rank)
        return (parse_wire_dtype(pair[0], "wire_precision forward"),
                parse_wire_dtype(pair[1], "wire_precision backward"))

    def _wire_scales(self, spec: Any) -> tuple[float, float]:
        pair = (spec, spec) if not isinstance(spec, Sequence) or isinstance(spec, str) else tuple(spec)
        if len(pair) != 2:
            raise invalid(f"wire_loss_scale: expected a number or (forward, backward), got {spec!r}", self._rank)
        out = []
        for side, v in zip(("forward", "backward"), pair):
            x = as_float(v, f"wire_loss_scale {side}", self._rank)
            if not (np.isfinite(x) and x > 0):
                raise invalid(f"wire_loss_scale {side}: {v!r} is not a positive finite number", self._rank)
            out.append(x)
        return out[0], out[1]

    def set_wire_precision(self, forward: Any, backward: Any = None) -> None:
        """The precision of the values that cross ranks (ember_sebc_set_wire_precision; TorchRec's
        QCommsConfig forward_precision / backward_precision): the pooled rows of the output dist
        travel as ``forward``, their gradients as ``backward`` (None: as forward). "fp32" sends
        them exactly; "fp16" and "bf16" send 2 bytes a value, rounded once to nearest even
        (|error| <= 2^-11 |x| in fp16's normal range, 2^-8 |x| in bf16); "fp8_e4m3" and
        "fp8_e5m2" 1 byte (<= 2^-4 |x| and 2^-3 |x| in their normal ranges, after the loss scale:
        set_wire_loss_scale); "int8" 1 byte plus 8 per row piece (one table piece of one sample),
        quantized row-wise as FBGEMM's fused 8-bit rows (|error| <= the piece's range / 510 +
        1e-8). A row-block partial sum is encoded per partial. A rank's own block stays fp32, as do
        the input dist and the data-parallel gradients. A finite value a float format cannot hold
        (after the loss scale), or a non-finite one under int8, makes that forward or backward
        raise NumericError on every rank before anything is sent. Collective: every rank passes
        the same pair; ranks that differ all raise InvalidArgumentError naming the values."""
        codes = self._collective(lambda: self._wire_codes((forward, forward if backward is None else backward)))
        self._c.set_wire_precision(*codes)

    @property
    def wire_precision(self) -> tuple[str, str]:
        """(forward, backward) precision on the wire, by name ("fp32", "fp16", ...)."""
        fwd, bwd = self._c.wire_precision()
        return dtype_name(fwd), dtype_name(bwd)

    def set_wire_loss_scale(self, forward: Any, backward: Any = None) -> None:
        """The loss scales of the float wire formats (ember_sebc_set_wire_loss_scale; TorchRec's
        QCommsConfig forward_loss_scale / backward_loss_scale): values are multiplied by the
        direction's scale before they are encoded and divided by it after; each finite and > 0
        (None for backward: as forward); 1 changes nothing; int8 ignores them. A power of two
        scales exactly. Collective: every rank passes the same pair (compared exactly)."""
        scales = self._collective(lambda: self._wire_scales((forward, forward if backward is None else backward)))
        self._c.set_wire_loss_scale(*scales)

    @property
    def wire_loss_scale(self) -> tuple[float, float]:
        """(forward, backward) loss scales of the float wire formats (1.0 unless set)."""
        fwd, bwd = self._c.wire_loss_scale()
        return float(fwd), float(bwd)

    def set_lr(self, lr: float, table: Any = None) -> None:
        """Learning rate of ``table`` (None: every table). Local: call it alike on every rank."""
        t = -1 if table is None else self._t(table)
        v = as_float(lr, "set_lr: lr", self._rank)
        self._c.set_lr(t, v)
        for i in (range(len(self._tables)) if t < 0 else (t,)):
            self._tables[i].lr = v

    def step(self, table: Any) -> int:
        """The table's step counter (the same on every rank). Collective."""
        t = self._collective(lambda: self._t(table))
        return self._c.step(t)

    def set_step(self, table: Any, step: int) -> None:
        """Sets the table's step counter on this rank's pieces. Local: call it alike on every rank."""
        self._c.set_step(self._t(table), as_index(step, "set_step: step", rank=self._rank))

    # ---- global state ------------------------------------------------------------------------

    def _root(self, root: Any) -> int:
        r = as_index(root, "root", rank=self._rank)
        if not -1 <= r < self._comm.size:
            raise invalid(f"root: {r} outside [-1, {self._comm.size})", self._rank)
        return r

    def read(self, table: Any, tensor: str = "weight", root: int = -1, dtype: Any = None) -> np.ndarray | None:
        """The table's whole tensor as one global [rows, cols] array (float32, or the weight of a
        16-bit table in its own dtype: float16 / uint16 bits; a hashed table's "ids" int64),
        gathered onto ``root`` (-1: every rank). Returns None on the other ranks. Collective. The
        whole array passes through one rank (checkpoints stream pieces instead: save/load)."""
        def prepare() -> tuple[Any, ...]:
            t = self._t(table)
            rows, cols = self._tensor(t, tensor, "read")
            r, code = self._root(root), self._read_code(t, tensor, dtype)
            out = np.empty((rows, cols), NP_OF_DTYPE[code]) if r in (-1, self._rank) else None
            return t, r, code, out
        t, r, code, out = self._collective(prepare)
        self._c.read(t, tensor, code, r, out)
        result: np.ndarray | None = out
        return result

    def write(self, table: Any, tensor: str, array: Any, root: int = -1) -> None:
        """Scatters a global [rows, cols] array given on ``root`` (-1: every rank passes the same)
        into the table's tensor (rounded into 16-bit storage; a float16 / uint16-bits array of a
        16-bit weight is stored as it is). Other ranks may pass None. Collective."""
        def prepare() -> tuple[Any, ...]:
            t = self._t(table)
            rows, _ = self._tensor(t, tensor, "write")
            r = self._root(root)
            if r in (-1, self._rank):
                a, code = self._state_array(t, tensor, array, rows, "write")
            else:
                a, code = None, DTYPES["fp32"]  # the root's dtype follows
            return t, r, a, code
        t, r, a, code = self._collective(prepare)
        if r >= 0:  # every rank must name the same dtype: the root's
            code = self._bcast_codes([code], r)[0]
        self._c.write(t, tensor, code, r, a)

    def _bcast_codes(self, values: Sequence[int], root: int) -> list[int]:
        buf = np.array(values, np.int64)
        self._c.bcast_i64(buf, root)
        return [int(v) for v in buf]

    def state_dict(self, root: int = -1) -> dict[str, Any] | None:
        """{"<table>.<tensor>": float32 global array, "<table>.step": int} gathered onto root
        (-1: every rank); None on the other ranks. Collective."""
        r = self._collective(lambda: self._root(root))
        d: dict[str, Any] = {}
        for t, name in enumerate(self._table_names):
            for tensor in self._tensors[t]:
                d[f"{name}.{tensor}"] = self.read(t, tensor, r)
            d[f"{name}.step"] = self.step(t)
        return d if r in (-1, self._rank) else None

    def load_state_dict(self, state_dict: Mapping[str, Any] | None, root: int = -1, strict: bool = True) -> None:
        """Writes a state dict given on ``root`` (-1: every rank passes the same; other ranks may
        pass None). With strict, a missing or unexpected key is refused. Everything is checked
        before anything is written. Collective."""
        entries = [(t, tensor) for t in range(len(self._tables)) for tensor in self._tensors[t]]

        def prepare() -> tuple[Any, ...]:
            r = self._root(root)
            arrays: list[Any] = [None] * len(entries)
            flags = np.zeros(len(entries) + len(self._tables), np.int64)  # present / step (-1: absent)
            if r in (-1, self._rank):
                if state_dict is None:
                    raise invalid(f"load_state_dict: no state dict on rank {self._rank} (root {r})", self._rank)
                self._check_state_dict(state_dict, strict)
                for i, (t, tensor) in enumerate(entries):
                    key = f"{self._table_names[t]}.{tensor}"
                    if key in state_dict:
                        arrays[i] = self._state_array(t, tensor, state_dict[key], self._tensors[t][tensor][0], key)
                        flags[i] = 1 + arrays[i][1]  # 1 + dtype code
                for t, name in enumerate(self._table_names):
                    key = f"{name}.step"
                    v = state_dict.get(key)
                    if v is None:
                        flags[len(entries) + t] = -1
                    else:
                        step = as_index(v.item() if isinstance(v, np.ndarray) else v, key, rank=self._rank)
                        if step < 0:
                            raise invalid(f"{key}: negative step {step}", self._rank)
                        flags[len(entries) + t] = step
            return r, arrays, flags
        r, arrays, flags = self._collective(prepare)
        if r >= 0:
            self._c.bcast_i64(flags, r)
        else:  # every rank must pass the same keys, values and steps: agreed before any write
            h = hashlib.blake2b(flags.tobytes(), digest_size=8)
            for a in arrays:
                if a is not None:
                    h.update(memoryview(np.ascontiguousarray(a[0])).cast("B"))
            self._c.agree_digest("load_state_dict", "the state dict (root -1: every rank passes the same keys, values "
                                 "and steps)", int.from_bytes(h.digest(), "little", signed=True))
        for i, (t, tensor) in enumerate(entries):
            if flags[i] > 0:
                a = arrays[i][0] if arrays[i] is not None else None
                self._c.write(t, tensor, int(flags[i]) - 1, r, a)
        for t in range(len(self._tables)):
            step = int(flags[len(entries) + t])
            if step >= 0:
                self._c.set_step(t, step)

    def convert_dtype(self, table: Any, dtype: Any) -> None:
        """Converts the table's weight storage on every rank holding a piece. Collective."""
        t, code = self._collective(lambda: (self._t(table), parse_dtype(dtype)))
        self._c.convert_dtype(t, code)
        self._sync_dtypes()

    def _sync_dtypes(self) -> None:
        for t, code in enumerate(self._c.dtypes()):
            self._dtype_codes[t] = code
            self._tables[t].dtype = dtype_name(code)

    # ---- checkpoints -------------------------------------------------------------------------

    def save(self, dir: str | os.PathLike[str], blobs: Mapping[str, Any] | None = None, chunk_bytes: int = 0,
             delta: bool = False) -> None:
        """Saves every table (and ``blobs``: {name: bytes-like}, identical on every rank) into the
        directory ``dir`` (created if missing, seen by every rank), committed atomically by its
        manifest: a failure or a kill leaves the previous checkpoint loadable. ``delta=True``
        writes only the rows changed since the checkpoint this collection last saved or loaded,
        on top of it (it must be the one in ``dir``): loading the chain is loading the full state.
        Collective. Raises EmberIOError (path and OS reason), InvalidArgumentError (bad blob name;
        a delta with no such checkpoint), ..."""
        def prepare() -> tuple[Any, ...]:
            path = as_path(dir, "save: dir", self._rank)
            items = []
            for name, data in (blobs or {}).items():
                if not isinstance(name, str):
                    raise invalid(f"save: blob name {name!r} is not a string", self._rank)
                if "\0" in name:  # the library takes C strings: refused here, agreed on every rank
                    raise invalid(f"save: blob name {name!r}: expected 1 to 127 letters, digits, '.', '_' or '-' "
                                  f"(a NUL byte in it)", self._rank)
                items.append((name, data if isinstance(data, (bytes, bytearray)) else memoryview(data).cast("B")))
            return path, items, as_index(chunk_bytes, "save: chunk_bytes", *U64, rank=self._rank), bool(delta)
        path, items, chunk, incremental = self._collective(prepare)
        self._c.save(path, items, chunk, incremental)

    def load(self, dir: str | os.PathLike[str], chunk_bytes: int = 0) -> None:
        """Loads every table from a checkpoint saved under any world size and plan (tables matched
        by name; storage converted to the stored dtype; step counters set). Collective. Raises
        EmberIOError, FormatError (a table missing or of another shape, a record failing its
        CRC), ..."""
        path, chunk = self._collective(lambda: (as_path(dir, "load: dir", self._rank),
                                                as_index(chunk_bytes, "load: chunk_bytes", *U64, rank=self._rank)))
        try:
            self._c.load(path, chunk)
        finally:
            if not self._c.closed:
                self._sync_dtypes()

    # ---- properties --------------------------------------------------------------------------

    @property
    def plan(self) -> list[TablePlan]:
        """The TablePlan of each table."""
        return [dataclasses.replace(p) for p in self._plan]

    def reshard(self, plan: Any, *, chunk_bytes: int = 0, batch_size_hint: int = 512,
                topology: Topology | None = None) -> dict[str, float]:
        """Moves every table to another placement while the job runs (ember_sebc_reshard): plan as
        the constructor's ("auto", a scheme name, a list or a dict of TablePlans or names). The
        tables (weights, optimizer state, hashed id maps, tiered rows), step counters, learning
        rates, wire precision and loss scales carry over; the next step is bit for bit that of a
        collection made with the new plan and loaded from a checkpoint of this one. Rows go
        directly between the ranks holding them, at most about chunk_bytes (0: 64 MiB) from a rank
        a round; both placements exist during the move. Returns this rank's bytes_sent and
        bytes_received (to and from other ranks) and the seconds it took. Collective: every rank
        passes the same plan. Raises InvalidArgumentError (a plan the constructor would refuse, or
        ranks that differ), StateError (between backward_start and backward_finish),
        UnsupportedError, OutOfMemoryError, CommunicationError, CollectiveTimeoutError; on failure
        nothing changed."""
        new = self._collective(lambda: _resolve_plan(plan, self._tables, self._comm.size,
                                                     as_index(batch_size_hint, "batch_size_hint", *I32,
                                                              rank=self._rank), topology))
        chunk = self._collective(lambda: as_index(chunk_bytes, "chunk_bytes", 0, rank=self._rank))
        sent, received, seconds = self._c.reshard([p._c_tuple() for p in new], chunk)
        self._plan = new
        return {"bytes_sent": sent, "bytes_received": received, "seconds": seconds}

    def describe_plan(self) -> str:
        return _ember.describe_plan([t._c_tuple() for t in self._tables],
                                    [(f, i) for i, t in enumerate(self._tables) for f in t.feature_names or []],
                                    [p._c_tuple() for p in self._plan])

    def tier_stats(self, table: Any) -> dict[str, int]:
        """A tiered table's cache counters summed over this rank's pieces of it (as
        EmbeddingBagCollection.tier_stats; zero where the rank holds none). Local."""
        return self._c.tier_stats(self._t(table))

    def pieces(self, table: Any) -> list[dict[str, int]]:
        """The blocks of the table this rank holds: row_begin, row_end, col_begin, col_end,
        replicated (data parallel). Local."""
        keys = ("row_begin", "row_end", "col_begin", "col_end", "replicated")
        return [dict(zip(keys, p)) for p in self._c.pieces(self._t(table))]

    @property
    def grad_convention(self) -> str:
        return enum_name(CONVENTIONS, self._conv)

    @property
    def sharding_group_size(self) -> int:
        """The ranks of a sharding group: comm.size, or (2D) the sharding_group_size given."""
        return int(self._c.group_size)

    @property
    def comm(self) -> Comm:
        return self._comm

    @property
    def bytes_sent_last_step(self) -> int:
        """Bytes this rank sent in the last forward + backward."""
        return self._c.bytes_sent_last_step

    @property
    def bytes_outstanding(self) -> int:
        """Bytes the collection's context holds (its shards, workspaces, communicator); 0 once closed."""
        return self._c.bytes_outstanding

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        """Frees this rank's shards and the collection's communicator. Idempotent."""
        self._c.close()

    def __enter__(self) -> ShardedEmbeddingBagCollection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
