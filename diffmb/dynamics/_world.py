"""Vectorised tree kernels in world coordinates, shared by RNEA, CRBA and ABA.

Why world coordinates: with every spatial quantity expressed in the world frame about the world
origin, a child's articulated inertia or force adds to its parent's *without a transform*, and
sums along a branch become products with static 0/1 ancestor matrices. The only sequential
pieces are the level-by-level passes over the directed span tree (forward kinematics and the two
sweeps of ABA), each level handled by one batched operation. The traced program therefore has a
few hundred operations whatever the number of joints: it compiles in seconds and vectorises over
batches well.

Small products are unrolled sums of elementwise products (``mv``, ``mm``...), not reductions or
dots, so that XLA fuses each kernel into a few loops; joint types absent from a model are skipped
statically (docs/performance.md tells why and what it measured).

Conventions: spatial motion [ω; v_O] and force [n_O; f] about the world origin O (Featherstone
§2.x). Every node is padded to w dof slots (w = 3 if the model has a ball or free joint, else 1);
a hinge or slide uses slot 0 and has zero columns
elsewhere (its padded pivots are set to 1 and its padded forces to 0, so they stay exactly zero).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..model import NODE_TYPES, JointType, Model
from ..spatial import quaternion as quat
from ..spatial.rotation import skew
from ..topology import depth, level_order, support_matrix

_CODE = {t: i for i, t in enumerate(NODE_TYPES)}  # hinge 0, slide 1, ball 2, trans3 3


class Topology:
    """Static index tables of a Model's topology for the kernels (numpy; built once per topology).

    Nodes are renumbered in :func:`diffmb.topology.level_order` (breadth-first) so that every
    level of the tree is a contiguous range: level sweeps then read their parents with a static
    gather from the previous level and add into them with static gathers of the children — no
    scatter in the traced program. Support and subtree relations come from
    :func:`diffmb.topology.support_matrix` in this numbering.
    """

    def __init__(self, model: Model):
        n = model.n_nodes
        self.n = n
        par0 = np.array(model.node_parent)
        order = np.array(level_order(par0))  # BFS order (parents precede children)
        pos = np.empty(n, int)
        pos[order] = np.arange(n)
        self.order = order
        self.pos = pos  # breadth-first position of each original node
        self.parent = np.array([pos[par0[o]] if par0[o] >= 0 else -1 for o in order])
        code = np.array([_CODE[model.node_type[o]] for o in order])
        self.code = code
        d = np.array(depth(par0))[order]
        self.bounds = [(int(np.searchsorted(d, k)), int(np.searchsorted(d, k, side="right")))
                       for k in range(d.max() + 1)]
        # per level: parent index within the previous level, and the children of each parent
        self.level_parent, self.level_children = [None], [None]
        for k in range(1, len(self.bounds)):
            a, b = self.bounds[k]
            pa, pb = self.bounds[k - 1]
            lp = self.parent[a:b] - pa
            self.level_parent.append(lp)
            # child k of each parent (index b - a = a zero pad row)
            kids = [np.flatnonzero(lp == j) for j in range(pb - pa)]
            width = max(len(c) for c in kids)
            self.level_children.append(
                np.array([[*c, *[b - a] * (width - len(c))] for c in kids], int))
        self.anc = anc = support_matrix(self.parent).astype(float)  # 1 if j is i or above i
        nvs = np.array([JointType(model.node_type[o]).nv for o in order], int)
        # dof slots per node: 3 if any node has 3 dofs, else 1 (no padded columns at all)
        self.width = w = int(nvs.max())
        slot = np.full((n, w), model.nv, int)
        qidx = np.full((n, 4), model.nq, int)
        for i, o in enumerate(order):
            slot[i, : nvs[i]] = model.node_v[o] + np.arange(nvs[i])
            k = JointType(model.node_type[o]).nq
            qidx[i, :k] = model.node_q[o] + np.arange(k)
        self.slot, self.qidx = slot, qidx
        self.nv_node = nvs
        self.slot_mask = (slot < model.nv).astype(float)
        self.dof_node = np.zeros(model.nv, int)
        self.dof_slot = np.zeros(model.nv, int)
        for i in range(n):
            for k in range(nvs[i]):
                self.dof_node[slot[i, k]] = i
                self.dof_slot[slot[i, k]] = k
        dn = self.dof_node
        related = (anc[dn[:, None], dn[None, :]] + anc[dn[None, :], dn[:, None]]) > 0
        self.m_mask = related.astype(float)
        self.s_deeper = anc[dn[None, :], dn[:, None]] > 0  # node(s) is node(r) or below it
        bn = np.array(model.body_node)
        memb = np.zeros((n, len(bn)))
        for b, i in enumerate(bn):
            if i >= 0:
                memb[pos[i], b] = 1.0
        self.member = memb  # node <- bodies riding on it
        self.body_pos_idx = np.where(bn >= 0, pos[np.maximum(bn, 0)], -1)
        self.hinge, self.slide, self.ball, self.trans = (code == c for c in range(4))


_TOPO: dict = {}


def topology(model: Model) -> Topology:
    """The static tables of ``model``'s topology, built once per distinct topology."""
    key = (model.node_parent, model.node_type, model.node_q, model.node_v, model.body_node,
           model.nq, model.nv)
    if key not in _TOPO:
        _TOPO[key] = Topology(model)
    return _TOPO[key]


def take(x, idx):
    """x[idx] along the first axis for a static integer array ``idx``: a slice and a reshape
    when the indices are a contiguous range (the common case: chains, one child per parent,
    unpadded dof layouts), else a gather. Slices transpose to one fused pad; gathers to
    scatter-adds, separate kernels on CPU."""
    idx = np.asarray(idx)
    flat = idx.reshape(-1)
    if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        return x[int(flat[0]) : int(flat[0]) + flat.size].reshape(*idx.shape, *x.shape[1:])
    return x[idx]


def _reduce_form(f_reduce):
    """Give an unrolled primal the derivative of its reduction form ``f_reduce`` (same value).

    The unrolled sums below are fast forward but slice their inputs element by element, and the
    transpose of every slice is a pad: reverse mode through them would be hundreds of tiny
    pad-add kernels (docs/performance.md).
    The tangent rule is the bilinear reduction form instead, whose transpose is broadcasts,
    multiplies and a few reductions.
    """

    def wrap(f_unrolled):
        g = jax.custom_jvp(f_unrolled)

        @g.defjvp
        def _jvp(primals, tangents):
            A, B = primals
            dA, dB = tangents
            return f_unrolled(A, B), f_reduce(dA, B) + f_reduce(A, dB)

        g.__doc__ = f_unrolled.__doc__
        return g

    return wrap


@_reduce_form(lambda A, x: jnp.sum(A * x[..., None, :], axis=-1))
def mv(A, x):
    """A x over leading axes, unrolled over the (tiny) contracted axis: XLA CPU turns batched dot
    ops into per-element library calls and ends a fusion at every reduce, while a sum of
    elementwise products fuses with its neighbours into one vectorised loop."""
    return sum(A[..., :, j] * x[..., None, j] for j in range(A.shape[-1]))


@_reduce_form(lambda a, b: jnp.sum(a * b, axis=-1))
def vdot(a, b):
    """a · b over the last axis, unrolled (see ``mv``)."""
    return sum(a[..., j] * b[..., j] for j in range(a.shape[-1]))


@_reduce_form(lambda A, x: jnp.sum(A * x[..., :, None], axis=-2))
def mtv(A, x):
    """Aᵀ x over leading axes."""
    return sum(A[..., j, :] * x[..., None, j] for j in range(A.shape[-2]))


@_reduce_form(lambda A, B: jnp.sum(A[..., :, :, None] * B[..., None, :, :], axis=-2))
def mm(A, B):
    """A B over leading axes."""
    return sum(A[..., :, j, None] * B[..., None, j, :] for j in range(A.shape[-1]))


@_reduce_form(lambda A, B: jnp.sum(A[..., :, None, :] * B[..., None, :, :], axis=-1))
def mmt(A, B):
    """A Bᵀ over leading axes."""
    return sum(A[..., :, j, None] * B[..., None, :, j] for j in range(A.shape[-1]))


@_reduce_form(lambda A, B: jnp.sum(A[..., :, :, None] * B[..., :, None, :], axis=-3))
def mtm(A, B):
    """Aᵀ B over leading axes."""
    return sum(A[..., j, :, None] * B[..., j, None, :] for j in range(A.shape[-2]))


def local_placements(model: Model, topo: Topology, q):
    """(R, p) of every node in its parent at q, all nodes at once: (n, 3, 3), (n, 3)."""
    qe = jnp.concatenate([q, jnp.zeros(1, q.dtype)])
    qn = take(qe, topo.qidx)  # (n, 4)
    ref = take(jnp.concatenate([model.qpos0, jnp.zeros(1, q.dtype)]), topo.qidx[:, 0])
    s = qn[:, 0] - ref  # hinge angle / slide displacement relative to qpos0
    a = model.node_axis[topo.order]
    # joint types absent from the model are skipped statically (no work, no selects)
    RJ = jnp.broadcast_to(jnp.eye(3), (topo.n, 3, 3))
    if topo.hinge.any():
        K = skew(a)
        Rh = (jnp.eye(3) + jnp.sin(s)[:, None, None] * K
              + (1.0 - jnp.cos(s))[:, None, None] * mm(K, K))
        RJ = jnp.where(topo.hinge[:, None, None], Rh, RJ) if not topo.hinge.all() else Rh
    if topo.ball.any():
        ball_q = jnp.where(topo.ball[:, None], qn, jnp.array([1.0, 0.0, 0.0, 0.0]))
        RJ = jnp.where(topo.ball[:, None, None], quat.to_rotmat(ball_q), RJ)
    pJ = jnp.zeros((topo.n, 3), q.dtype)
    if topo.slide.any():
        pJ = pJ + jnp.where(topo.slide[:, None], a * s[:, None], 0.0)
    if topo.trans.any():
        pJ = pJ + jnp.where(topo.trans[:, None], qn[:, :3], 0.0)
    R0, p0 = model.node_rot[topo.order], model.node_pos[topo.order]
    if not (topo.slide.any() or topo.trans.any()):
        return mm(R0, RJ), p0
    return mm(R0, RJ), p0 + mv(R0, pJ)


def world_poses(model: Model, topo: Topology, q):
    """World rotations (n, 3, 3) and origins (n, 3) of the nodes (BFS order), level by level."""
    Rl, pl = local_placements(model, topo, q)
    a, b = topo.bounds[0]
    Rs, ps = [Rl[a:b]], [pl[a:b]]  # roots are already in world coordinates
    for k in range(1, len(topo.bounds)):
        a, b = topo.bounds[k]
        lp = topo.level_parent[k]
        Rp, pp = take(Rs[-1], lp), take(ps[-1], lp)
        Rs.append(mm(Rp, Rl[a:b]))
        ps.append(pp + mv(Rp, pl[a:b]))
    return jnp.concatenate(Rs), jnp.concatenate(ps)


def motion_subspaces(model: Model, topo: Topology, Rw, pw):
    """World-frame S (n, 6, w) about the origin, padded to w = ``topo.width`` columns."""
    n = topo.n
    aw = mv(Rw, model.node_axis[topo.order])  # hinge/slide axes in world
    w = topo.width
    z = jnp.zeros((n, 3, w))
    col0 = lambda x: jnp.concatenate([x[:, :, None], jnp.zeros((n, 3, w - 1))], axis=2)
    # rotational columns (angular part) and translational columns (linear part); joint types
    # absent from the model are skipped statically
    Ang, Lin = z, z
    if topo.hinge.any():
        Ang = jnp.where(topo.hinge[:, None, None], col0(aw), Ang)
    if topo.ball.any():
        Ang = jnp.where(topo.ball[:, None, None], Rw, Ang)
    if topo.slide.any():
        Lin = jnp.where(topo.slide[:, None, None], col0(aw), Lin)
    if topo.trans.any():
        par = np.where(topo.parent >= 0, topo.parent, 0)
        Rpar = jnp.where((topo.parent >= 0)[:, None, None], Rw[par], jnp.eye(3))
        Lin = jnp.where(topo.trans[:, None, None], Rpar, Lin)
    # angular column a through o gives linear part o × a at the world origin
    Lin = Lin + jnp.cross(pw[:, None, :], jnp.swapaxes(Ang, 1, 2)).swapaxes(1, 2)
    return jnp.concatenate([Ang, Lin], axis=1)


def node_inertias(model: Model, topo: Topology):
    """Bodies merged onto their nodes, in node coordinates about the node origin (BFS order):
    mass (n,), first moment h = Σ m c (n, 3) and rotational inertia about the origin (n, 3, 3).

    These depend on parameters only, not on q: under ``vmap`` over states they are computed once,
    and the per-state work is one rigid transform per node instead of one per body.
    """
    c = model.body_pos + mv(model.body_rot, model.body_com)  # body coms in node frames
    Ic = mmt(mm(model.body_rot, model.body_inertia), model.body_rot)
    m = model.body_mass
    Jo = Ic - m[:, None, None] * mm(skew(c), skew(c))  # parallel axes to the node origin
    seg = topo.body_pos_idx  # node of each body, -1 = world (dropped by segment_sum)
    ss = lambda x: jax.ops.segment_sum(x, seg, num_segments=topo.n, indices_are_sorted=False)
    return ss(m), ss(m[:, None] * c), ss(Jo)


def world_node_inertias(m, h, Jo, Rw, pw):
    """Node inertias moved to the world origin: 6 x 6 (n, 6, 6) from node-frame (m, h, Jo)."""
    hr = mv(Rw, h)  # first moment about the node origin, world axes
    g = m[:, None] * pw + hr  # first moment about the world origin
    # −Σ mᵢ [p + sᵢ]ײ = R Jo Rᵀ + (m|p|² + 2 p·h) 1 − g pᵀ − p hᵀ   ([a]×[b]× = b aᵀ − (a·b) 1)
    diag = m * vdot(pw, pw) + 2.0 * vdot(pw, hr)
    J = (mmt(mm(Rw, Jo), Rw) + diag[:, None, None] * jnp.eye(3)
         - g[:, :, None] * pw[:, None, :] - pw[:, :, None] * hr[:, None, :])
    gx = skew(g)
    top = jnp.concatenate([J, gx], axis=-1)
    bot = jnp.concatenate([-gx, m[:, None, None] * jnp.eye(3)], axis=-1)
    return jnp.concatenate([top, bot], axis=-2)


def inertia_to_parent(M, R, p):
    """General spatial inertias M (k, 6, 6), given about the origin of frames (R, p) (axes R and
    origin p in a parent frame), to the parent frame about its origin: Xᵀ M X with
    X = [[Rᵀ, 0], [−Rᵀ[p]×, Rᵀ]] the motion map parent → frame. Blocks only: with M rotated to
    parent axes as [[A, B], [Bᵀ, D]] and P = [p]×,

        Xᵀ M X = [[A − B P + P Bᵀ − P D P, B + P D], [Bᵀ − D P, D]].
    """
    rot = lambda X: mmt(mm(R, X), R)  # noqa: E731
    A, B, D = rot(M[..., :3, :3]), rot(M[..., :3, 3:]), rot(M[..., 3:, 3:])
    P = skew(p)
    Bt = jnp.swapaxes(B, -1, -2)
    PD = mm(P, D)
    top = jnp.concatenate([A - mm(B, P) + mm(P, Bt) - mm(PD, P), B + PD], axis=-1)
    bot = jnp.concatenate([Bt - mm(D, P), D], axis=-1)
    return jnp.concatenate([top, bot], axis=-2)


def node_added_inertias(model: Model, topo: Topology):
    """The bodies' added inertias merged onto their nodes (BFS order), in node coordinates about
    the node origin: (n, 6, 6). Parameters only (computed once under ``vmap`` over states)."""
    M = inertia_to_parent(model.body_added_inertia, model.body_rot, model.body_pos)
    return jax.ops.segment_sum(M, topo.body_pos_idx, num_segments=topo.n,
                               indices_are_sorted=False)


def sum_to_parents(topo: Topology, d: int, x):
    """Σ over the children in level d of x (n_d, ...) onto level d − 1's nodes: static gathers of
    at most (max children) rows, not a one-hot matrix product (tiny batched dots are slow on CPU)."""
    ch = topo.level_children[d]
    nd = x.shape[0]
    if ch.shape[1] == 1 and np.array_equal(ch[:, 0], np.arange(nd)):
        return x  # one child per parent, same order: nothing to gather
    xz = jnp.concatenate([x, jnp.zeros_like(x[:1])]) if (ch == nd).any() else x
    return sum(take(xz, ch[:, k]) for k in range(ch.shape[1]))


def accumulate_up(topo: Topology, x):
    """x_i + Σ over descendants of x, level by level from the leaves (n, ...) — subtree sums."""
    parts = [x[slice(*bd)] for bd in topo.bounds]
    for d in range(len(parts) - 1, 0, -1):
        parts[d - 1] = parts[d - 1] + sum_to_parents(topo, d, parts[d])
    return jnp.concatenate(parts)


def accumulate_down(topo: Topology, x):
    """x_i + Σ over ancestors of x, level by level (n, ...) — e.g. velocities from joint rates."""
    out = [x[slice(*topo.bounds[0])]]
    for k in range(1, len(topo.bounds)):
        out.append(x[slice(*topo.bounds[k])] + take(out[-1], topo.level_parent[k]))
    return jnp.concatenate(out)


def node_dofs(topo: Topology, x):
    """Gather a (nv,) joint-space vector into padded (n, w) slots."""
    if topo.slot.max() < x.shape[0]:  # no padded slot
        return take(x, topo.slot)
    return jnp.concatenate([x, jnp.zeros(1, x.dtype)])[topo.slot]


def scatter_dofs(model: Model, topo: Topology, y):
    """(n, w) padded slots -> (nv,)."""
    flat = topo.dof_node * topo.width + topo.dof_slot
    return take(y.reshape(-1, *y.shape[2:]), flat)


def ext_wrenches(model: Model, topo: Topology, c, f_ext):
    """f_ext (nb, 6) [force, torque] at world coms -> node spatial forces about the origin."""
    if f_ext is None:
        return None
    F, Tq = f_ext[:, :3], f_ext[:, 3:]
    fb = jnp.concatenate([Tq + jnp.cross(c, F), F], axis=-1)
    return jnp.asarray(topo.member) @ fb


def _inv3(D):
    """Inverse of a batch of 3 x 3 matrices by the adjugate (no LAPACK call)."""
    a, b, c = D[..., 0, :], D[..., 1, :], D[..., 2, :]
    adj = jnp.stack([jnp.cross(b, c), jnp.cross(c, a), jnp.cross(a, b)], axis=-1)
    det = vdot(a, jnp.cross(b, c))
    return adj / det[..., None, None]
