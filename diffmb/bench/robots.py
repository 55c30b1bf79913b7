"""Benchmark of published robots on a floor: diffmb's implicit contact step against MuJoCo C.

Robots (:data:`ROBOTS`): gymnasium's Ant and Humanoid (from the installed ``gymnasium``
package) and MuJoCo Menagerie's Unitree A1 (``tests/data/scenes/menagerie`` of a source
checkout; Menagerie is not a package). A robot whose file is not found gives no records.

Starts (seeded, every member its own): ``stand``: the file's ``home`` keyframe (else its first
keyframe, else ``qpos0``) at rest, with the keyframe's ``ctrl`` (else zero) held; ``drop``: the
same pose raised by :data:`DROP_M` and turned about the vertical by a random yaw, with root
velocities N(0, 0.1) (m/s, rad/s). Both engines simulate T = 1 s (rounded to whole steps) at
the file's own timestep
from the same states, in float64: diffmb ``batch_simulate`` with ``solver="implicit"`` and the
file's forces from ``mjcf_forces`` (one host device per core, in its own process, the
persistent compilation cache off so that ``first_call_s`` is a cold compile), MuJoCo C
``mujoco.rollout`` with the file's integrator, with one thread and with one per core (at
batch 1 only one). Times are the best of interleaved repetitions.

Cases ``<robot>_<start>_b<B>_vs_mujoco_c<threads>`` (unit "sim-s/s": simulated seconds per
wall second summed over the batch): diffmb's rate beside MuJoCo C's; each record also holds
the root height after 1 s in both engines (mean over the batch), the largest difference
between them over the members, the number of diffmb members that finished (status 0) and
diffmb's cold first call. ``--quick``: batches 1 and 16, one repetition. :data:`MAX_BATCH`
caps the batch of the robots whose step is slow.

Run: ``python -m diffmb.bench.robots [--quick] --out DIR`` (writes DIR/bench_robots.json), or
``diffmb bench --only robots``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import best_time, case, main_for, run_module, write_json

MODULE = "diffmb.bench.robots"
T = 1.0
DROP_M = 0.1
BATCHES = (1, 64, 1024)
QUICK_BATCHES = (1, 16)
#: the largest batch run per robot: the A1's scene has 568 candidate geom directions (1172
#: contact points; about 250 directions reach the narrow phase at each step), so its batch of
#: 1024 would take some 15 minutes
MAX_BATCH = {"a1": 64}
STARTS = ("stand", "drop")


def _gymnasium_asset(name):
    try:
        import gymnasium
    except ImportError:
        return None
    p = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / name
    return p if p.exists() else None


def _menagerie(rel):
    p = Path(__file__).resolve().parents[2] / "tests" / "data" / "scenes" / "menagerie" / rel
    return p if p.exists() else None


#: robot -> how its file is found (None: not on this machine)
ROBOTS = {
    "ant": lambda: _gymnasium_asset("ant.xml"),
    "a1": lambda: _menagerie("unitree_a1/scene.xml"),
    "humanoid": lambda: _gymnasium_asset("humanoid.xml"),
}


def robot_files() -> dict:
    """{robot: path} of the robots found on this machine."""
    return {k: p for k, f in ROBOTS.items() if (p := f()) is not None}


def initial_states(path, start: str, batch: int, seed: int = 0):
    """(q (B, nq), v (B, nv), ctrl (nu,)) in MuJoCo's layout for ``start`` ("stand" or
    "drop"; the root is the file's first joint, a free joint)."""
    import mujoco

    mj = mujoco.MjModel.from_xml_path(str(path))
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    names = [mj.key(i).name for i in range(mj.nkey)]
    k = names.index("home") if "home" in names else (0 if mj.nkey else None)
    q0 = np.asarray(mj.key_qpos[k] if k is not None else mj.qpos0, float)
    ctrl = np.asarray(mj.key_ctrl[k], float) if k is not None and mj.nu else np.zeros(mj.nu)
    q = np.tile(q0, (batch, 1))
    v = np.zeros((batch, mj.nv))
    if start == "drop":
        rng = np.random.default_rng(seed)
        q[:, 2] += DROP_M
        yaw = rng.uniform(-np.pi, np.pi, batch)
        turn = np.stack([np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)], 1)
        w, x, y, z = q0[3:7]
        a, b, c, d = turn.T  # turn ⊗ q0: a yaw about the world vertical
        q[:, 3:7] = np.stack([a * w - d * z, a * x - d * y, a * y + d * x, a * z + d * w], 1)
        q[:, 3:7] /= np.linalg.norm(q[:, 3:7], axis=1, keepdims=True)
        v[:, :6] = rng.normal(size=(batch, 6)) * 0.1
    return q, v, ctrl


def _horizon(dt):
    """T rounded to a whole number of steps of dt (the file's timestep)."""
    return round(T / dt) * dt


def _hold(t, q, v, p):
    return p


def diffmb_measure(robot: str, batches, reps: int) -> dict:
    """diffmb in this process, for every batch and start: best time of ``reps`` runs, the cold
    first call, the final root heights and statuses."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import mujoco

    import diffmb
    from diffmb.optim import batch_simulate

    path = robot_files()[robot]
    dt = float(mujoco.MjModel.from_xml_path(str(path)).opt.timestep)
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path)
    out = {}
    for B in batches:
        for start in STARTS:
            q, v, ctrl = initial_states(path, start, B)
            t1 = _horizon(dt)
            kw = dict(t1=t1, dt=dt, forces=forces, solver="implicit", saveat=[t1])
            if ctrl.size and np.any(ctrl != 0):  # the keyframe's ctrl held
                kw.update(control=_hold, params=np.tile(ctrl, (B, 1)))

            def go(q=q, v=v, kw=kw):
                tr = batch_simulate(model, q, v, **kw)
                return jax.block_until_ready((tr.q[:, -1], tr.status))

            t0 = time.perf_counter()
            qf, st = go()
            first = time.perf_counter() - t0
            out[f"{start}_{B}"] = dict(
                time_s=best_time(go, reps), first_call_s=first, dt=dt, horizon_s=t1,
                devices=len(jax.devices()),
                z=np.asarray(qf[:, 2]).tolist(), ok=int(np.sum(np.asarray(st) == 0)))
    return out


def _diffmb_subprocess(robot, batches, reps, notes):
    from ..optim.batch import available_cpus

    n = available_cpus()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=(
        f"--xla_force_host_platform_device_count={n} --xla_cpu_multi_thread_eigen=false"))
    args = ["--diffmb", robot, ",".join(str(b) for b in batches), str(reps)]
    # a wedge (run_module's stall check) is tried once more: the Humanoid's wedges were jaxlib's
    # batched LAPACK kernels blocking on their own thread pool (docs/performance.md); the
    # step's solves no longer call them (dynamics.small_linalg), the retry stays as a guard
    for attempt in (1, 2):
        try:
            return json.loads(run_module(MODULE, args, env, f"diffmb {robot} run", 2400))
        except Exception as e:  # a failing run is reported, not hidden
            notes[f"diffmb_{robot}"] = f"try {attempt}: {type(e).__name__}: {str(e)[-300:]}"
            print(f"diffmb {robot} failed: {notes[f'diffmb_{robot}']}")
            if "wedged" not in str(e):
                return None
    return None


def mujoco_c_engine(path, q, v, ctrl, nthread):
    """``go()`` of one ``mujoco.rollout`` call over the batch at the file's timestep with
    ``nthread`` threads, and the final root heights."""
    import mujoco
    from mujoco import rollout

    m = mujoco.MjModel.from_xml_path(str(path))
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    d = datas[0]
    st = np.zeros((len(q), mujoco.mj_stateSize(m, spec)))
    for b in range(len(q)):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = q[b], v[b]
        mujoco.mj_getState(m, d, st[b], spec)
    n = int(round(_horizon(m.opt.timestep) / m.opt.timestep))
    control = np.tile(ctrl, (len(q), n, 1)) if m.nu else None

    def go():
        return rollout.rollout(m, datas, st, control, nstep=n)

    s, _ = go()
    return go, s[:, -1, 1 + 2]  # state = (time, qpos, qvel, ...): qpos[2]


def run(out_dir, quick: bool = False) -> dict:
    import mujoco

    from ..optim.batch import available_cpus

    t_start = time.perf_counter()
    batches = QUICK_BATCHES if quick else BATCHES
    reps = 1 if quick else 3
    ncpu = available_cpus()
    notes, res, meta = {}, {}, {}
    for robot, path in robot_files().items():
        bs = tuple(sorted({min(b, MAX_BATCH.get(robot, b)) for b in batches}))
        md = _diffmb_subprocess(robot, bs, reps, notes)
        for B in bs:
            for start in STARTS:
                q, v, ctrl = initial_states(path, start, B)
                hz = _horizon(mujoco.MjModel.from_xml_path(str(path)).opt.timestep)
                threads = sorted({1, min(ncpu, B)})
                peers = {nt: mujoco_c_engine(path, q, v, ctrl, nt) for nt in threads}
                tc = {nt: min(best_time(go, 1) for _ in range(reps))
                      for nt, (go, _z) in peers.items()}
                zc = np.asarray(peers[threads[0]][1])
                d = md and md.get(f"{start}_{B}")
                for nt in threads:
                    if d:
                        zd = np.asarray(d["z"])
                        extra = dict(z_diffmb_m=float(np.mean(zd)), z_mujoco_m=float(np.mean(zc)),
                                     z_diff_max_m=float(np.max(np.abs(zd - zc))),
                                     finished=d["ok"], first_call_s=d["first_call_s"],
                                     dt=d["dt"], devices=d["devices"])
                        val = B * d["horizon_s"] / d["time_s"]
                    else:
                        extra, val = {}, float("nan")
                    res[f"{robot}_{start}_b{B}_vs_mujoco_c{'1' if nt == 1 else 'all'}"] = case(
                        val, "sim-s/s", f"MuJoCo C mujoco.rollout, {nt} thread"
                        f"{'s' if nt > 1 else ''}, the file's integrator", B * hz / tc[nt],
                        batch=B, horizon_s=hz, start=start, solver="implicit", **extra)
        meta[robot] = str(Path(path).name)
    write_json(Path(out_dir) / "bench_robots.json", {**res, "_meta": dict(
        quick=quick, robots=meta, notes=notes, wall_s=time.perf_counter() - t_start)})
    return res


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--diffmb":
        print(json.dumps(diffmb_measure(sys.argv[2], [int(b) for b in sys.argv[3].split(",")],
                                        int(sys.argv[4]))))
        sys.exit(0)
    sys.exit(main_for("robots", run))
