"""Study ``excitation``: an optimal torque input for identifying a UR5's link masses and joint
damping that narrows EVERY parameter's confidence interval against a hand-made sum of sines at
the same record length, limits and noise.

Robot: the UR5 of example-robot-data (``diffmb/assets/ur5_robot.urdf``, BSD), as in the
``arm`` study, reduced to three joints to keep the design cheap: ``shoulder_lift_joint``,
``elbow_joint`` and ``wrist_1_joint`` move (three parallel horizontal axes: a planar triple
pendulum); ``shoulder_pan_joint``, ``wrist_2_joint`` and ``wrist_3_joint`` are locked at 0
(written as fixed joints of the URDF; their links stay on as rigid bodies). The arm is
**ceiling-mounted** (gravity +9.81 m/s² along the base z axis), so it hangs at the stable
equilibrium q_eq = (−π/2, 0, −π/2) and an open-loop torque input makes it swing about it
instead of falling: the input is exactly the knot table, with no feedback law in between.

"True" arm: link masses = URDF × :data:`TRUE_MASS_FACTOR`, viscous damping
:data:`TRUE_DAMPING`. Parameters identified (6): the masses of ``upper_arm_link``,
``forearm_link``, ``wrist_1_link`` and the damping of the three joints. The design and the
fits start from the nominal arm (URDF masses, damping 1 N m s/rad): the design is locally
optimal at the nominal values, as it would be before an experiment.

Experiment: from rest at q_eq, record length :data:`T_FULL` s (quick: :data:`T_QUICK`),
joint angles sampled at 100 Hz with white Gaussian noise σ_q = :data:`SIGMA_Q` rad, torques
known. Limits: |τ| ≤ :data:`TORQUE_LIMITS` N m (within the UR5's efforts 150/150/28 N m), joint
angles within q_eq ± :data:`JOINT_RANGE` rad. Both inputs are piecewise-linear torque tables
simulated by RK4 at :data:`DT` s.

* Sine: per joint a hand-chosen sum of two sines (frequencies near and above the arm's
  pendulum modes, 1.38, 0.62 and 0.14 Hz), sampled every 10 ms, each joint's amplitude scaled
  down from its torque limit until the simulated angles use at most 90 % of the joint range.
  Three hand tuning rules (:func:`sine_excitation`: balanced, lift-first, wrist-first); the
  baseline is the one of largest log det F_s (:func:`sine_baseline`), the strongest by the
  measure the design optimises (lift-first at 3 and 4 s: it leaves the wrist no torque of its
  own, yet beats the balanced rule on five of the six predicted intervals).
* Optimal: :func:`diffmb.optim.design_excitation`, D-criterion (log det of the Fisher
  information in relative coordinates, initial state marginalised since the fit estimates it)
  with ``reference=`` the sine's information and ``max_std_ratio=`` :data:`MAX_STD_RATIO`:
  every predicted standard error at most 0.8 × the sine's (plain D-optimality trades
  parameters: on this arm it narrows the mean interval but widens three of the six).
  Knots every 0.05 s, Adam started from the sine sampled at the knots.

Identification: :func:`diffmb.optim.fit` (single shooting, LM, the initial state estimated
too) of both noisy records, from the nominal arm; confidence intervals ±1.96 std of the fit.
"""

from __future__ import annotations

import json
import pathlib
import re
import tempfile
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import diffmb

from ..controls import piecewise_linear
from ..forces.elements import JointDamping
from ..optim import design_excitation, fisher_information, fit, set_params

__all__ = ["reproduce", "load_arm3", "sine_excitation", "sine_baseline", "PARAMS", "TRUE_DAMPING",
           "TRUE_MASS_FACTOR", "SIGMA_Q", "TORQUE_LIMITS", "JOINT_RANGE"]

ASSETS = pathlib.Path(__file__).resolve().parents[1] / "assets"
URDF = ASSETS / "ur5_robot.urdf"
LOCKED = ("shoulder_pan_joint", "wrist_2_joint", "wrist_3_joint")
JOINTS = ("shoulder_lift_joint", "elbow_joint", "wrist_1_joint")
LINKS = ("upper_arm_link", "forearm_link", "wrist_1_link")
PARAMS = [f"body.{b}.mass" for b in LINKS] + [f"joint.{j}.damping" for j in JOINTS]
TRUE_MASS_FACTOR = np.array([1.08, 0.93, 1.10])
TRUE_DAMPING = np.array([2.5, 1.5, 0.5])  # N m s/rad
NOMINAL_DAMPING = 1.0
Q_EQ = np.array([-np.pi / 2, 0.0, -np.pi / 2])
TORQUE_LIMITS = np.array([25.0, 12.0, 2.0])  # N m
JOINT_RANGE = 0.8  # rad either side of q_eq
SIGMA_Q = 1e-3  # rad
SAMPLE_DT = 0.01  # s (100 Hz)
DT = 0.005  # s, RK4
T_FULL, T_QUICK = 4.0, 3.0
KNOT_DT = 0.05  # s between design knots (the sine sampled at them is close to the sine)
MAX_STD_RATIO = 0.8  # design bound: every predicted std <= this x the sine's (margin: the fit is at the true arm, the design at the nominal)
STEPS_FULL, LR_FULL = 60, 0.1
STEPS_QUICK, LR_QUICK = 20, 0.1
# hand-made sine: (frequency Hz, relative amplitude, phase) pairs per joint
SINES = (((0.9, 1.0, 0.0), (1.9, 0.5, 1.0)),
         ((0.7, 1.0, 0.5), (1.6, 0.5, 2.0)),
         ((0.3, 1.0, 1.0), (0.8, 0.5, 0.3)))


def load_arm3(mass_factor=TRUE_MASS_FACTOR, damping=TRUE_DAMPING):
    """The 3-joint, ceiling-mounted UR5 (see the module docstring) with link masses = URDF ×
    ``mass_factor`` and joint damping ``damping``; ``load_arm3(np.ones(3), np.ones(3))`` is the
    nominal arm."""
    txt = URDF.read_text()
    for j in LOCKED:
        txt, n = re.subn(rf'(<joint name="{j}" type=")revolute(")', r"\1fixed\2", txt)
        if n != 1:
            raise RuntimeError(f"{URDF}: joint {j!r} not found as a revolute joint")
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "ur5_3dof.urdf"
        path.write_text(txt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the file's harmless inertia remarks
            m = diffmb.load_urdf(path, gravity=(0.0, 0.0, 9.81))
    assert m.joint_names == JOINTS, m.joint_names
    vals = {f"joint.{j}.damping": float(d) for j, d in zip(JOINTS, damping, strict=True)}
    vals.update({f"body.{b}.mass": float(m.body_mass[m.body_index(b)]) * float(f)
                 for b, f in zip(LINKS, mass_factor, strict=True)})
    return set_params(m, vals)


def _sine_shape(t):
    """(n, 3) unit-amplitude hand-made sine torques (max |.| over a period normalised to 1)."""
    out = np.zeros((t.size, 3))
    for j, comps in enumerate(SINES):
        for f, a, ph in comps:
            out[:, j] += a * np.sin(2 * np.pi * f * t + ph) - a * np.sin(ph)  # starts at 0
    return out / np.abs(out).max(axis=0)


SINE_RULES = ("balanced", "lift-first", "wrist-first")


def sine_excitation(model, t1, rule="balanced"):
    """(table, scale (3,)): the hand-made sine as a 10 ms piecewise-linear table; joint j's
    amplitude is its torque limit times ``scale[j]`` ≤ 1, as large as the simulated angles
    allow within 90 % of the joint range (each bisection: 10 halvings). ``rule``:

    * ``"balanced"``: each joint driven alone is scaled until its own swing reaches that
      bound; the three scales are multiplied by one common factor until the three together
      stay within it; then each joint in turn (wrist, elbow, lift) is raised again as far as
      the bound allows, the others held. Every joint gets torque of its own.
    * ``"lift-first"`` / ``"wrist-first"``: joint by joint (lift, elbow, wrist or the
      reverse), each raised as far as the bound allows with the earlier ones held, two sweeps.
      Lift-first may leave the wrist, swung by the other two, with no torque of its own.
    """
    ts = np.round(np.arange(0.0, t1 + 1e-9, 0.01), 12)
    shape = _sine_shape(ts) * TORQUE_LIMITS

    def fits(sc):
        tr = diffmb.simulate(model, Q_EQ, np.zeros(3), t1=t1, dt=DT, forces=(JointDamping(),),
                             control=piecewise_linear(ts, sc * shape))
        return float(np.abs(np.asarray(tr.q) - Q_EQ).max()) <= 0.9 * JOINT_RANGE

    def largest(make, lo, hi, n=10):
        """largest x in [lo, hi] with fits(make(x)) (fits(make(lo)) holds), by bisection."""
        if fits(make(hi)):
            return hi
        for _ in range(n):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if fits(make(mid)) else (lo, mid)
        return lo

    def raised(scale, j, lo):
        return largest(lambda x: np.where(np.arange(3) == j, x, scale), lo, 1.0)

    if rule == "balanced":
        solo = np.array([largest(lambda x, j=j: np.eye(3)[j] * x, 0.0, 1.0) for j in range(3)])
        scale = largest(lambda a: a * solo, 0.0, 1.0) * solo
        for j in (2, 1, 0):
            scale[j] = raised(scale, j, scale[j])
    elif rule in ("lift-first", "wrist-first"):
        scale = np.zeros(3)
        for _ in range(2):
            for j in ((0, 1, 2) if rule == "lift-first" else (2, 1, 0)):
                scale[j] = 0.0
                scale[j] = raised(scale, j, 0.0)
    else:
        raise ValueError(f"rule must be one of {SINE_RULES}, got {rule!r}")
    return piecewise_linear(ts, scale * shape), scale


def sine_baseline(model, t1, fim_kw):
    """The hand-made baseline: of the sines of the three tuning rules (:data:`SINE_RULES`),
    the one of largest log det F_s (the design's own criterion, so the baseline is as strong
    as hand tuning gets by the measure the design optimises). Returns (table, scale, rule, F_s,
    {rule: log det F_s})."""
    best, logdets = None, {}
    for rule in SINE_RULES:
        table, scale = sine_excitation(model, t1, rule)
        F = np.asarray(fisher_information(model, PARAMS, table, **fim_kw))
        logdets[rule] = float(np.linalg.slogdet(F)[1])
        if best is None or logdets[rule] > logdets[best[2]]:
            best = (table, scale, rule, F)
    return (*best, logdets)


def _record(true, control, t1, seed):
    ts = np.round(np.arange(0.0, t1 + 1e-9, SAMPLE_DT), 12)
    tr = diffmb.simulate(true, Q_EQ, np.zeros(3), t1=t1, dt=DT, forces=(JointDamping(),),
                         control=control, saveat=ts)
    rng = np.random.default_rng(seed)
    return ts, np.asarray(tr.q) + SIGMA_Q * rng.standard_normal((ts.size, 3))


def _identify(nominal, true, control, t1, seed):
    ts, qm = _record(true, control, t1, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fit(nominal, {"t": ts, "q": qm}, PARAMS, forces=(JointDamping(),),
                  simulate_kwargs={"dt": DT, "control": control}, weights={"q": 1.0 / SIGMA_Q},
                  max_steps=40, progress=False)
    truth = _truth(true)
    est = {n: float(res.estimates[n]) for n in PARAMS}
    std = {n: float(res.std[n]) for n in PARAMS}
    inside = {n: bool(abs(est[n] - truth[n]) <= 1.96 * std[n]) for n in PARAMS}
    return res, ts, qm, est, std, inside


def _truth(model):
    return {n: float(np.asarray(v)) for n, v in diffmb.optim.get_params(model, PARAMS).items()}


def reproduce(out_dir: pathlib.Path, quick: bool = False) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t1 = T_QUICK if quick else T_FULL
    steps, lr = (STEPS_QUICK, LR_QUICK) if quick else (STEPS_FULL, LR_FULL)
    n_knots = int(round(t1 / KNOT_DT)) + 1
    nominal = load_arm3(np.ones(3), np.full(3, NOMINAL_DAMPING))
    true = load_arm3()
    clock = time.perf_counter()

    kw = dict(q0=Q_EQ, t1=t1, dt=DT, sample_dt=SAMPLE_DT, noise_std=SIGMA_Q,
              forces=(JointDamping(),))
    sine, scale, rule, F_sine, sine_logdets = sine_baseline(nominal, t1, kw)
    knot_ts = np.linspace(0.0, t1, n_knots)
    init = np.clip(np.asarray(jax.vmap(sine)(jnp.asarray(knot_ts))), -0.98 * TORQUE_LIMITS,
                   0.98 * TORQUE_LIMITS)
    design = design_excitation(
        nominal, PARAMS, n_knots=n_knots, torque_limits=(-TORQUE_LIMITS, TORQUE_LIMITS),
        joint_limits=(Q_EQ - JOINT_RANGE, Q_EQ + JOINT_RANGE), criterion="D", init=init,
        reference=F_sine, max_std_ratio=MAX_STD_RATIO, steps=steps, learning_rate=lr,
        progress=True, **kw)
    t_design = time.perf_counter() - clock
    F_opt = np.asarray(design.fim)
    n = len(PARAMS)
    p_nom = np.array([_truth(nominal)[k] for k in PARAMS])
    pred = {"sine": p_nom * np.sqrt(np.diag(np.linalg.inv(F_sine))),
            "optimal": p_nom * np.sqrt(np.diag(np.linalg.inv(F_opt)))}

    clock = time.perf_counter()
    truth = _truth(true)
    runs = {}
    for key, ctrl, seed in (("sine", sine, 1), ("optimal", design.control, 2)):
        res, ts, qm, est, std, inside = _identify(nominal, true, ctrl, t1, seed)
        tr = diffmb.simulate(true, Q_EQ, np.zeros(3), t1=t1, dt=DT, forces=(JointDamping(),),
                             control=ctrl)
        F = F_sine if key == "sine" else F_opt
        runs[key] = {
            "criterion": float(np.linalg.slogdet(F)[1]),
            "std": std, "estimates": est, "truth_within_ci": inside,
            "predicted_std": dict(zip(PARAMS, pred[key].tolist(), strict=True)),
            "ci_95": {k: [est[k] - 1.96 * std[k], est[k] + 1.96 * std[k]] for k in PARAMS},
            "det_F_pow": float(np.exp(-np.linalg.slogdet(F)[1] / (2 * n))),
            "max_abs_torque_Nm": np.abs(np.asarray(jax.vmap(ctrl)(jnp.asarray(tr.ts)))).max(
                axis=0).tolist(),
            "max_joint_excursion_rad": np.abs(np.asarray(tr.q) - Q_EQ).max(axis=0).tolist(),
            "fit": {"success": bool(res.success), "iterations": res.n_iter, "s2": res.s2,
                    "message": res.message},
            "_traj": tr, "_ctrl": ctrl,
        }
    t_fit = time.perf_counter() - clock
    ci_ratio = {k: runs["optimal"]["std"][k] / runs["sine"]["std"][k] for k in PARAMS}
    pred_ratio = {k: float(pred["optimal"][i] / pred["sine"][i]) for i, k in enumerate(PARAMS)}
    det_ratio = runs["optimal"]["det_F_pow"] / runs["sine"]["det_F_pow"]

    _figures(plt, out_dir, runs, design, truth, t1, quick)
    results = {
        "robot": "UR5, example-robot-data ur_description/urdf/ur5_robot.urdf (BSD); joints "
                 f"{list(JOINTS)} move, {list(LOCKED)} locked at 0; ceiling-mounted",
        "parameters": PARAMS,
        "truth": truth,
        "nominal": dict(zip(PARAMS, p_nom.tolist(), strict=True)),
        "sine": {k: v for k, v in runs["sine"].items() if not k.startswith("_")}
        | {"amplitude_scale": scale.tolist(), "tuning_rule": rule,
           "candidates_logdet": sine_logdets},
        "optimal": {k: v for k, v in runs["optimal"].items() if not k.startswith("_")}
        | {"criterion_initial": design.criterion_before, "steps": steps,
           "best_step": design.best_step, "n_knots": n_knots, "learning_rate": lr,
           "max_std_ratio_target": MAX_STD_RATIO,
           "meets_target_predicted": design.meets_reference,
           "joint_violation_rad": design.joint_violation},
        "ci_ratio": ci_ratio,
        "predicted_ci_ratio": pred_ratio,
        "det_ratio": det_ratio,
        "all_narrower": {"fitted": bool(all(v < 1.0 for v in ci_ratio.values())),
                         "predicted": bool(all(v < 1.0 for v in pred_ratio.values()))},
        "criterion": "D with a bound: maximise log det F_s (F_s = Fisher information in "
                     "relative coordinates, columns scaled by |p|, initial state "
                     "marginalised) subject to every predicted std <= "
                     f"{MAX_STD_RATIO:g} x the sine's (smooth penalty; the design returned "
                     "is the best iterate meeting it)",
        "record_s": t1,
        "noise_std": SIGMA_Q,
        "sample_rate_Hz": 1.0 / SAMPLE_DT,
        "torque_limits_Nm": dict(zip(JOINTS, TORQUE_LIMITS.tolist(), strict=True)),
        "joint_limits_rad": {j: [float(Q_EQ[i] - JOINT_RANGE), float(Q_EQ[i] + JOINT_RANGE)]
                             for i, j in enumerate(JOINTS)},
        "seconds": {"design": t_design, "fits": t_fit},
        "quick": bool(quick),
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    (out_dir / "report.md").write_text(_report(results, quick))
    return results


def _figures(plt, out_dir, runs, design, truth, t1, quick):
    dpi = 70 if quick else 110
    fig, axs = plt.subplots(2, 3, figsize=(11, 5.5), sharex=True)
    for key, style in (("sine", "-"), ("optimal", "-")):
        tr, ctrl = runs[key]["_traj"], runs[key]["_ctrl"]
        ts = np.asarray(tr.ts)
        u = np.asarray(jax.vmap(ctrl)(jnp.asarray(ts)))
        q = np.asarray(tr.q)
        for j in range(3):
            axs[0, j].plot(ts, u[:, j], style, lw=1.1, label=key)
            axs[1, j].plot(ts, q[:, j] - Q_EQ[j], style, lw=1.1, label=key)
    for j in range(3):
        axs[0, j].plot(design.knot_ts, design.knots[:, j], "o", ms=2.5, color="C1")
        for s in (-1, 1):
            axs[0, j].axhline(s * TORQUE_LIMITS[j], color="k", ls="--", lw=0.8)
            axs[1, j].axhline(s * JOINT_RANGE, color="k", ls="--", lw=0.8)
        axs[0, j].set_title(JOINTS[j], fontsize=9)
        axs[1, j].set_xlabel("t [s]")
        for a in axs[:, j]:
            a.grid(alpha=0.3)
    axs[0, 0].set_ylabel("torque [N m]")
    axs[1, 0].set_ylabel("q − q_eq [rad]")
    axs[0, 0].legend(fontsize=8)
    fig.suptitle("Excitation: hand-made sine vs D-optimal knots (dashed: limits; dots: knots)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "excitation_inputs.png", dpi=dpi)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    y = np.arange(len(PARAMS))
    for off, key, c in ((-0.15, "sine", "C0"), (0.15, "optimal", "C1")):
        est = np.array([runs[key]["estimates"][k] for k in PARAMS])
        std = np.array([runs[key]["std"][k] for k in PARAMS])
        tv = np.array([truth[k] for k in PARAMS])
        ax.errorbar(100 * (est - tv) / tv, y + off, xerr=100 * 1.96 * std / tv, fmt="o",
                    color=c, capsize=3, label=f"{key} (estimate ± 1.96 std)")
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels([p.replace("body.", "").replace("joint.", "") for p in PARAMS],
                       fontsize=8)
    ax.set_xlabel("error relative to the truth [%]")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "excitation_ci.png", dpi=dpi)
    plt.close(fig)

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    h = design.history
    ax.plot([x["step"] for x in h], [x["criterion"] for x in h], "-", label="log det F_s")
    feas = [x for x in h if x["violation"] <= 0.0]
    ax.plot([x["step"] for x in feas], [x["criterion"] for x in feas], ".", ms=4,
            label="iterates within the joint limits")
    ax2.plot([x["step"] for x in h], [x.get("max_std_ratio", np.nan) for x in h], "-",
             color="C2", label="largest predicted std ratio (design / sine)")
    ax2.axhline(MAX_STD_RATIO, color="k", ls="--", lw=0.8, label="bound")
    for a in (ax, ax2):
        a.axvline(design.best_step, color="k", ls=":", lw=0.8, label="returned")
        a.set_xlabel("Adam step")
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    ax.set_ylabel("D-criterion")
    ax2.set_ylabel("max_i σ_i / σ_sine,i")
    fig.tight_layout()
    fig.savefig(out_dir / "excitation_design.png", dpi=dpi)
    plt.close(fig)


def _report(r, quick) -> str:
    s, o = r["sine"], r["optimal"]
    rows = []
    for k in r["parameters"]:
        rows.append(
            f"| {k} | {r['truth'][k]:.5g} | {s['estimates'][k]:.5g} ± {1.96 * s['std'][k]:.3g} | "
            f"{o['estimates'][k]:.5g} ± {1.96 * o['std'][k]:.3g} | {r['ci_ratio'][k]:.3f} | "
            f"{r['predicted_ci_ratio'][k]:.3f} | {'yes' if s['truth_within_ci'][k] else 'no'} / "
            f"{'yes' if o['truth_within_ci'][k] else 'no'} |")
    rows = "\n".join(rows)
    lim = ", ".join(f"{j}: ±{v:g}" for j, v in r["torque_limits_Nm"].items())
    return f"""# Study `excitation`: optimal excitation of a UR5 for identification

Robot: {r['robot']} (gravity +9.81 m/s² along the base z axis: it hangs at q_eq = (−π/2, 0,
−π/2) and swings about it under open-loop torques). Parameters: {', '.join(r['parameters'])}.
The true arm's masses are the URDF's × {TRUE_MASS_FACTOR.tolist()}, its damping
{TRUE_DAMPING.tolist()} N m s/rad; the design and both fits start from the nominal arm (URDF
masses, damping {NOMINAL_DAMPING:g} N m s/rad).
{'Quick run: ' if quick else 'Full run: '}record {r['record_s']:g} s, {o['n_knots']} design
knots, {o['steps']} Adam steps (learning rate {o['learning_rate']:g}){f' (the full run: {T_FULL:g} s, {int(round(T_FULL / KNOT_DT)) + 1} knots, {STEPS_FULL} steps)' if quick else ''}.

## Experiment (the same for both inputs)

From rest at q_eq; angles sampled at {r['sample_rate_Hz']:g} Hz with white Gaussian noise
σ_q = {r['noise_std']:g} rad; torques known; RK4 at {DT * 1e3:g} ms. Torque limits [N m]:
{lim}; joint limits q_eq ± {JOINT_RANGE:g} rad.

* **Sine** (hand-made): per joint two sines (frequencies {[[c[0] for c in cs] for cs in SINES]}
  Hz, near and above the pendulum modes 1.38, 0.62, 0.14 Hz of the hanging arm), normalised to
  the torque limit and scaled per joint so that the angles use at most 90 % of the joint
  range. Three hand tuning rules were tried (log det F_s: {', '.join(f'{k} {v:.2f}' for k, v in s['candidates_logdet'].items())}):
  "balanced" gives every joint torque of its own, "lift-first"/"wrist-first" raise the joints
  one after the other. The baseline is the most informative by the design's own measure,
  **{s['tuning_rule']}**, scales {', '.join(f'{x:.3f}' for x in s['amplitude_scale'])}
  (× the torque limits).
* **Optimal**: `diffmb.optim.design_excitation` with `reference=` the sine's information:
  maximise D = log det F_s subject to every predicted standard error ≤ {o['max_std_ratio_target']:g} ×
  the sine's (a smooth penalty on log(σᵢ/σ_sine,i) − log {o['max_std_ratio_target']:g}; the design
  returned is the best iterate meeting the bound and the joint limits: met =
  {o['meets_target_predicted']}). Plain D-optimality would trade parameters against each other
  (a wider interval on one paid by narrower ones). F_s is the
  Fisher information JᵀΣ⁻¹J of the six parameters in relative coordinates (columns of
  J = ∂q(t_k)/∂p multiplied by |p|; J by `jax.jacfwd` through `simulate`) with the initial state
  marginalised (Schur complement), since the fit estimates it. Piecewise-linear torque knots
  every {KNOT_DT:g} s, each u = lo + (hi − lo)σ(z): the torque limits hold exactly at every
  time. Joint limits: a quadratic penalty on the simulated q at every RK4 step, starting 5 %
  of the range inside the limits; the returned design is the best Adam iterate whose
  trajectory stays within them (largest violation {o['joint_violation_rad']:.2g} rad). Adam
  (cosine decay), gradients by reverse mode through the forward-mode
  Jacobian, started from the sine sampled at the knots (log det F_s = {o['criterion_initial']:.3f}).
  Design at the nominal parameters: locally optimal, as before a real experiment.

| | sine | optimal |
|---|---|---|
| D-criterion log det F_s | {s['criterion']:.3f} | {o['criterion']:.3f} |
| det F_s^(−1/(2n)) (geometric mean relative std) | {s['det_F_pow']:.3g} | {o['det_F_pow']:.3g} |
| max abs torque [N m] | {', '.join(f'{x:.3g}' for x in s['max_abs_torque_Nm'])} | {', '.join(f'{x:.3g}' for x in o['max_abs_torque_Nm'])} |
| max excursion from q_eq [rad] (limit {JOINT_RANGE:g}) | {', '.join(f'{x:.3g}' for x in s['max_joint_excursion_rad'])} | {', '.join(f'{x:.3g}' for x in o['max_joint_excursion_rad'])} |
| fit: iterations, s² | {s['fit']['iterations']}, {s['fit']['s2']:.3f} | {o['fit']['iterations']}, {o['fit']['s2']:.3f} |

Ratio of det F_s^(−1/(2n)), optimal / sine: **{r['det_ratio']:.3f}**. Every interval
narrower with the optimal input: predicted (Cramér–Rao) **{'yes' if r['all_narrower']['predicted'] else 'no'}**
(largest ratio {max(r['predicted_ci_ratio'].values()):.3f}), fitted **{'yes' if r['all_narrower']['fitted'] else 'no'}**
(largest ratio {max(r['ci_ratio'].values()):.3f}).

![inputs](excitation_inputs.png)

## Identification and confidence intervals

Each record (true arm, its own noise draw) is fitted by `diffmb.optim.fit` (output error,
single shooting, Levenberg–Marquardt, initial state estimated) from the nominal arm. 95 %
intervals = estimate ± 1.96 std of the fit (s²(JᵀJ)⁻¹).

| parameter | truth | sine: estimate ± 1.96 std | optimal: estimate ± 1.96 std | CI width ratio (opt/sine) | predicted ratio (FIM) | truth within CI (sine / optimal) |
|---|---|---|---|---|---|---|
{rows}

![ci](excitation_ci.png)

![design](excitation_design.png)

## Assumptions

White Gaussian angle noise of known level; torques known exactly; the model structure is
right; the design is optimal near the nominal parameters only (a locally D-optimal design);
the joint limits are checked on the simulated nominal arm at every RK4 step (the true arm's
excursions are in the table above). Ratios below 1 mean narrower intervals with the optimal
input.
"""
