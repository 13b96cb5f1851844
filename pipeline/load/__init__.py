"""load: deterministic, checkpointable per-host training batches from a prepared directory (Grain).

Imports neither Beam nor JAX: a training host needs only Grain, ArrayRecord and `schemas/`.
"""

from pipeline.load.loader import (
    PACKINGS,
    LoaderConfig,
    LoaderError,
    host_batch_size,
    make_dataset,
    make_iterator,
    open_prepared,
)

__all__ = [
    "PACKINGS",
    "LoaderConfig",
    "LoaderError",
    "host_batch_size",
    "make_dataset",
    "make_iterator",
    "open_prepared",
]
