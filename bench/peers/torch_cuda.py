#!/usr/bin/env python3
"""Peer benchmark on the GPU: torch's embedding bags on CUDA, the peers of `ember bench tbe
--backend cuda` (docs/cuda.md), on the same shapes and id distributions (common.make_ids).

One nn.EmbeddingBag per table (mode sum, include_last_offset=True), the T pooled outputs
concatenated into [B, T*D], as a torch user writes it. Timed with CUDA events, median of --iters
after --warmup:
  fwd               under torch.no_grad(): T embedding_bag calls + torch.cat;
  train_sgd         forward with autograd + out.backward(dL/dy) + SGD step + zero_grad, sparse
                    gradients (sparse=True): the sparse training step;
  train_sgd_dense   the same with dense gradients (sparse=False): torch's default.
Usage: torch_cuda.py --shape T,E,D,B,L [--shape ...] --dtype fp32,bf16 --dist uniform,zipf
       [--iters 10] [--warmup 2]. One JSON line per case on stdout; one "skipped" line when torch
or a GPU is missing.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", required=True, help="T,E,D,B,L")
    ap.add_argument("--dtype", default="fp32,bf16")
    ap.add_argument("--dist", default="uniform,zipf")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        import numpy as np
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"bench": "tbe", "impl": "torch", "device": "cuda", "skipped": C.fail_reason(e)}))
        return 0
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(0)
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

    def timed(fn):
        times = []
        for i in range(args.warmup + args.iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(a.elapsed_time(b))
        times.sort()
        n = len(times)
        return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])

    for spec in args.shape:
        T, E, D, B, L = (int(x) for x in spec.split(","))
        cfg = dict(T=T, E=E, D=D, B=B, L=L)
        grad = torch.from_numpy(C.make_grad(np, cfg, C.DEFAULT_SEED)).float().to(dev)
        offsets = torch.arange(0, (B + 1) * L, L, dtype=torch.int64, device=dev)
        for dist in args.dist.split(","):
            ids = [torch.from_numpy(C.make_ids(np, cfg, dist, t, C.DEFAULT_SEED)).to(dev) for t in range(T)]
            for dtype in args.dtype.split(","):
                for op in ("fwd", "train_sgd", "train_sgd_dense"):
                    sparse = op != "train_sgd_dense"
                    bags = [
                        torch.nn.EmbeddingBag(E, D, mode="sum", sparse=sparse, include_last_offset=True, device=dev,
                                              dtype=tdt[dtype])
                        for _ in range(T)
                    ]
                    g = grad.to(tdt[dtype])
                    opt = torch.optim.SGD([p for m in bags for p in m.parameters()], lr=C.LEARNING_RATE)

                    def fwd():
                        return torch.cat([m(ids[t], offsets) for t, m in enumerate(bags)], dim=1)

                    def step():
                        out = fwd()
                        out.backward(g)
                        opt.step()
                        opt.zero_grad(set_to_none=True)

                    if op == "fwd":
                        with torch.no_grad():
                            ms = timed(fwd)
                    else:
                        ms = timed(step)
                    rec = dict(bench="tbe", impl="torch", device="cuda", gpu=gpu, torch=torch.__version__, op=op,
                               pool="sum", dtype=dtype, dist=dist, **cfg, ms=round(ms, 4),
                               gbps=round(B * T * L * D * C.DTYPE_BYTES[dtype] / (ms * 1e6), 1))
                    print(json.dumps(rec), flush=True)
                    del bags, opt
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
