"""Byte-level BPE `tokenizer.json` files of real vocabularies, written offline from tiktoken ranks.

`write_tokenizer_json` is the conversion `transformers` applies to a tiktoken model
(`transformers.integrations.tiktoken` -> `convert_slow_tokenizer.TikTokenConverter`): every split
of a token into two tokens becomes a merge, ranked by the token's rank, with `ignore_merges` on.
Its few lines are written out here rather than installing `transformers` for them. The ranks come
from packages that ship them: GPT-2's with this package, cl100k_base and o200k_base with
`bpe-openai`, Mistral's Tekken with `mistral-common`. Each `STYLES` entry is one of the vocabularies
the engines are compared on; `write_style` writes its `tokenizer.json` (and `tokenizer_config.json`)
and the equivalent tiktoken spec file.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import os
import random
from collections.abc import Callable
from importlib import resources

import tiktoken.load
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from pipeline.tokenization.byte_level_bpe import CHAR_OF_BYTE, GPT2_TIKTOKEN_PATTERN, PATTERNS
from pipeline.tokenization.tiktoken_backend import GPT2_RANKS_SHA256, _bundled_ranks_path

Ranks = dict[bytes, int]


def _as_chars(token: bytes) -> str:
    return "".join(CHAR_OF_BYTE[b] for b in token)


def merges_of(ranks: Ranks) -> list[tuple[str, str]]:
    """Every split of a token into two tokens, in the order of the token's rank (then of the
    parts' ranks), as `TikTokenConverter.extract_vocab_merges_from_model` lists them."""
    merges = []
    for token, rank in ranks.items():
        local = [
            (token[:at], token[at:], rank)
            for at in range(1, len(token))
            if token[:at] in ranks and token[at:] in ranks
        ]
        merges.extend(sorted(local, key=lambda m: (ranks[m[0]], ranks[m[1]])))
    merges.sort(key=lambda m: m[2])
    return [(_as_chars(left), _as_chars(right)) for left, right, _ in merges]


def write_tokenizer_json(
    directory: str,
    ranks: Ranks,
    *,
    pattern: str | None,
    specials: dict[str, int],
    nfc: bool = False,
    config: dict | None = None,
) -> str:
    """`directory/tokenizer.json` from ranks: one `Split` of `pattern` before
    `ByteLevel(use_regex=false)`, or GPT-2's `ByteLevel` regex where `pattern` is None; the special
    tokens added with their ids; `config` written as tokenizer_config.json."""
    vocab = {_as_chars(token): rank for token, rank in ranks.items()}
    # Special tokens numbered below the ranks (Tekken's) are in the model's vocabulary too, as in
    # the model's own file; the others are added after it.
    vocab.update({t: i for t, i in specials.items() if i < max(ranks.values())})
    tokenizer = Tokenizer(models.BPE(vocab, merges_of(ranks), ignore_merges=True))
    if nfc:
        tokenizer.normalizer = normalizers.NFC()
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pattern is None)
    tokenizer.pre_tokenizer = (
        byte_level
        if pattern is None
        else pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False), byte_level]
        )
    )
    tokenizer.decoder = decoders.ByteLevel()
    # Added in id order, so that each takes the id it is given: `add_special_tokens` appends.
    for token, token_id in sorted(specials.items(), key=lambda kv: kv[1]):
        tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)])
        assert tokenizer.token_to_id(token) == token_id, (token, token_id)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    tokenizer.save(path)
    if config is not None:
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
    return path


def write_spec_file(directory: str, ranks: Ranks, *, pattern: str, specials: dict, **extra) -> str:
    """The same ranks as a `.tiktoken` rank file named by a tiktoken spec file."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "ranks.tiktoken"), "w") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    path = os.path.join(directory, "tiktoken.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {"ranks": "ranks.tiktoken", "pat_str": pattern, "special_tokens": specials, **extra}, f
        )
    return path


def gpt2_ranks() -> Ranks:
    return tiktoken.load.load_tiktoken_bpe(_bundled_ranks_path(), expected_hash=GPT2_RANKS_SHA256)


def _bpe_openai_ranks(name: str) -> Ranks:
    data = resources.files("bpe_openai") / "data" / f"{name}.tiktoken.gz"
    ranks = {}
    for line in gzip.decompress(data.read_bytes()).splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


def tekken() -> tuple[Ranks, str, dict[str, int]]:
    """Mistral's Tekken (Mistral NeMo's vocabulary): its ranks shifted above its special tokens, as
    the model numbers them, its pattern, and those special tokens."""
    data = resources.files("mistral_common") / "data" / "tekken_240911.json"
    model = json.loads(data.read_text(encoding="utf-8"))
    config = model["config"]
    specials = config["default_num_special_tokens"]
    size = config["default_vocab_size"] - specials
    ranks = {
        base64.b64decode(entry["token_bytes"]): entry["rank"] + specials
        for entry in model["vocab"][:size]
    }
    # The file lists no special tokens; these are mistral_common's first ones, the rest its filler.
    names = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    return (
        ranks,
        config["pattern"],
        {names[i] if i < len(names) else f"<SPECIAL_{i}>": i for i in range(specials)},
    )


@dataclasses.dataclass(frozen=True)
class Style:
    """One vocabulary the engines are compared on: its ranks, pattern, specials and boundary."""

    ranks: Callable[[], Ranks]
    pattern: str | None  # None: GPT-2's ByteLevel regex
    specials: Callable[[int], dict[str, int]]  # from the first id above the ranks
    nfc: bool = False
    bos: str | None = None
    eos: str = "<|endoftext|>"


def _llama3_specials(first: int) -> dict[str, int]:
    names = ["<|begin_of_text|>", "<|end_of_text|>"] + [
        f"<|reserved_special_token_{i}|>" for i in range(254)
    ]
    return {name: first + i for i, name in enumerate(names)}


STYLES = {
    "gpt2": Style(gpt2_ranks, None, lambda first: {"<|endoftext|>": first}),
    "llama3": Style(
        lambda: _bpe_openai_ranks("cl100k_base"),
        PATTERNS["llama3"],
        _llama3_specials,
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
    ),
    "o200k": Style(
        lambda: _bpe_openai_ranks("o200k_base"),
        PATTERNS["o200k"],
        lambda first: {"<|endoftext|>": first, "<|endofprompt|>": first + 1},
    ),
    "qwen2": Style(
        lambda: _bpe_openai_ranks("cl100k_base"),
        PATTERNS["qwen2"],
        lambda first: {
            t: first + i for i, t in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        },
        nfc=True,
    ),
}


def write_style(name: str, directory: str) -> tuple[str, str]:
    """The `tokenizer.json` of a style (Tekken's too, as "tekken") and its tiktoken spec file."""
    if name == "tekken":
        ranks, pattern, specials = tekken()
        style = Style(lambda: ranks, pattern, lambda first: specials, bos="<s>", eos="</s>")
    else:
        style = STYLES[name]
        ranks = style.ranks()
        pattern = style.pattern
        specials = style.specials(max(ranks.values()) + 1)
    config = {
        "bos_token": style.bos,
        "eos_token": style.eos,
        "add_bos_token": style.bos is not None,
    }
    hf = write_tokenizer_json(
        os.path.join(directory, "hf"),
        ranks,
        pattern=pattern,
        specials=specials,
        nfc=style.nfc,
        config=config,
    )
    spec = write_spec_file(
        os.path.join(directory, "tiktoken"),
        ranks,
        pattern=pattern or GPT2_TIKTOKEN_PATTERN,
        specials=specials,
        bos_token=style.bos,
        eos_token=style.eos,
    )
    return hf, spec


def random_unicode(rng: random.Random, length: int) -> str:
    """Text of every kind of character, weighted toward what splits differently: letters of many
    scripts, digits, spaces of every kind, line ends, marks, emoji, apostrophes, and any code point
    of any plane (unassigned, private use, lone surrogates)."""
    kinds = [
        lambda: rng.choice("abcXYZ  '\"sStTdDmMlLvVrReE"),
        lambda: rng.choice(" \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2009\u200b\u2028\u2029\u3000"),
        lambda: rng.choice("0123456789٣۴߀०໑၁០᠐٠１𝟎"),
        lambda: chr(rng.randint(0x300, 0x36F)),  # combining marks
        lambda: chr(rng.randint(0x20, 0x2FF)),
        lambda: chr(rng.randint(0x370, 0x2FFF)),
        lambda: chr(rng.randint(0x3000, 0xD7FF)),
        lambda: chr(rng.randint(0xE000, 0xFFFF)),
        lambda: chr(rng.randint(0x1F300, 0x1FAFF)),
        lambda: chr(rng.randint(0x10000, 0x10FFFF)),
        lambda: chr(rng.randint(0xD800, 0xDFFF)),
    ]
    weights = [30, 20, 8, 6, 10, 10, 6, 2, 4, 3, 1]
    return "".join(rng.choices(kinds, weights)[0]() for _ in range(length))


def write_small(
    directory: str, pattern: str | None, *, tokens: int = 2000, nfc: bool = False
) -> str:
    """A `tokenizer.json` of GPT-2's first `tokens` ranks (themselves a byte-level BPE: each merged
    token ranks after its parts), `<|endoftext|>` after them: fast to build and to load."""
    ranks = {t: r for t, r in gpt2_ranks().items() if r < tokens}
    return write_tokenizer_json(
        directory, ranks, pattern=pattern, specials={"<|endoftext|>": tokens}, nfc=nfc
    )


def edited(path: str, directory: str, edit: Callable[[dict], None]) -> str:
    """A copy of a `tokenizer.json` with its JSON changed by `edit`."""
    with open(path, encoding="utf-8") as f:
        definition = json.load(f)
    edit(definition)
    os.makedirs(directory, exist_ok=True)
    out = os.path.join(directory, "tokenizer.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(definition, f, ensure_ascii=False)
    return out
