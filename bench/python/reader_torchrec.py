#!/usr/bin/env python3
"""TorchRec's reader of its preprocessed Criteo day files (torchrec.datasets.criteo's
InMemoryBinaryCriteoIterDataPipe), timed as `ember bench reader` times ember's on the same files:
every training batch once (days 0 .. last-1), an untimed pass first, then --rounds timed ones, one
process; prints one JSON line per round with the same checksum (the sum of every id after `hashes`
and every label): equal checksums, the same batches.

    python bench/python/reader_torchrec.py --data_dir DIR [--batch_size 2048] [--num_embeddings N]
        [--rounds 3] [--mmap]

--mmap: TorchRec's mmap_mode (the files mapped, ids hashed per batch, as ember reads); without it
the reader loads every day into memory and hashes it when constructed, which the first line times
apart ("load_seconds"); the passes then only slice.
"""
import argparse
import glob
import json
import os
import time

import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", required=True)
    p.add_argument("--batch_size", type=int, default=2048)
    p.add_argument("--num_embeddings", type=int, default=40000000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mmap", action="store_true")
    a = p.parse_args()
    from torchrec.datasets.criteo import InMemoryBinaryCriteoIterDataPipe

    days = len(glob.glob(os.path.join(a.data_dir, "day_*_dense.npy"))) - 1
    paths = [[os.path.join(a.data_dir, "day_%d_%s.npy" % (d, k)) for d in range(days)]
             for k in ("dense", "sparse", "labels")]
    t0 = time.perf_counter()
    pipe = InMemoryBinaryCriteoIterDataPipe("train", *paths, batch_size=a.batch_size, rank=0, world_size=1,
                                            mmap_mode=a.mmap, hashes=[a.num_embeddings] * 26)
    load = time.perf_counter() - t0
    for r in range(a.rounds + 1):
        t0 = time.perf_counter()
        rows = checksum = 0
        for batch in pipe:
            rows += batch.labels.shape[0]
            checksum += int(batch.sparse_features.values().sum()) + int(batch.labels.sum())
        s = time.perf_counter() - t0
        if r == 0:
            continue
        print(json.dumps({"bench": "reader", "impl": "torchrec_mmap" if a.mmap else "torchrec_in_memory", "round": r,
                          "rows": rows, "batch": a.batch_size, "seconds": round(s, 6),
                          "rows_per_s": round(rows / s, 1), "load_seconds": round(load, 3), "checksum": checksum}),
              flush=True)


if __name__ == "__main__":
    main()
