"""Comm: the MPI communicator ember's distributed objects run on (include/ember/comm.h)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _ember
from ._config import CONVENTIONS, as_float, invalid, parse_name
from .errors import InvalidArgumentError

__all__ = ["Comm"]


class Comm:
    """A duplicate of an MPI communicator, with ember's collectives, status agreement and watchdog.

    mpi_comm   an mpi4py communicator (converted with ``py2f()`` and ``MPI_Comm_f2c``; mpi4py must
               use the MPI library ember was built with), another ember.Comm, or None:
               MPI_COMM_WORLD. When MPI is not initialised, ember initialises it
               (``MPI_Init_thread``, SERIALIZED) and finalises it at interpreter exit; it never
               finalises an MPI that mpi4py or the program initialised.
    timeout_s  the deadline of every collective (0: wait forever). A rank that waits longer raises
               CollectiveTimeoutError naming the ranks that never arrived; the communicator then
               refuses every collective, and the job should end.

    Collective on the communicator (every rank creates it). Launch with ``mpiexec -n W python
    script.py``. Objects created on a Comm (sharded collections) hold their own duplicate, follow
    its ``timeout_s`` and outlive a ``close()`` of it.
    """

    _c: _ember.Comm

    def __init__(self, mpi_comm: Any = None, *, timeout_s: float = 600.0) -> None:
        handle: int | None
        if mpi_comm is None:
            handle = None
        elif isinstance(mpi_comm, Comm):
            handle = mpi_comm._c.fint
        elif hasattr(mpi_comm, "py2f"):
            handle = int(mpi_comm.py2f())
        else:
            raise invalid(f"Comm: mpi_comm must be an mpi4py communicator, an ember.Comm or None, got "
                          f"{type(mpi_comm).__name__}")
        try:
            t, refusal = as_float(timeout_s, "Comm: timeout_s"), None
        except InvalidArgumentError as e:
            t, refusal = 0.0, e
        # The library refuses a bad deadline (negative, NaN, above 1e9: its message names the
        # value) on every rank alike, after the duplication; a timeout_s that is no number is
        # agreed over the duplicate too (every rank raises).
        self._c = _ember.Comm(handle, t, refusal)
        self._rank: int = self._c.rank
        self._size: int = self._c.size

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def timeout_s(self) -> float:
        """The collective deadline in seconds (Local: each rank's own decides when it gives up)."""
        return self._c.timeout_s

    @timeout_s.setter
    def timeout_s(self, seconds: float) -> None:
        t = as_float(seconds, "Comm.timeout_s", self._rank)
        self._c.timeout_s = t  # the library refuses NaN, negative and huge deadlines (InvalidArgumentError)

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has handed to MPI for other ranks through this Comm's own collectives."""
        return self._c.bytes_sent

    @property
    def closed(self) -> bool:
        return self._c.closed

    def barrier(self) -> None:
        """Collective."""
        self._c.barrier()

    def allreduce_grads(self, array: np.ndarray, convention: str = "mean") -> np.ndarray:
        """All-reduces dense parameter gradients in place under the gradient convention: "sum"
        sums over ranks, "mean" sums and multiplies by 1/W (rounded to the dtype, the factor the
        sharded tables apply). ``array``: a writable C-contiguous float32 or float64 ndarray;
        returns it. Collective: a refused array on one rank raises InvalidArgumentError on every
        rank."""
        try:
            conv = parse_name(convention, CONVENTIONS, "allreduce_grads: convention")
            if (not isinstance(array, np.ndarray) or array.dtype not in (np.float32, np.float64)
                    or not array.flags.c_contiguous or not array.flags.writeable or not array.flags.aligned):
                got = (f"{array.dtype} array (C-contiguous {array.flags.c_contiguous}, writable "
                       f"{array.flags.writeable}, aligned {array.flags.aligned})" if isinstance(array, np.ndarray)
                       else type(array).__name__)
                raise invalid(f"allreduce_grads: expected a writable C-contiguous aligned float32 or float64 "
                              f"ndarray (in place), got {got}", self._rank)
        except Exception as e:
            self._c.agree(e)
            raise  # not reached: agree raises
        self._c.allreduce_grads(array, conv)
        return array

    def close(self) -> None:
        """Frees the duplicate (MPI_Comm_free). Idempotent."""
        self._c.close()

    def __enter__(self) -> Comm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Comm(rank={self._rank}, size={self._size}{', closed' if self.closed else ''})"
