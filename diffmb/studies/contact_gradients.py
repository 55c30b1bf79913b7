"""Study ``contact-gradients``: are gradients through contact right, and what helps where not.

Three problems with closed-form gradients, each simulated with diffmb's compliant contacts:

* **Bounce once** (Zhong, Han and Brikis 2022, "Differentiable physics simulations with contacts:
  do they have correct gradients w.r.t. position, velocity and control?", arXiv 2207.05060,
  task 1): a ball (radius 0.1 m, 1 kg, no gravity, no friction) from (x, z) = (−1, 1) m at
  (2, −2) m/s bounces once on the floor; the loss is its height after T = 1 s. Rigid elastic
  contact: ∂z_T/∂z₀ = −1, ∂z_T/∂ż₀ = −T. With a linear spring k (no damping, restitution 1)
  the ball stays in contact for τ = π √(m/k) and ∂z_T/∂ż₀ = −(T − τ) (z_T = r + |ż₀| (T − t_c
  − τ), t_c = (z₀ − r)/|ż₀|).
* **Two balls** (the same paper's task 3 scene as reported in nimblephysics issue #97): two
  1 kg balls of radius 0.1 m on a line, x₁ = 0 at v₀ = 1 m/s, x₂ = 0.52 m at u₀ = 0, elastic,
  no friction; the loss is x₂ at T = 1 s. Rigid: (1, 0, T, 0) with respect to (x₁, x₂, v₀,
  u₀); a linear spring between equal masses exchanges the velocities exactly after a contact
  of τ = π √(m/(2k)), and x₂(T) = x₁ + 2r + v₀ T − (v₀ − u₀) τ/2: gradient (1, 0, T − τ/2,
  τ/2).
* **Landing ball**: a 1 kg ball of radius 0.1 m dropped from centre height h = 0.3 m while moving
  sideways at v₀ = 1 m/s lands on a floor with stiction (μ = 0.5), slides and rolls on at
  5/7 v₀. The loss is x after 0.6 s. Its derivative with respect to h: a later touch-down keeps the
  full speed longer, ∂x/∂h = (2/7) v₀ ∂t_land/∂h = (2/7) v₀ / (g t_land), t_land = √(2 (h − r)/g).

Each gradient is taken at the paper's configuration and over the touch-down's phase within a time
step (the initial position shifted by a fraction of one step's travel: 16 shifts). A fixed-step
simulation's final state is piecewise smooth in that shift, with a jump or a kink each time the
touch-down crosses a step, so its exact gradient swings from shift to shift about the true one.
The study reports the mean and the spread of each estimator over the shifts against the closed
form. The estimators are the exact reverse-mode gradient, the
contact element's ``backward_smoothing`` (contacts from distance in the backward pass only, the
forward run unchanged), and the Gaussian-smoothed zeroth-order, first-order and α-order
estimates of :func:`diffmb.optim.smoothed_gradient` (Suh et al. 2022).
"""

from __future__ import annotations

import json
import math
import pathlib
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import diffmb

from ..contacts import Contacts, CoulombContacts, Plane, Sphere

R, MASS, K_ZHONG = 0.1, 1.0, 1.0e4  # the paper's radius, mass and compliant stiffness
T_ZHONG, DT_ZHONG = 1.0, 1.0 / 480.0  # the paper's horizon and step (480 steps)
SHIFTS = 16  # touch-down phases per step
# published gradients for the two scenes, with their sources
PUBLISHED = {
    "bounce_once": {"source": "Zhong et al. 2022 repository (diff_sim_grads), task 1 notebook "
                              "output: convex-optimisation model (DiffCoSim) with time of impact",
                    "dz_dz0": -1.0, "dz_dvz0": -0.99559},
    "two_balls": {"source": "nimblephysics issue #97 (the task 3 scene): Nimble's LCP gradients",
                  "grad": [0.75, 0.25, 0.91, 0.08]},
}
H0, V0, MU, T_LAND_RUN, DT_LAND = 0.3, 1.0, 0.5, 0.6, 1e-3
# backward-smoothing widths [m]: about a fifth of the distance closed in one step
W_BOUNCE, W_TWO, W_LAND = 8e-4, 4e-4, 1e-3


def _model(xml: str):
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "m.xml"
        p.write_text(xml)
        return diffmb.load_mjcf(p)


def _slides(bodies, axes, gravity):
    """Balls on slide joints: ``bodies`` names, ``axes`` per body (e.g. ("1 0 0",))."""
    xml = [f'<mujoco><option gravity="{gravity}"/><worldbody>']
    for b in bodies:
        xml.append(f'<body name="{b}">')
        xml += [f'<joint name="{b}_{i}" type="slide" axis="{a}"/>' for i, a in enumerate(axes)]
        xml.append(f'<geom type="sphere" size="{R}" mass="{MASS}"/></body>')
    return _model("".join(xml) + "</worldbody></mujoco>")


def bounce_once_closed_form(k=K_ZHONG, T=T_ZHONG) -> dict:
    tau = math.pi * math.sqrt(MASS / k)
    return {"rigid": {"dz_dz0": -1.0, "dz_dvz0": -T},
            "compliant": {"dz_dz0": -1.0, "dz_dvz0": -(T - tau)}, "contact_time_s": tau}


def two_balls_closed_form(k=K_ZHONG, T=T_ZHONG) -> dict:
    tau = math.pi * math.sqrt(MASS / (2.0 * k))
    return {"rigid": [1.0, 0.0, T, 0.0], "compliant": [1.0, 0.0, T - tau / 2, tau / 2],
            "contact_time_s": tau}


def landing_closed_form(h=H0, v0=V0, g=9.81) -> float:
    return (2.0 / 7.0) * v0 / (g * math.sqrt(2.0 * (h - R) / g))


def bounce_once_loss(dt=DT_ZHONG, width=None, solver="rk4"):
    """z_T as a function of (x₀, z₀, ẋ₀, ż₀)."""
    m = _slides(["ball"], ("1 0 0", "0 0 1"), "0 0 0")
    c = CoulombContacts([Sphere("ball", R)], Plane(), model=m, stiffness=K_ZHONG, damping=0.0,
                        mu=0.0, backward_smoothing=width)

    def loss(p):
        tr = diffmb.simulate(m, p[:2], p[2:], t1=T_ZHONG, dt=dt, forces=(c,), solver=solver)
        return tr.q[-1, 1]

    return loss


def two_balls_loss(dt=DT_ZHONG, width=None, solver="rk4"):
    """x₂(T) as a function of (x₁, x₂, v₀, u₀)."""
    m = _slides(["blue", "green"], ("1 0 0",), "0 0 0")
    c = CoulombContacts([Sphere("blue", R)], [Sphere("green", R)], model=m, stiffness=K_ZHONG,
                        damping=0.0, mu=0.0, backward_smoothing=width)

    def loss(p):
        tr = diffmb.simulate(m, p[:2], p[2:], t1=T_ZHONG, dt=dt, forces=(c,), solver=solver)
        return tr.q[-1, 1]

    return loss


def landing_loss(width=None, solver="rk4", dt=DT_LAND):
    """x after 0.6 s as a function of the drop height h (a 1-vector)."""
    m = _model('<mujoco><option gravity="0 0 -9.81"/><worldbody><body name="ball"><freejoint/>'
               f'<geom type="sphere" size="{R}" mass="{MASS}"/></body></worldbody></mujoco>')
    c = Contacts([Sphere("ball", R)], Plane(), model=m, mu=MU, backward_smoothing=width)
    q0 = jnp.asarray(m.qpos0)
    v0 = jnp.array([V0, 0.0, 0.0, 0.0, 0.0, 0.0])

    def loss(h):
        tr = diffmb.simulate(m, q0.at[2].set(h[0]), v0, t1=T_LAND_RUN, dt=dt, forces=(c,),
                             solver=solver)
        return tr.q[-1, 0]

    return loss


def phase_sweep(loss, p0, direction, travel, shifts=SHIFTS) -> np.ndarray:
    """Exact gradients (1 + shifts, n): at p0, then at p0 + s·direction for s spread over one
    step's ``travel`` (offset so that no touch-down falls on a step boundary)."""
    s = np.r_[0.0, (np.arange(shifts) + 0.37) / shifts * travel]
    P = jnp.asarray(p0)[None, :] + jnp.asarray(s)[:, None] * jnp.asarray(direction)[None, :]
    return np.asarray(jax.jit(jax.vmap(jax.grad(loss)))(P))


def _stats(G, ref) -> dict:
    G = np.atleast_2d(G)
    ref = np.asarray(ref, float)
    return {"mean": G.mean(0).tolist(), "std": G.std(0).tolist(),
            "max_abs_err": float(np.abs(G - ref).max()),
            "mean_abs_err": float(np.abs(G.mean(0) - ref).max())}


def run_bounce_once(quick: bool) -> dict:
    p0 = jnp.array([-1.0, 1.0, 2.0, -2.0])
    cf = bounce_once_closed_form()
    ref = [0.0, cf["compliant"]["dz_dz0"], 0.0, cf["compliant"]["dz_dvz0"]]
    out = {"closed_form": cf, "published": PUBLISHED["bounce_once"], "estimators": {}}
    shift = np.array([0.0, 1.0, 0.0, 0.0])
    travel = 2.0 * DT_ZHONG  # the ball closes at 2 m/s
    for name, loss in (("exact", bounce_once_loss()),
                       (f"backward_smoothing_{W_BOUNCE:g}m", bounce_once_loss(width=W_BOUNCE))):
        G = phase_sweep(loss, p0, shift, travel, SHIFTS // 2 if quick else SHIFTS)
        out["estimators"][name] = _stats(G[1:], ref)
        if name == "exact":
            out["at_paper_configuration"] = {
                "grad": G[0].tolist(), "note": "the touch-down at t = 0.45 s falls exactly on "
                "step 216 of 480, where the step map has a kink: one side's derivative"}
    return out


def run_two_balls(quick: bool) -> dict:
    p0 = jnp.array([0.0, 0.52, 1.0, 0.0])
    cf = two_balls_closed_form()
    out = {"closed_form": cf, "published": PUBLISHED["two_balls"], "estimators": {}}
    shift = np.array([0.0, 1.0, 0.0, 0.0])
    cases = [("exact", DT_ZHONG, None), (f"backward_smoothing_{W_TWO:g}m", DT_ZHONG, W_TWO)]
    if not quick:
        cases += [("exact_dt_1e-4", 1e-4, None),
                  (f"backward_smoothing_{W_TWO / 10:g}m_dt_1e-4", 1e-4, W_TWO / 10)]
    for name, dt, w in cases:
        G = phase_sweep(two_balls_loss(dt=dt, width=w), p0, shift, dt,
                        SHIFTS // 2 if quick else SHIFTS)
        out["estimators"][name] = _stats(G[1:], cf["compliant"])
        if name == "exact":
            out["at_paper_configuration"] = {"grad": G[0].tolist()}
    return out


def run_landing(quick: bool) -> dict:
    ref = landing_closed_form()
    n = SHIFTS // 2 if quick else SHIFTS
    hs = H0 + (np.arange(n) + 0.37) / n * 0.02  # touch-downs spread over ~20 steps
    out = {"closed_form": ref, "heights_m": hs.tolist(), "estimators": {}}
    for name, loss in (("exact", landing_loss()),
                       (f"backward_smoothing_{W_LAND:g}m", landing_loss(width=W_LAND)),
                       ("exact_implicit_5ms", landing_loss(solver="implicit", dt=5e-3))):
        G = np.asarray(jax.jit(jax.vmap(jax.grad(loss)))(jnp.asarray(hs)[:, None]))
        out["estimators"][name] = _stats(G, [ref])
    # Gaussian smoothing over the height (σ = 1 cm) at h₀: the zeroth-, first- and alpha-order
    # estimates from one set of samples, with their standard errors
    samples = 32 if quick else 64
    g, info = diffmb.optim.smoothed_gradient(landing_loss(), jnp.array([H0]), sigma=0.01,
                                             samples=samples, estimator="alpha")
    out["smoothed_sigma_1cm"] = {
        "samples": samples, "alpha": float(info["alpha"]), "alpha_order": float(g[0]),
        "zero": float(info["zero"][0]), "zero_se": float(info["zero_se"][0]),
        "first": float(info["first"][0]), "first_se": float(info["first_se"][0])}
    return out


def reproduce(out_dir: pathlib.Path, quick: bool = False) -> dict:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    res = {"bounce_once": run_bounce_once(quick), "two_balls": run_two_balls(quick),
           "landing_ball": run_landing(quick),
           "widths_m": {"bounce_once": W_BOUNCE, "two_balls": W_TWO, "landing_ball": W_LAND}}
    res["wall_s"] = time.perf_counter() - t
    (out_dir / "results.json").write_text(json.dumps(res, indent=2))
    figs = _figures(out_dir, res)
    (out_dir / "report.md").write_text(_report(res, figs, quick))
    return res


def _figures(out_dir, res) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, ref, title in (
            (axs[0], "two_balls", res["two_balls"]["closed_form"]["compliant"][2],
             "two balls: ∂x₂(T)/∂v₀ over the touch-down phase"),
            (axs[1], "landing_ball", res["landing_ball"]["closed_form"],
             "landing ball: ∂x(T)/∂h, mean ± std")):
        est = res[key]["estimators"]
        names = list(est)
        idx = 2 if key == "two_balls" else 0
        m = [np.atleast_1d(est[n]["mean"])[idx] for n in names]
        s = [np.atleast_1d(est[n]["std"])[idx] for n in names]
        if key == "landing_ball":  # the Gaussian-smoothed estimates at h₀, ± standard error
            sm = res[key]["smoothed_sigma_1cm"]
            names += ["smoothed zero-order\nσ = 1 cm", "smoothed first-order",
                      f"smoothed α-order\n(α = {sm['alpha']:.2f})"]
            m += [sm["zero"], sm["first"], sm["alpha_order"]]
            s += [sm["zero_se"], sm["first_se"], 0.0]
        ax.errorbar(range(len(names)), m, yerr=s, fmt="o", capsize=4)
        ax.axhline(ref, color="k", lw=1, ls="--", label="closed form")
        ax.set_xticks(range(len(names)), [n.replace("_", "\n", 2) for n in names], fontsize=6)
        ax.set_ylabel("gradient (closed form dashed)", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "contact_gradients.png", dpi=120)
    plt.close(fig)
    return ["contact_gradients.png"]


def _fmt(x):
    return "(" + ", ".join(f"{v:.4g}" for v in np.atleast_1d(x)) + ")"


def _report(r, figs, quick) -> str:
    b, t, lb = r["bounce_once"], r["two_balls"], r["landing_ball"]
    lines = [
        "# Contact gradients against closed forms" + (" (quick)" if quick else ""), "",
        "## Bounce once (Zhong et al. 2022, task 1): ∂z_T/∂(x₀, z₀, ẋ₀, ż₀)", "",
        f"- rigid closed form: (0, −1, 0, −1); compliant (k = 10⁴ N/m, contact "
        f"{b['closed_form']['contact_time_s'] * 1e3:.2f} ms): (0, −1, 0, "
        f"{b['closed_form']['compliant']['dz_dvz0']:.5f})",
        f"- published ({b['published']['source']}): ∂z_T/∂z₀ = {b['published']['dz_dz0']}, "
        f"∂z_T/∂ż₀ = {b['published']['dz_dvz0']}",
        f"- diffmb, RK4 at the paper's step 1/480 s, at the paper's configuration: "
        f"{_fmt(b['at_paper_configuration']['grad'])} ({b['at_paper_configuration']['note']})", ""]
    lines += ["| estimator | mean over the touch-down phase | std | worst error |", "|---|---|---|---|"]
    for n, s in b["estimators"].items():
        lines.append(f"| {n} | {_fmt(s['mean'])} | {_fmt(s['std'])} | {s['max_abs_err']:.3g} |")
    lines += ["", "## Two balls (task 3 scene): ∂x₂(T)/∂(x₁, x₂, v₀, u₀)", "",
              f"- rigid closed form (1, 0, 1, 0); compliant {_fmt(t['closed_form']['compliant'])}",
              f"- published ({t['published']['source']}): {_fmt(t['published']['grad'])}",
              f"- diffmb at the paper's configuration (RK4, 1/480 s): "
              f"{_fmt(t['at_paper_configuration']['grad'])}", "",
              "| estimator | mean over the touch-down phase | std | worst error |",
              "|---|---|---|---|"]
    for n, s in t["estimators"].items():
        lines.append(f"| {n} | {_fmt(s['mean'])} | {_fmt(s['std'])} | {s['max_abs_err']:.3g} |")
    lines += ["", f"## Landing ball: ∂x/∂h, closed form {lb['closed_form']:.4f}", "",
              "| estimator | mean over heights | std | error of the mean |", "|---|---|---|---|"]
    for n, s in lb["estimators"].items():
        lines.append(f"| {n} | {s['mean'][0]:.4f} | {s['std'][0]:.4f} | "
                     f"{s['mean_abs_err']:.3g} |")
    sm = lb["smoothed_sigma_1cm"]
    lines += ["", f"Gaussian smoothing of the height (σ = 1 cm, {sm['samples']} samples, at "
              f"h = {H0} m): zeroth order {sm['zero']:.4f} ± {sm['zero_se']:.4f}, first order "
              f"{sm['first']:.4f} ± {sm['first_se']:.4f}, α-order (α = {sm['alpha']:.2f}) "
              f"{sm['alpha_order']:.4f}."]
    lines += ["", *[f"![{f}]({f})" for f in figs], "",
              f"Wall time {r['wall_s']:.0f} s. Widths: {r['widths_m']}."]
    return "\n".join(lines) + "\n"
