"""``diffmb.optim.check_gradient``: every estimate against a closed form.

Expected values: analytic gradients of closed-form losses, the analytic Gaussian-smoothed
gradients of a rippled and of a discontinuous loss, the exponential growth rate of a loss
built to grow at a known rate, and the exact sensitivity ∂z(T)/∂ż(0) = T of a body in free
flight (Euler steps of a constant acceleration are exact in this respect).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.optim import check_gradient


def test_smooth_loss_is_trusted_and_matches_the_analytic_gradient():
    def loss(p):
        return jnp.sin(p["a"][0]) * jnp.exp(p["a"][1]) + p["a"][0] ** 2 * p["b"]

    a, b = np.array([0.7, -0.4]), 1.3
    chk = check_gradient(loss, {"a": jnp.asarray(a), "b": jnp.asarray(b)})
    exact = [math.cos(a[0]) * math.exp(a[1]) + 2 * a[0] * b,
             math.sin(a[0]) * math.exp(a[1]), a[0] ** 2]
    np.testing.assert_allclose(chk.reverse, exact, rtol=1e-12)
    np.testing.assert_allclose(chk.directions @ chk.reverse, chk.forward, rtol=1e-12)
    assert chk.trusted and chk.verdict.startswith("trusted:"), chk.verdict
    assert chk.rel_central[1e-5] < 1e-8
    # the smoothed estimates estimate the gradient of E f(θ + σw): within their errors of it
    assert np.all(np.abs(chk.smoothed_first - exact) < 5 * chk.smoothed_first_se + 1e-3)
    assert "reverse" in str(chk) and chk.verdict in str(chk)


def test_ripple_is_not_trusted_and_the_smoothed_gradient_sees_through_it():
    # f = θ + ε sin(θ/λ): exact gradient 1 + (ε/λ) cos(θ/λ); smoothed at σ ≫ λ: 1 (the ripple's
    # term is damped by exp(−σ²/2λ²))
    eps, lam, th = 1e-3, 1e-6, 0.3

    def loss(x):
        return x[0] + eps * jnp.sin(x[0] / lam)

    chk = check_gradient(loss, jnp.array([th]), samples=64)
    np.testing.assert_allclose(chk.reverse[0], 1 + eps / lam * math.cos(th / lam), rtol=1e-6)
    assert not chk.trusted and chk.verdict.startswith("not trusted"), chk.verdict
    assert "not smooth" in chk.verdict
    assert abs(chk.smoothed_zero[0] - 1.0) < 4 * chk.smoothed_zero_se[0] + 1e-9


def test_a_jump_nearby_makes_the_exact_gradient_locally_trusted_only():
    # f = θ² + [θ > c]: exact gradient 2θ; the Gaussian-smoothed gradient adds the jump's
    # density φ((θ − c)/σ)/σ, which the first-order estimate cannot see
    c, th, sigma = 0.5, 0.5001, 1e-2

    def loss(x):
        return x[0] ** 2 + jnp.where(x[0] > c, 1.0, 0.0)

    chk = check_gradient(loss, jnp.array([th]), sigma=sigma, samples=512)
    smoothed = 2 * th + math.exp(-0.5 * ((th - c) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    assert abs(chk.smoothed_zero[0] - smoothed) < 4 * chk.smoothed_zero_se[0]
    assert abs(chk.smoothed_first[0] - 2 * th) < 4 * chk.smoothed_first_se[0] + 1e-9
    assert chk.trusted and chk.verdict.startswith("trusted locally"), chk.verdict
    assert chk.bias_se > 4


def test_non_finite_gradient_is_named():
    chk = check_gradient(lambda x: jnp.sqrt(x[0] ** 2) + x[1], jnp.array([0.0, 1.0]))
    assert not chk.finite and not chk.trusted
    assert "reverse[0]" in chk.verdict, chk.verdict


def test_growth_rate_with_the_horizon():
    lam = 2.0
    chk = check_gradient(lambda x, T: jnp.exp(lam * T) * jnp.sum(x**2), jnp.array([0.3, -0.2]),
                         horizons=(1.0, 2.0, 5.0))
    assert chk.growth_rate == pytest.approx(lam, rel=1e-9)
    n0 = 2 * math.exp(lam) * math.hypot(0.3, 0.2)
    assert chk.norms[0] == pytest.approx(n0, rel=1e-12)
    assert "grows" in chk.verdict


@pytest.mark.slow  # 8 s: vmapped simulate, its gradient and its jvp compile
def test_free_flight_sensitivity_through_simulate(tmp_path):
    p = tmp_path / "b.xml"
    p.write_text('<mujoco><worldbody><body name="b"><freejoint/><geom type="sphere" '
                 'size="0.1" mass="1" contype="0" conaffinity="0"/></body></worldbody></mujoco>')
    model = diffmb.load_mjcf(p)
    q0 = jnp.array([0, 0, 1.0, 1, 0, 0, 0])
    T = 0.3

    def loss(vz):
        v0 = jnp.zeros(6).at[2].set(vz[0])
        tr = diffmb.simulate(model, q0, v0, t1=T, dt=0.01, solver="implicit", saveat=[T])
        return tr.q[-1, 2]

    chk = check_gradient(loss, jnp.array([0.5]))
    assert chk.reverse[0] == pytest.approx(T, rel=1e-12)
    assert chk.trusted, chk.verdict


@pytest.mark.parametrize("kw, what", [({"steps": (1e-3, -1e-4)}, "steps"),
                                      ({"samples": 1}, "samples"),
                                      ({"sigma": 0.0}, "sigma"),
                                      ({"horizons": ()}, "horizons"),
                                      ({"max_directions": 0}, "max_directions")])
def test_bad_arguments_are_named(kw, what):
    with pytest.raises(ValueError, match=what):
        check_gradient(lambda x: jnp.sum(x), jnp.ones(2), **kw)


def test_non_scalar_loss_is_refused():
    with pytest.raises(ValueError, match="scalar"):
        check_gradient(lambda x: x * 2, jnp.ones(2))


def test_contact_check_inside_jit_with_a_concrete_start(tmp_path):
    # the initial-penetration check reads the geom sizes eagerly also inside an outer trace
    # (a jitted loss that closes over a concrete q0): it ran into a tracer before
    from diffmb.contacts import Box, Contacts, Plane

    p = tmp_path / "box.xml"
    p.write_text('<mujoco><worldbody><body name="box"><freejoint/><geom type="box" '
                 'size="0.1 0.1 0.1" mass="2" contype="0" conaffinity="0"/></body></worldbody>'
                 '</mujoco>')
    model = diffmb.load_mjcf(p)
    c = Contacts([Box("box", (0.1, 0.1, 0.1), name="cube")], Plane(), model=model, mu=0.5)

    def final_x(q0):
        return jax.jit(lambda v: diffmb.simulate(model, q0, jnp.zeros(6).at[0].set(v), t1=0.1,
                                                 dt=0.01, forces=[c], solver="implicit",
                                                 saveat=[0.1]).q[-1, 0])

    assert np.isfinite(float(final_x(jnp.array([0, 0, 0.0995, 1, 0, 0, 0.0]))(1.0)))
    with pytest.raises(ValueError, match="deep"):
        final_x(jnp.array([0, 0, 0.02, 1, 0, 0, 0.0]))(1.0)


def test_alpha_order_estimator_falls_back_to_zeroth_order_at_a_jump():
    # beside a jump the first-order estimate misses the jump's density; the α-order blend
    # detects the disagreement and returns (nearly) the zeroth-order estimate, which is
    # unbiased for the analytic smoothed gradient 2θ + φ((θ − c)/σ)/σ
    from diffmb.optim import smoothed_gradient

    c, th, sigma = 0.5, 0.5001, 1e-2

    def loss(x):
        return x[0] ** 2 + jnp.where(x[0] > c, 1.0, 0.0)

    g, info = smoothed_gradient(loss, jnp.array([th]), sigma=sigma, samples=512)
    smoothed = 2 * th + math.exp(-0.5 * ((th - c) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    assert info["alpha"] < 0.1
    assert abs(float(g[0]) - smoothed) < 4 * info["zero_se"][0] + 1e-9
    # on a smooth loss the blend leans on the low-variance first-order estimate
    g2, info2 = smoothed_gradient(lambda x: jnp.sum(jnp.sin(x)), jnp.array([0.3, -0.2]),
                                  sigma=0.05, samples=64)
    exact = np.cos([0.3, -0.2]) * math.exp(-0.5 * 0.05**2)  # E cos(θ + σw) = cos θ e^{−σ²/2}
    assert info2["alpha"] > 0.9
    np.testing.assert_allclose(np.asarray(g2), exact, atol=5 * float(np.max(info2["first_se"]))
                               + 1e-12)
    with pytest.raises(ValueError, match="estimator"):
        smoothed_gradient(loss, jnp.array([th]), sigma=sigma, estimator="beta")
