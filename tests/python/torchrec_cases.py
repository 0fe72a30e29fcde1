"""The seed scenarios through TorchRec and through ember, side by side, on the same ranks.

Usage (test_torchrec_scenarios.py runs it): EMBER_TORCHREC_PORT=P EMBER_TORCHREC_OUT=FILE
    mpiexec -n 2 python torchrec_cases.py

Every MPI rank is also a gloo rank (torch.distributed, tcp://127.0.0.1:P): TorchRec's
DistributedModelParallel runs its CPU sharding (the CPU sharder offers data_parallel, table_wise,
column_wise and table_column_wise; row-wise needs a GPU, which is recorded as such) and ember's
ShardedEmbeddingBagCollection runs over MPI. Scenarios (docs/semantics.md §2, §3, §5):
  grad_scaling  8 x 4 zeros, SUM, SGD lr 1, rank r looks up ids {2r, 2r+1} (one bag each),
                dL_r/dy = 0.5: the rows after one step
  mean_divisor  weighted MEAN over a 10-row table (the C seed batch): the pooled rows, compared
                with the id-count mean and the weight-sum mean
  dp_bf16       a data-parallel table converted to bf16: what the state dict, the next forward
                and the next step see
Rank 0 writes {scenario: {"ember": ..., "torchrec": ...}} as JSON to FILE. Nothing is asserted
here: the test reads the file, prints both sides, asserts ember's results and, of TorchRec's, only
what TorchRec documents.
"""
import json
import os
import sys
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ember  # noqa: E402
from dist_cases import dtype_batch, mean_batch  # noqa: E402
from oracle import Oracle, bf16_bits, bf16_value  # noqa: E402

warnings.filterwarnings("ignore")


def torchrec_env(rank, W, port):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=W)
    return dist.group.WORLD


def torchrec_model(pg, W, rows, dim, pooling, sharding, weighted, lr):
    """A DistributedModelParallel EmbeddingBagCollection of one table "table" (feature "keys") with
    fused SGD (apply_optimizer_in_backward), the given sharding type forced by the planner, and a
    dense SGD over the remaining parameters (data-parallel tables train through DDP)."""
    import torch
    import torchrec
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingEnv
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    ptype = torchrec.PoolingType.MEAN if pooling == "mean" else torchrec.PoolingType.SUM
    ebc = torchrec.EmbeddingBagCollection(
        tables=[torchrec.EmbeddingBagConfig(name="table", embedding_dim=dim, num_embeddings=rows,
                                            feature_names=["keys"], pooling=ptype)],
        is_weighted=weighted, device=torch.device("meta"))
    apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": lr})
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=W, compute_device="cpu"),
                                       constraints={"table": ParameterConstraints(sharding_types=[sharding])})
    # plan() on every rank (the same inputs give the same plan): a refusal then raises on every
    # rank, where collective_plan would leave the other ranks waiting for rank 0's broadcast.
    plan = planner.plan(ebc, [EmbeddingBagCollectionSharder()])
    model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan,
                                     env=ShardingEnv.from_process_group(pg))
    dense = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(dense, lr=lr) if dense else None
    return model, opt


def _tensors(model):
    return {k: v for k, v in model.state_dict().items() if k.endswith("table.weight")}


def torchrec_write(model, w):
    """Copies the global array w into every local piece of the table (in place)."""
    import torch
    for _, v in _tensors(model).items():
        if hasattr(v, "local_shards"):
            for s in v.local_shards():
                r0, c0 = s.metadata.shard_offsets
                nr, nc = s.metadata.shard_sizes
                with torch.no_grad():
                    s.tensor.copy_(torch.from_numpy(w[r0:r0 + nr, c0:c0 + nc]).to(s.tensor.dtype))
        else:
            with torch.no_grad():
                v.copy_(torch.from_numpy(w).to(v.dtype))


def torchrec_read(model, rank, rows, dim):
    """The table as one float64 array, gathered on every rank (None where gathering fails)."""
    import torch
    import torch.distributed as dist
    for _, v in _tensors(model).items():
        if hasattr(v, "local_shards"):
            full = torch.zeros(rows, dim, dtype=v.dtype) if rank == 0 else None
            v.gather(dst=0, out=full)
            full = full if rank == 0 else torch.zeros(rows, dim, dtype=v.dtype)
            dist.broadcast(full, 0)
            return full.to(torch.float64).numpy()
        return v.detach().to(torch.float64).numpy()
    return None


def torchrec_forward(model, ids, lengths, weights=None):
    import torch
    from torchrec import KeyedJaggedTensor
    kjt = KeyedJaggedTensor(keys=["keys"], values=torch.from_numpy(ids),
                            lengths=torch.from_numpy(lengths.astype(np.int32)),
                            weights=None if weights is None else torch.from_numpy(weights))
    out = model(kjt)
    if hasattr(out, "wait"):
        out = out.wait()
    return out.values() if hasattr(out, "values") else out


def torchrec_step(model, opt, out, grad):
    import torch
    (out * torch.from_numpy(grad)).sum().backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()


def attempt(fn):
    """fn()'s result, or {"error": "..."} when TorchRec cannot run it."""
    try:
        return fn()
    except Exception as e:  # recorded: a scenario TorchRec cannot run is a result too
        return {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")}


# ---- scenarios -------------------------------------------------------------------------------

def grad_scaling(comm, pg):
    W, R = comm.size, comm.rank
    ids = np.array([2 * R, 2 * R + 1], np.int64)
    lengths = np.array([1, 1], np.int32)
    g = np.full((2, 4), 0.5, np.float32)
    res = {"ember": {}, "torchrec": {}}
    t = [ember.TableConfig("table", 8, 4, optimizer="sgd", lr=1.0, init=("zeros",))]
    for scheme in ("dp", "tw", "cw", "rw"):
        for conv in ("mean", "sum"):
            with ember.ShardedEmbeddingBagCollection(t, scheme, comm=comm, grad_convention=conv) as s:
                kjt = ember.KJT(ids, lengths)
                s.forward(kjt)
                s.backward(kjt, g)
                res["ember"]["%s/%s" % (scheme, conv)] = s.read("table", "weight", root=-1)[:, 0].tolist()

    def run(sharding):
        model, opt = torchrec_model(pg, W, 8, 4, "sum", sharding, False, 1.0)
        torchrec_write(model, np.zeros((8, 4), np.float32))
        out = torchrec_forward(model, ids, lengths)
        torchrec_step(model, opt, out, g)
        return torchrec_read(model, R, 8, 4)[:, 0].tolist()

    for sharding in ("data_parallel", "table_wise", "column_wise", "row_wise"):
        res["torchrec"][sharding] = attempt(lambda: run(sharding))
    return res


def mean_divisor(comm, pg):
    W, R = comm.size, comm.rank
    ids, L, wt, _ = mean_batch(R, True)
    res = {"ember": {}, "torchrec": {}}
    t = [ember.TableConfig("table", 10, 4, pooling="mean", optimizer="sgd", lr=1.0, init=("uniform", -1, 1))]
    with ember.EmbeddingBagCollection(t, seed=5) as ref:
        w0 = ref.read("table")
        oracle = Oracle(t, ref.state_dict())
    want = oracle.forward(ids, L, wt)
    # The weight-sum divisor TorchRec's row-wise sharding uses (+1e-6), for comparison.
    by_weights = np.zeros_like(want)
    j = 0
    for b, n in enumerate(L):
        if n:
            by_weights[b] = want[b] * n / (float(np.sum(wt[j:j + n])) + 1e-6)
        j += n
    res["id_count_mean"] = want.tolist()
    res["weight_sum_mean"] = by_weights.tolist()
    for scheme in ("dp", "tw", "cw", "rw", "twrw"):
        with ember.ShardedEmbeddingBagCollection(t, scheme, comm=comm, seed=5) as s:
            res["ember"][scheme] = s.forward(ember.KJT(ids, L, weights=wt)).tolist()

    def run(sharding):
        model, _ = torchrec_model(pg, W, 10, 4, "mean", sharding, True, 1.0)
        torchrec_write(model, w0)
        return torchrec_forward(model, ids, L, wt).detach().numpy().tolist()

    for sharding in ("data_parallel", "table_wise", "column_wise", "row_wise"):
        res["torchrec"][sharding] = attempt(lambda: run(sharding))
    return res


def dp_bf16(comm, pg):
    """Data-parallel table with exact values (the C seed test's): convert to bf16, then read the
    state dict, forward, step, read again. TorchRec's conversion: module.to(torch.bfloat16) on the
    DistributedModelParallel model, the torch way to change a model's dtype."""
    import torch
    W, R = comm.size, comm.rank
    i = np.arange(32)
    v = (np.where((i // 4) % 2 == 1, -1.0, 1.0) * (1.0 + (1 + i % 15) / 16.0) + 3 * 2.0 ** -10)
    v = v.astype(np.float32).reshape(8, 4)
    b16 = bf16_value(bf16_bits(v))
    ids, L, go = dtype_batch(R)
    t = [ember.TableConfig("table", 8, 4, optimizer="sgd", lr=1.0, init=("zeros",))]
    o32 = Oracle(t, {"table.weight": v})
    o16 = Oracle(t, {"table.weight": b16})
    fwd32, fwd16 = o32.forward(ids, L), o16.forward(ids, L)
    parts = [dtype_batch(r) for r in range(W)]
    o16.backward(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), None,
                 np.concatenate([p[2] for p in parts]))
    step16 = bf16_value(bf16_bits(o16.tables[0].w.astype(np.float32)))

    def describe(state, fwd, after):
        return {"state_dict_is_bf16": bool(np.array_equal(state, b16)),
                "state_dict_is_fp32": bool(np.array_equal(state, v)),
                "forward_reads_bf16": bool(np.allclose(fwd, fwd16, atol=1e-6)),
                "forward_reads_fp32": bool(np.allclose(fwd, fwd32, atol=1e-6)),
                "step_trains_bf16_storage": bool(np.array_equal(after, step16)),
                "state_dict_changed_by_step": bool(not np.array_equal(after, state))}

    res = {}
    with ember.ShardedEmbeddingBagCollection(t, "dp", comm=comm, grad_convention="sum") as s:
        s.write("table", "weight", v, root=-1)
        kjt = ember.KJT(ids, L)
        s.forward(kjt)
        s.convert_dtype("table", "bf16")
        state = s.read("table", "weight", root=-1)
        fwd = s.forward(kjt)
        s.backward(kjt, go)
        res["ember"] = describe(state, fwd, s.read("table", "weight", root=-1))

    def run():
        model, opt = torchrec_model(pg, W, 8, 4, "sum", "data_parallel", False, 1.0)
        torchrec_write(model, v)
        torchrec_forward(model, ids, L)
        model = model.to(torch.bfloat16)
        state = torchrec_read(model, R, 8, 4)
        out = torchrec_forward(model, ids, L)
        fwd = out.detach().to(torch.float64).numpy()
        # TorchRec's dp tables average through DDP: W * go gives the GRAD_SUM objective.
        torchrec_step(model, opt, out, (W * go).astype(np.float32))
        return describe(state, fwd, torchrec_read(model, R, 8, 4))

    res["torchrec"] = attempt(run)
    return res


def main():
    comm = ember.Comm(timeout_s=120.0)
    port = int(os.environ["EMBER_TORCHREC_PORT"])
    out_path = os.environ["EMBER_TORCHREC_OUT"]
    try:
        pg = torchrec_env(comm.rank, comm.size, port)
        results = {"world_size": comm.size}
        for name, fn in (("grad_scaling", grad_scaling), ("mean_divisor", mean_divisor), ("dp_bf16", dp_bf16)):
            results[name] = fn(comm, pg)
        if comm.rank == 0:
            with open(out_path, "w") as f:
                json.dump(results, f, indent=1)
        import torch.distributed as dist
        dist.destroy_process_group()
    except Exception:
        sys.stderr.write("rank %d: %s" % (comm.rank, traceback.format_exc()))
        sys.stderr.flush()
        os._exit(3)
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
