"""Checkpoint: inspection of a saved checkpoint without a collection (include/ember/state.h)."""

from __future__ import annotations

import os
from typing import Any

from . import _ember
from ._config import as_path, invalid

__all__ = ["Checkpoint"]

_TABLE_KEYS = ("name", "rows", "dim", "optimizer", "dtype", "step", "num_records", "bytes")


class Checkpoint:
    """A checkpoint directory opened for inspection: its manifest is read and checked (not the
    data files). Local: any process may open one, no MPI needed.

    generation   saves into this directory so far
    base_generation  the full save a chain of deltas starts from (= generation for a full one)
    world_size   the world size that wrote it
    tables       [{"name", "rows", "dim", "optimizer", "dtype", "step", "num_records", "bytes"}]
    blob_names   the caller's blobs saved with it
    read_blob(name) -> bytes (CRC-checked); verify(): reads every record and checks its CRC-32.

    Raises EmberIOError (missing directory or manifest: path and OS reason), FormatError (a
    malformed manifest, a record failing its CRC), InvalidArgumentError (no such blob).
    """

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self._c = _ember.Checkpoint(as_path(dir, "Checkpoint: dir"))
        self._path = os.fsdecode(dir)
        generation, world, tables, blobs, base = self._c.info()
        self._generation: int = generation
        self._base_generation: int = base
        self._world_size: int = world
        self._tables = [dict(zip(_TABLE_KEYS, t)) for t in tables]
        self._blobs: dict[str, int] = dict(blobs)

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def base_generation(self) -> int:
        return self._base_generation

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def tables(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self._tables]

    @property
    def blob_names(self) -> list[str]:
        return list(self._blobs)

    def blob_size(self, name: str) -> int:
        """The blob's size in bytes. InvalidArgumentError for a name the checkpoint lacks."""
        if not isinstance(name, str) or name not in self._blobs:
            raise self._no_blob("blob_size", name)
        return self._blobs[name]

    def read_blob(self, name: str) -> bytes:
        """The blob's bytes (CRC-checked). InvalidArgumentError for a name the checkpoint lacks
        (a NUL byte in it included: no blob has one)."""
        if not isinstance(name, str):
            raise invalid(f"read_blob: a blob name is a string, got {type(name).__name__} {name!r}")
        if "\0" in name:
            raise self._no_blob("read_blob", name)
        return self._c.read_blob(name)

    def _no_blob(self, what: str, name: Any) -> Exception:
        nul = " (a NUL byte in the name)" if isinstance(name, str) and "\0" in name else ""
        return invalid(f"{what}: checkpoint {self._path!r} has no blob {name!r}{nul} "
                       f"(blobs: {', '.join(self._blobs) or 'none'})")

    def verify(self) -> None:
        """Reads every record of every table and blob and checks its CRC-32 (FormatError naming
        the first bad record)."""
        self._c.verify()

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Checkpoint({self._path!r}, generation={self._generation}, world_size={self._world_size}, "
                f"tables={[t['name'] for t in self._tables]})")
