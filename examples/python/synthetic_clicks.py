"""The synthetic click data of `ember train` (apps/ember/synth.h), drawn with numpy: the one
generator of the Python DLRM example and of the TorchRec benchmark (bench/python/torchrec_dlrm.py),
so both train exactly the same samples.

Planted model: dense x = log(1 + exp(mu + u)), u ~ N(0, 1); logit z = -1.2 + w.u + sum_f e_f[id_f]
with w of norm 1 and per-id effects centred and scaled under each feature's Zipf traffic to
deviation sigma_f, sqrt(sum sigma_f^2) = 1.6; ids are Zipf(alpha) ranks through a fixed random
permutation of each table (hot ids spread over it); label ~ Bernoulli(sigmoid(z)). Global batch g
of a split is a function of (seed, split, g) alone: every world size trains the same samples,
rank r its contiguous share.
"""

import numpy as np

NUM_DENSE = 13
NUM_SPARSE = 26
# `ember train`'s default table sizes (apps/ember/train.c): 26 tables from 4 to 100k rows.
DEFAULT_ROWS = [1000, 20000, 100000, 50000, 300, 30, 10000, 600, 4, 20000, 5000, 80000, 3000,
                30000, 40, 100000, 10, 1000, 2000, 5, 20000, 20, 15, 6000, 100, 80]


def share(global_size, world, rank):
    """Rank's contiguous share [begin, end) of a global batch: the first (size mod W) ranks take one more."""
    base, extra = divmod(global_size, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


class SyntheticClicks:
    def __init__(self, rows, zipf_alpha, seed):
        rng = np.random.default_rng([seed, 0])
        self.rows, self.seed = list(rows), seed
        self.mu = rng.normal(0.0, 1.0, NUM_DENSE)
        self.w = rng.normal(0.0, 1.0, NUM_DENSE)
        self.w /= np.linalg.norm(self.w)
        sigma = rng.random(len(self.rows)) + 0.1
        sigma *= 1.6 / np.linalg.norm(sigma)
        self.cdfs, self.perms, self.effects = [], [], []
        for f, n in enumerate(self.rows):
            p = np.arange(1, n + 1, dtype=np.float64) ** -zipf_alpha
            p /= p.sum()
            cdf = np.cumsum(p)
            cdf[-1] = 1.0
            perm = rng.permutation(n)  # Zipf rank k -> id perm[k]
            e = np.empty(n)
            e[perm] = rng.standard_normal(n)  # effect of id perm[k], indexed by id
            m = float(p @ e[perm])
            sd = float(np.sqrt(p @ (e[perm] - m) ** 2)) or 1.0
            self.cdfs.append(cdf)
            self.perms.append(perm)
            self.effects.append((e - m) * (sigma[f] / sd))

    def batch(self, split, g, size):
        """Global batch g of split 0 (train) or 1 (eval): dense [size, 13] float32, ids [26, size]
        int64, labels [size] float32, planted logits [size] float64."""
        r = np.random.default_rng([self.seed, 1 + split, g])
        u = r.standard_normal((size, NUM_DENSE))
        z = -1.2 + u @ self.w
        ids = np.empty((len(self.rows), size), dtype=np.int64)
        for f in range(len(self.rows)):
            ids[f] = self.perms[f][np.searchsorted(self.cdfs[f], r.random(size), side="right")]
            z += self.effects[f][ids[f]]
        labels = (r.random(size) < 1.0 / (1.0 + np.exp(-z))).astype(np.float32)
        dense = np.log1p(np.exp(self.mu + u)).astype(np.float32)
        return dense, ids, labels, z
