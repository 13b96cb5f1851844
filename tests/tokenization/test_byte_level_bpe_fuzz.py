"""tiktoken's engine gives the `tokenizers` library's ids, document for document, on five real
vocabularies written as `tokenizer.json` files offline: GPT-2 (its shipped ranks, `ByteLevel`'s own
regex), Llama-3-style (cl100k ranks, Llama 3's pattern, 256 reserved specials), o200k (its
pattern), Qwen2-style (NFC, digits alone) and Mistral's Tekken; on random Unicode and the test
corpora. And prepare writes the same bytes on either engine, on two workers and after a resume.
Text that Python's quick check finds in a normal form skips the library's normalizer: every code
point is checked to be left as it is by the library wherever Python says so."""

from __future__ import annotations

import json
import os
import random
import unicodedata

import pytest
import tokenizers

from pipeline.corpus import stories
from pipeline.tokenization.byte_level_bpe import NORMAL_FORMS, PATTERNS
from pipeline.tokenization.hf_backend import ENGINE_ENV, HFTokenizer, _without_surrogates
from schemas import formats
from support.bpe_files import random_unicode, write_small, write_style
from support.corpora import sample_documents, write_jsonl
from support.fault_runs import kill_prepare_part_way, resumed_run
from support.runs import cli, run_outputs
from support.sentencepiece_files import tricky_corpus
from support.tokenizer_files import VARIED

pytestmark = pytest.mark.integration

FUZZ_DOCUMENTS = 2000


def _corpora() -> list[str]:
    rng = random.Random(40)
    fuzz = [random_unicode(rng, rng.randint(1, 300)) for _ in range(FUZZ_DOCUMENTS)]
    return fuzz + VARIED + sample_documents(200) + tricky_corpus(200) + list(stories(200, seed=4))


@pytest.mark.parametrize("style", ["gpt2", "llama3", "o200k", "qwen2", "tekken"])
def test_tiktoken_gives_the_librarys_ids_on_five_vocabularies(tmp_path, style):
    path, _ = write_style(style, str(tmp_path))
    tokenizer = HFTokenizer(path, bos_flag=None, eos_flag=None)
    assert tokenizer.engine == "tiktoken", tokenizer.engine_note
    library = tokenizers.Tokenizer.from_file(path)
    library.encode_special_tokens = True
    docs = _corpora()
    expected = library.encode_batch_fast(_without_surrogates(docs), add_special_tokens=False)
    differ = [i for i, d in enumerate(docs) if tokenizer.encode_ordinary(d) != expected[i].ids]
    assert differ == [], f"{len(differ)} of {len(docs)} documents differ, first {docs[differ[0]]!r}"


@pytest.mark.parametrize("form", NORMAL_FORMS)
def test_the_library_leaves_what_pythons_quick_check_finds_normalized(form):
    """On every code point alone, after a mark of class 230 and before one of class 220 (where the
    two Unicode versions' combining classes and decompositions would show), both ways."""
    library = getattr(tokenizers.normalizers, form)()
    changed = [
        text
        for code in range(0x110000)
        if not 0xD800 <= code < 0xE000
        for text in (chr(code), f"q\u0301{chr(code)}", f"q{chr(code)}\u0316")
        if unicodedata.is_normalized(form, text) and library.normalize_str(text) != text
    ]
    assert changed == [], (
        f"{len(changed)} texts in {form} by Python's Unicode {unicodedata.unidata_version} are "
        f"changed by the library, first {changed[0]!r}"
    )


def test_prepare_writes_the_same_bytes_on_either_engine_on_two_workers_and_after_a_resume(
    tmp_path,
):
    tokenizer = write_small(str(tmp_path / "qwen2-small"), PATTERNS["qwen2"], nfc=True)
    rng = random.Random(5)
    docs = [
        random_unicode(rng, 200) if i % 10 == 0 else story
        for i, story in enumerate(stories(3000, seed=6))
    ]
    corpus = write_jsonl(str(tmp_path / "corpus.jsonl"), docs + VARIED)
    workers = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]

    def args(output: str) -> list[str]:
        return [
            *("--input", corpus, "--output", str(tmp_path / output), "--tokenizer", tokenizer),
            *("--unit-bytes", "262144"),
        ]

    library_env = {**os.environ, ENGINE_ENV: "tokenizers"}
    library = cli(*args("library"), *workers, env=library_env)
    assert library.returncode == 0, library.stderr[-2000:]
    assert f"prepare: tokenizer {ENGINE_ENV}=tokenizers; encoded by tokenizers" in library.stderr
    fast = cli(*args("fast"), *workers)
    assert fast.returncode == 0, fast.stderr[-2000:]
    assert "prepare: tokenizer encoded by tiktoken" in fast.stderr
    kill_prepare_part_way([*args("resumed"), *workers], after=2)
    started, _ = resumed_run([*args("resumed"), *workers])
    outputs = run_outputs(str(tmp_path / "library"))
    assert 0 < started < json.loads(outputs[formats.MANIFEST_NAME])["num_units"]
    assert run_outputs(str(tmp_path / "fast")) == outputs
    assert run_outputs(str(tmp_path / "resumed")) == outputs
