"""The system interface, `diffmb.forward`, stateful elements and controls, `mjcf_forces`.

Oracles: MuJoCo's `mj_forward` (qacc) and its own integration, scipy's expm of a linear system
(a Maxwell element on a mass), the classical RK4 recursion written out, closed-form controls.
"""

from pathlib import Path

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import scipy.linalg as sl

import diffmb
from diffmb.forces.elements import AbstractStatefulForce

DATA = Path(__file__).parent / "data"


def test_public_surface():
    for name in ("optim", "controls", "spatial", "dynamics", "formulations", "forces", "io",
                 "models", "systems", "topology"):
        assert hasattr(diffmb, name), name
    assert hasattr(diffmb.spatial, "rotation") and hasattr(diffmb.optim, "fit")
    for name in ("forward", "mjcf_forces", "SimulationError", "integrate", "difference",
                 "KnotTable", "JointDamping", "JointSpring", "Actuators", "JointLimits",
                 "BodyWrench", "GeneralizedForce", "AbstractForce", "TreeSystem", "Trajectory"):
        assert hasattr(diffmb, name), name
    assert callable(diffmb.simulate)


@pytest.mark.slow
def test_forward_equals_mujoco_qacc():
    path = DATA / "sim_actuated.xml"
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path)
    rng = np.random.default_rng(1)
    for _ in range(3):
        q = mj.qpos0 + rng.normal(size=mj.nq) * 0.4
        for j in range(mj.njnt):
            if mj.jnt_type[j] in (0, 1):
                a = mj.jnt_qposadr[j] + (3 if mj.jnt_type[j] == 0 else 0)
                q[a:a + 4] /= np.linalg.norm(q[a:a + 4])
        v = rng.normal(size=mj.nv)
        u = rng.normal(size=mj.nu)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, d)
        a = diffmb.forward(model, q, v, forces=forces, ctrl=u)
        np.testing.assert_allclose(np.asarray(a), d.qacc, atol=1e-9 * max(1, np.abs(d.qacc).max()))


def _slider(mass=2.0):
    b = diffmb.ModelBuilder(name="slider")
    b.gravity = np.zeros(3)
    b.add_body("cart", mass=mass, inertia=[0.1, 0.1, 0.1],
               joints=[dict(type="slide", name="x", axis=[1.0, 0.0, 0.0])])
    return b.build()


class Maxwell(AbstractStatefulForce):
    """Spring k in series with a dashpot c between the cart and the wall; s = spring stretch."""

    k: jnp.ndarray
    c: jnp.ndarray

    def init_state(self, model):
        return jnp.zeros(1)

    def stateful_call(self, model, t, q, v, ctrl, state):
        return -self.k * state, None, v - self.k / self.c * state


@pytest.mark.slow
def test_stateful_element_matches_expm():
    m, k, c = 2.0, 30.0, 4.0
    model = _slider(m)
    el = Maxwell(jnp.asarray(k), jnp.asarray(c))
    tr = diffmb.simulate(model, jnp.zeros(1), jnp.array([1.0]), t1=2.0, solver="dopri8",
                         rtol=1e-12, atol=1e-12, saveat=[0.5, 1.0, 2.0], forces=(el,))
    A = np.array([[0, 1, 0], [0, 0, -k / m], [0, 1, -k / c]])  # (x, v, s)
    ref = np.array([sl.expm(A * t) @ [0.0, 1.0, 0.0] for t in (0.5, 1.0, 2.0)])
    np.testing.assert_allclose(np.asarray(tr.q)[:, 0], ref[:, 0], atol=1e-10)
    np.testing.assert_allclose(np.asarray(tr.v)[:, 0], ref[:, 1], atol=1e-10)
    np.testing.assert_allclose(np.asarray(tr.aux[0][0])[:, 0], ref[:, 2], atol=1e-10)
    assert len(tr.aux[0]) == 1 and tr.aux[1] is None  # (element states, control state)
    a, ds = diffmb.forward(model, jnp.zeros(1), jnp.array([1.0]), forces=(el,),
                           state=(jnp.array([0.1]),))
    np.testing.assert_allclose(a, [-k * 0.1 / m])
    np.testing.assert_allclose(ds[0], [1.0 - k / c * 0.1])
    # a gradient reaches the element's parameters through the state
    g = jax.grad(lambda kk: diffmb.simulate(model, jnp.zeros(1), jnp.array([1.0]), t1=1.0,
                                            dt=0.01, forces=(Maxwell(kk, jnp.asarray(c)),)
                                            ).q[-1, 0])(jnp.asarray(k))
    h = 1e-5
    fd = [diffmb.simulate(model, jnp.zeros(1), jnp.array([1.0]), t1=1.0, dt=0.01,
                          forces=(Maxwell(jnp.asarray(kk), jnp.asarray(c)),)).q[-1, 0]
          for kk in (k + h, k - h)]
    np.testing.assert_allclose(float(g), float(fd[0] - fd[1]) / (2 * h), rtol=1e-6)


class Oscillator(diffmb.systems.AbstractStatefulControl):
    """A control with state: phase φ' = ω, u = A sin φ (a one-oscillator CPG)."""

    amplitude: jnp.ndarray
    omega: jnp.ndarray

    def init_state(self, model):
        return jnp.zeros(())

    def __call__(self, t, q, v, params, phase):
        return self.amplitude * jnp.sin(phase) * jnp.ones(1), self.omega


def test_stateful_control_equals_closed_form_control():
    model = _slider()
    A, w = 3.0, 5.0
    tr = diffmb.simulate(model, jnp.zeros(1), None, t1=1.0, dt=1e-3,
                         control=Oscillator(jnp.asarray(A), jnp.asarray(w)))
    ref = diffmb.simulate(model, jnp.zeros(1), None, t1=1.0, dt=1e-3,
                          control=lambda t, q, v, p: A * jnp.sin(w * t) * jnp.ones(1))
    np.testing.assert_allclose(tr.q, ref.q, atol=1e-12)
    np.testing.assert_allclose(tr.aux[1], w * np.asarray(tr.ts), atol=1e-12)
    # closed form of x'' = (A/m) sin(w t) from rest
    m = 2.0
    x = A / m * (tr.ts[-1] / w - np.sin(w * tr.ts[-1]) / w**2)
    np.testing.assert_allclose(tr.q[-1, 0], x, atol=1e-9)


def test_solver_and_adjoint_objects():
    model = _slider()
    ctl = lambda t, q, v, p: jnp.cos(t) * jnp.ones(1)
    kw = dict(t1=1.0, dt=0.01, control=ctl)
    by_name = diffmb.simulate(model, jnp.zeros(1), **kw)
    by_obj = diffmb.simulate(model, jnp.zeros(1), solver=diffmb.simulation.RK4(),
                             adjoint=diffrax.RecursiveCheckpointAdjoint(), **kw)
    np.testing.assert_array_equal(by_name.q, by_obj.q)
    heun = diffmb.simulate(model, jnp.zeros(1), solver=diffrax.Heun(), adaptive=False, **kw)
    exact = 0.5 * (1.0 - np.cos(1.0))  # x'' = cos(t)/2, from rest
    assert abs(float(heun.q[-1, 0]) - exact) < 1e-4
    assert abs(float(by_name.q[-1, 0]) - exact) < 1e-9


def test_bad_initial_state_and_control_are_named():
    model = _slider()
    with pytest.raises(ValueError, match="q0 has non-finite"):
        diffmb.simulate(model, jnp.array([np.nan]), t1=0.1, dt=0.01)
    with pytest.raises(ValueError, match="v0 has shape"):
        diffmb.simulate(model, jnp.zeros(1), jnp.zeros(2), t1=0.1, dt=0.01)
    with pytest.raises(ValueError, match="control returned None"):
        diffmb.simulate(model, jnp.zeros(1), t1=0.1, dt=0.01, control=lambda t, q, v, p: None)
    b = diffmb.ModelBuilder(name="ball")
    b.add_body("b", mass=1.0, inertia=[1.0, 1.0, 1.0], joints=[dict(type="ball", name="j")])
    with pytest.raises(ValueError, match="zero quaternion"):
        diffmb.simulate(b.build(), jnp.zeros(4), t1=0.1, dt=0.01)
    with pytest.raises(TypeError, match="expected a diffmb.Model"):
        diffmb.simulate("model.xml", jnp.zeros(1), t1=0.1, dt=0.01)


_CONTACT_XML = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="ball" pos="0 0 1"><freejoint/><geom name="ball" type="sphere" size="0.1"/></body>
  </worldbody>
</mujoco>
"""

_LIMIT_XML = """
<mujoco>
  <compiler angle="radian"/>
  <option gravity="0 0 -9.81" timestep="0.001" integrator="RK4"><flag contact="disable"/></option>
  <worldbody>
    <body name="link" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" range="-0.5 0.5" limited="true" damping="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.03" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


def _mujoco_qpos_after(path, steps):
    """MuJoCo's own qpos[0] after ``steps`` mj_step calls from the file's initial state."""
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    for _ in range(steps):
        mujoco.mj_step(mj, d)
    return float(d.qpos[0])


def test_mjcf_forces_refuses_what_it_cannot_simulate(tmp_path):
    f = tmp_path / "contact.xml"
    f.write_text(_CONTACT_XML)
    assert type(diffmb.mjcf_forces(f)[-1]).__name__ == "Contacts"
    assert len(diffmb.mjcf_forces(f, contacts=False)) == 2
    e = tmp_path / "raft.xml"  # a height field on a moving body is not modelled
    e.write_text(_CONTACT_XML.replace("<worldbody>", '<asset><hfield name="pad" nrow="3" '
                                      'ncol="3" size="0.5 0.5 0.1 0.1"/></asset><worldbody>')
                 .replace("</worldbody>", '<body name="raft" pos="0 0 0.7"><freejoint/><geom '
                          'name="raft" type="hfield" hfield="pad" mass="1"/></body></worldbody>'))
    with pytest.raises(NotImplementedError, match="'raft' \\(hfield\\) with 'ball' \\(sphere\\)"):
        diffmb.mjcf_forces(e)
    kept = diffmb.mjcf_forces(e, ignore=("unsupported_contacts",))  # the ball on the floor
    assert [type(x).__name__ for x in kept] == ["JointDamping", "JointSpring", "Contacts"]
    g = tmp_path / "fluid.xml"
    g.write_text(_LIMIT_XML.replace('timestep="0.001"', 'timestep="0.001" density="1000"'))
    # a file with fluid gets MuJoCo's own fluid models by default, as MuJoCo simulates it
    assert type(diffmb.mjcf_forces(g)[-1]).__name__ == "MujocoInertiaBoxFluid"
    assert type(diffmb.mjcf_forces(g, fluid="mujoco")[-1]).__name__ == "MujocoInertiaBoxFluid"
    assert all(type(x).__name__ != "MujocoInertiaBoxFluid" for x in diffmb.mjcf_forces(g, fluid=False))


@pytest.mark.slow
def test_joint_limits_hold_like_mujoco(tmp_path):
    """A link falling onto its range limit comes to rest there as in MuJoCo (solref mapping)."""
    f = tmp_path / "limit.xml"
    f.write_text(_LIMIT_XML)
    mj_q = _mujoco_qpos_after(f, 3000)
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    assert any(isinstance(e, diffmb.JointLimits) for e in forces)
    tr = diffmb.simulate(model, jnp.zeros(1), None, t1=3.0, dt=1e-3, forces=forces)
    assert abs(mj_q - 0.5) < 0.01  # MuJoCo rests on the upper limit
    assert abs(float(tr.q[-1, 0]) - mj_q) < 2e-4  # 6.4e-4 penetration in MuJoCo
    free = diffmb.simulate(model, jnp.zeros(1), None, t1=3.0, dt=1e-3,
                           forces=diffmb.mjcf_forces(f, limits=False))
    assert float(free.q[-1, 0]) > 1.0  # without limits it swings through


def test_uav_flight_is_the_classical_rk4_recursion():
    from diffmb.models import uav

    P = uav.default_params()
    x0 = uav.initial_state()
    rhs, dt, n = uav.rhs_kane, 0.01, 50

    def rk4(x, t):
        k1 = rhs(t, x, P)
        k2 = rhs(t + dt / 2, x + dt / 2 * k1, P)
        k3 = rhs(t + dt / 2, x + dt / 2 * k2, P)
        k4 = rhs(t + dt, x + dt * k3, P)
        return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    x = x0
    step = jax.jit(rk4)  # one compilation of the step, not one per op
    for i in range(n):
        x, _ = step(x, i * dt)
    ts, xs = uav.fly(rhs, x0, P, n * dt, dt, 10)
    assert xs.shape == (6, 13)
    np.testing.assert_allclose(np.asarray(xs[-1]), np.asarray(x), rtol=1e-12, atol=1e-12)


def test_repeated_simulate_compiles_once():
    """New values of q0, v0 and the model's numbers reuse the compiled loop (no retrace)."""
    model = _slider()
    calls = []

    def ctrl(t, q, v, p):  # runs only while tracing
        calls.append(1)
        return jnp.cos(t) * jnp.ones(1)

    run = lambda m, q0: diffmb.simulate(m, q0, None, t1=0.5, dt=0.01, control=ctrl)  # noqa: E731
    first = run(model, jnp.zeros(1))
    n = len(calls)
    heavier = eqx.tree_at(lambda m: m.body_mass, model, model.body_mass * 2.0)
    second = run(heavier, jnp.ones(1))
    assert len(calls) == n  # no new trace
    # and the values are the new ones: x(t) = x0 + (1 - cos t) / m
    np.testing.assert_allclose(second.q[-1, 0] - 1.0, (first.q[-1, 0]) / 2.0, rtol=1e-12)


_FRICTION_XML = """
<mujoco>
  <compiler angle="radian"/>
  <option gravity="0 0 -9.81" timestep="0.001" integrator="RK4"><flag contact="disable"/></option>
  <worldbody>
    <body name="link" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" frictionloss="FL"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.03" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("fl", [1.0, 3.0, pytest.param(6.0, marks=pytest.mark.slow)])  # both regimes fast
def test_frictionloss_like_mujoco(tmp_path, fl):
    """Below the gravity torque (2.45 N m) the link falls, slowed; above it MuJoCo's soft
    friction lets it creep (0.059 rad in 2 s): diffmb's element follows both."""
    f = tmp_path / "friction.xml"
    f.write_text(_FRICTION_XML.replace("FL", str(fl)))
    mj_q = _mujoco_qpos_after(f, 2000)
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)
    assert any(isinstance(e, diffmb.JointFriction) for e in forces)
    tr = diffmb.simulate(model, jnp.zeros(1), None, t1=2.0, dt=1e-3, forces=forces)
    assert abs(float(tr.q[-1, 0]) - mj_q) < 3e-3
    # gradient-safe at rest: d(final angle)/d(friction) finite and negative
    el = next(e for e in forces if isinstance(e, diffmb.JointFriction))
    g = jax.grad(lambda fr: diffmb.simulate(
        model, jnp.zeros(1), None, t1=0.2, dt=1e-3,
        forces=(diffmb.JointFriction(fr, el.slope),)).q[-1, 0])(el.friction)
    assert np.all(np.isfinite(g)) and float(g[0]) < 0


_TENDON_XML = """
<mujoco>
  <worldbody>
    <body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" contype="0" conaffinity="0"/>
      <body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <tendon><fixed name="t"><joint joint="j1" coef="1"/><joint joint="j2" coef="-1"/></fixed></tendon>
  <equality><joint joint1="j1" joint2="j2"/></equality>
</mujoco>
"""


def test_fixed_tendons_and_joint_equalities_become_elements(tmp_path):
    f = tmp_path / "tendon.xml"
    f.write_text(_TENDON_XML)
    kinds = [type(e).__name__ for e in diffmb.mjcf_forces(f)]
    assert kinds == ["JointDamping", "JointSpring", "FixedTendons", "Couplings"]


def test_step_count_that_cannot_fit_is_refused_up_front():
    model = _slider()
    with pytest.raises(ValueError, match="saving all 2000000000 steps"):
        diffmb.simulate(model, jnp.zeros(1), None, t1=2.0, dt=1e-9)
    with pytest.raises(ValueError, match="GiB"):
        diffmb.simulate(model, jnp.zeros(1), None, t1=2.0, dt=1e-9, saveat=[1.0, 2.0])


def _import_graph():
    """diffmb's modules and the diffmb modules each imports (module level or in a function),
    read from the source with ``ast``."""
    import ast

    root = Path(diffmb.__file__).parent
    mods = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph = {}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        out = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    out.add(sub if sub in mods else base)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        graph[m] = {t for t in out if t in mods and t != m}
    return graph


def test_simulate_systems_and_formulations_import_no_cycle():
    """No import circle passes through simulation, systems or a formulation, and simulation
    imports no formulation or model (it knows no particular system)."""
    graph = _import_graph()
    core = [m for m in graph if m in ("diffmb.simulation", "diffmb.systems")
            or m.startswith("diffmb.formulations")]
    for start in core:
        seen, stack = set(), [start]
        while stack:
            for t in graph[stack.pop()]:
                assert t != start or start == "diffmb", f"import cycle through {start}"
                if t not in seen and t != "diffmb":  # the package's __init__ re-exports all
                    seen.add(t)
                    stack.append(t)
    assert not {t for t in graph["diffmb.simulation"]
                if t.startswith(("diffmb.formulations", "diffmb.models", "diffmb.io"))}
