"""The cleaning stage of prepare: exact and near duplicates and eval decontamination, planted in
small corpora, found and counted; the same bytes for any worker count, on a rerun, and after a
SIGKILL in either pass."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from pipeline.prepare.clean.dedup.fingerprints import MinHasher, normalized, word_hashes
from pipeline.prepare.clean.removals import EXACT, NEAR, duplicates, merge, place
from pipeline.prepare.read.documents import DocumentPiece, DocumentRun
from pipeline.prepare.read.unit_documents import kept_numbered
from schemas import formats
from support.corpora import write_jsonl, write_parquet, write_text
from support.fault_runs import kill_prepare_part_way, units_started
from support.planted import near_copy, planted_corpus
from support.runs import REPO, decoded_documents, files_in_place, run_outputs, run_prepare


def _removals(output: str) -> list[dict]:
    with open(os.path.join(output, formats.REMOVALS_NAME)) as f:
        return [json.loads(line) for line in f]


def _text_lines(docs: list[str]) -> list[int]:
    """The line each document of `write_text(docs)` starts on, from 1."""
    lines, line = [], 1
    for doc in docs:
        lines.append(line)
        line += doc.count("\n") + 2
    return lines


def test_normalization_is_nfc_and_collapsed_whitespace_keeping_case():
    assert normalized("  Cafe\u0301 \t au\n\n lait ") == "Caf\u00e9 au lait"
    assert normalized("Café") != normalized("café")


def test_kept_numbered_skips_numbers_and_whole_cut_documents():
    piece = lambda text, first: DocumentPiece(text, first, location=7)  # noqa: E731
    numbered = [
        (0, DocumentRun(["a", "b"], [0, 1])),
        (2, piece("c1", True)),
        (2, piece("c2", False)),
        (3, DocumentRun(["d", "e"], [9, 10])),
    ]
    kept = list(kept_numbered(numbered, frozenset({1, 2, 4})))
    assert kept == [([0], DocumentRun(["a"], [0])), ([3], DocumentRun(["d"], [9]))]
    everything = list(kept_numbered(numbered, frozenset()))
    assert [read for _, read in everything] == [read for _, read in numbered]
    assert [numbers for numbers, _ in everything] == [[0, 1], [2], [2], [3, 4]]


def test_the_first_in_input_order_is_kept_whatever_order_the_parts_arrive_in():
    keys = np.array([[5], [7], [5], [5], [7]], dtype=np.uint64)
    places = np.array(
        [place(2, 0), place(0, 3), place(0, 9), place(1, 0), place(3, 1)], dtype=np.int64
    )
    locations = np.arange(100, 105)
    halves = [(places[:2], locations[:2], keys[:2]), (places[2:], locations[2:], keys[2:])]
    found = sorted(duplicates(EXACT, halves))
    assert found == sorted(duplicates(EXACT, halves[::-1]))
    assert found == [
        (1, 0, EXACT, place(0, 9), 102),
        (2, 0, EXACT, place(0, 9), 102),
        (3, 1, EXACT, place(0, 3), 101),
    ]
    # The earliest keeper is named; on a tie, the exact match.
    assert merge(
        [(4, NEAR, 10, 1), (4, EXACT, 12, 2), (4, NEAR, 12, 2), (5, NEAR, 3, 0), (5, EXACT, 3, 0)]
    ) == {
        4: (NEAR, 10, 1),
        5: (EXACT, 3, 0),
    }


def _jaccard(a: str, b: str, n: int = 5) -> float:
    """The Jaccard similarity of two texts' sets of word `n`-grams."""
    x, y = (
        {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
        for words in (a.split(), b.split())
    )
    return len(x & y) / len(x | y)


def test_minhash_agreement_estimates_jaccard():
    rng = random.Random(0)
    words = [f"w{rng.randrange(10**6)}" for _ in range(400)]
    a = " ".join(words)
    b = near_copy(a, 10, rng)
    jaccard = _jaccard(a, b)
    minhasher = MinHasher(5, 14, 8)
    agreement = float(
        np.mean(minhasher.signature(word_hashes(a)) == minhasher.signature(word_hashes(b)))
    )
    assert abs(agreement - jaccard) < 0.1, (agreement, jaccard)


@pytest.mark.integration
def test_exact_duplicates_across_inputs_and_units_keep_the_first(tmp_path, encoding):
    corpus = planted_corpus(120, words=60, exact_fraction=0.25, near_fraction=0.0, seed=1)
    docs = corpus.documents
    # A copy differing in whitespace and Unicode composition is the same text; one in case is not.
    docs[-1] = "  " + docs[0].replace(" ", " \n\t ", 3) + "\n"
    docs.append(docs[0].upper())
    exact = {**corpus.exact, len(docs) - 2: 0}
    cut = len(docs) // 2
    first = write_text(str(tmp_path / "a.txt"), docs[:cut])
    second = write_jsonl(str(tmp_path / "b.jsonl"), docs[cut:])
    out = str(tmp_path / "out")
    manifest = run_prepare([first, second], out, "--dedup", "exact", "--unit-bytes", "8192")
    assert manifest.num_units > 4
    assert manifest.removed == {EXACT: len(exact)}
    text_lines = _text_lines(docs[:cut])

    def where(i: int) -> dict:
        return (
            {"path": first, "line": text_lines[i]}
            if i < cut
            else {"path": second, "line": i - cut + 1}
        )

    def with_id(i: int) -> dict:
        return {**where(i), "id": i - cut} if i >= cut else where(i)

    assert _removals(out) == [
        {"reason": EXACT, **with_id(i), "duplicate_of": where(k)} for i, k in sorted(exact.items())
    ]
    kept = [d for i, d in enumerate(docs) if i not in exact]
    assert sorted(decoded_documents(out, encoding)) == sorted(t.strip("\n") for t in kept)
    assert sum(s.documents for s in manifest.shards) == len(kept)


@pytest.mark.integration
def test_a_cut_document_is_deduplicated_whole(tmp_path):
    long = " ".join(
        f"word{i}" for i in range(400)
    )  # over --max-document-bytes, under the JSONL line limit
    docs = ["short one", long, "short two", long, long[:-1]]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "a.jsonl"), docs)],
        out,
        "--dedup",
        "exact",
        "--max-document-bytes",
        "1024",
    )
    assert manifest.counts["cut_documents"] == 3
    assert manifest.removed == {EXACT: 1}
    assert (
        _removals(out)[0]["line"] == 4
        and _removals(out)[0]["id"] == 3
        and _removals(out)[0]["duplicate_of"]["line"] == 2
    )


@pytest.mark.integration
def test_near_duplicates_are_found_and_distinct_documents_kept(tmp_path):
    corpus = planted_corpus(
        300, words=400, exact_fraction=0.05, near_fraction=0.15, changes=3, seed=2
    )
    path = write_jsonl(str(tmp_path / "a.jsonl"), corpus.documents)
    out = str(tmp_path / "out")
    manifest = run_prepare([path], out, "--dedup", "near", "--unit-bytes", "65536")
    removed = {r["line"] - 1: r for r in _removals(out)}
    assert all(r["id"] == i for i, r in removed.items())
    planted = {**corpus.exact, **corpus.near}
    assert set(removed) <= set(planted), "a distinct document was removed"
    assert all(removed[i]["duplicate_of"]["line"] - 1 == planted[i] for i in removed)
    # Above a 5-gram Jaccard similarity of 0.9 a pair is missed with probability
    # (1-0.9^8)^14 < 4e-4.
    similar = [
        i
        for i, k in corpus.near.items()
        if _jaccard(corpus.documents[i], corpus.documents[k]) >= 0.9
    ]
    assert len(similar) > 30 and set(similar) <= set(removed)
    assert manifest.removed == {EXACT: len(corpus.exact), NEAR: len(removed) - len(corpus.exact)}
    assert manifest.totals["train"].documents == len(corpus.documents) - len(removed)


@pytest.mark.integration
def test_eval_text_inside_longer_documents_is_found(tmp_path):
    rng = random.Random(3)
    filler = lambda n: " ".join(f"f{rng.randrange(10**6)}" for _ in range(n))  # noqa: E731
    questions = [filler(20) for _ in range(3)]
    answers = [filler(15) for _ in range(2)]
    passage = filler(30)
    eval_jsonl = write_jsonl(str(tmp_path / "qa.jsonl"), questions, field="question")
    eval_parquet = write_parquet(str(tmp_path / "answers.parquet"), answers)
    eval_text = write_text(str(tmp_path / "passages.txt"), [passage])
    docs = [
        filler(50)
        + " "
        + " ".join(questions[1].split()[2:15]).upper()
        + ", "
        + filler(50),  # 13 words, case changed
        filler(40) + " " + answers[0] + " " + filler(10),
        filler(10) + " " + passage + " " + filler(10),
        filler(50)
        + " "
        + " ".join(questions[0].split()[:12])
        + " "
        + filler(50),  # 12 words: no match
        filler(80),
    ]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_text(str(tmp_path / "corpus.txt"), docs)],
        out,
        "--decontaminate",
        ",".join([eval_jsonl, eval_parquet, eval_text]),
    )
    assert manifest.removed == {"contaminated": 3}
    assert [(e.path, e.removed) for e in manifest.eval_files] == [
        (eval_jsonl, 1),
        (eval_parquet, 1),
        (eval_text, 1),
    ]
    assert all(len(e.sha256) == 64 for e in manifest.eval_files)
    assert [(r["line"], r["eval_file"]) for r in _removals(out)] == [
        (1, eval_jsonl),
        (3, eval_parquet),
        (5, eval_text),
    ]
    assert manifest.totals["train"].documents == 2
    shown = subprocess.run(
        [sys.executable, "-m", "pipeline", "inspect", out], cwd=REPO, capture_output=True, text=True
    )
    assert "removed (see removals.jsonl): contaminated 3" in shown.stdout, shown.stderr
    assert f"decontaminated against {eval_parquet}" in shown.stdout


def test_a_missing_eval_file_is_one_line(tmp_path):
    from pipeline.prepare.launcher import PrepareError

    with pytest.raises(PrepareError, match="nowhere.jsonl"):
        run_prepare(
            [write_text(str(tmp_path / "a.txt"), ["x"])],
            str(tmp_path / "out"),
            "--decontaminate",
            str(tmp_path / "nowhere.jsonl"),
        )


@pytest.mark.integration
def test_bad_input_in_the_cleaning_pass_is_one_line_or_a_recorded_skip(tmp_path):
    from pipeline.prepare.launcher import PrepareError

    good = write_jsonl(str(tmp_path / "good.jsonl"), ["one doc", "another doc"])
    bad = str(tmp_path / "bad.jsonl.gz")
    with open(bad, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00 truncated")
    with pytest.raises(PrepareError, match="bad.jsonl.gz"):
        run_prepare([good, bad], str(tmp_path / "out"), "--dedup", "exact")
    # With --skip-bad-files the unit is skipped and recorded, as without cleaning.
    manifest = run_prepare(
        [good, bad], str(tmp_path / "skipped"), "--dedup", "exact", "--skip-bad-files"
    )
    assert manifest.skipped == {"unreadable_file": 1} and manifest.totals["train"].documents == 2


def _cleaning_corpus(tmp_path) -> tuple[list[str], list[str]]:
    corpus = planted_corpus(1500, words=120, seed=4)
    docs = corpus.documents
    eval_path = write_jsonl(str(tmp_path / "eval.jsonl"), [docs[7], docs[900]])
    a = write_text(str(tmp_path / "a.txt"), docs[:1000])
    b = write_jsonl(str(tmp_path / "b.jsonl"), docs[1000:])
    return [a, b], [
        "--dedup",
        "near",
        "--decontaminate",
        eval_path,
        "--unit-bytes",
        "65536",
        "--validation-fraction",
        "0.1",
    ]


@pytest.mark.slow
def test_same_bytes_with_one_and_two_workers_and_on_a_rerun(tmp_path):
    inputs, args = _cleaning_corpus(tmp_path)
    one = str(tmp_path / "one")
    manifest = run_prepare(inputs, one, *args)
    assert (
        manifest.removed["contaminated"] >= 2
        and manifest.removed[EXACT] > 0
        and manifest.removed[NEAR] > 0
    )
    two = str(tmp_path / "two")
    run_prepare(
        inputs, two, *args, "--direct_num_workers=2", "--direct_running_mode=multi_processing"
    )
    assert run_outputs(one) == run_outputs(two)
    run_prepare(inputs, str(tmp_path / "again"), *args)
    assert run_outputs(one) == run_outputs(str(tmp_path / "again"))


@pytest.mark.slow
@pytest.mark.parametrize("state_dir", ["fingerprints", formats.UNITS_DIR])
def test_sigkill_in_either_pass_then_resume(tmp_path, state_dir):
    inputs, args = _cleaning_corpus(tmp_path)
    args += ["--unit-bytes", "16384"]
    clean = str(tmp_path / "clean")
    run_prepare(inputs, clean, *args)
    out = str(tmp_path / "killed")
    watched = os.path.join(out, formats.STATE_DIR, state_dir)
    in_pass = "cleaning" if state_dir == "fingerprints" else "units"
    command = [
        *[a for p in inputs for a in ("--input", p)],
        *args,
        "--output",
        out,
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    ]
    kill_prepare_part_way(command, after=2, in_pass=in_pass)
    total = len(
        json.loads(open(os.path.join(out, formats.STATE_DIR, formats.PLAN_NAME)).read())["units"]
    )
    done = files_in_place(watched)
    assert 0 < done <= 2 < total, "the kill lands part-way"
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))
    # The rerun takes up the killed pass where it stopped: the units done there are read back, not
    # redone.
    assert units_started(command, in_pass=in_pass) == total - done
    assert run_outputs(out) == run_outputs(clean)


@pytest.mark.integration
def test_documents_without_shingles_are_never_near_duplicates(tmp_path):
    # No word characters, or fewer words than a shingle: nothing to compare but their absence.
    fortunes = ["(╯‵□′)╯︵┻━┻", "%", "¯\\_(ツ)_/¯", "— —", "Hello world", "hello, WORLD!", "%"]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "f.jsonl"), fortunes)], out, "--dedup", "near"
    )
    assert manifest.removed == {EXACT: 1}
    assert [(r["line"], r["duplicate_of"]["line"]) for r in _removals(out)] == [(7, 2)]


@pytest.mark.integration
def test_near_duplicates_of_cut_documents_are_found(tmp_path):
    rng = random.Random(5)
    long = " ".join(f"w{rng.randrange(10**6)}" for _ in range(400))  # about 3 KB: cut at 1 KB
    docs = [
        long,
        "a short one in between",
        near_copy(long, 3, rng),
        " ".join(f"x{i}" for i in range(500)),
    ]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "a.jsonl"), docs)],
        out,
        "--dedup",
        "near",
        "--max-document-bytes",
        "1024",
    )
    assert manifest.counts["cut_documents"] == 3
    assert manifest.removed == {NEAR: 1}
    assert [(r["line"], r["duplicate_of"]["line"]) for r in _removals(out)] == [(3, 1)]


def _found(similarity: float, bands: int, rows: int) -> float:
    """The odds that MinHash with `bands` bands of `rows` rows puts a pair of this similarity in one
    bucket: 1 - (1 - s^rows)^bands, for hash functions drawn at random."""
    return 1 - (1 - similarity**rows) ** bands


@pytest.mark.integration
def test_near_dedup_parameters_are_the_users(tmp_path):
    # Every outcome here holds but for odds under 1e-6 whatever hash functions MinHash draws, or
    # surely where the shingles are the same: not only for today's.
    rng = random.Random(6)
    base = " ".join(f"w{rng.randrange(10**6)}" for _ in range(300))
    copy = near_copy(base, 1, rng)
    similarity = _jaccard(base, copy, 5)  # about 0.97
    corpus = write_jsonl(str(tmp_path / "a.jsonl"), [base, copy])
    # The default, 14 bands of 8 rows of word 5-grams, finds the copy.
    assert 1 - _found(similarity, 14, 8) < 1e-6
    assert run_prepare([corpus], str(tmp_path / "default"), "--dedup", "near").removed == {NEAR: 1}
    # One band of 1,024 rows: only documents agreeing in every hash collide.
    assert _found(similarity, 1, 1024) < 1e-6
    strict = run_prepare(
        [corpus],
        str(tmp_path / "strict"),
        "--dedup",
        "near",
        "--near-bands",
        "1",
        "--near-rows",
        "1024",
    )
    assert strict.removed == {} and (strict.config.near_bands, strict.config.near_rows) == (1, 1024)
    # Two texts of four words in random orders share every 2-gram, and few 5-grams: 2-word
    # shingles make them the same set, whose hashes all agree.
    colours = random.Random(7)
    a, b = (
        " ".join(colours.choice(["red", "green", "blue", "gold"]) for _ in range(300))
        for _ in range(2)
    )
    assert _jaccard(a, b, 2) == 1 and _found(_jaccard(a, b, 5), 1, 16) < 1e-6
    pair = write_jsonl(str(tmp_path / "pair.jsonl"), [a, b])
    one_band = ("--dedup", "near", "--near-bands", "1", "--near-rows", "16")
    assert run_prepare([pair], str(tmp_path / "two"), *one_band, "--near-ngram", "2").removed == {
        NEAR: 1
    }
    assert run_prepare([pair], str(tmp_path / "five"), *one_band).removed == {}

    from schemas.errors import SettingError

    with pytest.raises(
        SettingError, match="near_bands times near_rows must be at most 1024 hashes"
    ):
        run_prepare(
            [corpus],
            str(tmp_path / "big"),
            "--dedup",
            "near",
            "--near-bands",
            "64",
            "--near-rows",
            "32",
        )


@pytest.mark.integration
def test_removals_are_located_as_rejects_are(tmp_path):
    lines = [
        json.dumps({"text": f"document {i} " + "word " * 20, "id": f"doc-{i}"}) for i in range(10)
    ]
    lines[2] = "{not json"
    lines[5] = lines[8] = lines[0]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    texts = [f"row {i % 4} " + "word " * 30 for i in range(12)]
    parquet = write_parquet(str(tmp_path / "c.parquet"), texts, row_group_size=5)
    out = str(tmp_path / "out")
    run_prepare([str(path), parquet], out, "--dedup", "exact", "--unit-bytes", "4096")
    with open(os.path.join(out, formats.REJECTS_NAME)) as f:
        assert [json.loads(line)["location"] for line in f] == ["line 3"]
    assert _removals(out) == [
        {
            "reason": EXACT,
            "path": str(path),
            "line": 6,
            "id": "doc-0",
            "duplicate_of": {"path": str(path), "line": 1},
        },
        {
            "reason": EXACT,
            "path": str(path),
            "line": 9,
            "id": "doc-0",
            "duplicate_of": {"path": str(path), "line": 1},
        },
    ] + [
        {
            "reason": EXACT,
            "path": parquet,
            "row": i,
            "id": i,
            "duplicate_of": {"path": parquet, "row": i % 4},
        }
        for i in range(4, 12)
    ]


@pytest.mark.integration
def test_overwrite_removes_every_file_of_the_earlier_run(tmp_path):
    rng = random.Random(8)
    passage = " ".join(f"p{rng.randrange(10**6)}" for _ in range(20))
    docs = ["same words here", "same words here", "other " + passage] + [
        f"page {i} " + passage for i in range(12)
    ]
    corpus = write_jsonl(str(tmp_path / "c.jsonl"), docs)
    out = str(tmp_path / "out")
    run_prepare(
        [corpus],
        out,
        "--dedup",
        "exact",
        "--decontaminate",
        write_jsonl(str(tmp_path / "e.jsonl"), [passage]),
    )
    assert os.path.exists(os.path.join(out, formats.REMOVALS_NAME))
    assert os.path.exists(os.path.join(out, formats.COMMON_NGRAMS_NAME))
    run_prepare([corpus], out, "--overwrite")
    assert sorted(os.listdir(out)) == sorted(
        [formats.MANIFEST_NAME, formats.REJECTS_NAME, formats.RUN_INFO_NAME, "train"]
    )
