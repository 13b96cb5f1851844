"""Hugging Face `tokenizer.json` files, encoded with the `tokenizers` library.

Ids are exactly `tokenizer.encode(text, add_special_tokens=False)` with special-token splitting
off (`encode_special_tokens = True`), so special-token text inside a document (`<s>`,
`<|endoftext|>`) is plain text: a web page that holds it gains no boundary. The boundary ids come
from the tokenizer's own convention (see `boundary_of`), added around each document here.

A document longer than `long_text.PIECE_CHARS` is encoded in pieces whose ids join to its own (see
`long_text`): the library holds about 130 bytes per character while it encodes.

A byte-level BPE file that tiktoken's engine encodes identically (see `byte_level_bpe`: ranks, split
pattern and normalizer read from the file, and a probe text that gave equal ids both ways as it
loaded) is encoded by tiktoken, several times faster; `engine_note` says which engine encodes and,
for the library, why. The ids, and so the dataset and its identity, are the same either way;
`TOKSHARDS_BPE_ENGINE=tokenizers` keeps every file on the library.

Prepare runs one worker process per core, so the library's own thread pool is turned off in this
process (`TOKENIZERS_PARALLELISM=false`, read at each batch encode): a pool per worker would put
cores times cores threads on the machine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Callable

import numpy as np
import tiktoken
import tokenizers

from pipeline.forking import in_child
from pipeline.tokenization.boundaries import (
    Boundary,
    TokenizerError,
    join_documents,
    piece_ids,
    resolve_boundary,
)
from pipeline.tokenization.byte_level_bpe import PROBE, tiktoken_parts
from pipeline.tokenization.long_text import PIECE_CHARS, encode_in_pieces
from pipeline.tokenization.tiktoken_backend import TiktokenDocuments, encode_document
from schemas.manifest import TokenizerInfo

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"  # beside it, as `transformers` saves it
# Documents per call of the library: each call returns an Encoding per document holding far more
# than its ids (tokens as strings, offsets, masks), so a unit's whole batch at once would hold
# hundreds of bytes per token; these are turned into uint32 ids before the next call.
ENCODE_BATCH = 4096
# Set to "tokenizers" to encode every tokenizer.json with the library, even where tiktoken would
# give the same ids: to compare the two engines, or to rule tiktoken out.
ENGINE_ENV = "TOKSHARDS_BPE_ENGINE"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _token_text(value: object) -> str | None:
    """A token as `tokenizer_config.json` writes it: a string, or `{"content": ...}`."""
    return value.get("content") if isinstance(value, dict) else value  # type: ignore[return-value]


def _template_tokens(processor: dict | None) -> tuple[str | None, str | None]:
    """The special tokens a post-processor puts before and after a single sequence."""
    if not processor:
        return None, None
    kind = processor.get("type")
    if kind == "Sequence":
        found = [_template_tokens(p) for p in processor.get("processors", [])]
        return next((b for b, _ in found if b), None), next((e for _, e in found if e), None)
    if kind == "TemplateProcessing":
        items = processor.get("single", [])
        at = next((i for i, item in enumerate(items) if "Sequence" in item), len(items))
        before = [item["SpecialToken"]["id"] for item in items[:at] if "SpecialToken" in item]
        after = [item["SpecialToken"]["id"] for item in items[at + 1 :] if "SpecialToken" in item]
        return (before[0] if before else None), (after[-1] if after else None)
    if kind in ("BertProcessing", "RobertaProcessing"):
        return processor["cls"][0], processor["sep"][0]
    return None, None


def boundary_of(definition: dict, config: dict | None) -> tuple[str | None, str | None, str]:
    """BOS and EOS by the tokenizer's convention, and where they were found.

    The post-processor's template first (what `encode(text)` adds); then `tokenizer_config.json`'s
    `add_bos_token`/`add_eos_token` over it; a config's `eos_token` ends documents when nothing else
    does (base models add no EOS when encoding, but end their documents with it in training).
    """
    bos, eos = _template_tokens(definition.get("post_processor"))
    source = "the post-processor" if bos or eos else "the default"
    if config:
        if "add_bos_token" in config:
            bos = _token_text(config.get("bos_token")) if config["add_bos_token"] else None
        if "add_eos_token" in config and config["add_eos_token"]:
            eos = _token_text(config.get("eos_token"))
        if eos is None:
            eos = _token_text(config.get("eos_token"))
        if bos or eos:
            source = f"{source} and {CONFIG_FILE}" if source != "the default" else CONFIG_FILE
    return bos, eos, source


def identity_sha256(definition: dict) -> str:
    """A hash of the whole definition (model, merges, normalizer, pre-tokenizer, added tokens), in a
    canonical JSON form: a file saved with other whitespace or key order hashes the same."""
    canonical = json.dumps(
        definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False, check_circular=False
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _unreadable(path: str, error: Exception) -> TokenizerError:
    return TokenizerError(f"{path!r} is not a tokenizer.json the tokenizers library reads: {error}")


def _identity_and_reason(definition: dict, forced: bool) -> tuple[str, str | None]:
    """The definition's identity, and the reason tiktoken cannot give its ids (None where it can,
    or where the library is `forced`)."""
    parts = None if forced else tiktoken_parts(definition)
    return identity_sha256(definition), parts if isinstance(parts, str) else None


def _without_surrogates(texts: list[str]) -> list[str]:
    """Lone surrogates (from JSON escapes) replaced by U+FFFD, as tiktoken does: the library takes
    only valid Unicode."""
    return [t.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for t in texts]


class HFTokenizer:
    """A `tokenizer.json` with its document boundary rule."""

    library = "tokenizers"

    def __init__(
        self,
        path: str,
        *,
        bos_flag: str | None,
        eos_flag: str | None,
        name: str | None = None,
        read: tuple[str, object] | None = None,
    ):
        """`read`: the file's text and its JSON, where the caller has read them already.

        The definition's identity hash and the rules of `byte_level_bpe` (most of a second of CPU
        for a 150,000-id vocabulary) are worked out in a forked child while this process builds the
        library's tokenizer, tiktoken's encoding and encodes the probe (`forking`)."""
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            if read is None:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                read = text, json.loads(text)
            self._text, definition = read
        except Exception as e:
            raise _unreadable(path, e) from None
        forced = os.environ.get(ENGINE_ENV) == self.library
        with in_child(functools.partial(_identity_and_reason, definition, forced)) as checked:
            self._load(path, definition, bos_flag, eos_flag, name, checked, forced)

    def _load(
        self,
        path: str,
        definition: dict,
        bos_flag: str | None,
        eos_flag: str | None,
        name: str | None,
        checked: Callable[[], tuple[str, str | None]],
        forced: bool,
    ) -> None:
        try:
            self._tokenizer = tokenizers.Tokenizer.from_str(self._text)
        except Exception as e:  # the library raises plain Exceptions
            raise _unreadable(path, e) from None
        self._tokenizer.encode_special_tokens = True
        # A file saved with truncation or padding on would cut or pad every document.
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        config_path = os.path.join(os.path.dirname(path), CONFIG_FILE)
        self._config_text = None
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as f:
                self._config_text = f.read()
        config = json.loads(self._config_text) if self._config_text else None
        bos, eos, source = boundary_of(definition, config)
        specials = {
            t.content for t in self._tokenizer.get_added_tokens_decoder().values() if t.special
        }
        self.boundary: Boundary = resolve_boundary(
            spec=path,
            token_id=self._tokenizer.token_to_id,
            specials=specials,
            bos=bos,
            eos=eos,
            source=source,
            bos_flag=bos_flag,
            eos_flag=eos_flag,
        )
        self._normalizer: tokenizers.normalizers.Normalizer | None = None
        self._normal_forms: tuple[str, ...] = ()
        self._fast, self.engine_note = self._tiktoken_engine(definition, specials, checked, forced)
        self.engine = self.library if self._fast is None else "tiktoken"
        vocab = self._tokenizer.get_vocab(with_added_tokens=True)
        self.info = TokenizerInfo(
            name=name or os.path.basename(os.path.dirname(os.path.abspath(path))) or TOKENIZER_FILE,
            vocab_sha256=checked()[0],
            n_vocab=max(vocab.values()) + 1,
            eot_id=self.boundary.eos_id,
            tiktoken_version="",
            library=self.library,
            library_version=tokenizers.__version__,
            bos_id=self.boundary.bos_id,
            boundary=self.boundary.describe(),
        )

    def _tiktoken_engine(
        self,
        definition: dict,
        specials: set[str],
        checked: Callable[[], tuple[str, str | None]],
        forced: bool,
    ) -> tuple[TiktokenDocuments | None, str]:
        """tiktoken's encoding of this file where it gives the library's ids, and the line that
        says which engine encodes (and why not tiktoken). `checked` gives the reason the rules
        find, all of them checked (the merges' too, left out here); `forced`: the environment
        keeps every file on the library."""
        if forced:
            return None, f"{ENGINE_ENV}={self.library}; encoded by {self.library}"
        parts = tiktoken_parts(definition, check_merges=False)
        if isinstance(parts, str):
            return None, f"{parts}; encoded by {self.library}"
        boundary = {self.boundary.eos_token: self.boundary.eos_id}
        if self.boundary.bos_token is not None:
            boundary[self.boundary.bos_token] = self.boundary.bos_id
        self._normal_forms = parts.normal_forms
        self._normalizer = self._tokenizer.normalizer if parts.normal_forms else None

        def encoding() -> tiktoken.Encoding:
            return tiktoken.Encoding(
                name=self.library,
                pat_str=parts.pattern,
                mergeable_ranks=parts.ranks,
                special_tokens=boundary,
            )

        # The probe is encoded by an encoding of its own: one that has encoded before prepare forks
        # its workers encodes a quarter slower in every one of them (measured; its regex caches).
        probe = PROBE + " ".join(sorted(specials))
        expected = self._encode_batch([probe])[0]
        got = encode_document(encoding(), self._normalized([probe])[0]).tolist()
        reason = checked()[1]
        if reason:
            return None, f"{reason}; encoded by {self.library}"
        if got != expected:
            at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), len(expected))
            return None, (
                f"the probe text's ids differ from the library's at token {at}; encoded by "
                f"{self.library}"
            )
        fast = TiktokenDocuments(encoding(), self.boundary)
        return fast, "encoded by tiktoken with the ranks, split pattern and ids of the file"

    def _normalized(self, texts: list[str]) -> list[str]:
        """Texts as the file's normalizer leaves them, by the library's own normalizer; only those
        it may change are passed to it (it adds a sixth to tiktoken's time on non-ASCII text)."""
        if self._normalizer is None:
            return texts
        return [t if self._is_normalized(t) else self._normal_form(t) for t in texts]

    def _is_normalized(self, text: str) -> bool:
        """Whether the file's normal forms leave `text` as it is, by Python's own quick check: no
        normal form changes ASCII; text in a normal form by Python's Unicode tables is in it by the
        library's (docs/byte-level-bpe.md). Surrogates are the library's to replace first: a pair
        of them becomes one character, which a normal form may move."""
        if text.isascii():
            return True
        return not _SURROGATE.search(text) and all(
            unicodedata.is_normalized(form, text) for form in self._normal_forms
        )

    def _normal_form(self, text: str) -> str:
        try:
            return self._normalizer.normalize_str(text)
        except UnicodeEncodeError:  # a lone surrogate, which the library's encode replaces too
            return self._normalizer.normalize_str(_without_surrogates([text])[0])

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        try:
            encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        except TypeError:  # a lone surrogate somewhere in the batch
            encodings = self._tokenizer.encode_batch_fast(
                _without_surrogates(texts), add_special_tokens=False
            )
        return [e.ids for e in encodings]

    def _encode_one(self, text: str) -> np.ndarray:
        return np.array(self._encode_batch([text])[0], dtype=np.uint32)

    def _encode(self, texts: list[str]) -> list[list[int] | np.ndarray]:
        """Short documents in one call, each long one in pieces."""
        short = [t for t in texts if len(t) <= PIECE_CHARS]
        if len(short) == len(texts):
            return self._encode_batch(texts)
        ids = iter(self._encode_batch(short))
        return [
            next(ids) if len(t) <= PIECE_CHARS else encode_in_pieces(t, self._encode_one)
            for t in texts
        ]

    def encode_ordinary(self, text: str) -> list[int]:
        if self._fast is not None:
            return encode_document(self._fast.encoding, self._normalized([text])[0]).tolist()
        return encode_in_pieces(text, self._encode_one).tolist()

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def encode_documents(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """`[BOS] + ids + [EOS]` for every document, concatenated, and their lengths."""
        if self._fast is not None:
            return self._fast.encode_documents(self._normalized(texts))
        if len(texts) <= ENCODE_BATCH:
            return join_documents(self._encode(texts), self.boundary)
        parts = [
            self.encode_documents(texts[i : i + ENCODE_BATCH])
            for i in range(0, len(texts), ENCODE_BATCH)
        ]
        return np.concatenate([flat for flat, _ in parts]), np.concatenate(
            [lengths for _, lengths in parts]
        )

    def encode_piece(self, text: str, *, first: bool) -> tuple[np.ndarray, np.ndarray]:
        if self._fast is not None:
            return self._fast.encode_piece(self._normalized([text])[0], first=first)
        return piece_ids(encode_in_pieces(text, self._encode_one), self.boundary, first=first)

    def save(self, directory: str) -> str:
        """Copies the definition (and its config) into `directory`; returns what loads it from
        there."""
        os.makedirs(directory, exist_ok=True)
        for name, text in ((TOKENIZER_FILE, self._text), (CONFIG_FILE, self._config_text)):
            if text is not None:
                with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
                    f.write(text)
        return os.path.join(directory, TOKENIZER_FILE)
