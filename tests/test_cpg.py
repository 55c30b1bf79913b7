"""The central pattern generator: the on-pattern closed form, attraction to the pattern from
other states (scipy), joints tracking it through position actuators, gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import diffmb
from diffmb.controls import CPG, GAITS

_LEGS = """<mujoco><option gravity="0 0 0"/><default><geom contype="0" conaffinity="0"/></default><worldbody>
  <body name="base"><geom type="box" size="0.2 0.1 0.05" mass="5"/>
  {legs}
  </body></worldbody><actuator>{acts}</actuator></mujoco>"""


def _legs_file(tmp_path):
    legs, acts = "", ""
    for i, (x, y) in enumerate([(0.2, 0.1), (0.2, -0.1), (-0.2, 0.1), (-0.2, -0.1)]):
        legs += (f'<body name="leg{i}" pos="{x} {y} 0"><joint name="hip{i}" type="hinge" '
                 f'axis="0 1 0" damping="0.05"/><geom type="capsule" fromto="0 0 0 0 0 -0.2" '
                 f'size="0.02" mass="0.3"/></body>')
        acts += f'<position joint="hip{i}" kp="40" kv="1"/>'
    f = tmp_path / "legs.xml"
    f.write_text(_LEGS.format(legs=legs, acts=acts))
    return f


def test_oscillators_follow_the_closed_form_on_their_pattern(tmp_path):
    f = _legs_file(tmp_path)
    model = diffmb.load_mjcf(f)
    cpg = CPG.gait("trot", [[0], [1], [2], [3]], frequency=1.5, amplitudes=0.4)
    ts = np.linspace(0.0, 2.0, 21)
    tr = diffmb.simulate(model, jnp.zeros(4), None, t1=2.0, dt=1e-3, control=cpg,
                         forces=diffmb.mjcf_forces(f), saveat=ts)
    z = np.asarray(tr.aux[1])  # (ns, 4, 2): the control's state
    phi = 2 * np.pi * np.array(GAITS["trot"])
    w = 2 * np.pi * 1.5
    # RK4's phase error at ω dt = 0.0094 over 2 s: ~ t ω⁵ dt⁴ / 120 = 1.2e-9
    np.testing.assert_allclose(z[:, :, 0], np.cos(w * ts[:, None] + phi), atol=3e-9)
    np.testing.assert_allclose(z[:, :, 1], np.sin(w * ts[:, None] + phi), atol=3e-9)
    # the hips follow their targets through the position servos (lag of a stiff servo)
    q_star = 0.4 * z[:, :, 0]
    assert np.max(np.abs(np.asarray(tr.q)[10:] - q_star[10:])) < 0.1


@pytest.mark.slow
def test_the_pattern_attracts_other_states():
    cpg = CPG.gait("walk", [[0], [1], [2], [3]], frequency=1.0, amplitudes=1.0)
    rng = np.random.default_rng(0)
    z0 = rng.normal(size=(4, 2))
    f = jax.jit(lambda z: cpg.dynamics(z.reshape(4, 2)).reshape(-1))
    sol = solve_ivp(lambda t, z: np.asarray(f(jnp.asarray(z))), (0, 20), z0.reshape(-1),
                    rtol=1e-10, atol=1e-12)
    z = sol.y[:, -1].reshape(4, 2)
    np.testing.assert_allclose(np.hypot(z[:, 0], z[:, 1]), 1.0, atol=1e-6)
    phase = np.angle(z[:, 0] + 1j * z[:, 1])
    rel = np.angle(np.exp(1j * (phase - phase[0])))
    want = np.angle(np.exp(1j * 2 * np.pi * np.array(GAITS["walk"])))
    np.testing.assert_allclose(rel, want, atol=1e-6)


@pytest.mark.slow
def test_gradient_through_the_gait_parameters(tmp_path):
    f = _legs_file(tmp_path)
    model = diffmb.load_mjcf(f)
    forces = diffmb.mjcf_forces(f)

    def final(freq, amp):
        cpg = CPG.gait("trot", [[0], [1], [2], [3]], frequency=freq, amplitudes=amp)
        tr = diffmb.simulate(model, jnp.zeros(4), None, t1=0.5, dt=1e-3, control=cpg,
                             forces=forces, saveat=[0.5])
        return tr.q[-1, 0]

    g = jax.grad(final, argnums=(0, 1))(1.5, 0.4)
    h = 1e-6
    fd = (final(1.5 + h, 0.4) - final(1.5 - h, 0.4)) / (2 * h)
    assert np.isfinite(float(g[0])) and abs(float(g[0]) - float(fd)) < 1e-6 * max(1, abs(fd))


# ---------------------------------------------------------------- numbers checked where they enter


@pytest.mark.parametrize("kw, field, exc", [
    (dict(frequency=np.nan), "frequency", ValueError),
    (dict(frequency=np.inf), "frequency", ValueError),
    (dict(frequency=-1.0), "frequency", ValueError),
    (dict(amplitudes=[0.1, 0.2, 0.3]), "amplitudes", TypeError),  # 3 values for 2 joints
    (dict(offsets=[0.0, np.nan]), "offsets", ValueError),
    (dict(kp=-5.0, output="torque", dofs=[0, 1]), "kp", ValueError),
    (dict(alpha=0.0), "alpha", ValueError),  # no attraction to the limit cycle
    (dict(coupling=-2.0), "coupling", ValueError),
    (dict(joints=[0, -1]), "joints", ValueError),
    (dict(joints=[0, 1.5]), "joints", TypeError),
    (dict(output="torque"), "dofs", ValueError),  # torque output needs its dofs
    (dict(output="position"), "output", ValueError),
])
def test_cpg_refuses_numbers_without_meaning(kw, field, exc):
    args = dict(joints=[0, 1], frequency=1.0, amplitudes=0.3) | kw
    with pytest.raises(exc, match=rf"^CPG\.{field}"):
        CPG(**args)


def _two_dof():
    bld = diffmb.ModelBuilder("two_link")
    bld.gravity = np.zeros(3)
    bld.add_body("a", mass=1.0, inertia=[0.1, 0.1, 0.1],
                 joints=[dict(type="hinge", axis=[0, 1, 0], name="j1")])
    bld.add_body("b", parent="a", pos=[0.3, 0, 0], mass=1.0, inertia=[0.1, 0.1, 0.1],
                 joints=[dict(type="hinge", axis=[0, 1, 0], name="j2")])
    return bld.build()


def test_cpg_refuses_a_joint_outside_the_model():
    """JAX clamps q[7] to q[1]: the CPG would silently drive another joint."""
    model = _two_dof()
    cpg = CPG([0, 7], 1.0, 0.3, output="torque", dofs=[0, 1], kp=5.0, kd=0.1)
    with pytest.raises(ValueError, match=r"CPG\.joints\[1\] = 7: .*\[0, 2\).*'two_link'.*nq = 2"):
        cpg.init_state(model)
    with pytest.raises(ValueError, match=r"CPG\.joints\[1\] = 7"):
        diffmb.simulate(model, np.zeros(2), np.zeros(2), t1=0.01, dt=1e-3, control=cpg)
    cpg = CPG([0, 1], 1.0, 0.3, output="torque", dofs=[0, 9], kp=5.0)
    with pytest.raises(ValueError, match=r"CPG\.dofs\[1\] = 9: .*nv = 2"):
        diffmb.simulate(model, np.zeros(2), np.zeros(2), t1=0.01, dt=1e-3, control=cpg)
    # a CPG within the model runs: the torque on dof 0 at t = 0 is kp (q* − q) = 5 · 0.3
    ok = CPG([0, 1], 1.0, 0.3, output="torque", dofs=[0, 1], kp=5.0)
    tau, _ = ok(0.0, jnp.zeros(2), jnp.zeros(2), None, ok.init_state(model))
    np.testing.assert_allclose(np.asarray(tau), [1.5, 1.5], rtol=1e-15)


def test_knot_tables_refuse_bad_knots_and_values():
    from diffmb.controls import KnotTable, cubic, piecewise_linear

    with pytest.raises(ValueError, match=r"^KnotTable\.values\[1, 0\] = nan: must be finite"):
        piecewise_linear([0.0, 1.0, 2.0], np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(TypeError, match=r"^KnotTable\.values: expected shape \(3,\) or \(3, nu\)"):
        piecewise_linear([0.0, 1.0, 2.0], np.zeros((2, 2)))  # one row short
    with pytest.raises(ValueError, match=r"^KnotTable\.ts\[1\] = inf: must be finite"):
        piecewise_linear([0.0, np.inf], np.zeros(2))
    with pytest.raises(ValueError, match=r"^KnotTable\.ts\[2\] = 0.5: must be > ts\[1\] = 1"):
        piecewise_linear([0.0, 1.0, 0.5], np.zeros(3))
    with pytest.raises(ValueError, match=r"^KnotTable\.kind = 'spline'"):
        KnotTable(jnp.array([0.0, 1.0]), jnp.zeros(2), "spline")
    with pytest.raises(ValueError, match=r"^KnotTable\.ts\[3\] = 2: uniform=True"):
        KnotTable(jnp.array([0.0, 1.0, 1.9, 2.0, 4.0]), jnp.zeros(5), uniform=True)
    fine = KnotTable(jnp.array([0.0, 1.01, 1.98, 3.0]), jnp.array([0.0, 1.0, 2.0, 3.0]),
                     uniform=True)  # jitter below half a spacing: the lookup still finds t
    np.testing.assert_allclose(float(fine(1.5)), 1.0 + 0.49 / 0.97, rtol=1e-14)
    table = cubic([0.0, 1.0, 2.0])  # values from params: their rows are checked when called
    with pytest.raises(TypeError, match=r"KnotTable values \(from params\): expected shape \(3,"):
        table(0.5, None, None, jnp.zeros((4, 2)))


def test_sensors_refuse_bad_gains_biases_and_delays():
    from diffmb.optim.sensors import Sensors

    model = _two_dof()  # channels q_j1, q_j2, v_j1, v_j2
    with pytest.raises(ValueError, match=r"^Sensors\.delay\['q_j2'\] = -0.01: must be >= 0"):
        Sensors(model, delay=[0.0, -0.01, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"^Sensors\.gain\['v_j1'\] = nan: must be finite"):
        Sensors(model, gain=[1.0, 1.0, np.nan, 1.0])
    with pytest.raises(TypeError, match=r"^Sensors\.bias: expected a scalar or shape \(4,\)"):
        Sensors(model, bias=np.zeros(3))
    s = Sensors(model, gain=2.0, delay=[0.0, 0.01, 0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(s.gain), [2.0] * 4)
