"""Recursive Newton–Euler algorithm (inverse dynamics), Featherstone Table 5.1, in world
coordinates: velocities and accelerations are sums over ancestors and joint forces sums over
subtrees, both products with the static ancestor matrix (see ``_world``).

τ = M(q) a + C(q, v) v + g(q) − Σ Jᵀ f_ext, with armature on the diagonal of M.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from ..spatial.spatial import cross_force
from ._world import (
    Kin,
    accumulate_down,
    accumulate_up,
    ext_wrenches,
    mtv,
    mv,
    node_dofs,
    scatter_dofs,
)


def rnea(model: Model, q, v, a, f_ext=None, gravity=True):
    return rnea_kin(model, Kin(model, q, v), a, f_ext, gravity)


def rnea_kin(model: Model, k: Kin, a, f_ext=None, gravity=True):
    """RNEA on an already computed kinematic state ``k`` (with velocities)."""
    topo = k.topo
    ag = jnp.concatenate([jnp.zeros(3), -model.gravity]) if gravity else jnp.zeros(6)
    aJ = mv(k.S, node_dofs(topo, a)) + k.c
    acc = accumulate_down(topo, aJ) + ag
    f = mv(k.I, acc) + cross_force(k.vel, mv(k.I, k.vel))
    fe = ext_wrenches(model, topo, k.com, f_ext)
    if fe is not None:
        f = f - fe
    F = accumulate_up(topo, f)  # subtree sums
    tau = mtv(k.S, F)
    return scatter_dofs(model, topo, tau) + model.armature * a
