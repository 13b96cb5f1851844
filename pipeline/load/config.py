"""What decides a host's batches (`LoaderConfig`), and which rows of the global batch the host
holds."""

from __future__ import annotations

import dataclasses
import sys

from pipeline.load.data_spec import DataSource, check_names
from pipeline.load.errors import LoaderError, LoaderSettingError
from pipeline.load.global_index import PACKINGS
from schemas import formats


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """What decides a host's batches, and how they are fetched.

    `data`: one prepared directory, or the sources of a mixture (`parse_data_spec`); a mixture of
    more than one source adds "source_tokens" to every batch. `packing`: "concat" (windows of the
    token stream) or "document" (whole documents per row, with segment ids and positions, packed
    best fit; "document-first-fit" packs them first fit in draw order, as loader version 2 did).
    `num_epochs`: None repeats forever; otherwise the batches end before the first that needs a
    record of a later epoch of any source. `worker_count`: prefetch processes.
    `shard_index`/`shard_count`: which of `shard_count` equal row ranges of the global batch this
    process feeds; processes that feed the same rows pass the same index, and get identical
    batches. None takes them from JAX's process index and count. `verify`: re-hash every shard
    against its manifest when opening (reads all the data once).
    """

    data: str | tuple[DataSource, ...]
    split: str = "train"
    seq_len: int = 1024
    global_batch_size: int = 16
    seed: int = 0
    packing: str = "concat"
    num_epochs: int | None = None
    worker_count: int = 0
    shard_index: int | None = None
    shard_count: int | None = None
    verify: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            if not self.data:
                raise LoaderError("data must name a prepared directory (got an empty string)")
        elif isinstance(self.data, tuple) and all(isinstance(s, DataSource) for s in self.data):
            check_names(self.data)
        else:
            raise LoaderError(
                "data must be a directory or a tuple of DataSource, as parse_data_spec returns "
                f"(got {self.data!r})"
            )
        if self.split not in formats.SPLITS:
            raise LoaderSettingError("split", self.split, f"must be one of {formats.SPLITS}")
        if self.seq_len < 1:
            raise LoaderSettingError("seq_len", self.seq_len, "must be at least 1")
        if self.global_batch_size < 1:
            raise LoaderSettingError(
                "global_batch_size", self.global_batch_size, "must be at least 1"
            )
        if self.seed < 0:
            raise LoaderSettingError("seed", self.seed, "must be at least 0")
        if self.packing not in PACKINGS:
            raise LoaderSettingError("packing", self.packing, f"must be one of {PACKINGS}")
        if self.num_epochs is not None and self.num_epochs < 1:
            raise LoaderSettingError(
                "num_epochs", self.num_epochs, "must be at least 1, or None to repeat"
            )
        if self.worker_count < 0:
            raise LoaderSettingError("worker_count", self.worker_count, "must be at least 0")
        if self.shard_count is not None and self.shard_count < 1:
            raise LoaderSettingError("shard_count", self.shard_count, "must be at least 1")
        if self.shard_index is not None and self.shard_index < 0:
            raise LoaderSettingError("shard_index", self.shard_index, "must be at least 0")

    @property
    def sources(self) -> tuple[DataSource, ...]:
        """The sources in mixture order; a lone directory is one source of weight 1."""
        return (DataSource.directory(self.data),) if isinstance(self.data, str) else self.data

    @property
    def source_names(self) -> tuple[str, ...]:
        """Names in the order of "source_tokens"."""
        return tuple(s.name for s in self.sources)


def resolve_shard(shard_index: int | None, shard_count: int | None) -> tuple[int, int]:
    """Fills what is not given from JAX's process index and count, where the program uses JAX.

    A program of several processes has imported JAX before it makes its loader (to call
    `jax.distributed.initialize`); one that has not is a single process, index 0 of 1. So the
    loader never imports JAX itself, and the `load` extra alone runs it.
    """
    if shard_index is None or shard_count is None:
        jax = sys.modules.get("jax")
        shard_index = (jax.process_index() if jax else 0) if shard_index is None else shard_index
        shard_count = (jax.process_count() if jax else 1) if shard_count is None else shard_count
    if not 0 <= shard_index < shard_count:
        raise LoaderError(
            f"shard_index must be in [0, shard_count) (got {shard_index=}, {shard_count=})"
        )
    return shard_index, shard_count


def host_batch_size(config: LoaderConfig) -> int:
    """Rows of each batch this process gets: global_batch_size / shard_count."""
    _, count = resolve_shard(config.shard_index, config.shard_count)
    if config.global_batch_size % count:
        raise LoaderError(
            f"global_batch_size {config.global_batch_size} is not divisible by the "
            f"{count} parts of the global batch (shard_count); use a multiple of {count}"
        )
    return config.global_batch_size // count
