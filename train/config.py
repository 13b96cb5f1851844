"""The trainer's one typed config: saved into the workdir, checked again on resume."""

from __future__ import annotations

import dataclasses
import json
import math
import os

from model.config import REMAT_POLICIES, GPTConfig
from pipeline.load.data_spec import DataSource, parse_data_spec
from pipeline.load.loader import open_sources

CONFIG_NAME = "config.json"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """`data`: the sources to train on (`parse_data_spec`; a spec string is parsed here)."""

    data: tuple[DataSource, ...]
    workdir: str
    model: GPTConfig
    preset: str = "tiny"
    steps: int = 1000
    batch_size: int = 32
    seq_len: int = 256
    seed: int = 0
    packing: str = "concat"
    mesh: tuple[tuple[str, int], ...] = ()
    learning_rate: float = 1e-3
    min_learning_rate: float = 1e-4
    warmup_steps: int = 100
    decay_steps: int | None = None
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    beta2: float = 0.95
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    eval_every: int = 200
    eval_batches: int = 8
    log_every: int = 1
    loader_workers: int = 0
    # How the step computes, not what: free to change on resume.
    gradient_accumulation_steps: int = 1  # micro-batches per step: the batch is split, their gradients summed
    remat: str = "none"  # recompute each block's activations in the backward pass: "none", "full" or "dots"
    # What the run records besides metrics.jsonl.
    tensorboard: bool = True  # TensorBoard event files of every metrics row in WORKDIR/tensorboard
    profile_steps: int = 0  # steps traced by jax.profiler into WORKDIR/tensorboard/plugins/profile; 0: none
    profile_skip_steps: int = 1  # steps of each (re)start before the trace begins (the first one compiles)

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            object.__setattr__(self, "data", parse_data_spec(self.data))
        for name in ("steps", "batch_size", "seq_len", "checkpoint_every", "keep_checkpoints", "eval_every", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 (got {getattr(self, name)})")
        if self.seq_len > self.model.max_seq_len:
            raise ValueError(
                f"seq_len {self.seq_len} exceeds the model's max_seq_len {self.model.max_seq_len}; "
                "lower --seq-len or choose a larger preset"
            )
        self._check_optimizer()
        self._check_computation()
        if self.eval_batches < 0:
            raise ValueError(f"eval_batches must be non-negative, 0 to turn evaluation off (got {self.eval_batches=})")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be non-negative (got {self.warmup_steps=})")
        if self.decay_horizon <= self.warmup_steps:
            raise ValueError(
                f"the decay horizon must exceed warmup_steps (got {self.decay_horizon=}, {self.warmup_steps=})"
            )

    def _check_optimizer(self) -> None:
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be positive (got learning_rate={self.learning_rate})")
        if not 0 <= self.min_learning_rate <= self.learning_rate:
            raise ValueError(
                f"min_learning_rate must be in [0, learning_rate] (got min_learning_rate={self.min_learning_rate}, "
                f"learning_rate={self.learning_rate})"
            )
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be non-negative (got weight_decay={self.weight_decay})")
        if not (math.isfinite(self.grad_clip) and self.grad_clip > 0):
            raise ValueError(f"grad_clip must be positive (got grad_clip={self.grad_clip})")
        if not 0 <= self.beta2 < 1:
            raise ValueError(f"beta2 must be in [0, 1) (got beta2={self.beta2})")

    def _check_computation(self) -> None:
        if self.loader_workers < 0:
            raise ValueError(f"loader_workers must be non-negative (got loader_workers={self.loader_workers})")
        accumulation = self.gradient_accumulation_steps
        if accumulation < 1 or self.batch_size % accumulation:
            raise ValueError(
                "gradient_accumulation_steps must be at least 1 and divide batch_size "
                f"(got gradient_accumulation_steps={accumulation}, batch_size={self.batch_size})"
            )
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat must be one of {', '.join(REMAT_POLICIES)} (got remat={self.remat})")
        for name in ("profile_steps", "profile_skip_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative (got {name}={getattr(self, name)})")

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
            DataSource(**{**source, "stages": tuple(map(tuple, source.get("stages", ())))}) for source in data["data"]
        )
        data["mesh"] = tuple(tuple(axis) for axis in data["mesh"])
        return cls(**data)


def data_vocab_size(data: tuple[DataSource, ...] | str) -> int:
    """The vocabulary of the data's tokenizer (its largest id + 1; the model pads it to a multiple of
    128). The sources are checked to share one tokenizer."""
    sources = parse_data_spec(data) if isinstance(data, str) else data
    return open_sources(sources)[0].tokenizer.n_vocab


# Changing these on resume would change what an uninterrupted run computes.
_MUST_MATCH = ("data", "model", "batch_size", "seq_len", "seed", "packing", "learning_rate",
               "min_learning_rate", "warmup_steps", "weight_decay", "grad_clip", "beta2")


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
        raise ValueError(f"{path} is not a config this trainer can read ({e!r}); use another --workdir") from None


def check_resume(saved: TrainConfig, config: TrainConfig) -> None:
    """Refuses a resume that would compute something else than continuing the saved run.

    `steps` may change (stop earlier, or go on); so may logging, checkpoint and eval cadence, the
    mesh and the loader's workers. The schedule's horizon moves only when `decay_steps` says so:
    other `steps` with no `decay_steps` would stretch the saved schedule unasked.
    """
    changed = [k for k in _MUST_MATCH if getattr(saved, k) != getattr(config, k)]
    if changed:
        raise ValueError(
            f"{config.workdir} holds a run with different {', '.join(changed)}; "
            "use the same settings to resume, or another --workdir"
        )
    if config.decay_steps is None and config.decay_horizon != saved.decay_horizon:
        raise ValueError(
            f"steps={config.steps} without decay_steps would move the schedule's horizon from step "
            f"{saved.decay_horizon}; set decay_steps={saved.decay_horizon} to keep it, or another to move it"
        )


def write_config(config: TrainConfig) -> None:
    os.makedirs(config.workdir, exist_ok=True)
    path = os.path.join(config.workdir, CONFIG_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(config.to_json())
    os.replace(tmp, path)
