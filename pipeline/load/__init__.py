"""load: deterministic, checkpointable per-host training batches from prepared directories (Grain).

Imports neither Beam nor JAX: a training host needs only Grain, ArrayRecord and `schemas/`.
"""

from pipeline.load.config import LoaderConfig, host_batch_size
from pipeline.load.data_spec import DataSource, parse_data_spec
from pipeline.load.directories import open_prepared, open_sources
from pipeline.load.errors import LoaderError
from pipeline.load.global_index import PACKINGS
from pipeline.load.loader import make_dataset, make_iterator
from pipeline.load.rows import SOURCE_TOKENS

__all__ = [
    "PACKINGS",
    "SOURCE_TOKENS",
    "DataSource",
    "LoaderConfig",
    "LoaderError",
    "host_batch_size",
    "make_dataset",
    "make_iterator",
    "open_prepared",
    "open_sources",
    "parse_data_spec",
]
