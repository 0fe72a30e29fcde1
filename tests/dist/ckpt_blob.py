#!/usr/bin/python3
"""Damages or edits a blob of an ember checkpoint so that it still loads: the new bytes are
appended to the blob's data file and the manifest's entry (offset, bytes, CRC-32) is rewritten to
them, as a checkpoint that was written that way would hold (docs/checkpoints.md, the record
format). The Python standard library alone.

Usage: ckpt_blob.py CKPT_DIR ACTION...   actions, applied in order:
  print NAME             the blob's bytes to stdout
  remove NAME            the blob leaves the manifest
  raw NAME TEXT          the blob becomes TEXT (UTF-8)
  set NAME PATH JSON     the blob is JSON: its member at PATH (keys joined by '.') becomes JSON
  drop NAME PATH         the blob is JSON: its member at PATH leaves it
Exits 0, 1 when a blob or member is not there, 2 on bad usage.
"""
import json
import os
import sys
import zlib


def fail(code, message):
    sys.stderr.write("ckpt_blob.py: %s\n" % message)
    sys.exit(code)


def blob_entry(manifest, name):
    for b in manifest["blobs"]:
        if b["name"] == name:
            return b
    fail(1, "no blob %r in the manifest" % name)


def read_blob(root, entry):
    with open(os.path.join(root, entry["file"]), "rb") as f:
        f.seek(entry["offset"])
        return f.read(entry["bytes"])


def write_blob(root, entry, data):
    with open(os.path.join(root, entry["file"]), "ab") as f:
        entry["offset"] = f.tell()
        f.write(data)
    entry["bytes"] = len(data)
    entry["crc32"] = zlib.crc32(data) & 0xFFFFFFFF


def parent_of(doc, path):
    keys = path.split(".")
    for k in keys[:-1]:
        if not isinstance(doc, dict) or k not in doc:
            fail(1, "no member %r" % path)
        doc = doc[k]
    if not isinstance(doc, dict):
        fail(1, "no member %r" % path)
    return doc, keys[-1]


def main(argv):
    if len(argv) < 3:
        fail(2, "usage: ckpt_blob.py CKPT_DIR ACTION...")
    root, args = argv[1], argv[2:]
    mpath = os.path.join(root, "manifest.json")
    with open(mpath) as f:
        manifest = json.load(f)
    arity = {"print": 1, "remove": 1, "raw": 2, "set": 3, "drop": 2}
    while args:
        act = args[0]
        if act not in arity or len(args) < 1 + arity[act]:
            fail(2, "bad action %r" % " ".join(args))
        ops, args = args[1:1 + arity[act]], args[1 + arity[act]:]
        entry = blob_entry(manifest, ops[0])
        if act == "print":
            sys.stdout.write(read_blob(root, entry).decode("utf-8", "replace"))
        elif act == "remove":
            manifest["blobs"].remove(entry)
        elif act == "raw":
            write_blob(root, entry, ops[1].encode("utf-8"))
        else:
            doc = json.loads(read_blob(root, entry).decode("utf-8"))
            parent, key = parent_of(doc, ops[1])
            if act == "set":
                parent[key] = json.loads(ops[2])
            elif key in parent:
                del parent[key]
            else:
                fail(1, "no member %r" % ops[1])
            write_blob(root, entry, json.dumps(doc, indent=2).encode("utf-8"))
    with open(mpath + ".tmp", "w") as f:
        json.dump(manifest, f, indent=2)
    os.replace(mpath + ".tmp", mpath)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
