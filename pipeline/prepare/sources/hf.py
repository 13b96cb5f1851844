"""Hugging Face datasets through the `datasets` library: a hub id, a saved dataset or data files.

A hub id needs the network when it is loaded; local directories and data files do not. Units are
contiguous row ranges sized from the Arrow data, so the plan does not depend on the runner.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipeline.prepare.documents import Tally
from pipeline.prepare.sources.base import SourceError
from pipeline.prepare.sources.parquet import documents_from_values
from pipeline.prepare.units import WorkUnit
from schemas.manifest import InputInfo, PrepareConfig

if TYPE_CHECKING:
    import datasets

_SAVED_MARKERS = ("state.json", "dataset_dict.json")


@functools.lru_cache(maxsize=4)
def load(path: str, name: str | None, split: str) -> "datasets.Dataset":
    """Cached, so a worker that runs several units of one dataset loads it once.

    `datasets` is imported here: it takes a second, and most runs read no Hugging Face input.
    """
    import datasets
    try:
        if os.path.isdir(path) and any(os.path.exists(os.path.join(path, m)) for m in _SAVED_MARKERS):
            loaded = datasets.load_from_disk(path)
        else:
            loaded = datasets.load_dataset(path, name=name, split=split)
    except Exception as e:  # datasets raises many types for a dataset it cannot find or read
        raise SourceError(f"{path}: cannot load Hugging Face dataset: {e}") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise SourceError(f"{path}: no split {split!r} (splits: {sorted(loaded)}); pass --hf-split")
        loaded = loaded[split]
    return loaded


def _content_hash(dataset: "datasets.Dataset") -> tuple[int, str]:
    """Size and sha256 of the Arrow files behind the dataset; its fingerprint if it has none."""
    files = [f["filename"] for f in dataset.cache_files]
    if not files:
        return dataset.data.nbytes, hashlib.sha256(dataset._fingerprint.encode()).hexdigest()
    h = hashlib.sha256()
    total = 0
    for filename in files:
        with open(filename, "rb") as f:
            while chunk := f.read(8 * 2**20):
                h.update(chunk)
                total += len(chunk)
    return total, h.hexdigest()


class HuggingFaceSource:
    def fingerprint_and_plan(
        self, path: str, config: PrepareConfig
    ) -> tuple[InputInfo, list[WorkUnit]]:
        dataset = load(path, config.hf_name, config.hf_split)
        if config.text_field not in dataset.column_names:
            raise SourceError(
                f"{path}: no column {config.text_field!r} (columns: {dataset.column_names}); "
                "pass --text-field"
            )
        size, sha256 = _content_hash(dataset)
        rows = len(dataset)
        num_units = max(1, math.ceil(dataset.data.nbytes / config.unit_bytes)) if rows else 0
        per_unit = math.ceil(rows / num_units) if rows else 0
        units = [
            WorkUnit(0, 0, path, "hf", start, min(start + per_unit, rows), start)
            for start in range(0, rows, per_unit or 1)
        ]
        return InputInfo(path=path, format="hf", size=size, sha256=sha256), units

    def read(self, unit: WorkUnit, config: PrepareConfig, tally: Tally) -> Iterator[str]:
        dataset = load(unit.path, config.hf_name, config.hf_split)
        values = dataset.data.slice(unit.start, unit.end - unit.start).column(config.text_field)
        yield from documents_from_values(values.to_pylist(), unit, config.text_field, tally)
