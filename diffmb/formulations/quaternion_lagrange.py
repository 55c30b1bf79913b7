"""Lagrange's equations in quaternion coordinates with the multipliers eliminated (Wu et al. 2019).

One rigid body (reference point O, body frame B) carrying axisymmetric rotors that spin at
prescribed rates Omega_k(t) relative to B about fixed axes a_k. Generalized coordinates (eq. 9)

    p = [r, q]  (7,)     r: world position of O,  q: unit quaternion B -> world,

and velocities v = [V, omega] (6,), V = rdot (world), omega the body angular velocity in B. The
unit-norm constraint Xi(q) pdot = 0 (eq. 12) is eliminated by the null-space matrix
Upsilon = diag(I, Gamma(q)) with Xi Upsilon = 0 (eqs. 29-31): pdot = Upsilon v, and
Upsilon^T (d/dt dL/dpdot - dL/dp - tau) = 0 are six equations without the multiplier.

Quaternions here are scalar-first [w, x, y, z] (diffmb's convention). The paper writes
q = [sigma, eta] scalar-last (Hughes); its maps become, in our order,

    S(q)     = 2 [-x_v, w I - [x_v]x]        (3, 4)   omega = S qdot     (eq. 5/11)
    Gamma(q) = 1/2 [-x_v^T; w I + [x_v]x]    (4, 3)   qdot = Gamma omega (eq. 8/32)

with x_v = [x, y, z], and S Gamma = |q|^2 I (eq. 30 on the unit sphere).

Kinetic energy (derived here, not copied from eqs. 13-17; see the UAV study report):

    T = 1/2 m V.V + m V.R(omega x c) + 1/2 omega.J_O omega + omega.sum_k h_k + 1/2 sum_k Jax_k Omega_k^2
    h_k = Jax_k Omega_k a_k     (rotor spin angular momentum, body frame)

with m the total mass, c the composite centre of mass relative to O (body frame) and J_O the
inertia of body + rotors about O in body axes, including the rotors' transverse inertia and
every parallel-axis term. Because rotors are axisymmetric J_O is constant in B. The potential is
U = -m g.(r + R c) for any world gravity vector g (NED: g = [0, 0, +9.81]).

The paper's printed form (J = J_b + J_c + J_d without parallel axis, A = 1/2 J Omega^2 with no
omega coupling, U = m g e_z.r) is available as :func:`printed_lagrangian` for comparison only.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..spatial import quaternion as quat
from ..spatial import rotation as _rot

__all__ = [
    "RotorBody",
    "rotor_body_from_parts",
    "S_matrix",
    "Gamma_matrix",
    "Xi_matrix",
    "Upsilon_matrix",
    "kinetic_energy",
    "lagrangian",
    "printed_lagrangian",
    "generalized_forces",
    "reduced_generalized_forces",
    "eom",
    "eom_closed_form",
    "state_derivative",
    "world_angular_momentum",
]


# --------------------------------------------------------------------------------------------
# Quaternion-rate maps in the papers' names, from the one implementation in spatial.rotation.
# --------------------------------------------------------------------------------------------


def S_matrix(q):
    """omega_body = S(q) qdot; Wu et al. (2019) eq. 5/11 reordered to scalar-first: (4,) -> (3, 4)."""
    return 2.0 * _rot.G(q)


def Gamma_matrix(q):
    """qdot = Gamma(q) omega_body; Wu et al. (2019) eq. 8/32 reordered to scalar-first: (4,) -> (4, 3)."""
    return 0.5 * _rot.G(q).T


def Xi_matrix(q):
    """Constraint matrix of eq. 12, Xi(q) pdot = 0 for p = [r, q]: (4,) -> (1, 7)."""
    return jnp.concatenate([jnp.zeros(3, q.dtype), 2.0 * q])[None, :]


def Upsilon_matrix(q):
    """Upsilon = diag(I3, Gamma(q)) (eq. 31): pdot = Upsilon v, Xi Upsilon = 0. (4,) -> (7, 6)."""
    top = jnp.concatenate([jnp.eye(3), jnp.zeros((3, 3))], axis=1)
    bot = jnp.concatenate([jnp.zeros((4, 3)), Gamma_matrix(q)], axis=1)
    return jnp.concatenate([top, bot], axis=0)


# --------------------------------------------------------------------------------------------
# The body.
# --------------------------------------------------------------------------------------------


class RotorBody(eqx.Module):
    """Rigid body with axisymmetric rotors, all quantities relative to the reference point O.

    mass: () total; com: (3,) composite centre of mass rel. O in B; inertia: (3, 3) of body and
    rotors about O in B; rotor_axis: (nr, 3) unit; rotor_jax: (nr,) axial inertia; gravity: (3,)
    world gravity vector.
    """

    mass: jnp.ndarray
    com: jnp.ndarray
    inertia: jnp.ndarray
    rotor_axis: jnp.ndarray
    rotor_jax: jnp.ndarray
    gravity: jnp.ndarray

    def spin_momentum(self, Omega):
        """sum_k h_k = sum_k Jax_k Omega_k a_k in body axes: (nr,) -> (3,)."""
        return jnp.sum((self.rotor_jax * Omega)[:, None] * self.rotor_axis, axis=0)


def _parallel_axis(m, d):
    return m * (jnp.dot(d, d) * jnp.eye(3) - jnp.outer(d, d))


def rotor_body_from_parts(body_mass, body_inertia, rotor_mass, rotor_pos, rotor_axis, rotor_jax,
                          rotor_jt, gravity, body_com=None) -> RotorBody:
    """Composite mass properties about O (= the airframe's centre of mass unless ``body_com``).

    body_inertia is about the airframe's own centre of mass; each rotor (mass m_k at rotor_pos_k,
    axial inertia Jax_k about a_k, transverse Jt_k) adds Jax a a^T + Jt (I - a a^T) plus its
    parallel-axis term m_k (|d|^2 I - d d^T). Works under jit/grad (pure jnp).
    """
    body_com = jnp.zeros(3) if body_com is None else jnp.asarray(body_com)
    rotor_axis = rotor_axis / jnp.linalg.norm(rotor_axis, axis=1, keepdims=True)
    m = body_mass + jnp.sum(rotor_mass)
    c = (body_mass * body_com + jnp.sum(rotor_mass[:, None] * rotor_pos, axis=0)) / m
    J = body_inertia + _parallel_axis(body_mass, body_com)
    for k in range(rotor_pos.shape[0]):
        a = rotor_axis[k]
        Ik = rotor_jax[k] * jnp.outer(a, a) + rotor_jt[k] * (jnp.eye(3) - jnp.outer(a, a))
        J = J + Ik + _parallel_axis(rotor_mass[k], rotor_pos[k])
    return RotorBody(m, c, J, rotor_axis, rotor_jax, jnp.asarray(gravity))


# --------------------------------------------------------------------------------------------
# Energies.
# --------------------------------------------------------------------------------------------


def kinetic_energy(body: RotorBody, p, pdot, Omega):
    """T(p, pdot) of body + rotors (see module docstring): (7,), (7,), (nr,) -> ()."""
    q = p[3:]
    V = pdot[:3]
    w = S_matrix(q) @ pdot[3:]
    R = quat.to_rotmat(q)
    m, c, J = body.mass, body.com, body.inertia
    h = body.spin_momentum(Omega)
    return (
        0.5 * m * jnp.dot(V, V)
        + m * jnp.dot(V, R @ jnp.cross(w, c))
        + 0.5 * jnp.dot(w, J @ w)
        + jnp.dot(w, h)
        + 0.5 * jnp.sum(body.rotor_jax * Omega * Omega)
    )


def potential_energy(body: RotorBody, p):
    R = quat.to_rotmat(p[3:])
    return -body.mass * jnp.dot(body.gravity, p[:3] + R @ body.com)


def lagrangian(body: RotorBody, p, pdot, Omega):
    """L = T - U (eq. 23 with the kinetic energy derived in this module)."""
    return kinetic_energy(body, p, pdot, Omega) - potential_energy(body, p)


def printed_lagrangian(m, J_sum, rotor_j, g, p, pdot, Omega):
    """The paper's eqs. 13-19 taken literally (for the report only): J = J_b + J_c + J_d with no
    parallel-axis terms, A = 1/2 sum J Omega^2 independent of omega, U = m g e3.r with e3 = z."""
    w = S_matrix(p[3:]) @ pdot[3:]
    V = pdot[:3]
    A = 0.5 * jnp.sum(rotor_j * Omega * Omega)
    return 0.5 * m * jnp.dot(V, V) + 0.5 * jnp.dot(w, J_sum @ w) + A - m * g * p[2]


# --------------------------------------------------------------------------------------------
# Generalized forces by virtual work (eqs. 20-21, 37-39).
# --------------------------------------------------------------------------------------------


def generalized_forces(q, f_body, points, m_body):
    """tau (7,) of eq. 20: forces f_body (nf, 3) in B at points (nf, 3) in B (rel. O) and the
    total pure moment m_body (3,) in B (eq. 21's M_sum).

    delta W = sum_k (R f_k).delta(r + R(q) rho_k) + m.(S(q) delta q), hence
    tau_r = R sum f_k,   tau_q = S^T m + sum_k (d(R(q) rho_k)/dq)^T R f_k.
    """
    R = quat.to_rotmat(q)
    f_world = f_body @ R.T  # (nf, 3)
    tau_r = jnp.sum(f_world, axis=0)

    def arm_term(rho, fw):
        dRrho_dq = jax.jacfwd(lambda qq: quat.to_rotmat(qq) @ rho)(q)  # (3, 4)
        return dRrho_dq.T @ fw

    tau_q = S_matrix(q).T @ m_body + jnp.sum(jax.vmap(arm_term)(points, f_world), axis=0)
    return jnp.concatenate([tau_r, tau_q])


def reduced_generalized_forces(q, f_body, points, m_body):
    """Upsilon^T tau in closed form (eq. 39 corrected): [R sum f; m + sum rho x f] (6,).

    The identity Gamma^T (d(R rho)/dq)^T R f = rho x f (eq. 38) holds on the unit sphere.
    """
    R = quat.to_rotmat(q)
    return jnp.concatenate(
        [R @ jnp.sum(f_body, axis=0), m_body + jnp.sum(jnp.cross(points, f_body), axis=0)]
    )


# --------------------------------------------------------------------------------------------
# Equations of motion.
# --------------------------------------------------------------------------------------------


def eom(body: RotorBody, p, v, tau, Omega, Omega_dot=None, L=None):
    """vdot (6,) from Lagrange's equations with multipliers eliminated (eqs. 22-36), by autodiff.

    With pdot = Upsilon(p) v and pddot = Upsilon vdot + (dUpsilon/dp . pdot) v:

        Upsilon^T L_pdpd Upsilon vdot = Upsilon^T (tau + L_p - L_pdp pdot - L_pdOmega Omega_dot
                                                  - L_pdpd (dUpsilon . pdot) v)

    and Upsilon^T Xi^T lambda = 0 drops the multiplier. ``L(p, pdot, Omega)`` defaults to
    :func:`lagrangian` of ``body``; any Lagrangian in [r, q] coordinates works.
    """
    if L is None:
        L = lambda pp, pd, Om: lagrangian(body, pp, pd, Om)
    if Omega_dot is None:
        Omega_dot = jnp.zeros_like(Omega)
    q = p[3:]
    Ups = Upsilon_matrix(q)
    pdot = Ups @ v
    dL_dpd = lambda pp, pd, Om: jax.grad(L, argnums=1)(pp, pd, Om)
    Lp = jax.grad(L, argnums=0)(p, pdot, Omega)
    Mpp = jax.jacfwd(dL_dpd, argnums=1)(p, pdot, Omega)  # (7, 7)
    _, Lpdp_pdot = jax.jvp(lambda pp: dL_dpd(pp, pdot, Omega), (p,), (pdot,))
    _, LpdOm = jax.jvp(lambda Om: dL_dpd(p, pdot, Om), (Omega,), (Omega_dot,))
    _, Upsdot_v = jax.jvp(lambda pp: Upsilon_matrix(pp[3:]) @ v, (p,), (pdot,))
    rhs = Ups.T @ (tau + Lp - Lpdp_pdot - LpdOm - Mpp @ Upsdot_v)
    Mred = Ups.T @ Mpp @ Ups
    return jnp.linalg.solve(Mred, rhs)


def eom_closed_form(body: RotorBody, q, v, force_world, moment_body, Omega, Omega_dot=None):
    """The reduced equations written out (the corrected eq. 40): (4,), (6,) -> vdot (6,).

        m Vdot - m R [c]x omegadot          = F + m g - m R (omega x (omega x c))
        m [c]x R^T Vdot + J_O omegadot       = M_O + c x R^T (m g) - omega x (J_O omega + sum h)
                                               - sum Jax Omegadot a

    force_world: applied force (world); moment_body: applied moment about O in B (gravity is
    added here from body.gravity). The rotor gyroscopic moment is -omega x sum h_k.
    """
    if Omega_dot is None:
        Omega_dot = jnp.zeros_like(Omega)
    R = quat.to_rotmat(q)
    V, w = v[:3], v[3:]
    m, c, J, g = body.mass, body.com, body.inertia, body.gravity
    h = body.spin_momentum(Omega)
    hdot = body.spin_momentum(Omega_dot)
    Cx = _rot.skew(c)
    M = jnp.block([[m * jnp.eye(3), -m * R @ Cx], [m * Cx @ R.T, J]])
    rhs_lin = force_world + m * g - m * R @ jnp.cross(w, jnp.cross(w, c))
    rhs_ang = moment_body + jnp.cross(c, R.T @ (m * g)) - jnp.cross(w, J @ w + h) - hdot
    del V
    return jnp.linalg.solve(M, jnp.concatenate([rhs_lin, rhs_ang]))


def state_derivative(p, v, vdot):
    """xdot for x = [p (7), v (6)]: pdot = Upsilon v (the quaternion is not projected)."""
    return jnp.concatenate([Upsilon_matrix(p[3:]) @ v, vdot])


def world_angular_momentum(body: RotorBody, p, v, Omega):
    """Angular momentum of body + rotors about the world origin, world axes (3,)."""
    r, q = p[:3], p[3:]
    R = quat.to_rotmat(q)
    V, w = v[:3], v[3:]
    m, c = body.mass, body.com
    rG = r + R @ c
    vG = V + R @ jnp.cross(w, c)
    # about G: J_G = J_O - m(|c|^2 I - c c^T)
    JG = body.inertia - _parallel_axis(m, c)
    return jnp.cross(rG, m * vG) + R @ (JG @ w + body.spin_momentum(Omega))


_ = np  # numpy kept for builders in callers
