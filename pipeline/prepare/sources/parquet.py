"""Parquet files with a text column; units are runs of whole row groups."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.parquet as pq

from pipeline import storage
from pipeline.prepare.documents import EMPTY, MISSING_TEXT, NON_STRING_TEXT, Reject, Tally
from pipeline.prepare.sources.base import SourceError
from pipeline.prepare.units import WorkUnit
from schemas.manifest import InputInfo, PrepareConfig


def _open(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(storage.open_raw(path))
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise SourceError(f"{path}: not a readable Parquet file: {e}") from None


class ParquetSource:
    def fingerprint_and_plan(
        self, path: str, config: PrepareConfig
    ) -> tuple[InputInfo, list[WorkUnit]]:
        info = InputInfo(path=path, format="parquet", size=storage.size(path), sha256=storage.sha256_of(path))
        metadata = _open(path).metadata
        units, start, first_row, row, group_bytes = [], 0, 0, 0, 0
        for i in range(metadata.num_row_groups):
            group = metadata.row_group(i)
            group_bytes += group.total_byte_size
            row += group.num_rows
            if group_bytes >= config.unit_bytes or i == metadata.num_row_groups - 1:
                units.append(WorkUnit(0, 0, path, "parquet", start, i + 1, first_row))
                start, first_row, group_bytes = i + 1, row, 0
        return info, units

    def read(self, unit: WorkUnit, config: PrepareConfig, tally: Tally) -> Iterator[str]:
        parquet = _open(unit.path)
        field = config.text_field
        if field not in parquet.schema_arrow.names:
            raise SourceError(
                f"{unit.path}: no column {field!r} (columns: {parquet.schema_arrow.names}); "
                "pass --text-field"
            )
        values = parquet.read_row_groups(range(unit.start, unit.end), columns=[field]).column(field)
        yield from documents_from_values(values.to_pylist(), unit, field, tally)


def documents_from_values(
    values: list[object], unit: WorkUnit, field: str, tally: Tally
) -> Iterator[str]:
    """Column values to documents; shared by the columnar sources (Parquet, Hugging Face)."""
    for row, text in enumerate(values, start=unit.first_line):
        if text is None:
            tally.reject(Reject(MISSING_TEXT, unit.path, f"row {row}", f"{field!r} is null"))
        elif not isinstance(text, str):
            tally.reject(Reject(NON_STRING_TEXT, unit.path, f"row {row}", f"{field!r} is {type(text).__name__}"))
        elif not text.strip():
            tally.skip(EMPTY)
        else:
            yield text
