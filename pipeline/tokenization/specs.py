"""Tokenizers named by a spec, loaded once per process, encoding documents with their boundary ids.

A spec fixes everything that decides the ids:

- a tiktoken encoding name: `gpt2` (the default, shipped with the package, offline), or any name
  tiktoken knows (`cl100k_base`, loaded the way tiktoken loads it);
- a Hugging Face `tokenizer.json`, or a directory holding one, read with the `tokenizers` library;
- a tiktoken spec file (`.json` or `.toml`) naming a `.tiktoken` rank file with its split pattern
  and special tokens (see `tiktoken_backend`);
- a Hugging Face Hub model, `hf:ORG/NAME[@REVISION]`, pinned to a commit (`hub`).

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

from pipeline.tokenization.boundaries import TokenizerError
from pipeline.tokenization.hf_backend import TOKENIZER_FILE, HFTokenizer
from pipeline.tokenization.hub import download, is_hub_spec
from pipeline.tokenization.tiktoken_backend import SPEC_KEYS, TiktokenTokenizer
from schemas.manifest import TokenizerInfo

Tokenizer = TiktokenTokenizer | HFTokenizer


def is_path_spec(spec: str) -> bool:
    """A spec that names a local file or directory rather than a tiktoken encoding or a hub
    model."""
    if is_hub_spec(spec):
        return False
    return os.sep in spec or os.path.exists(spec) or spec.endswith((".json", ".toml", ".tiktoken"))


def _is_tiktoken_spec(path: str) -> bool:
    if path.endswith(".toml"):
        return True
    try:
        with open(path, encoding="utf-8") as f:
            head = json.load(f)
    except (OSError, ValueError) as e:
        raise TokenizerError(f"tokenizer file {path!r} is not JSON: {e}") from None
    return isinstance(head, dict) and all(k in head for k in SPEC_KEYS)


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
        return HFTokenizer(path, name=repo, **flags)
    if not is_path_spec(spec):
        return TiktokenTokenizer.named(spec, **flags)
    if not os.path.exists(spec):
        raise TokenizerError(f"tokenizer file {spec!r} does not exist")
    if os.path.isdir(spec):
        inside = os.path.join(spec, TOKENIZER_FILE)
        if not os.path.exists(inside):
            raise TokenizerError(f"tokenizer directory {spec!r} holds no {TOKENIZER_FILE}")
        return HFTokenizer(inside, **flags)
    if spec.endswith(".tiktoken"):
        raise TokenizerError(
            f"{spec!r} is a bare tiktoken rank file, which lacks the split pattern (pat_str) and "
            'the special tokens; name it in a spec file {"ranks": ..., "pat_str": ..., '
            '"special_tokens": {...}} and pass that (see docs/data-format.md)'
        )
    if _is_tiktoken_spec(spec):
        return TiktokenTokenizer.from_spec_file(spec, **flags)
    return HFTokenizer(spec, **flags)


def tokenizer_info(
    spec: str, *, bos_token: str | None = None, eos_token: str | None = None
) -> TokenizerInfo:
    return load_tokenizer(spec, bos_token=bos_token, eos_token=eos_token).info
