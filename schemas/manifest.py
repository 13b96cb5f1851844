"""The manifest of a prepared directory: its types, their JSON form and the JSON Schema.

The manifest is a pure function of the inputs and the config: it holds no timestamps, host names or
durations (those go to `run_info.json`), so two runs that should agree compare equal byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema

from schemas import formats
from schemas.records import DEFAULT_RECORD_TOKENS

DEFAULT_UNIT_BYTES = 16 * 2**20
# Longer documents are cut into pieces (see docs/data-format.md): it bounds a worker's memory.
DEFAULT_MAX_DOCUMENT_BYTES = 64 * 2**20
DEFAULT_SEPARATOR = "<|endoftext|>"
# What a file holds; `--format hf` resolves a Hugging Face dataset to files of these formats.
FILE_FORMATS = ("text", "jsonl", "parquet", "arrow")
INPUT_FORMATS = (*FILE_FORMATS, "hf")
DEDUP_MODES = ("none", "exact", "near")
DEFAULT_DECONTAMINATE_NGRAM = 13
# An eval n-gram found in more training documents than this is common text (a licence, a footer),
# not contamination: NeMo Curator's task decontamination default.
DEFAULT_DECONTAMINATE_MAX_MATCHES = 10
# MinHash over word 5-grams, 14 bands of 8 rows (datatrove's defaults).
DEFAULT_NEAR_NGRAM = 5
DEFAULT_NEAR_BANDS = 14
DEFAULT_NEAR_ROWS = 8
MAX_NEAR_HASHES = 1024
# datatrove's filters by the names `--filter` takes (pipeline/prepare/clean/quality_filters.py).
FILTER_NAMES = ("gopher-quality", "gopher-repetition", "c4", "fineweb")


def near_threshold(bands: int, rows: int) -> float:
    """The Jaccard similarity where MinHash's S-curve 1 - (1 - s^rows)^bands is steepest, about
    where it crosses one half."""
    return (1 / bands) ** (1 / rows)
# A shard path is relative and stays inside the dataset: a split directory, then a plain name.
SHARD_PATH_PATTERN = r"^(train|validation)/[A-Za-z0-9_-][A-Za-z0-9._-]*$"


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """Everything that decides the output of `prepare`. Runner options are not part of it."""

    tokenizer: str = "gpt2"
    format: str | None = None
    text_field: str = "text"
    # Named with each removed document in removals.jsonl, where a JSONL record or a row has it.
    id_field: str = "id"
    separator: str = DEFAULT_SEPARATOR
    validation_fraction: float = 0.0
    seed: int = 0
    unit_bytes: int = DEFAULT_UNIT_BYTES
    record_tokens: int = DEFAULT_RECORD_TOKENS
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
    skip_bad_files: bool = False
    hf_split: str = "train"
    hf_name: str | None = None
    # Override the tokenizer's document boundary rule (pipeline/tokenization/boundaries.py): a special
    # token put before / after each document; bos_token "none" puts none.
    bos_token: str | None = None
    eos_token: str | None = None
    dedup: str = "none"
    decontaminate: list[str] = dataclasses.field(default_factory=list)  # a list, as JSON reads it back
    decontaminate_ngram: int = DEFAULT_DECONTAMINATE_NGRAM
    decontaminate_max_matches: int = DEFAULT_DECONTAMINATE_MAX_MATCHES
    near_ngram: int = DEFAULT_NEAR_NGRAM
    near_bands: int = DEFAULT_NEAR_BANDS
    near_rows: int = DEFAULT_NEAR_ROWS
    # Quality filters, in the order they run, and their parameters by filter name (keyword arguments
    # of datatrove's classes); a document longer than filter_max_document_bytes is removed unread.
    filters: list[str] = dataclasses.field(default_factory=list)
    filter_params: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    filter_max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES

    def __post_init__(self) -> None:
        unknown = sorted(set(self.filters) - set(FILTER_NAMES))
        if unknown:
            raise ValueError(f"unknown filters {unknown}; expected some of {FILTER_NAMES}")
        if self.filter_max_document_bytes < 1024:
            raise ValueError(f"filter_max_document_bytes must be at least 1024 (got {self.filter_max_document_bytes=})")
        if self.dedup not in DEDUP_MODES:
            raise ValueError(f"unknown dedup mode {self.dedup!r}; expected one of {DEDUP_MODES}")
        if self.decontaminate_ngram < 1:
            raise ValueError(f"decontaminate_ngram must be at least 1 (got {self.decontaminate_ngram=})")
        if self.decontaminate_max_matches < 1:
            raise ValueError(f"decontaminate_max_matches must be at least 1 (got {self.decontaminate_max_matches=})")
        if self.near_ngram < 1 or self.near_bands < 1 or self.near_rows < 1:
            raise ValueError(
                f"near_ngram, near_bands and near_rows must be at least 1 (got {self.near_ngram=}, "
                f"{self.near_bands=}, {self.near_rows=})"
            )
        if self.near_bands * self.near_rows > MAX_NEAR_HASHES:
            raise ValueError(
                f"near_bands x near_rows must be at most {MAX_NEAR_HASHES} hashes (got {self.near_bands}x{self.near_rows})"
            )
        if self.format is not None and self.format not in INPUT_FORMATS:
            raise ValueError(f"unknown format {self.format!r}; expected one of {INPUT_FORMATS}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(
                f"validation_fraction must be in [0, 1) (got {self.validation_fraction=})"
            )
        if self.unit_bytes < 4096:
            raise ValueError(f"unit_bytes must be at least 4096 (got {self.unit_bytes=})")
        if self.max_document_bytes < 1024:
            raise ValueError(f"max_document_bytes must be at least 1024 (got {self.max_document_bytes=})")
        if self.record_tokens < 16:
            raise ValueError(f"record_tokens must be at least 16 (got {self.record_tokens=})")
        if not self.separator.strip() or "\n" in self.separator:
            raise ValueError(f"separator must be one non-blank line (got {self.separator=!r})")
        if not self.text_field:
            raise ValueError("text_field must not be empty")


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    """What the ids mean. `vocab_sha256` is the tokenizer's identity, a hash of everything that
    decides its ids (tiktoken: ranks, split pattern, specials; `tokenizers`: the whole
    tokenizer.json; `sentencepiece`: the `.model` file's bytes); `eot_id` ends every document and `bos_id`, when set, starts it (`boundary`
    says so in words, and where the rule came from)."""

    name: str
    vocab_sha256: str
    n_vocab: int
    eot_id: int
    tiktoken_version: str
    library: str = "tiktoken"
    library_version: str = ""
    bos_id: int | None = None
    boundary: str = ""

    def __post_init__(self) -> None:
        # Readers find a document's end by `eot_id`: a BOS equal to it would end a document of its own.
        if self.bos_id is not None and self.bos_id == self.eot_id:
            raise ValueError(
                f"the tokenizer's BOS id is its end-of-text id ({self.bos_id}), so documents cannot be told apart; "
                "prepare the data again with --bos-token none"
            )


@dataclasses.dataclass(frozen=True)
class TokenizerCopy:
    """The tokenizer files a prepared directory keeps: `load_as` (relative to the directory) loads
    the tokenizer, and `files` maps each relative path to its SHA-256."""

    load_as: str
    files: dict[str, str]

    def __post_init__(self) -> None:
        if self.load_as not in self.files:
            raise ValueError(f"the tokenizer copy's load_as {self.load_as!r} is not one of its files {sorted(self.files)}")


@dataclasses.dataclass(frozen=True)
class InputInfo:
    """One input file. `digest` is computed by the workers from the content they read: the SHA-256
    of the concatenated SHA-256 digests of the input's units, in order (see docs/data-format.md).
    `documents` and `tokens` are what its units wrote, both splits together (None in manifests
    before version 6)."""

    path: str
    format: str
    size: int
    digest: str
    documents: int | None = None
    tokens: int | None = None


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    split: str
    path: str
    unit: int
    records: int
    documents: int
    tokens: int
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class SplitTotals:
    shards: int
    records: int
    documents: int
    tokens: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class EvalFileInfo:
    """An eval file the corpus was decontaminated against: its examples, its distinct n-grams, how
    many of those were common text (in more documents than `decontaminate_max_matches`; listed in
    common_ngrams.jsonl), and how many documents it removed."""

    path: str
    sha256: str
    removed: int
    examples: int = 0
    ngrams: int = 0
    common_ngrams: int = 0


@dataclasses.dataclass(frozen=True)
class Manifest:
    tokenizer: TokenizerInfo
    dtype: str
    config: PrepareConfig
    inputs: tuple[InputInfo, ...]
    num_units: int
    shards: tuple[ShardInfo, ...]
    skipped: dict[str, int]
    counts: dict[str, int]
    totals: dict[str, SplitTotals]
    package_versions: dict[str, str]
    hub_revisions: dict[str, str] = dataclasses.field(default_factory=dict)
    # Documents the cleaning stage removed, per reason (exact_duplicate, near_duplicate, contaminated;
    # any later stage adds its own reasons).
    removed: dict[str, int] = dataclasses.field(default_factory=dict)
    eval_files: tuple[EvalFileInfo, ...] = ()
    # None for a tiktoken encoding named by its name, which loads from the name alone.
    tokenizer_copy: TokenizerCopy | None = None
    format: str = formats.MANIFEST_FORMAT
    version: int = formats.MANIFEST_VERSION

    def shards_of(self, split: str) -> tuple[ShardInfo, ...]:
        return tuple(s for s in self.shards if s.split == split)

    def to_json(self) -> str:
        """Canonical JSON: sorted keys and a fixed layout, so equal manifests are equal bytes."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse and validate; a manifest of another format or version is refused, not guessed."""
        data = json.loads(text)
        validate(data)
        return cls(
            tokenizer=TokenizerInfo(**data["tokenizer"]),
            dtype=data["dtype"],
            config=PrepareConfig(**data["config"]),
            inputs=tuple(InputInfo(**i) for i in data["inputs"]),
            num_units=data["num_units"],
            shards=tuple(ShardInfo(**s) for s in data["shards"]),
            skipped=dict(data["skipped"]),
            counts=dict(data["counts"]),
            totals={k: SplitTotals(**v) for k, v in data["totals"].items()},
            package_versions=dict(data["package_versions"]),
            hub_revisions=dict(data["hub_revisions"]),
            removed=dict(data.get("removed", {})),
            eval_files=tuple(EvalFileInfo(**e) for e in data.get("eval_files", [])),
            tokenizer_copy=TokenizerCopy(**data["tokenizer_copy"]) if data.get("tokenizer_copy") else None,
            format=data["format"],
            version=data["version"],
        )


def split_totals(shards: tuple[ShardInfo, ...]) -> dict[str, SplitTotals]:
    totals = {}
    for split in formats.SPLITS:
        mine = [s for s in shards if s.split == split]
        if mine:
            totals[split] = SplitTotals(
                shards=len(mine),
                records=sum(s.records for s in mine),
                documents=sum(s.documents for s in mine),
                tokens=sum(s.tokens for s in mine),
                bytes=sum(s.bytes for s in mine),
            )
    return totals


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
            "config": _object(
                {
                    "tokenizer": _STR,
                    "format": {"enum": [*INPUT_FORMATS, None]},
                    "text_field": _STR,
                    "id_field": _STR,
                    "separator": _STR,
                    "validation_fraction": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                    "seed": {"type": "integer"},
                    "unit_bytes": _INT,
                    "record_tokens": _INT,
                    "max_document_bytes": _INT,
                    "skip_bad_files": {"type": "boolean"},
                    "hf_split": _STR,
                    "hf_name": {"type": ["string", "null"]},
                    "bos_token": {"type": ["string", "null"]},
                    "eos_token": {"type": ["string", "null"]},
                    "dedup": {"enum": list(DEDUP_MODES)},
                    "decontaminate": {"type": "array", "items": _STR},
                    "decontaminate_ngram": {"type": "integer", "minimum": 1},
                    "decontaminate_max_matches": {"type": "integer", "minimum": 1},
                    "near_ngram": {"type": "integer", "minimum": 1},
                    "near_bands": {"type": "integer", "minimum": 1},
                    "near_rows": {"type": "integer", "minimum": 1},
                    "filters": {"type": "array", "items": {"enum": list(FILTER_NAMES)}},
                    "filter_params": {
                        "type": "object",
                        "propertyNames": {"enum": list(FILTER_NAMES)},
                        "additionalProperties": {"type": "object"},
                    },
                    "filter_max_document_bytes": {"type": "integer", "minimum": 1024},
                },
                # Fields added since version 3 take their defaults when a manifest lacks them.
                required=[
                    "tokenizer", "format", "text_field", "separator", "validation_fraction", "seed", "unit_bytes",
                    "record_tokens", "max_document_bytes", "skip_bad_files", "hf_split", "hf_name", "bos_token",
                    "eos_token", "dedup", "decontaminate", "decontaminate_ngram",
                ],
            ),
            "inputs": {
                "type": "array",
                "items": _object(
                    {"path": _STR, "format": {"enum": list(FILE_FORMATS)}, "size": _INT, "digest": _SHA256,
                     "documents": _OPTIONAL_INT, "tokens": _OPTIONAL_INT},
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
                    {"shards": _INT, "records": _INT, "documents": _INT, "tokens": _INT, "bytes": _INT}
                ),
            },
            "package_versions": {"type": "object", "additionalProperties": _STR},
            "hub_revisions": {"type": "object", "additionalProperties": _STR},
            "removed": _COUNTS,
            "eval_files": {
                "type": "array",
                "items": _object(
                    {"path": _STR, "sha256": _SHA256, "removed": _INT, "examples": _INT, "ngrams": _INT,
                     "common_ngrams": _INT},
                    required=["path", "sha256", "removed"],
                ),
            },
            "tokenizer_copy": {
                "oneOf": [
                    {"type": "null"},
                    _object(
                        {
                            "load_as": {"type": "string", "pattern": _COPY_PATH},
                            "files": {"type": "object", "propertyNames": {"pattern": _COPY_PATH},
                                      "additionalProperties": _SHA256},
                        }
                    ),
                ]
            },
        },
        required=["format", "version", "tokenizer", "dtype", "config", "inputs", "num_units", "shards",
                  "skipped", "counts", "totals", "package_versions", "hub_revisions"],
    ),
}


class ManifestError(ValueError):
    """A manifest that is missing, of another version, or not valid against the schema."""


def validate(data: Any) -> None:
    if isinstance(data, dict) and data.get("format") == formats.MANIFEST_FORMAT:
        if data.get("version") not in formats.READABLE_MANIFEST_VERSIONS:
            raise ManifestError(
                f"manifest version {data.get('version')!r} is not supported by this reader "
                f"(expected one of {formats.READABLE_MANIFEST_VERSIONS}); prepare the data again or upgrade"
            )
    try:
        jsonschema.validate(data, JSON_SCHEMA)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "<root>"
        raise ManifestError(f"invalid manifest at {where}: {e.message}") from None
