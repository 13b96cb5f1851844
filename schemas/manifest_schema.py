"""The manifest's JSON Schema: what a reader accepts, for every readable manifest version.

Its `config` part derives from `PrepareConfig`'s declared settings (schemas/settings.py): types,
choices, limits, and the keys every readable version has. `python -m schemas` exports it to
`manifest.schema.json`.
"""

from __future__ import annotations

from typing import Any

from schemas import formats
from schemas.prepare_config import FILE_FORMATS, PrepareConfig
from schemas.settings import json_schema

# A shard path is relative and stays inside the dataset: a split directory, then a plain name.
SHARD_PATH_PATTERN = r"^(train|validation)/[A-Za-z0-9_-][A-Za-z0-9._-]*$"


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


_INT = {"type": "integer", "minimum": 0}
_STR = {"type": "string"}
_OPTIONAL_INT = {"type": ["integer", "null"], "minimum": 0}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_COUNTS = {"type": "object", "additionalProperties": _INT}
# A file of the directory: relative, inside it.
_COPY_PATH = f"^{formats.TOKENIZER_COPY_DIR}/[A-Za-z0-9_-][A-Za-z0-9._-]*$"

JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"{formats.MANIFEST_FORMAT}.v{formats.MANIFEST_VERSION}",
    "title": "Manifest of a prepared, tokenized dataset",
    **_object(
        {
            "format": {"const": formats.MANIFEST_FORMAT},
            "version": {"enum": list(formats.READABLE_MANIFEST_VERSIONS)},
            "tokenizer": _object(
                {
                    "name": _STR,
                    "vocab_sha256": _SHA256,
                    "n_vocab": _INT,
                    "eot_id": _INT,
                    "tiktoken_version": _STR,
                    "library": {"enum": ["tiktoken", "tokenizers", "sentencepiece"]},
                    "library_version": _STR,
                    "bos_id": {"type": ["integer", "null"], "minimum": 0},
                    "boundary": _STR,
                }
            ),
            "dtype": {"enum": ["uint16", "uint32"]},
            "config": json_schema(
                PrepareConfig, oldest_version=formats.READABLE_MANIFEST_VERSIONS[0]
            ),
            "inputs": {
                "type": "array",
                "items": _object(
                    {
                        "path": _STR,
                        "format": {"enum": list(FILE_FORMATS)},
                        "size": _INT,
                        "digest": _SHA256,
                        "documents": _OPTIONAL_INT,
                        "tokens": _OPTIONAL_INT,
                    },
                    required=["path", "format", "size", "digest"],
                ),
            },
            "num_units": _INT,
            "shards": {
                "type": "array",
                "items": _object(
                    {
                        "split": {"enum": list(formats.SPLITS)},
                        "path": {"type": "string", "pattern": SHARD_PATH_PATTERN},
                        "unit": _INT,
                        "records": _INT,
                        "documents": _INT,
                        "tokens": _INT,
                        "bytes": _INT,
                        "sha256": _SHA256,
                    }
                ),
            },
            "skipped": _COUNTS,
            "counts": _COUNTS,
            "totals": {
                "type": "object",
                "propertyNames": {"enum": list(formats.SPLITS)},
                "additionalProperties": _object(
                    {
                        "shards": _INT,
                        "records": _INT,
                        "documents": _INT,
                        "tokens": _INT,
                        "bytes": _INT,
                    }
                ),
            },
            "package_versions": {"type": "object", "additionalProperties": _STR},
            "hub_revisions": {"type": "object", "additionalProperties": _STR},
            "removed": _COUNTS,
            # Version 8: the documents kept and removed per language, PII's replacements; version 9:
            # per language the tokens kept, the bytes kept and removed.
            "languages": {
                "type": "object",
                "additionalProperties": _object(
                    {
                        "kept": _INT,
                        "removed": _INT,
                        "tokens_kept": _INT,
                        "bytes_kept": _INT,
                        "bytes_removed": _INT,
                    },
                    required=["kept", "removed"],
                ),
            },
            "pii": _COUNTS,
            "eval_files": {
                "type": "array",
                "items": _object(
                    {
                        "path": _STR,
                        "sha256": _SHA256,
                        "removed": _INT,
                        "examples": _INT,
                        "ngrams": _INT,
                        "common_ngrams": _INT,
                    },
                    required=["path", "sha256", "removed"],
                ),
            },
            "tokenizer_copy": {
                "oneOf": [
                    {"type": "null"},
                    _object(
                        {
                            "load_as": {"type": "string", "pattern": _COPY_PATH},
                            "files": {
                                "type": "object",
                                "propertyNames": {"pattern": _COPY_PATH},
                                "additionalProperties": _SHA256,
                            },
                        }
                    ),
                ]
            },
        },
        required=[
            "format",
            "version",
            "tokenizer",
            "dtype",
            "config",
            "inputs",
            "num_units",
            "shards",
            "skipped",
            "counts",
            "totals",
            "package_versions",
            "hub_revisions",
        ],
    ),
}
