"""The offline GPT-2 encoding must equal tiktoken's own `gpt2` and never touch the network."""

from __future__ import annotations

import hashlib

import pytest
import tiktoken

from pipeline import tokenizer


def test_bundled_table_matches_pinned_hash():
    with open(tokenizer._bundled_ranks_path(), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == tokenizer.GPT2_RANKS_SHA256


def test_gpt2_is_tiktokens_gpt2_layout(encoding):
    assert encoding.n_vocab == 50257
    assert tokenizer.eot_id(encoding) == 50256
    text = "Hello world! <|endoftext|> café 🙂\r\n\x00"
    ids = encoding.encode_ordinary(text)
    assert encoding.decode(ids) == text
    assert 50256 not in ids
    assert tokenizer.encode_document(encoding, text).tolist() == ids
    assert tokenizer.encode_document(encoding, "lone \ud800 surrogate").tolist() == encoding.encode_ordinary(
        "lone \ud800 surrogate"
    )


def test_tiktoken_file_path_is_accepted(tmp_path):
    path = tmp_path / "tiny.tiktoken"
    import base64

    lines = [f"{base64.b64encode(bytes([i])).decode()} {i}" for i in range(256)]
    path.write_text("\n".join(lines) + "\n")
    encoding = tokenizer.load_encoding(str(path))
    assert encoding.n_vocab == 257
    assert tokenizer.eot_id(encoding) == 256
    assert encoding.decode(encoding.encode_ordinary("abc")) == "abc"


def test_unknown_names_fail_clearly(tmp_path):
    with pytest.raises(tokenizer.TokenizerError, match="unknown tokenizer"):
        tokenizer.load_encoding("no_such_encoding")
    with pytest.raises(tokenizer.TokenizerError, match="does not exist"):
        tokenizer.load_encoding(str(tmp_path / "missing.tiktoken"))


def test_vocab_hash_distinguishes_encodings(tmp_path):
    info = tokenizer.tokenizer_info("gpt2")
    assert info.n_vocab == 50257 and len(info.vocab_sha256) == 64
    assert tokenizer.tokenizer_info("r50k_base").vocab_sha256 == info.vocab_sha256


def test_other_names_go_through_tiktoken(monkeypatch):
    # cl100k_base is not shipped: it loads through tiktoken's own registry and cache, as usual.
    # Loading it for real would download, so only the hand-off is checked here.
    asked = []
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: asked.append(name) or "loaded")
    assert tokenizer.load_encoding.__wrapped__("cl100k_base") == "loaded"
    assert asked == ["cl100k_base"]


def test_batched_encoding_equals_one_call_per_document(encoding):
    docs = ["plain", " leading space", "trailing newline\n", "holds <|endoftext|> as text", "", "🙂 end",
            "lone \ud800 surrogate", "last"]
    flat, lengths = tokenizer.encode_documents(encoding, docs)
    expected = [t for d in docs for t in encoding.encode_ordinary(d) + [encoding.eot_token]]
    assert flat.tolist() == expected
    assert lengths.tolist() == [len(encoding.encode_ordinary(d)) + 1 for d in docs]
    empty, no_lengths = tokenizer.encode_documents(encoding, [])
    assert empty.size == 0 and no_lengths.size == 0
