"""`hf://` as a read-only Beam filesystem, so pinned hub files go through `storage` like any path.

Registering the scheme with Beam (importing this module does) lets planning, the workers and the
tests treat a hub file exactly as a `gs://` object: sizes, ranged reads, the same readers. A pinned
url names immutable content, so its commit serves as its checksum.
"""

from __future__ import annotations

from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem

from pipeline.prepare.read import hub

SCHEME = "hf"


class HubFileSystem(FileSystem):
    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def has_dirs(self) -> bool:
        return False

    def open(
        self,
        path: str,
        mime_type: str = "application/octet-stream",
        compression_type: str = CompressionTypes.AUTO,
    ) -> BinaryIO:
        if compression_type not in (CompressionTypes.AUTO, CompressionTypes.UNCOMPRESSED):
            raise ValueError(f"{path}: hub files are read as stored (got {compression_type=})")
        return hub.open_hub_file(path)

    def size(self, path: str) -> int:
        return hub.hub_file_size(path)

    def exists(self, path: str) -> bool:
        try:
            hub.hub_file_size(path)
        except (hub.HubError, FileNotFoundError):
            return False
        return True

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, hub.hub_file_size(path), 0.0)

    def checksum(self, path: str) -> str:
        return hub.pinned_revision(path)

    def last_updated(self, path: str) -> float:
        return 0.0

    def _list(self, dir_or_prefix: str):
        raise NotImplementedError("hub files are listed by resolving a dataset, not by globs")

    def mkdirs(self, path: str) -> None:
        raise NotImplementedError("hub files are read-only")

    def create(
        self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO
    ):
        raise NotImplementedError("hub files are read-only")

    def copy(self, source_file_names, destination_file_names) -> None:
        raise NotImplementedError("hub files are read-only")

    def rename(self, source_file_names, destination_file_names) -> None:
        raise NotImplementedError("hub files are read-only")

    def delete(self, paths) -> None:
        raise NotImplementedError("hub files are read-only")
