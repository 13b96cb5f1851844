"""SentencePiece `.model` files: what they hold, read with the library's own `ModelProto`.

A `.model` file is a serialized `sentencepiece.ModelProto`: the pieces (text, score, type), the
trainer's settings (model type, byte fallback, the BOS/EOS ids) and the normalizer's (the
normalization rules, the dummy prefix, the whitespace collapse). It is recognized by content, not
only by name (`looks_like_model`, which needs no library, then `parse_model`), since Llama 2
checkpoints ship it as `tokenizer.model` and users rename it.

The `sentencepiece` library is an extra (`pip install 'tokshards[sentencepiece]'`); it is imported
only where a model is read (`library`), so prepare with any other tokenizer runs without it.
`sentencepiece_model_pb2` of 0.2.2 imports with the protobuf runtime Beam pins (< 7); that of 0.2.3
needs protobuf 7, which is why setup.py bounds the version.
"""

from __future__ import annotations

import dataclasses
import functools
import os

from pipeline.tokenization.boundaries import TokenizerError

MODEL_FILE = "tokenizer.model"  # what Llama 2, Mistral and Gemma checkpoints name it
EXTRA = "sentencepiece"  # the pip extra that installs the library
SPACE = "\u2581"  # what sentencepiece writes for a space ("▁")

# ModelProto.SentencePiece.Type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# TrainerSpec.ModelType
MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}

# Field 1 of ModelProto (the pieces) is length-delimited: a serialized model starts with this key
# byte, as the library writes fields in order.
_PIECES_KEY = 0x0A
_SNIFF_BYTES = 4096


def library():
    """The `sentencepiece` module, or a one-line error naming the extra that installs it."""
    try:
        import sentencepiece
    except ImportError:
        raise TokenizerError(
            f"SentencePiece models need the sentencepiece library: pip install 'tokshards[{EXTRA}]'"
        ) from None
    return sentencepiece


@functools.cache
def model_proto_class() -> type:
    library()
    from sentencepiece import sentencepiece_model_pb2

    return sentencepiece_model_pb2.ModelProto


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at
    raise ValueError("truncated varint")


def _is_first_piece(data: bytes) -> bool:
    """Whether `data` opens with a ModelProto's first piece: field 1 holding a SentencePiece
    message of a non-empty UTF-8 `piece` (field 1), then only a float `score` (field 2) and a
    varint `type` (field 3)."""
    try:
        length, at = _varint(data, 1)
        end = at + length
        if data[0] != _PIECES_KEY or end > len(data) or data[at] != _PIECES_KEY:
            return False
        size, at = _varint(data, at + 1)
        if size == 0 or at + size > end:
            return False
        data[at : at + size].decode("utf-8")
        at += size
        while at < end:
            key = data[at]
            if key == 0x15:  # field 2, 32-bit: the score
                at += 5
            elif key == 0x18:  # field 3, varint: the type
                _, at = _varint(data, at + 1)
            else:
                return False
        return at == end
    except (ValueError, IndexError, UnicodeDecodeError):
        return False


def looks_like_model(path: str | os.PathLike) -> bool:
    """Whether a file starts as a SentencePiece model does, read without the library: the first
    piece of its vocabulary. JSON, TOML and tiktoken rank files never do."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return False
    return _is_first_piece(head)


@dataclasses.dataclass(frozen=True)
class PieceTable:
    """Every piece's text, type and score, read once (a Gemma vocabulary has 256k pieces)."""

    texts: list[str]
    types: list[int]
    scores: list[float]

    @classmethod
    def of(cls, proto) -> PieceTable:
        pieces = proto.pieces
        return cls([p.piece for p in pieces], [p.type for p in pieces], [p.score for p in pieces])

    def of_type(self, kind: int) -> tuple[str, ...]:
        return tuple(s for s, k in zip(self.texts, self.types) if k == kind)


def parse_model(data: bytes):
    """The ModelProto in `data` with its piece table, or None where `data` is not a SentencePiece
    model: it must parse, have pieces, every one with text, exactly one unknown piece (the library
    refuses a model without one), and a known model type."""
    if data[:1] != bytes([_PIECES_KEY]):
        return None
    proto = model_proto_class()()
    try:
        proto.ParseFromString(data)
    except Exception:  # google.protobuf.message.DecodeError, and RuntimeError of some runtimes
        return None
    table = PieceTable.of(proto)
    if not table.texts or not all(table.texts) or table.types.count(UNKNOWN) != 1:
        return None
    if proto.trainer_spec.model_type not in MODEL_TYPES:
        return None
    return proto, table


@dataclasses.dataclass(frozen=True)
class ModelKind:
    """What a model is: its type, size, pieces by kind, and the settings that decide how it
    encodes."""

    model_type: str
    n_vocab: int
    byte_fallback: bool
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool
    escape_whitespaces: bool
    normalizer: str
    has_charsmap: bool
    treat_whitespace_as_suffix: bool
    user_defined: tuple[str, ...]
    control: tuple[str, ...]
    unused: int
    byte_pieces: int


def inspect_model(proto, table: PieceTable) -> ModelKind:
    trainer, normalizer = proto.trainer_spec, proto.normalizer_spec
    return ModelKind(
        model_type=MODEL_TYPES[trainer.model_type],
        n_vocab=len(table.texts),
        byte_fallback=trainer.byte_fallback,
        add_dummy_prefix=normalizer.add_dummy_prefix,
        remove_extra_whitespaces=normalizer.remove_extra_whitespaces,
        escape_whitespaces=normalizer.escape_whitespaces,
        normalizer=normalizer.name,
        has_charsmap=bool(normalizer.precompiled_charsmap),
        treat_whitespace_as_suffix=trainer.treat_whitespace_as_suffix,
        user_defined=table.of_type(USER_DEFINED),
        control=table.of_type(CONTROL),
        unused=table.types.count(UNUSED),
        byte_pieces=table.types.count(BYTE),
    )


def with_dummy_prefix(data: bytes, add_dummy_prefix: bool) -> bytes:
    """The model with `normalizer_spec.add_dummy_prefix` set as given and its self-test samples
    (whose expected pieces the change would falsify; versions that run them at load would refuse
    the model) dropped; every other field as it was, those this `ModelProto` does not know
    included (protobuf keeps unknown fields). Serialized deterministically: the same bytes in every
    process."""
    proto = model_proto_class()()
    proto.ParseFromString(data)
    proto.normalizer_spec.add_dummy_prefix = add_dummy_prefix
    proto.ClearField("self_test_data")
    return proto.SerializeToString(deterministic=True)
