"""TorchRec -> ember.torch and back: ``from_torchrec`` and ``to_torchrec_state_dict`` (ember.torch
re-exports both; they need torch and torchrec)."""

from __future__ import annotations

import inspect
from typing import Any, Mapping

import torch

import ember
from ember._config import WIRE_DTYPES  # the library's names of the dtypes its wire carries

# TorchRec's fused optimizer classes (torchrec.optim and torch.optim, as apply_optimizer_in_backward
# records them), by class name, with ember's optimizer: the same EmbOptimType pairs as TorchRec's
# own table (torchrec.distributed.utils).
_OPTIMIZERS = {"SGD": "sgd", "Adagrad": "adagrad", "RowWiseAdagrad": "rowwise_adagrad", "Adam": "adam",
               "PartialRowWiseAdam": "partial_rowwise_adam", "LAMB": "lamb",
               "PartialRowWiseLAMB": "partial_rowwise_lamb", "LarsSGD": "lars_sgd"}
# Their keyword arguments, by name, with ember's TableConfig field ("betas" is split in two).
_OPT_KWARGS = {"lr": "lr", "eps": "eps", "weight_decay": "weight_decay", "momentum": "momentum",
               "initial_accumulator_value": "initial_accumulator", "eta": "eta"}
# Arguments that change nothing at these values (a momentum of SGD, not LARS: ember's SGD has none).
_NEUTRAL = {"momentum": 0, "dampening": 0, "nesterov": False, "maximize": False, "amsgrad": False,
            "lr_decay": 0, "decoupled_weight_decay": False}
# Arguments about how torch runs the step, not what it computes.
_IGNORED = ("foreach", "differentiable", "fused", "capturable", "params")
# TorchRec's sharding types, with ember's schemes.
_SCHEMES = {"data_parallel": "dp", "table_wise": "tw", "column_wise": "cw", "row_wise": "rw",
            "table_row_wise": "twrw"}


def _is_ebc(m: Any) -> bool:
    try:
        from torchrec.modules.embedding_modules import EmbeddingBagCollection
    except Exception as e:  # noqa: BLE001 - any import failure means "no torchrec here"
        raise ember.UnsupportedError(f"from_torchrec: torchrec does not import ({e})") from None
    return isinstance(m, EmbeddingBagCollection)


def _optimizer(name: str, weight: Any, given: Any) -> dict[str, Any]:
    """TableConfig fields of the table's fused optimizer: `given` ((class or name, kwargs) for every
    table), else what apply_optimizer_in_backward recorded on its weight."""
    if given is not None:
        cls, kwargs = given
    else:
        classes = getattr(weight, "_optimizer_classes", None)
        if not classes:
            raise ember.InvalidArgumentError(
                f"from_torchrec: table '{name}' has no fused optimizer (give one with "
                f"torchrec.optim.apply_optimizer_in_backward, or optimizer=(\"rowwise_adagrad\", {{\"lr\": 0.01}}))")
        if len(classes) != 1:
            raise ember.UnsupportedError(f"from_torchrec: table '{name}' has {len(classes)} in-backward optimizers")
        cls, kwargs = classes[0], weight._optimizer_kwargs[0]
    key = cls if isinstance(cls, str) else cls.__name__
    opt = _OPTIMIZERS.get(key, key.lower() if isinstance(cls, str) else None)
    if opt is None:
        raise ember.UnsupportedError(f"from_torchrec: table '{name}': optimizer {key} has no ember counterpart "
                                     f"(one of {', '.join(_OPTIMIZERS)})")
    fields: dict[str, Any] = {"optimizer": opt}
    args = dict(kwargs or {})
    if not isinstance(cls, str):  # the class's own defaults for what the call left out (torch's eps...)
        try:
            params = inspect.signature(cls.__init__).parameters.values()
        except (TypeError, ValueError):
            params = ()
        for p in params:
            if p.default is not inspect.Parameter.empty and p.name not in args:
                args[p.name] = p.default
    for k, v in args.items():
        if k == "betas":
            fields["beta1"], fields["beta2"] = float(v[0]), float(v[1])
        elif k in _OPT_KWARGS and (k != "momentum" or opt == "lars_sgd"):
            fields[_OPT_KWARGS[k]] = float(v)
        elif k == "weight_decay_mode":
            fields[k] = str(getattr(v, "name", v)).lower()
        elif k in _NEUTRAL and v in (_NEUTRAL[k], None) or k in _IGNORED:
            continue
        else:
            raise ember.UnsupportedError(f"from_torchrec: table '{name}': {key} argument {k}={v!r} has no "
                                         f"ember counterpart")
    return fields


def _tables(ebc: Any, optimizer: Any) -> list["ember.TableConfig"]:
    tables = []
    for c in ebc.embedding_bag_configs():
        pooling = getattr(c.pooling, "name", str(c.pooling)).lower()
        dtype = getattr(c.data_type, "name", str(c.data_type)).lower()
        if dtype not in ("fp32", "fp16", "bf16"):
            raise ember.UnsupportedError(f"from_torchrec: table '{c.name}': data type {dtype} (ember stores fp32, "
                                         f"fp16, bf16)")
        init = ("uniform", float(c.get_weight_init_min()), float(c.get_weight_init_max()))
        weight = ebc.embedding_bags[c.name].weight
        tables.append(ember.TableConfig(c.name, int(c.num_embeddings), int(c.embedding_dim),
                                        feature_names=list(c.feature_names), pooling=pooling, dtype=dtype,
                                        init=init, **_optimizer(c.name, weight, optimizer)))
    return tables


def plan_from_torchrec(plan: Mapping[str, Any], tables: Any) -> dict[str, "ember.TablePlan"]:
    """ember TablePlans of a TorchRec module plan (table name -> ParameterSharding; TorchRec's
    EmbeddingModuleShardingPlan). data_parallel, table_wise, column_wise (equal column slices),
    row_wise and table_row_wise map to dp, tw, cw, rw, twrw on the same ranks; row-wise tables
    split their rows by ember's rule (where the rows sit does not change a number). Raises
    InvalidArgumentError (a table missing or unknown), UnsupportedError (another sharding type,
    uneven column slices)."""
    names = [t.name for t in tables]
    dims = {t.name: t.embedding_dim for t in tables}
    plan = {k[len("embedding_bags."):] if k.startswith("embedding_bags.") else k: v for k, v in plan.items()}
    if sorted(plan) != sorted(names):
        raise ember.InvalidArgumentError(f"from_torchrec: the plan's tables {sorted(plan)} are not the collection's "
                                         f"{sorted(names)}")
    out = {}
    for name in names:
        ps = plan[name]
        kind = str(getattr(ps.sharding_type, "value", ps.sharding_type)).lower()
        if kind not in _SCHEMES:
            raise ember.UnsupportedError(f"from_torchrec: table '{name}': sharding type {kind} (ember takes "
                                         f"{', '.join(_SCHEMES)})")
        ranks = tuple(int(r) for r in (ps.ranks or ()))
        scheme = _SCHEMES[kind]
        if scheme == "tw":
            out[name] = ember.TablePlan("tw", ranks[:1])
        elif scheme == "cw":
            shards = getattr(ps.sharding_spec, "shards", None) or []
            widths = [int(s.shard_sizes[1]) for s in shards]
            if widths and len(set(widths)) != 1 or (not widths and dims[name] % max(len(ranks), 1)):
                raise ember.UnsupportedError(f"from_torchrec: table '{name}': column slices of widths "
                                             f"{widths or dims[name]} (ember's are equal)")
            out[name] = ember.TablePlan("cw", ranks, num_shards=len(ranks))
        elif scheme == "twrw":
            out[name] = ember.TablePlan("twrw", ranks, group_size=len(ranks))
        else:
            out[name] = ember.TablePlan(scheme)
    return out


def wire_precision_from_qcomms(qcomms: Any) -> tuple[tuple[str, str], tuple[float, float]]:
    """ember's wire precision and loss scales for TorchRec's ``QCommsConfig``:
    ((forward, backward), (forward_loss_scale, backward_loss_scale)). CommType FP32, FP16, BF16
    and INT8 map to the dtypes of those names; FP8 to "fp8_e4m3" forward and, backward,
    "fp8_e5m2" (or "fp8_e4m3" with fp8_bwd_uses_143, as TorchRec); an unset loss scale is 1.
    MX4, and row-wise fp8 (fp8_quantize_dim), are refused with UnsupportedError."""
    out = []
    for side in ("forward", "backward"):
        prec = getattr(qcomms, f"{side}_precision", None)
        name = str(getattr(prec, "value", prec)).lower()
        if name == "fp8":
            if getattr(qcomms, "fp8_quantize_dim" if side == "forward" else "fp8_quantize_dim_bwd", None) is not None:
                raise ember.UnsupportedError(f"from_torchrec: qcomms {side}: row-wise fp8 (fp8_quantize_dim) is not "
                                             "ember's fp8, which is scaled by the loss scale")
            name = "fp8_e4m3" if side == "forward" or getattr(qcomms, "fp8_bwd_uses_143", False) else "fp8_e5m2"
        if name not in WIRE_DTYPES:
            raise ember.UnsupportedError(f"from_torchrec: qcomms {side}_precision {name!r}: ember's wire carries "
                                         f"{', '.join(WIRE_DTYPES)}")
        out.append(name)
    scales = tuple(float(getattr(qcomms, f"{side}_loss_scale", None) or 1.0) for side in ("forward", "backward"))
    return (out[0], out[1]), (scales[0], scales[1])


def _convert_one(ebc: Any, plan: Any, comm: Any, optimizer: Any, kwargs: dict[str, Any]) -> Any:
    import ember.torch as et

    tables = _tables(ebc, optimizer)
    kwargs = dict(kwargs)
    qcomms = kwargs.pop("qcomms", None)
    wire = None if qcomms is None else wire_precision_from_qcomms(qcomms)  # checked local or not
    if plan is None and comm is None:  # one process: nothing crosses a wire
        module = et.EmbeddingBagCollection(tables, **kwargs)
    else:
        if wire is not None:
            kwargs["wire_precision"], kwargs["wire_loss_scale"] = wire
        ember_plan = "auto" if plan is None else plan if isinstance(plan, str) else plan_from_torchrec(plan, tables)
        module = et.ShardedEmbeddingBagCollection(tables, ember_plan, comm=comm, **kwargs)
    weights = {f"embedding_bags.{t.name}.weight": ebc.embedding_bags[t.name].weight for t in tables}
    if not any(w.is_meta for w in weights.values()):  # a model built on the meta device keeps ember's init
        module.load_state_dict({k: w.detach().to("cpu", torch.float32) for k, w in weights.items()})
    return module


def from_torchrec(module: Any, plan: Any = None, *, comm: Any = None, optimizer: Any = None, **kwargs: Any) -> Any:
    """ember.torch modules for TorchRec's ``EmbeddingBagCollection``: the same tables (its
    EmbeddingBagConfigs: names, sizes, features, pooling, data type, init range), the same
    weights (copied; none from the meta device), the fused optimizer recorded on each weight by
    ``apply_optimizer_in_backward`` (or ``optimizer=(name or class, kwargs)`` for every table).

    ``module``: an EmbeddingBagCollection (returns the ember module), or a model holding some
    (each replaced in place at its path, so that the model's state_dict keys stay TorchRec's;
    returns the model). ``plan``: None (no ``comm``: the local collection; with one: the
    planner), a scheme name or "auto", or TorchRec's plan (an EmbeddingModuleShardingPlan: table
    name -> ParameterSharding; for a model a ShardingPlan or a dict module path -> such a plan)
    mapped by :func:`plan_from_torchrec`. ``qcomms``: TorchRec's ``QCommsConfig`` (the sharder's
    quantized comms), mapped to the sharded collection's ``wire_precision``
    (:func:`wire_precision_from_qcomms`). Other keywords go to ember's collection (seed,
    num_threads, grad_convention, ...). Sharded: Collective on ``comm``."""
    if _is_ebc(module):
        return _convert_one(module, plan, comm, optimizer, kwargs)
    found = [(path, m) for path, m in module.named_modules() if _is_ebc(m)]
    if not found:
        raise ember.InvalidArgumentError(f"from_torchrec: {type(module).__name__} holds no TorchRec "
                                         f"EmbeddingBagCollection")
    plans = getattr(plan, "plan", plan)  # a ShardingPlan's dict
    for path, ebc in found:
        sub = plans.get(path) if isinstance(plans, Mapping) else plans
        if isinstance(plans, Mapping) and sub is None:
            raise ember.InvalidArgumentError(f"from_torchrec: the plan has no entry for module '{path}' (it has "
                                             f"{sorted(plans)})")
        new = _convert_one(ebc, sub, comm, optimizer, kwargs)
        parent_path, _, attr = path.rpartition(".")
        setattr(module.get_submodule(parent_path) if parent_path else module, attr, new)
    return module


def to_torchrec_state_dict(module: Any) -> dict[str, torch.Tensor]:
    """The state dict TorchRec's model (or EmbeddingBagCollection) loads: every tensor of
    ``module.state_dict()``, ember tables under TorchRec's keys (``...embedding_bags.<table>.weight``,
    float32 [rows, dim]; load_state_dict casts to a table's data type). Optimizer state is not in
    it (TorchRec keeps it in the fused optimizer's state_dict; ember's checkpoints hold it).
    Sharded modules: Collective (every rank gets every table)."""
    return {k: v for k, v in module.state_dict().items() if v is not None}
