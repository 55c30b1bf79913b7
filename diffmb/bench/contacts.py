"""Benchmark of contact-rich simulation: diffmb's quadruped dropped on a plane.

The model is ``diffmb/assets/quadruped.xml`` (torso sphere, four legs of capsules, a floor
plane). Initial states (seeded): the file's qpos0 with the torso raised to z in [0.35, 0.45] m
and tilted by up to 0.1 rad, hips in [-0.2, 0.2] rad, knees inside their range in [0.6, 0.9]
rad, velocities N(0, 0.1). Every engine simulates the same states for T = 1 s, in float64, and
must pass the same settle check: after T every member finite, torso height in
``BAND`` = [0.23, 0.28] m (it rests at ~0.256 m on its feet with the knees on their lower limit;
an engine whose limits or contacts give way sinks below the band) and torso speed
< ``VMAX`` = 0.05 m/s. Each engine runs at the largest timestep of its candidate list that
passes (candidates tried largest first); the dt used and the settle statistics are in each record.

Cases (unit "sim-s/s": simulated seconds per wall second summed over the batch,
batch * T / wall; MuJoCo C and jaxsim: best of interleaved repetitions in one process; diffmb
and MJX: best of their own repetitions, each in its own process with a timeout and a stall
check, a wedged or failed run reported as such with a null value). diffmb runs
``diffmb.optim.batch_simulate`` with one host device per core and XLA's Eigen thread pool off
(``XLA_FLAGS``), which is how a user gets both cores without the thread-pool wedge:
  * quadruped_b1024_vs_mjx: diffmb ``jit(vmap(simulate))`` (the implicit contact step
    ``solver="implicit"``, the file's force elements
    from ``mjcf_forces`` including its Contacts) vs MJX float64 (its own constraint solver,
    ``jit(vmap)`` of ``mjx.step`` in a loop), MJX measured in its own process (best of its own
    repetitions; retried once if XLA's CPU thread pool wedges, see ``_mjx_subprocess``).
  * quadruped_b1024_vs_mjx_f32: the same diffmb value vs MJX in float32 as its users run it
    (measured in a subprocess without x64, at the dt MJX float64 used, best of its own reps).
  * quadruped_b1024_vs_mujoco_c: vs MuJoCo C (``mujoco.rollout``, one thread per core, the
    file's integrator).
  * quadruped_b1_vs_mujoco_c, quadruped_b64_vs_mujoco_c: the same at batch 1 and 64 (MuJoCo C
    with min(cores, batch) threads; diffmb from the dt it took at batch 1024 down).
  * quadruped_b1024_vs_jaxsim: vs jaxsim (soft contacts, its default integrator), the model
    handed to jaxsim's own loader as an SDF written from the compiled MJCF (its URDF path needs
    Gazebo's converter): the same bodies, inertias, joints, limits (diffmb's limit stiffness and
    damping, its limit damper rescaled: see LIMIT_DELTA_REF) and joint damping; contact parameters
    from jaxsim's estimate_good_contact_parameters (friction 0.5, four feet in contact);
    jaxsim collides boxes, spheres and meshes only, so each capsule is two spheres at its ends
    (jaxsim's default 50 collidable points per sphere; coincident spheres merged). Not
    installed, failing, not settling at any dt tried, or ``--quick``: ``peer_value`` null.
  * grad_over_forward_500: time of ``jax.grad`` of (final torso height + sum of final joint
    angles) w.r.t. the initial velocity over the time of the forward rollout, 500 steps of
    dt = 2 ms (the implicit step) of a dropped quadruped (batch 1, feet landing), both
    jitted, interleaved, in a subprocess pinned to one core (as ``diffmb.bench.sim``); peer:
    the target 3.
jaxsim is measured on the first ``PEER_BATCH`` = 256 members (at ~11 sim-s/s at batch 8 here, a
full batch would take minutes per run; sim-s/s is a throughput; the batch measured is in the
record). MJX too: at batch 1024 its vmapped loop wedged XLA's CPU thread pool twice in a row.
``--quick``: batch 32 (peers too), the same horizon (settling needs it), fewer repetitions,
no jaxsim (its compilation alone takes tens of seconds; its record has ``peer_value`` null).

Run: ``python -m diffmb.bench.contacts [--quick] --out DIR`` (writes DIR/bench_contacts.json),
or ``diffmb bench --only contacts``.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
from importlib import resources

import numpy as np

from diffmb.bench import best_time, case, main_for, run_module, write_json
from diffmb.optim.batch import available_cpus

MODULE = "diffmb.bench.contacts"
QUADRUPED = pathlib.Path(str(resources.files("diffmb") / "assets" / "quadruped.xml"))
T = 1.0
BAND = (0.23, 0.28)
VMAX = 0.05
DT_DIFFMB = (0.02, 0.01, 8e-3, 5e-3, 4e-3, 2e-3)  # the implicit contact step
SOLVER = "implicit"
NO_EIGEN_POOL = "--xla_cpu_multi_thread_eigen=false"
SMALL_BATCHES = (1, 64)  # diffmb against MuJoCo C at these batches too
DT_MUJOCO = (0.02, 0.01, 0.005, 0.0025, 0.001)  # the file's default is 0.005
DT_JAXSIM = (1e-3, 5e-4)  # 4e-3 and 2e-3 diverged (non-finite) when tried
PEER_BATCH = 256
LIMIT_DELTA_REF = 0.01  # rad: jaxsim's limit damping matched to diffmb's at this violation


def initial_states(batch: int, seed: int = 0):
    """(q, v): (batch, nq), (batch, nv) in MuJoCo's layout (free joint: p, quat wxyz; v: world
    linear velocity, body angular velocity)."""
    import mujoco

    mj = mujoco.MjModel.from_xml_path(str(QUADRUPED))
    rng = np.random.default_rng(seed)
    q = np.tile(np.asarray(mj.qpos0, float), (batch, 1))
    q[:, 2] = rng.uniform(0.35, 0.45, batch)
    ax = rng.normal(size=(batch, 3))
    ax /= np.linalg.norm(ax, axis=1, keepdims=True)
    ang = rng.uniform(0.0, 0.1, batch)
    q[:, 3] = np.cos(ang / 2)
    q[:, 4:7] = ax * np.sin(ang / 2)[:, None]
    q[:, 7::2] = rng.uniform(-0.2, 0.2, (batch, 4))  # hips
    q[:, 8::2] = rng.uniform(0.6, 0.9, (batch, 4))  # knees, inside [30, 70] degrees
    v = rng.normal(size=(batch, mj.nv)) * 0.1
    return q, v


def settle_stats(qf, vf) -> dict:
    """The settle check on final states ``qf`` (B, nq), ``vf`` (B, nv) (torso = free joint)."""
    qf, vf = np.asarray(qf, float), np.asarray(vf, float)
    finite = np.isfinite(qf).all(axis=1) & np.isfinite(vf).all(axis=1)
    z = np.where(finite, qf[:, 2], np.nan)
    speed = np.where(finite, np.linalg.norm(vf[:, :3], axis=1), np.nan)
    with np.errstate(invalid="ignore"):
        ok = finite & (z >= BAND[0]) & (z <= BAND[1]) & (speed < VMAX)
    return dict(settled=bool(ok.all()), n_settled=int(ok.sum()), n=int(len(ok)),
                n_finite=int(finite.sum()), z_min=float(np.nanmin(z)) if finite.any() else None,
                z_max=float(np.nanmax(z)) if finite.any() else None,
                speed_max=float(np.nanmax(speed)) if finite.any() else None)


def _first_passing(dts, make):
    """For dt in ``dts`` (largest first): ``make(dt) -> (go, (qf, vf))`` (compiled and run once);
    the first whose final states settle: (dt, go, stats, tried). (None, None, stats, tried) when
    none does."""
    tried, stats = [], None
    for dt in dts:
        go, (qf, vf) = make(dt)
        stats = settle_stats(qf, vf)
        tried.append(dict(dt=dt, **stats))
        if stats["settled"]:
            return dt, go, stats, tried
    return None, None, stats, tried


# ----------------------------------------------------------------------------------- diffmb
def diffmb_measure(batch: int, dts, reps: int) -> dict:
    """diffmb in its own process: ``diffmb.optim.batch_simulate`` (the batch sharded over one
    host device per core, each device's shard vectorised in blocks) of the implicit step, the
    largest dt of ``dts`` that settles, its settle stats, the compile time (first call, the
    persistent compilation cache off), best time of ``reps`` runs and the dts tried."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import diffmb
    from diffmb.optim import batch_simulate

    model = diffmb.load_mjcf(QUADRUPED)
    forces = diffmb.mjcf_forces(QUADRUPED)
    q, v = initial_states(batch)
    compile_s = {}

    def make(dt):
        def go():
            tr = batch_simulate(model, q, v, t1=T, dt=dt, forces=forces, solver=SOLVER,
                                saveat=[T])
            return jax.block_until_ready((tr.q[:, -1], tr.v[:, -1]))

        t0 = time.perf_counter()
        out = go()
        compile_s[dt] = time.perf_counter() - t0
        return go, tuple(np.asarray(x) for x in out)

    dt, go, stats, tried = _first_passing(tuple(dts), make)
    t = best_time(go, reps) if go is not None else float("nan")
    return dict(dt=dt, time_s=t, batch=batch, stats=stats, tried=tried,
                first_call_s=compile_s.get(dt), devices=len(jax.devices()))


def _diffmb_subprocess(batch, reps, notes, dts=DT_DIFFMB, key="diffmb"):
    """diffmb_measure in a fresh process with one host device per core and XLA's Eigen thread
    pool off (the same wedge as MJX's was seen in diffmb's batch-1024 ``jit(vmap)``; one
    device per core gives the parallelism instead); None and a note when it fails."""
    n = available_cpus()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=(
        f"--xla_force_host_platform_device_count={n} {NO_EIGEN_POOL}"))
    args = ["--diffmb", str(batch), ",".join(repr(d) for d in dts), str(reps)]
    try:
        return json.loads(run_module(MODULE, args, env, "diffmb run", 1500))
    except Exception as e:  # a failing run is reported, not hidden
        notes[key] = f"{type(e).__name__}: {str(e)[-300:]}"
        print(f"diffmb failed: {notes[key]}")
        return None


# ------------------------------------------------------------------------------- MuJoCo C
def mujoco_c_engine(q, v):
    import mujoco
    from mujoco import rollout

    mj = mujoco.MjModel.from_xml_path(str(QUADRUPED))
    nthread = min(available_cpus(), len(q))
    datas = [mujoco.MjData(mj) for _ in range(nthread)]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    d = datas[0]

    def make(dt):
        m = mujoco.MjModel.from_xml_path(str(QUADRUPED))
        m.opt.timestep = dt
        st = np.zeros((len(q), mujoco.mj_stateSize(m, spec)))
        for b in range(len(q)):
            mujoco.mj_resetData(m, d)
            d.qpos[:], d.qvel[:] = q[b], v[b]
            mujoco.mj_getState(m, d, st[b], spec)
        n = int(round(T / dt))
        s, _ = rollout.rollout(m, datas, st, nstep=n)
        fin = s[:, -1]
        qf, vf = fin[:, 1:1 + m.nq], fin[:, 1 + m.nq:1 + m.nq + m.nv]
        return (lambda: rollout.rollout(m, datas, st, nstep=n)), (qf, vf)

    return (*_first_passing(DT_MUJOCO, make), nthread)


# ------------------------------------------------------------------------------------ MJX
def mjx_engine(q, v, dts):
    """jit(vmap) of a loop of ``mjx.step`` in the current x64 mode; timestep and step count are
    traced (one compilation for every dt)."""
    import jax
    import jax.numpy as jnp
    import mujoco
    from mujoco import mjx

    mj = mujoco.MjModel.from_xml_path(str(QUADRUPED))
    mx = mjx.put_model(mj)
    ft = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    qb, vb = jnp.asarray(q, ft), jnp.asarray(v, ft)

    def run_one(mx, dt, n, q0, v0):
        mx = mx.replace(opt=mx.opt.replace(timestep=dt))
        d = mjx.make_data(mx).replace(qpos=q0, qvel=v0)
        d = jax.lax.fori_loop(0, n, lambda i, s: mjx.step(mx, s), d)
        return d.qpos, d.qvel

    g = jax.jit(jax.vmap(run_one, in_axes=(None, None, None, 0, 0)))

    def make(dt):
        args = (mx, jnp.asarray(dt, ft), jnp.asarray(int(round(T / dt))), qb, vb)
        out = jax.block_until_ready(g(*args))
        return (lambda: jax.block_until_ready(g(*args))), out

    return _first_passing(dts, make)


def mjx_measure(batch: int, dts, reps: int, x64: bool) -> dict:
    """MJX in its own process (float64 or, ``x64=False``, float32): the largest dt of ``dts``
    that settles, its settle stats, best time of ``reps`` runs and the dts tried."""
    import jax

    jax.config.update("jax_enable_x64", bool(x64))
    jax.config.update("jax_cpu_enable_async_dispatch", False)  # the jax#25861 workaround
    q, v = initial_states(batch)
    dt, go, stats, tried = mjx_engine(q, v, tuple(dts))
    t = best_time(go, reps) if go is not None else float("nan")
    return dict(dt=dt, time_s=t, batch=batch, stats=stats, tried=tried)


def _mjx_subprocess(batch, dts, reps, x64, notes, key):
    """mjx_measure in a fresh process, retried once: XLA's CPU thread pool was seen to wedge
    (0 % CPU in block_until_ready, as in jax-ml/jax#25861) on MJX's vmapped loop, once in
    three runs at batch 256-1024 on this machine; a second hang gives None and a note."""
    args = ["--mjx", str(batch), ",".join(repr(d) for d in dts), str(reps), str(int(x64))]
    for attempt in (1, 2):
        try:  # the second attempt with XLA's Eigen pool off (the wedge's workaround, one core)
            out = _subprocess(args, f"MJX {'float64' if x64 else 'float32'} run", 300, x64=x64,
                              xla_flags=None if attempt == 1 else NO_EIGEN_POOL)
            if attempt == 2:
                notes[key + "_flags"] = f"measured with XLA_FLAGS={NO_EIGEN_POOL} (one core)"
            return out
        except Exception as e:  # a failing or hung peer is reported, not hidden
            notes[key] = f"attempt {attempt}: {type(e).__name__}: {str(e)[-300:]}"
            print(f"MJX ({key}) failed: {notes[key]}")
    return None


# --------------------------------------------------------------------------------- jaxsim
def quadruped_sdf(limit_stiffness, limit_damping) -> str:
    """An SDF of the compiled quadruped for jaxsim's loader (its URDF path needs Gazebo's ``gz``
    converter): bodies and inertias, hinge joints (axis, range, damping, soft-limit stiffness
    and damping per joint), collisions as spheres (each capsule: a sphere at each end; a
    capsule end at a child body's origin is left to the child's capsule)."""
    import mujoco

    mj = mujoco.MjModel.from_xml_path(str(QUADRUPED))
    d = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, d)

    def mat(quat):
        m = np.zeros(9)
        mujoco.mju_quat2Mat(m, np.asarray(quat, float))
        return m.reshape(3, 3)

    def pose(p, R):
        rpy = (np.arctan2(R[2, 1], R[2, 2]), np.arcsin(-np.clip(R[2, 0], -1, 1)),
               np.arctan2(R[1, 0], R[0, 0]))
        return "<pose>" + " ".join(f"{float(a):.12g}" for a in (*p, *rpy)) + "</pose>"

    # link frames relative to the model frame = the root body's frame at qpos0
    R0, p0 = mat(d.xquat[1]), np.asarray(d.xpos[1])
    out = ['<sdf version="1.7"><model name="quadruped">']
    for b in range(1, mj.nbody):
        Rb = R0.T @ mat(d.xquat[b])
        pb = R0.T @ (np.asarray(d.xpos[b]) - p0)
        I = mj.body_inertia[b]
        out.append(f'<link name="{mj.body(b).name}">{pose(pb, Rb)}<inertial>'
                   f'{pose(mj.body_ipos[b], mat(mj.body_iquat[b]))}'
                   f'<mass>{mj.body_mass[b]:.12g}</mass><inertia><ixx>{I[0]:.12g}</ixx>'
                   f'<ixy>0</ixy><ixz>0</ixz><iyy>{I[1]:.12g}</iyy><iyz>0</iyz>'
                   f'<izz>{I[2]:.12g}</izz></inertia></inertial>')
        children = [k for k in range(mj.nbody) if mj.body_parentid[k] == b and k != b
                    and np.any(mj.geom_bodyid == k)]
        for g in np.flatnonzero(mj.geom_bodyid == b):
            r, gp = float(mj.geom_size[g][0]), np.asarray(mj.geom_pos[g], float)
            if mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE:
                centres = [gp]
            elif mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE:
                a = mat(mj.geom_quat[g]) @ np.array([0.0, 0.0, mj.geom_size[g][1]])
                centres = [gp - a, gp + a]
            else:
                raise NotImplementedError(f"geom {mj.geom(g).name}: type {mj.geom_type[g]}")
            for i, c in enumerate(centres):
                if any(np.allclose(mj.body_pos[k], c) for k in children):
                    continue
                out.append(f'<collision name="{mj.geom(g).name}_{i}">{pose(c, np.eye(3))}'
                           f'<geometry><sphere><radius>{r:.12g}</radius></sphere></geometry>'
                           '</collision>')
        out.append("</link>")
    k = 0
    for j in range(mj.njnt):
        if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            continue
        if mj.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE or not np.allclose(mj.jnt_pos[j], 0):
            raise NotImplementedError(f"joint {mj.joint(j).name}: only hinges at body origins")
        b = mj.jnt_bodyid[j]
        lo, hi = mj.jnt_range[j]
        ax = " ".join(f"{float(a):.12g}" for a in mj.jnt_axis[j])
        out.append(f'<joint name="{mj.joint(j).name}" type="revolute">'
                   f'<parent>{mj.body(mj.body_parentid[b]).name}</parent>'
                   f'<child>{mj.body(b).name}</child><axis><xyz>{ax}</xyz>'
                   f'<limit><lower>{lo:.12g}</lower><upper>{hi:.12g}</upper>'
                   f'<stiffness>{float(limit_stiffness[k]):.12g}</stiffness>'
                   f'<dissipation>{float(limit_damping[k]):.12g}</dissipation></limit>'
                   f'<dynamics><spring_reference>0</spring_reference><spring_stiffness>0</spring_stiffness>'
                   f'<damping>{mj.dof_damping[mj.jnt_dofadr[j]]:.12g}</damping>'
                   '</dynamics></axis></joint>')
        k += 1
    out.append("</model></sdf>")
    return "\n".join(out)


def jaxsim_engine(q, v):
    """jaxsim on the same states; (dt, go, stats, tried, info) or raises ImportError."""
    import jax
    import jax.numpy as jnp
    import jaxsim.api as js
    import mujoco
    from jaxsim import VelRepr
    from jaxsim.rbda.contacts import SoftContacts

    import diffmb

    limits = next(f for f in diffmb.mjcf_forces(QUADRUPED) if type(f).__name__ == "JointLimits")
    mj = mujoco.MjModel.from_xml_path(str(QUADRUPED))
    hinge = [mj.joint(j).name for j in range(mj.njnt) if mj.jnt_type[j] != 0]
    # jaxsim's limit damping is multiplied by the limit's spring torque (tau_k * d * qdot):
    # d = b / (k * LIMIT_DELTA_REF) matches diffmb's damping b at a violation of LIMIT_DELTA_REF
    k_lim = np.asarray(limits.stiffness)
    sdf = quadruped_sdf(k_lim, np.asarray(limits.damping) / (k_lim * LIMIT_DELTA_REF))
    B = len(q)
    # initial states in jaxsim's (mixed) representation: world angular velocity
    R = np.zeros((B, 9))
    for b in range(B):
        mujoco.mju_quat2Mat(R[b], q[b, 3:7])
    w_world = np.einsum("bij,bj->bi", R.reshape(B, 3, 3), v[:, 3:6])

    def make(dt):
        model = js.model.JaxSimModel.build_from_model_description(
            model_description=sdf, is_urdf=False, time_step=dt,
            contact_model=SoftContacts.build())
        names = list(model.joint_names())
        perm = [hinge.index(n) for n in names]
        params = js.contact.estimate_good_contact_parameters(
            model, static_friction_coefficient=float(mj.geom_friction[1][0]),
            number_of_active_collidable_points_steady_state=4)
        model = model.replace(contact_params=params)
        n = int(round(T / dt))
        hq = jnp.asarray(q[:, 7:][:, perm])
        hv = jnp.asarray(v[:, 6:][:, perm])

        def one(p, quat, lin, ang, jq, jv):
            d = js.data.JaxSimModelData.build(
                model=model, base_position=p, base_quaternion=quat, joint_positions=jq,
                base_linear_velocity=lin, base_angular_velocity=ang, joint_velocities=jv,
                velocity_representation=VelRepr.Mixed)
            d = jax.lax.fori_loop(0, n, lambda i, s: js.model.step(model, s), d)
            return d.base_position, d.base_velocity[:3]

        f = jax.jit(jax.vmap(one))
        args = tuple(jnp.asarray(a) for a in (q[:, :3], q[:, 3:7], v[:, :3], w_world, hq, hv))
        p, lin = jax.block_until_ready(f(*args))
        # the settle check reads the torso position and linear velocity only
        qf = np.concatenate([np.asarray(p), np.zeros((B, 4))], axis=1)
        vf = np.concatenate([np.asarray(lin), np.zeros((B, 3))], axis=1)
        return (lambda: jax.block_until_ready(f(*args))), (qf, vf)

    return _first_passing(DT_JAXSIM, make)


# ------------------------------------------------------------------------- gradient ratio
def grad_ratio(nsteps: int, dt: float, reps: int) -> list:
    """(gradient time, forward time) of (final torso height + sum of final joint angles) w.r.t.
    the initial velocity, ``nsteps`` steps of a dropped quadruped (batch 1)."""
    import jax
    import jax.numpy as jnp

    import diffmb

    model = diffmb.load_mjcf(QUADRUPED)
    forces = diffmb.mjcf_forces(QUADRUPED)
    q, v = initial_states(1)
    q0, v0 = jnp.asarray(q[0]), jnp.asarray(v[0])
    t1 = nsteps * dt

    def loss(v0):
        tr = diffmb.simulate(model, q0, v0, t1=t1, dt=dt, forces=forces, saveat=[t1],
                             solver=SOLVER, throw=False)
        return tr.q[-1, 2] + jnp.sum(tr.q[-1, 7:])

    f, g = jax.jit(loss), jax.jit(jax.grad(loss))
    f(v0).block_until_ready()
    gv = g(v0).block_until_ready()
    t_f = t_g = float("inf")
    for _ in range(reps):
        t_g = min(t_g, best_time(lambda: g(v0).block_until_ready(), 1))
        t_f = min(t_f, best_time(lambda: f(v0).block_until_ready(), 1))
    return [t_g, t_f, bool(np.isfinite(np.asarray(gv)).all())]


def _subprocess(args, what, timeout, pin=False, x64=True, xla_flags=None):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    if not x64:
        env["JAX_ENABLE_X64"] = "0"
    cpu = min(os.sched_getaffinity(0)) if pin and hasattr(os, "sched_setaffinity") else None
    return json.loads(run_module(MODULE, args, env, what, timeout, cpu))


def run(out_dir, quick: bool = False) -> dict:
    import jax

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    batch = 32 if quick else 1024
    peer_batch = batch if quick else min(batch, PEER_BATCH)
    reps = 2 if quick else 3
    q, v = initial_states(batch)
    t_start = time.perf_counter()
    notes = {}

    md = _diffmb_subprocess(batch, reps, notes)
    dt_d, st_d, tried_d = (md["dt"], md["stats"], md["tried"]) if md else (None, None, [])
    dt_c, go_c, st_c, tried_c, nthread = mujoco_c_engine(q, v)
    # small batches: diffmb from the dt it took at the full batch, MuJoCo C from its own list
    small = {}
    for b in (b for b in SMALL_BATCHES if b < batch):
        dts_b = tuple(d for d in DT_DIFFMB if dt_d is None or d <= dt_d + 1e-12)
        m_b = _diffmb_subprocess(b, reps, notes, dts_b, f"diffmb_b{b}")
        small[b] = (m_b, *mujoco_c_engine(q[:b], v[:b]))

    # MJX float64, in its own process: candidates from MuJoCo C's dt down (the same
    # constraint model), then smaller
    cands = tuple(d for d in DT_MUJOCO if dt_c is None or d <= dt_c + 1e-12)
    batch_x = peer_batch
    mx64 = _mjx_subprocess(batch_x, cands, reps, True, notes, "mjx")
    dt_x = mx64["dt"] if mx64 else None
    st_x, tried_x = (mx64["stats"], mx64["tried"]) if mx64 else (None, [])

    go_j, dt_j, st_j, tried_j, batch_j = None, None, None, [], 0
    if quick:  # jaxsim's compilation alone takes tens of seconds here
        notes["jaxsim"] = "skipped in --quick (compilation time)"
    else:
        try:
            dt_j, go_j, st_j, tried_j = jaxsim_engine(q[:peer_batch], v[:peer_batch])
            batch_j = peer_batch
            if go_j is None:
                notes["jaxsim"] = f"did not settle at any dt in {DT_JAXSIM}"
        except ImportError as e:
            notes["jaxsim"] = f"not installed: {e}"
        except Exception as e:  # a failing peer is reported, not hidden
            notes["jaxsim"] = f"{type(e).__name__}: {e}"
        if "jaxsim" in notes:
            print(f"jaxsim: {notes['jaxsim']}")

    # best of interleaved repetitions (engines that settled)
    engines = {"mujoco_c": go_c, "jaxsim": go_j,
               **{f"mujoco_c_b{b}": small[b][2] for b in small}}
    best = {k: float("inf") for k, g in engines.items() if g is not None}
    for _ in range(reps):
        for k in best:
            best[k] = min(best[k], best_time(engines[k], 1))

    def rate(k, n):
        return n * T / best[k] if k in best else float("nan")

    r_c = rate("mujoco_c", batch)
    r_d = batch * T / md["time_s"] if md and md["dt"] is not None else float("nan")
    r_j = rate("jaxsim", batch_j)
    r_x = batch_x * T / mx64["time_s"] if mx64 and mx64["dt"] is not None else float("nan")

    # MJX float32, as its users run it: a process without x64, at MJX float64's dt
    f32 = _mjx_subprocess(batch_x, (dt_x,), reps, False, notes, "mjx_f32") if dt_x else None
    r_x32 = batch_x * T / f32["time_s"] if f32 and f32["dt"] is not None else float("nan")

    # gradient / forward through a contact-rich 500-step rollout, pinned to one core
    nsteps, dt_g = 500, 2e-3
    t_g, t_f, g_finite = _subprocess(["--grad-ratio", str(nsteps), repr(dt_g),
                                      str(5 if quick else 15)], "gradient-ratio run", 1200,
                                     pin=True)

    common = dict(batch=batch, horizon_s=T, dt=dt_d, settled=st_d["settled"] if st_d else False,
                  settle=st_d, solver=SOLVER, first_call_s=md and md["first_call_s"])
    res = {
        "quadruped_b1024_vs_mjx": case(
            r_d, "sim-s/s", "MJX float64 jit(vmap), its constraint solver", r_x, **common,
            peer_dt=dt_x, peer_batch=batch_x, peer_settle=st_x),
        "quadruped_b1024_vs_mjx_f32": case(
            r_d, "sim-s/s", "MJX float32 jit(vmap) (own process)", r_x32, **common,
            peer_dt=dt_x, peer_batch=batch_x, peer_settle=f32 and f32["stats"]),
        "quadruped_b1024_vs_mujoco_c": case(
            r_d, "sim-s/s", f"MuJoCo C mujoco.rollout, {nthread} threads", r_c, **common,
            peer_dt=dt_c, peer_batch=batch, peer_settle=st_c),
        "quadruped_b1024_vs_jaxsim": case(
            r_d, "sim-s/s", "jaxsim soft contacts jit(vmap)", r_j, **common,
            peer_dt=dt_j, peer_batch=batch_j, peer_settle=st_j,
            **({"peer_note": notes["jaxsim"]} if "jaxsim" in notes else {})),
        **{f"quadruped_b{b}_vs_mujoco_c": case(
            b * T / m_b["time_s"] if m_b and m_b["dt"] is not None else float("nan"),
            "sim-s/s", f"MuJoCo C mujoco.rollout, {nth} thread{'s' if nth > 1 else ''}",
            rate(f"mujoco_c_b{b}", b), batch=b, horizon_s=T, dt=m_b and m_b["dt"],
            settled=bool(m_b and m_b["stats"]["settled"]), settle=m_b and m_b["stats"],
            solver=SOLVER, first_call_s=m_b and m_b["first_call_s"], peer_dt=dt_cb,
            peer_batch=b, peer_settle=st_cb)
           for b, (m_b, dt_cb, _go, st_cb, _tr, nth) in small.items()},
        "grad_over_forward_500": case(t_g / t_f, "ratio", "target", 3.0, nsteps=nsteps,
                                      dt=dt_g, t_grad_s=t_g, t_forward_s=t_f,
                                      grad_finite=g_finite),
    }
    meta = dict(quick=quick, batch=batch, horizon_s=T, band_m=BAND, vmax_m_s=VMAX, reps=reps,
                best_times_s=best, tried=dict(diffmb=tried_d, mujoco_c=tried_c, mjx=tried_x,
                                              jaxsim=tried_j),
                notes=notes, wall_s=time.perf_counter() - t_start,
                devices=[str(x) for x in jax.devices()])
    write_json(out_dir / "bench_contacts.json", {**res, "_meta": meta})
    return res


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--mjx":
        dts_ = [float(x) for x in sys.argv[3].split(",")]
        print(json.dumps(mjx_measure(int(sys.argv[2]), dts_, int(sys.argv[4]),
                                     bool(int(sys.argv[5])))))
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == "--diffmb":
        print(json.dumps(diffmb_measure(int(sys.argv[2]), [float(x) for x in
                                                           sys.argv[3].split(",")],
                                        int(sys.argv[4]))))
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == "--grad-ratio":
        print(json.dumps(grad_ratio(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))))
        sys.exit(0)
    sys.exit(main_for("contacts", run))
