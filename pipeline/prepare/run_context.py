"""What every unit of a run shares: the config, where the output and the failures go, and what the
launcher planned with.

The launcher makes one `RunContext` per run; it travels pickled, once, in each of the pipeline's
DoFns, so a worker on any runner knows the run without reading anything first.
"""

from __future__ import annotations

import dataclasses

from schemas.prepare_config import PrepareConfig


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What every unit of a run shares, pickled once into the pipeline's DoFn."""

    config: PrepareConfig
    dtype_name: str
    num_units: int
    output_dir: str
    plan: str  # the plan's fingerprint, recorded in every unit record
    package_versions: dict[str, str]  # the launcher's, for the run's extras
    extras: tuple[str, ...]
    failures_dir: str
    eval_digests: tuple[
        str, ...
    ] = ()  # SHA-256 of each of config.decontaminate, as the launcher read them
