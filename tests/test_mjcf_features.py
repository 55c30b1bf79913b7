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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_tendon_limit_and_friction_like_mujoco(tmp_path):
    """The issue's two-link pendulum: released from horizontal, the tendon q1 − q2 ∈ [−0.3, 0.3]
    stops the elbow. diffmb (MuJoCo's soft constraint on the tendon's row) ends where MuJoCo's
    solver does."""
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    spatial = """<tendon><spatial name="s"><site site="s1"/><site site="s2"/></spatial>
      <spatial name="w"><site site="s1"/><geom geom="pulley"/><site site="s2"/></spatial>
    </tendon>"""
    f = tmp_path / "spatial.xml"
    f.write_text(_TWO_LINK.format(extra=spatial, j1="", j2="").replace(
        '<body name="b" pos="0.3 0 0">', '<site name="s1"/><geom name="pulley" type="sphere" '
        'size="0.05" pos="0.15 0 0.06" contype="0" conaffinity="0"/>'
        '<body name="b" pos="0.3 0 0"><site name="s2" pos="0.1 0 0"/>'))
    # through sites: modelled (with no limit or friction, even where no joint changes its
    # length at qpos0); around a geom: refused by name
    with pytest.raises(NotImplementedError, match=r"spatial_tendons \(1 wrapping"):
        diffmb.mjcf_forces(f)
    kinds = [type(e).__name__ for e in diffmb.mjcf_forces(f, ignore=("spatial_tendons",))]
    assert kinds == ["JointDamping", "JointSpring", "SpatialTendons"]
    f.write_text(f.read_text().replace('<spatial name="s">', '<spatial name="s" limited="true" '
                                       'range="0 0.5">'))
    with pytest.raises(ValueError, match=r"'s'.*no joint changes the tendon's length"):
        diffmb.mjcf_forces(f, ignore=("spatial_tendons",))
    f.write_text(f.read_text().replace('limited="true" range="0 0.5"', ""))
    # an equality on a spatial tendon is not modelled (connect and weld are: Equalities)
    f.write_text(f.read_text().replace("</tendon>", '</tendon><equality><tendon tendon1="s"/>'
                                       "</equality>"))
    with pytest.raises(NotImplementedError, match=r"equalities \(1: .*tendon"):
        diffmb.mjcf_forces(f, ignore=("spatial_tendons",))
    weld = tmp_path / "weld.xml"
    weld.write_text(_TWO_LINK.format(extra='<equality><weld body1="b"/></equality>', j1="", j2=""))
    assert "Equalities" in [type(e).__name__ for e in diffmb.mjcf_forces(weld)]


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


@pytest.mark.parametrize("q1", [0.62, 0.9, 1.2])
def test_urdf_limits_are_mujocos_soft_constraint_far_out(tmp_path, q1):
    """A URDF joint pushed past its upper limit (by 0.02 to 0.6 rad): urdf_forces' limit gives
    MuJoCo's qacc for the same URDF (its soft constraint with the default solref/solimp), not a
    penalty spring that grows without bound."""
    f = tmp_path / "r.urdf"
    f.write_text(_URDF.replace('friction="FRICTION"', 'friction="0"').replace(
        '<mimic joint="j1" multiplier="0.5" offset="0.1"/>', ""))
    q, v = np.array([q1, 0.3]), np.array([0.5, 0.0])
    model = diffmb.load_urdf(f)
    a = diffmb.forward(model, jnp.asarray(q), jnp.asarray(v), forces=diffmb.urdf_forces(f))
    np.testing.assert_allclose(np.asarray(a), _mujoco_qacc(f, q, v), rtol=1e-7, atol=1e-7)


def test_urdf_forces_errors_name_the_joint(tmp_path):
    f = tmp_path / "bad.urdf"
    f.write_text(_URDF.replace("FRICTION", "0").replace('<mimic joint="j1"', '<mimic joint="j9"'))
    with pytest.raises(ValueError, match="joint 'j2'.*j9"):
        diffmb.urdf_forces(f)
    f.write_text(_URDF.replace("FRICTION", "nan"))
    with pytest.raises(ValueError, match="joint 'j1'.*friction"):
        diffmb.urdf_forces(f)


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# ------------------------------------------------------------------------------------------
# <option><flag> switches, joint actuatorfrcrange, refusals: MuJoCo's qacc at one state.
# ------------------------------------------------------------------------------------------

_FLAGGED = """
<mujoco><compiler angle="radian"/>
  <option gravity="0 0 -9.81" {opt}><flag {flag}/></option>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0" damping="0.7"
        stiffness="3" springref="0.2" limited="true" range="-0.5 0.5" frictionloss="0.1"/>
      <geom type="box" pos="0.15 0 0" size="0.15 0.1 0.1" mass="2" contype="0" conaffinity="0"/>
      <body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0" damping="0.3"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5" contype="0"
              conaffinity="0"/>
        {odd}
      </body>
    </body>
    <body name="ball" pos="2 0 0"><joint name="z" type="slide" axis="0 0 1"/>
      <geom name="ball" type="sphere" size="0.1" mass="1"/></body>
  </worldbody>
  {eq}
  <actuator><motor joint="j1" ctrlrange="-1 1" gear="2"/>
    <position joint="j2" kp="5" group="2"/></actuator>
</mujoco>"""
_EQ = '<equality><joint joint1="j2" joint2="j1" polycoef="0.1 0.5 0 0 0"/></equality>'
_ODD = '<geom type="ellipsoid" pos="0.3 0 0" size="0.05 0.04 0.03" mass="0.1"/>'
_FREE = ([0.3, -0.2, 1.0], [5.0, -2.0, 0.3])  # limit inside, friction saturated, ball in the air
# flag: (q, v, equality, odd geom) in a state where the feature the flag removes acts
_FLAG_CASES = {
    "gravity": (*_FREE, "", ""),
    "damper": (*_FREE, "", ""),
    "spring": (*_FREE, "", ""),
    "actuation": (*_FREE, "", ""),
    "clampctrl": (*_FREE, "", ""),  # ctrl 3 beyond ctrlrange [-1, 1]
    "frictionloss": ([0.3, -0.2, 1.0], [0.01, -2.0, 0.3], "", ""),
    "limit": ([0.7, -0.2, 1.0], [5.0, -2.0, 0.3], "", ""),
    "equality": (*_FREE, _EQ, ""),
    "contact": ([0.3, -0.2, 0.05], [5.0, -2.0, 0.3], "", ""),
    # everything at once, and an ellipsoid on the floor that diffmb would refuse
    "constraint": ([0.7, -0.2, 0.05], [0.01, -2.0, 0.3], _EQ, _ODD),
}


def _qacc_of(path, q, v, ctrl):
    """MuJoCo's qacc and diffmb's forward on the same file and state."""
    a = diffmb.forward(diffmb.load_mjcf(path), jnp.asarray(q), jnp.asarray(v),
                       forces=diffmb.mjcf_forces(path), ctrl=jnp.asarray(ctrl))
    a = a[0] if isinstance(a, tuple) else a  # contacts carry a state
    return np.asarray(a), _mujoco_qacc(path, q, v, ctrl)


@pytest.mark.parametrize("flag", sorted(_FLAG_CASES))
def test_option_flag_disable_gives_mujocos_qacc(tmp_path, flag):
    """Each <flag X="disable"/> that changes qacc: diffmb's forward equals MuJoCo's mj_forward
    in a state where the switched-off feature acts (MuJoCo's qacc moves by more than 0.1
    between the two files, so honouring the flag is what the test sees)."""
    q, v, eq, odd = _FLAG_CASES[flag]
    u = [3.0, 0.4]
    off = tmp_path / "off.xml"
    off.write_text(_FLAGGED.format(flag=f'{flag}="disable"', opt="", eq=eq, odd=odd))
    on = tmp_path / "on.xml"
    on.write_text(_FLAGGED.format(flag="", opt="", eq=eq, odd=odd))
    a, ref = _qacc_of(off, q, v, u)
    np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-9)
    assert np.max(np.abs(ref - _mujoco_qacc(on, q, v, u))) > 0.1


def test_flags_that_diffmb_matches_with_the_feature_on(tmp_path):
    """The same file without any flag, in the state where nothing is penalised: MuJoCo's qacc
    (so the disabled cases above are not matched by a model that ignores the features)."""
    f = tmp_path / "on.xml"
    f.write_text(_FLAGGED.format(flag="", opt="", eq="", odd=""))
    a, ref = _qacc_of(f, *_FREE, [3.0, 0.4])
    np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-9)


def test_actuatorgroupdisable_gives_mujocos_qacc(tmp_path):
    f = tmp_path / "grp.xml"
    f.write_text(_FLAGGED.format(flag="", opt='actuatorgroupdisable="2"', eq="", odd=""))
    a, ref = _qacc_of(f, *_FREE, [0.5, 0.4])
    np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-9)
    on = tmp_path / "on.xml"
    on.write_text(_FLAGGED.format(flag="", opt="", eq="", odd=""))
    assert np.max(np.abs(ref - _mujoco_qacc(on, *_FREE, [0.5, 0.4]))) > 0.1


def test_constraint_flag_refuses_no_pair_mujoco_never_tests(tmp_path):
    """With constraints on, a height field on a moving body (not modelled) touching the ball
    is refused by name; with <flag constraint="disable"/> MuJoCo collides nothing and the file
    loads."""
    raft = '<geom name="raft" type="hfield" hfield="pad" pos="1.7 0 -1" mass="0.1"/>'
    asset = '<asset><hfield name="pad" nrow="3" ncol="3" size="0.5 0.5 0.1 0.1"/></asset>'

    def write(name, flag):
        f = tmp_path / name
        f.write_text(_FLAGGED.format(flag=flag, opt="", eq="", odd=raft).replace(
            "<worldbody>", asset + "<worldbody>"))
        return f

    on = write("on.xml", "")
    with pytest.raises(NotImplementedError, match=rf"{on}: .*'raft' \(hfield\)"):
        diffmb.mjcf_forces(on)
    off = write("off.xml", 'constraint="disable"')
    kinds = {type(e).__name__ for e in diffmb.mjcf_forces(off)}
    assert not kinds & {"Contacts", "JointLimits", "JointFriction", "Couplings"}


_FRCRANGE = """
<mujoco><compiler angle="radian"/>
  <worldbody>
    <body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0" {r1}/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="1"/>
      <body name="b" pos="0.3 0 0"><joint name="j2" type="slide" axis="1 0 0" {r2}/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="0.5"/>
      </body>
    </body>
  </worldbody>
  <tendon><fixed name="t"><joint joint="j1" coef="1"/><joint joint="j2" coef="-0.5"/></fixed>
  </tendon>
  <actuator><motor joint="j1" gear="2"/><position joint="j1" kp="20"/>
    <motor joint="j2"/><motor tendon="t" gear="3"/></actuator>
</mujoco>"""


@pytest.mark.slow
def test_joint_actuatorfrcrange_clamps_the_summed_actuator_force_like_mujoco(tmp_path):
    """Joint actuatorfrcrange: MuJoCo clamps qfrc_actuator (the sum of every actuator's force on
    the joint, tendon transmissions included); diffmb's qacc equals MuJoCo's at states where
    the sum is inside, above and below the range."""
    f = tmp_path / "frc.xml"
    f.write_text(_FRCRANGE.format(r1='actuatorfrcrange="-1.5 2.5"', r2='actuatorfrcrange="-3 1"'))
    free = tmp_path / "free.xml"
    free.write_text(_FRCRANGE.format(r1="", r2=""))
    rng = np.random.default_rng(3)
    clamped = 0
    for _ in range(6):
        q, v, u = rng.normal(size=2), rng.normal(size=2), 2.0 * rng.normal(size=4)
        a, ref = _qacc_of(f, q, v, u)
        np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-9)
        clamped += np.max(np.abs(ref - _mujoco_qacc(free, q, v, u))) > 1e-3
    assert clamped >= 3


def test_passive_flags_switch_off_fluid_and_gravcomp_as_mujoco(tmp_path):
    """spring and damper disabled together: MuJoCo applies no fluid force and no gravity
    compensation, and qacc is MuJoCo's; with them enabled both act, and qacc is MuJoCo's too."""
    xml = _FLAGGED.format(flag='spring="disable" damper="disable"', opt='density="1000" '
                          'viscosity="0.1"', eq="", odd="").replace(
        '<body name="a" pos="0 0 1">', '<body name="a" pos="0 0 1" gravcomp="0.5">')
    f = tmp_path / "passive.xml"
    f.write_text(xml)
    a, ref = _qacc_of(f, *_FREE, [0.5, 0.4])
    np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-9)
    # with them on, gravity compensation (half of body a's weight) and the fluid act: MuJoCo's
    g = tmp_path / "fluid.xml"
    g.write_text(xml.replace('spring="disable" damper="disable"', ""))
    a, ref = _qacc_of(g, *_FREE, [0.5, 0.4])
    np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-9)
    off = _mujoco_qacc(f, *_FREE, [0.5, 0.4])
    assert np.max(np.abs(ref - off)) > 0.1  # what the test sees is switched on
    kinds = [type(x).__name__ for x in diffmb.mjcf_forces(g)]
    assert "GravityCompensation" in kinds
    assert "GravityCompensation" not in [type(x).__name__
                                         for x in diffmb.mjcf_forces(g, ignore=("gravcomp",))]


def test_ball_frictionloss_is_refused_by_name_and_rich_condim_is_read(tmp_path):
    """A ball joint's friction-loss rows are refused with the file, the joint and the ignore=
    hint; ignoring them simulates without. condim 6 gives the contact MuJoCo's torsional and
    rolling coefficients (friction[1], friction[2]); ignore="condim" leaves them out."""
    ball = tmp_path / "ball.xml"
    ball.write_text("""<mujoco><worldbody><body name="a" pos="0 0 1">
      <joint name="sock" type="ball" frictionloss="0.5"/>
      <geom type="box" pos="0.2 0 0" size="0.1 0.2 0.3" mass="3"/></body></worldbody></mujoco>""")
    with pytest.raises(NotImplementedError, match=rf"{ball}: .*ball_frictionloss.*'sock'.*ignore="):
        diffmb.mjcf_forces(ball)
    forces = diffmb.mjcf_forces(ball, ignore=("ball_frictionloss",))
    assert not any(isinstance(e, diffmb.JointFriction) for e in forces)
    assert len(diffmb.mjcf_forces(ball, friction=False)) == 2  # left out, so not refused
    rich = tmp_path / "condim.xml"
    rich.write_text("""<mujoco><worldbody><geom name="floor" type="plane" size="5 5 .1"/>
      <body name="s" pos="0 0 0.09"><freejoint/><geom name="ball" type="sphere" size="0.1"
      condim="6" friction="0.7 0.03 0.002" mass="1"/></body></worldbody></mujoco>""")
    (el,) = [e for e in diffmb.mjcf_forces(rich) if isinstance(e, diffmb.contacts.Contacts)]
    assert el.spin and float(el.torsion[0]) == 0.03 and float(el.rolling[0]) == 0.002
    (el,) = [e for e in diffmb.mjcf_forces(rich, ignore="condim")
             if isinstance(e, diffmb.contacts.Contacts)]
    assert not el.spin


@pytest.mark.parametrize("actuator, what", [
    ('<general joint="j1" dyntype="muscle"/>', "activation dynamics mjDYN_MUSCLE"),
    ('<general joint="j1" gaintype="affine"/>', "fixed gains"),
    ('<motor joint="j1" damping="0.2"/>', "damping on actuators"),
])
def test_actuator_refusals_name_the_file(tmp_path, actuator, what):
    f = _write(tmp_path, f"<actuator>{actuator}</actuator>")
    with pytest.raises(ValueError, match=rf"^{f}: actuator .*{what}"):
        diffmb.mjcf_forces(f)


def test_urdf_non_numeric_inertial_names_file_and_link(tmp_path):
    f = tmp_path / "bad.urdf"
    f.write_text(_URDF.replace("FRICTION", "0").replace('<mass value="0.5"/>',
                                                        '<mass value="abc"/>'))
    with pytest.raises(ValueError, match=rf"^{f}: link 'b': <mass value='abc'> is not a number"):
        diffmb.load_urdf(f)
    f.write_text(_URDF.replace("FRICTION", "0").replace('iyy="0.01"', 'iyy="inf"'))
    with pytest.raises(ValueError, match=rf"^{f}: link 'a': <inertia iyy='inf'> is not finite"):
        diffmb.load_urdf(f)


def test_refsafe_time_constant_gives_mujocos_friction_creep(tmp_path):
    """refsafe (on by default): MuJoCo uses max(solref[0], 2 timestep), so a solreffriction of
    2 ms at a 10 ms step creeps as 20 ms. MuJoCo's creep velocity after 3 s under a friction
    loss that holds the link is where diffmb's accelerations vanish (to 0.1 % of gravity's)."""
    f = tmp_path / "creep.xml"
    f.write_text("""<mujoco><option timestep="0.01"/><worldbody><body name="a" pos="0 0 1">
      <joint name="j" type="hinge" axis="0 1 0" frictionloss="3" solreffriction="0.002 1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/></body></worldbody>
      </mujoco>""")
    mj = mujoco.MjModel.from_xml_path(str(f))
    d = mujoco.MjData(mj)
    mujoco.mj_step(mj, d, nstep=300)
    assert 0.01 < d.qvel[0] < 0.1  # creeping, held well below free fall
    model, forces = diffmb.load_mjcf(f), diffmb.mjcf_forces(f)
    q, v = jnp.asarray(d.qpos), jnp.asarray(d.qvel)
    a = float(diffmb.forward(model, q, v, forces=forces)[0])
    a_free = float(diffmb.forward(model, q, v, forces=forces[:2])[0])
    assert abs(a) < 1e-3 * abs(a_free), (a, a_free)


def test_urdf_negative_damping_or_friction_names_file_and_joint(tmp_path):
    f = tmp_path / "neg.urdf"
    f.write_text(_URDF.replace('damping="0.1"', 'damping="-0.1"').replace("FRICTION", "0"))
    with pytest.raises(ValueError, match=rf"^{f}: joint 'j1': <dynamics damping='-0.1'> must be >= 0"):
        diffmb.load_urdf(f)
    f.write_text(_URDF.replace("FRICTION", "-2"))
    with pytest.raises(ValueError, match=rf"^{f}: joint 'j1': <dynamics friction='-2'> must be >= 0"):
        diffmb.urdf_forces(f)


@pytest.mark.parametrize("where", ["joint", "tendon"])
def test_limit_margin_moves_the_rest_like_mujoco(tmp_path, where):
    """A limit with ``margin`` acts from margin inside its range: the link released from
    horizontal comes to rest about 0.1 rad earlier, where MuJoCo's does."""
    if where == "joint":
        f = _write(tmp_path, "", j1='damping="0.5" limited="true" range="-1 0.3" margin="0.1"')
        f.write_text(f.read_text().replace("<mujoco>", '<mujoco><compiler angle="radian"/>'))
        steps, free = 3000, _write(tmp_path, "", j1='damping="0.5"', name="free.xml")
    else:
        f = _write(tmp_path, _LIMITED_TENDON.replace('frictionloss="0.05"', 'margin="0.1"'),
                   j1='damping="0.3"', j2='damping="0.05"')
        steps, free = 3000, None
    mj_q = _mujoco_run(f, steps)
    model = diffmb.load_mjcf(f)
    tr = diffmb.simulate(model, jnp.zeros(model.nq), None, t1=steps * 1e-3, dt=1e-3,
                         forces=diffmb.mjcf_forces(f))
    if where == "joint":  # the elbow swings freely: compare the limited joint
        np.testing.assert_allclose(float(tr.q[-1, 0]), mj_q[0], atol=3e-3)
    else:
        np.testing.assert_allclose(np.asarray(tr.q[-1]), mj_q, atol=3e-3)
    if where == "joint":
        assert abs(mj_q[0] - 0.2) < 5e-3 and abs(_mujoco_run(free, steps)[0] - 0.2) > 0.05
    else:
        assert abs(abs(mj_q[0] - mj_q[1]) - 0.2) < 5e-3


def test_contact_gap_adds_inactive_distance_and_leaves_the_rest_height(tmp_path):
    """A ball with margin 0.03 and gap 0.02: MuJoCo detects contacts out to margin + gap but
    includes only those within margin, so the ball rests about 3 cm above the floor; diffmb's
    comes to rest at MuJoCo's height."""
    f = tmp_path / "gap.xml"
    f.write_text("""<mujoco><option timestep="0.001"/><worldbody>
      <geom name="floor" type="plane" size="5 5 .1"/>
      <body name="ball" pos="0 0 0.2"><joint name="z" type="slide" axis="0 0 1"/>
        <geom name="ball" type="sphere" size="0.1" mass="1" margin="0.03" gap="0.02"/></body>
      </worldbody></mujoco>""")
    z_mj = 0.2 + _mujoco_run(f, 1500)[0]
    assert abs(z_mj - 0.13) < 1e-3
    model = diffmb.load_mjcf(f)
    tr = diffmb.simulate(model, jnp.zeros(1), None, t1=1.5, dt=1e-3, forces=diffmb.mjcf_forces(f))
    assert abs(0.2 + float(tr.q[-1, 0]) - z_mj) < 1e-3


def test_unnamed_joint_does_not_collide_with_a_given_name(tmp_path):
    """MuJoCo loads a file that names a joint "joint1" and leaves joint 1 unnamed; so does
    load_mjcf, with MuJoCo's joint order and dof count."""
    f = tmp_path / "names.xml"
    f.write_text("""<mujoco><worldbody>
      <body name="a" pos="0 0 1"><joint name="joint1" type="hinge"/><geom size="0.1"/>
        <body pos="0 0 -0.3"><joint type="hinge"/><geom size="0.1"/></body></body>
    </worldbody></mujoco>""")
    mj = mujoco.MjModel.from_xml_path(str(f))
    model = diffmb.load_mjcf(f)
    assert model.nv == mj.nv == 2
    assert model.joint_names[0] == "joint1" and len(set(model.joint_names)) == 2


_ACTIVATED = """
<tendon><fixed name="t"><joint joint="j1" coef="1"/><joint joint="j2" coef="-0.5"/></fixed></tendon>
<actuator>
  <position name="p" joint="j1" kp="30" kv="2" timeconst="0.05"/>
  <general name="g" tendon="t" dyntype="filter" dynprm="0.1" gainprm="5" ctrllimited="true"
           ctrlrange="-1 1"/>
  <intvelocity name="iv" joint="j2" kp="20" actrange="-0.5 0.5"/>
  <motor name="m" joint="j2" gear="1.5"/>
</actuator>
"""


def test_activation_dynamics_give_mujocos_qacc_and_act_dot(tmp_path):
    """Actuators with activation dynamics (position with timeconst: filterexact; a filter on a
    fixed tendon with a clamped control; intvelocity: an integrator with an activation range;
    a plain motor): at random states and activations diffmb's forward equals MuJoCo's qacc and
    its act_dot."""
    from diffmb.forces import ActivatedActuators

    f = _write(tmp_path, _ACTIVATED)
    mj = mujoco.MjModel.from_xml_path(str(f))
    assert mj.na == 3 and list(mj.actuator_dyntype) == [3, 2, 1, 0]
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    (el,) = [x for x in forces if isinstance(x, ActivatedActuators)]
    assert el.dynamics == ("filterexact", "filter", "integrator", "none")
    rng = np.random.default_rng(3)
    for _ in range(3):
        q, v = rng.uniform(-1, 1, 2), rng.uniform(-2, 2, 2)
        act = rng.uniform(-0.45, 0.45, 3)
        u = rng.uniform(-1.5, 1.5, 4)  # g's control is clamped to [-1, 1] before its filter
        d = mujoco.MjData(mj)
        d.qpos[:], d.qvel[:], d.act[:], d.ctrl[:] = q, v, act, u
        mujoco.mj_forward(mj, d)
        states = tuple(jnp.asarray(act) if x is el else None for x in forces)
        a, ds = diffmb.forward(model, jnp.asarray(q), jnp.asarray(v), forces=forces,
                               ctrl=jnp.asarray(u), state=states)
        np.testing.assert_allclose(np.asarray(a), d.qacc, rtol=1e-10, atol=1e-9)
        i = [k for k, x in enumerate(forces) if x is el][0]
        np.testing.assert_allclose(np.asarray(ds[i]), d.act_dot, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_activations_follow_mujoco_over_time_and_stop_at_the_activation_range(tmp_path):
    """From rest, 0.6 s under constant controls: the activations and joints follow MuJoCo's
    (1 ms steps; MuJoCo's Euler step of the activations is first order, so 2e-3 agreement), and
    the integrator stops at its activation range (0.5) as MuJoCo's clamp holds it."""
    from diffmb.forces import ActivatedActuators

    f = _write(tmp_path, _ACTIVATED)
    mj = mujoco.MjModel.from_xml_path(str(f))
    d = mujoco.MjData(mj)
    u = np.array([0.4, 1.3, 2.0, 0.1])
    d.ctrl[:] = u
    for _ in range(600):
        mujoco.mj_step(mj, d)
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    tr = diffmb.simulate(model, jnp.zeros(2), None, t1=0.6, dt=1e-3, forces=forces,
                         control=lambda t, q, v, p: jnp.asarray(u))
    k = [i for i, x in enumerate(forces) if isinstance(x, ActivatedActuators)][0]
    act = np.asarray(tr.aux[0][k])[-1]
    np.testing.assert_allclose(act, d.act, atol=2e-3)
    # held at the bound: the state stops within one step's growth (dt u = 2e-3) above it and
    # the force uses the clamped value, as MuJoCo's clamp after each step
    assert 0.5 <= act[2] <= 0.5 + 2e-3 and abs(d.act[2] - 0.5) < 1e-12
    np.testing.assert_allclose(np.asarray(tr.q)[-1], d.qpos, atol=2e-3)


_SPATIAL = """
<mujoco>
  <option gravity="0 0 -9.81" timestep="0.001"/>
  <worldbody>
    <site name="anchor" pos="0.1 0.05 1.4"/>
    <body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1" contype="0" conaffinity="0"/>
      <site name="mid" pos="0.15 0.02 0.03"/>
      <body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5" contype="0" conaffinity="0"/>
        <site name="tip" pos="0.25 -0.01 0.02"/>
      </body>
    </body>
    <body name="ball" pos="0.5 0.2 0.6"><freejoint/>
      <geom type="sphere" size="0.05" mass="0.3" contype="0" conaffinity="0"/>
      <site name="hook" pos="0 0 0.05"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="cable" stiffness="80" springlength="0.3 0.5" damping="2.5">
      <site site="anchor"/><site site="mid"/><site site="tip"/></spatial>
    <spatial name="string" limited="true" range="0 {max_len}" damping="0.4">
      <site site="tip"/><site site="hook"/></spatial>
  </tendon>
</mujoco>
"""


@pytest.mark.parametrize("max_len", [pytest.param(1.0, marks=pytest.mark.slow), 0.3],
                         ids=["slack", "taut"])
def test_spatial_tendons_through_sites_give_mujocos_qacc(tmp_path, max_len):
    """Two spatial tendons through sites (on the world, on two links of an arm, on a free
    ball): a spring with a deadband and damping on one, a limited string on the
    other (slack, or stretched past its range so that MuJoCo's limit constraint pulls). At
    random states diffmb's forward equals MuJoCo's qacc, and the lengths equal ten_length."""
    f = tmp_path / "spatial.xml"
    f.write_text(_SPATIAL.format(max_len=max_len))
    mj = mujoco.MjModel.from_xml_path(str(f))
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    (el,) = [x for x in forces if type(x).__name__ == "SpatialTendons"] or [
        x for x in forces[0].limits if type(x).__name__ == "SpatialTendons"]
    rng = np.random.default_rng(11)
    d = mujoco.MjData(mj)
    pulled = 0
    for _ in range(4):
        q = mj.qpos0.copy()
        q[:2] = rng.uniform(-1, 1, 2)
        q[2:5] += rng.normal(scale=0.1, size=3)
        qq = rng.normal(size=4)
        q[5:9] = qq / np.linalg.norm(qq)
        v = rng.normal(size=mj.nv)
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(mj, d)
        L, J = el.geometry(model, jnp.asarray(q))
        np.testing.assert_allclose(np.asarray(L), d.ten_length, rtol=1e-12)
        Jmj = np.zeros((mj.ntendon, mj.nv))
        mujoco.mju_sparse2dense(Jmj, d.ten_J, mj.ten_J_rownnz, mj.ten_J_rowadr, mj.ten_J_colind)
        np.testing.assert_allclose(np.asarray(J), Jmj, atol=1e-12)
        a = diffmb.forward(model, jnp.asarray(q), jnp.asarray(v), forces=forces)
        np.testing.assert_allclose(np.asarray(a), d.qacc, rtol=1e-9, atol=1e-8)
        pulled += d.ten_length[1] > max_len
    assert pulled == (4 if max_len == 0.3 else 0)
