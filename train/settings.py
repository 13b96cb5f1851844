"""Command-line settings against the saved run: what is not given comes from the run in the workdir.

A new run takes the preset's and `TrainConfig`'s defaults for what is not given. A resumed run takes
the saved config, and a given setting that decides the computation must equal the saved one; the
error names the flag, from the settings' declarations. `--steps` may change: the learning-rate
schedule keeps the saved run's horizon unless `--decay-steps` sets another, and either is said in a
note. The model's flags are declared here (`ModelFlags`), each with where it lands in the saved
config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from model.config import preset
from pipeline.load.data_spec import DataSource
from schemas.settings import declared, flags, setting
from train.config import TrainConfig, data_vocab_size
from train.errors import TrainUsageError


@dataclasses.dataclass(frozen=True)
class ModelFlags:
    """The preset's model overridden from the command line: each lands in the saved config's `model`
    (`saved_as`); None, or off, leaves the preset's."""

    width: int | None = setting(
        None,
        "override the preset's width (free sizes); the MLP is 4x wide",
        unset="the preset's",
        minimum=1,
        saved_as="model.width",
    )
    num_layers: int | None = setting(
        None,
        "override the preset's layer count",
        flag="--layers",
        unset="the preset's",
        minimum=1,
        saved_as="model.num_layers",
    )
    num_heads: int | None = setting(
        None,
        "override the preset's head count",
        flag="--heads",
        unset="the preset's",
        minimum=1,
        saved_as="model.num_heads",
    )
    dropout: float | None = setting(
        None, "dropout rate", unset="the preset's", minimum=0, below=1, saved_as="model.dropout"
    )
    vocab_size: int | None = setting(
        None,
        "the model's vocabulary, padded to a multiple of 128",
        unset="the data's; never smaller",
        minimum=1,
        saved_as="model.vocab_size",
    )
    bf16: bool = setting(
        False, "compute in bfloat16, parameters stay float32", saved_as="model.dtype"
    )
    fsdp: bool = setting(False, "also shard parameters along the data axis", saved_as="model.fsdp")


# Settings free to differ from the saved run's: they change when or how, not what, is computed.
_FREE = frozenset(
    {
        "workdir",
        "steps",
        "decay_steps",
        "mesh",
        "checkpoint_every",
        "keep_checkpoints",
        "eval_every",
        "eval_batches",
        "log_every",
        "loader_workers",
        "gradient_accumulation_steps",
        "remat",
        "tensorboard",
        "profile_steps",
        "profile_skip_steps",
    }
)
# Settings of one start alone: a resume that does not give them takes the default, not the saved
# run's.
_THIS_START = ("profile_steps", "profile_skip_steps")
# The `GPTConfig` field each model flag sets; `bf16` sets `dtype`, as one of these.
_MODEL_FIELDS = {field.name: s.saved_as.removeprefix("model.") for field, s in declared(ModelFlags)}
_DTYPES = {True: "bfloat16", False: "float32"}
_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
# Each setting's flag, for the errors and notes that name them.
FLAGS = flags(TrainConfig, ModelFlags)


def default(name: str) -> Any:
    """A `TrainConfig` field's default, for a new run."""
    return _FIELDS[name].default


def resolve(given: Mapping[str, Any], saved: TrainConfig | None) -> tuple[TrainConfig, list[str]]:
    """The run's config and notes on what a resume changes. `given` holds only settings given on the
    command line or in a config file, by their names in `TrainConfig` or `ModelFlags`, and
    `workdir`."""
    if saved is None:
        return _new_run(given), []
    return _resumed(given, saved)


def _model_overrides(given: Mapping[str, Any]) -> dict[str, Any]:
    overrides = {
        field: _DTYPES[given[name]] if name == "bf16" else given[name]
        for name, field in _MODEL_FIELDS.items()
        if name in given
    }
    if "width" in given:
        overrides["mlp_width"] = 4 * given["width"]
    return overrides


def _new_run(given: Mapping[str, Any]) -> TrainConfig:
    if "data" not in given:
        raise TrainUsageError(
            f"{given['workdir']} holds no run to resume; {FLAGS['data']} is required to start one"
        )
    # The data's vocabulary unless given: a preset's own size fits only the tokenizer it was made
    # for.
    vocab = {} if "vocab_size" in given else {"vocab_size": data_vocab_size(given["data"])}
    model = preset(given.get("preset", default("preset")), **{**vocab, **_model_overrides(given)})
    steps = given.get("steps", default("steps"))
    derived = {
        "seq_len": model.max_seq_len,
        "warmup_steps": min(default("warmup_steps"), steps // 10),
    }
    fields = {k: v for k, v in given.items() if k in _FIELDS}
    return TrainConfig(model=model, **{**derived, **fields})


def _saved_value(saved: TrainConfig, name: str) -> Any:
    if name in _MODEL_FIELDS:
        value = getattr(saved.model, _MODEL_FIELDS[name])
        return value == _DTYPES[True] if name == "bf16" else value
    return getattr(saved, name)


def _text(value: Any) -> str:
    if isinstance(value, tuple) and value and isinstance(value[0], DataSource):
        return ",".join(f"{s.name}={s.weight:g}:{s.path}" for s in value)
    return str(value)


def _shown(flag: str, value: Any) -> str:
    if isinstance(value, bool):
        return flag if value else f"--no-{flag.removeprefix('--')}"
    return f"{flag} {_text(value)}"


def _resumed(given: Mapping[str, Any], saved: TrainConfig) -> tuple[TrainConfig, list[str]]:
    for name, value in given.items():
        if name in _FREE:
            continue
        old = _saved_value(saved, name)
        if value != old:
            theirs = _shown(FLAGS[name], old) if isinstance(old, bool) else _text(old)
            raise TrainUsageError(
                f"{_shown(FLAGS[name], value)} differs from the saved run's {theirs}; "
                "drop the flag or use another --workdir"
            )
    config = dataclasses.replace(saved, **{name: default(name) for name in _THIS_START})
    config = dataclasses.replace(
        config, **{k: v for k, v in given.items() if k in _FREE and k != "decay_steps"}
    )
    notes = []
    if "decay_steps" in given:
        if given["decay_steps"] != saved.decay_horizon:
            notes.append(
                f"{FLAGS['decay_steps']} {given['decay_steps']}: the learning-rate schedule's "
                f"horizon moves from step {saved.decay_horizon} to step {given['decay_steps']}"
            )
        config = dataclasses.replace(config, decay_steps=given["decay_steps"])
    elif config.steps != saved.steps:
        after = ", then stays at its minimum" if config.steps > saved.decay_horizon else ""
        notes.append(
            f"{FLAGS['steps']} {config.steps}: the learning-rate schedule keeps the saved run's "
            f"horizon at step {saved.decay_horizon}{after}; {FLAGS['decay_steps']} sets another"
        )
        config = dataclasses.replace(config, decay_steps=saved.decay_horizon)
    return config, notes
