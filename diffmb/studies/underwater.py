"""Study: the underwater self-reconfigurable modular robot — path matrices, Kane's equations with
full hydrodynamics, a CPG-driven quadruped walking on the sea floor, gait optimisation by
gradient, identification of drag and added mass.

Source: Xu, Yang, Ge & Wang (2018), "Modeling of underwater self-reconfigurable robot based on
Kane's dynamics and path matrix", Journal of Ship Mechanics 22(1) (seed 004); its formulas were
lost in the copy and are rebuilt from Kane & Levinson (*Dynamics: Theory and Applications*, 1985),
Fossen (*Handbook of Marine Craft Hydrodynamics and Motion Control*, 2011) and Yang et al. (2014).

Model: :mod:`diffmb.models.underwater` (sizes, masses and coefficients with their sources); the
quadruped is generated from its module graph (:func:`~diffmb.models.underwater.quadruped`), as
are the nine-module robot of Fig. 2, a snake checked against MuJoCo on its MJCF export, two
snakes that dock and undock (:func:`diffmb.modular.dock`, :func:`diffmb.modular.undock`), and a
snake that docks its two ends into a ring (:func:`diffmb.modular.close_loop`: a closed loop, a
weld equality).
Dynamics: ABA with RK4; Kane's formulation (:mod:`diffmb.dynamics.kane`, built for any tree from
its partial velocities; the free joint's generalized speeds) checked against ABA on random
states with the same hydrodynamic forces and added inertia.

Gait optimisation (issue 31's proof): a knot table of 8 joints × 8 knots per cycle and a
frequency (65 parameters, :func:`gait_params`) is optimised in the reference model (the file's
contacts with stiction) by two methods that call one objective, :func:`gait_objective`
(J = −v̄ + λ P̄/(m g) over a window of a walk with the implicit contact step): a gradient
method on ``jax.value_and_grad`` of J, the contacts' derivatives backward-smoothed
(:func:`diffmb.contacts.backward_smoothed`), a named option (:data:`GRADIENT_METHODS`; by
default guided evolutionary strategies: reverse-mode gradients truncated every 0.25 s
(``gait_objective``'s ``segment``) shape where 16 antithetic walks, in one ``jax.vmap``,
sample, and the walks' smoothed-gradient estimate drives an Adam step; the others a line
search along the full or the truncated gradient, or Adam), against CMA-ES (``cmaes.CMA``, ask/tell,
a generation evaluated by ``jax.vmap`` of J), at equal time with each method's compile charged
to every seed (:func:`optimise_gait`; the budget on the process's CPU time, which the load of a
shared machine does not inflate as it does wall time; both clocks recorded). The optimised gaits are then walked with RK4
for the report's longer horizon and window.

``reproduce(out_dir, quick)`` writes ``results.json``, figures and ``report.md``;
``identify(data_csv, out_dir)`` fits drag and added mass of one module to a free-swimming record
(``diffmb/assets/underwater_module.csv``).
"""

from __future__ import annotations

import json
import pathlib
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..forces.hydro import Hydrodynamics, lamb_k_factors
from ..models import underwater as uw
from ..optim.gaits import check_comparison, compare_optimisers, periodic_knots, plot_comparison
from ..optim.gaits import compile_cold as _compile
from ..optim.gaits import value_with_gradient_of as _value_with_gradient_of
from ..optim.lsq import least_squares
from ..simulation import simulate
from ..systems import forward

__all__ = ["reproduce", "identify", "kane_vs_aba", "path_results", "walk", "gait_metrics",
           "ring_docking_run",
           "optimise_gait", "module_record", "fit_module", "module_csv_path", "write_module_csv",
           "gait_objective", "gait_params", "knot_targets", "nominal_knots", "objective_of_run",
           "N_GAIT_PARAMS", "GAIT", "GRADIENT_METHODS", "PROOF", "DT", "KP", "KV", "LAMBDA",
           "shared_parameters_run"]

DT = 2e-3  # s, RK4 step of the walking runs
SAVE_DT = 0.01  # s, output step (power integrated by the trapezoid rule on it)
KP, KV = 3000.0, 300.0  # the servos of the MJCF (N m/rad, N m s/rad)
WALK_T = {True: 6.0, False: 10.0}  # s, walking horizons (quick, full)
WINDOW_START = 2.0  # s, speeds and cost of transport averaged over [2 s, end]
LAMBDA = 0.5  # energy penalty: J = −v̄ + λ P̄/(m g)
# the gait proof (issue 31): a knot table of 8 joints x 8 knots and a frequency, optimised in the
# reference model by a gradient method (GAIT["gradient"]) against CMA-ES at equal time
GAIT_KNOTS = 8  # knots per joint per cycle
N_GAIT_PARAMS = 1 + 8 * GAIT_KNOTS  # frequency logit and knots
F_RANGE = (0.2, 1.0)  # Hz
KNOT_SCALE = 0.1  # rad per unit of θ
START_SPREAD_RAD = 0.05  # rad, seed-dependent perturbation of the start's knots
GAIT = dict(T=4.0, window=1.0, solver="implicit", dt=0.005, width=1e-3, sigma0=1.0,
            gradient="guided-es")
# the gradient methods (diffmb.optim.gaits). Adam (adam_runs): its step lr [θ units], the runs
# in one vmapped call (batch) and the spread of their starts about the seed's start [θ units].
# Line search (line_search_runs): the step sizes walked per gradient in one vmapped call (batch),
# the first largest move alpha0 [θ units], the grid's ratio and the jitter [θ units] of the next
# gradient after a failed search
GRADIENT_METHODS = {
    "adam": dict(kind="adam", lr=0.1, batch=1, spread=0.0),  # the first proof's
    "adam-batch": dict(kind="adam", lr=0.5, batch=8, spread=1.0),
    "line-search": dict(kind="line-search", batch=16, alpha0=0.5, ratio=2.0, jitter=1.0),
    # the line search on the truncated gradient (gait_objective's segment [s]: reverse mode
    # cut every segment, the same walk and J)
    "line-search-tbptt-0.25": dict(kind="line-search", batch=16, alpha0=0.5, ratio=2.0,
                                   jitter=1.0, segment=0.25),
    "line-search-tbptt-0.5": dict(kind="line-search", batch=16, alpha0=0.5, ratio=2.0,
                                  jitter=1.0, segment=0.5),
    "line-search-tbptt-1": dict(kind="line-search", batch=16, alpha0=0.5, ratio=2.0,
                                jitter=1.0, segment=1.0),
    # guided ES (guided_es_runs): pairs antithetic walks per gradient, their perturbation's
    # norm sigma [θ units], alpha its isotropic share, the last k gradients span the rest;
    # beta the estimate's scale, lr Adam's step [θ units]; the truncated gradient
    "guided-es": dict(kind="guided-es", pairs=8, sigma=8.0, alpha=0.5, k=4, beta=2.0, lr=2.0,
                      segment=0.25),
}
# seeds and budget per method and seed [s, on the clock named, compile included]
PROOF = {True: dict(seeds=(0,), budget_s=75.0, clock="cpu"),
         False: dict(seeds=(0, 1, 2, 3, 4), budget_s=120.0, clock="cpu")}
# identification: one module released at 0.8 m/s with a spin, 4 s at 20 Hz
ID_T, ID_RATE = 4.0, 20.0
ID_V0 = (0.8, 0.3, -0.2, 0.4, 1.0, -0.8)  # ṗ (world, m/s), ω (body, rad/s)
ID_NOISE = {"position_m": 1e-3, "quaternion": 1e-3}
ID_DT = 0.01  # s, RK4 step of the module (its error is far below the noise)
ID_PARAMS = ("drag_x", "drag_y", "drag_z", "drag_rot_y", "added_mass_x", "added_mass_y",
             "added_inertia_y")
PAPER = {"z0_m": -1.2, "x0_m": 0.0, "g": 9.8, "paths": 4, "nine_module_paths": 6}


# ------------------------------------------------------------------------------ topology, Kane


def path_results() -> dict:
    """Path matrices of the quadruped (columns s0…s9) and of the nine-module example, by the
    core's topology functions, with the accessibility matrices and the model's own tree."""
    from .. import topology as tp

    P4 = uw.path_matrix(uw.QUADRUPED_GRAPH)
    P9 = uw.path_matrix(uw.NINE_MODULE_GRAPH)
    A4 = tp.accessibility_matrix(10, uw.QUADRUPED_GRAPH)
    A9 = tp.accessibility_matrix(9, uw.NINE_MODULE_GRAPH)
    return {"path_matrix": P4.tolist(), "path_matrix_nine_module": P9.tolist(),
            "accessibility_matrix": A4.tolist(), "accessibility_matrix_nine_module": A9.tolist(),
            "terminal_modules": [f"s{i}" for i in tp.terminal_links(A4)],
            "terminal_modules_nine_module": [f"s{i}" for i in tp.terminal_links(A9)]}


def kane_vs_aba(model, forces, n=20, seed=0) -> float:
    """max |a_kane − a_aba| over ``n`` random states and servo targets (SI), the quadruped's
    full set of elements (hydrodynamics, servos, damping, floor contacts) and added inertia."""
    rng = np.random.default_rng(seed)
    def acc(q, v, u, method):
        out = forward(model, q, v, forces=forces, ctrl=u, method=method)
        return out[0] if isinstance(out, tuple) else out  # (a, ds) with stateful contacts

    fw = {m: jax.jit(lambda q, v, u, m=m: acc(q, v, u, m)) for m in ("aba", "kane")}
    worst = 0.0
    for _ in range(n):
        q = np.array(model.qpos0, float)
        q[:2] = rng.normal(size=2)
        q[2] = rng.uniform(0.9, 1.3)  # some states put feet into the floor
        qq = rng.normal(size=4)
        q[3:7] = qq / np.linalg.norm(qq)
        q[7:] = rng.uniform(-1.0, 1.0, model.nq - 7)
        v = rng.normal(size=model.nv)
        u = rng.uniform(-1.0, 1.0, 8)
        a = np.asarray(fw["aba"](q, v, u))
        b = np.asarray(fw["kane"](q, v, u))
        worst = max(worst, float(np.max(np.abs(a - b))))
    return worst


# ------------------------------------------------------------------------------ configurations

CONFIG_STATES = {True: 3, False: 10}  # random states per configuration (Kane along the paths)
SNAKE_N = 5  # modules of the swimming snake
SNAKE_WAVE = dict(amplitude=0.5, frequency=0.5)  # rad, Hz (uw.snake_cpg, one wave length)
SNAKE_T = {True: 2.0, False: 4.0}  # s
SNAKE_DT = 1e-3  # s, RK4
NINE_T = {True: 2.0, False: 5.0}  # s
NINE_AMP, NINE_FREQ = 0.3, 0.5  # rad, Hz: every servo of the nine-module robot


def _configurations():
    return {"quadruped": uw.quadruped_configuration(),
            "nine_module": uw.nine_module_configuration(),
            f"snake{SNAKE_N}": uw.snake_configuration(SNAKE_N)}


def kane_paths_vs_aba(n=3, seed=0) -> dict:
    """max |v̇_kane − v̇_aba| per generated configuration: Kane's equations with the partial
    velocities assembled along the path matrix (:meth:`diffmb.modular.Configuration.
    kane_forward_dynamics`) against ABA, potential-flow added inertia, on ``n`` random states
    (free-joint pose, joint angles in ±1.2 rad, speeds, torques ~ 10 N m, body wrenches)."""
    from ..dynamics.api import forward_dynamics

    rng = np.random.default_rng(seed)
    out = {}
    for name, cfg in _configurations().items():
        model, _ = cfg.build()
        run = jax.jit(lambda q, v, t, f, cfg=cfg, model=model: (
            cfg.kane_forward_dynamics(model, q, v, t, f),
            forward_dynamics(model, q, v, t, f, method="aba")))
        worst = 0.0
        for _ in range(n):
            q = np.array(model.qpos0, float)
            q[:3] += 0.3 * rng.normal(size=3)
            qq = rng.normal(size=4)
            q[3:7] = qq / np.linalg.norm(qq)
            q[7:] = rng.uniform(-1.2, 1.2, model.nq - 7)
            v = rng.normal(size=model.nv)
            tau = 10.0 * rng.normal(size=model.nv)
            f_ext = rng.normal(size=(model.n_bodies, 6))
            a, b = run(*(jnp.asarray(x) for x in (q, v, tau, f_ext)))
            worst = max(worst, float(np.max(np.abs(np.asarray(a) - np.asarray(b)))))
        out[name] = worst
    return out


def snake_swim(T, dt=SNAKE_DT, every=0.25) -> dict:
    """A snake of :data:`SNAKE_N` modules (the study's sea water: potential-flow added mass,
    buoyancy, drag) swims from rest with a travelling wave (:func:`~diffmb.models.underwater.
    snake_cpg`, :data:`SNAKE_WAVE`) for ``T`` s (RK4, ``dt``). At the states it passes through
    (every ``every`` s), diffmb's v̇ with MuJoCo's fluid model (``build(fluid="mujoco")``) is
    compared with MuJoCo's ``mj_forward`` ``qacc`` on the configuration's MJCF export, the servo
    targets the CPG's at that time. Returns the max relative error (max|Δ| / max(1, max|ref|))
    and the swim (distance towards s0, sinking)."""
    import mujoco

    cfg = uw.snake_configuration(SNAKE_N)
    model, forces = cfg.build()
    cpg = uw.snake_cpg(SNAKE_N, **SNAKE_WAVE)
    ts = np.round(np.arange(1, int(round(T / every)) + 1) * every, 10)
    tr = simulate(model, jnp.asarray(model.qpos0), jnp.zeros(model.nv), t1=T, dt=dt,
                  forces=forces, control=cpg, saveat=ts)
    q, v = np.asarray(tr.q), np.asarray(tr.v)
    z = np.asarray(tr.aux[-1] if isinstance(tr.aux, tuple) else tr.aux)
    u = np.asarray(cpg.offsets + cpg.amplitudes * z[..., 0])  # the servo targets at ts
    mj_model, mj_forces = cfg.build(fluid="mujoco")
    mj = cfg.mjmodel()
    d = mujoco.MjData(mj)
    f = jax.jit(lambda q, v, u: forward(mj_model, q, v, forces=mj_forces, ctrl=u))
    worst = 0.0
    for k in range(len(ts)):
        d.qpos[:], d.qvel[:], d.ctrl[:] = q[k], v[k], u[k]
        mujoco.mj_forward(mj, d)
        a = np.asarray(f(jnp.asarray(q[k]), jnp.asarray(v[k]), jnp.asarray(u[k])))
        worst = max(worst, float(np.max(np.abs(a - d.qacc)) / max(1.0, np.max(np.abs(d.qacc)))))
    return {"max_rel": worst, "states": len(ts), "duration_s": T, "modules": SNAKE_N,
            "wave": dict(SNAKE_WAVE, waves_per_body=1.0), "dt_s": dt,
            "distance_towards_s0_m": float(cfg.pos[0] - q[-1, 0]),
            "sink_m": float(cfg.pos[2] - q[-1, 2])}


def nine_module_run(T, dt=DT) -> dict:
    """The nine-module robot of Fig. 2 (:func:`~diffmb.models.underwater.
    nine_module_configuration`, potential flow) released at rest, every servo tracking
    :data:`NINE_AMP` sin(2π :data:`NINE_FREQ` t), for ``T`` s (RK4, ``dt``); its final pose in
    SI units."""
    cfg = uw.nine_module_configuration()
    model, forces = cfg.build()
    hydro = next(f for f in forces if isinstance(f, Hydrodynamics))

    def flap(t, q, v, params):
        return jnp.full(8, NINE_AMP) * jnp.sin(2 * jnp.pi * NINE_FREQ * t)

    tr = simulate(model, jnp.asarray(model.qpos0), jnp.zeros(model.nv), t1=T, dt=dt,
                  forces=forces, control=flap, saveat=[T])
    q = np.asarray(tr.q[-1])
    joints = {n: float(q[model.joint_q[j]]) for j, n in enumerate(model.joint_names) if j > 0}
    return {"simulated": "the nine-module, eight-joint robot of Fig. 2 (its module graph, our "
                         "ports), free in sea water (potential-flow added mass, buoyancy, drag), "
                         "released at rest",
            "actuation": f"every servo tracks {NINE_AMP} sin(2 pi {NINE_FREQ} t) rad "
                         "(kp 3000 N m/rad, kv 300 N m s/rad)",
            "duration_s": T, "dt_s": dt, "mass_kg": uw.total_mass(model),
            "net_weight_N": uw.net_weight(model, hydro),
            "initial_position_m": [float(x) for x in cfg.pos],
            "final_position_m": q[:3].tolist(), "final_quaternion_wxyz": q[3:7].tolist(),
            "final_joint_angles_rad": joints, "sink_m": float(cfg.pos[2] - q[2]),
            "finite": bool(tr.ok and np.all(np.isfinite(q)))}


# shared parameters: identified on a swimming snake, predicted on the nine-module robot
SHARED_T = 3.0  # s, the snake's record and the nine-module prediction
SHARED_RATE = 20.0  # Hz
SHARED_NOISE = {"position_m": 1e-3, "quaternion": 1e-3, "joint_rad": 1e-3}  # 1 sigma
SHARED_GUESS = {"drag_axial": 1.3, "drag_transverse": 0.7, "drag_rot_transverse": 1.3,
                "added_mass_axial": 0.7, "added_mass_transverse": 1.3,
                "added_inertia_transverse": 0.7}  # initial guess / truth


def _shared_truth(sp) -> dict:
    """The identified scalars of the module type's parameters (:func:`diffmb.modular.
    shared_parameters`): drag and added mass along the module (x) and across it (y = z)."""
    return {"drag_axial": float(sp["quad_force"][0]),
            "drag_transverse": float(sp["quad_force"][1]),
            "drag_rot_transverse": float(sp["quad_torque"][1]),
            "added_mass_axial": float(sp["added_inertia"][3]),
            "added_mass_transverse": float(sp["added_inertia"][4]),
            "added_inertia_transverse": float(sp["added_inertia"][1])}


def _shared_fields(sp, p) -> dict:
    """The type's fields with the scalars ``p`` (traced) in place; the rest of ``sp`` kept."""
    qt, ai = sp["quad_torque"], sp["added_inertia"]
    return {"quad_force": jnp.stack([p["drag_axial"], p["drag_transverse"],
                                     p["drag_transverse"]]),
            "quad_torque": jnp.stack([jnp.asarray(qt[0]), p["drag_rot_transverse"],
                                      p["drag_rot_transverse"]]),
            "added_inertia": jnp.stack([jnp.asarray(ai[0]), p["added_inertia_transverse"],
                                        p["added_inertia_transverse"], p["added_mass_axial"],
                                        p["added_mass_transverse"], p["added_mass_transverse"]])}


def _shared_sim(cfg, model, forces, sp, p, control, ts, dt, types=None):
    """q at ``ts`` of ``cfg`` from rest at ``model.qpos0`` with the scalars ``p`` written into
    every module of ``types`` (default: the module type; the foot type's fluid geom is the same
    box)."""
    from ..modular import with_shared_parameters

    types = (uw.module().name,) if types is None else types
    m, f = with_shared_parameters(cfg, model, forces, {t: _shared_fields(sp, p) for t in types})
    return simulate(m, jnp.asarray(model.qpos0), jnp.zeros(model.nv), t1=float(ts[-1]), dt=dt,
                    forces=f, control=control, saveat=ts, adjoint="direct", throw=False).q


def shared_parameters_run(seed=0) -> dict:
    """Module parameters shared across configurations (issue 32 item 5). A snake of
    :data:`SNAKE_N` modules swims from rest with :data:`SNAKE_WAVE` for :data:`SHARED_T` s; its q
    (root position, quaternion, joint angles) sampled at :data:`SHARED_RATE` Hz with noise
    :data:`SHARED_NOISE` is the record. The module type's quadratic drag (axial, transverse,
    angular transverse) and added mass (axial, transverse, rotational transverse) are
    identified from it by Levenberg–Marquardt (:func:`diffmb.optim.least_squares`, forward-mode
    Jacobians through ``simulate``; the parameters written into every module by
    :func:`diffmb.modular.with_shared_parameters`), from :data:`SHARED_GUESS` × truth. The
    identified set then predicts the nine-module robot (every servo tracking ``NINE_AMP``
    sin(2π ``NINE_FREQ`` t), from rest), against its run with the true set: the errors of the
    prediction and of the initial guess (max over the samples of the root position error, and
    of any joint angle error). ``prediction_quadruped``: the same for the quadruped of Fig. 4
    paddling in open water (floor contacts off, legs hanging straight down at rest, every
    servo tracking ``NINE_AMP`` sin(2π ``NINE_FREQ`` t); its shins are another module type whose
    fluid geom is the same box, so the set is written into both types), sinking under its net
    weight: only gravity, buoyancy, drag, added mass and the servos act."""
    from ..modular import shared_parameters

    T = SHARED_T
    ts = np.round(np.arange(1, int(round(T * SHARED_RATE)) + 1) / SHARED_RATE, 10)
    snake = uw.snake_configuration(SNAKE_N)
    sm, sf = snake.build()
    sp = shared_parameters(snake, sm, sf)[uw.module().name]
    true = _shared_truth(sp)
    cpg = uw.snake_cpg(SNAKE_N, **SNAKE_WAVE)
    sim = jax.jit(lambda p: _shared_sim(snake, sm, sf, sp, p, cpg, ts, SNAKE_DT))
    q_true = np.asarray(sim({k: jnp.asarray(v) for k, v in true.items()}))
    rng = np.random.default_rng(seed)
    noise = np.concatenate([np.full(3, SHARED_NOISE["position_m"]),
                            np.full(4, SHARED_NOISE["quaternion"]),
                            np.full(sm.nq - 7, SHARED_NOISE["joint_rad"])])
    q_meas = q_true + noise * rng.normal(size=q_true.shape)

    def residual(p, d):
        q = _shared_sim(snake, sm, sf, sp, p, cpg, ts, SNAKE_DT)
        sign = jnp.sign(jnp.sum(q[:, 3:7] * d["q"][:, 3:7], axis=1, keepdims=True))
        r = jnp.concatenate([q[:, :3] - d["q"][:, :3], q[:, 3:7] - sign * d["q"][:, 3:7],
                             q[:, 7:] - d["q"][:, 7:]], axis=1)
        return (r / d["sigma"]).ravel()

    guess = {k: SHARED_GUESS[k] * v for k, v in true.items()}
    t0 = time.perf_counter()
    fit = least_squares(residual, guess, {"q": jnp.asarray(q_meas), "sigma": jnp.asarray(noise)},
                        positive=tuple(true), max_steps=40)
    fit_s = time.perf_counter() - t0
    est = {k: float(fit.params[k]) for k in true}
    se = {k: float(fit.std[k]) for k in true}

    nine = uw.nine_module_configuration()
    nm, nf = nine.build()
    tn = uw.module().name

    def flap(t, q, v, params):
        return jnp.full(nm.nv - 6, NINE_AMP) * jnp.sin(2 * jnp.pi * NINE_FREQ * t)

    pred = jax.jit(lambda p: _shared_sim(nine, nm, nf, sp, p, flap, ts, DT))
    runs = {k: np.asarray(pred({n: jnp.asarray(x) for n, x in v.items()}))
            for k, v in (("truth", true), ("identified", est), ("guess", guess))}

    def err(q, runs=runs):
        return {"root_position_m": float(np.max(np.linalg.norm(q[:, :3] - runs["truth"][:, :3],
                                                               axis=1))),
                "joint_rad": float(np.max(np.abs(q[:, 7:] - runs["truth"][:, 7:])))}

    quad = uw.quadruped_configuration()
    qm, qf = quad.build(contacts=False)  # open water: no floor contacts
    types = tuple(sorted({m.name for m in quad.modules.values()}))
    pred_q = jax.jit(lambda p: _shared_sim(quad, qm, qf, sp, p, flap, ts, DT, types))
    runs_q = {k: np.asarray(pred_q({n: jnp.asarray(x) for n, x in v.items()}))
              for k, v in (("truth", true), ("identified", est), ("guess", guess))}

    return {"module_type": tn, "record": f"snake of {SNAKE_N} modules swimming from rest "
            f"(travelling wave {SNAKE_WAVE}), q sampled at {SHARED_RATE} Hz for {T} s",
            "noise_1sigma": SHARED_NOISE, "seed": seed, "dt_s": {"snake": SNAKE_DT, "nine": DT},
            "true": true, "initial_guess": guess, "identified": est, "std_error": se,
            "error_in_std": {k: (est[k] - true[k]) / se[k] for k in true},
            "rel_error": {k: est[k] / true[k] - 1.0 for k in true},
            "fit": {"steps": fit.n_steps, "success": bool(fit.success),
                    "residual_rms": float(fit.residual_norm / np.sqrt(q_meas.size)),
                    "unidentifiable": list(fit.unidentifiable), "wall_s": fit_s},
            "prediction": {"configuration": "nine-module robot of Fig. 2, from rest, every servo "
                           f"tracking {NINE_AMP} sin(2 pi {NINE_FREQ} t) rad, {T} s",
                           "truth_root_travel_m": float(np.linalg.norm(
                               runs["truth"][-1, :3] - np.asarray(nine.pos))),
                           "identified": err(runs["identified"]), "guess": err(runs["guess"])},
            "prediction_quadruped": {
                "configuration": "quadruped of Fig. 4 in open water (floor contacts off), from "
                                 f"rest with its legs straight down, every servo tracking "
                                 f"{NINE_AMP} sin(2 pi {NINE_FREQ} t) rad, {T} s",
                "module_types": list(types),
                "truth_root_travel_m": float(np.linalg.norm(runs_q["truth"][-1, :3]
                                                            - np.asarray(quad.pos))),
                "truth_sink_m": float(quad.pos[2] - runs_q["truth"][-1, 2]),
                "identified": err(runs_q["identified"], runs_q),
                "guess": err(runs_q["guess"], runs_q)}}


DOCK = dict(tol=0.02, angle_tol=0.2)  # m, rad: ports this near the mated pose lock
DOCK_SAVE = 0.01  # s: port gaps checked at this step
DOCK_T = {True: (0.6, 0.4, 0.4), False: (0.6, 1.0, 1.0)}  # s: approach (at most), docked, apart
DOCK_V = 0.25  # m/s: each snake's initial speed towards the other
DOCK_ROLL = 0.3  # rad/s: snake a's initial roll rate


def _hold(t, q, v, params):
    """Every servo of a free robot targets 0 (its joints straight)."""
    return jnp.zeros_like(q[7:])


def _snake(prefix, n, x0):
    from ..modular import Configuration

    m = uw.module()
    conns = [(f"{prefix}{k}", "b", f"{prefix}{k + 1}", "a", "joint", f"{prefix}j{k + 1}")
             for k in range(n - 1)]
    return Configuration({f"{prefix}{k}": m for k in range(n)}, conns, f"{prefix}0",
                         pos=(x0, 0.0, uw.Z0), density=uw.RHO, viscosity=uw.VISCOSITY,
                         name=f"snake_{prefix}")


def _momentum(model, q, v):
    from ..dynamics.kinematics import momentum

    return np.concatenate([np.asarray(x) for x in jax.jit(momentum)(model, jnp.asarray(q),
                                                                      jnp.asarray(v))])


def docking_run(quick, n=3, gap=0.1) -> dict:
    """Docking and undocking in phases, in sea water (potential flow). Two snakes of ``n``
    modules, a (a0 … ) and b (b0 … ), lie on the x axis, a's end port a{n-1}.b facing b's start
    port b0.a ``gap`` m away; a moves at +:data:`DOCK_V` m/s rolling at :data:`DOCK_ROLL` rad/s,
    b at −:data:`DOCK_V` m/s, servos holding the joints straight. (1) Both swim (RK4, :data:`DT`)
    until, at a check every :data:`DOCK_SAVE` s, the ports are within :data:`DOCK` of the mated
    pose; they lock (:func:`diffmb.modular.dock`, an inelastic impact). (2) The docked robot
    moves on; (3) it undocks at the weld (:func:`diffmb.modular.undock`) and the two move
    apart. Momenta (bodies and the fluid's impulse, :func:`diffmb.momentum`) before and after
    each change; ``momentum_err``: max|Δh| / max(1, max|h|) over the six components."""
    from ..dynamics.kinematics import kinetic_energy
    from ..modular import dock, port_gap, undock

    t_near, t_docked, t_apart = DOCK_T[quick]
    L = uw.MODULE_SIZE[0]
    ca, cb = _snake("a", n, -n * L - 0.5 * gap), _snake("b", n, 0.5 * gap)
    (ma, fa), (mb, fb) = ca.build(), cb.build()
    va, vb = np.zeros(ma.nv), np.zeros(mb.nv)
    va[0], va[3], vb[0] = DOCK_V, DOCK_ROLL, -DOCK_V
    ts = np.round(np.arange(1, int(round(t_near / DOCK_SAVE)) + 1) * DOCK_SAVE, 10)
    kw = dict(dt=DT, control=_hold, saveat=ts)
    ra = simulate(ma, jnp.asarray(ma.qpos0), jnp.asarray(va), t1=t_near, forces=fa, **kw)
    rb = simulate(mb, jnp.asarray(mb.qpos0), jnp.asarray(vb), t1=t_near, forces=fb, **kw)
    pa, pb = (f"a{n - 1}", "b"), ("b0", "a")
    k = None
    for i in range(len(ts)):
        d, ang = port_gap((ca, ma, ra.q[i], ra.v[i]), pa, (cb, mb, rb.q[i], rb.v[i]), pb)
        if d <= DOCK["tol"] and ang <= DOCK["angle_tol"]:
            k = i
            break
    if k is None:
        raise RuntimeError(f"docking: ports {pa} and {pb} never came within {DOCK} in {t_near} s")
    robot_a = (ca, ma, np.asarray(ra.q[k]), np.asarray(ra.v[k]))
    robot_b = (cb, mb, np.asarray(rb.q[k]), np.asarray(rb.v[k]))
    cd, qd, vd = dock(robot_a, robot_b, pa, pb, **DOCK, name="snake_ab")
    md, fd = cd.build()
    h0 = _momentum(ma, robot_a[2], robot_a[3]) + _momentum(mb, robot_b[2], robot_b[3])
    h1 = _momentum(md, qd, vd)
    ke = jax.jit(kinetic_energy)
    e0 = float(ke(ma, robot_a[2], robot_a[3]) + ke(mb, robot_b[2], robot_b[3]))
    e1 = float(ke(md, jnp.asarray(qd), jnp.asarray(vd)))
    rd = simulate(md, jnp.asarray(qd), jnp.asarray(vd), t1=t_docked, dt=DT, forces=fd,
                  control=_hold, saveat=[t_docked])
    q2, v2 = np.asarray(rd.q[-1]), np.asarray(rd.v[-1])
    parts = undock((cd, md, q2, v2), len(cd.connections) - 1, names=(ca.name, cb.name))
    h2 = _momentum(md, q2, v2)
    h3 = 0.0
    final = {}
    for c, q3, v3 in parts:
        m3, f3 = c.build()
        h3 = h3 + _momentum(m3, q3, v3)
        r3 = simulate(m3, jnp.asarray(q3), jnp.asarray(v3), t1=t_apart, dt=DT, forces=f3,
                      control=_hold, saveat=[t_apart])
        final[c.name] = np.asarray(r3.q[-1, :3]).tolist()
    err = lambda a, b: float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(a))))  # noqa: E731
    gap_k = port_gap(robot_a, pa, robot_b, pb)
    return {"momentum_err": err(h0, h1), "undocking_momentum_err": err(h2, h3),
            "robots": f"two {n}-module snakes in sea water (potential flow, buoyancy, drag), "
                      "servos holding their joints straight",
            "start": {"gap_m": gap, "speed_a_mps": DOCK_V, "speed_b_mps": -DOCK_V,
                      "roll_rate_a_radps": DOCK_ROLL},
            "ports": [".".join(pa), ".".join(pb)], "tolerance": DOCK,
            "t_dock_s": float(ts[k]), "gap_at_dock_m": gap_k[0], "angle_at_dock_rad": gap_k[1],
            "momentum_before": h0.tolist(), "momentum_after": h1.tolist(),
            "momentum_components": "linear (N s, world), angular about the world origin (N m s)",
            "kinetic_energy_J": {"before": e0, "after": e1},
            "t_undock_s": float(ts[k]) + t_docked, "t_end_s": float(ts[k]) + t_docked + t_apart,
            "final_root_positions_m": final}


RING_N = 6  # modules of the snake that closes into a ring
RING = dict(tol=0.02, angle_tol=0.1)  # m, rad: its end ports lock this near the mated pose
RING_CURL_T = 1.5  # s: the servo targets ramp from straight to the ring's 2π/n in this time
RING_SEARCH_T = 2.0  # s: the ends must meet by then
RING_T = {True: 0.5, False: 3.0}  # s: the ring phase


def _ring_targets(t, n):
    """Servo targets (n − 1,) of the curl: 0 → 2π/n by a smoothstep over RING_CURL_T."""
    s = jnp.clip(t / RING_CURL_T, 0.0, 1.0)
    return jnp.full(n - 1, 2 * jnp.pi / n) * s * s * (3.0 - 2.0 * s)


def ring_docking_run(quick, n=RING_N, save=DOCK_SAVE):
    """A snake of ``n`` modules docks its two ends into a ring, in phases, in sea water
    (potential-flow added mass, buoyancy, drag). (1) ``curl``: from rest, straight, its servos
    ramp to 2π/n each (:func:`_ring_targets`), RK4 with :data:`SNAKE_DT`; at a check every ``save``
    s, :func:`diffmb.modular.loop_gap` of its end ports s{n−1}.b and s0.a (s{n−1}.b's hinge
    free). (2) ``lock``: at the first check within :data:`RING`, :func:`diffmb.modular.
    close_loop` welds them where they stand (an inelastic impact: the ring's momenta are the
    snake's on every motion that keeps the weld). (3) ``ring``: the ring, its loop closed by
    MuJoCo's soft weld equality between the two ports (:class:`~diffmb.forces.equality.
    Equalities`), servos holding the angles the joints had at the lock (the shape the weld
    closed; 2π/n would fight it), sinks for :data:`RING_T` s. Momenta (bodies and the
    fluid's impulse, :func:`diffmb.momentum`) before and after the lock: ``momentum_err`` =
    max|Δh| / max(1, max|h|); the weld's violation along the ring phase. Returns ``(result,
    replay)``: ``replay`` = ``(configuration, ts, q)``, the phases stitched (the ring keeps the
    snake's coordinates)."""
    from ..dynamics.kinematics import kinetic_energy
    from ..forces.equality import Equalities
    from ..modular import close_loop, loop_gap

    cfg = uw.snake_configuration(n)
    model, forces = cfg.build()
    ends = (f"s{n - 1}", "b"), ("s0", "a")
    ts = np.round(np.arange(1, int(round(RING_SEARCH_T / save)) + 1) * save, 10)
    curl = simulate(model, jnp.asarray(model.qpos0), jnp.zeros(model.nv), t1=RING_SEARCH_T,
                    dt=SNAKE_DT, forces=forces, control=lambda t, q, v, p: _ring_targets(t, n),
                    saveat=ts)
    q1, v1 = np.asarray(curl.q), np.asarray(curl.v)
    k, gaps = None, []
    for i in range(len(ts)):
        g = loop_gap((cfg, model, q1[i], v1[i]), *ends)
        gaps.append(g[0])
        if g[0] <= RING["tol"] and g[1] <= RING["angle_tol"]:
            k = i
            break
    if k is None:
        raise RuntimeError(f"ring: ports {ends} never came within {RING} in {RING_SEARCH_T} s "
                           f"(closest {min(gaps):.3g} m)")
    t_lock = float(ts[k])
    gap = loop_gap((cfg, model, q1[k], v1[k]), *ends)
    ring, q2, v2 = close_loop((cfg, model, q1[k], v1[k]), *ends, **RING, name="ring")
    rm, rf = ring.build()
    h0, h1 = _momentum(model, q1[k], v1[k]), _momentum(rm, q2, v2)
    ke = jax.jit(kinetic_energy)
    e0, e1 = (float(ke(m, jnp.asarray(q), jnp.asarray(v)))
              for m, q, v in ((model, q1[k], v1[k]), (rm, q2, v2)))
    T = RING_T[quick]
    ts2 = np.round(np.arange(1, int(round(T / save)) + 1) * save, 10)
    hold = jnp.asarray(q1[k, 7:])  # the closed shape
    rr = simulate(rm, jnp.asarray(q2), jnp.asarray(v2), t1=T, dt=SNAKE_DT, forces=rf,
                  control=lambda t, q, v, p: hold, saveat=ts2)
    q3, v3 = np.asarray(rr.q), np.asarray(rr.v)
    eq = next(f for f in rf if isinstance(f, Equalities))
    viol = np.asarray(jax.jit(jax.vmap(Equalities.constraint, in_axes=(None, None, 0, 0)))(
        eq, rm, jnp.asarray(q3), jnp.asarray(v3))[0])
    h3 = _momentum(rm, q3[-1], v3[-1])
    hydro = next(f for f in forces if isinstance(f, Hydrodynamics))
    err = float(np.max(np.abs(h1 - h0)) / max(1.0, np.max(np.abs(h0))))
    result = {
        "robot": f"snake of {n} modules in sea water (potential-flow added mass, buoyancy, "
                 "drag), pitch hinges with servos (kp 3000 N m/rad, kv 300 N m s/rad)",
        "modules": n, "ports": [".".join(ends[0]), ".".join(ends[1])], "tolerance": RING,
        "loop": "closed by a weld equality between the two ports (MuJoCo's soft weld, solref "
                "(0.02, 1), solimp (0.9, 0.95, 0.001, 0.5, 2): diffmb.modular.Configuration("
                "loops=...), diffmb.forces.Equalities); s{n-1}.b's hinge locked at its angle at "
                "the lock".replace("{n-1}", str(n - 1)),
        "phases": [
            {"name": "curl", "t0_s": 0.0, "t1_s": t_lock,
             "what": f"from rest, straight; servo targets ramp 0 -> 2 pi/{n} = "
                     f"{2 * np.pi / n:.4f} rad (smoothstep over {RING_CURL_T} s)"},
            {"name": "lock", "t0_s": t_lock, "t1_s": t_lock,
             "what": "the end ports weld where they stand (diffmb.modular.close_loop), an "
                     "inelastic impact"},
            {"name": "ring", "t0_s": t_lock, "t1_s": t_lock + T,
             "what": "the ring sinks, servos holding the joint angles of the lock"}],
        "dt_s": SNAKE_DT, "check_every_s": save, "t_lock_s": t_lock,
        "port_gap_at_lock_m": gap[0], "angle_at_lock_rad": gap[1],
        "closing_hinge_angle_rad": gap[2],
        "joint_angles_at_lock_rad": q1[k, 7:].tolist(),
        "momentum_err": err, "momentum_before": h0.tolist(), "momentum_after": h1.tolist(),
        "momentum_components": "linear (N s, world), angular about the world origin (N m s); "
                               "bodies and the fluid's impulse (added mass)",
        "kinetic_energy_J": {"before": e0, "after": e1},
        "ring_duration_s": T,
        "weld_violation_max": {"position_m": float(np.abs(viol[:, :3]).max()),
                               "orientation": float(np.abs(viol[:, 3:]).max())},
        "weld_violation_definition": "MuJoCo's weld residual over the ring phase: position of "
                                     "one port's site relative to the other's (m), and the "
                                     "vector part of their relative quaternion",
        "ring_sink_m": float(q2[2] - q3[-1, 2]),
        "net_weight_N": uw.net_weight(model, hydro),
        "momentum_end_of_ring": h3.tolist(),
        "finite": bool(curl.ok and rr.ok and np.all(np.isfinite(q3)))}
    k1 = k + 1
    replay = (ring, np.concatenate([[0.0], ts[:k1], t_lock + ts2]),
              np.concatenate([np.asarray(model.qpos0)[None], q1[:k1], q3]))
    return result, replay


# ------------------------------------------------------------------------------ walking


def _servo_power_targets(tgt, q, v):
    """Servo torques τ = kp (q* − q) − kv q̇ (ns, 8) and Σ|τ q̇| (ns,) from the targets q* and
    the saved states."""
    qj, vj = q[..., 7:], v[..., 6:]
    tau = KP * (tgt - qj) - KV * vj
    return tau, jnp.sum(jnp.abs(tau * vj), axis=-1)


def walk(model, forces, gait, t1, dt=DT, throw=True, solver="rk4"):
    """Simulate the quadruped from the stand pose for ``t1`` s under ``gait``: a CPG gait (a
    dict of :data:`~diffmb.models.underwater.GAIT_NAMES`) or a knot-table gait (a dict with
    ``frequency`` [Hz] and ``knots`` (8, 8) [rad], :func:`knot_targets`); returns dict of
    numpy series."""
    ts = np.round(np.arange(int(round(t1 / SAVE_DT)) + 1) * SAVE_DT, 10)
    if "knots" in gait:
        p = (jnp.asarray(gait["frequency"], float), jnp.asarray(gait["knots"], float))
        tr = simulate(model, uw.stand_q0(model), None, t1=t1, dt=dt, solver=solver,
                      forces=forces, control=knot_targets, params=p, saveat=ts, throw=throw)
        tgt = jax.vmap(lambda t: knot_targets(t, None, None, p))(jnp.asarray(ts))
    else:
        cpg = uw.gait_cpg({k: jnp.asarray(v, float) for k, v in gait.items()})
        tr = simulate(model, uw.stand_q0(model), None, t1=t1, dt=dt, solver=solver,
                      forces=forces, control=cpg, saveat=ts, throw=throw)
        tgt = cpg.offsets + cpg.amplitudes * tr.aux[1][..., 0]
    tau, power = _servo_power_targets(tgt, tr.q, tr.v)
    from ..contacts import contact_forces

    c = contact_forces(model, tr, forces)
    feet = uw.foot_geoms(p[0] for p in c.pairs)
    fn = np.stack([np.asarray(c.fn)[:, [i for i, p in enumerate(c.pairs) if p[0] == ft]].sum(1)
                   for ft in feet], axis=1)
    return {"t": ts, "q": np.asarray(tr.q), "v": np.asarray(tr.v), "tau": np.asarray(tau),
            "power": np.asarray(power), "foot_fn": fn, "targets": np.asarray(tgt),
            "ok": bool(tr.ok)}


def gait_metrics(run, mass, g=9.81, start=WINDOW_START) -> dict:
    """Speed (Δx/Δt), vertical oscillation and cost of transport ∫Σ|τ q̇| dt / (m g Δx) over
    [start, end] of a :func:`walk` run; the body's centre is the s0–s1 pair's (the free
    joint's origin, midway between the two welded modules)."""
    t, x, z = run["t"], run["q"][:, 0], run["q"][:, 2]
    k = t >= start - 1e-9
    dx = float(x[k][-1] - x[k][0])
    E = float(np.trapezoid(run["power"][k], t[k]))
    duty = {leg: float(np.mean(run["foot_fn"][k, i] > 0)) for i, leg in enumerate(uw.LEGS)}
    return {"speed_mps": dx / float(t[k][-1] - t[k][0]), "distance_m": dx, "energy_J": E,
            "duty_factor": duty,
            "cost_of_transport": E / (mass * g * dx) if dx > 0 else float("inf"),
            "z_mean_m": float(np.mean(z[k])), "z_oscillation_m": float(np.ptp(z[k])),
            "lateral_drift_m": float(run["q"][k][-1, 1] - run["q"][k][0, 1]),
            "window_s": [float(t[k][0]), float(t[k][-1])]}


# ------------------------------------------------------------------------------ gait optimisation


_KNOT_PHASES = np.arange(GAIT_KNOTS) / GAIT_KNOTS


def knot_targets(t, q, v, params):
    """The servo targets (8,) at time ``t`` of a knot-table gait ``params = (f, K)``: K (8 joints
    in actuator order, 8 knots) the targets [rad] at phases 0, 1/8, …, 7/8 of a cycle of
    frequency f [Hz], interpolated periodically (:func:`diffmb.optim.gaits.periodic_knots`);
    a ``simulate`` control."""
    f, K = params
    return periodic_knots(f * t, K)


def nominal_knots(gait=None) -> np.ndarray:
    """The knot table (8, 8) [rad] of a CPG gait (default :data:`~diffmb.models.underwater.
    NOMINAL_GAIT`): the CPG's limit-cycle targets offset + amplitude cos(2π φ + lag) sampled at
    the knots' phases φ (band-limited: the knot table reproduces them exactly)."""
    g = uw.NOMINAL_GAIT if gait is None else gait
    rows = []
    for ph in (0.0, g["phase_rf"], g["phase_lh"], g["phase_rh"]):
        a = 2 * np.pi * (_KNOT_PHASES + ph)
        rows.append(g["off_hip"] + g["amp_hip"] * np.cos(a))
        rows.append(g["off_knee"] + g["amp_knee"] * np.cos(a + g["knee_lag"]))
    return np.stack(rows)


def gait_params(theta):
    """The knot-table gait (f, K) of the optimisers' θ (:data:`N_GAIT_PARAMS` = 65,): θ₀ the
    frequency's logit on (:data:`F_RANGE`), θ₁… the knots, :data:`KNOT_SCALE` rad per unit,
    about :func:`nominal_knots`; θ = 0 is the nominal gait."""
    theta = jnp.asarray(theta)
    if theta.shape[-1:] != (N_GAIT_PARAMS,):
        raise ValueError(f"gait_params: theta has shape {theta.shape}, expected "
                         f"({N_GAIT_PARAMS},) (a frequency logit and {GAIT_KNOTS} x 8 knots)")
    lo, hi = F_RANGE
    f0 = uw.NOMINAL_GAIT["frequency"]
    f = lo + (hi - lo) * jax.nn.sigmoid(theta[0] + np.log((f0 - lo) / (hi - f0)))
    K = jnp.asarray(nominal_knots()) + KNOT_SCALE * theta[1:].reshape(8, GAIT_KNOTS)
    return f, K


def gait_objective(model, forces, *, T=None, window=None, solver=None, dt=None, width=None,
                   segment=None):
    """The ONE objective both optimisers call: J(θ) = −v̄ + λ P̄/(m g) of a walk of the
    reference model (the file's stiction contacts, ``forces`` as given) from the stand pose
    under the knot-table gait of θ (:func:`gait_params`), v̄ and P̄ (servo power Σ|τ q̇|)
    averaged over [``window``, ``T``]; defaults :data:`GAIT`. ``width``: the contacts'
    backward smoothing [m] (:func:`diffmb.contacts.backward_smoothed`; the forward walk is
    unchanged, only reverse mode sees it). Returns J(θ) -> (J, (v̄, P̄)); a walk that fails
    scores J = 1 (worse than standing still).

    ``segment`` [s] (None: off): truncated backpropagation. The walk and J are the same, bit
    for bit; reverse mode is cut every ``segment`` s (:class:`diffmb.simulation.
    TruncatedBackprop`: the state entering each segment is held fixed), and the gradient is
    that of J written as a sum of per-segment costs: the speed as the sum of the segments'
    displacements x(end) − x(start) over the window (each segment's start held fixed), the
    power as its integral (each sample's gradient through its own segment). Returned as
    :func:`_value_with_gradient_of` (J, S), S that sum: the value J exactly, the gradient
    ∇S. With ``segment`` ≥ ``T`` it is the full gradient."""
    from ..contacts import backward_smoothed
    from ..simulation import SOLVERS, TruncatedBackprop

    T = GAIT["T"] if T is None else T
    window = GAIT["window"] if window is None else window
    solver = GAIT["solver"] if solver is None else solver
    dt = GAIT["dt"] if dt is None else dt
    if not 0.0 <= window < T:
        raise ValueError(f"gait_objective: window = {window} s must lie in [0, T = {T}) s")
    fr = backward_smoothed(forces, width) if width is not None else tuple(forces)
    ts = np.round(np.arange(int(round(T / SAVE_DT)) + 1) * SAVE_DT, 10)
    i0 = int(round(window / SAVE_DT))
    q0 = uw.stand_q0(model)
    mg = uw.total_mass(model) * 9.81
    span = float(ts[-1] - ts[i0])
    pieces = None
    if segment is not None:
        segment = float(segment)
        m = segment / SAVE_DT
        if not (segment > 0 and abs(m - round(m)) < 1e-9
                and abs(segment / dt - round(segment / dt)) < 1e-9):
            raise ValueError(f"gait_objective: segment = {segment} s must be a positive "
                             f"multiple of the step {dt} s and of the save step {SAVE_DT} s")
        solver = TruncatedBackprop(SOLVERS[solver] if isinstance(solver, str) else solver,
                                   segment)
        # the window cut at the segments' boundaries: (start index, end index, start cut?)
        n_seg = int(round(segment / SAVE_DT))
        cuts = [i for i in range(n_seg, len(ts) - 1, n_seg) if i > i0]
        bounds = [i0, *cuts, len(ts) - 1]
        pieces = [(a, b, a % n_seg == 0 and a > 0) for a, b in zip(bounds, bounds[1:],
                                                                      strict=False)]

    def J(theta):
        p = gait_params(theta)
        tr = simulate(model, q0, None, t1=T, dt=dt, solver=solver, forces=fr,
                      control=knot_targets, params=p, saveat=ts, throw=False)
        tgt = jax.vmap(lambda t: knot_targets(t, None, None, p))(jnp.asarray(ts))
        _, power = _servo_power_targets(tgt, tr.q, tr.v)
        v = (tr.q[-1, 0] - tr.q[i0, 0]) / span
        P = jnp.trapezoid(power[i0:], ts[i0:]) / span
        val = -v + LAMBDA * P / mg
        ok = jnp.isfinite(val) & tr.ok
        if pieces is not None:  # the value J, the gradient of the per-segment sum S
            x = tr.q[:, 0]
            sg = jax.lax.stop_gradient
            dx = sum(x[b] - (sg(x[a]) if cut else x[a]) for a, b, cut in pieces)
            val = _value_with_gradient_of(val, -dx / span + LAMBDA * P / mg)
        return jnp.where(ok, val, 1.0), (v, P)

    return J


def _start(seed):
    """The seed's starting θ: the nominal gait with every knot moved by N(0, (0.05 rad)²) and
    the frequency's logit by N(0, 0.25²)."""
    rng = np.random.default_rng(seed)
    return np.concatenate([0.25 * rng.normal(size=1),
                           (START_SPREAD_RAD / KNOT_SCALE) * rng.normal(size=N_GAIT_PARAMS - 1)])


def optimise_gait(model, forces, *, seeds, budget_s, clock="wall", gradient=None, lr=None,
                  sigma0=None, width=None, log=print):
    """The gait proof: a gradient method (``gradient``, a name in :data:`GRADIENT_METHODS`,
    default ``GAIT["gradient"]``) on ``jax.value_and_grad`` of :func:`gait_objective`, the
    contacts backward-smoothed by ``width`` m, truncated every ``segment`` s where the method's
    settings name one (``gait_objective``'s ``segment``; the walks and J unchanged), ``lr``
    overriding Adam's or guided ES's step, against ``cmaes.CMA`` (``sigma0``) from the same
    seed-dependent starts (:func:`_start`), each for ``budget_s`` seconds on ``clock``
    including its compile (:func:`diffmb.optim.gaits.compare_optimisers`, which returns the
    result; here with the method's segment and the smoothing width added)."""
    gradient = GAIT["gradient"] if gradient is None else gradient
    if gradient not in GRADIENT_METHODS:
        raise ValueError(f"optimise_gait: gradient = {gradient!r}, expected one of "
                         f"{sorted(GRADIENT_METHODS)}")
    gm = dict(GRADIENT_METHODS[gradient])
    segment = gm.pop("segment", None)
    if lr is not None:
        if gm["kind"] not in ("adam", "guided-es"):
            raise ValueError(f"optimise_gait: lr is Adam's step; {gradient!r} has none")
        gm["lr"] = lr
    sigma0 = GAIT["sigma0"] if sigma0 is None else sigma0
    width = GAIT["width"] if width is None else width
    check_comparison(clock, seeds, budget_s, "optimise_gait")  # before anything is built
    J = gait_objective(model, forces, width=width)
    # the gradient's: the same walk and J, reverse mode cut every segment s (when set)
    Jg = J if segment is None else gait_objective(model, forces, width=width, segment=segment)
    out = compare_optimisers(J, N_GAIT_PARAMS, _start, J_gradient=Jg, seeds=seeds,
                             budget_s=budget_s, settings=gm, clock=clock, sigma0=sigma0,
                             method=gradient, compile_fn=_compile, who="underwater gait proof",
                             log=log)
    if segment is not None:
        out["gradient"]["settings"]["segment_s"] = segment
    if gm["kind"] == "adam":
        out["gradient"]["adam_lr"] = gm["lr"]
    out["smoothing_width_m"] = width
    return out


def objective_of_run(run, T=None, window=None, mass=None) -> float:
    """J of a :func:`walk` over [``window``, ``T``] (defaults :data:`GAIT`): the objective
    recomputed from a walk's saved states (e.g. RK4 at 2 ms), to compare with
    :func:`gait_objective`'s solver."""
    T = GAIT["T"] if T is None else T
    window = GAIT["window"] if window is None else window
    t = run["t"]
    k = (t >= window - 1e-9) & (t <= T + 1e-9)
    span = float(t[k][-1] - t[k][0])
    v = float(run["q"][k][-1, 0] - run["q"][k][0, 0]) / span
    P = float(np.trapezoid(run["power"][k], t[k])) / span
    return -v + LAMBDA * P / (mass * 9.81)


# ------------------------------------------------------------------------------ identification


def module_csv_path() -> pathlib.Path:
    from importlib import resources

    return pathlib.Path(str(resources.files("diffmb") / "assets" / "underwater_module.csv"))


def _module_true(model, hydro):
    M = np.asarray(model.body_added_inertia[0])
    return {"drag_x": float(hydro.quad_force[0, 0]), "drag_y": float(hydro.quad_force[0, 1]),
            "drag_z": float(hydro.quad_force[0, 2]), "drag_rot_y": float(hydro.quad_torque[0, 1]),
            "added_mass_x": float(M[3, 3]), "added_mass_y": float(M[4, 4]),
            "added_inertia_y": float(M[1, 1])}


def _module_with(model, hydro, p):
    """The module Model and element with the identified quantities from ``p`` (traced):
    quadratic drag per axis, angular drag about y = z, added mass axial and transverse
    (y = z), added transverse rotational inertia (y = z); the rest kept."""
    M0 = model.body_added_inertia[0]
    d = jnp.stack([M0[0, 0], p["added_inertia_y"], p["added_inertia_y"], p["added_mass_x"],
                   p["added_mass_y"], p["added_mass_y"]])
    mod = eqx.tree_at(lambda m: m.body_added_inertia, model, jnp.diag(d)[None])
    h = eqx.tree_at(lambda e: e.quad_force, hydro,
                    jnp.stack([p["drag_x"], p["drag_y"], p["drag_z"]])[None])
    h = eqx.tree_at(lambda e: e.quad_torque, h,
                    jnp.stack([hydro.quad_torque[0, 0], p["drag_rot_y"], p["drag_rot_y"]])[None])
    return mod, h


def module_record(seed=0, T=ID_T):
    """The synthetic free-swimming record: t (n,), q (n, 7) with noise :data:`ID_NOISE`."""
    model, hydro = uw.load_module()
    ts = np.round(np.arange(int(round(T * ID_RATE)) + 1) / ID_RATE, 10)
    tr = simulate(model, jnp.asarray(model.qpos0), jnp.asarray(ID_V0), t1=T, dt=ID_DT,
                  forces=(hydro,), saveat=ts)
    rng = np.random.default_rng(seed)
    q = np.asarray(tr.q).copy()
    q[:, :3] += ID_NOISE["position_m"] * rng.normal(size=(len(ts), 3))
    q[:, 3:] += ID_NOISE["quaternion"] * rng.normal(size=(len(ts), 4))
    q[:, 3:] /= np.linalg.norm(q[:, 3:], axis=1, keepdims=True)
    return ts, q


def write_module_csv(path, seed=0):
    """Write the shipped CSV (columns t, q_root_0 … q_root_6)."""
    from ..optim.sysid import write_joint_csv

    model, _ = uw.load_module()
    t, q = module_record(seed)
    write_joint_csv(path, model, t, q=q, comment=(
        "underwater module (diffmb/assets/underwater_module.xml) released at v0 = "
        f"{list(ID_V0)} (m/s world, rad/s body); simulated by diffmb (RK4, dt {ID_DT} s), "
        f"noise {ID_NOISE} (1 sigma); q_root = position [m], quaternion [w x y z]"))


def _body_rate(qa, qb, h):
    """Body angular velocity taking unit quaternion qa to qb in time h: 2 vec(qa* ⊗ qb)/h."""
    w1, x1, y1, z1 = qa[0], -qa[1], -qa[2], -qa[3]
    w2, x2, y2, z2 = qb
    d = np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                  w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])
    return 2.0 * np.sign(d[0]) * d[1:] / h


def fit_module(t, q, checkpoint=None):
    """Least squares (:func:`diffmb.optim.least_squares`, Levenberg–Marquardt, forward-mode
    Jacobians through ``simulate``) of :data:`ID_PARAMS` plus the unknown initial position and
    velocity, from positions and quaternions; the initial attitude is the first sample."""
    model, hydro = uw.load_module()
    t = np.asarray(t, float)
    q = np.asarray(q, float)
    if t[0] != 0.0:
        t = t - t[0]
    ts = np.round(t, 10)
    T = float(ts[-1])
    quat0 = q[0, 3:] / np.linalg.norm(q[0, 3:])
    # initial velocity guess from the first samples (finite differences)
    h = ts[2] - ts[0]
    v_lin = (q[2, :3] - q[0, :3]) / h
    true = _module_true(model, hydro)
    guess = {k: 1.3 * v for k, v in true.items()}  # 30 % off
    guess.update({f"p0_{i}": float(q[0, i]) for i in range(3)})
    guess.update({f"v0_{i}": float(v_lin[i]) for i in range(3)})
    w_body = _body_rate(q[0, 3:], q[2, 3:], h)
    guess.update({f"w0_{i}": float(w_body[i]) for i in range(3)})
    data = {"q": jnp.asarray(q), "quat0": jnp.asarray(quat0)}

    def residual(p, d):
        mod, hh = _module_with(model, hydro, p)
        q0 = jnp.concatenate([jnp.stack([p[f"p0_{i}"] for i in range(3)]), d["quat0"]])
        v0 = jnp.stack([p[f"v0_{i}"] for i in range(3)] + [p[f"w0_{i}"] for i in range(3)])
        tr = simulate(mod, q0, v0, t1=T, dt=ID_DT, forces=(hh,), saveat=ts, adjoint="direct",
                      throw=False)
        qm = d["q"]
        sign = jnp.sign(jnp.sum(tr.q[:, 3:] * qm[:, 3:], axis=1, keepdims=True))
        return jnp.concatenate([(tr.q[:, :3] - qm[:, :3]).ravel() / ID_NOISE["position_m"],
                                (tr.q[:, 3:] - sign * qm[:, 3:]).ravel() / ID_NOISE["quaternion"]])

    res = least_squares(residual, guess, data, positive=ID_PARAMS, max_steps=60,
                        checkpoint=checkpoint)
    return res, true


def identify(data_csv, out_dir, *, checkpoint=None) -> dict:
    """Identify quadratic drag (per axis, and angular about y = z) and added mass (axial,
    transverse, transverse rotational) of one module from a free-swimming CSV (columns ``t``,
    ``q_root_0`` … ``q_root_6``); writes ``results.json`` and ``report.md`` in ``out_dir``."""
    from ..optim.sysid import read_joint_csv

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, _ = uw.load_module()
    rec = read_joint_csv(data_csv, model)
    if rec.q is None:
        raise ValueError(f"{data_csv}: the module's identification needs the q_root_* channels")
    if 7 * len(rec.t) <= len(ID_PARAMS) + 9:
        raise ValueError(f"{data_csv}: {len(rec.t)} rows cannot identify {len(ID_PARAMS)} "
                         "coefficients and the initial state")
    t0 = time.perf_counter()
    res, true = fit_module(rec.t, rec.q, checkpoint=checkpoint)
    shipped = pathlib.Path(data_csv).resolve() == module_csv_path().resolve()
    ident = {}
    for n in ID_PARAMS:
        ident[n] = {"estimate": float(res.params[n]), "std": float(res.std[n])}
        if shipped:
            ident[n]["true"] = true[n]
    out = {"status": "complete", "identified": ident, "success": bool(res.success),
           "message": res.message, "rows": int(len(rec.t)), "noise": ID_NOISE,
           "wall_s": time.perf_counter() - t0,
           "units": {"drag_*": "N s^2/m^2 (quadratic, per body axis; Fossen X_|u|u = -drag_x)",
                     "drag_rot_y": "N m s^2", "added_mass_*": "kg (Fossen X_udot = -added_mass_x)",
                     "added_inertia_y": "kg m^2"}}
    (out_dir / "results.json").write_text(json.dumps(out, indent=2))
    lines = ["# Drag and added mass of one module from a free-swimming record", "",
             f"Data: `{pathlib.Path(data_csv).name}`, {len(rec.t)} rows; noise as recorded "
             f"{ID_NOISE}.", "", "| parameter | estimate | std |" + (" true |" if shipped else ""),
             "| --- | --- | --- |" + (" --- |" if shipped else "")]
    for n, v in ident.items():
        lines.append(f"| {n} | {v['estimate']:.6g} | {v['std']:.3g} |"
                     + (f" {v['true']:.6g} |" if shipped else ""))
    (out_dir / "report.md").write_text("\n".join(lines) + "\n")
    return out


# ------------------------------------------------------------------------------ closed forms


_SPHERE = """<mujoco><option density="1025" viscosity="0"/>
  <worldbody><body name="ball"><freejoint/>
    <geom type="sphere" size="0.1" density="2000" fluidshape="ellipsoid"
          fluidcoef="0.235 0 0 0 0"/></body></worldbody></mujoco>"""


def sphere_checks(tmp_dir) -> dict:
    """A released sphere (r = 0.1 m, 2000 kg/m³ in sea water, C_d = 0.47): initial
    acceleration against (B − W)/(m + ½ρV) and terminal speed against √(2(W − B)/(ρ C_d A))."""
    from ..io.mjcf import load_mjcf, mjcf_forces

    path = pathlib.Path(tmp_dir) / "underwater_sphere.xml"
    path.write_text(_SPHERE)
    model = load_mjcf(path, added_mass="potential")
    forces = mjcf_forces(path, fluid="potential")
    r, rho, rho_s, cd, g = 0.1, 1025.0, 2000.0, 0.47, 9.81
    V, A = 4.0 / 3.0 * np.pi * r**3, np.pi * r * r
    m = rho_s * V
    W, B = m * g, rho * V * g
    q0, v0 = jnp.asarray([0, 0, 0, 1.0, 0, 0, 0]), jnp.zeros(6)
    a0 = float(forward(model, q0, v0, forces=forces)[2])
    expected = (B - W) / (m + 0.5 * rho * V)
    tr = simulate(model, q0, v0, t1=6.0, dt=0.005, forces=forces, saveat=[6.0])
    vt = np.sqrt(2.0 * (W - B) / (rho * cd * A))
    path.unlink()
    return {"sphere_accel_rel_err": abs(a0 - expected) / abs(expected),
            "terminal_speed_rel_err": abs(-float(tr.v[-1, 2]) - vt) / vt,
            "sphere_accel_mps2": a0, "sphere_accel_expected_mps2": expected,
            "terminal_speed_mps": -float(tr.v[-1, 2]), "terminal_speed_expected_mps": vt}


# ------------------------------------------------------------------------------ reproduce


def _gait_json(p):
    return {k: float(v) for k, v in p.items()}


def _gait_section(res, model, forces, mass, quick, timings):
    """The gait proof (:func:`optimise_gait`, :data:`PROOF`) and the walks of the nominal gait
    and each method's best gait for the report's horizon (RK4): fills ``res`` (``walk``,
    ``gait_optimisation``, speeds, costs of transport) and returns the walks."""
    t0, c0 = time.perf_counter(), time.process_time()
    pc = PROOF[quick]
    go = optimise_gait(model, forces, **pc)
    fwd, lam = go.pop("_batch")
    timings["gait_optimisation_s"] = time.perf_counter() - t0
    timings["gait_optimisation_cpu_s"] = time.process_time() - c0
    horizon = WALK_T[quick]

    def best_of(name):  # the method's best gait by the optimised J, over all seeds
        rs = go[name]
        i = int(np.argmin([r["J_final"] for r in rs["seeds"]]))
        return rs["theta_best"][i], rs["seeds"][i]["seed"]

    thetas = {"before": np.zeros(N_GAIT_PARAMS), "after": best_of("gradient")[0],
              "cmaes": best_of("cmaes")[0]}
    gaits = {}
    for k, th in thetas.items():
        f, K = gait_params(jnp.asarray(th))
        gaits[k] = {"frequency": float(f), "knots": np.asarray(K).tolist()}
    t0 = time.perf_counter()
    runs = {k: walk(model, forces, g, horizon, throw=False) for k, g in gaits.items()}
    timings["walking_runs_s"] = time.perf_counter() - t0
    met = {k: gait_metrics(r, mass) for k, r in runs.items()}
    res["walk"] = {"horizon_s": horizon, "window_s": met["before"]["window_s"],
                   "metrics": met, "gaits": gaits, "all_finite": all(r["ok"] for r in runs.values()),
                   "feet_touch_floor": {k: bool(np.all(r["foot_fn"].max(0) > 0))
                                        for k, r in runs.items()}}
    res["speed_before_mps"] = met["before"]["speed_mps"]
    res["speed_after_mps"] = met["after"]["speed_mps"]
    res["speed_ratio"] = res["speed_after_mps"] / res["speed_before_mps"]
    res["cost_of_transport_before"] = met["before"]["cost_of_transport"]
    res["cost_of_transport_after"] = met["after"]["cost_of_transport"]
    res["cost_of_transport_definition"] = (
        f"int sum|tau qdot| dt over the window / (m g dx), m = {mass:.1f} kg (the robot's mass "
        f"in air), g = 9.81, window [{WINDOW_START}, {horizon}] s, tau the 8 servo torques")
    # the objective's solver against RK4 at 2 ms (the first T s of the report's walks)
    xs = np.zeros((lam, N_GAIT_PARAMS))
    xs[:3] = np.stack([thetas[k] for k in ("before", "after", "cmaes")])
    j_obj = np.asarray(fwd(jnp.asarray(xs)))[:3]
    solver_check = {k: {"J_objective": float(j), "J_rk4_2ms": objective_of_run(runs[k], mass=mass)}
                    for k, j in zip(("before", "after", "cmaes"), j_obj, strict=True)}
    g, c = go["gradient"], go["cmaes"]
    go.update({
        "objective": f"J = -v + {LAMBDA} P/(m g), v and P (servo power sum|tau qdot|) averaged "
                     f"over [{GAIT['window']}, {GAIT['T']}] s of a walk from the stand pose",
        "model": "reference model (the file's contacts with stiction, no surrogate)",
        "solver": GAIT["solver"], "dt_s": GAIT["dt"], "horizon_s": GAIT["T"],
        "window_s": [GAIT["window"], GAIT["T"]], "parameters": N_GAIT_PARAMS,
        "parameterisation": f"knot table: 8 joints x {GAIT_KNOTS} knots per cycle "
                            f"({KNOT_SCALE} rad per unit of theta, periodic trigonometric "
                            f"interpolation) and the frequency in {list(F_RANGE)} Hz",
        "start": f"the nominal walk, knots moved by N(0, ({START_SPREAD_RAD} rad)^2), frequency "
                 "logit by N(0, 0.25^2), from the seed; the same start for both methods",
        "compile_charging": "each method is compiled once with the persistent cache off (the "
                            "line search: its gradient and its batch of steps); that compile "
                            "time is charged to every seed's clock (as if each seed ran in a "
                            "fresh process)",
        "interleaving": "for each seed the gradient method runs, then CMA-ES",
        "solver_check": solver_check,
        "walked_gaits": {"after": {"method": "gradient", "seed": best_of("gradient")[1]},
                         "cmaes": {"method": "cmaes", "seed": best_of("cmaes")[1]},
                         "selection": "each method's best final J over its seeds (the optimised "
                                      f"[{GAIT['window']}, {GAIT['T']}] s objective); walked "
                                      f"and reported over [{WINDOW_START}, {horizon}] s with RK4 "
                                      f"at {DT} s, a window the selection never saw"},
        "gradient_wins_at_equal_time": bool(g["median_J_final"] < c["median_J_final"]),
        "gradient_reaches_cmaes_final_in_half_the_time": bool(
            g["time_to_reach_cmaes_final_s"] <= 0.5 * go["budget_s"])})
    timings["gait_section_cpu_s"] = time.process_time() - c0
    res["gait_optimisation"] = go
    return runs


def reproduce(out_dir, quick: bool = False) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    timings = {}
    res: dict = {"quick": bool(quick), "method": "ABA, RK4", "dt_s": DT,
                 "frame": "simulated z-up, g = 9.81; figures in the paper's z-down coordinate"}
    model, forces = uw.quadruped(out_dir / "underwater_quadruped.xml")  # generated from its graph
    hydro = next(f for f in forces if isinstance(f, Hydrodynamics))
    mass = uw.total_mass(model)
    res["robot"] = {"modules": 10, "joint_angles": 8, "mass_kg": mass,
                    "displaced_kg": float(hydro.density * np.sum(hydro.volume)),
                    "net_weight_N": uw.net_weight(model, hydro), "density_kg_m3": float(
                        hydro.density), "module_size_m": list(uw.MODULE_SIZE),
                    "module_mass_kg": uw.MODULE_MASS, "start_height_m": uw.Z0,
                    "generated_from": "diffmb.models.underwater.quadruped_configuration() "
                                      "(QUADRUPED_GRAPH); MJCF export underwater_quadruped.xml"}

    # 1. topology and Kane
    t0 = time.perf_counter()
    res.update(path_results())
    res["kane_vs_aba_max_abs"] = kane_vs_aba(model, forces, 20)
    res["lamb_k_factors"] = {str(r): lamb_k_factors(r) for r in (2, 5, 10)}
    res.update(sphere_checks(out_dir))
    timings["topology_kane_closed_forms_s"] = time.perf_counter() - t0

    # 1b. generated configurations: Kane along the paths, a snake against MuJoCo, Fig. 2's robot
    t0 = time.perf_counter()
    per = kane_paths_vs_aba(CONFIG_STATES[quick])
    res["kane_path_vs_aba_max_abs"] = max(per.values())
    res["kane_path_vs_aba_per_configuration"] = per
    res["kane_path_states"] = CONFIG_STATES[quick]
    snake = snake_swim(SNAKE_T[quick])
    res["snake_vs_mujoco_max_rel"] = snake.pop("max_rel")
    res["snake_swim"] = snake
    res["nine_module"] = nine_module_run(NINE_T[quick])
    dk = docking_run(quick)
    res["docking_momentum_err"] = dk["momentum_err"]
    res["docking"] = dk
    res["shared_parameters"] = shared_parameters_run()
    t1 = time.perf_counter()
    res["ring_docking"], ring_replay = ring_docking_run(quick)
    timings["ring_docking_s"] = time.perf_counter() - t1
    timings["configurations_s"] = time.perf_counter() - t0

    # 2. the gait proof: gradient against CMA-ES in the reference model, every seed
    runs = _gait_section(res, model, forces, mass, quick, timings)

    # 3. identification
    t0 = time.perf_counter()
    tid, qid = module_record(seed=1)
    fit, true = fit_module(tid, qid)
    res["identified"] = {n: {"true": true[n], "estimate": float(fit.params[n]),
                             "std": float(fit.std[n])} for n in ID_PARAMS}
    res["identification"] = {"record": f"{ID_T} s at {ID_RATE} Hz, v0 = {list(ID_V0)}",
                             "noise": ID_NOISE, "max_rel_err": max(
                                 abs(v["estimate"] - v["true"]) / v["true"]
                                 for v in res["identified"].values()),
                             "success": bool(fit.success)}
    timings["identification_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_start
    res["timings"] = timings
    (out_dir / "results.json").write_text(json.dumps(res, indent=2, default=float))
    figs = _figures(out_dir, res, runs, plt)
    figs.append(_ring_figure(out_dir, res["ring_docking"], ring_replay, plt))
    _report(out_dir, res, figs, quick)
    from ..viz import frames, study_replay  # the optimised gait, in a browser (diffmb.viz)

    with open(out_dir / "report.md", "a") as f:
        f.write("\n" + study_replay(out_dir, model, frames(runs["after"]["t"], runs["after"]["q"]),
                                    title="underwater quadruped: optimised gait") + "\n")
        f.write("\n" + _ring_replay(out_dir, ring_replay) + "\n")
    return res


def _figures(out_dir, res, runs, plt):
    figs = []
    # paths: the two module graphs' path matrices
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.4))
    for ax, key, title in ((axs[0], "path_matrix", "quadruped (Fig. 4): 4 paths"),
                           (axs[1], "path_matrix_nine_module", "nine modules (Fig. 2): 6 paths")):
        P = np.asarray(res[key])
        ax.imshow(P, cmap="Blues", vmin=0, vmax=1.4)
        for (i, j), x in np.ndenumerate(P):
            ax.text(j, i, str(x), ha="center", va="center", fontsize=9)
        ax.set_xticks(range(P.shape[1]), [f"s{j}" for j in range(P.shape[1])])
        ax.set_yticks(range(P.shape[0]), [f"path {i + 1}" for i in range(P.shape[0])])
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out_dir / "fig_paths.png", dpi=110)
    plt.close(fig)
    figs.append(("fig_paths.png", "path matrices (rows: paths, columns: modules)"))
    # gait phases: targets and foot contacts
    fig, axs = plt.subplots(2, 2, figsize=(12, 6), sharex=True)
    for col, key in enumerate(("before", "after")):
        r = runs[key]
        axs[0, col].plot(r["t"], r["targets"])
        axs[0, col].set_ylabel("servo targets [rad]")
        axs[0, col].set_title(f"{key}: f = {res['walk']['gaits'][key]['frequency']:.2f} Hz")
        for i in range(len(uw.LEGS)):
            on = r["foot_fn"][:, i] > 0
            axs[1, col].fill_between(r["t"], i + 0.1, i + 0.9, where=on, step="mid", color=f"C{i}")
        axs[1, col].set_yticks([0.5, 1.5, 2.5, 3.5], [f"foot {leg}" for leg in uw.LEGS])
        axs[1, col].set_xlabel("t [s]")
    axs[0, 0].legend(uw.JOINTS, fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out_dir / "fig_gait_phases.png", dpi=100)
    plt.close(fig)
    figs.append(("fig_gait_phases.png", "CPG targets and stance phases (foot on the floor)"))
    # COM path in the paper's coordinates (z down)
    fig, axs = plt.subplots(1, 2, figsize=(12, 3.8))
    for key in ("before", "after", "cmaes"):
        r = runs[key]
        axs[0].plot(r["q"][:, 0], -r["q"][:, 2], label=key)
        axs[1].plot(r["t"], r["q"][:, 0], label=f"x0 {key}")
    axs[0].set_xlabel("x0 [m]")
    axs[0].set_ylabel("z0 [m] (z down, floor z = 0)")
    axs[0].set_title("body centre-of-mass path (Fig. 5)")
    axs[0].legend()
    axs[1].set_xlabel("t [s]")
    axs[1].set_ylabel("x0 [m]")
    axs[1].legend()
    fig.tight_layout()
    fig.savefig(out_dir / "fig_com_path.png", dpi=100)
    plt.close(fig)
    figs.append(("fig_com_path.png", "body centre of mass, the paper's frame (z down)"))
    # speed before/after
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for key in ("before", "after", "cmaes"):
        r = runs[key]
        w = int(round(1.0 / SAVE_DT))
        sp = (r["q"][w:, 0] - r["q"][:-w, 0]) / (w * SAVE_DT)
        ax.plot(r["t"][w:], sp, label=f"{key} ({res['walk']['metrics'][key]['speed_mps']:.3f} m/s)")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("forward speed, 1 s average [m/s]")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "fig_speed.png", dpi=100)
    plt.close(fig)
    figs.append(("fig_speed.png", "forward speed of the nominal and the optimised gaits"))
    figs.append(plot_comparison(out_dir, res["gait_optimisation"], plt))
    return figs


def _ring_figure(out_dir, rd, replay, plt):
    """The ring docking: the snake's shape in the x–z plane at four instants, the end ports'
    gap through the curl, the root's height through every phase."""
    from ..modular import module_frames

    cfg, ts, q = replay
    model, _ = cfg.build(fluid=False, contacts=False)
    t_lock = rd["t_lock_s"]
    L = uw.MODULE_SIZE[0]
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.8))
    ax = axs[0]
    picks = [0, int(np.searchsorted(ts, 0.5 * t_lock)), int(np.searchsorted(ts, t_lock)),
             len(ts) - 1]
    for i, c in zip(picks, ("0.75", "0.5", "C3", "C0"), strict=True):
        fr = module_frames(cfg, model, q[i])
        for n in cfg.names:
            R, p = fr[n]
            e = p + R @ np.array([L, 0.0, 0.0])
            ax.plot([p[0], e[0]], [p[2], e[2]], "-", color=c, lw=3,
                    label=f"t = {ts[i]:.2f} s" if n == cfg.names[0] else None)
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("z [m]")
    ax.set_title(f"{rd['modules']} modules: curl, lock at {t_lock:.2f} s, ring")
    ax.legend(fontsize=8)
    ax = axs[1]
    ax.plot(ts, q[:, 2], color="C0", label="height of s0 (the root) [m]")
    ax.axvline(t_lock, color="C3", ls="--", label="ports lock (weld)")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("z [m]")
    ax.set_title(f"gap at lock {rd['port_gap_at_lock_m'] * 1e3:.1f} mm, momentum kept to "
                 f"{rd['momentum_err']:.0e}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "fig_ring.png", dpi=110)
    plt.close(fig)
    return ("fig_ring.png", "a snake docks its ends into a ring: shapes and root height")


def _ring_replay(out_dir, replay) -> str:
    """The ring docking's replay (``replay_ring.html``): the curl and the ring stitched, drawn
    from the ring's MJCF export."""
    from ..io.sources import with_source
    from ..viz import frames, study_replay

    cfg, ts, q = replay
    path = out_dir / "underwater_ring.xml"
    cfg.to_mjcf(path)
    model, _ = cfg.build(fluid=False, contacts=False)
    return study_replay(out_dir, with_source(model, path, "mjcf"), frames(ts, q),
                        name="replay_ring.html",
                        title="underwater snake docking its ends into a ring")


def _configuration_lines(res) -> list:
    """The report's lines on the ring docking and the shared parameters."""
    rd, sp = res["ring_docking"], res["shared_parameters"]
    ph = {p["name"]: p for p in rd["phases"]}
    pn, pq = sp["prediction"], sp["prediction_quadruped"]
    ident = "; ".join(f"{k} {sp['identified'][k]:.4g} (true {v:.4g}, {sp['rel_error'][k]:+.1%}, "
                      f"{sp['error_in_std'][k]:+.1f} σ)" for k, v in sp["true"].items())

    def pred(p):
        return (f"root position error {p['identified']['root_position_m'] * 1e3:.2f} mm "
                f"(initial guess: {p['guess']['root_position_m'] * 1e3:.1f} mm), joint angle "
                f"error {p['identified']['joint_rad']:.1e} rad (guess "
                f"{p['guess']['joint_rad']:.1e}); the true run moves its root "
                f"{p['truth_root_travel_m']:.3f} m")

    return [
        f"- Ring docking (`ring_docking`): {rd['robot']}. Phases: curl, t = 0 → "
        f"{ph['curl']['t1_s']:.2f} s ({ph['curl']['what']}); the end ports "
        f"{rd['ports'][0]} and {rd['ports'][1]} came within tolerance ({rd['tolerance']['tol']} "
        f"m, {rd['tolerance']['angle_tol']} rad, the closing hinge free) at t = "
        f"{rd['t_lock_s']:.2f} s, {rd['port_gap_at_lock_m'] * 1e3:.1f} mm and "
        f"{rd['angle_at_lock_rad']:.1e} rad apart, the closing hinge at "
        f"{rd['closing_hinge_angle_rad']:.3f} rad; lock: {ph['lock']['what']}, momentum "
        f"(bodies and the fluid's impulse) kept to {rd['momentum_err']:.1e} relative, kinetic "
        f"energy {rd['kinetic_energy_J']['before']:.3f} → {rd['kinetic_energy_J']['after']:.3f} "
        f"J; ring, t = {ph['ring']['t0_s']:.2f} → {ph['ring']['t1_s']:.2f} s: {ph['ring']['what']}"
        f", the loop {rd['loop']}; it sank {rd['ring_sink_m']:.3f} m (net weight "
        f"{rd['net_weight_N']:.1f} N), the weld held to {rd['weld_violation_max']['position_m']:.1e}"
        f" m and {rd['weld_violation_max']['orientation']:.1e} (quaternion vector part).",
        f"- Shared parameters (`shared_parameters`): {sp['record']}, noise "
        f"{sp['noise_1sigma']}; the module type's drag and added mass identified by "
        f"Levenberg–Marquardt through `simulate` ({sp['fit']['steps']} steps, success "
        f"{sp['fit']['success']}, residual rms {sp['fit']['residual_rms']:.2f} σ, "
        f"{sp['fit']['wall_s']:.0f} s): {ident}. Predicted with the identified set: the "
        f"{pn['configuration']}: {pred(pn)}; the {pq['configuration']} (types "
        f"{', '.join(pq['module_types'])}; it sinks {pq['truth_sink_m']:.3f} m): {pred(pq)}."]


def _gradient_method_line(g) -> str:
    """The gradient method and its settings, in words (``results.json``'s ``method``,
    ``settings``)."""
    st = g["settings"]
    if st["kind"] == "adam":
        runs = ("one Adam run" if st["batch"] == 1 else
                f"{st['batch']} Adam runs in one `jax.vmap`, started {st['spread']:g} θ units "
                "(N(0, I) times that) about the seed's start")
        return f"`{g['method']}`: {runs}, lr {st['lr']:g}"
    if st["kind"] == "guided-es":
        return (f"`{g['method']}`: guided evolutionary strategies (Maheswaranathan et al. "
                f"2019): at θ the truncated gradient (reverse mode cut every "
                f"{st['segment_s']:g} s) joins the last {st['k'] - 1} as the surrogate; "
                f"{st['pairs']} antithetic perturbations of norm about σ = {st['sigma']:g} θ "
                f"units, a share α = {st['alpha']:g} of their variance isotropic and the rest "
                "in the span of the kept gradients, walked in one `jax.vmap`; the smoothed-"
                f"gradient estimate from the walks (β = {st['beta']:g}) drives an Adam step, lr "
                f"{st['lr']:g}: the gradients only shape where the walks sample")
    grad = "the gradient g"
    if st.get("segment_s") is not None:
        grad = (f"the truncated gradient g (reverse mode cut every {st['segment_s']:g} s, "
                "`gait_objective`'s `segment`: the same walk and J, the gradient the sum of "
                "the segments' with each segment's start state held fixed)")
    return (f"`{g['method']}`: gradient descent with a batched line search: at θ {grad}, "
            f"then {st['batch']} step sizes along −g/max|g| (geometric, ratio "
            f"{st['ratio']:g}, about the last accepted step, first {st['alpha0']:g} θ units) "
            "walked in one `jax.vmap` and the best taken if it lowers J; where none does, the "
            f"next gradient is taken at θ + {st['jitter']:g} ε, ε ~ N(0, I)")


def _gait_report(go, m, res) -> list:
    """The report's gait section: the proof's set-up, every seed of both methods, the verdict."""
    g, c = go["gradient"], go["cmaes"]
    B = go["budget_s"]
    reach = g["time_to_reach_cmaes_final_per_seed_s"]
    fmt_t = lambda x: "never" if not np.isfinite(x) else f"{x:.1f} s"  # noqa: E731
    dj = c["median_J_final"] - g["median_J_final"]
    clock = "process CPU time" if go["clock"] == "cpu_s" else "wall clock"
    lines = [
        f"Objective: {go['objective']}, in the {go['model']}, {go['solver']} contact step at "
        f"{go['dt_s'] * 1e3:.0f} ms. Gait: {go['parameterisation']}: {go['parameters']} "
        f"parameters. Start: {go['start']}. Gradient method {_gradient_method_line(g)}; "
        "`jax.value_and_grad` of J, reverse mode through `simulate`, the contacts' derivatives "
        f"backward-smoothed over {go['smoothing_width_m'] * 1e3:g} mm (the walk itself is "
        "unchanged; `diffmb.optim.check_gradient` on a start of seed 100 with and without it: "
        "docs/performance.md). The gradient method and its settings were chosen on seeds 100 "
        "and 101 (docs/performance.md), CMA-ES's σ₀ before any seed ran; neither on the "
        "reported seeds. Peer: `cmaes.CMA` (ask/tell, its default population of "
        f"{c['population_size']}, σ₀ = {c['sigma0']} in θ units = "
        f"{c['sigma0'] * KNOT_SCALE:g} rad per knot), each generation evaluated in one "
        "`jax.vmap` of the same J. Both call one function (`gait_objective`). Budget: "
        f"{B:.0f} s per method and seed on the {clock}, compile included: "
        f"{go['compile_charging']} (gradient {g['compile_s']:.1f} s, CMA-ES batch "
        f"{c['compile_s']:.1f} s; wall {g['compile_wall_s']:.1f} s and {c['compile_wall_s']:.1f} s)"
        f"; {go['interleaving']}. Seeds {go['seeds']}, every one reported. "
        + ("The machine's 2 cores were shared with other work, whose load inflates wall time "
           "several-fold and unevenly; the budget is therefore set on this process's CPU time, "
           "which that load barely changes (both clocks are in results.json). "
           if clock.startswith("process") else
           "The machine's cores may have been shared with other work: wall times carry its "
           "load. "), "",
        "| seed | gradient J | gradients / walks | CMA-ES J | CMA-ES walks | gradient reaches "
        "CMA-ES's final J at |", "| --- | --- | --- | --- | --- | --- |"]
    for rg, rc, t in zip(g["seeds"], c["seeds"], reach, strict=True):
        lines.append(f"| {rg['seed']} | {rg['J_final']:.4f} | {rg['gradients']} / "
                     f"{rg['evaluations']} | {rc['J_final']:.4f} | {rc['evaluations']} | "
                     f"{fmt_t(t)} |")
    lines += [
        f"| median | {g['median_J_final']:.4f} | | {c['median_J_final']:.4f} | | "
        f"{fmt_t(g['time_to_reach_cmaes_final_s'])} |", ""]
    if any(not r["J"] for r in g["seeds"]):
        lines.append(f"- The gradient method's compile ({g['compile_s']:.1f} s) took its whole "
                     f"budget of {B:.0f} s: it walked nothing within it (J = inf).")
    lines += [
        f"- At equal time ({B:.0f} s, {clock}), median J: gradient {g['median_J_final']:.4f}, CMA-ES "
        f"{c['median_J_final']:.4f}: **" + ("the gradient method wins" if
                                              go["gradient_wins_at_equal_time"] else
                                              "CMA-ES wins") + f"** by {abs(dj):.4f} in J.",
        ("- The gradient method reaches CMA-ES's final J (median over seeds) after "
         f"{fmt_t(g['time_to_reach_cmaes_final_s'])} of the {B:.0f} s"
         if np.isfinite(g["time_to_reach_cmaes_final_s"]) else
         "- The gradient method does not reach CMA-ES's final J (median over seeds) within "
         f"the {B:.0f} s") + f" ({clock}, compile included): the target (≤ ½ the time) is "
        + ("met" if go["gradient_reaches_cmaes_final_in_half_the_time"] else "not met") + ".",
        "- The objective's solver against RK4 at 2 ms, J over the same window of the same "
        "gait: " + "; ".join(f"{k} {v['J_objective']:.4f} vs {v['J_rk4_2ms']:.4f}"
                             for k, v in go["solver_check"].items()) + ".",
        f"- Walked gaits: 'after' is the gradient method's best gait over its seeds (seed "
        f"{go['walked_gaits']['after']['seed']}), 'cmaes' CMA-ES's (seed "
        f"{go['walked_gaits']['cmaes']['seed']}), each chosen by the optimised J; "
        f"{go['walked_gaits']['selection']}. Speed {res['speed_before_mps']:.4f} → "
        f"{res['speed_after_mps']:.4f} m/s (gradient), {m['cmaes']['speed_mps']:.4f} m/s "
        f"(CMA-ES); cost of transport {res['cost_of_transport_before']:.3f} → "
        f"{res['cost_of_transport_after']:.3f} (gradient), "
        f"{m['cmaes']['cost_of_transport']:.3f} (CMA-ES).", ""]
    return lines


def _report(out_dir, res, figs, quick):
    w = res["walk"]
    m = w["metrics"]
    go = res["gait_optimisation"]
    rb = res["robot"]
    sn, nm, dk = res["snake_swim"], res["nine_module"], res["docking"]
    fmt = lambda P: "\n".join("    " + " ".join(str(x) for x in row) for row in P)  # noqa: E731
    lines = [
        "# The underwater self-reconfigurable modular robot (Xu, Yang, Ge & Wang 2018)", "",
        f"Quadruped configuration: {rb['modules']} modules ({rb['module_size_m']} m, "
        f"{rb['module_mass_kg']} kg each; ours, the paper prints none), {rb['joint_angles']} "
        f"joint angles, {rb['mass_kg']:.1f} kg, displacing {rb['displaced_kg']:.2f} kg of "
        f"water at ρ = {rb['density_kg_m3']:.0f} kg/m³: net weight {rb['net_weight_N']:.1f} N. "
        f"Simulated z-up with g = 9.81 (the paper: z down, g = 9.8); start "
        f"{rb['start_height_m']} m above the floor (the paper's z₀ = −1.2 m). "
        + (f"{'--quick' if quick else 'Full run'}: {w['horizon_s']} s walks; gait proof with "
           f"{len(go['seeds'])} seeds × {go['budget_s']:.0f} s per method.")
        + f" Generated configurations: {res['kane_path_states']} random states each, a "
        f"{sn['duration_s']} s swim, a {nm['duration_s']} s run of Fig. 2's robot, docking "
        f"phases of {dk['t_undock_s'] - dk['t_dock_s']:.1f} s docked and "
        f"{dk['t_end_s'] - dk['t_undock_s']:.1f} s apart"
        + (" (shortened by --quick)." if quick else "."), "",
        "## Path matrices (core topology)", "",
        "Quadruped (paper: 4 paths s0 s1 s2 s3; s0 s1 s4 s5; s0 s6 s7; s0 s8 s9), columns s0…s9:",
        "", fmt(res["path_matrix"]), "",
        "Nine-module example (paper: 6 paths, rows = columns 2, 3, 5, 6, 8, 9 of A + I); our "
        "reading of Fig. 2 from the paper's row list: s1, s2, s3, s6 on s0; s4, s5 on s3; s7, "
        "s8 on s6:", "", fmt(res["path_matrix_nine_module"]), "",
        f"Kane (generalized speeds of the free joint, added inertia, buoyancy, drag, servos, "
        f"contacts) vs ABA, 20 random states: max |Δa| = {res['kane_vs_aba_max_abs']:.2e}.", "",
        "## Configurations generated from module graphs (diffmb.modular)", "",
        "Every robot here is generated from its module graph (module type, ports, connections); "
        "the quadruped simulated below is `quadruped_configuration().build()`, whose Model equals "
        "the hand-written `underwater_quadruped.xml`.", "",
        f"- Kane's equations with the partial velocities assembled along the path matrix vs ABA "
        f"(added inertia, random torques and body wrenches), {res['kane_path_states']} random "
        f"states per configuration: max |Δv̇| = {res['kane_path_vs_aba_max_abs']:.2e} ("
        + ", ".join(f"{k} {v:.1e}" for k, v in res["kane_path_vs_aba_per_configuration"].items())
        + ").",
        f"- A {sn['modules']}-module snake swims from rest with a travelling wave (amplitude "
        f"{sn['wave']['amplitude']} rad, {sn['wave']['frequency']} Hz, one wave length along the "
        f"body) for {sn['duration_s']} s: {sn['distance_towards_s0_m']:.3f} m towards its head, "
        f"sinking {sn['sink_m']:.3f} m. At {sn['states']} states along the swim, diffmb's v̇ with "
        f"MuJoCo's fluid model against MuJoCo's `mj_forward` on the MJCF export: max rel. "
        f"difference {res['snake_vs_mujoco_max_rel']:.1e}.",
        f"- Nine-module robot of Fig. 2 (our ports): {nm['actuation']}, released at rest at "
        f"{nm['initial_position_m'][2]:.2f} m, net weight {nm['net_weight_N']:.1f} N; after "
        f"{nm['duration_s']} s its root is at ({', '.join(f'{x:.3f}' for x in nm['final_position_m'])}) m "
        f"(sunk {nm['sink_m']:.3f} m), quaternion ({', '.join(f'{x:.4f}' for x in nm['final_quaternion_wxyz'])}).",
        f"- Docking: {dk['robots']}, {dk['start']['gap_m']} m apart, closing at "
        f"{2 * dk['start']['speed_a_mps']} m/s (a rolling at {dk['start']['roll_rate_a_radps']} "
        f"rad/s). Ports {dk['ports'][0]} and {dk['ports'][1]} came within tolerance "
        f"({dk['tolerance']['tol']} m, {dk['tolerance']['angle_tol']} rad) at t = "
        f"{dk['t_dock_s']:.2f} s ({dk['gap_at_dock_m'] * 1e3:.1f} mm, {dk['angle_at_dock_rad']:.3f} rad) "
        "and locked where they stood (an inelastic impact): momentum (bodies and the fluid's "
        f"impulse) kept to {res['docking_momentum_err']:.1e} relative, kinetic energy "
        f"{dk['kinetic_energy_J']['before']:.3f} → {dk['kinetic_energy_J']['after']:.3f} J. "
        f"The docked robot moved on until t = {dk['t_undock_s']:.2f} s, undocked at the weld "
        f"(momentum kept to {dk['undocking_momentum_err']:.1e}) and the two drifted apart until "
        f"t = {dk['t_end_s']:.2f} s.", *_configuration_lines(res), "",
        "## Closed forms", "",
        f"- released sphere: a₀ = {res['sphere_accel_mps2']:.6f} m/s² vs (B − W)/(m + ½ρV) = "
        f"{res['sphere_accel_expected_mps2']:.6f} (rel. err {res['sphere_accel_rel_err']:.1e}); "
        f"terminal speed {res['terminal_speed_mps']:.5f} vs {res['terminal_speed_expected_mps']:.5f} "
        f"m/s (rel. err {res['terminal_speed_rel_err']:.1e})",
        "- Lamb's prolate spheroid factors: " + "; ".join(
            f"a/b = {k}: k1 {v['k1']:.4f}, k2 {v['k2']:.4f}, k′ {v['k_prime']:.4f}"
            for k, v in res["lamb_k_factors"].items()) + " (Lamb §373: a/b = 2: 0.210, 0.704, 0.239)",
        "", "## Walking on the sea floor (Figs. 4–5)", "",
        f"CPG: 8 Hopf oscillators (diffmb.controls.CPG), hips and knees; window {w['window_s']} s; "
        f"all runs finite: {w['all_finite']}; every foot touches the floor: {w['feet_touch_floor']}.",
        "", "| gait | f [Hz] | hip range [rad] | knee range [rad] | speed [m/s] | CoT | "
        "mean height [m] | vertical oscillation [m] | lateral drift [m] |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k in ("before", "after", "cmaes"):
        g = w["gaits"][k]
        K = np.asarray(g["knots"])
        lines.append(f"| {k} | {g['frequency']:.3f} | {np.ptp(K[0::2], axis=1).mean():.3f} | "
                     f"{np.ptp(K[1::2], axis=1).mean():.3f} | "
                     f"{m[k]['speed_mps']:.4f} | {m[k]['cost_of_transport']:.3f} | "
                     f"{m[k]['z_mean_m']:.3f} | {m[k]['z_oscillation_m']:.4f} | "
                     f"{m[k]['lateral_drift_m']:.3f} |")
    lines += ["", "Fraction of the window each foot is on the floor: " + "; ".join(
        f"{k}: " + ", ".join(f"{leg} {d:.2f}" for leg, d in m[k]["duty_factor"].items())
        for k in ("before", "after", "cmaes")) + ". With 4 % net weight the body floats on "
        "brief foot contacts; an optimised gait may push with some legs and keep others "
        "nearly off the floor (read the duty factors above)."]
    lines += [
        "", f"The paper's Fig. 5 starts at x₀ = 0, z₀ = −1.2 m and shows the body oscillating "
        "vertically while it walks; it prints no speed. Ours: the body settles onto its feet "
        f"at ≈ {m['before']['z_mean_m']:.2f} m and oscillates by {m['before']['z_oscillation_m'] * 1e3:.0f} mm "
        "(nominal walk).", "",
        "## Gait optimisation: gradient against CMA-ES in the reference model", ""]
    lines += _gait_report(go, m, res)
    lines += [
        "## Identification (one module, free swimming)", "",
        f"Record (a fresh one, seed 1; the shipped CSV is seed 0): "
        f"{res['identification']['record']}, noise {res['identification']['noise']}; "
        "Levenberg–Marquardt through simulate (forward mode) from a 30 % wrong start, initial "
        "position and velocity estimated too.", "",
        "| parameter | true | estimate | std | rel. err |", "| --- | --- | --- | --- | --- |"]
    for n, v in res["identified"].items():
        lines.append(f"| {n} | {v['true']:.5g} | {v['estimate']:.5g} | {v['std']:.2g} | "
                     f"{(v['estimate'] - v['true']) / v['true']:+.2%} |")
    lines += ["", "## Timings (this machine)", ""]
    lines += [f"- {k}: {v:.1f} s" for k, v in res["timings"].items()]
    lines += ["", "## Figures", ""] + [f"![{c}]({f})" for f, c in figs]
    (out_dir / "report.md").write_text("\n".join(lines) + "\n")
