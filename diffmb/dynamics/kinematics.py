"""World-frame kinematics: poses, velocities, accelerations, partial velocities and Jacobians.

Everything here is expressed in the world frame, the frame of the papers' partial velocities
(Xu et al. (2021) eq. 18, Xu et al. (2018) §3): for dof r of node j with world axis ``a`` (angular column) and
``l`` (linear column), the partial angular velocity of any descendant body is ``a`` and the
partial velocity of a point x on it is ``a × (x − o_j) + l``.

:func:`kinematics` computes the one kinematic result, :class:`KinematicsData`, that RNEA, CRBA,
ABA, the recursive Lagrange and Kane formulations, the Jacobians, energies and momentum all
read (the ``Data`` of MJX and Pinocchio, for kinematics): per node, in the breadth-first layout
of the kernels in ``_world``, world poses, motion subspaces, spatial inertias and, given v,
spatial velocities. Per-body quantities (frames, centres of mass, point velocities and
accelerations, partial velocities) are small functions of ``(model, data)``, computed on demand.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..model import Model
from ..spatial.spatial import cross_motion
from ._world import (
    Topology,
    accumulate_down,
    inertia_to_parent,
    mm,
    mmt,
    motion_subspaces,
    mv,
    node_added_inertias,
    node_dofs,
    node_inertias,
    take,
    topology,
    vdot,
    world_node_inertias,
    world_poses,
)

__all__ = [
    "KinematicsData",
    "kinematics",
    "gravity_wrenches",
    "node_accelerations",
    "body_frames",
    "body_coms",
    "body_inertias",
    "point_velocities",
    "point_accelerations",
    "partial_velocities",
    "support_mask",
    "masked_partial_velocities",
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
]


class KinematicsData(eqx.Module):
    """World-frame kinematics of every node at (q, v); see :func:`kinematics`.

    Rows are nodes in the breadth-first order of ``topo`` (the model's node i is row
    ``topo.pos[i]``); n nodes, w dof slots per node (``topo.width``). Positions and spatial
    quantities are taken about ``origin``, the first root node's origin at q, not the world
    origin: joint-space results are the same, and round-off no longer grows with the distance
    travelled (p × f terms about a far origin cancel badly). Spatial motion is [ω; v_O], force
    [n_O; f] (Featherstone), O = ``origin``.
    """

    topo: Topology = eqx.field(static=True)  # static index tables of the model's topology
    origin: jax.Array  # (3,) world position of the reference point O
    R: jax.Array  # (n, 3, 3) node rotations, node -> world
    p: jax.Array  # (n, 3) node origins relative to O, world axes
    S: jax.Array  # (n, 6, w) motion subspaces, padded columns zero
    I: jax.Array  # (n, 6, 6) spatial inertias of the bodies on each node, about O (+ added)
    vel: jax.Array | None = None  # (n, 6) spatial velocities (given v)
    c: jax.Array | None = None  # (n, 6) velocity-product accelerations Ṡ q̇ = vel × S q̇
    # (n, 6, 6) the added (fluid) part of I, None without added inertia: gravity acts on
    # I − I_added only
    I_added: jax.Array | None = None


def kinematics(model: Model, q, v=None) -> KinematicsData:
    """Node poses, motion subspaces and spatial inertias at q (nq,), and velocities if v (nv,)."""
    topo = topology(model)
    R, pw = world_poses(model, topo, q)
    origin = pw[0]
    p = pw - origin
    S = motion_subspaces(model, topo, R, p)
    I = world_node_inertias(*node_inertias(model, topo), R, p)
    Ia = None
    if model.has_added_inertia:  # static: rigid models keep the (m, h, J) kernel alone
        Ia = inertia_to_parent(node_added_inertias(model, topo), R, p)
        I = I + Ia
    if v is None:
        return KinematicsData(topo, origin, R, p, S, I, I_added=Ia)
    vJ = mv(S, node_dofs(topo, v))  # S q̇ per node
    vel = accumulate_down(topo, vJ)
    return KinematicsData(topo, origin, R, p, S, I, vel, cross_motion(vel, vJ), I_added=Ia)


def gravity_wrenches(model: Model, kin: KinematicsData):
    """I_rigid a_g per node (n, 6), a_g = [0; −g]: minus the weight of each node's bodies as a
    spatial force about ``kin.origin`` (gravity as a base acceleration on the rigid part
    only; added inertia has no weight)."""
    ag = jnp.concatenate([jnp.zeros(3), -model.gravity])
    f = mv(kin.I, jnp.broadcast_to(ag, kin.I.shape[:-1]))
    return f if kin.I_added is None else f - mv(kin.I_added, jnp.broadcast_to(ag, f.shape))


def node_accelerations(kin: KinematicsData, a):
    """Spatial accelerations of the nodes (n, 6) for joint accelerations a (nv,), gravity not
    included: sums over each node's support of S q̈ + c."""
    return accumulate_down(kin.topo, mv(kin.S, node_dofs(kin.topo, a)) + kin.c)


# ---- per body ----------------------------------------------------------------------------------


def _rows(kin: KinematicsData, x, bodies=None):
    """Rows of a node array x (n, ...) for the bodies (all, or the static index list ``bodies``);
    zeros for a body on the world."""
    idx = kin.topo.body_pos_idx if bodies is None else kin.topo.body_pos_idx[np.asarray(bodies)]
    if (idx >= 0).all():
        return take(x, idx)
    return jnp.concatenate([x, jnp.zeros_like(x[:1])])[np.where(idx >= 0, idx, kin.topo.n)]


def body_frames(model: Model, kin: KinematicsData):
    """World rotations (nb, 3, 3) and origins relative to ``kin.origin`` (nb, 3) of the bodies."""
    idx = kin.topo.body_pos_idx
    has = idx >= 0
    if has.all():
        Rn, pn = take(kin.R, idx), take(kin.p, idx)
    else:
        idx = np.where(has, idx, 0)
        Rn = jnp.where(has[:, None, None], kin.R[idx], jnp.eye(3))
        pn = jnp.where(has[:, None], kin.p[idx], -kin.origin)
    return mm(Rn, model.body_rot), pn + mv(Rn, model.body_pos)


def body_coms(model: Model, kin: KinematicsData):
    """Centres of mass of the bodies (nb, 3) relative to ``kin.origin``, world axes."""
    Rb, pb = body_frames(model, kin)
    return pb + mv(Rb, model.body_com)


def body_inertias(model: Model, kin: KinematicsData):
    """Centres of mass (nb, 3) relative to ``kin.origin`` and rotational inertias about them
    (nb, 3, 3), world axes."""
    Rb, pb = body_frames(model, kin)
    return pb + mv(Rb, model.body_com), mmt(mm(Rb, model.body_inertia), Rb)


def point_velocities(kin: KinematicsData, x, bodies=None):
    """Angular velocities ω (k, 3) of the bodies and velocities (k, 3) of points x (k, 3)
    (relative to ``kin.origin``) fixed on them; k bodies: all, or the index list ``bodies``."""
    vb = _rows(kin, kin.vel, bodies)
    w = vb[:, :3]
    return w, vb[:, 3:] + jnp.cross(w, x)


def point_accelerations(kin: KinematicsData, acc, x, bodies=None):
    """Angular accelerations (k, 3) of the bodies and accelerations (k, 3) of points x (k, 3)
    fixed on them, from node spatial accelerations ``acc`` (n, 6) (:func:`node_accelerations`):
    ẍ = a_O + ω̇ × x + ω × ẋ."""
    ab = _rows(kin, acc, bodies)
    w, xd = point_velocities(kin, x, bodies)
    dw = ab[:, :3]
    return dw, ab[:, 3:] + jnp.cross(dw, x) + jnp.cross(w, xd)


def partial_velocities(model: Model, kin: KinematicsData, x=None, bodies=None, support=None):
    """Partial velocity matrices (Kane; Xu et al. (2021) eq. 18) of points x (k, 3) (relative to
    ``kin.origin``; default: the centres of mass) fixed on the bodies (all, or the index list
    ``bodies``): V (k, 3, nv) with ẋ = V v and Ω (k, 3, nv) with ω = Ω v. Column r of body b is
    [a × x + l] of dof r where the dof's node supports the body's node, zero elsewhere;
    ``support`` (nb, nv) of 0/1, static: which dofs move which body, in place of the model's
    own table (e.g. from a path matrix: :meth:`diffmb.modular.Configuration.kane_support`)."""
    bodies = np.arange(model.n_bodies) if bodies is None else np.asarray(bodies)
    if x is None:
        x = body_coms(model, kin)[bodies]
    mask = support_mask(model, kin, bodies) if support is None else \
        np.asarray(support, dtype=float)[bodies]
    return masked_partial_velocities(kin, x, mask)


def support_mask(model: Model, kin: KinematicsData, bodies):
    """(k, nv) of 0/1, static: which dofs move each of ``bodies`` (the model's tree)."""
    topo = kin.topo
    idx = topo.body_pos_idx[np.asarray(bodies)]
    return np.where((idx >= 0)[:, None], topo.anc[np.maximum(idx, 0)][:, topo.dof_node], 0.0)


def masked_partial_velocities(kin: KinematicsData, x, mask):
    """:func:`partial_velocities` of the points x (k, 3) (relative to ``kin.origin``) with
    the dof columns weighted by ``mask`` (k, nv), which may be traced (e.g. the rows of a
    static table picked at run time, or the difference of two bodies' supports for a relative
    velocity): V (k, 3, nv), Ω (k, 3, nv)."""
    topo = kin.topo
    Sd = kin.S[topo.dof_node, :, topo.dof_slot]  # (nv, 6): world motion subspace of each dof
    A = Sd[:, :3]
    L = Sd[:, 3:] + jnp.cross(A, x[:, None, :])  # (k, nv, 3)
    return jnp.swapaxes(L, 1, 2) * mask[:, None, :], A.T * mask[:, None, :]


# ---- public, by name ---------------------------------------------------------------------------


def _bidx(model: Model, body):
    return model.body_index(body) if isinstance(body, str) else int(body)


def body_poses(model: Model, q):
    """World rotations (nb, 3, 3) and origins (nb, 3) of every body frame."""
    kin = kinematics(model, q)
    Rb, pb = body_frames(model, kin)
    return Rb, pb + kin.origin


def body_pose(model: Model, q, body):
    """(R (3, 3), p (3,)) of one body's frame in the world; ``body`` is a name or index."""
    R, p = body_poses(model, q)
    b = _bidx(model, body)
    return R[b], p[b]


def frame_point(model: Model, q, body, point=(0.0, 0.0, 0.0)):
    """World position of a point given in a body's frame."""
    R, p = body_pose(model, q, body)
    return p + mv(R, jnp.asarray(point, dtype=jnp.float64))


def _point(model: Model, kin: KinematicsData, b, point):
    """A point of body b (its com if ``point`` is None, else ``point`` in its frame), (1, 3)
    relative to ``kin.origin``."""
    Rb, pb = body_frames(model, kin)
    local = model.body_com[b] if point is None else jnp.asarray(point, dtype=jnp.float64)
    return (pb[b] + mv(Rb[b], local))[None]


def point_jacobian(model: Model, q, body, point=(0.0, 0.0, 0.0)):
    """Jacobian (3, nv) of the world velocity of a point fixed in a body (point in body frame)."""
    kin = kinematics(model, q)
    b = _bidx(model, body)
    return partial_velocities(model, kin, _point(model, kin, b, point), [b])[0][0]


def body_jacobian(model: Model, q, body):
    """(6, nv) world-frame Jacobian [angular; linear velocity of the body's com]."""
    kin = kinematics(model, q)
    V, W = partial_velocities(model, kin, bodies=[_bidx(model, body)])
    return jnp.concatenate([W[0], V[0]], axis=0)


def body_velocity(model: Model, q, v, body, point=None):
    """World angular velocity and world linear velocity of the body's com (or of ``point``)."""
    kin = kinematics(model, q, v)
    b = _bidx(model, body)
    w, xd = point_velocities(kin, _point(model, kin, b, point), [b])
    return w[0], xd[0]


def center_of_mass(model: Model, q):
    """World centre of mass (3,) of all bodies."""
    kin = kinematics(model, q)
    m = model.body_mass
    return jnp.sum(m[:, None] * body_coms(model, kin), axis=0) / jnp.sum(m) + kin.origin


def kinetic_energy(model: Model, q, v):
    """½ Σ (m |v_c|² + ωᵀ I ω) + ½ Σ armature v²: ½ Σ over nodes of velᵀ I vel; equals
    ½ vᵀ M v. With added inertia it includes the fluid's kinetic energy ½ νᵀ M_A ν."""
    kin = kinematics(model, q, v)
    return 0.5 * jnp.sum(vdot(kin.vel, mv(kin.I, kin.vel))) + 0.5 * jnp.sum(model.armature * v * v)


def potential_energy(model: Model, q):
    """−Σ m gᵀ c (zero at the world origin): the rigid bodies' weight (no buoyancy)."""
    kin = kinematics(model, q)
    c = body_coms(model, kin) + kin.origin
    return -jnp.sum(model.body_mass * (c @ model.gravity))


def momentum(model: Model, q, v):
    """World linear momentum (3,) and angular momentum about the world origin (3,). With added
    inertia these include the fluid's impulse M_A ν (Kirchhoff's conserved body + fluid
    impulse)."""
    kin = kinematics(model, q, v)
    h = jnp.sum(mv(kin.I, kin.vel), axis=0)  # [angular momentum about kin.origin; linear]
    return h[3:], h[:3] + jnp.cross(kin.origin, h[3:])
