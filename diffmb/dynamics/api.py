"""The public dynamics functions (argument checks, method dispatch)."""

from __future__ import annotations

import jax.numpy as jnp

from ..model import Model
from .aba import aba
from .crba import crba, crba_kin
from .kinematics import kinematics
from .rnea import rnea, rnea_kin

__all__ = ["mass_matrix", "bias_force", "inverse_dynamics", "forward_dynamics"]

METHODS = ("aba", "crba", "lagrange", "kane", "kane_paths")


def _check(model: Model, q, v=None, a=None, f_ext=None, what="q"):
    q = jnp.asarray(q)
    if q.shape != (model.nq,):
        raise ValueError(f"{model.name}: q has shape {q.shape}, expected ({model.nq},)")
    for name, x in (("v", v), ("a", a)):
        if x is not None and jnp.shape(x) != (model.nv,):
            raise ValueError(f"{model.name}: {name} has shape {jnp.shape(x)}, expected ({model.nv},)")
    if f_ext is not None and jnp.shape(f_ext) != (model.n_bodies, 6):
        raise ValueError(
            f"{model.name}: f_ext has shape {jnp.shape(f_ext)}, expected ({model.n_bodies}, 6)"
            " rows in model.body_names order, [force, torque] in world frame at each body's com"
        )


def mass_matrix(model: Model, q):
    """Joint-space inertia M(q): (nq,) -> (nv, nv), armature included (CRBA)."""
    _check(model, q)
    return crba(model, q)


def bias_force(model: Model, q, v):
    """C(q, v) v + g(q): (nv,). Equal to ``inverse_dynamics`` with a = 0."""
    _check(model, q, v)
    return rnea(model, q, v, jnp.zeros(model.nv))


def inverse_dynamics(model: Model, q, v, a, f_ext=None):
    """τ = M a + C v + g − Σ Jᵀ f_ext (RNEA). f_ext: (nbody, 6) world [force, torque] at coms."""
    _check(model, q, v, a, f_ext)
    return rnea(model, q, v, a, f_ext)


def forward_dynamics(model: Model, q, v, tau, f_ext=None, method: str = "aba"):
    """Accelerations a (nv,) solving M a = τ − bias_force + Σ Jᵀ f_ext.

    ``method``: "aba" (O(n)), "crba" (M by CRBA, Cholesky solve), "lagrange" (recursive
    Lagrange of Xu et al. (2021); rigid bodies only: refused with added inertia), "kane" (Kane's
    equations, Wu et al. (2019), Xu et al. (2018)), "kane_paths" (Kane's equations with the
    partial velocities assembled along the paths of the path matrix, Xu et al. (2018) §3.1–3.2:
    :func:`diffmb.dynamics.kane.path_support`).
    """
    _check(model, q, v, tau, f_ext)
    if method == "aba":
        return aba(model, q, v, tau, f_ext)
    if method == "crba":
        kin = kinematics(model, q, v)
        M = crba_kin(model, kin)
        rhs = tau - rnea_kin(model, kin, jnp.zeros(model.nv), f_ext)
        from .small_linalg import spd_solve

        return spd_solve(M, rhs)
    if method == "lagrange":
        from .lagrange import forward_dynamics_lagrange

        if model.has_added_inertia:
            raise NotImplementedError(
                f"{model.name}: the recursive Lagrange formulation covers rigid bodies only; this"
                " model has added inertia (Model.body_added_inertia): use method 'aba', 'crba' or"
                " 'kane'")

        return forward_dynamics_lagrange(model, q, v, tau, f_ext)
    if method == "kane":
        from .kane import forward_dynamics_kane

        return forward_dynamics_kane(model, q, v, tau, f_ext)
    if method == "kane_paths":
        from .kane import forward_dynamics_kane, path_support

        return forward_dynamics_kane(model, q, v, tau, f_ext, support=path_support(model))
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
