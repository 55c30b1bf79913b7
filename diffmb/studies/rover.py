"""Study: the six-wheeled Mars rover — recursive Lagrange on a span tree, Bekker/Wong–Reece
terramechanics, soil identification.

Source: Xu, Ju, Yu & Gu (2021), "Dynamics modeling research and simulation platform
implementation of Mars rover", J. Nanjing Univ. Aeronautics & Astronautics 53(1) (seed 002).

The rover is ``diffmb/assets/rover.xml`` (:mod:`diffmb.models.rover`): its differential held
exactly, active rockers and bogies, six steered and driven wheels, Mars gravity. Wheel–soil
forces are :class:`diffmb.contacts.terramechanics.WheelSoil` (Wong–Reece stresses with
Bekker's moduli, Janosi shear, soil memory and damping) on the regolith simulant of the
single-wheel test bed. Behaviours use ABA with the velocity-implicit Euler (``SOLVER``) at
``DT``; the recursive Lagrange formulation cross-checks ABA on random states.

``reproduce(out_dir, quick)`` writes ``results.json``, figures and ``report.md``;
``identify(data_csv, out_dir)`` fits soil parameters to a single-wheel CSV with columns
``t, slip, sinkage, drawbar_pull, torque`` (the shipped ``rover_wheel.csv`` was recorded from
the dynamic rig at constant-slip segments). ``--quick`` shortens the behaviours to 2 s, the
traverse fit to 1 s (explicit Euler at 2.5 ms), the batched runs to 64 rovers over 0.25 s of
simulated time and the realtime factor to the best of 2 runs, and leaves out the unilateral
law's 10 ms try (the keys keep their meaning; the realtime factor is always the 5 s traverse).
Steady-state means are over
:func:`steady_window` (the last 2 s, never before 1 s: 1–2 s with ``--quick``), stated as
``straight_window_s``.

Beside the paper's numbers: ``turn_in_place`` (the yaw rate reached against the command and
why), ``lift_wheel_normal_N`` (which wheel the lift takes off the ground),
``wheel_inertia_effect`` (the straight drive with the paper's wheel inertia and a thin shell's)
``traction_vs_K`` (the zero-drawbar-pull slip against the shear deformation modulus; its
``measured_single_wheel``: :func:`measured_single_wheel`, a measured single-wheel curve beside
the static model, ``fig_measured_single_wheel.png``) and
``fig7_scenario`` (the paper's Fig. 7 scenario, an arc on rough ground, and its statements
about Figs. 9–14 beside ours), ``contact_model_comparison`` (the paper's 10 ms step tried, eq. 32's lateral force against the
lateral shear, the linearised eq. 26 stresses against Wong–Reece's on the straight drive, the
paper's unilateral contact of eqs. 33–42 against the compliant law on the Fig. 7 scenario:
:func:`unilateral_comparison`, ``fig_unilateral_normal.png``),
``identified_cross_model`` (the linearised eq. 26 model fitted to Wong–Reece records with AR(1)
noise: estimates, standard errors, which parameters and combinations the data determine, and
the acceptance level ``XM_ACCEPT``).
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..contacts import Plane, UnilateralWheelSoil, rough_terrain
from ..contacts import terramechanics as tm
from ..io.csvdata import read_csv, write_csv
from ..models import rover
from ..optim.batch import available_cpus
from ..optim.lsq import least_squares
from ..simulation import ImplicitVelocityEuler, simulate
from ..spatial.rotation import rpy_from_quat
from ..systems import STATUS

__all__ = ["reproduce", "identify", "rover_wheel_soil", "run_behaviour", "single_wheel_fit",
           "wheel_csv_path", "record_wheel_csv", "steady_window", "turn_rate",
           "drawbar_pull_crossing", "traction_vs_K", "measured_single_wheel",
           "measured_soil", "MEASURED_SINGLE_WHEEL", "cross_model_records", "cross_model_fit",
           "ar1_noise", "rover_unilateral", "run_unilateral", "unilateral_comparison",
           "nominal_sinkage", "SOIL", "DT", "SOLVER"]

SOIL = "regolith_simulant"
SOLVER = "implicit_euler_v"  # the behaviours' method: Euler linearly implicit in the velocities
#                              (diffmb.simulation.ImplicitVelocityEuler, first order)
JACOBIAN_EVERY = 200  # its ∂a/∂v is taken afresh every 200 steps (1 s) and held in between
#                       (against every 50 steps: behaviours within 0.8 mm, 0.6 mrad, 0.7 N)
DT = 5e-3  # s, its step (checked against DT/2 in the report). The fastest modes of the traverse
#           (a wheel's slip against its servo and its bogie, from rest; the soil memory) are
#           real, at -330 ... -720 1/s: explicit Euler needs h < 2/720 s (2.5 ms: alternating at
#           the start), the velocity-implicit step damps them at any h (h λ = 1.6 ... 3.6
#           here). The memory (200 1/s, explicit) bounds h below 10 ms. 5 s traverse against RK4
#           at 1.25 ms: 4.7e-4 m (explicit Euler at 2.5 ms, twice the steps: 2.1e-4 m;
#           docs/performance.md)
OUT_DT = 0.01  # s, output step (the paper's figures)
HORIZON = 5.0  # s
REALTIME_REPS = 5  # the realtime factor is the best of this many runs after compilation
N_NODES = 6  # quadrature nodes per segment in the rover's wheels (32 in the single wheel;
#              forces within 4e-6 of their maxima, see tests/test_terramechanics.py)
V_EPS = 0.03  # m/s, the wheels' slip regularisation (exact above 0.03 m/s; the rover drives
#               at 0.1 m/s): 0.01 m/s puts a -670 1/s mode in the start from rest
MEMORY_RATE = 200.0  # 1/s, the soil memory's loading rate (500 would be a -500 1/s mode)
ROUGH = dict(seed=7, size=(12.0, 12.0), resolution=0.05, amplitude=0.02, wavelength=0.6)
FLAT = dict(ROUGH, amplitude=0.0)  # the behaviours' flat ground: ROUGH's grid at zero height,
#                                    a plane over its 12 m x 12 m (flat and rough runs share
#                                    one compiled simulation)
# single-wheel identification: two wheel widths separate k_c from k_phi (k_eq = k_c/b + k_phi)
ID_WIDTHS = (0.11, 0.16)
ID_NOISE = {"sinkage": 2e-4, "drawbar_pull": 0.3, "torque": 0.03}  # m, N, N m (1 sigma)
ID_PARAMS = ("k_c", "k_phi", "c", "phi", "K")
ID_GUESS = {"k_c": 3.0e3, "k_phi": 6.0e5, "c": 500.0, "phi": 0.5, "K": 0.05}
CSV_PARAMS = ("k_phi", "c", "phi", "K")  # one width in the CSV: k_c held at its nominal
STEADY_AFTER = 1.0  # s: the commands ramp up over 0.5 s (rover.drive_controls); the straight
#                     drive's speed is within 1 % of its steady value from 0.75 s
STEADY_SPAN = 2.0  # s: the steady-state means are over the last 2 s, never before STEADY_AFTER
TRACTION_K = (0.005, 0.01, 0.02, 0.036, 0.06)  # m, shear deformation moduli of traction_vs_K
UNILATERAL_TIME_CONSTANT = 0.02  # s, Baumgarte's (critically damped) on the unilateral gaps
# The unilateral law's runs: explicit Euler at 2.5 ms. The velocity-implicit Euler works too
# (5 and 10 ms, docs/rover.md), but its ∂a/∂v through the rows compiles for over a minute more;
# at 2.5 ms the slip modes (-330 ... -720 1/s, see DT) are stable (h λ < 2).
UNILATERAL_SOLVER = "euler"
UNILATERAL_DT = 2.5e-3  # s
UNILATERAL_MARGIN = 5e-3  # m, a wheel within this of its contact depth is a candidate row
PAPER = {
    "wheel_speed_deg_s": 2.0,  # Fig. 11 as printed, ±2 °/s
    "straight_speed_m_s": 0.1,
}


def wheel_csv_path() -> pathlib.Path:
    from importlib import resources

    return pathlib.Path(str(resources.files("diffmb") / "assets" / "rover_wheel.csv"))


def rover_wheel_soil(model, terrain, soil=None, n_nodes=N_NODES, v_eps=V_EPS,
                     memory_rate=MEMORY_RATE):
    """The WheelSoil element of the rover's six wheels on ``terrain``."""
    soil = tm.SOILS[SOIL] if soil is None else soil
    wheels = [tm.Wheel(f"wheel_{w}", rover.WHEEL_RADIUS, rover.WHEEL_WIDTH, axis=(0, 1, 0),
                       name=w) for w in rover.WHEELS]
    return tm.WheelSoil(wheels, terrain, soil, model=model, n_nodes=n_nodes, v_eps=v_eps,
                        memory_rate=memory_rate)


def nominal_sinkage(model, soil=None):
    """The static sinkage [m] of a rover wheel under its share of the weight (W/6) at zero
    slip (Wong–Reece, :func:`~diffmb.contacts.terramechanics.static_sinkage`)."""
    w = float(np.sum(model.body_mass)) * rover.MARS_G / 6
    soil = tm.SOILS[SOIL] if soil is None else soil
    t1 = tm.static_sinkage(soil, rover.WHEEL_RADIUS, rover.WHEEL_WIDTH, w, 0.0)
    return float(tm.sinkage_from_angle(t1, rover.WHEEL_RADIUS))


def _settled_q0(model):
    """The file's pose lowered onto the soil (the wheels' static sinkage under their share of
    the weight), at rest."""
    q0 = np.array(model.qpos0)
    q0[2] -= nominal_sinkage(model)
    return jnp.asarray(q0)


def rover_unilateral(model, terrain, soil=None):
    """The paper's unilateral contact (eqs. 33–42) for the rover's six wheels on ``terrain``:
    :class:`~diffmb.contacts.UnilateralWheelSoil` with the sinkage held at
    :func:`nominal_sinkage`, Baumgarte time constant ``UNILATERAL_TIME_CONSTANT``, candidate
    margin ``UNILATERAL_MARGIN`` and the behaviours' ``V_EPS``, ``N_NODES``."""
    soil = tm.SOILS[SOIL] if soil is None else soil
    wheels = [tm.Wheel(f"wheel_{w}", rover.WHEEL_RADIUS, rover.WHEEL_WIDTH, axis=(0, 1, 0),
                       name=w) for w in rover.WHEELS]
    return UnilateralWheelSoil(wheels, terrain, soil, nominal_sinkage(model, soil), model=model,
                               time_constant=UNILATERAL_TIME_CONSTANT, margin=UNILATERAL_MARGIN,
                               v_eps=V_EPS, n_nodes=N_NODES)


@eqx.filter_jit
def _separations(model, el, q):
    """The unilateral gaps (ns, 6) [m] along saved positions."""
    return jax.vmap(lambda qq: el.separation(model, qq))(q)


def run_unilateral(model, forces, el, name, horizon, dt=UNILATERAL_DT,
                   solver=UNILATERAL_SOLVER):
    """:func:`run_behaviour` with the unilateral contact ``el`` (:func:`rover_unilateral`) in
    place of WheelSoil: a dict of output series and the trajectory. ``normal`` (ns − 1, 6)
    [N]: the mean normal forces over each output interval (the impulses' differences, the
    element's state), at the intervals' midpoints ``t_mid``; ``separation`` (ns, 6) the gaps;
    ``status`` the run's (no exception on failure)."""
    q0 = _settled_q0(model)
    ts = np.round(np.arange(int(round(horizon / OUT_DT)) + 1) * OUT_DT, 10)
    p = rover.behaviour_params(name)
    tr = simulate(model, q0, None, t1=horizon, dt=dt, solver=_solver(solver),
                  forces=forces + (el,), control=rover.drive_control, params=p, saveat=ts,
                  throw=False)
    imp = np.asarray(tr.aux[0][len(forces)])
    vdx = {j: model.joint_v[model.joint_index(j)] for j in model.joint_names}
    return {"t": ts, "t_mid": 0.5 * (ts[1:] + ts[:-1]), "traj": tr, "status": int(tr.status),
            "normal": np.diff(imp, axis=0) / np.diff(ts)[:, None],
            "separation": np.asarray(_separations(model, el, tr.q)),
            "wheel_speed": np.asarray(tr.v[:, [vdx[f"wheel_{w}"] for w in rover.WHEELS]]),
            "pos": np.asarray(tr.q[:, :3]), "quat": np.asarray(tr.q[:, 3:7]),
            "vel": np.asarray(tr.v[:, :3])}


def _solver(solver=None):
    """``solver`` (default ``SOLVER``) as ``simulate`` takes it: "euler" is diffrax's Euler,
    "implicit_euler_v" the velocity-implicit Euler with its Jacobian every JACOBIAN_EVERY
    steps."""
    import diffrax

    solver = SOLVER if solver is None else solver
    if solver == "euler":
        return diffrax.Euler()
    if solver == "implicit_euler_v":
        return ImplicitVelocityEuler(jacobian_every=JACOBIAN_EVERY)
    return solver


@eqx.filter_jit
def _behaviour_outputs(model, act, ws, p, ts, q, v, mem):
    """The actuator forces and the wheel–soil element's quantities along saved states."""
    ctrl = jax.vmap(lambda t: rover.drive_controls(t, p))(ts)
    f_act = jax.vmap(act.actuator_force)(q, v, ctrl)
    return f_act, jax.vmap(lambda q, v, m: ws.evaluate(model, q, v, m))(q, v, mem)


def run_behaviour(model, forces, ws, name, horizon, dt=DT, q0=None, solver=None):
    """Simulate one behaviour; returns a dict of output series (OUT_DT) and the trajectory."""
    q0 = _settled_q0(model) if q0 is None else q0
    ts = np.round(np.arange(int(round(horizon / OUT_DT)) + 1) * OUT_DT, 10)
    fs = forces + (ws,)
    p = rover.behaviour_params(name)
    # the loop compiled for the horizon at the step check's DT/2: runs over one horizon at DT,
    # DT/2 and 10 ms share one compiled program
    tr = simulate(model, q0, None, t1=horizon, dt=dt, solver=_solver(solver), forces=fs,
                  control=rover.drive_control, params=p, saveat=ts,
                  loop_steps=max(int(round(horizon / (DT / 2))), int(round(horizon / dt))))
    act = next(f for f in forces if type(f).__name__ == "Actuators")
    f_act, ev = _behaviour_outputs(model, act, ws, p, jnp.asarray(ts), tr.q, tr.v,
                                   tr.aux[0][len(forces)])
    idx = {j: model.joint_q[model.joint_index(j)] for j in model.joint_names}
    vdx = {j: model.joint_v[model.joint_index(j)] for j in model.joint_names}
    return {
        "t": ts, "traj": tr, "eval": ev,
        "steer_angle": np.asarray(tr.q[:, [idx[f"steer_{w}"] for w in rover.WHEELS]]),
        "steer_torque": np.asarray(f_act[:, 4:10]),
        "wheel_speed": np.asarray(tr.v[:, [vdx[f"wheel_{w}"] for w in rover.WHEELS]]),
        "wheel_torque": np.asarray(f_act[:, 10:16]),
        "diff": np.asarray(tr.q[:, idx["diff_l"]] + tr.q[:, idx["diff_r"]]),
        "pos": np.asarray(tr.q[:, :3]), "quat": np.asarray(tr.q[:, 3:7]),
        "vel": np.asarray(tr.v[:, :3]),
    }


def steady_window(t):
    """Mask of the output times ``t`` in the steady window [max(t_end − STEADY_SPAN,
    STEADY_AFTER), t_end], and that window (t0, t1) [s]."""
    t = np.asarray(t)
    t0 = max(float(t[-1]) - STEADY_SPAN, STEADY_AFTER)
    if t0 >= float(t[-1]):
        raise ValueError(f"steady_window: a run of {float(t[-1])} s ends before the steady "
                         f"window opens at {STEADY_AFTER} s")
    return t >= t0 - 1e-9, (t0, float(t[-1]))


def turn_rate(run, yaw_rate):
    """The yaw rate a turn in place reaches against its command ``yaw_rate`` [rad/s], over the
    steady window, and why: every wheel's contact advances at r ω (1 − |s|), so the body yaws at
    the commanded rate times (1 − |s|) times the wheel servo's ω/ω* (ω* its commanded spin)."""
    mask, win = steady_window(run["t"])
    yaw = np.unwrap(_rpy(run["quat"])[:, 2])
    t = run["t"][mask]
    achieved = float(np.polyfit(t, yaw[mask], 1)[0])
    _, spin_cmd = rover.drive_command(0.0, yaw_rate)
    servo = np.mean(run["wheel_speed"][mask], axis=0) / np.asarray(spin_cmd)
    slip = np.mean(np.abs(np.asarray(run["eval"].slip)[mask]), axis=0)
    lateral = np.max(np.abs(np.asarray(run["eval"].slip_angle)[mask]))
    return {"commanded_deg_s": float(np.degrees(yaw_rate)),
            "achieved_deg_s": float(np.degrees(achieved)), "ratio": achieved / float(yaw_rate),
            "window_s": list(win), "wheel_slip": dict(zip(rover.WHEELS, slip.tolist(), strict=True)),
            "wheel_servo_speed_ratio": dict(zip(rover.WHEELS, servo.tolist(), strict=True)),
            "predicted_ratio": float(np.mean((1.0 - slip) * servo)),
            "max_abs_slip_angle_deg": float(np.degrees(lateral))}


def _startup(run, speed):
    """Start-up numbers of a straight drive: time to 95 % of the steady speed [s], the peak and
    the steady drive torques [N m] (largest wheel), steady speed [m/s] and slip."""
    mask, _ = steady_window(run["t"])
    v = run["vel"][:, 0]
    steady = float(np.mean(v[mask]))
    k = int(np.argmax(v >= 0.95 * steady))  # v(0) = 0: k > 0 once the speed gets there
    t95 = float(np.interp(0.95 * steady, v[k - 1:k + 1], run["t"][k - 1:k + 1])) if k else None
    tq = np.abs(run["wheel_torque"])
    return {"steady_speed_m_s": steady, "speed_over_commanded": steady / speed,
            "time_to_95pct_speed_s": t95, "peak_drive_torque_Nm": float(np.max(tq)),
            "steady_drive_torque_Nm": float(np.max(np.mean(tq[mask], axis=0))),
            "steady_slip": float(np.mean(np.abs(np.asarray(run["eval"].slip)[mask])))}


def wheel_inertia_effect(model, forces, ws, horizon, paper_run=None):
    """The straight drive with the paper's wheel inertia and with a thin shell's
    (:func:`diffmb.models.rover.thin_shell_wheel_inertia`): the inertias and the start-up
    numbers of each (:func:`_startup`), and both runs."""
    phys = rover.thin_shell_wheel_inertia()
    paper_run = run_behaviour(model, forces, ws, "straight", horizon) if paper_run is None \
        else paper_run
    phys_run = run_behaviour(rover.with_wheel_inertia(model, phys), forces, ws, "straight",
                             horizon)
    v = PAPER["straight_speed_m_s"]
    r2 = rover.WHEEL_RADIUS ** 2
    out = {"paper_inertia_kg_m2": list(rover.PAPER_WHEEL_INERTIA),
           "physical_inertia_kg_m2": list(phys),
           "physical_inertia_basis": "thin cylindrical shell of the paper's mass, r = b = 0.15 m: "
                                     "axial m r^2 (the largest any 3.674 kg wheel of radius "
                                     "0.15 m can have), transverse m (r^2/2 + b^2/12)",
           "equivalent_mass_per_wheel_kg": {"paper": rover.PAPER_WHEEL_INERTIA[1] / r2,
                                            "physical": phys[1] / r2},
           "paper": _startup(paper_run, v), "physical": _startup(phys_run, v)}
    return out, paper_run, phys_run


def _crossing_fns():
    @eqx.filter_jit
    def dp(soil, r, b, load, s, theta2):
        t1 = tm.static_sinkage(soil, r, b, load, s, theta2=theta2)
        return tm.wheel_forces(soil, r, b, t1, s, theta2=theta2).drawbar_pull, t1

    return dp


_DP = _crossing_fns()
_ZERO = jnp.asarray(0.0)


def drawbar_pull_crossing(soil, r, b, load, s_max=0.99):
    """The slip in [0, s_max] where the static Wong–Reece drawbar pull of a wheel (r, b [m])
    carrying ``load`` [N] crosses zero (0 if DP(0) ≥ 0, None if it stays negative), with DP(0)/W
    and, at the
    crossing, the entry angle θ₁ and the shear displacement at the rear of the contact
    j = r[θ₁ − (1 − s) sin θ₁] over K."""
    from scipy.optimize import brentq

    args = tuple(jnp.asarray(float(x)) for x in (r, b, load))

    def f(s):
        return float(_DP(soil, *args, jnp.asarray(float(s)), _ZERO)[0])

    out = {"dp_at_zero_slip_over_W": f(0.0) / float(load), "dp_at_s_max_over_W":
           f(s_max) / float(load), "s_max": s_max}
    if f(s_max) <= 0.0:
        return {**out, "crossing_slip": None}
    s0 = 0.0 if f(0.0) >= 0.0 else float(brentq(f, 0.0, s_max, xtol=1e-10))
    t1 = float(_DP(soil, *args, jnp.asarray(s0), _ZERO)[1])
    j = float(r) * (t1 - (1.0 - s0) * np.sin(t1))
    return {**out, "crossing_slip": s0, "theta1_rad": t1, "j_rear_over_K": j / float(soil.K)}


def traction_vs_K(Ks=TRACTION_K, soil=None):
    """:func:`drawbar_pull_crossing` on the single-wheel bed (r = 0.09, b = 0.11 m, 64.68 N)
    and on the rover's wheel (r = b = 0.15 m, a sixth of the rover's weight on Mars) for each
    shear deformation modulus K [m] of ``soil`` (default the study's)."""
    soil = tm.SOILS[SOIL] if soil is None else soil
    model, _, _ = rover.load()
    w_rover = float(np.sum(model.body_mass)) * rover.MARS_G / 6
    wheels = {"test_bed": (0.09, 0.11, 64.68),
              "rover_wheel": (rover.WHEEL_RADIUS, rover.WHEEL_WIDTH, w_rover)}
    out = {"soil": SOIL, "paper_K_m": float(soil.K), "wheels": {}}
    for name, (r, b, load) in wheels.items():
        rows = [{"K_m": float(K), **drawbar_pull_crossing(soil.replace(K=K), r, b, load)}
                for K in Ks]
        out["wheels"][name] = {"r_m": r, "b_m": b, "load_N": load, "rows": rows}
    return out


# A measured single-wheel curve: C. Pavlov, robomechanics/3d-terramechanics (Robomechanics Lab,
# Carnegie Mellon University), GitHub, commit 55a6e92b35cb7a94530e47311fd7c4767fafb835
# (2023-10-01), MIT licence; the data of the lab's Journal of Terramechanics paper
# (terramechanics/generate_paper_plots.m). Rows: raw-data-processing/all_smooth_data.mat, the
# smooth wheel at slip angle 0, carriage speed 10 mm/s, three runs per slip: each run's mean
# drawbar pull (-avg_Fy), normal load (-avg_Fz) and sinkage (-avg_Z) over its steady segment.
# Wheel and soil: terramechanics/set_rover_params.m and set_soil_params.m ('K10_mini_smooth').
# The exit angle: b0 at slip angle 0 of terramechanics/trench_off_smooth_new.mat (the fit that
# generate_paper_plots.m pairs with these soil values) and of the earlier trench_off_smooth.mat
# (the file set_soil_params.m names).
MEASURED_SINGLE_WHEEL = {
    "source": "C. Pavlov, robomechanics/3d-terramechanics (Robomechanics Lab, Carnegie Mellon "
              "University), GitHub, commit 55a6e92b (2023-10-01), MIT licence: "
              "raw-data-processing/all_smooth_data.mat (smooth wheel, slip angle 0, carriage "
              "10 mm/s, three runs per slip); wheel and soil from terramechanics/"
              "set_rover_params.m and set_soil_params.m ('K10_mini_smooth'); the data of the "
              "lab's Journal of Terramechanics paper (terramechanics/generate_paper_plots.m)",
    "r_m": 0.058, "b_m": 0.05,
    # σ = k zⁿ with k = 8e3 kN/m^(n+2) ("from tested values": plate and wheel sinkage), n =
    # 1.46 (+ 0.01 s in the source, left out here), c = 1.0 kPa, K = 0.021 m (both tuned by the
    # source to its smooth-wheel runs), φ = 29° (the soil's angle of repose, used as φ)
    "soil": {"n": 1.46, "k_c": 0.0, "k_phi": 8.0e6, "c": 1000.0, "phi_deg": 29.0, "K": 0.021},
    "soil_note": "the repository does not name the soil; its density is 1330 kg/m^3",
    "exit_over_entry": -0.476,  # the source's fitted rear (exit) angle: θ_r = b0 θ_f
    "exit_over_entry_earlier": -0.224,  # its earlier fit
    # slip, the three runs' drawbar pull [N], mean normal load [N], mean sinkage [mm]
    "rows": (
        (-0.001, (-1.659, -1.346, -1.025), 24.58, 14.43),
        (0.2312, (0.793, 0.524, 0.792), 24.62, 17.88),
        (0.5000, (0.769, 1.318, 0.813), 25.28, 22.74),
        (0.7502, (0.462, 1.079, 0.908), 24.00, 25.44),
        (0.8997, (1.157, 1.468, 1.907), 25.67, 25.73),
    ),
}


def measured_soil(data=MEASURED_SINGLE_WHEEL):
    """The :class:`~diffmb.contacts.terramechanics.Soil` of ``data["soil"]`` (θ_m: the study's
    c1 = 0.4, c2 = 0.15)."""
    s = data["soil"]
    return tm.Soil(s["n"], s["k_c"], s["k_phi"], s["c"], np.radians(s["phi_deg"]), s["K"])


def _dp_exit(soil, r, b, load, s, exit_over_entry, iters=30, tol=1e-10):
    """Static Wong–Reece drawbar pull and entry angle with the exit angle θ₂ = a θ₁ (a =
    ``exit_over_entry`` ≤ 0), by fixed-point iteration on θ₂ (0 when a = 0)."""
    args = tuple(jnp.asarray(float(x)) for x in (r, b, load, s))
    th2 = 0.0
    for _ in range(iters):
        dp, t1 = _DP(soil, *args, jnp.asarray(th2))
        new = max(float(exit_over_entry) * float(t1), -0.5 * np.pi)
        if abs(new - th2) <= tol:
            break
        th2 = new
    return float(dp), float(t1)


def measured_single_wheel(data=MEASURED_SINGLE_WHEEL, curve_slips=None):
    """The study's static Wong–Reece model beside a measured single-wheel curve (``data``,
    default :data:`MEASURED_SINGLE_WHEEL`): drawbar pull and sinkage at the measured slips and
    loads with the source's wheel and soil, as the study's model stands (exit angle θ₂ = 0) and
    with the source's fitted exit angles θ₂ = b0 θ₁ (``model_exit_angle``, and
    ``model_exit_angle_earlier`` with its earlier fit); their RMS differences from the measured
    means; the zero-DP slips (the measured one: the two measured slips that bracket it and the
    linear interpolation between them; the models' at the mean load). ``curve_slips`` adds both
    model curves on that grid (for the figure)."""
    from scipy.optimize import brentq

    soil = measured_soil(data)
    r, b, a = data["r_m"], data["b_m"], data["exit_over_entry"]
    slip = [row[0] for row in data["rows"]]
    runs = [list(row[1]) for row in data["rows"]]
    load = [row[2] for row in data["rows"]]
    meas = [float(np.mean(x)) for x in runs]
    w_mean = float(np.mean(load))

    def model(exit_over_entry, slips, loads):
        out = [_dp_exit(soil, r, b, w, s, exit_over_entry) for s, w in zip(slips, loads,
                                                                           strict=True)]
        return ([o[0] for o in out],
                [1e3 * float(tm.sinkage_from_angle(o[1], r)) for o in out])

    def crossing(exit_over_entry):
        def f(s):
            return _dp_exit(soil, r, b, w_mean, s, exit_over_entry)[0]

        if f(0.99) <= 0.0:
            return None
        return 0.0 if f(0.0) >= 0.0 else float(brentq(f, 0.0, 0.99, xtol=1e-8))

    k = next(i for i, m in enumerate(meas) if m > 0.0)
    bracket = [slip[k - 1], slip[k]]
    s_int = slip[k - 1] - meas[k - 1] * (slip[k] - slip[k - 1]) / (meas[k] - meas[k - 1])
    out = {"source": data["source"], "r_m": r, "b_m": b, "soil": dict(data["soil"]),
           "soil_note": data["soil_note"], "slip": slip, "measured_runs_N": runs,
           "measured_N": meas, "measured_sd_N": [float(np.std(x, ddof=1)) for x in runs],
           "load_N": load, "measured_sinkage_mm": [row[3] for row in data["rows"]],
           "measured_crossing_bracket": bracket, "measured_crossing_interpolated": s_int}
    for key, aa in (("model", 0.0), ("model_exit_angle", a),
                    ("model_exit_angle_earlier", data["exit_over_entry_earlier"])):
        dp, z = model(aa, slip, load)
        d = {"exit_over_entry": aa, "N": dp, "sinkage_mm": z,
             "rms_difference_N": float(np.sqrt(np.mean((np.asarray(dp) - meas) ** 2))),
             "crossing_slip": crossing(aa)}
        if curve_slips is not None and key != "model_exit_angle_earlier":
            d["curve_slip"] = [float(s) for s in curve_slips]
            d["curve_N"], d["curve_sinkage_mm"] = model(aa, curve_slips,
                                                        [w_mean] * len(curve_slips))
        out[key] = d
    out["model_N"] = out["model"]["N"]
    out["rms_difference_N"] = out["model"]["rms_difference_N"]
    out["model_load_for_crossing_N"] = w_mean
    return out


def _measured_figure(plt, ms, path):
    """Drawbar pull and sinkage against slip: the measured runs and both model curves."""
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, x in enumerate(ms["measured_runs_N"]):
        axs[0].plot([ms["slip"][i]] * len(x), x, "k.", ms=3)
    axs[0].errorbar(ms["slip"], ms["measured_N"], yerr=ms["measured_sd_N"], fmt="ko", ms=5,
                    capsize=3, label="measured (mean ± sd of 3 runs)")
    axs[1].plot(ms["slip"], ms["measured_sinkage_mm"], "ko", ms=5, label="measured")
    for key, style, lab in (("model", "C0-", "Wong–Reece, θ₂ = 0 (the study's)"),
                            ("model_exit_angle", "C1--",
                             f"Wong–Reece, θ₂ = {ms['model_exit_angle']['exit_over_entry']:g} θ₁")):
        m = ms[key]
        axs[0].plot(m["curve_slip"], m["curve_N"], style, label=lab)
        axs[1].plot(m["curve_slip"], m["curve_sinkage_mm"], style, label=lab)
    axs[0].axhline(0.0, color="0.6", lw=0.8)
    axs[0].set_ylabel("drawbar pull [N]")
    axs[1].set_ylabel("sinkage [mm]")
    for ax in axs:
        ax.set_xlabel("slip")
    axs[0].legend(fontsize=7)
    fig.suptitle(f"smooth wheel r = {ms['r_m']} m, b = {ms['b_m']} m, about 25 N "
                 "(Pavlov, robomechanics/3d-terramechanics)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rpy(quat):
    """Roll, pitch, yaw (ns, 3) [rad] of body quaternions (ns, 4)."""
    return np.asarray(rpy_from_quat(jnp.asarray(quat)))


def eq32_B(soil=None, r=None, b=None, load=None, slip=0.27, betas_deg=(0.5, 10.0)):
    """Eq. 32's B [1/rad] for the rover's wheel: the least-squares match of eq. 32 (N = the
    wheel's share of the weight, A = b r θ₁ at its static sinkage) to the lateral shear of
    :func:`~diffmb.contacts.terramechanics.wheel_forces` at slip angles 0.5–10° and the
    rover's straight-drive slip. Returns (B, RMS misfit [N])."""
    from scipy.optimize import least_squares as scipy_lsq

    soil = tm.SOILS[SOIL] if soil is None else soil
    r = rover.WHEEL_RADIUS if r is None else r
    b = rover.WHEEL_WIDTH if b is None else b
    if load is None:
        model, _, _ = rover.load()
        load = float(np.sum(model.body_mass)) * rover.MARS_G / 6
    t1 = tm.static_sinkage(soil, r, b, load, slip)
    betas = np.radians(np.linspace(*betas_deg, 20))
    fy = np.asarray(jax.vmap(lambda tb: tm.wheel_forces(soil, r, b, t1, slip,
                                                         tan_beta=tb).lateral)(np.tan(betas)))
    area = b * r * float(t1)

    def res(lb):
        return np.asarray(tm.lateral_force_eq32(load, betas, soil, area, np.exp(lb[0]))) + fy

    sol = scipy_lsq(res, [np.log(10.0)])
    return float(np.exp(sol.x[0])), float(np.sqrt(np.mean(res(sol.x) ** 2)))


UNILATERAL_DIFFERENCES = [
    "normal force: the compliant law's N = max(lambda W_b(z) + d zdot r b sin(theta1), 0) "
    "comes from the sinkage (Bekker/Wong-Reece loading, elastic unloading ratio 5, damping "
    "4.5e4 Pa s/m, soil memory 200 1/s); the unilateral law's N is the multiplier of a "
    "constraint on the normal acceleration (eqs. 40-42), its sinkage held at the static "
    "sinkage under W/6 and its gap held by Baumgarte's stabilisation",
    "load sharing: the compliant law spreads the load by the soil's stiffness; with rigid "
    "contacts the six wheels on the servo-held rocker-bogie are a statically indeterminate "
    "support, and the forces follow the suspension's servo deflections and the terrain under "
    "each wheel: a wheel can carry nothing for seconds while its neighbours carry it",
    "contact switching: the compliant law is smooth (N -> 0 as the sinkage -> 0); the "
    "unilateral law switches by complementarity, so the normal forces jump when a wheel's "
    "row enters or leaves the active set",
    "tangential forces: both scale with N through the Wong-Reece stresses per unit load, the "
    "unilateral law's at the fixed sinkage, the compliant law's at the current one",
]


def contact_model_comparison(model, forces, horizon, rough_run, arc_run, straight_run,
                             fig7_run=None, out_dir=None, unilateral_10ms=True):
    """The paper's 10 ms step tried on the rough straight drive (against ``rough_run`` at DT),
    eq. 32's lateral force against the lateral shear on the flat arc (against ``arc_run``),
    the linearised eq. 26 stresses on the flat straight drive (against ``straight_run``), and
    the paper's unilateral contact against the compliant law on the Fig. 7 scenario (against
    ``fig7_run``, :func:`unilateral_comparison`; its 10 ms step with ``unilateral_10ms``)."""
    out = {}
    rough = rover_wheel_soil(model, rough_terrain(**ROUGH))
    t0 = time.perf_counter()
    try:
        r10 = run_behaviour(model, forces, rough, "straight", horizon, dt=0.01)
        err = None
    except Exception as e:  # a failed step is the outcome to report
        r10, err = None, f"{type(e).__name__}: {e}"[:400]
    step = {"dt_s": 0.01, "reference_dt_s": DT, "behaviour": "straight on rough ground",
            "horizon_s": horizon, "wall_s": time.perf_counter() - t0, "error": err}
    if r10 is not None:
        ok = bool(np.all(np.isfinite(r10["pos"])))
        win = steady_window(r10["t"])[0]
        n10 = np.sum(np.asarray(r10["eval"].normal), axis=1)
        n5 = np.sum(np.asarray(rough_run["eval"].normal), axis=1)
        step.update({
            "finished": ok,
            "max_pos_dev_m": float(np.max(np.abs(r10["pos"] - rough_run["pos"]))),
            "final_height_dev_m": float(r10["pos"][-1, 2] - rough_run["pos"][-1, 2]),
            "mean_sinkage_m": {"dt_10ms": float(np.mean(np.asarray(r10["eval"].sinkage)[win])),
                               "dt_ref": float(np.mean(np.asarray(rough_run["eval"].sinkage)[win]))},
            "normal_sum_step_rms_N": {"dt_10ms": float(np.sqrt(np.mean(np.diff(n10[win]) ** 2))),
                                      "dt_ref": float(np.sqrt(np.mean(np.diff(n5[win]) ** 2)))},
            "memory_rate_x_dt": MEMORY_RATE * 0.01})
    else:
        step["finished"] = False
    out["paper_step_10ms"] = step
    B, fit_rms = eq32_B()
    flat = rover_wheel_soil(model, rough_terrain(**FLAT))
    w32 = tm.WheelSoil(flat.wheels, flat.terrain, tm.SOILS[SOIL], model=model, n_nodes=N_NODES,
                       v_eps=V_EPS, memory_rate=MEMORY_RATE, lateral="eq32", lateral_B=B)
    a32 = run_behaviour(model, forces, w32, "arc", horizon)
    win = steady_window(a32["t"])[0]

    def summary(r):
        yaw = np.unwrap(_rpy(r["quat"])[:, 2])
        return {"final_position_m": r["pos"][-1].tolist(), "final_yaw_rad": float(yaw[-1]),
                "yaw_rate_deg_s": float(np.degrees(np.mean(np.gradient(yaw, r["t"])[win]))),
                "max_abs_slip_angle_deg": float(np.degrees(np.max(np.abs(
                    np.asarray(r["eval"].slip_angle)[win])))),
                "max_abs_lateral_N": float(np.max(np.abs(np.asarray(r["eval"].lateral)[win])))}

    out["lateral_eq32"] = {
        "behaviour": "arc on flat ground", "B_per_rad": B, "B_fit_rms_N": fit_rms,
        "B_basis": "least-squares match of eq. 32 to the lateral shear (Ishigami et al. 2007) "
                   "of the rover's wheel at its static sinkage, slip 0.27, slip angles 0.5-10 "
                   "deg (the paper gives no B)",
        "eq32": summary(a32), "shear": summary(arc_run),
        "commanded_yaw_rate_deg_s": float(np.degrees(rover.behaviour_params("arc")[1]))}
    lin = tm.WheelSoil(flat.wheels, flat.terrain, tm.SOILS[SOIL], model=model,
                       n_nodes=N_NODES, v_eps=V_EPS, memory_rate=MEMORY_RATE,
                       stresses="linearised", lateral="eq32", lateral_B=B)
    sl = run_behaviour(model, forces, lin, "straight", horizon)

    def steady(r):
        w = steady_window(r["t"])[0]
        ev = r["eval"]
        return {"speed_m_s": float(np.mean(r["vel"][w, 0])),
                "slip": float(np.mean(np.asarray(ev.slip)[w])),
                "sinkage_m": float(np.mean(np.asarray(ev.sinkage)[w])),
                "drive_torque_Nm": float(np.mean(np.abs(r["wheel_torque"][w]))),
                "normal_sum_N": float(np.mean(np.sum(np.asarray(ev.normal)[w], axis=1)))}

    out["linearised_stresses"] = {"behaviour": "straight on flat ground",
                                  "linearised": steady(sl), "wong_reece": steady(straight_run)}
    out["unilateral_contact"] = unilateral_comparison(model, forces, horizon, fig7_run,
                                                      out_dir, paper_step=unilateral_10ms)
    return out


def unilateral_comparison(model, forces, horizon, fig7_run=None, out_dir=None,
                          paper_step=True):
    """The paper's unilateral contact (eqs. 33–42, :func:`rover_unilateral`) against the
    compliant WheelSoil on the Fig. 7 scenario (``FIG7``: the arc on rough ground; ``fig7_run``
    the compliant run of :func:`run_behaviour`, run here if None) over ``horizon``, at
    ``UNILATERAL_DT`` with ``UNILATERAL_SOLVER``, and (``paper_step``) the paper's 10 ms step
    tried on it with the behaviours' ``SOLVER``. Normal forces
    are compared as means over each output interval (the unilateral law's impulses; the
    compliant law's samples by the trapezoidal rule). With ``out_dir``, the six normal forces
    of both laws are drawn to ``fig_unilateral_normal.png`` there."""
    weight = float(np.sum(model.body_mass)) * rover.MARS_G
    rough = rough_terrain(**ROUGH)
    if fig7_run is None:
        fig7_run = run_behaviour(model, forces, rover_wheel_soil(model, rough),
                                 FIG7["behaviour"], horizon)
    el = rover_unilateral(model, rough)
    t0 = time.perf_counter()
    uni = run_unilateral(model, forces, el, FIG7["behaviour"], horizon)
    wall = time.perf_counter() - t0
    comp = np.asarray(fig7_run["eval"].normal)
    comp_n = 0.5 * (comp[1:] + comp[:-1])
    t = uni["t_mid"]
    win, (w0, w1) = steady_window(t)
    after = t >= 0.5  # after the command ramp (and the start on rough ground)

    def law(pos, quat, n):
        yaw = np.unwrap(_rpy(quat)[:, 2])
        ns = np.sum(n, axis=1) / weight
        axle = (n[:, :3] + n[:, 3:]) / 2  # front, middle, rear: the mean of left and right
        jump = np.abs(np.diff(n[after], axis=0))
        return {"final_position_m": pos[-1].tolist(), "final_yaw_rad": float(yaw[-1]),
                "sum_normal_over_weight": {"mean": float(np.mean(ns[win])),
                                           "min": float(np.min(ns[win])),
                                           "max": float(np.max(ns[win]))},
                "mean_normal_N": dict(zip(("front", "middle", "rear"),
                                          np.mean(axle[win], axis=0).tolist(), strict=True)),
                "mean_normal_per_wheel_N": dict(zip(rover.WHEELS,
                                                    np.mean(n[win], axis=0).tolist(),
                                                    strict=True)),
                "time_without_load": dict(zip(rover.WHEELS, np.mean(n[win] <= 1e-9, axis=0)
                                              .tolist(), strict=True)),
                "max_normal_jump_N": float(np.max(jump)),
                "max_normal_jump_wheel": rover.WHEELS[int(np.argmax(np.max(jump, axis=0)))]}

    lu = law(uni["pos"], uni["quat"], uni["normal"])
    lc = law(fig7_run["pos"], fig7_run["quat"], comp_n)
    res = {
        "run": True, "behaviour": "Fig. 7: arc of 2 m radius on rough ground",
        "horizon_s": float(uni["t"][-1]), "dt_s": UNILATERAL_DT, "solver": UNILATERAL_SOLVER,
        "compliant_dt_s": DT, "compliant_solver": SOLVER, "window_s": [w0, w1],
        "interval_s": OUT_DT,
        "status": STATUS[uni["status"]],
        "model": "eqs. 33-42: per wheel a unilateral row on the normal acceleration of its "
                 "contact point, w = J a + Jdot v + 2 sdot/tau + s/tau^2 >= 0, f >= 0, f w = 0; "
                 "the wheel's force per unit f is n + (DP/W_b) x + (F_y/W_b) y at its centre "
                 "and -(T/W_b) a about its axle (Wong-Reece at the held sinkage, the current "
                 "slip and slip angle): a 6 x 6 non-symmetric LCP A f + b >= 0 with "
                 "A = J M^-1 Q (the differential held)",
        "lcp_solver": "exact enumeration of the 2^6 active sets in one batched solve, the "
                      "least violating one taken (diffmb.forces.solve_lcp); a step whose LCP has no "
                      "solution fails the run",
        "stabilisation": f"Baumgarte, critically damped, time constant "
                         f"{UNILATERAL_TIME_CONSTANT} s; rows within {UNILATERAL_MARGIN} m of "
                         "their contact depth are candidates",
        "sinkage_rule": "held at the static Wong-Reece sinkage under W/6 at zero slip "
                        f"({1e3 * float(el.sinkage[0]):.2f} mm)",
        "unilateral": lu, "compliant": lc,
        "final_position_diff_m": float(np.linalg.norm(uni["pos"][-1] - fig7_run["pos"][-1])),
        "final_xy_diff_m": (uni["pos"][-1, :2] - fig7_run["pos"][-1, :2]).tolist(),
        "final_yaw_diff_rad": lu["final_yaw_rad"] - lc["final_yaw_rad"],
        "max_abs_separation_m": float(np.max(np.abs(np.where(
            uni["normal"] > 0, uni["separation"][:-1], 0.0)[after]))),
        "wall_s": wall,
    }
    if paper_step:
        t0 = time.perf_counter()
        u10 = run_unilateral(model, forces, el, FIG7["behaviour"], horizon, dt=0.01,
                             solver=SOLVER)
        wall10 = time.perf_counter() - t0
        ok = u10["status"] == 0 and bool(np.all(np.isfinite(u10["pos"])))
        res["paper_step_10ms"] = {
            "dt_s": 0.01, "solver": SOLVER, "run": True, "finished": ok,
            "status": STATUS[u10["status"]],
            "wall_s": wall10,
            "max_pos_dev_m": float(np.max(np.abs(u10["pos"] - uni["pos"]))) if ok else None,
            "final_yaw_dev_rad": float(np.unwrap(_rpy(u10["quat"])[:, 2])[-1]
                                       - lu["final_yaw_rad"]) if ok else None,
            "sum_normal_over_weight_mean": float(np.mean(np.sum(u10["normal"][win], axis=1))
                                                 / weight) if ok else None}
    else:
        res["paper_step_10ms"] = {"dt_s": 0.01, "run": False,
                                  "why_not": "--quick: it would compile the unilateral rover "
                                             "once more; the full study runs it"}
    unloaded = [w for w, x in lu["time_without_load"].items() if x > 0]
    res["differences"] = UNILATERAL_DIFFERENCES + [
        f"measured here: final positions {res['final_position_diff_m']:.4f} m apart "
        f"({uni['pos'][-1, 2] - fig7_run['pos'][-1, 2]:+.4f} m in height), yaw "
        f"{res['final_yaw_diff_rad']:+.4f} rad; the sum of the support forces spans "
        f"{lu['sum_normal_over_weight']['min']:.3f}-{lu['sum_normal_over_weight']['max']:.3f} "
        f"m g against {lc['sum_normal_over_weight']['min']:.3f}-"
        f"{lc['sum_normal_over_weight']['max']:.3f} m g; wheels without load in the window: "
        + (", ".join(f"{w} ({lu['time_without_load'][w]:.0%} of it)" for w in unloaded)
           or "none") + f" (the compliant law's smallest mean load "
        f"{min(lc['mean_normal_per_wheel_N'].values()):.1f} N)"]
    if out_dir is not None:
        import matplotlib.pyplot as plt

        fig, axs = plt.subplots(2, 3, figsize=(12, 5.5), sharex=True, sharey=True)
        for k, (ax, w) in enumerate(zip(axs.flat, rover.WHEELS, strict=True)):
            ax.plot(t, comp_n[:, k], "k-", lw=1, label="compliant (WheelSoil)")
            ax.plot(t, uni["normal"][:, k], "C3-", lw=1, label="unilateral (eqs. 33-42)")
            ax.set_title(f"wheel {w}", fontsize=9)
            ax.set_xlabel("t [s]")
        for ax in axs[:, 0]:
            ax.set_ylabel("normal force [N]")
        axs[0, 0].set_ylim(0, 2.5 * weight / 6)
        axs[0, 0].legend(fontsize=7)
        fig.suptitle("Fig. 7 scenario: normal forces of the compliant and the unilateral law")
        fig.tight_layout()
        fig.savefig(pathlib.Path(out_dir) / "fig_unilateral_normal.png", dpi=100)
        plt.close(fig)
        res["figure"] = "fig_unilateral_normal.png"
    return res


FIG7 = {"behaviour": "arc", "terrain": "rough", "speed_m_s": 0.1, "radius_m": 2.0}
# The paper's Fig. 7: a curved path on rough terrain at about 0.1 m/s; it gives no radius (the
# arc behaviour's 2 m to the left) and no terrain statistics (ROUGH: 2 cm bumps, 0.6 m).


def fig7_statements(run, weight, dt=DT):
    """The paper's quantitative statements about Figs. 9–14 (section 4) beside the Fig. 7 run
    ``run`` (:func:`run_behaviour` of the arc on rough ground): a list of
    ``{statement, paper, ours, agree, why_not}``."""
    t = run["t"]
    win = steady_window(t)[0]
    after = t >= 0.5  # after the command ramp
    ws = np.degrees(run["wheel_speed"])
    left, right = ws[:, :3], ws[:, 3:]
    ev = run["eval"]
    nsum = np.sum(np.asarray(ev.normal), axis=1)
    z = np.mean(np.asarray(ev.sinkage)[win], axis=0)
    front, rear = float((z[0] + z[3]) / 2), float((z[2] + z[5]) / 2)
    nw = np.mean(np.asarray(ev.normal)[win], axis=0)
    nf, nr = float((nw[0] + nw[3]) / 2), float((nw[2] + nw[5]) / 2)
    rpy = np.degrees(_rpy(run["quat"]))
    rng = lambda x: float(np.max(x) - np.min(x))  # noqa: E731
    wrng = lambda x: float(np.max(np.ptp(x, axis=0)))  # noqa: E731  (largest one-wheel range)
    steer = np.degrees(run["steer_angle"][after])
    speed = float(np.mean(np.linalg.norm(run["vel"][win, :2], axis=1)))
    rows = [
        {"statement": "Figs. 9-14 span 5.0 s in 500 steps of 10 ms",
         "paper": {"horizon_s": 5.0, "dt_s": 0.01},
         "ours": {"horizon_s": float(t[-1]), "dt_s": dt},
         "agree": bool(abs(t[-1] - 5.0) < 1e-9 and dt == 0.01),
         "why_not": "the behaviours use 5 ms (contact_model_comparison.paper_step_10ms: the "
                    "10 ms step tried); --quick runs 2 s"},
        {"statement": "Fig. 11: left wheel speeds from -2.0 to 2.1 deg/s",
         "paper": [-2.0, 2.1], "ours": [float(np.min(left)), float(np.max(left))],
         "agree": bool(np.min(left) >= -2.0 - 0.5 and np.max(left) <= 2.1 + 0.5),
         "why_not": "0.1 m/s on a wheel of radius 0.15 m is 38 deg/s; +-2 deg/s would need a "
                    "2.9 m wheel, so the printed axis is inconsistent with the stated speed"},
        {"statement": "Fig. 11: right wheel speeds from -1.2 to 2.1 deg/s",
         "paper": [-1.2, 2.1], "ours": [float(np.min(right)), float(np.max(right))],
         "agree": bool(np.min(right) >= -1.2 - 0.5 and np.max(right) <= 2.1 + 0.5),
         "why_not": "as for the left wheels"},
        {"statement": "Fig. 11: the right wheel speeds vary more than the left (steering)",
         "paper": {"left_range": 4.1, "right_range": 3.3},  # the printed end points
         "ours": {"left_range_after_ramp": wrng(left[after]),
                  "right_range_after_ramp": wrng(right[after])},
         "agree": bool(wrng(right[after]) > wrng(left[after])),
         "why_not": "the paper's own ranges (4.1 left, 3.3 right deg/s) contradict its "
                    "sentence; ours turn left, so the right (outer) wheels are faster"},
        {"statement": "Fig. 12: the sum of the wheels' support forces is below the rover's "
                      "Mars weight",
         "paper": "sum N < m g", "ours": {"mean_sum_N_over_weight": float(np.mean(nsum[win]) / weight),
                                          "max_sum_N_over_weight": float(np.max(nsum[win]) / weight)},
         "agree": bool(np.max(nsum[win]) < weight),
         "why_not": "with the body's height steady the vertical balance makes the mean sum of "
                    "the support forces the weight; on rough ground it varies about it"},
        {"statement": "Fig. 10: the steering angles of both sides change little",
         "paper": "small (taken as a range below 1 deg)",
         "ours": {"largest_one_wheel_range_after_ramp_deg": wrng(steer)},
         "agree": bool(wrng(steer) < 1.0),
         "why_not": "the steering servos hold the commanded Ackermann angles"},
        {"statement": "Figs. 13-14: the rover advances at about 0.1 m/s",
         "paper": 0.1, "ours": speed, "agree": bool(abs(speed - 0.1) <= 0.02),
         "why_not": "the wheels slip about 27 % on this soil (traction_vs_K), their velocity "
                    "servos lag their command, and the bumps slow the rover further (against "
                    "straight_speed_m_s on flat ground)"},
        {"statement": "Figs. 13-14: the yaw angle changes most of the attitude angles",
         "paper": "yaw varies most",
         "ours": {"roll_range_deg": rng(rpy[:, 0]), "pitch_range_deg": rng(rpy[:, 1]),
                  "yaw_range_deg": rng(rpy[:, 2])},
         "agree": bool(rng(rpy[:, 2]) > max(rng(rpy[:, 0]), rng(rpy[:, 1]))),
         "why_not": "the turn's yaw is small over this horizon beside the bumps' roll and pitch"},
        {"statement": "Figs. 13-14: the front wheels sink more than the rear",
         "paper": "front > rear", "ours": {"front_sinkage_m": front, "rear_sinkage_m": rear,
                                           "front_normal_N": nf, "rear_normal_N": nr},
         "agree": bool(front > rear),
         "why_not": "the sinkage follows the normal load, which rover.xml's rocker-bogie "
                    "layout puts more on the rear wheels (each wheel's soil memory is its own: "
                    "no wheel runs in another's rut)"},
    ]
    for r in rows:
        if r["agree"]:
            r["why_not"] = None
    return rows


def lagrange_vs_aba(model, n=20, seed=0):
    """max |a_lagrange − a_aba| over ``n`` random states (SI units)."""
    from ..dynamics.api import forward_dynamics

    rng = np.random.default_rng(seed)
    aba = jax.jit(lambda q, v, t: forward_dynamics(model, q, v, t, method="aba"))
    lag = jax.jit(lambda q, v, t: forward_dynamics(model, q, v, t, method="lagrange"))
    worst = 0.0
    for _ in range(n):
        q = np.array(model.qpos0)
        q[3:7] = rng.normal(size=4)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = 0.4 * rng.normal(size=model.nq - 7)
        v, tau = rng.normal(size=model.nv), 10 * rng.normal(size=model.nv)
        worst = max(worst, float(np.max(np.abs(np.asarray(lag(q, v, tau) - aba(q, v, tau))))))
    return worst


# ---- single-wheel identification ----------------------------------------------------------


def _soil_from(p, base):
    return base.replace(**{k: p[k] for k in p})


def _wheel_model(soil, r, b, load, slips):
    def one(s):
        t1 = tm.static_sinkage(soil, r, b, load, s)
        F = tm.wheel_forces(soil, r, b, t1, s)
        return tm.sinkage_from_angle(t1, r), F.drawbar_pull, F.torque

    return jax.vmap(one)(slips)


def synthetic_wheel_records(soil=None, r=0.09, load=64.68, widths=ID_WIDTHS, seed=0):
    """Noisy static single-wheel records (slip 0.05 … 0.9) for each width: a list of dicts
    with ``b``, ``slip``, ``sinkage``, ``drawbar_pull``, ``torque`` (noise ``ID_NOISE``)."""
    soil = tm.SOILS[SOIL] if soil is None else soil
    rng = np.random.default_rng(seed)
    slips = np.linspace(0.05, 0.9, 18)
    out = []
    for b in widths:
        z, dp, T = (np.asarray(x) for x in _wheel_model(soil, r, b, load, jnp.asarray(slips)))
        out.append({"b": b, "slip": slips,
                    "sinkage": z + ID_NOISE["sinkage"] * rng.normal(size=z.shape),
                    "drawbar_pull": dp + ID_NOISE["drawbar_pull"] * rng.normal(size=z.shape),
                    "torque": T + ID_NOISE["torque"] * rng.normal(size=z.shape)})
    return out


def _record_residual(wheel_model, base, r, load):
    """The weighted residuals (by ``ID_NOISE``) of sinkage, drawbar pull and torque of
    single-wheel records against ``wheel_model`` with the soil ``base`` updated by p."""

    def residual(p, data):
        soil = _soil_from(p, base)
        out = []
        for rec in data:
            z, dp, T = wheel_model(soil, r, rec["b"], load, rec["slip"])
            out += [(z - rec["sinkage"]) / ID_NOISE["sinkage"],
                    (dp - rec["drawbar_pull"]) / ID_NOISE["drawbar_pull"],
                    (T - rec["torque"]) / ID_NOISE["torque"]]
        return jnp.concatenate(out)

    return residual


def single_wheel_fit(records, names=ID_PARAMS, guess=None, r=0.09, load=64.68, base=None,
                     checkpoint=None):
    """Soil parameters ``names`` fitted to single-wheel records by weighted least squares on
    sinkage, drawbar pull and torque against slip (the static model at each sample's slip);
    returns diffmb's :class:`~diffmb.optim.lsq.LSQResult` (estimates, std, unidentifiable)."""
    base = tm.SOILS[SOIL] if base is None else base
    guess = {k: (ID_GUESS[k] if guess is None else guess[k]) for k in names}
    data = [{k: jnp.asarray(v) for k, v in rec.items()} for rec in records]

    residual = _record_residual(_wheel_model, base, r, load)
    return least_squares(residual, guess, data, positive=names, max_steps=100,
                         checkpoint=checkpoint)


# ---- identification across models ---------------------------------------------------------

XM_PARAMS = ("n", "k_c", "k_phi", "c", "phi", "K")
XM_GUESS = dict(ID_GUESS, n=0.8)
XM_RHO = 0.8  # lag-one correlation of the AR(1) record noise along the slip sweep
XM_HELD_OUT_WIDTH = 0.135  # m, a width between ID_WIDTHS, not in the fitted records
XM_ACCEPT = {"max_rel_std_identifiable": 0.25, "max_rel_error": 0.2, "max_abs_z": 3.0,
             "max_rms_weighted": 2.0}
# Acceptance: a parameter counts as identifiable when the rank test does not flag it and its
# standard error (inflated for the coloured noise) is at most 25 % of its estimate; the fit
# is accepted when every identifiable parameter lies within 20 % and within 3 such standard
# errors of the truth, and the weighted RMS residual is at most 2 (the model reproduces the
# records to twice the noise).


def _linear_wheel_model(soil, r, b, load, slips):
    def one(s):
        t1 = tm.static_sinkage(soil, r, b, load, s, model="linearised")
        F = tm.linear_wheel_forces(soil, r, b, t1, s)
        return tm.sinkage_from_angle(t1, r), F.drawbar_pull, F.torque

    return jax.vmap(one)(slips)


_XM_MODELS = {"wong_reece": _wheel_model, "linearised": _linear_wheel_model}


def ar1_noise(rng, n, rho):
    """n samples of a stationary AR(1) sequence with unit variance and lag-one correlation
    ``rho``: e_0 ~ N(0, 1), e_i = rho e_(i-1) + sqrt(1 - rho²) w_i."""
    w = rng.normal(size=n)
    e = np.empty(n)
    e[0] = w[0]
    for i in range(1, n):
        e[i] = rho * e[i - 1] + np.sqrt(1.0 - rho * rho) * w[i]
    return e


def cross_model_records(soil=None, model="wong_reece", r=0.09, load=64.68, widths=ID_WIDTHS,
                        rho=XM_RHO, noise_scale=1.0, seed=0):
    """Static single-wheel records (slip 0.05 … 0.9, each width) from ``model`` with AR(1)
    noise of standard deviation ``noise_scale`` × ``ID_NOISE`` along the slip sweep."""
    soil = tm.SOILS[SOIL] if soil is None else soil
    rng = np.random.default_rng(seed)
    slips = np.linspace(0.05, 0.9, 18)
    out = []
    for b in widths:
        cols = (np.asarray(x) for x in _XM_MODELS[model](soil, r, b, load, jnp.asarray(slips)))
        rec = {"b": b, "slip": slips}
        for k, x in zip(("sinkage", "drawbar_pull", "torque"), cols, strict=True):
            rec[k] = x + noise_scale * ID_NOISE[k] * ar1_noise(rng, len(slips), rho)
        out.append(rec)
    return out


def cross_model_fit(records, fit_model="linearised", names=XM_PARAMS, guess=None, rho=XM_RHO,
                    r=0.09, load=64.68, soil=None):
    """Fit ``names`` of the soil with ``fit_model`` to ``records`` (weighted by ``ID_NOISE``);
    returns the ``identified_cross_model`` dict against the truth ``soil`` (``std`` None where
    the data do not determine the parameter at all).

    Standard errors are the least-squares ones (s² from the residuals, so model error widens
    them) times sqrt((1 + rho)/(1 − rho)), the long-run factor of AR(1) noise. The determined
    combinations are the right singular vectors of the log-parameter Jacobian J diag(p):
    ``sv_rel`` σ_k/σ_max, the components above 0.1."""
    soil = tm.SOILS[SOIL] if soil is None else soil
    guess = {k: (XM_GUESS[k] if guess is None else guess[k]) for k in names}
    data = [{k: jnp.asarray(v) for k, v in rec.items()} for rec in records]
    f = _XM_MODELS[fit_model]
    residual = _record_residual(f, soil, r, load)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = least_squares(residual, guess, data, positive=names, max_steps=200)
    infl = float(np.sqrt((1.0 + rho) / (1.0 - rho)))
    p = np.array([res.params[n] for n in res.names])
    _, sv, vt = np.linalg.svd(res.jac * p[None, :], full_matrices=False)
    combos = [{"sv_rel": float(s / sv[0]),
               "log_combination": {n: round(float(c), 3) for n, c in
                                   zip(res.names, vt[k] * np.sign(vt[k][np.argmax(np.abs(vt[k]))]),
                                       strict=True) if abs(c) > 0.1}}
              for k, s in enumerate(sv)]
    acc = XM_ACCEPT
    params = {}
    for n in res.names:
        t, e, sd = float(getattr(soil, n)), res.params[n], res.std[n] * infl
        ident = n not in res.unidentifiable and np.isfinite(sd) and sd <= \
            acc["max_rel_std_identifiable"] * abs(e)
        params[n] = {"true": t, "estimate": e, "std": float(sd) if np.isfinite(sd) else None,
                     "rel_error": (e - t) / t,
                     "z": (e - t) / sd if np.isfinite(sd) and sd > 0 else None,
                     "identifiable": bool(ident)}
    rms = float(res.residual_norm / np.sqrt(res.jac.shape[0]))
    ok = rms <= acc["max_rms_weighted"] and all(
        abs(v["z"]) <= acc["max_abs_z"] and abs(v["rel_error"]) <= acc["max_rel_error"]
        for v in params.values() if v["identifiable"])
    fitted = _soil_from(res.params, soil)
    slips = jnp.asarray(records[0]["slip"])
    held = {}
    for k, x, y in zip(("sinkage", "drawbar_pull", "torque"),
                       _XM_MODELS["wong_reece"](soil, r, XM_HELD_OUT_WIDTH, load, slips),
                       f(fitted, r, XM_HELD_OUT_WIDTH, load, slips), strict=True):
        held[k] = float(np.sqrt(np.mean((np.asarray(y) - np.asarray(x)) ** 2)) / ID_NOISE[k])
    return {"fit_model": fit_model, "params": params, "combinations": combos,
            "rank_test_flagged": list(res.unidentifiable), "noise": ID_NOISE,
            "noise_ar1_rho": rho, "std_inflation": infl, "rms_weighted": rms,
            "acceptance": acc, "accepted": bool(ok), "converged": bool(res.success),
            "held_out_width_m": XM_HELD_OUT_WIDTH,
            "held_out_rms_over_noise": held}


# ---- the shipped single-wheel CSV (the dynamic rig at constant-slip segments) --------------

CSV_SLIPS = (0.1, 0.2, 0.3, 0.45, 0.6, 0.75)
CSV_HEADER = ("single-wheel rig on the regolith simulant (r = 0.09 m, b = 0.11 m, W = 64.68 N): "
              "constant-slip segments of 2 s, the last 0.5 s of each sampled at 20 Hz, noise "
              "sinkage 0.2 mm, DP 0.3 N, torque 0.03 N m (synthetic, diffmb)")


def record_wheel_csv(path, seed=0, t1=2.0):
    """Run the dynamic rig at ``CSV_SLIPS`` and write the CSV (columns t, slip, sinkage,
    drawbar_pull, torque): each segment's last 0.5 s at 20 Hz as the wheel–soil element saw
    it, with noise ``ID_NOISE``."""
    rng = np.random.default_rng(seed)
    rig = rover.single_wheel_rig()
    el = tm.WheelSoil([tm.Wheel("wheel", 0.09, 0.11, axis=(0.0, 1.0, 0.0), name="wheel")],
                      Plane(), tm.SOILS[SOIL], model=rig)
    t_all, cols = [], {"slip": [], "sinkage": [], "drawbar_pull": [], "torque": []}
    for k, s in enumerate(CSV_SLIPS):
        tr = rover.simulate_single_wheel(s, t1=t1, average=0.5)["traj"]
        ts = np.asarray(tr.ts)
        keep = np.arange(0, len(ts), max(1, int(round(0.05 / (ts[1] - ts[0])))))
        mem = tr.aux[0][0]
        ev = jax.vmap(lambda q, v, m: el.evaluate(rig, q, v, m))(tr.q, tr.v, mem)
        t_all.append(k * t1 + ts[keep])
        cols["slip"].append(np.full(len(keep), s))
        for name, key in (("sinkage", "sinkage"), ("drawbar_pull", "drawbar_pull"),
                          ("torque", "torque")):
            x = np.asarray(getattr(ev, key))[keep, 0]
            cols[name].append(x + ID_NOISE[name] * rng.normal(size=x.shape))
    write_csv(path, np.concatenate(t_all), {k: np.concatenate(v) for k, v in cols.items()},
              comment=CSV_HEADER)


def identify(data_csv, out_dir, *, checkpoint=None) -> dict:
    """Fit k_phi, c, phi and K of the soil (k_c held at the regolith simulant's: one wheel width
    cannot separate k_c from k_phi) to a single-wheel CSV; writes ``results.json`` and
    ``report.md`` in ``out_dir``."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cols = ("slip", "sinkage", "drawbar_pull", "torque")
    t, data = read_csv(data_csv, cols, allowed=cols,
                       expected="slip, sinkage [m], drawbar_pull [N], torque [N m]")
    if 3 * len(t) <= len(CSV_PARAMS):
        raise ValueError(f"{data_csv}: {len(t)} rows cannot identify {len(CSV_PARAMS)} "
                         "soil parameters")
    s = np.asarray(data["slip"])
    if np.any((s < 0) | (s >= 1)):
        raise ValueError(f"{data_csv}: column 'slip' must lie in [0, 1) (driving)")
    rec = [{"b": 0.11, "slip": s, "sinkage": data["sinkage"],
            "drawbar_pull": data["drawbar_pull"], "torque": data["torque"]}]
    res = single_wheel_fit(rec, CSV_PARAMS, checkpoint=checkpoint)
    true = tm.SOILS[SOIL]
    ident = {n: {"estimate": float(res.params[n]), "std": float(res.std[n]),
                 "true": float(getattr(true, n))} for n in CSV_PARAMS}
    out = {"status": "complete", "identified": ident, "success": bool(res.success),
           "message": res.message, "held": {"k_c": float(true.k_c), "n": float(true.n)},
           "unidentifiable": list(res.unidentifiable)}
    (out_dir / "results.json").write_text(json.dumps(out, indent=2))
    lines = ["# Soil identification from a single-wheel record", "",
             f"Data: `{pathlib.Path(data_csv).name}`, {len(s)} rows. k_c held at "
             f"{float(true.k_c):g} (one width).", "",
             "| parameter | estimate | std | true (synthetic) |", "| --- | --- | --- | --- |"]
    lines += [f"| {n} | {v['estimate']:.6g} | {v['std']:.3g} | {v['true']:.6g} |"
              for n, v in ident.items()]
    (out_dir / "report.md").write_text("\n".join(lines) + "\n")
    return out


# ---- the traverse fit ------------------------------------------------------------------------


def traverse_fit(model, forces, horizon, dt=DT, seed=1, solver=None):
    """k_phi and phi fitted to a rover traverse (straight drive on flat regolith): the body's
    forward speed and the six wheel torques at 10 Hz, noise 2 mm/s and 0.5 N m; the record and
    the fit both simulated with ``solver`` (:func:`_solver`) at ``dt``."""
    base = tm.SOILS[SOIL]
    ws = rover_wheel_soil(model, Plane(name="ground"), base)
    q0 = _settled_q0(model)
    act = next(f for f in forces if type(f).__name__ == "Actuators")
    ts = np.round(np.arange(1, int(round(horizon / 0.1)) + 1) * 0.1, 10)

    def observe(p):
        w = eqx.tree_at(lambda e: (e.soil.k_phi, e.soil.phi), ws,
                        (jnp.broadcast_to(p["k_phi"], (6,)), jnp.broadcast_to(p["phi"], (6,))))
        tr = simulate(model, q0, None, t1=horizon, dt=dt, solver=_solver(solver),
                      forces=forces + (w,), control=rover.behaviour_control("straight"), saveat=ts,
                      adjoint="direct")
        ctrl = jax.vmap(lambda t: rover.behaviour_command("straight", t))(jnp.asarray(ts))
        torque = jax.vmap(act.actuator_force)(tr.q, tr.v, ctrl)[:, 10:16]
        return tr.v[:, 0], torque

    true = {"k_phi": base.k_phi, "phi": base.phi}
    vx, T = observe(true)
    rng = np.random.default_rng(seed)
    data = (vx + 2e-3 * rng.normal(size=vx.shape), T + 0.5 * rng.normal(size=T.shape))

    def residual(p, data):
        v, tq = observe(p)
        return jnp.concatenate([(v - data[0]) / 2e-3, ((tq - data[1]) / 0.5).ravel()])

    res = least_squares(residual, {"k_phi": 6.0e5, "phi": 0.55}, data,
                        positive=("k_phi", "phi"), max_steps=30)
    return {n: {"true": float(true[n]), "estimate": float(res.params[n]),
                "std": float(res.std[n])} for n in ("k_phi", "phi")}, res


# ---- speed -------------------------------------------------------------------------------------


def _realtime(horizon, reps, dt=DT, solver=None):
    """The batch-1 timing of :func:`speed` in this process: the ``horizon`` s rough traverse
    with the behaviours' method, compiled, then ``reps`` runs."""
    model, forces, _ = rover.load()
    ws = rover_wheel_soil(model, rough_terrain(**ROUGH))
    q0, ctl = _settled_q0(model), rover.behaviour_control("straight")

    def run(kphi):
        w = eqx.tree_at(lambda e: e.soil.k_phi, ws, jnp.broadcast_to(kphi, (6,)))
        tr = simulate(model, q0, None, t1=horizon, dt=dt, solver=_solver(solver),
                      forces=forces + (w,), control=ctl, saveat=[horizon], throw=False)
        return tr.q[-1], tr.status

    one = jax.jit(run)
    t0 = time.perf_counter()
    jax.block_until_ready(one(jnp.asarray(8.14e5)))
    compile_s = time.perf_counter() - t0
    walls = []
    for k in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(one(jnp.asarray(8.0e5 + k)))
        walls.append(time.perf_counter() - t0)
    cores = available_cpus()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # the machine's, 1 min
    return {"realtime_factor": horizon / min(walls), "wall_s": min(walls),
            "compile_s": compile_s, "realtime_walls_s": walls, "realtime_cores": cores,
            "realtime_load_average": load}


def _realtime_one_core(horizon, reps):
    """:func:`_realtime` in a child process bound to one core before JAX starts (XLA then sizes
    its thread pools to that core; binding the threads of a running process instead leaves
    XLA handing work between threads that share the core, about 2x slower here), without the
    persistent compilation cache (the compile time is always a cold compile, as in
    ``diffmb bench``)."""
    import os
    import subprocess
    import sys

    code = ("import json, os\n"
            "if hasattr(os, 'sched_setaffinity'):\n"
            "    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "from diffmb.studies.rover import _realtime\n"
            f"print(json.dumps(_realtime({float(horizon)!r}, {int(reps)!r})))\n")
    env = {**os.environ, "DIFFMB_COMPILATION_CACHE": "0",
           "JAX_ENABLE_COMPILATION_CACHE": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"rover speed: the one-core child process failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def speed(model, forces, horizon=HORIZON, batch=256, batch_horizon=1.0, dt=DT, solver=None,
          reps=REALTIME_REPS):
    """Realtime factor of the ``horizon`` s rough traverse at batch 1 after compilation, with
    the behaviours' method and step, in a child process bound to one core (best of ``reps``
    runs; its wall times, its cold compile time), and batch_rovers_per_s: ``batch`` rovers on
    ``batch`` soils (k_phi drawn in [5e5, 1.2e6]) over ``batch_horizon`` s in one vmapped call
    (this process, all its cores). The study's ``realtime_factor`` and ``diffmb bench --only
    rover`` are both this function with the defaults."""
    child = dt == DT and solver is None
    res = _realtime_one_core(horizon, reps) if child else _realtime(horizon, reps, dt, solver)
    res.update(realtime_reps=int(reps), realtime_horizon_s=float(horizon), compile_cold=child)
    rough = rough_terrain(**ROUGH)
    ws = rover_wheel_soil(model, rough)
    q0 = _settled_q0(model)
    ctl = rover.behaviour_control("straight")

    def run(kphi, t1):
        w = eqx.tree_at(lambda e: e.soil.k_phi, ws, jnp.broadcast_to(kphi, (6,)))
        tr = simulate(model, q0, None, t1=t1, dt=dt, solver=_solver(solver),
                      forces=forces + (w,), control=ctl, saveat=[t1], throw=False)
        return tr.q[-1], tr.status

    many = jax.jit(jax.vmap(lambda k: run(k, batch_horizon)))
    kphis = jnp.asarray(np.random.default_rng(0).uniform(5e5, 1.2e6, batch))
    jax.block_until_ready(many(kphis))
    t0 = time.perf_counter()
    qs, st = many(kphis * 1.001)
    jax.block_until_ready(qs)
    bwall = time.perf_counter() - t0
    return {**res, "batch": int(batch), "batch_rovers_per_s": batch / bwall, "batch_wall_s": bwall,
            "batch_all_ok": bool(np.all(np.asarray(st) == 0)), "horizon_s": horizon,
            "batch_horizon_s": batch_horizon}


# ---- the study ---------------------------------------------------------------------------------


def reproduce(out_dir, quick: bool = False) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    horizon = 2.0 if quick else HORIZON
    res: dict = {"quick": bool(quick), "soil": SOIL, "soil_source": tm.SOIL_SOURCES[SOIL],
                 "method": "ABA", "solver": SOLVER, "jacobian_every": JACOBIAN_EVERY,
                 "dt_s": DT, "output_dt_s": OUT_DT}
    figs = []
    timings = {}
    clock = [time.perf_counter(), time.process_time()]

    def lap(name):  # wall and CPU (this process's) time of the section that ends here
        now = [time.perf_counter(), time.process_time()]
        timings[name + "_s"] = now[0] - clock[0]
        timings[name + "_cpu_s"] = now[1] - clock[1]
        clock[:] = now

    # 1. single wheel: full and linearised models against slip
    table = tm.single_wheel_table()
    res["single_wheel"] = table
    fig, axs = plt.subplots(1, 3, figsize=(12, 3.6))
    for key, style in (("wong_reece", "k-o"), ("linearised", "C1--s")):
        rows = table[key]
        s = [r["slip"] for r in rows]
        axs[0].plot(s, [1e3 * r["sinkage_m"] for r in rows], style, label=key, ms=4)
        axs[1].plot(s, [r["drawbar_pull_N"] for r in rows], style, ms=4)
        axs[2].plot(s, [r["torque_Nm"] for r in rows], style, ms=4)
    axs[1].plot(s, [r["gross_traction_N"] for r in table["linearised"]], "C2:", label="eq. 31 T/r")
    for ax, lab in zip(axs, ("sinkage [mm]", "drawbar pull [N]", "torque [N m]"), strict=True):
        ax.set_xlabel("slip")
        ax.set_ylabel(lab)
    axs[0].legend()
    axs[1].legend()
    fig.tight_layout()
    fig.savefig(out_dir / "fig_single_wheel.png", dpi=110)
    plt.close(fig)
    figs.append(("fig_single_wheel.png", "single wheel on the regolith simulant"))

    # dynamic rig against the static curve
    rig = {}
    for s in (0.2, 0.6):
        d = rover.simulate_single_wheel(s, t1=2.0 if quick else 3.0)
        stat = next(r for r in table["wong_reece"] if abs(r["slip"] - s) < 1e-9)
        rig[str(s)] = {k: float(d[k]) for k in ("sinkage_m", "drawbar_pull_N", "torque_Nm")}
        rig[str(s)]["static"] = {k: stat[k] for k in ("sinkage_m", "drawbar_pull_N", "torque_Nm")}
    res["single_wheel_rig"] = rig
    lap("single_wheel")

    # 2. the rover: behaviours on flat ground and one on rough ground
    model, forces, _ = rover.load()
    res["lagrange_vs_aba_max_abs"] = lagrange_vs_aba(model, 20)
    flat = rover_wheel_soil(model, rough_terrain(**FLAT))
    runs = {}
    for name in rover.BEHAVIOURS:
        runs[name] = run_behaviour(model, forces, flat, name, horizon)
    rough = rover_wheel_soil(model, rough_terrain(**ROUGH))
    runs["rough_straight"] = run_behaviour(model, forces, rough, "straight", horizon)
    lap("behaviours")
    res["differential_constraint_max_err"] = float(max(np.max(np.abs(r["diff"]))
                                                       for r in runs.values()))
    st = runs["straight"]
    last, res["straight_window_s"] = steady_window(st["t"])
    weight = float(np.sum(model.body_mass)) * rover.MARS_G
    n_sum = np.asarray(jnp.sum(st["eval"].normal, axis=1))
    res["normal_force_over_weight"] = float(np.mean(n_sum[last]) / weight)
    res["straight_speed_m_s"] = float(np.mean(st["vel"][last, 0]))
    res["straight_slip_mean"] = float(np.mean(np.asarray(st["eval"].slip)[last]))
    res["straight_sinkage_m"] = float(np.mean(np.asarray(st["eval"].sinkage)[last]))
    res["wheel_speed_deg_s"] = float(np.degrees(np.mean(np.abs(st["wheel_speed"][last]))))
    res["behaviours"] = {
        n: {"final_position_m": r["pos"][-1].tolist(),
            "final_yaw_rad": float(_rpy(r["quat"])[-1, 2]),
            "max_abs_roll_pitch_rad": float(np.max(np.abs(_rpy(r["quat"])[:, :2])))}
        for n, r in runs.items()}
    res["turn_in_place"] = turn_rate(runs["turn_in_place"],
                                     float(rover.behaviour_params("turn_in_place")[1]))
    lw = runs["lift_wheel"]
    n_lift = np.mean(np.asarray(lw["eval"].normal)[steady_window(lw["t"])[0]], axis=0)
    res["lift_wheel_normal_N"] = dict(zip(rover.WHEELS, n_lift.tolist(), strict=True))
    res["lift_wheel_off_ground"] = [w for w, n in zip(rover.WHEELS, n_lift, strict=True)
                                     if n < 1.0]
    res["wheel_inertia_effect"], _, phys = wheel_inertia_effect(model, forces, flat, horizon, st)
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
    for r, lab in ((st, "paper [2, 2, 2] kg m²"), (phys, "thin shell (m r² axial)")):
        axs[0].plot(r["t"], r["vel"][:, 0], label=lab)
        axs[1].plot(r["t"], np.max(np.abs(r["wheel_torque"]), axis=1), label=lab)
    axs[0].set_ylabel("forward speed [m/s]")
    axs[1].set_ylabel("largest wheel drive torque [N m]")
    for ax in axs:
        ax.set_xlabel("t [s]")
    axs[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "fig_wheel_inertia.png", dpi=110)
    plt.close(fig)
    figs.append(("fig_wheel_inertia.png", "straight drive: the paper's wheel inertia and a "
                                          "thin shell's"))
    lap("wheel_inertia")
    res["traction_vs_K"] = traction_vs_K()
    ms = measured_single_wheel(curve_slips=np.round(np.arange(19) * 0.05, 10))
    res["traction_vs_K"]["measured_single_wheel"] = ms
    _measured_figure(plt, ms, out_dir / "fig_measured_single_wheel.png")
    figs.append(("fig_measured_single_wheel.png", "a measured single-wheel curve against the "
                                                  "static Wong–Reece model"))
    lap("traction_vs_K")
    runs["fig7_rough_arc"] = run_behaviour(model, forces, rough, FIG7["behaviour"], horizon)
    res["contact_model_comparison"] = contact_model_comparison(
        model, forces, horizon, runs["rough_straight"], runs["arc"], st,
        fig7_run=runs["fig7_rough_arc"], out_dir=out_dir, unilateral_10ms=not quick)
    uc = res["contact_model_comparison"]["unilateral_contact"]
    figs.append((uc["figure"], "Fig. 7 scenario: normal forces, compliant and unilateral "
                               "contact"))
    lap("contact_model_comparison")
    # step check: the straight drive at half the step
    half = run_behaviour(model, forces, flat, "straight", min(horizon, 2.0), dt=DT / 2)
    n_half = len(half["t"])
    res["dt_check_max_pos_dev_m"] = float(np.max(np.abs(half["pos"] - st["pos"][:n_half])))

    res["fig7_scenario"] = fig7_statements(runs["fig7_rough_arc"], weight)
    lap("step_check_and_fig7")
    for name, r in runs.items():
        fig, axs = plt.subplots(2, 3, figsize=(13, 6.5))
        t = r["t"]
        axs[0, 0].plot(t, np.degrees(r["steer_angle"]))
        axs[0, 0].set_ylabel("steering angle [°]")
        axs[0, 1].plot(t, r["steer_torque"])
        axs[0, 1].set_ylabel("steering torque [N m]")
        axs[0, 2].plot(t, np.degrees(r["wheel_speed"]))
        axs[0, 2].set_ylabel("wheel speed [°/s]")
        axs[1, 0].plot(t, r["wheel_torque"])
        axs[1, 0].set_ylabel("wheel torque [N m]")
        axs[1, 1].plot(t, np.degrees(_rpy(r["quat"])))
        axs[1, 1].set_ylabel("roll, pitch, yaw [°]")
        axs[1, 2].plot(t, r["vel"])
        axs[1, 2].set_ylabel("body velocity [m/s]")
        axs[0, 2].legend(rover.WHEELS, fontsize=7, ncol=2)
        axs[1, 1].legend(("roll", "pitch", "yaw"), fontsize=7)
        axs[1, 2].legend(("x", "y", "z"), fontsize=7)
        for ax in axs.flat:
            ax.set_xlabel("t [s]")
        fig.suptitle(f"rover: {name.replace('_', ' ')} (Figs. 9–14 of the paper)")
        fig.tight_layout()
        fig.savefig(out_dir / f"fig_{name}.png", dpi=100)
        plt.close(fig)
        figs.append((f"fig_{name}.png", f"behaviour: {name}"))

    lap("figures")
    # 3. identification
    recs = synthetic_wheel_records()
    fit = single_wheel_fit(recs)
    true = tm.SOILS[SOIL]
    res["identified"] = {n: {"true": float(getattr(true, n)), "estimate": float(fit.params[n]),
                             "std": float(fit.std[n])} for n in ID_PARAMS}
    one = single_wheel_fit(recs[:1])
    res["identifiability_one_width"] = {
        "unidentifiable": list(one.unidentifiable),
        "note": "with one wheel width only k_c/b + k_phi is identifiable"}
    lap("single_wheel_fit")
    res["identified_cross_model"] = cross_model_fit(cross_model_records())
    lap("cross_model_fit")
    t0 = time.perf_counter()
    # --quick: explicit Euler at DT/2, whose forward-mode Jacobians compile in ~40 % of the
    # velocity-implicit step's CPU time (its ∂a/∂v nests a second Jacobian in every step)
    fit_solver, fit_dt = ("euler", DT / 2) if quick else (SOLVER, DT)
    res["identified_traverse"], _ = traverse_fit(model, forces, 1.0 if quick else 3.0,
                                                 dt=fit_dt, solver=fit_solver)
    res["traverse_fit_method"] = {"solver": fit_solver, "dt_s": fit_dt,
                                  "horizon_s": 1.0 if quick else 3.0}
    res["traverse_fit_wall_s"] = time.perf_counter() - t0
    lap("traverse_fit")

    # 4. speed
    res.update(speed(model, forces, batch=64 if quick else 256,
                     batch_horizon=0.25 if quick else 1.0, reps=2 if quick else REALTIME_REPS))
    lap("speed")
    res["timings"] = timings
    res["realtime_method"] = (f"ABA with the exact differential, {SOLVER} (Jacobian every "
                              f"{JACOBIAN_EVERY} steps) at dt = {DT} s, "
                              f"WheelSoil with {N_NODES} nodes per segment, one core")

    (out_dir / "results.json").write_text(json.dumps(res, indent=2))
    _report(out_dir, res, figs, quick)
    from ..viz import study_replay  # the rough-ground run, in a browser (diffmb.viz)

    with open(out_dir / "report.md", "a") as f:
        f.write("\n" + study_replay(out_dir, model, runs["rough_straight"]["traj"],
                                    forces=(rough,), title="rover: straight on rough ground") + "\n")
    return res


def _turn_line(tr):
    return (f"- turn in place: {tr['achieved_deg_s']:.2f} °/s for a commanded "
            f"{tr['commanded_deg_s']:.2f} °/s (ratio {tr['ratio']:.3f}, t = "
            f"{tr['window_s'][0]:g}–{tr['window_s'][1]:g} s). The wheels slip (|s| "
            f"{min(tr['wheel_slip'].values()):.2f}–{max(tr['wheel_slip'].values()):.2f}) and "
            f"their velocity servos lag (ω/ω* {min(tr['wheel_servo_speed_ratio'].values()):.3f}–"
            f"{max(tr['wheel_servo_speed_ratio'].values()):.3f}); mean (1 − |s|) ω/ω* = "
            f"{tr['predicted_ratio']:.3f} predicts the ratio (slip angles below "
            f"{tr['max_abs_slip_angle_deg']:.2f}°)")


def _inertia_lines(w):
    p, q = w["paper"], w["physical"]
    rows = [("steady speed [m/s]", "steady_speed_m_s", ".4f"),
            ("time to 95 % of it [s]", "time_to_95pct_speed_s", ".3f"),
            ("peak drive torque [N m]", "peak_drive_torque_Nm", ".2f"),
            ("steady drive torque [N m]", "steady_drive_torque_Nm", ".2f"),
            ("steady slip", "steady_slip", ".3f")]
    fmt = lambda x, f: "never" if x is None else format(x, f)  # noqa: E731
    out = ["", "### Wheel inertia", "",
           f"The paper's wheel inertia {w['paper_inertia_kg_m2']} kg m² for a 3.674 kg wheel of "
           f"radius 0.15 m exceeds m r² = {w['physical_inertia_kg_m2'][1]:.4f} kg m², the "
           "largest any such wheel can have (all its mass on the rim), "
           f"{w['paper_inertia_kg_m2'][1] / w['physical_inertia_kg_m2'][1]:.1f} times; rolling, "
           f"it weighs like {w['equivalent_mass_per_wheel_kg']['paper']:.1f} kg of extra mass "
           f"per wheel (I/r²) against {w['equivalent_mass_per_wheel_kg']['physical']:.2f} kg. "
           f"The straight drive with both ({w['physical_inertia_basis']}): the 0.5 s command "
           "ramp sets the start-up; the peak drive torque carries I dω/dt (the ramp's peak "
           "spin acceleration is 1.5 ω*/0.5 s = 2.0 rad/s²).", "",
           "| | paper [2, 2, 2] | thin shell |", "| --- | --- | --- |"]
    out += [f"| {lab} | {fmt(p[k], f)} | {fmt(q[k], f)} |" for lab, k, f in rows]
    return out


def _traction_lines(tk, rover_slip):
    out = ["", "### Traction against the shear deformation modulus K", "",
           "Static Wong–Reece drawbar pull: the slip where it crosses zero (the slip a wheel "
           "needs to pull its own rolling resistance) and DP/W at slip 0 and 0.99.", "",
           "| wheel | K [m] | DP(0)/W | DP(0.99)/W | zero-DP slip | j_rear/K there |",
           "| --- | --- | --- | --- | --- | --- |"]
    for name, d in tk["wheels"].items():
        for r in d["rows"]:
            cs = "none" if r["crossing_slip"] is None else f"{r['crossing_slip']:.3f}"
            jk = f"{r['j_rear_over_K']:.2f}" if "j_rear_over_K" in r else "–"
            out.append(f"| {name} | {r['K_m']:g} | {r['dp_at_zero_slip_over_W']:.3f} | "
                       f"{r['dp_at_s_max_over_W']:.3f} | {cs} | {jk} |")
    out += ["", f"The rover's straight drive slips {rover_slip:.3f}: on flat ground each wheel "
            "pulls no net load in steady driving, so it runs at its wheel's zero-DP slip at the "
            f"paper's K = {tk['paper_K_m']:g} m (table). The shear stress (c + σ tan φ)(1 − "
            "exp(−j/K)) reaches the soil's strength only where j ≫ K; at the rear of the contact "
            "j = r[θ₁ − (1 − s) sin θ₁] is about r θ₁ s, a few cm for this wheel, so with K = "
            "0.036 m the thrust needed to overcome the compaction resistance (DP(0)/W) comes "
            "only at a large slip.", ""]
    return out


def _measured_lines(m):
    a, e = m["model"], m["model_exit_angle"]
    s = m["soil"]
    out = ["", "### Against a measured single-wheel curve", "",
           f"Source: {m['source']}. Smooth wheel r = {m['r_m']} m, b = {m['b_m']} m; soil n = "
           f"{s['n']}, k = {s['k_phi']:.3g} N/m^(n+2), c = {s['c']:g} Pa, φ = {s['phi_deg']:g}°, "
           f"K = {s['K']:g} m ({m['soil_note']}). The model runs at each measured slip and load.",
           "", "| slip | load [N] | DP measured [N] | sd | DP θ₂ = 0 [N] | DP θ₂ = "
           f"{e['exit_over_entry']:g} θ₁ [N] | sinkage measured [mm] | θ₂ = 0 | θ₂ = "
           f"{e['exit_over_entry']:g} θ₁ |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, sl in enumerate(m["slip"]):
        out.append(f"| {sl:.3f} | {m['load_N'][i]:.2f} | {m['measured_N'][i]:.2f} | "
                   f"{m['measured_sd_N'][i]:.2f} | {a['N'][i]:.2f} | {e['N'][i]:.2f} | "
                   f"{m['measured_sinkage_mm'][i]:.1f} | {a['sinkage_mm'][i]:.1f} | "
                   f"{e['sinkage_mm'][i]:.1f} |")

    def cs(x):
        return "none below 0.99" if x is None else f"{x:.3f}"

    lo, hi = m["measured_crossing_bracket"]
    f = m["model_exit_angle_earlier"]
    out += ["", f"RMS difference from the measured means: {a['rms_difference_N']:.2f} N (θ₂ = 0), "
            f"{e['rms_difference_N']:.2f} N (θ₂ = {e['exit_over_entry']:g} θ₁), "
            f"{f['rms_difference_N']:.2f} N (the source's earlier fit, θ₂ = "
            f"{f['exit_over_entry']:g} θ₁). Zero-DP slip: measured between {lo:.3f} and "
            f"{hi:.3f} ({m['measured_crossing_interpolated']:.3f} interpolated), model "
            f"{cs(a['crossing_slip'])}, {cs(e['crossing_slip'])} and {cs(f['crossing_slip'])} "
            f"(in the same order), at the mean load {m['model_load_for_crossing_N']:.2f} N.", ""]
    return out


def _cross_model_lines(x):
    a = x["acceptance"]
    out = ["", "### Across models: Wong–Reece records, linearised (eq. 26) fit", "",
           f"Records from the full Wong–Reece model (widths {ID_WIDTHS} m, slips 0.05–0.9) with "
           f"AR(1) noise (lag-one correlation {x['noise_ar1_rho']}, the sigmas above); fitted "
           "with the linearised stresses of eq. 26 (load eq. 28, torque eq. 30). Standard errors "
           f"× {x['std_inflation']:.2f} for the coloured noise. Identifiable: not flagged by the "
           f"rank test and std ≤ {a['max_rel_std_identifiable']:.0%} of the estimate. Accepted "
           f"when every identifiable parameter is within {a['max_rel_error']:.0%} and "
           f"{a['max_abs_z']:g} std of the truth and the weighted RMS residual ≤ "
           f"{a['max_rms_weighted']:g}.", "",
           "| parameter | true | estimate | std | rel. error | identifiable |",
           "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {n} | {v['true']:.6g} | {v['estimate']:.6g} | "
            f"{'none' if v['std'] is None else format(v['std'], '.3g')} | "
            f"{v['rel_error']:+.3f} | {'yes' if v['identifiable'] else 'no'} |"
            for n, v in x["params"].items()]
    ho = x["held_out_rms_over_noise"]
    out += ["", f"Weighted RMS residual {x['rms_weighted']:.3f}; accepted: "
            f"{'yes' if x['accepted'] else 'no'}. Held-out width {x['held_out_width_m']} m "
            "(Wong–Reece, noiseless) predicted by the fitted linearised model to RMS/noise "
            + ", ".join(f"{k} {v:.2f}" for k, v in ho.items()) + ".", "",
            "Combinations (right singular vectors of J diag(p), log parameters; σ/σ_max):", ""]
    out += [f"- {c['sv_rel']:.2e}: " + " ".join(f"{w:+.2f} ln {n}"
                                                 for n, w in c["log_combination"].items())
            for c in x["combinations"]]
    return out


def _contact_lines(c):
    st, lat = c["paper_step_10ms"], c["lateral_eq32"]
    out = ["", "### The paper's step, eq. 32 and the unilateral contact", ""]
    if st["finished"]:
        out.append(
            f"- 10 ms step ({st['behaviour']}, {st['horizon_s']:g} s, against {st['reference_dt_s']} s): "
            f"runs to the end; body position within {st['max_pos_dev_m']:.2e} m, final height "
            f"{st['final_height_dev_m']:+.2e} m; mean sinkage {1e3 * st['mean_sinkage_m']['dt_10ms']:.2f} "
            f"mm against {1e3 * st['mean_sinkage_m']['dt_ref']:.2f} mm; step-to-step RMS of Σ N "
            f"{st['normal_sum_step_rms_N']['dt_10ms']:.2f} N against "
            f"{st['normal_sum_step_rms_N']['dt_ref']:.2f} N (the explicit soil memory at h k_m = "
            f"{st['memory_rate_x_dt']:g}, the edge of its stability)")
    else:
        out.append(f"- 10 ms step ({st['behaviour']}): fails: {st['error']}")
    e, sh = lat["eq32"], lat["shear"]
    out += [f"- eq. 32 lateral force (B = {lat['B_per_rad']:.3f} 1/rad, {lat['B_basis']}; misfit "
            f"{lat['B_fit_rms_N']:.3f} N RMS) against the lateral shear, {lat['behaviour']} "
            f"(commanded {lat['commanded_yaw_rate_deg_s']:.2f} °/s): yaw rate "
            f"{e['yaw_rate_deg_s']:.3f} against {sh['yaw_rate_deg_s']:.3f} °/s, final yaw "
            f"{e['final_yaw_rad']:.4f} against {sh['final_yaw_rad']:.4f} rad, largest slip angle "
            f"{e['max_abs_slip_angle_deg']:.3f}° against {sh['max_abs_slip_angle_deg']:.3f}°, "
            f"largest lateral force {e['max_abs_lateral_N']:.2f} against "
            f"{sh['max_abs_lateral_N']:.2f} N",
            "- the linearised eq. 26 stresses on the rover (" + c["linearised_stresses"]["behaviour"]
            + ", steady means; linearised against Wong–Reece): " + ", ".join(
                f"{k} {c['linearised_stresses']['linearised'][k]:.4g} against "
                f"{c['linearised_stresses']['wong_reece'][k]:.4g}"
                for k in c["linearised_stresses"]["linearised"]),
            ]
    return out + _unilateral_lines(c["unilateral_contact"])


def _unilateral_lines(u):
    lu, lc, p10 = u["unilateral"], u["compliant"], u["paper_step_10ms"]
    rows = [("final position [m]", lambda x: ", ".join(f"{v:.3f}" for v in
                                                      x["final_position_m"])),
            ("final yaw [rad]", lambda x: f"{x['final_yaw_rad']:.4f}"),
            ("Σ N / m g: mean (min–max)", lambda x: "{mean:.4f} ({min:.3f}–{max:.3f})".format(
                **x["sum_normal_over_weight"])),
            ("mean N front / middle / rear [N]", lambda x: " / ".join(
                f"{v:.1f}" for v in x["mean_normal_N"].values())),
            ("share of the window without load (per wheel)", lambda x: ", ".join(
                f"{k} {v:.2f}" for k, v in x["time_without_load"].items())),
            (f"largest change between {u['interval_s']:g} s intervals [N]",
             lambda x: f"{x['max_normal_jump_N']:.1f} ({x['max_normal_jump_wheel']})")]
    out = ["", "### The paper's unilateral contact (eqs. 33–42) on the Fig. 7 scenario", "",
           f"{u['behaviour']}, {u['horizon_s']:g} s at {u['dt_s']} s ({u['solver']}; status "
           f"{u['status']}; the compliant law {u['compliant_solver']} at "
           f"{u['compliant_dt_s']} s), steady window t = {u['window_s'][0]:g}–{u['window_s'][1]:g} s. "
           f"Model: {u['model']}. LCP: {u['lcp_solver']}. Stabilisation: {u['stabilisation']}. "
           f"Sinkage: {u['sinkage_rule']}. Normal forces are means over "
           f"{u['interval_s']:g} s intervals.", "",
           "| | unilateral | compliant |", "| --- | --- | --- |"]
    out += [f"| {lab} | {fn(lu)} | {fn(lc)} |" for lab, fn in rows]
    if not p10["run"]:
        step = "not run: " + p10["why_not"]
    elif p10["finished"]:
        step = (f"with {p10['solver']}, runs to the end: largest position difference "
                f"{p10['max_pos_dev_m']:.2e} m and final yaw {p10['final_yaw_dev_rad']:+.2e} rad "
                f"against the {u['dt_s']} s run, mean Σ N / "
                f"m g {p10['sum_normal_over_weight_mean']:.4f} (wall {p10['wall_s']:.1f} s)")
    else:
        step = f"fails ({p10['status']})"
    out += ["", f"Final positions {u['final_position_diff_m']:.3f} m apart, yaw "
            f"{u['final_yaw_diff_rad']:+.4f} rad; largest gap drift of a loaded wheel "
            f"{1e3 * u['max_abs_separation_m']:.2f} mm; wall {u['wall_s']:.1f} s (with its "
            f"compilation, or its load from the compilation cache). The paper's 10 ms step: "
            f"{step}. What differs: " + "; ".join(u["differences"]) + "."]
    return out


def _report(out_dir, res, figs, quick):
    sw = res["single_wheel"]
    lines = [
        "# The six-wheeled Mars rover (Xu, Ju, Yu & Gu 2021)", "",
        f"Soil: {res['soil_source']}. Behaviours by ABA with {res['solver']} at dt = {res['dt_s']} s "
        f"(output every {res['output_dt_s']} s){'; --quick: 2 s behaviours, a 1 s traverse fit, 0.25 s batch runs of 64 rovers, the realtime factor best of 2' if quick else ''}.",
        "", "## Single wheel (r = 0.09 m, b = 0.11 m, W = 64.68 N)", "",
        "| slip | sinkage [mm] | DP [N] | T [N m] | lin. sinkage [mm] | lin. DP [N] | lin. T [N m] | eq. 31 T/r [N] |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for a, b in zip(sw["wong_reece"], sw["linearised"], strict=True):
        lines.append(f"| {a['slip']:.1f} | {1e3 * a['sinkage_m']:.2f} | {a['drawbar_pull_N']:.2f} | "
                     f"{a['torque_Nm']:.3f} | {1e3 * b['sinkage_m']:.2f} | "
                     f"{b['drawbar_pull_N']:.2f} | {b['torque_Nm']:.3f} | "
                     f"{b['gross_traction_N']:.2f} |")
    lines += ["", "Dynamic rig (steady state) against the static curve:", ""]
    for s, d in res["single_wheel_rig"].items():
        lines.append(f"- slip {s}: sinkage {1e3 * d['sinkage_m']:.3f} mm (static "
                     f"{1e3 * d['static']['sinkage_m']:.3f}), DP {d['drawbar_pull_N']:.3f} N "
                     f"({d['static']['drawbar_pull_N']:.3f}), T {d['torque_Nm']:.4f} N m "
                     f"({d['static']['torque_Nm']:.4f})")
    lines += [
        "", "## The rover", "",
        f"- differential |q_l + q_r| max over all runs: {res['differential_constraint_max_err']:.2e} rad",
        f"- recursive Lagrange vs ABA, 20 random states: {res['lagrange_vs_aba_max_abs']:.2e}",
        f"- straight drive, t = {res['straight_window_s'][0]:g}–{res['straight_window_s'][1]:g} s "
        f"(the last {STEADY_SPAN:g} s, not before {STEADY_AFTER:g} s: the commands ramp up over "
        f"0.5 s): Σ N / (m g) = {res['normal_force_over_weight']:.6f}, "
        f"speed {res['straight_speed_m_s']:.4f} m/s for a commanded 0.1 m/s (slip "
        f"{res['straight_slip_mean']:.3f}, sinkage {1e3 * res['straight_sinkage_m']:.1f} mm)",
        f"- step check: half the step changes the straight drive's position by at most "
        f"{res['dt_check_max_pos_dev_m']:.2e} m",
        f"- wheel speed: ours {res['wheel_speed_deg_s']:.1f} °/s, the paper's Fig. 11 "
        f"±{PAPER['wheel_speed_deg_s']} °/s. At 0.1 m/s a wheel of radius "
        f"{rover.WHEEL_RADIUS} m rolling without slip turns at v/r = "
        f"{np.degrees(0.1 / rover.WHEEL_RADIUS):.1f} °/s (ours is lower: the velocity servos "
        "lag their command under the soil's torque, and the body moves at v = rω(1 − s)); "
        "±2 °/s would need a 2.9 m wheel at 0.1 m/s, so the printed axis is inconsistent with "
        "the stated speed (perhaps rad/s, or a scaled plot); not a pass criterion.",
        _turn_line(res["turn_in_place"]),
        "- lift_wheel (left bogie servo at +0.35 rad): mean normal forces "
        + ", ".join(f"{w} {n:.1f}" for w, n in res["lift_wheel_normal_N"].items())
        + f" N; off the ground: {', '.join(res['lift_wheel_off_ground']) or 'none'} (the bogie "
        "presses the middle wheel down and the left rocker tips back about it onto the rear "
        "wheel)", ""]
    lines += ["| behaviour | final position [m] | final yaw [rad] | largest roll or pitch [rad] |",
              "| --- | --- | --- | --- |"]
    for n, b in res["behaviours"].items():
        p = ", ".join(f"{x:.3f}" for x in b["final_position_m"])
        lines.append(f"| {n} | {p} | {b['final_yaw_rad']:.3f} | {b['max_abs_roll_pitch_rad']:.3f} |")
    lines += _inertia_lines(res["wheel_inertia_effect"])
    lines += _traction_lines(res["traction_vs_K"], res["straight_slip_mean"])
    lines += _measured_lines(res["traction_vs_K"]["measured_single_wheel"])
    lines += _contact_lines(res["contact_model_comparison"])
    lines += ["", "### The paper's Fig. 7 scenario (arc of 2 m radius on rough ground)", "",
              "| statement | paper | ours | agree | why not |", "| --- | --- | --- | --- | --- |"]
    def fmt(x):
        if isinstance(x, float):
            return f"{x:.4g}"
        if isinstance(x, dict):
            return ", ".join(f"{k} {fmt(v)}" for k, v in x.items())
        if isinstance(x, list):
            return "[" + ", ".join(fmt(v) for v in x) + "]"
        return str(x)

    lines += [f"| {r['statement']} | {fmt(r['paper'])} | {fmt(r['ours'])} | "
              f"{'yes' if r['agree'] else 'no'} | {r['why_not'] or ''} |"
              for r in res["fig7_scenario"]]
    lines += ["", "## Identification", "",
              f"Single-wheel records at widths {ID_WIDTHS} m, slips 0.05–0.9, noise {ID_NOISE}:", "",
              "| parameter | true | estimate | std |", "| --- | --- | --- | --- |"]
    lines += [f"| {n} | {v['true']:.6g} | {v['estimate']:.6g} | {v['std']:.3g} |"
              for n, v in res["identified"].items()]
    lines += _cross_model_lines(res["identified_cross_model"])
    lines += ["", f"One width only: flagged unidentifiable {res['identifiability_one_width']['unidentifiable']}"
              " (k_c/b + k_phi is what a single width sees).", "",
              f"Rover traverse (straight drive; body speed and wheel torques at 10 Hz; "
              f"{res['traverse_fit_method']['horizon_s']:g} s simulated with "
              f"{res['traverse_fit_method']['solver']} at "
              f"{res['traverse_fit_method']['dt_s'] * 1e3:g} ms, record and fit alike):", "",
              "| parameter | true | estimate | std |", "| --- | --- | --- | --- |"]
    lines += [f"| {n} | {v['true']:.6g} | {v['estimate']:.6g} | {v['std']:.3g} |"
              for n, v in res["identified_traverse"].items()]
    lines += ["", "## Speed (this machine, one process)", "",
              f"- rough-terrain traverse of {res['horizon_s']} s, batch 1, after compilation, "
              f"best of {res['realtime_reps']} runs: {res['wall_s']:.3f} s wall, realtime factor "
              f"{res['realtime_factor']:.2f} ({res['realtime_method']}); compile "
              f"{res['compile_s']:.1f} s ({'cold' if res['compile_cold'] else 'this process'}); "
              "`diffmb bench --only rover` measures the same (diffmb.studies.rover.speed)"
              + ("" if res.get("realtime_load_average") is None else
                 f"; the machine's load average was {res['realtime_load_average']:.1f} (other "
                 "processes, e.g. `make demo`'s second study, slow it; the bench on a quiet "
                 "machine is the figure to quote)"),
              f"- {res['batch']} rovers on {res['batch']} soils in one call "
              f"({res['batch_horizon_s']} s each): "
              f"{res['batch_rovers_per_s']:.2f} rovers/s, all finished: {res['batch_all_ok']}", ""]
    lines += ["## Figures", ""] + [f"![{c}]({f})" for f, c in figs]
    (out_dir / "report.md").write_text("\n".join(lines) + "\n")
