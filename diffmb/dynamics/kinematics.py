"""World-frame kinematics: poses, velocities, accelerations, partial velocities and Jacobians.

Everything here is expressed in the world frame, the frame of the papers' partial velocities
(Xu et al. (2021) eq. 18, Xu et al. (2018) §3): for dof r of node j with world axis ``a`` (angular column) and
``l`` (linear column), the partial angular velocity of any descendant body is ``a`` and the
partial velocity of a point x on it is ``a × (x − o_j) + l``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from ..model import BALL, HINGE, SLIDE, Model
from ._world import mm, mv, topology, world_poses

__all__ = [
    "WorldKinematics",
    "world_kinematics",
    "body_poses",
    "body_pose",
    "frame_point",
    "point_jacobian",
    "body_jacobian",
    "body_velocity",
    "center_of_mass",
    "kinetic_energy",
    "potential_energy",
    "momentum",
    "body_com_world",
]


class WorldKinematics(NamedTuple):
    R: list  # node world rotations (3, 3)
    o: list  # node origins (3,)
    w: list  # angular velocities (3,)
    do: list  # origin velocities (3,)
    dw: list  # angular accelerations (3,) (given qdd; velocity products only if qdd = 0)
    ddo: list  # origin accelerations (3,), gravity not included
    cols: list  # per node: (A (3, k), L (3, k)) world dof columns


def _dof_columns(model: Model, i, R_node, R_parent):
    t = model.node_type[i]
    z = jnp.zeros((3, 1))
    if t == HINGE:
        return mv(R_node, model.node_axis[i])[:, None], z
    if t == SLIDE:
        return z, mv(R_node, model.node_axis[i])[:, None]
    if t == BALL:
        return R_node, jnp.zeros((3, 3))
    return jnp.zeros((3, 3)), R_parent  # TRANS3 moves along its parent's axes


def world_kinematics(model: Model, q, v=None, qdd=None) -> WorldKinematics:
    """Recursive world-frame kinematics of every node (Xu et al. (2021)'s traversal of the span tree)."""
    v = jnp.zeros(model.nv) if v is None else v
    qdd = jnp.zeros(model.nv) if qdd is None else qdd
    topo = topology(model)
    RwB, pwB = world_poses(model, topo, q)  # breadth-first order
    Rw = [RwB[int(p)] for p in topo.pos]
    pw = [pwB[int(p)] for p in topo.pos]
    eye, z3 = jnp.eye(3), jnp.zeros(3)
    w, do, dw, ddo, cols = [], [], [], [], []
    for i in range(model.n_nodes):
        par = model.node_parent[i]
        if par < 0:
            Rp, wp, dop, dwp, ddop, op = eye, z3, z3, z3, z3, z3
        else:
            Rp, wp, dop, dwp, ddop, op = Rw[par], w[par], do[par], dw[par], ddo[par], pw[par]
        A, L = _dof_columns(model, i, Rw[i], Rp)
        k = A.shape[1]
        s0 = model.node_v[i]
        qd, qa = v[s0 : s0 + k], qdd[s0 : s0 + k]
        d = pw[i] - op
        wa, la = mv(A, qd), mv(L, qd)
        wi = wp + wa
        doi = dop + jnp.cross(wp, d) + la
        dwi = dwp + mv(A, qa) + jnp.cross(wp, wa)
        ddoi = ddop + jnp.cross(dwp, d) + jnp.cross(wp, jnp.cross(wp, d))
        ddoi = ddoi + mv(L, qa) + 2.0 * jnp.cross(wp, la)
        w.append(wi)
        do.append(doi)
        dw.append(dwi)
        ddo.append(ddoi)
        cols.append((A, L))
    return WorldKinematics(Rw, pw, w, do, dw, ddo, cols)


def support(model: Model, i):
    """Nodes from the root to node i (inclusive), root first."""
    out = []
    while i >= 0:
        out.append(i)
        i = model.node_parent[i]
    return out[::-1]


def body_com_world(model: Model, kin: WorldKinematics, b):
    node = model.body_node[b]
    c_local = model.body_pos[b] + mv(model.body_rot[b], model.body_com[b])
    if node < 0:
        return c_local
    return kin.o[node] + mv(kin.R[node], c_local)


def _point_jac(model: Model, kin: WorldKinematics, node, x):
    Jl = jnp.zeros((3, model.nv))
    Ja = jnp.zeros((3, model.nv))
    for j in support(model, node):
        A, L = kin.cols[j]
        k = A.shape[1]
        s = model.node_v[j]
        Jl = Jl.at[:, s : s + k].set(jnp.cross(A.T, x - kin.o[j]).T + L)
        Ja = Ja.at[:, s : s + k].set(A)
    return Jl, Ja


# ---- public, by name ---------------------------------------------------------------------------


def _bidx(model: Model, body):
    return model.body_index(body) if isinstance(body, str) else int(body)


def body_poses(model: Model, q):
    """World rotations (nb, 3, 3) and origins (nb, 3) of every body frame."""
    kin = world_kinematics(model, q)
    Rs, ps = [], []
    for b, node in enumerate(model.body_node):
        if node < 0:
            Rs.append(model.body_rot[b])
            ps.append(model.body_pos[b])
        else:
            Rs.append(mm(kin.R[node], model.body_rot[b]))
            ps.append(kin.o[node] + mv(kin.R[node], model.body_pos[b]))
    return jnp.stack(Rs), jnp.stack(ps)


def body_pose(model: Model, q, body):
    """(R (3, 3), p (3,)) of one body's frame in the world; ``body`` is a name or index."""
    R, p = body_poses(model, q)
    b = _bidx(model, body)
    return R[b], p[b]


def frame_point(model: Model, q, body, point=(0.0, 0.0, 0.0)):
    """World position of a point given in a body's frame."""
    R, p = body_pose(model, q, body)
    return p + mv(R, jnp.asarray(point, dtype=jnp.float64))


def point_jacobian(model: Model, q, body, point=(0.0, 0.0, 0.0)):
    """Jacobian (3, nv) of the world velocity of a point fixed in a body (point in body frame)."""
    kin = world_kinematics(model, q)
    b = _bidx(model, body)
    x = frame_point(model, q, b, point)
    node = model.body_node[b]
    if node < 0:
        return jnp.zeros((3, model.nv))
    return _point_jac(model, kin, node, x)[0]


def body_jacobian(model: Model, q, body):
    """(6, nv) world-frame Jacobian [angular; linear velocity of the body's com]."""
    kin = world_kinematics(model, q)
    b = _bidx(model, body)
    node = model.body_node[b]
    if node < 0:
        return jnp.zeros((6, model.nv))
    Jl, Ja = _point_jac(model, kin, node, body_com_world(model, kin, b))
    return jnp.concatenate([Ja, Jl], axis=0)


def body_velocity(model: Model, q, v, body, point=None):
    """World angular velocity and world linear velocity of the body's com (or of ``point``)."""
    kin = world_kinematics(model, q, v)
    b = _bidx(model, body)
    node = model.body_node[b]
    if node < 0:
        return jnp.zeros(3), jnp.zeros(3)
    x = body_com_world(model, kin, b) if point is None else frame_point(model, q, b, point)
    return kin.w[node], kin.do[node] + jnp.cross(kin.w[node], x - kin.o[node])


def center_of_mass(model: Model, q):
    kin = world_kinematics(model, q)
    m = model.body_mass
    cs = jnp.stack([body_com_world(model, kin, b) for b in range(model.n_bodies)])
    return jnp.sum(m[:, None] * cs, axis=0) / jnp.sum(m)


def _body_states(model: Model, q, v):
    kin = world_kinematics(model, q, v)
    out = []
    for b, node in enumerate(model.body_node):
        if node < 0:
            continue
        c = body_com_world(model, kin, b)
        Rb = mm(kin.R[node], model.body_rot[b])
        Iw = mm(mm(Rb, model.body_inertia[b]), Rb.T)
        vc = kin.do[node] + jnp.cross(kin.w[node], c - kin.o[node])
        out.append((model.body_mass[b], c, vc, kin.w[node], Iw))
    return out


def kinetic_energy(model: Model, q, v):
    """½ Σ (m |v_c|² + ωᵀ I ω), without armature; equals ½ vᵀ M v when armature is zero."""
    e = 0.0
    for m, _, vc, w, Iw in _body_states(model, q, v):
        e = e + 0.5 * m * jnp.dot(vc, vc) + 0.5 * jnp.dot(w, mv(Iw, w))
    return e + 0.5 * jnp.sum(model.armature * v * v)


def potential_energy(model: Model, q):
    """−Σ m gᵀ c (zero at the world origin)."""
    kin = world_kinematics(model, q)
    cs = jnp.stack([body_com_world(model, kin, b) for b in range(model.n_bodies)])
    return -jnp.sum(model.body_mass * (cs @ model.gravity))


def momentum(model: Model, q, v):
    """World linear momentum (3,) and angular momentum about the world origin (3,)."""
    p = jnp.zeros(3)
    L = jnp.zeros(3)
    for m, c, vc, w, Iw in _body_states(model, q, v):
        p = p + m * vc
        L = L + mv(Iw, w) + m * jnp.cross(c, vc)
    return p, L
