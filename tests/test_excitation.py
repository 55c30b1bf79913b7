"""Optimal excitation (diffmb.optim.excitation). Oracles: the sensitivity ODE of a linear
mass-spring-damper solved by scipy (an independent integrator and an independent derivation of
∂x/∂θ), the standard errors reported by diffmb.optim.fit and the Monte Carlo spread of its
estimates over noise seeds, and the stated limits of the design."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import diffmb
from diffmb.controls import piecewise_linear
from diffmb.forces.elements import JointDamping, JointSpring
from diffmb.optim import design_excitation, fisher_information, fit, set_params
from diffmb.optim.excitation import d_criterion, e_criterion

M, C, K = 2.0, 0.8, 30.0  # kg, N s/m, N/m
NAMES = ["body.cart.mass", "joint.x.damping", "joint.x.stiffness"]
FORCES = (JointDamping(), JointSpring())
T1, DT, SDT = 2.0, 0.005, 0.02
KNOT_TS = np.linspace(0.0, T1, 9)
KNOTS = np.array([0.0, 4.0, -3.0, 5.0, 1.0, -6.0, 2.0, 3.0, -1.0])  # N
X0, V0 = 0.05, -0.1


def _msd(m=M, c=C, k=K):
    b = diffmb.ModelBuilder("msd")
    b.add_body("cart", -1, mass=m, inertia=(0.01, 0.01, 0.01),
               joints=[dict(name="x", type="slide", axis=(1, 0, 0), damping=c, stiffness=k)])
    return b.build()


def _sensitivities():
    """x(t_k) and ∂x(t_k)/∂(m, c, k, x0, v0) from m ẍ + c ẋ + k x = u(t), by scipy."""
    u = lambda t: np.interp(t, KNOT_TS, KNOTS)  # noqa: E731

    def rhs(t, y):
        x, v = y[0], y[1]
        a = (u(t) - C * v - K * x) / M
        out = [v, a]
        # s_θ = ∂x/∂θ: M s̈ + C ṡ + K s = −∂(M a... )/∂θ terms (−ẍ, −ẋ, −x for m, c, k; 0 for x0, v0)
        forcing = (-a, -v, -x, 0.0, 0.0)
        for i in range(5):
            s, sd = y[2 + 2 * i], y[3 + 2 * i]
            out += [sd, (forcing[i] - C * sd - K * s) / M]
        return out

    y0 = [X0, V0, 0, 0, 0, 0, 0, 0, 1.0, 0.0, 0.0, 1.0]
    ts = np.arange(0.0, T1 + 1e-12, SDT)
    sol = solve_ivp(rhs, (0.0, T1), y0, t_eval=ts, rtol=1e-12, atol=1e-14, method="DOP853",
                    max_step=0.01)
    return ts, sol.y[0], sol.y[2::2].T  # (n,), (n,), (n, 5)


@pytest.mark.slow
def test_fim_of_linear_system_matches_scipy_sensitivity_ode():
    sigma = 1e-3
    _, _, S = _sensitivities()
    model = _msd()
    ctrl = piecewise_linear(KNOT_TS, KNOTS[:, None])
    kw = dict(q0=[X0], v0=[V0], t1=T1, dt=DT, sample_dt=SDT, noise_std=sigma, forces=FORCES)
    F_known = np.asarray(fisher_information(model, NAMES, ctrl, scaled=False,
                                            initial_state="known", **kw))
    ref = S[:, :3].T @ S[:, :3] / sigma**2
    np.testing.assert_allclose(F_known, ref, rtol=1e-6)
    # relative coordinates: D F D with D = diag |p|
    F_s = np.asarray(fisher_information(model, NAMES, ctrl, initial_state="known", **kw))
    D = np.diag([M, C, K])
    np.testing.assert_allclose(F_s, D @ ref @ D, rtol=1e-6)
    # unknown initial state: Schur complement of the (θ, x0, v0) information
    F_est = np.asarray(fisher_information(model, NAMES, ctrl, scaled=False, **kw))
    G = S.T @ S / sigma**2
    ref_est = G[:3, :3] - G[:3, 3:] @ np.linalg.solve(G[3:, 3:], G[3:, :3])
    np.testing.assert_allclose(F_est, ref_est, rtol=1e-6)
    assert np.all(np.linalg.eigvalsh(F_known - F_est) > -1e-6 * np.abs(F_known).max())


def _noisy(seed, sigma):
    ts, x, _ = _sensitivities()
    rng = np.random.default_rng(seed)
    return {"t": ts, "q": (x + sigma * rng.standard_normal(x.shape))[:, None]}


@pytest.mark.slow  # 20 fits; the fast suite checks the information matrix against scipy
def test_predicted_std_matches_fit_and_monte_carlo():
    """fit estimates (x0, v0) with single shooting: the prediction marginalises them too."""
    sigma = 2e-3
    model = _msd()
    ctrl = piecewise_linear(KNOT_TS, KNOTS[:, None])
    F = np.asarray(fisher_information(model, NAMES, ctrl, q0=[X0], v0=[V0], t1=T1, dt=DT,
                                      sample_dt=SDT, noise_std=sigma, forces=FORCES,
                                      scaled=False))
    pred = np.sqrt(np.diag(np.linalg.inv(F)))
    guess = set_params(_msd(), {"body.cart.mass": 1.1 * M, "joint.x.damping": 1.2 * C,
                                "joint.x.stiffness": 0.9 * K})
    est, stds = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(20):
            r = fit(guess, _noisy(seed, sigma), NAMES, forces=FORCES,
                    simulate_kwargs={"dt": DT, "control": ctrl}, weights={"q": 1 / sigma},
                    progress=False, max_steps=20)
            assert r.success, r.message
            est.append([r.estimates[n] for n in NAMES])
            stds.append([r.std[n] for n in NAMES])
    est, stds = np.array(est), np.array(stds)
    # fit's Gauss-Newton std (s² from the residuals, ~ ±10 % over 100 samples)
    np.testing.assert_allclose(stds.mean(axis=0), pred, rtol=0.1)
    # the spread of the estimates themselves (20 seeds: the sample std is within ±35 %, two
    # of its standard deviations 1/sqrt(2·19))
    emp = est.std(axis=0, ddof=1)
    assert np.all(emp > 0.65 * pred) and np.all(emp < 1.35 * pred), (emp, pred)
    assert np.all(np.abs(est.mean(axis=0) - [M, C, K]) < 4 * pred / np.sqrt(20))


@pytest.mark.slow
def test_design_respects_limits_and_improves():
    criterion = "D"
    model = _msd()
    lim = 0.12  # m
    tau = (-4.0, 6.0)  # asymmetric on purpose: the bound map is exact on both sides
    res = design_excitation(model, NAMES, q0=[0.0], forces=FORCES, t1=T1, dt=0.01,
                            sample_dt=0.02, n_knots=9, torque_limits=tau,
                            joint_limits=([-lim], [lim]), criterion=criterion,
                            noise_std=1e-3, steps=15, learning_rate=0.2, progress=False)
    assert res.criterion_after > res.criterion_before + (0.3 if criterion == "D" else 0.0)
    assert res.history[0]["violation"] == 0.0  # the default initial design is feasible here
    # torque limits exactly, at the knots and in between (piecewise linear)
    assert res.knots.min() >= tau[0] and res.knots.max() <= tau[1]
    u = np.asarray([res.control(t) for t in np.linspace(0, T1, 401)])
    assert u.min() >= tau[0] and u.max() <= tau[1]
    # joint limits at every integration step (the returned design is a feasible iterate)
    assert res.feasible and res.joint_violation == 0.0
    assert np.abs(np.asarray(res.traj.q)).max() <= lim
    # an independent re-simulation with the designed table stays within them too
    tr = diffmb.simulate(model, np.zeros(1), np.zeros(1), t1=T1, dt=0.002,
                         forces=FORCES, control=res.control)
    assert np.abs(np.asarray(tr.q)).max() <= lim + 1e-3
    # the reported information is that of the returned table
    F = np.asarray(fisher_information(model, NAMES, res.control, q0=[0.0], t1=T1, dt=0.01,
                                      sample_dt=0.02, noise_std=1e-3, forces=FORCES))
    np.testing.assert_allclose(F, res.fim, rtol=1e-9)
    p = np.array([M, C, K])
    np.testing.assert_allclose([res.std[n] for n in NAMES],
                               p * np.sqrt(np.diag(np.linalg.inv(F))), rtol=1e-9)


def test_criteria_values():
    F = jnp.diag(jnp.array([4.0, 1.0, 9.0]))
    assert float(d_criterion(F)) == pytest.approx(np.log(36.0), rel=1e-9)
    e = float(e_criterion(F, tau=0.05))
    assert -0.05 * np.log(3) - 1e-9 <= e <= 1e-9  # log λ_min = 0, ridge 1e-12


@pytest.mark.slow  # a second design compiles; the fast suite runs the plain D design
def test_reference_design_narrows_every_interval():
    """``reference=``: every predicted std at most 0.9 × a hand-made input's, log det F up.
    The reference is a slow sine that the plain D design from the default start beats on log
    det F but not on the damping (its std ratio there is about 1.07): the bound must bite."""
    model = _msd()
    kw = dict(q0=[0.0], forces=FORCES, t1=T1, dt=0.01, sample_dt=0.02, noise_std=1e-3)
    kts = np.linspace(0.0, T1, 9)
    U = (1.6 * np.sin(2 * np.pi * 0.25 * kts + 0.7))[:, None]
    ref = piecewise_linear(kts, U)
    F_ref = np.asarray(fisher_information(model, NAMES, ref, **kw))
    s_ref = np.array([M, C, K]) * np.sqrt(np.diag(np.linalg.inv(F_ref)))
    res = design_excitation(model, NAMES, n_knots=9, torque_limits=(-4.0, 6.0),
                            joint_limits=([-0.12], [0.12]), init=U, reference=ref,
                            max_std_ratio=0.9, steps=8, learning_rate=0.1, progress=False,
                            **kw)
    assert res.meets_reference and res.feasible
    # the reference's std as computed here (from the control) equals the independent one
    np.testing.assert_allclose([res.std_reference[n] for n in NAMES], s_ref, rtol=1e-9)
    # the returned design's own information, recomputed, meets the bound on every parameter
    F = np.asarray(fisher_information(model, NAMES, res.control, **kw))
    s = np.array([M, C, K]) * np.sqrt(np.diag(np.linalg.inv(F)))
    assert np.all(s <= 0.9 * s_ref), s / s_ref
    np.testing.assert_allclose([res.std_ratio[n] for n in NAMES], s / s_ref, rtol=1e-9)
    assert np.linalg.slogdet(F)[1] > np.linalg.slogdet(F_ref)[1] + 0.5
    assert res.history[0]["max_std_ratio"] == pytest.approx(1.0, rel=1e-9)  # starts at the ref
