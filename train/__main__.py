"""`python -m train ...` trains; `python -m train sample ...` samples from a run.

Expected failures print one line and exit non-zero.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from model.config import PRESETS
from pipeline.flag_errors import flag_message, flags_of

# Command-line options that are not run settings.
_LAUNCH = ("coordinator", "num_processes", "process_id")


def _train_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The parser and each setting's flag. Settings default to None, so that a resume can tell the
    flags given from those left out (taken from the saved run)."""
    p = argparse.ArgumentParser(
        prog="python -m train",
        description="Train a GPT on a prepared directory. In a workdir that holds a run, settings not "
        "given are the saved run's, and given ones must match it (except --steps, --decay-steps, --mesh, "
        "cadence and --loader-workers).",
    )
    flags: dict[str, str] = {}
    from train.settings import default

    def add(flag: str, help: str, **kwargs) -> None:
        action = p.add_argument(flag, default=None, help=help, **kwargs)
        flags[action.dest] = flag

    add("--data", "a prepared directory (python -m pipeline prepare), or a mixture: NAME=WEIGHT:PATH,... or a "
        ".json file; required for a new run")
    add("--workdir", "checkpoints, metrics and the config; resumes the run it holds", required=True)
    add("--preset", "model size (default: tiny)", choices=sorted(PRESETS))
    add("--steps", "total steps to reach; a resumed run continues to it (default: 1000)", type=int)
    add("--batch-size", "global batch size, over all processes (default: 32)", type=int)
    add("--seq-len", "default: the preset's max_seq_len", type=int)
    add("--seed", "default: 0", type=int)
    add("--packing", "default: concat", choices=("concat", "document"))
    add("--mesh", "e.g. data=4,model=2 (default: all devices on data)")
    add("--fsdp", "also shard parameters along the data axis", action=argparse.BooleanOptionalAction)
    add("--bf16", "compute in bfloat16 (parameters stay float32)", action=argparse.BooleanOptionalAction)
    add("--dropout", "default: the preset's", type=float)
    add("--width", "override the preset's width (free sizes); the MLP is 4x wide", type=int)
    add("--layers", "override the preset's layer count", type=int, dest="num_layers")
    add("--heads", "override the preset's head count", type=int, dest="num_heads")
    add("--vocab-size", "the model's vocabulary, padded to a multiple of 128 (default: the data's; never "
        "smaller)", type=int)
    add("--learning-rate", "peak learning rate (default: 1e-3)", type=float)
    add("--min-learning-rate", f"where the cosine decay ends (default: {default('min_learning_rate')})", type=float)
    add("--weight-decay", f"AdamW's decoupled weight decay, on matrices only (default: {default('weight_decay')})",
        type=float)
    add("--beta2", f"AdamW's second-moment decay; beta1 is 0.9 (default: {default('beta2')})", type=float)
    add("--grad-clip", f"the largest global gradient norm, clipped above (default: {default('grad_clip')})",
        type=float)
    add("--warmup-steps", "default: --steps / 10, at most 100", type=int)
    add("--decay-steps", "the schedule's horizon (default: --steps; on resume, the saved run's)", type=int)
    add("--checkpoint-every", "default: 200", type=int)
    add("--keep-checkpoints", "default: 3", type=int)
    add("--eval-every", "default: 200", type=int)
    add("--eval-batches", "validation batches per eval, 0 for none (default: 8)", type=int)
    add("--log-every", "default: 1", type=int)
    add("--loader-workers", "prefetch processes of the loader (default: 0)", type=int)
    p.add_argument("--coordinator", default=None, help="multi-host: host:port of process 0")
    p.add_argument("--num-processes", type=int, default=None)
    p.add_argument("--process-id", type=int, default=None)
    return p, flags


def _sample_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train sample", description="Sample from a run's latest checkpoint.")
    p.add_argument("--workdir", required=True)
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--temperature", type=float, default=0.8)
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["sample"]:
            args = _sample_parser().parse_args(argv[1:])
            from train.sample import sample

            print(sample(args.workdir, args.prompt, max_tokens=args.max_tokens, seed=args.seed,
                         top_k=args.top_k or None, temperature=args.temperature))
            return 0
        parser, flags = _train_parser()
        args = parser.parse_args(argv)
        import jax

        if args.coordinator:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
        from train.trainer import train

        config, notes = _config(args, flags)
        if jax.process_index() == 0:
            for note in notes:
                print(f"train: {note}", flush=True)
        result = train(config)
    except ValueError as e:  # LoaderError and config errors are ValueErrors with a clear message
        print(f"train: error: {flag_message(str(e), flags_of(_train_parser()[0]))}", file=sys.stderr)
        return 1
    print(f"process {result['process_index']} params sha256 {result['params_sha256']}")
    if "plot" in result:
        print(f"final loss {result.get('loss', float('nan')):.4f}"
              + (f", eval loss {result['eval_loss']:.4f}" if "eval_loss" in result else ""))
        print(f"loss curve: {result['plot']}")
        print(f"checkpoints: {result['checkpoint_dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
