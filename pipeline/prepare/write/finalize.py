"""Assembling the manifest from the finished units' records, once every unit is done.

The workers measured what they read, unit by unit; here those measures become the inputs' digests
and the rejects' absolute line numbers (a unit knows only the newlines in its own byte range, so a
line's number is a prefix sum over the units before it).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable

from pipeline.dataset import storage
from pipeline.dataset.manifest_io import shard_sizes
from pipeline.prepare.clean.decontamination.eval_matches import read_eval_matches
from pipeline.prepare.clean.decontamination.eval_sets import EvalSet
from pipeline.prepare.clean.decontamination.report import common_ngrams_report
from pipeline.prepare.clean.removals import cleans, write_removals_file
from pipeline.prepare.planning import Plan
from pipeline.prepare.read.documents import EMPTY, MALFORMED_JSON, MISSING_TEXT, NON_STRING_TEXT
from pipeline.prepare.units import UnitResult, unit_record_name, unit_rejects_name
from pipeline.prepare.write.output_dir import plan_identity_record, remove_state
from pipeline.tokenization import load_tokenizer
from pipeline.tokenization.dataset_copy import save_copy
from schemas import formats
from schemas.errors import RunError
from schemas.manifest import EvalFileInfo, InputInfo, Manifest, split_totals


class FinalizeError(RunError, RuntimeError):
    """The unit records cannot make a manifest (missing units, or workers of other versions)."""


def finished_units(
    output_dir: str, known: dict[int, UnitResult] | None = None
) -> dict[int, UnitResult]:
    """Unit records present now; a unit whose record is missing has not finished.

    Records already in `known` are not read again, so polling a large run lists the directory
    but reads each record once.
    """
    units_dir = storage.join(output_dir, formats.STATE_DIR, formats.UNITS_DIR)
    results = dict(known or {})
    seen = {unit_record_name(i) for i in results}
    for path in storage.list_files(units_dir, ".json"):
        if os.path.basename(path) not in seen:
            result = UnitResult.from_json(storage.read_text(path))
            results[result.unit] = result
    return results


def finished_unit_indices(output_dir: str) -> set[int]:
    """The units whose record exists, from a listing alone."""
    units_dir = storage.join(output_dir, formats.STATE_DIR, formats.UNITS_DIR)
    return {int(os.path.basename(p).split(".")[0]) for p in storage.list_files(units_dir, ".json")}


def is_complete(result: UnitResult, sizes: dict[str, int]) -> bool:
    """Whether every shard a unit's record names is there at its recorded size (`sizes` from
    `shard_sizes`): a record alone does not make a unit done once its shards can be lost."""
    return all(sizes.get(shard.path) == shard.bytes for shard in result.shards)


def forget_units(output_dir: str, indices: list[int]) -> None:
    """Deletes the records (and rejects) of units that must run again, so that nothing watching
    for records takes them as done before they are."""
    state = storage.join(output_dir, formats.STATE_DIR)
    storage.delete(
        [storage.join(state, formats.UNITS_DIR, unit_record_name(i)) for i in indices]
        + [storage.join(state, formats.UNIT_REJECTS_DIR, unit_rejects_name(i)) for i in indices]
    )


def _input_digest(unit_digests: list[str]) -> str:
    return hashlib.sha256(b"".join(bytes.fromhex(d) for d in unit_digests)).hexdigest()


def _package_versions(
    results: list[UnitResult], launcher_versions: dict[str, str]
) -> dict[str, str]:
    """The versions the workers ran: one set, or the run is refused."""
    found = {json.dumps(r.package_versions, sort_keys=True) for r in results}
    if len(found) > 1:
        raise FinalizeError(f"units were prepared with different package versions: {sorted(found)}")
    return results[0].package_versions if results else launcher_versions


def build_manifest(
    plan: Plan,
    results: dict[int, UnitResult],
    sizes: dict[str, int],
    launcher_versions: dict[str, str],
) -> Manifest:
    """The manifest of finished units whose shards are all in place (`sizes`, from
    `shard_sizes`)."""
    missing = [u.index for u in plan.units if u.index not in results]
    if missing:
        raise FinalizeError(f"cannot write the manifest: units {missing[:10]} have not finished")
    gone = [i for i in sorted(results) if not is_complete(results[i], sizes)]
    if gone:
        raise FinalizeError(
            f"cannot write the manifest: the shards of units {gone[:10]} are missing or not the "
            "size their units recorded (deleted or changed since); rerun to make them again"
        )
    ordered = [results[u.index] for u in plan.units]
    unit_digests: dict[int, list[str]] = collections.defaultdict(list)
    documents: collections.Counter[int] = collections.Counter()
    tokens: collections.Counter[int] = collections.Counter()
    for unit in plan.units:
        result = results[unit.index]
        unit_digests[unit.input_index].append(result.digest)
        documents[unit.input_index] += sum(s.documents for s in result.shards)
        tokens[unit.input_index] += result.tokens
    inputs = tuple(
        InputInfo(
            path=item.path,
            format=item.format,
            size=item.size,
            digest=_input_digest(unit_digests[i]),
            documents=documents[i],
            tokens=tokens[i],
        )
        for i, item in enumerate(plan.inputs)
    )
    shards = tuple(
        sorted(
            (s for r in ordered for s in r.shards),
            key=lambda s: (formats.SPLITS.index(s.split), s.unit),
        )
    )
    skipped: collections.Counter[str] = collections.Counter(r.reason for r in plan.bad_inputs)
    counts: collections.Counter[str] = collections.Counter()
    for r in ordered:
        skipped.update(r.skipped)
        counts.update(r.counts)
    return Manifest(
        tokenizer=plan.tokenizer,
        dtype=plan.dtype,
        config=plan.config,
        inputs=inputs,
        num_units=len(plan.units),
        shards=shards,
        skipped=dict(sorted(skipped.items())),
        counts=dict(sorted(counts.items())),
        totals=split_totals(shards),
        package_versions=_package_versions(ordered, launcher_versions),
        hub_revisions=dict(sorted(plan.hub_revisions.items())),
    )


# What to check when every document is skipped for a reason.
_HINTS = {
    MISSING_TEXT: "check --text-field",
    NON_STRING_TEXT: "check --text-field",
    MALFORMED_JSON: "is the input JSON Lines?",
    EMPTY: "the documents are blank",
}


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(
        f"{n} {reason}" + (f": {_HINTS[reason]}" if reason in _HINTS else "")
        for reason, n in counts.items()
    )


def _named(paths: list[str], most: int = 3) -> str:
    """Paths in a phrase: the first few, then how many more."""
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


def _skips(skipped: dict[str, int]) -> str:
    """The skips by reason, pointed to rejects.jsonl only for the reasons it records."""
    counted = {k: n for k, n in skipped.items() if k in formats.UNRECORDED_SKIPS}
    recorded = {k: n for k, n in skipped.items() if k not in formats.UNRECORDED_SKIPS}
    parts = [_listed(counted)] if counted else []
    if recorded:
        parts.append(f"{_listed(recorded)}; see {formats.REJECTS_NAME}")
    return "; ".join(parts)


def why_empty(plan: Plan, manifest: Manifest) -> str:
    """Why a run has no training document, in a phrase naming the inputs: their emptiness, the
    skips, the cleaning's removals, or the split."""
    kept = sum(t.documents for t in manifest.totals.values())
    if kept:
        return (
            f"all {kept} documents went to the validation split (--validation-fraction "
            f"{plan.config.validation_fraction}); lower it or add data"
        )
    paths = [i.path for i in plan.inputs]
    if not plan.units:
        return (
            f"the input {paths[0]} is empty"
            if len(paths) == 1
            else f"the {len(paths)} inputs are empty: {_named(paths)}"
        )
    causes = []
    if manifest.skipped:
        causes.append(f"skipped ({_skips(manifest.skipped)})")
    if manifest.removed:
        causes.append(
            f"removed by cleaning ({_listed(manifest.removed)}; see {formats.REMOVALS_NAME})"
        )
    if causes:
        return f"every document was {' or '.join(causes)}, in {_named(paths)}"
    return f"the inputs hold no document: {_named(paths)}"


def newlines_before(plan: Plan, results: dict[int, UnitResult]) -> dict[int, int]:
    """Per unit, the newlines of its input before its range: what makes its line numbers
    absolute."""
    before: dict[int, int] = {}
    following: collections.Counter[int] = collections.Counter()
    for unit in plan.units:
        before[unit.index] = following[unit.input_index]
        following[unit.input_index] += results[unit.index].newlines
    return before


def _reject_line(reject: dict, newlines_before: int) -> str:
    line, row = reject.pop("line"), reject.pop("row")
    reject["location"] = (
        f"line {1 + newlines_before + line}"
        if line is not None
        else f"row {row}"
        if row is not None
        else ""
    )
    return json.dumps(reject, sort_keys=True) + "\n"


def _write_rejects(output_dir: str, plan: Plan, newlines: dict[int, int]) -> None:
    """Planning's rejects, then each unit's in unit order, written through one local file."""
    rejects_dir = storage.join(output_dir, formats.STATE_DIR, formats.UNIT_REJECTS_DIR)
    present = {os.path.basename(p) for p in storage.list_files(rejects_dir, ".jsonl")}
    with storage.atomic_local_file(storage.join(output_dir, formats.REJECTS_NAME)) as scratch:
        with open(scratch, "w") as out:
            out.writelines(_reject_line(r.to_dict(), 0) for r in plan.bad_inputs)
            for unit in plan.units:
                if unit_rejects_name(unit.index) in present:
                    text = storage.read_text(
                        storage.join(rejects_dir, unit_rejects_name(unit.index))
                    )
                    out.writelines(
                        _reject_line(json.loads(line), newlines[unit.index])
                        for line in text.splitlines()
                    )


def with_tokens(
    languages: dict[str, dict[str, int]], results: Iterable[UnitResult]
) -> dict[str, dict[str, int]]:
    """The removal lists' counts per language, with the tokens the units wrote of each."""
    tokens: collections.Counter[str] = collections.Counter()
    for result in results:
        tokens.update(result.language_tokens)
    return {
        language: {**counts, "tokens_kept": tokens[language]}
        for language, counts in languages.items()
    }


def _cleaning_outputs(
    output_dir: str, plan: Plan, newlines: dict[int, int], evals: EvalSet | None
) -> dict:
    """removals.jsonl, and with eval files common_ngrams.jsonl; the manifest's fields of them."""
    config = plan.config
    totals = write_removals_file(output_dir, list(plan.units), config.decontaminate, newlines)
    fields = {"removed": totals.reasons, "languages": totals.languages, "pii": totals.pii}
    if evals is None:
        return fields
    indices, counts = read_eval_matches(output_dir)
    common = indices[counts > config.decontaminate_max_matches]
    common_per_file = collections.Counter(evals.files[common].tolist())
    common_ngrams_report(output_dir, config, evals, indices, counts)
    eval_files = tuple(
        EvalFileInfo(
            path=path,
            sha256=sha256,
            removed=n,
            examples=stats.examples,
            ngrams=stats.ngrams,
            common_ngrams=common_per_file[i],
        )
        for i, (path, sha256, n, stats) in enumerate(
            zip(config.decontaminate, plan.eval_digests, totals.per_eval, evals.stats)
        )
    )
    return {**fields, "eval_files": eval_files}


def write_outputs(
    output_dir: str,
    plan: Plan,
    run_info: dict,
    launcher_versions: dict[str, str],
    evals: EvalSet | None = None,
) -> Manifest:
    """Rejects, removals, the tokenizer's copy and run info first, the manifest last: its presence
    means the directory is complete. A run with no training data fails here, its rejects and
    removals written to say why."""
    results = finished_units(output_dir)
    manifest = build_manifest(plan, results, shard_sizes(output_dir), launcher_versions)
    newlines = newlines_before(plan, results)
    _write_rejects(output_dir, plan, newlines)
    if cleans(plan.config):
        outputs = _cleaning_outputs(output_dir, plan, newlines, evals)
        outputs["languages"] = with_tokens(outputs["languages"], results.values())
        manifest = dataclasses.replace(manifest, **outputs)
    if "train" not in manifest.totals:
        raise FinalizeError(f"no training data: {why_empty(plan, manifest)}")
    config = plan.config
    tokenizer = load_tokenizer(
        config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token
    )
    copy = save_copy(
        tokenizer,
        lambda relative, data: storage.write_bytes_atomic(storage.join(output_dir, relative), data),
    )
    manifest = dataclasses.replace(manifest, tokenizer_copy=copy)
    peak = max((r.peak_rss_bytes for r in results.values()), default=0)
    worker_seconds = sum(r.seconds for r in results.values())
    info = {
        **run_info,
        **plan_identity_record(plan),
        "workers_peak_rss_bytes": peak,
        "workers_seconds": worker_seconds,
        "worker_processes": len({r.worker for r in results.values()}),
    }
    storage.write_bytes_atomic(
        storage.join(output_dir, formats.RUN_INFO_NAME),
        (json.dumps(info, indent=2, sort_keys=True) + "\n").encode(),
    )
    storage.write_bytes_atomic(
        storage.join(output_dir, formats.MANIFEST_NAME), manifest.to_json().encode()
    )
    remove_state(output_dir)
    return manifest
