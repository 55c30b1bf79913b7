"""Benchmark of diffmb.simulate on the four-box chain and gradient memory.

Cases (all measured in the same run, on this machine):
  * chain_rk4_b1: env-steps/s of diffmb (RK4, dt = 0.002, 500 steps, batch 1, jit) vs MuJoCo C
    (mj_step with the RK4 integrator through ``mujoco.rollout``, one thread).
  * chain_rk4_b1024_vs_mjx: diffmb under jit(vmap) at batch 1024 vs MJX (float64, jit(vmap)):
    like for like, one device, both may use XLA's intra-op threads.
  * chain_rk4_b1024_2dev_vs_mjx / _vs_mujoco_c: diffmb with both cores used as two host devices
    (``XLA_FLAGS=--xla_force_host_platform_device_count=2``, set in a subprocess because it must
    precede ``import jax``): ``diffmb.optim.batch_simulate`` shards the batch over the two devices
    and vectorises each shard in blocks of 128 cases (cache-sized); vs MJX jit(vmap) and vs
    MuJoCo C on one core.
  * chain_grad_over_forward: time of jax.grad of a loss on the 500-step trajectory over the time
    of the forward simulation (batch 1, the default scan loop); peer: the target 4. Measured in a
    subprocess pinned to one core, forward and gradient interleaved: the ratio of work. Unpinned,
    on a 2-vCPU VM the gradient's best time differs between processes by up to 1.5x (runtime
    threads waking on the other core) while the forward's does not, so
  * chain_grad_over_forward_unpinned reports the same measurement without pinning, beside it.
  * chain_grad_over_forward_diffrax_loop: the same with ``loop="diffrax"`` (diffeqsolve with
    RecursiveCheckpointAdjoint), for comparison.
  * chain_grad_over_forward_b64: vmap(grad) over vmap(forward) at batch 64 (pinned too).
  * grad_memory_10k_vs_1k: XLA memory (compiled memory_analysis: temporaries, arguments and
    outputs) of the gradient of a 10,000-step vs a 1,000-step trajectory with the default
    checkpointing (every step's state kept up to 1024 steps, √n chunks beyond).
``--quick`` shrinks the horizon to 100 steps (batch sizes unchanged).

Run: ``python -m diffmb.bench.sim [--quick] --out DIR`` (writes DIR/bench_sim.json), or
``diffmb bench --only sim``. The subprocesses re-launch this module by name (``-m``), so it runs
from an installed package. Without MJX its ``peer_value`` is null.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from importlib import resources

import numpy as np

from diffmb.bench import best_time, case, main_for, run_module, write_json

MODULE = "diffmb.bench.sim"  # re-launched by module name (works from an installed wheel)
CHAIN = pathlib.Path(str(resources.files("diffmb") / "assets" / "chain4.xml"))


def sharded_sps(nsteps: int, dt: float, batch: int, block: int) -> float:
    """Env-steps/s of batch_simulate on the chain over all local devices (run in a subprocess
    whose XLA_FLAGS set the device count)."""
    import jax
    import jax.numpy as jnp

    import diffmb
    from diffmb.bench import best_time
    from diffmb.optim import batch_simulate

    model = diffmb.load_mjcf(CHAIN)
    rng = np.random.default_rng(0)
    qb = np.broadcast_to(np.asarray(model.qpos0), (batch, model.nq))
    vb = rng.normal(size=(batch, model.nv)) * 0.1
    T = nsteps * dt
    kw = dict(t1=T, dt=dt, saveat=[T], throw=False, block=block, shard=len(jax.devices()) > 1)
    go = lambda: jnp.asarray(batch_simulate(model, qb, vb, **kw).q).block_until_ready()
    go()
    return nsteps * batch / best_time(go, 3)


def _run_self(args, env, what, timeout, cpu=None):
    """Run this module (``python -m diffmb.bench.sim *args``) in a fresh process (pinned to
    ``cpu`` from its start if given); its last line of output."""
    return run_module(MODULE, args, env, what, timeout, cpu)


def _sharded_sps_subprocess(ndev, nsteps, dt, batch, block):
    env = dict(
        os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={ndev}", JAX_PLATFORMS="cpu"
    )
    args = ["--sharded-sps", str(nsteps), str(dt), str(batch), str(block)]
    return float(_run_self(args, env, "sharded run", 900))


def grad_ratios(nsteps: int, dt: float, cases) -> dict:
    """(gradient time, forward time) of a loss on the chain's trajectory for each case: "auto"
    (batch 1, default scan loop), "diffrax" (batch 1, diffeqsolve's loop), "b64" (vmap at batch
    64). Forward and gradient are timed interleaved so both see the same machine state."""
    import jax
    import jax.numpy as jnp

    import diffmb

    model = diffmb.load_mjcf(CHAIN)
    q0, T = model.qpos0, nsteps * dt
    w = jnp.linspace(0.5, 1.5, model.nq)
    vb = jnp.asarray(np.random.default_rng(0).normal(size=(64, model.nv)) * 0.1)
    out = {}
    for c in cases:
        loop = "diffrax" if c == "diffrax" else "auto"

        def loss(v, loop=loop):
            tr = diffmb.simulate(model, q0, v, t1=T, dt=dt, saveat=[T], throw=False, loop=loop)
            return jnp.sum(w * tr.q[-1])

        if c == "b64":
            arg, lf, gf = vb, jax.jit(jax.vmap(loss)), jax.jit(jax.vmap(jax.grad(loss)))
        else:
            arg, lf, gf = vb[0], jax.jit(loss), jax.jit(jax.grad(loss))
        out[c] = _interleaved_times(gf, lf, arg, 4 if c == "b64" else 25)
    return out


def _interleaved_times(f, g, arg, reps):
    """Best times of f(arg) and g(arg) over ``reps`` alternating calls (after compilation)."""
    f(arg).block_until_ready()
    g(arg).block_until_ready()
    t_f = t_g = float("inf")
    for _ in range(reps):
        t_f = min(t_f, best_time(lambda: f(arg).block_until_ready(), 1))
        t_g = min(t_g, best_time(lambda: g(arg).block_until_ready(), 1))
    return t_f, t_g


def _grad_ratios_subprocess(nsteps, dt, pin, cases):
    """grad_ratios in a fresh process; ``pin`` restricts it to one core. On this 2-vCPU VM an
    unpinned gradient's best time varies between processes by up to 1.5x (XLA's runtime threads
    waking on the other core), while the forward does not; pinned, both are stable."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cpu = None
    if pin and hasattr(os, "sched_setaffinity"):  # Linux; elsewhere the run is unpinned
        cpu = min(os.sched_getaffinity(0))
    args = ["--grad-ratios", str(nsteps), str(dt), *cases]
    return json.loads(_run_self(args, env, "gradient-ratio run", 1200, cpu))


def run(out_dir, quick: bool = False) -> dict:
    import jax
    import jax.numpy as jnp
    import mujoco

    import diffmb

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nsteps = 100 if quick else 500
    dt, batch = 0.002, 1024
    T = nsteps * dt
    model = diffmb.load_mjcf(CHAIN)
    q0, v0 = model.qpos0, jnp.zeros(model.nv)
    rng = np.random.default_rng(0)
    vb = jnp.asarray(rng.normal(size=(batch, model.nv)) * 0.1)
    qb = jnp.broadcast_to(q0, (batch, model.nq))

    def sim(q, v):
        return diffmb.simulate(model, q, v, t1=T, dt=dt, saveat=[T], throw=False).q[-1]

    f1 = jax.jit(sim)
    fb = jax.jit(jax.vmap(sim))
    f1(q0, v0).block_until_ready()
    t_b1 = best_time(lambda: f1(q0, v0).block_until_ready(), 5)
    fb(qb, vb).block_until_ready()
    t_bb = best_time(lambda: fb(qb, vb).block_until_ready(), 2)
    sps_b1, sps_bb = nsteps / t_b1, nsteps * batch / t_bb
    block, ndev = 128, 2
    sps_2dev = _sharded_sps_subprocess(ndev, nsteps, dt, batch, block)

    # MuJoCo C, one thread, RK4
    mj = mujoco.MjModel.from_xml_path(str(CHAIN))
    mj.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    mj.opt.timestep = dt
    d = mujoco.MjData(mj)
    try:
        from mujoco import rollout

        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        st = np.zeros((1, mujoco.mj_stateSize(mj, spec)))
        mujoco.mj_getState(mj, d, st[0], spec)
        rollout.rollout(mj, d, st, nstep=nsteps)
        t_c = best_time(lambda: rollout.rollout(mj, d, st, nstep=nsteps), 5)
        how_c = "mujoco.rollout (C loop, 1 thread)"
    except Exception:  # pragma: no cover - older mujoco

        def loop():
            mujoco.mj_resetData(mj, d)
            for _ in range(nsteps):
                mujoco.mj_step(mj, d)

        t_c = best_time(loop, 5)
        how_c = "python loop of mj_step"
    sps_c = nsteps / t_c

    # MJX, float64, batch
    sps_mjx = float("nan")
    try:
        from mujoco import mjx

        mx = mjx.put_model(mj)

        def mjx_run(qvel):
            dd = mjx.make_data(mx).replace(qvel=qvel)
            dd = jax.lax.fori_loop(0, nsteps, lambda i, s: mjx.step(mx, s), dd)
            return dd.qpos

        g = jax.jit(jax.vmap(mjx_run))
        g(vb).block_until_ready()
        t_mjx = best_time(lambda: g(vb).block_until_ready(), 2)
        sps_mjx = nsteps * batch / t_mjx
    except Exception as e:  # MJX missing or failing: report, do not hide
        print(f"MJX unavailable: {type(e).__name__}: {e}")

    # gradient / forward, in subprocesses: pinned to one core (the work ratio) and unpinned
    pinned = _grad_ratios_subprocess(nsteps, dt, pin=True, cases=("auto", "diffrax", "b64"))
    free = _grad_ratios_subprocess(nsteps, dt, pin=False, cases=("auto",))
    t_g, t_f = pinned["auto"]
    t_g_dfx, t_f_dfx = pinned["diffrax"]
    t_g64, t_f64 = pinned["b64"]
    t_g_free, t_f_free = free["auto"]
    w = jnp.linspace(0.5, 1.5, model.nq)

    # gradient memory, 10k vs 1k steps (compiled, not run)
    def grad_mem(n):
        def loss_n(v):
            tr = diffmb.simulate(model, q0, v, t1=n * dt, dt=dt, saveat=[n * dt], throw=False)
            return jnp.sum(w * tr.q[-1])

        c = jax.jit(jax.grad(loss_n)).lower(v0).compile()
        ma = c.memory_analysis()
        return ma.temp_size_in_bytes + ma.output_size_in_bytes + ma.argument_size_in_bytes

    m1k, m10k = grad_mem(1000), grad_mem(10000)

    res = {
        "chain_rk4_b1": case(sps_b1, "env-steps/s", f"MuJoCo C ({how_c})", sps_c),
        "chain_rk4_b1024_vs_mjx": case(sps_bb, "env-steps/s", "MJX float64 jit(vmap)", sps_mjx),
        "chain_rk4_b1024_vs_mujoco_c": case(sps_bb, "env-steps/s", "MuJoCo C 1 thread", sps_c),
        "chain_rk4_b1024_2dev_vs_mjx": case(
            sps_2dev, "env-steps/s", "MJX float64 jit(vmap)", sps_mjx
        ),
        "chain_rk4_b1024_2dev_vs_mujoco_c": case(
            sps_2dev, "env-steps/s", "MuJoCo C 1 thread", sps_c
        ),
        "chain_grad_over_forward": case(t_g / t_f, "ratio", "target", 4.0),
        "chain_grad_over_forward_unpinned": case(t_g_free / t_f_free, "ratio", "target", 4.0),
        "chain_grad_over_forward_diffrax_loop": case(t_g_dfx / t_f_dfx, "ratio", "target", 4.0),
        "chain_grad_over_forward_b64": case(t_g64 / t_f64, "ratio", "target", 4.0),
        "grad_memory_10k_vs_1k": case(m10k, "bytes", "1000-step gradient", m1k),
    }
    meta = dict(
        nsteps=nsteps,
        batch=batch,
        dt=dt,
        t_forward_b1_s=t_b1,
        t_grad_b1_s=t_g,
        t_forward_b1_pinned_s=t_f,
        t_grad_b1_unpinned_s=t_g_free,
        t_forward_b1_unpinned_s=t_f_free,
        grad_ratio_pinned=hasattr(os, "sched_setaffinity"),
        t_batch_s=t_bb,
        sharded=dict(devices=ndev, block=block, how="batch_simulate over host devices"),
        devices=[str(x) for x in jax.devices()],
    )
    write_json(out_dir / "bench_sim.json", {**res, "_meta": meta})
    return res


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--sharded-sps":
        n_, dt_, b_, blk_ = sys.argv[2:6]
        print(sharded_sps(int(n_), float(dt_), int(b_), int(blk_)))
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == "--grad-ratios":
        print(json.dumps(grad_ratios(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])))
        sys.exit(0)
    sys.exit(main_for("sim", run))
