"""The second-order implicit contact step (``solver="implicit2"``,
:class:`diffmb.simulation.ImplicitContactROS2`).

Expected values: the closed-form solution of a damped linear oscillator and ROS2's stability
function R(z) = (1 + (1 − 2γ) z + (γ² − 2γ + ½) z²) / (1 − γ z)² applied to its matrix (one
step of the method on a linear system is R(hJ) exactly), a converged explicit reference
(RK4 at 0.02 ms) for the convergence rate. The checks it shares with the Euler step (rest,
stiff contact, stiction on a slope, gradients against central differences, the bench quadruped)
are in tests/test_implicit_contact.py, run for both.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.simulation import ROS2_GAMMA, ImplicitContactROS2

from ._box_scene import G, H, M, box_model, contacts, corner_stiffness, rest_q


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    return box_model(tmp_path_factory)


# a unit mass on a slide joint with a spring k and a damper c (no gravity)
OSC = """<mujoco><option gravity="0 0 0"/><worldbody><body name="m">
<joint name="x" type="slide" axis="1 0 0" stiffness="{k}" damping="{c}"/>
<inertial pos="0 0 0" mass="1" diaginertia="0.1 0.1 0.1"/></body></worldbody></mujoco>"""


def _oscillator(tmp_path, k, c):
    p = tmp_path / f"osc_{k:g}_{c:g}.xml"
    p.write_text(OSC.format(k=k, c=c))
    return diffmb.load_mjcf(p), diffmb.mjcf_forces(p)


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


def test_refuses_args_that_are_not_a_second_order_system():
    with pytest.raises(TypeError, match="ImplicitContactROS2"):
        ImplicitContactROS2().init(None, 0.0, 0.1, (jnp.zeros(1), jnp.zeros(1)), (None, None))


@pytest.mark.slow
def test_second_order_convergence_on_a_compliant_floor(box):
    """The box pressed into the floor, bouncing, drifting and turning while its corners stick
    (a smooth stretch): the state error at 0.04 s against RK4 at 0.02 ms falls at order ≥ 1.7
    per halving of h (4, 2, 1, 0.5 ms), the Euler step's at order < 1.3."""
    c = contacts(box)
    q0 = rest_q() - jnp.array([0, 0, M * G / 4 / corner_stiffness(), 0, 0, 0, 0])
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
def test_gradient_is_finite_through_touch_down(box):
    """d (height, x) at 0.2 s / d (drop height, v0) for a box landing at ~0.06 s while sliding:
    finite, and the height's derivative near zero (it rests on the floor by then)."""

    def end(p):
        q0 = jnp.array([0.0, 0.0, H + p[0], 1.0, 0.0, 0.0, 0.0])
        tr = diffmb.simulate(box, q0, jnp.array([p[1], 0, 0, 0, 0, 0]), t1=0.2, dt=0.005,
                             forces=(contacts(box),), solver="implicit2", saveat=[0.2])
        return jnp.array([tr.q[-1, 2], tr.q[-1, 0]])

    J = np.asarray(jax.jacrev(end)(jnp.array([0.02, 0.5])))
    assert np.all(np.isfinite(J)), J
    assert abs(J[0, 0]) < 0.1, J
