"""Unit quaternions, scalar-first ``[w, x, y, z]``, Hamilton product, rotating body -> world.

This is the one place where the quaternion convention of diffmb is written down. Papers that
write quaternions scalar-last (Wu et al. (2019): ``[sigma, eta]``) convert at the study boundary with
:func:`from_scalar_last` / :func:`to_scalar_last`.

All functions take arrays whose last axis is 4 (or 3 for vectors) and broadcast over leading
axes. The exponential and logarithm are safe (finite value and gradient) at zero angle.
"""

from __future__ import annotations

import jax.numpy as jnp

from .safe import safe_norm

__all__ = [
    "identity",
    "mul",
    "conj",
    "inverse",
    "normalize",
    "to_rotmat",
    "from_rotmat",
    "rotate",
    "rotate_inv",
    "from_axis_angle",
    "to_axis_angle",
    "exp",
    "log",
    "integrate",
    "difference",
    "from_scalar_last",
    "to_scalar_last",
]


def identity(dtype=jnp.float64):
    return jnp.array([1.0, 0.0, 0.0, 0.0], dtype=dtype)


def mul(p, q):
    """Hamilton product p ⊗ q: (4,), (4,) -> (4,)."""
    pw, pv = p[..., :1], p[..., 1:]
    qw, qv = q[..., :1], q[..., 1:]
    w = pw * qw - jnp.sum(pv * qv, axis=-1, keepdims=True)
    v = pw * qv + qw * pv + jnp.cross(pv, qv)
    return jnp.concatenate([w, v], axis=-1)


def conj(q):
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def inverse(q):
    return conj(q) / jnp.sum(q * q, axis=-1, keepdims=True)


def normalize(q):
    return q / safe_norm(q, axis=-1, keepdims=True)


def to_rotmat(q):
    """Rotation matrix R (body -> world) of a unit quaternion: (..., 4) -> (..., 3, 3)."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    ww, xx, yy, zz = w * w, x * x, y * y, z * z
    wx, wy, wz = w * x, w * y, w * z
    xy, xz, yz = x * y, x * z, y * z
    r = [
        [ww + xx - yy - zz, 2 * (xy - wz), 2 * (xz + wy)],
        [2 * (xy + wz), ww - xx + yy - zz, 2 * (yz - wx)],
        [2 * (xz - wy), 2 * (yz + wx), ww - xx - yy + zz],
    ]
    return jnp.stack([jnp.stack(row, axis=-1) for row in r], axis=-2)


def from_rotmat(R):
    """Unit quaternion (w >= 0) of a rotation matrix, Shepperd's method: (3, 3) -> (4,).

    Pure JAX (jit/vmap/grad), and accepts numpy input (the model builders call it outside jit).
    All four candidate formulas are evaluated with their square roots clamped away from zero and
    the best-conditioned one (largest ``1 ± r00 ± r11 ± r22``) is selected, so value and gradient
    stay finite.
    """
    R = jnp.asarray(R)
    r00, r11, r22 = R[0, 0], R[1, 1], R[2, 2]
    t = jnp.stack(
        [
            1.0 + r00 + r11 + r22,
            1.0 + r00 - r11 - r22,
            1.0 - r00 + r11 - r22,
            1.0 - r00 - r11 + r22,
        ]
    )
    s = 2.0 * jnp.sqrt(jnp.maximum(t, 1e-12))  # s_k = 4 |q_k| on the chosen branch
    a = R[2, 1] - R[1, 2]
    b = R[0, 2] - R[2, 0]
    c = R[1, 0] - R[0, 1]
    d = R[0, 1] + R[1, 0]
    e = R[0, 2] + R[2, 0]
    f = R[1, 2] + R[2, 1]
    cands = jnp.stack(
        [
            jnp.stack([0.25 * s[0], a / s[0], b / s[0], c / s[0]]),
            jnp.stack([a / s[1], 0.25 * s[1], d / s[1], e / s[1]]),
            jnp.stack([b / s[2], d / s[2], 0.25 * s[2], f / s[2]]),
            jnp.stack([c / s[3], e / s[3], f / s[3], 0.25 * s[3]]),
        ]
    )
    k = jnp.argmax(t)
    q = jnp.take(cands, k, axis=0)
    q = q / safe_norm(q)
    return jnp.where(q[0] < 0.0, -q, q)


def rotate(q, v):
    """R(q) v without forming R: (4,), (3,) -> (3,)."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * jnp.cross(u, v)
    return v + w * t + jnp.cross(u, t)


def rotate_inv(q, v):
    """R(q)^T v."""
    return rotate(conj(q), v)


def from_axis_angle(axis, angle):
    """Rotation by ``angle`` about unit ``axis``: (3,), () -> (4,)."""
    angle = jnp.asarray(angle)[..., None]
    return jnp.concatenate([jnp.cos(angle / 2), jnp.sin(angle / 2) * axis], axis=-1)


def exp(phi):
    """Quaternion of the rotation vector phi (angle * axis); exact and smooth at phi = 0."""
    theta2 = jnp.sum(phi * phi, axis=-1, keepdims=True)
    small = theta2 < 1e-12
    safe_t2 = jnp.where(small, 1.0, theta2)
    theta = jnp.sqrt(safe_t2)
    # sin(θ/2)/θ with its Taylor series near zero (double-where keeps the gradient finite).
    k = jnp.where(small, 0.5 - theta2 / 48.0, jnp.sin(theta / 2) / theta)
    c = jnp.where(small, 1.0 - theta2 / 8.0, jnp.cos(theta / 2))
    return jnp.concatenate([c, k * phi], axis=-1)


def log(q):
    """Rotation vector of a unit quaternion (angle in [0, pi]); smooth at the identity."""
    q = jnp.where(q[..., :1] < 0, -q, q)
    w, u = q[..., :1], q[..., 1:]
    s2 = jnp.sum(u * u, axis=-1, keepdims=True)
    small = s2 < 1e-12
    s = jnp.sqrt(jnp.where(small, 1.0, s2))
    angle = 2.0 * jnp.arctan2(s, w)
    k = jnp.where(small, 2.0 / w * (1.0 - s2 / (3.0 * w * w)), angle / s)
    return k * u


def to_axis_angle(q):
    phi = log(q)
    angle = safe_norm(phi, axis=-1)
    axis = phi / jnp.where(angle > 0, angle, 1.0)[..., None]
    return axis, angle


def integrate(q, omega_body, dt):
    """Exact step of q̇ = ½ q ⊗ [0, ω] for constant body rate ω over dt (stays on the sphere)."""
    return mul(q, exp(omega_body * dt))


def difference(q0, q1):
    """Body-frame rotation vector ``log(q0⁻¹ ⊗ q1)`` from q0 to q1: (..., 4), (..., 4) -> (..., 3).

    The inverse of :func:`integrate` at ``dt = 1``: ``mul(q0, exp(difference(q0, q1))) == q1``
    (MuJoCo's ``mju_subQuat(q1, q0)``; q0 unit).
    """
    return log(mul(conj(q0), q1))


def from_scalar_last(q):
    """``[x, y, z, w]`` (Wu et al. (2019)'s ``[η, σ]`` ordering) -> ``[w, x, y, z]``."""
    return jnp.concatenate([q[..., 3:], q[..., :3]], axis=-1)


def to_scalar_last(q):
    return jnp.concatenate([q[..., 1:], q[..., :1]], axis=-1)
