"""File access through Beam's `FileSystems`, so `gs://` and other Beam filesystems work like paths.

Everything that becomes visible under a final name is first written whole under a temporary name
and then renamed, so a reader never sees a partial file as complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.integrity import file_sha256

_COPY_CHUNK = 8 * 2**20
_UMASK = os.umask(0)
os.umask(_UMASK)


def is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) in (None, "file")


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def size(path: str) -> int:
    return FileSystems.match([path])[0].metadata_list[0].size_in_bytes


def open_raw(path: str):
    """A binary reader that never decompresses: the caller decides how bytes are decoded."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_text(path: str) -> str:
    with open_raw(path) as f:
        return f.read().decode("utf-8")


def sha256_of(path: str) -> str:
    with open_raw(path) as f:
        return file_sha256(f)


def match(pattern: str) -> list[str]:
    """Paths matching a glob, sorted, so the plan never depends on listing order."""
    results = FileSystems.match([pattern])[0].metadata_list
    return sorted(m.path for m in results)


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(path, exist_ok=True)


def _temporary_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex}")


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(local_file: str, path: str) -> None:
    if is_local(path):
        # Data on disk before the name, and the name on disk before anyone is told: a power
        # cut never leaves a published name over missing bytes.
        _fsync(local_file)
        os.replace(local_file, path)  # the scratch file sits beside `path`: one atomic rename
        _fsync(os.path.dirname(os.path.abspath(path)))
        return
    temporary = _temporary_name(path)
    with open(local_file, "rb") as src, FileSystems.create(
        temporary, compression_type=CompressionTypes.UNCOMPRESSED
    ) as dst:
        shutil.copyfileobj(src, dst, _COPY_CHUNK)
    FileSystems.rename([temporary], [path])
    os.remove(local_file)


@contextmanager
def atomic_local_file(path: str) -> Iterator[str]:
    """A local scratch path to write; on success it becomes `path` in one rename.

    For a local destination the scratch file sits in the same directory (rename is atomic there);
    for a remote one it is uploaded under a temporary name, then renamed.
    """
    scratch_dir = os.path.dirname(path) if is_local(path) else None
    if scratch_dir:
        os.makedirs(scratch_dir, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=".partial-", dir=scratch_dir)
    os.close(fd)
    os.chmod(scratch, 0o666 & ~_UMASK)  # mkstemp creates 0600; published files follow the umask
    try:
        yield scratch
        _publish(scratch, path)
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)


def write_bytes_atomic(path: str, data: bytes) -> None:
    with atomic_local_file(path) as scratch:
        with open(scratch, "wb") as f:
            f.write(data)


def remove_scratch(directory: str) -> int:
    """Delete scratch files an interrupted writer left under a local directory; returns how many.

    Scratch names start with a dot, so readers never take them for output; this only reclaims
    the space. Remote filesystems are left alone (their scratch names are just as hidden).
    """
    if not is_local(directory):
        return 0
    removed = 0
    for dirpath, _, names in os.walk(directory):
        for name in names:
            if name.startswith(".partial-") or (name.startswith(".") and ".tmp-" in name):
                os.remove(os.path.join(dirpath, name))
                removed += 1
    return removed


def _objects_under(path: str, limit: int | None = None) -> list[str]:
    """On an object store, a directory is a key prefix: every object below `path`."""
    result = FileSystems.match([join(path, "**")], limits=[limit])[0]
    return [m.path for m in result.metadata_list]


def has_entries(directory: str) -> bool:
    if is_local(directory):
        return os.path.isdir(directory) and bool(os.listdir(directory))
    return bool(_objects_under(directory, limit=1))


def delete_tree(path: str) -> None:
    """Delete a file or a directory with everything in it; nothing if it does not exist."""
    if is_local(path):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
        return
    # An object store answers `exists` only for objects, never for a directory's prefix.
    targets = ([path] if FileSystems.exists(path) else []) + _objects_under(path)
    if targets:
        FileSystems.delete(targets)


@contextmanager
def local_copy(path: str) -> Iterator[str]:
    """A local file with the bytes of `path`, for readers (ArrayRecord's) that open only local paths."""
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
        names = sorted(n for n in os.listdir(directory) if n.endswith(suffix) and not n.startswith("."))
        return [os.path.join(directory, n) for n in names]
    return [p for p in match(join(directory, f"*{suffix}")) if not os.path.basename(p).startswith(".")]
