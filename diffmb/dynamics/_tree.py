"""Per-node building blocks shared by the recursive algorithms (RNEA, CRBA, ABA, Lagrange, Kane).

Notation (Featherstone, *Rigid Body Dynamics Algorithms*, 2008), used across ``diffmb.dynamics``:
spatial motion ``m = [ω; v]`` and force ``f = [n; f]``, each expressed in a node's own frame. The
placement of node i in its parent is (R, p): R the node's axes in parent coordinates, p its origin.
Its Plücker motion transform parent -> node is ``Xup = [[Rᵀ, 0], [-Rᵀ[p]×, Rᵀ]]``; here it is
never formed as a 6 x 6 matrix: ``xup_motion``/``xup_force_T`` apply it with 3-vectors, and
``xup_inertia_T`` maps a 6 x 6 articulated inertia by its 3 x 3 blocks.

Rigid-body inertia about a node origin is kept as ``(m, h, Ī)``: mass, first moment h = m c and
rotational inertia about the origin — 10 numbers, no 6 x 6 products with known zeros.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import BALL, HINGE, SLIDE, TRANS3, Model
from ..spatial import quaternion as quat


def skew(v):
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    o = jnp.zeros_like(x)
    return jnp.stack(
        [jnp.stack([o, -z, y], -1), jnp.stack([z, o, -x], -1), jnp.stack([-y, x, o], -1)], -2
    )


def axis_rotation(a, angle):
    """Rodrigues: rotation by ``angle`` about unit axis ``a``."""
    K = skew(a)
    return jnp.eye(3) + jnp.sin(angle) * K + (1.0 - jnp.cos(angle)) * (K @ K)


# ---- joints --------------------------------------------------------------------------------


def node_q(model: Model, q, i):
    s = model.node_q[i]
    return q[s : s + {HINGE: 1, SLIDE: 1, BALL: 4, TRANS3: 3}[model.node_type[i]]]


def node_v(model: Model, v, i):
    s = model.node_v[i]
    return v[s : s + nv_of(model, i)]


def nv_of(model: Model, i) -> int:
    return {HINGE: 1, SLIDE: 1, BALL: 3, TRANS3: 3}[model.node_type[i]]


def joint_placement(model: Model, q, i):
    """(R, p) of node i in its parent node's frame at configuration q."""
    t = model.node_type[i]
    R0, p0 = model.node_rot[i], model.node_pos[i]
    qi = node_q(model, q, i)
    if t == HINGE:
        angle = qi[0] - model.qpos0[model.node_q[i]]
        return R0 @ axis_rotation(model.node_axis[i], angle), p0
    if t == SLIDE:
        d = qi[0] - model.qpos0[model.node_q[i]]
        return R0, p0 + R0 @ (model.node_axis[i] * d)
    if t == BALL:
        return R0 @ quat.to_rotmat(qi), p0
    return R0, p0 + qi  # TRANS3 (axis-aligned with its parent, enforced by the builder)


def motion_subspace(model: Model, i):
    """S (6, k), constant in node coordinates."""
    t = model.node_type[i]
    z3 = jnp.zeros(3)
    if t == HINGE:
        return jnp.concatenate([model.node_axis[i], z3])[:, None]
    if t == SLIDE:
        return jnp.concatenate([z3, model.node_axis[i]])[:, None]
    if t == BALL:
        return jnp.concatenate([jnp.eye(3), jnp.zeros((3, 3))], 0)
    return jnp.concatenate([jnp.zeros((3, 3)), jnp.eye(3)], 0)


def apply_s(model: Model, i, qd):
    """S qd as (ω, v) without forming S."""
    t = model.node_type[i]
    z3 = jnp.zeros(3, dtype=qd.dtype)
    if t == HINGE:
        return model.node_axis[i] * qd[0], z3
    if t == SLIDE:
        return z3, model.node_axis[i] * qd[0]
    if t == BALL:
        return qd, z3
    return z3, qd


def apply_st(model: Model, i, n, f):
    """Sᵀ [n; f]."""
    t = model.node_type[i]
    if t == HINGE:
        return jnp.dot(model.node_axis[i], n)[None]
    if t == SLIDE:
        return jnp.dot(model.node_axis[i], f)[None]
    if t == BALL:
        return n
    return f


# ---- spatial transforms ---------------------------------------------------------------------


def xup_motion(R, p, w, v):
    """Xup m: parent-frame motion (w, v) -> node frame."""
    return R.T @ w, R.T @ (v + jnp.cross(w, p))


def xup_force_T(R, p, n, f):
    """Xupᵀ f: node-frame force -> parent frame."""
    fp = R @ f
    return R @ n + jnp.cross(p, fp), fp


def cross_motion(w, v, mw, mv):
    """[w; v] ×  [mw; mv] (crm)."""
    return jnp.cross(w, mw), jnp.cross(w, mv) + jnp.cross(v, mw)


def cross_force(w, v, n, f):
    """[w; v] ×* [n; f] (crf)."""
    return jnp.cross(w, n) + jnp.cross(v, f), jnp.cross(w, f)


# ---- rigid inertia (m, h, Ī about the node origin) --------------------------------------------


def node_inertias(model: Model):
    """Sum the bodies riding on each node into (m, h, Ī) about the node origin, node axes.

    Computed inside the traced functions so that gradients reach every body's parameters.
    Returns m (n,), h (n, 3), Ibar (n, 3, 3).
    """
    n = model.n_nodes
    c = model.body_pos + jnp.einsum("bij,bj->bi", model.body_rot, model.body_com)
    Ic = jnp.einsum("bij,bjk,blk->bil", model.body_rot, model.body_inertia, model.body_rot)
    m = model.body_mass
    cx = skew(c)
    Ibar = Ic - m[:, None, None] * (cx @ cx)
    idx = jnp.asarray([bn if bn >= 0 else n for bn in model.body_node])  # world bodies dropped
    M = jnp.zeros(n + 1).at[idx].add(m)[:n]
    H = jnp.zeros((n + 1, 3)).at[idx].add(m[:, None] * c)[:n]
    I = jnp.zeros((n + 1, 3, 3)).at[idx].add(Ibar)[:n]
    return M, H, I


def inertia_apply(m, h, Ibar, w, v):
    """I [w; v] for a rigid inertia (m, h, Ī)."""
    return Ibar @ w + jnp.cross(h, v), m * v - jnp.cross(h, w)


def rigid_to_matrix(m, h, Ibar):
    hx = skew(h)
    return jnp.block([[Ibar, hx], [hx.T, m * jnp.eye(3)]])


def rigid_transform_up(R, p, m, h, Ibar):
    """Xupᵀ I Xup for a rigid inertia: express a node's (m, h, Ī) in the parent frame."""
    hr = R @ h
    Ir = R @ Ibar @ R.T
    # parallel-axis shift of the origin by -p: Ī' = Ī + m([p]×[p]×ᵀ) ... in first-moment form
    px, hx = skew(p), skew(hr)
    Ip = Ir - px @ hx - hx @ px - m * (px @ px)
    return m, hr + m * p, Ip


def inertia_transform_up(R, p, Ia):
    """Xupᵀ Ia Xup for a general 6 x 6 (articulated) inertia, by 3 x 3 blocks."""
    A, B, C = Ia[:3, :3], Ia[:3, 3:], Ia[3:, 3:]
    A, B, C = R @ A @ R.T, R @ B @ R.T, R @ C @ R.T
    px = skew(p)
    B2 = B + px @ C
    A2 = A + px @ B.T - B @ px - px @ C @ px
    return jnp.block([[A2, B2], [B2.T, C]])


def world_gravity_accel(model: Model):
    """The base-acceleration trick: a_world = [0; -g]."""
    return jnp.zeros(3), -model.gravity


def forward_placements(model: Model, q):
    """Placements (R, p) of every node in its parent, and world poses (Rw, pw)."""
    Rs, ps, Rw, pw = [], [], [], []
    for i in range(model.n_nodes):
        R, p = joint_placement(model, q, i)
        par = model.node_parent[i]
        if par < 0:
            Rw.append(R)
            pw.append(p)
        else:
            Rw.append(Rw[par] @ R)
            pw.append(pw[par] + Rw[par] @ p)
        Rs.append(R)
        ps.append(p)
    return Rs, ps, Rw, pw


def body_wrenches_to_nodes(model: Model, Rw, pw, f_ext):
    """f_ext (nb, 6) world-frame [force, torque] at each body's com -> node-frame [n; f] lists."""
    n = model.n_nodes
    out_n = [jnp.zeros(3) for _ in range(n)]
    out_f = [jnp.zeros(3) for _ in range(n)]
    if f_ext is None:
        return out_n, out_f
    for b, node in enumerate(model.body_node):
        if node < 0:
            continue
        F, T = f_ext[b, :3], f_ext[b, 3:]
        c_node = model.body_pos[b] + model.body_rot[b] @ model.body_com[b]
        Rn = Rw[node]
        f_loc = Rn.T @ F
        n_loc = Rn.T @ T + jnp.cross(c_node, f_loc)
        out_n[node] = out_n[node] + n_loc
        out_f[node] = out_f[node] + f_loc
    return out_n, out_f
