"""The plan of a run: fingerprinted inputs, the config, the tokenizer and the list of work units.

The plan is decided before any work starts, from inputs and config alone. Its fingerprint guards
the output directory: a rerun resumes only the plan it started, and anything else is refused.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json

from pipeline import storage
from pipeline.prepare.documents import BAD_FILE, Reject
from pipeline.prepare.sources import SOURCES, SourceError, resolve_inputs
from pipeline.tokenizer import tokenizer_info
from pipeline.prepare.units import WorkUnit
from schemas import formats
from schemas.manifest import InputInfo, Manifest, PrepareConfig, TokenizerInfo
from schemas.records import token_dtype_name

_HASHING_THREADS = 8  # enough to keep local disks and object stores busy


class PlanError(RuntimeError):
    """The output directory cannot take this plan; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Plan:
    config: PrepareConfig
    tokenizer: TokenizerInfo
    dtype: str
    inputs: tuple[InputInfo, ...]
    bad_inputs: tuple[Reject, ...]
    units: tuple[WorkUnit, ...]

    def identity(self) -> dict:
        """What must match for two runs to be the same job."""
        return {
            "config": dataclasses.asdict(self.config),
            "tokenizer": dataclasses.asdict(self.tokenizer),
            "inputs": [dataclasses.asdict(i) for i in self.inputs],
        }

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(
            {
                "fingerprint": self.fingerprint(),
                **self.identity(),
                "bad_inputs": [r.to_dict() for r in self.bad_inputs],
                "units": [u.to_dict() for u in self.units],
            },
            indent=1,
            sort_keys=True,
        )


def make_plan(input_patterns: list[str], config: PrepareConfig) -> Plan:
    """Inputs are hashed concurrently (reading and hashing release the GIL) and taken in order."""
    tokenizer = tokenizer_info(config.tokenizer)
    resolved = resolve_inputs(input_patterns, config.format)
    inputs, bad, units = [], [], []
    with concurrent.futures.ThreadPoolExecutor(min(_HASHING_THREADS, len(resolved) or 1)) as pool:
        planned = [pool.submit(SOURCES[fmt].fingerprint_and_plan, path, config) for path, fmt in resolved]
        for (path, _), future in zip(resolved, planned):
            try:
                info, file_units = future.result()
            except (SourceError, OSError) as e:
                if not config.skip_bad_files:
                    pool.shutdown(cancel_futures=True)
                    raise SourceError(str(e) if isinstance(e, SourceError) else f"{path}: {e}") from None
                bad.append(Reject(BAD_FILE, path, "", str(e)))
                continue
            first = len(units)
            units += [
                dataclasses.replace(u, index=first + i, input_index=len(inputs)) for i, u in enumerate(file_units)
            ]
            inputs.append(info)
    return Plan(
        config=config,
        tokenizer=tokenizer,
        dtype=token_dtype_name(tokenizer.n_vocab),
        inputs=tuple(inputs),
        bad_inputs=tuple(bad),
        units=tuple(units),
    )


def _differences(old: dict, new: dict) -> str:
    what = []
    for section in ("config", "tokenizer", "inputs"):
        if old.get(section) != new.get(section):
            if section == "config":
                keys = sorted(k for k in new[section] if old[section].get(k) != new[section][k])
                what.append("config (" + ", ".join(keys) + ")")
            else:
                what.append(section)
    return ", ".join(what)


_OUTPUT_ENTRIES = (formats.MANIFEST_NAME, formats.RUN_INFO_NAME, formats.REJECTS_NAME, formats.STATE_DIR, *formats.SPLITS)


def prepare_output_dir(output_dir: str, plan: Plan, *, overwrite: bool) -> str:
    """Returns 'fresh', 'resume' or 'complete', or raises PlanError.

    A directory holding another job's output or state is refused unless `overwrite`, which removes
    only what `prepare` itself writes.
    """
    if overwrite:
        for entry in _OUTPUT_ENTRIES:
            storage.delete_tree(storage.join(output_dir, entry))
    manifest_path = storage.join(output_dir, formats.MANIFEST_NAME)
    plan_path = storage.join(output_dir, formats.STATE_DIR, formats.PLAN_NAME)
    identity = plan.identity()
    if storage.exists(manifest_path):
        manifest = Manifest.from_json(storage.read_text(manifest_path))
        old = {
            "config": dataclasses.asdict(manifest.config),
            "tokenizer": dataclasses.asdict(manifest.tokenizer),
            "inputs": [dataclasses.asdict(i) for i in manifest.inputs],
        }
        if old != identity:
            raise PlanError(
                f"{output_dir} already holds a dataset prepared with different "
                f"{_differences(old, identity)}; pass --overwrite to replace it, or choose another --output"
            )
        return "complete"
    if storage.exists(plan_path):
        old = json.loads(storage.read_text(plan_path))
        if old.get("fingerprint") != plan.fingerprint():
            raise PlanError(
                f"{output_dir} holds an unfinished run with different {_differences(old, identity)}; "
                "rerun with the same inputs and config to resume it, or pass --overwrite"
            )
        storage.remove_scratch(output_dir)
        return "resume"
    if storage.has_entries(output_dir):
        raise PlanError(
            f"{output_dir} is not empty and holds no prepare state; choose an empty --output "
            "or pass --overwrite"
        )
    storage.makedirs(output_dir)
    storage.write_bytes_atomic(plan_path, plan.to_json().encode())
    return "fresh"
