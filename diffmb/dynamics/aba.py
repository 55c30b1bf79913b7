"""Articulated-body algorithm (forward dynamics), Featherstone Table 7.1, in world coordinates.

Each sweep runs level by level over the span tree: in world coordinates a child's articulated
inertia adds to its parent's without a transform. Armature enters each pivot Dᵢ = Sᵀ Iᴬ S as a
joint-space inertia, as in Pinocchio and MuJoCo.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from ._world import (
    Kin,
    _inv3,
    crf,
    ext_wrenches,
    mm,
    mmt,
    mtm,
    mtv,
    mv,
    node_dofs,
    scatter_dofs,
    sum_to_parents,
)


def aba(model: Model, q, v, tau, f_ext=None):
    k = Kin(model, q, v)
    topo = k.topo
    mask = jnp.asarray(topo.slot_mask)  # (n, w)
    S = k.S
    pA = crf(k.vel, mv(k.I, k.vel))
    fe = ext_wrenches(model, topo, k.com, f_ext)
    if fe is not None:
        pA = pA - fe
    arm = node_dofs(topo, model.armature)
    taun = node_dofs(topo, tau)
    pad = jnp.eye(topo.width) * (1.0 - mask)[:, None, :]  # identity pivots on padded slots
    L = len(topo.bounds)
    sl = [slice(*bd) for bd in topo.bounds]
    IA = [k.I[s_] for s_ in sl]
    pA = [pA[s_] for s_ in sl]
    U, Dinv, u = [None] * L, [None] * L, [None] * L
    # levels whose joints all have one dof (hinges, slides) take a scalar path: no padding,
    # no 3 x 3 pivots — most robot levels are like this
    single = [bool((topo.nv_node[s_] == 1).all()) for s_ in sl]
    for d in reversed(range(L)):
        s_ = sl[d]
        if single[d]:
            s1 = S[s_][:, :, 0]  # (n_d, 6)
            Ul = mv(IA[d], s1)
            Di = 1.0 / (jnp.sum(s1 * Ul, axis=-1) + arm[s_][:, 0])
            ul = taun[s_][:, 0] - jnp.sum(s1 * pA[d], axis=-1)
            UD = Ul * Di[:, None]
            Ia = IA[d] - UD[:, :, None] * Ul[:, None, :]
            pa = pA[d] + mv(Ia, k.c[s_]) + UD * ul[:, None]
        else:
            Ul = mm(IA[d], S[s_])
            Dl = mtm(S[s_], Ul) + jnp.eye(topo.width) * arm[s_][:, None, :] + pad[s_]
            Di = _inv3(Dl)
            ul = (taun[s_] - mtv(S[s_], pA[d])) * mask[s_]
            UD = mm(Ul, Di)
            Ia = IA[d] - mmt(UD, Ul)
            pa = pA[d] + mv(Ia, k.c[s_]) + mv(UD, ul)
        U[d], Dinv[d], u[d] = Ul, Di, ul
        if d == 0:
            break
        IA[d - 1] = IA[d - 1] + sum_to_parents(topo, d, Ia)
        pA[d - 1] = pA[d - 1] + sum_to_parents(topo, d, pa)
    ag = jnp.concatenate([jnp.zeros(3), -model.gravity])
    acc_prev = None
    qdd = []
    for d in range(L):
        s_ = sl[d]
        ap = ag if d == 0 else acc_prev[topo.level_parent[d]]
        a_ = ap + k.c[s_]
        if single[d]:
            q1 = Dinv[d] * (u[d] - jnp.sum(U[d] * a_, axis=-1))
            acc_prev = a_ + S[s_][:, :, 0] * q1[:, None]
            ql = jnp.concatenate([q1[:, None], jnp.zeros((q1.shape[0], topo.width - 1))], axis=1)
        else:
            ql = mv(Dinv[d], u[d] - mtv(U[d], a_)) * mask[s_]
            acc_prev = a_ + mv(S[s_], ql)
        qdd.append(ql)
    return scatter_dofs(model, topo, jnp.concatenate(qdd))
