"""Configuration maps (qdot, integrate, normalize, difference) against MuJoCo's own.

Oracles: ``mujoco.mj_integratePos`` / ``mj_differentiatePos`` on a model with hinge, slide,
ball and free joints, central differences of MuJoCo's exact integration for q̇, and the unit norm.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.dynamics.configuration import difference, integrate, normalize, qdot

DATA = Path(__file__).parent / "data"
XML = DATA / "sim_actuated.xml"


@pytest.fixture(scope="module")
def models():
    return mujoco.MjModel.from_xml_path(str(XML)), diffmb.load_mjcf(XML)


def _random_state(mj, rng):
    q = mj.qpos0.copy()
    q += rng.normal(size=mj.nq) * 0.7
    for j in range(mj.njnt):
        a = mj.jnt_qposadr[j]
        if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
            q[a : a + 4] /= np.linalg.norm(q[a : a + 4])
        elif mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            q[a + 3 : a + 7] /= np.linalg.norm(q[a + 3 : a + 7])
    return q, rng.normal(size=mj.nv) * 2.0


def test_integrate_matches_mujoco(models):
    mj, model = models
    rng = np.random.default_rng(1)
    f = jax.jit(lambda q, v, dt: integrate(model, q, v, dt))
    for _ in range(5):
        q, v = _random_state(mj, rng)
        for dt in (1e-3, 0.37, 2.0):  # large rotations too: the map is exact
            ref = q.copy()
            mujoco.mj_integratePos(mj, ref, v, dt)
            np.testing.assert_allclose(np.asarray(f(q, v, dt)), ref, atol=1e-13, rtol=0)


def test_difference_matches_mujoco_and_inverts_integrate(models):
    mj, model = models
    rng = np.random.default_rng(2)
    diff = jax.jit(lambda a, b: difference(model, a, b))
    integ = jax.jit(lambda a, d: integrate(model, a, d, 1.0))
    for _ in range(5):
        q0, _ = _random_state(mj, rng)
        q1, _ = _random_state(mj, rng)
        ref = np.zeros(mj.nv)
        mujoco.mj_differentiatePos(mj, ref, 1.0, q0, q1)
        d = np.asarray(diff(q0, q1))
        np.testing.assert_allclose(d, ref, atol=1e-12, rtol=0)
        back = np.asarray(integ(q0, d))
        ref_back = q0.copy()
        mujoco.mj_integratePos(mj, ref_back, ref, 1.0)
        np.testing.assert_allclose(back, ref_back, atol=1e-12)


def test_qdot_is_derivative_of_exact_flow(models):
    mj, model = models
    rng = np.random.default_rng(3)
    q, v = _random_state(mj, rng)
    h = 1e-6
    qp, qm = q.copy(), q.copy()
    mujoco.mj_integratePos(mj, qp, v, h)
    mujoco.mj_integratePos(mj, qm, v, -h)
    fd = (qp - qm) / (2 * h)
    np.testing.assert_allclose(np.asarray(qdot(model, q, v)), fd, atol=1e-8)
    # the rate map is tangent to every sphere |q| = const: d|q|^2/dt = 0 for each quaternion
    qd = np.asarray(qdot(model, 3.0 * q, v))
    for a in (mj.jnt_qposadr[3], mj.jnt_qposadr[4] + 3):
        assert abs(np.dot(3.0 * q[a : a + 4], qd[a : a + 4])) < 1e-12


def test_normalize_and_unit_norm(models):
    mj, model = models
    rng = np.random.default_rng(4)
    q, v = _random_state(mj, rng)
    qs = q * 1.3
    out = np.asarray(normalize(model, qs))
    b, fq = mj.jnt_qposadr[3], mj.jnt_qposadr[4] + 3
    np.testing.assert_allclose(out[b : b + 4], q[b : b + 4], atol=1e-15)
    np.testing.assert_allclose(out[fq : fq + 4], q[fq : fq + 4], atol=1e-15)
    np.testing.assert_allclose(out[:3], qs[:3])  # hinge/slide untouched
    np.testing.assert_allclose(out[fq - 3 : fq], qs[fq - 3 : fq])  # free position untouched
    # exact integration stays on the sphere after many large steps
    qq = jnp.asarray(q)
    step = jax.jit(lambda q: integrate(model, q, jnp.asarray(v) * 5.0, 0.9))
    for _ in range(200):
        qq = step(qq)
    qq = np.asarray(qq)
    assert abs(np.linalg.norm(qq[b : b + 4]) - 1) < 1e-13
    assert abs(np.linalg.norm(qq[fq : fq + 4]) - 1) < 1e-13


def test_transforms_and_grad(models):
    mj, model = models
    rng = np.random.default_rng(5)
    q, v = _random_state(mj, rng)
    qb = jnp.stack([jnp.asarray(q)] * 3)
    vb = jnp.stack([jnp.asarray(v) * s for s in (0.5, 1.0, 2.0)])
    out = jax.vmap(lambda q, v: integrate(model, q, v, 0.1))(qb, vb)
    for i in range(3):
        ref = q.copy()
        mujoco.mj_integratePos(mj, ref, np.asarray(vb[i]), 0.1)
        np.testing.assert_allclose(np.asarray(out[i]), ref, atol=1e-13)
    # gradient of a scalar of the integrated configuration w.r.t. v vs central differences
    w = rng.normal(size=mj.nq)
    loss = jax.jit(lambda vv: jnp.dot(jnp.asarray(w), integrate(model, jnp.asarray(q), vv, 0.3)))
    g = np.asarray(jax.grad(loss)(jnp.asarray(v)))
    h = 1e-6
    fd = np.array(
        [
            (loss(jnp.asarray(v + h * e)) - loss(jnp.asarray(v - h * e))) / (2 * h)
            for e in np.eye(mj.nv)
        ]
    )
    np.testing.assert_allclose(g, fd, atol=1e-8)
    # grad at zero velocity is finite (safe exp)
    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(jnp.zeros(mj.nv)))))


def test_joint_type_table_matches_mujoco(models):
    """The one joint table (diffmb.model.JointType) against MuJoCo's widths on a model with
    hinge, slide, ball and free joints; a joint's widths are its nodes' widths summed."""
    from diffmb.model import JOINT_TYPES, NODE_TYPES, JointType

    mj, model = models
    names = {int(mujoco.mjtJoint.mjJNT_HINGE): "hinge", int(mujoco.mjtJoint.mjJNT_SLIDE): "slide",
             int(mujoco.mjtJoint.mjJNT_BALL): "ball", int(mujoco.mjtJoint.mjJNT_FREE): "free"}
    for j in range(mj.njnt):
        jt = JointType(names[int(mj.jnt_type[j])])
        nq = (mj.jnt_qposadr[j + 1] if j + 1 < mj.njnt else mj.nq) - mj.jnt_qposadr[j]
        nv = (mj.jnt_dofadr[j + 1] if j + 1 < mj.njnt else mj.nv) - mj.jnt_dofadr[j]
        assert (jt.nq, jt.nv) == (nq, nv)
        assert model.joint_types[j] == jt and type(model.joint_types[j]) is str
    for t in JointType:
        assert (t.nq, t.nv) == (sum(n.nq for n in t.nodes), sum(n.nv for n in t.nodes))
        assert all(n in NODE_TYPES for n in t.nodes)
    assert set(JOINT_TYPES) == {"hinge", "slide", "ball", "free"}
    assert all(type(t) is str for t in model.node_type)
