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
import numpy as np

from ..model import JointType, Model
from ..topology import subtree_bodies
from ._world import mv
from .kinematics import (
    KinematicsData,
    body_inertias,
    kinematics,
    node_accelerations,
    partial_velocities,
    point_accelerations,
    point_velocities,
)
from .small_linalg import spd_solve

__all__ = ["inverse_dynamics_lagrange", "forward_dynamics_lagrange", "lagrange_mass_matrix"]


def _axes(model: Model):
    """The columns of v of each node's axes (one for a hinge or slide, three for a ball or
    the translation of a free joint)."""
    return [slice(model.node_v[l], model.node_v[l] + JointType(t).nv)
            for l, t in enumerate(model.node_type)]


def _order(model: Model):
    """Nodes in the order of their columns in v."""
    return sorted(range(model.n_nodes), key=lambda l: model.node_v[l])


def _generalized_forces(model: Model, kin: KinematicsData, qdd, f_ext):
    """Q (nv,) from eq. 19, axis by axis over the subtrees of the span tree."""
    V, W = partial_velocities(model, kin)  # eq. 18 for every body k and axis: (nb, 3, nv)
    c, Iw = body_inertias(model, kin)
    w, _ = point_velocities(kin, c)
    dw, rdd = point_accelerations(kin, node_accelerations(kin, qdd), c)
    lin = model.body_mass[:, None] * (rdd - model.gravity)  # m (r̈ − g)
    ang = mv(Iw, dw) + jnp.cross(w, mv(Iw, w))  # J φ̈ + φ̇ × J φ̇
    if f_ext is not None:
        lin = lin - f_ext[:, :3]
        ang = ang - f_ext[:, 3:]
    axes, sub = _axes(model), subtree_bodies(model.node_parent, model.body_node)
    Q = []
    for l in _order(model):
        k = np.array(sub[l], int)
        Q.append(jnp.einsum("kil,ki->l", V[k][:, :, axes[l]], lin[k])
                 + jnp.einsum("kil,ki->l", W[k][:, :, axes[l]], ang[k]))
    return jnp.concatenate(Q) + model.armature * qdd


def _mass_matrix(model: Model, kin: KinematicsData):
    """M_lj = Σ_{k ∈ sub(l) ∩ sub(j)} m_k ∂ṙ_kᵀ/∂q̇_l ∂ṙ_k/∂q̇_j + ∂φ̇_kᵀ/∂q̇_l J_k ∂φ̇_k/∂q̇_j."""
    V, W = partial_velocities(model, kin)
    _, Iw = body_inertias(model, kin)
    axes, sub = _axes(model), subtree_bodies(model.node_parent, model.body_node)

    def block(l, j):
        k = np.array(sorted(set(sub[l]) & set(sub[j])), int)
        Vl, Vj, Wl, Wj = (X[k][:, :, axes[i]] for X, i in ((V, l), (V, j), (W, l), (W, j)))
        return (jnp.einsum("k,kil,kij->lj", model.body_mass[k], Vl, Vj)
                + jnp.einsum("kil,kim,kmj->lj", Wl, Iw[k], Wj))

    order = _order(model)
    return jnp.block([[block(l, j) for j in order] for l in order]) + jnp.diag(model.armature)


def inverse_dynamics_lagrange(model: Model, q, v, qdd, f_ext=None):
    """Generalized forces Q (nv,) from eq. 19, axis by axis over the span tree."""
    return _generalized_forces(model, kinematics(model, q, v), qdd, f_ext)


def lagrange_mass_matrix(model: Model, q):
    """M (nv, nv), block by block over pairs of axes (their common subtree bodies)."""
    return _mass_matrix(model, kinematics(model, q))


def forward_dynamics_lagrange(model: Model, q, v, tau, f_ext=None):
    kin = kinematics(model, q, v)
    M = _mass_matrix(model, kin)
    b = _generalized_forces(model, kin, jnp.zeros(model.nv), f_ext)
    return spd_solve(M, tau - b)
