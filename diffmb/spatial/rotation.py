"""Rotations: Euler angles, quaternion-rate maps and the papers' forms of them.

Conventions (those of :mod:`diffmb.spatial.quaternion`): quaternions are scalar-first
``q = [w, x, y, z] = [w, u]``, Hamilton product, unit norm, rotating body -> world, so that
``R(q) = quaternion.to_rotmat(q)`` maps body coordinates to world coordinates.

Quaternion-rate maps (one implementation, :func:`G` and :func:`E`)
------------------------------------------------------------------
With ``qdot = 1/2 q ⊗ [0, omega_body] = 1/2 [0, omega_world] ⊗ q``::

    G(q) = [-u, w I - [u]x]   (3, 4)     omega_body  = 2 G(q) qdot,   qdot = 1/2 G(q)^T omega_body
    E(q) = [-u, w I + [u]x]   (3, 4)     omega_world = 2 E(q) qdot,   qdot = 1/2 E(q)^T omega_world

For ``|q| = 1``: ``G G^T = E E^T = I``, ``G q = E q = 0``, ``R(q) = E(q) G(q)^T``.

The papers' matrices are these in other orders (adapters below give them exactly, under names
that say what each maps):

* Wu et al. (2019) write ``q = [sigma, eta]`` scalar-last. Their eq. 5/11
  ``S = [2(eta I - sigma^x), -2 sigma]`` (3x4, ``omega = S qdot``) is ``2 G(q)`` with the columns
  in scalar-last order, and eq. 8/32 ``Gamma = 1/2 [eta I + sigma^x; -sigma^T]`` (4x3,
  ``qdot = Gamma omega``) is ``1/2 G(q)^T`` with the rows in scalar-last order;
  ``S Gamma = |q|^2 I`` (eq. 30/33) and ``S q = 0``. See :func:`body_rate_matrix_scalar_last`
  (S) and :func:`quat_rate_matrix_scalar_last` (Gamma).
* Xu & Zhong (2014) write ``q_e = [e0, e1, e2, e3]`` scalar-first, the same quaternion as ours,
  but their attitude matrix ``T`` (eq. 3) is world -> body: ``T = R(q)^T``. Their eq. 6-9
  ``omega_i = 2 q_e . G_i . qdot_e`` and ``G_e(q_e) = -[2 G_1 q_e, 2 G_2 q_e, 2 G_3 q_e]^T`` give
  ``G_e = 2 G(q)`` (body angular velocity). Their eq. 29-31 write each entry of ``T`` as the
  quadratic form ``T_ij = q_e . T_ij . q_e``; eq. 30 prints T_11, T_22, T_12, T_23 (the rest of
  eq. 30 is garbled in our copy) and eq. 31 generates the other five as matrix products. See
  :func:`body_rate_bilinear_forms` (G_1, G_2, G_3), :func:`body_rate_matrix` (G_e),
  :func:`world_to_body_rotmat` (T) and :func:`world_to_body_quadratic_forms` (the T_ij).

References: Wu, Wang, Zhou & Wang (2019), *A modeling of diamond jointed-wing configuration UAV
based on Lagrange's equation*, J. Air Force Eng. Univ. 20(5); Xu & Zhong (2014), *Symplectic
integration for multibody dynamics based on quaternion parameters*, Appl. Math. Mech. 35(10).

Euler angles
------------
* ZYX (aerospace yaw-pitch-roll): ``ypr = [psi, theta, phi]`` (yaw, pitch, roll), in the order of
  the rotation sequence, ``R = Rz(psi) Ry(theta) Rx(phi)``; ``theta`` in [-pi/2, pi/2], singular
  (gimbal lock) at ``theta = ±pi/2``. Wu et al. (2019)'s eq. 2 is this conversion written with a
  scalar-first quaternion ``[a0, a1, a2, eta] = [w, x, y, z]`` (the copy's ``theta`` carries an
  extra minus sign). :func:`rpy_from_quat` gives the same angles in roll-pitch-yaw order.
* intrinsic z-x'-z'': ``zxz = [phi, theta, psi]``, ``R = Rz(phi) Rx(theta) Rz(psi)``; ``theta`` in
  [0, pi], singular at ``theta = 0, pi``.

Angles are radians. All functions are pure JAX (jit/vmap/grad); shapes are for one rotation
(use ``vmap`` for batches), except where ``(..., k)`` says that leading axes broadcast.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import quaternion as quat
from .safe import safe_norm

__all__ = [
    "skew",
    "rot_x",
    "rot_y",
    "rot_z",
    "G",
    "E",
    "body_rate",
    "world_rate",
    "quat_rate_from_body_rate",
    "quat_rate_from_world_rate",
    "quat_from_euler_zyx",
    "rotmat_from_euler_zyx",
    "euler_zyx_from_rotmat",
    "euler_zyx_from_quat",
    "rpy_from_quat",
    "quat_from_euler_zxz",
    "rotmat_from_euler_zxz",
    "euler_zxz_from_rotmat",
    "euler_zxz_from_quat",
    "rotational_kinetic_energy",
    "body_rate_matrix_scalar_last",
    "quat_rate_matrix_scalar_last",
    "body_rate_bilinear_forms",
    "body_rate_matrix",
    "world_to_body_rotmat",
    "world_to_body_quadratic_forms",
]


# --------------------------------------------------------------------------------------------
# Elementary rotations
# --------------------------------------------------------------------------------------------


def skew(a):
    """Cross-product matrix ``[a]x`` with ``skew(a) @ b = a x b``: (..., 3) -> (..., 3, 3)."""
    x, y, z = a[..., 0], a[..., 1], a[..., 2]
    o = jnp.zeros_like(x)
    return jnp.stack(
        [jnp.stack([o, -z, y], -1), jnp.stack([z, o, -x], -1), jnp.stack([-y, x, o], -1)], -2
    )


def _axis_rot(angle, i):
    c, s = jnp.cos(angle), jnp.sin(angle)
    o, l = jnp.zeros_like(c), jnp.ones_like(c)
    if i == 0:
        rows = [[l, o, o], [o, c, -s], [o, s, c]]
    elif i == 1:
        rows = [[c, o, s], [o, l, o], [-s, o, c]]
    else:
        rows = [[c, -s, o], [s, c, o], [o, o, l]]
    return jnp.stack([jnp.stack(r, -1) for r in rows], -2)


def rot_x(angle):
    """Rotation by ``angle`` about x: (...,) -> (..., 3, 3)."""
    return _axis_rot(angle, 0)


def rot_y(angle):
    """Rotation by ``angle`` about y: (...,) -> (..., 3, 3)."""
    return _axis_rot(angle, 1)


def rot_z(angle):
    """Rotation by ``angle`` about z: (...,) -> (..., 3, 3)."""
    return _axis_rot(angle, 2)


# --------------------------------------------------------------------------------------------
# Quaternion-rate maps
# --------------------------------------------------------------------------------------------


def G(q):
    """Body-rate map ``G(q) = [-u, w I - [u]x]``: q (..., 4) -> (..., 3, 4).

    ``omega_body = 2 G(q) qdot`` and ``qdot = 1/2 G(q)^T omega_body`` (|q| = 1).
    """
    w, u = q[..., 0], q[..., 1:]
    wI = w[..., None, None] * jnp.eye(3, dtype=q.dtype)
    return jnp.concatenate([-u[..., :, None], wI - skew(u)], axis=-1)


def E(q):
    """World-rate map ``E(q) = [-u, w I + [u]x]``: q (..., 4) -> (..., 3, 4).

    ``omega_world = 2 E(q) qdot`` and ``qdot = 1/2 E(q)^T omega_world`` (|q| = 1).
    """
    w, u = q[..., 0], q[..., 1:]
    wI = w[..., None, None] * jnp.eye(3, dtype=q.dtype)
    return jnp.concatenate([-u[..., :, None], wI + skew(u)], axis=-1)


def body_rate(q, qdot):
    """``omega_body = 2 G(q) qdot`` without forming G: (..., 4), (..., 4) -> (..., 3)."""
    w, u = q[..., :1], q[..., 1:]
    wd, ud = qdot[..., :1], qdot[..., 1:]
    return 2.0 * (w * ud - wd * u - jnp.cross(u, ud))


def world_rate(q, qdot):
    """``omega_world = 2 E(q) qdot``: (..., 4), (..., 4) -> (..., 3)."""
    w, u = q[..., :1], q[..., 1:]
    wd, ud = qdot[..., :1], qdot[..., 1:]
    return 2.0 * (w * ud - wd * u + jnp.cross(u, ud))


def quat_rate_from_body_rate(q, omega_body):
    """``qdot = 1/2 G(q)^T omega = 1/2 q ⊗ [0, omega]``: (..., 4), (..., 3) -> (..., 4)."""
    w, u = q[..., :1], q[..., 1:]
    wd = -jnp.sum(u * omega_body, axis=-1, keepdims=True)
    ud = w * omega_body + jnp.cross(u, omega_body)
    return 0.5 * jnp.concatenate([wd, ud], axis=-1)


def quat_rate_from_world_rate(q, omega_world):
    """``qdot = 1/2 E(q)^T omega = 1/2 [0, omega] ⊗ q``: (..., 4), (..., 3) -> (..., 4)."""
    w, u = q[..., :1], q[..., 1:]
    wd = -jnp.sum(u * omega_world, axis=-1, keepdims=True)
    ud = w * omega_world - jnp.cross(u, omega_world)
    return 0.5 * jnp.concatenate([wd, ud], axis=-1)


def rotational_kinetic_energy(J, q, qdot):
    """``1/2 omega^T J omega`` written in quaternion rates, ``2 qdot^T G^T J G qdot``.

    This is Xu & Zhong (2014) eq. 10/12 for the rotational part (J: body-frame inertia about the centre
    of mass). J (3, 3), q (4,), qdot (4,) -> ().
    """
    Gq = G(q)
    return 2.0 * qdot @ (Gq.T @ (J @ (Gq @ qdot)))


# --------------------------------------------------------------------------------------------
# Euler angles
# --------------------------------------------------------------------------------------------


def _qaxis(angle, i):
    half = 0.5 * angle
    c, s = jnp.cos(half), jnp.sin(half)
    o = jnp.zeros_like(c)
    v = [o, o, o]
    v[i] = s
    return jnp.stack([c, *v], axis=-1)


def quat_from_euler_zyx(ypr):
    """Quaternion of ``Rz(psi) Ry(theta) Rx(phi)``: ypr = [psi, theta, phi] (..., 3) -> (..., 4)."""
    return quat.mul(
        quat.mul(_qaxis(ypr[..., 0], 2), _qaxis(ypr[..., 1], 1)), _qaxis(ypr[..., 2], 0)
    )


def rotmat_from_euler_zyx(ypr):
    """``Rz(psi) Ry(theta) Rx(phi)``: ypr = [psi, theta, phi] (..., 3) -> (..., 3, 3)."""
    return rot_z(ypr[..., 0]) @ rot_y(ypr[..., 1]) @ rot_x(ypr[..., 2])


def euler_zyx_from_rotmat(R):
    """``[psi, theta, phi]`` with ``R = Rz(psi) Ry(theta) Rx(phi)``: (..., 3, 3) -> (..., 3).

    ``psi, phi`` in (-pi, pi], ``theta`` in [-pi/2, pi/2]; singular at ``theta = ±pi/2``.
    """
    psi = jnp.arctan2(R[..., 1, 0], R[..., 0, 0])
    cth = safe_norm(jnp.stack([R[..., 0, 0], R[..., 1, 0]], -1), axis=-1)
    theta = jnp.arctan2(-R[..., 2, 0], cth)
    phi = jnp.arctan2(R[..., 2, 1], R[..., 2, 2])
    return jnp.stack([psi, theta, phi], axis=-1)


def euler_zyx_from_quat(q):
    """``[psi, theta, phi]`` (yaw, pitch, roll) of a quaternion: (..., 4) -> (..., 3).

    Any non-zero norm: ``R(q)`` scales by ``|q|^2``, which the arctangents ignore.
    """
    return euler_zyx_from_rotmat(quat.to_rotmat(q))


def rpy_from_quat(q):
    """``[phi, theta, psi]`` (roll, pitch, yaw), the ZYX angles of :func:`euler_zyx_from_quat` in
    reverse order (``R = Rz(psi) Ry(theta) Rx(phi)``): (..., 4) -> (..., 3).

    The aerospace attitude read-out of a scalar-first quaternion of any non-zero norm.
    """
    return euler_zyx_from_quat(q)[..., ::-1]


def quat_from_euler_zxz(zxz):
    """Quaternion of ``Rz(phi) Rx(theta) Rz(psi)``: zxz = [phi, theta, psi] (..., 3) -> (..., 4)."""
    return quat.mul(
        quat.mul(_qaxis(zxz[..., 0], 2), _qaxis(zxz[..., 1], 0)), _qaxis(zxz[..., 2], 2)
    )


def rotmat_from_euler_zxz(zxz):
    """``Rz(phi) Rx(theta) Rz(psi)``: zxz = [phi, theta, psi] (..., 3) -> (..., 3, 3)."""
    return rot_z(zxz[..., 0]) @ rot_x(zxz[..., 1]) @ rot_z(zxz[..., 2])


def euler_zxz_from_rotmat(R):
    """``[phi, theta, psi]`` with ``R = Rz(phi) Rx(theta) Rz(psi)``: (..., 3, 3) -> (..., 3).

    ``phi, psi`` in (-pi, pi], ``theta`` in [0, pi]; singular at ``theta = 0, pi``.
    """
    sth = safe_norm(jnp.stack([R[..., 2, 0], R[..., 2, 1]], -1), axis=-1)
    theta = jnp.arctan2(sth, R[..., 2, 2])
    phi = jnp.arctan2(R[..., 0, 2], -R[..., 1, 2])
    psi = jnp.arctan2(R[..., 2, 0], R[..., 2, 1])
    return jnp.stack([phi, theta, psi], axis=-1)


def euler_zxz_from_quat(q):
    """``[phi, theta, psi]`` (intrinsic z-x'-z'') of a unit quaternion: (..., 4) -> (..., 3)."""
    return euler_zxz_from_rotmat(quat.to_rotmat(q))


# --------------------------------------------------------------------------------------------
# The papers' matrices, in the papers' orderings
# --------------------------------------------------------------------------------------------

# scalar-first index of each scalar-last slot: q_sl = [x, y, z, w] -> q_sf[[1, 2, 3, 0]]
_SL = (1, 2, 3, 0)


def body_rate_matrix_scalar_last(q_sl):
    """Quaternion rate -> body angular velocity, scalar-last: ``omega = S qdot_sl``, (4,) -> (3, 4).

    Wu et al. (2019) eq. 5/11: ``S = [2(eta I - sigma^x), -2 sigma]``. q_sl = [sigma(3), eta] is
    scalar-last; qdot_sl in the same order. Equals ``2 G(q)`` with the columns permuted to
    scalar-last order.
    """
    return 2.0 * G(quat.from_scalar_last(q_sl))[..., _SL]


def quat_rate_matrix_scalar_last(q_sl):
    """Body angular velocity -> quaternion rate, scalar-last: ``qdot_sl = Gamma omega``,
    (4,) -> (4, 3).

    Wu et al. (2019) eq. 8/32: ``Gamma = 1/2 [eta I + sigma^x; -sigma^T]``. Equals
    ``1/2 G(q)^T`` with the rows permuted to scalar-last order; ``S Gamma = |q|^2 I``.
    """
    Gt = jnp.swapaxes(G(quat.from_scalar_last(q_sl)), -1, -2)
    return 0.5 * Gt[..., _SL, :]


def body_rate_bilinear_forms():
    """The bilinear forms giving the body angular velocity, ``omega_i = 2 q . G_i . qdot``:
    () -> (3, 4, 4).

    Xu & Zhong (2014) eq. 6-7: the constant skew matrices G_1, G_2, G_3 as printed;
    ``G(q)[i] = q^T G_i = -(G_i q)^T``.
    """
    G1 = [[0, 1, 0, 0], [-1, 0, 0, 0], [0, 0, 0, -1], [0, 0, 1, 0]]
    G2 = [[0, 0, 1, 0], [0, 0, 0, 1], [-1, 0, 0, 0], [0, -1, 0, 0]]
    G3 = [[0, 0, 0, 1], [0, 0, -1, 0], [0, 1, 0, 0], [-1, 0, 0, 0]]
    return jnp.array([G1, G2, G3], dtype=jnp.float64)


def body_rate_matrix(q_e):
    """Quaternion rate -> body angular velocity, ``omega = G_e qdot``: (4,) -> (3, 4).

    Xu & Zhong (2014) eq. 8-9: ``G_e(q_e) = -[2 G_1 q_e, 2 G_2 q_e, 2 G_3 q_e]^T = 2 G(q)``;
    ``omega' = G_e qdot_e`` is the body angular velocity; q_e is our quaternion.
    """
    return 2.0 * G(q_e)


def world_to_body_rotmat(q_e):
    """World -> body rotation matrix ``T = R(q)^T``: (..., 4) -> (..., 3, 3).

    Xu & Zhong (2014) eq. 3, where a body point is written ``x = q_c + T^T x'``.
    """
    return jnp.swapaxes(quat.to_rotmat(q_e), -1, -2)


def world_to_body_quadratic_forms():
    """Nine 4x4 matrices with ``T[i, j] = q . T_ij . q`` (``T`` of :func:`world_to_body_rotmat`):
    () -> (3, 3, 4, 4).

    Xu & Zhong (2014) eq. 29-31: T_11, T_22, T_12, T_23 are the ones printed in eq. 30; the other five come from eq. 31:
    ``T_33 = T_11 T_22``, ``T_31 = T_12 T_23``, ``T_21 = T_22 T_12 T_11``,
    ``T_13 = T_11 T_31 T_33``, ``T_32 = T_33 T_23 T_22``. The products need not be symmetric;
    only their symmetric parts enter the quadratic forms.
    """
    T11 = jnp.diag(jnp.array([1.0, 1.0, -1.0, -1.0]))
    T22 = jnp.diag(jnp.array([1.0, -1.0, 1.0, -1.0]))
    T12 = jnp.array([[0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0]], dtype=jnp.float64)
    T23 = jnp.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], dtype=jnp.float64)
    T33 = T11 @ T22
    T31 = T12 @ T23
    T21 = T22 @ T12 @ T11
    T13 = T11 @ T31 @ T33
    T32 = T33 @ T23 @ T22
    return jnp.stack(
        [jnp.stack([T11, T12, T13]), jnp.stack([T21, T22, T23]), jnp.stack([T31, T32, T33])]
    )
