"""Aerodynamics of a small fixed-wing aircraft (Wu et al. 2019, the UAV study): propellers, a
stability-derivative body, and :class:`BodyAerodynamics`, the force element that applies the
latter to a body of a :class:`~diffmb.Model`.

Conventions (aircraft body axes, NED world): x forward, y right wing, z down; body rates
``omega = [p, q, r]``; airspeed ``v_body = [u, v, w]`` of the aerodynamic reference point relative
to still air. Angle of attack ``alpha = atan2(w, u)``, sideslip ``beta = atan2(v, sqrt(u^2 + w^2))``.
Controls ``[delta_a, delta_e, delta_r]`` in rad (aileron, elevator, rudder); positive elevator
gives a nose-down moment (C_m_de < 0), the usual sign.

Everything is gradient-safe at zero airspeed: rate terms are written as ``qbar * (c/2V) * q =
rho S V c q / 4`` (no division by V) and the angles use a double-``where`` atan2, so value and
gradient stay finite when the aircraft is at rest (hover, launch).

The propeller model is the usual advance-ratio polynomial, written so that it is polynomial in
(n, V_axial) and therefore smooth at n = 0 and V = 0:

    T = rho n^2 D^4 C_T(J),  Q = rho n^2 D^5 C_Q(J),  J = V_axial / (n D),
    C_T(J) = ct0 + ct1 J + ct2 J^2   =>   T = rho (ct0 n^2 D^4 + ct1 n V D^3 + ct2 V^2 D^2),

with n in rev/s. Q is the magnitude of the aerodynamic torque absorbed by the propeller; it acts
on the rotor against its spin.

The parameter objects check their numbers when built from concrete values: every number finite;
air density, diameter, wing area, span and chord positive; the zero-lift drag C_D0 and the
induced-drag factor K non-negative (a negative one would feed energy into the airframe). A wrong
value raises ``ValueError``, a wrong type or shape ``TypeError``, naming class, field and range.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from ..dynamics.kinematics import body_pose, body_velocity
from ..spatial.safe import safe_norm
from ..validation import check_index, check_value
from .elements import AbstractForce

__all__ = [
    "PropellerParams",
    "AeroDerivatives",
    "safe_atan2",
    "air_data",
    "propeller_thrust_torque",
    "body_aero",
    "BodyAerodynamics",
]


def safe_atan2(y, x):
    """atan2 with value 0 and gradient 0 at (0, 0) instead of NaN (double-where)."""
    zero = (x == 0.0) & (y == 0.0)
    xs = jnp.where(zero, 1.0, x)
    ys = jnp.where(zero, 0.0, y)
    return jnp.where(zero, 0.0, jnp.arctan2(ys, xs))


class PropellerParams(eqx.Module):
    """Fixed-pitch propeller: diameter [m], air density [kg/m^3], C_T and C_Q polynomials in J."""

    diameter: jnp.ndarray
    rho: jnp.ndarray
    ct: jnp.ndarray  # (3,) ct0, ct1, ct2
    cq: jnp.ndarray  # (3,) cq0, cq1, cq2

    def __check_init__(self):
        check_value("PropellerParams", "diameter", self.diameter, lo=0.0, lo_open=True)
        check_value("PropellerParams", "rho", self.rho, lo=0.0, lo_open=True)
        check_value("PropellerParams", "ct", self.ct, shape=(3,))
        check_value("PropellerParams", "cq", self.cq, shape=(3,))


def propeller_thrust_torque(prop: PropellerParams, spin_rad_s, v_axial):
    """Thrust [N] along the rotor axis and absorbed torque magnitude [N m].

    spin_rad_s: rotor speed (sign = direction, only |.| matters here); v_axial: inflow speed along
    the thrust direction [m/s]. Smooth in both arguments (polynomial form).
    """
    n = jnp.sqrt(spin_rad_s * spin_rad_s + 1e-30) / (2.0 * jnp.pi)  # rev/s, smooth at 0
    D, rho = prop.diameter, prop.rho
    ct0, ct1, ct2 = prop.ct[0], prop.ct[1], prop.ct[2]
    cq0, cq1, cq2 = prop.cq[0], prop.cq[1], prop.cq[2]
    V = v_axial
    T = rho * (ct0 * n * n * D**4 + ct1 * n * V * D**3 + ct2 * V * V * D**2)
    Q = rho * (cq0 * n * n * D**5 + cq1 * n * V * D**4 + cq2 * V * V * D**3)
    return T, Q


class AeroDerivatives(eqx.Module):
    """Stability-derivative model of the airframe; every leaf is an array (differentiable).

    Forces and moments are about the aerodynamic reference point (the airframe's centre of
    mass in the UAV study). Units: rho kg/m^3, S m^2, b and c m, derivatives per rad (rate
    derivatives per non-dimensional rate p b/2V, q c/2V, r b/2V).
    """

    rho: jnp.ndarray
    S: jnp.ndarray
    b: jnp.ndarray
    c: jnp.ndarray
    CL0: jnp.ndarray
    CLa: jnp.ndarray
    CLq: jnp.ndarray
    CLde: jnp.ndarray
    CD0: jnp.ndarray
    K: jnp.ndarray  # induced drag factor: C_D = C_D0 + K C_L^2
    CYb: jnp.ndarray
    CYp: jnp.ndarray
    CYr: jnp.ndarray
    CYdr: jnp.ndarray
    Clb: jnp.ndarray
    Clp: jnp.ndarray
    Clr: jnp.ndarray
    Clda: jnp.ndarray
    Cldr: jnp.ndarray
    Cm0: jnp.ndarray
    Cma: jnp.ndarray
    Cmq: jnp.ndarray
    Cmde: jnp.ndarray
    Cnb: jnp.ndarray
    Cnp: jnp.ndarray
    Cnr: jnp.ndarray
    Cnda: jnp.ndarray
    Cndr: jnp.ndarray

    def __check_init__(self):
        for k in self.__dataclass_fields__:
            bounds = (dict(lo=0.0, lo_open=True) if k in ("rho", "S", "b", "c")
                      else dict(lo=0.0) if k in ("CD0", "K") else {})
            check_value("AeroDerivatives", k, getattr(self, k), **bounds)

    @classmethod
    def from_dict(cls, d: dict) -> AeroDerivatives:
        missing = [k for k in cls.__dataclass_fields__ if k not in d]
        if missing:
            raise ValueError(f"AeroDerivatives.from_dict: missing {missing}")
        return cls(**{k: jnp.asarray(float(check_value("AeroDerivatives", k, d[k])))
                      for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict:
        return {k: float(getattr(self, k)) for k in self.__dataclass_fields__}


def air_data(v_body):
    """(V, alpha, beta) of the airspeed vector (3,): gradient-safe at v = 0."""
    u, v, w = v_body[0], v_body[1], v_body[2]
    V = safe_norm(v_body)
    alpha = safe_atan2(w, u)
    beta = safe_atan2(v, safe_norm(jnp.stack([u, w])))
    return V, alpha, beta


def body_aero(p: AeroDerivatives, v_body, omega_body, controls):
    """Aerodynamic force and moment on the airframe in body axes: (3,), (3,), (3,) -> (3,), (3,).

    Lift acts in the symmetry plane perpendicular to the airspeed's (u, w) part, drag against the
    airspeed, side force along body y; q_bar S C, with the rate terms written without 1/V.
    """
    u, _, w = v_body[0], v_body[1], v_body[2]
    V, alpha, beta = air_data(v_body)
    pr, qr, rr = omega_body[0], omega_body[1], omega_body[2]
    da, de, dr = controls[0], controls[1], controls[2]
    half_rho_S = 0.5 * p.rho * p.S
    qS = half_rho_S * V * V
    # Coefficients without the rate terms (rate terms carry a factor 1/V, handled below).
    CL_static = p.CL0 + p.CLa * alpha + p.CLde * de
    # q_bar S C_Lq (q c / 2V) = half_rho_S V C_Lq q c / 2
    L_rate = half_rho_S * V * p.CLq * qr * p.c / 2.0
    L = qS * CL_static + L_rate
    # C_L including rate, for induced drag: C_L = L / qS; K C_L^2 qS = K L^2 / qS  (1/V^2!)
    # write the induced drag as K qS CL_static^2 + 2 K CL_static L_rate + K L_rate^2/qS; the
    # last term is O(q^2) and dropped (standard linear model), so drag stays smooth at V = 0.
    D = qS * (p.CD0 + p.K * CL_static**2) + 2.0 * p.K * CL_static * L_rate
    Y = qS * (p.CYb * beta + p.CYdr * dr) + half_rho_S * V * p.b / 2.0 * (p.CYp * pr + p.CYr * rr)
    # directions: drag along -v_body/V, lift along (w, 0, -u)/sqrt(u^2 + w^2)
    Vuw = safe_norm(jnp.stack([u, w]))
    inv_V = jnp.where(V > 0, 1.0 / jnp.where(V > 0, V, 1.0), 0.0)
    inv_Vuw = jnp.where(Vuw > 0, 1.0 / jnp.where(Vuw > 0, Vuw, 1.0), 0.0)
    zero = jnp.zeros_like(u)
    lift_dir = jnp.stack([w, zero, -u]) * inv_Vuw
    drag_dir = -v_body * inv_V
    F = L * lift_dir + D * drag_dir + Y * jnp.stack([zero, zero + 1.0, zero])
    qSb, qSc = qS * p.b, qS * p.c
    rate_b = half_rho_S * V * p.b * p.b / 2.0  # q_bar S b (b / 2V)
    rate_c = half_rho_S * V * p.c * p.c / 2.0
    Ml = qSb * (p.Clb * beta + p.Clda * da + p.Cldr * dr) + rate_b * (p.Clp * pr + p.Clr * rr)
    Mm = qSc * (p.Cm0 + p.Cma * alpha + p.Cmde * de) + rate_c * p.Cmq * qr
    Mn = qSb * (p.Cnb * beta + p.Cnda * da + p.Cndr * dr) + rate_b * (p.Cnp * pr + p.Cnr * rr)
    return F, jnp.stack([Ml, Mm, Mn])


class BodyAerodynamics(AbstractForce):
    """:func:`body_aero` on one body of a :class:`~diffmb.Model`, as a force element.

    The body's frame gives the aircraft axes (x forward, y right wing, z down); ``point`` (3,),
    in that frame, is the aerodynamic reference point: its airspeed (still air) enters
    :func:`body_aero`, and the force acts there. The control surfaces [aileron, elevator,
    rudder] are ``ctrl[surfaces]`` (rad), so this element consumes the control vector.
    """

    uses_ctrl: ClassVar[bool] = True
    aero: AeroDerivatives
    point: jnp.ndarray
    body: str = eqx.field(static=True)
    surfaces: tuple = eqx.field(static=True, default=(0, 1, 2))

    def __init__(self, aero: AeroDerivatives, body: str, point=(0.0, 0.0, 0.0),
                 surfaces=(0, 1, 2)):
        o = "BodyAerodynamics"
        if not isinstance(aero, AeroDerivatives):
            raise TypeError(f"{o}.aero: expected an AeroDerivatives, got {type(aero).__name__}")
        if not isinstance(body, str):
            raise TypeError(f"{o}.body = {body!r}: expected a body name (str)")
        self.aero = aero
        self.body = body
        self.point = jnp.asarray(check_value(o, "point", point, shape=(3,)), dtype=jnp.float64)
        check_value(o, "surfaces", surfaces, shape=(3,), lo=0)
        if not all(float(i) == int(i) for i in surfaces):
            raise TypeError(f"{o}.surfaces = {surfaces!r}: expected 3 integer control indices "
                            "(aileron, elevator, rudder)")
        self.surfaces = tuple(int(i) for i in surfaces)

    def __call__(self, model, t, q, v, ctrl):
        o = "BodyAerodynamics"
        if ctrl is None:
            raise TypeError(f"{o}: consumes the control vector (surfaces {self.surfaces}), but "
                            f"the control is None; pass ctrl= or control=")
        ctrl = jnp.asarray(ctrl, dtype=jnp.float64)
        if ctrl.ndim != 1:
            raise TypeError(f"{o}: expected a control vector of shape (nu,), got {ctrl.shape}")
        check_index(o, "surfaces", self.surfaces, ctrl.shape[0],
                    what=f"the control vector has {ctrl.shape[0]} entries")
        R, p = body_pose(model, q, self.body)
        w, vp = body_velocity(model, q, v, self.body, self.point)
        u = ctrl[jnp.asarray(self.surfaces)]
        F, M = body_aero(self.aero, R.T @ vp, R.T @ w, u)
        Fw, Mw = R @ F, R @ M
        b = model.body_index(self.body)
        # f_ext acts at the body's com: transfer the moment from the reference point
        arm = R @ (self.point - model.body_com[b])
        wrench = jnp.concatenate([Fw, Mw + jnp.cross(arm, Fw)])
        return jnp.zeros(model.nv), jnp.zeros((model.n_bodies, 6)).at[b].set(wrench)
