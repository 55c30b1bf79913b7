"""Kane's equations for a rigid body carrying spinning rotors, body by body (Wu et al. (2019) eqs. 43-45).

Bodies j = 0..nb-1 (j = 0 the airframe b, then rotors c, d, ...) share the generalized speeds
u = [V, omega] (6,): V = rdot of the reference point O (world), omega the airframe's angular
velocity in its frame B. Rotor j spins at a prescribed rate Omega_j about its axis a_j (B) and is
axisymmetric, so its inertia is constant in B. For each body

    v_j   = V + R (omega x rho_j)        partial velocities      dv_j/du = [I, -R [rho_j]x]  (3, 6)
    w_j   = omega + Omega_j a_j          partial ang. velocities dw_j/du = [0, I]             (3, 6)
    a_j   = dv_j/du udot + R (omega x (omega x rho_j))
    alpha_j = dw_j/du udot + Omegadot_j a_j + omega x Omega_j a_j

and K* + K = 0 (eq. 45) with
    K* = sum_j (dv_j/du)^T (-m_j a_j) + (dw_j/du)^T (-(I_j alpha_j + w_j x I_j w_j))   (eq. 43)
    K  = sum_j (dv_j/du)^T (F_j + m_j g) + (dw_j/du)^T M_j                              (eq. 44)

Forces F_j act at body j's centre of mass (world axes); moments M_j are in B. The rotor motor
torques are internal (equal and opposite on b and j, same partial angular velocity) and drop out.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ..spatial import quaternion as quat
from ..spatial.rotation import skew

__all__ = ["KaneSystem", "rotor_partial_velocities", "kane_eom", "kane_mass_matrix"]


class KaneSystem(eqx.Module):
    """mass (nb,); inertia (nb, 3, 3) about each body's own centre of mass, B axes;
    pos (nb, 3) centre of mass rel. O in B; spin_axis (nb, 3) (zero for the airframe);
    gravity (3,) world."""

    mass: jnp.ndarray
    inertia: jnp.ndarray
    pos: jnp.ndarray
    spin_axis: jnp.ndarray
    gravity: jnp.ndarray


def rotor_partial_velocities(sys: KaneSystem, q):
    """(dv_j/du (nb, 3, 6) in world axes, dw_j/du (nb, 3, 6) in B axes)."""
    R = quat.to_rotmat(q)

    def one(rho):
        Vp = jnp.concatenate([jnp.eye(3), -R @ skew(rho)], axis=1)
        Wp = jnp.concatenate([jnp.zeros((3, 3)), jnp.eye(3)], axis=1)
        return Vp, Wp

    return jax.vmap(one)(sys.pos)


def kane_mass_matrix(sys: KaneSystem, q):
    Vp, Wp = rotor_partial_velocities(sys, q)
    return jnp.einsum("j,jai,jak->ik", sys.mass, Vp, Vp) + jnp.einsum(
        "jai,jab,jbk->ik", Wp, sys.inertia, Wp
    )


def kane_eom(sys: KaneSystem, q, u, F_world, M_body, Omega, Omega_dot=None):
    """udot (6,) from K* + K = 0. F_world (nb, 3) at each centre of mass; M_body (nb, 3) in B;
    Omega, Omega_dot (nb,) spin rates (entry 0, the airframe, is ignored if its axis is 0)."""
    if Omega_dot is None:
        Omega_dot = jnp.zeros_like(Omega)
    R = quat.to_rotmat(q)
    w = u[3:]
    Vp, Wp = rotor_partial_velocities(sys, q)

    def remainder(m, I, rho, a, Om, Omd, F, M):
        # the parts of -m a_j and -(I alpha + w x I w) that do not contain udot, plus K_j
        wj = w + Om * a
        acc0 = R @ jnp.cross(w, jnp.cross(w, rho))
        alpha0 = Omd * a + jnp.cross(w, Om * a)
        lin = F + m * sys.gravity - m * acc0
        ang = M - I @ alpha0 - jnp.cross(wj, I @ wj)
        return lin, ang

    lin, ang = jax.vmap(remainder)(
        sys.mass, sys.inertia, sys.pos, sys.spin_axis, Omega, Omega_dot, F_world, M_body
    )
    rhs = jnp.einsum("jai,ja->i", Vp, lin) + jnp.einsum("jai,ja->i", Wp, ang)
    return jnp.linalg.solve(kane_mass_matrix(sys, q), rhs)
