"""Articulated-body algorithm (forward dynamics), Featherstone Table 7.1.

Armature enters as a joint-space inertia added to each Dᵢ = Sᵀ Iᴬ S, as in Pinocchio and MuJoCo.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from . import _tree as T
from .rnea import node_velocities


def aba(model: Model, q, v, tau, f_ext=None):
    """Joint accelerations (nv,) solving M a = τ − bias_force + Σ Jᵀ f_ext."""
    Rs, ps, Rw, pw, ws, vs = node_velocities(model, q, v)
    m, h, Ib = T.node_inertias(model)
    fn_ext, ff_ext = T.body_wrenches_to_nodes(model, Rw, pw, f_ext)
    n = model.n_nodes
    IA, pA, c, S = [], [], [], []
    for i in range(n):
        Si = T.motion_subspace(model, i)
        S.append(Si)
        cw, cv = T.cross_motion(ws[i], vs[i], *T.apply_s(model, i, T.node_v(model, v, i)))
        c.append(jnp.concatenate([cw, cv]))
        IA.append(T.rigid_to_matrix(m[i], h[i], Ib[i]))
        hw, hv = T.inertia_apply(m[i], h[i], Ib[i], ws[i], vs[i])
        xw, xv = T.cross_force(ws[i], vs[i], hw, hv)
        pA.append(jnp.concatenate([xw - fn_ext[i], xv - ff_ext[i]]))
    U, Dinv, u = [None] * n, [None] * n, [None] * n
    for i in reversed(range(n)):
        vi, k = model.node_v[i], S[i].shape[1]
        Ui = IA[i] @ S[i]
        D = S[i].T @ Ui + jnp.diag(model.armature[vi : vi + k])
        Di = jnp.linalg.inv(D) if k > 1 else 1.0 / D
        ui = tau[vi : vi + k] - S[i].T @ pA[i]
        U[i], Dinv[i], u[i] = Ui, Di, ui
        par = model.node_parent[i]
        if par >= 0:
            Ia = IA[i] - Ui @ Di @ Ui.T
            pa = pA[i] + Ia @ c[i] + Ui @ (Di @ ui)
            IA[par] = IA[par] + T.inertia_transform_up(Rs[i], ps[i], Ia)
            dn, df = T.xup_force_T(Rs[i], ps[i], pa[:3], pa[3:])
            pA[par] = pA[par] + jnp.concatenate([dn, df])
    g_w, g_v = T.world_gravity_accel(model)
    acc, qdd = [None] * n, [None] * n
    for i in range(n):
        par = model.node_parent[i]
        pw_, pv_ = (g_w, g_v) if par < 0 else (acc[par][:3], acc[par][3:])
        aw, av = T.xup_motion(Rs[i], ps[i], pw_, pv_)
        a_ = jnp.concatenate([aw, av]) + c[i]
        qdd[i] = Dinv[i] @ (u[i] - U[i].T @ a_)
        acc[i] = a_ + S[i] @ qdd[i]
    return jnp.concatenate(qdd)
