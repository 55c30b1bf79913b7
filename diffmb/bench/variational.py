"""Benchmark of the symplectic variational integrator on the four-box chain.

Cases (all measured in the same run, on this machine):
  * var_vs_rk4_tree_equal_energy: simulated seconds per wall second of the variational
    integrator (absolute coordinates, dt = 0.002) vs diffmb's RK4 on the ball-joint tree
    (``diffmb.simulate``) at the step dt_eq whose max relative energy error over the same horizon
    equals the variational one (dt_eq found with MuJoCo's RK4, the same scheme; then checked
    with diffmb's RK4). Steps/s of both are reported too, and MuJoCo C (one thread) as a peer.
  * grad_over_forward: time of ``jax.grad`` of a final-position loss w.r.t. the 12 initial Euler
    angles (implicit differentiation of every Newton solve) over the forward time; the gradient
    is checked against central differences (max relative error reported).
``--quick`` halves the horizons.

Run: ``python -m diffmb.bench.variational [--quick] --out DIR`` (writes
DIR/bench_variational.json), or ``diffmb bench --only variational``.
"""

from __future__ import annotations

import pathlib
import sys
from importlib import resources

import numpy as np

from diffmb.bench import best_time, case, main_for, write_json

CHAIN = pathlib.Path(str(resources.files("diffmb") / "assets" / "chain4.xml"))
EULER = [(np.pi / 4, np.pi / 4, 0.0)] * 2 + [(np.pi / 4, 3 * np.pi / 4, 0.0)] * 2
DT = 0.002


def mujoco_rk4_energy_error(dt, horizon):
    import mujoco

    m = mujoco.MjModel.from_xml_path(str(CHAIN))
    m.opt.timestep = dt
    m.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    e0 = d.energy.sum()
    err = 0.0
    for _ in range(int(round(horizon / dt))):
        mujoco.mj_step(m, d)
        mujoco.mj_forward(m, d)  # after mj_step, kinematics are still those of the old state
        e = d.energy.sum()
        if not np.isfinite(e):
            return np.inf
        err = max(err, abs(e - e0) / abs(e0))
    return err


def tree_energy_error(qs, vs):
    import mujoco

    m = mujoco.MjModel.from_xml_path(str(CHAIN))
    m.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    d = mujoco.MjData(m)
    E = []
    for q, v in zip(qs, vs, strict=False):
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(m, d)
        E.append(d.energy.sum())
    E = np.array(E)
    return float(np.abs(E - E[0]).max() / abs(E[0]))


def initial_state(angles):
    """u0 (28,) of the chain at rest from 12 Euler angles (intrinsic z-x'-z'' per body)."""
    import jax.numpy as jnp

    from diffmb.spatial import quaternion as quat

    ez = jnp.array([0.0, 0.0, 1.5])
    pivot, us = jnp.zeros(3), []
    for k in range(4):
        phi, th, psi = angles[3 * k], angles[3 * k + 1], angles[3 * k + 2]
        q = quat.mul(quat.mul(quat.from_axis_angle(jnp.array([0.0, 0, 1]), phi),
                              quat.from_axis_angle(jnp.array([1.0, 0, 0]), th)),
                     quat.from_axis_angle(jnp.array([0.0, 0, 1]), psi))
        com = pivot - quat.rotate(q, ez)
        pivot = com - quat.rotate(q, ez)
        us.append(jnp.concatenate([com, q]))
    return jnp.concatenate(us)


def run(out: pathlib.Path, quick: bool = False) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import mujoco

    import diffmb
    from diffmb.formulations import variational as vi
    from diffmb.io.mjcf_maximal import maximal_from_mjmodel

    horizon = 2.0 if quick else 4.0
    res, info = {}, {}
    mj = mujoco.MjModel.from_xml_path(str(CHAIN))
    sysm, u0 = maximal_from_mjmodel(mj)
    system = vi.VariationalSystem(sysm)

    # --- variational: speed and energy error ---------------------------------------------------
    n_var = int(round(horizon / DT))
    # compiled once with its initial projection, as the RK4 run below
    var_jit = eqx.filter_jit(lambda s, u: diffmb.simulate(s, u, t1=horizon, dt=DT))
    run = lambda: var_jit(system, u0)  # noqa: E731
    tr = run()
    jax.block_until_ready(tr.q)
    t_var = best_time(lambda: jax.block_until_ready(run().q), reps=2)
    H = np.asarray(tr.aux["energy"])
    e_var = float(np.abs(H - H[0]).max() / abs(H[0]))
    var_sps = n_var / t_var
    info["variational"] = {"dt": DT, "steps": n_var, "wall_s": t_var, "steps_per_s": var_sps,
                           "energy_rel_dev_max": e_var}

    # --- RK4 on the tree: dt at equal energy error (MuJoCo's RK4, same scheme) ----------------
    dts = [0.004, 0.006, 0.008, 0.012, 0.016, 0.024]
    errs = [mujoco_rk4_energy_error(dt, horizon) for dt in dts]
    info["rk4_energy_error_by_dt"] = dict(zip(map(str, dts), errs, strict=False))
    ok = [(dt, e) for dt, e in zip(dts, errs, strict=False) if np.isfinite(e) and e > 0]
    lx, ly = np.log([d for d, _ in ok]), np.log([e for _, e in ok])
    # monotone piecewise-linear interpolation in log-log of the first crossing of e_var
    dt_eq = ok[-1][0]
    for i in range(len(ok) - 1):
        if ly[i] <= np.log(e_var) <= ly[i + 1]:
            w = (np.log(e_var) - ly[i]) / (ly[i + 1] - ly[i])
            dt_eq = float(np.exp(lx[i] + w * (lx[i + 1] - lx[i])))
            break
    else:
        if np.log(e_var) < ly[0]:
            dt_eq = float(np.exp(lx[0] + (np.log(e_var) - ly[0]) / 4.0))  # RK4 slope ~4
    n_rk = int(round(horizon / dt_eq))
    dt_eq = horizon / n_rk
    model = diffmb.load_mjcf(str(CHAIN))
    q0, v0 = model.neutral(), jnp.zeros(model.nv)
    # compiled once, as a user runs a repeated simulation (a plain call retraces every time)
    sim_jit = eqx.filter_jit(lambda m, q, v: diffmb.simulate(m, q, v, t1=horizon, dt=dt_eq,
                                                             solver="rk4", saveat=None))
    sim = lambda: sim_jit(model, q0, v0)  # noqa: E731
    trk = sim()
    jax.block_until_ready(trk.q)
    t_rk = best_time(lambda: jax.block_until_ready(sim().q), reps=2)
    e_rk = tree_energy_error(np.asarray(trk.q), np.asarray(trk.v))
    rk_sps = n_rk / t_rk
    # MuJoCo C, one thread, RK4 at dt_eq
    m = mujoco.MjModel.from_xml_path(str(CHAIN))
    m.opt.timestep = dt_eq
    d = mujoco.MjData(m)

    def mjrun():
        mujoco.mj_resetData(m, d)
        for _ in range(n_rk):
            mujoco.mj_step(m, d)

    t_mj = best_time(mjrun, reps=2)
    info["rk4_tree_diffmb"] = {"dt_eq": dt_eq, "steps": n_rk, "wall_s": t_rk,
                               "steps_per_s": rk_sps, "energy_rel_dev_max": e_rk}
    info["rk4_tree_mujoco_c"] = {"dt_eq": dt_eq, "steps": n_rk, "wall_s": t_mj,
                                 "steps_per_s": n_rk / t_mj}
    res["var_vs_rk4_tree_equal_energy"] = case(
        var_sps * DT, "simulated s per wall s", "diffmb rk4 tree at dt_eq", rk_sps * dt_eq,
        dt_eq=dt_eq, energy_err_var=e_var, energy_err_rk4=e_rk)
    res["var_steps_per_s_vs_rk4_tree"] = case(var_sps, "steps/s", "diffmb rk4 tree steps/s",
                                               rk_sps)
    res["var_vs_mujoco_c_rk4_equal_energy"] = case(
        var_sps * DT, "simulated s per wall s", "MuJoCo C rk4 at dt_eq (1 thread)",
        n_rk * dt_eq / t_mj)

    # --- gradient of a final-position loss w.r.t. the initial angles ---------------------------
    n_g = 250 if quick else 500
    w = jnp.array([0.3, -0.5, 0.8])
    ang0 = jnp.asarray(np.array(EULER).ravel())

    @jax.jit
    def loss(ang):
        tr = diffmb.simulate(system, initial_state(ang), t1=n_g * DT, dt=DT, saveat=[n_g * DT])
        return w @ tr.q[-1, 21:24]  # body 4 COM

    grad = jax.jit(jax.grad(loss))
    jax.block_until_ready(loss(ang0))
    jax.block_until_ready(grad(ang0))
    t_f = best_time(lambda: jax.block_until_ready(loss(ang0)))
    t_g = best_time(lambda: jax.block_until_ready(grad(ang0)))
    g = np.asarray(grad(ang0))
    eps = 1e-5
    fd = np.array([(float(loss(ang0 + e)) - float(loss(ang0 - e))) / (2 * eps)
                   for e in np.eye(12) * eps])
    rel = float(np.abs(g - fd).max() / max(1.0, np.abs(fd).max()))
    info["gradient"] = {"steps": n_g, "forward_s": t_f, "grad_s": t_g, "grad": g.tolist(),
                        "central_diff": fd.tolist(), "max_rel_err_vs_central_diff": rel}
    res["grad_over_forward"] = case(t_g / t_f, "x", "target", 4.0,
                                     max_rel_err_vs_central_diff=rel)

    out.mkdir(parents=True, exist_ok=True)
    payload = {**res, "_details": info, "_device": str(jax.devices()[0])}
    write_json(out / "bench_variational.json", payload)
    return payload


if __name__ == "__main__":
    sys.exit(main_for("variational", run))
