"""Where a rerun resumes: the units an earlier, interrupted run of the same plan finished.

A unit is done if its record is of this plan and every shard it names is in place at its recorded
size; any other record is deleted, so that its unit runs again instead of reading as finished.
Units done under other package versions than those installed now are refused before any unit runs:
the run's shards would mix two tokenizers or writers.
"""

from __future__ import annotations

from pipeline.dataset.manifest_io import shard_sizes
from pipeline.prepare.execution.worker_environment import package_versions, version_differences
from pipeline.prepare.planning import Plan, worker_extras
from pipeline.prepare.stages import PrepareError
from pipeline.prepare.units import UnitResult
from pipeline.prepare.write.finalize import finished_units, forget_units, is_complete


def check_same_packages(
    output_dir: str, done: dict[int, UnitResult], installed: dict[str, str]
) -> None:
    """Refuses to resume units written under other package versions than those installed now: the
    run's shards would mix two tokenizers or writers. Checked before any unit runs."""
    for result in done.values():
        differences = version_differences(result.package_versions, installed)
        if differences:
            listed = ", ".join(f"{name} {old} (installed: {new})" for name, old, new in differences)
            raise PrepareError(
                f"{output_dir} holds an unfinished run started with other package versions: "
                f"{listed}; install the versions it was started with to resume it, or pass "
                "--overwrite to start again"
            )


def done_units(plan: Plan, output_dir: str) -> dict[int, UnitResult]:
    """The plan's units done already, by index, their records checked against the shards and the
    installed packages; every other unit record is deleted."""
    sizes = shard_sizes(output_dir)
    recorded = finished_units(output_dir)
    done = {
        i: r for i, r in recorded.items() if r.plan == plan.fingerprint() and is_complete(r, sizes)
    }
    check_same_packages(output_dir, done, package_versions(worker_extras(plan)))
    forget_units(output_dir, sorted(set(recorded) - set(done)))
    return done
