"""The plan of a run: the inputs as they are now, the config, the tokenizer and the work units.

The plan is decided before any work starts, from metadata alone: each input's size and version
(modification time, or an object store's checksum) and, for columnar files, their footer. No
content is read or hashed here, so planning costs requests, not a pass over the data; the workers
hash what they read. The plan's fingerprint guards the output directory: a rerun resumes only the
plan it started, and anything else is refused.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json

from pipeline.dataset import storage
from pipeline.prepare.clean.decontamination.eval_sets import file_sha256
from pipeline.prepare.clean.web.fasttext_models import local_path, model_specs
from pipeline.prepare.read import SOURCES, SourceError, hub_filesystem
from pipeline.prepare.read.documents import Reject
from pipeline.prepare.read.inputs import resolve_inputs
from pipeline.prepare.units import WorkUnit
from pipeline.tokenization import tokenizer_info
from schemas.manifest import TokenizerInfo
from schemas.prepare_config import PrepareConfig
from schemas.records import token_dtype_name
from schemas.settings import identity

_METADATA_THREADS = 16  # metadata requests to an object store are latency-bound


@dataclasses.dataclass(frozen=True)
class PlannedInput:
    path: str
    format: str
    size: int
    version: str


@dataclasses.dataclass(frozen=True)
class Plan:
    config: PrepareConfig
    tokenizer: TokenizerInfo
    dtype: str
    inputs: tuple[PlannedInput, ...]
    bad_inputs: tuple[Reject, ...]
    units: tuple[WorkUnit, ...]
    hub_revisions: dict[str, str]
    eval_digests: tuple[str, ...] = ()  # the SHA-256 of each of config.decontaminate
    # The SHA-256 of each fastText model the filters load, by the spec the config names it with.
    model_digests: dict[str, str] = dataclasses.field(default_factory=dict)

    def identity(self) -> dict:
        """What must match for two runs to be the same job: the config (as `settings.identity` says
        it, so that a plan recorded before a setting existed still matches), an eval file by its
        content, a fastText model by its content (where the filters load one), an input by its
        size and version."""
        found = {
            "config": identity(self.config),
            "tokenizer": dataclasses.asdict(self.tokenizer),
            "inputs": [dataclasses.asdict(i) for i in self.inputs],
            "eval_files": [
                {"path": p, "sha256": d}
                for p, d in zip(self.config.decontaminate, self.eval_digests)
            ],
        }
        if self.model_digests:  # absent otherwise: the plans of runs without models are unchanged
            found["models"] = [
                {"path": p, "sha256": d} for p, d in sorted(self.model_digests.items())
            ]
        return found

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(
            {
                "fingerprint": self.fingerprint(),
                **self.identity(),
                "bad_inputs": [r.to_dict() for r in self.bad_inputs],
                "units": [u.to_dict() for u in self.units],
                "hub_revisions": self.hub_revisions,
            },
            indent=1,
            sort_keys=True,
        )


def worker_extras(plan: Plan) -> tuple[str, ...]:
    """The extras the workers need beyond the base install: the Hugging Face client for hub files,
    datatrove for quality filters, sentencepiece for a SentencePiece model."""
    hub = any(i.path.startswith(f"{hub_filesystem.SCHEME}://") for i in plan.inputs)
    sentencepiece = plan.tokenizer.library == "sentencepiece"
    return (
        ("hf",) * hub
        + ("filters",) * bool(plan.config.filters)
        + ("sentencepiece",) * sentencepiece
    )


# Work units are sized from the inputs' total alone, never from the machine, so that every machine
# cuts the same units and writes the same shards: about TARGET_UNITS of them, so that a small input
# still gives every core of a large machine work, but none below UNIT_FLOOR_BYTES (each unit costs a
# shard file and a bundle's start-up) and none above --unit-bytes (a worker's batch memory).
TARGET_UNITS = 64
UNIT_FLOOR_BYTES = 2**20


def unit_bytes_for(total_bytes: int, config: PrepareConfig) -> int:
    """The input bytes per unit of a run whose inputs hold `total_bytes` together."""
    return min(config.unit_bytes, max(UNIT_FLOOR_BYTES, -(-total_bytes // TARGET_UNITS)))


def _stat_input(path: str) -> storage.FileInfo:
    try:
        return storage.file_info(path)
    except FileNotFoundError:
        raise SourceError(f"input {path} does not exist") from None


def make_plan(
    input_specs: list[str], config: PrepareConfig, hub_revisions: dict[str, str] | None = None
) -> Plan:
    """Inputs are looked at concurrently (metadata requests wait on the network) and taken in order:
    their sizes first, which decide the unit size (`unit_bytes_for`), then their layout.

    `hub_revisions` pins hub ids (see `resolve_inputs`)."""
    tokenizer = tokenizer_info(
        config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token
    )
    resolved = resolve_inputs(input_specs, config, hub_revisions or {})
    inputs: list[PlannedInput] = []
    bad: list[Reject] = []
    units: list[WorkUnit] = []
    workers = min(_METADATA_THREADS, len(resolved.files) or 1)

    def settled(futures: list) -> list:
        """Each future's result, or None where it raised a SourceError that the run skips."""
        results = []
        for (path, _), future in zip(resolved.files, futures):
            try:
                results.append(future.result() if future is not None else None)
            except SourceError as e:
                if not config.skip_bad_files:
                    pool.shutdown(cancel_futures=True)
                    raise
                bad.append(Reject(e.reason, path, str(e)))
                results.append(None)
        return results

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        infos = settled([pool.submit(_stat_input, path) for path, _ in resolved.files])
        sized = dataclasses.replace(
            config, unit_bytes=unit_bytes_for(sum(i.size for i in infos if i), config)
        )
        layouts = settled(
            [
                pool.submit(SOURCES[fmt].plan, path, info, sized) if info is not None else None
                for (path, fmt), info in zip(resolved.files, infos)
            ]
        )
    for (path, fmt), info, ranges in zip(resolved.files, infos, layouts):
        if ranges is None:
            continue
        units += [
            WorkUnit(
                index=len(units) + i,
                input_index=len(inputs),
                path=path,
                format=fmt,
                start=start,
                end=end,
                size=info.size,
                version=info.version,
            )
            for i, (start, end) in enumerate(ranges)
        ]
        inputs.append(PlannedInput(path, fmt, info.size, info.version))
    return Plan(
        config=config,
        tokenizer=tokenizer,
        dtype=token_dtype_name(tokenizer.n_vocab),
        inputs=tuple(inputs),
        bad_inputs=tuple(bad),
        units=tuple(units),
        hub_revisions=resolved.hub_revisions,
        eval_digests=tuple(file_sha256(path) for path in config.decontaminate),
        model_digests={spec: file_sha256(local_path(spec)) for spec in model_specs(config)},
    )
