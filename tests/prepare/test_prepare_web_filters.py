"""The web filters in prepare: the documents kept and their texts are those fastText's language ID
and datatrove's PII formatter give, counted per language in the manifest and shown by `inspect`,
the removed ones' scores in removals.jsonl; a rerun writes the same bytes whatever the workers, a
killed run resumes to them; a model that cannot be used stops the run in one line before any unit
runs, and one changed since a run began stops its resume; a hub model is read at a pinned commit."""

from __future__ import annotations

import collections
import hashlib
import json
import os

import pytest

from pipeline.dataset import inspect as inspect_dataset
from pipeline.prepare.clean.judgments import FilterError
from pipeline.prepare.clean.quality.quality_filters import quality_filters
from pipeline.prepare.clean.web.fasttext_models import local_path, pinned
from schemas import formats
from support.corpora import write_jsonl
from support.fault_runs import kill_prepare_part_way, resumed_run
from support.multilingual_text import lid_model, multilingual_documents, with_pii
from support.runs import (
    IN_PROCESS,
    cli,
    decoded_documents,
    files_in_place,
    one_line_error,
    run_command,
    run_outputs,
    run_prepare,
)

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

LANGUAGES = ["en", "fr", "de", "es"]


def _args() -> list[str]:
    return [
        "--filter",
        "language,pii",
        "--filter-param",
        f"language.languages={json.dumps(LANGUAGES)}",
        "--language-model",
        lid_model(),
        "--unit-bytes",
        "16384",
        "--validation-fraction",
        "0",
    ]


def _corpus(tmp_path) -> tuple[str, list[str]]:
    documents = with_pii(multilingual_documents(seed=5))
    return write_jsonl(str(tmp_path / "web.jsonl"), documents), documents


def test_language_id_and_pii_keep_and_count_what_the_filters_decide(tmp_path, capsys, encoding):
    path, documents = _corpus(tmp_path)
    out = str(tmp_path / "out")
    manifest = run_prepare([path], out, *_args())
    filters = quality_filters(
        ["language", "pii"], {"language": {"languages": LANGUAGES}}, "fast", lid_model()
    )
    judged, notes = filters.judge_noted(documents)
    kept = [text for why, text in judged if why is None]
    assert sorted(decoded_documents(out, encoding)) == sorted(kept)
    assert any("email@example.com" in text for text in kept)
    counts = ("kept", "removed", "tokens_kept", "bytes_kept", "bytes_removed")
    expected = collections.defaultdict(lambda: dict.fromkeys(counts, 0))
    for document, (why, text), noted in zip(documents, judged, notes):
        counted, fate = expected[noted["language"]], "kept" if why is None else "removed"
        counted[fate] += 1
        counted[f"bytes_{fate}"] += len(document.encode())
        if why is None:  # its tokens as written: the text PII left, and the end-of-text token
            counted["tokens_kept"] += len(encoding.encode_ordinary(text)) + 1
    assert manifest.languages == dict(sorted(expected.items()))
    assert sum(v["tokens_kept"] for v in expected.values()) == manifest.totals["train"].tokens
    assert manifest.pii["documents"] == sum(1 for n in notes if "emails" in n or "ips" in n)
    assert manifest.config.language_model == lid_model()
    with open(os.path.join(out, formats.REMOVALS_NAME)) as f:
        removed = [json.loads(line) for line in f]
    assert len(removed) == len(documents) - len(kept)
    removed_notes = [n for (why, _), n in zip(judged, notes) if why is not None]
    assert [(r["language"], r["language_score"]) for r in removed] == [
        (n["language"], n["language_score"]) for n in removed_notes
    ]
    capsys.readouterr()
    inspect_dataset.main([out])
    shown = capsys.readouterr().out
    en = expected["en"]
    assert (
        f"en {en['kept']}/{en['removed']} ({en['tokens_kept']} tokens kept, "
        f"{en['bytes_removed']} bytes removed)" in shown
    )
    assert "PII replaced: emails" in shown


def test_with_dedup_the_tokens_per_language_come_from_the_cleaning_stage(tmp_path):
    """Deduplication needs a cleaning stage first; the tokenizing pass then takes each kept
    document's language from its fingerprints: the tokens per language add up to the dataset's, and
    a duplicate counts as removed."""
    path, documents = _corpus(tmp_path)
    path = write_jsonl(str(tmp_path / "twice.jsonl"), documents + documents[:40])
    manifest = run_prepare([path], str(tmp_path / "out"), *_args(), "--dedup", "exact")
    languages = manifest.languages.values()
    assert sum(v["tokens_kept"] for v in languages) == manifest.totals["train"].tokens > 0
    assert sum(v["kept"] for v in languages) == manifest.totals["train"].documents
    assert manifest.removed["exact_duplicate"] > 0


@pytest.mark.slow
def test_a_rerun_is_the_same_bytes_whatever_the_workers_and_a_killed_run_resumes_to_them(
    tmp_path,
):
    """Filters alone are judged by the tokenizing stage: killed there, a rerun judges only the
    units without a record."""
    path, _ = _corpus(tmp_path)
    args = _args()
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    run_prepare([path], one, *args)
    first = run_outputs(one)
    run_prepare([path], one, *args, "--overwrite")
    assert run_outputs(one) == first
    run_prepare(
        [path], two, *args, "--direct_num_workers=2", "--direct_running_mode=multi_processing"
    )
    assert run_outputs(two) == first
    out = str(tmp_path / "killed")
    command = ["--input", path, *args, "--output", out, "--direct_num_workers=2"]
    command.append("--direct_running_mode=multi_processing")
    kill_prepare_part_way(command, after=2, in_pass="units")
    done = files_in_place(os.path.join(out, formats.STATE_DIR, formats.UNITS_DIR))
    total = len(
        json.loads(open(os.path.join(out, formats.STATE_DIR, formats.PLAN_NAME)).read())["units"]
    )
    assert 0 < done <= 2 < total, "the kill lands part-way"
    started, stderr = resumed_run(command, in_pass="units")
    assert started == total - done and "cleaning" not in stderr
    assert run_outputs(out) == first


@pytest.mark.parametrize(
    "given, message",
    [
        (["--language-model", "/no/such/lid.176.bin"], "cannot be read"),
        (
            ["--language-model", lid_model(), "--filter-param", 'language.languages=["xx"]'],
            "are not labels of the model",
        ),
    ],
)
def test_a_model_that_cannot_be_used_stops_the_run_before_any_unit(tmp_path, given, message):
    path, _ = _corpus(tmp_path)
    out = str(tmp_path / "out")
    result = cli("--input", path, "--output", out, "--filter", "language", *given)
    assert message in one_line_error(result, status=2)
    assert not os.path.exists(out)


def test_a_run_resumed_with_a_changed_model_file_is_refused_in_one_line(tmp_path, capsys):
    """The config names a model by its path; the plan records its SHA-256 too, so a file changed
    between a run and its resume (a newer download, say) is refused, not mixed into one dataset."""
    path, _ = _corpus(tmp_path)
    model = tmp_path / "lid.176.ftz"
    model.write_bytes(open(lid_model(), "rb").read())
    out = str(tmp_path / "out")
    args = ["--input", path, "--output", out, "--filter", "language"]
    args += ["--language-model", str(model), "--unit-bytes", "16384", *IN_PROCESS]
    assert run_command("prepare", *args, "--filter-dry-run") == 0  # the run left unfinished
    with open(model, "ab") as f:
        f.write(b"\0")  # still a model fastText loads, with the same labels
    capsys.readouterr()
    assert run_command("prepare", *args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"fastText model {model} has changed since the run in {out}" in line
    model.write_bytes(open(lid_model(), "rb").read())
    assert run_command("prepare", *args) == 0  # the file put back, the run goes on


def test_a_hub_model_is_pinned_to_its_commit_and_read_there(hub, tmp_path):
    """`--language-model hf:ORG/NAME/FILE` (here from a loopback stand-in of the Hub serving a
    commit the test makes): the config records the commit `main` names, the run judges as with the
    same file given by its path, the plan records the file's SHA-256, and a later push to `main`
    changes nothing the pinned spec reads."""
    original = open(lid_model(), "rb").read()
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "lid.176.ftz").write_bytes(original)
    first = hub.commit("org/lid", str(repo))
    path, _ = _corpus(tmp_path)
    spec = "hf:org/lid/lid.176.ftz"
    args = [spec if arg == lid_model() else arg for arg in _args()]
    out = str(tmp_path / "hub")
    manifest = run_prepare([path], out, *args)
    assert manifest.config.language_model == f"{spec}@{first}"
    assert manifest.languages == run_prepare([path], str(tmp_path / "local"), *_args()).languages
    with open(os.path.join(out, formats.RUN_INFO_NAME)) as f:
        (model,) = json.load(f)["plan"]["models"]
    assert model == {"path": f"{spec}@{first}", "sha256": hashlib.sha256(original).hexdigest()}
    (repo / "lid.176.ftz").write_bytes(original + b"\0")
    second = hub.commit("org/lid", str(repo))
    assert pinned(spec) == pinned(f"{spec}@main") == f"{spec}@{second}" != f"{spec}@{first}"
    assert open(local_path(f"{spec}@{first}"), "rb").read() == original
    with pytest.raises(FilterError, match="cannot be had"):
        pinned("hf:org/missing/lid.176.ftz")
