"""The second-order implicit contact step (``solver="implicit2"``,
:class:`diffmb.simulation.ImplicitContactROS2`).

Expected values: the closed-form solution of a damped linear oscillator and ROS2's stability
function R(z) = (1 + (1 − 2γ) z + (γ² − 2γ + ½) z²) / (1 − γ z)² applied to its matrix (one
step of the method on a linear system is R(hJ) exactly), the static deflection of the
mass-normalised contact springs, Coulomb sliding on a slope, a converged explicit reference
(RK4 at 0.02 ms) for the convergence rate, and central differences of the same discrete map for
gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Box, Contacts, Plane, soft_contact_params
from diffmb.simulation import ROS2_GAMMA, ImplicitContactROS2

G = 9.81
H = 0.1
M = 2.0
BODY = """<mujoco><option gravity="0 0 -9.81"/><worldbody><body name="box"><freejoint/>
<geom type="box" size="{h} {h} {h}" mass="{m}" contype="0" conaffinity="0"/></body>
</worldbody></mujoco>"""
# a unit mass on a slide joint with a spring k and a damper c (no gravity)
OSC = """<mujoco><option gravity="0 0 0"/><worldbody><body name="m">
<joint name="x" type="slide" axis="1 0 0" stiffness="{k}" damping="{c}"/>
<inertial pos="0 0 0" mass="1" diaginertia="0.1 0.1 0.1"/></body></worldbody></mujoco>"""


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    p = tmp_path_factory.mktemp("box") / "box.xml"
    p.write_text(BODY.format(h=H, m=M))
    return diffmb.load_mjcf(p)


def _oscillator(tmp_path, k, c):
    p = tmp_path / f"osc_{k:g}_{c:g}.xml"
    p.write_text(OSC.format(k=k, c=c))
    return diffmb.load_mjcf(p), diffmb.mjcf_forces(p)


def _contacts(model, mu=0.5, terrain=None, **kw):
    return Contacts([Box("box", (H, H, H), name="cube")], terrain or Plane(), model=model, mu=mu,
                    **kw)


def _k():
    return float(soft_contact_params(M, n_active=4)[0])


def _rest_q(alpha=0.0, k=None):
    n = np.array([-np.sin(alpha), 0.0, np.cos(alpha)])
    delta0 = M * G * np.cos(alpha) / 4 / (k or _k())
    c = (H - delta0) * n
    return jnp.concatenate([jnp.asarray(c), jnp.array([np.cos(-alpha / 2), 0.0,
                                                       np.sin(-alpha / 2), 0.0])])


def _ros2_matrix(Z):
    """ROS2's stability function at the matrix Z = h J."""
    g = ROS2_GAMMA
    eye = np.eye(Z.shape[0])
    D = np.linalg.inv(eye - g * Z)
    return D @ D @ (eye + (1 - 2 * g) * Z + (g * g - 2 * g + 0.5) * Z @ Z)


def test_stability_function_is_l_stable():
    """γ = 1 + 1/√2 removes the z² term: R(z) → 0 as z → −∞ and |R(iy)| ≤ 1 (L-stable)."""
    g = ROS2_GAMMA
    assert g * g - 2 * g + 0.5 == pytest.approx(0.0, abs=1e-15)
    for y in (0.1, 1.0, 10.0, 1e3, 1e6):
        assert abs(_ros2_matrix(np.array([[1j * y]]))[0, 0]) <= 1.0
    assert abs(_ros2_matrix(np.array([[-1e8]]))[0, 0]) < 1e-7


@pytest.mark.parametrize("k, c, h", [(400.0, 4.0, 0.01), (1e6, 0.0, 0.01), (1e8, 10.0, 0.01)])
def test_one_step_on_a_linear_oscillator_is_the_stability_function(tmp_path, k, c, h):
    """On a linear spring–damper the linearisation is exact, so a step is R(hJ) y, J = [[0, 1],
    [−k, −c]] (h ω = 0.2, 10, 100): the stiff cases are damped, not amplified."""
    model, forces = _oscillator(tmp_path, k, c)
    y0 = np.array([0.01, -0.3])
    n = 5
    tr = diffmb.simulate(model, jnp.array([y0[0]]), jnp.array([y0[1]]), t1=n * h, dt=h,
                         forces=forces, solver="implicit2")
    R = _ros2_matrix(h * np.array([[0.0, 1.0], [-k, -c]]))
    expect = [y0]
    for _ in range(n):
        expect.append(R @ expect[-1])
    got = np.stack([np.asarray(tr.q[:, 0]), np.asarray(tr.v[:, 0])], axis=1)
    scale = np.array([1.0, np.sqrt(k)])  # amplitude: x and v/ω
    np.testing.assert_allclose(got / scale, np.array(expect) / scale, rtol=1e-9, atol=1e-13)
    if k * h * h > 1:  # stiff: each step shrinks the amplitude
        amp = np.linalg.norm(got / scale, axis=1)
        assert np.all(np.diff(amp) < 0), amp


def test_second_order_on_a_damped_oscillator_where_euler_is_first(tmp_path):
    """The state (x, v/ω) at 0.5 s of a damped oscillator (ω = 20 rad/s, ζ = 0.1) against its
    closed form: the error falls 4x per halving of h (2.5, 1.25, 0.625 ms) with ROS2, 2x with
    the Euler step."""
    k, c = 400.0, 4.0
    model, forces = _oscillator(tmp_path, k, c)
    x0, v0, T = 0.01, 0.0, 0.5
    w = np.sqrt(k)
    z = c / (2 * w)
    wd = w * np.sqrt(1 - z * z)
    e, cs, sn = np.exp(-z * w * T), np.cos(wd * T), np.sin(wd * T)
    b = (v0 + z * w * x0) / wd
    x = e * (x0 * cs + b * sn)
    v = e * (-z * w * (x0 * cs + b * sn) + wd * (-x0 * sn + b * cs))

    def rates(solver):
        errs = []
        for h in (0.0025, 0.00125, 0.000625):
            tr = diffmb.simulate(model, jnp.array([x0]), jnp.array([v0]), t1=T, dt=h,
                                 forces=forces, solver=solver, saveat=[T])
            errs.append(np.hypot(float(tr.q[-1, 0]) - x, (float(tr.v[-1, 0]) - v) / w))
        return np.log2(np.array(errs[:-1]) / np.array(errs[1:]))

    r2, r1 = rates("implicit2"), rates("implicit")
    assert np.all(np.abs(r2 - 2) < 0.1), r2
    assert np.all(np.abs(r1 - 1) < 0.15), r1


@pytest.mark.slow
def test_rests_at_the_static_deflection_at_a_10ms_step(box):
    """Dropped from 2 cm: the box rests level, still, its corners m g / (4 k) deep."""
    c = _contacts(box)
    q0 = jnp.array([0.0, 0.0, H + 0.02, 1.0, 0.0, 0.0, 0.0])
    tr = diffmb.simulate(box, q0, jnp.zeros(6), t1=1.0, dt=0.01, forces=(c,), solver="implicit2",
                         saveat=[1.0])
    assert H - float(tr.q[-1, 2]) == pytest.approx(M * G / 4 / _k(), rel=1e-6)
    assert np.allclose(tr.q[-1, 3:], [1.0, 0.0, 0.0, 0.0], atol=1e-12)
    assert float(jnp.max(jnp.abs(tr.v[-1]))) < 1e-6


@pytest.mark.slow
def test_stable_where_rk4_diverges(box):
    """A contact 100x stiffer than the default (h ω = 18.5 at 10 ms): the box rests at k's
    static deflection (RK4 fails there: tests/test_implicit_contact.py)."""
    k = 100 * _k()
    c = _contacts(box, stiffness=k, damping=2 * np.sqrt(k * M / 4))
    tr = diffmb.simulate(box, _rest_q(k=k), jnp.array([0, 0, -0.5, 0, 0, 0.0]), t1=0.5,
                         dt=0.01, forces=(c,), solver="implicit2")
    assert float(tr.q[-1, 2]) == pytest.approx(H - M * G / 4 / k, abs=1e-7)
    assert float(jnp.max(tr.q[:, 2])) < H + 0.01  # not launched


@pytest.mark.slow
@pytest.mark.parametrize("mu, slides", [(0.6, False), (0.2, True)])
def test_stiction_on_a_slope_at_a_10ms_step(box, mu, slides):
    """Below the friction angle (tan α = 0.309 < 0.6) the box holds (creep < 1 mm in 3 s);
    above it, it slides with a = g (sin α − μ cos α)."""
    alpha = 0.3
    down = np.array([-np.cos(alpha), 0.0, -np.sin(alpha)])
    c = _contacts(box, mu=mu, terrain=Plane((-np.sin(alpha), 0.0, np.cos(alpha))))
    tr = diffmb.simulate(box, _rest_q(alpha), jnp.zeros(6), t1=3.0, dt=0.01, forces=(c,),
                         solver="implicit2", saveat=[0.0, 1.0, 3.0])
    if not slides:
        assert float(jnp.linalg.norm(tr.q[-1, :3] - tr.q[0, :3])) < 1e-3
    else:
        s = np.asarray(tr.v[:, :3]) @ down
        a = (s[2] - s[1]) / 2.0
        assert a == pytest.approx(G * (np.sin(alpha) - mu * np.cos(alpha)), rel=1e-2)


def test_refuses_args_that_are_not_a_second_order_system():
    with pytest.raises(TypeError, match="ImplicitContactROS2"):
        ImplicitContactROS2().init(None, 0.0, 0.1, (jnp.zeros(1), jnp.zeros(1)), (None, None))


@pytest.mark.slow
def test_second_order_convergence_on_a_compliant_floor(box):
    """The box pressed into the floor, bouncing, drifting and turning while its corners stick
    (a smooth stretch): the state error at 0.04 s against RK4 at 0.02 ms falls at order ≥ 1.7
    per halving of h (4, 2, 1, 0.5 ms), the Euler step's at order < 1.3."""
    c = _contacts(box)
    q0 = _rest_q() - jnp.array([0, 0, M * G / 4 / _k(), 0, 0, 0, 0])
    v0 = jnp.array([0.01, 0.0, 0.05, 0.0, 0.0, 0.05])
    T = 0.04
    ref = diffmb.simulate(box, q0, v0, t1=T, dt=2e-5, forces=(c,), saveat=[T])
    y = lambda tr: jnp.concatenate([tr.q[-1], tr.v[-1]])  # noqa: E731

    def rates(solver):
        errs = []
        for h in (4e-3, 2e-3, 1e-3, 5e-4):
            tr = diffmb.simulate(box, q0, v0, t1=T, dt=h, forces=(c,), solver=solver,
                                 saveat=[T])
            errs.append(float(jnp.linalg.norm(y(tr) - y(ref))))
        return np.log2(np.array(errs[:-1]) / np.array(errs[1:]))

    r2, r1 = rates("implicit2"), rates("implicit")
    assert np.all(r2 > 1.7), r2
    assert np.all(r1 < 1.3), r1


@pytest.mark.slow
def test_gradient_equals_central_differences_and_forward_mode(box):
    """d x(0.3)/d (v0, μ) through 60 steps of a sliding box: reverse mode, forward mode and
    central differences of the same discrete map agree."""
    q0 = _rest_q()

    def x_end(p):
        c = _contacts(box, mu=p[1])
        tr = diffmb.simulate(box, q0, jnp.array([p[0], 0, 0, 0, 0, 0]), t1=0.3, dt=0.005,
                             forces=(c,), solver="implicit2", saveat=[0.3])
        return tr.q[-1, 0]

    p = jnp.array([1.0, 0.5])
    g = jax.grad(x_end)(p)
    fwd = jax.jacfwd(x_end)(p)
    e = 1e-6
    fd = np.array([(x_end(p + e * d) - x_end(p - e * d)) / (2 * e) for d in np.eye(2)])
    assert np.all(np.isfinite(g))
    assert np.allclose(g, fd, rtol=1e-5, atol=1e-8)
    assert np.allclose(fwd, g, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_gradient_is_finite_through_touch_down(box):
    """d (height, x) at 0.2 s / d (drop height, v0) for a box landing at ~0.06 s while sliding:
    finite, and the height's derivative near zero (it rests on the floor by then)."""

    def end(p):
        q0 = jnp.array([0.0, 0.0, H + p[0], 1.0, 0.0, 0.0, 0.0])
        tr = diffmb.simulate(box, q0, jnp.array([p[1], 0, 0, 0, 0, 0]), t1=0.2, dt=0.005,
                             forces=(_contacts(box),), solver="implicit2", saveat=[0.2])
        return jnp.array([tr.q[-1, 2], tr.q[-1, 0]])

    J = np.asarray(jax.jacrev(end)(jnp.array([0.02, 0.5])))
    assert np.all(np.isfinite(J)), J
    assert abs(J[0, 0]) < 0.1, J


@pytest.mark.slow
@pytest.mark.parametrize("dt", [0.005, 0.02])
def test_bench_quadruped_settles_at_the_file_step_and_at_20ms(dt):
    """The contact benchmark's quadruped (soft limits in MuJoCo's constraint form, servos,
    stiction), dropped from the benchmark's random states: at the file's 5 ms and at MuJoCo's
    20 ms every member ends in the benchmark's settle band, still."""
    from diffmb.bench.contacts import BAND, QUADRUPED, VMAX, initial_states

    model = diffmb.load_mjcf(QUADRUPED)
    forces = diffmb.mjcf_forces(QUADRUPED)
    q, v = initial_states(4)

    def final(q0, v0):
        tr = diffmb.simulate(model, q0, v0, t1=1.0, dt=dt, forces=forces, solver="implicit2",
                             saveat=[1.0], throw=False)
        return tr.q[-1], tr.v[-1], tr.status

    qf, vf, st = jax.jit(jax.vmap(final))(jnp.asarray(q), jnp.asarray(v))
    assert np.all(np.asarray(st) == 0)
    assert np.all((BAND[0] < qf[:, 2]) & (qf[:, 2] < BAND[1])), qf[:, 2]
    assert np.all(jnp.linalg.norm(vf[:, :3], axis=1) < VMAX)
