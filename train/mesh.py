"""The device mesh, which part of the global batch each process feeds, and the global batch."""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from model.config import DATA, MODEL
from schemas.errors import SettingError
from train.errors import TrainUsageError


def parse_mesh(text: str) -> tuple[tuple[str, int], ...]:
    """'data=4,model=2' -> (('data', 4), ('model', 2)); an empty string means all devices on
    data."""
    if not text:
        return ()
    axes = []
    for part in text.split(","):
        name, _, size = part.partition("=")
        if name.strip() not in (DATA, MODEL) or not size.strip().isdigit():
            raise SettingError(
                "mesh",
                text,
                "must be AXIS=SIZE pairs of the axes data and model, e.g. 'data=4,model=2'",
            )
        axes.append((name.strip(), int(size)))
    return tuple(axes)


def make_mesh(axes: tuple[tuple[str, int], ...] = ()) -> jax.sharding.Mesh:
    """A (data, model) mesh over every device; sizes not given are filled in on `data`."""
    sizes = dict(axes)
    devices = jax.device_count()
    model = sizes.get(MODEL, 1)
    data = sizes.get(DATA, devices // model)
    if data * model != devices:
        raise SettingError(
            "mesh",
            f"data={data},model={model}",
            f"needs {data * model} devices, and there are {devices}",
        )
    return jax.make_mesh((data, model), (DATA, MODEL), axis_types=(AxisType.Auto, AxisType.Auto))


@dataclasses.dataclass(frozen=True)
class HostShards:
    """The parts of the global batch a process feeds: loader shards `indices` of `count`.

    There is one shard per position on the mesh's data axis (`count` is its size), and a process
    feeds the shards at the positions of its devices, in order. The global batch is then the same
    whatever the number of processes: one process with a mesh of simulated devices reads exactly
    what many processes with that mesh read together.
    """

    indices: tuple[int, ...]
    count: int

    def __post_init__(self) -> None:
        if not self.indices or list(self.indices) != sorted(set(self.indices)):
            raise ValueError(f"shard indices must be distinct and in order (got {self.indices=})")
        if not 0 <= self.indices[0] <= self.indices[-1] < self.count:
            raise ValueError(
                f"shard indices must be in [0, count) (got {self.indices=}, {self.count=})"
            )

    @property
    def rows(self) -> tuple[int, int]:
        """The loader shard (index, count) of the rows this process feeds: its positions must be one
        aligned run, as `jax.make_mesh` lays processes out, so they are one equal part of the
        batch."""
        first, size = self.indices[0], len(self.indices)
        if self.indices != tuple(range(first, first + size)) or first % size or self.count % size:
            raise TrainUsageError(
                f"this process feeds data-axis positions {self.indices} of {self.count}, not one "
                "aligned run; choose --mesh sizes that give each process whole rows of the mesh"
            )
        return first // size, self.count // size


def data_positions(process_grid: np.ndarray, data_axis: int) -> dict[int, tuple[int, ...]]:
    """Process index -> the data-axis positions of its devices, from the mesh's grid of process
    indices.

    Processes that share positions (a model axis spanning them) feed the same rows. The position
    sets must be equal or disjoint, as `jax.make_mesh` lays processes out: then every part of the
    batch is fed by one group of processes, and per-process counts add up over groups.
    """
    positions: dict[int, set[int]] = defaultdict(set)
    for index, process in np.ndenumerate(process_grid):
        positions[int(process)].add(index[data_axis])
    found = {process: tuple(sorted(p)) for process, p in sorted(positions.items())}
    groups = set(found.values())
    if sum(len(g) for g in groups) != len(set().union(*groups)):
        raise TrainUsageError(
            f"processes share only some of their data-axis positions ({found}); choose --mesh "
            "sizes that give each process whole rows of the mesh"
        )
    return found


@functools.cache
def host_shards(mesh: jax.sharding.Mesh) -> HostShards:
    """The parts of the global batch this process feeds on `mesh` (cached: every step asks)."""
    grid = np.vectorize(lambda device: device.process_index)(mesh.devices)
    positions = data_positions(grid, mesh.axis_names.index(DATA))
    return HostShards(positions[jax.process_index()], mesh.shape[DATA])


def global_batch(
    host_batch: dict[str, np.ndarray], mesh: jax.sharding.Mesh
) -> dict[str, jax.Array]:
    """Stitches every process's rows into one array sharded over `data` along the batch.

    The global shape is given, not inferred: processes sharing a shard each hold all of its rows.
    """
    sharding = NamedSharding(mesh, PartitionSpec(DATA))
    shards = host_shards(mesh)
    return {
        k: jax.make_array_from_process_local_data(
            sharding, v, (len(v) // len(shards.indices) * shards.count, *v.shape[1:])
        )
        for k, v in host_batch.items()
    }


def one_row_per_device(row: np.ndarray, mesh: jax.sharding.Mesh) -> jax.Array:
    """A (devices, len(row)) array sharded one row per device, the rows of this process's devices
    all `row`: what a step gathers back whole gives every process every other's row."""
    sharding = NamedSharding(mesh, PartitionSpec((DATA, MODEL)))
    return jax.make_array_from_callback((mesh.size, len(row)), sharding, lambda index: row[None])
