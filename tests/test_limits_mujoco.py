"""Joint and fixed-tendon limits against MuJoCo's soft constraint, small and large violations.

MuJoCo's solver returns a lone limit row's force in closed form (one row, one Newton step), so
``diffmb.forward`` must give MuJoCo's ``qacc`` after ``mj_forward`` to round-off, whatever the
violation: inside the impedance transition (r < width), far outside (d = d_max) and where the
joint moves out of the violation fast enough that the limit (which only pushes) lets go. The
files are single hinges or two independent hinges (constant mass matrix), so a row's inverse
mass is MuJoCo's ``invweight0`` in every configuration; a three-joint chain checks limits
violated together, coupled through M⁻¹.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.forces.elements import JointLimits, soft_limit_force

_PENDULUM = """
<mujoco>
  <compiler angle="radian"/>
  <option timestep="0.001" integrator="RK4"/>
  <worldbody>
    <body name="link" pos="0 0 1">
      <joint name="j" type="hinge" axis="0 1 0" limited="true" range="-0.5 0.5" {joint}/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.04" mass="1.5" contype="0"
            conaffinity="0"/>
    </body>
  </worldbody>
  {extra}
</mujoco>
"""

_SOFT = {  # joint attributes: MuJoCo's defaults, the power arcs, the direct form, a margin
    "default": "",
    "arcs": 'solreflimit="0.05 0.7" solimplimit="0.8 0.97 0.05 0.3 3"',
    "direct": 'solreflimit="-4000 -30" solimplimit="0.85 0.95 0.01 0.5 2"',
    "margin": 'margin="0.05" solimplimit="0.9 0.95 0.002 0.5 1"',
    "flat": 'solimplimit="0.6 0.95 0 0.5 2"',  # width 0: MuJoCo's d = (d_min + d_max)/2
}


def _pendulum(tmp_path, joint="", extra=""):
    f = tmp_path / "pendulum.xml"
    f.write_text(_PENDULUM.format(joint=joint, extra=extra))
    return f


def _mujoco_qacc(path, q, v):
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = q, v
    mujoco.mj_forward(mj, d)
    return np.array(d.qacc)


@pytest.mark.parametrize("soft", sorted(_SOFT))
def test_joint_limit_accelerations_like_mujoco(tmp_path, soft):
    """Violations 0.0005 to 0.6 rad on both sides, at rest, moving in and moving out: MuJoCo's
    qacc to 1e-9 (relative to max(1, |qacc|)). The penalty spring this replaces was ~13x
    MuJoCo's for large violations and pulled the joint back in when it moved out."""
    path = _pendulum(tmp_path, _SOFT[soft])
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    acc = jax.jit(lambda q, v: diffmb.forward(model, q, v, forces=forces))
    unlimited = jax.jit(lambda q, v: diffmb.forward(model, q, v))
    worst, let_go = 0.0, 0
    for r in (0.0005, 0.003, 0.01, 0.1, 0.3, 0.5, 0.6):
        for side in (1.0, -1.0):
            for speed in (0.0, 0.5, -3.0):  # at rest, deeper, out of the violation
                q, v = np.array([side * (0.5 + r)]), np.array([side * speed])
                ref = _mujoco_qacc(path, q, v)
                a = np.asarray(acc(jnp.asarray(q), jnp.asarray(v)))
                worst = max(worst, float(np.abs(a - ref).max() / max(1.0, np.abs(ref).max())))
                free = np.asarray(unlimited(jnp.asarray(q), jnp.asarray(v)))
                let_go += bool(np.allclose(ref, free, rtol=0, atol=1e-12))
    assert worst < 1e-9, worst
    assert let_go >= 2  # some states where MuJoCo's limit applies no force were exercised


def test_large_violation_force_grows_with_mujocos_stiffness(tmp_path):
    """Far outside the range (d = d_max) the force per unit violation is MuJoCo's
    m d_max² k = m/T² (k = 1/(d_max² T² ζ²), ζ = 1), besides the fraction d_max of the load
    it cancels: the slope of MuJoCo's qacc between 0.3 and 0.6 rad is -1/T² to 1 %."""
    path = _pendulum(tmp_path)
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    acc = jax.jit(lambda q: diffmb.forward(model, q, jnp.zeros(1), forces=forces)[0])
    a = [float(acc(jnp.array([0.5 + r]))) for r in (0.3, 0.6)]
    mj = [float(_mujoco_qacc(path, [0.5 + r], [0.0])[0]) for r in (0.3, 0.6)]
    np.testing.assert_allclose(a, mj, rtol=1e-9)
    slope = (a[1] - a[0]) / 0.3  # gravity's share (0.05 of a few rad/s²) is below 0.1 %
    np.testing.assert_allclose(slope, -1.0 / 0.02**2, rtol=1e-2)


def _released_at_one_radian(path, dt, solver, t1=0.5):
    """The link released at rest at q = 1 rad: MuJoCo's q at each of its steps to ``t1`` (its
    own integrator and step ``dt``) and diffmb's with ``solver`` at the same step."""
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    d.qpos[:] = 1.0
    n = int(round(t1 / dt))
    ref = []
    for _ in range(n):
        mujoco.mj_step(mj, d)
        ref.append(d.qpos[0])
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    tr = diffmb.simulate(model, jnp.array([1.0]), jnp.array([0.0]), t1=t1, dt=dt,
                         solver=solver, saveat=np.arange(1, n + 1) * dt, forces=forces)
    return np.array(ref), np.asarray(tr.q[:, 0])


def test_release_from_far_outside_like_mujoco(tmp_path):
    """Released at rest 0.5 rad beyond its upper limit, the link is pushed back, lets go,
    swings to the lower limit and bounces: 0.5 s of RK4 at MuJoCo's step against MuJoCo's own
    RK4 on the same file (the same equations, so to 1e-8 rad); the old penalty law stopped
    the link at the upper limit instead."""
    ref, q = _released_at_one_radian(_pendulum(tmp_path), 1e-3, "rk4")
    assert np.min(ref) < -0.52  # MuJoCo's link reaches past the lower limit
    np.testing.assert_allclose(q, ref, rtol=0, atol=1e-8)


@pytest.mark.parametrize("soft", ["default", "arcs", "direct"])
def test_implicit_step_is_mujocos_euler_step_on_a_limit(tmp_path, soft):
    """The implicit contact step at the file's 5 ms takes MuJoCo's own Euler step through a
    limit: released 0.5 rad beyond its upper limit (and, with the "arcs" solref, with a time
    constant MuJoCo's refsafe raises to 2 h), the link is pushed back, swings to the lower
    limit and bounces, 0.5 s, to 1e-8 rad of MuJoCo's Euler on the same file: the rows'
    a_ref at the step's start, as MuJoCo computes it."""
    joint = _SOFT[soft].replace('solreflimit="0.05 0.7"', 'solreflimit="0.004 0.7"')
    path = tmp_path / "euler.xml"
    path.write_text(_PENDULUM.format(joint=joint, extra="").replace(
        'timestep="0.001" integrator="RK4"', 'timestep="0.005" integrator="Euler"'))
    ref, q = _released_at_one_radian(path, 5e-3, "implicit")
    assert np.min(ref) < -0.5  # past the lower limit
    np.testing.assert_allclose(q, ref, rtol=0, atol=1e-8)


def test_rest_under_an_actuator_load_like_mujoco(tmp_path):
    """A motor presses the damped link into its lower limit: the limit sees the motor's torque
    (the element is given the other forces), so the link comes to rest at MuJoCo's violation;
    1 s of RK4 against MuJoCo's RK4, to 1e-8 rad."""
    path = _pendulum(tmp_path, 'damping="0.3"', '<actuator><motor joint="j" gear="1"/></actuator>')
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    d.ctrl[:] = -40.0
    ref = []
    for _ in range(1000):
        mujoco.mj_step(mj, d)
        ref.append(d.qpos[0])
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    tr = diffmb.simulate(model, jnp.array([0.0]), jnp.array([0.0]), t1=1.0, dt=1e-3,
                         solver="rk4", saveat=np.arange(1, 1001) * 1e-3, forces=forces,
                         control=lambda t, q, v, p: jnp.array([-40.0]))
    q = np.asarray(tr.q[:, 0])
    assert -0.5 - ref[-1] > 1e-3  # resting visibly beyond the limit
    np.testing.assert_allclose(q, ref, rtol=0, atol=1e-8)


def test_generalized_control_and_body_wrench_count_as_load(tmp_path):
    """A control that no element consumes (a generalized force) and a body wrench press the
    link into its limit: MuJoCo's qacc with the same qfrc_applied / xfrc_applied, to 1e-9."""
    path = _pendulum(tmp_path)
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    wrench = np.array([0.0, 0.0, -30.0, 0.0, 2.0, 0.0])
    forces = (*forces, diffmb.forces.BodyWrench("link", wrench))
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    d.xfrc_applied[mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, "link")] = wrench
    for q, u in ((0.52, 3.0), (0.9, 25.0), (-0.7, -8.0)):
        d.qpos[:], d.qvel[:], d.qfrc_applied[:] = q, 0.0, u
        mujoco.mj_forward(mj, d)
        a = diffmb.forward(model, jnp.array([q]), jnp.zeros(1), forces=forces,
                           ctrl=jnp.array([u]))
        np.testing.assert_allclose(np.asarray(a), d.qacc, rtol=1e-9, atol=1e-9)
    assert d.efc_force[: d.nefc].max() > 0  # the limit pushed


_CHAIN = """
<mujoco>
  <compiler angle="radian"/>
  <option tolerance="1e-12"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint name="j1" type="hinge" axis="0 1 0" limited="true" range="-0.4 0.4" damping="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1"/>
      <body name="b" pos="0.3 0 0">
        <joint name="j2" type="hinge" axis="0 1 0" limited="true" range="-0.3 0.6"
               solreflimit="0.03 1.2" solimplimit="0.85 0.97 0.01 0.5 2"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
        <body name="c" pos="0.3 0 0">
          <joint name="j3" type="slide" axis="1 0 0" limited="true" range="-0.05 0.05"/>
          <geom type="sphere" size="0.03" mass="0.3"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def test_coupled_limits_on_a_chain_like_mujoco(tmp_path):
    """Hinge, hinge and slide limits on one chain (M depends on q, the rows couple through
    M⁻¹), random states with up to three limits violated at once: MuJoCo's qacc (its Newton
    solver at tolerance 1e-12) to 1e-9 relative; some states push on two rows or more."""
    path = tmp_path / "chain.xml"
    path.write_text(_CHAIN)
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    acc = jax.jit(lambda q, v: diffmb.forward(model, q, v, forces=forces))
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(0)
    worst, multi = 0.0, 0
    for _ in range(40):
        q, v = rng.uniform([-1.0, -0.8, -0.2], [1.0, 1.1, 0.2]), 2.0 * rng.normal(size=3)
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(mj, d)
        multi += int(np.sum(d.efc_force[: d.nefc] > 0) >= 2)
        a = np.asarray(acc(jnp.asarray(q), jnp.asarray(v)))
        worst = max(worst, float(np.abs(a - d.qacc).max() / max(1.0, np.abs(d.qacc).max())))
    assert worst < 1e-9, worst
    assert multi >= 5, multi


_TENDON = """
<mujoco>
  <compiler angle="radian"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03" mass="1.0"/></body>
    <body name="b" pos="0 0.5 1"><joint name="j2" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.7"/></body>
  </worldbody>
  <tendon>
    <fixed name="t" limited="true" range="-0.3 0.2" solreflimit="0.03 0.8"
           solimplimit="0.8 0.97 0.02 0.4 3">
      <joint joint="j1" coef="1"/><joint joint="j2" coef="-0.5"/>
    </fixed>
  </tendon>
</mujoco>
"""


def test_tendon_limit_accelerations_like_mujoco(tmp_path):
    """A fixed tendon over two independent hinges, violated by 0.01 to 0.6 on both sides,
    at rest and moving: MuJoCo's qacc to 1e-9 (relative)."""
    path = tmp_path / "tendon.xml"
    path.write_text(_TENDON)
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    acc = jax.jit(lambda q, v: diffmb.forward(model, q, v, forces=forces))
    worst = 0.0
    for q, v in (([0.8, 0.1], [0.0, 0.0]), ([0.21, 0.0], [0.3, 0.0]), ([-0.6, 0.1], [1.0, -2.0]),
                 ([-0.31, 0.0], [0.0, 0.0]), ([0.3, -0.3], [-2.0, 1.0]), ([0.0, 0.0], [0, 0])):
        ref = _mujoco_qacc(path, q, v)
        a = np.asarray(acc(jnp.array(q, float), jnp.array(v, float)))
        worst = max(worst, float(np.abs(a - ref).max() / max(1.0, np.abs(ref).max())))
    assert worst < 1e-9, worst


def test_soft_limit_gradients_and_batches(tmp_path):
    """Through the limit (d(r) on its power arc, the force pushing): jax.grad of the
    acceleration against central differences, and vmap over states equal to one by one."""
    path = _pendulum(tmp_path, _SOFT["arcs"])
    model, forces = diffmb.load_mjcf(path), diffmb.mjcf_forces(path)
    acc = jax.jit(lambda q, v: diffmb.forward(model, q, v, forces=forces)[0])
    g = jax.jit(jax.grad(acc, argnums=(0, 1)))
    for q0, v0 in ((0.52, 0.1), (-0.9, -0.4), (0.7, 0.0)):
        q, v = jnp.array([q0]), jnp.array([v0])
        gq, gv = (float(x[0]) for x in g(q, v))
        h = 1e-6
        fq = (acc(q + h, v) - acc(q - h, v)) / (2 * h)
        fv = (acc(q, v + h) - acc(q, v - h)) / (2 * h)
        np.testing.assert_allclose([gq, gv], [float(fq), float(fv)], rtol=1e-5, atol=1e-6)
    qs, vs = jnp.linspace(-1.1, 1.1, 7)[:, None], jnp.linspace(-2.0, 2.0, 7)[:, None]
    batch = jax.vmap(acc)(qs, vs)
    one = jnp.stack([acc(q, v) for q, v in zip(qs, vs, strict=True)])  # one state at a time
    np.testing.assert_allclose(np.asarray(batch), np.asarray(one), rtol=1e-12, atol=1e-12)


def test_soft_limit_force_closed_form():
    """Far outside (d = d_max) with no load the row law is f = m d_max² k r − m d_max b ẏ
    (k, b from solref by MuJoCo's formulas) while it pushes; zero once the row moves out
    faster than the spring pushes, and zero inside the range."""
    m, T, zeta, dmax = 2.0, 0.02, 1.0, 0.95
    solref, solimp = jnp.array([T, zeta]), jnp.array([0.9, dmax, 0.001, 0.5, 2.0])
    k, b = 1.0 / (dmax**2 * T**2 * zeta**2), 2.0 / (dmax * T)
    f = soft_limit_force(jnp.array(-0.4), jnp.array(-1.0), jnp.array(0.0), 1.0 / m, solref,
                         solimp)
    np.testing.assert_allclose(float(f), m * dmax**2 * k * 0.4 + m * dmax * b * 1.0, rtol=1e-12)
    out = soft_limit_force(jnp.array(-0.01), jnp.array(5.0), jnp.array(0.0), 1.0 / m, solref,
                           solimp)
    assert float(out) == 0.0
    inside = soft_limit_force(jnp.array(0.1), jnp.array(-5.0), jnp.array(-50.0), 1.0 / m,
                              solref, solimp)
    assert float(inside) == 0.0


@pytest.mark.parametrize("kw, err, msg", [
    (dict(solref=(0.02, 1.0)), TypeError, r"solref, solimp and invweight go together"),
    (dict(solref=(0.02, 1.0), solimp=(0.9, 1.2, 0.001, 0.5, 2), invweight=1.0), ValueError,
     r"JointLimits.solimp d_min, d_max"),
    (dict(solref=(0.02, 1.0), solimp=(0.9, 0.95, 0.001, 0.5, 2), invweight=0.0), ValueError,
     r"JointLimits.invweight"),
])
def test_soft_limit_errors(kw, err, msg):
    with pytest.raises(err, match=msg):
        JointLimits((0,), (0,), -0.5, 0.5, 1.0, 1.0, **kw)
