"""Beam element tests. Oracles: sympy integrals of independently written Hermite cubics, the
published clamped-free βL values, the transcendental equation cos βL cosh βL = −1 (brentq),
the Euler–Bernoulli tip-load deflection PL³/3EI, and closed-form rigid-body moments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from scipy.optimize import brentq

from diffmb.formulations import fem, modal

PUBLISHED = np.array([1.875104, 4.694091, 7.854757])


def _exact_beta_l():
    return np.array([brentq(lambda b: np.cos(b) * np.cosh(b) + 1.0, g - 0.3, g + 0.3)
                     for g in PUBLISHED])


def _beta_l(n_el, n_modes=3):
    M, K = fem.beam_matrices(1.0, 1.0, 1.0, n_el)
    M = fem.apply_dirichlet(M, (0, 1))
    K = fem.apply_dirichlet(K, (0, 1))
    lam, _ = modal.generalized_eigh(K, M)
    return np.asarray(lam[:n_modes]) ** 0.25


def test_element_matrices_match_sympy():
    x, h = sp.symbols("x h", positive=True)
    xi = x / h
    N = sp.Matrix([1 - 3 * xi**2 + 2 * xi**3, h * (xi - 2 * xi**2 + xi**3),
                   3 * xi**2 - 2 * xi**3, h * (-(xi**2) + xi**3)])
    Ms = sp.integrate(N * N.T, (x, 0, h))
    Ks = sp.integrate(N.diff(x, 2) * N.diff(x, 2).T, (x, 0, h))
    n0 = sp.integrate(N, (x, 0, h))
    n1 = sp.integrate(x * N, (x, 0, h))
    hv, ra, ei = 0.37, 2.3, 5.1
    np.testing.assert_allclose(fem.element_mass(ra, hv),
                               ra * np.array(Ms.subs(h, hv), dtype=float), rtol=1e-13)
    np.testing.assert_allclose(fem.element_stiffness(ei, hv),
                               ei * np.array(Ks.subs(h, hv), dtype=float), rtol=1e-13)
    a0, a1 = fem.element_shape_integrals(hv)
    np.testing.assert_allclose(a0, np.array(n0.subs(h, hv), dtype=float).ravel(), rtol=1e-13)
    np.testing.assert_allclose(a1, np.array(n1.subs(h, hv), dtype=float).ravel(), rtol=1e-13)
    # shape functions themselves
    np.testing.assert_allclose(fem.hermite_shape(0.3, hv),
                               np.array(N.subs({x: 0.3 * hv, h: hv}), dtype=float).ravel(),
                               rtol=1e-13)


def test_cantilever_beta_l_10_elements():
    bl = _beta_l(10)
    assert np.all(np.abs(bl - PUBLISHED) / PUBLISHED < 2e-4), bl


def test_h_convergence_rate_is_four():
    exact = _exact_beta_l()
    np.testing.assert_allclose(exact, PUBLISHED, atol=1e-6)
    meshes = [8, 16, 32]
    err = np.array([np.abs(_beta_l(n) - exact) / exact for n in meshes])
    rates = -np.polyfit(np.log(meshes), np.log(err), 1)[0]
    assert np.all((rates > 3.8) & (rates < 4.2)), rates
    assert np.all(np.diff(err, axis=0) < 0.0)


def test_tip_load_deflection_and_rigid_modes():
    ei, rho_a, L, n = 3.0, 0.7, 2.5, 6
    M, K = fem.beam_matrices(ei, rho_a, L, n)
    x = np.linspace(0.0, L, n + 1)
    trans = np.zeros(2 * n + 2)
    trans[0::2] = 1.0
    rot = np.zeros(2 * n + 2)
    rot[0::2] = x
    rot[1::2] = 1.0
    for u in (trans, rot):
        np.testing.assert_allclose(K @ u, 0.0, atol=1e-10)
    np.testing.assert_allclose(trans @ M @ trans, rho_a * L, rtol=1e-13)
    np.testing.assert_allclose(rot @ M @ rot, rho_a * L**3 / 3.0, rtol=1e-13)
    ints = fem.beam_inertia_integrals(rho_a, L, n)
    np.testing.assert_allclose(ints["s0"] @ trans, rho_a * L, rtol=1e-13)
    np.testing.assert_allclose(ints["s0"] @ rot, rho_a * L**2 / 2.0, rtol=1e-13)
    np.testing.assert_allclose(ints["s1"] @ trans, rho_a * L**2 / 2.0, rtol=1e-13)
    np.testing.assert_allclose(ints["s1"] @ rot, rho_a * L**3 / 3.0, rtol=1e-13)
    np.testing.assert_allclose([ints["m"], ints["m1"], ints["m2"]],
                               [rho_a * L, rho_a * L**2 / 2, rho_a * L**3 / 3], rtol=1e-13)
    # clamped root, tip load P: w(L) = P L³ / 3EI, w'(L) = P L² / 2EI (exact for cubics)
    Kc = fem.apply_dirichlet(K, (0, 1))
    f = np.zeros(2 * n)
    f[-2] = 1.7
    u = np.linalg.solve(Kc, f)
    np.testing.assert_allclose(u[-2], 1.7 * L**3 / (3 * ei), rtol=1e-12)
    np.testing.assert_allclose(u[-1], 1.7 * L**2 / (2 * ei), rtol=1e-12)


def test_nonuniform_and_dirichlet_and_jit():
    # per-element properties equal to a uniform value give the uniform matrices
    M1, K1 = fem.beam_matrices(2.0, 3.0, 1.5, 4)
    M2, K2 = fem.beam_matrices(jnp.full(4, 2.0), jnp.full(4, 3.0), 1.5, 4)
    np.testing.assert_allclose(M1, M2, rtol=1e-14)
    np.testing.assert_allclose(K1, K2, rtol=1e-14)
    assert fem.apply_dirichlet(M1, (0, 1)).shape == (8, 8)
    assert fem.apply_dirichlet(M1, (-2, -1)).shape == (8, 8)
    assert list(fem.free_dofs(6, (0, -1))) == [1, 2, 3, 4]
    # d βL₁ / d EI at fixed ρA = L = 1 is βL/(4 EI) (λ ∝ EI); check the autodiff gradient
    def bl1(ei):
        M, K = fem.beam_matrices(ei, 1.0, 1.0, 8)
        lam, _ = modal.generalized_eigh(fem.apply_dirichlet(K, (0, 1)),
                                        fem.apply_dirichlet(M, (0, 1)))
        return lam[0] ** 0.25

    g = jax.jit(jax.grad(bl1))(2.0)
    assert g == pytest.approx(float(bl1(2.0)) / 8.0, rel=1e-10)
