"""Recursive Lagrange equations on the directed span tree (Xu et al. (2021) eqs. 1–19).

For every axis l the paper sums over the bodies k of its subtree (eq. 19):

    Σ_k [ m_k (∂ṙ_k/∂q̇_l)ᵀ (r̈_k − g) + (∂φ̇_k/∂q̇_l)ᵀ (J_k φ̈_k + φ̇_k × J_k φ̇_k) ] = Q_l

with the partial velocities of eq. 18: for a revolute axis n_l through o_l,
∂ṙ_k/∂φ̇_l = n_l × (r_k − o_l) and ∂φ̇_k/∂φ̇_l = n_l; for a prismatic axis ∂ṙ_k/∂ṙ_l = n_l and
∂φ̇_k/∂ṙ_l = 0. A ball joint is three revolute axes (the node's own axes) and a free joint adds
three prismatic axes along the world axes. The traversal is axis by axis over subtrees, as the
paper writes it; the right-hand side form is valid for the body-frame quasi-velocities of ball
joints (it is the Lagrange form that does not differentiate T with respect to q).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.linalg import cho_factor, cho_solve

from ..model import Model
from ._world import mm, mv
from .kinematics import body_com_world, world_kinematics

__all__ = ["inverse_dynamics_lagrange", "forward_dynamics_lagrange", "lagrange_mass_matrix"]


def _subtree_bodies(model: Model):
    """For each node, the bodies riding on it or on any descendant node."""
    n = model.n_nodes
    sub = [set() for _ in range(n)]
    for b, node in enumerate(model.body_node):
        i = node
        while i >= 0:
            sub[i].add(b)
            i = model.node_parent[i]
    return [sorted(s) for s in sub]


def _body_terms(model: Model, kin, b):
    node = model.body_node[b]
    c = body_com_world(model, kin, b)
    Rb = mm(kin.R[node], model.body_rot[b])
    Iw = mm(mm(Rb, model.body_inertia[b]), Rb.T)
    d = c - kin.o[node]
    w, dw = kin.w[node], kin.dw[node]
    rdd = kin.ddo[node] + jnp.cross(dw, d) + jnp.cross(w, jnp.cross(w, d))
    lin = model.body_mass[b] * (rdd - model.gravity)  # m (r̈ − g)
    ang = mv(Iw, dw) + jnp.cross(w, mv(Iw, w))  # J φ̈ + φ̇ × J φ̇
    return c, Iw, lin, ang


def inverse_dynamics_lagrange(model: Model, q, v, qdd, f_ext=None):
    """Generalized forces Q (nv,) from eq. 19, axis by axis over the span tree."""
    kin = world_kinematics(model, q, v, qdd)
    terms = {b: _body_terms(model, kin, b) for b, nd in enumerate(model.body_node) if nd >= 0}
    Q = []
    for l, bodies in enumerate(_subtree_bodies(model)):
        A, L = kin.cols[l]
        ql = jnp.zeros(A.shape[1])
        for b in bodies:
            c, _, lin, ang = terms[b]
            if f_ext is not None:
                lin = lin - f_ext[b, :3]
                ang = ang - f_ext[b, 3:]
            dr = jnp.cross(A.T, c - kin.o[l]) + L.T  # (k, 3): ∂ṙ_k/∂q̇_l, eq. 18
            ql = ql + mv(dr, lin) + mv(A.T, ang)
        Q.append(ql)
    return jnp.concatenate(Q) + model.armature * qdd


def lagrange_mass_matrix(model: Model, q):
    """M_lj = Σ_{k ∈ sub(l) ∩ sub(j)} m_k ∂ṙ_kᵀ/∂q̇_l ∂ṙ_k/∂q̇_j + ∂φ̇_kᵀ/∂q̇_l J_k ∂φ̇_k/∂q̇_j."""
    kin = world_kinematics(model, q)
    sub = _subtree_bodies(model)
    n = model.n_nodes
    cache = {}
    for b, nd in enumerate(model.body_node):
        if nd >= 0:
            c, Iw, _, _ = _body_terms(model, kin, b)
            cache[b] = (c, Iw)
    rows = []
    for l in range(n):
        A_l, L_l = kin.cols[l]
        row = []
        for j in range(n):
            A_j, L_j = kin.cols[j]
            blk = jnp.zeros((A_l.shape[1], A_j.shape[1]))
            for b in sorted(set(sub[l]) & set(sub[j])):
                c, Iw = cache[b]
                dl = jnp.cross(A_l.T, c - kin.o[l]) + L_l.T
                dj = jnp.cross(A_j.T, c - kin.o[j]) + L_j.T
                blk = blk + model.body_mass[b] * (dl @ dj.T) + A_l.T @ Iw @ A_j
            row.append(blk)
        rows.append(jnp.concatenate(row, axis=1))
    return jnp.concatenate(rows, axis=0) + jnp.diag(model.armature)


def forward_dynamics_lagrange(model: Model, q, v, tau, f_ext=None):
    M = lagrange_mass_matrix(model, q)
    b = inverse_dynamics_lagrange(model, q, v, jnp.zeros(model.nv), f_ext)
    return cho_solve(cho_factor(M), tau - b)
