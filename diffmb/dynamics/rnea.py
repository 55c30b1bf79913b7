"""Recursive Newton–Euler algorithm (inverse dynamics), Featherstone Table 5.1.

τ = M(q) a + C(q, v) v + g(q) − Σ Jᵀ f_ext, with armature on the diagonal of M.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from . import _tree as T


def node_velocities(model: Model, q, v):
    """Placements, world poses and node-frame spatial velocities (ω, v) of every node."""
    Rs, ps, Rw, pw = T.forward_placements(model, q)
    ws, vs = [], []
    for i in range(model.n_nodes):
        par = model.node_parent[i]
        sw, sv = T.apply_s(model, i, T.node_v(model, v, i))
        if par < 0:
            w, vl = sw, sv
        else:
            w, vl = T.xup_motion(Rs[i], ps[i], ws[par], vs[par])
            w, vl = w + sw, vl + sv
        ws.append(w)
        vs.append(vl)
    return Rs, ps, Rw, pw, ws, vs


def rnea(model: Model, q, v, a, f_ext=None, gravity=True):
    """Inverse dynamics τ (nv,). ``f_ext``: (nbody, 6) world [force, torque] at body coms."""
    Rs, ps, Rw, pw, ws, vs = node_velocities(model, q, v)
    m, h, Ib = T.node_inertias(model)
    fn_ext, ff_ext = T.body_wrenches_to_nodes(model, Rw, pw, f_ext)
    g_w, g_v = T.world_gravity_accel(model) if gravity else (jnp.zeros(3), jnp.zeros(3))
    n = model.n_nodes
    aw, av, fn, ff = [], [], [], []
    for i in range(n):
        par = model.node_parent[i]
        pw_, pv_ = (g_w, g_v) if par < 0 else (aw[par], av[par])
        a_w, a_v = T.xup_motion(Rs[i], ps[i], pw_, pv_)
        sw, sv = T.apply_s(model, i, T.node_v(model, a, i))
        cw, cv = T.cross_motion(ws[i], vs[i], *T.apply_s(model, i, T.node_v(model, v, i)))
        a_w, a_v = a_w + sw + cw, a_v + sv + cv
        aw.append(a_w)
        av.append(a_v)
        hw, hv = T.inertia_apply(m[i], h[i], Ib[i], ws[i], vs[i])
        iw, iv = T.inertia_apply(m[i], h[i], Ib[i], a_w, a_v)
        xw, xv = T.cross_force(ws[i], vs[i], hw, hv)
        fn.append(iw + xw - fn_ext[i])
        ff.append(iv + xv - ff_ext[i])
    tau = [None] * n
    for i in reversed(range(n)):
        tau[i] = T.apply_st(model, i, fn[i], ff[i])
        par = model.node_parent[i]
        if par >= 0:
            dn, df = T.xup_force_T(Rs[i], ps[i], fn[i], ff[i])
            fn[par] = fn[par] + dn
            ff[par] = ff[par] + df
    return jnp.concatenate(tau) + model.armature * a
