"""ember.torch under MPI (run by test_ember_torch.py with mpiexec -n W, W = 2 and 3; also runs as
one rank): a small DLRM-like model (bottom MLP over dense features, the sharded ember.torch
collection, top MLP, BCE) trained for 5 steps on W ranks gives the same tables and dense
parameters as the same model in one process on the global batch, within 1e-5 relative.

Each rank trains its share of the global batch: rank loss = mean over its B_r samples times
W * B_r / G, so that (1/W) sum_r L_r is the global mean (grad_convention "mean" on the tables,
allreduce_dense_grads "mean" on the dense parameters). The "sum" variant reduces with "sum" and
trains both the tables (all SGD then) and the dense model (SGD) with lr / W: the same steps. Every rank also
trains the one-process reference itself (ember.torch.EmbeddingBagCollection, the same seeds). One case
runs the model under torch.compile (uneven shares, a rank with no samples at W = 3) and checks it
against the eager sharded run too, bit for bit. With torchrec installed, a TorchRec collection converted
by ember.torch.from_torchrec with a TorchRec plan trains as its local conversion on the global batch.
ember.torch.TrainPipeline trains bit for bit as the plain loop (plans auto and rw, uneven shares).

Usage: dist case = python torch_cases.py [plans...]; exit 0 when every rank agrees on success.
"""
import os
import sys
import traceback

import numpy as np
import torch

import ember
import ember.torch

TABLES = [("t0", 37, 8, ["f0", "f1"], "sgd"), ("t1", 11, 8, ["f2"], "rowwise_adagrad"),
          ("t2", 23, 8, ["f3"], "adagrad")]
DENSE_IN = 5
RTOL = 1e-5
STEPS = 5


def tables(lr, sgd_only=False):
    """The tables; sgd_only: every table SGD (the "sum" variant: lr / W is the same step only for SGD)."""
    return [ember.TableConfig(n, r, d, feature_names=f, optimizer="sgd" if sgd_only else o, lr=lr,
                              init=("uniform", -0.3, 0.3))
            for n, r, d, f, o in TABLES]


class DLRM(torch.nn.Module):
    def __init__(self, sparse, emb_dim):
        super().__init__()
        torch.manual_seed(11)  # the same dense initial values on every rank and in the reference
        self.bottom = torch.nn.Sequential(torch.nn.Linear(DENSE_IN, 8), torch.nn.ReLU())
        self.top = torch.nn.Sequential(torch.nn.Linear(8 + emb_dim, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        self.sparse = sparse

    def forward(self, dense, values, lengths):
        return self.top(torch.cat([self.bottom(dense), self.sparse(values, lengths)], dim=1)).squeeze(1)

    def dense_parameters(self):
        return list(self.bottom.parameters()) + list(self.top.parameters())


def global_batch(step, G):
    """(dense [G, DENSE_IN], per-sample id lists per feature, labels [G]) of one step."""
    rng = np.random.default_rng(1000 + step)
    dense = rng.standard_normal((G, DENSE_IN)).astype(np.float32)
    rows = [r for _, r, _, f, _ in TABLES for _ in f]
    ids = [[rng.integers(0, rows[k], rng.integers(0, 4)).astype(np.int64) for _ in range(G)]
           for k in range(len(rows))]
    labels = rng.integers(0, 2, G).astype(np.float32)
    return dense, ids, labels


def batch_slice(batch, b0, b1):
    """Samples [b0, b1) as tensors: dense, values, lengths (bags feature-major), labels."""
    dense, ids, labels = batch
    bags = [ids[k][b] for k in range(len(ids)) for b in range(b0, b1)]
    values = np.concatenate(bags) if bags else np.zeros(0, np.int64)
    lengths = np.array([len(x) for x in bags], np.int32)
    return (torch.from_numpy(dense[b0:b1].copy()), torch.from_numpy(values.astype(np.int64)),
            torch.from_numpy(lengths), torch.from_numpy(labels[b0:b1].copy()))


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    return torch.optim.Adagrad(params, lr=lr)


def train(model, optimizer, shares, rank, W, comm=None, convention="mean", no_grad_eval=False, run=None):
    """`run`: what computes the model's output (the model, or its compiled form)."""
    run = model if run is None else run
    G = sum(shares)
    b0 = sum(shares[:rank])
    b1 = b0 + shares[rank]
    bce = torch.nn.BCEWithLogitsLoss()
    for step in range(STEPS):
        batch = global_batch(step, G)
        dense, values, lengths, labels = batch_slice(batch, b0, b1)
        if no_grad_eval:  # an evaluation forward without grad between steps changes nothing
            with torch.no_grad():
                run(*batch_slice(global_batch(100 + step, G), b0, b1)[:3])
        optimizer.zero_grad()
        loss = bce(run(dense, values, lengths), labels) * (W * (b1 - b0) / G)
        loss.backward()
        if comm is not None:
            ember.torch.allreduce_dense_grads(model.dense_parameters(), comm, convention)
        optimizer.step()


def close(name, got, want, failures, rtol=RTOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    if got.shape != want.shape or err > rtol * scale:
        failures.append("%s: max |diff| %.3g > %.1g x max |want| %.3g" % (name, err, rtol, scale))


def run_case(comm, plan, opt_name, shares, convention, failures, no_grad_eval=False, compiled=False):
    """compiled: the distributed model runs under torch.compile (backend aot_eager, dynamic shapes)
    and must also equal the same model trained eagerly on the same ranks, bit for bit."""
    W, R = comm.size, comm.rank
    lr = 0.05
    emb_dim = sum(d * len(f) for _, _, d, f, _ in TABLES)
    what = "W=%d plan=%s opt=%s shares=%s conv=%s%s%s" % (W, plan, opt_name, shares, convention,
                                                          " no_grad eval" if no_grad_eval else "",
                                                          " compiled" if compiled else "")
    # Reference: one process, the global batch, the mean loss.
    sgd_only = convention == "sum"
    ref = DLRM(ember.torch.EmbeddingBagCollection(tables(lr, sgd_only), seed=5), emb_dim)
    train(ref, make_optimizer(opt_name, ref.parameters(), lr), [sum(shares)], 0, 1)
    # Distributed: "sum" trains with lr / W on the tables and the dense model.
    dlr = lr / W if convention == "sum" else lr
    sparse = ember.torch.ShardedEmbeddingBagCollection(tables(dlr, sgd_only), plan, comm=comm, seed=5,
                                                       grad_convention=convention)
    model = DLRM(sparse, emb_dim)
    run = torch.compile(model, backend="aot_eager", dynamic=True) if compiled else model
    train(model, make_optimizer(opt_name, model.parameters(), dlr), shares, R, W, comm, convention,
          no_grad_eval, run)
    if compiled:
        eager = DLRM(ember.torch.ShardedEmbeddingBagCollection(tables(dlr, sgd_only), plan, comm=comm, seed=5,
                                                               grad_convention=convention), emb_dim)
        train(eager, make_optimizer(opt_name, eager.parameters(), dlr), shares, R, W, comm, convention, no_grad_eval)
        for n, _, _, _, _ in TABLES:
            if not np.array_equal(sparse.ebc.read(n, "weight", root=-1), eager.sparse.ebc.read(n, "weight", root=-1)):
                failures.append("%s: table %s differs from the eager run's" % (what, n))
        for (pn, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
            if not torch.equal(p, q):
                failures.append("%s: dense %s differs from the eager run's" % (what, pn))
        eager.sparse.ebc.close()
    for n, _, _, _, _ in TABLES:
        close("%s: table %s" % (what, n), sparse.ebc.read(n, "weight", root=-1), ref.sparse.ebc.read(n, "weight"),
              failures)
    for (pn, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        close("%s: dense %s" % (what, pn), p.detach().numpy(), q.detach().numpy(), failures)
    # The trained model moved away from its start (the comparison is not of two untouched models).
    start = DLRM(ember.torch.EmbeddingBagCollection(tables(lr), seed=5), emb_dim)
    with torch.no_grad():
        moved = max(float((p - q).abs().max()) for p, q in zip(model.parameters(), start.parameters()))
    if moved < 1e-4:
        failures.append("%s: dense parameters moved only %g" % (what, moved))
    if np.array_equal(sparse.ebc.read("t0", "weight", root=-1), start.sparse.ebc.read("t0")):
        failures.append("%s: table t0 did not train" % what)
    sparse.ebc.close()


def pipeline_case(comm, plan, shares, failures):
    """ember.torch.TrainPipeline against the plain loop on the same ranks: the same losses, tables
    and dense parameters, bit for bit (Adagrad on both sides; shares possibly uneven)."""
    W, R = comm.size, comm.rank
    emb_dim = sum(d * len(f) for _, _, d, f, _ in TABLES)
    G = sum(shares)
    b0, b1 = sum(shares[:R]), sum(shares[:R + 1])
    batches = [batch_slice(global_batch(300 + step, G), b0, b1) for step in range(STEPS)]
    bce = torch.nn.BCEWithLogitsLoss()

    def loss_fn(model, batch):
        dense, values, lengths, labels = batch
        return bce(model(dense, values, lengths), labels) * (W * (b1 - b0) / G)

    def make():
        sparse = ember.torch.ShardedEmbeddingBagCollection(tables(0.05), plan, comm=comm, seed=5)
        model = DLRM(sparse, emb_dim)
        return model, torch.optim.Adagrad(model.parameters(), lr=0.05)

    plain, plain_opt = make()
    plain_losses = []
    for batch in batches:
        loss = loss_fn(plain, batch)
        plain_opt.zero_grad()
        loss.backward()
        ember.torch.allreduce_dense_grads(plain.parameters(), comm)
        plain_opt.step()
        plain_losses.append(loss.detach())
    piped, piped_opt = make()
    pipe = ember.torch.TrainPipeline(piped, piped_opt, piped.sparse, lambda b: (b[1], b[2]), loss_fn, comm)
    calls = {"prefetch": 0, "backward_start": 0, "backward": 0}
    for name in calls:  # count the collection's calls: the pipelined ones, not the plain backward
        def counted(*args, _f=getattr(piped.sparse.ebc, name), _n=name):
            calls[_n] += 1
            return _f(*args)
        setattr(piped.sparse.ebc, name, counted)
    it = iter(batches)
    piped_losses = []
    while True:
        try:
            piped_losses.append(pipe.progress(it))
        except StopIteration:
            break
    what = "TrainPipeline W=%d plan=%s shares=%s" % (W, plan, shares)
    # (a rank without samples has a NaN loss, NaN on both sides)
    if len(piped_losses) != STEPS or not all(np.array_equal(a.numpy(), b.numpy(), equal_nan=True)
                                             for a, b in zip(plain_losses, piped_losses)):
        failures.append("%s: losses %s, plain loop %s" % (what, piped_losses, plain_losses))
    for n, _, _, _, _ in TABLES:
        if not np.array_equal(piped.sparse.ebc.read(n, "weight", root=-1), plain.sparse.ebc.read(n, "weight", root=-1)):
            failures.append("%s: table %s differs from the plain loop's" % (what, n))
    for (pn, p), (_, q) in zip(piped.named_parameters(), plain.named_parameters()):
        if not torch.equal(p, q):
            failures.append("%s: dense %s differs from the plain loop's" % (what, pn))
    if calls != {"prefetch": STEPS - 1, "backward_start": STEPS, "backward": 0}:
        failures.append("%s: calls %s" % (what, calls))
    if piped.sparse.ebc.step("t0") != STEPS:
        failures.append("%s: %d steps taken" % (what, piped.sparse.ebc.step("t0")))
    piped.sparse.ebc.close()
    plain.sparse.ebc.close()


def torchrec_case(comm, failures):
    """ember.torch.from_torchrec with a TorchRec plan (column-wise and table-wise on the last ranks)
    on W ranks: two steps of the sharded conversion equal the local conversion's on the global
    batch (skipped without torchrec)."""
    try:
        from torchrec.distributed.types import ParameterSharding
        from torchrec.modules.embedding_configs import EmbeddingBagConfig
        from torchrec.modules.embedding_modules import EmbeddingBagCollection
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    except Exception:  # noqa: BLE001 - no torchrec here
        return
    W, R = comm.size, comm.rank

    def torchrec_ebc():
        torch.manual_seed(2)
        ebc = EmbeddingBagCollection(tables=[
            EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=f)
            for n, r, d, f, _ in TABLES])
        apply_optimizer_in_backward(torch.optim.Adagrad, ebc.parameters(), {"lr": 0.1, "eps": 1e-8})
        return ebc

    ps = {"t0": ParameterSharding("column_wise", "fused", ranks=[(W - 1 + k) % W for k in range(2)]),
          "t1": ParameterSharding("table_wise", "fused", ranks=[W - 1]),
          "t2": ParameterSharding("row_wise", "fused", ranks=list(range(W)))}
    from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig
    sharded = ember.torch.from_torchrec(torchrec_ebc(), ps, comm=comm, seed=1)
    local = ember.torch.from_torchrec(torchrec_ebc(), seed=1)
    # TorchRec's quantized comms: fp16 forward, bf16 backward on the wire, within their bounds.
    qsharded = ember.torch.from_torchrec(torchrec_ebc(), ps, comm=comm, seed=1,
                                         qcomms=QCommsConfig(forward_precision=CommType.FP16,
                                                             backward_precision=CommType.BF16))
    if qsharded.ebc.wire_precision != ("fp16", "bf16"):
        failures.append("from_torchrec qcomms: wire precision %s" % (qsharded.ebc.wire_precision,))
    # TorchRec's FP8 with a backward loss scale: E4M3 forward, E5M2 backward, the scale carried.
    q8 = ember.torch.from_torchrec(torchrec_ebc(), ps, comm=comm, seed=1,
                                   qcomms=QCommsConfig(forward_precision=CommType.FP8, backward_precision=CommType.FP8,
                                                       backward_loss_scale=1024.0))
    if (q8.ebc.wire_precision, q8.ebc.wire_loss_scale) != (("fp8_e4m3", "fp8_e5m2"), (1.0, 1024.0)):
        failures.append("from_torchrec qcomms fp8: wire %s, loss scales %s" % (q8.ebc.wire_precision,
                                                                               q8.ebc.wire_loss_scale))
    G = 2 * W
    for step in range(2):
        batch = global_batch(200 + step, G)
        _, values, lengths, _ = batch_slice(batch, 0, G)
        _, v, ln, _ = batch_slice(batch, 2 * R, 2 * R + 2)
        # The global loss sum(y^2) (its gradient depends on the forward values, which travel in fp16).
        local(values, lengths).pow(2).sum().backward()
        (sharded(v, ln).pow(2).sum() * W).backward()  # the rank's share, convention "mean"
        (qsharded(v, ln).pow(2).sum() * W).backward()
    for n, _, _, _, _ in TABLES:
        close("from_torchrec W=%d: table %s" % (W, n), sharded.ebc.read(n, "weight", root=-1), local.ebc.read(n),
              failures)
        close("from_torchrec qcomms W=%d: table %s" % (W, n), qsharded.ebc.read(n, "weight", root=-1),
              local.ebc.read(n), failures, rtol=1e-2)  # two steps of 2-byte rounding (bf16: 2^-8)
    sharded.ebc.close()
    qsharded.ebc.close()
    q8.ebc.close()
    local.ebc.close()


def main(argv):
    comm = ember.Comm(timeout_s=120.0)
    W, R = comm.size, comm.rank
    plans = argv[1:] or ["dp", "tw", "cw", "rw", "twrw", "auto"]
    failures = []
    try:
        G = 4 * W
        equal = [G // W] * W
        for plan in plans:
            for opt_name in ("sgd", "adagrad"):
                run_case(comm, plan, opt_name, equal, "mean", failures)
            run_case(comm, plan, "sgd", equal, "sum", failures)  # dense SGD, tables SGD
            if W == 3:
                run_case(comm, plan, "sgd", [1, 4, 7], "mean", failures)
                if plan in ("twrw", "auto"):  # a rank with no samples, Adagrad on both sides
                    run_case(comm, plan, "adagrad", [5, 0, 2], "mean", failures)
        run_case(comm, plans[0], "sgd", equal, "mean", failures, no_grad_eval=True)
        # torch.compile around the sharded module (uneven shares: each rank its own batch size).
        run_case(comm, plans[-1], "adagrad", [1, 2] if W == 2 else [3, 0, 5] if W == 3 else equal, "mean",
                 failures, compiled=True)
        # Per-id weights requiring grad on one rank: the sharded module has no dL/dw; every rank
        # raises UnsupportedError (agreed inside the collective forward), nothing hangs.
        m = ember.torch.ShardedEmbeddingBagCollection(tables(0.1), "rw", comm=comm, seed=1)
        _, v, ln, _ = batch_slice(global_batch(0, W), R, R + 1)
        w = torch.ones(v.shape[0], requires_grad=(R == W - 1))
        try:
            m(v, ln, w)
            failures.append("weights requiring grad: nothing raised")
        except ember.UnsupportedError as e:
            if "(rank %d)" % (W - 1) not in e.message:
                failures.append("weights requiring grad: message %r" % e.message)
        m(v, ln, w.detach()).sum().backward()  # and the module still trains
        if m.ebc.step("t0") != 1:
            failures.append("weights requiring grad: step %d after recovery" % m.ebc.step("t0"))
        torchrec_case(comm, failures)
        for plan in ("auto", "rw"):
            pipeline_case(comm, plan, [1, 2] if W == 2 else [3, 0, 5] if W == 3 else [4] * W, failures)
    except Exception:
        sys.stderr.write("rank %d: unexpected exception:\n%s" % (R, traceback.format_exc()))
        sys.stderr.flush()
        os._exit(3)
    n = np.array([float(len(failures))])
    comm.allreduce_grads(n, convention="sum")
    for f in failures:
        sys.stderr.write("rank %d: %s\n" % (R, f))
    if R == 0:
        print("torch_cases: W=%d plans %s: %d failures over all ranks" % (W, plans, int(n[0])))
    sys.stdout.flush()
    sys.stderr.flush()
    comm.close()
    return 1 if n[0] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
