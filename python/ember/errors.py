"""The exceptions of ember: one class per ``ember_status`` (include/ember/core.h).

Every error the library reports arrives as an instance of the class of its status, carrying

* ``status``: the status name without its prefix (``"INVALID_ARG"``),
* ``code``: its value (``-1``: the library's, given to each class when ``ember._ember`` loads),
* ``message``: the library's message, which names the call, the feature or table, the offending
  value and the rank (``"... (rank 1)"``); ``str(exc)`` is the message.

All derive from :class:`EmberError`; where a builtin exception means the same, the class also
derives from it (``OutOfRangeError`` is an ``IndexError``, ``InvalidArgumentError`` a
``ValueError``, ...), so ``except ValueError`` catches bad arguments as usual.

In a collective call every rank raises the same class with the same message: the failing rank's
(the library agrees on the outcome before it communicates, and so does the Python layer).
"""

from __future__ import annotations

__all__ = [
    "EmberError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "OutOfMemoryError",
    "EmberIOError",
    "CommunicationError",
    "RemoteError",
    "NumericError",
    "UnsupportedError",
    "StateError",
    "FormatError",
    "CollectiveTimeoutError",
    "DeviceError",
]


class EmberError(Exception):
    """Base class of every ember error. ``status``/``code`` name the ``ember_status`` (``code``: set
    on each class from the library's table when ember._ember loads)."""

    status: str = "UNKNOWN"
    code: int = 0

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message: str = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[EmberError], tuple[str]]:  # picklable (multiprocessing, pytest-xdist) with its message
        return (type(self), (self.message,))


class InvalidArgumentError(EmberError, ValueError):
    """EMBER_ERR_INVALID_ARG: a malformed argument (shape, name, value); nothing changed."""

    status = "INVALID_ARG"


class OutOfRangeError(EmberError, IndexError):
    """EMBER_ERR_OUT_OF_RANGE: an id outside its table (bounds mode "error")."""

    status = "OUT_OF_RANGE"


class OutOfMemoryError(EmberError, MemoryError):
    """EMBER_ERR_NOMEM: an allocation failed; nothing changed."""

    status = "NOMEM"


class EmberIOError(EmberError, OSError):
    """EMBER_ERR_IO: a file operation failed (the message names the path and the OS reason)."""

    status = "IO"


class CommunicationError(EmberError):
    """EMBER_ERR_COMM: MPI reported an error (its text is in the message)."""

    status = "COMM"


class RemoteError(EmberError):
    """EMBER_ERR_REMOTE: another rank failed this call."""

    status = "REMOTE"


class NumericError(EmberError, ArithmeticError):
    """EMBER_ERR_NUMERIC: a NaN or infinite value (gradient, weight); nothing changed."""

    status = "NUMERIC"


class UnsupportedError(EmberError, NotImplementedError):
    """EMBER_ERR_UNSUPPORTED: a configuration the library does not support (scheme, ISA)."""

    status = "UNSUPPORTED"


class StateError(EmberError, RuntimeError):
    """EMBER_ERR_STATE: a call out of order for the object's state (closed, no forward before backward)."""

    status = "STATE"


class FormatError(EmberError, ValueError):
    """EMBER_ERR_FORMAT: malformed data (a checkpoint's manifest or a record failing its CRC)."""

    status = "FORMAT"


class CollectiveTimeoutError(EmberError, TimeoutError):
    """EMBER_ERR_TIMEOUT: a collective missed its deadline (Comm.timeout_s); the message names the
    ranks that never arrived. The communicator refuses every later collective: end the job."""

    status = "TIMEOUT"


class DeviceError(EmberError, RuntimeError):
    """EMBER_ERR_DEVICE: the GPU or its runtime failed (the cuda backend); the message carries the
    runtime's own error string."""

    status = "DEVICE"


#: status name -> class; the extension raises through this table and gives each class its code.
_BY_STATUS: dict[str, type[EmberError]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        OutOfRangeError,
        OutOfMemoryError,
        EmberIOError,
        CommunicationError,
        RemoteError,
        NumericError,
        UnsupportedError,
        StateError,
        FormatError,
        CollectiveTimeoutError,
        DeviceError,
    )
}
