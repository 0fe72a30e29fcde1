"""ember: embedding bags with fused optimizers and Lookup-Free Quantization over MPI (numpy API).

The objects, TorchRec's names where they exist:

* ``TableConfig``, ``KJT`` (keyed jagged tensor), ``EmbeddingBagCollection`` (local);
* ``Comm`` (an MPI communicator), ``ShardedEmbeddingBagCollection``, ``TablePlan``, ``plan()``,
  ``describe_plan()``, ``Checkpoint`` (inspection of a saved checkpoint);
* ``QuantEmbeddingBagCollection`` (a serving bundle's quantized tables, ``ember export``) and the
  row functions ``quantize_rows`` / ``dequantize_rows`` (FBGEMM's fused row-wise formats);
* the exceptions of ``ember.errors``, one class per library status (re-exported here).

Arrays: ids int64, lengths int32, offsets int64, weights and outputs float32; C-contiguous arrays
of the right dtype are used without a copy. ``import ember.torch`` gives the PyTorch modules.
"""

from __future__ import annotations

from . import errors
from .errors import *  # noqa: F401,F403  (the exception classes)
from . import _ember
from ._config import TableConfig
from ._kjt import KJT
from ._ebc import EmbeddingBagCollection
from ._comm import Comm
from ._sharded import (PlanStats, ShardedEmbeddingBagCollection, TablePlan, Topology, describe_plan, detect_topology,
                       plan, predict_plan, probe_disk)
from ._checkpoint import Checkpoint
from .lfq import LFQ
from ._quant import QuantEmbeddingBagCollection, dequantize_rows, quantize_rows, row_bytes

__version__: str = _ember.version()


def build_info() -> str:
    """The library's build description (compiler, OpenMP, MPI, kernel variants)."""
    return _ember.build_info()


def cpu() -> tuple[str, str]:
    """(CPU model name, its relevant features "avx2 fma f16c ...")."""
    return _ember.cpu()


def bytes_outstanding() -> int:
    """Bytes every ember object of this process (collections, communicators, checkpoints, LFQ
    modules, weights_view arrays keeping a closed collection's storage) holds through the library,
    counted by the allocator hooks of their contexts; 0 when all are closed or collected. Each
    object's own share is its ``.bytes_outstanding``. Local; thread-safe."""
    return _ember.bytes_outstanding()


def isa_best() -> str:
    """The best kernel variant this build and CPU run: "generic", "avx2" or "avx512"."""
    return _ember.isa_best()


__all__ = [
    "__version__", "build_info", "cpu", "isa_best", "bytes_outstanding", "errors",
    "TableConfig", "KJT", "EmbeddingBagCollection",
    "Comm", "ShardedEmbeddingBagCollection", "TablePlan", "Topology", "PlanStats", "plan", "predict_plan",
    "describe_plan", "detect_topology", "probe_disk", "Checkpoint", "LFQ",
    "QuantEmbeddingBagCollection", "quantize_rows", "dequantize_rows", "row_bytes",
    *errors.__all__,
]
