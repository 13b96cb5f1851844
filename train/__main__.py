"""`python -m train ...` trains; `python -m train sample ...` samples from a run.

Expected failures print one line and exit non-zero.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from model.config import PRESETS, preset


def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train", description="Train a GPT on a prepared directory.")
    p.add_argument("--data", required=True, help="a prepared directory (python -m pipeline prepare)")
    p.add_argument("--workdir", required=True, help="checkpoints, metrics and the config; resumes if present")
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--steps", type=int, default=1000, help="total steps to reach (a resumed run continues to it)")
    p.add_argument("--batch-size", type=int, default=32, help="global batch size, over all processes")
    p.add_argument("--seq-len", type=int, default=None, help="default: the preset's max_seq_len")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--packing", choices=("concat", "document"), default="concat")
    p.add_argument("--mesh", default="", help="e.g. data=4,model=2 (default: all devices on data)")
    p.add_argument("--fsdp", action="store_true", help="also shard parameters along the data axis")
    p.add_argument("--bf16", action="store_true", help="compute in bfloat16 (parameters stay float32)")
    p.add_argument("--dropout", type=float, default=None)
    p.add_argument("--width", type=int, default=None, help="override the preset's width (free sizes)")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--learning-rate", type=float, default=None)
    p.add_argument("--warmup-steps", type=int, default=None)
    p.add_argument("--decay-steps", type=int, default=None,
                   help="the schedule's horizon (default: --steps); keep it when resuming with other --steps")
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--loader-workers", type=int, default=0)
    p.add_argument("--coordinator", default=None, help="multi-host: host:port of process 0")
    p.add_argument("--num-processes", type=int, default=None)
    p.add_argument("--process-id", type=int, default=None)
    return p


def _sample_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train sample", description="Sample from a run's latest checkpoint.")
    p.add_argument("--workdir", required=True)
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--temperature", type=float, default=0.8)
    return p


def _config(args: argparse.Namespace):
    from train.config import TrainConfig
    from train.mesh import parse_mesh

    width = args.width
    model = preset(
        args.preset,
        width=width,
        mlp_width=4 * width if width else None,
        num_layers=args.layers,
        num_heads=args.heads,
        dropout=args.dropout,
        dtype="bfloat16" if args.bf16 else None,
        fsdp=True if args.fsdp else None,
    )
    base = TrainConfig(data_dir=os.path.abspath(args.data), workdir=os.path.abspath(args.workdir), model=model)
    overrides = {
        "preset": args.preset,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len or model.max_seq_len,
        "seed": args.seed,
        "packing": args.packing,
        "mesh": parse_mesh(args.mesh),
        "learning_rate": args.learning_rate,
        "warmup_steps": args.warmup_steps if args.warmup_steps is not None else min(base.warmup_steps, args.steps // 10),
        "decay_steps": args.decay_steps,
        "checkpoint_every": args.checkpoint_every,
        "keep_checkpoints": args.keep_checkpoints,
        "eval_every": args.eval_every,
        "eval_batches": args.eval_batches,
        "log_every": args.log_every,
        "loader_workers": args.loader_workers,
    }
    return dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["sample"]:
            args = _sample_parser().parse_args(argv[1:])
            from train.sample import sample

            print(sample(args.workdir, args.prompt, max_tokens=args.max_tokens, seed=args.seed,
                         top_k=args.top_k or None, temperature=args.temperature))
            return 0
        args = _train_parser().parse_args(argv)
        if args.coordinator:
            import jax

            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
        from train.trainer import train

        result = train(_config(args))
    except ValueError as e:  # LoaderError and config errors are ValueErrors with a clear message
        print(f"train: error: {e}", file=sys.stderr)
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
