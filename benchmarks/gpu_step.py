"""Our train step and our training loop against nanoGPT's PyTorch step, in one run, on one device.

Three measurements at the same model size, batch and sequence length:

- nanoGPT's step, written here from its published GPT-2 architecture and training settings:
  pre-LayerNorm blocks with `F.scaled_dot_product_attention(is_causal=True)`, GELU MLP, biases,
  the output tied to the token embedding, GPT-2 initialization; bf16 autocast, fused AdamW
  (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on matrices), gradient clipping at 1.0, and the
  model under `torch.compile`. Only where PyTorch is installed (it is not a dependency).
- our isolated step (`train.step.Steps`) on a constant batch, with concat packing and with
  document packing (segment ids and restarting positions, documents of ~300 tokens);
- `python -m train` at its default cadence (a log row every step, evaluation and a checkpoint every
  200 steps and at the last), on synthetic prepared data, its tokens/s from its own metrics after
  the first steps: over all of them and at its median step, and the seconds a checkpoint holds the
  loop (async on accelerators: the copy off the device).

Each prints ms/step, tokens/s and MFU (where the device's peak is known), then the ratios. On a
CUDA GPU it also checks cuDNN's attention against XLA's with a materialized mask.

    python benchmarks/gpu_step.py [--preset gpt2] [--batch-size 16] [--seq-len 1024]
    python benchmarks/gpu_step.py --preset tiny --batch-size 4 --seq-len 128 \
--train-steps 12   # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # `synthetic`: prepared sources from token ids

from model.attention import causal_attention, choose, materialized_attention, platform  # noqa: E402
from model.config import GPTConfig, preset  # noqa: E402
from train.config import TrainConfig  # noqa: E402
from train.mesh import global_batch, make_mesh  # noqa: E402
from train.metrics import METRICS_NAME, peak_flops, read_rows  # noqa: E402
from train.settings import default  # noqa: E402
from train.step import Steps  # noqa: E402
from train.trainer import build  # noqa: E402

GPT2_VOCAB = 50257


def _median_seconds(
    step: Callable[[], object], sync: Callable[[object], None], rounds: int, per_round: int
) -> float:
    """Median over rounds of the mean time per step, each round ending when its last step is
    done."""
    for _ in range(2):  # compile, warm up
        sync(step())
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        out = None
        for _ in range(per_round):
            out = step()
        sync(out)
        times.append((time.perf_counter() - began) / per_round)
    return statistics.median(times)


def torch_reference(
    config: GPTConfig, batch_size: int, seq_len: int, rounds: int, per_round: int
) -> float | None:
    """nanoGPT's step at `config`'s sizes; None without PyTorch."""
    try:
        import torch
        import torch.nn.functional as F
        from torch import nn
    except ImportError:
        return None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    d, heads, layers, vocab = (
        config.width,
        config.num_heads,
        config.num_layers,
        config.padded_vocab_size,
    )

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = (
                z.view(b, t, heads, c // heads).transpose(1, 2)
                for z in self.c_attn(x).split(c, dim=2)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), SelfAttention(), nn.LayerNorm(d)
            self.mlp = nn.Sequential(
                nn.Linear(d, config.mlp_width), nn.GELU(), nn.Linear(config.mlp_width, d)
            )

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(config.max_seq_len, d)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = (
                        0.02 / math.sqrt(2 * layers)
                        if name.endswith(("attn.c_proj.weight", "mlp.2.weight"))
                        else 0.02
                    )
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    torch.manual_seed(0)
    model = GPT().to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), fused=True)
    compiled = torch.compile(model)
    tokens = torch.randint(0, GPT2_VOCAB, (batch_size, seq_len + 1), device=device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = compiled(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync(_):
        if device == "cuda":
            torch.cuda.synchronize()

    return _median_seconds(step, sync, rounds, per_round)


def _documents(rng: np.random.Generator, batch_size: int, seq_len: int) -> dict[str, np.ndarray]:
    """Segment ids and positions of rows packed with documents of ~300 tokens."""
    segments, positions = (
        np.zeros((batch_size, seq_len), np.int32),
        np.zeros((batch_size, seq_len), np.int32),
    )
    for row in range(batch_size):
        start, segment = 0, 1
        while start < seq_len:
            length = min(seq_len - start, max(1, int(rng.exponential(300))))
            segments[row, start : start + length] = segment
            positions[row, start : start + length] = np.arange(length)
            start, segment = start + length, segment + 1
    return {"segment_ids": segments, "positions": positions}


def our_step(
    config: GPTConfig,
    batch_size: int,
    seq_len: int,
    rounds: int,
    per_round: int,
    *,
    documents: bool,
) -> float:
    train_config = TrainConfig(
        data="-", workdir="-", model=config, seq_len=seq_len, batch_size=batch_size
    )
    mesh = make_mesh(())
    steps = Steps(*build(train_config, mesh))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, GPT2_VOCAB, (batch_size, seq_len + 1)).astype(np.int32)
    host = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        **(_documents(rng, batch_size, seq_len) if documents else {}),
    }
    arrays, key = steps.arrays, jax.random.key(0)
    with jax.set_mesh(mesh):
        batch = global_batch(host, mesh)

        def step():
            nonlocal arrays
            arrays, metrics = steps.train(arrays, batch, key, np.int32(1))
            return metrics["loss"]

        return _median_seconds(step, jax.block_until_ready, rounds, per_round)


def train_loop(args: argparse.Namespace, root: str) -> dict:
    """Seconds per step of `python -m train` at its default cadence, from its own metrics after 10
    steps: over all of them, and the median step; and the loop's time beyond that median in the
    steps right after a checkpoint (the save's wait: copying the state off the device)."""
    from support.synthetic import write_prepared

    rng = np.random.default_rng(0)
    documents = [rng.integers(0, GPT2_VOCAB - 1, int(rng.integers(100, 2000))) for _ in range(3000)]
    data = os.path.join(root, "data")
    write_prepared(
        data,
        {"train": documents, "validation": documents[:50]},
        n_vocab=GPT2_VOCAB,
        eot_id=GPT2_VOCAB - 1,
    )
    workdir = os.path.join(root, "run")
    command = [
        sys.executable,
        "-m",
        "train",
        "--data",
        data,
        "--workdir",
        workdir,
        "--preset",
        args.preset,
        "--bf16",
        "--batch-size",
        str(args.batch_size),
        "--seq-len",
        str(args.seq_len),
        "--steps",
        str(args.train_steps),
        "--checkpoint-every",
        str(args.checkpoint_every),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    rows = [
        r for r in read_rows(os.path.join(workdir, METRICS_NAME)) if "loss" in r and r["step"] > 10
    ]
    spans = [
        (a["step"], b["step"] - a["step"], args.batch_size * args.seq_len * (b["step"] - a["step"]))
        for a, b in zip(rows, rows[1:])
    ]
    seconds = [tokens / b["tokens_per_s"] for (_, _, tokens), b in zip(spans, rows[1:])]
    median = statistics.median(s / steps for (_, steps, _), s in zip(spans, seconds))
    after_checkpoints = [
        s - median * steps
        for (before, steps, _), s in zip(spans, seconds)
        if before % args.checkpoint_every == 0
    ]
    return {
        "overall": sum(seconds) / sum(steps for _, steps, _ in spans),
        "median": median,
        "checkpoints": after_checkpoints,
    }


def check_attention(config: GPTConfig, seq_len: int) -> None:
    """cuDNN's attention (where this device runs it) against XLA's with a materialized mask."""
    head = config.width // config.num_heads
    for documents in (False, True):
        implementation, why = choose(
            platform(),
            dtype=config.compute_dtype,
            head_dim=head,
            seq_len=seq_len,
            segments=documents,
        )
        name = "document packing" if documents else "concat"
        if implementation != "cudnn":
            print(f"attention ({name}): XLA, {why}")
            continue
        keys = jax.random.split(jax.random.key(0), 4)
        q, k, v, g = (
            jax.random.normal(key, (2, seq_len, config.num_heads, head)).astype(jnp.bfloat16)
            for key in keys
        )
        segments = (
            jnp.asarray(_documents(np.random.default_rng(1), 2, seq_len)["segment_ids"])
            if documents
            else None
        )

        def loss(f, q, k, v, segments=segments, g=g):
            return (f(q, k, v, segments).astype(jnp.float32) * g.astype(jnp.float32)).sum()

        ours = jax.jit(
            jax.value_and_grad(lambda *a: loss(causal_attention, *a), argnums=(0, 1, 2))
        )(q, k, v)
        reference = jax.jit(
            jax.value_and_grad(lambda *a: loss(materialized_attention, *a), argnums=(0, 1, 2))
        )(q, k, v)
        diffs = [
            float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))
            for a, b in zip(jax.tree.leaves(ours[1]), jax.tree.leaves(reference[1]))
        ]
        print(
            f"attention ({name}): cuDNN; gradients' largest difference from XLA's masked attention "
            f"{max(diffs):.3g} (bf16)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="gpt2")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps-per-round", type=int, default=10)
    parser.add_argument(
        "--train-steps", type=int, default=250, help="steps of the python -m train run"
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=default("checkpoint_every"),
        help="the python -m train run's (its default)",
    )
    args = parser.parse_args()
    config = preset(args.preset, dtype="bfloat16", vocab_size=GPT2_VOCAB, max_seq_len=args.seq_len)
    tokens_per_step = args.batch_size * args.seq_len
    device = jax.devices()[0].device_kind
    peak = peak_flops(device)
    flops_per_token = config.flops_per_token(args.seq_len)
    print(
        f"{device} x{jax.device_count()}; {args.preset} preset ({config.num_params() / 1e6:.1f}M "
        f"parameters), bf16, batch {args.batch_size} x {args.seq_len}; median of {args.rounds} "
        f"rounds of {args.steps_per_round} steps"
    )
    check_attention(config, args.seq_len)
    results: dict[str, float] = {}  # name -> seconds per step
    reference = torch_reference(
        config, args.batch_size, args.seq_len, args.rounds, args.steps_per_round
    )
    if reference is None:
        print("PyTorch is not installed: no nanoGPT reference")
    else:
        results["nanoGPT step (PyTorch, torch.compile)"] = reference
    results["ours, isolated step (concat)"] = our_step(
        config, args.batch_size, args.seq_len, args.rounds, args.steps_per_round, documents=False
    )
    results["ours, isolated step (document packing)"] = our_step(
        config, args.batch_size, args.seq_len, args.rounds, args.steps_per_round, documents=True
    )
    with tempfile.TemporaryDirectory() as root:
        loop = train_loop(args, root)
    results["python -m train, default cadence"] = loop["overall"]
    results["python -m train, median step"] = loop["median"]
    print(f"{'':42} {'ms/step':>9} {'tokens/s':>12} {'MFU':>7}")
    for name, seconds in results.items():
        mfu = (
            f"{flops_per_token * tokens_per_step / seconds / (peak * jax.device_count()):.1%}"
            if peak
            else "-"
        )
        print(f"{name:42} {seconds * 1e3:>9.1f} {tokens_per_step / seconds:>12,.0f} {mfu:>7}")
    ours = results["ours, isolated step (concat)"]
    if reference is not None:
        print(f"ours / nanoGPT, speed: {reference / ours:.2f} (goal: at least 1.0)")
    print(
        "python -m train / isolated step, speed: "
        f"{ours / results['python -m train, default cadence']:.2f} (goal: at least 0.95); its "
        f"median step: {ours / loop['median']:.2f}"
        + (
            "; checkpoints' waits in the loop: "
            + ", ".join(f"{seconds:.2f}" for seconds in loop["checkpoints"])
            + " s"
            if loop["checkpoints"]
            else ""
        )
    )
    print(
        "document packing / concat, step time: "
        f"{results['ours, isolated step (document packing)'] / ours:.2f} (goal: at most 1.2)"
    )
    print(json.dumps({name: round(seconds * 1e3, 2) for name, seconds in results.items()}))


if __name__ == "__main__":
    main()
