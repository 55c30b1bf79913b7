"""Study ``ant-gait``: a gait for gymnasium's Ant, optimised by gradient and by CMA-ES at equal
time (issue 31's gait proof on a land robot).

Model: gymnasium's ``ant.xml`` as MuJoCo simulates it (:func:`diffmb.load_mjcf`,
:func:`diffmb.mjcf_forces`: the file's motors, joint limits, damping and its contacts with
stiction), the implicit contact step at the file's timestep (0.01 s), from the file's
``init_qpos`` (torso at 0.55 m) with zero velocities.

Gait: an open-loop periodic control of the 8 motors (hips and ankles, the file's actuator
order): u_j(t) = tanh(K_j(f t)), K_j the band-limited periodic interpolant of 8 knots per
cycle (:func:`diffmb.optim.gaits.periodic_knots`), f the frequency on (:data:`F_RANGE`);
u ∈ (−1, 1) is the motor's control (torque = 150 u N m, the file's gear). θ (65,): the
frequency's logit (θ₀ = 0: :data:`F0`) and the 8 × 8 knots. θ = 0 is u = 0, the Ant standing.

Objective (:func:`gait_objective`): J(θ) = −Δx/T, minus the torso's mean forward speed over
T = 2 s, Δx its forward travel until the first state whose torso height leaves gymnasium's
healthy range (0.2, 1.0) m (gymnasium ends the Ant's episodes there); a run that fails scores
J = 1 m/s. Nothing else penalises a turn or a flip. At the file's 10 ms step the optimisers
find gaits that exploit the implicit step's discretisation error (far faster than the same
gait at 2 ms or in MuJoCo): the study evaluates every best gait again at
:data:`CHECK_DT` and in MuJoCo (:func:`mujoco_objective`) and reports both.

Proof (:func:`optimise`, :data:`PROOF`): a gradient method (:data:`GRADIENT`, settings chosen
on seed 100, not one of the reported seeds) on ``jax.value_and_grad`` of J against
``cmaes.CMA`` (default population, a generation evaluated by ``jax.vmap`` of J) from the same
start (:func:`start`), each for the same budget on the process's CPU clock, compile charged to
every seed (:func:`diffmb.optim.gaits.compare_optimisers`); both clocks recorded.

``reproduce(out_dir, quick)`` writes ``results.json`` (``gait_optimisation``: the comparison's
result), ``fig_gait_optimisation.png`` and ``report.md``; quick: one seed, a 100 s budget, no
zero-gait check and no re-evaluation at 2 ms.
"""

from __future__ import annotations

import json
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from ..optim.batch import available_cpus
from ..optim.gaits import (
    compare_optimisers,
    periodic_knots,
    plot_comparison,
    value_with_gradient_of,
)

__all__ = ["reproduce", "ant_path", "load", "gait_params", "gait_control", "gait_objective",
           "start", "optimise", "N_PARAMS", "GAIT", "GRADIENT", "PROOF", "F_RANGE", "F0"]

KNOTS = 8  # knots per motor per cycle
N_MOTORS = 8
N_PARAMS = 1 + N_MOTORS * KNOTS  # the frequency's logit and the knots
F_RANGE = (0.5, 4.0)  # Hz
F0 = 2.0  # Hz, the frequency at θ₀ = 0
SAVE_DT = 0.01  # s, saved states (every step at the file's timestep)
HEALTHY_Z = (0.2, 1.0)  # m, gymnasium Ant's healthy torso heights (its episodes end outside)
START_SPREAD = 0.3  # the starts' knots ~ N(0, 0.3²) (u ≈ ±0.3, ±45 N m), θ₀ ~ N(0, 0.25²)
FAIL_J = 1.0  # m/s: the score of a run that fails
CHECK_DT = 0.002  # s: the best gaits' J is evaluated again with this step
# the objective: horizon [s], step [s], the implicit contact step; the gradient's options:
# backward smoothing of the contacts [m] (None: exact) and truncation [s] (None: off)
GAIT = dict(T=2.0, dt=0.01, solver="implicit", width=None, segment=None, sigma0=0.5)
# the gradient method (diffmb.optim.gaits.compare_optimisers's settings), chosen on seed 100
# with a 120 s budget among guided ES on the full gradient, guided ES on the gradient truncated
# every 0.5 s and the line search along it (J −10.34, −5.54, −2.70 m/s; CMA-ES σ₀ = 0.5:
# −5.24); backward smoothing at 1 mm gave gradient norms of 1e11 and was not used
GRADIENT = dict(name="guided-es", settings=dict(kind="guided-es", pairs=8, sigma=1.0,
                                                alpha=0.5, k=4, beta=2.0, lr=0.1))
PROOF = {True: dict(seeds=(0,), budget_s=100.0, clock="cpu"),
         False: dict(seeds=(0, 1, 2, 3, 4), budget_s=120.0, clock="cpu")}


def ant_path() -> pathlib.Path:
    """gymnasium's ``ant.xml`` (gymnasium is a test dependency)."""
    from ..bench.robots import _gymnasium_asset

    p = _gymnasium_asset("ant.xml")
    if p is None:
        raise RuntimeError("ant-gait: gymnasium's ant.xml was not found (pip install "
                           "gymnasium, a test dependency of diffmb)")
    return p


def load(path=None):
    """(model, forces, q0) of the Ant: the file's model and forces (contacts with stiction)
    and its ``init_qpos`` (torso at 0.55 m, ankles at ±1 rad)."""
    import mujoco

    from ..io.mjcf import load_mjcf, mjcf_forces

    path = ant_path() if path is None else path
    mj = mujoco.MjModel.from_xml_path(str(path))
    q0 = np.array(mj.numeric_data[: mj.nq], float) if mj.nnumeric else np.array(mj.qpos0)
    return load_mjcf(path), mjcf_forces(path), q0


def gait_params(theta):
    """(f [Hz], K (8 motors, 8 knots)) of θ (:data:`N_PARAMS`,)."""
    theta = jnp.asarray(theta)
    if theta.shape[-1:] != (N_PARAMS,):
        raise ValueError(f"ant gait_params: theta has shape {theta.shape}, expected "
                         f"({N_PARAMS},) (a frequency logit and {N_MOTORS} x {KNOTS} knots)")
    lo, hi = F_RANGE
    f = lo + (hi - lo) * jax.nn.sigmoid(theta[0] + np.log((F0 - lo) / (hi - F0)))
    return f, theta[1:].reshape(N_MOTORS, KNOTS)


def gait_control(t, q, v, params):
    """The motors' controls (8,) in (−1, 1) at time ``t`` of the gait ``params = (f, K)``: a
    ``simulate`` control."""
    f, K = params
    return jnp.tanh(periodic_knots(f * t, K))


def gait_objective(model, forces, q0, *, T=None, dt=None, solver=None, width=None,
                   segment=None):
    """J(θ) -> (J, Δx): J = −Δx/T, Δx the torso's forward travel in a run of T s (defaults
    :data:`GAIT`) from ``q0`` under the gait of θ, counted until the first saved state (every
    :data:`SAVE_DT`) whose torso height leaves :data:`HEALTHY_Z`; FAIL_J where the run fails. ``width`` [m]: the contacts' backward smoothing (reverse mode only; the run is
    unchanged). ``segment`` [s]: truncated backpropagation (the run and J unchanged): the
    gradient is that of the sum of the segments' displacements, each with its start held
    fixed."""
    from ..contacts import backward_smoothed
    from ..simulation import SOLVERS, TruncatedBackprop, simulate

    T = GAIT["T"] if T is None else float(T)
    dt = GAIT["dt"] if dt is None else float(dt)
    solver = GAIT["solver"] if solver is None else solver
    fr = backward_smoothed(forces, width) if width is not None else tuple(forces)
    n = int(round(T / SAVE_DT))
    if abs(n * SAVE_DT - T) > 1e-9 or abs(SAVE_DT / dt - round(SAVE_DT / dt)) > 1e-9:
        raise ValueError(f"ant gait_objective: T = {T} s must be a multiple of {SAVE_DT} s and "
                         f"{SAVE_DT} s of dt = {dt} s")
    ts = np.round(np.arange(n + 1) * SAVE_DT, 10)
    bounds = None
    if segment is not None:
        m = float(segment) / SAVE_DT
        if not (segment > 0 and abs(m - round(m)) < 1e-9):
            raise ValueError(f"ant gait_objective: segment = {segment} s must be a positive "
                             f"multiple of {SAVE_DT} s")
        solver = TruncatedBackprop(SOLVERS[solver] if isinstance(solver, str) else solver,
                                   float(segment))
        bounds = list(range(0, n, int(round(m)))) + [n]
    q0 = jnp.asarray(q0, float)

    def J(theta):
        tr = simulate(model, q0, None, t1=T, dt=dt, solver=solver, forces=fr,
                      control=gait_control, params=gait_params(theta), saveat=ts, throw=False)
        x, z = tr.q[:, 0], tr.q[:, 2]
        # gymnasium's termination: the run counts up to the first state outside HEALTHY_Z
        alive = jnp.cumprod((z >= HEALTHY_Z[0]) & (z <= HEALTHY_Z[1]))[1:].astype(x.dtype)
        steps = jnp.diff(x)
        dx = jnp.sum(alive * steps)
        val = -dx / T
        if bounds is not None:  # each segment's increments with its start state held fixed
            sg = jax.lax.stop_gradient
            seg = sum(jnp.sum(alive[a:b] * jnp.diff(x[a:b + 1].at[0].set(sg(x[a]))))
                      for a, b in zip(bounds, bounds[1:], strict=False))
            val = value_with_gradient_of(val, -seg / T)
        ok = jnp.isfinite(val) & tr.ok
        return jnp.where(ok, val, FAIL_J), dx

    return J


def start(seed):
    """The seed's starting θ: every knot ~ N(0, :data:`START_SPREAD`²), the frequency's logit
    ~ N(0, 0.25²)."""
    rng = np.random.default_rng(seed)
    return np.concatenate([0.25 * rng.normal(size=1),
                           START_SPREAD * rng.normal(size=N_PARAMS - 1)])


def optimise(model=None, forces=None, q0=None, *, seeds, budget_s, clock="cpu", gradient=None,
             width=None, segment=None, sigma0=None, log=print) -> dict:
    """The proof: the gradient method ``gradient`` (default :data:`GRADIENT`, a dict with
    ``name`` and ``settings``) on J (its gradient with ``width``/``segment``, defaults
    :data:`GAIT`) against CMA-ES (``sigma0``) at equal time, every seed
    (:func:`diffmb.optim.gaits.compare_optimisers`, whose result this returns with the
    objective's settings)."""
    if model is None:
        model, forces, q0 = load()
    gradient = GRADIENT if gradient is None else gradient
    width = GAIT["width"] if width is None else width
    segment = GAIT["segment"] if segment is None else segment
    sigma0 = GAIT["sigma0"] if sigma0 is None else sigma0
    J = gait_objective(model, forces, q0)
    Jg = J if width is None and segment is None else gait_objective(
        model, forces, q0, width=width, segment=segment)
    out = compare_optimisers(J, N_PARAMS, start, J_gradient=Jg, seeds=seeds, budget_s=budget_s,
                             settings=gradient["settings"], clock=clock, sigma0=sigma0,
                             method=gradient["name"], who="ant gait proof", log=log)
    out["gradient"]["settings"].update(smoothing_width_m=width, segment_s=segment)
    out["objective"] = {"T_s": GAIT["T"], "dt_s": GAIT["dt"], "solver": GAIT["solver"],
                        "J": "-dx/T [m/s], dx until the torso leaves healthy_z_m",
                        "healthy_z_m": list(HEALTHY_Z), "fail_J": FAIL_J,
                        "n_params": N_PARAMS, "f_range_hz": list(F_RANGE)}
    return out


# ------------------------------------------------------------------------------ reproduce


def _stand_check(model, forces, q0, path) -> dict:
    """θ = 0 (u = 0) for T s: diffmb's torso height and drift against MuJoCo's on the same file
    and start (MuJoCo's own integrator and step)."""
    import mujoco

    from ..simulation import simulate

    T = GAIT["T"]
    ts = [0.5, T]
    tr = simulate(model, jnp.asarray(q0), None, t1=T, dt=GAIT["dt"], solver=GAIT["solver"],
                  forces=forces, control=gait_control, params=gait_params(jnp.zeros(N_PARAMS)),
                  saveat=ts, throw=False)
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    d.qpos[:] = q0
    z_mj = []
    for t in ts:
        while d.time < t - 1e-9:
            mujoco.mj_step(mj, d)
        z_mj.append(float(d.qpos[2]))
    q = np.asarray(tr.q)
    return {"t_s": ts, "z_m": q[:, 2].tolist(), "z_mujoco_m": z_mj,
            "xy_drift_m": float(np.linalg.norm(q[-1, :2] - q0[:2])), "ok": bool(tr.ok)}


def mujoco_objective(theta, path=None, q0=None, T=None) -> float:
    """J of the gait θ simulated by MuJoCo on the same file (its own contacts, integrator and
    step; the control set before each step), with the same termination rule."""
    import mujoco

    path = ant_path() if path is None else path
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    if q0 is not None:
        d.qpos[:] = q0
    T = GAIT["T"] if T is None else T
    p = jax.tree.map(np.asarray, gait_params(jnp.asarray(theta)))
    f, K = float(p[0]), p[1]
    x0 = x = float(d.qpos[0])
    for _ in range(int(round(T / mj.opt.timestep))):
        d.ctrl[:] = np.tanh(np.asarray(periodic_knots(f * d.time, K)))
        mujoco.mj_step(mj, d)
        if not HEALTHY_Z[0] <= d.qpos[2] <= HEALTHY_Z[1]:
            break
        x = float(d.qpos[0])
    return -(x - x0) / T


def _best_gaits_elsewhere(model, forces, q0, path, go, quick=False) -> dict:
    """Every seed's best θ of both methods evaluated again: J with the implicit step at
    :data:`CHECK_DT` (the step's discretisation error; not in the quick run) and J in
    MuJoCo."""
    J = jax.jit(lambda th: gait_objective(model, forces, q0, dt=CHECK_DT)(th)[0])
    out = {}
    for name in ("gradient", "cmaes"):
        ths = go[name]["theta_best"]
        out[name] = {"J": [s["J_final"] for s in go[name]["seeds"]],
                     "J_check_dt": [None if quick else float(J(jnp.asarray(th)))
                                    for th in ths],
                     "J_mujoco": [mujoco_objective(th, path, q0) for th in ths]}
    out["check_dt_s"] = CHECK_DT
    return out


def reproduce(out_dir, quick: bool = False) -> dict:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    path = ant_path()
    model, forces, q0 = load(path)
    pc = PROOF[quick]
    go = optimise(model, forces, q0, **pc)
    go.pop("_batch")
    (out_dir / "results.json").write_text(json.dumps({"gait_optimisation": go}, indent=2))
    res = {"gait_optimisation": go,
           "best_gaits_elsewhere": _best_gaits_elsewhere(model, forces, q0, path, go, quick),
           "stand": None if quick else _stand_check(model, forces, q0, path),
           "machine": _machine()}
    g, c = go["gradient"], go["cmaes"]
    res["summary"] = {
        "gradient_median_J": g["median_J_final"], "cmaes_median_J": c["median_J_final"],
        "gradient_wins_at_equal_time": bool(g["median_J_final"] < c["median_J_final"]),
        "gradient_reaches_cmaes_final_in_half_the_time": bool(
            g["time_to_reach_cmaes_final_s"] <= 0.5 * go["budget_s"])}
    res["wall_s"] = time.perf_counter() - t
    (out_dir / "results.json").write_text(json.dumps(res, indent=2))
    fig = _figure(out_dir, go)
    (out_dir / "report.md").write_text(_report(res, fig, quick))
    return res


def _machine() -> dict:
    """The machine's CPU count, the cores this process may run on, the processor."""
    import os

    return {"cpus": os.cpu_count(), "cpus_used": available_cpus(),
            "processor": platform.processor() or platform.machine()}


def _figure(out_dir, go):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plot_comparison(out_dir, go, plt)


def _report(res, fig, quick) -> str:
    go = res["gait_optimisation"]
    g, c = go["gradient"], go["cmaes"]
    clock = "CPU" if go["clock"] == "cpu_s" else "wall"
    fmt = lambda x: f"{x:.1f} s" if np.isfinite(x) else "never"
    st = res["stand"]
    lines = [
        "# Ant gait: gradient against CMA-ES at equal time" + (" (quick)" if quick else ""), "",
        f"gymnasium's Ant, the file's contacts with stiction, implicit contact step at "
        f"{go['objective']['dt_s']} s; J = −Δx/T over T = {go['objective']['T_s']} s, Δx the "
        "torso's forward travel until its height leaves gymnasium's healthy range "
        f"{HEALTHY_Z} m (m/s, lower is better); {N_PARAMS} parameters (a frequency and 8 × 8 "
        "knots, u = tanh of the knots' periodic interpolant).", "",
        f"Gradient method: {g['method']} {json.dumps(g['settings'])}. CMA-ES: cmaes.CMA, "
        f"population {c['population_size']}, σ₀ = {c['sigma0']}. Budget {go['budget_s']:.0f} s "
        f"per method and seed on the process's {clock} clock, compile charged to every seed: "
        f"gradient {g['compile_wall_s']:.1f} s wall / {g['compile_cpu_s']:.1f} s CPU, CMA-ES "
        f"{c['compile_wall_s']:.1f} s wall / {c['compile_cpu_s']:.1f} s CPU. Machine: "
        f"{res['machine']['cpus']} CPU cores ({res['machine']['processor']}), this process "
        f"on {res['machine']['cpus_used']}.", "",
        "| seed | gradient J | gradients / runs | CMA-ES J | runs | gradient reaches CMA-ES's J at |",
        "|---|---|---|---|---|---|"]
    reach = g["time_to_reach_cmaes_final_per_seed_s"]
    for rg, rc, t in zip(g["seeds"], c["seeds"], reach, strict=True):
        lines.append(f"| {rg['seed']} | {rg['J_final']:.4f} | {rg['gradients']} / "
                     f"{rg['evaluations']} | {rc['J_final']:.4f} | {rc['evaluations']} | "
                     f"{fmt(t)} |")
    lines += [f"| median | {g['median_J_final']:.4f} | | {c['median_J_final']:.4f} | | "
              f"{fmt(g['time_to_reach_cmaes_final_s'])} |", "",
              f"- At equal time the median J is gradient {g['median_J_final']:.4f}, CMA-ES "
              f"{c['median_J_final']:.4f}: **"
              + ("the gradient method wins" if res["summary"]["gradient_wins_at_equal_time"]
                 else "CMA-ES wins") + "**.",
              "- The gradient method reaches CMA-ES's final J in half the budget (median): "
              + ("yes" if res["summary"]["gradient_reaches_cmaes_final_in_half_the_time"]
                 else "no") + ".",
              ""]
    if st is not None:
        lines += [f"- The zero gait (u = 0): torso height {st['z_m'][0]:.4f} m at "
                  f"{st['t_s'][0]} s and {st['z_m'][1]:.4f} m at {st['t_s'][1]} s (MuJoCo "
                  f"{st['z_mujoco_m'][0]:.4f} and {st['z_mujoco_m'][1]:.4f} m: the unpowered legs "
                  "creep outward in both, through MuJoCo's soft friction and the contacts' "
                  "creep); "
                  f"horizontal drift {st['xy_drift_m']:.1e} m.", ""]
    el = res["best_gaits_elsewhere"]
    k = "J_check_dt"
    num = lambda x: "–" if x is None else f"{x:.3f}"
    lines += [f"Every seed's best gait evaluated again: J with the implicit step at "
              f"{CHECK_DT * 1e3:.0f} ms instead of {go['objective']['dt_s'] * 1e3:.0f} ms, and "
              "J in MuJoCo (same file, open loop, same termination rule). Where they differ "
              "much the optimiser has exploited the step's discretisation error.", "",
              "| seed | gradient J | at 2 ms | MuJoCo | CMA-ES J | at 2 ms | MuJoCo |",
              "|---|---|---|---|---|---|---|"]
    for i, s in enumerate(go["seeds"]):
        lines.append(f"| {s} | {el['gradient']['J'][i]:.3f} | {num(el['gradient'][k][i])} | "
                     f"{el['gradient']['J_mujoco'][i]:.3f} | {el['cmaes']['J'][i]:.3f} | "
                     f"{num(el['cmaes'][k][i])} | {el['cmaes']['J_mujoco'][i]:.3f} |")
    lines += ["", f"![{fig[1]}]({fig[0]})", ""]
    return "\n".join(lines)
