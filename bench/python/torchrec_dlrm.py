#!/usr/bin/env python3
"""TorchRec's own DLRM, sharded by DistributedModelParallel on CPU (gloo), as the reference that
`ember train` and ember's PyTorch binding are timed against (bench/python/dlrm_ab.sh).

The model is `ember train`'s defaults (or DLRM-DCNv2 with --interaction dcn, TorchRec's DLRM_DCN,
--dcn_num_layers and --dcn_low_rank_dim as ember train's flags): 13 dense features, 26 tables of the CLI's default sizes
(4 to 100000 rows), D = 16, dense arch 64,16, over arch 64,32,1, pairwise dot interaction, BCE with
logits; global batch 2048 split over the ranks in contiguous shares; row-wise Adagrad fused into
the embeddings (torch.distributed's _apply_optimizer_in_backward with torchrec's RowWiseAdagrad,
which the sharder turns into FBGEMM's EXACT_ROWWISE_ADAGRAD, eps 1e-8 as ember's tables; the tables
the planner makes data parallel are plain parameters after sharding and get torchrec's RowWiseAdagrad
as a separate optimizer, where TorchRec's dlrm_main would give them the dense Adagrad), Adagrad
for the dense part (torch.optim.Adagrad, eps 1e-10 as the CLI's dense Adagrad), lr 0.05. TorchRec's
planner (EmbeddingShardingPlanner, collective_plan) picks the sharding; the plan is reported.

Data: generated up front from --seed, the same global batches for every world size (each rank
takes its contiguous share). Ids are Zipf(--zipf_alpha) ranks through a fixed random permutation
of each table, as the CLI's synthetic set; dense features are log(1 + exp(mu + u)) of Gaussian
latents and labels Bernoulli(sigmoid(planted logit)), the CLI's recipe, but drawn with numpy: the
same kind of data, not the CLI's numbers.

Launch (gloo needs a rendezvous; torchrun gives it):
    torchrun --standalone --nproc_per_node W bench/python/torchrec_dlrm.py [flags]
mpiexec works too (mpiexec -n W python bench/python/torchrec_dlrm.py): rank and size come from
Open MPI's or MPICH's environment, the rendezvous from MASTER_ADDR/MASTER_PORT (default
127.0.0.1:29517).

It trains --warmup_batches untimed steps, then --limit_train_batches timed ones, and rank 0 prints
ONE JSON line:
    {"bench":"dlrm","impl":"torchrec","W":..,"threads":..,"samples_per_s":..,"steps":..,
     "loss_first":..,"loss_last":..,"plan":"..",...}
samples_per_s = timed steps x global batch / wall time of the timed steps (rank 0, between two
barriers). loss_first / loss_last: global mean BCE of the first (warm-up) and last step. plan: the
sharding types TorchRec chose, counted ("data_parallel x18,table_wise x5,row_wise x3"); plan_tables
lists them per table.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

# The data set, the table sizes and the rank shares of the ember example: one generator for both.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from synthetic_clicks import DEFAULT_ROWS, NUM_DENSE, NUM_SPARSE, SyntheticClicks, share  # noqa: E402


def int_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch_size", type=int, default=2048, help="global batch, split over the ranks")
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--num_embeddings_per_feature", type=str, default=None,
                   help="26 comma-separated row counts, or one for all (default: the CLI's sizes)")
    p.add_argument("--dense_arch_layer_sizes", type=str, default="64,16")
    p.add_argument("--over_arch_layer_sizes", type=str, default="64,32,1")
    p.add_argument("--interaction", choices=("dot", "dcn"), default="dot",
                   help="dot: TorchRec's DLRM; dcn: its DLRM_DCN (low-rank cross net), as ember train's flag")
    p.add_argument("--dcn_num_layers", type=int, default=3)
    p.add_argument("--dcn_low_rank_dim", type=int, default=512)
    p.add_argument("--learning_rate", type=float, default=0.05)
    p.add_argument("--limit_train_batches", type=int, default=100, help="timed steps")
    p.add_argument("--warmup_batches", type=int, default=5, help="untimed steps before them")
    p.add_argument("--zipf_alpha", type=float, default=1.2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--verbose", action="store_true", help="keep TorchRec's and torch's warnings")
    p.add_argument("--out", type=str, default=None, help="also append the JSON line to this file")
    a = p.parse_args(argv)
    if a.num_embeddings_per_feature is None:
        a.rows = list(DEFAULT_ROWS)
    else:
        a.rows = int_list(a.num_embeddings_per_feature)
        if len(a.rows) == 1:
            a.rows = a.rows * NUM_SPARSE
    if len(a.rows) != NUM_SPARSE or min(a.rows) < 1:
        p.error(f"--num_embeddings_per_feature: expected 26 positive counts or one, got {a.rows}")
    a.dense = int_list(a.dense_arch_layer_sizes)
    a.over = int_list(a.over_arch_layer_sizes)
    if not a.dense or a.dense[-1] != a.embedding_dim:
        p.error(f"--dense_arch_layer_sizes {a.dense}: the last must equal --embedding_dim {a.embedding_dim}")
    if not a.over or a.over[-1] != 1:
        p.error(f"--over_arch_layer_sizes {a.over}: the last must be 1")
    if a.batch_size < 1 or a.limit_train_batches < 1 or a.warmup_batches < 0 or a.threads < 1:
        p.error("--batch_size, --limit_train_batches, --threads must be >= 1, --warmup_batches >= 0")
    return a


def rank_and_world():
    """(rank, world size) from torchrun's or an MPI launcher's environment; sets what
    init_process_group("env://") reads."""
    for r, w in (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("PMI_RANK", "PMI_SIZE")):
        if r in os.environ and w in os.environ:
            rank, world = int(os.environ[r]), int(os.environ[w])
            break
    else:
        rank, world = 0, 1
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    return rank, world


def make_data(a, num_batches, rank, world):
    """This rank's shares of training batches 0..num_batches-1: a list of (dense [b,13] f32,
    ids [26*b] i64 feature-major, labels [b] f32) (examples/python/synthetic_clicks.py)."""
    data = SyntheticClicks(a.rows, a.zipf_alpha, a.seed)
    b0, b1 = share(a.batch_size, world, rank)
    out = []
    for g in range(num_batches):
        dense, ids, labels, _ = data.batch(0, g, a.batch_size)
        out.append((np.ascontiguousarray(dense[b0:b1]), np.ascontiguousarray(ids[:, b0:b1]).reshape(-1),
                    labels[b0:b1].copy()))
    return out


def plan_summary(plan):
    """({table: sharding type}, "type xN,...") from a torchrec ShardingPlan."""
    tables = {}
    for module_plan in plan.plan.values():
        for table, ps in module_plan.items():
            tables[table] = f"{ps.sharding_type}/{ps.compute_kernel}"
    counts = {}
    for t in tables.values():
        kind = t.split("/")[0]
        counts[kind] = counts.get(kind, 0) + 1
    return tables, ",".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def main(argv):
    a = parse_args(argv)
    rank, world = rank_and_world()
    if not a.verbose:
        # TorchRec's planner and DMP warn at length about things that do not apply on CPU (the
        # topology factory, caching params of data-parallel tables, fbgemm's dense-kernel autograd
        # registration: the data-parallel tables do train, checked by comparing weights).
        import logging
        import warnings
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import torch.distributed as dist
    from torch.distributed.optim import _apply_optimizer_in_backward
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.sharding_plan import get_default_sharders
    from torchrec.models.dlrm import DLRM, DLRM_DCN
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    dist.init_process_group(backend="gloo", rank=rank, world_size=world)
    device = torch.device("cpu")
    torch.manual_seed(a.seed)

    keys = [f"cat_{f}" for f in range(NUM_SPARSE)]
    tables = [EmbeddingBagConfig(name=f"t_cat_{f}", embedding_dim=a.embedding_dim,
                                 num_embeddings=a.rows[f], feature_names=[keys[f]])
              for f in range(NUM_SPARSE)]
    # Built on the meta device, as TorchRec's dlrm_main: DMP materialises each rank's shards.
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    if a.interaction == "dcn":
        model = DLRM_DCN(embedding_bag_collection=ebc, dense_in_features=NUM_DENSE, dense_arch_layer_sizes=a.dense,
                         over_arch_layer_sizes=a.over, dcn_num_layers=a.dcn_num_layers,
                         dcn_low_rank_dim=a.dcn_low_rank_dim, dense_device=device)
    else:
        model = DLRM(embedding_bag_collection=ebc, dense_in_features=NUM_DENSE, dense_arch_layer_sizes=a.dense,
                     over_arch_layer_sizes=a.over, dense_device=device)
    _apply_optimizer_in_backward(RowWiseAdagrad, model.sparse_arch.parameters(),
                                 {"lr": a.learning_rate, "eps": 1e-8})

    b0, b1 = share(a.batch_size, world, rank)
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=world, local_world_size=world, compute_device="cpu"),
        batch_size=max(b1 - b0, 1))
    sharders = get_default_sharders()
    plan = planner.collective_plan(model, sharders, dist.GroupMember.WORLD)
    model = DistributedModelParallel(module=model, device=device, plan=plan, sharders=sharders)
    # What the fused optimizer does not update: the MLPs, and the data-parallel tables, which DMP
    # keeps as plain replicated parameters (DDP allreduces their gradients). TorchRec's dlrm_main
    # gives both its dense Adagrad; here the tables keep row-wise Adagrad, as every table in ember.
    rest = dict(in_backward_optimizer_filter(model.named_parameters()))
    dp_tables = {k: v for k, v in rest.items() if ".embedding_bags." in k}
    mlps = {k: v for k, v in rest.items() if k not in dp_tables}
    opts = [model.fused_optimizer,
            KeyedOptimizerWrapper(mlps, lambda ps: torch.optim.Adagrad(ps, lr=a.learning_rate, eps=1e-10))]
    if dp_tables:
        opts.append(KeyedOptimizerWrapper(dp_tables, lambda ps: RowWiseAdagrad(ps, lr=a.learning_rate, eps=1e-8)))
    optimizer = CombinedOptimizer(opts)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="mean")

    total = a.warmup_batches + a.limit_train_batches
    t_data = time.perf_counter()
    batches = []
    for dense, ids, labels in make_data(a, total, rank, world):
        b = dense.shape[0]
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.from_numpy(ids),
                                                  lengths=torch.ones(NUM_SPARSE * b, dtype=torch.int32))
        batches.append((torch.from_numpy(dense), kjt, torch.from_numpy(labels)))
    t_data = time.perf_counter() - t_data

    def step(batch):
        dense, kjt, labels = batch
        optimizer.zero_grad()
        logits = model(dense, kjt).squeeze(-1)
        loss = loss_fn(logits, labels)
        loss.backward()
        optimizer.step()
        return loss.detach() * labels.shape[0]  # this rank's sum of sample losses

    losses = []
    for g in range(a.warmup_batches):
        losses.append(step(batches[g]))
    dist.barrier()
    t0 = time.perf_counter()
    for g in range(a.warmup_batches, total):
        losses.append(step(batches[g]))
    dist.barrier()
    elapsed = time.perf_counter() - t0
    curve = torch.stack(losses).to(torch.float64)
    dist.all_reduce(curve)  # global sums of sample losses: / G = each global batch's mean
    curve /= a.batch_size
    sums = curve[[0, -1]]
    if a.verbose and rank == 0:
        print("torchrec_dlrm.py: loss per step:", " ".join(f"{x:.4f}" for x in curve.tolist()), file=sys.stderr)
    tables_plan, plan_text = plan_summary(plan)
    if rank == 0:
        line = json.dumps({
            "bench": "dlrm", "impl": "torchrec", "W": world, "threads": a.threads,
            "samples_per_s": round(a.limit_train_batches * a.batch_size / elapsed, 1),
            "steps": a.limit_train_batches, "warmup": a.warmup_batches, "batch_size": a.batch_size,
            "seconds": round(elapsed, 3), "loss_first": round(float(sums[0]), 6),
            "loss_last": round(float(sums[1]), 6), "plan": plan_text, "plan_tables": tables_plan,
            "data_s": round(t_data, 2), "torch": torch.__version__,
            "torchrec": getattr(__import__("torchrec"), "__version__", "?"),
        }, separators=(",", ":"))
        print(line, flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(line + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
