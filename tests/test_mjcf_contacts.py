"""Contacts from MJCF files through the one call users write,

    diffmb.simulate(model, q0, v0, t1, dt=1e-3, forces=diffmb.mjcf_forces(path)),

against MuJoCo simulating the same file and against closed forms."""

import importlib.resources

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb

G = 9.81


def _quadruped_path():
    return importlib.resources.files("diffmb") / "assets" / "quadruped.xml"


def _quadruped_q0(model):
    q0 = np.array(model.qpos0)
    q0[2], q0[8::2] = 0.45, 0.8  # torso raised, knees inside their range [30°, 70°]
    return q0


def test_dropped_quadruped_rests_on_its_limits_at_mujocos_height():
    """ctrl = 0: the quadruped falls, its feet slide out (μ = 0.5) until the knees reach their
    lower limit, and it rests there. MuJoCo rests the torso at 0.2560 m; the weight is carried
    by the four feet."""
    with importlib.resources.as_file(_quadruped_path()) as path:
        model = diffmb.load_mjcf(path)
        forces = diffmb.mjcf_forces(path)
        q0 = _quadruped_q0(model)
        mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    d.qpos[:] = q0
    mujoco.mj_step(mj, d, nstep=int(round(3.0 / mj.opt.timestep)))
    traj = diffmb.simulate(model, jnp.asarray(q0), None, t1=3.0, dt=1e-3, forces=forces,
                           saveat=[2.5, 3.0])
    z, z_mj = float(traj.q[-1, 2]), float(d.qpos[2])
    assert abs(z_mj - 0.256) < 2e-3
    assert abs(z - z_mj) < 3e-3  # 1.1 mm measured: the feet sink 1.0 mm here, 0.1 mm in MuJoCo
    np.testing.assert_allclose(np.asarray(traj.q[-1, 8::2]), d.qpos[8::2], atol=0.01)
    assert float(jnp.max(jnp.abs(traj.v[-1]))) < 1e-3  # at rest
    res = diffmb.contacts.contact_forces(model, traj, forces)
    weight = float(jnp.sum(model.body_mass)) * G
    assert res.fn.shape == (2, 17) and res.point.shape == (2, 17, 3)
    assert float(jnp.min(res.fn)) >= 0.0
    np.testing.assert_allclose(float(jnp.sum(res.fn[-1])), weight, rtol=1e-3)
    assert {p[0] for p, f in zip(res.pairs, res.fn[-1], strict=True) if f > 0} == {
        "foot_fl", "foot_fr", "foot_bl", "foot_br"}
    assert all(p[1] == "floor" for p in res.pairs)


_SLOPE = """
<mujoco>
  <option gravity="0 0 -9.81" cone="{cone}"/>
  <worldbody>
    <geom name="slope" type="plane" size="50 50 0.1" euler="0 {deg} 0" friction="{mu} 0 0"/>
    <body name="box" pos="{x} 0 {z}" euler="0 {deg} 0"><freejoint/>
      <geom name="box" type="box" size="0.1 0.1 0.05" mass="2" friction="{mu} 0 0"/></body>
  </worldbody>
</mujoco>
"""


def _box_on_slope(tmp_path, deg, mu, t1, solver="rk4", dt=1e-3, cone="pyramidal", ignore=(),
                  mujoco_drift=False):
    """A box released on a plane tilted by ``deg`` about y (it falls towards −x); with
    ``mujoco_drift`` also how far MuJoCo's box moves from 0.5 s to ``t1`` at the step ``dt``."""
    a = np.radians(deg)
    # the box's bottom face on the plane: centre 0.05 m along the plane normal
    n = np.array([np.sin(a), 0.0, np.cos(a)])
    c = 0.0498 * n
    f = tmp_path / "slope.xml"
    f.write_text(_SLOPE.format(deg=deg, mu=mu, x=c[0], z=c[2], cone=cone))
    model = diffmb.load_mjcf(f)
    q0 = np.array(model.qpos0)
    traj = diffmb.simulate(model, jnp.asarray(q0), None, t1=t1, dt=dt, solver=solver,
                           forces=diffmb.mjcf_forces(f, ignore=ignore),
                           saveat=np.linspace(0.5, t1, 6))
    if not mujoco_drift:
        return traj, a
    mj = mujoco.MjModel.from_xml_path(str(f))
    mj.opt.timestep = dt
    d = mujoco.MjData(mj)
    at = {}
    for k in range(int(round(t1 / dt)) + 1):
        for t in (0.5, t1):
            if abs(k * dt - t) < 1e-9:
                at[t] = d.qpos[:3].copy()
        mujoco.mj_step(mj, d)
    return traj, a, float(np.linalg.norm(at[t1] - at[0.5]))


def test_box_slides_down_a_slope_with_coulomb_acceleration(tmp_path):
    """tan α > μ: s(t) = ½ g (sin α − μ cos α) t² along the slope (after the first 0.5 s)."""
    traj, a = _box_on_slope(tmp_path, 30.0, 0.3, 1.5)
    along = np.array([-np.cos(a), 0.0, np.sin(a)])  # downhill unit vector (−x, and down)
    along = -along if along[2] > 0 else along
    s = np.asarray(traj.q[:, :3]) @ along
    t = np.asarray(traj.ts)
    acc = np.polyfit(t, s, 2)[0] * 2
    expected = G * (np.sin(a) - 0.3 * np.cos(a))
    assert abs(acc - expected) < 0.01 * expected


@pytest.mark.parametrize("solver, dt", [("rk4", 1e-3), ("implicit", 2e-3)])
def test_box_holds_on_a_slope_below_the_friction_angle(tmp_path, solver, dt):
    """tan 25° = 0.47 < μ = 0.6: without creep the box stays (under 1 mm in 3 s; MuJoCo's own
    soft contact creeps 6.4 mm, below)."""
    traj, _ = _box_on_slope(tmp_path, 25.0, 0.6, 3.0, solver, dt, ignore=("creep",))
    drift = np.linalg.norm(np.asarray(traj.q[-1, :3] - traj.q[0, :3]))
    assert drift < 1e-3


@pytest.mark.parametrize("solver, dt", [("rk4", 1e-3), ("implicit", 2e-3)])
def test_box_on_a_slope_below_the_friction_angle_creeps_as_mujocos(tmp_path, solver, dt):
    """With the file's creep (the default) the box creeps down the 25° slope as far as MuJoCo's
    does in the same 2.5 s (2.7 mm with the elliptic cone; the pyramidal cone's contacts rest
    at another depth, docs/scenes.md)."""
    traj, _, ref = _box_on_slope(tmp_path, 25.0, 0.6, 3.0, solver, dt, cone="elliptic",
                                 mujoco_drift=True)
    drift = np.linalg.norm(np.asarray(traj.q[-1, :3] - traj.q[0, :3]))
    assert 1e-3 < ref < 1e-2
    assert drift == pytest.approx(ref, rel=0.02)


_HFIELD = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <asset><hfield name="ramp" nrow="21" ncol="41" size="2 1 {zmax} 0.1"/></asset>
  <worldbody>
    <geom name="ground" type="hfield" hfield="ramp" friction="2 0 0"/>
    <body name="ball" pos="{x} 0 {z}"><freejoint/>
      <geom name="ball" type="sphere" size="0.1" mass="1" friction="2 0 0"/></body>
  </worldbody>
</mujoco>
"""


def test_sphere_rolls_down_an_mjcf_height_field_ramp(tmp_path):
    """A ramp z = s (x + 2) written into an MJCF <hfield> (elevation data set through MuJoCo):
    a solid sphere rolls without slipping with a = (5/7) g sin α along it."""
    zmax, s = 0.4, 0.1  # z from 0 to 0.4 over x in [-2, 2]
    a = np.arctan(s)
    x0 = 0.5
    z_ground = s * (x0 + 2)
    n = np.array([-np.sin(a), 0.0, np.cos(a)])
    c = np.array([x0, 0.0, z_ground]) + 0.0998 * n
    f = tmp_path / "ramp.xml"
    f.write_text(_HFIELD.format(zmax=zmax, x=c[0], z=c[2]))
    mj = mujoco.MjModel.from_xml_path(str(f))
    xs = np.linspace(-2, 2, 41)
    mj.hfield_data[:] = np.tile((s * (xs + 2)) / zmax, 21)  # rows along y, columns along x
    model = diffmb.io.mjcf.from_mjmodel(mj)
    forces = diffmb.io.mjcf.mjcf_forces(mj)
    traj = diffmb.simulate(model, jnp.asarray(model.qpos0), None, t1=1.0, dt=1e-3,
                           forces=forces, saveat=np.linspace(0.3, 1.0, 8))
    along = np.array([-np.cos(a), 0.0, -np.sin(a)])  # downhill
    dist = np.asarray(traj.q[:, :3]) @ along
    acc = np.polyfit(np.asarray(traj.ts), dist, 2)[0] * 2
    expected = 5.0 / 7.0 * G * np.sin(a)
    assert abs(acc - expected) < 0.02 * expected
    res = diffmb.contacts.contact_forces(model, traj, forces)
    np.testing.assert_allclose(np.asarray(res.normal[-1, 0]), n, atol=1e-6)


def test_gradient_through_touch_down_is_finite_and_matches_differences(tmp_path):
    """d(height after landing)/d(drop height) through the MJCF call, at dt = 1 ms."""
    f = tmp_path / "drop.xml"
    f.write_text(_SLOPE.format(deg=0.0, mu=0.8, x=0.0, z=0.3, cone="pyramidal"))
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)

    def final(z0, vx):
        q0 = jnp.asarray(model.qpos0).at[2].set(z0)
        v0 = jnp.zeros(6).at[0].set(vx)
        tr = diffmb.simulate(model, q0, v0, t1=0.4, dt=1e-3, forces=forces, saveat=[0.4])
        return tr.q[-1, 0] + tr.q[-1, 2]

    g = jax.grad(final, argnums=(0, 1))(0.3, 1.0)
    assert all(np.isfinite(float(x)) for x in g)
    h = 1e-6
    fd = (final(0.3, 1.0 + h) - final(0.3, 1.0 - h)) / (2 * h)
    assert abs(float(g[1]) - float(fd)) < 1e-3 * max(1.0, abs(float(fd)))


def test_unsupported_pairs_are_named(tmp_path):
    """A height field on a moving body is no ground: the pair is refused naming both geoms;
    ignored, it is dropped with a warning that names the geoms MuJoCo's first step loads
    through it (the ball resting on the raft)."""
    f = tmp_path / "raft.xml"
    f.write_text("""<mujoco><asset><hfield name="pad" nrow="3" ncol="3" size="0.5 0.5 0.1 0.1"/>
      </asset><worldbody>
      <body name="raft" pos="0 0 1"><joint type="slide" axis="1 0 0"/>
        <geom name="raft" type="hfield" hfield="pad" mass="1"/></body>
      <body name="b" pos="0 0 1.0995"><freejoint/><geom name="gb" type="sphere" size="0.1"/></body>
    </worldbody></mujoco>""")
    with pytest.raises(NotImplementedError, match="'raft' \\(hfield\\) with 'gb' \\(sphere\\)"):
        diffmb.mjcf_forces(f)
    with pytest.warns(UserWarning, match="carry load through them: 'raft', 'gb'|'gb', 'raft'"):
        diffmb.mjcf_forces(f, ignore=("unsupported_contacts",))


def test_contact_parameters_overridable_per_geom(tmp_path):
    """contact_overrides replaces μ of one pair: the same slope holds at μ = 0.6 and the box
    slides at μ = 0.2 overridden, with Coulomb's acceleration; unknown geoms are refused."""
    traj, a = _box_on_slope(tmp_path, 25.0, 0.6, 1.0)
    f = tmp_path / "slope.xml"
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f, contact_overrides={"box": {"mu": 0.2}})
    fast = diffmb.simulate(model, jnp.asarray(model.qpos0), None, t1=1.0, dt=1e-3,
                           forces=forces, saveat=np.linspace(0.5, 1.0, 6))
    s = np.linalg.norm(np.asarray(fast.q[:, :3] - fast.q[0, :3]), axis=1)
    t = np.asarray(fast.ts) - 0.5
    acc = np.polyfit(t, s, 2)[0] * 2
    expected = G * (np.sin(a) - 0.2 * np.cos(a))
    assert abs(acc - expected) < 0.01 * expected
    with pytest.raises(ValueError, match="'nosuch'.*colliding geoms"):
        diffmb.mjcf_forces(f, contact_overrides={"nosuch": {"mu": 1.0}})


_HFIELD_FLAT = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <asset><hfield name="pad" nrow="11" ncol="11" size="1 1 0.2 0.1"/></asset>
  <worldbody>
    <geom name="pad" type="hfield" hfield="pad"/>
    <body name="ball" pos="{x} 0 {z}"><freejoint/>
      <geom name="ball" type="sphere" size="0.1" mass="1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("x, touches", [(0.3, True), (0.98, True), (3.0, False), (1.2, False)])
def test_height_field_has_no_ground_outside_its_extent_as_mujoco(tmp_path, x, touches):
    """A flat <hfield> pad (top at z = 0.1 over x, y in [-1, 1]) and a ball whose lowest point
    is 1 cm below the pad's top: over the pad (its centre inside the extent, also 2 cm from the
    edge) MuJoCo finds a contact and diffmb a normal force; 2 m (and 0.2 m) beyond the extent
    MuJoCo finds none and diffmb gives none, and the ball falls freely there in both."""
    z0 = 0.1 + 0.1 - 0.01
    f = tmp_path / "pad.xml"
    f.write_text(_HFIELD_FLAT.format(x=x, z=z0))
    mj = mujoco.MjModel.from_xml_path(str(f))
    mj.hfield_data[:] = 0.5  # elevation 0.5 * 0.2 = 0.1 m everywhere
    d = mujoco.MjData(mj)
    mujoco.mj_forward(mj, d)
    assert (d.ncon > 0) == touches
    model = diffmb.io.mjcf.from_mjmodel(mj)
    forces = diffmb.io.mjcf.mjcf_forces(mj)
    q0 = jnp.asarray(model.qpos0)
    (el,) = [f for f in forces if isinstance(f, diffmb.contacts.Contacts)]
    fn0 = float(el.evaluate(model, q0, jnp.zeros(6)).fn[0])
    if touches:
        assert fn0 > 0.0
        return
    assert fn0 == 0.0
    traj = diffmb.simulate(model, q0, None, t1=0.2, dt=1e-3, forces=forces, saveat=[0.0, 0.2])
    res = diffmb.contacts.contact_forces(model, traj, forces)
    for _ in range(200):  # MuJoCo's own run: no contact appears beside the pad
        mujoco.mj_step(mj, d)
        assert d.ncon == 0
    zf = z0 - 0.5 * G * 0.2**2  # free fall
    assert float(traj.q[-1, 2]) == pytest.approx(zf, abs=1e-9)
    assert float(jnp.max(res.fn)) == 0.0



_RESTING = """<mujoco><option timestep="0.002"/>
  <default><geom contype="2" conaffinity="1"/></default><worldbody>
  <geom type="plane" size="5 5 .1" contype="1"/>
  <body name="ball" pos="0 0 0.1004"><freejoint/><geom type="sphere" size=".1" mass="2"/></body>
  <body name="rod" pos="1 0 0.0502"><freejoint/>
    <geom type="capsule" fromto="-.2 0 0 .2 0 0" size=".05" mass="7"
          solref="0.01 0.7" solimp="0.8 0.99 0.004 0.3 3"/></body>
  <body name="crate" pos="2 0 0.1002"><freejoint/>
    <geom type="box" size=".1 .1 .1" mass="0.5"/></body>
  </worldbody></mujoco>"""



def _mujoco_rest(f, steps=750):
    mj = mujoco.MjModel.from_xml_path(str(f))
    d = mujoco.MjData(mj)
    for _ in range(steps):
        mujoco.mj_step(mj, d)
    return mj, d


def test_rest_depth_is_mujocos_on_one_two_and_four_contacts(tmp_path):
    """MuJoCo gives each contact the pair's whole inverse weight and its impedance at the
    contact's own depth: with the same solref/solimp a sphere (1 contact) rests 3.4 times
    deeper than a box on a face (4 contacts); a capsule lying flat (2) has its own
    solref/solimp. At MuJoCo's rest depths, diffmb's contact springs carry each body's weight
    (to 1 %)."""
    f = tmp_path / "rest.xml"
    f.write_text(_RESTING)
    mj, d = _mujoco_rest(f)
    depth = np.array([0.1, 0.05, 0.1]) - np.asarray(d.qpos).reshape(3, 7)[:, 2]
    assert depth[2] < 0.5 * depth[0]
    (c,) = diffmb.io.mjcf.contacts_from_mjcf(f)
    assert c.pair_active == (1, 2, 4)
    carried = np.asarray(c.stiffness) * depth * np.array(c.pair_active)
    np.testing.assert_allclose(carried, np.asarray(mj.body_mass[1:]) * G, rtol=0.01)


_LOADED = """<mujoco><option timestep="0.002" cone="{cone}" impratio="{impratio}"/>
  <default><geom contype="2" conaffinity="1" condim="{condim}" friction="{mu} .02 .01"/>
  </default><worldbody>
  <geom type="plane" size="5 5 .1" contype="1"/>
  <body name="foot" pos="0 0 0.03"><joint name="s1" type="slide" axis="0 0 1"/>
    <geom type="sphere" size=".02" mass="1" solimp="0.015 1 0.031"/></body>
  <body name="ball" pos="1 0 0.03"><joint name="s2" type="slide" axis="0 0 1"/>
    <geom type="sphere" size=".02" mass="2"/></body>
  <body name="pad" pos="2 0 0.03"><joint name="s3" type="slide" axis="0 0 1"/>
    <geom type="sphere" size=".02" mass=".5" solimp="0.5 0.99 0.01 0.3 3"/></body>
  </worldbody><actuator><motor joint="s1"/><motor joint="s2"/><motor joint="s3"/></actuator>
</mujoco>"""


# MuJoCo's pyramidal edge rows push (condim − 1) impratio/(μ² (1 + μ²)) times one row: the
# pyramidal cases are those where that is 1
@pytest.mark.parametrize("cone, mu, condim, impratio", [
    ("elliptic", 0.8, 6, 100), ("elliptic", 0.6, 3, 1), ("pyramidal", 1.0, 3, 1),
    ("pyramidal", 1.0, 6, 0.4)])
@pytest.mark.parametrize("load", [0.0, 25.0, 250.0])
def test_a_contact_pushes_as_mujocos_row_whatever_load_it_carries(tmp_path, cone, mu, condim,
                                                                  impratio, load):
    """A foot carries a share of a robot that the loader cannot know. MuJoCo's contact row at
    rest pushes m K d(r)²/(1 − d(r)) r at depth r, whatever presses it down:
    three spheres on slide joints (the A1's foot solimp, the default one and a power-3 one,
    each mixed with the floor's as MuJoCo mixes them),
    each pressed by a motor with ``load`` N on top of its weight, rest in MuJoCo at depths
    from 0.05 to 25 mm. At MuJoCo's rest pose, diffmb's springs carry the weight plus the
    load (to 1 %)."""
    f = tmp_path / "loaded.xml"
    f.write_text(_LOADED.format(cone=cone, mu=mu, condim=condim, impratio=impratio))
    mj = mujoco.MjModel.from_xml_path(str(f))
    d = mujoco.MjData(mj)
    d.ctrl[:] = -load
    mujoco.mj_step(mj, d, nstep=1500)
    assert np.max(np.abs(d.qvel)) < 1e-6  # at rest
    (c,) = diffmb.io.mjcf.contacts_from_mjcf(f)
    model = diffmb.load_mjcf(f)
    fn = np.asarray(c.evaluate(model, jnp.asarray(d.qpos), jnp.zeros(3)).fn)
    np.testing.assert_allclose(fn, np.asarray(mj.body_mass[1:]) * G + load, rtol=0.01)


@pytest.mark.parametrize("cone, mu, condim, impratio", [
    ("pyramidal", 0.8, 6, 100), ("pyramidal", 0.6, 3, 1), ("pyramidal", 1.5, 4, 2),
    ("elliptic", 0.6, 3, 1)])
def test_rest_depth_with_the_cones_factor_is_mujocos(tmp_path, cone, mu, condim, impratio):
    """``mujoco_rest_depth(..., rows=c)`` with c = (condim − 1) impratio/(μ² (1 + μ²)) for
    MuJoCo's pyramidal cone (its edge rows' regulariser, mj_makeImpedance) and 1 for the
    elliptic one predicts where MuJoCo rests the pressed spheres above (to 1 %), for the three
    solimps and loads from 0 to 250 N."""
    from diffmb.forces.elements import mujoco_rest_depth

    f = tmp_path / "loaded.xml"
    f.write_text(_LOADED.format(cone=cone, mu=mu, condim=condim, impratio=impratio))
    mj = mujoco.MjModel.from_xml_path(str(f))
    rows = (condim - 1) * impratio / (mu**2 * (1 + mu**2)) if cone == "pyramidal" else 1.0
    for load in (0.0, 25.0, 250.0):
        d = mujoco.MjData(mj)
        d.ctrl[:] = -load
        mujoco.mj_step(mj, d, nstep=1500)
        assert d.ncon == 3
        body = np.asarray(mj.geom_bodyid)[np.asarray(d.contact.geom).max(axis=1)]
        depth = 0.02 - np.asarray(d.xpos)[body, 2]  # the spheres' radius minus their height
        m = np.asarray(mj.body_mass)[body]
        # the contacts' own (mixed) solimp, as MuJoCo combined the sphere's and the floor's
        r = mujoco_rest_depth(m, 1.0, (0.02, 1.0), np.asarray(d.contact.solimp), G,
                              load=m + load / G, rows=rows)
        np.testing.assert_allclose(r, depth, rtol=0.01)


@pytest.mark.slow
def test_bodies_on_one_two_and_four_contacts_rest_at_mujocos_heights(tmp_path):
    """The bodies above, dropped from 0.2–0.4 mm above their rest, come to rest at MuJoCo's
    heights (to 2 µm) under the implicit contact step."""
    f = tmp_path / "rest.xml"
    f.write_text(_RESTING)
    mj, d = _mujoco_rest(f)
    model = diffmb.load_mjcf(f)
    tr = diffmb.simulate(model, jnp.asarray(mj.qpos0), None, t1=1.5, dt=2e-3,
                         forces=diffmb.mjcf_forces(f), solver="implicit")
    np.testing.assert_allclose(np.asarray(tr.q[-1]).reshape(3, 7)[:, 2],
                               np.asarray(d.qpos).reshape(3, 7)[:, 2], atol=2e-6)


@pytest.mark.parametrize("m_eff, n_points, name", [(0.0, 1, "m_eff"), (1.0, 0, "n_points"),
                                                   (float("nan"), 2, "m_eff")])
def test_contact_gains_refuse_meaningless_masses_and_counts(m_eff, n_points, name):
    from diffmb.forces.elements import mujoco_contact_gains

    with pytest.raises(ValueError, match=name):
        mujoco_contact_gains(m_eff, n_points)


def test_contact_gains_of_many_pairs_at_once_equal_each_pair_alone():
    """The loader computes every pair's gains in one numpy call: the same numbers as one pair
    at a time, and the impedance in numpy equals the traced (JAX) one."""
    from diffmb.forces.elements import mujoco_contact_gains, soft_impedance

    rng = np.random.default_rng(0)
    n = 7
    m_eff = rng.uniform(0.1, 30.0, n)
    pts = rng.integers(1, 5, n).astype(float)
    solref = np.column_stack([rng.uniform(0.005, 0.05, n), rng.uniform(0.3, 1.5, n)])
    solimp = np.column_stack([rng.uniform(0.5, 0.9, n), rng.uniform(0.91, 0.99, n),
                              rng.uniform(1e-4, 1e-2, n), rng.uniform(0.1, 0.9, n),
                              rng.uniform(1.0, 4.0, n)])
    load = m_eff * rng.uniform(1.0, 10.0, n)
    k, b = mujoco_contact_gains(m_eff, pts, solref, solimp, 9.81, load=load)
    for i in range(n):
        ki, bi = mujoco_contact_gains(m_eff[i], pts[i], solref[i], solimp[i], 9.81, load=load[i])
        assert k[i] == pytest.approx(float(ki), rel=1e-14)
        assert b[i] == pytest.approx(float(bi), rel=1e-14)
    r = rng.uniform(0.0, 0.02, n)
    np.testing.assert_allclose(soft_impedance(r, solimp, xp=np),
                               np.asarray(soft_impedance(jnp.asarray(r), jnp.asarray(solimp))),
                               rtol=1e-14)
