"""On-disk names and format versions: the one place both sides of the data path agree on.

Every file the project writes carries a version so that a reader can refuse what it does not
understand instead of misreading it.
"""

from __future__ import annotations

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "tokshards.manifest"
MANIFEST_VERSION = 9
# Version 4 cut documents longer than record_tokens into records of record_tokens tokens (version 3
# kept each whole, one record of any length): same manifest, records read the same way, so the
# loader reads both; a reader of version 3 alone would take a cut document's parts for documents.
# Version 5 added the cleaning stage's common-text rule, near-dedup parameters and id field to the
# config, and each eval file's examples, n-grams and common n-grams: records are as in version 4.
# Version 6 added `tokenizer_copy` (the directory keeps the tokenizer files it was prepared with)
# and each input's documents and tokens. Version 7 added the quality filters' implementation to the
# config (`filter_impl`; an older manifest's filters were datatrove's classes). Version 8 added the
# web filters: the language model to the config, the documents per language and PII's replacements.
# Version 9 added, per language, the tokens kept and the UTF-8 bytes kept and removed.
READABLE_MANIFEST_VERSIONS = (3, 4, 5, 6, 7, 8, 9)

# Timestamps and runner details live apart from the manifest so that two runs' manifests compare
# equal byte for byte.
RUN_INFO_NAME = "run_info.json"
REJECTS_NAME = "rejects.jsonl"
# Documents the cleaning stage removed (--dedup, --decontaminate), one JSON object a line.
REMOVALS_NAME = "removals.jsonl"
# Eval n-grams too common in the corpus to count as contamination, one JSON object a line.
COMMON_NGRAMS_NAME = "common_ngrams.jsonl"
# The copy of the tokenizer files a directory was prepared with (the manifest lists them).
TOKENIZER_COPY_DIR = "tokenizer"
# Skip reasons the manifest counts (`skipped`) without recording each skip in rejects.jsonl, which
# records every other with its file and line or row.
EMPTY_DOCUMENT = "empty_document"
UNRECORDED_SKIPS = (EMPTY_DOCUMENT,)
# Every file of a run beside its shards: what --overwrite deletes.
RUN_FILES = (MANIFEST_NAME, RUN_INFO_NAME, REJECTS_NAME, REMOVALS_NAME, COMMON_NGRAMS_NAME)

# Work-in-progress state of `prepare`; removed once the manifest is written.
STATE_DIR = ".prepare"
PLAN_NAME = "plan.json"
UNITS_DIR = "units"
UNIT_REJECTS_DIR = "rejects"

SPLITS = ("train", "validation")

# What `tokshards export` wrote, and from which prepared directory: written last, beside the files.
EXPORT_NAME = "tokshards_export.json"
EXPORT_FORMAT = "tokshards.export"
EXPORT_VERSION = 1

# The loader's checkpointed state is a position in its plan of batches; the version says which plan.
# Version 2 draws rows from the whole epoch (version 1 cut them from a stream of whole records) and
# mixes sources per row or piece: the same position means other batches, so another version is
# refused. Version 3 packs document rows best fit over a block of draws (first fit by name).
# Version 4 packs best-fit groups of 64 rows' worth, each passing its row less than half full on to
# the next, and names the packing in the state, so a state of one packing is refused by another.
LOADER_STATE_VERSION = 4
SHARD_STEM = "data.array_record"

# ArrayRecord writer options: uncompressed (token ids barely compress) and one record per chunk,
# so that every record is one random read for the loader.
ARRAY_RECORD_OPTIONS = "group_size:1,uncompressed"


def shard_path(split: str, unit_index: int, num_units: int) -> str:
    """Relative path of the shard a unit writes for a split.

    The shard index is the unit index, so names are fixed by the plan and never depend on how
    the runner scheduled the work. A unit that gave a split no document writes no shard for it.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return f"{split}/{SHARD_STEM}-{unit_index:05d}-of-{num_units:05d}"
