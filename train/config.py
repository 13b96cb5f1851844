"""The trainer's one typed config: saved into the workdir, checked again on resume."""

from __future__ import annotations

import dataclasses
import json
import os

from model.config import PRESETS, REMAT_POLICIES, GPTConfig
from pipeline.load import PACKINGS, open_sources
from pipeline.load.data_spec import DataSource, parse_data_spec
from schemas.errors import SettingError
from schemas.settings import check, setting
from train.errors import TrainError, TrainUsageError

CONFIG_NAME = "config.json"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """`data`: the sources to train on (`parse_data_spec`; a spec string is parsed here).

    Each setting with a flag is declared here (schemas/settings.py): `tokshards train`'s options and
    config-file keys derive from it. Its field names are config.json's keys: saved runs read back.
    """

    data: tuple[DataSource, ...] = setting(
        help="a prepared directory (tokshards prepare), or a mixture: NAME=WEIGHT:PATH,... or a "
        ".json file",
        parse=str,
        unset="the saved run's; required for a new run",
    )
    workdir: str  # where the run lives: a launch option of `tokshards train`
    model: GPTConfig  # the preset's, with the model flags (train/settings.py) over it
    preset: str = setting("tiny", "model size", choices=tuple(sorted(PRESETS)))
    steps: int = setting(1000, "total steps to reach; a resumed run continues to it", minimum=1)
    batch_size: int = setting(32, "global batch size, over all processes", minimum=1)
    seq_len: int = setting(256, "tokens per sequence", unset="the preset's max_seq_len", minimum=1)
    seed: int = setting(0, "model initialization and data order", minimum=0, below=2**63)
    packing: str = setting(
        "concat",
        "concat: documents run on across sequences; document: each sequence starts one, packed "
        "best fit (document-first-fit: first fit, in draw order)",
        choices=PACKINGS,
    )
    mesh: tuple[tuple[str, int], ...] = setting(
        (), "e.g. data=4,model=2", parse=str, unset="all devices on data"
    )
    learning_rate: float = setting(1e-3, "peak learning rate", above=0)
    min_learning_rate: float = setting(1e-4, "where the cosine decay ends", minimum=0)
    warmup_steps: int = setting(
        100, "linear warmup", unset="--steps / 10, at most {default}", minimum=0
    )
    decay_steps: int | None = setting(
        None, "the schedule's horizon", unset="--steps; on resume, the saved run's", minimum=1
    )
    weight_decay: float = setting(
        0.1, "AdamW's decoupled weight decay, on matrices only", minimum=0
    )
    grad_clip: float = setting(1.0, "the largest global gradient norm, clipped above", above=0)
    beta2: float = setting(0.95, "AdamW's second-moment decay; beta1 is 0.9", minimum=0, below=1)
    checkpoint_every: int = setting(200, "steps between checkpoints", minimum=1)
    keep_checkpoints: int = setting(3, "checkpoints kept", minimum=1)
    eval_every: int = setting(200, "steps between evaluations", minimum=1)
    eval_batches: int = setting(8, "validation batches per eval, 0 for none", minimum=0)
    log_every: int = setting(1, "steps between progress lines", minimum=1)
    loader_workers: int = setting(0, "prefetch processes of the loader", minimum=0)
    # How the step computes, not what: free to change on resume (train/settings.py).
    gradient_accumulation_steps: int = setting(
        1, "micro-batches per step: the batch is split, their gradients summed", minimum=1
    )
    remat: str = setting(
        "none",
        "recompute each block's activations in the backward pass: full (keep its input), dots "
        "(also its matmuls' outputs); --remat alone is full",
        choices=REMAT_POLICIES,
        bare="full",
    )
    # What the run records besides metrics.jsonl.
    tensorboard: bool = setting(
        True, "TensorBoard event files of every metrics row in WORKDIR/tensorboard"
    )
    # For one start alone: a resume that does not give them takes these defaults, not the saved
    # run's.
    profile_steps: int = setting(
        0,
        "trace this many steps with jax.profiler into WORKDIR/tensorboard",
        unset="none",
        minimum=0,
    )
    profile_skip_steps: int = setting(
        1,
        "steps run before the trace begins, at each start",
        unset="{default}, the step that compiles",
        minimum=0,
    )

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            object.__setattr__(self, "data", parse_data_spec(self.data))
        check(self)
        if self.seq_len > self.model.max_seq_len:
            raise SettingError(
                "seq_len",
                self.seq_len,
                f"must be at most the model's max_seq_len, {self.model.max_seq_len}; a larger "
                "{preset} has more",
                preset=self.preset,
            )
        self._check_optimizer()
        if self.batch_size % self.gradient_accumulation_steps:
            raise SettingError(
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
                "must divide {batch_size}",
                batch_size=self.batch_size,
            )
        horizon = "steps" if self.decay_steps is None else "decay_steps"
        if self.decay_horizon <= self.warmup_steps:
            raise SettingError(
                horizon,
                self.decay_horizon,
                "must exceed {warmup_steps}",
                warmup_steps=self.warmup_steps,
            )

    def _check_optimizer(self) -> None:
        """What the declared limits do not say: a bound that another setting sets."""
        if self.min_learning_rate > self.learning_rate:
            raise SettingError(
                "min_learning_rate",
                self.min_learning_rate,
                "must be in [0, {learning_rate}]",
                learning_rate=self.learning_rate,
            )

    @property
    def source_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.data)

    @property
    def decay_horizon(self) -> int:
        """The step where the cosine decay ends: `decay_steps`, or `steps` when not given."""
        return self.steps if self.decay_steps is None else self.decay_steps

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        data = json.loads(text)
        data["model"] = GPTConfig(**data["model"])
        data["data"] = tuple(
            DataSource(**{**source, "stages": tuple(map(tuple, source.get("stages", ())))})
            for source in data["data"]
        )
        data["mesh"] = tuple(tuple(axis) for axis in data["mesh"])
        return cls(**data)


def data_vocab_size(data: tuple[DataSource, ...] | str) -> int:
    """The vocabulary of the data's tokenizer (its largest id + 1; the model pads it to a multiple
    of 128). The sources are checked to share one tokenizer."""
    sources = parse_data_spec(data) if isinstance(data, str) else data
    return open_sources(sources)[0].tokenizer.n_vocab


# Changing these on resume would change what an uninterrupted run computes.
_MUST_MATCH = (
    "data",
    "model",
    "batch_size",
    "seq_len",
    "seed",
    "packing",
    "learning_rate",
    "min_learning_rate",
    "warmup_steps",
    "weight_decay",
    "grad_clip",
    "beta2",
)


def load_saved(workdir: str) -> TrainConfig | None:
    """The config of the run in `workdir`, or None when it holds none."""
    path = os.path.join(workdir, CONFIG_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    try:
        return TrainConfig.from_json(text)
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise TrainError(
            f"{path} is not a config this trainer can read ({e!r}); use another --workdir"
        ) from None


def check_resume(saved: TrainConfig, config: TrainConfig) -> None:
    """Refuses a resume that would compute something else than continuing the saved run.

    `steps` may change (stop earlier, or go on); so may logging, checkpoint and eval cadence, the
    mesh and the loader's workers. The schedule's horizon moves only when `decay_steps` says so:
    other `steps` with no `decay_steps` would stretch the saved schedule unasked.
    """
    changed = [k for k in _MUST_MATCH if getattr(saved, k) != getattr(config, k)]
    if changed:
        raise TrainUsageError(
            f"{config.workdir} holds a run with different {', '.join(changed)}; "
            "use the same settings to resume, or another --workdir"
        )
    if config.decay_steps is None and config.decay_horizon != saved.decay_horizon:
        raise TrainUsageError(
            f"steps={config.steps} without decay_steps would move the schedule's horizon from step "
            f"{saved.decay_horizon}; set decay_steps={saved.decay_horizon} to keep it, or another "
            "to move it"
        )


def write_config(config: TrainConfig) -> None:
    os.makedirs(config.workdir, exist_ok=True)
    path = os.path.join(config.workdir, CONFIG_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(config.to_json())
    os.replace(tmp, path)
