"""What each process fed the global batch, and the check that processes sharing a shard agree.

JAX stitches the global batch from whatever each process hands it. Processes that share a shard
(a model axis spanning them) must hand identical rows, or steps compute on a batch that no
process holds whole, with no error. Each process keeps a running digest of its host batches and
the processes compare them by shard; the same exchange sums the per-source token counts of a
mixture over the shards. The reports travel through the train step itself (see `train_step`), so
the comparison costs no collective of its own.
"""

from __future__ import annotations

import hashlib

import numpy as np

from train.errors import TrainError
from train.mesh import HostShards

_DIGEST_WORDS = 4  # SHA-256 as int64 words


def check_shards_agree(groups: list[int], digests: list[bytes], *, step: int) -> None:
    """Raises when two processes of one group (the same data-axis positions) fed different batches
    up to `step`."""
    first: dict[int, tuple[int, bytes]] = {}
    for process, (group, digest) in enumerate(zip(groups, digests)):
        other, seen = first.setdefault(group, (process, digest))
        if seen != digest:
            raise TrainError(
                f"processes {other} and {process} feed the same rows of the global batch "
                f"(data-axis positions from {group}) but read different batches by step {step}; "
                "start every process with the same --data, --seed, --batch-size, --seq-len and "
                "--packing, on the same prepared data"
            )


def sum_over_groups(groups: list[int], counts: np.ndarray) -> np.ndarray:
    """The global total of per-process counts: each group's once, however many processes it has."""
    first = {group: process for process, group in reversed(list(enumerate(groups)))}
    return counts[sorted(first.values())].sum(axis=0)


def row_digests(host_batch: dict[str, np.ndarray]) -> np.ndarray:
    """int64 [rows]: the first 8 bytes of each row's SHA-256 over every array, by name."""
    rows = len(next(iter(host_batch.values())))
    out = np.empty(rows, "<i8")
    for r in range(rows):
        h = hashlib.sha256()
        for name in sorted(host_batch):
            h.update(name.encode())
            h.update(np.ascontiguousarray(host_batch[name][r]).tobytes())
        out[r] = np.frombuffer(h.digest()[:8], "<i8")[0]
    return out


def batch_digest(first_rows: list[int], digests: np.ndarray) -> str:
    """SHA-256 of the global batch's row digests in row order: the same whichever processes held
    which rows (`digests[p]` are process `p`'s rows from row `first_rows[p]`)."""
    by_row = {}
    for first, rows in zip(first_rows, digests):
        for offset, digest in enumerate(rows):
            by_row[first + offset] = int(digest)
    return hashlib.sha256(
        np.array([by_row[r] for r in sorted(by_row)], "<i8").tobytes()
    ).hexdigest()


class FedBatches:
    """This process's host batches since the run (re)started: a running digest, the target tokens
    per data source (a mixture's `source_tokens`), and the row digests of the latest batch, reported
    as one int64 row (`report`) that `settle` reads with every other process's."""

    def __init__(self, shards: HostShards, num_sources: int, rows: int):
        self.group = shards.indices[
            0
        ]  # position sets are equal or disjoint: the first one names it
        self._positions = len(shards.indices)
        self._digest = hashlib.sha256()
        self._source_tokens = np.zeros(num_sources, np.int64)
        self._latest = np.zeros(rows, "<i8")

    def add(
        self,
        host_batch: dict[str, np.ndarray],
        source_tokens: np.ndarray | None = None,
        *,
        rows: bool,
    ) -> None:
        """Counts a batch in; `rows`: also digest its rows, for a step whose batch digest is
        logged."""
        for name in sorted(host_batch):
            self._digest.update(name.encode())
            self._digest.update(np.ascontiguousarray(host_batch[name]).tobytes())
        if rows:
            self._latest = row_digests(host_batch)
        if source_tokens is not None:
            self._source_tokens += source_tokens

    def report(self) -> np.ndarray:
        """int64: shard group, first row, running digest, tokens per source, the latest batch's row
        digests."""
        words = np.frombuffer(self._digest.digest()[: 8 * _DIGEST_WORDS], dtype="<i8")
        first_row = (
            self.group * len(self._latest) // self._positions
        )  # rows are split evenly over positions
        return np.concatenate(
            ([self.group, first_row], words, self._source_tokens, self._latest)
        ).astype("<i8")


def settle(reports: np.ndarray, num_sources: int, *, step: int) -> tuple[np.ndarray, str]:
    """From every process's `report` (one row each, or one per device: copies agree): checks that
    processes sharing a shard fed the same batches; returns the global target tokens per source
    since the run (re)started, and the digest of the latest global batch (`batch_digest`)."""
    groups = [int(g) for g in reports[:, 0]]
    check_shards_agree(
        groups, [row.tobytes() for row in reports[:, 2 : 2 + _DIGEST_WORDS]], step=step
    )
    tokens = sum_over_groups(
        groups, reports[:, 2 + _DIGEST_WORDS : 2 + _DIGEST_WORDS + num_sources]
    )
    return tokens, batch_digest(
        [int(f) for f in reports[:, 1]], reports[:, 2 + _DIGEST_WORDS + num_sources :]
    )
