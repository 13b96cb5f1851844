"""tiktoken encodings: named ones, and `.tiktoken` rank files described by a spec file.

`gpt2` (and its twin `r50k_base`) come from the rank table shipped as package data, checked against
the hash tiktoken itself pins, so no download ever happens. Other names load the way tiktoken loads
them. A rank file alone does not fix the ids (the split pattern and the special tokens are not in
it), so it is named by a spec file, JSON or TOML, beside it:

    {"ranks": "qwen.tiktoken", "pat_str": "...", "special_tokens": {"<|endoftext|>": 151643},
     "eos_token": "<|endoftext|>", "bos_token": null}

`ranks` is relative to the spec file; `eos_token`/`bos_token` are optional (the default rule of
`boundaries` applies).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tomllib
from collections.abc import Iterator
from importlib import resources

import numpy as np
import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public

from pipeline.tokenization.boundaries import Boundary, TokenizerError, piece_ids, resolve_boundary
from schemas.manifest import TokenizerInfo

ENDOFTEXT = "<|endoftext|>"
GPT2_RANKS_FILE = "r50k_base.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_BUNDLED = ("gpt2", "r50k_base")
SPEC_KEYS = ("ranks", "pat_str", "special_tokens")


def _bundled_ranks_path() -> str:
    return str(resources.files("pipeline") / "assets" / GPT2_RANKS_FILE)


@functools.cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """A named encoding, cached per process: building the BPE tables takes about a second."""
    if name in _BUNDLED:
        ranks = tiktoken.load.load_tiktoken_bpe(
            _bundled_ranks_path(), expected_hash=GPT2_RANKS_SHA256
        )
        return tiktoken.Encoding(
            name=name,
            explicit_n_vocab=50257,
            pat_str=openai_public.r50k_pat_str,
            mergeable_ranks=ranks,
            special_tokens={ENDOFTEXT: 50256},
        )
    try:
        return tiktoken.get_encoding(name)
    except ValueError as e:
        raise TokenizerError(f"unknown tokenizer {name!r}: {e}") from None


def read_spec_file(path: str) -> dict:
    """A tiktoken spec file's fields, checked, with `ranks` made absolute."""
    try:
        with open(path, "rb") as f:
            spec = tomllib.load(f) if path.endswith(".toml") else json.load(f)
    except (OSError, ValueError) as e:
        raise TokenizerError(f"tokenizer spec {path!r} cannot be read: {e}") from None
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise TokenizerError(
            f"tokenizer spec {path!r} lacks {missing}; a tiktoken spec names {list(SPEC_KEYS)}"
        )
    ranks = os.path.join(os.path.dirname(os.path.abspath(path)), spec["ranks"])
    if not os.path.exists(ranks):
        raise TokenizerError(f"the rank file {ranks!r} named by {path!r} does not exist")
    return {**spec, "ranks": ranks}


def encoding_of_spec(path: str, spec: dict) -> tiktoken.Encoding:
    try:
        return tiktoken.Encoding(
            name=spec.get("name") or os.path.splitext(os.path.basename(path))[0],
            pat_str=spec["pat_str"],
            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(spec["ranks"]),
            special_tokens={str(k): int(v) for k, v in spec["special_tokens"].items()},
        )
    except ValueError as e:
        raise TokenizerError(f"tokenizer spec {path!r}: {e}") from None


def encode_document(encoding: tiktoken.Encoding, text: str) -> np.ndarray:
    """Ordinary-text tokens as uint32, equal to `encode_ordinary`.

    Special-token text inside a document is encoded as plain text; the numpy path skips building a
    Python list of ints. Lone surrogates (which JSON escapes can produce) are replaced by U+FFFD, as
    `encode_ordinary` replaces them.
    """
    try:
        return encoding.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return encoding.encode_to_numpy(text, allowed_special=set(), disallowed_special=())


def vocab_sha256(encoding: tiktoken.Encoding) -> str:
    """A hash of ranks, specials and split pattern: equal exactly when the tokenization is equal."""
    h = hashlib.sha256()
    h.update(encoding._pat_str.encode())
    for token, rank in sorted(encoding._mergeable_ranks.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + len(token).to_bytes(2, "little") + token)
    for token, rank in sorted(encoding._special_tokens.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + token.encode())
    return h.hexdigest()


class TiktokenDocuments:
    """Documents encoded by a tiktoken encoding between their boundary ids, many in one call.

    The encoding's special tokens must include the boundary tokens, with the boundary ids."""

    def __init__(self, encoding: tiktoken.Encoding, boundary: Boundary):
        self.encoding = encoding
        self.boundary = boundary
        # Between documents: the EOS, then the next one's BOS; tiktoken encodes the text between
        # allowed special tokens independently, so a run of documents joined by them is one call.
        self._separator = boundary.eos_token + (boundary.bos_token or "")
        self._specials = {boundary.eos_token} | (
            {boundary.bos_token} if boundary.bos_token else set()
        )

    def encode_documents(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Equal to `[BOS] + encode_ordinary(doc) + [EOS]` for every document, concatenated, and
        their lengths. A document that holds a boundary token's text (which must stay text) is
        encoded on its own; runs of the others in one call each."""
        if not texts:
            return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
        flat = np.concatenate(list(self._runs(texts)))
        ends = np.flatnonzero(flat == self.boundary.eos_id)
        return flat, np.diff(ends, prepend=-1)

    def encode_piece(self, text: str, *, first: bool) -> tuple[np.ndarray, np.ndarray]:
        return piece_ids(encode_document(self.encoding, text), self.boundary, first=first)

    def _runs(self, texts: list[str]) -> Iterator[np.ndarray]:
        run: list[str] = []
        for text in texts:
            if any(s in text for s in self._specials):
                if run:
                    yield self._encode_run(run)
                    run = []
                yield piece_ids(encode_document(self.encoding, text), self.boundary, first=True)[0]
            else:
                run.append(text)
        if run:
            yield self._encode_run(run)

    def _encode_run(self, run: list[str]) -> np.ndarray:
        """`run` (none of which holds a boundary token's text) in one call."""
        joined = (
            (self.boundary.bos_token or "") + self._separator.join(run) + self.boundary.eos_token
        )
        try:
            flat = self.encoding.encode_to_numpy(
                joined, allowed_special=self._specials, disallowed_special=()
            )
        except UnicodeEncodeError:  # a lone surrogate, which `encode_document` replaces
            flat = None
        if flat is None or np.count_nonzero(flat == self.boundary.eos_id) != len(run):
            return np.concatenate(
                [
                    piece_ids(encode_document(self.encoding, t), self.boundary, first=True)[0]
                    for t in run
                ]
            )
        return flat


class TiktokenTokenizer(TiktokenDocuments):
    """A tiktoken encoding with its document boundary rule."""

    library = "tiktoken"
    engine_note = None  # the library named is the one that encodes

    def __init__(
        self,
        encoding: tiktoken.Encoding,
        spec: str,
        boundary: Boundary,
        spec_file: dict | None = None,
    ):
        super().__init__(encoding, boundary)
        self._spec = spec
        self._spec_file = spec_file
        self.info = TokenizerInfo(
            name=encoding.name,
            vocab_sha256=vocab_sha256(encoding),
            n_vocab=encoding.n_vocab,
            eot_id=boundary.eos_id,
            tiktoken_version=tiktoken.__version__,
            library=self.library,
            library_version=tiktoken.__version__,
            bos_id=boundary.bos_id,
            boundary=boundary.describe(),
        )

    @classmethod
    def named(cls, name: str, *, bos_flag: str | None, eos_flag: str | None) -> TiktokenTokenizer:
        encoding = load_encoding(name)
        eos = ENDOFTEXT if ENDOFTEXT in encoding.special_tokens_set else None
        boundary = _boundary(encoding, name, None, eos, f"tiktoken's {name}", bos_flag, eos_flag)
        return cls(encoding, name, boundary)

    @classmethod
    def from_spec_file(
        cls, path: str, *, bos_flag: str | None, eos_flag: str | None
    ) -> TiktokenTokenizer:
        spec = read_spec_file(path)
        encoding = encoding_of_spec(path, spec)
        boundary = _boundary(
            encoding,
            path,
            spec.get("bos_token"),
            spec.get("eos_token"),
            os.path.basename(path),
            bos_flag,
            eos_flag,
        )
        return cls(encoding, path, boundary, spec)

    def encode_ordinary(self, text: str) -> list[int]:
        return encode_document(self.encoding, text).tolist()

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode(ids)

    def save(self, directory: str) -> str:
        """What loads this tokenizer again from `directory` alone: a name, or a copied spec file."""
        if self._spec_file is None:
            return self._spec
        os.makedirs(directory, exist_ok=True)
        ranks = os.path.basename(self._spec_file["ranks"])
        shutil.copyfile(self._spec_file["ranks"], os.path.join(directory, ranks))
        path = os.path.join(directory, "tiktoken.json")
        with open(path, "w") as f:
            json.dump({**self._spec_file, "ranks": ranks}, f, indent=2, sort_keys=True)
        return path


def _boundary(
    encoding: tiktoken.Encoding,
    spec: str,
    bos: str | None,
    eos: str | None,
    source: str,
    bos_flag: str | None,
    eos_flag: str | None,
) -> Boundary:
    def lookup(token: str) -> int | None:
        if token in encoding._special_tokens:
            return encoding._special_tokens[token]
        try:
            return encoding.encode_single_token(token)
        except KeyError:
            return None

    boundary = resolve_boundary(
        spec=spec,
        token_id=lookup,
        specials=encoding.special_tokens_set,
        bos=bos,
        eos=eos,
        source=source,
        bos_flag=bos_flag,
        eos_flag=eos_flag,
    )
    ordinary = set(encoding._mergeable_ranks.values())
    for token, token_id in (
        (boundary.eos_token, boundary.eos_id),
        (boundary.bos_token, boundary.bos_id),
    ):
        if token_id in ordinary:
            raise TokenizerError(
                f"tokenizer {spec!r}: the special token {token!r} has id {token_id}, which is also "
                "an ordinary token's rank, so document text would encode to it; give it an id of "
                "its own"
            )
    return boundary
