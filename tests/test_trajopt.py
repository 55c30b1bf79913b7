"""Trajectory optimisation. Oracle: the closed-form minimum-energy control of a double
integrator (Pontryagin / Gramian): for m ẍ = u, rest-to-rest over X in time T,
u*(t) = m (6X/T² − 12X t/T³) and ∫u*² dt = 12 m² X²/T³. The optimum is linear in t, so both
piecewise-linear and cubic-Hermite tables represent it exactly and RK4 integrates it exactly."""

import numpy as np
import pytest

import diffmb
from diffmb.optim import trajopt

M, X, T = 2.0, 0.5, 1.0


def _slider():
    b = diffmb.ModelBuilder("slider")
    b.add_body("cart", -1, mass=M, inertia=(0.01, 0.01, 0.01),
               joints=[dict(name="x", type="slide", axis=(1, 0, 0))])
    return b.build()


def _check(r):
    u_star = M * (6 * X / T**2 - 12 * X * r.knot_ts / T**3)
    np.testing.assert_allclose(r.knots[:, 0], u_star, rtol=0, atol=1e-4 * np.abs(u_star).max())
    assert r.effort == pytest.approx(12 * M**2 * X**2 / T**3, rel=1e-4)
    assert r.terminal_error < 1e-5 and r.terminal_v_error < 1e-5
    assert r.success


@pytest.mark.slow
def test_single_shooting_linear_knots_match_closed_form():
    r = trajopt(_slider(), [0.0], [0.0], t1=T, dt=0.05, target_q=[X], target_v=[0.0],
                n_knots=5, kind="linear", target_weight=1e10, progress=False)
    _check(r)
    assert np.asarray(r.traj.q)[-1, 0] == pytest.approx(X, abs=1e-5)


@pytest.mark.slow
def test_multiple_shooting_cubic_bounded_matches_closed_form():
    # bounds wide enough not to bind: the same optimum through the logistic transform
    r = trajopt(_slider(), [0.0], [0.0], t1=T, dt=0.05, target_q=[X], target_v=[0.0],
                n_knots=5, kind="cubic", u_bounds=(-20.0, 20.0), target_weight=1e10,
                shooting="multiple", segments=4, continuity_weight=1e4, progress=False)
    _check(r)


@pytest.mark.slow
def test_binding_bounds_are_respected():
    # |u*| peaks at 6 M X / T² = 6 N; with |u| <= 5 (bang-bang would reach 0.625 m > X) the
    # knots stay inside the bounds, press against them, and the target is still reached
    r = trajopt(_slider(), [0.0], [0.0], t1=T, dt=0.05, target_q=[X], target_v=[0.0],
                n_knots=9, kind="linear", u_bounds=(-5.0, 5.0), target_weight=1e6,
                progress=False, max_steps=300)
    assert np.all(np.abs(r.knots) < 5.0)
    assert np.abs(r.knots).max() > 4.9
    assert r.terminal_error < 1e-3
    assert r.effort > 12 * M**2 * X**2 / T**3  # the bound costs effort


def test_a_force_that_is_no_element_is_refused():
    with pytest.raises(TypeError, match=r"forces\[0\]: expected a force element.*got dict"):
        trajopt(_slider(), [0.0], [0.0], t1=T, dt=0.05, target_q=[X], forces=({"k": 1.0},),
                progress=False)
