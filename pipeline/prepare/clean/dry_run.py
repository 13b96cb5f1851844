"""What `--filter-dry-run` prints: the cleaning stage's removals by reason, and the first documents
each quality-filter rule removed, so that rules can be tuned before a long run writes shards.

Read from the cleaning stage's state (the units' removal lists and fingerprints), in input order,
so the report is the same on every runner.
"""

from __future__ import annotations

import collections

from pipeline.prepare.clean.removals import read_removal_list
from pipeline.prepare.clean.unit_fingerprints import SAMPLES_PER_REASON, read_fingerprints
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import WorkUnit


def dry_run_report(context: RunContext, units: list[WorkUnit]) -> str:
    documents = 0
    counts: collections.Counter[str] = collections.Counter()
    samples: dict[str, list[str]] = collections.defaultdict(list)
    for unit in units:
        removal_list = read_removal_list(context.output_dir, unit.index)
        documents += removal_list["documents"]
        counts.update(entry["reason"] for entry in removal_list["removed"])
        for _, reason, excerpt in read_fingerprints(unit.index, context).filtered:
            if excerpt is not None and len(samples[reason]) < SAMPLES_PER_REASON:
                samples[reason].append(f"{unit.path}: {excerpt!r}")
    removed = sum(counts.values())
    lines = [f"dry run: {documents} documents read, {removed} removed, {documents - removed} kept"]
    for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"  {reason}: {n} ({100 * n / max(documents, 1):.1f}%)")
        lines.extend(f"      {sample}" for sample in samples.get(reason, []))
    return "\n".join(lines)
