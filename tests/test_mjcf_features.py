"""Fixed tendons, joint/tendon equalities and URDF mimic, limits and friction: diffmb's force
elements against MuJoCo compiling and simulating the same file."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb

_TWO_LINK = """
<mujoco>
  <option gravity="0 0 -9.81" timestep="0.001" integrator="RK4"/>
  <worldbody>
    <body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0" {j1}/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1" contype="0" conaffinity="0"/>
      <body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0" {j2}/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  {extra}
</mujoco>
"""


def _write(tmp_path, extra, j1="", j2="", name="m.xml"):
    f = tmp_path / name
    f.write_text(_TWO_LINK.format(extra=extra, j1=j1, j2=j2))
    return f


def _mujoco_run(path, steps, q0=None, ctrl=None):
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    if q0 is not None:
        d.qpos[:] = q0
    if ctrl is not None:
        d.ctrl[:] = ctrl
    for _ in range(steps):
        mujoco.mj_step(mj, d)
    return np.array(d.qpos)


def _mujoco_qacc(path, q, v, ctrl=None):
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = q, v
    if ctrl is not None:
        d.ctrl[:] = ctrl
    mujoco.mj_forward(mj, d)
    return np.array(d.qacc)


_SPRING_TENDON = """
<tendon><fixed name="t" stiffness="40" damping="1.5" springlength="0.2">
  <joint joint="j1" coef="1"/><joint joint="j2" coef="-0.5"/></fixed></tendon>
<actuator><motor name="m" tendon="t" gear="2"/></actuator>
"""


def test_fixed_tendon_spring_damping_and_actuation_equal_mujoco_qacc(tmp_path):
    """Passive tendon forces and a motor on the tendon: qacc equals MuJoCo's at random states
    (no limit or friction active, so MuJoCo's constraint solver has nothing to do)."""
    f = _write(tmp_path, _SPRING_TENDON)
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    assert any(isinstance(e, diffmb.FixedTendons) for e in forces)
    rng = np.random.default_rng(0)
    for _ in range(5):
        q, v, u = rng.normal(size=2), rng.normal(size=2), rng.normal(size=1)
        a = diffmb.forward(model, jnp.asarray(q), jnp.asarray(v), forces=forces, ctrl=jnp.asarray(u))
        np.testing.assert_allclose(np.asarray(a), _mujoco_qacc(f, q, v, u), rtol=1e-10, atol=1e-10)


def test_tendon_deadband_spring(tmp_path):
    """springlength="lo hi": no force inside the band, k (lo − L) below it (MuJoCo's qacc)."""
    f = _write(tmp_path, _SPRING_TENDON.replace('springlength="0.2"', 'springlength="-0.1 0.3"'))
    model, forces = diffmb.load_mjcf(f), diffmb.mjcf_forces(f)
    for q in ([0.0, 0.0], [0.5, -0.4], [-0.5, 0.2]):  # L = 0 (inside), 0.7 (above), -0.6 (below)
        a = diffmb.forward(model, jnp.asarray(q), jnp.zeros(2), forces=forces, ctrl=jnp.zeros(1))
        np.testing.assert_allclose(np.asarray(a), _mujoco_qacc(f, q, [0, 0], [0]), atol=1e-10)


_LIMITED_TENDON = """
<tendon><fixed name="t" limited="true" range="-0.3 0.3" frictionloss="0.05">
  <joint joint="j1" coef="1"/><joint joint="j2" coef="-1"/></fixed></tendon>
"""


def test_tendon_limit_and_friction_like_mujoco(tmp_path):
    """The issue's two-link pendulum: released from horizontal, the tendon q1 − q2 ∈ [−0.3, 0.3]
    stops the elbow. diffmb (penalty, solref mapping) ends where MuJoCo's solver does."""
    f = _write(tmp_path, _LIMITED_TENDON, j1='damping="0.3"', j2='damping="0.05"')
    mj_q = _mujoco_run(f, 3000)
    model = diffmb.load_mjcf(f)
    tr = diffmb.simulate(model, jnp.zeros(2), None, t1=3.0, dt=1e-3, forces=diffmb.mjcf_forces(f))
    q = np.asarray(tr.q[-1])
    assert abs(mj_q[0] - mj_q[1]) > 0.29  # MuJoCo rests on the tendon limit
    np.testing.assert_allclose(q, mj_q, atol=3e-3)
    free = diffmb.simulate(model, jnp.zeros(2), None, t1=3.0, dt=1e-3,
                           forces=diffmb.mjcf_forces(f, limits=False))
    assert np.max(np.abs(np.asarray(free.q[-1]) - mj_q)) > 0.05  # the limit is what holds it


_JOINT_EQ = """<equality><joint joint1="j2" joint2="j1" polycoef="0.1 0.5 0.2 0 0"/></equality>"""


def test_joint_equality_like_mujoco(tmp_path):
    """q2 = 0.1 + 0.5 q1 + 0.2 q1² held by the soft equality: the coupled pendulum swings as
    MuJoCo's, with MuJoCo's residual (its soft constraint gives 6.0e-3 rad at t = 1 s)."""
    f = _write(tmp_path, _JOINT_EQ, j1='damping="0.2"')
    q0 = np.array([0.0, 0.1])
    model, forces = diffmb.load_mjcf(f), diffmb.mjcf_forces(f)
    assert any(isinstance(e, diffmb.Couplings) for e in forces)
    tr = diffmb.simulate(model, jnp.asarray(q0), None, t1=1.0, dt=1e-3, forces=forces)
    mj_q = _mujoco_run(f, 1000, q0)
    np.testing.assert_allclose(np.asarray(tr.q[-1]), mj_q, atol=5e-3)
    res = lambda q: q[1] - 0.1 - 0.5 * q[0] - 0.2 * q[0] ** 2  # noqa: E731
    assert abs(res(np.asarray(tr.q[-1])) - res(mj_q)) < 1e-3
    assert max(abs(res(q)) for q in np.asarray(tr.q)) < 1e-2
    ignored = diffmb.simulate(model, jnp.asarray(q0), None, t1=1.0, dt=1e-3,
                              forces=diffmb.mjcf_forces(f)[:2])
    assert np.max(np.abs(np.asarray(ignored.q[-1]) - mj_q)) > 0.05


def test_tendon_equality_like_mujoco(tmp_path):
    """A tendon equality t1 = const (single tendon: L − L0 = 0) locks q1 − q2."""
    extra = """<tendon><fixed name="t"><joint joint="j1" coef="1"/><joint joint="j2" coef="-1"/>
    </fixed></tendon><equality><tendon tendon1="t"/></equality>"""
    f = _write(tmp_path, extra)
    q0 = np.array([0.0, 0.0])
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    tr = diffmb.simulate(model, jnp.asarray(q0), None, t1=1.0, dt=1e-3, forces=forces)
    mj_q = _mujoco_run(f, 1000, q0)
    # 0.4 % of the 2.45 rad swing: the penalty's transient in the locked mode is not the solver's
    np.testing.assert_allclose(np.asarray(tr.q[-1]), mj_q, atol=1.5e-2)
    assert abs((mj_q[0] - mj_q[1]) - float(tr.q[-1, 0] - tr.q[-1, 1])) < 3e-3
    free = diffmb.simulate(model, jnp.asarray(q0), None, t1=1.0, dt=1e-3, forces=forces[:2])
    assert np.max(np.abs(np.asarray(free.q[-1]) - mj_q)) > 0.2


def test_unsupported_tendons_and_equalities_are_named(tmp_path):
    spatial = """<tendon><spatial name="s"><site site="s1"/><site site="s2"/></spatial></tendon>"""
    f = tmp_path / "spatial.xml"
    f.write_text(_TWO_LINK.format(extra=spatial, j1="", j2="").replace(
        '<body name="b" pos="0.3 0 0">', '<site name="s1"/><body name="b" pos="0.3 0 0">'
        '<site name="s2" pos="0.1 0 0"/>'))
    with pytest.raises(NotImplementedError, match=r"spatial_tendons \(1\)"):
        diffmb.mjcf_forces(f)
    assert len(diffmb.mjcf_forces(f, ignore=("spatial_tendons",))) == 2
    weld = tmp_path / "weld.xml"
    weld.write_text(_TWO_LINK.format(extra='<equality><weld body1="b"/></equality>', j1="", j2=""))
    with pytest.raises(NotImplementedError, match="equalities .*connect, weld"):
        diffmb.mjcf_forces(weld)


_URDF = """<robot name="r">
  <link name="base"/>
  <link name="a"><inertial><origin xyz="0.15 0 0"/><mass value="1"/>
    <inertia ixx="0.001" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="b"><inertial><origin xyz="0.15 0 0"/><mass value="0.5"/>
    <inertia ixx="0.001" iyy="0.005" izz="0.005" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="a"/><origin xyz="0 0 1"/>
    <axis xyz="0 1 0"/><limit lower="-1" upper="0.6" effort="10" velocity="1"/>
    <dynamics damping="0.1" friction="FRICTION"/></joint>
  <joint name="j2" type="revolute"><parent link="a"/><child link="b"/><origin xyz="0.3 0 0"/>
    <axis xyz="0 1 0"/><limit lower="-2" upper="2" effort="10" velocity="1"/>
    <mimic joint="j1" multiplier="0.5" offset="0.1"/></joint>
</robot>
"""


@pytest.mark.parametrize("friction", [0.2, 3.0])
def test_urdf_forces_like_mujoco_loading_the_urdf(tmp_path, friction):
    """A URDF with damping, friction, a limit and a mimic joint: diffmb's urdf_forces against
    MuJoCo compiling the same URDF (which maps them to damping, frictionloss, range and a joint
    equality). Friction 0.2 lets the link fall onto its limit; 3.0 holds it (MuJoCo's creep)."""
    f = tmp_path / "r.urdf"
    f.write_text(_URDF.replace("FRICTION", str(friction)))
    q0 = np.array([0.0, 0.1])
    mj_q = _mujoco_run(f, 2000, q0)
    model = diffmb.load_urdf(f)
    forces = diffmb.urdf_forces(f)
    kinds = {type(e).__name__ for e in forces}
    assert {"JointDamping", "JointFriction", "JointLimits", "Couplings"} <= kinds
    tr = diffmb.simulate(model, jnp.asarray(q0), None, t1=2.0, dt=1e-3, forces=forces)
    np.testing.assert_allclose(np.asarray(tr.q[-1]), mj_q, atol=5e-3)


def test_urdf_forces_errors_name_the_joint(tmp_path):
    f = tmp_path / "bad.urdf"
    f.write_text(_URDF.replace("FRICTION", "0").replace('<mimic joint="j1"', '<mimic joint="j9"'))
    with pytest.raises(ValueError, match="joint 'j2'.*j9"):
        diffmb.urdf_forces(f)
    f.write_text(_URDF.replace("FRICTION", "nan"))
    with pytest.raises(ValueError, match="joint 'j1'.*friction"):
        diffmb.urdf_forces(f)


def test_coupling_gradient_is_finite_and_matches_differences(tmp_path):
    """d(final q1)/d(polycoef₁) through the penalty coupling, against central differences."""
    f = _write(tmp_path, _JOINT_EQ)
    model, forces = diffmb.load_mjcf(f), diffmb.mjcf_forces(f)
    k = next(i for i, e in enumerate(forces) if isinstance(e, diffmb.Couplings))

    def final(p1):
        el = forces[k]
        el = jax.tree_util.tree_map(lambda x: x, el)
        import equinox as eqx

        el = eqx.tree_at(lambda e: e.polycoef, el, el.polycoef.at[0, 1].set(p1))
        fs = forces[:k] + (el,) + forces[k + 1:]
        return diffmb.simulate(model, jnp.array([0.0, 0.1]), None, t1=0.3, dt=1e-3,
                               forces=fs).q[-1, 0]

    g = jax.grad(final)(0.5)
    h = 1e-5
    fd = (final(0.5 + h) - final(0.5 - h)) / (2 * h)
    assert np.isfinite(g) and abs(g - fd) < 1e-5 * max(1.0, abs(fd))


_DIFFERENTIAL = """
<mujoco>
  <option gravity="0 0 -3.72" timestep="0.001" integrator="RK4"/>
  <worldbody>
    <body name="body" pos="0 0 1"><joint name="lift" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.3 0.2 0.05" mass="10" contype="0" conaffinity="0"/>
      <body name="left" pos="0 0.3 0"><joint name="rocker_l" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="-0.3 0 -0.2 0.4 0 -0.2" size="0.03" mass="2"
              contype="0" conaffinity="0"/></body>
      <body name="right" pos="0 -0.3 0"><joint name="rocker_r" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="-0.3 0 -0.2 0.4 0 -0.2" size="0.03" mass="2"
              contype="0" conaffinity="0"/></body>
    </body>
  </worldbody>
  <equality><joint joint1="rocker_l" joint2="rocker_r" polycoef="0 -1 0 0 0"/></equality>
</mujoco>
"""


def test_exact_couplings_hold_to_round_off_and_match_a_reduced_oracle(tmp_path):
    """A rover-like differential q_l = −q_r held exactly: the invariant stays at round-off over
    a run, and the motion is MuJoCo's (whose soft equality lets it drift by ~1e-4)."""
    f = tmp_path / "diff.xml"
    f.write_text(_DIFFERENTIAL)
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f, exact_couplings=True)
    assert any(isinstance(e, diffmb.Couplings) and e.exact for e in forces)
    q0 = jnp.array([0.0, 0.3, -0.3])
    v0 = jnp.array([0.0, 1.0, -1.0])
    tr = diffmb.simulate(model, q0, v0, t1=2.0, dt=1e-3, forces=forces,
                         saveat=np.linspace(0, 2, 201))
    q = np.asarray(tr.q)
    assert np.max(np.abs(q[:, 1] + q[:, 2])) < 1e-12
    soft = diffmb.simulate(model, q0, v0, t1=2.0, dt=1e-3, forces=diffmb.mjcf_forces(f),
                           saveat=np.linspace(0, 2, 201))
    np.testing.assert_allclose(q, np.asarray(soft.q), atol=2e-3)
    mj = mujoco.MjModel.from_xml_path(str(f))
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = np.asarray(q0), np.asarray(v0)
    mujoco.mj_step(mj, d, nstep=int(round(2.0 / mj.opt.timestep)))
    np.testing.assert_allclose(q[-1], d.qpos, atol=1e-3)


def test_exact_coupling_of_a_locked_joint_equals_the_welded_model(tmp_path):
    """q2 = 0.4 held exactly (single-joint equality) is the two-link pendulum welded at 0.4:
    the same motion as the one-joint model built from a file with the joint removed, to 1e-9."""
    extra = '<equality><joint joint1="j2" polycoef="0.4 0 0 0 0"/></equality>'
    f = _write(tmp_path, extra)
    model = diffmb.load_mjcf(f)
    with pytest.warns(UserWarning, match="projected"):
        tr = diffmb.simulate(model, jnp.array([0.2, 0.0]), None, t1=1.0, dt=1e-3,
                             forces=diffmb.mjcf_forces(f, exact_couplings=True))
    welded = tmp_path / "welded.xml"
    welded.write_text(_TWO_LINK.format(extra="", j1="", j2="").replace(
        '<body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0" />',
        f'<body name="b" pos="0.3 0 0" euler="0 {float(np.degrees(0.4))!r} 0">'))
    wm = diffmb.load_mjcf(welded)
    assert wm.nv == 1
    tw = diffmb.simulate(wm, jnp.array([0.2]), None, t1=1.0, dt=1e-3)
    np.testing.assert_allclose(np.asarray(tr.q[:, 1]), 0.4, atol=1e-12)
    np.testing.assert_allclose(np.asarray(tr.q[:, 0]), np.asarray(tw.q[:, 0]), atol=1e-9)
