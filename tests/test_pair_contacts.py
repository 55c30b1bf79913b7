"""Contacts between geoms on two bodies (or a body and the world), checked against MuJoCo
simulating the same MJCF file, against MuJoCo's own list of colliding geom pairs, and against
closed forms (momentum, an elastic exchange, the spring energy).

Rest heights: diffmb's compliant contact reproduces MuJoCo's rest deflection from the same
solref/solimp (~0.3 mm for the defaults, shared among a pair's n_active points), so a body at
rest sits where MuJoCo's does to within a fraction of that deflection: 1 mm is three times the
deflection itself, while a wrong contact geometry (a missed corner, a wrong normal or a wrong
side) misplaces the body by the geom's size (centimetres)."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Contacts, Sphere

G = 9.81


def _write(tmp_path, name, body):
    f = tmp_path / name
    f.write_text(f"""<mujoco><option timestep="0.001"/><worldbody>
      <geom name="floor" type="plane" size="5 5 .1"/>{body}</worldbody></mujoco>""")
    return f


def _rest(f, t1, body=0):
    """Root height of ``body`` (its free joint's z) after t1 s in MuJoCo and in diffmb, and
    diffmb's trajectory and forces."""
    mj = mujoco.MjModel.from_xml_path(str(f))
    d = mujoco.MjData(mj)
    mujoco.mj_step(mj, d, nstep=int(round(t1 / mj.opt.timestep)))
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    tr = diffmb.simulate(model, jnp.asarray(model.qpos0), None, t1=t1, dt=1e-3, forces=forces,
                         saveat=[t1])
    return float(tr.q[-1, 7 * body + 2]), float(d.qpos[7 * body + 2]), tr, forces, model


@pytest.mark.slow
def test_sphere_dropped_onto_a_world_box_rests_at_mujocos_height(tmp_path):
    """A ball released 5 cm above a table (a box geom of the world body): it lands and rests
    on the table top (z = 0.2 + r), not on the floor, where MuJoCo rests it."""
    f = _write(tmp_path, "table.xml", """
      <geom name="table" type="box" size="0.3 0.3 0.1" pos="0 0 0.1"/>
      <body name="ball" pos="0.05 0 0.35"><freejoint/>
        <geom name="ball" type="sphere" size="0.1" mass="1"/></body>""")
    z, z_mj, tr, forces, model = _rest(f, 0.8)
    assert abs(z_mj - 0.3) < 1e-3
    assert abs(z - z_mj) < 1e-3  # 0.08 mm measured
    res = diffmb.contacts.contact_forces(model, tr, forces)
    loaded = {p for p, fn in zip(res.pairs, res.fn[-1], strict=True) if fn > 0}
    assert loaded == {("ball", "table")}
    np.testing.assert_allclose(float(jnp.sum(res.fn[-1])), G, rtol=1e-3)


@pytest.mark.slow
def test_box_resting_on_a_free_box_rests_at_mujocos_height(tmp_path):
    """A box stacked on a box that stands on the floor, both free: the stack settles where
    MuJoCo's does (upper box centre 0.25 m: two 0.1 m half-heights and 0.05 m)."""
    f = _write(tmp_path, "stack.xml", """
      <body name="low" pos="0 0 0.1"><freejoint/>
        <geom name="low" type="box" size="0.15 0.15 0.1" mass="2"/></body>
      <body name="up" pos="0.02 0.01 0.2505"><freejoint/>
        <geom name="up" type="box" size="0.1 0.08 0.05" mass="1"/></body>""")
    z, z_mj, tr, forces, model = _rest(f, 1.0, body=1)
    assert abs(z_mj - 0.25) < 2e-3
    assert abs(z - z_mj) < 1e-3
    assert abs(float(tr.q[-1, 2]) - 0.1) < 1e-3  # the lower box on the floor
    res = diffmb.contacts.contact_forces(model, tr, forces)
    on_low = sum(float(fn) for p, fn in zip(res.pairs, res.fn[-1], strict=True)
                 if set(p) == {"low", "up"})
    np.testing.assert_allclose(on_low, G, rtol=2e-3)  # the upper box's weight
    np.testing.assert_allclose(float(jnp.sum(res.fn[-1])), 4 * G, rtol=2e-3)


@pytest.mark.slow
def test_capsule_resting_crosswise_on_a_capsule_at_mujocos_height(tmp_path):
    """A free capsule (along x) dropped across two capsules of the world (along y, at
    x = ±0.2): it rests on the two crossing points, centres 2 r apart, where MuJoCo rests
    it."""
    f = _write(tmp_path, "caps.xml", """
      <geom name="bar1" type="capsule" size="0.05 0.4" pos="-0.2 0 0.3" euler="90 0 0"/>
      <geom name="bar2" type="capsule" size="0.04 0.4" pos="0.2 0 0.31" euler="90 0 0"/>
      <body name="rod" pos="0.01 0.02 0.405"><freejoint/>
        <geom name="rod" type="capsule" size="0.05 0.3" euler="0 90 0" mass="1"/></body>""")
    z, z_mj, tr, forces, model = _rest(f, 0.6)
    assert abs(z_mj - 0.4) < 1e-3
    assert abs(z - z_mj) < 1e-3
    res = diffmb.contacts.contact_forces(model, tr, forces)
    loaded = {p for p, fn in zip(res.pairs, res.fn[-1], strict=True) if fn > 0}
    assert loaded == {("rod", "bar1"), ("rod", "bar2")}


@pytest.mark.slow
def test_head_on_spheres_conserve_momentum_and_exchange_velocities_elastically():
    """Two equal free spheres, no gravity, one at rest and one moving at 1 m/s along x, with
    a pure spring (damping 0, no friction): momentum is conserved to round-off at every
    sample, the contact lasts half a period π √(μ/k) of the reduced mass μ = m/2, and the
    spheres exchange their velocities (an elastic collision between equal masses)."""
    b = diffmb.ModelBuilder(name="two")
    b.gravity = np.zeros(3)
    for nm in ("a", "b"):
        b.add_body(nm, -1, mass=2.0, inertia=np.eye(3) * 0.008,
                   joints=[dict(name=nm, type="free")])
    model = b.build()
    k = 2e4
    el = Contacts([Sphere("a", 0.1, name="a")], Sphere("b", 0.1, name="b"), model=model,
                  stiffness=k, damping=0.0, mu=0.0)
    q0 = jnp.array([0.0, 0, 0.3, 1, 0, 0, 0, 0.25, 0, 0.3, 1, 0, 0, 0])
    v0 = jnp.zeros(12).at[0].set(1.0)  # a free joint's v: linear (world), then angular
    tr = diffmb.simulate(model, q0, v0, t1=0.2, dt=1e-4, forces=(el,),
                         saveat=np.linspace(0.0, 0.2, 21))
    p = 2.0 * (tr.v[:, 0:3] + tr.v[:, 6:9])
    np.testing.assert_allclose(np.asarray(p), np.tile([2.0, 0, 0], (21, 1)), atol=1e-10)
    # 1.4e-6 measured: RK4 steps across the force's kinks at touch and release
    np.testing.assert_allclose(np.asarray(tr.v[-1, 0:3]), [0, 0, 0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(tr.v[-1, 6:9]), [1, 0, 0], atol=1e-5)
    # contact starts when the gap 0.05 m closes (t = 0.05 s) and lasts π √(μ/k)
    duration = np.pi * np.sqrt(1.0 / k)
    t = round(0.05 + 0.5 * duration, 4)  # mid-contact, on the step grid
    mid = diffmb.simulate(model, q0, v0, t1=0.07, dt=1e-4, forces=(el,), saveat=[t])
    res = diffmb.contacts.contact_forces(model, mid, (el,))
    assert res.pairs == (("a", "b"),)
    np.testing.assert_allclose(np.asarray(res.normal[0, 0]), [-1, 0, 0], atol=1e-9)
    # during contact the closing speed 1 m/s decays as cos ω τ, ω = √(k/μ), and the spring
    # force is k δ = √(k μ) sin ω τ (τ = t − 0.05)
    w = np.sqrt(k / 1.0)
    va = 0.5 + 0.5 * np.cos(w * (t - 0.05))
    np.testing.assert_allclose(np.asarray(mid.v[0, [0, 6]]), [va, 1 - va], atol=1e-4)
    np.testing.assert_allclose(float(res.fn[0, 0]), np.sqrt(k) * np.sin(w * (t - 0.05)),
                               rtol=1e-3)


@pytest.mark.slow
def test_deep_initial_overlap_of_two_geoms_is_refused_naming_both():
    b = diffmb.ModelBuilder(name="two")
    for nm in ("a", "b"):
        b.add_body(nm, -1, mass=1.0, inertia=np.eye(3) * 0.004,
                   joints=[dict(name=nm, type="free")])
    model = b.build()
    el = Contacts([Sphere("a", 0.1, name="a")], Sphere("b", 0.05, name="b"), model=model)
    q = jnp.array([0.0, 0, 0, 1, 0, 0, 0, 0.12, 0, 0, 1, 0, 0, 0])  # 0.03 m overlap
    with pytest.raises(ValueError, match=r"geoms 'a' \(sphere\) and 'b' \(sphere\) start "
                                         r"0\.03 m inside each other.*size 0\.05 m"):
        el.check_initial(model, q)
    el.check_initial(model, q.at[7].set(0.13))  # 0.02 m: below half the thinner radius
    # the elastic energy of the overlap is the spring's ½ k δ²
    k = float(el.stiffness[0])
    assert float(el.energy(model, q)) == pytest.approx(0.5 * k * 0.03**2, rel=1e-12)


@pytest.mark.slow
def test_gradient_through_a_body_body_touch_down_is_finite_and_matches_differences(tmp_path):
    """A ball dropped onto a world box with a sideways speed: d(x + z at 0.12 s, 20 ms after
    it lands)/d(drop height) through the landing on the box, against central differences."""
    f = _write(tmp_path, "drop.xml", """
      <geom name="table" type="box" size="0.5 0.5 0.1" pos="0 0 0.1"/>
      <body name="ball" pos="0 0 0.35"><freejoint/>
        <geom name="ball" type="sphere" size="0.1" mass="1" friction="0.5"/></body>""")
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)

    def final(z0):
        q0 = jnp.asarray(model.qpos0).at[2].set(z0)
        v0 = jnp.zeros(6).at[0].set(0.5)
        tr = diffmb.simulate(model, q0, v0, t1=0.12, dt=1e-3, forces=forces, saveat=[0.12])
        return tr.q[-1, 0] + tr.q[-1, 2]

    g = float(jax.grad(final)(0.35))
    assert np.isfinite(g)
    h = 1e-6
    fd = float(final(0.35 + h) - final(0.35 - h)) / (2 * h)
    assert abs(g - fd) < 1e-3 * max(1.0, abs(fd))
    assert abs(g) > 1e-3  # the landing time depends on the drop height


_MESH = """
<mujoco><option timestep="0.001"/>
  <asset><mesh name="wedge" vertex="-0.1 -0.08 0  0.12 -0.08 0  0.12 0.08 0  -0.1 0.08 0
                                    -0.05 -0.03 0.09  0.06 -0.03 0.07  0.06 0.03 0.07
                                    -0.05 0.03 0.09  0.0 0.0 0.03"/></asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1"/>
    <body name="foot" pos="0 0 0.05" euler="0 0 20"><freejoint/>
      <geom name="foot" type="mesh" mesh="wedge" mass="1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.slow
def test_mesh_object_rests_on_a_plane_at_mujocos_height(tmp_path):
    """A convex mesh (a truncated wedge, one vertex inside its hull) dropped on the floor:
    it lands on its base and rests where MuJoCo rests it; the interior vertex is no contact
    point (MuJoCo collides the hull)."""
    f = tmp_path / "mesh.xml"
    f.write_text(_MESH)
    z, z_mj, tr, forces, model = _rest(f, 0.6)
    assert abs(z - z_mj) < 1e-3
    (el,) = [x for x in forces if isinstance(x, Contacts)]
    assert el.n_points == 8  # the hull's vertices
    res = diffmb.contacts.contact_forces(model, tr, forces)
    np.testing.assert_allclose(float(jnp.sum(res.fn[-1])), G, rtol=1e-3)


_FILTER = """
<mujoco>
  {option}
  <default><geom contype="1" conaffinity="1"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1"/>
    <geom name="post" type="box" size="0.3 0.3 0.3" pos="0 0 0.2"/>
    <body name="a" pos="0 0 0.1"><freejoint/>
      <geom name="a1" type="sphere" size="0.25"/>
      <geom name="a2" type="capsule" size="0.1 0.2" contype="2" conaffinity="2"/>
      <body name="ac" pos="0 0 0.02"><joint type="hinge" axis="1 0 0"/>
        <geom name="c1" type="box" size="0.2 0.2 0.2"/>
        <body name="aw" pos="0 0.02 0">
          <geom name="w1" type="ellipsoid" size="0.2 0.18 0.16"/></body>
      </body>
    </body>
    <body name="b" pos="0.05 0 0.1"><freejoint/>
      <geom name="b1" type="sphere" size="0.25" contype="0" conaffinity="2"/>
      <geom name="b2" type="cylinder" size="0.2 0.2" contype="4" conaffinity="4"/>
    </body>
    <body name="e" pos="0 0.05 0.1"><freejoint/>
      <geom name="e1" type="sphere" size="0.22" priority="1" friction="0.4 0 0"/></body>
    <body name="f" pos="0.02 0.03 0.1"><freejoint/>
      <geom name="f1" type="box" size="0.2 0.2 0.2" solmix="3" solref="0.01 1" margin="0.003"
            friction="0.2 0 0"/></body>
  </worldbody>
  <contact>
    <exclude body1="a" body2="e"/>
    <pair geom1="b2" geom2="e1" friction="0.3 0.3 0.005 0.0001 0.0001" solref="0.03 0.5"
          margin="0.002"/>
  </contact>
</mujoco>
"""


@pytest.mark.parametrize("filterparent", [True, False])
def test_candidate_pairs_are_the_pairs_mujoco_collides(tmp_path, filterparent):
    """Every geom overlaps every other, so MuJoCo's narrow phase reports a contact for each
    pair its filter lets through (contype/conaffinity, parent exclusion and its flag, weld
    groups, <exclude>, an explicit <pair>): that set is diffmb's set of pairs. The mixed
    parameters (priority, solmix, summed margins, the explicit pair's own) are MuJoCo's."""
    opt = "" if filterparent else '<option><flag filterparent="disable"/></option>'
    f = tmp_path / "filter.xml"
    f.write_text(_FILTER.format(option=opt))
    mj = mujoco.MjModel.from_xml_path(str(f))
    d = mujoco.MjData(mj)
    mujoco.mj_forward(mj, d)
    name = lambda g: mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_GEOM, int(g))  # noqa: E731
    seen = {}
    for c in d.contact[:d.ncon]:
        seen.setdefault(frozenset((name(c.geom[0]), name(c.geom[1]))), c)
    # two world geoms never collide with each other, in MuJoCo as in diffmb
    expected = set(seen)
    (el,) = [x for x in diffmb.mjcf_forces(f, ignore=("condim",))
             if isinstance(x, Contacts)]
    names = [g.name for g in el.geoms]
    others = [t.name for t in el.others]
    ours = {frozenset((names[ia], o)) for (ia, _, _), o in zip(el.pairs, others, strict=True)}
    assert ours == expected
    # the rules at work: parent exclusion (and its flag), the weld group, <exclude>, bitmasks
    assert (frozenset(("a1", "c1")) in ours) == (not filterparent)
    assert frozenset(("c1", "w1")) not in ours and frozenset(("a1", "e1")) not in ours
    assert frozenset(("a2", "b1")) in ours and frozenset(("a1", "b1")) not in ours
    assert frozenset(("b2", "e1")) in ours and frozenset(("b2", "a1")) not in ours
    for i, ((ia, _, _), o) in enumerate(zip(el.pairs, others, strict=True)):
        c = seen[frozenset((names[ia], o))]
        assert float(el.mu[i]) == pytest.approx(float(c.friction[0]), abs=1e-12)
        assert float(el.margin[i]) == pytest.approx(float(c.includemargin), abs=1e-12)
