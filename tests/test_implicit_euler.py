"""ImplicitVelocityEuler (simulate's Euler made linearly implicit in the velocities). Oracles:
the closed-form recursion of implicit Euler on linear damping, v_n = v₀/(1 + h c)ⁿ; explicit
Euler's known blow-up at h c > 2 for contrast; first-order convergence (error ratio 2 per
halving) against an RK4 reference at a 64x finer step; central finite differences of the
discrete map for its gradient; the exact differential's invariant C v = 0."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.forces.elements import JointDamping
from diffmb.simulation import DIVERGED, ImplicitVelocityEuler

C_DAMP = 1e4  # N s/m on a 1 kg slide: λ = −1e4 1/s


def _slide(damping=C_DAMP):
    b = diffmb.ModelBuilder("slide")
    b.add_body("m", -1, mass=1.0, com=(0, 0, 0), inertia=(0.1, 0.1, 0.1),
               joints=[dict(name="x", type="slide", axis=(1, 0, 0), damping=damping)])
    return b.build()


@pytest.mark.parametrize("every", [1, 3])
def test_linear_damping_follows_the_implicit_euler_recursion(every):
    m, h = _slide(), 0.01  # h c = 100: explicit Euler multiplies v by −99 per step
    n = 10
    tr = diffmb.simulate(m, jnp.zeros(1), jnp.ones(1), t1=n * h, dt=h,
                         solver=ImplicitVelocityEuler(jacobian_every=every),
                         forces=(JointDamping(),))
    k = np.arange(n + 1)
    v = (1.0 + h * C_DAMP) ** (-k.astype(float))
    q = np.concatenate([[0.0], h * np.cumsum(v[1:])])  # q₁ = q + h v₁
    np.testing.assert_allclose(np.asarray(tr.v[:, 0]), v, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.asarray(tr.q[:, 0]), q, rtol=1e-12)
    # the same step by explicit Euler blows up, as its amplification 1 − h c = −99 says
    ex = diffmb.simulate(m, jnp.zeros(1), jnp.ones(1), t1=n * h, dt=h, solver=diffrax.Euler(),
                         forces=(JointDamping(),), throw=False)
    assert abs(float(ex.v[3, 0])) == pytest.approx(99.0**3, rel=1e-9)
    # ... and is stopped as diverged at the first step whose speed 99^k exceeds 1e6 m/s (k = 4)
    assert int(ex.status) == DIVERGED and float(ex.t_fail) == pytest.approx(4 * h, rel=1e-12)


def _pendulum():
    b = diffmb.ModelBuilder("pend")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.02, 0.001),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0), damping=0.3)])
    b.add_body("l2", 0, mass=0.5, pos=(0, 0, -1.0), com=(0, 0, -0.4), inertia=(0.01, 0.01, 0.001),
               joints=[dict(name="j2", type="hinge", axis=(0, 1, 0), damping=0.2)])
    return b.build()


def test_first_order_convergence_on_a_damped_double_pendulum(every=4):
    m = _pendulum()
    q0, T = jnp.array([1.0, -0.5]), 1.0
    ref = diffmb.simulate(m, q0, None, t1=T, dt=1.0 / 6400, solver="rk4",
                          forces=(JointDamping(),), saveat=[T])
    errs = []
    for n in (100, 200, 400):
        tr = diffmb.simulate(m, q0, None, t1=T, dt=T / n,
                             solver=ImplicitVelocityEuler(jacobian_every=every),
                             forces=(JointDamping(),), saveat=[T])
        errs.append(float(jnp.max(jnp.abs(tr.q[-1] - ref.q[-1]))))
    rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all((rates > 0.85) & (rates < 1.2)), (errs, rates)


@pytest.mark.slow
def test_gradient_is_that_of_the_discrete_map():
    # a held Jacobian (every 5 steps) is part of the discrete map: its derivative counts
    b = diffmb.ModelBuilder("pend1")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.02, 0.001),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0), damping=0.3)])
    m = b.build()

    def final(d):
        mm = diffmb.optim.set_params(m, {"joint.j1.damping": d})
        tr = diffmb.simulate(mm, jnp.array([1.0]), None, t1=0.5, dt=0.01,
                             solver=ImplicitVelocityEuler(jacobian_every=5),
                             forces=(JointDamping(),), saveat=[0.5])
        return tr.q[-1, 0]

    g = float(jax.grad(final)(0.3))
    e = 1e-6
    fd = (float(final(0.3 + e)) - float(final(0.3 - e))) / (2 * e)
    assert g == pytest.approx(fd, rel=1e-6)
    gf = float(jax.jacfwd(final)(0.3))
    assert gf == pytest.approx(g, rel=1e-10)


def test_batched_runs_equal_single_runs():
    m = _pendulum()
    q0s = jnp.array([[1.0, -0.5], [0.3, 0.2], [-0.7, 1.1]])
    sol = ImplicitVelocityEuler(jacobian_every=7)

    def run(q0):
        return diffmb.simulate(m, q0, None, t1=0.3, dt=0.01, solver=sol,
                               forces=(JointDamping(),), saveat=[0.3]).q[-1]

    batched = jax.vmap(run)(q0s)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(run(q0s[i])), rtol=1e-13)


COUPLED = """<mujoco><option gravity="0 0 -9.81"/><worldbody>
  <body name="a"><joint name="ja" type="hinge" axis="0 1 0" damping="50"/>
    <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03" mass="1" contype="0" conaffinity="0"/></body>
  <body name="b" pos="0 0.2 0"><joint name="jb" type="hinge" axis="0 1 0" damping="80"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="2"
      contype="0" conaffinity="0"/></body>
</worldbody><equality><joint joint1="ja" joint2="jb" polycoef="0 -1 0 0 0"/></equality>
</mujoco>"""


def test_exact_coupling_is_held_to_round_off(tmp_path):
    p = tmp_path / "coupled.xml"
    p.write_text(COUPLED)
    model = diffmb.load_mjcf(p)
    forces = diffmb.mjcf_forces(p, exact_couplings=True)
    tr = diffmb.simulate(model, jnp.array([0.3, -0.3]), jnp.array([2.0, -2.0]), t1=1.0,
                         dt=0.02, solver=ImplicitVelocityEuler(jacobian_every=5), forces=forces)
    assert np.max(np.abs(np.asarray(tr.q[:, 0] + tr.q[:, 1]))) < 1e-13
    assert np.max(np.abs(np.asarray(tr.v[:, 0] + tr.v[:, 1]))) < 1e-12
    assert np.ptp(np.asarray(tr.q[:, 0])) > 5e-3  # it moved (creeping: h λ ≈ 20 here)


def test_refusals():
    m = _slide()
    with pytest.raises(ValueError, match="jacobian_every"):
        ImplicitVelocityEuler(jacobian_every=0)
    with pytest.raises(ValueError, match="fixed steps only"):
        diffmb.simulate(m, jnp.zeros(1), jnp.ones(1), t1=0.1, dt=0.01,
                        solver=ImplicitVelocityEuler(), adaptive=True)
    with pytest.raises(TypeError, match="AbstractSecondOrderSystem"):  # no (q, v) system in args
        term = diffrax.ODETerm(lambda t, y, args: (y[1], -y[0]))
        diffrax.diffeqsolve(term, ImplicitVelocityEuler(), 0.0, 0.1, 0.01,
                            (jnp.ones(1), jnp.ones(1)))


def test_a_diffrax_solver_in_diffrax_own_loop():
    """A diffrax solver like any other: diffrax's diffeqsolve with constant steps (simulate's
    loop="diffrax") follows the same implicit Euler recursion v_n = v0 / (1 + h c)^n, the
    Jacobian held over 3 steps by the step count in the solver state."""
    m, h, n = _slide(), 0.01, 10
    assert not isinstance(ImplicitVelocityEuler(), diffrax.AbstractAdaptiveSolver)
    tr = diffmb.simulate(m, jnp.zeros(1), jnp.ones(1), t1=n * h, dt=h, loop="diffrax",
                         solver=ImplicitVelocityEuler(jacobian_every=3), forces=(JointDamping(),))
    v = (1.0 + h * C_DAMP) ** (-np.arange(n + 1, dtype=float))
    np.testing.assert_allclose(np.asarray(tr.v[:, 0]), v, rtol=1e-12, atol=1e-300)
    assert int(tr.num_steps) == n
