"""Configuration-space maps: q̇(q, v), exact integration, normalisation and difference.

The generalized positions q (nq,) and velocities v (nv,) follow MuJoCo's layout (see
:mod:`diffmb.model`; the widths are :class:`diffmb.model.JointType`'s). Per node:

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
convention: the ball part is the body-frame rotation vector ``log(q0⁻¹ ⊗ q1)``,
:func:`diffmb.spatial.quaternion.difference`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..model import BALL, JointType, Model
from ..spatial import quaternion as quat
from ._world import take

__all__ = ["qdot", "integrate", "normalize", "difference", "ball_q_slices", "ball_layout",
           "unit_quaternions"]


def _segments(model: Model):
    """Node indices in q order (the builder appends nodes in q order; checked here once)."""
    order = sorted(range(model.n_nodes), key=lambda i: model.node_q[i])
    qpos = 0
    for i in order:
        if model.node_q[i] != qpos:
            raise ValueError(f"{model.name}: q layout is not contiguous at node {i}")
        qpos += JointType(model.node_type[i]).nq
    return order


def ball_q_slices(model: Model):
    """Static list of (start, stop) q ranges holding unit quaternions."""
    return [
        (model.node_q[i], model.node_q[i] + 4)
        for i in range(model.n_nodes)
        if model.node_type[i] == BALL
    ]


class BallLayout:
    """Static index tables of a model's ball quaternions, so that q̇ and the projection onto
    |q| = 1 treat all balls in one vectorised operation (few kernels, cheap transposes).

    ``q_idx`` (nb, 4) and ``v_idx`` (nb, 3): q and v entries of each ball; ``q_ball`` (nq,):
    the ball of each q entry, nb for entries that are not quaternions; ``qdot_src`` (nq,) or
    None: where each entry of q̇ comes from in [vec(½ q ⊗ ω) (4 nb), v (nv)].
    """

    def __init__(self, model: Model):
        _segments(model)  # checks the layout
        balls = [i for i in range(model.n_nodes) if model.node_type[i] == BALL]
        nb = len(balls)
        self.nb = nb
        self.q_idx = np.array([model.node_q[i] + np.arange(4) for i in balls], int).reshape(nb, 4)
        self.v_idx = np.array([model.node_v[i] + np.arange(3) for i in balls], int).reshape(nb, 3)
        self.q_ball = np.full(model.nq, nb, int)
        src = np.zeros(model.nq, int)
        for b in range(nb):
            self.q_ball[self.q_idx[b]] = b
            src[self.q_idx[b]] = 4 * b + np.arange(4)
        for i in range(model.n_nodes):
            if model.node_type[i] != BALL:
                k = JointType(model.node_type[i]).nq
                src[model.node_q[i] + np.arange(k)] = 4 * nb + model.node_v[i] + np.arange(k)
        self.qdot_src = None if np.array_equal(src, np.arange(4 * nb)) else src


_LAYOUTS: dict = {}


def ball_layout(model: Model) -> BallLayout:
    key = (model.node_type, model.node_q, model.node_v, model.nq, model.nv)
    if key not in _LAYOUTS:
        _LAYOUTS[key] = BallLayout(model)
    return _LAYOUTS[key]


def unit_quaternions(layout: BallLayout, q):
    """q with every ball quaternion divided by its norm (other entries unchanged)."""
    if layout.nb == 0:
        return q
    if layout.qdot_src is None:  # q is nothing but the quaternions, back to back
        Q = q.reshape(*q.shape[:-1], layout.nb, 4)
        return (Q / jnp.sqrt(jnp.sum(Q * Q, axis=-1, keepdims=True))).reshape(q.shape)
    n2 = jnp.sum(q[..., layout.q_idx] ** 2, axis=-1)  # (..., nb)
    scale = jnp.concatenate([1.0 / jnp.sqrt(n2), jnp.ones((*n2.shape[:-1], 1), q.dtype)], -1)
    return q * scale[..., layout.q_ball]


def qdot(model: Model, q, v):
    """Time derivative of q for velocity v: (nq,), (nv,) -> (nq,).

    Ball nodes use the exact quaternion-rate map q̇ = ½ q ⊗ [0, ω]; it is linear in q, so it is
    tangent to the sphere |q| = const (d|q|²/dt = 0 exactly) whatever the norm of q.
    """
    lay = ball_layout(model)
    if lay.nb == 0:
        return v
    w = take(v, lay.v_idx)
    qd = 0.5 * quat.mul(take(q, lay.q_idx),
                        jnp.concatenate([jnp.zeros((lay.nb, 1), v.dtype), w], 1))
    if lay.qdot_src is None:
        return qd.reshape(-1)
    return jnp.concatenate([qd.reshape(-1), v])[lay.qdot_src]


def integrate(model: Model, q, v, dt):
    """Exact flow for constant v over dt: (nq,), (nv,), () -> (nq,). Quaternions stay unit."""
    parts = []
    for i in _segments(model):
        t, a, s = model.node_type[i], model.node_v[i], model.node_q[i]
        if t == BALL:
            parts.append(quat.integrate(q[s : s + 4], v[a : a + 3], dt))
        else:
            k = JointType(t).nv
            parts.append(q[s : s + k] + v[a : a + k] * dt)
    return jnp.concatenate(parts)


def normalize(model: Model, q):
    """Project every ball quaternion of q onto the unit sphere: (nq,) -> (nq,)."""
    return unit_quaternions(ball_layout(model), q)


def difference(model: Model, q0, q1):
    """Velocity v (nv,) that moves q0 to q1 in unit time (inverse of :func:`integrate`).

    Ball parts: ``log(q0⁻¹ ⊗ q1)`` (rotation vector in the node frame, shortest arc); others
    ``q1 - q0``.
    """
    parts = []
    for i in sorted(range(model.n_nodes), key=lambda i: model.node_v[i]):
        t, s = model.node_type[i], model.node_q[i]
        if t == BALL:
            parts.append(quat.difference(q0[s : s + 4], q1[s : s + 4]))
        else:
            k = JointType(t).nv
            parts.append(q1[s : s + k] - q0[s : s + k])
    return jnp.concatenate(parts)
