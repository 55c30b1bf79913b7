"""Composite-rigid-body algorithm (mass matrix), Featherstone Table 6.2, in world coordinates.

Composite inertias are subtree sums (accumulated level by level from the leaves); M[r, s] is
S_rᵀ I^c S_s taken at the deeper of the two dofs' nodes, zero when neither node supports the other.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from ._world import accumulate_up, mmt, mv
from .kinematics import KinematicsData, kinematics


def crba(model: Model, q):
    """Joint-space inertia M(q) (nv, nv), armature included."""
    return crba_kin(model, kinematics(model, q))


def crba_kin(model: Model, kin: KinematicsData):
    """CRBA on a kinematic result ``kin``."""
    topo = kin.topo
    Ic = accumulate_up(topo, kin.I)  # composite inertias
    Sd = kin.S[topo.dof_node, :, topo.dof_slot]  # (nv, 6) world motion subspace of each dof
    Fd = mv(Ic[topo.dof_node], Sd)  # (nv, 6): Ic of the dof's node times its S
    G = mmt(Sd, Fd)  # G[r, s] = S_r · Ic_{node(s)} S_s, right when node(s) is the deeper one
    M = jnp.where(jnp.asarray(topo.s_deeper), G, G.T) * topo.m_mask
    return M + jnp.diag(model.armature)
