"""What `--remat` saves in memory and costs in time, and what `--gradient-accumulation-steps` costs
per token, on this machine's devices.

Remat: the `gpt2` preset's 12 layers (width 768, vocabulary 50,304 padded) at a batch of 4 x 1024
tokens, one fresh process per policy (none, full, dots), each compiling the trainer's step: XLA's
own figure for the step's temporary memory (the activations kept for the backward pass, the
gradients, the logits). With `--run`, each also runs the step: the process's peak resident memory
(the kernel's count: parameters, AdamW's moments, the batch, the step's temporaries; about 15 GiB
without remat), on an accelerator the device's own peak count, the first step's seconds (compiling
included) and `--steps` more.

Accumulation: the trainer's step on the `minigpt` preset at a global batch of 16 x 256, whole and
in 4 micro-batches of 4 rows, alternating in rounds of the same process: seconds per step, hence
per token (the same tokens either way), and XLA's temporary memory of each.

    python benchmarks/step_memory.py [--steps 2] [--accumulation-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

REMAT_BATCH, REMAT_SEQ = 4, 1024
ACCUMULATION_BATCH, ACCUMULATION_SEQ, MICRO_BATCHES = 16, 256, 4


def _steps(preset_name: str, batch: int, seq: int, **settings):
    """The trainer's steps on one device, a constant random batch, the mesh."""
    import jax
    import numpy as np

    from model.config import preset
    from train.config import TrainConfig
    from train.mesh import global_batch, make_mesh
    from train.step import Steps
    from train.trainer import build

    model = preset(preset_name, max_seq_len=max(seq, 256))
    config = TrainConfig(
        data="-", workdir="-", model=model, seq_len=seq, batch_size=batch, **settings
    )
    mesh = make_mesh(())
    steps = Steps(
        *build(config, mesh), micro_batches=config.gradient_accumulation_steps, remat=config.remat
    )
    tokens = (
        np.random.default_rng(0).integers(0, model.vocab_size, (batch, seq + 1)).astype(np.int32)
    )
    with jax.set_mesh(mesh):
        batch_arrays = global_batch({"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}, mesh)
    return steps, batch_arrays, mesh


def _temporary_bytes(steps, batch, mesh) -> int:
    import jax
    import numpy as np

    with jax.set_mesh(mesh):
        compiled = steps.train.lower(steps.arrays, batch, jax.random.key(0), np.int32(1)).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def _timed(steps, batch, mesh, arrays, count: int):
    """Runs `count` steps; returns the new arrays and the seconds per step."""
    import jax
    import numpy as np

    with jax.set_mesh(mesh):
        began = time.perf_counter()
        for step in range(count):
            arrays, metrics = steps.train(arrays, batch, jax.random.key(0), np.int32(step + 2))
        jax.block_until_ready(metrics)
    return arrays, (time.perf_counter() - began) / count


def remat_child(policy: str, count: int) -> dict:
    """In its own process: one policy's figures."""
    import resource

    import jax

    steps, batch, mesh = _steps("gpt2", REMAT_BATCH, REMAT_SEQ, remat=policy)
    out = {"policy": policy, "temporary_bytes": _temporary_bytes(steps, batch, mesh)}
    if count is not None:
        arrays, out["first_step_seconds"] = _timed(steps, batch, mesh, steps.arrays, 1)  # compiles
        out["seconds_per_step"] = _timed(steps, batch, mesh, arrays, count)[1] if count else None
        out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        stats = jax.devices()[0].memory_stats() or {}  # an accelerator's own count; none on CPU
        if "peak_bytes_in_use" in stats:
            out["device_peak_bytes"] = stats["peak_bytes_in_use"]
    return out


def accumulation(rounds: int, per_round: int) -> dict:
    whole = _steps("minigpt", ACCUMULATION_BATCH, ACCUMULATION_SEQ)
    split = _steps(
        "minigpt", ACCUMULATION_BATCH, ACCUMULATION_SEQ, gradient_accumulation_steps=MICRO_BATCHES
    )
    out = {
        "whole": {"temporary_bytes": _temporary_bytes(*whole), "seconds": []},
        "split": {"temporary_bytes": _temporary_bytes(*split), "seconds": []},
    }
    arrays = {
        "whole": _timed(*whole, whole[0].arrays, 1)[0],
        "split": _timed(*split, split[0].arrays, 1)[0],
    }
    for _ in range(rounds):
        for name, (steps, batch, mesh) in (("whole", whole), ("split", split)):
            arrays[name], seconds = _timed(steps, batch, mesh, arrays[name], per_round)
            out[name]["seconds"].append(seconds)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", action="store_true", help="also run each remat policy's step")
    parser.add_argument(
        "--steps",
        type=int,
        default=2,
        help="with --run: timed steps per remat policy, after the "
        "first (0: the first alone, which compiles)",
    )
    parser.add_argument("--part", choices=("remat", "accumulation", "both"), default="both")
    parser.add_argument("--accumulation-rounds", type=int, default=3)
    parser.add_argument("--steps-per-round", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(remat_child(args.child, args.steps if args.run else None)))
        return
    import jax

    print(f"{jax.devices()[0].device_kind} x{jax.device_count()}, {os.cpu_count()} CPUs")
    if args.part != "accumulation":
        print(
            f"remat: gpt2 preset (12 layers, width 768), batch {REMAT_BATCH} x {REMAT_SEQ}, one "
            "process per policy"
        )
        print(
            "| policy | XLA temporaries | peak RSS | device peak | first step (compiling) "
            "| s/step |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for policy in ("none", "full", "dots"):
            child = [sys.executable, __file__, "--child", policy, "--steps", str(args.steps)] + [
                "--run"
            ] * args.run
            r = json.loads(
                subprocess.run(
                    child, capture_output=True, text=True, check=True
                ).stdout.splitlines()[-1]
            )
            rss, device_peak, first, per_step = (
                f"{r['peak_rss_bytes'] / 2**30:.2f} GiB" if "peak_rss_bytes" in r else "",
                f"{r['device_peak_bytes'] / 2**30:.2f} GiB" if "device_peak_bytes" in r else "",
                f"{r['first_step_seconds']:.1f} s" if "first_step_seconds" in r else "",
                f"{r['seconds_per_step']:.3g}" if r.get("seconds_per_step") else "",
            )
            print(
                f"| {policy} | {r['temporary_bytes'] / 2**30:.2f} GiB | {rss} | {device_peak} "
                f"| {first} | {per_step} |",
                flush=True,
            )
    if args.part == "remat":
        return
    result = accumulation(args.accumulation_rounds, args.steps_per_round)
    tokens = ACCUMULATION_BATCH * ACCUMULATION_SEQ
    whole, split = (statistics.median(result[name]["seconds"]) for name in ("whole", "split"))
    print(
        f"accumulation: minigpt preset, global batch {ACCUMULATION_BATCH} x {ACCUMULATION_SEQ}, "
        f"whole against {MICRO_BATCHES} micro-batches, {args.accumulation_rounds} alternating "
        f"rounds of {args.steps_per_round} steps"
    )
    for name, seconds in (("whole", whole), (f"{MICRO_BATCHES} micro-batches", split)):
        key = "whole" if name == "whole" else "split"
        print(
            f"  {name}: {seconds * 1e3:.0f} ms/step, {seconds / tokens * 1e6:.1f} us/token, XLA "
            f"temporaries {result[key]['temporary_bytes'] / 2**20:.0f} MiB (rounds: "
            + ", ".join(f"{s * 1e3:.0f}" for s in result[key]["seconds"])
            + " ms)"
        )
    print(
        f"  cost per token of {MICRO_BATCHES} micro-batches: {split / whole:.3f}x the whole batch's"
    )


if __name__ == "__main__":
    main()
