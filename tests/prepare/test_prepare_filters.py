"""Quality filters in prepare: the documents kept are exactly those datatrove's own filter objects
keep when run directly on the same texts, with the fast filters (the default) and the exact mode;
removals are counted by rule, located, shown by a dry run; a rerun writes the same bytes whatever
the workers, a killed run resumes to them, and a run from before `--filter-impl` resumes with
datatrove's classes."""

from __future__ import annotations

import collections
import json
import os
import random

import pytest

from pipeline.dataset import inspect as inspect_dataset
from pipeline.prepare.clean import inline_filters, unit_fingerprints
from pipeline.prepare.clean.edits import edited_documents
from pipeline.prepare.clean.judgments import TOO_LONG, FilterError
from pipeline.prepare.clean.quality.quality_filters import (
    parameters,
    parse_parameter,
    quality_filters,
)
from pipeline.prepare.clean.removals import CLEANED_NAME, read_removal_list
from pipeline.prepare.clean.unit_fingerprints import FINGERPRINTS_DIR, fingerprint_unit
from pipeline.prepare.planning import make_plan
from pipeline.prepare.read.base import ContentDigest
from pipeline.prepare.read.documents import DocumentPiece, Read, Tally
from pipeline.prepare.read.unit_documents import kept_numbered, numbered_documents
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.stages import PrepareError
from schemas import formats
from schemas.errors import UsageError
from schemas.prepare_config import FILTER_NAMES, PrepareConfig
from support.corpora import write_jsonl
from support.fault_runs import kill_prepare_part_way, resumed_run
from support.filter_reference import CLASSES, datatrove_run
from support.runs import decoded_documents, files_in_place, run_outputs, run_prepare
from support.varied_text import varied_documents
from support.web_text import held_out_documents, prose

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

CHAIN = list(FILTER_NAMES)
# Long documents of web_text are cut at this; the filters must see them whole.
MAX_DOCUMENT_BYTES = 4096


def datatrove_kept(names: list[str], docs: list[str]) -> dict[int, str | None]:
    """Per document, None where datatrove's filters keep it, else why they remove it."""
    return {i: why for i, (why, _) in enumerate(datatrove_run(names, docs))}


def _removals(output: str) -> list[dict]:
    with open(os.path.join(output, formats.REMOVALS_NAME)) as f:
        return [json.loads(line) for line in f]


def _check_same_as_datatrove(
    names: list[str], docs: list[str], output: str, manifest, encoding
) -> None:
    run = datatrove_run(names, docs)
    removed = {r["id"]: r["reason"] for r in _removals(output)}
    assert removed == {i: why for i, (why, _) in enumerate(run) if why is not None}
    assert all(
        r["line"] == r["id"] + 1 and r["path"].endswith("web.jsonl") for r in _removals(output)
    )
    kept = [text for why, text in run if why is None]  # as the filters leave them (C4 drops lines)
    # A cut document is stored as its pieces: every other kept document is stored whole.
    decoded = decoded_documents(output, encoding)
    whole = [d for d in kept if len(d.encode()) <= MAX_DOCUMENT_BYTES]
    long = [d for d in kept if len(d.encode()) > MAX_DOCUMENT_BYTES]
    pieces = list((collections.Counter(decoded) - collections.Counter(whole)).elements())
    assert len(decoded) - len(pieces) == len(whole)
    assert all(any(piece in d for d in long) for piece in pieces)
    assert sum(map(len, decoded)) == sum(map(len, kept))
    counts: dict[str, int] = {}
    for why in removed.values():
        counts[why] = counts.get(why, 0) + 1
    assert manifest.removed == dict(sorted(counts.items()))


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_filter_keeps_what_datatrove_keeps(name, tmp_path, encoding):
    docs = held_out_documents()
    expected = datatrove_kept([name], docs)
    assert 0 < sum(why is None for why in expected.values()) < len(docs), (
        "the corpus must test the rule both ways"
    )
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "web.jsonl"), docs)],
        out,
        "--filter",
        name,
        "--max-document-bytes",
        str(MAX_DOCUMENT_BYTES),
        "--unit-bytes",
        "16384",
    )
    assert manifest.counts["cut_documents"] > 0 and manifest.num_units > 2
    _check_same_as_datatrove([name], docs, out, manifest, encoding)
    if name == "c4":  # the documents it keeps lose lines, cut ones too
        edited = [
            i
            for i, (why, text) in enumerate(datatrove_run([name], docs))
            if why is None and text != docs[i]
        ]
        assert any(len(docs[i].encode()) > MAX_DOCUMENT_BYTES for i in edited) and len(edited) > 10


def test_filters_chain_in_order_before_dedup_and_parameters_are_the_users(
    tmp_path, encoding, capsys
):
    names = ["gopher-repetition", "c4", "gopher-quality", "fineweb"]
    originals = held_out_documents(seed=1)
    kept = originals[0]
    # Its words one per line: the same document once whitespace is normalized, which the filters
    # remove. Before it, it would be the keeper of its copies were filtered documents deduplicated;
    # after them, a duplicate.
    broken = kept.replace(" ", "\n")
    docs = [broken, *originals, kept, kept, broken]
    n = len(docs)
    expected = datatrove_kept(names, docs)
    assert expected[1] is None and expected[0] is not None and expected[n - 1] == expected[0]
    out = str(tmp_path / "out")
    path = write_jsonl(str(tmp_path / "web.jsonl"), docs)
    args = [
        "--filter",
        ",".join(names),
        "--dedup",
        "exact",
        "--max-document-bytes",
        str(MAX_DOCUMENT_BYTES),
    ]
    manifest = run_prepare([path], out, *args)
    removed = {r["id"]: r for r in _removals(out)}
    assert {i: r["reason"] for i, r in removed.items() if r["reason"].startswith("filter:")} == {
        i: why for i, why in expected.items() if why is not None
    }
    # A filtered document is never a duplicate's keeper, nor counted as a duplicate: the kept
    # document's copies are duplicates of it, the filtered ones are filtered.
    duplicates = {
        i: r["duplicate_of"] for i, r in removed.items() if r["reason"] == "exact_duplicate"
    }
    assert duplicates == {n - 3: {"path": path, "line": 2}, n - 2: {"path": path, "line": 2}}
    inspect_dataset.main([out])
    shown = capsys.readouterr().out
    assert all(f"{reason} {n}" in shown for reason, n in manifest.removed.items())

    # A parameter changes the rule as datatrove's keyword argument does.
    loose = str(tmp_path / "loose")
    run_prepare(
        [path],
        loose,
        "--filter",
        "gopher-quality",
        "--filter-param",
        "gopher-quality.min_doc_words=5",
        "--filter-param",
        'gopher-quality.stop_words=["the","of"]',
    )
    tuned = {"gopher-quality": {"min_doc_words": 5, "stop_words": ["the", "of"]}}
    want = {i for i, (why, _) in enumerate(datatrove_run(["gopher-quality"], docs, tuned)) if why}
    assert (
        {r["id"] for r in _removals(loose)}
        == want
        != {i for i, w in datatrove_kept(["gopher-quality"], docs).items() if w}
    )


def test_the_exact_mode_runs_datatrove_s_classes(tmp_path, encoding):
    docs = held_out_documents(seed=5)
    names = ["gopher-quality", "c4", "fineweb"]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "web.jsonl"), docs)],
        out,
        "--filter",
        ",".join(names),
        "--filter-impl",
        "datatrove",
        "--max-document-bytes",
        str(MAX_DOCUMENT_BYTES),
    )
    assert manifest.config.filter_impl == "datatrove"
    _check_same_as_datatrove(names, docs, out, manifest, encoding)


def test_a_run_from_before_the_fast_filters_resumes_with_datatrove_s(tmp_path, capfd):
    """A run started before `--filter-impl` existed ran datatrove's classes, and its plan records no
    filter_impl (as datatrove's does now). Rerun as it was, it is refused, the flag that resumes it
    named; with it, it resumes: the cleaning units done counted, progress in MB/s, the same
    bytes."""
    path = write_jsonl(str(tmp_path / "web.jsonl"), held_out_documents(seed=6))
    args = ["--filter", "gopher-quality,c4", "--unit-bytes", "16384"]
    out = str(tmp_path / "out")
    run_prepare([path], out, *args, "--filter-impl", "datatrove", "--filter-dry-run")
    state = os.path.join(out, formats.STATE_DIR)
    assert (
        "filter_impl"
        not in json.loads(open(os.path.join(state, formats.PLAN_NAME)).read())["config"]
    )
    # Stopped part-way through cleaning: the stage's completion record and half its units' files
    # gone.
    os.remove(os.path.join(state, CLEANED_NAME))
    written = sorted(os.listdir(os.path.join(state, FINGERPRINTS_DIR)))
    for name in written[len(written) // 2 :]:
        os.remove(os.path.join(state, FINGERPRINTS_DIR, name))
    with pytest.raises(
        PrepareError,
        match=r"different config \(filter_impl\); the earlier run's is --filter-impl datatrove",
    ):
        run_prepare([path], out, *args)
    capfd.readouterr()
    manifest = run_prepare([path], out, *args, "--filter-impl", "datatrove")
    err = capfd.readouterr().err
    assert (
        f"cleaning {len(written)} units ({len(written) // 2} already done;" in err
        and " MB/s | " in err
    )
    assert manifest.config.filter_impl == "datatrove"
    fresh = str(tmp_path / "fresh")
    run_prepare([path], fresh, *args, "--filter-impl", "datatrove")
    assert run_outputs(out) == run_outputs(fresh)
    # Complete, it is its own dataset for the same flags, and another one's for the fast filters.
    run_prepare([path], out, *args, "--filter-impl", "datatrove")
    with pytest.raises(PrepareError, match="prepared with different config \\(filter_impl\\)"):
        run_prepare([path], out, *args)


@pytest.mark.slow
def test_the_fast_filters_write_the_same_bytes_on_a_rerun_whatever_the_workers(tmp_path):
    docs = varied_documents(seed=3, count=400) + held_out_documents(seed=7)
    path = write_jsonl(str(tmp_path / "web.jsonl"), docs)
    args = ["--filter", ",".join(CHAIN), "--dedup", "exact", "--unit-bytes", "16384"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    run_prepare([path], one, *args)
    run_prepare(
        [path], two, *args, "--direct_num_workers=2", "--direct_running_mode=multi_processing"
    )
    assert run_outputs(one) == run_outputs(two)
    first = run_outputs(one)
    run_prepare([path], one, *args, "--overwrite")  # a rerun from scratch
    assert run_outputs(one) == first
    assert (
        _removals(one)
        and json.loads(open(os.path.join(one, formats.MANIFEST_NAME)).read())["config"][
            "filter_impl"
        ]
        == "fast"
    )


class _Counted:
    """Filters that count the documents each call judges."""

    def __init__(self, impl: str):
        self.filters = quality_filters(CHAIN, {}, impl)
        self.calls: list[int] = []

    def judge_noted(self, texts):
        self.calls.append(len(texts))
        return self.filters.judge_noted(texts)


@pytest.mark.parametrize("impl", ["fast", "datatrove"])
def test_a_unit_is_judged_a_megabyte_at_a_time_in_order(tmp_path, monkeypatch, impl):
    """A unit's documents go to the filters in batches, whole and cut ones alike; what is recorded
    (removals, samples, edits, fingerprints, in document order) is what judging them one by one
    gives."""
    rng = random.Random(9)
    docs = held_out_documents(seed=8) + [
        prose(rng, 40),
        "x " * 6000,
    ]  # cut at 4096 bytes; the last over the bound
    config = PrepareConfig(
        filters=CHAIN,
        filter_impl=impl,
        dedup="exact",
        max_document_bytes=4096,
        filter_max_document_bytes=8192,
    )
    (unit,) = make_plan([write_jsonl(str(tmp_path / "web.jsonl"), docs)], config).units
    too_long = [i for i, d in enumerate(docs) if len(d.encode()) > 8192]
    batched = _Counted(impl)
    found = fingerprint_unit(unit, config, None, batched)
    assert batched.calls == [len(docs) - len(too_long)] and found.documents == len(docs)
    assert [number for number, reason, _ in found.filtered if reason == TOO_LONG] == too_long
    assert found.edits and found.filtered == sorted(found.filtered, key=lambda f: f[0])
    monkeypatch.setattr(unit_fingerprints, "JUDGED_CHARACTERS", 1)
    one_by_one = _Counted(impl)
    alone = fingerprint_unit(unit, config, None, one_by_one)
    assert set(one_by_one.calls) == {1}
    assert alone.to_bytes("plan") == found.to_bytes("plan") and alone.edits == found.edits


def test_the_tokenizing_stage_reads_a_unit_once_and_tokenizes_what_two_reads_gave(
    tmp_path, monkeypatch
):
    """Where the tokenizing stage judges the filters, a unit is read once: judged a batch at a time
    as it is read, whole and cut documents, edited, kept and too long, it hands on the texts, and
    writes the removal list, that judging the whole unit first and reading it again gave."""
    rng = random.Random(9)
    docs = held_out_documents(seed=8) + [prose(rng, 40), "x " * 6000, prose(rng, 3)]
    config = PrepareConfig(filters=CHAIN, max_document_bytes=4096, filter_max_document_bytes=8192)
    (unit,) = make_plan([write_jsonl(str(tmp_path / "web.jsonl"), docs)], config).units
    found = fingerprint_unit(unit, config, None, inline_filters.worker_filters(config))
    two_reads = kept_numbered(
        edited_documents(
            numbered_documents(unit, config, Tally(), ContentDigest()),
            dict(found.edits),
            config.max_document_bytes,
        ),
        frozenset(number for number, _, _ in found.filtered),
    )
    expected = [_texts(read) for _, read in two_reads]
    assert found.edits and any(reason == TOO_LONG for _, reason, _ in found.filtered)
    lists = []
    for batch in (inline_filters.JUDGED_CHARACTERS, 1):  # the unit at once; a read at a time
        monkeypatch.setattr(inline_filters, "JUDGED_CHARACTERS", batch)
        context = RunContext(config, "uint16", 1, str(tmp_path / str(batch)), "plan", {}, (), "")
        reads = inline_filters.judged_documents(unit, context, Tally(), ContentDigest())
        assert [_texts(read) for read, _ in reads] == expected
        lists.append(read_removal_list(context.output_dir, unit.index))
    assert lists[0] == lists[1] and len(lists[0]["removed"]) == len(found.filtered)


def _texts(read: Read) -> list[str]:
    return [read.text] if isinstance(read, DocumentPiece) else read.texts


def test_a_document_over_the_filters_bound_is_removed_unread(tmp_path):
    text = prose(random.Random(3), 60)[:6000]
    docs = [
        text,
        text[:3000],
        " ".join(["word"] * 700),
    ]  # cut at 2048 bytes; the first over the bound
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "web.jsonl"), docs)],
        out,
        "--filter",
        "gopher-repetition",
        "--max-document-bytes",
        "2048",
        "--filter-max-document-bytes",
        "4096",
    )
    assert manifest.counts["cut_documents"] == 3
    removed = {r["id"]: r["reason"] for r in _removals(out)}
    expected = datatrove_kept(["gopher-repetition"], docs)
    assert removed[0] == TOO_LONG and expected[0] is None
    assert removed.get(1) == expected[1] and removed.get(2) == expected[2] is not None


def test_dry_run_prints_counts_and_samples_and_the_real_run_goes_on_from_it(tmp_path, capsys):
    docs = held_out_documents(seed=2)
    path = write_jsonl(str(tmp_path / "web.jsonl"), docs)
    args = ["--filter", "gopher-quality,c4", "--unit-bytes", "16384"]
    dry = str(tmp_path / "dry")
    assert run_prepare([path], dry, *args, "--filter-dry-run") is None
    report = capsys.readouterr().out
    assert not os.path.exists(os.path.join(dry, "train")) and not os.path.exists(
        os.path.join(dry, formats.MANIFEST_NAME)
    )
    expected = datatrove_kept(["gopher-quality", "c4"], docs)
    counts: dict[str, int] = {}
    for why in expected.values():
        if why:
            counts[why] = counts.get(why, 0) + 1
    assert f"{len(docs)} documents read, {sum(counts.values())} removed" in report
    for reason, n in counts.items():
        assert f"  {reason}: {n} (" in report
        first = next(i for i, why in expected.items() if why == reason)
        assert repr(docs[first][:160]) in report, f"no sample of {reason}"
    run_prepare([path], dry, *args)
    plain = str(tmp_path / "plain")
    run_prepare([path], plain, *args)
    assert run_outputs(dry) == run_outputs(plain)


def test_filter_parameters_are_checked_before_anything_runs(tmp_path):
    path = write_jsonl(str(tmp_path / "web.jsonl"), ["A document."])
    out = str(tmp_path / "out")
    assert "min_doc_words" in parameters("gopher-quality") and "language" not in parameters("c4")
    assert parse_parameter("c4.filter_javascript=false") == ("c4", "filter_javascript", False)
    assert parse_parameter("fineweb.stop_chars=x") == ("fineweb", "stop_chars", "x")
    with pytest.raises(FilterError, match="NAME.KEY=VALUE"):
        parse_parameter("c4=1")
    for args, message in [
        (["--filter", "gopher"], r"filters must each be one of .*got filters=\['gopher'\]"),
        (
            ["--filter", "c4", "--filter-param", "c4.min_words=2"],
            r"c4 has no parameters \['min_words'\]",
        ),
        (["--filter", "c4", "--filter-param", "fineweb.line_punct_thr=0.2"], "not in --filter c4"),
        (["--filter", "c4,c4"], "named twice"),
    ]:
        with pytest.raises(UsageError, match=message):  # a filter or parameter is a setting
            run_prepare([path], out, *args)
    assert not os.path.exists(out)
    # A JSON list is a tuple where the class declares one.
    docs = held_out_documents(count=60)
    run_prepare(
        [write_jsonl(str(tmp_path / "web.jsonl"), docs)],
        out,
        "--filter",
        "fineweb",
        "--filter-param",
        'fineweb.stop_chars=["!"]',
    )
    tuned = {"fineweb": {"stop_chars": ("!",)}}
    want = {i for i, (why, _) in enumerate(datatrove_run(["fineweb"], docs, tuned)) if why}
    assert (
        {r["id"] for r in _removals(out)}
        == want
        != {i for i, w in datatrove_kept(["fineweb"], docs).items() if w}
    )


@pytest.mark.slow
def test_sigkill_while_filtering_then_resume(tmp_path):
    docs = held_out_documents(seed=4) * 3
    path = write_jsonl(str(tmp_path / "web.jsonl"), docs)
    args = ["--filter", ",".join(CHAIN), "--dedup", "exact", "--unit-bytes", "8192"]
    args += ["--validation-fraction", "0.1"]
    clean = str(tmp_path / "clean")
    run_prepare([path], clean, *args)
    out = str(tmp_path / "killed")
    watched = os.path.join(out, formats.STATE_DIR, "fingerprints")
    command = [
        "--input",
        path,
        *args,
        "--output",
        out,
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    ]
    kill_prepare_part_way(command, after=2, in_pass="cleaning")
    total = len(
        json.loads(open(os.path.join(out, formats.STATE_DIR, formats.PLAN_NAME)).read())["units"]
    )
    done = files_in_place(watched)
    assert 0 < done <= 2 < total, "the kill lands part-way"
    # The rerun filters only the units not done, the others' filter results read back, and its
    # header counts them.
    started, stderr = resumed_run(command, in_pass="cleaning")
    assert started == total - done
    assert f"cleaning {total} units ({done} already done;" in stderr
    assert run_outputs(out) == run_outputs(clean)
