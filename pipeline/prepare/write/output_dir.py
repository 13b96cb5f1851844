"""The output directory's state before a run: fresh, resumable, complete, or not ours to touch.

`--overwrite` deletes exactly what an earlier run wrote, as its own records list it (the manifest's
shards, the plan's units, the state directory), and nothing else: a directory that holds other
files is never emptied wholesale, and a run whose inputs lie inside its output is refused outright.
"""

from __future__ import annotations

import json
import os

from pipeline.dataset import storage
from pipeline.prepare.planning import Plan
from schemas import formats
from schemas.errors import RunError, UsageError
from schemas.manifest import Manifest, ManifestError
from schemas.prepare_config import PrepareConfig
from schemas.settings import declared, flag_of, from_saved

FRESH, RESUME, COMPLETE = "fresh", "resume", "complete"
# run_info.json keeps the identity of the plan a complete directory was made from (its inputs'
# versions are not content, so they stay out of the manifest).
PLAN_IDENTITY_KEY = "plan"


class OutputError(RunError, RuntimeError):
    """The output directory cannot take this plan; the message says why and what to do."""


class ModelChangedError(UsageError, ValueError):
    """A fastText model file that holds other bytes than when the run here was planned."""


def _check_models(output_dir: str, old: dict, new: dict) -> None:
    """Refuses to go on with, or take as complete, a run whose filters' model file has changed: its
    path alone is in the config."""
    earlier = {model["path"]: model["sha256"] for model in old.get("models", [])}
    for model in new.get("models", []):
        before = earlier.get(model["path"], model["sha256"])
        if before != model["sha256"]:
            raise ModelChangedError(
                f"fastText model {model['path']} has changed since the run in {output_dir} was "
                f"planned with it (sha256 {before[:12]}..., now {model['sha256'][:12]}...); put "
                "that file back, or pass --overwrite to prepare again with this one"
            )


def _differences(old: dict, new: dict) -> str:
    what = []
    for section in ("config", "tokenizer", "inputs", "eval_files", "models"):
        if old.get(section) != new.get(section):
            if section == "config":
                earlier, now = old.get(section, {}), new[section]
                keys = sorted(k for k in {*earlier, *now} if earlier.get(k) != now.get(k))
                what.append("config (" + ", ".join(keys) + ")" + _left_out(earlier, now))
            else:
                what.append(section.replace("_", " "))
    return ", ".join(what)


def _left_out(earlier: dict, now: dict) -> str:
    """What the earlier run's identity says by leaving a setting out (its `older` value), where it
    matters for that run: a run recorded before the setting existed is resumed with it."""
    try:
        config = from_saved(PrepareConfig, earlier)
    except (TypeError, ValueError):
        return ""
    said = [
        f"{flag_of(field, s)} {s.older}"
        for field, s in declared(PrepareConfig)
        if s.has_older
        and field.name not in earlier
        and field.name in now
        and (s.matters is None or s.matters(config))
    ]
    return f"; the earlier run's is {', '.join(said)}" if said else ""


def _state_path(output_dir: str, *parts: str) -> str:
    return storage.join(output_dir, formats.STATE_DIR, *parts)


def _read_json(path: str) -> dict | None:
    return json.loads(storage.read_text(path)) if storage.exists(path) else None


def written_by_earlier_run(output_dir: str) -> list[str] | None:
    """Every file an earlier run of prepare may have written here, as its own records (its manifest,
    its plan) name them; None if no run left a record."""
    manifest_path = storage.join(output_dir, formats.MANIFEST_NAME)
    plan = _read_json(_state_path(output_dir, formats.PLAN_NAME))
    if plan is None and not storage.exists(manifest_path):
        return None
    names = list(formats.RUN_FILES)
    if storage.exists(manifest_path):
        try:
            # The schema keeps shard paths relative and inside the directory.
            names += [s.path for s in Manifest.from_json(storage.read_text(manifest_path)).shards]
        except ManifestError as e:
            raise OutputError(
                f"{output_dir}: {e}; cannot tell what an earlier run wrote, so nothing is deleted"
            ) from None
    if plan is not None:
        count = len(plan["units"])
        names += [
            formats.shard_path(split, u["index"], count)
            for u in plan["units"]
            for split in formats.SPLITS
        ]
    # The tokenizer's copy, written before the manifest: what is there is the earlier run's.
    names += [
        f"{formats.TOKENIZER_COPY_DIR}/{os.path.basename(p)}"
        for p in storage.list_files(storage.join(output_dir, formats.TOKENIZER_COPY_DIR))
    ]
    return [storage.join(output_dir, name) for name in dict.fromkeys(names)]


def remove_state(output_dir: str) -> None:
    """What a complete directory does not need: the run's state and any writer's scratch files."""
    storage.delete_tree(storage.join(output_dir, formats.STATE_DIR))
    storage.remove_scratch(output_dir)


def _overwrite(output_dir: str) -> bool:
    """Deletes an earlier run's files; whether there was one."""
    earlier = written_by_earlier_run(output_dir)
    if earlier is None:
        return False
    # Which of them exist, from a listing per directory rather than a request per name.
    present = set(storage.sizes_in(output_dir))
    for directory in (*formats.SPLITS, formats.TOKENIZER_COPY_DIR):
        present.update(storage.sizes_in(storage.join(output_dir, directory)))
    storage.delete([path for path in earlier if path in present])
    remove_state(output_dir)
    for directory in (*formats.SPLITS, formats.TOKENIZER_COPY_DIR):
        storage.remove_empty_directory(storage.join(output_dir, directory))
    return True


def check_inputs_outside(output_dir: str, plan: Plan) -> None:
    for item in plan.inputs:
        if storage.is_within(item.path, output_dir):
            raise OutputError(
                f"input {item.path} lies inside the output directory {output_dir}, where prepare "
                "writes and --overwrite deletes; choose an --output outside the inputs"
            )


def prepare_output_dir(output_dir: str, plan: Plan, *, overwrite: bool) -> str:
    """Returns FRESH, RESUME or COMPLETE, or raises OutputError."""
    check_inputs_outside(output_dir, plan)
    # Files beside an earlier run's stay where they are; a directory without one is not taken over.
    replaced = overwrite and _overwrite(output_dir)
    identity = plan.identity()
    run_info = _read_json(storage.join(output_dir, formats.RUN_INFO_NAME))
    if storage.exists(storage.join(output_dir, formats.MANIFEST_NAME)):
        old = (run_info or {}).get(PLAN_IDENTITY_KEY)
        if old is None:
            raise OutputError(
                f"{output_dir} holds a dataset without the {formats.RUN_INFO_NAME} that says what "
                "it was prepared from (copied without it?), so it cannot be told to match these "
                "inputs and config; pass --overwrite to replace it, or choose another --output"
            )
        _check_models(output_dir, old, identity)
        if old != identity:
            raise OutputError(
                f"{output_dir} already holds a dataset prepared with different "
                f"{_differences(old, identity) or 'settings'}; pass --overwrite to replace it, or "
                "choose another --output"
            )
        remove_state(
            output_dir
        )  # left if the run that completed it stopped right after its manifest
        return COMPLETE
    old_plan = _read_json(_state_path(output_dir, formats.PLAN_NAME))
    if old_plan is not None:
        _check_models(output_dir, old_plan, identity)
        if old_plan.get("fingerprint") != plan.fingerprint():
            raise OutputError(
                f"{output_dir} holds an unfinished run with different "
                f"{_differences(old_plan, identity)}; rerun with the same inputs and config to "
                "resume it, or pass --overwrite"
            )
        storage.remove_scratch(output_dir)  # an interrupted writer's
        return RESUME
    if not replaced and storage.has_entries(output_dir):
        raise OutputError(
            f"{output_dir} is not empty and holds no prepare output or state; choose an empty "
            "--output"
        )
    try:
        storage.makedirs(output_dir)
        storage.write_bytes_atomic(
            _state_path(output_dir, formats.PLAN_NAME), plan.to_json().encode()
        )
    except OSError as e:
        raise OutputError(
            f"cannot write to the output directory {output_dir}: {e.strerror or e}"
        ) from None
    return FRESH


def plan_identity_record(plan: Plan) -> dict:
    """What run_info.json keeps so that a rerun can tell whether a complete directory is its own."""
    return {
        PLAN_IDENTITY_KEY: plan.identity(),
        "plan_fingerprint": plan.fingerprint(),
        "hub_revisions": plan.hub_revisions,
    }


def earlier_hub_revisions(output_dir: str) -> dict[str, str]:
    """The commits an earlier run here pinned its hub datasets to, so that a rerun reads the
    same."""
    for path in (
        _state_path(output_dir, formats.PLAN_NAME),
        storage.join(output_dir, formats.RUN_INFO_NAME),
    ):
        record = _read_json(path)
        if record is not None:
            return dict(record.get("hub_revisions", {}))
    return {}
