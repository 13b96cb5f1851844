"""Real tokenizer files built offline: a byte-level BPE trained with `tokenizers`, the same table
written as a `.tiktoken` rank file with its spec, and text that exercises them."""

from __future__ import annotations

import base64
import json
import os

from tiktoken_ext import openai_public
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from pipeline.corpus import write_corpus
from pipeline.tokenization.byte_level_bpe import token_bytes

SPECIALS = ["<|endoftext|>", "<s>", "</s>"]

# Held-out-style documents: scripts, emoji, code, whitespace runs, special-token text, a lone
# surrogate as a JSON escape gives it.
VARIED = [
    "Once upon a time, a little fox found a shiny stone.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "emoji 🙂🚀👩‍👩‍👧 and flags 🇯🇵 then text",
    "def f(x):\n\treturn {'a': [x ** 2 for x in range(10)]}  # code\n",
    "wide" + " " * 300 + "gap\n\n\n\n\t\t\t  end",
    "holds <|endoftext|> and <s> and </s> as plain text",
    "<s>starts like a BOS and ends like an EOS</s>",
    json.loads('"lone \\ud800 surrogate and \\udfff another"'),
    "ÀÉÎõü ß ﬁ Ω ≈ ∑ — “quotes” ‘single’",
    "x",
    "   leading and trailing spaces   ",
]


def _training_text(directory: str) -> list[str]:
    path = os.path.join(directory, "bpe-corpus.txt")
    write_corpus(path, 400, seed=7)
    with open(path, encoding="utf-8") as f:
        return [f.read(), *VARIED[:7]]


def train_bpe(directory: str, vocab_size: int = 600) -> str:
    """A GPT-2 style byte-level BPE (no post-processor) saved as `directory/tokenizer.json`."""
    os.makedirs(directory, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_training_text(directory), trainer)
    path = os.path.join(directory, "tokenizer.json")
    tokenizer.save(path)
    return path


def shifted(source: str, directory: str, offset: int) -> str:
    """`source` with every regular token's id raised by `offset`: a vocabulary above `offset` ids
    whose ids all occur in text, at the cost of a tiny table."""
    with open(source, encoding="utf-8") as f:
        definition = json.load(f)
    vocab = definition["model"]["vocab"]
    definition["model"]["vocab"] = {
        t: (i if t in SPECIALS else i + offset) for t, i in vocab.items()
    }
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(definition, f, ensure_ascii=False)
    return path


def write_tiktoken_spec(hf_path: str, directory: str, suffix: str = ".json") -> str:
    """The BPE of `hf_path` as a `.tiktoken` rank file (rank = id) and a spec file naming it, with
    the GPT-2 split pattern (that of the byte-level pre-tokenizer) and the same special tokens."""
    with open(hf_path, encoding="utf-8") as f:
        definition = json.load(f)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "trained.tiktoken"), "w") as f:
        for token, rank in sorted(definition["model"]["vocab"].items(), key=lambda kv: kv[1]):
            if token not in SPECIALS:
                f.write(f"{base64.b64encode(token_bytes(token)).decode()} {rank}\n")
    specials = {t["content"]: t["id"] for t in definition["added_tokens"]}
    path = os.path.join(directory, "trained" + suffix)
    if suffix == ".toml":
        lines = [
            'ranks = "trained.tiktoken"',
            f"pat_str = {json.dumps(openai_public.r50k_pat_str)}",
            "[special_tokens]",
        ]
        lines += [f"{json.dumps(k)} = {v}" for k, v in specials.items()]
        text = "\n".join(lines) + "\n"
    else:
        text = json.dumps(
            {
                "ranks": "trained.tiktoken",
                "pat_str": openai_public.r50k_pat_str,
                "special_tokens": specials,
            }
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
