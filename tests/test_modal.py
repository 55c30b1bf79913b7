"""Modal reduction tests. Oracles: scipy.linalg.eigh (generalized problem), scipy.linalg.expm of
the first-order system (exact linear responses, incl. zero-order hold), central finite
differences, and the scaling law f ∝ √E of the constrained/unconstrained frequencies."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl

import diffmb
from diffmb.formulations import modal
from diffmb.models import flexible_arm as fa


@pytest.fixture(scope="module")
def arm_mats():
    arm = fa.paper_arm()
    J, I, M, K = fa.system_matrices(arm)
    return arm, float(J), np.asarray(I), np.asarray(M), np.asarray(K)


def _expm_step(Mf, Kf, f, t):
    """q(t) of Mf q̈ + Kf q = f (constant) from rest via expm of the augmented system."""
    n = Mf.shape[0]
    A = np.zeros((2 * n + 1, 2 * n + 1))
    A[:n, n:2 * n] = np.eye(n)
    A[n:2 * n, :n] = -np.linalg.solve(Mf, Kf)
    A[n:2 * n, 2 * n] = np.linalg.solve(Mf, f)
    x0 = np.zeros(2 * n + 1)
    x0[-1] = 1.0
    return (sl.expm(A * t) @ x0)[:n]


def test_generalized_eigh_matches_scipy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 6))
    b = rng.standard_normal((6, 6))
    K = a @ a.T
    M = b @ b.T + 6.0 * np.eye(6)
    lam, phi = modal.generalized_eigh(jnp.asarray(K), jnp.asarray(M))
    ref = sl.eigh(K, M, eigvals_only=True)
    np.testing.assert_allclose(lam, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(phi).T @ M @ np.asarray(phi), np.eye(6), atol=1e-12)
    np.testing.assert_allclose(K @ np.asarray(phi), M @ np.asarray(phi) * np.asarray(lam),
                               atol=1e-10)


def test_unconstrained_modes_are_the_free_system_modes(arm_mats):
    arm, J, I, M, K = arm_mats
    Mf, Kf = (np.asarray(x) for x in modal.full_matrices(J, I, M, K))
    lam_full = sl.eigh(Kf, Mf, eigvals_only=True)
    assert abs(lam_full[0]) < 1e-6 * lam_full[1]  # one rigid mode
    um = modal.unconstrained_modes(J, I, M, K)
    np.testing.assert_allclose(np.asarray(um.omega) ** 2, lam_full[1:], rtol=1e-9)
    cm = modal.constrained_modes(M, K)
    np.testing.assert_allclose(np.asarray(cm.omega) ** 2, sl.eigh(K, M, eigvals_only=True),
                               rtol=1e-9)
    # orthogonality (eq. 11) and the induced rigid shape (eq. 10)
    Mt = M - np.outer(I, I) / J
    D = np.asarray(um.D)
    np.testing.assert_allclose(D.T @ Mt @ D, np.eye(D.shape[1]), atol=1e-9)
    np.testing.assert_allclose(np.asarray(um.induced)[0], -(I @ D) / J, rtol=1e-12)
    # a free mode [Φ_u; D] has zero angular momentum: J Φ_u + I D = 0
    np.testing.assert_allclose(J * np.asarray(um.induced)[0] + I @ D, 0.0, atol=1e-12)


def test_full_and_complete_reductions_match_expm(arm_mats):
    arm, J, I, M, K = arm_mats
    Mf, Kf = (np.asarray(x) for x in modal.full_matrices(J, I, M, K))
    n = M.shape[0]
    T = 5.0
    ts = jnp.array([0.0, 0.37, 3.0, 8.0])
    f = np.zeros(n + 1)
    f[0] = T
    ref = np.array([_expm_step(Mf, Kf, f, float(t)) for t in ts])
    q = np.asarray(modal.step_response(jnp.asarray(Mf), jnp.asarray(Kf), jnp.asarray(f), ts, 1))
    scale = np.abs(ref).max(axis=0)
    np.testing.assert_allclose(q, ref, atol=1e-9 * scale.max())
    cm = modal.constrained_modes(M, K)
    um = modal.unconstrained_modes(J, I, M, K)
    thc, dc = modal.constrained_step_response(J, I, cm, jnp.array([T]), ts)
    thu, du = modal.unconstrained_step_response(um, jnp.array([T]), ts)
    for th, d in ((thc, dc), (thu, du)):
        np.testing.assert_allclose(np.asarray(th)[:, 0], ref[:, 0], atol=1e-10)
        np.testing.assert_allclose(np.asarray(d), ref[:, 1:], atol=1e-10)
    # truncated reductions: eq. 8 and eq. 13 built explicitly, also against expm
    for nm in (3,):
        Mr, Kr = (np.asarray(x) for x in modal.reduced_constrained(J, I, modal.truncate(cm, nm)))
        fr = np.zeros(nm + 1)
        fr[0] = T
        qr = _expm_step(Mr, Kr, fr, 3.0)
        th, d = modal.constrained_step_response(J, I, modal.truncate(cm, nm), jnp.array([T]),
                                                jnp.array([3.0]))
        np.testing.assert_allclose(float(th[0, 0]), qr[0], atol=1e-11)
        np.testing.assert_allclose(np.asarray(d[0]), np.asarray(cm.phi)[:, :nm] @ qr[1:],
                                   atol=1e-11)
        um_n = modal.truncate(um, nm)
        Mr, Kr = (np.asarray(x) for x in modal.reduced_unconstrained(um_n))
        A = np.zeros((2 * nm + 3, 2 * nm + 3))  # eq. 13 (non-symmetric Mr) as first order
        A[: nm + 1, nm + 1: 2 * nm + 2] = np.eye(nm + 1)
        A[nm + 1: 2 * nm + 2, : nm + 1] = -np.linalg.solve(Mr, Kr)
        A[nm + 1: 2 * nm + 2, -1] = np.linalg.solve(Mr, fr)
        x0 = np.zeros(2 * nm + 3)
        x0[-1] = 1.0
        qu = (sl.expm(A * 3.0) @ x0)[: nm + 1]
        th_ref = qu[0] - (I @ np.asarray(um_n.D) @ qu[1:]) / J  # eq. 12
        th, d = modal.unconstrained_step_response(um_n, jnp.array([T]), jnp.array([3.0]))
        np.testing.assert_allclose(float(th[0, 0]), th_ref, atol=1e-11)
        np.testing.assert_allclose(np.asarray(d[0]), np.asarray(um_n.D) @ qu[1:], atol=1e-11)


@pytest.mark.parametrize("method", ["fft", "simulate"])
def test_zoh_response_matches_expm(method):
    omega = jnp.array([0.7, 5.0, 90.0])
    zeta = jnp.array([0.0, 0.05, 0.3])
    dt = 0.02
    rng = np.random.default_rng(3)
    g = rng.standard_normal((60, 3))
    if method == "fft":
        eta, deta = modal.modal_zoh_response(omega, zeta, jnp.asarray(g), dt)
    else:  # the recursion as a discrete system in simulate's loop, time counted in samples
        tr = diffmb.simulate(modal.ModalZOHSystem(omega, zeta, jnp.asarray(g), dt), None, None,
                             t1=59.0, dt=1.0)
        eta, deta = tr.q, tr.v
    for k in range(3):
        w, z = float(omega[k]), float(zeta[k])
        A = np.array([[0.0, 1.0, 0.0], [-w * w, -2 * z * w, 1.0], [0.0, 0.0, 0.0]])
        P = sl.expm(A * dt)
        x = np.zeros(2)
        for i in range(60):
            np.testing.assert_allclose([eta[i, k], deta[i, k]], x, atol=1e-12)
            x = P[:2, :2] @ x + P[:2, 2] * g[i, k]


def test_undamped_zoh_equals_step_response(arm_mats):
    arm, J, I, M, K = arm_mats
    um = modal.unconstrained_modes(J, I, M, K)
    dt = 0.01
    torque = jnp.full((301, 1), 5.0)
    th, d = modal.unconstrained_zoh_response(um, 0.0, torque, dt)
    ts = jnp.arange(301, dtype=jnp.float64) * dt
    th2, d2 = modal.unconstrained_step_response(um, jnp.array([5.0]), ts)
    np.testing.assert_allclose(th, th2, atol=1e-12)
    np.testing.assert_allclose(d, d2, atol=1e-11)


PARAMS = ("E", "rho", "D_o", "D_i", "l_b", "m_c", "J_cy", "J_ay", "r_a")


def _freqs(p):
    arm = fa.paper_arm(**{k: p[i] for i, k in enumerate(PARAMS)})
    J, I, M, K = fa.system_matrices(arm)
    cm = modal.constrained_modes(M, K)
    um = modal.unconstrained_modes(J, I, M, K)
    return jnp.concatenate([cm.hz[:4], um.hz[:4]])


def test_frequency_gradients_vs_central_differences():
    p0 = np.array([1e9, 100.0, 0.2, 0.198, 10.0, 2.0, 2.0, 40.0, 0.5])
    jac = np.asarray(jax.jit(jax.jacfwd(_freqs))(jnp.asarray(p0)))
    f = jax.jit(_freqs)
    f0 = np.asarray(f(jnp.asarray(p0)))
    for i, name in enumerate(PARAMS):
        # relative step 1e-4; the tube diameters get 1e-7 m (the wall is only 1 mm thick)
        h = 1e-7 if name in ("D_o", "D_i") else 1e-4 * p0[i]
        dp = np.zeros_like(p0)
        dp[i] = h
        fd = (np.asarray(f(jnp.asarray(p0 + dp))) - np.asarray(f(jnp.asarray(p0 - dp)))) / (2 * h)
        # compare elasticities d ln f / d ln p
        el_ad = jac[:, i] * p0[i] / f0
        el_fd = fd * p0[i] / f0
        assert np.max(np.abs(el_ad - el_fd)) < 2e-6 * max(1.0, np.abs(el_fd).max()), name
    # f ∝ √E exactly (E scales K only): d ln f / d ln E = 1/2
    np.testing.assert_allclose(jac[:, 0] * p0[0] / f0, 0.5, rtol=1e-9)
    # constrained frequencies do not depend on the hub
    np.testing.assert_allclose(jac[:4, 7:], 0.0, atol=1e-14)


def test_vmap_and_reverse_mode():
    es = jnp.array([0.5e9, 1e9, 2e9])

    def f1(e):
        arm = eqx.tree_at(lambda a: a.E, fa.paper_arm(), e)
        J, I, M, K = fa.system_matrices(arm)
        return modal.unconstrained_modes(J, I, M, K).hz[0]

    out, g = jax.jit(jax.vmap(jax.value_and_grad(f1)))(es)
    np.testing.assert_allclose(out, out[1] * jnp.sqrt(es / 1e9), rtol=1e-10)
    np.testing.assert_allclose(g, 0.5 * out / es, rtol=1e-8)  # reverse mode: f ∝ √E


def test_linear_system_through_simulate_matches_expm(arm_mats):
    """The reduced model as an ODE system integrated by diffmb.simulate (Dopri8) equals the
    exact step response of the augmented first-order system (scipy expm)."""
    import diffmb

    arm, J, I, M, K = arm_mats
    cm = modal.truncate(modal.constrained_modes(M, K), 3)
    Mr, Kr = (np.asarray(x) for x in modal.reduced_constrained(J, I, cm))
    f = np.zeros(4)
    f[0] = 5.0
    system = modal.LinearSecondOrderSystem(jnp.asarray(Mr), jnp.zeros((4, 4)), jnp.asarray(Kr),
                                           lambda t, p: jnp.asarray(f))
    ts = [0.5, 1.0, 3.0]
    tr = diffmb.simulate(system, None, None, t1=3.0, solver="dopri8", rtol=1e-12, atol=1e-12,
                         saveat=ts)
    ref = np.array([_expm_step(Mr, Kr, f, t) for t in ts])
    np.testing.assert_allclose(np.asarray(tr.q), ref, atol=1e-9 * np.abs(ref).max())
