"""Side by side with ``mujoco.sysid``: the same arm, the same data, the same
initial guess; wall time, rollouts, iterations, accuracy and 95 % intervals of both.

The arm
    The Universal Robots UR5 of example-robot-data (``diffmb/assets/ur5_robot.urdf``), loaded
    by MuJoCo's own URDF importer (visual and collision elements dropped) and written out as
    MJCF (``DIR/ur5_sysid.xml``), with: RK4, contact off, joints unlimited, true viscous damping
    and armature on the six joints, and one ``<general dyntype="integrator">`` actuator per
    joint whose activation is the joint torque (``ctrl`` is its rate). Why the integrator: the
    torque is then continuous and piecewise linear between the samples, which MuJoCo's RK4
    (control held over a step, activation integrated with the state) and diffmb (``tau``
    channels, ``input_interp="linear"``) both integrate exactly; a plain ``<motor>`` holds its
    control over a step, and no function of time can hold it at RK4's last stage, which sits on
    the next sample (diffmb's ``zoh`` takes the next value there).

The parameters (:data:`PARAMS`, 14): the damping of the six joints, the armature of the six
    joints, the masses of ``upper_arm_link`` and ``forearm_link`` (centre of mass and inertia
    about it unchanged, as MuJoCo's ``MjsBody.mass`` and diffmb's ``body.<b>.mass`` both mean).

The data
    The true arm simulated by MuJoCo (RK4, ``dt / SUBSTEPS``), driven open loop by the
    computed-torque feedforward (``mj_inverse`` of the true model) of a 3-harmonic exciting
    trajectory about a home pose, sampled every ``dt``; joint angles with white Gaussian noise
    ``SIGMA_Q``. Both tools get the same arrays: sample times, noisy angles, the torque samples
    (diffmb as ``tau``; mujoco.sysid as the activation rates ``diff(tau)/dt`` and the initial
    activation ``tau[0]``; the angles as ``MjStateQPos`` signals: its ``MjSensor`` channels
    lag one step, see :func:`mujoco_problem`) and simulate at ``dt`` with RK4. Both take the
    initial state as known (the arm starts at the home pose of the exciting trajectory);
    diffmb, run as its users fit a record, estimates every segment's initial state by
    multiple shooting (2 nv nuisance unknowns per segment); diffmb given the initial state as
    mujoco.sysid is (``fit(initial_state="known")``, single shooting, the parameters the only
    unknowns) is reported beside it (``info.diffmb_known_state``). Both start from
    :data:`GUESS` (every parameter 15–40 % off).

What is measured (best wall time of ``reps`` interleaved repetitions, ABAB...)
    * mujoco.sysid: ``sysid.optimize(..., optimizer="mujoco")`` with its defaults (float64, its
      finite-difference Gauss–Newton/LM, ``n_threads`` = ``os.cpu_count()`` rollout threads),
      then ``calculate_intervals`` (Student-t, 95 %) at its final Jacobian. Rollouts: every
      column its residual function is evaluated at (one per parameter per Jacobian, plus trial
      points). Iterations: its trace length minus the final entry.
    * diffmb: ``diffmb.optim.fit`` with its defaults (Levenberg–Marquardt, exact forward-mode
      Jacobians whose directions are spread over ``threads`` = the CPUs the process may use,
      Bates–Watts relative-offset stop at 1e-3), RK4 at ``dt``, weights 1/SIGMA_Q, after a
      warm-up call that compiles (its
      time minus one steady iteration is reported as ``compile_s``). Rollout-equivalents: a
      Jacobian is one forward pass with n tangents (n = the parameters, + 2 nv per segment
      when the initial states are estimated) and counts as n + 1; every trial residual
      counts 1.
    * accuracy: each estimate's error against the truth and whether the truth lies inside the
      tool's own 95 % interval (diffmb: ±1.96 ``FitResult.std``; mujoco.sysid: its half-widths).

Through contact (cases ``cube_*``, :func:`compare_cube`, DIR/bench_sysid_cube.json)
    MuJoCo's record of a 0.1 m, 1 kg cube thrown flat onto its floor (:func:`cube_record`:
    friction and solref :data:`CUBE_TRUTH` on both geoms, elliptic cone, its default
    semi-implicit Euler at :data:`CUBE_DT`, every step sampled, noise :data:`CUBE_SIGMA` on
    the seven coordinates). Both tools fit μ, solref's T and ζ from :func:`cube_guess`, the
    initial state known: diffmb's ``fit`` on the file's contact element with the implicit
    contact step (:func:`run_diffmb_cube`), mujoco.sysid with the parameters written into both
    geoms of the spec (:func:`run_mujoco_cube`). Rollouts are counted as above; accuracy against
    the truth MuJoCo was given.

Run: ``python -m diffmb.bench.sysid [--quick] --out DIR`` (writes DIR/bench_sysid.json and
DIR/bench_sysid_cube.json) or ``diffmb bench --only sysid``. ``--quick``: a shorter arm record,
two repetitions (the cube's record is the same).
"""

from __future__ import annotations

import copy
import io
import os
import pathlib
import sys
import time
import xml.etree.ElementTree as ET
from importlib import resources

import numpy as np

from diffmb.bench import case, main_for, write_json

URDF = pathlib.Path(str(resources.files("diffmb") / "assets" / "ur5_robot.urdf"))
JOINTS = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint",
          "wrist_2_joint", "wrist_3_joint")
TRUE_DAMPING = (2.0, 2.5, 1.5, 0.5, 0.4, 0.3)  # N m s/rad
TRUE_ARMATURE = (0.3, 0.3, 0.2, 0.05, 0.05, 0.05)  # kg m²
MASS_BODIES = ("upper_arm_link", "forearm_link")  # true masses: the URDF's
Q_HOME = (0.3, -1.2, 1.3, -1.2, -1.4, 0.4)
SIGMA_Q = 1e-3  # rad
DT = 0.005  # sample period = simulation step of both fits [s]
SUBSTEPS = 10  # the data are simulated at DT / SUBSTEPS
SEGMENT = 0.15  # diffmb's multiple-shooting segment length [s]
# initial guess = truth x factor (the same for both tools)
GUESS_FACTOR = {
    **{f"joint.{j}.damping": f for j, f in zip(JOINTS, (1.3, 0.7, 1.4, 0.75, 1.3, 0.7),
                                                strict=True)},
    **{f"joint.{j}.armature": f for j, f in zip(JOINTS, (0.7, 1.3, 0.75, 1.4, 0.7, 1.3),
                                                 strict=True)},
    "body.upper_arm_link.mass": 0.85,
    "body.forearm_link.mass": 1.15,
}


def params_for(joints=JOINTS, bodies=MASS_BODIES) -> list[str]:
    """diffmb names of the identified parameters (damping, armature of ``joints``; masses)."""
    return ([f"joint.{j}.damping" for j in joints] + [f"joint.{j}.armature" for j in joints]
            + [f"body.{b}.mass" for b in bodies])


PARAMS = params_for()


# ----------------------------------------------------------------------------------------------
# The arm
# ----------------------------------------------------------------------------------------------


def arm_mjcf(dt: float = DT) -> str:
    """The UR5 as MJCF: MuJoCo's URDF import plus RK4, true damping/armature, torque actuators
    with integrator dynamics (see the module docstring)."""
    import mujoco

    root = ET.parse(URDF).getroot()
    for tag in ("gazebo", "transmission"):
        for e in root.findall(tag):
            root.remove(e)
    for link in root.findall("link"):
        for tag in ("visual", "collision"):
            for e in link.findall(tag):
                link.remove(e)
    spec = mujoco.MjSpec.from_string(ET.tostring(root, encoding="unicode"))
    spec.modelname = "ur5_sysid"
    spec.option.timestep = dt
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_RK4
    spec.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    for j, d, a in zip(JOINTS, TRUE_DAMPING, TRUE_ARMATURE, strict=True):
        jt = spec.joint(j)
        jt.damping = [d, 0.0, 0.0]  # MuJoCo 4: [linear, polynomial terms]
        jt.armature = a
        jt.limited = mujoco.mjtLimited.mjLIMITED_FALSE
        jt.actfrclimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act = spec.add_actuator(name=f"tau_{j}", target=j,
                                trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.dyntype = mujoco.mjtDyn.mjDYN_INTEGRATOR
        act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        act.biastype = mujoco.mjtBias.mjBIAS_NONE
        act.gainprm[0] = 1.0
        act.actlimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
    spec.compile()
    return spec.to_xml()


def true_values(mj) -> dict:
    """{diffmb name: true value} read from a compiled MjModel of :func:`arm_mjcf`."""
    import mujoco

    out = {}
    for j in JOINTS:
        d = mj.jnt_dofadr[mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT, j)]
        out[f"joint.{j}.damping"] = float(mj.dof_damping[d])
        out[f"joint.{j}.armature"] = float(mj.dof_armature[d])
    for b in MASS_BODIES:
        out[f"body.{b}.mass"] = float(mj.body_mass[mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY,
                                                                      b)])
    return out


# ----------------------------------------------------------------------------------------------
# The data
# ----------------------------------------------------------------------------------------------


def excitation(t):
    """Exciting trajectory (q, v, a) (n, 6): 3 harmonics of 0.4 Hz per joint about Q_HOME."""
    rng = np.random.default_rng(7)
    amp = rng.uniform(0.08, 0.25, (3, 6)) * np.array([1.0, 0.6, 0.8, 1.0, 1.0, 1.0])
    ph = rng.uniform(0, 2 * np.pi, (3, 6))
    q, v, a = np.tile(np.asarray(Q_HOME), (t.size, 1)), np.zeros((t.size, 6)), np.zeros((t.size, 6))
    for h in range(3):
        w = 2 * np.pi * 0.4 * (h + 1)
        arg = w * t[:, None] + ph[h]
        q += amp[h] * (np.sin(arg) - np.sin(ph[h]))
        v += amp[h] * w * np.cos(arg)
        a -= amp[h] * w * w * np.sin(arg)
    return q, v, a


def make_data(xml: str, T: float, *, sigma_q: float = SIGMA_Q, seed: int = 0) -> dict:
    """Simulate the true arm with MuJoCo; ``{"t", "q" (noisy), "q_true", "v_true", "tau",
    "ctrl", "qpos0", "dt"}`` with n = round(T / dt) + 1 samples."""
    import mujoco

    mj = mujoco.MjModel.from_xml_string(xml)
    dt = float(mj.opt.timestep)
    n = int(round(T / dt)) + 1
    t = np.arange(n) * dt
    qr, vr, ar = excitation(t)
    d = mujoco.MjData(mj)
    tau = np.zeros((n, mj.nv))
    for k in range(n):  # computed-torque feedforward with the true model (passive forces incl.)
        d.qpos[:], d.qvel[:], d.qacc[:] = qr[k], vr[k], ar[k]
        mujoco.mj_inverse(mj, d)
        tau[k] = d.qfrc_inverse
    ctrl = np.zeros_like(tau)
    ctrl[:-1] = np.diff(tau, axis=0) / dt  # activation rate: tau is linear between samples
    ctrl[-1] = ctrl[-2]
    fine = mujoco.MjModel.from_xml_string(xml)
    fine.opt.timestep = dt / SUBSTEPS
    d = mujoco.MjData(fine)
    d.qpos[:], d.qvel[:], d.act[:] = qr[0], vr[0], tau[0]
    q, v = np.zeros((n, fine.nq)), np.zeros((n, fine.nv))
    q[0], v[0] = d.qpos, d.qvel
    for k in range(n - 1):
        d.ctrl[:] = ctrl[k]
        for _ in range(SUBSTEPS):
            mujoco.mj_step(fine, d)
        q[k + 1], v[k + 1] = d.qpos, d.qvel
    rng = np.random.default_rng(seed)
    return {"t": t, "q": q + sigma_q * rng.standard_normal(q.shape), "q_true": q, "v_true": v,
            "tau": tau, "ctrl": ctrl, "qpos0": qr[0].copy(), "qvel0": vr[0].copy(), "dt": dt,
            "sigma_q": sigma_q}


# ----------------------------------------------------------------------------------------------
# The two tools
# ----------------------------------------------------------------------------------------------


def segments_for(T: float) -> int:
    """Multiple-shooting segments of about :data:`SEGMENT` seconds for a record of T s."""
    return max(1, int(round(T / SEGMENT)))


def diffmb_problem(xml_path, data, names, guess, known_state=False):
    """(model, record, fit kwargs) for :func:`diffmb.optim.fit` on ``data``.

    ``known_state=False`` (the way diffmb's users fit a record: :func:`~diffmb.optim.fit`'s
    multiple shooting over segments of :data:`SEGMENT` s, every segment's initial state
    estimated); ``True``: single shooting from the experiment's initial state, given as it is
    to mujoco.sysid, the parameters the only unknowns."""
    import diffmb
    from diffmb.forces.elements import JointDamping

    model = diffmb.load_mjcf(xml_path)
    kw = dict(forces={"damping": JointDamping()},
              simulate_kwargs={"dt": data["dt"], "solver": "rk4"},
              weights={"q": 1.0 / data["sigma_q"]}, init={k: guess[k] for k in names},
              input_interp="linear", progress=False)
    rec = {"t": data["t"], "q": data["q"], "tau": data["tau"]}
    if known_state:
        kw.update(shooting="single", initial_state="known")
        rec.update(q0=data["qpos0"], v0=data["qvel0"])
        return model, rec, kw
    S = segments_for(float(data["t"][-1]))
    kw.update(shooting="multiple", segments=S) if S > 1 else kw.update(shooting="single")
    return model, rec, kw


def run_diffmb(xml_path, data, names, guess, truth, max_steps=100, known_state=False) -> dict:
    from diffmb.optim import fit
    from diffmb.optim.batch import available_cpus

    model, rec, kw = diffmb_problem(xml_path, data, names, guess, known_state)
    t0 = time.perf_counter()
    res = fit(model, rec, names, max_steps=max_steps, **kw)
    wall = time.perf_counter() - t0
    # tangents per segment: the parameters (+ the segment's own state when estimated)
    n_unknowns = len(names) + (0 if known_state else 2 * model.nv)
    accepted = sum(1 for h in res.history[1:] if h.get("accepted"))
    trials = res.n_iter - (1 if res.message.startswith("converged (step below xtol)") else 0)
    rollouts = (1 + accepted) * (n_unknowns + 1) + trials
    est = {k: float(res.estimates[k]) for k in names}
    half = {k: 1.959964 * float(res.std[k]) for k in names}
    return _summary("diffmb", wall, rollouts, res.n_iter, est, half, truth, success=res.success,
                    message=res.message, n_threads=available_cpus(), tangents=n_unknowns,
                    jacobians=1 + accepted,
                    trial_residuals=trials, shooting=kw["shooting"],
                    segments=kw.get("segments", 1),
                    initial_state="known" if known_state else "estimated")


def _modifier(name):
    kind, obj, field = name.split(".")
    if field == "damping":  # MuJoCo 4 stores [linear, polynomial terms]
        return lambda s, p: setattr(s.joint(obj), field, [float(p.value[0]), 0.0, 0.0])
    if kind == "joint":
        return lambda s, p: setattr(s.joint(obj), field, float(p.value[0]))
    return lambda s, p: setattr(s.body(obj), "mass", float(p.value[0]))


def mujoco_problem(xml, data, names, guess):
    """(ParameterDict, residual_fn) for ``mujoco.sysid.optimize`` on ``data``."""
    import mujoco
    from mujoco import sysid

    spec = mujoco.MjSpec.from_string(xml)
    mj = spec.compile()
    params = sysid.ParameterDict()
    for k in names:
        g = guess[k]
        params.add(sysid.Parameter(k, nominal=g, min_value=g / 4, max_value=g * 4,
                                   modifier=_modifier(k)))
    x0 = sysid.create_initial_state(mj, data["qpos0"], data["qvel0"], data["tau"][0])
    ctrl_ts = sysid.TimeSeries.from_control_names(data["t"], data["ctrl"], mj)
    # joint angles as state signals (qpos after each step, stamped with its time); MjSensor
    # channels of ``mujoco.rollout`` lag one step (the sensors of the state before the step,
    # stamped with the time after it), which biased the estimates by up to 24 % here
    q_ts = sysid.TimeSeries.from_names(data["t"], data["q"], mj,
                                       [(j, sysid.SignalType.MjStateQPos) for j in JOINTS])
    seq = sysid.ModelSequences("ur5", spec, "excitation", x0, ctrl_ts, q_ts,
                               allow_missing_sensors=True)
    return (params, *_counted_residual(sysid, seq))


def run_mujoco(xml, data, names, guess, truth, max_iters=100) -> dict:
    import logging

    from absl import logging as alog
    from mujoco import sysid

    level = alog.get_verbosity()
    alog.set_verbosity(alog.ERROR)  # its per-run notices (no sensors in the model; the table)
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        params, residual_fn, count = mujoco_problem(xml, data, names, guess)
        t0 = time.perf_counter()
        opt, out = sysid.optimize(params, residual_fn, optimizer="mujoco", max_iters=max_iters,
                                  output=io.StringIO())  # its per-iteration log, not printed
        r_star, _, _ = residual_fn(out.x, opt)
        _, half = sysid.calculate_intervals(r_star, out.jac)
        wall = time.perf_counter() - t0
    finally:
        alog.set_verbosity(level)
    est = {k: float(opt[k].value[0]) for k in names}
    iters = len(out.extras.get("objective", [])) - 1
    return _summary("mujoco.sysid", wall, count["rollouts"], iters, est,
                    dict(zip(names, map(float, half), strict=True)), truth,
                    n_threads=os.cpu_count() or 1)  # its rollout threads (its default)


def _summary(tool, wall, rollouts, iters, est, half, truth, **extra) -> dict:
    rel = {k: abs(est[k] - truth[k]) / abs(truth[k]) for k in est}
    inside = {k: bool(abs(est[k] - truth[k]) <= half[k]) for k in est}
    return {"tool": tool, "wall_s": wall, "rollouts": int(rollouts), "iterations": int(iters),
            "estimates": est, "ci95_half": half, "rel_error": rel,
            "max_rel_error": max(rel.values()), "within_ci95": inside,
            "n_within_ci95": int(sum(inside.values())), **extra}


# ----------------------------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------------------------


def sim_agreement(xml_path, data) -> float:
    """max |q_diffmb − q_data| [rad] of diffmb's RK4 simulation (at ``dt``) of the true model,
    from the data's initial state with its torques, against MuJoCo's noise-free data."""
    import jax.numpy as jnp

    import diffmb
    from diffmb.controls import KnotTable
    from diffmb.forces.elements import JointDamping

    model = diffmb.load_mjcf(xml_path)
    tau = KnotTable(jnp.asarray(data["t"]), jnp.asarray(data["tau"]), "linear")
    tr = diffmb.simulate(model, jnp.asarray(data["qpos0"]), jnp.asarray(data["qvel0"]),
                         t1=float(data["t"][-1]), dt=data["dt"], solver="rk4",
                         saveat=list(data["t"]), forces=(JointDamping(),), control=tau)
    return float(np.max(np.abs(np.asarray(tr.q) - data["q_true"])))


def problem(T: float, names=PARAMS, seed: int = 0, out_dir=None):
    """(xml, xml_path, data, truth, guess) of the benchmark with a record of T seconds."""
    import tempfile

    import mujoco

    xml = arm_mjcf()
    d = pathlib.Path(out_dir) if out_dir is not None else pathlib.Path(tempfile.mkdtemp())
    path = d / "ur5_sysid.xml"
    path.write_text(xml)
    truth = true_values(mujoco.MjModel.from_xml_string(xml))
    truth = {k: truth[k] for k in names}
    guess = {k: truth[k] * GUESS_FACTOR[k] for k in names}
    data = make_data(xml, T, seed=seed)
    return xml, path, data, truth, guess


def run(out: pathlib.Path, quick: bool = False) -> dict:
    res = compare(out, T=1.0 if quick else 1.5, names=PARAMS, reps=2 if quick else 3)
    return {**res, **compare_cube(out, T=0.5, reps=1)}


def compare(out, T: float, names=PARAMS, reps: int = 3) -> dict:
    """The benchmark on a record of T seconds identifying ``names``: best of ``reps``
    interleaved runs of both tools; writes ``out/bench_sysid.json``, returns the cases."""
    names = list(names)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    xml, path, data, truth, guess = problem(T, names, out_dir=out)
    info = {"robot": "UR5 (example-robot-data ur5_robot.urdf via MuJoCo's URDF import)",
            "params": names, "truth": truth, "guess": guess, "T_s": T, "dt_s": DT,
            "data_substeps": SUBSTEPS, "sigma_q_rad": SIGMA_Q, "samples": int(data["t"].size),
            "cpu_count": os.cpu_count(), "load_avg_1min": _load()}
    info["diffmb_vs_mujoco_true_model_max_abs_q_rad"] = sim_agreement(path, data)
    # warm-up (compilation) of diffmb, then one steady iteration to separate compile time
    t0 = time.perf_counter()
    run_diffmb(path, data, names, guess, truth, max_steps=1)
    first = time.perf_counter() - t0
    one = min(run_diffmb(path, data, names, guess, truth, max_steps=1)["wall_s"]
              for _ in range(2))
    info["diffmb_compile_s"] = first - one
    runs = {"diffmb": [], "mujoco.sysid": []}
    for _ in range(reps):  # interleaved: A B A B ...
        runs["diffmb"].append(run_diffmb(path, data, names, guess, truth))
        try:
            runs["mujoco.sysid"].append(run_mujoco(xml, data, names, guess, truth))
        except Exception as e:  # noqa: BLE001 - a failing or missing peer reports null
            info["mujoco_error"] = repr(e)
    # for reference (second of two runs, the first compiles): diffmb given the initial state,
    # as mujoco.sysid is (single shooting, the parameters the only unknowns)
    info["diffmb_known_state"] = [run_diffmb(path, data, names, guess, truth,
                                             known_state=True) for _ in range(2)][-1]
    info["load_avg_1min_after"] = _load()
    a = min(runs["diffmb"], key=lambda r: r["wall_s"])
    b = min(runs["mujoco.sysid"], key=lambda r: r["wall_s"]) if runs["mujoco.sysid"] else None
    info["runs"] = runs
    info["best"] = {"diffmb": a, "mujoco.sysid": b}
    pv = lambda key: None if b is None else b[key]  # noqa: E731
    peer = "mujoco.sysid"
    res = {
        "fit_speed": case(1.0 / a["wall_s"], "fits/s", peer,
                          None if b is None else 1.0 / b["wall_s"],
                          wall_s=a["wall_s"], peer_wall_s=pv("wall_s"), n_params=len(names),
                          threads=a["n_threads"], peer_threads=pv("n_threads")),
        "rollouts": case(a["rollouts"], "rollouts", peer, pv("rollouts")),
        "iterations": case(a["iterations"], "iterations", peer, pv("iterations")),
        "max_rel_param_error": case(a["max_rel_error"], "1", peer, pv("max_rel_error")),
        "params_within_ci95": case(a["n_within_ci95"], "params", peer, pv("n_within_ci95"),
                                   n_params=len(names)),
        "compile_s": case(info["diffmb_compile_s"], "s", "none", None),
    }
    write_json(out / "bench_sysid.json", {"cases": res, "info": info})
    return res


# ----------------------------------------------------------------------------------------------
# Through contact: a cube thrown onto a floor
# ----------------------------------------------------------------------------------------------

CUBE_TRUTH = {"mu": 0.4, "timeconst": 0.02, "dampratio": 0.5}
CUBE_GUESS_FACTOR = {"mu": 0.75, "timeconst": 1.5, "dampratio": 1.4}
CUBE_NAMES = {"mu": "force.contacts.mu", "timeconst": "force.contacts.timeconst",
              "dampratio": "force.contacts.dampratio"}
CUBE_SIGMA = 1e-4  # noise on positions [m] and quaternion components
CUBE_DT = 0.002  # MuJoCo's step = the sample period [s]
CUBE_Q0 = (0.0, 0.0, 0.15, 1.0, 0.0, 0.0, 0.0)  # flat, its face 0.1 m above the floor
CUBE_V0 = (1.5, 0.0, 0.0, 0.0, 0.0, 0.0)  # thrown sideways at 1.5 m/s
CUBE_CONE = "pyramidal"  # MuJoCo's default friction cone
# diffmb's multiple shooting: segments of 20 ms (a single shot over the bounce and the slide
# stops in local minima of a rugged cost; docs/identification.md)
CUBE_SEGMENTS = 25
# the fit stops when a step moves each parameter by less than this share of its standard error
# (the further iterations refine the segments' states, or chase the small jumps of the cost)
CUBE_PTOL = 0.01


def cube_mjcf(mu: float, timeconst: float, dampratio: float, cone: str = None) -> str:
    """A 0.1 m, 1 kg cube on a free joint over a plane: MuJoCo's default (semi-implicit Euler)
    integrator at :data:`CUBE_DT`, friction cone ``cone`` (default :data:`CUBE_CONE`, MuJoCo's
    own default), both geoms with friction ``mu`` and solref (``timeconst``, ``dampratio``)
    (MuJoCo mixes equal values to themselves)."""
    sr = f'solref="{timeconst!r} {dampratio!r}"'
    cone = CUBE_CONE if cone is None else cone
    return f"""<mujoco model="thrown_cube"><option timestep="{CUBE_DT}" cone="{cone}"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="{mu!r}" {sr}/>
    <body name="cube" pos="0 0 0.15"><freejoint name="root"/>
      <geom name="cube" type="box" size="0.05 0.05 0.05" mass="1" friction="{mu!r}" {sr}/>
    </body>
  </worldbody>
</mujoco>"""


def cube_record(T: float = 0.5, seed: int = 0, truth=None, cone: str = None) -> dict:
    """MuJoCo's thrown cube (:data:`CUBE_Q0`, :data:`CUBE_V0`): it falls 0.1 m, lands flat,
    bounces, slides and stops; every step sampled, Gaussian noise :data:`CUBE_SIGMA` on the
    seven coordinates; ``cone`` as :func:`cube_mjcf`. ``{"t", "q", "q_true", "q0", "v0", "xml",
    "truth"}``."""
    import mujoco

    truth = dict(CUBE_TRUTH if truth is None else truth)
    xml = cube_mjcf(**truth, cone=cone)
    mj = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = CUBE_Q0, CUBE_V0
    n = int(round(T / CUBE_DT))
    q = np.zeros((n + 1, 7))
    q[0] = d.qpos
    for k in range(n):
        mujoco.mj_step(mj, d)
        q[k + 1] = d.qpos
    noisy = q + CUBE_SIGMA * np.random.default_rng(seed).standard_normal(q.shape)
    return {"t": np.arange(n + 1) * CUBE_DT, "q": noisy, "q_true": q,
            "q0": np.array(CUBE_Q0), "v0": np.array(CUBE_V0), "xml": xml, "truth": truth}


def cube_guess(truth=None) -> dict:
    truth = CUBE_TRUTH if truth is None else truth
    return {k: truth[k] * CUBE_GUESS_FACTOR[k] for k in truth}


def run_diffmb_cube(path, data, guess, max_steps: int = 200, backward_smoothing=None,
                    contacts="constraint", segments: int = CUBE_SEGMENTS,
                    ptol: float = CUBE_PTOL) -> dict:
    """diffmb's fit of (μ, T, ζ) on the cube record: the file's contact element
    (``contacts="constraint"``: MuJoCo's soft rows, on the pyramidal cone its whole contact
    model, the default; True: its solref mapped to a compliant spring), the implicit contact
    step at MuJoCo's step (MuJoCo's Euler step), weights 1/σ, exact forward-mode Jacobians;
    multiple shooting over ``segments`` segments, each segment's start an unknown (1: single
    shooting from the known initial state); it stops when a step moves each parameter by less
    than ``ptol`` of its standard error. Rollout-equivalents: per Jacobian 1 + the
    parameters + (multiple shooting) the 2 nv = 12 unknowns of each segment's state (each
    segment's own tangents run over that segment only: 12 over the record), each tangent
    over the record once; one per trial step."""
    import jax.numpy as jnp

    import diffmb
    from diffmb.io.mjcf import mjcf_forces
    from diffmb.optim import fit

    model = diffmb.load_mjcf(path)
    forces = {type(f).__name__.lower(): f for f in mjcf_forces(path, contacts=contacts)}
    if backward_smoothing is not None:
        forces["contacts"] = forces["contacts"].with_backward_smoothing(backward_smoothing)
    npair = len(forces["contacts"].pairs)
    names = [CUBE_NAMES[k] for k in guess]
    init = {CUBE_NAMES[k]: jnp.full(npair, v) for k, v in guess.items()}
    rec = {"t": data["t"], "q": data["q"], "q0": data["q0"], "v0": data["v0"]}
    how = (dict(shooting="single", initial_state="known") if segments == 1 else
           dict(shooting="multiple", segments=segments))
    t0 = time.perf_counter()
    res = fit(model, rec, names, forces=forces, init=init, max_steps=max_steps,
              simulate_kwargs={"dt": CUBE_DT, "solver": "implicit"},
              weights={"q": 1.0 / CUBE_SIGMA}, progress=False, ptol=ptol, **how)
    wall = time.perf_counter() - t0
    accepted = sum(1 for h in res.history[1:] if h.get("accepted"))
    trials = res.n_iter - (1 if res.message.startswith("converged (step below xtol)") else 0)
    tangents = len(names) + (0 if segments == 1 else 2 * model.nv)
    rollouts = (1 + accepted) * (tangents + 1) + trials
    est = {k: float(np.ravel(res.estimates[CUBE_NAMES[k]])[0]) for k in guess}
    half = {k: 1.959964 * float(np.ravel(res.std[CUBE_NAMES[k]])[0]) for k in guess}
    sim = diffmb.simulate(res.model, jnp.asarray(data["q0"]), jnp.asarray(data["v0"]),
                          t1=float(data["t"][-1]), dt=CUBE_DT, solver="implicit",
                          forces=tuple(res.forces.values()), saveat=jnp.asarray(data["t"]))
    err = np.linalg.norm(np.asarray(sim.q)[:, :3] - data["q_true"][:, :3], axis=1)
    return _summary("diffmb", wall, rollouts, res.n_iter, est, half, data["truth"],
                    success=res.success, message=res.message, jacobians=1 + accepted,
                    trial_residuals=trials, rms_position_error_m=float(np.sqrt(np.mean(err**2))),
                    backward_smoothing=backward_smoothing, contacts=contacts,
                    segments=segments, ptol=ptol)


def mujoco_cube_problem(data, guess, measured="q"):
    """(ParameterDict, residual_fn, rollout counter) of mujoco.sysid on the cube record
    (``data[measured]`` as the free joint's qpos, a state signal sampled at every step): the
    parameters written into both geoms of the spec (friction[0], solref), the initial state
    known."""
    import mujoco
    from mujoco import sysid

    def both_geoms(attr, i):
        def modify(spec, p):
            for g in ("floor", "cube"):
                v = list(getattr(spec.geom(g), attr))
                v[i] = float(p.value[0])
                setattr(spec.geom(g), attr, v)
        return modify

    where = {"mu": ("friction", 0), "timeconst": ("solref", 0), "dampratio": ("solref", 1)}
    spec = mujoco.MjSpec.from_string(cube_mjcf(**guess))
    mj = spec.compile()
    params = sysid.ParameterDict()
    for k, g in guess.items():
        params.add(sysid.Parameter(k, nominal=g, min_value=g / 4, max_value=g * 4,
                                   modifier=both_geoms(*where[k])))
    x0 = sysid.create_initial_state(mj, data["q0"], data["v0"], np.zeros(0))
    t = data["t"]
    ctrl = sysid.TimeSeries(t, np.zeros((t.size, 0)), {})
    q_ts = sysid.TimeSeries.from_names(t, data[measured], mj,
                                       [("cube", sysid.SignalType.MjStateQPos)])
    seq = sysid.ModelSequences("cube", spec, "throw", x0, ctrl, q_ts, allow_missing_sensors=True)
    return (params, *_counted_residual(sysid, seq))


def _counted_residual(sysid, seq):
    """mujoco.sysid's residual of ``seq`` and a dict counting the rollouts it simulates (one
    per column of a batched call)."""
    inner = sysid.build_residual_fn(models_sequences=[seq])
    count = {"rollouts": 0}

    def residual_fn(x, p, **kw):
        count["rollouts"] += 1 if np.ndim(x) == 1 else np.shape(x)[1]
        return inner(x, p, **kw)

    return residual_fn, count


def run_mujoco_cube(data, guess, max_iters: int = 100) -> dict:
    """mujoco.sysid on the cube record (:func:`mujoco_cube_problem`) with its defaults."""
    import logging

    from absl import logging as alog
    from mujoco import sysid

    level = alog.get_verbosity()
    alog.set_verbosity(alog.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        params, residual_fn, count = mujoco_cube_problem(data, guess)
        t0 = time.perf_counter()
        opt, out = sysid.optimize(params, residual_fn, optimizer="mujoco", max_iters=max_iters,
                                  output=io.StringIO())
        r_star, _, _ = residual_fn(out.x, opt)
        _, half = sysid.calculate_intervals(r_star, out.jac)
        wall = time.perf_counter() - t0
        n = count["rollouts"]
        est = {k: float(opt[k].value[0]) for k in guess}
        # (the residual writes x into the parameters it is given: a copy)
        r_true = residual_fn(np.array([data["truth"][k] for k in guess]), copy.deepcopy(opt))[0]
    finally:
        alog.set_verbosity(level)
    iters = len(out.extras.get("objective", [])) - 1
    return _summary("mujoco.sysid", wall, n, iters, est,
                    dict(zip(guess, map(float, half), strict=True)), data["truth"],
                    cost=float(np.sum(np.square(r_star))),
                    cost_at_truth=float(np.sum(np.square(r_true))),
                    n_threads=os.cpu_count() or 1)


def compare_cube(out, T: float = 0.5, reps: int = 1) -> dict:
    """The thrown cube given to both tools (see the module docstring); writes
    ``out/bench_sysid_cube.json``, returns its cases (``cube_*``)."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = cube_record(T)
    guess = cube_guess()
    path = out / "thrown_cube.xml"
    path.write_text(data["xml"])
    info = {"truth": data["truth"], "guess": guess, "T_s": T, "dt_s": CUBE_DT,
            "sigma": CUBE_SIGMA, "samples": int(data["t"].size), "load_avg_1min": _load()}
    run_diffmb_cube(path, data, guess, max_steps=1)  # compiles
    runs = {"diffmb": [], "mujoco.sysid": []}
    for _ in range(reps):
        runs["diffmb"].append(run_diffmb_cube(path, data, guess))
        try:
            runs["mujoco.sysid"].append(run_mujoco_cube(data, guess))
        except Exception as e:  # noqa: BLE001 - a failing or missing peer reports null
            info["mujoco_error"] = repr(e)
    info["load_avg_1min_after"] = _load()
    a = min(runs["diffmb"], key=lambda r: r["wall_s"])
    b = min(runs["mujoco.sysid"], key=lambda r: r["wall_s"]) if runs["mujoco.sysid"] else None
    info["best"] = {"diffmb": a, "mujoco.sysid": b}
    pv = lambda key: None if b is None else b[key]  # noqa: E731
    peer = "mujoco.sysid"
    res = {
        "cube_rollouts": case(a["rollouts"], "rollouts", peer, pv("rollouts")),
        "cube_max_rel_param_error": case(a["max_rel_error"], "1", peer, pv("max_rel_error"),
                                         params=list(guess)),
        "cube_params_within_ci95": case(a["n_within_ci95"], "params", peer,
                                        pv("n_within_ci95"), n_params=len(guess)),
        "cube_fit_speed": case(1.0 / a["wall_s"], "fits/s", peer,
                               None if b is None else 1.0 / b["wall_s"], wall_s=a["wall_s"],
                               peer_wall_s=pv("wall_s")),
    }
    write_json(out / "bench_sysid_cube.json", {"cases": res, "info": info})
    return res


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return None


if __name__ == "__main__":
    sys.exit(main_for("sysid", run))
