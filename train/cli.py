"""`tokshards train` trains, `tokshards sample` samples from a run (also `python -m train [sample]`).

Expected failures print one line and exit non-zero.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from model.config import PRESETS, REMAT_POLICIES
from pipeline.cli import config_file, interrupts
from pipeline.cli.commands import HelpFormatter
from pipeline.cli.config_file import add_option as add_config_option
from pipeline.cli.flag_errors import flag_message, flags_of
from train.settings import default
from train.stopping import PREEMPTED_STATUS, CheckpointError, Diverged, Preempted, record_preemption

# Command-line options that are not run settings.
_LAUNCH = ("coordinator", "num_processes", "process_id", config_file.CONFIG)


def parser(prog: str = "tokshards train") -> argparse.ArgumentParser:
    """Settings default to None, so that a resume can tell the flags given (on the command line or
    in --config) from those left out (taken from the saved run); each help says what leaving it out
    does."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Train a GPT on a prepared directory. In a workdir that holds a run, settings not\n"
        "given are the saved run's, and given ones must match it (except --steps, --decay-steps,\n"
        "--mesh, cadence and --loader-workers).",
        epilog="To sample from a run: `tokshards sample --workdir DIR` (or `python -m train sample`).",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )

    def add(flag: str, help: str, **kwargs) -> None:
        p.add_argument(flag, default=None, help=help, **kwargs)

    def new(name: str) -> str:
        return f"default for a new run: {default(name)}"

    add_config_option(p)
    add("--data", "a prepared directory (tokshards prepare), or a mixture: NAME=WEIGHT:PATH,... or a .json "
        "file; required for a new run, default: the saved run's")
    add("--workdir", "checkpoints, metrics and the config; resumes the run it holds", required=True)
    add("--preset", f"model size ({new('preset')})", choices=sorted(PRESETS))
    add("--steps", f"total steps to reach; a resumed run continues to it ({new('steps')})", type=int)
    add("--batch-size", f"global batch size, over all processes ({new('batch_size')})", type=int)
    add("--seq-len", "tokens per sequence (default: the preset's max_seq_len)", type=int)
    add("--seed", f"model initialization and data order ({new('seed')})", type=int)
    add("--packing", f"concat: documents run on across sequences; document: each sequence starts one "
        f"({new('packing')})", choices=("concat", "document"))
    add("--mesh", "e.g. data=4,model=2 (default: all devices on data)")
    add("--fsdp", "also shard parameters along the data axis (default: off)", action=argparse.BooleanOptionalAction)
    add("--bf16", "compute in bfloat16, parameters stay float32 (default: off)", action=argparse.BooleanOptionalAction)
    add("--dropout", "dropout rate (default: the preset's)", type=float)
    add("--width", "override the preset's width (free sizes); the MLP is 4x wide (default: the preset's)", type=int)
    add("--layers", "override the preset's layer count (default: the preset's)", type=int, dest="num_layers")
    add("--heads", "override the preset's head count (default: the preset's)", type=int, dest="num_heads")
    add("--vocab-size", "the model's vocabulary, padded to a multiple of 128 (default: the data's; never "
        "smaller)", type=int)
    add("--learning-rate", f"peak learning rate ({new('learning_rate')})", type=float)
    add("--min-learning-rate", f"where the cosine decay ends (default: {default('min_learning_rate')})", type=float)
    add("--weight-decay", f"AdamW's decoupled weight decay, on matrices only (default: {default('weight_decay')})",
        type=float)
    add("--beta2", f"AdamW's second-moment decay; beta1 is 0.9 (default: {default('beta2')})", type=float)
    add("--grad-clip", f"the largest global gradient norm, clipped above (default: {default('grad_clip')})",
        type=float)
    add("--warmup-steps", f"linear warmup (default: --steps / 10, at most {default('warmup_steps')})", type=int)
    add("--decay-steps", "the schedule's horizon (default: --steps; on resume, the saved run's)", type=int)
    add("--checkpoint-every", f"steps between checkpoints (default: {default('checkpoint_every')})", type=int)
    add("--keep-checkpoints", f"checkpoints kept (default: {default('keep_checkpoints')})", type=int)
    add("--eval-every", f"steps between evaluations (default: {default('eval_every')})", type=int)
    add("--eval-batches", f"validation batches per eval, 0 for none (default: {default('eval_batches')})", type=int)
    add("--log-every", f"steps between progress lines (default: {default('log_every')})", type=int)
    add("--loader-workers", f"prefetch processes of the loader (default: {default('loader_workers')})", type=int)
    add("--gradient-accumulation-steps", "micro-batches per step: the batch is split, their gradients summed "
        f"(default: {default('gradient_accumulation_steps')})", type=int)
    add("--remat", "recompute each block's activations in the backward pass: full (keep its input), dots "
        f"(also its matmuls' outputs); --remat alone is full (default: {default('remat')})", nargs="?",
        const="full", choices=REMAT_POLICIES)
    add("--tensorboard", "TensorBoard event files in WORKDIR/tensorboard (default: on)",
        action=argparse.BooleanOptionalAction)
    add("--profile-steps", "trace this many steps with jax.profiler into WORKDIR/tensorboard (default: none)",
        type=int)
    add("--profile-skip-steps", "steps run before the trace begins (default: "
        f"{default('profile_skip_steps')}, the step that compiles)", type=int)
    add("--coordinator", "multi-host: host:port of process 0 (default: one process)")
    add("--num-processes", "multi-host: how many processes (default: one process)", type=int)
    add("--process-id", "multi-host: this process's index (default: one process)", type=int)
    return p


def sample_parser(prog: str = "tokshards sample") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Continue a prompt with a run's latest checkpoint.",
                                formatter_class=HelpFormatter)
    p.add_argument("--workdir", required=True, help="a training run's workdir (tokshards train --workdir)")
    p.add_argument("--prompt", default="Once upon a time", help="the text to continue")
    p.add_argument("--max-tokens", type=int, default=100, help="tokens to generate")
    p.add_argument("--seed", type=int, default=0, help="seeds the sampling")
    p.add_argument("--top-k", type=int, default=40, help="sample among the k likeliest tokens; 0 for all")
    p.add_argument("--temperature", type=float, default=0.8, help="divides the logits; lower is more conservative")
    return p


def _config(args: argparse.Namespace, flags: dict[str, str]):
    """The run's config: the given settings resolved against the run saved in the workdir.

    Every process resolves it (all read the saved config before any writes it) and they agree.
    """
    from pipeline.load.data_spec import parse_data_spec
    from train.config import load_saved
    from train.mesh import parse_mesh
    from train.processes import agreed
    from train.settings import resolve

    def settle():
        given = {k: v for k, v in vars(args).items() if v is not None and k not in _LAUNCH}
        given["workdir"] = os.path.abspath(given["workdir"])
        if "data" in given:
            given["data"] = tuple(
                s if "://" in s.path else dataclasses.replace(s, path=os.path.abspath(s.path))
                for s in parse_data_spec(given["data"])
            )
        if "mesh" in given:
            given["mesh"] = parse_mesh(given["mesh"])
        return resolve(given, load_saved(given["workdir"]), flags)

    return agreed(settle)


def sample_main(argv: list[str], prog: str = "tokshards sample") -> int:
    args = sample_parser(prog).parse_args(argv)
    from train.sample import sample

    try:
        print(sample(args.workdir, args.prompt, max_tokens=args.max_tokens, seed=args.seed,
                     top_k=args.top_k or None, temperature=args.temperature))
    except ValueError as e:
        print(f"sample: error: {e}", file=sys.stderr)
        return 1
    return 0


def _after_progress() -> str:
    """A line after a progress bar starts on a line of its own."""
    return "\n" if sys.stderr.isatty() else ""


def main(argv: list[str], prog: str = "tokshards train") -> int:
    """Trains; `sample` as the first argument samples instead (`python -m train sample`)."""
    if argv[:1] == ["sample"]:
        return sample_main(argv[1:], f"{prog} sample")
    flags = flags_of(parser(prog))
    record_preemption()  # SIGTERM: save and stop (train/stopping.py)
    try:
        args, _ = config_file.parse(lambda: parser(prog), argv)
        with interrupts.deferred():
            import jax

            from train.trainer import train

        if args.coordinator:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)

        config, notes = _config(args, flags)
        if jax.process_index() == 0:
            for note in notes:
                print(f"train: {note}", flush=True)
        result = train(config)
    except config_file.ConfigFileError as e:  # names the file's keys as written
        print(f"train: error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # LoaderError and config errors are ValueErrors with a clear message
        print(f"train: error: {flag_message(str(e), flags)}", file=sys.stderr)
        return 1
    except (Diverged, CheckpointError) as e:  # the run stopped; what it saved before is whole
        print(f"{_after_progress()}train: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the workdir cannot be written
        print(f"train: error: {e.strerror}: {e.filename}" if e.filename else f"train: error: {e}", file=sys.stderr)
        return 1
    except Preempted as e:
        print(f"{_after_progress()}train: {e}", file=sys.stderr)
        return PREEMPTED_STATUS
    print(f"process {result['process_index']} params sha256 {result['params_sha256']}")
    if result.get("already") and result["process_index"] == 0:
        past = f", past --steps {config.steps}" if result["step"] > config.steps else f" of {config.steps}"
        print(f"train: already at step {result['step']}{past}; nothing to train (--steps sets a later end)")
    if "profile" in result:
        print(f"profile: {result['profile']} (TensorBoard's profile plugin, XProf or Perfetto)")
    if "tensorboard" in result:
        print(f"tensorboard: tensorboard --logdir {result['tensorboard']}")
    if "plot" in result:
        print(f"final loss {result.get('loss', float('nan')):.4f}"
              + (f", eval loss {result['eval_loss']:.4f}" if "eval_loss" in result else ""))
        print(f"loss curve: {result['plot']}")
        print(f"checkpoints: {result['checkpoint_dir']}")
    return 0
