"""The central pattern generator: the on-pattern closed form, attraction to the pattern from
other states (scipy), joints tracking it through position actuators, gradients."""

import jax
import jax.numpy as jnp
import numpy as np
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
