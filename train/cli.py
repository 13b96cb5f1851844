"""`tokshards train` trains, `tokshards sample` samples from a run (also
`python -m train [sample]`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from pipeline.cli import config_file, interrupts
from pipeline.cli.arguments import CommandParser, add_settings
from pipeline.cli.commands import HelpFormatter
from schemas.settings import check_values, setting
from train.config import TrainConfig
from train.errors import TrainError
from train.settings import FLAGS, ModelFlags
from train.stopping import record_preemption


def _multi_host(help: str) -> Any:
    return setting(
        None,
        f"multi-host: {help}",
        unset="one process",
        launch="how the processes of this launch meet; a run resumes on any number of them",
    )


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """`tokshards train`'s options that are not settings of the run: where it lives, how its
    processes meet. Each says why the saved config does not hold it."""

    config: str | None = config_file.option("steps = 2000")
    workdir: str | None = setting(
        None,
        "checkpoints, metrics and the config; resumes the run it holds",
        required=True,
        launch="where the run is; config.json is saved in it, recording it as workdir, free to "
        "differ on resume",
    )
    coordinator: str | None = _multi_host("host:port of process 0")
    num_processes: int | None = _multi_host("how many processes")
    process_id: int | None = _multi_host("this process's index")


def parser(prog: str = "tokshards train") -> argparse.ArgumentParser:
    """Settings default to None, so that a resume can tell the flags given (on the command line or
    in --config) from those left out (taken from the saved run); each help says what leaving it out
    does in a new run."""
    p = CommandParser(
        prog=prog,
        description="Train a GPT on a prepared directory. In a workdir that holds a run, settings "
        "not\ngiven are the saved run's, and given ones must match it (except --steps, "
        "--decay-steps,\n--mesh, cadence, --loader-workers, how the step computes "
        "(--gradient-accumulation-steps,\n--remat) and what the run records (--tensorboard, "
        "--profile-*)).",
        epilog="To sample from a run: `tokshards sample --workdir DIR` "
        "(or `python -m train sample`).",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    add_settings(p, LaunchOptions, title="the run (not part of its config)", resume=True)
    add_settings(p, TrainConfig, title="settings (the workdir's config.json)", resume=True)
    add_settings(
        p,
        ModelFlags,
        title="the model (config.json's model: the preset's, with these over it)",
        resume=True,
    )
    return p


@dataclasses.dataclass(frozen=True)
class SampleOptions:
    """`tokshards sample`'s options; none is saved."""

    workdir: str | None = setting(
        None, "a training run's workdir (tokshards train --workdir)", required=True
    )
    prompt: str = setting("Once upon a time", "the text to continue")
    max_tokens: int = setting(100, "tokens to generate", minimum=1)
    seed: int = setting(0, "seeds the sampling", minimum=0, below=2**63)
    top_k: int = setting(40, "sample among the k likeliest tokens; 0 for all", minimum=0)
    temperature: float = setting(
        0.8, "divides the logits; lower is more conservative, 0 the likeliest token", minimum=0
    )


def sample_parser(prog: str = "tokshards sample") -> CommandParser:
    p = CommandParser(
        prog=prog,
        description="Continue a prompt with a run's latest checkpoint.",
        formatter_class=HelpFormatter,
    )
    add_settings(p, SampleOptions)
    return p


def _config(args: argparse.Namespace):
    """The run's config: the given settings resolved against the run saved in the workdir.

    Every process resolves it (all read the saved config before any writes it) and they agree.
    """
    from pipeline.load.data_spec import parse_data_spec
    from train.config import load_saved
    from train.mesh import parse_mesh
    from train.processes import agreed
    from train.settings import resolve

    def settle():
        given = _given(args)
        given["workdir"] = os.path.abspath(args.workdir)
        if "data" in given:
            given["data"] = tuple(
                s if "://" in s.path else dataclasses.replace(s, path=os.path.abspath(s.path))
                for s in parse_data_spec(given["data"])
            )
        if "mesh" in given:
            given["mesh"] = parse_mesh(given["mesh"])
        return resolve(given, load_saved(given["workdir"]))

    return agreed(settle)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given, on the command line or in --config, by name."""
    return {name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None}


def _note(text: str) -> None:
    """A line about the run, on stderr with its progress lines: stdout holds what was asked for."""
    print(text, file=sys.stderr, flush=True)


def sample_main(argv: list[str], prog: str = "tokshards sample") -> int:
    args = sample_parser(prog).parse_args(argv)
    check_values(SampleOptions, vars(args))  # before JAX loads
    with interrupts.deferred():
        from train.sample import sample

    print(
        sample(
            args.workdir,
            args.prompt,
            max_tokens=args.max_tokens,
            seed=args.seed,
            top_k=args.top_k or None,
            temperature=args.temperature,
        )
    )
    return 0


def main(argv: list[str], prog: str = "tokshards train") -> int:
    record_preemption()  # SIGTERM: save and stop (train/stopping.py)
    args, _ = config_file.parse(lambda: parser(prog), argv)
    # A value out of its declared range is refused now, in a fraction of a second, not after JAX,
    # Flax and Orbax have loaded (seconds, a minute on a loaded machine).
    for declared in (TrainConfig, ModelFlags):
        check_values(declared, _given(args))
    with interrupts.deferred():
        import jax

        from train.trainer import train

    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)

    try:
        config, notes = _config(args)
        if jax.process_index() == 0:
            for note in notes:
                _note(f"train: {note}")
        result = train(config)
    except OSError as e:  # the workdir cannot be written
        raise TrainError(f"{e.strerror}: {e.filename}" if e.filename else str(e)) from None
    if jax.process_count() > 1:  # what the processes' logs are compared by
        _note(f"process {result['process_index']} params sha256 {result['params_sha256']}")
    if result.get("already") and result["process_index"] == 0:
        past = (
            f", past --steps {config.steps}"
            if result["step"] > config.steps
            else f" of {config.steps}"
        )
        _note(
            f"train: already at step {result['step']}{past}; nothing to train "
            "(--steps sets a later end)"
        )
    if "profile" in result:
        _note(f"profile: {result['profile']} (TensorBoard's profile plugin, XProf or Perfetto)")
    if "tensorboard" in result:
        _note(f"tensorboard: tensorboard --logdir {result['tensorboard']}")
    if "plot" in result:
        _note(
            f"final loss {result.get('loss', float('nan')):.4f}"
            + (f", eval loss {result['eval_loss']:.4f}" if "eval_loss" in result else "")
        )
        _note(f"loss curve: {result['plot']}")
        _note(f"checkpoints: {result['checkpoint_dir']}")
    return 0
