"""Tokenizers named by a spec, loaded once per process, encoding documents with their boundary ids.

A spec fixes everything that decides the ids:

- a tiktoken encoding name: `gpt2` (the default, shipped with the package, offline), or any name
  tiktoken knows (`cl100k_base`, loaded the way tiktoken loads it);
- a Hugging Face `tokenizer.json`, or a directory holding one, read with the `tokenizers` library;
- a SentencePiece `.model` file (recognized by content too, whatever its name), or a directory
  holding a `tokenizer.model` and no `tokenizer.json`, read with `sentencepiece` (an extra);
- a tiktoken spec file (`.json` or `.toml`) naming a `.tiktoken` rank file with its split pattern
  and special tokens (see `tiktoken_backend`);
- a Hugging Face Hub model, `hf:ORG/NAME[@REVISION]`, pinned to a commit (`hub`): its
  `tokenizer.json`, or its `tokenizer.model` where it has no `tokenizer.json`.

A bare `.tiktoken` rank file is refused: it says neither how text is split before the merges nor
which ids are special, and guessing them gives other ids than the model's own, silently.

Every tokenizer has `info` (the manifest's `TokenizerInfo`), `boundary`, `encode_documents(texts)`
(flat uint32 ids and per-document lengths, boundary ids included), `encode_piece(text, first=...)`
for a cut document's pieces, `encode_ordinary`, `decode` and `save(directory)`.
"""

from __future__ import annotations

import functools
import json
import os
import re

from pipeline.tokenization.boundaries import TokenizerError
from pipeline.tokenization.hf_backend import TOKENIZER_FILE, HFTokenizer
from pipeline.tokenization.hub import download, is_hub_spec
from pipeline.tokenization.sentencepiece_backend import SentencePieceTokenizer
from pipeline.tokenization.sentencepiece_model import MODEL_FILE, looks_like_model
from pipeline.tokenization.tiktoken_backend import SPEC_KEYS, TiktokenTokenizer
from schemas.manifest import TokenizerInfo

Tokenizer = TiktokenTokenizer | HFTokenizer | SentencePieceTokenizer


def is_path_spec(spec: str) -> bool:
    """A spec that names a local file or directory rather than a tiktoken encoding or a hub
    model."""
    if is_hub_spec(spec):
        return False
    return (
        os.sep in spec
        or os.path.exists(spec)
        or spec.endswith((".json", ".toml", ".tiktoken", ".model"))
    )


def absolute_spec(spec: str) -> str:
    """A file or directory spec by its absolute path, so that it names the same file from anywhere
    (and a run records it so); any other spec as it is."""
    return os.path.abspath(spec) if is_path_spec(spec) else spec


def _is_rank_file(path: str) -> bool:
    """Whether a file starts as a tiktoken rank file does: a line of a base64 token and its rank."""
    with open(path, "rb") as f:
        first = f.read(1024).split(b"\n", 1)[0]
    return re.fullmatch(rb"[A-Za-z0-9+/]+=* \d+", first) is not None


def _read_json(path: str) -> tuple[str, object]:
    """A JSON tokenizer file's text and its parse, read once: a spec file, or a `tokenizer.json`
    whose text and parse (a second or more for a large vocabulary) `HFTokenizer` then reuses."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return text, json.loads(text)
    except (OSError, ValueError) as e:
        raise TokenizerError(f"tokenizer file {path!r} is not JSON: {e}") from None


@functools.cache
def load_tokenizer(
    spec: str, *, bos_token: str | None = None, eos_token: str | None = None
) -> Tokenizer:
    """The tokenizer a spec names, with the boundary rule (`bos_token`/`eos_token` override the
    tokenizer's own; see `boundaries`). Cached per process: building the tables takes up to a few
    seconds, and prepare loads it once before forking its workers."""
    flags = {"bos_flag": bos_token, "eos_flag": eos_token}
    if is_hub_spec(spec):
        path, repo = download(spec)
        if path.endswith(".model"):
            return SentencePieceTokenizer(path, name=repo, **flags)
        return HFTokenizer(path, name=repo, **flags)
    if not is_path_spec(spec):
        return TiktokenTokenizer.named(spec, **flags)
    if not os.path.exists(spec):
        raise TokenizerError(f"tokenizer file {spec!r} does not exist")
    if os.path.isdir(spec):
        inside = os.path.join(spec, TOKENIZER_FILE)
        if os.path.exists(inside):
            return HFTokenizer(inside, **flags)
        if not os.path.exists(os.path.join(spec, MODEL_FILE)):
            raise TokenizerError(
                f"tokenizer directory {spec!r} holds neither {TOKENIZER_FILE} nor {MODEL_FILE}"
            )
        spec = os.path.join(spec, MODEL_FILE)
    if spec.endswith(".tiktoken") or (spec.endswith(".model") and _is_rank_file(spec)):
        # Llama 3's original checkpoints name their rank file tokenizer.model.
        raise TokenizerError(
            f"{spec!r} is a bare tiktoken rank file, which lacks the split pattern (pat_str) and "
            'the special tokens; name it in a spec file {"ranks": ..., "pat_str": ..., '
            '"special_tokens": {...}} and pass that (see docs/data-format.md)'
        )
    if spec.endswith(".model") or looks_like_model(spec):
        return SentencePieceTokenizer(spec, **flags)
    if spec.endswith(".toml"):
        return TiktokenTokenizer.from_spec_file(spec, **flags)
    text, head = _read_json(spec)
    if isinstance(head, dict) and all(k in head for k in SPEC_KEYS):
        return TiktokenTokenizer.from_spec_file(spec, **flags)
    return HFTokenizer(spec, read=(text, head), **flags)


def tokenizer_info(
    spec: str, *, bos_token: str | None = None, eos_token: str | None = None
) -> TokenizerInfo:
    return load_tokenizer(spec, bos_token=bos_token, eos_token=eos_token).info
