"""tiktoken encodings, loaded offline where the project carries the ranks.

`gpt2` (and its twin `r50k_base`) come from the rank table shipped as package data, checked against
the hash tiktoken itself pins, so no download ever happens. Other names load the way tiktoken loads
them; a path to a `.tiktoken` file uses the GPT-2 split pattern and appends `<|endoftext|>`.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from importlib import resources

import numpy as np
import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public

from schemas.manifest import TokenizerInfo

ENDOFTEXT = "<|endoftext|>"
GPT2_RANKS_FILE = "r50k_base.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_BUNDLED = ("gpt2", "r50k_base")


class TokenizerError(ValueError):
    pass


def _bundled_ranks_path() -> str:
    return str(resources.files("pipeline") / "assets" / GPT2_RANKS_FILE)


@functools.cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """Cached per process: building the BPE tables takes about a second."""
    if name in _BUNDLED:
        ranks = tiktoken.load.load_tiktoken_bpe(_bundled_ranks_path(), expected_hash=GPT2_RANKS_SHA256)
        return tiktoken.Encoding(
            name=name,
            explicit_n_vocab=50257,
            pat_str=openai_public.r50k_pat_str,
            mergeable_ranks=ranks,
            special_tokens={ENDOFTEXT: 50256},
        )
    if name.endswith(".tiktoken") or os.sep in name:
        if not os.path.exists(name):
            raise TokenizerError(f"tokenizer file {name!r} does not exist")
        ranks = tiktoken.load.load_tiktoken_bpe(name)
        return tiktoken.Encoding(
            name=os.path.basename(name),
            pat_str=openai_public.r50k_pat_str,
            mergeable_ranks=ranks,
            special_tokens={ENDOFTEXT: len(ranks)},
        )
    try:
        return tiktoken.get_encoding(name)
    except ValueError as e:
        raise TokenizerError(f"unknown tokenizer {name!r}: {e}") from None


def eot_id(encoding: tiktoken.Encoding) -> int:
    if ENDOFTEXT not in encoding.special_tokens_set:
        raise TokenizerError(f"tokenizer {encoding.name!r} has no {ENDOFTEXT} token")
    return encoding.encode_single_token(ENDOFTEXT)


def encode_document(encoding: tiktoken.Encoding, text: str) -> np.ndarray:
    """Ordinary-text tokens as uint32, without the end-of-text id.

    Special-token text inside a document is encoded as plain text, exactly like
    `encode_ordinary`; the numpy path skips building a Python list of ints. Lone surrogates (which
    JSON escapes can produce) are replaced as `encode_ordinary` replaces them.
    """
    try:
        return encoding.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return encoding.encode_to_numpy(text, allowed_special=set(), disallowed_special=())


def encode_documents(encoding: tiktoken.Encoding, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Documents each followed by the end-of-text id, concatenated, and their lengths (with it).

    Equal to `encode_ordinary(doc) + [eot]` for every document, but runs of documents are joined
    by the end-of-text text and encoded in one call with it allowed: tiktoken encodes the text
    between allowed special tokens independently, so the result is the same, without a Python
    round trip per document. A document that holds the special text itself (which must stay
    text) is encoded on its own.
    """
    if not texts:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
    joined = ENDOFTEXT.join(texts) + ENDOFTEXT
    if joined.count(ENDOFTEXT) == len(texts):  # the usual case: no document holds the special text
        flat = _encode_run(encoding, texts, joined)
    else:
        flat = np.concatenate(list(_encode_runs(encoding, texts)))
    ends = np.flatnonzero(flat == eot_id(encoding))
    return flat, np.diff(ends, prepend=-1)


def _encode_runs(encoding: tiktoken.Encoding, texts: list[str]) -> Iterator[np.ndarray]:
    """Runs of documents without the special text, each in one call; the others each alone."""
    eot = np.uint32(eot_id(encoding))
    run: list[str] = []
    for text in texts:
        if ENDOFTEXT in text:
            if run:
                yield _encode_run(encoding, run, ENDOFTEXT.join(run) + ENDOFTEXT)
                run = []
            yield np.append(encode_document(encoding, text), eot)
        else:
            run.append(text)
    if run:
        yield _encode_run(encoding, run, ENDOFTEXT.join(run) + ENDOFTEXT)


def _encode_run(encoding: tiktoken.Encoding, run: list[str], joined: str) -> np.ndarray:
    """`run` (none of which holds the special text), `joined` by it, in one call."""
    try:
        return encoding.encode_to_numpy(joined, allowed_special={ENDOFTEXT}, disallowed_special=())
    except UnicodeEncodeError:  # a lone surrogate, which `encode_document` replaces
        eot = np.uint32(eot_id(encoding))
        return np.concatenate([np.append(encode_document(encoding, t), eot) for t in run])


def vocab_sha256(encoding: tiktoken.Encoding) -> str:
    """A hash of ranks, specials and split pattern: equal exactly when the tokenization is equal."""
    h = hashlib.sha256()
    h.update(encoding._pat_str.encode())
    for token, rank in sorted(encoding._mergeable_ranks.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + len(token).to_bytes(2, "little") + token)
    for token, rank in sorted(encoding._special_tokens.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + token.encode())
    return h.hexdigest()


def tokenizer_info(name: str) -> TokenizerInfo:
    encoding = load_encoding(name)
    return TokenizerInfo(
        name=encoding.name,
        vocab_sha256=vocab_sha256(encoding),
        n_vocab=encoding.n_vocab,
        eot_id=eot_id(encoding),
        tiktoken_version=tiktoken.__version__,
    )
