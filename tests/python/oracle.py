"""A naive float64 reference of ember's EmbeddingBagCollection, for the Python tests.

Written from docs/semantics.md (§1 inputs, §2 pooling, §4 fused optimizers, §5 storage dtypes) and
the formulas in the header comment of src/tbe/optim.c; it shares no code with the library or with
the C oracle (tests/support/oracle.c) and imports nothing from ember, so it can describe any
collection that has the same tables: a table description is any object with the attributes of
ember.TableConfig (name, num_embeddings, embedding_dim, feature_names, pooling, dtype, optimizer,
lr, eps, beta1, beta2, weight_decay, weight_decay_mode, initial_accumulator, momentum, eta).

What it computes, for bag I of feature f (per-id weights w_j, 1 when absent):
  SUM   y = sum_j w_j E[id_j]         MEAN  y = (1/|I|) sum_j w_j E[id_j], |I| = ids kept in the bag
  NONE  one output row per id (all-NONE collections)
Backward: every id's gradient w_j c_bag dL/dy (c_bag = 1/|I| for MEAN) is summed per row
(duplicates coalesced), every table's step counter advances, then each touched row gets exactly
one update of its optimizer, in float64, and is rounded to its storage dtype (nearest even).
Bounds: "error" refuses an id outside [0, rows) (IndexError naming the feature), "clamp" clamps
it, "skip" drops it (not counted in MEAN).

Also here: the random batches the tests feed (seeded; empty bags, duplicate ids, one-row tables),
16-bit rounding and spacing helpers, and a tolerance check that names the worst element.
"""
import numpy as np

OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam", "partial_rowwise_adam", "lamb",
              "partial_rowwise_lamb", "lars_sgd")

# Optimizer -> its state tensors (name, one value per row?), as docs/semantics.md §4 lists them.
STATES = {
    "sgd": (),
    "adagrad": (("momentum1", False),),
    "rowwise_adagrad": (("momentum1", True),),
    "adam": (("momentum1", False), ("momentum2", False)),
    "partial_rowwise_adam": (("momentum1", False), ("momentum2", True)),
    "lamb": (("momentum1", False), ("momentum2", False)),
    "partial_rowwise_lamb": (("momentum1", False), ("momentum2", True)),
    "lars_sgd": (("momentum1", False),),
}

# Optimizers whose update needs whole-row norms: not offered on tables split by columns.
ROW_NORM_OPTIMIZERS = ("lamb", "partial_rowwise_lamb", "lars_sgd")


# ---- 16-bit storage ------------------------------------------------------------------------

def bf16_bits(x):
    """bf16 bits of float32 values, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_value(bits):
    """The float32 values of bf16 bits."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_storage(x, dtype):
    """x (float64) rounded to the storage dtype, as float64."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "fp32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        return bf16_value(bf16_bits(x.astype(np.float32))).astype(np.float64)
    raise ValueError("unknown dtype %r" % (dtype,))


def representable(x, dtype):
    """Whether every value of x is exactly a value of the storage dtype."""
    x = np.asarray(x, dtype=np.float64)
    return bool(np.array_equal(round_storage(x, dtype), x))


def spacing(x, dtype):
    """Distance from |x| to the next larger value of the storage dtype (one ulp), float64."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    if dtype == "fp16":
        return np.spacing(a.astype(np.float16)).astype(np.float64)
    s32 = np.spacing(a.astype(np.float32)).astype(np.float64)
    return s32 * 65536.0 if dtype == "bf16" else s32


# ---- tolerance -----------------------------------------------------------------------------

def rel_err(got, want, atol, rtol):
    """Largest |got - want| / (atol + rtol |want|) (<= 1: within tolerance), and its flat index."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        raise AssertionError("sizes differ: %s vs %s" % (got.shape, want.shape))
    if got.size == 0:
        return 0.0, -1
    e = np.abs(got - want) / (atol + rtol * np.abs(want))
    e[~np.isfinite(e)] = np.inf
    i = int(np.argmax(e))
    return float(e[i]), i


def assert_close(got, want, atol, rtol, what=""):
    """Raises AssertionError naming the worst element unless |got - want| <= atol + rtol |want|."""
    e, i = rel_err(got, want, atol, rtol)
    if not e <= 1.0:
        g = np.asarray(got, dtype=np.float64).reshape(-1)[i]
        w = np.asarray(want, dtype=np.float64).reshape(-1)[i]
        raise AssertionError("%s: element %d is %.9g, want %.9g (error %.3g x tolerance %g + %g|x|)"
                             % (what, i, g, w, e, atol, rtol))


def assert_within_ulps(got, want, dtype, ulps=1.0, what=""):
    """16-bit storage: every |got - want| within `ulps` spacings of the dtype at the larger of the
    two magnitudes (a rounding decision may differ between fp32 and float64 arithmetic)."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    tol = ulps * spacing(np.maximum(np.abs(got), np.abs(want)), dtype) + 1e-30
    bad = np.nonzero(~(np.abs(got - want) <= tol))[0]
    if bad.size:
        i = int(bad[0])
        raise AssertionError("%s: %d elements differ by more than %g ulp of %s; element %d is %.9g, want %.9g"
                             % (what, bad.size, ulps, dtype, i, got[i], want[i]))


# ---- batches -------------------------------------------------------------------------------

class Batch:
    """Samples of a keyed jagged batch: bags[f][s] = (ids int64 array, weights float32 array or
    None). arrays(samples) lays any subset of samples out feature-major (bag f*B + b), as ember.KJT
    takes it, so a global batch and each rank's share of it come from the same samples."""

    def __init__(self, bags, weighted):
        self.bags = bags
        self.weighted = weighted
        self.num_features = len(bags)
        self.batch_size = len(bags[0]) if bags else 0

    def arrays(self, samples=None):
        """(values int64 [nnz], lengths int32 [F*B], weights float32 [nnz] or None, B)."""
        if samples is None:
            samples = range(self.batch_size)
        samples = list(samples)
        vals, lens, wts = [], [], []
        for f in range(self.num_features):
            for s in samples:
                ids, w = self.bags[f][s]
                vals.append(ids)
                lens.append(len(ids))
                if self.weighted:
                    wts.append(w)
        values = np.concatenate(vals).astype(np.int64) if vals else np.zeros(0, np.int64)
        lengths = np.asarray(lens, dtype=np.int32)
        weights = None
        if self.weighted:
            weights = np.concatenate(wts).astype(np.float32) if wts else np.zeros(0, np.float32)
        return values, lengths, weights, len(samples)


def vbe_arrays(batch, samples, users):
    """Batch's samples with a batch size per feature (ember.KJT's feature_batch_sizes and
    inverse_indices): each feature in `users` holds its distinct bags (ids and weights equal),
    first seen first, the others a bag per sample. Returns (values, lengths, weights or None,
    feature_batch_sizes, inverse_indices [F, B], first) where first[f] lists the sample that
    first holds each of feature f's bags."""
    samples = list(samples)
    vals, lens, wts, fbs, inv, first = [], [], [], [], [], []
    for f in range(batch.num_features):
        seen, index, firsts = {}, [], []
        for k, s in enumerate(samples):
            ids, w = batch.bags[f][s]
            key = (ids.tobytes(), None if w is None else w.tobytes()) if f in users else ("sample", s)
            if key not in seen:
                seen[key] = len(seen)
                firsts.append(k)
                vals.append(ids)
                lens.append(len(ids))
                if batch.weighted:
                    wts.append(w)
            index.append(seen[key])
        fbs.append(len(seen))
        inv.append(index)
        first.append(firsts)
    values = np.concatenate(vals).astype(np.int64) if vals else np.zeros(0, np.int64)
    weights = None
    if batch.weighted:
        weights = np.concatenate(wts).astype(np.float32) if wts else np.zeros(0, np.float32)
    return (values, np.asarray(lens, np.int32), weights, np.asarray(fbs, np.int32),
            np.asarray(inv, np.int32).reshape(batch.num_features, len(samples)), first)


def random_batch(rng, feature_rows, batch_size, max_len=4, weighted=False, p_empty=0.2, p_dup=0.4):
    """A seeded random Batch: feature f's ids in [0, feature_rows[f]); about p_empty of the bags
    empty, about p_dup of the others repeating an id; weights (when weighted) multiples of 1/8 in
    [-2, 2) so that weighted sums stay well away from cancellation-prone values."""
    bags = []
    for rows in feature_rows:
        fb = []
        for _ in range(batch_size):
            n = 0 if rng.random() < p_empty else int(rng.integers(1, max_len + 1))
            ids = rng.integers(0, rows, size=n).astype(np.int64)
            if n >= 2 and rng.random() < p_dup:
                ids[rng.integers(1, n)] = ids[0]
            w = None
            if weighted:
                w = (rng.integers(-16, 16, size=n) / 8.0).astype(np.float32)
                w[w == 0] = 0.375
            fb.append((ids, w))
        bags.append(fb)
    return Batch(bags, weighted)


# ---- the oracle ----------------------------------------------------------------------------

def _feature_names(t):
    names = getattr(t, "feature_names", None)
    return list(names) if names else [t.name]


class OracleTable:
    def __init__(self, cfg, state):
        self.name = cfg.name
        self.rows = int(cfg.num_embeddings)
        self.dim = int(cfg.embedding_dim)
        self.pooling = getattr(cfg, "pooling", "sum")
        self.dtype = getattr(cfg, "dtype", "fp32")
        self.optimizer = getattr(cfg, "optimizer", "sgd")
        for k, default in (("lr", 0.01), ("eps", 1e-8), ("beta1", 0.9), ("beta2", 0.999),
                           ("weight_decay", 0.0), ("weight_decay_mode", "none"),
                           ("initial_accumulator", 0.0), ("momentum", 0.9), ("eta", 0.001)):
            setattr(self, k, getattr(cfg, k, default))
        # Hyper-parameters are fp32 in the library: the oracle uses the same values.
        for k in ("lr", "eps", "beta1", "beta2", "weight_decay", "initial_accumulator", "momentum", "eta"):
            setattr(self, k, float(np.float32(getattr(self, k))))
        self.w = np.array(state[self.name + ".weight"], dtype=np.float64).reshape(self.rows, self.dim)
        self.m = {}
        for sname, per_row in STATES[self.optimizer]:
            cols = 1 if per_row else self.dim
            self.m[sname] = np.array(state[self.name + "." + sname], dtype=np.float64).reshape(self.rows, cols)
        self.step = int(np.asarray(state.get(self.name + ".step", 0)))

    def update_row(self, row, g):
        """One fused-optimizer update of `row` with its coalesced gradient g (float64 [dim])."""
        o, lr, wd, eps = self.optimizer, self.lr, self.weight_decay, self.eps
        w = self.w[row].copy()
        g = np.array(g, dtype=np.float64)
        decoupled = self.weight_decay_mode == "decoupled" and wd != 0.0
        if self.weight_decay_mode == "l2" and wd != 0.0 and o != "lars_sgd":
            g = g + wd * w
        c1 = 1.0 - self.beta1 ** self.step
        c2 = 1.0 - self.beta2 ** self.step
        if o == "sgd":
            new = w - lr * (g + (wd * w if decoupled else 0.0))
        elif o == "adagrad":
            m1 = self.m["momentum1"][row]
            m1 += g * g
            new = w - lr * (g / (np.sqrt(m1) + eps) + (wd * w if decoupled else 0.0))
        elif o == "rowwise_adagrad":
            m1 = self.m["momentum1"][row]
            m1 += np.mean(g * g)
            new = w - (lr / (np.sqrt(m1[0]) + eps)) * g - (lr * wd * w if decoupled else 0.0)
        elif o in ("adam", "lamb", "partial_rowwise_adam", "partial_rowwise_lamb"):
            m1 = self.m["momentum1"][row]
            m2 = self.m["momentum2"][row]
            m1 *= self.beta1
            m1 += (1.0 - self.beta1) * g
            m2 *= self.beta2
            m2 += (1.0 - self.beta2) * (np.mean(g * g) if o.startswith("partial") else g * g)
            r = (m1 / c1) / (np.sqrt(m2 / c2) + eps)
            if decoupled:
                r = r + wd * w
            scale = lr
            if o.endswith("lamb"):
                wn, rn = np.linalg.norm(w), np.linalg.norm(r)
                if wn > 0 and rn > 0:
                    scale = lr * wn / rn
            new = w - scale * r
        elif o == "lars_sgd":
            l2 = wd if self.weight_decay_mode == "l2" else 0.0
            wn, gn = np.linalg.norm(w), np.linalg.norm(g)
            local = self.eta * wn / (gn + l2 * wn) if wn > 0 and gn > 0 else 1.0
            v = self.m["momentum1"][row]
            v *= self.momentum
            v += lr * local * (g + l2 * w)
            new = w - v - (lr * wd * w if decoupled else 0.0)
        else:
            raise ValueError("unknown optimizer %r" % (o,))
        self.w[row] = round_storage(new, self.dtype)


class Oracle:
    """The reference collection: tables (TableConfig-like) with the weights and state of `state`
    (a state dict: "<table>.weight", "<table>.momentum1", ..., "<table>.step"; missing states
    start at initial_accumulator for the Adagrad family, 0 otherwise)."""

    def __init__(self, tables, state, bounds="error"):
        state = dict(state)
        for t in tables:
            opt = getattr(t, "optimizer", "sgd")
            acc = float(getattr(t, "initial_accumulator", 0.0)) if "adagrad" in opt else 0.0
            for sname, per_row in STATES[opt]:
                key = t.name + "." + sname
                if key not in state:
                    cols = 1 if per_row else int(t.embedding_dim)
                    state[key] = np.full((int(t.num_embeddings), cols), acc)
        self.tables = [OracleTable(t, state) for t in tables]
        self.bounds = bounds
        self.features = []  # (name, table index, first output column)
        col = 0
        for ti, t in enumerate(tables):
            for fname in _feature_names(t):
                self.features.append((fname, ti, col))
                col += int(t.embedding_dim)
        self.sequence = all(t.pooling == "none" for t in self.tables)
        self.output_dim = self.tables[0].dim if self.sequence else col

    def table(self, name):
        return next(t for t in self.tables if t.name == name)

    def state_dict(self):
        d = {}
        for t in self.tables:
            d[t.name + ".weight"] = t.w.copy()
            for sname, arr in t.m.items():
                d[t.name + "." + sname] = arr.copy()
            d[t.name + ".step"] = t.step
        return d

    def _resolve(self, fname, b, i, rows):
        if 0 <= i < rows:
            return i
        if self.bounds == "error":
            raise IndexError("feature '%s' bag %d: id %d outside [0, %d)" % (fname, b, i, rows))
        if self.bounds == "clamp":
            return min(max(i, 0), rows - 1)
        return None

    def _bags(self, values, lengths, weights, batch_size):
        """Yields (feature index, sample, [(position, row, weight)] of kept ids) bag by bag."""
        values = np.asarray(values, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        F = len(self.features)
        B = batch_size if batch_size is not None else (len(lengths) // F if F else 0)
        assert len(lengths) == F * B and int(lengths.sum()) == len(values)
        pos = 0
        for f, (fname, ti, _) in enumerate(self.features):
            rows = self.tables[ti].rows
            for b in range(B):
                n = int(lengths[f * B + b])
                kept = []
                for j in range(pos, pos + n):
                    r = self._resolve(fname, b, int(values[j]), rows)
                    if r is not None:
                        kept.append((j, r, 1.0 if weights is None else float(weights[j])))
                pos += n
                yield f, b, kept

    def forward(self, values, lengths, weights=None, batch_size=None):
        """float64 [B, output_dim] (all-NONE: [nnz, D])."""
        F = len(self.features)
        B = batch_size if batch_size is not None else (len(lengths) // F if F else 0)
        if self.sequence:
            out = np.zeros((len(values), self.output_dim))
        else:
            out = np.zeros((B, self.output_dim))
        for f, b, kept in self._bags(values, lengths, weights, B):
            _, ti, col = self.features[f]
            t = self.tables[ti]
            if self.sequence:
                for j, r, w in kept:
                    out[j] = w * t.w[r]
                continue
            acc = np.zeros(t.dim)
            for _, r, w in kept:
                acc += w * t.w[r]
            if t.pooling == "mean" and kept:
                acc /= len(kept)
            out[b, col:col + t.dim] = acc
        return out

    def backward(self, values, lengths, weights, grad_out, batch_size=None):
        """One training step with dL/d(out) = grad_out; returns dL/dw per id (float64 [nnz],
        computed with the weights before the update; 0 for a skipped id)."""
        F = len(self.features)
        B = batch_size if batch_size is not None else (len(lengths) // F if F else 0)
        grad_out = np.asarray(grad_out, dtype=np.float64)
        gw = np.zeros(len(values))
        grads = [dict() for _ in self.tables]  # row -> coalesced gradient, per table
        for f, b, kept in self._bags(values, lengths, weights, B):
            _, ti, col = self.features[f]
            t = self.tables[ti]
            c = 1.0 / len(kept) if (t.pooling == "mean" and kept) else 1.0
            for j, r, w in kept:
                go = grad_out[j] if self.sequence else grad_out[b, col:col + t.dim]
                gw[j] = c * float(np.dot(go, t.w[r]))
                g = grads[ti].setdefault(r, np.zeros(t.dim))
                g += (w * c) * go
        for ti, t in enumerate(self.tables):
            t.step += 1
            for r in sorted(grads[ti]):
                t.update_row(r, grads[ti][r])
        return gw


def feature_rows(tables):
    """Rows of the table each feature reads, in the collection's feature order."""
    out = []
    for t in tables:
        out += [int(t.num_embeddings)] * len(_feature_names(t))
    return out
