"""A byte-level BPE `tokenizer.json` as tiktoken ranks, where tiktoken's engine gives its ids.

tiktoken encodes a byte-level BPE several times faster than the `tokenizers` library. It gives the
library's ids for a `tokenizer.json` exactly when the file asks for nothing tiktoken's engine does
not do; `tiktoken_parts` checks each rule and returns either the ranks, split pattern and
normalizer to encode with, or the one-line reason the file stays on the library. The reasoning
behind every rule is in docs/byte-level-bpe.md. In short:

- the model: BPE, without dropout, `unk_token`, subword prefix or suffix, or `byte_fallback`, with
  `ignore_merges` on (tiktoken takes a pre-token that is a whole token as it is);
- the vocabulary: GPT-2's byte-to-character alphabet, every byte a token;
- the merges: every split of a token into two tokens is a merge (tiktoken merges any such pair),
  and they are in the order of their tokens' ids (tiktoken merges the lowest id first, its rank);
- the pre-tokenizer: `ByteLevel` with its own regex, or one `Split` regex (`Isolated`) before
  `ByteLevel(use_regex=false)`, without a prefix space; a split pattern only from `PATTERNS`, those
  the regex dialects (Oniguruma in the library, fancy-regex in tiktoken) were shown to split alike;
- the normalizer: none, or Unicode normal forms, applied with the library's own normalizer first;
- added tokens: all special, so that with special-token splitting off their text is plain text.

A file that passes is still only encoded by tiktoken after `PROBE` gave equal ids both ways
(`HFTokenizer` runs it when it loads the file, while a forked child checks the rules meanwhile).
"""

from __future__ import annotations

import dataclasses

# GPT-2's pre-tokenizer regex, built into `ByteLevel(use_regex=true)`, and tiktoken's form of it
# (possessive quantifiers, `\s++$` for trailing whitespace) in its own `gpt2` encoding.
BYTE_LEVEL_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
GPT2_TIKTOKEN_PATTERN = (
    r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"
)
# The `Split` patterns whose splits were shown equal in both dialects (tests/tokenization/
# test_byte_level_bpe.py, with random Unicode), each given to tiktoken as it is written.
PATTERNS = {
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "cl100k": r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"
    r"[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s",
    "o200k": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
# Encoded both ways before a file is given to tiktoken: whitespace runs, line ends, digits, CJK,
# emoji (with joiners and flags), combining marks (composed by NFC), upper-case contractions and the
# long s that case-folds to "s", no-break and other Unicode spaces, special-token text, a lone
# surrogate. The file's own added tokens are appended to it.
PROBE = (
    "Hello world!  Two  spaces,\tthen\ttabs   and trailing   \n"
    "\r\nWindows\r\nlines\r\n\r\n\n\n  indented\n"
    "Digits 1 12 123 1234 12345 3.14159 1,000,000 ٣٤٥ ０１２\n"
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.\n"
    "emoji 🙂🚀 👩‍👩‍👧 🇯🇵 ✈️ then text\n"
    "combining: e\u0301 a\u0308 n\u0303 \u1e9b\u0323 >\u0338 Å Å ﬁ ｶﾞ\n"
    "I'M YOU'RE WE'VE THEY'LL HE'D IT'S DON'T it's we'll Iſ ſ'S\n"
    "no\u00a0break\u2009thin\u3000ideographic\u2028line\u0085next\u200bzero\n"
    "<|endoftext|> <s></s> [INST] <|im_start|>user<|im_end|> <unk>\n"
    "Привет, мир! Γειά σου Κόσμε! مرحبا بالعالم שלום עולם नमस्ते दुनिया\n"
    "def f(x):\n\treturn {'a': [x ** 2 for x in range(10)]}  # code\n"
    "https://example.com/a/b?c=d&e=f ../../path//file.txt C:\\dir\\x\n"
    "lone \ud800 surrogate"
)

# GPT-2's table of bytes as printable characters, which byte-level vocabularies are written in:
# printable Latin-1 bytes stand for themselves, the other 68 for U+0100 onwards in byte order.
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
CHAR_OF_BYTE = {
    b: chr(b) if b in _PRINTABLE else chr(256 + sorted(set(range(256)) - set(_PRINTABLE)).index(b))
    for b in range(256)
}
# The inverse as a `str.translate` table: to Latin-1 characters, each then one byte; characters
# outside the alphabet become U+FFFF, which Latin-1 cannot encode.
_TO_LATIN1 = {ord(c): chr(b) for b, c in CHAR_OF_BYTE.items()} | {
    c: "\uffff" for c in range(256) if c not in _PRINTABLE
}


def token_bytes(token: str) -> bytes:
    """The bytes a byte-level vocabulary's token stands for; ValueError outside the alphabet."""
    try:
        return token.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError(f"token {token!r} is not in the byte-level alphabet") from None


@dataclasses.dataclass(frozen=True)
class TiktokenParts:
    """What tiktoken needs to give a `tokenizer.json`'s ids."""

    ranks: dict[bytes, int]  # each token's bytes and its id: tiktoken's rank is its id
    pattern: str  # tiktoken's split pattern
    normal_forms: tuple[str, ...]  # the file's normalizer: Unicode normal forms, in order


def _model_reason(model: dict) -> str | None:
    kind = model.get("type", "BPE" if "merges" in model else None)
    if kind != "BPE":
        return f"model: {kind}, not BPE"
    for key, what in (
        ("byte_fallback", "byte_fallback"),
        ("dropout", "dropout"),
        ("unk_token", "an unk_token"),
        ("continuing_subword_prefix", "a continuing_subword_prefix"),
        ("end_of_word_suffix", "an end_of_word_suffix"),
    ):
        if model.get(key):
            return f"BPE model: {what} ({model[key]!r}), which tiktoken does not apply"
    if not model.get("ignore_merges"):
        return (
            "BPE model: ignore_merges is off, and tiktoken takes a pre-token that is a whole token "
            "as it is"
        )
    return None


def _normalizer_reason(normalizer: dict | None) -> tuple[str | None, tuple[str, ...]]:
    """The reason a normalizer stays on the library (or None), and the normal forms it applies."""
    if normalizer is None:
        return None, ()
    steps = normalizer.get("normalizers", []) if normalizer["type"] == "Sequence" else [normalizer]
    others = [s["type"] for s in steps if s["type"] not in NORMAL_FORMS]
    if others:
        return f"normalizer: {', '.join(others)}, not a Unicode normal form", ()
    return None, tuple(s["type"] for s in steps)


def _pattern_of(pre_tokenizer: dict | None) -> tuple[str | None, str]:
    """tiktoken's split pattern for a pre-tokenizer (None), or the reason there is none."""
    if pre_tokenizer is None:
        return None, "pre-tokenizer: none, so text is not split before the merges"
    steps = (
        pre_tokenizer.get("pretokenizers", [])
        if pre_tokenizer["type"] == "Sequence"
        else [pre_tokenizer]
    )
    kinds = [s["type"] for s in steps]
    if kinds.count("Split") > 1:
        return None, f"pre-tokenizer: a Sequence of {kinds.count('Split')} Split rules"
    if kinds not in (["ByteLevel"], ["Split", "ByteLevel"]):
        return None, f"pre-tokenizer: {' then '.join(kinds) or 'an empty Sequence'}"
    byte_level = steps[-1]
    if byte_level.get("add_prefix_space"):
        return None, "pre-tokenizer: ByteLevel adds a prefix space"
    uses_regex = byte_level.get("use_regex", True)
    if len(steps) == 1:
        if not uses_regex:
            return None, "pre-tokenizer: ByteLevel without its regex, and no Split"
        return GPT2_TIKTOKEN_PATTERN, ""
    split = steps[0]
    if uses_regex:
        return None, "pre-tokenizer: a Split, then ByteLevel's own regex too"
    if split.get("behavior") != "Isolated" or split.get("invert"):
        return None, f"pre-tokenizer: a Split with behavior {split.get('behavior')}"
    pattern = split["pattern"].get("Regex")
    if pattern not in PATTERNS.values():
        return None, (
            "pre-tokenizer: a Split pattern not among those shown to split alike in tiktoken's "
            "regex dialect"
        )
    return pattern, ""


def _ranks(vocab: dict[str, int]) -> tuple[dict[bytes, int] | None, str]:
    try:  # `token_bytes` inlined: a call per token is a fifth of a second on 200,000 tokens
        ranks = {t.translate(_TO_LATIN1).encode("latin-1"): i for t, i in vocab.items()}
    except UnicodeEncodeError:
        outside = next(t for t in vocab if max(t.translate(_TO_LATIN1), default="") > "\xff")
        return None, f"vocabulary: not byte-level: token {outside!r} is outside the byte alphabet"
    missing = 256 - sum(1 for token in ranks if len(token) == 1)
    if missing:
        return None, f"vocabulary: {missing} of the 256 bytes are not tokens"
    return ranks, ""


def _merges_reason(merges: list, vocab: dict[str, int]) -> str | None:
    """Why tiktoken's rule (merge any adjacent pair that is a token, the lowest id first) would
    merge otherwise than these merges, or None. Tokens are compared as written: one character
    per byte, so their splits are the splits of their bytes."""
    pairs = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]
    made = [vocab[left + right] for left, right in pairs]
    for index in range(1, len(made)):
        if made[index] < made[index - 1]:
            left, right = pairs[index]
            return (
                f"merges: merge {index} ({left} {right}) makes id {made[index]}, below the id "
                f"{made[index - 1]} of the merge before it, an order tiktoken cannot follow"
            )
    # The library takes only merges of two tokens into a token, so these are a subset of all such
    # splits, and as many means all of them.
    splits = sum(
        1
        for token in vocab
        for at in range(1, len(token))
        if token[:at] in vocab and token[at:] in vocab
    )
    if splits != len(set(pairs)):
        return (
            f"merges: {splits - len(set(pairs))} splits of a token into two tokens are not merges, "
            "and tiktoken would merge them"
        )
    return None


def tiktoken_parts(definition: dict, *, check_merges: bool = True) -> TiktokenParts | str:
    """The ranks, split pattern and normalizing of a `tokenizer.json` (its parsed JSON), or the
    reason tiktoken cannot be shown to give its ids (a phrase for "...; encoded by tokenizers").
    `check_merges=False` leaves out the last rule, the merges' (the costliest, a fifth of a second
    on 150,000 merges), for a caller that has it checked in another process meanwhile."""
    model = definition.get("model") or {}
    reason = _model_reason(model)
    if reason:
        return reason
    reason, normal_forms = _normalizer_reason(definition.get("normalizer"))
    if reason:
        return reason
    pattern, reason = _pattern_of(definition.get("pre_tokenizer"))
    if pattern is None:
        return reason
    plain = [t["content"] for t in definition.get("added_tokens", []) if not t.get("special")]
    if plain:
        return (
            f"added tokens: {len(plain)} not marked special (e.g. {plain[0]!r}), which are split "
            "out of text"
        )
    ranks, reason = _ranks(model["vocab"])
    if ranks is None:
        return reason
    reason = _merges_reason(model.get("merges", []), model["vocab"]) if check_merges else None
    if reason:
        return reason
    return TiktokenParts(ranks, pattern, normal_forms)
