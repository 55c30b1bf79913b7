"""Hydrodynamics (diffmb.forces.hydro) against MuJoCo and closed forms.

MuJoCo's fluid models: ``diffmb.forward`` with ``mjcf_forces(path, fluid="mujoco")`` equals
MuJoCo's ``qacc`` on a multi-body swimmer (ellipsoid and inertia-box models, random states).
Potential flow: Lamb's prolate-spheroid coefficients in closed form, a released sphere's initial
acceleration (B − W)/(m + ½ρV) and its terminal speed under quadratic drag, neutral buoyancy,
the Munk moment (m₂₂ − m₁₁) u² sin α cos α, and ABA = CRBA = Kane with added inertia.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.forces import hydro

from .oracles import rel_err

SWIMMER = """
<mujoco model="swimmer">
  <option density="1000" viscosity="0.0009" wind="0.1 -0.2 0.05">
    <flag contact="disable"/>
  </option>
  <default>
    <geom {shape} density="1100"/>
    <joint damping="0.05"/>
  </default>
  <worldbody>
    <body name="head" pos="0 0 0.5">
      <freejoint name="root"/>
      <geom name="head" type="ellipsoid" size="0.08 0.05 0.04"/>
      <body name="seg1" pos="-0.1 0 0">
        <joint name="j1" type="hinge" axis="0 0 1"/>
        <geom name="seg1" type="capsule" fromto="0 0 0 -0.15 0 0" size="0.03" {coef}/>
        <body name="seg2" pos="-0.17 0 0">
          <joint name="j2" type="hinge" axis="0 0 1"/>
          <geom name="seg2" type="capsule" fromto="0 0 0 -0.15 0 0.02" size="0.025"/>
          <body name="tail" pos="-0.17 0 0">
            <joint name="j3" type="hinge" axis="0 1 1"/>
            <geom name="tail" type="box" size="0.06 0.005 0.03" pos="-0.06 0 0" euler="0 10 0"/>
            <geom name="fin" type="cylinder" size="0.02 0.01" pos="-0.1 0 0" {fin}/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="j1" gear="1"/>
    <motor joint="j2" gear="2"/>
    <motor joint="j3" gear="1"/>
  </actuator>
</mujoco>
"""


def _swimmer(tmp_path, ellipsoid: bool):
    kw = (dict(shape='fluidshape="ellipsoid"', coef='fluidcoef="0.4 0.2 1.2 0.8 0.9"',
               fin='fluidshape="none"') if ellipsoid else dict(shape="", coef="", fin=""))
    path = tmp_path / ("swimmer_ellipsoid.xml" if ellipsoid else "swimmer_box.xml")
    path.write_text(SWIMMER.format(**kw))
    return path


@pytest.mark.parametrize("ellipsoid", [True, False], ids=["ellipsoid", "inertia_box"])
def test_mujoco_fluid_forward_equals_mujoco_qacc(tmp_path, ellipsoid):
    path = _swimmer(tmp_path, ellipsoid)
    mj = mujoco.MjModel.from_xml_path(str(path))
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path, fluid="mujoco")
    kind = hydro.MujocoEllipsoidFluid if ellipsoid else hydro.MujocoInertiaBoxFluid
    assert any(isinstance(f, kind) for f in forces)
    fw = jax.jit(lambda q, v, u: diffmb.forward(model, q, v, forces=forces, ctrl=u))
    rng = np.random.default_rng(7)
    d = mujoco.MjData(mj)
    for _ in range(4):
        q = mj.qpos0.copy()
        q[:3] = rng.normal(size=3)
        qq = rng.normal(size=4)
        q[3:7] = qq / np.linalg.norm(qq)
        q[7:] = rng.uniform(-1.5, 1.5, mj.nq - 7)
        v, u = 2.0 * rng.normal(size=mj.nv), rng.normal(size=mj.nu)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, d)
        assert np.abs(d.qfrc_fluid).max() > 1.0  # the fluid matters at these states
        assert rel_err(fw(q, v, u), d.qacc) < 1e-5


def test_fluid_options_and_gravcomp_as_mujoco(tmp_path):
    """By default a file with fluid gets MuJoCo's own fluid model (what MuJoCo applies);
    fluid=False none; an unknown choice is refused. gravcomp on a body: MuJoCo's qacc, fluid
    included, and ignore=("gravcomp",) leaves it out."""
    path = _swimmer(tmp_path, True)
    kinds = lambda fs: [type(f).__name__ for f in fs]  # noqa: E731
    assert "MujocoEllipsoidFluid" in kinds(diffmb.mjcf_forces(path))
    assert kinds(diffmb.mjcf_forces(path)) == kinds(diffmb.mjcf_forces(path, fluid="mujoco"))
    assert not any(isinstance(f, (hydro.MujocoEllipsoidFluid, hydro.Hydrodynamics))
                   for f in diffmb.mjcf_forces(path, fluid=False))
    with pytest.raises(ValueError, match="accepted"):
        diffmb.mjcf_forces(path, fluid="navier-stokes")
    gc = tmp_path / "gravcomp.xml"
    gc.write_text(path.read_text().replace('<body name="seg1"', '<body name="seg1" gravcomp="1"'))
    forces = diffmb.mjcf_forces(gc)
    (g,) = [f for f in forces if type(f).__name__ == "GravityCompensation"]
    assert g.bodies == ("seg1",) and float(g.factor[0]) == 1.0
    assert "GravityCompensation" not in kinds(diffmb.mjcf_forces(gc, ignore=("gravcomp",)))
    mj = mujoco.MjModel.from_xml_path(str(gc))
    model = diffmb.load_mjcf(gc)
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(2)
    q = mj.qpos0.copy()
    q[7:] = rng.uniform(-1, 1, mj.nq - 7)
    v, u = rng.normal(size=mj.nv), rng.normal(size=mj.nu)
    d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
    mujoco.mj_forward(mj, d)
    assert np.abs(d.qfrc_gravcomp).max() > 1.0
    a = diffmb.forward(model, jnp.asarray(q), jnp.asarray(v), forces=forces, ctrl=jnp.asarray(u))
    assert rel_err(np.asarray(a), d.qacc) < 1e-9


# ---------------------------------------------------------------- potential flow: coefficients


def _lamb_closed_form(ratio):
    """Lamb's prolate-spheroid factors in closed form (semi-axes a > b = c, e² = 1 − b²/a²)."""
    e = np.sqrt(1.0 - 1.0 / ratio**2)
    L = np.log((1.0 + e) / (1.0 - e))
    a0 = 2.0 * (1.0 - e * e) / e**3 * (0.5 * L - e)
    b0 = 1.0 / e**2 - (1.0 - e * e) / (2.0 * e**3) * L
    k1, k2 = a0 / (2.0 - a0), b0 / (2.0 - b0)
    kp = e**4 * (b0 - a0) / ((2.0 - e * e) * (2.0 * e * e - (2.0 - e * e) * (b0 - a0)))
    return k1, k2, kp


@pytest.mark.parametrize("ratio", [2, 5, 10])
def test_lamb_k_factors_equal_closed_forms(ratio):
    k = hydro.lamb_k_factors(ratio)
    k1, k2, kp = _lamb_closed_form(ratio)
    assert abs(k["k1"] - k1) < 1e-12 * k1
    assert abs(k["k2"] - k2) < 1e-12 * k2
    assert abs(k["k_prime"] - kp) < 1e-12 * kp


def test_ellipsoid_integrals_against_scipy_and_mujoco(tmp_path):
    from scipy.special import elliprd

    rng = np.random.default_rng(1)
    x, y, z = rng.uniform(1e-3, 50.0, size=(3, 64))
    assert rel_err(hydro.carlson_rd(x, y, z), elliprd(x, y, z)) < 1e-14
    r = rng.uniform(0.02, 0.5, size=(16, 3))
    assert np.allclose(np.asarray(hydro.lamb_integrals(r)).sum(axis=1), 2.0, atol=1e-13)
    m, i = hydro.ellipsoid_added_mass(np.array([0.3, 0.3, 0.3]), 1000.0)
    assert np.allclose(m, 0.5 * 1000.0 * 4.0 / 3.0 * np.pi * 0.3**3, rtol=1e-13)  # ½ρV
    assert np.allclose(i, 0.0, atol=1e-15)
    # MuJoCo's compiler integrates the same coefficients numerically (15-point quadrature)
    geoms = "".join(f'<geom type="ellipsoid" size="{a} {b} {c}" fluidshape="ellipsoid"/>'
                    for a, b, c in r[:6])
    mj = mujoco.MjModel.from_xml_string(
        f'<mujoco><worldbody><body><freejoint/>{geoms}</body></worldbody></mujoco>')
    fl = np.asarray(mj.geom_fluid).reshape(mj.ngeom, -1)
    mine = [np.concatenate(hydro._virtual_coefficients_np(s)) for s in r[:6]]
    assert rel_err(np.array(mine), fl[:, 6:12]) < 1e-5


# ---------------------------------------------------------------- added inertia in the dynamics


def _spheroid_model(a, b, rho=1000.0, gravity=(0.0, 0.0, 0.0)):
    """A prolate spheroid (semi-axes a, b, b along body x, y, z) on a free joint, of the fluid's
    density, with its potential-flow added inertia."""
    V = 4.0 / 3.0 * np.pi * a * b * b
    m = rho * V
    I = m / 5.0 * np.array([2 * b * b, a * a + b * b, a * a + b * b])
    mA, IA = hydro.ellipsoid_added_mass(np.array([a, b, b]), rho)
    bld = diffmb.ModelBuilder("spheroid")
    bld.gravity = np.asarray(gravity, float)
    bld.add_body("body", mass=m, inertia=I, joints=[dict(type="free", name="root")],
                 added_inertia=np.diag(np.concatenate([IA, mA])))
    return bld.build(), V


@pytest.mark.slow
def test_munk_moment_of_a_spheroid():
    """Bias force of a spheroid translating at angle of attack α (ω = 0): the fluid's moment is
    Munk's M = (m₂₂ − m₁₁) u² sin α cos α (Lamb §124), m₁₁ = k₁ρV, m₂₂ = k₂ρV in closed form."""
    rho, a, b, u = 1000.0, 0.4, 0.1, 1.7
    model, V = _spheroid_model(a, b, rho)
    k1, k2, _ = _lamb_closed_form(a / b)
    q = np.array([0.3, -0.2, 0.1, 1.0, 0.0, 0.0, 0.0])
    for alpha in (0.1, 0.6, 1.2):
        v = np.array([u * np.cos(alpha), 0.0, u * np.sin(alpha), 0.0, 0.0, 0.0])
        fluid_moment = -np.asarray(diffmb.bias_force(model, q, v))[3:]  # body axes
        munk = (k2 - k1) * rho * V * u * u * np.sin(alpha) * np.cos(alpha)
        assert rel_err(fluid_moment, [0.0, munk, 0.0]) < 1e-10 * max(1.0, abs(munk))
        assert np.abs(np.asarray(diffmb.bias_force(model, q, v))[:3]).max() < 1e-10
    # the added inertia is a differentiable parameter: ω̇_y = Munk / (I_y + I_A,y), so
    # ∂ω̇_y/∂m₃₃ = u² sin α cos α / (I_y + I_A,y)
    pitch = lambda M: diffmb.forward_dynamics(  # noqa: E731
        eqx.tree_at(lambda m: m.body_added_inertia, model, M), q, v, jnp.zeros(6))[4]
    g = jax.jit(jax.grad(pitch))(model.body_added_inertia)
    Iy = float(model.body_inertia[0, 1, 1] + model.body_added_inertia[0, 1, 1])
    assert abs(float(g[0, 5, 5]) - u * u * np.sin(alpha) * np.cos(alpha) / Iy) < 1e-9 / Iy
    assert np.all(np.isfinite(g))


def test_added_inertia_dynamics_satisfy_mujocos_full_added_mass_law(tmp_path):
    """diffmb's accelerations with Model.body_added_inertia satisfy MuJoCo's equations of motion
    completed with the added-mass acceleration term that MuJoCo leaves out (computed here with
    MuJoCo's own kinematics and virtual masses): M a + c − f_fluid(v) + Σ Jᵀ ρ[I_V∘α; m_V∘ν̇] = τ,
    ν̇ the geom-axes derivative of each geom's twist, f_fluid MuJoCo's velocity terms (every drag
    and lift coefficient 0). A three-body chain of offset, rotated ellipsoids under gravity."""
    xml = """<mujoco><option density="1000"><flag contact="disable"/></option>
      <default><geom type="ellipsoid" fluidshape="ellipsoid" fluidcoef="0 0 0 0 0"/></default>
      <worldbody><body name="a" pos="0 0 1"><freejoint/>
        <geom size="0.2 0.08 0.05" pos="0.05 0.02 0" euler="10 20 30"/>
        <geom size="0.06 0.06 0.06" pos="-0.2 0 0.03"/>
        <body name="b" pos="0.3 0 0"><joint type="hinge" axis="0 1 0"/>
          <geom size="0.15 0.04 0.03" pos="0.15 0 0" euler="0 0 15"/>
          <body name="c" pos="0.3 0 0"><joint type="ball"/>
            <geom size="0.1 0.05 0.02" pos="0.1 0.01 0" euler="40 0 0"/></body></body>
      </body></worldbody></mujoco>"""
    path = tmp_path / "chain.xml"
    path.write_text(xml)
    mj = mujoco.MjModel.from_xml_path(str(path))
    model = diffmb.load_mjcf(path, added_mass="potential")
    assert model.has_added_inertia and not diffmb.load_mjcf(path).has_added_inertia
    fl = np.asarray(mj.geom_fluid).reshape(mj.ngeom, -1)
    rho = mj.opt.density
    fd = jax.jit(lambda q, v, tau: diffmb.forward_dynamics(model, q, v, tau))
    rng = np.random.default_rng(3)
    d = mujoco.MjData(mj)
    for _ in range(3):
        q = mj.qpos0.copy()
        q[:3] = rng.normal(size=3)
        for s in (3, 8):
            qq = rng.normal(size=4)
            q[s:s + 4] = qq / np.linalg.norm(qq)
        q[7] = rng.uniform(-1, 1)
        v, tau = 2.0 * rng.normal(size=mj.nv), rng.normal(size=mj.nv)
        a = np.asarray(fd(q, v, tau))
        d.qpos[:], d.qvel[:], d.qacc[:] = q, v, a
        mujoco.mj_inverse(mj, d)  # M a + c − (MuJoCo's fluid velocity terms)
        mujoco.mj_rnePostConstraint(mj, d)  # body accelerations at qacc = a
        f_acc = np.zeros(mj.nv)
        for g in range(mj.ngeom):
            vel, acc = np.zeros(6), np.zeros(6)
            mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_GEOM, g, vel, 1)
            mujoco.mj_objectAcceleration(mj, d, mujoco.mjtObj.mjOBJ_GEOM, g, acc, 1)
            R = d.geom_xmat[g].reshape(3, 3)
            acc[3:] += R.T @ mj.opt.gravity  # MuJoCo's accelerations carry −g (base trick)
            dnu = np.concatenate([acc[:3], acc[3:] - np.cross(vel[:3], vel[3:])])
            local = -rho * np.concatenate([fl[g, 9:12] * dnu[:3], fl[g, 6:9] * dnu[3:]])
            mujoco.mj_applyFT(mj, d, R @ local[3:], R @ local[:3], d.geom_xpos[g],
                              mj.geom_bodyid[g], f_acc)
        assert np.abs(d.qfrc_fluid).max() > 1.0
        assert rel_err(tau + f_acc, d.qfrc_inverse) < 1e-5


@pytest.mark.slow
def test_aba_crba_kane_agree_with_added_inertia():
    from .random_trees import random_mjcf

    rng = np.random.default_rng(11)
    mj = mujoco.MjModel.from_xml_string(random_mjcf("floating_branches", rng))
    model = diffmb.io.mjcf.from_mjmodel(mj)
    A = rng.normal(size=(model.n_bodies, 6, 6))
    model = diffmb.model.with_added_inertia(model, 0.2 * A @ np.swapaxes(A, 1, 2))

    @jax.jit
    def three(q, v, tau, f):
        return tuple(diffmb.forward_dynamics(model, q, v, tau, f, method=m)
                     for m in ("aba", "crba", "kane"))

    for _ in range(2):
        q = np.array(model.qpos0)
        q[:3] = rng.normal(size=3)
        for j, jt in enumerate(model.joint_types):
            s = model.joint_q[j]
            if jt in ("free", "ball"):
                s += 3 if jt == "free" else 0
                qq = rng.normal(size=4)
                q[s:s + 4] = qq / np.linalg.norm(qq)
            else:
                q[s] += rng.uniform(-1, 1)
        v, tau = rng.normal(size=model.nv), rng.normal(size=model.nv)
        f = jnp.asarray(rng.normal(size=(model.n_bodies, 6)))
        a, a_crba, a_kane = (np.asarray(x) for x in three(q, v, tau, f))
        assert rel_err(a_crba, a) < 1e-9 and rel_err(a_kane, a) < 1e-9
        assert rel_err(diffmb.inverse_dynamics(model, q, v, a, f), tau) < 1e-9
    with pytest.raises(NotImplementedError, match="Lagrange"):
        diffmb.forward_dynamics(model, q, v, tau, method="lagrange")


def test_added_inertia_is_validated():
    bld = diffmb.ModelBuilder("bad")
    M = np.diag([1.0, 1, 1, 1, 1, -1])
    with pytest.raises(ValueError, match="'b'.*positive semi-definite"):
        bld.add_body("b", mass=1.0, inertia=[1, 1, 1], joints=[dict(type="free")],
                     added_inertia=M)
    M = np.eye(6)
    M[0, 4] = 0.5
    with pytest.raises(ValueError, match="'b'.*not symmetric"):
        bld.add_body("b", mass=1.0, inertia=[1, 1, 1], joints=[dict(type="free")],
                     added_inertia=M)


# ---------------------------------------------------------------- buoyancy, drag, current


SPHERE = """<mujoco><option density="1000" viscosity="0"/>
  <worldbody><body name="ball" pos="0 0 0"><freejoint/>
    <geom type="sphere" size="{r}" density="{density}" fluidshape="ellipsoid"
          fluidcoef="{blunt} 0 0 0 0"/>
  </body></worldbody></mujoco>"""


@pytest.mark.slow
def test_released_sphere_acceleration_and_terminal_speed(tmp_path):
    r, rho, rho_s, cd = 0.1, 1000.0, 2000.0, 0.47
    path = tmp_path / "sphere.xml"
    path.write_text(SPHERE.format(r=r, density=rho_s, blunt=cd / 2.0))
    model = diffmb.load_mjcf(path, added_mass="potential")
    forces = diffmb.mjcf_forces(path, fluid="potential")
    V, A = 4.0 / 3.0 * np.pi * r**3, np.pi * r * r
    m, g = rho_s * V, 9.81
    W, B = m * g, rho * V * g
    q0, v0 = np.array([0, 0, 0, 1.0, 0, 0, 0]), np.zeros(6)
    a0 = np.asarray(diffmb.forward(model, q0, v0, forces=forces))
    expected = (B - W) / (m + 0.5 * rho * V)
    assert abs(a0[2] - expected) < 1e-3 * abs(expected)
    assert np.abs(a0[[0, 1, 3, 4, 5]]).max() < 1e-12
    traj = diffmb.simulate(model, q0, v0, t1=6.0, dt=0.005, forces=forces, saveat=[6.0])
    vt = np.sqrt(2.0 * (W - B) / (rho * cd * A))
    assert abs(-float(traj.v[-1, 2]) - vt) < 1e-3 * vt


@pytest.mark.slow
def test_neutrally_buoyant_body_stays_at_rest(tmp_path):
    path = tmp_path / "neutral.xml"
    path.write_text("""<mujoco><option density="1000" viscosity="0.0009"/>
      <worldbody><body name="hull" pos="0 0 -2" euler="20 -30 45"><freejoint/>
        <geom type="ellipsoid" size="0.3 0.1 0.08" density="1000"/>
        <body name="fin" pos="-0.3 0 0"><joint type="hinge" axis="0 0 1" damping="0.1"/>
          <geom type="box" size="0.05 0.01 0.04" pos="-0.05 0 0" density="1000"/></body>
      </body></worldbody></mujoco>""")
    model = diffmb.load_mjcf(path, added_mass="potential")
    forces = diffmb.mjcf_forces(path, fluid="potential")
    q0, v0 = np.array(model.qpos0), np.zeros(model.nv)
    assert np.abs(np.asarray(diffmb.forward(model, q0, v0, forces=forces))).max() < 1e-11
    traj = diffmb.simulate(model, q0, v0, t1=1.0, dt=0.01, forces=forces, saveat=[1.0])
    assert np.abs(np.asarray(traj.q[-1]) - q0).max() < 1e-11
    assert np.abs(np.asarray(traj.v[-1])).max() < 1e-11
    # the MuJoCo-compatible forces refuse a Model with added inertia (terms would count twice)
    with pytest.raises(ValueError, match="count twice"):
        diffmb.forward(model, q0, v0, forces=diffmb.mjcf_forces(path, fluid="mujoco"))


def test_body_drifting_with_the_current_feels_no_fluid_force():
    """Fossen's relative-velocity law: a neutrally buoyant spheroid moving with a uniform current
    (any orientation, no rotation) has zero acceleration, added mass and drag included; in still
    water the same motion decelerates."""
    rho, a, b = 1000.0, 0.4, 0.1
    model, V = _spheroid_model(a, b, rho, gravity=(0.0, 0.0, -9.81))
    current = np.array([0.8, -0.3, 0.2])
    common = dict(density=rho, volume=V, lin_force=[1.0, 2.0, 2.0], quad_force=[5.0, 40.0, 40.0],
                  lin_torque=0.1, quad_torque=0.5)
    moving = hydro.Hydrodynamics([0], current=current, **common)
    still = hydro.Hydrodynamics([0], **common)
    qq = np.array([0.9, 0.2, -0.3, 0.25])
    q = np.concatenate([[0.0, 0.0, -1.0], qq / np.linalg.norm(qq)])
    v = np.concatenate([current, np.zeros(3)])
    assert np.abs(np.asarray(diffmb.forward(model, q, v, forces=(moving,)))).max() < 1e-12
    assert np.abs(np.asarray(diffmb.forward(model, q, v, forces=(still,)))).max() > 1e-2


def test_fossen_added_mass_converted_at_the_boundary():
    """Fossen's M_A = −[X_u̇ …] in [linear; angular] order becomes diffmb's [angular; linear]."""
    rng = np.random.default_rng(5)
    A = rng.normal(size=(6, 6))
    MA = A @ A.T  # Fossen's order: u, v, w, p, q, r
    M = hydro.added_inertia_from_fossen(-MA, derivatives=True)
    assert np.allclose(M[3:, 3:], MA[:3, :3]) and np.allclose(M[:3, :3], MA[3:, 3:])
    assert np.allclose(M[:3, 3:], MA[3:, :3]) and np.allclose(M, M.T)


# ---------------------------------------------------------------- numbers checked where they enter


@pytest.mark.parametrize("kw, field, exc", [
    (dict(density=-1000.0), "density", ValueError),  # would reverse buoyancy
    (dict(density=np.nan), "density", ValueError),
    (dict(volume=-0.01), "volume", ValueError),  # would reverse buoyancy
    (dict(volume=np.inf), "volume", ValueError),
    (dict(quad_force=[5.0, -1.0, 1.0]), "quad_force", ValueError),  # drag feeding energy in
    (dict(lin_torque=-0.1), "lin_torque", ValueError),
    (dict(current=[0.1, np.nan, 0.0]), "current", ValueError),
    (dict(rot=2.0 * np.eye(3)), "rot", ValueError),  # not a rotation
    (dict(rot=np.diag([1.0, 1.0, -1.0])), "rot", ValueError),  # a reflection
    (dict(pos=np.zeros((2, 3))), "pos", TypeError),  # two rows for one entry
    (dict(current=[1.0, 2.0]), "current", TypeError),
    (dict(volume="abc"), "volume", TypeError),
])
def test_hydrodynamics_refuses_numbers_without_meaning(kw, field, exc):
    with pytest.raises(exc, match=rf"^Hydrodynamics\.{field}"):
        hydro.Hydrodynamics([0], **kw)


@pytest.mark.parametrize("make, field, exc", [
    (lambda: hydro.MujocoInertiaBoxFluid([0], density=-1.0), "density", ValueError),
    (lambda: hydro.MujocoInertiaBoxFluid([0], density=1.0, viscosity=np.nan), "viscosity",
     ValueError),
    (lambda: hydro.MujocoInertiaBoxFluid([0], density=1.0, wind=[0.0, 1.0]), "wind", TypeError),
    (lambda: hydro.MujocoInertiaBoxFluid([0, -2], density=1.0), "bodies", ValueError),
    (lambda: hydro.MujocoEllipsoidFluid([0], [0.1, 0.0, 0.1], density=1.0), "semiaxes",
     ValueError),
    (lambda: hydro.MujocoEllipsoidFluid([0], [0.1, 0.1, 0.1], density=1.0,
                                        coef=[0.5, -0.25, 1.5, 1.0, 1.0]), "coef", ValueError),
    (lambda: hydro.MujocoEllipsoidFluid([0], [0.1, 0.1, 0.1], density=1.0, coef=[0.5, 0.25]),
     "coef", TypeError),
    (lambda: hydro.MujocoEllipsoidFluid([0], [0.1, 0.1, 0.1], density=1.0,
                                        virtual_mass=[1.0, -1.0, 1.0],
                                        virtual_inertia=[0.0, 0.0, 0.0]), "virtual_mass",
     ValueError),
])
def test_mujoco_fluid_elements_refuse_numbers_without_meaning(make, field, exc):
    with pytest.raises(exc, match=rf"^Mujoco\w+Fluid\.{field}"):
        make()


def test_hydrodynamics_refuses_a_body_outside_the_model():
    bld = diffmb.ModelBuilder("one_body")
    bld.add_body("hull", mass=1.0, inertia=[0.1, 0.1, 0.1], joints=[dict(type="free")])
    model = bld.build()
    q, v = np.array([0.0, 0, 0, 1, 0, 0, 0]), np.zeros(6)
    for el in (hydro.Hydrodynamics([1], volume=0.01),
               hydro.MujocoInertiaBoxFluid([1], density=1000.0)):
        with pytest.raises(ValueError, match=r"bodies\[0\] = 1: .*\[0, 1\).*'one_body'"):
            diffmb.forward(model, q, v, forces=(el,))


def test_a_negative_fluid_density_in_the_file_is_refused(tmp_path):
    path = tmp_path / "negative.xml"
    path.write_text(SPHERE.format(r=0.1, density=2000.0, blunt=0.2).replace(
        'density="1000"', 'density="-1000"'))
    with pytest.raises(ValueError, match=rf"{path.name}.*density=\"-1000\".*>= 0"):
        diffmb.mjcf_forces(path, fluid="potential")
    with pytest.raises(ValueError, match=rf"{path.name}.*positive fluid density.*-1000"):
        diffmb.load_mjcf(path, added_mass="potential")
    with pytest.raises(ValueError, match=rf"{path.name}.*density=\"-1000\".*>= 0"):
        diffmb.mjcf_forces(path, fluid="mujoco")


def test_hydrodynamics_knows_no_file_format():
    """The physics imports nothing from io, mujoco or above forces; the MjModel readers live in
    diffmb.io.mjcf_fluid."""
    import ast
    import pathlib

    import diffmb.io.mjcf_fluid as reader

    src = pathlib.Path(hydro.__file__).read_text()
    names = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
    below = ("..dynamics", "..model", "..spatial", "..validation")  # beside forces: ".x"
    outside = [n for n in names if n.startswith("..") and not n.startswith(below)
               or "mujoco" in n or n.startswith("diffmb")]
    assert names and not outside, outside
    assert "MjModel" not in src and "mj." not in src
    for f in ("mujoco_fluid_forces", "potential_flow_from_mjmodel",
              "potential_added_inertia_from_mjmodel"):
        assert callable(getattr(reader, f)) and not hasattr(hydro, f)


def test_geom_sizes_and_density_are_checked():
    """A negative radius would give a negative volume (reversed buoyancy); MuJoCo's unused
    size entries (zeros) are ignored."""
    assert abs(hydro.geom_volume("sphere", [0.1, 0.0, 0.0]) - 4.0 / 3.0 * np.pi * 1e-3) < 1e-15
    with pytest.raises(ValueError, match=r"^geom_volume\.size.*sphere.* = -0.1: must be > 0"):
        hydro.geom_volume("sphere", [-0.1, 0.0, 0.0])
    with pytest.raises(TypeError, match=r"^geom_volume\.size = \[0.1\]: a capsule needs 2"):
        hydro.geom_volume("capsule", [0.1])
    with pytest.raises(ValueError, match=r"^geom_added_inertia\.density = -1000: must be >= 0"):
        hydro.geom_added_inertia("box", [0.1, 0.2, 0.3], -1000.0)
