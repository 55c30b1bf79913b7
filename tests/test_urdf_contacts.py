"""Contacts from a URDF's ``<collision>`` shapes, ``urdf_forces(path, ground=...)``, against
MuJoCo loading the same file (its URDF importer) with a free joint and a floor added."""

import math

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Contacts, HeightField, Plane
from diffmb.forces.elements import JointDamping, JointSpring, soft_constraint_gains

from .oracles import erd_path

G = 9.81

# A box-shaped base on four feet, each reached another way: a sphere on a continuous joint
# (its own body; a flywheel's inertia, as a wheel of 2 cm radius and 4e-6 kg m² would spin
# faster than an explicit step at 1 ms resolves its stiction spring), a cylinder on the base link, a capsule through two fixed links with rotated
# origins, a box on a yawed fixed link. Every foot's lowest point is 0.11 m below the base
# frame, so the base rests level at z = 0.11 m (plus the contacts' sub-millimetre sink).
_L_HL = 0.04 / math.cos(0.4)
_QUAD = f"""<?xml version="1.0"?>
<robot name="quad">
  <link name="base">
    <inertial><origin xyz="0.01 0 0"/><mass value="2.0"/>
      <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.025"/></inertial>
    <visual><geometry><sphere radius="0.3"/></geometry></visual>
    <collision><origin xyz="0 0 0.02" rpy="0 0 0.3"/>
      <geometry><box size="0.3 0.2 0.06"/></geometry></collision>
    <collision name="foot_fr"><origin xyz="0.12 -0.1 -0.09"/>
      <geometry><cylinder radius="0.02" length="0.04"/></geometry></collision>
  </link>
  <link name="foot_fl">
    <inertial><mass value="0.2"/>
      <inertia ixx="2e-4" ixy="0" ixz="0" iyy="4e-4" iyz="0" izz="2e-4"/></inertial>
    <collision><geometry><sphere radius="0.02"/></geometry></collision>
  </link>
  <joint name="wheel_fl" type="continuous"><parent link="base"/><child link="foot_fl"/>
    <origin xyz="0.12 0.1 -0.09"/><axis xyz="0 1 0"/></joint>
  <link name="hip_hl">
    <inertial><mass value="0.05"/>
      <inertia ixx="1e-5" ixy="0" ixz="0" iyy="1e-5" iyz="0" izz="1e-5"/></inertial>
  </link>
  <joint name="hip_hl" type="fixed"><parent link="base"/><child link="hip_hl"/>
    <origin xyz="-0.12 0.1 -0.02" rpy="0 0 1.2"/></joint>
  <link name="foot_hl">
    <inertial><origin xyz="0 0 -0.02"/><mass value="0.05"/>
      <inertia ixx="1e-5" ixy="0" ixz="0" iyy="1e-5" iyz="0" izz="1e-5"/></inertial>
    <collision><origin xyz="0 0 {-_L_HL!r}" rpy="{math.pi / 2 - 0.4!r} 0 0"/>
      <geometry><capsule radius="0.02" length="0.06"/></geometry></collision>
  </link>
  <joint name="foot_hl" type="fixed"><parent link="hip_hl"/><child link="foot_hl"/>
    <origin xyz="0 0 -0.03" rpy="0.4 0 0"/></joint>
  <link name="foot_hr">
    <inertial><mass value="0.05"/>
      <inertia ixx="1e-5" ixy="0" ixz="0" iyy="1e-5" iyz="0" izz="1e-5"/></inertial>
    <collision><origin xyz="0 0 -0.05"/><geometry><box size="0.04 0.03 0.02"/></geometry>
    </collision>
  </link>
  <joint name="foot_hr" type="fixed"><parent link="base"/><child link="foot_hr"/>
    <origin xyz="-0.12 -0.1 -0.05" rpy="0 0 0.7"/></joint>
</robot>
"""

_MESH = """<?xml version="1.0"?>
<robot name="leg">
  <link name="base">
    <inertial><mass value="1.0"/>
      <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial>
    <collision><geometry><box size="0.2 0.2 0.05"/></geometry></collision>
  </link>
  <link name="shin">
    <inertial><mass value="0.2"/>
      <inertia ixx="1e-3" ixy="0" ixz="0" iyy="1e-3" iyz="0" izz="1e-3"/></inertial>
    <collision><geometry><mesh filename="package://leg/meshes/shin.stl"/></geometry>
    </collision>
  </link>
  <joint name="knee" type="continuous"><parent link="base"/><child link="shin"/>
    <origin xyz="0 0 -0.1"/><axis xyz="0 1 0"/></joint>
</robot>
"""


@pytest.fixture
def quad(tmp_path):
    f = tmp_path / "quad.urdf"
    f.write_text(_QUAD)
    return f


def _mujoco_with_floor(path):
    """MuJoCo's URDF importer on ``path``, with a free joint on the root link and a floor."""
    spec = mujoco.MjSpec.from_file(str(path))
    spec.worldbody.first_body().add_freejoint()
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1], name="floor")
    return spec.compile()


@pytest.mark.slow
def test_contact_parameters_are_mujocos_for_its_fused_bodies(quad):
    """Stiffness and damping per point follow MuJoCo's body_invweight0 of the body its URDF
    importer makes (the base fused with its fixed-joint links; the wheel its own body), with
    MuJoCo's default friction, solref and solimp; every collision shape of a moving link is
    there, on its own link."""
    model = diffmb.load_urdf(quad, floating_base=True)
    (el,) = [f for f in diffmb.urdf_forces(quad, model, ground=0.0) if isinstance(f, Contacts)]
    mj = _mujoco_with_floor(quad)
    assert [mj.body(i).name for i in range(mj.nbody)] == ["world", "base", "foot_fl"]
    assert {(g.name, g.kind, g.body) for g in el.geoms} == {
        ("base_0", "box", "base"), ("foot_fr", "cylinder", "base"),
        ("foot_fl", "sphere", "foot_fl"), ("foot_hl", "capsule", "foot_hl"),
        ("foot_hr", "box", "foot_hr")}
    mj_body = {"base": 1, "foot_hl": 1, "foot_hr": 1, "foot_fl": 2}
    for i, g in enumerate(el.geoms):
        geom = [j for j in range(mj.ngeom) if mj.geom_bodyid[j] > 0
                and int(mj.geom_type[j]) == {"box": 6, "sphere": 2, "capsule": 3,
                                             "cylinder": 5}[g.kind]]
        fric, solref, solimp = (mj.geom_friction[geom[0]], mj.geom_solref[geom[0]],
                                mj.geom_solimp[geom[0]])
        m_pt = 1.0 / mj.body_invweight0[mj_body[g.body], 0] / g.n_active
        k, b = soft_constraint_gains(m_pt, solref, solimp[:2])
        np.testing.assert_allclose(float(el.stiffness[i]), float(k), rtol=1e-9)
        np.testing.assert_allclose(float(el.damping[i]), float(b), rtol=1e-9)
        assert float(el.mu[i]) == fric[0] == 1.0


@pytest.mark.slow
def test_quadruped_rests_on_the_floor_as_in_mujoco(quad):
    """Dropped from 2 cm, the robot lands on its four feet and rests level at the height the
    geometry gives (0.11 m) and MuJoCo's (within 5 mm); the normal forces carry its weight."""
    model = diffmb.load_urdf(quad, floating_base=True)
    forces = diffmb.urdf_forces(quad, model, ground=0.0)
    q0 = np.array(model.qpos0)
    q0[2] = 0.13
    mj = _mujoco_with_floor(quad)
    d = mujoco.MjData(mj)
    d.qpos[:] = q0
    mujoco.mj_step(mj, d, nstep=int(round(1.0 / mj.opt.timestep)))
    # dt = 0.25 ms: the feet are fused to a base whose radius of gyration (~0.07 m) is
    # below their lever arm (~0.15 m), so its rocking modes are ~5x faster than a lone box's
    # and RK4 at 1 ms (or 0.5 ms) would chatter instead of resting
    traj = diffmb.simulate(model, jnp.asarray(q0), None, t1=1.0, dt=2.5e-4, forces=forces,
                           saveat=[1.0])
    q = np.asarray(traj.q[-1])
    assert abs(d.qpos[2] - 0.11) < 1e-3
    assert abs(q[2] - d.qpos[2]) < 5e-3
    assert abs(q[2] - 0.11) < 1e-3
    # level, as MuJoCo: the tilt of the base's z axis
    tilt = lambda quat: np.arccos(np.clip(1 - 2 * (quat[1] ** 2 + quat[2] ** 2), -1, 1))  # noqa: E731
    assert tilt(q[3:7]) < 5e-3 and tilt(d.qpos[3:7]) < 5e-3
    assert float(jnp.max(jnp.abs(traj.v[-1][:6]))) < 1e-3  # at rest
    res = diffmb.contacts.contact_forces(model, traj, forces)
    weight = float(jnp.sum(model.body_mass)) * G
    np.testing.assert_allclose(float(jnp.sum(res.fn[-1])), weight, rtol=1e-2)
    loaded = {p[0] for p, f in zip(res.pairs, res.fn[-1], strict=True) if f > 1e-3}
    assert loaded == {"foot_fl", "foot_fr", "foot_hl", "foot_hr"}
    assert all(p[1] == "ground" for p in res.pairs)


@pytest.mark.slow
def test_ground_none_builds_no_contacts_and_meshes_are_refused_by_link(tmp_path, quad):
    f = tmp_path / "leg.urdf"
    f.write_text(_MESH)
    model = diffmb.load_urdf(f, floating_base=True)
    for path, m in ((f, model), (quad, diffmb.load_urdf(quad, floating_base=True))):
        assert not any(isinstance(x, Contacts) for x in diffmb.urdf_forces(path, m))
    with pytest.raises(ValueError, match=r"'shin'.*shin\.stl.*not found.*unsupported_contacts"):
        diffmb.urdf_forces(f, model, ground=0.0)
    with pytest.warns(UserWarning, match="shin"):
        forces = diffmb.urdf_forces(f, model, ground=Plane((0, 0, 1), -0.5, name="deck"),
                                    ignore=("unsupported_contacts",))
    (el,) = [x for x in forces if isinstance(x, Contacts)]
    assert [g.body for g in el.geoms] == ["base"] and el.terrain.name == "deck"
    assert float(el.terrain.offset) == -0.5
    # a height field is taken as it is
    hf = HeightField(np.zeros((3, 3)), origin=(-1.0, -1.0), spacing=(1.0, 1.0))
    with pytest.warns(UserWarning, match="shin"):
        (el,) = diffmb.io.urdf.contacts_from_urdf(f, model, hf, ignore="unsupported_contacts")
    assert el.terrain is hf
    # a fixed base never moves: its shapes give no contact, and the mesh of the moving shin
    # is still refused
    fixed = diffmb.load_urdf(f)
    with pytest.raises(ValueError, match="shin"):
        diffmb.urdf_forces(f, fixed, ground=0.0)
    with pytest.warns(UserWarning):
        assert diffmb.io.urdf.contacts_from_urdf(f, fixed, 0.0, ignore="unsupported_contacts") \
            == ()
    with pytest.raises(TypeError, match="ground"):
        diffmb.urdf_forces(f, model, ground="floor")
    with pytest.raises(ValueError, match="ground"):
        diffmb.urdf_forces(f, model, ground=float("nan"))


def test_unreadable_collision_shapes_are_refused_naming_the_file_and_link(tmp_path):
    bad = _MESH.replace('<mesh filename="package://leg/meshes/shin.stl"/>',
                        '<sphere radius="-0.1"/>')
    f = tmp_path / "bad.urdf"
    f.write_text(bad)
    model = diffmb.load_urdf(f, floating_base=True)
    with pytest.raises(ValueError, match=r"bad\.urdf.*'shin'.*sphere"):
        diffmb.urdf_forces(f, model, ground=0.0)
    f.write_text(_MESH.replace('<mesh filename="package://leg/meshes/shin.stl"/>',
                               '<cone radius="0.1"/>'))
    with pytest.raises(ValueError, match=r"bad\.urdf.*'shin'"):
        diffmb.urdf_forces(f, model, ground=0.0)


@pytest.mark.slow
def test_a1_urdf_stands_on_its_collision_feet_as_in_mujoco():
    """example-robot-data's Unitree A1 (primitive collision shapes only: box trunk, cylinder
    hips, box thighs and calves, sphere feet), its twelve joints held by springs about a
    standing pose (k = 60 N m/rad, b = 2 N m s/rad, the same in both), dropped 1 cm onto
    ``ground=0.0``: after 2 s it stands on its four feet as MuJoCo's URDF importer (with a
    free joint and a floor added, every default filter on: its only contacts at rest are the
    feet on the floor) makes it stand: base height within 5 mm (2.9 mm measured), joint
    angles within 0.05 rad, the normal forces carrying the weight within 1 %."""
    path = erd_path("a1_description/urdf/a1.urdf")
    k, b = 60.0, 2.0
    model = diffmb.load_urdf(path, floating_base=True)
    spec = mujoco.MjSpec.from_file(path)
    spec.worldbody.first_body().add_freejoint()
    for j in spec.joints:
        if j.type == mujoco.mjtJoint.mjJNT_HINGE:
            j.stiffness = [k, 0.0, 0.0]  # MuJoCo 4: polynomial spring, linear term
            j.damping = [b, 0.0, 0.0] if np.ndim(j.damping) else b
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1], name="floor")
    mj = spec.compile()
    assert mj.nq == model.nq == 19
    qref = np.array(mj.qpos0)
    qref[7:] = np.tile([0.0, 0.9, -1.8], 4)  # hip, thigh, calf
    mj.qpos_spring[:] = qref
    d = mujoco.MjData(mj)
    d.qpos[:] = qref
    mujoco.mj_kinematics(mj, d)
    feet = [g for g in range(mj.ngeom) if mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE]
    q0 = qref.copy()
    q0[2] = 0.01 - min(d.geom_xpos[g][2] - mj.geom_size[g][0] for g in feet)
    d.qpos[:] = q0
    mujoco.mj_step(mj, d, nstep=int(round(2.0 / mj.opt.timestep)))
    assert {(int(c.geom1), int(c.geom2)) for c in d.contact[: d.ncon]} <= {
        (0, g) for g in feet} and d.ncon == 4

    hinge = np.r_[np.zeros(6), np.ones(12)]
    forces = diffmb.urdf_forces(path, model, ground=0.0) + (
        JointSpring(k * hinge, qref), JointDamping(b * hinge))
    traj = diffmb.simulate(model, jnp.asarray(q0), None, t1=2.0, dt=1e-3, forces=forces,
                           saveat=[2.0])
    q = np.asarray(traj.q[-1])
    assert abs(q[2] - d.qpos[2]) < 5e-3
    np.testing.assert_allclose(q[7:], d.qpos[7:], atol=0.05)
    res = diffmb.contacts.contact_forces(model, traj, forces)
    weight = float(jnp.sum(model.body_mass)) * G
    np.testing.assert_allclose(float(jnp.sum(res.fn[-1])), weight, rtol=1e-2)
    loaded = {p[0] for p, f in zip(res.pairs, res.fn[-1], strict=True) if f > 1e-3}
    assert loaded == {"FR_foot", "FL_foot", "RR_foot", "RL_foot"}


def _solo12_mujoco(path, k, b):
    """MuJoCo's import of Solo-12's URDF (its meshes given as assets, as MuJoCo looks them up
    by file name), with a free joint, springs k and dampers b on the hinges and a floor; the
    links collide with the floor only (conaffinity 0), as diffmb's with self_collision=False."""
    import pathlib
    import re

    txt = pathlib.Path(path).read_text()
    assets = {}
    for fn in set(re.findall(r'filename="([^"]+)"', txt)):
        rel = fn.split("solo_description/")[1]
        assets[pathlib.Path(fn).name] = (pathlib.Path(path).parents[1] / rel).read_bytes()
    spec = mujoco.MjSpec.from_string(txt, assets=assets)
    spec.worldbody.first_body().add_freejoint()
    for j in spec.joints:
        if j.type == mujoco.mjtJoint.mjJNT_HINGE:
            j.stiffness = [k, 0.0, 0.0]  # MuJoCo 4: polynomial spring, linear term
            j.damping = [b, 0.0, 0.0] if np.ndim(j.damping) else b
    for g in spec.geoms:
        g.conaffinity = 0
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1], name="floor")
    return spec.compile()


@pytest.mark.slow
def test_solo12_urdf_stands_on_its_collision_meshes_as_in_mujoco():
    """example-robot-data's Solo-12, whose every <collision> is an STL mesh (package://
    paths): urdf_forces(ground=0.0) collides their convex hulls, as MuJoCo does. At the SRDF's
    "standing" pose each link's lowest hull point is MuJoCo's (its compiled mesh vertices,
    to 1e-7 m). Its joints held by springs about that pose (k = 10 N m/rad, b = 0.5 N m s/rad,
    the same in both), dropped 2 cm: it stands on its lower legs (the feet are fused into
    them) instead of sinking to z = -0.29 m as without contacts, its base within 12 mm of
    MuJoCo's (9.6 mm lower measured: the mass-normalised stiffness takes each light lower
    leg's own effective mass, so the feet sink ~1 cm under the robot's weight where MuJoCo's
    constraint solver sinks them 0.3 mm). The links collide with the floor only here, in both
    (conaffinity 0 in MuJoCo, self_collision=False in diffmb)."""
    path = erd_path("solo_description/robots/solo12.urdf")
    k, b = 10.0, 0.5
    model = diffmb.load_urdf(path, floating_base=True)
    mj = _solo12_mujoco(path, k, b)
    assert mj.nq == model.nq == 19
    qref = np.array(mj.qpos0)
    qref[7:] = [0.1, 0.8, -1.6, -0.1, 0.8, -1.6, 0.1, -0.8, 1.6, -0.1, -0.8, 1.6]
    mj.qpos_spring[:] = qref
    d = mujoco.MjData(mj)
    d.qpos[:] = qref
    mujoco.mj_kinematics(mj, d)
    lowest = {}
    for g in range(mj.ngeom):
        if mj.geom_type[g] != mujoco.mjtGeom.mjGEOM_MESH:
            continue
        m = mj.geom_dataid[g]
        V = mj.mesh_vert[mj.mesh_vertadr[m]:mj.mesh_vertadr[m] + mj.mesh_vertnum[m]]
        z = float((d.geom_xmat[g].reshape(3, 3) @ V.T)[2].min() + d.geom_xpos[g][2])
        body = mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_BODY, int(mj.geom_bodyid[g]))
        lowest[body] = min(lowest.get(body, np.inf), z)
    hinge = np.r_[np.zeros(6), np.ones(12)]
    forces = diffmb.urdf_forces(path, model, ground=0.0, self_collision=False) + (
        JointSpring(k * hinge, qref), JointDamping(b * hinge))
    (el,) = [x for x in forces if isinstance(x, Contacts)]
    assert {g.kind for g in el.geoms} == {"mesh"} and len(el.geoms) == 17
    r = el.evaluate(model, jnp.asarray(qref), jnp.zeros(model.nv))
    ours = {}
    for (name, _), z in zip(diffmb.contacts.element._pairs(el), np.asarray(r.point[:, 2]),
                            strict=True):
        link = next(g.body for g in el.geoms if g.name == name)
        body = link.replace("_FOOT", "_LOWER_LEG")  # MuJoCo fuses the fixed foot links
        ours[body] = min(ours.get(body, np.inf), float(z))
    assert ours.keys() == lowest.keys()
    for body, z in lowest.items():
        assert abs(ours[body] - z) < 1e-7, body
    q0 = qref.copy()
    q0[2] = 0.02 - min(lowest.values())
    d.qpos[:] = q0
    mujoco.mj_step(mj, d, nstep=int(round(1.5 / mj.opt.timestep)))
    traj = diffmb.simulate(model, jnp.asarray(q0), None, t1=1.5, dt=1e-3, forces=forces,
                           saveat=[1.5])
    q = np.asarray(traj.q[-1])
    assert abs(q[2] - d.qpos[2]) < 1.2e-2


_SPINNER = """<?xml version="1.0"?>
<robot name="spinner">
  <link name="base">
    <inertial><mass value="1.0"/>
      <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial>
  </link>
  <link name="arm">
    <inertial><mass value="0.5"/>
      <inertia ixx="1e-3" ixy="0" ixz="0" iyy="2e-3" iyz="0" izz="3e-3"/></inertial>
    <collision name="paddle"><origin xyz="0.2 0 0"/>
      <geometry><box size="0.1 0.04 0.02"/></geometry></collision>
    <collision name="hub"><geometry><sphere radius="0.03"/></geometry></collision>
  </link>
  <joint name="spin" type="continuous"><parent link="base"/><child link="arm"/>
    <origin xyz="0 0 0.1"/><axis xyz="0 0 1"/></joint>
</robot>
"""


def test_a_link_spinning_about_its_centre_of_mass_gets_a_finite_contact_mass(tmp_path):
    """A link on a fixed base turning about an axis through its centre of mass: MuJoCo's
    body_invweight0 (translation) is 0 there. The paddle's contact takes the inverse weight at
    its own centre (MuJoCo's Jacobian and M⁻¹ there), finite; the hub centred on the axis
    takes the rotational inverse weight (MuJoCo's body_invweight0[1], the same body) times its
    radius², finite too, instead of an infinite stiffness."""
    f = tmp_path / "spinner.urdf"
    f.write_text(_SPINNER)
    mj = mujoco.MjModel.from_xml_path(str(f))
    arm = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, "arm")
    assert mj.body_invweight0[arm, 0] < 1e-12  # MuJoCo's own: the com cannot translate
    (el,) = [x for x in diffmb.urdf_forces(f, ground=-1.0) if isinstance(x, Contacts)]
    assert [g.name for g in el.geoms] == ["paddle", "hub"]
    d = mujoco.MjData(mj)
    mujoco.mj_forward(mj, d)
    box = [j for j in range(mj.ngeom) if mj.geom_type[j] == mujoco.mjtGeom.mjGEOM_BOX][0]
    J = np.zeros((3, mj.nv))
    mujoco.mj_jac(mj, d, J, None, d.geom_xpos[box], arm)
    MinvJ = np.zeros((3, mj.nv))
    mujoco.mj_solveM(mj, d, MinvJ, J)
    w = np.sum(J * MinvJ) / 3.0
    k, b = soft_constraint_gains(1.0 / w / el.geoms[0].n_active, mj.geom_solref[box],
                                 mj.geom_solimp[box][:2])
    np.testing.assert_allclose(float(el.stiffness[0]), float(k), rtol=1e-9)
    np.testing.assert_allclose(float(el.damping[0]), float(b), rtol=1e-9)
    w_hub = mj.body_invweight0[arm, 1] * 0.03**2
    k, _ = soft_constraint_gains(1.0 / w_hub, mj.geom_solref[box], mj.geom_solimp[box][:2])
    np.testing.assert_allclose(float(el.stiffness[1]), float(k), rtol=1e-9)


def test_contacts_built_by_hand_on_a_spinning_link_are_finite(tmp_path):
    """The same two shapes given to Contacts(model=...) directly get the stiffness urdf_forces
    gives (itself checked against MuJoCo above), not an infinite one."""
    from diffmb.contacts import Box, Sphere

    f = tmp_path / "spinner.urdf"
    f.write_text(_SPINNER)
    model = diffmb.load_urdf(f)
    (ref,) = [x for x in diffmb.urdf_forces(f, model, ground=-1.0) if isinstance(x, Contacts)]
    floor = Plane((0.0, 0.0, 1.0), -1.0)
    el = Contacts([Box("arm", (0.05, 0.02, 0.01), pos=(0.2, 0, 0), name="paddle"),
                   Sphere("arm", 0.03, name="hub")], floor, model=model)
    assert np.all(np.isfinite(np.asarray(el.stiffness)))
    np.testing.assert_allclose(np.asarray(el.stiffness), np.asarray(ref.stiffness), rtol=1e-9)


_FOLDED = """<?xml version="1.0"?>
<robot name="folded">
  <link name="base">
    <inertial><mass value="1.0"/>
      <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial>
    <collision name="plate"><geometry><box size="0.4 0.4 0.05"/></geometry></collision>
  </link>
  <link name="upper">
    <inertial><origin xyz="0 0 -0.1"/><mass value="0.3"/>
      <inertia ixx="1e-3" ixy="0" ixz="0" iyy="1e-3" iyz="0" izz="1e-4"/></inertial>
    <collision name="elbow"><origin xyz="0 0 -0.05"/><geometry><sphere radius="0.04"/></geometry>
    </collision>
  </link>
  <link name="lower">
    <inertial><origin xyz="0 0 -0.1"/><mass value="0.2"/>
      <inertia ixx="1e-3" ixy="0" ixz="0" iyy="1e-3" iyz="0" izz="1e-4"/></inertial>
    <collision name="hand"><origin xyz="0 0 -0.2"/><geometry><sphere radius="0.03"/></geometry>
    </collision>
  </link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="upper"/>
    <origin xyz="0.1 0 0"/><axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="1" velocity="1"/>
  </joint>
  <joint name="elbow" type="revolute"><parent link="upper"/><child link="lower"/>
    <origin xyz="0 0 -0.2"/><axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="1" velocity="1"/>
  </joint>
</robot>
"""


def test_links_collide_as_mujocos_urdf_import_filters_them(tmp_path):
    """A floating plate with a two-link arm folded back so that the hand (on the grandchild)
    presses into the plate's underside and the elbow sphere (on the plate's child) overlaps it
    too. MuJoCo's URDF import (a free joint and a floor added, every default filter on) reports
    one contact, hand against plate (parent and child are filtered); diffmb's pairs with a
    penetration are the same, and the depth is MuJoCo's (−dist)."""
    f = tmp_path / "folded.urdf"
    f.write_text(_FOLDED)
    model = diffmb.load_urdf(f, floating_base=True)
    mj = _mujoco_with_floor(f)
    q = np.array(mj.qpos0)
    q[2] = 1.0  # far above the floor
    q[7:] = [0.3, 2.6]  # the forearm folds back up under the plate
    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_forward(mj, d)
    names = {mj.body(mj.geom_bodyid[c.geom[0]]).name + "/" + mj.body(mj.geom_bodyid[c.geom[1]]).name
             for c in d.contact[: d.ncon]}
    assert names in ({"base/lower"}, {"lower/base"}), names
    depth = -float(d.contact[0].dist)
    assert depth > 1e-3
    (el,) = [x for x in diffmb.urdf_forces(f, model, ground=0.0) if isinstance(x, Contacts)]
    traj = diffmb.Trajectory(ts=jnp.zeros(1), q=jnp.asarray(q)[None], v=jnp.zeros((1, model.nv)),
                             status=jnp.int32(0), t_fail=jnp.inf, num_steps=jnp.int32(1),
                             aux=((jnp.zeros((1, el.n_points, 3)),), None))
    res = diffmb.contacts.contact_forces(model, traj, (el,))
    pen = np.asarray(res.penetration[0])
    touching = {tuple(sorted(p)) for p, x in zip(res.pairs, pen, strict=True) if x > 0}
    assert touching == {("hand", "plate")}, touching
    assert float(pen.max()) == pytest.approx(depth, abs=1e-9)
    # switched off, only the floor pairs remain
    (floor_only,) = [x for x in diffmb.urdf_forces(f, model, ground=0.0, self_collision=False)
                     if isinstance(x, Contacts)]
    assert all(kind == "terrain" for _, kind, _ in floor_only.pairs)
