"""Propeller and stability-derivative aerodynamics (seed 000's force law).

Oracles: the textbook formulas evaluated here in numpy (wind-axis lift/drag rotated into body
axes, T = rho n^2 D^4 C_T(J) in its J form), finite differences for gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import diffmb
from diffmb.forces.aero import air_data, body_aero, propeller_thrust_torque
from diffmb.models.uav import default_params

P = default_params()
A = P.aero.to_dict()


def test_body_aero_matches_wind_axis_formulas():
    alpha, V = np.deg2rad(5.0), 14.0
    vb = V * np.array([np.cos(alpha), 0.0, np.sin(alpha)])
    w = np.array([0.0, 0.0, 0.0])
    u = np.array([0.0, np.deg2rad(2.0), 0.0])
    F, M = jax.jit(body_aero)(P.aero, jnp.asarray(vb), jnp.asarray(w), jnp.asarray(u))
    qS = 0.5 * A["rho"] * V**2 * A["S"]
    CL = A["CL0"] + A["CLa"] * alpha + A["CLde"] * u[1]
    CD = A["CD0"] + A["K"] * CL**2
    Lift, Drag = qS * CL, qS * CD
    # body axes: X = L sin a - D cos a, Z = -L cos a - D sin a
    F_ref = [Lift * np.sin(alpha) - Drag * np.cos(alpha), 0.0, -Lift * np.cos(alpha) - Drag * np.sin(alpha)]
    np.testing.assert_allclose(F, F_ref, rtol=1e-12, atol=1e-12)
    Cm = A["Cm0"] + A["Cma"] * alpha + A["Cmde"] * u[1]
    np.testing.assert_allclose(M, [0.0, qS * A["c"] * Cm, 0.0], rtol=1e-12, atol=1e-12)


def test_lateral_and_rate_terms():
    V = 12.0
    beta = np.deg2rad(4.0)
    vb = V * np.array([np.cos(beta), np.sin(beta), 0.0])
    w = np.array([0.3, -0.2, 0.1])
    F, M = jax.jit(body_aero)(P.aero, jnp.asarray(vb), jnp.asarray(w), jnp.zeros(3))
    qS = 0.5 * A["rho"] * V**2 * A["S"]
    ph, qh, rh = w[0] * A["b"] / (2 * V), w[1] * A["c"] / (2 * V), w[2] * A["b"] / (2 * V)
    CY = A["CYb"] * beta + A["CYp"] * ph + A["CYr"] * rh
    Cl = A["Clb"] * beta + A["Clp"] * ph + A["Clr"] * rh
    Cm = A["Cm0"] + A["Cmq"] * qh
    Cn = A["Cnb"] * beta + A["Cnp"] * ph + A["Cnr"] * rh
    CL0 = A["CL0"]
    L_rate = 0.5 * A["rho"] * A["S"] * V * A["CLq"] * w[1] * A["c"] / 2
    Drag = qS * (A["CD0"] + A["K"] * CL0**2) + 2 * A["K"] * CL0 * L_rate  # linearised in q
    np.testing.assert_allclose(F[1], qS * CY - Drag * np.sin(beta), rtol=1e-12)
    np.testing.assert_allclose(M, [qS * A["b"] * Cl, qS * A["c"] * Cm, qS * A["b"] * Cn], rtol=1e-12)
    Vd, a, b = air_data(jnp.asarray(vb))
    np.testing.assert_allclose([Vd, a, b], [V, 0.0, beta], atol=1e-14)


def test_gradient_safe_at_zero_airspeed():
    f = lambda v, w: sum(jnp.sum(x) for x in body_aero(P.aero, v, w, jnp.array([0.0, 0.1, 0.0])))
    g = jax.jit(jax.grad(f, argnums=(0, 1)))(jnp.zeros(3), jnp.zeros(3))
    g2 = jax.jit(jax.grad(f, argnums=(0, 1)))(jnp.zeros(3), jnp.array([0.4, 0.2, 0.1]))
    assert all(np.all(np.isfinite(x)) for x in g2)
    assert all(np.all(np.isfinite(x)) for x in g)
    F, M = body_aero(P.aero, jnp.zeros(3), jnp.array([0.4, 0.2, 0.1]), jnp.zeros(3))
    np.testing.assert_allclose(F, 0.0, atol=0)
    np.testing.assert_allclose(M, 0.0, atol=0)
    gp = jax.jit(jax.grad(lambda om, v: sum(propeller_thrust_torque(P.prop, om, v)), argnums=(0, 1)))(
        0.0, 0.0)
    assert np.all(np.isfinite(np.array(gp)))


def test_propeller_advance_ratio_form():
    D, rho = float(P.prop.diameter), float(P.prop.rho)
    ct, cq = np.asarray(P.prop.ct), np.asarray(P.prop.cq)
    for rpm, V in [(2000.0, 12.0), (3000.0, 0.0), (1500.0, 5.0)]:
        n = rpm / 60.0
        J = V / (n * D)
        T_ref = rho * n**2 * D**4 * (ct[0] + ct[1] * J + ct[2] * J**2)
        Q_ref = rho * n**2 * D**5 * (cq[0] + cq[1] * J + cq[2] * J**2)
        for sgn in (1.0, -1.0):  # direction of spin does not change thrust or torque magnitude
            T, Q = propeller_thrust_torque(P.prop, sgn * rpm * 2 * np.pi / 60, V)
            np.testing.assert_allclose([T, Q], [T_ref, Q_ref], rtol=1e-12)


def test_gradients_against_finite_differences():
    vb = jnp.array([11.0, 0.7, 1.2])
    w = jnp.array([0.1, -0.3, 0.2])
    u = jnp.array([0.02, -0.03, 0.01])
    check_grads(jax.jit(lambda v, w, u: body_aero(P.aero, v, w, u)), (vb, w, u), order=1,
                modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
    fa = jax.jit(lambda a: jnp.concatenate(body_aero(a, vb, w, u)))
    J = jax.jit(jax.jacfwd(fa))(P.aero)
    h = 1e-6
    for k in ("CLa", "CD0", "Cma", "Cmq", "Clp", "Cnb"):
        ap = P.aero.from_dict({**A, k: A[k] + h})
        am = P.aero.from_dict({**A, k: A[k] - h})
        fd = (fa(ap) - fa(am)) / (2 * h)
        np.testing.assert_allclose(getattr(J, k), fd, rtol=1e-7, atol=1e-8)


@pytest.mark.slow
def test_body_aerodynamics_element_matches_mujoco_applied_force():
    """The element applies body_aero at its reference point: MuJoCo's mj_applyFT with the same
    force law (airspeed from MuJoCo's own object velocity) gives the same qacc."""
    import jax
    import jax.numpy as jnp
    import mujoco

    from diffmb.forces import BodyAerodynamics
    from diffmb.models import uav

    xml = """<mujoco><option gravity="0 0 9.81"/><worldbody>
      <body name="airframe" pos="0 0 -60"><freejoint name="root"/>
        <inertial pos="0.03 -0.01 0.02" mass="2.2" fullinertia="0.16 0.09 0.24 0 -0.008 0"/>
      </body></worldbody></mujoco>"""
    mj = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(mj)
    model = diffmb.io.mjcf.from_mjmodel(mj)
    aero = uav.default_params().aero
    point = np.array([0.1, 0.02, -0.03])
    el = BodyAerodynamics(aero, "airframe", point)
    rng = np.random.default_rng(4)
    for _ in range(3):
        q = np.r_[rng.normal(size=3), rng.normal(size=4)]
        q[3:] /= np.linalg.norm(q[3:])
        v = np.r_[12.0 + rng.normal(size=3), 0.3 * rng.normal(size=3)]
        u = np.deg2rad(rng.normal(size=3) * 3.0)
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(mj, d)
        res = np.zeros(6)
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_XBODY, 1, res, 1)  # body frame, local
        w_loc, v_loc = res[:3], res[3:] + np.cross(res[:3], point)
        F, M = (np.asarray(x) for x in body_aero(aero, jnp.asarray(v_loc), jnp.asarray(w_loc),
                                                    jnp.asarray(u)))
        R = d.xmat[1].reshape(3, 3)
        qfrc = np.zeros(mj.nv)
        mujoco.mj_applyFT(mj, d, R @ F, R @ M, d.xpos[1] + R @ point, 1, qfrc)
        d.qfrc_applied[:] = qfrc
        mujoco.mj_forward(mj, d)
        a = jax.jit(lambda q, v, u: diffmb.forward(model, q, v, forces=(el,), ctrl=u))(q, v, u)
        np.testing.assert_allclose(np.asarray(a), d.qacc, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("change, field, exc", [
    ({"CD0": -0.01}, "CD0", ValueError),  # negative drag would feed energy in
    ({"K": -0.05}, "K", ValueError),
    ({"rho": -1.2}, "rho", ValueError),
    ({"S": 0.0}, "S", ValueError),
    ({"c": np.nan}, "c", ValueError),
    ({"Cma": np.inf}, "Cma", ValueError),
    ({"CLa": "abc"}, "CLa", TypeError),
])
def test_aero_derivatives_refuse_numbers_without_meaning(change, field, exc):
    with pytest.raises(exc, match=rf"^AeroDerivatives\.{field}\b"):
        P.aero.from_dict({**A, **change})


def test_propeller_and_element_refuse_bad_numbers_and_shapes():
    from diffmb.forces import BodyAerodynamics
    from diffmb.forces.aero import PropellerParams

    f = lambda x: jnp.asarray(np.asarray(x, float))  # noqa: E731
    with pytest.raises(ValueError, match=r"^PropellerParams\.diameter = -0.3: must be > 0"):
        PropellerParams(f(-0.3), f(1.2), f([0.1, 0.0, 0.0]), f([0.01, 0.0, 0.0]))
    with pytest.raises(TypeError, match=r"^PropellerParams\.ct: expected shape"):
        PropellerParams(f(0.3), f(1.2), f([0.1, 0.0]), f([0.01, 0.0, 0.0]))
    with pytest.raises(TypeError, match=r"^BodyAerodynamics\.point: expected shape"):
        BodyAerodynamics(P.aero, "airframe", point=(0.0, 0.0))
    with pytest.raises(TypeError, match=r"^BodyAerodynamics\.surfaces: expected shape"):
        BodyAerodynamics(P.aero, "airframe", surfaces=(0, 1))
    with pytest.raises(ValueError, match=r"^BodyAerodynamics\.surfaces\[2\] = -1"):
        BodyAerodynamics(P.aero, "airframe", surfaces=(0, 1, -1))


@pytest.mark.slow
def test_aero_element_refuses_a_control_too_short_for_its_surfaces():
    """JAX would clamp ctrl[5] to the last entry and deflect the wrong surface."""
    from diffmb.forces import BodyAerodynamics

    bld = diffmb.ModelBuilder("plane")
    bld.add_body("airframe", mass=2.0, inertia=[0.2, 0.1, 0.3], joints=[dict(type="free")])
    model = bld.build()
    el = BodyAerodynamics(P.aero, "airframe", surfaces=(0, 1, 5))
    q, v = np.array([0.0, 0, 0, 1, 0, 0, 0]), np.r_[12.0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match=r"BodyAerodynamics\.surfaces\[2\] = 5.*\[0, 3\)"):
        diffmb.forward(model, q, v, forces=(el,), ctrl=np.zeros(3))
    with pytest.raises(TypeError, match=r"BodyAerodynamics.*control vector.*\(nu,\)"):
        diffmb.forward(model, q, v, forces=(el,), ctrl=np.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"BodyAerodynamics.*control is None"):
        diffmb.forward(model, q, v, forces=(el,))
    u = np.deg2rad([2.0, -3.0, 4.0])  # the rudder read from entry 5 acts as from entry 2
    a5 = diffmb.forward(model, q, v, forces=(el,), ctrl=np.r_[u[:2], 0.0, 0.0, 0.0, u[2]])
    a2 = diffmb.forward(model, q, v, forces=(BodyAerodynamics(P.aero, "airframe"),), ctrl=u)
    np.testing.assert_allclose(np.asarray(a5), np.asarray(a2), rtol=1e-13, atol=1e-13)
