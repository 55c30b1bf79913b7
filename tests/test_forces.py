"""Force elements against MuJoCo's passive and actuator forces, and against closed forms.

Oracles: ``mj_forward``'s ``qfrc_passive`` (damping + springs, ball springs by ``mju_subQuat``),
``qfrc_actuator`` (motor/position/velocity/general with ctrl and force clamping) and ``qacc`` on
tests/data/sim_actuated.xml; closed-form motions for soft limits, a user element and a body wrench.
"""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.forces.elements import (
    AbstractForce,
    Actuators,
    BodyWrench,
    GeneralizedForce,
    JointDamping,
    JointLimits,
    JointSpring,
    total_force,
)
from diffmb.io.mjcf import actuators_from_mjcf, mjcf_forces

XML = Path(__file__).parent / "data" / "sim_actuated.xml"


@pytest.fixture(scope="module")
def setup():
    mj = mujoco.MjModel.from_xml_path(str(XML))
    return mj, mujoco.MjData(mj), diffmb.load_mjcf(XML)


def _state(mj, rng):
    q = mj.qpos0 + rng.normal(size=mj.nq) * 0.6
    for a in (mj.jnt_qposadr[3], mj.jnt_qposadr[4] + 3):
        q[a : a + 4] /= np.linalg.norm(q[a : a + 4])
    return q, rng.normal(size=mj.nv)


@pytest.mark.slow
def test_passive_and_actuator_forces_match_mujoco(setup):
    mj, d, model = setup
    forces = mjcf_forces(XML)
    act = forces[2]
    assert isinstance(act, Actuators) and act.nu == 4
    passive = jax.jit(
        lambda q, v: total_force((JointDamping(), JointSpring()), model, 0.0, q, v, None)[0]
    )
    actf = jax.jit(lambda q, v, u: act(model, 0.0, q, v, u)[0])
    acc = jax.jit(
        lambda q, v, u: diffmb.forward_dynamics(
            model, q, v, total_force(forces, model, 0.0, q, v, u)[0]
        )
    )
    rng = np.random.default_rng(0)
    for _ in range(4):
        q, v = _state(mj, rng)
        u = rng.normal(size=mj.nu) * 2.5  # beyond ctrlrange: clamping is exercised
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, d)
        np.testing.assert_allclose(np.asarray(passive(q, v)), d.qfrc_passive, atol=1e-12)
        np.testing.assert_allclose(np.asarray(actf(q, v, u)), d.qfrc_actuator, atol=1e-12)
        np.testing.assert_allclose(np.asarray(acc(q, v, u)), d.qacc, atol=1e-9, rtol=1e-9)


def test_actuator_types_closed_form():
    # motor: gear*clip(u); position: kp (u - q) - kv qdot; velocity: kv (u - qdot)
    a = Actuators(
        dof=(0, 0, 0),
        qadr=(0, 0, 0),
        gear=[2.0, 1.0, 1.0],
        gain=[1.0, 5.0, 3.0],
        bias=[[0, 0, 0], [0, -5.0, -0.5], [0, 0, -3.0]],
        ctrlrange=[[-1, 1], [0, 0], [0, 0]],
        ctrllimited=[True, False, False],
    )
    q, v, u = jnp.array([0.3]), jnp.array([-0.7]), jnp.array([4.0, 0.5, 0.2])
    f = np.asarray(a.actuator_force(q, v, u))
    np.testing.assert_allclose(f, [1.0, 5 * (0.5 - 0.3) - 0.5 * -0.7, 3 * (0.2 + 0.7)], atol=1e-15)
    m = diffmb.ModelBuilder()
    m.add_body("b", mass=1.0, inertia=[1, 1, 1], joints=[dict(type="hinge", name="h")])
    model = m.build()
    tau, fe = a(model, 0.0, q, v, u)
    assert fe is None
    np.testing.assert_allclose(np.asarray(tau), [2.0 * f[0] + f[1] + f[2]], atol=1e-14)
    g = GeneralizedForce()(model, 0.0, q, v, jnp.array([1.5]))[0]
    np.testing.assert_allclose(np.asarray(g), [1.5])


def _slider(gravity=(0, 0, -9.81), axis=(0, 0, 1), mass=2.0):
    b = diffmb.ModelBuilder()
    b.gravity = np.asarray(gravity, float)
    b.add_body("m", mass=mass, inertia=[0.1, 0.1, 0.1], joints=[dict(type="slide", axis=axis)])
    return b.build()


def test_joint_limits_force_and_settling():
    lim = JointLimits(dof=(0,), qadr=(0,), lower=[-0.1], upper=[0.2], stiffness=400.0, damping=40.0)
    model = _slider()
    f = jax.jit(lambda q, v: lim(model, 0.0, q, v, None)[0][0])
    assert float(f(jnp.array([0.0]), jnp.array([3.0]))) == 0.0  # inside: nothing
    np.testing.assert_allclose(float(f(jnp.array([0.25]), jnp.array([1.0]))), -400 * 0.05 - 40.0)
    np.testing.assert_allclose(float(f(jnp.array([-0.3]), jnp.array([-2.0]))), 400 * 0.2 + 80.0)
    # a 2 kg mass dropped onto the lower limit settles at lower - m g / k (closed form)
    tr = diffmb.simulate(
        model, jnp.array([0.0]), jnp.array([0.0]), t1=6.0, dt=0.005, saveat=[6.0], forces=(lim,)
    )
    np.testing.assert_allclose(float(tr.q[-1, 0]), -0.1 - 2.0 * 9.81 / 400.0, atol=1e-8)
    assert abs(float(tr.v[-1, 0])) < 1e-8


class LinearDrag(AbstractForce):
    """The documented user-element pattern: a few lines, parameters as array leaves."""

    c: jnp.ndarray

    def __call__(self, model, t, q, v, ctrl):
        return -self.c * v, None


def test_user_element_closed_form():
    model = _slider(gravity=(0, 0, 0), axis=(1, 0, 0), mass=2.0)
    m, x0, v0, T = 2.0, 0.1, 1.5, 1.2

    def final(c):
        tr = diffmb.simulate(
            model,
            jnp.array([x0]),
            jnp.array([v0]),
            t1=T,
            dt=0.01,
            saveat=[T],
            forces=(LinearDrag(c),),
        )
        return tr.q[-1, 0]

    c = 0.8
    exact = lambda c: x0 + v0 * m / c * (1 - np.exp(-c * T / m))
    np.testing.assert_allclose(float(final(jnp.asarray(c))), exact(c), atol=1e-11)


def test_body_wrench_free_body():
    # zero gravity: constant world force F and torque about a principal axis, closed form
    b = diffmb.ModelBuilder()
    b.gravity = np.zeros(3)
    b.add_body("box", mass=3.0, inertia=[0.2, 0.3, 0.4], joints=[dict(type="free")])
    model = b.build()
    F, tz = np.array([0.6, -0.3, 1.2]), 0.08
    el = BodyWrench("box", [*F, 0.0, 0.0, tz])
    q0 = jnp.array([0.0, 0, 0, 1, 0, 0, 0])
    tr = diffmb.simulate(model, q0, jnp.zeros(6), t1=1.5, dt=0.01, forces=(el,), saveat=[1.5])
    np.testing.assert_allclose(np.asarray(tr.q[-1, :3]), 0.5 * F / 3.0 * 1.5**2, atol=1e-12)
    ang = 0.5 * tz / 0.4 * 1.5**2  # rotation about the fixed z axis
    np.testing.assert_allclose(
        np.asarray(tr.q[-1, 3:]), [np.cos(ang / 2), 0, 0, np.sin(ang / 2)], atol=1e-10
    )


def test_elements_are_pytrees_with_trainable_leaves():
    act = actuators_from_mjcf(XML)
    leaves = eqx.filter(act, eqx.is_inexact_array)
    assert leaves.gain.shape == (4,) and leaves.gear.shape == (4,)
    with pytest.raises(ValueError, match="activation dynamics mjDYN_MUSCLE"):
        actuators_from_mjcf(
            mujoco.MjModel.from_xml_string(
                '<mujoco><worldbody><body><joint name="j"/><geom size=".1"/></body></worldbody>'
                '<actuator><general joint="j" dyntype="muscle"/></actuator></mujoco>'
            )
        )
    filtered = actuators_from_mjcf(mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body><joint name="j"/><geom size=".1"/></body></worldbody>'
        '<actuator><position joint="j" kp="1" timeconst="0.1"/></actuator></mujoco>'))
    leaves = eqx.filter(filtered, eqx.is_inexact_array)
    assert leaves.timeconst.shape == (1,) and leaves.actuators.gain.shape == (1,)


# ------------------------------------------------------------------------------------------
# Numbers are checked where they enter: class, field, value and admissible range named.
# ------------------------------------------------------------------------------------------

from diffmb.forces.elements import Couplings, FixedTendons, JointFriction  # noqa: E402

_ACT = dict(dof=(0,), qadr=(0,), gear=[1.0], gain=[1.0], bias=[[0.0, 0.0, 0.0]])


@pytest.mark.parametrize("build, err, match", [
    (lambda: JointDamping([0.1, -0.2]), ValueError, r"JointDamping.damping\[1\] = -0.2: must be >= 0"),
    (lambda: JointDamping([np.nan]), ValueError, r"JointDamping.damping\[0\] = nan: must be finite"),
    (lambda: JointSpring([-3.0]), ValueError, r"JointSpring.stiffness\[0\] = -3: must be >= 0"),
    (lambda: JointSpring(qpos_spring=[np.inf]), ValueError, r"JointSpring.qpos_spring\[0\] = inf"),
    (lambda: Actuators(**{**_ACT, "gain": [np.nan]}), ValueError, r"Actuators.gain\[0\] = nan"),
    (lambda: Actuators(**{**_ACT, "gear": [1.0, 2.0]}), TypeError, r"Actuators.gear: expected shape \(1,?\)"),
    (lambda: Actuators(**_ACT, ctrlrange=[[1.0, -1.0]], ctrllimited=[True]), ValueError,
     r"Actuators.ctrlrange\[0\] = \[1, -1\]: the lower bound must not exceed the upper"),
    (lambda: Actuators(**_ACT, forcerange=[[0.0, np.inf]], forcelimited=[True]), ValueError,
     r"Actuators.forcerange\[0, 1\] = inf: must be finite"),
    (lambda: Actuators(**{**_ACT, "dof": (-2,)}), ValueError, r"Actuators.dof\[0\] = -2"),
    (lambda: Actuators(**_ACT, joint_forcerange=[[2.0, 1.0]], joint_forcelimited=[True]),
     ValueError, r"Actuators.joint_forcerange\[0\] = \[2, 1\]"),
    (lambda: GeneralizedForce(dofs=[-1]), ValueError, r"GeneralizedForce.dofs\[0\] = -1"),
    (lambda: GeneralizedForce(scale=[np.nan]), ValueError, r"GeneralizedForce.scale\[0\] = nan"),
    (lambda: JointLimits((0,), (0,), [0.5], [-0.5], 1.0, 1.0), ValueError,
     r"JointLimits.\[lower, upper\]\[0\] = \[0.5, -0.5\]"),
    (lambda: JointLimits((0,), (0,), [-0.5], [0.5], -1.0, 1.0), ValueError,
     r"JointLimits.stiffness = -1: must be >= 0"),
    (lambda: JointLimits((0,), (0,), [-0.5], [0.5], 1.0, np.nan), ValueError,
     r"JointLimits.damping = nan: must be finite"),
    (lambda: JointLimits((0,), (0, 1), [-0.5], [0.5], 1.0, 1.0), TypeError, r"JointLimits.qadr"),
    (lambda: JointFriction([0.1, -0.1], 1.0), ValueError, r"JointFriction.friction\[1\] = -0.1"),
    (lambda: JointFriction([0.1], -2.0), ValueError, r"JointFriction.slope = -2: must be >= 0"),
    (lambda: FixedTendons([[1.0, -1.0]], (0, 1), damping=-1.0), ValueError,
     r"FixedTendons.damping = -1: must be >= 0"),
    (lambda: FixedTendons([[1.0, np.nan]], (0, 1)), ValueError, r"FixedTendons.coef\[0, 1\] = nan"),
    (lambda: FixedTendons([[1.0, -1.0]], (0, 1), limited=[True], range=[[0.3, -0.3]]), ValueError,
     r"FixedTendons.range\[0\]"),
    (lambda: Couplings(np.eye(2)[:1], np.zeros((1, 2)), 0.0, 0.0, np.zeros((1, 5)), -5.0, 1.0,
                       (0, 1)), ValueError, r"Couplings.stiffness = -5: must be >= 0"),
    (lambda: Couplings(np.eye(2)[:1], np.zeros((1, 3)), 0.0, 0.0, np.zeros((1, 5)), 5.0, 1.0,
                       (0, 1)), TypeError, r"Couplings.coef2: expected shape \(1, 2\)"),
    (lambda: BodyWrench("box", [0, 0, np.inf, 0, 0, 0]), ValueError, r"BodyWrench.wrench\[2\] = inf"),
    (lambda: BodyWrench("box", [0, 0, 1]), TypeError, r"BodyWrench.wrench: expected shape \(6,?\)"),
    (lambda: BodyWrench(3, np.zeros(6)), TypeError, r"BodyWrench.body = 3"),
])
def test_elements_refuse_meaningless_numbers(build, err, match):
    with pytest.raises(err, match=match):
        build()


def test_elements_check_indices_and_shapes_against_the_model(setup):
    """Indices and per-dof arrays that do not fit the model they are evaluated on are refused
    with the model's size, also inside jit (the sizes are static)."""
    _, _, model = setup
    q, v = jnp.asarray(np.zeros(model.nq)), jnp.zeros(model.nv)
    nv = model.nv
    cases = [
        (Actuators(**{**_ACT, "dof": (nv,), "qadr": (0,)}), ValueError,
         rf"Actuators.dof\[0\] = {nv}: must be an index in \[0, {nv}\)"),
        (GeneralizedForce(dofs=[0, nv + 3]), ValueError, rf"GeneralizedForce.dofs\[1\] = {nv + 3}"),
        (JointLimits((0,), (model.nq,), -1.0, 1.0, 1.0, 1.0), ValueError,
         rf"JointLimits.qadr\[0\] = {model.nq}: .*model nq = {model.nq}"),
        (JointDamping(np.ones(nv + 1)), TypeError, rf"JointDamping.damping: expected shape \(\) or \({nv},\)"),
        (JointFriction(np.ones(nv + 2), 1.0), TypeError, r"JointFriction.friction"),
    ]
    for el, err, match in cases:
        with pytest.raises(err, match=match):
            el(model, 0.0, q, v, jnp.ones(max(nv, 1)))
        with pytest.raises(err, match=match):
            jax.jit(lambda q, v, el=el: el(model, 0.0, q, v, jnp.ones(max(nv, 1)))[0])(q, v)


def test_traced_numbers_pass_unchecked():
    """Inside grad the numbers are traced and not read: a damping built there is not refused
    (its value comes from a checked object or an optimiser), and the gradient is the law's."""
    b = diffmb.model.ModelBuilder(name="one")
    b.add_body("b", mass=1.0, inertia=[0.1, 0.1, 0.1], joints=[dict(type="slide", axis=[1, 0, 0])])
    model = b.build()
    g = jax.grad(lambda d: JointDamping(jnp.array([d]))(model, 0.0, jnp.zeros(1),
                                                         jnp.array([2.0]), None)[0][0])(-1.0)
    assert float(g) == -2.0


def test_stateful_element_is_evaluated_with_its_state():
    """A stateful element declares init_state and stateful_call; the stateless call signature
    refuses it with a TypeError that says how to pass the state, and forward carries it."""
    from diffmb.forces.elements import AbstractStatefulForce, init_states

    class Lag(AbstractStatefulForce):
        k: float = 2.0

        def init_state(self, model):
            return jnp.ones(1)

        def stateful_call(self, model, t, q, v, ctrl, state):
            return -self.k * state, None, -state

    b = diffmb.model.ModelBuilder(name="one")
    b.add_body("b", mass=1.0, inertia=[0.1, 0.1, 0.1], joints=[dict(type="slide", axis=[1, 0, 0])])
    model = b.build()
    el = Lag()
    with pytest.raises(TypeError, match="Lag has a state: evaluate it with stateful_call"):
        el(model, 0.0, jnp.zeros(1), jnp.zeros(1), None)
    assert init_states((JointDamping(), el), model)[0] is None
    a, ds = diffmb.forward(model, jnp.zeros(1), jnp.zeros(1), forces=(el,))
    assert float(a[0]) == -2.0 and float(ds[0][0]) == -1.0


def test_a_control_of_the_wrong_length_names_the_actuators():
    """Two actuators given three values: a TypeError naming the expected shape and the
    actuators, not a failure inside ``reshape``; the right length passes."""
    act = Actuators(dof=(0, 1), qadr=(0, 1), gear=[1.0, 1.0], gain=[1.0, 2.0],
                    bias=[[0.0, 0.0, 0.0]] * 2, names=("m1", "m2"))
    q = v = jnp.zeros(2)
    with pytest.raises(TypeError, match=r"ctrl has shape \(3,\), expected \(2,\).*m1, m2"):
        act.actuator_force(q, v, jnp.ones(3))
    np.testing.assert_allclose(act.actuator_force(q, v, jnp.array([1.0, 1.0])), [1.0, 2.0])


def test_joint_blocks_of_springs_and_damping_equal_their_forward_mode_derivatives():
    """JointSpring's and JointDamping's closed-form blocks (what the implicit contact step
    uses instead of forward mode) against forward mode of the elements' own forces along
    q + q̇(q, w), on a floating tree with hinges, a slide and a ball, away from the springs'
    rest positions."""
    from diffmb.dynamics.configuration import normalize, qdot
    from diffmb.forces.elements import JointDamping, JointSpring
    from diffmb.io.mjcf import from_mjmodel

    from .random_trees import random_mjcf

    m = from_mjmodel(mujoco.MjModel.from_xml_string(
        random_mjcf("floating_branches", np.random.default_rng(5))))
    rng = np.random.default_rng(8)
    q = normalize(m, jnp.asarray(np.asarray(m.qpos0) + 0.4 * rng.normal(size=m.nq)))
    qs = normalize(m, jnp.asarray(np.asarray(m.qpos0) + 0.4 * rng.normal(size=m.nq)))
    v = jnp.asarray(rng.normal(size=m.nv))
    for el in (JointSpring(rng.uniform(1, 10, m.nv), qs), JointDamping(rng.uniform(1, 3, m.nv))):
        Kq, Dv = el.joint_blocks(m, 0.0, q, v, None)
        tau = lambda w, vv, el=el: el(m, 0.0, q + qdot(m, q, w), vv, None)[0]  # noqa: E731
        Kf, Df = jax.jacfwd(tau, argnums=(0, 1))(jnp.zeros(m.nv), v)
        np.testing.assert_allclose(Kq, Kf, rtol=1e-12, atol=1e-12, err_msg=type(el).__name__)
        np.testing.assert_allclose(Dv, Df, rtol=1e-12, atol=1e-12, err_msg=type(el).__name__)


@pytest.mark.parametrize("case", ["joints", "tendons", "saturated"])
def test_joint_blocks_of_actuators_equal_their_forward_mode_derivatives(case):
    """Actuators' blocks (position and velocity servos, a motor) against forward mode of the
    element's force along q + q̇(q, w): joint transmissions, fixed-tendon transmissions
    (coef) on a floating tree, and force and joint-force ranges that saturate some of them."""
    from diffmb.dynamics.configuration import normalize, qdot
    from diffmb.forces.elements import Actuators, dof_qpos_addresses
    from diffmb.io.mjcf import from_mjmodel

    from .random_trees import random_mjcf

    m = from_mjmodel(mujoco.MjModel.from_xml_string(
        random_mjcf("floating_branches", np.random.default_rng(5))))
    rng = np.random.default_rng(9)
    q = normalize(m, jnp.asarray(np.asarray(m.qpos0) + 0.4 * rng.normal(size=m.nq)))
    v = jnp.asarray(rng.normal(size=m.nv))
    hinge = [j for j, t in enumerate(m.joint_types) if t in ("hinge", "slide")]
    dof = [m.joint_v[j] for j in hinge]
    qadr = [m.joint_q[j] for j in hinge]
    nu = len(dof)
    kp, kv = rng.uniform(5, 20, nu), rng.uniform(0.5, 2, nu)
    bias = np.stack([np.zeros(nu), -kp, -kv], 1)
    bias[0] = 0.0  # a motor
    gain = np.where(np.arange(nu) == 0, 1.0, kp)
    kw = {}
    if case == "tendons":
        coef = np.zeros((nu, m.nv))
        coef[np.arange(nu), dof] = 1.0
        coef[:, dof[0]] += 0.5  # every tendon also pulls on the first hinge
        kw = dict(coef=coef, dof_qadr=dof_qpos_addresses(m))
    if case == "saturated":
        kw = dict(forcerange=np.tile([-1.0, 1.0], (nu, 1)), forcelimited=[i % 2 == 0
                                                                           for i in range(nu)],
                  joint_forcerange=np.tile([-0.5, 0.5], (m.nv, 1)),
                  joint_forcelimited=[i == dof[1] for i in range(m.nv)])
    act = Actuators(dof, qadr, rng.uniform(0.5, 2, nu), gain, bias, **kw)
    ctrl = jnp.asarray(rng.normal(size=nu))
    Kq, Dv = act.joint_blocks(m, 0.0, q, v, ctrl)
    tau = lambda w, vv: act(m, 0.0, q + qdot(m, q, w), vv, ctrl)[0]  # noqa: E731
    Kf, Df = jax.jacfwd(tau, argnums=(0, 1))(jnp.zeros(m.nv), v)
    assert np.abs(Kf).max() > 1.0
    np.testing.assert_allclose(Kq, Kf, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Dv, Df, rtol=1e-12, atol=1e-12)
