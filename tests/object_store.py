"""An in-memory Beam filesystem with the semantics of an object store such as GCS.

Flat keys, no directories (`exists` is true only for an object, listing is by prefix, a
recursive delete needs a trailing `/`), and an object appears only when its writer closes. Tests
run `prepare` against `memstore://` paths to exercise every non-local code path without a network.
Importing this module registers the scheme with Beam.
"""

from __future__ import annotations

import io

from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem

SCHEME = "memstore"
OBJECTS: dict[str, bytes] = {}


class _Upload(io.BytesIO):
    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def close(self) -> None:
        if not self.closed:
            OBJECTS[self._path] = self.getvalue()
        super().close()


class MemoryObjectStore(FileSystem):
    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        pass

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str):
        for key in sorted(OBJECTS):
            if key.startswith(dir_or_prefix):
                yield FileMetadata(key, len(OBJECTS[key]), 0.0)

    def create(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        assert compression_type == CompressionTypes.UNCOMPRESSED, "the project never lets Beam compress"
        return _Upload(path)

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        assert compression_type == CompressionTypes.UNCOMPRESSED, "the project never lets Beam decompress"
        if path not in OBJECTS:
            raise FileNotFoundError(path)
        return io.BytesIO(OBJECTS[path])

    def copy(self, source_file_names, destination_file_names) -> None:
        for source, destination in zip(source_file_names, destination_file_names):
            OBJECTS[destination] = OBJECTS[source]

    def rename(self, source_file_names, destination_file_names) -> None:
        for source, destination in zip(source_file_names, destination_file_names):
            OBJECTS[destination] = OBJECTS.pop(source)

    def exists(self, path: str) -> bool:
        return path in OBJECTS

    def size(self, path: str) -> int:
        return len(OBJECTS[path])

    def last_updated(self, path: str) -> float:
        return 0.0

    def checksum(self, path: str) -> str:
        return str(len(OBJECTS[path]))

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, len(OBJECTS[path]), 0.0)

    def delete(self, paths) -> None:
        for path in paths:
            if path.endswith("/"):
                for key in [k for k in OBJECTS if k.startswith(path)]:
                    del OBJECTS[key]
            else:
                del OBJECTS[path]
