"""`tokshards train` trains, `tokshards sample` samples from a run (also `python -m train [sample]`)."""

from __future__ import annotations

import argparse
import dataclasses
import os

from model.config import PRESETS
from pipeline.cli import config_file
from pipeline.cli.commands import HelpFormatter, flags_of
from pipeline.cli.config_file import add_option as add_config_option
from train.settings import default

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

    print(sample(args.workdir, args.prompt, max_tokens=args.max_tokens, seed=args.seed,
                 top_k=args.top_k or None, temperature=args.temperature))
    return 0


def main(argv: list[str], prog: str = "tokshards train") -> int:
    args, _ = config_file.parse(lambda: parser(prog), argv)
    import jax

    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    from train.trainer import train

    config, notes = _config(args, flags_of(parser(prog)))
    if jax.process_index() == 0:
        for note in notes:
            print(f"train: {note}", flush=True)
    result = train(config)
    print(f"process {result['process_index']} params sha256 {result['params_sha256']}")
    if "plot" in result:
        print(f"final loss {result.get('loss', float('nan')):.4f}"
              + (f", eval loss {result['eval_loss']:.4f}" if "eval_loss" in result else ""))
        print(f"loss curve: {result['plot']}")
        print(f"checkpoints: {result['checkpoint_dir']}")
    return 0
