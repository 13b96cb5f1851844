"""Which documents the cleaning stage removes, and why: duplicates found by key, per-unit removal
lists, and the run's `removals.jsonl`.

The keeper rule: among documents with an equal key (the exact key, or a MinHash band key), the first
in input order (unit, then number within the unit; units follow the inputs' order) is kept and every
other one is removed as a duplicate of it. A document colliding with several earlier ones, by
exact key or in several bands, names the earliest; on a tie the exact match is named. So a document
is removed exactly when it matches an earlier document, whoever else it matches: the result does
not depend on the runner, the worker count or the order in which a shuffle delivers keys.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Iterator

import numpy as np

from pipeline import storage
from pipeline.prepare.units import WorkUnit
from schemas import formats
from schemas.manifest import PrepareConfig

REMOVALS_DIR = "removals"
CLEANED_NAME = "cleaned.json"
EXACT, NEAR, CONTAMINATED = "exact_duplicate", "near_duplicate", "contaminated"
_PRIORITY = {EXACT: 0, NEAR: 1}
_UNIT_SHIFT = 32  # a document's place in input order: unit << 32 | number


def cleans(config: PrepareConfig) -> bool:
    """Whether the run has a cleaning stage before tokenizing."""
    return config.dedup != "none" or bool(config.decontaminate)


def place(unit: int, number: int) -> int:
    return (unit << _UNIT_SHIFT) | number


def duplicates(reason: str, parts: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[int, int, str, int]]:
    """`(unit, number, reason, keeper place)` of every document whose key an earlier document has,
    from `(places, keys)` parts, keys being rows of uint64 columns."""
    parts = list(parts)
    places = np.concatenate([p for p, _ in parts])
    keys = np.concatenate([k for _, k in parts])
    order = np.lexsort((places, *keys.T[::-1]))
    places, keys = places[order], keys[order]
    same = np.all(keys[1:] == keys[:-1], axis=1)
    # Each run of equal keys starts with its keeper: the smallest place, as sorted.
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    keeper = places[starts][np.cumsum(np.concatenate(([True], ~same))) - 1]
    removed = np.flatnonzero(np.concatenate(([False], same)))
    for at in removed.tolist():
        yield int(places[at]) >> _UNIT_SHIFT, int(places[at]) & ((1 << _UNIT_SHIFT) - 1), reason, int(keeper[at])


def merge(candidates: Iterable[tuple[int, str, int]]) -> dict[int, tuple[str, int]]:
    """Per removed number, the earliest keeper it matches (the exact match on a tie)."""
    best: dict[int, tuple[str, int]] = {}
    for number, reason, keeper in candidates:
        if number not in best or (keeper, _PRIORITY[reason]) < (best[number][1], _PRIORITY[best[number][0]]):
            best[number] = (reason, keeper)
    return best


def removal_list_path(output_dir: str, unit: int) -> str:
    return storage.join(output_dir, formats.STATE_DIR, REMOVALS_DIR, f"{unit:05d}.json")


def cleaned_path(output_dir: str) -> str:
    return storage.join(output_dir, formats.STATE_DIR, CLEANED_NAME)


def write_removal_list(
    output_dir: str, unit: int, documents: int, duplicates_found: dict[int, tuple[str, int]], contaminated: dict[int, int]
) -> None:
    """One JSON object per unit, its entries by number: [number, reason, keeper place or eval file]."""
    entries = [[n, reason, keeper] for n, (reason, keeper) in duplicates_found.items()]
    entries += [[n, CONTAMINATED, file] for n, file in contaminated.items()]
    record = {"unit": unit, "documents": documents, "removed": sorted(entries)}
    storage.write_bytes_atomic(removal_list_path(output_dir, unit), json.dumps(record).encode())


def read_removal_list(output_dir: str, unit: int) -> dict:
    return json.loads(storage.read_text(removal_list_path(output_dir, unit)))


def removed_numbers(output_dir: str, unit: int) -> frozenset[int]:
    """What the tokenizing pass skips in this unit."""
    return frozenset(entry[0] for entry in read_removal_list(output_dir, unit)["removed"])


def write_removals_file(output_dir: str, units: list[WorkUnit], eval_paths: list[str]) -> tuple[dict[str, int], list[int]]:
    """`removals.jsonl` from the units' lists, in input order, each document named by its input
    and its ordinal there (counting from 0); returns the counts per reason and per eval file."""
    lists = {u.index: read_removal_list(output_dir, u.index) for u in units}
    paths = {u.index: u.path for u in units}
    first_ordinal: dict[int, int] = {}
    following: collections.Counter[int] = collections.Counter()
    for u in units:
        first_ordinal[u.index] = following[u.input_index]
        following[u.input_index] += lists[u.index]["documents"]
    reasons: collections.Counter[str] = collections.Counter()
    per_eval = [0] * len(eval_paths)
    with storage.atomic_local_file(storage.join(output_dir, formats.REMOVALS_NAME)) as scratch:
        with open(scratch, "w") as out:
            for u in units:
                for number, reason, other in lists[u.index]["removed"]:
                    line = {"reason": reason, "path": u.path, "document": first_ordinal[u.index] + number}
                    if reason == CONTAMINATED:
                        line["eval_file"] = eval_paths[other]
                        per_eval[other] += 1
                    else:
                        keeper_unit, keeper_number = other >> _UNIT_SHIFT, other & ((1 << _UNIT_SHIFT) - 1)
                        line["duplicate_of"] = {"path": paths[keeper_unit], "document": first_ordinal[keeper_unit] + keeper_number}
                    reasons[reason] += 1
                    out.write(json.dumps(line, sort_keys=True) + "\n")
    return dict(sorted(reasons.items())), per_eval
