"""Kane's equations for any tree (Xu et al. (2018) §3, Wu et al. (2019) eqs. 43–45).

With generalized speeds u = v (MuJoCo's layout, so ball and free joints use body-frame angular
velocities — Kane's method needs no correction for such quasi-velocities), the partial velocity
matrices of body k are V_k (3, nv) for its centre of mass and Ω_k (3, nv) for its angular velocity.
Kane's equations Fᵣ + Fᵣ* = 0 read

    Fᵣ  = Σ_k V_kᵀ (m_k g + F_k) + Ω_kᵀ T_k + τ          (generalized active forces)
    Fᵣ* = −Σ_k V_kᵀ m_k a_k − Ω_kᵀ (I_k α_k + ω_k × I_k ω_k) (generalized inertia forces)

and since a_k = V_k u̇ + (velocity products), M = Σ V_kᵀ m_k V_k + Ω_kᵀ I_k Ω_k.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.linalg import cho_factor, cho_solve

from ..model import Model
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

__all__ = ["kane_terms", "forward_dynamics_kane", "inverse_dynamics_kane"]


def kane_terms(model: Model, q, v, qdd, f_ext=None):
    """(M, F* + F at the given qdd without τ): returns M and the residual r = Fᵣ + Fᵣ* − τ."""
    return _kane_terms(model, kinematics(model, q, v), qdd, f_ext)


def _kane_terms(model: Model, kin: KinematicsData, qdd, f_ext):
    V, W = partial_velocities(model, kin)  # (nb, 3, nv): V_k of the coms, Ω_k
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
    return M, r


def inverse_dynamics_kane(model: Model, q, v, qdd, f_ext=None):
    """τ such that Fᵣ + Fᵣ* = 0."""
    _, r = kane_terms(model, q, v, qdd, f_ext)
    return -r


def forward_dynamics_kane(model: Model, q, v, tau, f_ext=None):
    """Solve M u̇ = τ + (Fᵣ + Fᵣ*)|_{u̇=0}."""
    M, r0 = kane_terms(model, q, v, jnp.zeros(model.nv), f_ext)
    return cho_solve(cho_factor(M), tau + r0)
