#!/usr/bin/env python3
"""`ember bench shard`'s workload driven through the Python binding: the binding's own cost.

    mpiexec -n W python bench/python/shard_binding.py [--iters N] [--tables T] [--rows E] ...

The same collection as `ember bench shard` (bench/shard_bench.c): T tables of E rows x D, one
feature each, row-wise Adagrad, seed 7, and the same plan per scheme (tw: table t on rank t mod W;
cw: min(W, D) slices on ranks t+i mod W; twrw: groups of 2; grid: 2 slices x groups of 2; dp, rw),
B samples per rank with L uniform ids per bag, the same gradient pattern. A step is
`forward(kjt)` + `backward(kjt, grad)` from Python: KJT built once, as the C bench does, arrays
passed as numpy arrays. ms per step = median over --iters steps of the slowest rank (a barrier
before each step). One JSON line per scheme on rank 0 with "impl":"ember-python"; compare with
the C bench's `ms_med` in the same run (bench/python/binding_ab.sh alternates the two).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import ember


def plans(scheme: str, T: int, W: int, D: int) -> list:
    out = []
    for t in range(T):
        if scheme == "tw":
            out.append(ember.TablePlan("tw", ranks=[t % W]))
        elif scheme == "cw":
            n = min(W, D)
            out.append(ember.TablePlan("cw", ranks=[(t + i) % W for i in range(n)], num_shards=n))
        elif scheme == "twrw":
            g = 2 if W >= 2 else 1
            out.append(ember.TablePlan("twrw", ranks=[(t * g + i) % W for i in range(g)], group_size=g))
        elif scheme == "grid":
            s, g = (2 if D >= 2 else D), (2 if W >= 2 else 1)
            out.append(ember.TablePlan("grid", ranks=[(t + c + k) % W for c in range(s) for k in range(g)],
                                       num_shards=s, group_size=g))
        else:
            out.append(ember.TablePlan(scheme))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=50000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=512)
    p.add_argument("--pooling", type=int, default=20)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--schemes", default="dp,tw,cw,rw,twrw,grid")
    a = p.parse_args(argv)
    comm = ember.Comm()
    W, R = comm.size, comm.rank
    T, E, D, B, L = a.tables, a.rows, a.dim, a.batch_size, a.pooling
    tables = [ember.TableConfig(f"t{t}", E, D, feature_names=[f"f{t}"], optimizer="rowwise_adagrad")
              for t in range(T)]
    rng = np.random.default_rng([20240611, R])
    kjt = ember.KJT(rng.integers(0, E, T * B * L, dtype=np.int64),
                    lengths=np.full(T * B, L, dtype=np.int32))
    grad = (1e-3 * ((np.arange(B * T * D) % 7) - 3)).astype(np.float32).reshape(B, T * D)
    slot = np.zeros(W)
    for scheme in a.schemes.split(","):
        with ember.ShardedEmbeddingBagCollection(tables, plans(scheme, T, W, D), comm=comm, seed=7,
                                                 max_batch_size=B, max_nnz=T * B * L) as s:
            s.forward(kjt)  # warm-up step
            s.backward(kjt, grad)
            ms = []
            for _ in range(a.iters):
                comm.barrier()
                t0 = time.perf_counter()
                s.forward(kjt)
                s.backward(kjt, grad)
                slot[:] = 0
                slot[R] = (time.perf_counter() - t0) * 1e3
                comm.allreduce_grads(slot, "sum")
                ms.append(slot.max())
            if R == 0:
                print(json.dumps({"bench": "shard", "impl": "ember-python", "scheme": scheme, "W": W, "T": T,
                                  "E": E, "D": D, "B": B, "L": L, "optimizer": "rowwise_adagrad",
                                  "ms_med": round(float(np.median(ms)), 3), "ms_min": round(min(ms), 3),
                                  "iters": a.iters}), flush=True)
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
