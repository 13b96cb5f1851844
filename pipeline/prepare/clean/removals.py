"""Which documents the cleaning stage removes, and why: duplicates found by key, per-unit removal
lists, and the run's `removals.jsonl`.

The keeper rule: among documents with an equal key (the exact key, or a MinHash band key), the first
in input order (unit, then number within the unit; units follow the inputs' order) is kept and every
other one is removed as a duplicate of it. A document colliding with several earlier ones, by
exact key or in several bands, names the earliest; on a tie the exact match is named. So a document
is removed exactly when it matches an earlier document, whoever else it matches: the result does
not depend on the runner, the worker count or the order in which a shuffle delivers keys.

A removal list names each removed document by its number in its unit, with its reason, where it is
in its input (`location`, see `documents`), its id field's value when it has one, and what the
reason adds: the keeper of a duplicate (its unit and location), the eval file of a contaminated
document, a quality filter's `filter:NAME:RULE`. Any other stage that removes documents adds its own
reason and details the same way.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from pipeline.dataset import storage
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import WorkUnit
from schemas import formats
from schemas.prepare_config import PrepareConfig

REMOVALS_DIR = "removals"
CLEANED_NAME = "cleaned.json"
EXACT, NEAR, CONTAMINATED = "exact_duplicate", "near_duplicate", "contaminated"
_PRIORITY = {EXACT: 0, NEAR: 1}
_UNIT_SHIFT = 32  # a document's place in input order: unit << 32 | number
_ROW_FORMATS = ("parquet", "arrow")


def cleans(config: PrepareConfig) -> bool:
    """Whether the run has a cleaning stage before tokenizing."""
    return config.dedup != "none" or bool(config.decontaminate) or bool(config.filters)


def place(unit: int, number: int) -> int:
    return (unit << _UNIT_SHIFT) | number


def places(unit: int, numbers: np.ndarray) -> np.ndarray:
    """`place` of each of a unit's document numbers."""
    return (np.int64(unit) << np.int64(_UNIT_SHIFT)) | numbers.astype(np.int64)


def unit_of(place: int) -> int:
    return place >> _UNIT_SHIFT


def duplicates(
    reason: str, parts: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> Iterator[tuple[int, int, str, int, int]]:
    """`(unit, number, reason, keeper place, keeper location)` of every document whose key an
    earlier document has, from `(places, locations, keys)` parts, keys being rows of uint64
    columns."""
    parts = list(parts)
    places = np.concatenate([p for p, _, _ in parts])
    locations = np.concatenate([loc for _, loc, _ in parts])
    keys = np.concatenate([k for _, _, k in parts])
    order = np.lexsort((places, *keys.T[::-1]))
    places, locations, keys = places[order], locations[order], keys[order]
    same = np.all(keys[1:] == keys[:-1], axis=1)
    # Each run of equal keys starts with its keeper: the smallest place, as sorted.
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    run = np.cumsum(np.concatenate(([True], ~same))) - 1
    keeper, keeper_location = places[starts][run], locations[starts][run]
    mask = (1 << _UNIT_SHIFT) - 1
    for at in np.flatnonzero(np.concatenate(([False], same))).tolist():
        found = int(places[at])
        yield found >> _UNIT_SHIFT, found & mask, reason, int(keeper[at]), int(keeper_location[at])


def merge(candidates: Iterable[tuple[int, str, int, int]]) -> dict[int, tuple[str, int, int]]:
    """Per removed number, the earliest keeper it matches (the exact match on a tie), from
    `(number, reason, keeper place, keeper location)`."""
    best: dict[int, tuple[str, int, int]] = {}
    for number, reason, keeper, location in candidates:
        if number not in best or (keeper, _PRIORITY[reason]) < (
            best[number][1],
            _PRIORITY[best[number][0]],
        ):
            best[number] = (reason, keeper, location)
    return best


def removal_list_path(output_dir: str, unit: int) -> str:
    return storage.join(output_dir, formats.STATE_DIR, REMOVALS_DIR, f"{unit:05d}.json")


def cleaned_path(output_dir: str) -> str:
    return storage.join(output_dir, formats.STATE_DIR, CLEANED_NAME)


def duplicate_entry(number: int, reason: str, keeper: int, keeper_location: int) -> dict[str, Any]:
    return {"number": number, "reason": reason, "keeper": [unit_of(keeper), keeper_location]}


def contaminated_entry(number: int, eval_file: int) -> dict[str, Any]:
    return {"number": number, "reason": CONTAMINATED, "eval_file": eval_file}


def filtered_entry(number: int, reason: str) -> dict[str, Any]:
    """A document a quality filter removed, `reason` saying which filter and rule."""
    return {"number": number, "reason": reason}


def removal_entries(
    candidates: Iterable[tuple[int, str, int, int]],
    contaminated: dict[int, int],
    filtered: Iterable[list],
) -> list[dict[str, Any]]:
    """A unit's removed documents: its duplicates (`candidates`, see `merge`), its contaminated
    documents (number: eval file) and those the quality filters removed
    (`[number, reason, excerpt]`)."""
    entries = [duplicate_entry(n, *found) for n, found in merge(candidates).items()]
    entries += [contaminated_entry(n, file) for n, file in contaminated.items()]
    entries += [filtered_entry(n, reason) for n, reason, _ in filtered]
    return entries


LANGUAGE_COUNTS = ("kept", "removed", "bytes_kept", "bytes_removed")


def language_counts(languages: list[list], removed: set[int]) -> dict[str, dict[str, int]]:
    """Per language, the documents kept and removed (for any reason) and their UTF-8 bytes, from
    `[number, language, score, bytes]` of the documents the language filter judged."""
    counts: dict[str, dict[str, int]] = {}
    for number, language, _, size in languages:
        counted = counts.setdefault(language, dict.fromkeys(LANGUAGE_COUNTS, 0))
        fate = "removed" if number in removed else "kept"
        counted[fate] += 1
        counted[f"bytes_{fate}"] += size
    return dict(sorted(counts.items()))


def write_removal_list(
    output_dir: str,
    unit: int,
    documents: int,
    entries: list[dict[str, Any]],
    locations: np.ndarray,
    ids: list | None,
    languages: list[list] = (),
    pii: dict[str, int] | None = None,
) -> None:
    """One JSON object per unit: its removed documents by number, each entry completed with the
    document's location and id, and its language and the model's score where the language filter
    judged it; the unit's documents per language and PII's replacements (see
    `unit_fingerprints`)."""
    judged = {number: (language, score) for number, language, score, _ in languages}
    removed = []
    for entry in sorted(entries, key=lambda e: e["number"]):
        where = {"location": int(locations[entry["number"]])}
        if ids is not None and ids[entry["number"]] is not None:
            where["id"] = ids[entry["number"]]
        if entry["number"] in judged:
            where["language"], where["language_score"] = judged[entry["number"]]
        removed.append({**entry, **where})
    record = {"unit": unit, "documents": documents, "removed": removed}
    if languages:
        record["languages"] = language_counts(languages, {e["number"] for e in entries})
    if pii:
        record["pii"] = pii
    storage.write_bytes_atomic(removal_list_path(output_dir, unit), json.dumps(record).encode())


def mark_cleaned(context: RunContext) -> None:
    """Written last, once every unit's removal list is: the cleaning stage is complete for this
    plan."""
    storage.write_bytes_atomic(cleaned_path(context.output_dir), context.plan.encode())


def is_cleaned(context: RunContext) -> bool:
    """Whether this run's cleaning stage is complete (for this plan: the output directory refuses
    any other)."""
    path = cleaned_path(context.output_dir)
    return storage.exists(path) and storage.read_text(path) == context.plan


def read_removal_list(output_dir: str, unit: int) -> dict:
    return json.loads(storage.read_text(removal_list_path(output_dir, unit)))


def removed_numbers(output_dir: str, unit: int) -> frozenset[int]:
    """What the tokenizing pass skips in this unit."""
    return frozenset(entry["number"] for entry in read_removal_list(output_dir, unit)["removed"])


def located(unit: WorkUnit, location: int, newlines_before: int) -> dict[str, int]:
    """Where a document is, as `rejects.jsonl` says it: a row, or a line from 1."""
    if unit.format in _ROW_FORMATS:
        return {"row": location}
    return {"line": 1 + newlines_before + location}


@dataclasses.dataclass
class RemovalTotals:
    """What the units' removal lists add up to: documents removed per reason and per eval file,
    documents kept and removed per language, PII's replacements."""

    reasons: dict[str, int]
    per_eval: list[int]
    languages: dict[str, dict[str, int]]
    pii: dict[str, int]


def write_removals_file(
    output_dir: str, units: list[WorkUnit], eval_paths: list[str], newlines_before: dict[int, int]
) -> RemovalTotals:
    """`removals.jsonl` from the units' lists, in input order, each document named by its input and
    its line or row there (and its id field's value, its language, where it has one); returns their
    totals. `newlines_before` holds each unit's newlines before its range in its input."""
    by_index = {u.index: u for u in units}
    reasons: collections.Counter[str] = collections.Counter()
    per_eval = [0] * len(eval_paths)
    languages: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    pii: collections.Counter[str] = collections.Counter()
    with storage.atomic_local_file(storage.join(output_dir, formats.REMOVALS_NAME)) as scratch:
        with open(scratch, "w") as out:
            for u in units:
                removal_list = read_removal_list(output_dir, u.index)
                for language, counted in removal_list.get("languages", {}).items():
                    languages[language].update(counted)
                pii.update(removal_list.get("pii", {}))
                for entry in removal_list["removed"]:
                    line = {
                        "reason": entry["reason"],
                        "path": u.path,
                        **located(u, entry["location"], newlines_before[u.index]),
                    }
                    for key in ("id", "language", "language_score"):
                        if key in entry:
                            line[key] = entry[key]
                    if "keeper" in entry:
                        keeper_unit, keeper_location = entry["keeper"]
                        keeper = by_index[keeper_unit]
                        line["duplicate_of"] = {
                            "path": keeper.path,
                            **located(keeper, keeper_location, newlines_before[keeper_unit]),
                        }
                    if "eval_file" in entry:
                        line["eval_file"] = eval_paths[entry["eval_file"]]
                        per_eval[entry["eval_file"]] += 1
                    reasons[entry["reason"]] += 1
                    out.write(json.dumps(line, sort_keys=True) + "\n")
    return RemovalTotals(
        reasons=dict(sorted(reasons.items())),
        per_eval=per_eval,
        languages={
            k: {name: c[name] for name in LANGUAGE_COUNTS} for k, c in sorted(languages.items())
        },
        pii=dict(sorted(pii.items())),
    )
