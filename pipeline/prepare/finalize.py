"""Assembling the manifest from the finished units' records, once every unit is done."""

from __future__ import annotations

import collections
import importlib.metadata
import json
import os
import platform

from pipeline import storage
from pipeline.prepare.planning import Plan
from pipeline.prepare.units import UnitResult, unit_record_name
from schemas import formats
from schemas.manifest import Manifest, split_totals

_PACKAGES = ("tokshards", "apache-beam", "array-record", "tiktoken", "numpy", "pyarrow", "datasets", "zstandard")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def finished_units(output_dir: str, known: dict[int, UnitResult] | None = None) -> dict[int, UnitResult]:
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


def build_manifest(plan: Plan, results: dict[int, UnitResult]) -> Manifest:
    missing = [u.index for u in plan.units if u.index not in results]
    if missing:
        raise RuntimeError(f"cannot write the manifest: units {missing[:10]} have not finished")
    ordered = [results[u.index] for u in plan.units]
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
        inputs=plan.inputs,
        num_units=len(plan.units),
        shards=shards,
        skipped=dict(sorted(skipped.items())),
        counts=dict(sorted(counts.items())),
        totals=split_totals(shards),
        package_versions=package_versions(),
    )


def write_outputs(output_dir: str, plan: Plan, run_info: dict) -> Manifest:
    """Rejects first, the manifest last: its presence means the directory is complete."""
    manifest = build_manifest(plan, finished_units(output_dir))
    state = storage.join(output_dir, formats.STATE_DIR)
    lines = [json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in plan.bad_inputs]
    for unit in plan.units:
        path = storage.join(state, formats.UNIT_REJECTS_DIR, f"{unit.index:05d}.jsonl")
        if storage.exists(path):
            lines.append(storage.read_text(path))
    storage.write_bytes_atomic(storage.join(output_dir, formats.REJECTS_NAME), "".join(lines).encode())
    storage.write_bytes_atomic(storage.join(output_dir, formats.MANIFEST_NAME), manifest.to_json().encode())
    storage.write_bytes_atomic(
        storage.join(output_dir, formats.RUN_INFO_NAME), (json.dumps(run_info, indent=2, sort_keys=True) + "\n").encode()
    )
    storage.delete_tree(state)
    return manifest

