"""Columnar files with a text column: Parquet, and Arrow IPC (what `datasets.save_to_disk` writes).

Units are row ranges, sized from the text column's bytes in the file's metadata (Parquet's footer;
an Arrow file's record batch headers), cut inside large row groups so that no unit is larger than
about `--unit-bytes`. A worker streams its rows in small batches, never a whole row group.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dataset import storage
from pipeline.dataset.storage import FileInfo
from pipeline.prepare.execution.retries import is_transient
from pipeline.prepare.read.base import ContentDigest, SourceError
from pipeline.prepare.read.documents import (
    EMPTY,
    MISSING_TEXT,
    NON_STRING_TEXT,
    DocumentRuns,
    Read,
    Reject,
    Tally,
)
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig

_BATCH_ROWS = 1024
# Parquet column chunks are read through a buffer of this size, not whole.
_READ_BUFFER = 4 * 2**20
_NULL = b"\xff" * 8  # no UTF-8 length prefix is this


def row_ranges(groups: list[tuple[int, int]], unit_bytes: int) -> list[tuple[int, int]]:
    """Row ranges of about `unit_bytes` from (rows, bytes) per group: small groups are joined, a
    group larger than a unit is split into equal row ranges."""
    ranges: list[tuple[int, int]] = []
    start = row = pending = 0
    for rows, size in groups:
        if not rows:
            continue  # an empty group (an empty file's) holds no row to give a unit
        if size > unit_bytes:
            if row > start:
                ranges.append((start, row))
            parts = min(math.ceil(size / unit_bytes), rows)
            bounds = [row + rows * i // parts for i in range(parts + 1)]
            ranges += [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
            row += rows
            start, pending = row, 0
            continue
        if pending and pending + size > unit_bytes:
            ranges.append((start, row))
            start, pending = row, 0
        row += rows
        pending += size
    if row > start:
        ranges.append((start, row))
    return ranges


def _add_to_digest(values: list[Any], digest: ContentDigest) -> None:
    for value in values:
        if isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little") + data)
        else:
            digest.update(_NULL if value is None else repr(value).encode())


def documents_from_values(
    values: list[Any],
    ids: list[Any] | None,
    first_row: int,
    path: str,
    config: PrepareConfig,
    tally: Tally,
) -> Iterator[Read]:
    """The documents of rows from `first_row` on, `values` their text column; `ids`, their id
    column's values, when they are to be located (None there where there is no such column)."""
    field = config.text_field
    runs = DocumentRuns(config.max_document_bytes, tally, located=ids is not None)
    for row, text in enumerate(values, start=first_row):
        if text is None:
            tally.reject(Reject(MISSING_TEXT, path, f"{field!r} is null", row=row))
        elif not isinstance(text, str):
            tally.reject(
                Reject(NON_STRING_TEXT, path, f"{field!r} is {type(text).__name__}", row=row)
            )
        elif not text.strip():
            tally.skip(EMPTY)
        else:
            yield from runs.add(text, row, ids[row - first_row] if ids is not None else None)
    yield from runs.flush()


def _column_index(schema: pa.Schema, path: str, field: str) -> int:
    if field not in schema.names:
        raise SourceError(
            f"{path}: no column {field!r} (columns: {schema.names}); pass --text-field"
        )
    return schema.names.index(field)


def _open_parquet(f: Any, path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(f, buffer_size=_READ_BUFFER, pre_buffer=False)
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise SourceError(f"{path}: not a readable Parquet file: {e}") from None


def _read_rows(
    unit: WorkUnit, batches: Iterator[tuple[int, pa.RecordBatch]], field: str, id_field: str | None
) -> Iterator[tuple[list, list | None]]:
    """Values of `field` for the unit's rows, and of `id_field` (None without one, or where the
    batch has no such column), from batches tagged with their first row."""
    for first, batch in batches:
        if first >= unit.end:
            return
        last = first + batch.num_rows
        if last <= unit.start:
            continue
        lo, hi = max(unit.start - first, 0), min(unit.end, last) - first
        ids = None
        if id_field is not None:
            ids = (
                batch.column(id_field).slice(lo, hi - lo).to_pylist()
                if id_field in batch.schema.names
                else [None] * (hi - lo)
            )
        yield batch.column(field).slice(lo, hi - lo).to_pylist(), ids


@contextlib.contextmanager
def _content_errors(path: str) -> Iterator[None]:
    """pyarrow's errors for a corrupt page or a truncated file (`OSError`, `ArrowInvalid`) as the
    SourceError they are, so that `--skip-bad-files` skips the file; a transient read error stays
    itself, to be retried."""
    try:
        yield
    except (pa.ArrowException, OSError) as e:
        if is_transient(e):
            raise
        raise SourceError(f"{path}: unreadable ({e})") from None


class _ColumnarSource:
    """Rows in order, in batches; subclasses say how a file's groups and batches are found."""

    def open(self, path: str) -> Any:
        return storage.open_raw(path)

    def groups(self, f: Any, path: str, field: str) -> list[tuple[int, int]]:
        raise NotImplementedError

    def batches(
        self, f: Any, unit: WorkUnit, columns: list[str]
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Batches of the unit's rows holding `columns` (the text column first; those after it only
        where the file has them)."""
        raise NotImplementedError

    def plan(self, path: str, info: FileInfo, config: PrepareConfig) -> list[tuple[int, int]]:
        with _content_errors(path), self.open(path) as f:
            return row_ranges(self.groups(f, path, config.text_field), config.unit_bytes)

    def read(
        self,
        unit: WorkUnit,
        config: PrepareConfig,
        tally: Tally,
        digest: ContentDigest,
        *,
        located: bool = False,
    ) -> Iterator[Read]:
        row = unit.start
        id_field = config.id_field if located and config.id_field != config.text_field else None
        columns = [config.text_field] + ([id_field] if id_field else [])
        with _content_errors(unit.path), self.open(unit.path) as f:
            for values, id_values in _read_rows(
                unit, self.batches(f, unit, columns), config.text_field, id_field
            ):
                _add_to_digest(values, digest)
                if located and id_values is None:
                    id_values = [None] * len(values)
                yield from documents_from_values(values, id_values, row, unit.path, config, tally)
                row += len(values)
        if row != unit.end:
            raise SourceError(
                f"{unit.path}: expected rows up to {unit.end}, found {row}; did the file change?"
            )


class ParquetSource(_ColumnarSource):
    def groups(self, f: Any, path: str, field: str) -> list[tuple[int, int]]:
        metadata = _open_parquet(f, path).metadata
        _column_index(metadata.schema.to_arrow_schema(), path, field)
        # Column chunks are the schema's leaves: a struct column before the text holds several.
        column = next(
            (i for i in range(metadata.num_columns) if metadata.schema.column(i).path == field),
            None,
        )
        if column is None:
            raise SourceError(
                f"{path}: column {field!r} is nested, not text; pass --text-field with a string "
                "column"
            )
        return [
            (
                metadata.row_group(i).num_rows,
                metadata.row_group(i).column(column).total_uncompressed_size,
            )
            for i in range(metadata.num_row_groups)
        ]

    def batches(
        self, f: Any, unit: WorkUnit, columns: list[str]
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        parquet = _open_parquet(f, unit.path)
        _column_index(parquet.schema_arrow, unit.path, columns[0])
        columns = [c for c in columns if c in parquet.schema_arrow.names]
        first, needed = 0, []
        for i in range(parquet.metadata.num_row_groups):
            rows = parquet.metadata.row_group(i).num_rows
            if first < unit.end and first + rows > unit.start:
                needed.append((i, first))
            first += rows
        for group, first in needed:
            for batch in parquet.iter_batches(
                batch_size=_BATCH_ROWS, row_groups=[group], columns=columns
            ):
                yield first, batch
                first += batch.num_rows


def _arrow_reader(f: Any, path: str) -> pa.RecordBatchReader:
    try:
        return pa.ipc.open_stream(f)
    except pa.ArrowInvalid:
        f.seek(0)
        try:
            return pa.ipc.open_file(f)
        except pa.ArrowInvalid as e:
            raise SourceError(f"{path}: not a readable Arrow IPC file: {e}") from None


def _arrow_batches(f: Any, path: str) -> Iterator[pa.RecordBatch]:
    reader = _arrow_reader(f, path)
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


class ArrowSource(_ColumnarSource):
    """Planning walks the record batch headers: through a memory map, a local file's column data is
    never read for it (elsewhere the file is read once)."""

    def open(self, path: str) -> Any:
        return pa.memory_map(path) if storage.is_local(path) else storage.open_raw(path)

    def groups(self, f: Any, path: str, field: str) -> list[tuple[int, int]]:
        groups = []
        for batch in _arrow_batches(f, path):
            column = _column_index(batch.schema, path, field)
            groups.append((batch.num_rows, batch.column(column).nbytes))
        return groups

    def batches(
        self, f: Any, unit: WorkUnit, columns: list[str]
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        first = 0
        for batch in _arrow_batches(f, unit.path):
            _column_index(batch.schema, unit.path, columns[0])
            yield first, batch
            first += batch.num_rows
