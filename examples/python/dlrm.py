#!/usr/bin/env python3
"""DLRM in PyTorch with ember's sharded embedding tables: the model of `ember train`.

    python examples/python/dlrm.py                       # one process
    mpiexec -n 2 python examples/python/dlrm.py          # 2 ranks: the global batch split over them

Dense arch (bottom MLP, ReLU after every layer) over 13 dense features, 26 ember tables (one per
sparse feature, SUM pooling, row-wise Adagrad fused into the backward, sharded by ember's planner),
the dot interaction (the dense vector, then <T_i, T_j> for i < j over T = [dense; e_0 .. e_25];
ember.torch.InteractionArch, or with --interaction torch the same expression in torch's ops),
the over arch (ReLU after every layer but the last) and BCE with logits. The dense part is data
parallel: its gradients are reduced with ember.torch.allreduce_dense_grads under the same gradient
convention as the tables, so W ranks train what one process trains on the global batch.

Data: the synthetic click logs of `ember train` (examples/python/synthetic_clicks.py, the same
generator as the TorchRec benchmark's), generated up front from --seed; global batch g is the same
whatever the world size, and rank r trains on its contiguous share. Flag names follow
`ember train` (and TorchRec's examples/dlrm/dlrm_main.py). Prints the training loss every --print_interval steps, the
eval AUC at the end, and with --json one line: {"bench":"dlrm","impl":"ember-torch",...}
("ember-torch-compile" with --compile).

--compile BACKEND runs the model under torch.compile (inductor: torch's default; aot_eager: the
eager kernels, the same bits as without it). ember's lookups are torch operators, so the graph
does not break at the tables; the first steps compile (--warmup_batches keeps them out of samples/s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

import ember
import ember.torch

from synthetic_clicks import DEFAULT_ROWS, NUM_DENSE, SyntheticClicks, share

def int_list(text: str) -> list:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected values >= 1, got '{text}'")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--num_embeddings_per_feature", type=int_list, default=DEFAULT_ROWS,
                   help="26 comma-separated table sizes, or one for all")
    p.add_argument("--dense_arch_layer_sizes", type=int_list, default=[64, 16])
    p.add_argument("--over_arch_layer_sizes", type=int_list, default=[64, 32, 1])
    p.add_argument("--sharding", default="auto",
                   help="auto (ember's planner), or dp, tw, cw, rw, twrw, grid for every table")
    p.add_argument("--grad_convention", choices=["mean", "sum"], default="mean")
    p.add_argument("--batch_size", type=int, default=2048, help="global batch, split over the ranks")
    p.add_argument("--limit_train_batches", type=int, default=200)
    p.add_argument("--limit_val_batches", type=int, default=4)
    p.add_argument("--learning_rate", type=float, default=0.05)
    p.add_argument("--embedding_learning_rate", type=float, default=None)
    p.add_argument("--zipf_alpha", type=float, default=1.2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="threads per rank (torch and ember)")
    p.add_argument("--warmup_batches", type=int, default=5, help="steps not counted in samples/s")
    p.add_argument("--print_interval", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print one JSON line with samples/s (rank 0)")
    p.add_argument("--compile", choices=["off", "inductor", "aot_eager"], default="off",
                   help="run the model under torch.compile with this backend")
    p.add_argument("--pipeline", action="store_true",
                   help="train through ember.torch.TrainPipeline (the same numbers, communication overlapped)")
    p.add_argument("--interaction", choices=["ember", "torch"], default="ember",
                   help="the dot interaction: ember.torch.InteractionArch (forward and backward in ember's "
                        "kernels) or the torch expression (bmm, index_select)")
    a = p.parse_args(argv)
    if len(a.num_embeddings_per_feature) == 1:
        a.num_embeddings_per_feature *= 26
    if len(a.num_embeddings_per_feature) != 26:
        p.error(f"--num_embeddings_per_feature: 26 values or one, got {len(a.num_embeddings_per_feature)}")
    if a.dense_arch_layer_sizes[-1] != a.embedding_dim:
        p.error(f"--dense_arch_layer_sizes: the last size must be --embedding_dim "
                f"({a.embedding_dim}), got {a.dense_arch_layer_sizes[-1]}")
    if a.over_arch_layer_sizes[-1] != 1:
        p.error(f"--over_arch_layer_sizes: the last size must be 1, got {a.over_arch_layer_sizes[-1]}")
    for name in ("batch_size", "limit_train_batches", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be >= 1, got {getattr(a, name)}")
    return a


def mlp(sizes, in_features, last_relu):
    layers = []
    for i, n in enumerate(sizes):
        layers.append(torch.nn.Linear(in_features, n))
        if last_relu or i + 1 < len(sizes):
            layers.append(torch.nn.ReLU())
        in_features = n
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, args, comm):
        super().__init__()
        D = args.embedding_dim
        emb_lr = args.embedding_learning_rate if args.embedding_learning_rate is not None else args.learning_rate
        tables = [ember.TableConfig(f"t{f}", rows, D, feature_names=[f"f{f}"], optimizer="rowwise_adagrad",
                                    lr=emb_lr, init=("uniform", -(1.0 / rows) ** 0.5, (1.0 / rows) ** 0.5))
                  for f, rows in enumerate(args.num_embeddings_per_feature)]
        self.dense_arch = mlp(args.dense_arch_layer_sizes, NUM_DENSE, last_relu=True)
        self.sparse_arch = ember.torch.ShardedEmbeddingBagCollection(
            tables, args.sharding, comm=comm, grad_convention=args.grad_convention, seed=args.seed,
            num_threads=args.threads, max_batch_size=share(args.batch_size, comm.size, 0)[1])
        F = len(tables)
        # <T_i, T_j> for i < j, row after row, as flat indices into the [F+1, F+1] Gram matrix
        # (index_select's backward is an index_add: far cheaper than 2-d advanced indexing's).
        pairs = torch.triu_indices(F + 1, F + 1, offset=1)
        self.register_buffer("pairs", pairs[0] * (F + 1) + pairs[1], persistent=False)
        self.interaction = ember.torch.InteractionArch(F, num_threads=args.threads) \
            if args.interaction == "ember" else None
        self.over_arch = mlp(args.over_arch_layer_sizes, D + (F + 1) * F // 2, last_relu=False)
        self.D, self.F = D, F

    def forward(self, dense, values, lengths):
        d = self.dense_arch(dense)
        e = self.sparse_arch(values, lengths)
        if self.interaction is not None:  # ember's fused op: the same values, one fixed order
            return self.over_arch(self.interaction(d, e)).squeeze(1)
        t = torch.cat([d.unsqueeze(1), e.view(-1, self.F, self.D)], dim=1)
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return self.over_arch(torch.cat([d, z], dim=1)).squeeze(1)


def auc(scores, labels):
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    comm = ember.Comm()
    W, r = comm.size, comm.rank
    model = DLRM(args, comm)
    run = model if args.compile == "off" else torch.compile(model, backend=args.compile)
    dense_params = [p for n, p in model.named_parameters()]
    opt = torch.optim.Adagrad(dense_params, lr=args.learning_rate)
    data = SyntheticClicks(args.num_embeddings_per_feature, args.zipf_alpha, args.seed)
    b0, b1 = share(args.batch_size, W, r)
    scale = W * (b1 - b0) / args.batch_size  # rank loss = (W/G) sum of its samples' losses

    def rank_batch(split, index):
        dense, ids, labels, z = data.batch(split, index, args.batch_size)
        ids = np.ascontiguousarray(ids[:, b0:b1]).reshape(-1)
        return (torch.from_numpy(np.ascontiguousarray(dense[b0:b1])), torch.from_numpy(ids),
                torch.ones(ids.size, dtype=torch.int32), torch.from_numpy(np.ascontiguousarray(labels[b0:b1])))

    # Generated up front: samples/s measures training, not numpy's random numbers.
    n_cycle = min(args.limit_train_batches, 64)
    train = [rank_batch(0, i) for i in range(n_cycle)]
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="mean")

    def global_mean(rank_loss):  # the mean BCE over the global batch: (1/W) sum_r L_r
        buf = np.array([float(rank_loss)])
        comm.allreduce_grads(buf, "mean")
        return float(buf[0])

    def rank_loss(m, batch):
        dense, values, lengths, labels = batch
        return loss_fn(m(dense, values, lengths), labels) * scale

    # --pipeline: the same steps through ember.torch.TrainPipeline (the next batch's ids sent
    # ahead, the tables' gradient exchange overlapping the rest of the backward): the same numbers.
    pipe = ember.torch.TrainPipeline(run, opt, model.sparse_arch, lambda b: (b[1], b[2]), rank_loss, comm,
                                     args.grad_convention, dense_params) if args.pipeline else None
    batches = (train[step % n_cycle] for step in range(args.limit_train_batches))
    losses = []
    t0 = time.perf_counter()
    for step in range(args.limit_train_batches):
        if step == args.warmup_batches:
            t0 = time.perf_counter()
        if pipe is not None:
            losses.append(pipe.progress(batches))
        else:
            loss = rank_loss(run, next(batches))
            opt.zero_grad(set_to_none=False)
            loss.backward()  # the tables' fused update happens here
            ember.torch.allreduce_dense_grads(dense_params, comm, args.grad_convention)
            opt.step()
            losses.append(loss.detach())
        if args.print_interval and (step + 1) % args.print_interval == 0:
            global_loss = global_mean(losses[-1])
            if r == 0:
                print(f"step {step + 1:6d}  train loss {global_loss:.5f}", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    loss_first, loss_last = global_mean(losses[0]), global_mean(losses[-1])
    timed = max(args.limit_train_batches - args.warmup_batches, 1)
    samples_per_s = timed * args.batch_size / elapsed

    # Eval: scores of every rank's share gathered through the dense helper's allreduce (sum).
    scores, labels, planted = [], [], []
    with torch.no_grad():
        for i in range(args.limit_val_batches):
            dense, ids, lab, z = data.batch(1, i, args.batch_size)
            part = np.zeros(args.batch_size, dtype=np.float64)
            d = torch.from_numpy(np.ascontiguousarray(dense[b0:b1]))
            v = torch.from_numpy(np.ascontiguousarray(ids[:, b0:b1]).reshape(-1))
            part[b0:b1] = run(d, v, torch.ones(v.numel(), dtype=torch.int32)).double().numpy()
            comm.allreduce_grads(part, "sum")
            scores.append(part)
            labels.append(lab)
            planted.append(z)
    scores, labels, planted = np.concatenate(scores), np.concatenate(labels), np.concatenate(planted)
    if r == 0:
        print(f"done: {args.limit_train_batches} steps, {samples_per_s:.0f} samples/s; eval AUC "
              f"{auc(scores, labels):.4f} (planted {auc(planted, labels):.4f})", file=sys.stderr)
        if args.json:
            impl = "ember-torch" if args.compile == "off" else "ember-torch-compile"
            print(json.dumps({"bench": "dlrm", "impl": impl, "compile": args.compile, "interaction": args.interaction,
                              "pipeline": args.pipeline,
                              "W": W, "threads": args.threads,
                              "batch_size": args.batch_size, "steps": timed,
                              "samples_per_s": round(samples_per_s, 1),
                              "loss_first": loss_first, "loss_last": loss_last,
                              "eval_auc": auc(scores, labels), "planted_auc": auc(planted, labels),
                              "plan": ",".join(p.scheme for p in model.sparse_arch.ebc.plan)}))
    model.sparse_arch.ebc.close()
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
