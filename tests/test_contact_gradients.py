"""Gradients through contact against closed forms, and the contacts' backward-only smoothing.

Expected values: the compliant two-ball collision's closed-form gradient (equal masses on a linear
spring exchange their velocities after a contact of π √(m/2k): x₂(T) = x₁ + 2r + v₀T − (v₀ − u₀)τ/2),
the landing ball's ∂x/∂h = (2/7) v₀/(g t_land), and the smoothed law's own closed forms.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import CoulombContacts, Sphere, law
from diffmb.studies import contact_gradients as cg


def test_smoothed_law_matches_the_exact_law_in_contact_and_reaches_across_a_gap():
    k, b, w = 1.0e4, 50.0, 1e-3
    f = lambda d, dd: law.smoothed_normal_force("linear", d, dd, k, b, 0.0, 1.0, w)  # noqa: E731
    # deep in contact: k δ + b δ̇ to within k w e^{-δ/w} (+ b δ̇ e^{-δ/w})
    assert abs(float(f(0.02, 0.1)) - (k * 0.02 + b * 0.1)) < 2 * (k * w + b * 0.1) * math.exp(-20)
    # at a gap d: k w log(1 + e^{-d/w}), derivative k sigmoid(-d/w)
    assert float(f(-3e-3, 0.0)) == pytest.approx(k * w * math.log1p(math.exp(-3.0)), rel=1e-12)
    g = jax.grad(f)(-3e-3, 0.0)
    assert float(g) == pytest.approx(k / (1 + math.exp(3.0)), rel=1e-12)
    # the smoothed stiffness integrates to the exact one: ∫ (∂f_s/∂δ − k H(δ)) dδ = 0
    d = np.linspace(-40 * w, 40 * w, 400_001)
    dfs = np.asarray(jax.vmap(jax.grad(lambda x: f(x, 0.0)))(jnp.asarray(d)))
    excess = np.trapezoid(dfs - k * (d > 0), d)
    assert abs(excess) < 1e-3 * k * w  # quadrature of the step at 0; an asymmetric law: ~0.5 k w


def test_backward_smoothed_law_has_the_exact_value_and_the_smoothed_derivative():
    args = (jnp.asarray(2e-4), jnp.asarray(-0.3), 1.0e4, 50.0, 0.0, 1.0)
    val, tan = jax.jvp(lambda d: law.normal_force_backward_smoothed("linear", d, *args[1:], 1e-3),
                       (args[0],), (jnp.asarray(1.0),))
    assert float(val) == float(law.normal_force("linear", *args))
    ref = jax.grad(lambda d: law.smoothed_normal_force("linear", d, *args[1:], 1e-3))(args[0])
    assert float(tan) == float(ref)


def test_backward_smoothing_leaves_the_run_unchanged():
    m = cg._slides(["blue", "green"], ("1 0 0",), "0 0 0")
    c0 = CoulombContacts([Sphere("blue", 0.1)], [Sphere("green", 0.1)], model=m, stiffness=1e4,
                         damping=20.0, mu=0.0)
    c1 = c0.with_backward_smoothing(4e-4)
    assert c1.backward_smoothing == 4e-4 and c0.backward_smoothing is None
    q0, v0 = jnp.array([0.0, 0.2205]), jnp.array([1.0, 0.0])
    for solver in ("rk4", "implicit"):
        runs = [diffmb.simulate(m, q0, v0, t1=0.08, dt=2e-3, forces=(c,), solver=solver)
                for c in (c0, c1)]
        np.testing.assert_array_equal(np.asarray(runs[0].q), np.asarray(runs[1].q))
        np.testing.assert_array_equal(np.asarray(runs[0].v), np.asarray(runs[1].v))


def test_backward_smoothing_is_validated_and_refused_where_it_would_change_the_run():
    m = cg._slides(["blue", "green"], ("1 0 0",), "0 0 0")
    geoms = ([Sphere("blue", 0.1)], [Sphere("green", 0.1)])
    with pytest.raises(ValueError, match="backward_smoothing = -0.001"):
        CoulombContacts(*geoms, model=m, backward_smoothing=-1e-3)
    with pytest.raises(TypeError, match="backward_smoothing"):
        CoulombContacts(*geoms, model=m, backward_smoothing="1mm")
    c = CoulombContacts(*geoms, model=m, backward_smoothing=1e-3)
    with pytest.raises(ValueError, match="ImplicitVelocityEuler.*backward_smoothing"):
        diffmb.simulate(m, jnp.array([0.0, 0.3]), jnp.array([1.0, 0.0]), t1=0.01, dt=1e-3,
                        forces=(c,), solver="implicit_euler_v")
    forces = diffmb.contacts.backward_smoothed((c, diffmb.forces.JointDamping(0.1)), None)
    assert forces[0].backward_smoothing is None


@pytest.mark.slow
def test_two_balls_gradient_over_the_touch_down_phase_against_the_closed_form():
    cf = cg.two_balls_closed_form()["compliant"]
    p0 = jnp.array([0.0, 0.52, 1.0, 0.0])
    shift = np.array([0.0, 1.0, 0.0, 0.0])
    exact = cg.phase_sweep(cg.two_balls_loss(), p0, shift, cg.DT_ZHONG)[1:]
    smooth = cg.phase_sweep(cg.two_balls_loss(width=cg.W_TWO), p0, shift, cg.DT_ZHONG)[1:]
    fine = cg.phase_sweep(cg.two_balls_loss(dt=1e-4), p0, shift, 1e-4, shifts=8)[1:]
    # at the paper's step the exact gradient swings with the phase; smoothing narrows it ~10x
    assert exact[:, 2].std() > 0.5
    assert smooth[:, 2].std() < 0.2 * exact[:, 2].std()
    np.testing.assert_allclose(smooth.mean(0), cf, atol=0.05)
    # a fine step converges on the closed form
    np.testing.assert_allclose(fine.mean(0), cf, atol=0.03)


@pytest.mark.slow
def test_landing_ball_smoothing_removes_the_bias_of_the_exact_gradient():
    ref = cg.landing_closed_form()
    hs = jnp.asarray(cg.H0 + (np.arange(8) + 0.37) / 8 * 0.02)[:, None]
    g = {w: np.asarray(jax.jit(jax.vmap(jax.grad(cg.landing_loss(width=w))))(hs))
         for w in (None, cg.W_LAND)}
    assert abs(g[None].mean() - ref) > 0.5 * ref  # the fixed-step touch-down hides the event
    assert abs(g[cg.W_LAND].mean() - ref) < 0.15 * ref


_BALL_MJCF = """<mujoco><option timestep="0.002" cone="elliptic"/><worldbody>
  <geom name="floor" type="plane" size="5 5 0.1" friction="0.3"/>
  <body name="ball" pos="0 0 0.1"><freejoint name="root"/>
    <geom name="ball" type="sphere" size="0.1" mass="1" friction="0.3"/></body>
</worldbody></mujoco>"""


@pytest.mark.slow
def test_identify_friction_from_a_mujoco_record_with_backward_smoothing(tmp_path):
    """A ball launched sliding on MuJoCo's floor (its own soft contact, elliptic cone, μ = 0.3)
    rolls once friction has spun it up, after v₀/(3.5 μ g) = 0.39 s; ``identify
    --backward-smoothing`` recovers μ from its positions (noise 0.1 mm) and records the width."""
    import json

    import mujoco

    from diffmb.cli import main
    from diffmb.io.csvdata import write_csv

    (tmp_path / "ball.xml").write_text(_BALL_MJCF)
    m = mujoco.MjModel.from_xml_path(str(tmp_path / "ball.xml"))
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    for _ in range(200):  # settle on the floor first
        mujoco.mj_step(m, d)
    d.qvel[:] = [4.0, 0, 0, 0, 0, 0]
    t0, t, q = d.time, [], []
    for k in range(400):
        if k % 5 == 0:
            t.append(d.time - t0)
            q.append(d.qpos.copy())
        mujoco.mj_step(m, d)
    q = np.array(q) + 1e-4 * np.random.default_rng(0).normal(size=(len(q), 7))
    write_csv(tmp_path / "log.csv", np.array(t), {f"q_root_{i}": q[:, i] for i in range(7)})
    out = tmp_path / "fit"
    assert main(["identify", "--model", str(tmp_path / "ball.xml"), "--data",
                 str(tmp_path / "log.csv"), "--params", "force.contacts.mu",
                 "--backward-smoothing", "1e-4", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    est = res["identified"]["force.contacts.mu"]
    assert abs(est["estimate"][0] - 0.3) < 0.05 * 0.3, est
    assert res["backward_smoothing"] == 1e-4
