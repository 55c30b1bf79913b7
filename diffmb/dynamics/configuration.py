"""Configuration-space maps: q̇(q, v), exact integration, normalisation and difference.

The generalized positions q (nq,) and velocities v (nv,) follow MuJoCo's layout (see
:mod:`diffmb.model`). Per node:

=========  =====  =====  ==========================================================
node       q      v      q̇ from v
=========  =====  =====  ==========================================================
hinge      1      1      q̇ = v
slide      1      1      q̇ = v
trans3     3      3      q̇ = v   (a free joint's position, world frame)
ball       4      3      q̇ = ½ q ⊗ [0, ω]   (ω in the node frame, Hamilton, [w,x,y,z])
=========  =====  =====  ==========================================================

``integrate(model, q, v, dt)`` is the exact flow of q̇ for constant v over dt: translations add
``v dt``, quaternions are multiplied on the right by ``exp(ω dt)`` (so they stay on the unit
sphere to rounding). ``difference(model, q0, q1)`` is its inverse at dt = 1:
``integrate(model, q0, difference(model, q0, q1), 1.0) == q1`` (MuJoCo's ``mj_differentiatePos``
convention: the ball part is the body-frame rotation vector ``log(q0⁻¹ ⊗ q1)``).
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import BALL, Model
from ..spatial import quaternion as quat

__all__ = ["qdot", "integrate", "normalize", "difference", "ball_q_slices"]

_NQ = {"hinge": 1, "slide": 1, "ball": 4, "trans3": 3}
_NV = {"hinge": 1, "slide": 1, "ball": 3, "trans3": 3}


def _segments(model: Model):
    """Node indices in q order (the builder appends nodes in q order; checked here once)."""
    order = sorted(range(model.n_nodes), key=lambda i: model.node_q[i])
    qpos = 0
    for i in order:
        if model.node_q[i] != qpos:
            raise ValueError(f"{model.name}: q layout is not contiguous at node {i}")
        qpos += _NQ[model.node_type[i]]
    return order


def ball_q_slices(model: Model):
    """Static list of (start, stop) q ranges holding unit quaternions."""
    return [
        (model.node_q[i], model.node_q[i] + 4)
        for i in range(model.n_nodes)
        if model.node_type[i] == BALL
    ]


def qdot(model: Model, q, v):
    """Time derivative of q for velocity v: (nq,), (nv,) -> (nq,).

    Ball nodes use the exact quaternion-rate map q̇ = ½ q ⊗ [0, ω]; it is linear in q, so it is
    tangent to the sphere |q| = const (d|q|²/dt = 0 exactly) whatever the norm of q.
    """
    parts = []
    for i in _segments(model):
        t, a = model.node_type[i], model.node_v[i]
        if t == BALL:
            qi = q[model.node_q[i] : model.node_q[i] + 4]
            w = v[a : a + 3]
            parts.append(0.5 * quat.mul(qi, jnp.concatenate([jnp.zeros(1, w.dtype), w])))
        else:
            parts.append(v[a : a + _NV[t]])
    return jnp.concatenate(parts)


def integrate(model: Model, q, v, dt):
    """Exact flow for constant v over dt: (nq,), (nv,), () -> (nq,). Quaternions stay unit."""
    parts = []
    for i in _segments(model):
        t, a, s = model.node_type[i], model.node_v[i], model.node_q[i]
        if t == BALL:
            parts.append(quat.mul(q[s : s + 4], quat.exp(v[a : a + 3] * dt)))
        else:
            k = _NV[t]
            parts.append(q[s : s + k] + v[a : a + k] * dt)
    return jnp.concatenate(parts)


def normalize(model: Model, q):
    """Project every ball quaternion of q onto the unit sphere: (nq,) -> (nq,)."""
    parts = []
    for i in _segments(model):
        t, s = model.node_type[i], model.node_q[i]
        seg = q[s : s + _NQ[t]]
        parts.append(quat.normalize(seg) if t == BALL else seg)
    return jnp.concatenate(parts)


def difference(model: Model, q0, q1):
    """Velocity v (nv,) that moves q0 to q1 in unit time (inverse of :func:`integrate`).

    Ball parts: ``log(q0⁻¹ ⊗ q1)`` (rotation vector in the node frame, shortest arc); others
    ``q1 - q0``.
    """
    parts = []
    for i in sorted(range(model.n_nodes), key=lambda i: model.node_v[i]):
        t, s = model.node_type[i], model.node_q[i]
        if t == BALL:
            parts.append(quat.log(quat.mul(quat.conj(q0[s : s + 4]), q1[s : s + 4])))
        else:
            k = _NV[t]
            parts.append(q1[s : s + k] - q0[s : s + k])
    return jnp.concatenate(parts)
