"""Sampling a continuation from the latest checkpoint of a run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from model.gpt import GPT
from schemas.errors import SettingError
from train.checkpointing import Checkpointer
from train.config import CONFIG_NAME, load_saved
from train.errors import TrainError
from train.mesh import make_mesh
from train.run_tokenizer import load_run_tokenizer
from train.trainer import build_model


@nnx.jit
def _next_logits(model: GPT, window: jax.Array, position: jax.Array) -> jax.Array:
    # A fixed-size window: one compilation for the whole generation.
    return model(window)[0, position]


def generate(
    model: GPT,
    prompt: list[int],
    *,
    max_tokens: int,
    key: jax.Array,
    temperature: float,
    top_k: int | None,
    vocab_size: int,
    stop_token: int | None,
    context: int,
) -> list[int]:
    """Ids after `prompt`, sampled one at a time, each seeing at most the last `context` tokens (the
    `seq_len` the model was trained on: its positions past that were never trained); stops early
    at `stop_token`."""
    if not prompt:
        raise ValueError("the prompt must hold at least one token")
    size = context
    tokens = list(prompt)
    for i in range(max_tokens):
        context = tokens[-size:]
        window = np.zeros((1, size), np.int32)
        window[0, : len(context)] = context
        logits = _next_logits(model, jnp.asarray(window), jnp.int32(len(context) - 1))[:vocab_size]
        if temperature <= 0:
            token = int(jnp.argmax(logits))
        else:
            logits = logits / temperature
            if top_k:
                threshold = jnp.sort(logits)[-min(top_k, vocab_size)]
                logits = jnp.where(logits < threshold, -jnp.inf, logits)
            token = int(jax.random.categorical(jax.random.fold_in(key, i), logits))
        if token == stop_token:
            break
        tokens.append(token)
    return tokens[len(prompt) :]


def sample(
    workdir: str,
    prompt: str,
    *,
    max_tokens: int = 100,
    seed: int = 0,
    top_k: int | None = 40,
    temperature: float = 0.8,
) -> str:
    """Needs the workdir alone: its config, its tokenizer record and the model's weights."""
    config = load_saved(workdir)
    if config is None:
        raise TrainError(f"{workdir} holds no training run ({CONFIG_NAME} is missing)")
    tokenizer, info = load_run_tokenizer(workdir)
    # A document starts with the BOS where the data's rule puts one.
    start = ([] if info.bos_id is None else [info.bos_id]) + tokenizer.encode_ordinary(prompt)
    if not start:
        raise SettingError("prompt", prompt, "must hold at least one token")
    checkpointer = Checkpointer(workdir, every=1, keep=config.keep_checkpoints)
    step = checkpointer.latest_step()
    if step is None:
        raise TrainError(f"{workdir} has no checkpoint yet")
    mesh = make_mesh(())
    model = build_model(config, mesh)
    with jax.set_mesh(mesh):
        checkpointer.restore_model(step, model)
        ids = generate(
            model,
            start,
            max_tokens=max_tokens,
            key=jax.random.key(seed),
            temperature=temperature,
            top_k=top_k,
            vocab_size=info.n_vocab,
            stop_token=info.eot_id,
            context=config.seq_len,
        )
    checkpointer.close()
    return prompt + tokenizer.decode(ids)
