"""Derivatives of forward dynamics (ABA's custom tangent by inverse dynamics) against
Pinocchio's analytic ABA derivatives and against central differences."""

from importlib import resources

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.dynamics.aba import _aba

from .oracles import PinocchioPair, erd_path, rel_err
from .random_trees import random_mjcf


def _with(m, mass, g):
    return eqx.tree_at(lambda x: (x.body_mass, x.gravity), m, (mass, g))


@pytest.mark.slow
def test_aba_derivatives_vs_pinocchio():
    """∂a/∂q, ∂a/∂v, ∂a/∂τ of a revolute arm (UR5) by forward and reverse mode against
    pinocchio.computeABADerivatives (independent analytic derivatives)."""
    pair = PinocchioPair(erd_path("ur_description/urdf/ur5_robot.urdf"))
    pin, m = pair.pin, pair.model
    rng = np.random.default_rng(3)
    fd = lambda q, v, t: diffmb.forward_dynamics(m, q, v, t)
    jrev = jax.jit(jax.jacrev(fd, argnums=(0, 1, 2)))
    jfwd = jax.jit(jax.jacfwd(fd, argnums=(0, 1, 2)))
    for _ in range(3):
        q, v, tau = pair.random_state(rng)
        qp, vp, tp, perm = pair.to_pin(q, v, tau)
        dq, dv, dt = (np.asarray(x) for x in pin.computeABADerivatives(pair.pm, pair.pd, qp, vp, tp))
        P = np.ix_(perm, perm)
        for J in (jrev(q, v, tau), jfwd(q, v, tau)):
            assert rel_err(np.asarray(J[0])[P], dq) < 1e-9
            assert rel_err(np.asarray(J[1])[P], dv) < 1e-9
            assert rel_err(np.asarray(J[2])[P], dt) < 1e-9


def _central(f, x, h):
    """Fourth-order central differences (truncation O(h⁴), round-off O(eps/h))."""
    x = np.asarray(x, float)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        f_ = lambda k, e=e: np.asarray(f(x + k * e))
        cols.append((8 * (f_(1) - f_(-1)) - (f_(2) - f_(-2))) / (12 * h))
    return np.stack(cols, axis=-1)


@pytest.mark.slow
def test_ball_chain_derivatives_vs_central_differences():
    """The four-box chain (ball joints, quaternions in R⁴, gravity, armature 0): Jacobians of
    the accelerations with respect to q (all four quaternion components, off the unit
    sphere too), v, τ, the masses, the gravity vector and the external wrenches."""
    m = diffmb.load_mjcf(str(resources.files("diffmb") / "assets" / "chain4.xml"))
    rng = np.random.default_rng(4)
    q = np.asarray(m.qpos0) + 0.05 * rng.normal(size=m.nq)  # quaternions not of unit norm
    v, tau = rng.normal(size=m.nv), rng.normal(size=m.nv)
    fe = rng.normal(size=(m.n_bodies, 6))
    fd = jax.jit(lambda q, v, t, fe, mass, g: diffmb.forward_dynamics(
        _with(m, mass, g), q, v, t, fe))
    args = [q, v, tau, fe, np.asarray(m.body_mass), np.asarray(m.gravity)]
    J = jax.jit(jax.jacrev(fd, argnums=tuple(range(6))))(*args)
    Jf = jax.jit(jax.jacfwd(fd, argnums=tuple(range(6))))(*args)
    for i, x in enumerate(args):
        f_i = lambda xi, i=i: fd(*[xi if k == i else a for k, a in enumerate(args)])
        # steps where truncation (h⁴) and round-off (ABA's ~1e-13/h) balance
        ref = _central(f_i, x, 1e-3 if i == 0 else 1e-2).reshape(m.nv, *np.shape(x))
        assert rel_err(J[i], ref) < 1e-8, i
        assert rel_err(Jf[i], ref) < 1e-8, i


def test_custom_tangent_matches_differentiated_sweeps():
    """The rule's derivative with respect to every model parameter equals plain autodiff of the
    sweeps (symmetric part for inertia matrices), on a branched tree with hinges and balls."""
    import mujoco

    from diffmb.io.mjcf import from_mjmodel

    xml = random_mjcf("floating_branches", np.random.default_rng(5))
    m = from_mjmodel(mujoco.MjModel.from_xml_string(xml))
    rng = np.random.default_rng(6)
    q = diffmb.dynamics.configuration.normalize(m, jnp.asarray(
        np.asarray(m.qpos0) + 0.3 * rng.normal(size=m.nq)))
    v, tau = rng.normal(size=m.nv), rng.normal(size=m.nv)
    w = rng.normal(size=m.nv)
    loss_rule = lambda mm: jnp.dot(w, diffmb.forward_dynamics(mm, q, v, tau))
    loss_plain = lambda mm: jnp.dot(w, _aba(mm, q, v, tau, None)[0])
    g1 = jax.jit(jax.grad(loss_rule, allow_int=True))(m)  # one compilation, not one per op
    g2 = jax.jit(jax.grad(loss_plain, allow_int=True))(m)
    sym = lambda x: 0.5 * (x + np.swapaxes(x, -1, -2))
    for name in ("body_mass", "body_com", "body_pos", "node_pos", "node_axis", "armature",
                 "gravity"):
        a, b = np.asarray(getattr(g1, name)), np.asarray(getattr(g2, name))
        assert rel_err(a, b) < 1e-10, name
    assert rel_err(sym(np.asarray(g1.body_inertia)), sym(np.asarray(g2.body_inertia))) < 1e-10


@pytest.mark.slow
def test_second_derivatives_match_differentiated_sweeps():
    """Second derivatives through the rule (∂/∂q of ∂a/∂v, ∂/∂mass of ∂a/∂q: what an implicit
    step's Jacobian or a Hessian needs) equal plain autodiff of the sweeps, on a double
    pendulum with a ball joint."""
    b = diffmb.ModelBuilder("pend")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.025, 0.01),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0))])
    b.add_body("l2", 0, mass=0.5, pos=(0, 0, -1.0), com=(0.1, 0, -0.4),
               inertia=(0.01, 0.012, 0.005), joints=[dict(name="j2", type="ball")])
    m = b.build()
    rng = np.random.default_rng(7)
    q = diffmb.dynamics.configuration.normalize(m, jnp.asarray(
        np.asarray(m.qpos0) + 0.4 * rng.normal(size=m.nq)))
    v, tau = jnp.asarray(rng.normal(size=m.nv)), jnp.asarray(rng.normal(size=m.nv))
    rule = lambda mm, qq, vv: diffmb.forward_dynamics(mm, qq, vv, tau)  # noqa: E731
    plain = lambda mm, qq, vv: _aba(mm, qq, vv, tau, None)[0]  # noqa: E731
    out = {}
    for name, f_ in (("rule", rule), ("plain", plain)):
        dqdv = jax.jit(jax.jacfwd(lambda qq, f_=f_: jax.jacfwd(lambda vv: f_(m, qq, vv))(v)))(q)
        dmdq = jax.jit(jax.jacrev(lambda mass, f_=f_: jax.jacfwd(
            lambda qq: f_(eqx.tree_at(lambda x: x.body_mass, m, mass), qq, v))(q)))(m.body_mass)
        out[name] = (np.asarray(dqdv), np.asarray(dmdq))
    assert np.max(np.abs(out["plain"][0])) > 1e-2  # not trivially zero
    for a, b_ in zip(out["rule"], out["plain"], strict=True):
        assert rel_err(a, b_) < 1e-9
