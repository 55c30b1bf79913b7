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
from ._world import mm, mv
from .kinematics import _point_jac, body_com_world, world_kinematics

__all__ = ["partial_velocities", "kane_terms", "forward_dynamics_kane", "inverse_dynamics_kane"]


def partial_velocities(model: Model, q):
    """Partial velocity matrices V (nb, 3, nv) of each body's com and Ω (nb, 3, nv)."""
    kin = world_kinematics(model, q)
    V, W = [], []
    for b, node in enumerate(model.body_node):
        if node < 0:
            V.append(jnp.zeros((3, model.nv)))
            W.append(jnp.zeros((3, model.nv)))
            continue
        Jl, Ja = _point_jac(model, kin, node, body_com_world(model, kin, b))
        V.append(Jl)
        W.append(Ja)
    return jnp.stack(V), jnp.stack(W)


def kane_terms(model: Model, q, v, qdd, f_ext=None):
    """(M, F* + F at the given qdd without τ): returns M and the residual r = Fᵣ + Fᵣ* − τ."""
    kin = world_kinematics(model, q, v, qdd)
    M = jnp.diag(model.armature)
    r = -model.armature * qdd
    for b, node in enumerate(model.body_node):
        if node < 0:
            continue
        m, Ib = model.body_mass[b], model.body_inertia[b]
        c = body_com_world(model, kin, b)
        Jl, Ja = _point_jac(model, kin, node, c)
        Rb = mm(kin.R[node], model.body_rot[b])
        Iw = mm(mm(Rb, Ib), Rb.T)
        d = c - kin.o[node]
        w, dw = kin.w[node], kin.dw[node]
        a = kin.ddo[node] + jnp.cross(dw, d) + jnp.cross(w, jnp.cross(w, d))
        F = m * model.gravity - m * a
        Tq = -(mv(Iw, dw) + jnp.cross(w, mv(Iw, w)))
        if f_ext is not None:
            F = F + f_ext[b, :3]
            Tq = Tq + f_ext[b, 3:]
        r = r + Jl.T @ F + Ja.T @ Tq
        M = M + m * (Jl.T @ Jl) + Ja.T @ (Iw @ Ja)
    return M, r


def inverse_dynamics_kane(model: Model, q, v, qdd, f_ext=None):
    """τ such that Fᵣ + Fᵣ* = 0."""
    _, r = kane_terms(model, q, v, qdd, f_ext)
    return -r


def forward_dynamics_kane(model: Model, q, v, tau, f_ext=None):
    """Solve M u̇ = τ + (Fᵣ + Fᵣ*)|_{u̇=0}."""
    M, r0 = kane_terms(model, q, v, jnp.zeros(model.nv), f_ext)
    return cho_solve(cho_factor(M), tau + r0)
