"""Contacts as MuJoCo's soft constraint rows (``normal="constraint"``, on the pyramidal cone
also ``friction="pyramid"``; ``mjcf_forces(path, contacts="constraint")``), against MuJoCo
simulating the same file.

MuJoCo's Euler step and diffmb's implicit step with the rows taken at the step's start
(``solver="implicit"``) are the same map where the rows are all of the contact (a frictionless
contact, or MuJoCo's pyramidal cone): the trajectories agree to rounding, through impacts,
sliding and sticking. The explicit path (RK4) converges to MuJoCo's trajectory as both steps
shrink."""

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Contacts, Plane, Sphere

BALL = """<mujoco><option timestep="{dt}" cone="{cone}"/>
<worldbody><geom name="floor" type="plane" size="5 5 0.1" condim="{condim}" friction="{mu} 0.01 0.001"/>
<body name="ball" pos="0 0 0.3"><freejoint/>
<geom name="s" type="sphere" size="0.1" mass="1" condim="{condim}" friction="{mu} 0.01 0.001"/>
</body></worldbody></mujoco>"""


def _mujoco_run(xml, v0, steps):
    mj = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(mj)
    d.qvel[:] = v0
    q0 = d.qpos.copy()
    out = []
    for _ in range(steps):
        mujoco.mj_step(mj, d)
        out.append(d.qpos.copy())
    return q0, np.array(out)


@pytest.mark.parametrize("cone,condim", [("elliptic", 1), ("pyramidal", 3)])
def test_a_thrown_ball_follows_mujocos_euler_step_to_rounding(tmp_path, cone, condim):
    """A ball thrown down at 1 m/s and sideways at 1 m/s onto a floor (μ = 0.5; on the
    pyramidal cone four edge rows whose weight is 2 μ² (1 + μ²)/impratio of the pair's, the
    force acting mid-overlap as MuJoCo places it): its position over 0.8 s, through the impact
    (14 mm deep), the skid and into rolling, equals MuJoCo's mj_step to 1e-10 m at the file's
    2 ms (the attitude to 1e-4, see below)."""
    xml = BALL.format(dt=0.002, cone=cone, condim=condim, mu=0.5)
    path = tmp_path / "ball.xml"
    path.write_text(xml)
    v0 = np.array([1.0, 0.0, -1.0, 0.0, 0.0, 0.0])
    q0, ref = _mujoco_run(xml, v0, 400)
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path, contacts="constraint")
    tr = diffmb.simulate(model, q0, v0, 0.8, dt=0.002, forces=forces, solver="implicit",
                         saveat=np.arange(1, 401) * 0.002)
    assert ref[:, 2].min() < 0.087  # the impact goes deep: the rows' dynamics are tested
    if condim > 1:  # friction slowed the ball and spun it up
        assert ref[-1, 0] < 0.8 - 0.1 and abs(ref[-1, 3]) < 0.99
    q = np.asarray(tr.q)
    np.testing.assert_allclose(q[:, :3], ref[:, :3], rtol=0, atol=1e-10)
    # the attitude: MuJoCo integrates it on the exponential map, diffmb's Euler step as
    # q + h q̇ renormalised; per step they differ by O(h² ω²), 3e-5 over the 1.6 rad rolled
    np.testing.assert_allclose(q[:, 3:], ref[:, 3:], rtol=0, atol=1e-4)


def test_a_thrown_cube_follows_mujocos_pyramidal_cone_to_rounding(tmp_path):
    """MuJoCo's thrown cube (the sysid benchmark's record, on MuJoCo's default pyramidal
    cone): four corner contacts of four edge rows each, solved together; it lands, bounces,
    slides 0.3 m and comes to rest. Every coordinate over 0.5 s within 1e-8 of mj_step's (the
    active set found as MuJoCo's Newton solver finds it)."""
    from diffmb.bench import sysid as B

    xml = B.cube_mjcf(**B.CUBE_TRUTH).replace('cone="elliptic"', 'cone="pyramidal"')
    path = tmp_path / "cube.xml"
    path.write_text(xml)
    mj = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = B.CUBE_Q0, B.CUBE_V0
    ref = []
    for _ in range(250):
        mujoco.mj_step(mj, d)
        ref.append(d.qpos.copy())
    ref = np.array(ref)
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path, contacts="constraint")
    tr = diffmb.simulate(model, np.array(B.CUBE_Q0), np.array(B.CUBE_V0), 0.5, dt=B.CUBE_DT,
                         forces=forces, solver="implicit", saveat=np.arange(1, 251) * B.CUBE_DT)
    assert ref[-1, 0] > 0.3 and np.abs(ref[-10:, 0] - ref[-1, 0]).max() < 1e-4  # slid, stopping
    np.testing.assert_allclose(np.asarray(tr.q), ref, rtol=0, atol=1e-8)


def test_the_explicit_path_converges_to_mujocos_trajectory(tmp_path):
    """RK4 at 0.1 ms against MuJoCo at 0.1 ms (its Euler step's own error is O(h)): the
    heights agree to 0.2 mm through the impact; the spring law (``contacts=True``), which
    rests at MuJoCo's depth but is 19 times stiffer away from it, misses by more than 1 mm
    (a vertical drop: no friction acts)."""
    xml = BALL.format(dt=0.0001, cone="elliptic", condim=1, mu=0.5)
    path = tmp_path / "ball.xml"
    path.write_text(xml)
    v0 = np.array([0.0, 0.0, -1.0, 0.0, 0.0, 0.0])
    q0, ref = _mujoco_run(xml, v0, 3000)
    model = diffmb.load_mjcf(path)
    ts = np.arange(1, 151) * 0.002
    err = {}
    for kind in ("constraint", True):
        tr = diffmb.simulate(model, q0, v0, 0.3, dt=1e-4, solver="rk4", saveat=ts,
                             forces=diffmb.mjcf_forces(path, contacts=kind))
        err[kind] = np.abs(np.asarray(tr.q)[:, 2] - ref[19::20, 2]).max()
    assert err["constraint"] < 2e-4
    assert err[True] > 1e-3


@pytest.mark.parametrize("cone", ["elliptic", "pyramidal"])
def test_a_resting_box_is_held_by_its_rows_at_mujocos_depth(tmp_path, cone):
    """A box on its face: the four corner rows are solved together (their weights couple
    through the box's mass matrix), as MuJoCo's solver does. Resting height after 1 s within
    1e-7 m of MuJoCo's, also when the step takes only the 4 nearest of the 8 corners, and
    ``contact_forces`` carries the weight to 1e-6."""
    xml = """<mujoco><option timestep="0.002" cone="CONE"/>
<worldbody><geom name="floor" type="plane" size="5 5 0.1"/>
<body name="box" pos="0 0 0.051"><freejoint/>
<geom name="b" type="box" size="0.1 0.07 0.05" mass="2" condim="3"/></body>
</worldbody></mujoco>""".replace("CONE", cone)
    path = tmp_path / "box.xml"
    path.write_text(xml)
    q0, ref = _mujoco_run(xml, np.zeros(6), 500)
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path, contacts="constraint")
    tr = diffmb.simulate(model, q0, np.zeros(6), 1.0, dt=0.002, forces=forces,
                         solver="implicit", saveat=[1.0])
    assert abs(float(tr.q[-1, 2]) - ref[-1, 2]) < 1e-7
    r = diffmb.contacts.contact_forces(model, tr, forces)
    assert float(jnp.sum(r.fn)) == pytest.approx(2.0 * 9.81, rel=1e-6)
    # the step linearising only the 4 nearest of the 8 corners (the others apart) is the same
    fewer = tuple(f.with_max_points(4) if isinstance(f, Contacts) else f for f in forces)
    tr4 = diffmb.simulate(model, q0, np.zeros(6), 1.0, dt=0.002, forces=fewer,
                          solver="implicit", saveat=[1.0])
    assert abs(float(tr4.q[-1, 2]) - ref[-1, 2]) < 1e-7


def test_constraint_normals_refuse_what_they_cannot_do(tmp_path):
    path = tmp_path / "ball.xml"
    path.write_text(BALL.format(dt=0.002, cone="elliptic", condim=3, mu=0.5))
    model = diffmb.load_mjcf(path)
    ball = Sphere("ball", 0.1)
    floor = Plane()
    with pytest.raises(ValueError, match="backward_smoothing"):
        Contacts([ball], floor, model=model, normal="constraint", backward_smoothing=1e-3)
    with pytest.raises(ValueError, match="invweight"):
        Contacts([ball], floor, model=model, invweight=1.0)
    with pytest.raises(ValueError, match="invweight"):
        Contacts([ball], floor, model=model, normal="constraint", invweight=-1.0)
    with pytest.raises(ValueError, match="invweight"):
        Contacts([ball], floor, normal="constraint", stiffness=1e4, damping=10.0,
                 tangential_stiffness=1e4, tangential_damping=10.0)
    with pytest.raises(ValueError, match="contacts = 'rows'"):
        diffmb.mjcf_forces(path, contacts="rows")
    forces = diffmb.mjcf_forces(path, contacts="constraint")
    with pytest.raises(TypeError, match="constraint"):
        diffmb.simulate(model, np.asarray(model.qpos0), None, 0.01, dt=0.002, forces=forces,
                        solver="implicit2")


def test_gradients_through_the_rows_equal_central_differences(tmp_path):
    """A box sliding on its face at 1 m/s for 0.1 s on MuJoCo's pyramidal cone (its rows'
    pushing set fixed over that time): d x(0.1 s)/d μ by reverse and forward mode through
    the rows' solve and the implicit step equals the central difference (h = 1e-5) to 1e-7
    relative."""
    import jax

    xml = """<mujoco><option timestep="0.002"/><worldbody>
<geom name="floor" type="plane" size="5 5 0.1" friction="0.5 0.01 0.001"/>
<body name="box" pos="0 0 0.0497"><freejoint/>
<geom name="b" type="box" size="0.05 0.05 0.05" mass="1" friction="0.5 0.01 0.001"/></body>
</worldbody></mujoco>"""
    path = tmp_path / "box.xml"
    path.write_text(xml)
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path, contacts="constraint")
    (k,) = [i for i, f in enumerate(forces) if isinstance(f, Contacts)]
    assert forces[k].friction == "pyramid"
    q0, v0 = np.asarray(model.qpos0), np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])

    def x_end(mu):
        el = forces[k].with_parameter("mu", jnp.full(1, mu))
        tr = diffmb.simulate(model, q0, v0, 0.1, dt=0.002, solver="implicit", saveat=[0.1],
                             forces=forces[:k] + (el,) + forces[k + 1:])
        return tr.q[-1, 0]

    h = 1e-5
    fd = float((x_end(0.5 + h) - x_end(0.5 - h)) / (2 * h))
    assert fd < -0.03  # friction slows it
    for g in (jax.grad(x_end)(0.5), jax.jacfwd(x_end)(0.5)):
        assert float(g) == pytest.approx(fd, rel=1e-7)


def test_a_landing_quadrupeds_accelerations_are_mujocos():
    """diffmb's quadruped (capsule feet on a plane, knees on their limits) 0.245 s into a
    drop, moving: four feet and four knee limits push. The accelerations of diffmb's
    forces (contact and limit rows solved together; the pyramid's tangents along each
    capsule, as MuJoCo's capsule–plane contact frame takes them) equal MuJoCo's ``qacc`` to
    1e-9 of its 125 m/s², and one implicit step MuJoCo's ``mj_step``."""
    from diffmb.bench.contacts import QUADRUPED
    from diffmb.forces.elements import init_states, total_force

    mj = mujoco.MjModel.from_xml_path(str(QUADRUPED))
    d = mujoco.MjData(mj)
    model = diffmb.load_mjcf(QUADRUPED)
    q0 = np.array(model.qpos0)
    q0[2], q0[8::2] = 0.45, 0.8
    d.qpos[:] = q0
    for _ in range(49):
        mujoco.mj_step(mj, d)
    mujoco.mj_forward(mj, d)
    limits = sum(1 for t in d.efc_type if t == mujoco.mjtConstraint.mjCNSTR_LIMIT_JOINT)
    assert d.ncon == 4 and limits == 4 and np.abs(d.qacc).max() > 100.0
    forces = diffmb.mjcf_forces(QUADRUPED, contacts="constraint")
    q, v = jnp.asarray(d.qpos), jnp.asarray(d.qvel)
    tau, f_ext, _ = total_force(forces, model, 0.0, q, v, None, init_states(forces, model))
    a = diffmb.forward_dynamics(model, q, v, tau, f_ext)
    np.testing.assert_allclose(np.asarray(a), d.qacc, rtol=0, atol=1e-9 * 125.0)
    h = mj.opt.timestep
    tr = diffmb.simulate(model, q, v, h, dt=h, forces=forces, solver="implicit", saveat=[h])
    mujoco.mj_step(mj, d)
    np.testing.assert_allclose(np.asarray(tr.v[-1]), d.qvel, rtol=0, atol=1e-9)
