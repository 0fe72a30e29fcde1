"""Shared pieces of ember's peer benchmarks (torch_embeddingbag.py, fbgemm_tbe.py).

Nothing here imports torch, and numpy is imported only where ids or references are computed, so
that a peer script can still enumerate its cases and print `"skipped"` lines when the peer
library (or numpy) cannot be imported.

Output: one JSON object per line (the fields of bench/README.md, "The line"), on stdout or appended to --out.

Id generation recipe (ember's C bench reproduces the distribution, not the exact stream):
  * every (table t, distribution) pair has its own numpy generator,
    `np.random.default_rng([seed, t, DIST_CODE[dist]])` with seed 20240611 by default and
    DIST_CODE = {"uniform": 0, "zipf": 1};
  * bag b of table t holds ids[b*L:(b+1)*L]: the bag size is fixed at L (FBGEMM's bench does the
    same with its default --bag-size); ids may repeat inside a bag and across bags;
  * uniform: `ids = rng.integers(0, E, size=B*L)`: every row equally likely;
  * zipf(alpha=1.05), truncated to E ranks: rank r in [0, E) has probability
    (r+1)^-alpha / H, H = sum_{k=1..E} k^-alpha. Draw u = rng.random() (uniform in [0,1)) and take
    the smallest r with cdf[r] > u (inverse CDF; cdf in float64, cdf[E-1] set to 1.0). The rank is
    then scattered over the table with the bijection id = (r * 2654435761) mod E (the multiplier
    is odd and ends in 1, so it is coprime with any E = 2^a 5^b, such as 1e5 and 1e6): hot rows are
    spread over the table instead of packed at its start, as hashed feature ids are. In C:
    `id = (uint64_t)r * 2654435761u % E`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time

ZIPF_ALPHA = 1.05
ZIPF_SCATTER = 2654435761
DIST_CODE = {"uniform": 0, "zipf": 1}
DEFAULT_SEED = 20240611

# FBGEMM's benchmark configuration (fbgemm_gpu/bench: --num-tables 32 --num-embeddings 1e5
# --embedding-dim 128 --batch-size 512 --bag-size 20), and the same with larger, fewer tables.
CONFIGS = {
    "quick": [dict(T=4, E=1000, D=32, B=16, L=5)],
    "small": [dict(T=32, E=100_000, D=128, B=512, L=20)],
    "full": [dict(T=32, E=100_000, D=128, B=512, L=20), dict(T=8, E=1_000_000, D=128, B=512, L=20)],
}
ALL_OPS = ["fwd", "train_sgd", "train_rowwise_adagrad", "train_adam"]
ALL_POOLS = ["sum", "mean"]
ALL_DISTS = ["uniform", "zipf"]
ALL_DTYPES = ["fp32", "bf16", "fp16"]
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
LEARNING_RATE = 0.01
EPS = 1e-8
ADAM_BETAS = (0.9, 0.999)


def _csv(s):
    return [x for x in s.split(",") if x]


def parse_args(impl, argv=None, extra=None):
    p = argparse.ArgumentParser(description=f"ember peer benchmark: {impl} (JSON lines on stdout)")
    if extra:
        extra(p)
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, 2 timed iterations, plus the semantics check: a smoke test")
    p.add_argument("--config", choices=["small", "full"], default="small",
                   help="small: T=32 E=1e5; full: that and T=8 E=1e6 (D=128 B=512 L=20)")
    p.add_argument("--threads", default="1", help="comma list of thread counts, e.g. 1,2")
    p.add_argument("--ops", default=",".join(ALL_OPS), help="comma list from " + ",".join(ALL_OPS))
    p.add_argument("--pools", default=",".join(ALL_POOLS))
    p.add_argument("--dists", default=",".join(ALL_DISTS))
    p.add_argument("--dtypes", default="fp32,bf16", help="comma list from " + ",".join(ALL_DTYPES))
    p.add_argument("--iters", type=int, default=10, help="minimum timed iterations (after warm-up)")
    p.add_argument("--min-time", type=float, default=0.5,
                   help="keep timing until this many seconds have passed as well (capped at 200 iters)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--check", action="store_true",
                   help="also run the optimizer-semantics check (always on with --quick)")
    p.add_argument("--out", default=None, help="append JSON lines to this file as well as stdout")
    a = p.parse_args(argv)
    a.impl = impl
    a.threads = [int(t) for t in _csv(a.threads)]
    a.ops = _csv(a.ops)
    a.pools = _csv(a.pools)
    a.dists = _csv(a.dists)
    a.dtypes = _csv(a.dtypes)
    for name, vals, allowed in (("ops", a.ops, ALL_OPS), ("pools", a.pools, ALL_POOLS),
                                ("dists", a.dists, ALL_DISTS), ("dtypes", a.dtypes, ALL_DTYPES)):
        bad = [v for v in vals if v not in allowed]
        if bad:
            p.error(f"--{name}: unknown {bad}; choose from {allowed}")
    if a.quick:
        a.configs = CONFIGS["quick"]
        a.iters, a.warmup, a.min_time = 2, 1, 0.0
        a.check = True
    else:
        a.configs = CONFIGS[a.config]
    return a


_out_file = None


def emit(obj, args=None):
    """Prints one JSON line (and appends it to --out when given)."""
    global _out_file
    line = json.dumps(obj, separators=(",", ":"))
    print(line, flush=True)
    if args is not None and args.out:
        if _out_file is None:
            _out_file = open(args.out, "a", encoding="utf-8")
        _out_file.write(line + "\n")
        _out_file.flush()


def base_record(args, cfg, op, pool, dtype, dist, threads, versions):
    rec = {"bench": "tbe", "impl": args.impl, "op": op, "pool": pool, "dtype": dtype,
           "T": cfg["T"], "E": cfg["E"], "D": cfg["D"], "B": cfg["B"], "L": cfg["L"],
           "dist": dist, "threads": threads}
    rec.update(versions)
    return rec


def cases(args, cfg, dtype=None, op=None):
    """Every (op, pool, dtype, dist, threads) case of one configuration, optionally filtered."""
    for d in ([dtype] if dtype else args.dtypes):
        for o in ([op] if op else args.ops):
            for dist in args.dists:
                for pool in args.pools:
                    for th in args.threads:
                        yield o, pool, d, dist, th


def emit_skipped(args, reason, versions, cfg=None, dtype=None, op=None):
    """One line per case that will not run, with the exact reason."""
    for c in ([cfg] if cfg else args.configs):
        for o, pool, d, dist, th in cases(args, c, dtype, op):
            rec = base_record(args, c, o, pool, d, dist, th, versions)
            rec["skipped"] = reason
            emit(rec, args)


def machine_info():
    return {"host_cpus": os.cpu_count(), "machine": platform.machine()}


# ---------------------------------------------------------------------------------------------
# Ids.

def make_ids(np, cfg, dist, t, seed):
    """ids of table t: B*L int64 values, bag b is ids[b*L:(b+1)*L] (recipe in the module doc)."""
    E, n = cfg["E"], cfg["B"] * cfg["L"]
    rng = np.random.default_rng([seed, t, DIST_CODE[dist]])
    if dist == "uniform":
        return rng.integers(0, E, size=n, dtype=np.int64)
    cdf = _zipf_cdf(np, E, ZIPF_ALPHA)
    r = np.searchsorted(cdf, rng.random(n), side="right")
    r = np.minimum(r, E - 1).astype(np.uint64)
    return ((r * np.uint64(ZIPF_SCATTER)) % np.uint64(E)).astype(np.int64)


_cdf_cache = {}


def _zipf_cdf(np, E, alpha):
    key = (E, alpha)
    if key not in _cdf_cache:
        p = np.arange(1, E + 1, dtype=np.float64) ** (-alpha)
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        cdf[-1] = 1.0
        _cdf_cache[key] = cdf
    return _cdf_cache[key]


def make_grad(np, cfg, seed):
    """The upstream gradient dL/dy, [B, T*D] float64 in N(0,1), the same for every case."""
    rng = np.random.default_rng([seed, 1_000_003])
    return rng.standard_normal((cfg["B"], cfg["T"] * cfg["D"]))


# ---------------------------------------------------------------------------------------------
# References.

def ref_forward_residual(np, out, rows_of, ids, cfg, pool, nbags=8):
    """(max |out - ref|, that / max |ref|) over the first nbags bags of every table.

    out: [B, T*D] array (float64-convertible); rows_of(t, idx) -> float64 [len(idx), D] array of
    the stored rows; ids: list of per-table id arrays. The reference sums in float64 and MEAN
    divides by the bag length (the id count), as FBGEMM and ember do.
    """
    D, L = cfg["D"], cfg["L"]
    nb = min(nbags, cfg["B"])
    worst, scale = 0.0, 0.0
    for t in range(cfg["T"]):
        idx = ids[t][: nb * L]
        rows = rows_of(t, idx).reshape(nb, L, D)
        ref = rows.sum(axis=1)
        if pool == "mean":
            ref = ref / L
        got = np.asarray(out[:nb, t * D:(t + 1) * D], dtype=np.float64)
        worst = max(worst, float(np.max(np.abs(got - ref))))
        scale = max(scale, float(np.max(np.abs(ref))))
    return worst, (worst / scale if scale > 0 else worst)


def ref_train_step(np, W, state, ids, g, cfg, pool, opt, step):
    """One exact training step in float64, in place on W (list of [E, D]) and state.

    Duplicate ids are coalesced first (their gradients summed), then each touched row gets one
    update; untouched rows are left alone (docs/semantics.md §4). opt:
      sgd:              w -= lr * G
      rowwise_adagrad:  m += mean(G^2 over the row); w -= lr * G / (sqrt(m) + eps)   (FBGEMM)
      adagrad:          s += G^2 (per element);      w -= lr * G / (sqrt(s) + eps)   (torch)
      adam (lazy, torch SparseAdam): m = b1 m + (1-b1) G; v = b2 v + (1-b2) G^2;
                        w -= lr * sqrt(1-b2^k)/(1-b1^k) * m / (sqrt(v) + eps)
    """
    D, L, B = cfg["D"], cfg["L"], cfg["B"]
    b1, b2 = ADAM_BETAS
    for t in range(cfg["T"]):
        G = np.zeros_like(W[t])
        gt = g[:, t * D:(t + 1) * D]
        scale = 1.0 / L if pool == "mean" else 1.0
        for b in range(B):
            for i in ids[t][b * L:(b + 1) * L]:
                G[i] += gt[b] * scale
        touched = np.unique(ids[t])
        Gt = G[touched]
        if opt == "sgd":
            W[t][touched] -= LEARNING_RATE * Gt
        elif opt == "rowwise_adagrad":
            m = state.setdefault(("m", t), np.zeros(W[t].shape[0]))
            m[touched] += np.mean(Gt * Gt, axis=1)
            W[t][touched] -= LEARNING_RATE * Gt / (np.sqrt(m[touched])[:, None] + EPS)
        elif opt == "adagrad":
            s = state.setdefault(("s", t), np.zeros_like(W[t]))
            s[touched] += Gt * Gt
            W[t][touched] -= LEARNING_RATE * Gt / (np.sqrt(s[touched]) + EPS)
        elif opt == "adam":
            m = state.setdefault(("m", t), np.zeros_like(W[t]))
            v = state.setdefault(("v", t), np.zeros_like(W[t]))
            m[touched] = b1 * m[touched] + (1 - b1) * Gt
            v[touched] = b2 * v[touched] + (1 - b2) * Gt * Gt
            step_size = LEARNING_RATE * (1 - b2 ** step) ** 0.5 / (1 - b1 ** step)
            W[t][touched] -= step_size * m[touched] / (np.sqrt(v[touched]) + EPS)
        else:
            raise ValueError(opt)


# The semantics check: few rows, so ids repeat inside bags and across bags.
CHECK_CFG = dict(T=2, E=12, D=8, B=6, L=5)


def check_ids(np, seed):
    rng = np.random.default_rng([seed, 77])
    ids = [rng.integers(0, 7, size=CHECK_CFG["B"] * CHECK_CFG["L"], dtype=np.int64)
           for _ in range(CHECK_CFG["T"])]
    ids[0][:CHECK_CFG["L"]] = 3  # one bag that is a single id five times
    return ids


# ---------------------------------------------------------------------------------------------
# Timing.

def time_loop(step, args, budget_iters=200):
    """Runs step() args.warmup times untimed, then at least args.iters timed times (and until
    args.min_time seconds have passed, at most budget_iters).

    step() returns None, or the seconds spent in its second phase (backward + optimizer) which are
    collected separately. Returns (ms list, phase-2 ms list, cpu_util) where cpu_util is process
    CPU time / wall time over the timed loop: about the number of busy threads.
    """
    for _ in range(args.warmup):
        step()
    ms, ms2 = [], []
    c0, w0 = time.process_time(), time.perf_counter()
    while True:
        t0 = time.perf_counter()
        s2 = step()
        ms.append((time.perf_counter() - t0) * 1e3)
        if s2 is not None:
            ms2.append(s2 * 1e3)
        n = len(ms)
        if n >= args.iters and (time.perf_counter() - w0 >= args.min_time or n >= budget_iters):
            break
    wall = time.perf_counter() - w0
    # Process CPU time is too coarse to say anything over a few milliseconds (--quick).
    cpu_util = (time.process_time() - c0) / wall if wall >= 0.05 else None
    return ms, ms2, cpu_util


def set_residual(rec, res):
    """Stores ref_forward_residual's pair: "residual" (absolute, as bench/README.md names it) and
    "residual_rel" (relative to the largest reference value: training grows the weights, and
    16-bit outputs round relative to their magnitude)."""
    rec["residual"], rec["residual_rel"] = res[0], res[1]


def fill_timing(rec, ms, cfg, dtype, cpu_util):
    med = statistics.median(ms)
    nbytes = cfg["B"] * cfg["T"] * cfg["L"] * cfg["D"] * DTYPE_BYTES[dtype]
    rec.update({"ms_med": round(med, 4), "ms_min": round(min(ms), 4),
                "gbps": round(nbytes / (med * 1e-3) / 1e9, 3), "iters": len(ms),
                "cpu_util": None if cpu_util is None else round(cpu_util, 2), "load1": round(os.getloadavg()[0], 2)})
    return rec


def release():
    gc.collect()


def fail_reason(exc):
    """An exception as a one-line reason."""
    msg = str(exc).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(exc).__name__}: {first}"[:300]


def die_if_no_numpy(args, versions):
    try:
        import numpy  # noqa: F401
        return False
    except Exception as e:  # pragma: no cover - environment dependent
        emit_skipped(args, f"numpy does not import in {sys.executable}: {fail_reason(e)}", versions)
        return True
