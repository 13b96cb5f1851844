"""File access through Beam's `FileSystems`, so `gs://` and other Beam filesystems work like paths.

Everything that becomes visible under a final name is first written whole under a temporary name
and then renamed, so a reader never sees a partial file as complete. Paths are literal: only
`glob` expands patterns, and listings escape the directory they list.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

_COPY_CHUNK = 8 * 2**20
_UMASK = os.umask(0)
os.umask(_UMASK)
# Scratch names start with a dot, so that no reader takes them for output.
_SCRATCH_PREFIX = ".partial-"
_TEMPORARY_MARK = ".tmp-"


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """A file's size and a token that changes when its content may have: the modification time
    for local files, the content checksum an object store keeps (CRC32C on GCS) where there is
    one."""

    size: int
    version: str


def is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) in (None, "file")


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def file_info(path: str) -> FileInfo:
    """Size and version of one file, without pattern matching; FileNotFoundError if it is
    missing."""
    if is_local(path):
        st = os.stat(path)
        return FileInfo(st.st_size, f"mtime_ns:{st.st_mtime_ns}")
    if not FileSystems.exists(path):
        raise FileNotFoundError(f"no such object: {path}")
    filesystem = FileSystems.get_filesystem(path)
    metadata = filesystem.metadata(path)
    checksum = filesystem.checksum(path)
    # Some filesystems answer with the size for a checksum: no better than the update time.
    if checksum and checksum != str(metadata.size_in_bytes):
        return FileInfo(metadata.size_in_bytes, f"checksum:{checksum}")
    return FileInfo(metadata.size_in_bytes, f"updated:{metadata.last_updated_in_seconds!r}")


def sizes_in(directory: str) -> dict[str, int]:
    """Full path -> size of every file directly under a directory, from one listing (an object store
    answers a listing with sizes: one request per thousand objects, not one per object)."""
    if is_local(directory):
        if not os.path.isdir(directory):
            return {}
        with os.scandir(directory) as entries:
            return {e.path: e.stat().st_size for e in entries if e.is_file()}
    pattern = join(escape_glob(directory), "*")
    return {m.path: m.size_in_bytes for m in FileSystems.match([pattern])[0].metadata_list}


def open_raw(path: str) -> BinaryIO:
    """A binary reader that never decompresses: the caller decides how bytes are decoded."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    """The file's bytes; FileNotFoundError if there is none (Beam's filesystems raise their own)."""
    if not exists(path):
        raise FileNotFoundError(path)
    with open_raw(path) as f:
        return f.read()


def read_text(path: str) -> str:
    with open_raw(path) as f:
        return f.read().decode("utf-8")


def escape_glob(path: str) -> str:
    """A pattern that matches exactly `path` (Beam's globs take `[x]` for a literal `x`)."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in path)


def glob(pattern: str) -> list[str]:
    """Paths matching a glob, sorted, so the plan never depends on listing order."""
    results = FileSystems.match([pattern])[0].metadata_list
    return sorted(m.path for m in results)


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(path, exist_ok=True)


def _temporary_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}{_TEMPORARY_MARK}{uuid.uuid4().hex}")


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(local_file: str, path: str) -> None:
    """Makes a finished scratch file visible as `path`, whole or not at all."""
    if is_local(path):
        # Data on disk before the name, and the name on disk before anyone is told: a power
        # cut never leaves a published name over missing bytes.
        _fsync(local_file)
        os.replace(local_file, path)  # the scratch file sits beside `path`: one atomic rename
        _fsync(os.path.dirname(os.path.abspath(path)))
        return
    temporary = _temporary_name(path)
    with (
        open(local_file, "rb") as src,
        FileSystems.create(temporary, compression_type=CompressionTypes.UNCOMPRESSED) as dst,
    ):
        shutil.copyfileobj(src, dst, _COPY_CHUNK)
    FileSystems.rename([temporary], [path])
    os.remove(local_file)


def new_scratch(path: str) -> str:
    """A local scratch file to write what will become `path` (see `publish`).

    For a local destination it sits in the same directory, where a rename is atomic; for a remote
    one, in the local temporary directory.
    """
    scratch_dir = os.path.dirname(path) if is_local(path) else None
    if scratch_dir:
        os.makedirs(scratch_dir, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=_SCRATCH_PREFIX, dir=scratch_dir)
    os.close(fd)
    os.chmod(scratch, 0o666 & ~_UMASK)  # mkstemp creates 0600; published files follow the umask
    return scratch


def discard(scratch: str) -> None:
    if os.path.exists(scratch):
        os.remove(scratch)


@contextmanager
def atomic_local_file(path: str) -> Iterator[str]:
    """A local scratch path to write; on success it becomes `path` in one rename."""
    scratch = new_scratch(path)
    try:
        yield scratch
        publish(scratch, path)
    finally:
        discard(scratch)


def write_bytes_atomic(path: str, data: bytes) -> None:
    with atomic_local_file(path) as scratch:
        with open(scratch, "wb") as f:
            f.write(data)


def _is_scratch(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith(_SCRATCH_PREFIX) or (name.startswith(".") and _TEMPORARY_MARK in name)


def _objects_under(path: str, limit: int | None = None) -> list[str]:
    """On an object store, a directory is a key prefix: every object below `path`."""
    result = FileSystems.match([join(escape_glob(path), "**")], limits=[limit])[0]
    return [m.path for m in result.metadata_list]


def remove_scratch(directory: str) -> int:
    """Delete the scratch files that interrupted writers left below a directory; returns how
    many."""
    if is_local(directory):
        found = [os.path.join(d, n) for d, _, names in os.walk(directory) for n in names]
    else:
        found = _objects_under(directory)
    scratch = [p for p in found if _is_scratch(p)]
    delete(scratch)
    return len(scratch)


def has_entries(directory: str) -> bool:
    if is_local(directory):
        return os.path.isdir(directory) and bool(os.listdir(directory))
    return bool(_objects_under(directory, limit=1))


def delete(paths: list[str]) -> None:
    """Delete these files; those already gone are no error."""
    present = [p for p in paths if FileSystems.exists(p)]
    if present:
        FileSystems.delete(present)


def delete_tree(path: str) -> None:
    """Delete a directory with everything in it (only for directories the project owns whole)."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        delete(_objects_under(path))


def remove_empty_directory(path: str) -> None:
    """A local directory left empty is removed; object stores have no directories to remove."""
    if is_local(path) and os.path.isdir(path) and not os.listdir(path):
        os.rmdir(path)


def is_within(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or lies below it (symbolic links resolved for local paths)."""
    if is_local(path) != is_local(directory):
        return False
    if is_local(path):
        path, directory = os.path.realpath(path), os.path.realpath(directory)
        return os.path.commonpath([path, directory]) == directory
    directory = directory.rstrip("/") + "/"
    return path == directory[:-1] or path.startswith(directory)


@contextmanager
def local_copy(path: str) -> Iterator[str]:
    """A local file with the bytes of `path`, for readers (ArrayRecord's) that open only local
    paths."""
    if is_local(path):
        yield path
        return
    fd, scratch = tempfile.mkstemp(prefix=".download-")
    try:
        with os.fdopen(fd, "wb") as dst, open_raw(path) as src:
            shutil.copyfileobj(src, dst, _COPY_CHUNK)
        yield scratch
    finally:
        os.remove(scratch)


def list_files(directory: str, suffix: str = "") -> list[str]:
    """Sorted full paths of the files directly under a directory, empty if it does not exist."""
    if is_local(directory):
        if not os.path.isdir(directory):
            return []
        names = sorted(
            n for n in os.listdir(directory) if n.endswith(suffix) and not n.startswith(".")
        )
        return [os.path.join(directory, n) for n in names]
    pattern = join(escape_glob(directory), f"*{escape_glob(suffix)}")
    return [p for p in glob(pattern) if not os.path.basename(p).startswith(".")]
