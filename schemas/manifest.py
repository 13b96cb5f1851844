"""The manifest of a prepared directory: its types, their JSON round trip and its validation
against the JSON Schema (schemas/manifest_schema.py).

The manifest is a pure function of the inputs and the config: it holds no timestamps, host names or
durations (those go to `run_info.json`), so two runs that should agree compare equal byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema

from schemas import formats
from schemas.errors import RunError
from schemas.manifest_schema import JSON_SCHEMA
from schemas.prepare_config import PrepareConfig
from schemas.records import token_dtype_name
from schemas.settings import from_saved


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    """What the ids mean. `vocab_sha256` is the tokenizer's identity, a hash of everything that
    decides its ids (tiktoken: ranks, split pattern, specials; `tokenizers`: the whole
    tokenizer.json; `sentencepiece`: the `.model` file's bytes); `eot_id` ends every document and
    `bos_id`, when set, starts it (`boundary` says so in words, and where the rule came from)."""

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
        # Readers find a document's end by `eot_id`: a BOS equal to it would end a document of its
        # own.
        if self.bos_id is not None and self.bos_id == self.eot_id:
            raise ValueError(
                f"the tokenizer's BOS id is its end-of-text id ({self.bos_id}), so documents "
                "cannot be told apart; prepare the data again with --bos-token none"
            )


@dataclasses.dataclass(frozen=True)
class TokenizerCopy:
    """The tokenizer files a prepared directory keeps: `load_as` (relative to the directory) loads
    the tokenizer, and `files` maps each relative path to its SHA-256."""

    load_as: str
    files: dict[str, str]

    def __post_init__(self) -> None:
        if self.load_as not in self.files:
            raise ValueError(
                f"the tokenizer copy's load_as {self.load_as!r} is not one of its files "
                f"{sorted(self.files)}"
            )


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
    # Documents the cleaning stage removed, per reason (exact_duplicate, near_duplicate,
    # contaminated; any later stage adds its own reasons).
    removed: dict[str, int] = dataclasses.field(default_factory=dict)
    # Documents the language filter judged, kept and removed (for any reason) per language, the
    # tokens written of those kept, and their UTF-8 bytes kept and removed (`tokens_kept`,
    # `bytes_kept`, `bytes_removed`, from version 9); PII's replacements (`emails`, `ips`) and the
    # documents they were made in (`documents`).
    languages: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    pii: dict[str, int] = dataclasses.field(default_factory=dict)
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
        """Parse and validate; a manifest of another format or version is refused, not guessed, and
        so is one whose parts disagree (`check_consistent`)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ManifestError(f"not valid JSON ({e}); {_DAMAGED}") from None
        validate(data)
        try:
            manifest = cls(
                tokenizer=TokenizerInfo(**data["tokenizer"]),
                dtype=data["dtype"],
                config=from_saved(PrepareConfig, data["config"]),
                inputs=tuple(InputInfo(**i) for i in data["inputs"]),
                num_units=data["num_units"],
                shards=tuple(ShardInfo(**s) for s in data["shards"]),
                skipped=dict(data["skipped"]),
                counts=dict(data["counts"]),
                totals={k: SplitTotals(**v) for k, v in data["totals"].items()},
                package_versions=dict(data["package_versions"]),
                hub_revisions=dict(data["hub_revisions"]),
                removed=dict(data.get("removed", {})),
                languages={k: dict(v) for k, v in data.get("languages", {}).items()},
                pii=dict(data.get("pii", {})),
                eval_files=tuple(EvalFileInfo(**e) for e in data.get("eval_files", [])),
                tokenizer_copy=TokenizerCopy(**data["tokenizer_copy"])
                if data.get("tokenizer_copy")
                else None,
                format=data["format"],
                version=data["version"],
            )
        except ValueError as e:
            raise ManifestError(f"invalid manifest: {e}; {_DAMAGED}") from None
        try:
            check_consistent(manifest)
        except ManifestError as e:
            raise ManifestError(f"{e}; {_DAMAGED}") from None
        return manifest


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


def check_consistent(manifest: Manifest) -> None:
    """Refuses a manifest whose parts disagree, as an edit or a copy from elsewhere leaves one:
    totals that are not their shards' sums, a shard listed twice or under another split, inputs
    that do not add up to the shards, a dtype that is not its vocabulary's, boundary ids outside
    it."""
    seen = set()
    for shard in manifest.shards:
        if shard.path in seen:
            raise ManifestError(f"shard {shard.path} is listed twice")
        if not shard.path.startswith(f"{shard.split}/"):
            raise ManifestError(f"shard {shard.path} is listed in the {shard.split} split")
        seen.add(shard.path)
    summed = split_totals(manifest.shards)
    for split in sorted(set(summed) | set(manifest.totals)):
        given, added = manifest.totals.get(split), summed.get(split)
        for field in (f.name for f in dataclasses.fields(SplitTotals)):
            stated, actual = getattr(given, field, None), getattr(added, field, 0)
            if stated != actual:
                raise ManifestError(
                    f"totals.{split}.{field} is {stated}, its shards add up to {actual}"
                )
    if manifest.inputs and all(
        i.documents is not None and i.tokens is not None for i in manifest.inputs
    ):
        for field in ("documents", "tokens"):
            inputs = sum(getattr(i, field) for i in manifest.inputs)
            shards = sum(getattr(t, field) for t in summed.values())
            if inputs != shards:
                raise ManifestError(
                    f"the inputs' {field} add up to {inputs}, the shards' to {shards}"
                )
    info = manifest.tokenizer
    if info.n_vocab < 1 or manifest.dtype != token_dtype_name(info.n_vocab):
        raise ManifestError(
            f"dtype {manifest.dtype} is not that of a vocabulary of {info.n_vocab} ids"
        )
    for name, value in (("eot_id", info.eot_id), ("bos_id", info.bos_id)):
        if value is not None and value >= info.n_vocab:
            raise ManifestError(
                f"tokenizer.{name} {value} is outside the vocabulary of {info.n_vocab} ids"
            )


class ManifestError(RunError, ValueError):
    """A manifest that is missing, of another version, or not valid against the schema."""


# The fix for a manifest cut short, edited or copied from elsewhere (not one of another version).
_DAMAGED = "the manifest is damaged or was edited: prepare (or copy) the directory again"


def validate(data: Any) -> None:
    if isinstance(data, dict) and data.get("format") == formats.MANIFEST_FORMAT:
        if data.get("version") not in formats.READABLE_MANIFEST_VERSIONS:
            raise ManifestError(
                f"manifest version {data.get('version')!r} is not supported by this reader "
                f"(expected one of {formats.READABLE_MANIFEST_VERSIONS}); prepare the data again "
                "or upgrade"
            )
    try:
        jsonschema.validate(data, JSON_SCHEMA)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "<root>"
        raise ManifestError(f"invalid manifest at {where}: {e.message}; {_DAMAGED}") from None
