"""What each process fed the global batch, and the check that processes sharing a shard agree.

JAX stitches the global batch from whatever each process hands it. Processes that share a shard
(a model axis spanning them) must hand identical rows, or steps compute on a batch that no
process holds whole, with no error. Each process keeps a running digest of its host batches and
the processes compare them by shard; the same exchange sums the per-source token counts of a
mixture over the shards.
"""

from __future__ import annotations

import hashlib

import numpy as np

from pipeline.load import SOURCE_TOKENS
from train.mesh import HostShards
from train.processes import gather_int64

_DIGEST_WORDS = 4  # SHA-256 as int64 words


def join_host_batches(batches: tuple[dict[str, np.ndarray], ...]) -> dict[str, np.ndarray]:
    """The batches of a process's shards as one host batch: rows in shard order, source tokens summed."""
    return {
        name: sum(b[name] for b in batches) if name == SOURCE_TOKENS else np.concatenate([b[name] for b in batches])
        for name in batches[0]
    }


def check_shards_agree(groups: list[int], digests: list[bytes], *, step: int) -> None:
    """Raises when two processes of one group (the same data-axis positions) fed different batches
    up to `step`."""
    first: dict[int, tuple[int, bytes]] = {}
    for process, (group, digest) in enumerate(zip(groups, digests)):
        other, seen = first.setdefault(group, (process, digest))
        if seen != digest:
            raise ValueError(
                f"processes {other} and {process} feed the same rows of the global batch (data-axis positions "
                f"from {group}) but read "
                f"different batches by step {step}; start every process with the same --data, --seed, "
                "--batch-size, --seq-len and --packing, on the same prepared data"
            )


def sum_over_groups(groups: list[int], counts: np.ndarray) -> np.ndarray:
    """The global total of per-process counts: each group's once, however many processes it has."""
    first = {group: process for process, group in reversed(list(enumerate(groups)))}
    return counts[sorted(first.values())].sum(axis=0)


class FedBatches:
    """This process's host batches since the run (re)started: a running digest, and the target
    tokens per data source (a mixture's `source_tokens`)."""

    def __init__(self, shards: HostShards, num_sources: int):
        self.group = shards.indices[0]  # position sets are equal or disjoint: the first one names it
        self._digest = hashlib.sha256()
        self._source_tokens = np.zeros(num_sources, np.int64)

    def add(self, host_batch: dict[str, np.ndarray], source_tokens: np.ndarray | None = None) -> None:
        for name in sorted(host_batch):
            self._digest.update(name.encode())
            self._digest.update(np.ascontiguousarray(host_batch[name]).tobytes())
        if source_tokens is not None:
            self._source_tokens += source_tokens

    def reconcile(self, step: int) -> np.ndarray:
        """Checks every shard's processes fed the same batches; returns the global target tokens per
        source since the run (re)started. A collective: all processes call it at the same step."""
        words = np.frombuffer(self._digest.digest()[: 8 * _DIGEST_WORDS], dtype="<i8")
        rows = gather_int64(np.concatenate(([self.group], words, self._source_tokens)))
        groups = [int(g) for g in rows[:, 0]]
        check_shards_agree(groups, [row.tobytes() for row in rows[:, 1 : 1 + _DIGEST_WORDS]], step=step)
        return sum_over_groups(groups, rows[:, 1 + _DIGEST_WORDS :])
