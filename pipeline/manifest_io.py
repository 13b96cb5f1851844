"""Reading a prepared directory's manifest from the prepare side (any Beam filesystem)."""

from __future__ import annotations

from pipeline import storage
from schemas import formats
from schemas.manifest import Manifest, ManifestError


def read_manifest(data_dir: str) -> Manifest:
    path = storage.join(data_dir, formats.MANIFEST_NAME)
    if not storage.exists(path):
        raise ManifestError(f"{data_dir} has no {formats.MANIFEST_NAME}; is it a prepared directory?")
    return Manifest.from_json(storage.read_text(path))
