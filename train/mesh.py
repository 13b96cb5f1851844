"""The device mesh and the global batch built from each host's part of it."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from model.config import DATA, MODEL


def parse_mesh(text: str) -> tuple[tuple[str, int], ...]:
    """'data=4,model=2' -> (('data', 4), ('model', 2)); an empty string means all devices on data."""
    if not text:
        return ()
    axes = []
    for part in text.split(","):
        name, _, size = part.partition("=")
        if name.strip() not in (DATA, MODEL) or not size.strip().isdigit():
            raise ValueError(f"bad mesh {text!r}; expected e.g. 'data=4,model=2'")
        axes.append((name.strip(), int(size)))
    return tuple(axes)


def make_mesh(axes: tuple[tuple[str, int], ...] = ()) -> jax.sharding.Mesh:
    """A (data, model) mesh over every device; sizes not given are filled in on `data`."""
    sizes = dict(axes)
    devices = jax.device_count()
    model = sizes.get(MODEL, 1)
    data = sizes.get(DATA, devices // model)
    if data * model != devices:
        raise ValueError(f"mesh data={data}, model={model} needs {data * model} devices; there are {devices}")
    return jax.make_mesh((data, model), (DATA, MODEL), axis_types=(AxisType.Auto, AxisType.Auto))


def global_batch(host_batch: dict[str, np.ndarray], mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
    """Stitches every host's rows into one array sharded over `data` along the batch."""
    sharding = NamedSharding(mesh, PartitionSpec(DATA))
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in host_batch.items()}
