"""SentencePiece `.model` tokenizers through the commands: prepare writes the library's ids of every
document, keeps the model in the prepared directory (inspect, train and sample need nothing else),
runs on several workers and resumes to the same bytes, reads a hub model that has only a
`tokenizer.model`, and encodes long documents in bounded memory."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm

from pipeline.corpus import write_corpus
from pipeline.dataset.manifest_io import read_manifest
from pipeline.prepare.planning import make_plan, worker_extras
from pipeline.tokenization import load_tokenizer
from pipeline.tokenization.sentencepiece_backend import SentencePieceTokenizer
from schemas import formats
from schemas.prepare_config import PrepareConfig
from support.corpora import write_jsonl, write_text
from support.fault_runs import kill_prepare_part_way
from support.runs import (
    REPO,
    cli,
    files_in_place,
    one_line_error,
    read_split,
    run_outputs,
    run_prepare,
)
from support.sentencepiece_files import (
    long_document,
    shifted,
    train_model,
    training_sentences,
    tricky_corpus,
    write_model,
)


def _run(*args: str) -> subprocess.CompletedProcess:
    """`python -m ARGS` from the checkout: `pipeline inspect`, `train`, `train sample`."""
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True)


def _documents(output: str, eos: int) -> list[tuple[int, ...]]:
    flat = np.concatenate(read_split(output))
    ends = np.flatnonzero(flat == eos) + 1
    return [tuple(d.tolist()) for d in np.split(flat, ends[:-1])]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["bpe_llama_like", "bpe_no_dummy", "unigram_default"])
def test_prepare_writes_the_librarys_ids_of_every_document(tmp_path, name):
    data = train_model(name)
    path = write_model(str(tmp_path / f"{name}.model"), data)
    texts = tricky_corpus(300, seed=3)
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "docs.jsonl"), texts)],
        out,
        "--tokenizer",
        path,
        "--unit-bytes",
        "4096",
    )
    sp = spm.SentencePieceProcessor(model_file=path)
    info = manifest.tokenizer
    assert (info.library, info.library_version, info.name) == (
        "sentencepiece",
        spm.__version__,
        name,
    )
    assert (
        info.vocab_sha256 == hashlib.sha256(data).hexdigest()
        and info.n_vocab == sp.get_piece_size()
    )
    assert (info.bos_id, info.eot_id) == (sp.bos_id(), sp.eos_id()) and manifest.dtype == "uint16"
    assert manifest.num_units > 1 and manifest.tokenizer_copy.load_as == "tokenizer/tokenizer.model"
    assert manifest.package_versions["sentencepiece"] == spm.__version__
    written = _documents(out, sp.eos_id())
    assert sorted(written) == sorted(
        tuple([sp.bos_id(), *sp.encode(t), sp.eos_id()]) for t in texts if t.strip()
    )


def test_a_model_is_found_by_name_by_content_and_in_a_directory(tmp_path):
    data = train_model("bpe_default")
    named = load_tokenizer(write_model(str(tmp_path / "llama2.model"), data))
    renamed = load_tokenizer(write_model(str(tmp_path / "vocab.bin"), data))  # by content
    checkpoint = load_tokenizer(
        os.path.dirname(write_model(str(tmp_path / "Llama-2-7b" / "tokenizer.model"), data))
    )
    assert {t.info.library for t in (named, renamed, checkpoint)} == {"sentencepiece"}
    assert (named.info.name, renamed.info.name, checkpoint.info.name) == (
        "llama2",
        "vocab",
        "Llama-2-7b",
    )
    assert named.info.vocab_sha256 == renamed.info.vocab_sha256 == checkpoint.info.vocab_sha256
    (tmp_path / "broken.model").write_bytes(b'{"a": 1}')
    with pytest.raises(ValueError, match="is not a SentencePiece model"):
        load_tokenizer(str(tmp_path / "broken.model"))
    (tmp_path / "llama3").mkdir()  # Llama 3's original checkpoints name their tiktoken ranks so
    (tmp_path / "llama3" / "tokenizer.model").write_bytes(b"IQ== 0\nIg== 1\n")
    with pytest.raises(
        ValueError,
        match="tokenizer.model' is a bare tiktoken rank file, which lacks the split pattern",
    ):
        load_tokenizer(str(tmp_path / "llama3"))


@pytest.mark.integration
def test_flags_that_name_no_control_symbol_are_refused_in_one_line(tmp_path):
    path = write_model(str(tmp_path / "m.model"), train_model("bpe_user_defined"))
    corpus = write_jsonl(str(tmp_path / "d.jsonl"), ["a cat", "a mat"])
    # A failed run (1), as for a tokenizer.json: the flag is checked against the model it names.
    result = cli(
        "--input",
        corpus,
        "--output",
        str(tmp_path / "out"),
        "--tokenizer",
        path,
        "--eos-token",
        "<tag>",
    )
    line = one_line_error(result, status=1)
    assert line.startswith(
        "prepare: error: '<tag>' (--eos-token, from the model and flags) is not a special token"
    )
    assert "('</s>', '<s>')" in line and len(result.stderr.strip().splitlines()) == 1, result.stderr
    manifest = run_prepare(
        [corpus], str(tmp_path / "none"), "--tokenizer", path, "--bos-token", "none"
    )
    assert manifest.tokenizer.bos_id is None and manifest.tokenizer.boundary.startswith(
        "</s> (2) after each document"
    )


@pytest.mark.integration
def test_a_document_the_reader_cuts_joins_to_its_whole_ids(tmp_path):
    # Over --max-document-bytes, the reader cuts before a whitespace; here every one is a space
    # after a letter, which the split rule allows, so the pieces join to the whole document's ids.
    text = " ".join(training_sentences(120, seed=2))
    path = write_model(str(tmp_path / "m.model"), train_model("bpe_llama_like"))
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_text(str(tmp_path / "d.txt"), [text])],
        out,
        "--tokenizer",
        path,
        "--max-document-bytes",
        "1024",
    )
    assert manifest.counts["document_pieces"] > 5
    sp = spm.SentencePieceProcessor(model_file=path)
    pieces = _documents(out, sp.eos_id())
    assert pieces[0][0] == sp.bos_id() and all(p[0] != sp.bos_id() for p in pieces[1:])
    assert [i for p in pieces for i in p if i not in (sp.bos_id(), sp.eos_id())] == sp.encode(text)


@pytest.mark.integration
def test_the_prepared_directory_keeps_the_model_for_inspect_and_sampling(tmp_path):
    model_dir = tmp_path / "Llama-2-7b"
    write_model(str(model_dir / "tokenizer.model"), train_model("bpe_llama_like"))
    docs = ["Once upon a time there was a cat.", "It sat on a mat,  twice.", "日本語 and 😀 too."]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "d.jsonl"), docs)], out, "--tokenizer", str(model_dir)
    )
    assert manifest.config.tokenizer == str(model_dir) and manifest.tokenizer.name == "Llama-2-7b"
    assert sorted(manifest.tokenizer_copy.files) == ["tokenizer/tokenizer.model"]
    shutil.rmtree(model_dir)  # the model it was prepared with is gone

    shown = _run("pipeline", "inspect", out, "--documents", "3")
    assert shown.returncode == 0, shown.stderr
    assert (
        "sentencepiece 0.2.2" in shown.stdout
        and "<s> (1) before, </s> (2) after each document" in shown.stdout
    )
    assert sorted(
        part.split("\n", 1)[1].removesuffix("\n")
        for part in shown.stdout.split("--- document ")[1:]
    ) == sorted(docs)

    from train.run_tokenizer import RunTokenizer, load_run_tokenizer, write_run_tokenizer

    workdir = str(tmp_path / "run")
    write_run_tokenizer(workdir, RunTokenizer.of(read_manifest(out), out))
    tokenizer, info = load_run_tokenizer(workdir)
    assert info == manifest.tokenizer and os.path.exists(
        os.path.join(workdir, "tokenizer", "tokenizer.model")
    )
    assert tokenizer.decode(tokenizer.encode_ordinary(docs[1])) == docs[1]


def test_a_sampled_continuation_keeps_the_space_before_its_first_word():
    from train.sample import continuation

    for tokenizer in (
        SentencePieceTokenizer(train_model("bpe_llama_like"), bos_flag=None, eos_flag=None),
        load_tokenizer("gpt2"),
    ):
        prompt = tokenizer.encode_ordinary("Once upon a time")
        ids = tokenizer.encode_ordinary("Once upon a time there was")[len(prompt) :]
        assert continuation(tokenizer, prompt, ids) == " there was"


@pytest.mark.integration
def test_a_hub_model_with_only_a_tokenizer_model_is_read_at_its_commit(hub, tmp_path):
    repo = tmp_path / "repo"
    data = train_model("bpe_llama_like")
    write_model(str(repo / "tokenizer.model"), data)
    (repo / "config.json").write_text("{}")
    sha = hub.commit("org/llama", str(repo))
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "d.jsonl"), ["a fox", "a cat"])],
        out,
        "--tokenizer",
        "hf:org/llama",
    )
    assert manifest.config.tokenizer == f"hf:org/llama@{sha}"
    assert (manifest.tokenizer.library, manifest.tokenizer.name) == ("sentencepiece", "org/llama")
    assert manifest.tokenizer.vocab_sha256 == hashlib.sha256(data).hexdigest()
    assert open(os.path.join(out, "tokenizer", "tokenizer.model"), "rb").read() == data
    (repo / "tokenizer.model").unlink()
    empty = hub.commit("org/llama", str(repo))
    with pytest.raises(
        ValueError, match=f"has neither tokenizer.json nor tokenizer.model at {empty}"
    ):
        load_tokenizer(f"hf:org/llama@{empty}")


def test_workers_get_the_sentencepiece_extra(tmp_path):
    corpus = write_jsonl(str(tmp_path / "d.jsonl"), ["a cat"])
    path = write_model(str(tmp_path / "m.model"), train_model("bpe_default"))
    assert worker_extras(make_plan([corpus], PrepareConfig(tokenizer=path))) == ("sentencepiece",)
    from pipeline.prepare.execution.worker_environment import worker_requirements

    assert f"sentencepiece=={spm.__version__}" in worker_requirements(["sentencepiece"])
    assert not any(p.startswith("sentencepiece==") for p in worker_requirements())


# ---------------------------------------------------------------------------------------------
# End to end (slow)


@pytest.fixture(scope="module")
def stories(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("corpus") / "stories.txt")
    write_corpus(path, 8000, seed=1)
    return path


@pytest.mark.slow
def test_two_workers_and_a_resumed_run_write_the_same_bytes(stories, tmp_path):
    path = write_model(
        str(tmp_path / "model" / "tokenizer.model"),
        train_model("bpe_llama_like", 2000, stories=3000),
    )
    common = ["--tokenizer", path, "--unit-bytes", "65536", "--validation-fraction", "0.05"]
    run_prepare([stories], str(tmp_path / "a"), *common)
    run_prepare(
        [stories],
        str(tmp_path / "b"),
        *common,
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    )
    clean = run_outputs(str(tmp_path / "a"))
    assert clean == run_outputs(str(tmp_path / "b"))
    assert json.loads(clean[formats.MANIFEST_NAME])["num_units"] > 8

    out = str(tmp_path / "killed")
    units_dir = os.path.join(out, formats.STATE_DIR, formats.UNITS_DIR)
    kill_prepare_part_way(
        [
            "--input",
            stories,
            *common,
            "--output",
            out,
            "--direct_num_workers=2",
            "--direct_running_mode=multi_processing",
        ],
        after=3,
    )
    done = files_in_place(units_dir)
    total = len(
        json.loads(open(os.path.join(out, formats.STATE_DIR, formats.PLAN_NAME)).read())["units"]
    )
    assert 0 < done <= 3 < total, "the kill lands part-way"
    run_prepare([stories], out, *common)
    assert (
        json.loads(open(os.path.join(out, formats.RUN_INFO_NAME)).read())["units_resumed"] == done
    )
    assert run_outputs(out) == clean


@pytest.mark.slow
def test_prepare_train_sample_with_a_vocabulary_above_65536(stories, tmp_path):
    # 70,000 pieces no text holds before the model's own: every id text encodes to is above 65,536,
    # as most of Gemma's 256k are.
    model_dir = tmp_path / "model"
    path = write_model(
        str(model_dir / "tokenizer.model"),
        shifted(train_model("bpe_llama_like", 1000, stories=3000), 70_000),
    )
    data = str(tmp_path / "data")
    result = cli(
        "--tokenizer",
        path,
        "--input",
        stories,
        "--output",
        data,
        "--validation-fraction",
        "0.05",
        "--direct_num_workers=1",
        "--direct_running_mode=in_memory",
    )
    assert result.returncode == 0, result.stderr
    manifest = read_manifest(data)
    assert manifest.tokenizer.n_vocab > 70_000 and manifest.dtype == "uint32"
    tokens = np.concatenate(read_split(data))
    assert (
        tokens.max() > 65_536
        and np.count_nonzero(tokens == 1) == manifest.totals["train"].documents
    )
    shutil.rmtree(model_dir)

    shown = _run("pipeline", "inspect", data, "--documents", "1")
    assert shown.returncode == 0 and f"n_vocab {manifest.tokenizer.n_vocab}" in shown.stdout, (
        shown.stderr
    )
    workdir = str(tmp_path / "run")
    model_flags = [
        "--preset",
        "tiny",
        "--width",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--seq-len",
        "32",
    ]
    result = _run(
        "train",
        "--data",
        data,
        "--workdir",
        workdir,
        *model_flags,
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--eval-every",
        "2",
        "--eval-batches",
        "1",
        "--checkpoint-every",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert (
        json.loads(open(os.path.join(workdir, "config.json")).read())["model"]["vocab_size"]
        == manifest.tokenizer.n_vocab
    )
    shutil.rmtree(data)  # sampling needs the run alone
    sampled = _run(
        "train",
        "sample",
        "--workdir",
        workdir,
        "--prompt",
        "Once upon a time",
        "--max-tokens",
        "12",
    )
    assert sampled.returncode == 0, sampled.stderr
    assert sampled.stdout.startswith("Once upon a time")
    assert (
        load_tokenizer(os.path.join(workdir, "tokenizer")).info.vocab_sha256
        == manifest.tokenizer.vocab_sha256
    )


# Peak memory of encoding one long document, in a process of its own: VmHWM (the peak RSS, which
# sees the library's C++ allocations) reset to the current RSS before each measurement.
_MEASURE = """
import json, sys, time
import numpy as np
from pipeline.tokenization import load_tokenizer
from pipeline.tokenization.sentencepiece_backend import SentencePieceTokenizer

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

def measure(encode):
    open("/proc/self/clear_refs", "w").write("5")
    base, start = status("VmRSS:"), time.process_time()
    ids = encode()
    peak_mib = round((status("VmHWM:") - base) / 2**20, 1)
    return ids, {"peak_mib": peak_mib, "cpu_s": round(time.process_time() - start, 2)}

tokenizer = load_tokenizer(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
tokenizer.encode_documents(["warm up"])
flat, pieces = measure(lambda: tokenizer.encode_documents([text])[0])
pieces["mb_per_cpu_s"] = round(len(text.encode()) / 1e6 / pieces["cpu_s"], 2)
result = {
    "chars": len(text), "ids": len(flat), "split": tokenizer.rule.allowed, "documents": pieces
}
if sys.argv[3] == "whole":
    ids, result["whole"] = measure(lambda: tokenizer.sp.encode(text, return_type="numpy"))
    result["equal"] = bool(np.array_equal(flat[1:-1], ids))
print(json.dumps(result))
"""


def _measured(tmp_path, name: str, chars: int, whole: bool) -> dict:
    path = write_model(str(tmp_path / f"{name}.model"), train_model(name, 4000, stories=3000))
    text_path = tmp_path / "long.txt"
    text_path.write_text(long_document(chars, seed=11), encoding="utf-8")
    command = [sys.executable, "-c", _MEASURE, path, str(text_path), "whole" if whole else "pieces"]
    result = json.loads(
        subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    )
    print(name, json.dumps(result))
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bpe_llama_like", "unigram_default"])
def test_a_document_of_several_mb_is_its_whole_encoding(tmp_path, name):
    result = _measured(tmp_path, name, 5_000_000, whole=True)
    assert result["equal"] and result["ids"] > 1_000_000
    if name.startswith("bpe"):  # cut into pieces: a fraction of what the library holds for it whole
        assert result["split"] and result["documents"]["peak_mib"] < result["whole"]["peak_mib"] / 4
    else:  # encoded whole
        assert not result["split"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bpe_llama_like", "unigram_default"])
def test_a_20_mb_document_peak_memory(tmp_path, name):
    result = _measured(tmp_path, name, 20_000_000, whole=False)
    if name.startswith("bpe"):  # the ids, twice (the pieces' and the joined ones), and little else
        assert result["documents"]["peak_mib"] < 8 * result["ids"] / 2**20 + 30
