"""load: deterministic, checkpointable per-host training batches from prepared directories (Grain).

Imports neither Beam nor JAX: a training host needs only Grain, ArrayRecord and `schemas/`. Each
name below is imported where it is first used, so that a module of the package that needs none of
them (`data_spec`, which `tokshards train` reads its flags with) does not load Grain, which loads
JAX.
"""

import importlib
from typing import Any

_MODULES = {
    "LoaderConfig": "config",
    "host_batch_size": "config",
    "DataSource": "data_spec",
    "parse_data_spec": "data_spec",
    "open_prepared": "directories",
    "open_sources": "directories",
    "LoaderError": "errors",
    "PACKINGS": "global_index",
    "make_dataset": "loader",
    "make_iterator": "loader",
    "SOURCE_TOKENS": "rows",
}

__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
