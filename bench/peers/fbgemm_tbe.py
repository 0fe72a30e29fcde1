#!/usr/bin/env python3
"""Peer benchmark: FBGEMM's CPU table-batched embedding bag (fbgemm_gpu, PyPI fbgemm-gpu-cpu):
SplitTableBatchedEmbeddingBagsCodegen with every table at EmbeddingLocation.HOST and
ComputeDevice.CPU, i.e. one slab holding all T tables, indices of all tables concatenated
(table-major, bag t*B+b), offsets [T*B+1], output [B, T*D] in fp32.

What is timed (per iteration, wall clock, after warm-up; the module's Python forward included):
  fwd                    under torch.no_grad(): module(indices, offsets), which runs the bounds
                         check (BoundsCheckMode.WARNING, the module default; ember validates ids
                         too) and fbgemm::split_embedding_codegen_forward_cpu.
  train_sgd              forward + out.backward(dL/dy) of a module built with EXACT_SGD; the
                         optimizer is fused into the backward, so this is the whole step.
  train_rowwise_adagrad  the same with EXACT_ROWWISE_ADAGRAD (eps=1e-8).
  train_adam             FBGEMM's CPU mode rejects ADAM (an assertion in the module's
                         constructor): printed as skipped with that message.
  bwd_*                  the out.backward(...) part of the train_* iterations, timed inside the
                         same iterations (backward + fused optimizer), not train minus fwd.
EXACT_* optimizers coalesce duplicate ids (radix sort of the ids into a CSC by row, gradients of a
row summed, then one update per row) and MEAN divides by the bag length in forward and backward,
as ember does; --check (on with --quick) verifies both against a float64 numpy reference and
prints "bench":"tbe_semantics" lines.

Kernels and threads, from FBGEMM's sources (codegen/training/forward/embedding_forward_split_cpu.cpp
and backward/embedding_backward_split_cpu_template.cpp):
  * forward: at::parallel_for over the B samples, for each table a JIT (asmjit) kernel from
    fbgemm::GenerateEmbeddingSpMDMWithStrides (prefetch distance 16, normalize_by_lengths for
    MEAN) for fp32/fp16 weights; fbgemm picks its AVX-512 code path where the CPU has
    avx512f/bw/dq/vl (these Zen 5 machines do), else AVX2. bf16 weights are not dispatched by the
    CPU forward ("not implemented for 'BFloat16'"): printed as skipped.
  * backward: per table a csr2csc (OpenMP parallel radix sort) then, for rowwise Adagrad on fp32,
    a JIT SpMDM gathering each row's gradient plus fbgemm::GenerateSparseAdaGrad(rowwise) under
    at::parallel_for over the distinct rows (blocks of 64). EXACT_SGD uses the generic loop, which
    is sequential per table whatever the thread count.
  * threads: the fbgemm-gpu-cpu 1.9.0 wheel is built without OpenMP (its .so files link no OpenMP
    runtime), so ATen's header-inlined at::parallel_for takes its serial branch and the `omp`
    pragmas are ignored: the TBE runs on one thread whatever torch.set_num_threads(n) (set per
    case) or OMP_NUM_THREADS (set by run_peers.sh) say. cpu_util (process CPU time / wall time
    over the timed loop) shows it: about 1.0 at threads=2.
The cpuinfo fix (--cpuinfo-fix auto, the default; "cpuinfo_fix" in every line):
  PyPI's Linux torch wheel (the CUDA build) carries two copies of the cpuinfo library, exported
  from both libc10.so and libtorch.so. fbgemm_gpu's fbgemm.so binds cpuinfo_initialize and the
  feature table cpuinfo_isa to different copies, so it reads an all-zero table, believes the CPU
  has neither AVX2 nor AVX-512, and takes its scalar reference kernels wherever it asks
  (fbgemmHasAvx2Support/fbgemmHasAvx512Support): perf shows fbgemm::EmbeddingSpMDM_ref and
  fbgemm::rowwise_sparse_adagrad_ref in the backward, about 11x slower for row-wise Adagrad.
  With the fix, before fbgemm_gpu is imported, the script initialises both copies and copies the
  filled 85-byte table (libtorch.so's) over the empty one (libc10.so's); nothing of FBGEMM is
  changed, it simply sees the CPU it runs on, as it would with a consistently linked torch. "auto"
  applies it only when that exact situation is found; --cpuinfo-fix off measures the wheels as
  installed (run_peers.sh records those lines as impl "fbgemm-stock" for comparison).
  "fbgemm_avx512" records what fbgemm.so's own fbgemmHasAvx512Support() answers.
gbps is B*T*L*D*sizeof(dtype) / ms_med for every op; residual is max |y - ref| (residual_rel:
that / max |ref|) over the first 8 bags of each table (for train ops: the case's first forward,
before it updates anything).
"""

import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def cpuinfo_fix(torch):
    """Copies libtorch.so's filled cpuinfo_isa over libc10.so's empty one (see the module doc).
    Returns True when it did, False when the situation was not found."""
    import ctypes
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    try:
        full = ctypes.CDLL(os.path.join(libdir, "libtorch.so"))
        empty = ctypes.CDLL(os.path.join(libdir, "libc10.so"))
        full.cpuinfo_initialize()
        empty.cpuinfo_initialize()
        a = ctypes.addressof(ctypes.c_char.in_dll(full, "cpuinfo_isa"))
        b = ctypes.addressof(ctypes.c_char.in_dll(empty, "cpuinfo_isa"))
    except (OSError, AttributeError, ValueError):
        return False
    size = 0x55  # sizeof(struct cpuinfo_x86_isa) in both copies (nm -S), checked below
    if a == b or _sym_size(os.path.join(libdir, "libtorch.so")) != size \
            or _sym_size(os.path.join(libdir, "libc10.so")) != size:
        return False
    src, dst = ctypes.string_at(a, size), ctypes.string_at(b, size)
    if any(dst) or not any(src):
        return False
    ctypes.memmove(b, a, size)
    return True


def _sym_size(path):
    """st_size of the dynamic symbol cpuinfo_isa in an ELF64 little-endian file, or -1."""
    import struct
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return -1
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return -1
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for sec in secs:
        if sec[1] != 11:  # SHT_DYNSYM
            continue
        strtab = secs[sec[6]]
        for off in range(sec[4], sec[4] + sec[5], 24):
            name, _, _, shndx, _, size = struct.unpack_from("<IBBHQQ", data, off)
            end = data.index(b"\0", strtab[4] + name)
            if data[strtab[4] + name:end] == b"cpuinfo_isa" and shndx != 0:
                return size
    return -1


def fbgemm_has_avx512(fbgemm_gpu):
    import ctypes
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(fbgemm_gpu.__file__), "fbgemm.so"))
        f = lib._ZN6fbgemm22fbgemmHasAvx512SupportEv
        f.restype = ctypes.c_bool
        return bool(f())
    except (OSError, AttributeError):
        return None


def main(argv=None):
    args = C.parse_args("fbgemm", argv, extra=_extra_args)
    if args.cpuinfo_fix == "off":
        args.impl = "fbgemm-stock" if args.stock_name else "fbgemm"
    versions = {}
    try:
        import torch
        versions["torch"] = torch.__version__
        fixed = cpuinfo_fix(torch) if args.cpuinfo_fix == "auto" else False
        import fbgemm_gpu
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            BoundsCheckMode, EmbeddingLocation, PoolingMode)
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    except Exception as e:
        C.emit_skipped(args, f"fbgemm_gpu does not import in {sys.executable}: {C.fail_reason(e)}",
                       versions)
        return 0
    versions["fbgemm"] = getattr(fbgemm_gpu, "__version__", "unknown")
    versions["cpuinfo_fix"] = fixed
    versions["fbgemm_avx512"] = fbgemm_has_avx512(fbgemm_gpu)
    if C.die_if_no_numpy(args, versions):
        return 0
    import numpy as np
    warnings.filterwarnings("ignore", category=UserWarning)

    precision = {"fp32": SparseType.FP32, "bf16": SparseType.BF16, "fp16": SparseType.FP16}
    pooling = {"sum": PoolingMode.SUM, "mean": PoolingMode.MEAN}
    optim = {"fwd": EmbOptimType.EXACT_SGD, "train_sgd": EmbOptimType.EXACT_SGD,
             "train_rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
             "train_adam": EmbOptimType.ADAM}

    def make_module(cfg, op, pool, dtype, seed):
        torch.manual_seed(seed)
        m = SplitTableBatchedEmbeddingBagsCodegen(
            embedding_specs=[(cfg["E"], cfg["D"], EmbeddingLocation.HOST, ComputeDevice.CPU)] * cfg["T"],
            optimizer=optim[op], weights_precision=precision[dtype], output_dtype=SparseType.FP32,
            pooling_mode=pooling[pool], learning_rate=C.LEARNING_RATE, eps=C.EPS,
            beta1=C.ADAM_BETAS[0], beta2=C.ADAM_BETAS[1], bounds_check_mode=BoundsCheckMode.WARNING)
        m.init_embedding_weights_uniform(-0.05, 0.05)
        return m

    def residual(out, m, ids, cfg, pool):
        W = m.split_embedding_weights()

        def rows_of(t, idx):
            return W[t][torch.from_numpy(idx)].double().numpy()
        return C.ref_forward_residual(np, out.detach().double().numpy(), rows_of, ids, cfg, pool)

    def dtype_probe(dtype):
        try:
            m = make_module(dict(T=1, E=10, D=8, B=2, L=2), "train_sgd", "sum", dtype, 0)
            y = m(torch.tensor([1, 2, 2, 3]), torch.tensor([0, 2, 4]))
            y.backward(torch.ones_like(y))
            return None
        except Exception as e:
            return f"fbgemm_gpu {versions['fbgemm']} CPU TBE does not support {dtype} weights: {C.fail_reason(e)}"

    if args.check:
        semantics_check(args, torch, np, versions, make_module)

    for cfg in args.configs:
        T, B, L = cfg["T"], cfg["B"], cfg["L"]
        offsets = torch.arange(0, T * B * L + 1, L, dtype=torch.int64)
        ids_by_dist = {d: [C.make_ids(np, cfg, d, t, args.seed) for t in range(T)] for d in args.dists}
        idx_by_dist = {d: torch.from_numpy(np.concatenate(v)) for d, v in ids_by_dist.items()}
        g = torch.from_numpy(C.make_grad(np, cfg, args.seed)).float()
        for dtype in args.dtypes:
            why = dtype_probe(dtype)
            if why:
                C.emit_skipped(args, why, versions, cfg=cfg, dtype=dtype)
                continue
            for op in args.ops:
                for pool in args.pools:
                    try:
                        m = make_module(cfg, op, pool, dtype, args.seed)
                    except Exception as e:
                        reason = f"{optim[op].name} on CPU: {C.fail_reason(e)}"
                        for dist in args.dists:
                            for th in args.threads:
                                rec = C.base_record(args, cfg, op, pool, dtype, dist, th, versions)
                                rec["skipped"] = reason
                                C.emit(rec, args)
                        continue
                    for dist in args.dists:
                        for th in args.threads:
                            torch.set_num_threads(th)
                            rec = C.base_record(args, cfg, op, pool, dtype, dist, th, versions)
                            rec["optimizer"] = optim[op].name
                            rec["bounds_check"] = "warning"
                            try:
                                run_case(args, torch, rec, cfg, m, op, ids_by_dist[dist],
                                         idx_by_dist[dist], offsets, g, residual)
                            except Exception as e:
                                rec["skipped"] = f"failed: {C.fail_reason(e)}"
                                C.emit(rec, args)
                    del m
                    C.release()
    return 0


def run_case(args, torch, rec, cfg, m, op, ids, indices, offsets, g, residual):
    dtype, pool = rec["dtype"], rec["pool"]
    if op == "fwd":
        with torch.no_grad():
            C.set_residual(rec, residual(m(indices, offsets), m, ids, cfg, pool))

            def step():
                m(indices, offsets)
            ms, _, util = C.time_loop(step, args)
        C.emit(C.fill_timing(rec, ms, cfg, dtype, util), args)
        return

    out = m(indices, offsets)
    C.set_residual(rec, residual(out, m, ids, cfg, pool))
    out.backward(g)

    def step():
        y = m(indices, offsets)
        t1 = time.perf_counter()
        y.backward(g)
        return time.perf_counter() - t1
    ms, ms_bwd, util = C.time_loop(step, args)
    C.emit(C.fill_timing(rec, ms, cfg, dtype, util), args)
    bwd = dict(rec)
    bwd["op"] = "bwd_" + op[len("train_"):]
    bwd.pop("residual", None)
    bwd.pop("residual_rel", None)
    bwd["note"] = "fused backward+optimizer timed inside the train iterations"
    C.emit(C.fill_timing(bwd, ms_bwd, cfg, dtype, util), args)


def semantics_check(args, torch, np, versions, make_module):
    """Two training steps on a tiny table with many duplicate ids, against the float64 reference
    of ember's exact semantics (coalesce, then one update per touched row)."""
    cfg = C.CHECK_CFG
    ref_opt = {"train_sgd": "sgd", "train_rowwise_adagrad": "rowwise_adagrad"}
    ids = C.check_ids(np, args.seed)
    indices = torch.from_numpy(np.concatenate(ids))
    offsets = torch.arange(0, cfg["T"] * cfg["B"] * cfg["L"] + 1, cfg["L"])
    g64 = C.make_grad(np, cfg, args.seed)
    g = torch.from_numpy(g64).float()
    for op in [o for o in args.ops if o in ref_opt]:
        for pool in args.pools:
            rec = {"bench": "tbe_semantics", "impl": args.impl, "op": op, "pool": pool, "dtype": "fp32",
                   "ref": ref_opt[op], **versions}
            try:
                m = make_module(cfg, op, pool, "fp32", 5)
                Wm = m.split_embedding_weights()
                W = [w.detach().double().numpy().copy() for w in Wm]
                state = {}
                err = 0.0
                for k in (1, 2):
                    y = m(indices, offsets)
                    y.backward(g)
                    C.ref_train_step(np, W, state, ids, g64, cfg, pool, ref_opt[op], k)
                    for t in range(cfg["T"]):
                        err = max(err, float(np.max(np.abs(Wm[t].detach().double().numpy() - W[t]))))
                rec.update({"max_abs_err": err, "ok": err < 1e-5})
            except Exception as e:
                rec.update({"ok": False, "skipped": f"failed: {C.fail_reason(e)}"})
            C.emit(rec, args)


def _extra_args(p):
    p.add_argument("--cpuinfo-fix", choices=["auto", "off"], default="auto",
                   help="let fbgemm.so see the CPU's features (see the module doc); off: as installed")
    p.add_argument("--stock-name", action="store_true",
                   help='with --cpuinfo-fix off, name the impl "fbgemm-stock" instead of "fbgemm"')


if __name__ == "__main__":
    sys.exit(main())
