"""Recursive Newton–Euler algorithm (inverse dynamics), Featherstone Table 5.1, in world
coordinates: velocities and accelerations are sums over ancestors and joint forces sums over
subtrees, both products with the static ancestor matrix (see ``_world``).

τ = M(q) a + C(q, v) v + g(q) − Σ Jᵀ f_ext, with armature on the diagonal of M. With added
inertia (``Model.has_added_inertia``) the node inertias are rigid + added, so M_A a and the
Kirchhoff/Munk terms ν ×* M_A ν come out of the same products, and gravity is applied as the
rigid part's weight instead of a base acceleration.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from ..spatial.spatial import cross_force
from ._world import accumulate_up, ext_wrenches, mtv, mv, scatter_dofs
from .kinematics import (
    KinematicsData,
    body_coms,
    gravity_wrenches,
    kinematics,
    node_accelerations,
)


def rnea(model: Model, q, v, a, f_ext=None, gravity=True):
    """Joint forces τ (nv,) at (q, v) for joint accelerations a (nv,) and external wrenches
    f_ext (nb, 6) [force, torque] at the body coms, world axes."""
    return rnea_kin(model, kinematics(model, q, v), a, f_ext, gravity)


def rnea_kin(model: Model, kin: KinematicsData, a, f_ext=None, gravity=True):
    """RNEA on a kinematic result ``kin`` (with velocities)."""
    topo = kin.topo
    if kin.I_added is None:  # gravity as a base acceleration (Featherstone)
        ag = jnp.concatenate([jnp.zeros(3), -model.gravity]) if gravity else jnp.zeros(6)
        acc = node_accelerations(kin, a) + ag
        f = mv(kin.I, acc) + cross_force(kin.vel, mv(kin.I, kin.vel))
    else:  # added inertia has no weight: gravity on the rigid part only
        f = mv(kin.I, node_accelerations(kin, a)) + cross_force(kin.vel, mv(kin.I, kin.vel))
        if gravity:
            f = f + gravity_wrenches(model, kin)
    if f_ext is not None:
        f = f - ext_wrenches(model, topo, body_coms(model, kin), f_ext)
    F = accumulate_up(topo, f)  # subtree sums
    tau = mtv(kin.S, F)
    return scatter_dofs(model, topo, tau) + model.armature * a
