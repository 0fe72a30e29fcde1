#!/usr/bin/python3
"""Reads an ember checkpoint directory with the Python standard library and numpy alone.

Usage: read_checkpoint.py CKPT_DIR [REF_DIR] [--verbose]

The layout (include/ember/state.h, docs/checkpoints.md): CKPT_DIR/manifest.json names, for every
table, its rows, dim, optimizer, weight dtype, step counter and tensors ("weight", then the
optimizer's "momentum1"/"momentum2", [rows, dim] or [rows, 1]); every tensor is stored as records,
each a raw little-endian row-major block of global rows [r0, r1) and columns [c0, c1) at a byte
offset of a data file g<G>-r<R>.bin, with its CRC-32 as zlib computes it. Weights are fp32, fp16
or bf16 (numpy has no bf16: read as uint16, the float's upper 16 bits); optimizer state is fp32.
Blobs (a trainer's opaque bytes) are stored the same way, whole. Version 3 adds incremental
checkpoints: a delta of generation G names the records of its base generations (files g<B>-r<R>.bin,
base_generation <= B <= G) and then its own; in each tensor the records come in the order of their
generations, the first generation's cover it exactly once and the later ones overwrite parts of it.
A delta's record may be a row list ("count": n): n int64 row numbers, ascending inside its rows
[r0, r1), then those n rows.

What it checks: the manifest's structure; every record's size and CRC-32; that the records of a
tensor cover each of its elements exactly once; and, given REF_DIR (written by
tests/dist/ckpt_dump.c: reference.json and one raw file per tensor and blob), that every table's
shape, optimizer, dtype and step and every tensor and blob equal the reference bitwise. Prints one
summary line; exits 0 when all holds, 1 on any mismatch (each one named on stderr), 2 on bad usage
or a missing numpy (install it with scripts/setup.sh: python3-numpy, for /usr/bin/python3).
"""
import json
import os
import sys
import zlib

try:
    import numpy as np
except ImportError:
    sys.stderr.write("read_checkpoint.py: numpy is not installed for %s: run scripts/setup.sh "
                     "(it installs python3-numpy)\n" % sys.executable)
    sys.exit(2)

# Stored dtypes as numpy reads them, and the unsigned integer of the same width (bitwise compares).
DTYPES = {"fp32": np.dtype("<f4"), "fp16": np.dtype("<f2"), "bf16": np.dtype("<u2")}
BITS = {"fp32": np.dtype("<u4"), "fp16": np.dtype("<u2"), "bf16": np.dtype("<u2")}


def bf16_to_f32(u16):
    """bf16 bits (uint16) to float32: the bits are a float32's upper half."""
    return (np.asarray(u16, dtype=np.uint32) << 16).view(np.float32)


class Problems:
    """Collects mismatches (each printed at once) so one run names all of them."""

    def __init__(self):
        self.count = 0

    def __call__(self, message):
        self.count += 1
        if self.count <= 50:
            sys.stderr.write("read_checkpoint.py: %s\n" % message)


def as_int(x, what, bad):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x):
        bad("%s: %r is not an integer" % (what, x))
        return None
    return int(x)


class Files:
    """The checkpoint's data files, opened once each."""

    def __init__(self, root):
        self.root, self.open = root, {}

    def read(self, name, offset, nbytes):
        f = self.open.get(name)
        if f is None:
            f = self.open[name] = open(os.path.join(self.root, name), "rb")
        f.seek(offset)
        return f.read(nbytes)

    def close(self):
        for f in self.open.values():
            f.close()


def read_checkpoint(root, bad):
    """Returns (manifest, {table: {tensor: global array}}, {blob: bytes}, records read, file names)."""
    with open(os.path.join(root, "manifest.json"), "rb") as f:
        m = json.loads(f.read().decode("utf-8"))
    if m.get("format") != "ember-checkpoint" or m.get("version") not in (2, 3):
        bad("manifest: format %r version %r, expected 'ember-checkpoint' 2 or 3" % (m.get("format"), m.get("version")))
        return m, {}, {}, 0, set()
    gen = as_int(m["generation"], "generation", bad)
    base = as_int(m.get("base_generation", gen), "base_generation", bad)
    world = as_int(m["world_size"], "world_size", bad)
    names = {"g%d-r%d.bin" % (g, r): g for g in range(base, gen + 1) for r in range(world)}
    files, tables, blobs, nrec, used = Files(root), {}, {}, 0, set()
    try:
        for t in m["tables"]:
            rows, dim = as_int(t["rows"], "rows", bad), as_int(t["dim"], "dim", bad)
            if t["name"] in tables:
                bad("table %r appears twice" % t["name"])
            got = tables[t["name"]] = {}
            for k in t["tensors"]:
                where = "table %r tensor %r" % (t["name"], k["name"])
                dt, cols = DTYPES[k["dtype"]], as_int(k["cols"], where + " cols", bad)
                if cols not in (1, dim):
                    bad("%s: %d columns, not 1 or dim %d" % (where, cols, dim))
                arr = np.zeros((rows, cols), dtype=dt)
                cover = np.zeros((rows, cols), dtype=np.uint8)
                first = last = None  # the generation of the tensor's first record, and of the last one
                for r in k["records"]:
                    nrec += 1
                    r0, r1 = (as_int(x, where + " rows", bad) for x in r["rows"])
                    c0, c1 = (as_int(x, where + " cols", bad) for x in r["cols"])
                    off, nbytes = as_int(r["offset"], where + " offset", bad), as_int(r["bytes"], where + " bytes", bad)
                    count = as_int(r.get("count", 0), where + " count", bad)
                    rec = "%s record rows [%d, %d) cols [%d, %d) in %s" % (where, r0, r1, c0, c1, r["file"])
                    if r["file"] not in names:
                        bad("%s: not a data file of generations %d..%d, world size %d" % (rec, base, gen, world))
                        continue
                    g = names[r["file"]]
                    first = g if first is None else first
                    if last is not None and g < last:
                        bad("%s: after a record of generation %d" % (rec, last))
                    last = g
                    if not (0 <= r0 < r1 <= rows and 0 <= c0 < c1 <= cols):
                        bad("%s: outside the tensor [%d, %d]" % (rec, rows, cols))
                        continue
                    nrows = count or r1 - r0
                    if nbytes != nrows * (c1 - c0) * dt.itemsize + 8 * count:
                        bad("%s: %d bytes for a %s block of %d x %d" % (rec, nbytes, k["dtype"], nrows, c1 - c0))
                        continue
                    used.add(r["file"])
                    buf = files.read(r["file"], off, nbytes)
                    if len(buf) != nbytes:
                        bad("%s: the file ends before its %d bytes at offset %d" % (rec, nbytes, off))
                        continue
                    crc = zlib.crc32(buf) & 0xFFFFFFFF
                    if crc != r["crc32"]:
                        bad("%s: CRC-32 %08x, the manifest says %08x" % (rec, crc, r["crc32"]))
                    if g == first:  # a delta's records (later generations) overwrite these
                        if count:
                            bad("%s: a row list in the tensor's first generation" % rec)
                        if cover[r0:r1, c0:c1].any():
                            bad("%s: overlaps an earlier record" % rec)
                        cover[r0:r1, c0:c1] += 1
                    if count:
                        which = np.frombuffer(buf[:8 * count], dtype="<i8")
                        if not (np.all(np.diff(which) > 0) and which[0] >= r0 and which[-1] < r1):
                            bad("%s: its row list is not ascending inside its rows" % rec)
                            continue
                        arr[which, c0:c1] = np.frombuffer(buf[8 * count:], dtype=dt).reshape(count, c1 - c0)
                    else:
                        arr[r0:r1, c0:c1] = np.frombuffer(buf, dtype=dt).reshape(r1 - r0, c1 - c0)
                if not cover.all():
                    missing = np.argwhere(cover == 0)[0]
                    bad("%s: %d of %d elements in no record (first: row %d, column %d)"
                        % (where, int((cover == 0).sum()), cover.size, missing[0], missing[1]))
                got[k["name"]] = arr
        for b in m["blobs"]:
            if b["file"] not in names:
                bad("blob %r: %s is not a data file of generations %d..%d" % (b["name"], b["file"], base, gen))
                continue
            used.add(b["file"])
            buf = files.read(b["file"], as_int(b["offset"], "blob offset", bad), as_int(b["bytes"], "blob bytes", bad))
            if len(buf) != b["bytes"]:
                bad("blob %r: the file ends before its %d bytes" % (b["name"], b["bytes"]))
            elif zlib.crc32(buf) & 0xFFFFFFFF != b["crc32"]:
                bad("blob %r: CRC-32 mismatch" % b["name"])
            blobs[b["name"]] = buf
    finally:
        files.close()
    return m, tables, blobs, nrec, used


def compare(m, tables, blobs, ref_dir, bad, verbose):
    """Compares with REF_DIR's reference.json and raw files; returns (tensors, bytes) compared."""
    with open(os.path.join(ref_dir, "reference.json")) as f:
        ref = json.load(f)
    if m["world_size"] != ref["world_size"] or m["generation"] != ref["generation"]:
        bad("manifest: world size %r generation %r, the reference says %r %r"
            % (m["world_size"], m["generation"], ref["world_size"], ref["generation"]))
    meta = {t["name"]: t for t in m["tables"]}
    if sorted(meta) != sorted(t["name"] for t in ref["tables"]):
        bad("tables %s, the reference has %s" % (sorted(meta), sorted(t["name"] for t in ref["tables"])))
    ntensors = nbytes = 0
    for rt in ref["tables"]:
        t = meta.get(rt["name"])
        if t is None:
            continue
        for key in ("rows", "dim", "optimizer", "dtype", "step"):
            if t[key] != rt[key]:
                bad("table %r %s: %r in the checkpoint, %r in the reference" % (rt["name"], key, t[key], rt[key]))
        names = [k["name"] for k in t["tensors"]]
        if names != [k["name"] for k in rt["tensors"]]:
            bad("table %r tensors %s, the reference has %s" % (rt["name"], names, [k["name"] for k in rt["tensors"]]))
        for rk, k in zip(rt["tensors"], t["tensors"]):
            where = "table %r tensor %r" % (rt["name"], rk["name"])
            if k["dtype"] != rk["dtype"]:
                bad("%s: dtype %s, the reference has %s" % (where, k["dtype"], rk["dtype"]))
                continue
            want = np.fromfile(os.path.join(ref_dir, rk["file"]), dtype=DTYPES[rk["dtype"]])
            got = tables[rt["name"]].get(rk["name"])
            if got is None or want.size != rk["rows"] * rk["cols"] or got.shape != (rk["rows"], rk["cols"]):
                bad("%s: shape %s, the reference has [%d, %d] (%d values in its file)"
                    % (where, None if got is None else list(got.shape), rk["rows"], rk["cols"], want.size))
                continue
            want = want.reshape(rk["rows"], rk["cols"])
            bits = BITS[rk["dtype"]]
            differ = got.view(bits) != want.view(bits)
            if differ.any():
                i = np.argwhere(differ)[0]
                bad("%s: %d of %d values differ bitwise (first: row %d, column %d: %#x, reference %#x)"
                    % (where, int(differ.sum()), differ.size, i[0], i[1], int(got.view(bits)[i[0], i[1]]),
                       int(want.view(bits)[i[0], i[1]])))
            ntensors += 1
            nbytes += got.nbytes
            if verbose:
                vals = bf16_to_f32(got) if rk["dtype"] == "bf16" else got.astype(np.float32)
                print("  %-10s %-9s [%d, %d] %s  min %.6g max %.6g" % (rt["name"], rk["name"], rk["rows"], rk["cols"],
                                                                     rk["dtype"], vals.min(), vals.max()))
    for rb in ref["blobs"]:
        with open(os.path.join(ref_dir, rb["file"]), "rb") as f:
            want = f.read()
        if blobs.get(rb["name"]) != want:
            bad("blob %r differs from the reference (%s bytes, reference %d)"
                % (rb["name"], None if rb["name"] not in blobs else len(blobs[rb["name"]]), len(want)))
        nbytes += len(want)
    if sorted(blobs) != sorted(b["name"] for b in ref["blobs"]):
        bad("blobs %s, the reference has %s" % (sorted(blobs), sorted(b["name"] for b in ref["blobs"])))
    return ntensors, nbytes


def main(argv):
    args = [a for a in argv[1:] if a != "--verbose"]
    if len(args) not in (1, 2):
        sys.stderr.write("usage: read_checkpoint.py CKPT_DIR [REF_DIR] [--verbose]\n")
        return 2
    bad = Problems()
    try:
        m, tables, blobs, nrec, used = read_checkpoint(args[0], bad)
        ntensors = sum(len(t) for t in tables.values())
        nbytes = sum(a.nbytes for t in tables.values() for a in t.values())
        what = "read"
        if len(args) == 2:
            ntensors, nbytes = compare(m, tables, blobs, args[1], bad, "--verbose" in argv)
            what = "compared bitwise with the reference"
    except (OSError, KeyError, TypeError, ValueError) as e:  # a missing file or field, a malformed value
        bad("%s: %s" % (type(e).__name__, e))
        print("read_checkpoint: FAILED: %s" % e)
        return 1
    print("read_checkpoint: %s: %d tables, %d tensors, %d records in %d files (generation %s, world size %s), "
          "%d blobs; %d bytes %s; numpy %s"
          % ("OK" if bad.count == 0 else "%d MISMATCHES" % bad.count, len(tables), ntensors, nrec, len(used),
             m.get("generation"), m.get("world_size"), len(blobs), nbytes, what, np.__version__))
    return 0 if bad.count == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
