"""FBGEMM's CPU IntNBit TBE (the inference lookup TorchRec's QuantEmbeddingBagCollection runs) on
`ember bench quant`'s shape, for bench/python/quant_ab.sh: one JSON line per type.

T tables of E rows x D, B bags of exactly L uniform ids per table, SUM pooling, fp32 output, one
thread (torch.set_num_threads), rows random (their values do not change the time). Times the
forward: warm-up, then --iters timed calls; prints {"bench":"quant","impl":"fbgemm","qtype":..,
"ms_med":..,"ms_min":..,"rows_per_s":..}.
"""
import argparse
import json
import statistics
import time

import torch
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shape", default="32,100000,128,512,20", help="T,E,D,B,L")
    p.add_argument("--qtypes", default="int8,int4")
    p.add_argument("--iters", type=int, default=11)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    T, E, D, B, L = (int(x) for x in a.shape.split(","))
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(1)
    indices = torch.randint(0, E, (T * B * L,), generator=g, dtype=torch.int32)
    offsets = torch.arange(0, T * B * L + 1, L, dtype=torch.int32)
    types = {"int8": SparseType.INT8, "int4": SparseType.INT4, "int2": SparseType.INT2, "fp16": SparseType.FP16}
    for name in a.qtypes.split(","):
        tbe = IntNBitTableBatchedEmbeddingBagsCodegen(
            [("", E, D, types[name], EmbeddingLocation.HOST) for _ in range(T)], pooling_mode=PoolingMode.SUM,
            device="cpu", output_dtype=SparseType.FP32)
        tbe.fill_random_weights()
        ms = []
        for it in range(a.warmup + a.iters):
            t0 = time.perf_counter()
            out = tbe(indices, offsets)
            t = (time.perf_counter() - t0) * 1e3
            if it >= a.warmup:
                ms.append(t)
        assert out.shape == (B, T * D)
        med = statistics.median(ms)
        print(json.dumps({"bench": "quant", "impl": "fbgemm", "qtype": name, "T": T, "E": E, "D": D, "B": B, "L": L,
                          "threads": a.threads, "ms_med": round(med, 4), "ms_min": round(min(ms), 4),
                          "rows_per_s": float("%.3g" % (T * B * L / (med * 1e-3)))}, separators=(",", ":")),
              flush=True)


if __name__ == "__main__":
    main()
