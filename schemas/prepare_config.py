"""`PrepareConfig`: everything that decides the output of `prepare`, each setting declared once.

Each field is a setting (schemas/settings.py): its help, flag and limits give `prepare`'s options,
the config-file keys, the checks below and the `config` part of the manifest's JSON Schema. The
manifest holds it as `dataclasses.asdict(PrepareConfig)`: field names are the manifest's keys, so
they do not change; one added after the oldest readable manifest version declares `since`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from schemas.errors import SettingError
from schemas.records import DEFAULT_RECORD_TOKENS
from schemas.settings import check, comma_list, setting

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
# datatrove's filters by the names `--filter` takes (clean/quality/quality_filters.py).
FILTER_NAMES = ("gopher-quality", "gopher-repetition", "c4", "fineweb")
# The web filters (clean/web/): datatrove's language ID and fastText classifier filters, and its PII
# formatter, which replaces e-mail and public IP addresses in the text kept.
WEB_FILTER_NAMES = ("language", "fasttext", "pii")
ALL_FILTER_NAMES = FILTER_NAMES + WEB_FILTER_NAMES


def splits_words(filters: list[str]) -> bool:
    """Whether a filter of these splits words (the quality filters, with spaCy: most of a second to
    load)."""
    return bool(set(filters) & set(FILTER_NAMES))


# How the filters run: the rules written for speed, or datatrove's own classes (the exact mode).
FILTER_IMPLS = ("fast", "datatrove")
# The manifest version that added the cleaning stage's parameters, the id field and the filters.
_CLEANING_PARAMETERS = 5
# The manifest version that added the filters' implementation: before it, datatrove's classes ran.
_FILTER_IMPL = 7
# The manifest version that added the web filters' language model and counts.
_WEB_FILTERS = 8


def near_threshold(bands: int, rows: int) -> float:
    """The Jaccard similarity where MinHash's S-curve 1 - (1 - s^rows)^bands is steepest, about
    where it crosses one half."""
    return (1 / bands) ** (1 / rows)


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """Everything that decides the output of `prepare`. Runner options are not part of it."""

    tokenizer: str = setting(
        "gpt2",
        "tiktoken name, tokenizer.json (or its directory), or a tiktoken spec file (.json/.toml); "
        "a hub model as hf:ORG/NAME[@REVISION]",
    )
    format: str | None = setting(
        None, "input format", choices=INPUT_FORMATS, unset="from the file name"
    )
    text_field: str = setting("text", "the field or column holding the text (JSONL, Parquet, hf)")
    # Named with each removed document in removals.jsonl, where a JSONL record or a row has it.
    id_field: str = setting(
        "id",
        "field or column naming each record, given with every removed document in removals.jsonl",
        since=_CLEANING_PARAMETERS,
    )
    separator: str = setting(DEFAULT_SEPARATOR, "document separator line (text format)")
    validation_fraction: float = setting(
        0.0,
        "share of documents in the validation split, chosen by a hash of each document",
        minimum=0,
        below=1,
    )
    seed: int = setting(0, "salts the split hash and unit shuffles", minimum=0, below=2**63)
    unit_bytes: int = setting(DEFAULT_UNIT_BYTES, "target input bytes per unit", minimum=4096)
    record_tokens: int = setting(
        DEFAULT_RECORD_TOKENS,
        "tokens per ArrayRecord record, the loader's unit of reading",
        minimum=16,
    )
    max_document_bytes: int = setting(
        DEFAULT_MAX_DOCUMENT_BYTES,
        "longer documents are cut into pieces at a whitespace",
        minimum=1024,
    )
    skip_bad_files: bool = setting(False, "record unreadable inputs as skipped")
    hf_split: str = setting("train", "Hugging Face dataset split to read")
    hf_name: str | None = setting(
        None, "Hugging Face dataset config name", unset="the dataset's default"
    )
    # Override the tokenizer's document boundary rule (pipeline/tokenization/boundaries.py): a
    # special token put before / after each document; bos_token "none" puts none.
    bos_token: str | None = setting(
        None, "special token before each document ('none': no BOS)", unset="the tokenizer's rule"
    )
    eos_token: str | None = setting(
        None, "special token after each document", unset="the tokenizer's rule"
    )
    dedup: str = setting(
        "none",
        "remove exact duplicates (normalized text), or exact and near duplicates (MinHash); the "
        "first copy is kept",
        choices=DEDUP_MODES,
    )
    # A list, as JSON reads it back; local paths are made absolute, so the config names them
    # anywhere.
    decontaminate: list[str] = setting(
        help="eval files (JSONL, JSON, Parquet, text; .gz/.zst too): remove documents sharing a "
        "word n-gram with any of their examples",
        default_factory=list,
        metavar="PATH[,PATH...]",
    )
    decontaminate_ngram: int = setting(
        DEFAULT_DECONTAMINATE_NGRAM, "words per n-gram for --decontaminate", minimum=1
    )
    decontaminate_max_matches: int = setting(
        DEFAULT_DECONTAMINATE_MAX_MATCHES,
        "an eval n-gram in more documents than this is common text and "
        "removes none (listed in common_ngrams.jsonl)",
        minimum=1,
        since=_CLEANING_PARAMETERS,
    )
    near_ngram: int = setting(
        DEFAULT_NEAR_NGRAM,
        "words per shingle for --dedup near",
        minimum=1,
        since=_CLEANING_PARAMETERS,
    )
    near_bands: int = setting(
        DEFAULT_NEAR_BANDS, "MinHash bands for --dedup near", minimum=1, since=_CLEANING_PARAMETERS
    )
    near_rows: int = setting(
        DEFAULT_NEAR_ROWS,
        "MinHash rows per band for --dedup near (similarity threshold about (1/bands)^(1/rows))",
        minimum=1,
        since=_CLEANING_PARAMETERS,
    )
    # Quality filters, in the order they run, and their parameters by filter name (keyword arguments
    # of datatrove's classes); a document longer than filter_max_document_bytes is removed unread.
    filters: list[str] = setting(
        help=f"filters (datatrove's), run in this order on whole documents before dedup: "
        f"{', '.join(ALL_FILTER_NAMES)}",
        default_factory=list,
        flag="--filter",
        parse=comma_list,
        metavar="NAME[,NAME...]",
        choices=ALL_FILTER_NAMES,
        since=_CLEANING_PARAMETERS,
    )
    filter_params: dict[str, dict[str, Any]] = setting(
        help="a filter's parameter, a keyword argument of its datatrove class (VALUE read as "
        "JSON), e.g. gopher-quality.min_doc_words=30; repeatable",
        default_factory=dict,
        flag="--filter-param",
        repeat=True,
        metavar="NAME.KEY=VALUE",
        choices=ALL_FILTER_NAMES,
        since=_CLEANING_PARAMETERS,
    )
    filter_max_document_bytes: int = setting(
        DEFAULT_MAX_DOCUMENT_BYTES,
        "longer documents are removed (filter:too_long) instead of being held whole "
        "for the filters",
        minimum=1024,
        since=_CLEANING_PARAMETERS,
    )
    # A manifest without it was filtered by datatrove's classes; without filters it decides nothing.
    filter_impl: str = setting(
        "fast",
        "how the filters run: fast (their rules written for speed; datatrove's decisions on all "
        "but a sliver of documents) or datatrove (its own classes: its decisions to the document, "
        "at its speed)",
        choices=FILTER_IMPLS,
        since=_FILTER_IMPL,
        older="datatrove",
        matters=lambda config: bool(config.filters),
    )

    # The fastText language identifier of `--filter language`: a file, or a hub file pinned to a
    # commit (the config records the commit); fetched only because it is named here.
    language_model: str | None = setting(
        None,
        "fastText language identifier for --filter language: PATH (lid.176.bin or .ftz, GlotLID's "
        "model_v3.bin) or hf:ORG/NAME/FILE[@REVISION]",
        metavar="PATH|hf:ORG/NAME/FILE",
        unset="none: never downloaded unless named",
        since=_WEB_FILTERS,
        older=None,
        matters=lambda config: "language" in config.filters,
    )

    def __post_init__(self) -> None:
        check(self)
        if self.near_bands * self.near_rows > MAX_NEAR_HASHES:
            raise SettingError(
                "near_bands",
                self.near_bands,
                f"times {{near_rows}} must be at most {MAX_NEAR_HASHES} hashes",
                near_rows=self.near_rows,
            )
        if not self.separator.strip() or "\n" in self.separator:
            raise SettingError("separator", self.separator, "must be one non-blank line")
        if not self.text_field:
            raise SettingError("text_field", self.text_field, "must not be empty")
