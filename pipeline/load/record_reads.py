"""One record of a split at a time: ArrayRecord's reader of each shard, opened at its first read.

A batch's rows come from all over the epoch, so the loader reads a record per row, at random.
Grain's ArrayRecordDataSource adds its own bookkeeping to each such read (its statistics, finding
the shard, a list built and taken apart), about a tenth of the read of an 8,192-token record; the
readers here are opened as it opens them (read-ahead off: random access).
"""

from __future__ import annotations

from array_record.python.array_record_module import ArrayRecordReader

from pipeline.load.lengths import SplitLengths

_READER_OPTIONS = "readahead_buffer_size:0"
_FILE_BUFFER = 32768  # bytes: a record of 8,192 uint16 tokens is 16 KiB


class SplitRecords:
    """`split[record]`: the bytes of a record of the split (its index in manifest order)."""

    def __init__(self, paths: list[str], lengths: SplitLengths):
        self._paths = paths
        self._lengths = lengths
        self._readers: list[ArrayRecordReader | None] = [None] * len(paths)

    def __getitem__(self, record: int) -> bytes:
        shard, local = self._lengths.locate(record)
        reader = self._readers[shard]
        if reader is None:
            reader = self._readers[shard] = ArrayRecordReader(
                self._paths[shard], _READER_OPTIONS, file_reader_buffer_size=_FILE_BUFFER
            )
        return reader.read([local])[0]
