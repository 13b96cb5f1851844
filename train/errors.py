"""The trainer's errors: user errors of their kind (schemas/errors.py), and ValueErrors, as the
trainer's callers and `processes.agreed` catch them."""

from __future__ import annotations

from schemas.errors import RunError, UsageError


class TrainUsageError(UsageError, ValueError):
    """Settings a run cannot go with: a resume that would compute something else than the saved run,
    a mesh the devices or processes cannot take, processes started with other flags."""


class TrainError(RunError, ValueError):
    """A run that cannot start or go on: a workdir, checkpoint or tokenizer that does not fit it,
    processes that read other batches."""
