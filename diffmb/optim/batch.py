"""Many simulations at once: ``vmap`` over a batch, the batch sharded over all local devices.

    trajs = diffmb.optim.batch_simulate(model, q0s, v0s, t1=1.0, dt=1e-3)   # q0s (B, nq)
    trajs.q                                                                  # (B, ns, nq)

Sharding (one host)
-------------------
The batch axis is split over a 1-D device mesh ``jax.sharding.Mesh(devices, ("batch",))`` with
``NamedSharding(mesh, PartitionSpec("batch"))``: the inputs are placed with
``jax.device_put`` and the ``vmap``-ed, ``jit``-ed simulation runs where its shard lives (XLA's
SPMD partitioner; no communication is needed since the cases are independent). The batch is
padded to a multiple of the device count by repeating its last case; the padding is dropped
from the outputs. On a CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (set before
``import jax``) makes N host devices, which is how the tests check that sharded == unsharded.

Several hosts (``jax.distributed``)
-----------------------------------
Start one process per host (or per GPU) and call, before anything else touches JAX::

    import jax
    jax.distributed.initialize(coordinator_address="host0:1234",
                               num_processes=P, process_id=i)   # auto-detected on SLURM/TPU
    import diffmb
    trajs = diffmb.optim.batch_simulate(model, q0s, v0s, ..., devices=jax.devices())

``jax.devices()`` then lists the devices of *all* processes and the mesh spans them; every
process runs the same program on the same global inputs (each keeps only its shards:
``jax.device_put`` of a host-local numpy array places the addressable parts). Read results with
``jax.experimental.multihost_utils.process_allgather(trajs.q)`` or use each process's
``addressable_shards``. See ``docs/scale-out.md`` for a two-process example on one machine.
"""

from __future__ import annotations

import os
import warnings
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..model import Model
from ..simulation import SimulationError, Trajectory, simulate
from ..systems import concrete

__all__ = ["batch_map", "batch_simulate", "batch_mesh", "BatchFailureWarning"]


class BatchFailureWarning(RuntimeWarning):
    """Some members of a :func:`batch_simulate` batch failed (their ``status`` is non-zero)."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def batch_mesh(devices=None) -> Mesh:
    """A 1-D mesh named ``"batch"`` over ``devices`` (default: all devices, ``jax.devices()``)."""
    devs = list(jax.devices() if devices is None else devices)
    return Mesh(np.array(devs), ("batch",))


def _batch_size(tree) -> int:
    sizes = {int(np.shape(x)[0]) for x in jax.tree.leaves(tree) if eqx.is_array_like(x)
             and np.ndim(x) > 0}
    if len(sizes) != 1:
        raise ValueError(f"batched inputs must share one leading batch size, got {sorted(sizes)}")
    return sizes.pop()


def _pad(tree, B, Bp):
    if Bp == B:
        return tree

    def pad(x):
        x = jnp.asarray(x)
        reps = jnp.broadcast_to(x[-1:], (Bp - B,) + x.shape[1:])
        return jnp.concatenate([x, reps], axis=0)

    return jax.tree.map(pad, tree)


_RUNNERS: dict = {}
_PLACED: dict = {}  # (id of a jax array, mesh) -> (weakref to it, its replicated copy)
_TRIMS: dict = {}  # B -> a jitted function keeping the first B cases of a batch's outputs


def _replicated(tree, mesh):
    """``tree`` with its JAX arrays copied to every device of ``mesh``, each copy made once and
    reused while the array lives: a model handed to every call is not sent again each time."""
    sh = NamedSharding(mesh, PartitionSpec())

    def put(x):
        if not isinstance(x, jax.Array):
            return jax.device_put(x, sh) if eqx.is_array(x) else x
        key = (id(x), mesh)
        hit = _PLACED.get(key)
        if hit is not None and hit[0]() is x:
            return hit[1]
        y = jax.device_put(x, sh)
        _PLACED[key] = (weakref.ref(x, lambda _, k=key: _PLACED.pop(k, None)), y)
        return y

    return jax.tree.map(put, tree)


def _first(out, B):
    """The first B cases of every array in ``out`` (one compiled call, not one per leaf)."""
    if B not in _TRIMS:
        _TRIMS[B] = jax.jit(lambda t: jax.tree.map(lambda a: a[:B], t))
    arr, rest = eqx.partition(out, eqx.is_array)
    return eqx.combine(_TRIMS[B](arr), rest)


def _vectorised(fn, static, block):
    """vmap of ``fn(static, item)`` over a batch; with ``block``, in blocks of that many cases
    (``lax.map(..., batch_size=block)``): on a CPU this keeps each block's intermediates in cache
    (docs/performance.md)."""
    one = lambda b: fn(static, b)
    if block is None:
        return lambda bt: jax.vmap(one)(bt)
    return lambda bt: jax.lax.map(one, bt, batch_size=block)


def _runner(fn, block, mesh):
    """One jitted program per (function, block, mesh): new values do not retrace."""
    key = (fn, block, mesh)
    if key not in _RUNNERS:
        if mesh is None:
            _RUNNERS[key] = eqx.filter_jit(lambda st, bt: _vectorised(fn, st, block)(bt))
        else:
            spec = PartitionSpec("batch")

            def sharded(st, bt):
                arr, rest = eqx.partition(st, eqx.is_array)
                local = lambda a, b: _vectorised(fn, eqx.combine(a, rest), block)(b)
                return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), spec),
                                     out_specs=spec, check_vma=False)(arr, bt)

            _RUNNERS[key] = eqx.filter_jit(sharded)
    return _RUNNERS[key]


def _one_sim(st, b):
    q0, v0, p = b
    return simulate(st[0], q0, v0, params=p, **st[1])


def _one_sim_batched_model(st, b):
    q0, v0, p, ma = b
    return simulate(eqx.combine(ma, st[0]), q0, v0, params=p, **st[1])


def batch_map(fn, batched, static=None, *, shard: bool = True, devices=None, block: int | None = 64):
    """``vmap(fn)`` over the leading axis of ``batched`` (a pytree), sharded over devices.

    ``fn(static, batched_item) -> pytree``; ``static`` (any pytree, e.g. a Model) is broadcast.
    Returns the stacked outputs (leading axis B). ``shard=False``: one device (also a single
    case on one host: nothing to share out). ``block``: cases vectorised together on each
    device (the rest of a device's shard is looped over in blocks of this size, which keeps
    intermediates in cache); ``None``: one ``vmap`` over everything.
    """
    B = _batch_size(batched)
    if block is not None and (not isinstance(block, int) or block < 1):
        raise ValueError(f"block must be a positive int or None, got {block!r}")
    mesh = batch_mesh(devices) if shard else None
    if mesh is None or (B == 1 and jax.process_count() == 1):
        return _runner(fn, block, None)(static, batched)
    nd = mesh.devices.size
    Bp = -(-B // nd) * nd
    x = _pad(batched, B, Bp)
    sh = NamedSharding(mesh, PartitionSpec("batch"))
    x = jax.tree.map(lambda a: jax.device_put(jnp.asarray(a), sh), x)
    out = _runner(fn, block, mesh)(_replicated(static, mesh), x)
    return _first(out, B) if Bp != B else out


def _global(traj):
    """``traj`` with ``status`` and ``t_fail`` readable on this process: gathered from every
    process when the batch spans several (``jax.distributed``)."""
    st = traj.status
    if isinstance(st, jax.Array) and not isinstance(st, jax.core.Tracer) \
            and not st.is_fully_addressable:
        from jax.experimental import multihost_utils

        st, tf = multihost_utils.process_allgather((traj.status, traj.t_fail), tiled=True)
        return eqx.tree_at(lambda t: (t.status, t.t_fail), traj, (st, tf))
    return traj


def batch_simulate(
    model: Model,
    q0s,
    v0s,
    *,
    params=None,
    batched_model: bool = False,
    shard: bool = True,
    devices=None,
    block: int | None = 64,
    throw: bool = False,
    **simulate_kwargs,
) -> Trajectory:
    """Simulate B cases at once; every field of the returned Trajectory has the batch in front.

    q0s (B, nq), v0s (B, nv). ``params``: a pytree whose leaves have a leading batch axis,
    passed per case to ``simulate(..., params=...)`` (e.g. knot values of a control).
    ``batched_model=True``: the model's array leaves carry the batch axis (e.g. built with
    ``jax.vmap`` over :func:`diffmb.optim.set_params`), one model per case. Other keyword
    arguments go to :func:`diffmb.simulate` (``t1``, ``dt``, ``solver``, ``saveat``, ``forces``,
    ``control``, ...). ``shard`` / ``devices``: see the module docstring; ``block``: see
    :func:`batch_map`.

    Failures: a failed member does not fail the batch. The returned ``status``/``t_fail`` (B,)
    hold each member's outcome (``traj.ok`` is the mask of successes; the failed members' states
    are not meaningful after their ``t_fail``). Outside a trace, a batch with failures emits one
    :class:`BatchFailureWarning` summarising them (how many, the first index and its reason, from
    :meth:`~diffmb.simulation.Trajectory.message`); ``throw=True`` raises
    :class:`~diffmb.simulation.SimulationError` with that summary instead. Under a trace
    (``jit``/``grad``/``vmap``) neither happens: read ``status``.
    """
    q0s = jnp.asarray(q0s, dtype=jnp.float64)
    v0s = jnp.asarray(v0s, dtype=jnp.float64)
    if q0s.ndim != 2 or q0s.shape[1] != model.nq or v0s.shape != (q0s.shape[0], model.nv):
        raise ValueError(
            f"{model.name}: q0s {q0s.shape} / v0s {v0s.shape}, expected (B, {model.nq}) / "
            f"(B, {model.nv})"
        )
    kw = dict(simulate_kwargs)
    kw["throw"] = False
    if "saveat" in kw and kw["saveat"] is not None:
        kw["saveat"] = tuple(float(s) for s in np.asarray(kw["saveat"]).reshape(-1))
    if batched_model:
        m_arr, m_static = eqx.partition(model, eqx.is_array)
        batched = (q0s, v0s, params, m_arr)
        static = (m_static, kw)
        one = _one_sim_batched_model
    else:
        batched = (q0s, v0s, params)
        static = (model, kw)
        one = _one_sim

    traj = batch_map(one, batched, static, shard=shard, devices=devices, block=block)
    summary = _global(traj)
    status = concrete(summary.status)
    if status is not None and np.any(status != 0):
        msg = f"{model.name}: batch_simulate: {summary.message()}"
        if throw:
            raise SimulationError(msg)
        warnings.warn(msg + " (statuses in traj.status; throw=True raises)", BatchFailureWarning,
                      stacklevel=2)
    return traj


