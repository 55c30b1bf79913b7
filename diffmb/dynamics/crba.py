"""Composite-rigid-body algorithm (mass matrix), Featherstone Table 6.2.

Composite inertias of rigid bodies stay rigid, so they are carried as (m, h, Ī): 10 numbers.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from . import _tree as T


def crba(model: Model, q):
    """M(q) (nv, nv), armature included."""
    Rs, ps, _, _ = T.forward_placements(model, q)
    m, h, Ib = T.node_inertias(model)
    n = model.n_nodes
    mc, hc, Ic = list(m), list(h), list(Ib)
    for i in reversed(range(n)):
        par = model.node_parent[i]
        if par >= 0:
            dm, dh, dI = T.rigid_transform_up(Rs[i], ps[i], mc[i], hc[i], Ic[i])
            mc[par], hc[par], Ic[par] = mc[par] + dm, hc[par] + dh, Ic[par] + dI
    M = jnp.zeros((model.nv, model.nv))
    for i in range(n):
        S = T.motion_subspace(model, i)  # (6, k)
        k = S.shape[1]
        # F = Ic S, column by column, with the structured inertia
        Fn, Ff = [], []
        for c in range(k):
            fw, fv = T.inertia_apply(mc[i], hc[i], Ic[i], S[:3, c], S[3:, c])
            Fn.append(fw)
            Ff.append(fv)
        Fn, Ff = jnp.stack(Fn, 1), jnp.stack(Ff, 1)  # (3, k)
        vi = model.node_v[i]
        M = M.at[vi : vi + k, vi : vi + k].set(S[:3].T @ Fn + S[3:].T @ Ff)
        j = i
        while model.node_parent[j] >= 0:
            Fn, Ff = _xT(Rs[j], ps[j], Fn, Ff)
            j = model.node_parent[j]
            Sj = T.motion_subspace(model, j)
            vj = model.node_v[j]
            kj = Sj.shape[1]
            blk = Fn.T @ Sj[:3] + Ff.T @ Sj[3:]  # (k, kj)
            M = M.at[vi : vi + k, vj : vj + kj].set(blk)
            M = M.at[vj : vj + kj, vi : vi + k].set(blk.T)
    return M + jnp.diag(model.armature)


def _xT(R, p, Fn, Ff):
    """Xupᵀ applied to the columns of a (3, k) pair."""
    fp = R @ Ff
    return R @ Fn + jnp.cross(p, fp.T).T, fp
