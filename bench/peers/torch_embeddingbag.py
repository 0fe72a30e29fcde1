#!/usr/bin/env python3
"""Peer benchmark: torch.nn.EmbeddingBag on CPU, used as a user would for a table-batched
embedding bag: one nn.EmbeddingBag per table (sparse=True, include_last_offset=True), the T pooled
outputs concatenated into [B, T*D] (the layout of FBGEMM's TBE and of ember).

What is timed (per iteration, wall clock, after warm-up):
  fwd                    under torch.no_grad(): T embedding_bag calls (torch's forward-only
                         kernel) + torch.cat.
  train_sgd              forward with autograd + out.backward(dL/dy) + optimizer.step() +
                         zero_grad(set_to_none=True); sparse gradients, torch.optim.SGD.
  train_rowwise_adagrad  the same with torch.optim.Adagrad: torch has no row-wise Adagrad, this is
                         element-wise Adagrad (one state value per weight), marked "note":"adagrad".
  train_adam             the same with torch.optim.SparseAdam (lazy Adam: touched rows only).
  bwd_*                  the backward + step + zero_grad part of the train_* iterations, timed
                         inside the same iterations (not train minus fwd).
All torch sparse optimizers coalesce duplicate ids (sum their gradients) before one update per
touched row, as ember's exact optimizers do; --check (on with --quick) verifies that against a
float64 numpy reference and prints "bench":"tbe_semantics" lines.

gbps is B*T*L*D*sizeof(dtype) (the embedding rows the forward reads) / ms_med, for every op.
residual is max |y - ref| (residual_rel: that / max |ref|) over the first 8 bags of each table, ref a float64 numpy sum of the
stored rows (for train ops: the first forward of the case, before it updates anything).
Threads: torch.set_num_threads(n) per case (ATen's OpenMP pool); cpu_util is process CPU time /
wall time over the timed loop, i.e. how many threads were actually busy.
Huge pages: torch's allocator asks for transparent huge pages only when THP_MEM_ALLOC_ENABLE=1 is
in the environment; the field "thp" records it (off by default, as a user gets it).
"""

import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

OPT_NOTE = {"train_rowwise_adagrad": "adagrad"}


def main(argv=None):
    args = C.parse_args("torch", argv)
    versions = {}
    try:
        import torch
    except Exception as e:
        C.emit_skipped(args, f"torch does not import in {sys.executable}: {C.fail_reason(e)}", versions)
        return 0
    versions = {"torch": torch.__version__}
    # torch's sparse optimizers warn once that sparse invariant checks are off: not our concern.
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    if C.die_if_no_numpy(args, versions):
        return 0
    import numpy as np

    thp = os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

    def make_bags(cfg, dtype, seed):
        gen = torch.Generator().manual_seed(seed)
        bags = []
        for _ in range(cfg["T"]):
            w = torch.empty(cfg["E"], cfg["D"], dtype=tdtype[dtype])
            w.uniform_(-0.05, 0.05, generator=gen)
            bags.append(torch.nn.EmbeddingBag(cfg["E"], cfg["D"], mode="sum", sparse=True,
                                              include_last_offset=True, _weight=w))
        return bags

    def make_opt(op, bags):
        params = [b.weight for b in bags]
        if op == "train_sgd":
            return torch.optim.SGD(params, lr=C.LEARNING_RATE)
        if op == "train_rowwise_adagrad":
            return torch.optim.Adagrad(params, lr=C.LEARNING_RATE, eps=C.EPS, foreach=False)
        if op == "train_adam":
            return torch.optim.SparseAdam(params, lr=C.LEARNING_RATE, betas=C.ADAM_BETAS, eps=C.EPS)
        return None

    def forward(bags, ids_t, offs):
        return torch.cat([bag(ids_t[t], offs) for t, bag in enumerate(bags)], dim=1)

    def residual(out, bags, ids, cfg, pool):
        def rows_of(t, idx):
            return bags[t].weight.detach()[torch.from_numpy(idx)].double().numpy()
        return C.ref_forward_residual(np, out.detach().double().numpy(), rows_of, ids, cfg, pool)

    def dtype_probe(dtype):
        """None if EmbeddingBag forward + sparse backward run in this dtype, else the reason."""
        try:
            bag = torch.nn.EmbeddingBag(10, 4, mode="sum", sparse=True, include_last_offset=True,
                                        dtype=tdtype[dtype])
            y = bag(torch.tensor([1, 2, 2, 3]), torch.tensor([0, 2, 4]))
            y.backward(torch.ones_like(y))
            bag.mode = "mean"
            bag(torch.tensor([1, 2, 2, 3]), torch.tensor([0, 2, 4]))
            return None
        except Exception as e:
            return f"torch {torch.__version__} EmbeddingBag on CPU does not support {dtype}: {C.fail_reason(e)}"

    if args.check:
        semantics_check(args, torch, np, versions, forward, make_opt, tdtype)

    for cfg in args.configs:
        B, L = cfg["B"], cfg["L"]
        offs = torch.arange(0, B * L + 1, L, dtype=torch.int64)
        ids_by_dist = {d: [C.make_ids(np, cfg, d, t, args.seed) for t in range(cfg["T"])]
                       for d in args.dists}
        ids_t_by_dist = {d: [torch.from_numpy(a) for a in v] for d, v in ids_by_dist.items()}
        g64 = C.make_grad(np, cfg, args.seed)
        for dtype in args.dtypes:
            why = dtype_probe(dtype)
            if why:
                C.emit_skipped(args, why, versions, cfg=cfg, dtype=dtype)
                continue
            g = torch.from_numpy(g64).to(tdtype[dtype])
            bags = make_bags(cfg, dtype, args.seed)
            for op in args.ops:
                try:
                    opt = make_opt(op, bags)
                except Exception as e:
                    C.emit_skipped(args, f"optimizer for {op}: {C.fail_reason(e)}", versions, cfg, dtype, op)
                    continue
                for dist in args.dists:
                    ids, ids_t = ids_by_dist[dist], ids_t_by_dist[dist]
                    for pool in args.pools:
                        for b in bags:
                            b.mode = pool
                        for th in args.threads:
                            torch.set_num_threads(th)
                            rec = C.base_record(args, cfg, op, pool, dtype, dist, th, versions)
                            rec["thp"] = thp
                            if op in OPT_NOTE:
                                rec["note"] = OPT_NOTE[op]
                            try:
                                run_case(args, torch, rec, cfg, bags, opt, op, ids, ids_t, offs, g,
                                         forward, residual)
                            except Exception as e:
                                rec["skipped"] = f"failed: {C.fail_reason(e)}"
                                C.emit(rec, args)
                del opt
                for b in bags:
                    b.weight.grad = None
                C.release()
            del bags
            C.release()
    return 0


def run_case(args, torch, rec, cfg, bags, opt, op, ids, ids_t, offs, g, forward, residual):
    dtype, pool = rec["dtype"], rec["pool"]
    if op == "fwd":
        with torch.no_grad():
            C.set_residual(rec, residual(forward(bags, ids_t, offs), bags, ids, cfg, pool))

            def step():
                forward(bags, ids_t, offs)
            ms, _, util = C.time_loop(step, args)
        C.emit(C.fill_timing(rec, ms, cfg, dtype, util), args)
        return

    # First step outside the timed loop: its forward gives the residual (weights not yet updated
    # by this case); it also counts as the first warm-up iteration.
    out = forward(bags, ids_t, offs)
    C.set_residual(rec, residual(out, bags, ids, cfg, pool))
    out.backward(g)
    opt.step()
    opt.zero_grad(set_to_none=True)

    def step():
        y = forward(bags, ids_t, offs)
        t1 = time.perf_counter()
        y.backward(g)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t1
    ms, ms_bwd, util = C.time_loop(step, args)
    C.emit(C.fill_timing(rec, ms, cfg, dtype, util), args)
    bwd = dict(rec)
    bwd["op"] = "bwd_" + op[len("train_"):]
    bwd.pop("residual", None)
    bwd.pop("residual_rel", None)
    bwd["note"] = (rec.get("note", "") + " backward+step+zero_grad timed inside the train iterations").strip()
    C.emit(C.fill_timing(bwd, ms_bwd, cfg, dtype, util), args)


def semantics_check(args, torch, np, versions, forward, make_opt, tdtype):
    """One and two training steps on a tiny table with many duplicate ids, against the float64
    reference of ember's exact semantics (coalesce, then one update per touched row)."""
    cfg = C.CHECK_CFG
    ref_opt = {"train_sgd": "sgd", "train_rowwise_adagrad": "adagrad", "train_adam": "adam"}
    ids = C.check_ids(np, args.seed)
    ids_t = [torch.from_numpy(a) for a in ids]
    offs = torch.arange(0, cfg["B"] * cfg["L"] + 1, cfg["L"])
    g64 = C.make_grad(np, cfg, args.seed)
    for op in [o for o in args.ops if o in ref_opt]:
        for pool in args.pools:
            rec = {"bench": "tbe_semantics", "impl": "torch", "op": op, "pool": pool, "dtype": "fp32",
                   "ref": ref_opt[op], **versions}
            try:
                gen = torch.Generator().manual_seed(5)
                bags = []
                for _ in range(cfg["T"]):
                    w = torch.empty(cfg["E"], cfg["D"]).uniform_(-0.05, 0.05, generator=gen)
                    bags.append(torch.nn.EmbeddingBag(cfg["E"], cfg["D"], mode=pool, sparse=True,
                                                      include_last_offset=True, _weight=w))
                opt = make_opt(op, bags)
                W = [b.weight.detach().double().numpy().copy() for b in bags]
                state = {}
                g = torch.from_numpy(g64).float()
                err = 0.0
                for k in (1, 2):
                    y = forward(bags, ids_t, offs)
                    y.backward(g)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    C.ref_train_step(np, W, state, ids, g64, cfg, pool, ref_opt[op], k)
                    for t in range(cfg["T"]):
                        err = max(err, float(np.max(np.abs(bags[t].weight.detach().double().numpy() - W[t]))))
                rec.update({"max_abs_err": err, "ok": err < 1e-5})
            except Exception as e:
                rec.update({"ok": False, "skipped": f"failed: {C.fail_reason(e)}"})
            C.emit(rec, args)


if __name__ == "__main__":
    sys.exit(main())
