"""SentencePiece `.model` files (Llama 2, Mistral, Gemma, T5 vocabularies), encoded with the
`sentencepiece` library.

A document's ids are exactly `SentencePieceProcessor.encode(text)`, between the boundary ids of
`boundaries`' rule, which for a model is its own: its BOS piece (`trainer_spec.bos_id`) before each
document and its EOS after it, either absent where the model was trained without it (`bos_id=-1`,
as T5's); `--bos-token`/`--eos-token` name another of its control symbols, `--bos-token none`
drops the BOS. Control symbols are the model's special tokens: text never encodes to them, so
`<s>` written in a document stays the characters it is made of. User-defined symbols are the
opposite (text encodes to them) and cannot be a boundary.

A document longer than `sentencepiece_split.PIECE_CHARS` is encoded a piece at a time where the
model's split rule allows (BPE models), each piece by the model's own processor or its
continuation (see `sentencepiece_split`), so its ids are the whole document's while the library
holds one piece; where the rule refuses (Unigram, WORD and CHAR models, and the settings listed
there) it is encoded whole. A document prepare's reader cut (over `--max-document-bytes`) arrives
in pieces (`encode_piece`): every piece but the first is encoded as a continuation, so the pieces'
ids join to the whole document's wherever the reader's cut is one the rule allows.

The library's batch encode runs a thread pool of `num_threads`, by default as many threads as the
machine has cores; prepare already runs one worker per core, so the pool has one thread here.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator, Sequence

import numpy as np

from pipeline.tokenization.boundaries import (
    Boundary,
    TokenizerError,
    join_documents,
    piece_ids,
    resolve_boundary,
)
from pipeline.tokenization.sentencepiece_model import (
    MODEL_FILE,
    inspect_model,
    library,
    parse_model,
    with_dummy_prefix,
)
from pipeline.tokenization.sentencepiece_split import PIECE_CHARS, can_split, cut_points
from schemas.manifest import TokenizerInfo

# What the library raises for text that is not valid UTF-8 (a lone surrogate): RuntimeError for
# one text, TypeError in a batch.
_NOT_UTF8 = (RuntimeError, TypeError, UnicodeEncodeError)


def _valid(text: str) -> str:
    """`text` with lone surrogates (from JSON escapes) replaced by U+FFFD, as the other backends
    do."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _name_of(path: str) -> str:
    """A model's name: its file's stem, or its directory's name for a `tokenizer.model`."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem == os.path.splitext(MODEL_FILE)[0]:
        return os.path.basename(os.path.dirname(os.path.abspath(path))) or stem
    return stem


class SentencePieceTokenizer:
    """A SentencePiece model with its document boundary rule.

    `model` is a path or the model's bytes; pickling carries the bytes and the arguments, and each
    process loads its own processors from them.
    """

    library = "sentencepiece"
    engine_note = None  # the library named is the one that encodes

    def __init__(
        self,
        model: bytes | str,
        *,
        bos_flag: str | None,
        eos_flag: str | None,
        name: str | None = None,
        num_threads: int = 1,
        piece_chars: int = PIECE_CHARS,
    ):
        spm = library()
        spec = "the model's bytes"
        if not isinstance(model, bytes):
            spec = os.fspath(model)
            try:
                with open(spec, "rb") as f:
                    model = f.read()
            except OSError as e:
                raise TokenizerError(f"SentencePiece model {spec!r} cannot be read: {e}") from None
            name = name or _name_of(spec)
        parsed = parse_model(model)
        if parsed is None:
            raise TokenizerError(
                f"{spec!r} is not a SentencePiece model (a serialized sentencepiece ModelProto)"
            )
        proto, table = parsed
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=model)
        except (RuntimeError, OSError, ValueError) as e:  # the library's load status, as raised
            raise TokenizerError(
                f"SentencePiece model {spec!r} is refused by the library: {e}"
            ) from None
        self._bytes = model
        self._args = dict(
            bos_flag=bos_flag,
            eos_flag=eos_flag,
            name=name,
            num_threads=num_threads,
            piece_chars=piece_chars,
        )
        self.kind = inspect_model(proto, table)
        self.rule = can_split(proto, table)
        self.num_threads = num_threads
        self.piece_chars = piece_chars
        sp = self.sp
        self.boundary: Boundary = resolve_boundary(
            spec=spec,
            token_id=self._token_id,
            specials=set(self.kind.control),
            bos=sp.id_to_piece(sp.bos_id()) if sp.bos_id() >= 0 else None,
            eos=sp.id_to_piece(sp.eos_id()) if sp.eos_id() >= 0 else None,
            source="the model",
            bos_flag=bos_flag,
            eos_flag=eos_flag,
        )
        self.info = TokenizerInfo(
            name=name or "sentencepiece",
            vocab_sha256=hashlib.sha256(model).hexdigest(),
            n_vocab=sp.get_piece_size(),
            eot_id=self.boundary.eos_id,
            tiktoken_version="",
            library=self.library,
            library_version=spm.__version__,
            bos_id=self.boundary.bos_id,
            boundary=self.boundary.describe(),
        )

    def __reduce__(self):
        return _rebuild, (self._bytes, self._args)

    def _token_id(self, piece: str) -> int | None:
        token_id = self.sp.piece_to_id(piece)  # the unknown piece's id for a piece it lacks
        return (
            None
            if token_id == self.sp.unk_id() and piece != self.sp.id_to_piece(token_id)
            else token_id
        )

    @functools.cached_property
    def _continuation(self):
        """The processor of every piece of a document but its first (prefix models) or last (suffix
        models): the model with `add_dummy_prefix` as the split rule sets it."""
        if self.rule.continuation_dummy == self.kind.add_dummy_prefix:
            return self.sp
        return library().SentencePieceProcessor(
            model_proto=with_dummy_prefix(self._bytes, self.rule.continuation_dummy)
        )

    # -- the ids of one text ----------------------------------------------------------------------

    def _encode_one(self, processor, text: str) -> np.ndarray:
        try:
            return processor.encode(text, return_type="numpy")
        except _NOT_UTF8:
            if _valid(text) is text:
                raise
            return processor.encode(_valid(text), return_type="numpy")

    def pieces(self, text: str, *, first: bool = True) -> Iterator[tuple[str, bool]]:
        """`text` in the pieces `encode_long` encodes, each with whether the model's own processor
        encodes it (True) or the continuation: in prefix models the document's first piece (where
        `text` starts a document: `first`) is its own, in suffix models the last."""
        suffix = self.kind.treat_whitespace_as_suffix
        start = 0
        for cut in cut_points(text, self.rule, self.piece_chars):
            yield text[start:cut], first and start == 0 and not suffix
            start = cut
        yield text[start:], suffix or (first and start == 0)

    def encode_long(self, text: str, *, first: bool = True) -> np.ndarray:
        """Exactly `encode(text)` (for `first=False`, the ids `text` has after a cut), a piece at a
        time where the split rule allows, whole where it does not."""
        # Each piece's ids copied out of the library's vector, whose capacity can be twice its size
        # (byte fallback grows it past its reserve), so that the parts hold 4 bytes per id.
        parts = [
            np.array(self._encode_one(self.sp if own else self._continuation, piece))
            for piece, own in self.pieces(text, first=first)
        ]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def encode_ordinary(self, text: str) -> list[int]:
        return self.encode_long(text).tolist()

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    # -- documents with their boundaries ---------------------------------------------------------

    def _encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        try:
            return self.sp.encode(texts, return_type="numpy", num_threads=self.num_threads)
        except _NOT_UTF8:
            valid = [_valid(t) for t in texts]
            if all(v is t for v, t in zip(valid, texts)):
                raise
            return self.sp.encode(valid, return_type="numpy", num_threads=self.num_threads)

    def _encode(self, texts: list[str]) -> list[np.ndarray]:
        """Short documents in one call of the library, each long one by `encode_long`."""
        short = [t for t in texts if len(t) <= self.piece_chars]
        if len(short) == len(texts) or not self.rule.allowed:
            return self._encode_batch(texts)
        ids = iter(self._encode_batch(short))
        return [next(ids) if len(t) <= self.piece_chars else self.encode_long(t) for t in texts]

    def encode_documents(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """`[BOS] + encode(doc) + [EOS]` for every document, concatenated as uint32, and their
        lengths."""
        return join_documents(self._encode(texts), self.boundary)

    def encode_piece(self, text: str, *, first: bool) -> tuple[np.ndarray, np.ndarray]:
        """One piece of a document the reader cut: the BOS before the first piece only, the EOS
        after each, and every piece but the first encoded as a continuation."""
        return piece_ids(self.encode_long(text, first=first), self.boundary, first=first)

    def save(self, directory: str) -> str:
        """Writes the model's bytes as they were read into `directory`; returns the path that loads
        it again."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, MODEL_FILE)
        with open(path, "wb") as f:
            f.write(self._bytes)
        return path


def _rebuild(model: bytes, args: dict) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(model, **args)
