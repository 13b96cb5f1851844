"""Turning one work unit into its shards: read, tokenize, split, shuffle, pack, write, record.

Everything here depends only on the unit and the config, so any worker, on any runner, at any
time, writes the same bytes for the same unit. The unit record is written last: a unit without
one is unfinished, whatever shards it may have left behind.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from pipeline import storage
from pipeline.prepare.documents import BAD_FILE, Reject, Tally
from pipeline.prepare.shard_writer import write_shard
from pipeline.prepare.sources import SOURCES, SourceError
from pipeline.tokenizer import encode_documents, load_encoding
from pipeline.prepare.units import UnitResult, WorkUnit, unit_record_name
from schemas import formats
from schemas.manifest import PrepareConfig, ShardInfo
from schemas.records import encode_record, numpy_dtype, record_bounds


def validation_mask(texts: list[str], fraction: float, seed: int) -> np.ndarray:
    """True for documents that go to validation, by a salted hash of their text.

    A document's split depends on its content alone, so it stays put when the corpus around it
    changes, and exact duplicates land in the same split.
    """
    if fraction <= 0.0:
        return np.zeros(len(texts), dtype=bool)
    salt = seed.to_bytes(8, "little", signed=True)
    threshold = int(fraction * 2**64)
    return np.fromiter(
        (
            int.from_bytes(
                hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8, salt=salt).digest(),
                "little",
            )
            < threshold
            for t in texts
        ),
        dtype=bool,
        count=len(texts),
    )


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A fixed integer mix (SplitMix64's finalizer): the same bits under any numpy version."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def shuffled_order(count: int, seed: int, unit_index: int, split: str) -> np.ndarray:
    """A permutation keyed by stable hashes, so it is the same under any numpy version."""
    key = hashlib.blake2b(f"{seed}:{unit_index}:{split}".encode(), digest_size=8).digest()
    keys = _splitmix64(np.arange(count, dtype=np.uint64) ^ np.uint64(int.from_bytes(key, "little")))
    return np.argsort(keys, kind="stable")


def process_unit(
    unit: WorkUnit, config: PrepareConfig, *, dtype_name: str, num_units: int, output_dir: str
) -> UnitResult:
    encoding = load_encoding(config.tokenizer)
    dtype = numpy_dtype(dtype_name)
    tally = Tally()
    try:
        texts = list(SOURCES[unit.format].read(unit, config, tally))
    except (SourceError, OSError) as e:
        message = str(e) if isinstance(e, SourceError) else f"{unit.path}: {e}"
        if not config.skip_bad_files:
            raise SourceError(message) from None
        # The whole unit is skipped and recorded: no partial file is taken as complete.
        tally = Tally()
        tally.reject(Reject(BAD_FILE, unit.path, f"unit {unit.index}", message))
        texts = []
    to_validation = validation_mask(texts, config.validation_fraction, config.seed)

    shards = []
    for split, selected in (("train", ~to_validation), ("validation", to_validation)):
        indices = np.flatnonzero(selected)
        if len(indices) == 0:
            continue
        order = indices[shuffled_order(len(indices), config.seed, unit.index, split)]
        tokens, lengths = encode_documents(encoding, [texts[i] for i in order.tolist()])
        flat = tokens.astype(dtype)  # the dtype was chosen to hold every id of the vocabulary
        bounds = record_bounds(lengths.tolist(), config.record_tokens)
        relative = formats.shard_path(split, unit.index, num_units)
        written = write_shard(
            storage.join(output_dir, relative),
            (encode_record(flat[a:b], dtype_name) for a, b in zip(bounds, bounds[1:])),
        )
        shards.append(
            ShardInfo(
                split=split,
                path=relative,
                unit=unit.index,
                records=written.records,
                documents=len(indices),
                tokens=len(flat),
                bytes=written.bytes,
                sha256=written.sha256,
            )
        )

    state = storage.join(output_dir, formats.STATE_DIR)
    if tally.rejects:
        lines = "".join(json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in tally.rejects)
        storage.write_bytes_atomic(
            storage.join(state, formats.UNIT_REJECTS_DIR, f"{unit.index:05d}.jsonl"), lines.encode()
        )
    result = UnitResult(
        unit=unit.index,
        shards=tuple(shards),
        skipped=dict(sorted(tally.skipped.items())),
        counts=dict(sorted(tally.counts.items())),
    )
    storage.write_bytes_atomic(
        storage.join(state, formats.UNITS_DIR, unit_record_name(unit.index)), result.to_json().encode()
    )
    return result
