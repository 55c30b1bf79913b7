"""The inertial-parameter regressor: τ = Y(q, v, a) π, linear in the standard parameters.

π holds, per body, [m, m c_x, m c_y, m c_z, Ī_xx, Ī_xy, Ī_xz, Ī_yy, Ī_yz, Ī_zz] with the first
moment m c and the rotational inertia Ī about the *body frame origin* (Atkins/Khalil's
parameterisation, in which inverse dynamics is exactly linear). Y is the Jacobian of RNEA with
respect to π, obtained by autodiff; armature and external forces are left out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..model import Model
from ..spatial.rotation import skew
from .rnea import rnea

__all__ = ["inertial_parameters", "with_inertial_parameters", "inertial_regressor"]

_IU = (jnp.array([0, 0, 0, 1, 1, 2]), jnp.array([0, 1, 2, 1, 2, 2]))


def inertial_parameters(model: Model):
    """π (nb, 10) of the model's bodies."""
    m, c, Ic = model.body_mass, model.body_com, model.body_inertia
    h = m[:, None] * c
    cx = skew(c)
    Ibar = Ic - m[:, None, None] * (cx @ cx)
    return jnp.concatenate([m[:, None], h, Ibar[:, _IU[0], _IU[1]]], axis=1)


def with_inertial_parameters(model: Model, pi):
    """The model whose bodies have the parameters π (nb, 10) (must be physically consistent)."""
    m = pi[:, 0]
    safe_m = jnp.where(m > 0, m, 1.0)
    c = jnp.where((m > 0)[:, None], pi[:, 1:4] / safe_m[:, None], 0.0)
    Ibar = jnp.zeros((pi.shape[0], 3, 3)).at[:, _IU[0], _IU[1]].set(pi[:, 4:])
    Ibar = Ibar.at[:, _IU[1], _IU[0]].set(pi[:, 4:])
    cx = skew(c)
    Ic = Ibar + m[:, None, None] * (cx @ cx)
    return eqx_tree_at(model, m, c, Ic)


def eqx_tree_at(model, m, c, Ic):
    import equinox as eqx

    return eqx.tree_at(lambda mm: (mm.body_mass, mm.body_com, mm.body_inertia), model, (m, c, Ic))


def inertial_regressor(model: Model, q, v, a):
    """Y (nv, 10 nb) with τ = Y π.ravel() (armature excluded)."""
    model0 = eqx_tree_at(model, model.body_mass, model.body_com, model.body_inertia)
    import equinox as eqx

    model0 = eqx.tree_at(lambda mm: mm.armature, model0, jnp.zeros_like(model.armature))

    def tau(pi_flat):
        return rnea(with_inertial_parameters(model0, pi_flat.reshape(-1, 10)), q, v, a)

    pi = inertial_parameters(model).ravel()
    return jax.jacfwd(tau)(pi)
