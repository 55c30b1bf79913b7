"""Kane's equations for any tree (Xu et al. (2018) §3, Wu et al. (2019) eqs. 43–45).

With generalized speeds u = v (MuJoCo's layout, so ball and free joints use body-frame angular
velocities — Kane's method needs no correction for such quasi-velocities), the partial velocity
matrices of body k are V_k (3, nv) for its centre of mass and Ω_k (3, nv) for its angular velocity.
Kane's equations Fᵣ + Fᵣ* = 0 read

    Fᵣ  = Σ_k V_kᵀ (m_k g + F_k) + Ω_kᵀ T_k + τ          (generalized active forces)
    Fᵣ* = −Σ_k V_kᵀ m_k a_k − Ω_kᵀ (I_k α_k + ω_k × I_k ω_k) (generalized inertia forces)

and since a_k = V_k u̇ + (velocity products), M = Σ V_kᵀ m_k V_k + Ω_kᵀ I_k Ω_k.

Added inertia (``Model.has_added_inertia``): body k's fluid inertia M_A (about its frame origin
o_k, body axes) enters as Kirchhoff's equations written in world axes, on the partial velocities
J_k = [Ω_k; V_ok] of the origin: with ν = [ω; ṙ_o] and M_w = R M_A Rᵀ (blockwise),

    Fᵣ* += −J_kᵀ (M_w [ω̇; r̈_o − ω × ṙ_o] + ν ×* M_w ν),       M += J_kᵀ M_w J_k

([ω̇; r̈_o − ω × ṙ_o] is the body-axes derivative of ν rotated to the world; ν ×* h =
[ω × h_ang + ṙ_o × h_lin; ω × h_lin]). No weight: gravity stays on m_k.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import topology
from ..model import JointType, Model
from ..spatial.spatial import cross_force
from ._world import mv
from .kinematics import (
    KinematicsData,
    body_frames,
    body_inertias,
    kinematics,
    node_accelerations,
    partial_velocities,
    point_accelerations,
    point_velocities,
)
from .small_linalg import spd_solve

__all__ = ["kane_terms", "forward_dynamics_kane", "inverse_dynamics_kane", "path_support"]


def path_support(model: Model) -> np.ndarray:
    """(nb, nv) int64, static: ``[b, r] = 1`` iff speed r moves body b, read off the path and
    accessibility matrices of the model's tree (the world as link 0, node i as link i + 1;
    :func:`diffmb.topology.path_support`), Xu et al. (2018) §3.1. The partial velocities of
    ``forward_dynamics(..., method="kane_paths")``."""
    tree = topology.world_rooted(model.node_parent)
    on_path = topology.path_support(topology.path_matrix_from_parent(tree),
                                    topology.accessibility_from_parent(tree))
    dof_link = np.zeros(model.nv, np.int64)
    for i, typ in enumerate(model.node_type):
        n = JointType(typ).nv
        dof_link[model.node_v[i]:model.node_v[i] + n] = i + 1
    body_link = np.array(model.body_node, np.int64) + 1  # 0: on the world, moved by nothing
    return on_path[np.ix_(body_link, dof_link)] * (body_link > 0)[:, None]


def kane_terms(model: Model, q, v, qdd, f_ext=None, support=None):
    """(M, F* + F at the given qdd without τ): returns M and the residual r = Fᵣ + Fᵣ* − τ.
    ``support`` (nb, nv), static: which dofs move which body (default: the model's topology;
    see :func:`~diffmb.dynamics.kinematics.partial_velocities`)."""
    return _kane_terms(model, kinematics(model, q, v), qdd, f_ext, support)


def _kane_terms(model: Model, kin: KinematicsData, qdd, f_ext, support=None):
    V, W = partial_velocities(model, kin, support=support)  # (nb, 3, nv): V_k of the coms, Ω_k
    c, Iw = body_inertias(model, kin)
    w, _ = point_velocities(kin, c)
    dw, a = point_accelerations(kin, node_accelerations(kin, qdd), c)
    m = model.body_mass
    F = m[:, None] * (model.gravity - a)  # m_k g − m_k a_k
    Tq = -(mv(Iw, dw) + jnp.cross(w, mv(Iw, w)))  # −(I_k α_k + ω_k × I_k ω_k)
    if f_ext is not None:
        F = F + f_ext[:, :3]
        Tq = Tq + f_ext[:, 3:]
    r = -model.armature * qdd + jnp.einsum("kir,ki->r", V, F) + jnp.einsum("kir,ki->r", W, Tq)
    M = (jnp.diag(model.armature) + jnp.einsum("k,kir,kis->rs", m, V, V)
         + jnp.einsum("kir,kij,kjs->rs", W, Iw, W))
    if model.has_added_inertia:
        Ma, ra = _added_terms(model, kin, qdd, support)
        M, r = M + Ma, r + ra
    return M, r


def _added_terms(model: Model, kin: KinematicsData, qdd, support=None):
    """Added inertia's generalized inertia forces and mass matrix (module docstring)."""
    Rb, o = body_frames(model, kin)
    Vo, Wo = partial_velocities(model, kin, o, support=support)  # of the body origins
    J = jnp.concatenate([Wo, Vo], axis=1)  # (nb, 6, nv)
    w, vo = point_velocities(kin, o)
    dw, ao = point_accelerations(kin, node_accelerations(kin, qdd), o)
    Z = jnp.zeros_like(Rb)
    Rs = jnp.concatenate([jnp.concatenate([Rb, Z], -1), jnp.concatenate([Z, Rb], -1)], -2)
    Mw = jnp.einsum("kij,kjl,kml->kim", Rs, model.body_added_inertia, Rs)
    nu = jnp.concatenate([w, vo], axis=-1)
    dnu = jnp.concatenate([dw, ao - jnp.cross(w, vo)], axis=-1)
    wrench = -(jnp.einsum("kij,kj->ki", Mw, dnu)
               + cross_force(nu, jnp.einsum("kij,kj->ki", Mw, nu)))
    return jnp.einsum("kir,kij,kjs->rs", J, Mw, J), jnp.einsum("kir,ki->r", J, wrench)


def inverse_dynamics_kane(model: Model, q, v, qdd, f_ext=None, support=None):
    """τ such that Fᵣ + Fᵣ* = 0."""
    _, r = kane_terms(model, q, v, qdd, f_ext, support)
    return -r


def forward_dynamics_kane(model: Model, q, v, tau, f_ext=None, support=None):
    """Solve M u̇ = τ + (Fᵣ + Fᵣ*)|_{u̇=0}."""
    M, r0 = kane_terms(model, q, v, jnp.zeros(model.nv), f_ext, support)
    return spd_solve(M, tau + r0)
