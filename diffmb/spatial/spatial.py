"""6-D spatial vector algebra, Featherstone's convention and names.

Reference: R. Featherstone, *Rigid Body Dynamics Algorithms* (Springer 2008), ch. 2 (Tables 2.1,
2.2 and 2.8 for the structured forms). Spatial vectors are ``[angular(3); linear(3)]``:

* motion ``m = [omega; v]`` (v: velocity of the body-fixed point at the frame origin),
* force ``f = [n; f]`` (n: moment about the frame origin).

Plücker transform ``X = ^B X_A`` from frame A (parent) to frame B (child) is stored as ``(E, r)``:
``E`` (3, 3) rotates A coordinates into B coordinates and ``r`` (3,) is the position of B's origin
in A coordinates. Then::

    X      = [[E, 0], [-E [r]x, E]]        motion A -> B       (apply_motion)
    X^-1   = [[E^T, 0], [[r]x E^T, E^T]]   motion B -> A       (apply_motion_inverse)
    X^*    = [[E, -E [r]x], [0, E]]        force  A -> B       (apply_force)
    X^T    = [[E^T, [r]x E^T], [0, E^T]]   force  B -> A       (apply_force_transpose)

With diffmb's body -> world rotation ``R`` of a child relative to its parent, ``E = R^T``.

Cross products: ``crm(m) = [[w^x, 0], [v^x, w^x]]`` and ``crf(m) = -crm(m)^T`` are the 6x6
matrices (Featherstone's names); :func:`cross_motion` / :func:`cross_force` apply them to a vector
without forming them (the kernels of :mod:`diffmb.dynamics` use these). ``skew`` (``[a]x``) is
:func:`diffmb.spatial.rotation.skew`.

Spatial inertia about the frame origin (Featherstone's ``mcI``)::

    I = [[Ic + m [c]x [c]x^T, m [c]x], [m [c]x^T, m 1]]

stored in structured form as :class:`SpatialInertia` ``(mass, h = m c, Ibar = Ic - m [c]x^2)``.
Every structured routine uses 3x3 blocks and 3-vectors only (no products with known zeros);
``to_matrix`` / ``crm`` / ``crf`` / ``spatial_inertia`` build the explicit 6x6 matrices for tests
and reference. Shapes are for one object; use ``vmap`` for batches. All functions are pure JAX.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array

from .rotation import skew

__all__ = [
    "crm",
    "crf",
    "cross_motion",
    "cross_force",
    "to_matrix",
    "apply_motion",
    "apply_motion_inverse",
    "apply_force",
    "apply_force_transpose",
    "inverse",
    "compose",
    "spatial_inertia",
    "SpatialInertia",
    "spatial_inertia_structured",
    "inertia_apply",
    "inertia_to_matrix",
    "inertia_transform",
    "inertia_add",
]


# --------------------------------------------------------------------------------------------
# Cross products
# --------------------------------------------------------------------------------------------


def crm(m):
    """Motion cross-product matrix ``m x``: (6,) -> (6, 6)."""
    wx, vx = skew(m[:3]), skew(m[3:])
    z = jnp.zeros((3, 3), dtype=m.dtype)
    return jnp.block([[wx, z], [vx, wx]])


def crf(m):
    """Force cross-product matrix ``m x* = -crm(m)^T``: (6,) -> (6, 6)."""
    wx, vx = skew(m[:3]), skew(m[3:])
    z = jnp.zeros((3, 3), dtype=m.dtype)
    return jnp.block([[wx, vx], [z, wx]])


def cross_motion(m, u):
    """Motion cross product ``m x u = crm(m) @ u`` with 3-vectors: (..., 6), (..., 6) -> (..., 6)."""
    w, v = m[..., :3], m[..., 3:]
    ua, ul = u[..., :3], u[..., 3:]
    return jnp.concatenate([jnp.cross(w, ua), jnp.cross(w, ul) + jnp.cross(v, ua)], axis=-1)


def cross_force(m, f):
    """Force cross product ``m x* f = crf(m) @ f`` with 3-vectors: (..., 6), (..., 6) -> (..., 6)."""
    w, v = m[..., :3], m[..., 3:]
    n, fl = f[..., :3], f[..., 3:]
    return jnp.concatenate([jnp.cross(w, n) + jnp.cross(v, fl), jnp.cross(w, fl)], axis=-1)


# --------------------------------------------------------------------------------------------
# Plücker transforms (E, r)
# --------------------------------------------------------------------------------------------


def to_matrix(E, r):
    """Explicit 6x6 motion transform ``X = [[E, 0], [-E [r]x, E]]``: (3, 3), (3,) -> (6, 6)."""
    z = jnp.zeros((3, 3), dtype=E.dtype)
    return jnp.block([[E, z], [-E @ skew(r), E]])


def apply_motion(E, r, m):
    """``X m = [E w; E (v - r x w)]`` (parent -> child): (3, 3), (3,), (6,) -> (6,)."""
    w, v = m[:3], m[3:]
    return jnp.concatenate([E @ w, E @ (v - jnp.cross(r, w))])


def apply_motion_inverse(E, r, m):
    """``X^-1 m = [E^T w; E^T v + r x E^T w]`` (child -> parent): (3, 3), (3,), (6,) -> (6,)."""
    w = E.T @ m[:3]
    return jnp.concatenate([w, E.T @ m[3:] + jnp.cross(r, w)])


def apply_force(E, r, f):
    """``X^* f = [E (n - r x f); E f]`` (parent -> child): (3, 3), (3,), (6,) -> (6,)."""
    n, fl = f[:3], f[3:]
    return jnp.concatenate([E @ (n - jnp.cross(r, fl)), E @ fl])


def apply_force_transpose(E, r, f):
    """``X^T f = [E^T n + r x E^T f; E^T f]`` (child -> parent): (3, 3), (3,), (6,) -> (6,)."""
    fl = E.T @ f[3:]
    return jnp.concatenate([E.T @ f[:3] + jnp.cross(r, fl), fl])


def inverse(E, r):
    """``X^-1`` as ``(E^T, -E r)``: (3, 3), (3,) -> ((3, 3), (3,))."""
    return E.T, -(E @ r)


def compose(E2, r2, E1, r1):
    """``X2 X1`` for ``X1 = ^B X_A = (E1, r1)``, ``X2 = ^C X_B = (E2, r2)``.

    Returns ``(E2 E1, r1 + E1^T r2)``.
    """
    return E2 @ E1, r1 + E1.T @ r2


# --------------------------------------------------------------------------------------------
# Spatial inertia
# --------------------------------------------------------------------------------------------


def spatial_inertia(m, c, Ic):
    """Featherstone's ``mcI``: mass (), com c (3,), inertia about the com Ic (3, 3) -> (6, 6)."""
    C = skew(c)
    mI = m * jnp.eye(3, dtype=Ic.dtype)
    return jnp.block([[Ic + m * (C @ C.T), m * C], [m * C.T, mI]])


class SpatialInertia(eqx.Module):
    """Rigid-body spatial inertia about a frame origin, structured (Featherstone Table 2.8).

    mass: (), h: (3,) first moment ``m c``, Ibar: (3, 3) rotational inertia about the origin
    ``Ic + m [c]x [c]x^T``. The 6x6 matrix is ``[[Ibar, [h]x], [[h]x^T, m 1]]``.
    """

    mass: Array
    h: Array
    Ibar: Array


def spatial_inertia_structured(m, c, Ic):
    """Structured form of :func:`spatial_inertia`: (), (3,), (3, 3) -> SpatialInertia."""
    C = skew(c)
    m = jnp.asarray(m)
    return SpatialInertia(mass=m, h=m * c, Ibar=Ic + m * (C @ C.T))


def inertia_to_matrix(I):
    """SpatialInertia -> explicit (6, 6)."""
    H = skew(I.h)
    mI = I.mass * jnp.eye(3, dtype=I.Ibar.dtype)
    return jnp.block([[I.Ibar, H], [H.T, mI]])


def inertia_apply(I, m):
    """``I m = [Ibar w + h x v; m v - h x w]`` (momentum of motion m): (6,) -> (6,)."""
    w, v = m[:3], m[3:]
    return jnp.concatenate([I.Ibar @ w + jnp.cross(I.h, v), I.mass * v - jnp.cross(I.h, w)])


def inertia_add(I1, I2):
    """Sum of two structured inertias in the same frame."""
    return SpatialInertia(mass=I1.mass + I2.mass, h=I1.h + I2.h, Ibar=I1.Ibar + I2.Ibar)


def inertia_transform(E, r, I):
    """``X^T I X``: an inertia given in the child frame B, expressed in the parent frame A.

    ``I`` is a :class:`SpatialInertia` (structured, Featherstone Table 2.8:
    ``h' = E^T h + m r``, ``Ibar' = E^T Ibar E - [r]x [E^T h]x - [E^T h + m r]x [r]x``) or any
    (6, 6) matrix such as an articulated-body inertia (then with 3x3 blocks).
    E (3, 3), r (3,) -> same kind as ``I``.
    """
    if isinstance(I, SpatialInertia):
        Eh = E.T @ I.h
        hp = Eh + I.mass * r
        Rx = skew(r)
        Ibar = E.T @ I.Ibar @ E - Rx @ skew(Eh) - skew(hp) @ Rx
        return SpatialInertia(mass=I.mass, h=hp, Ibar=0.5 * (Ibar + Ibar.T))
    A, B = I[:3, :3], I[:3, 3:]
    C, D = I[3:, :3], I[3:, 3:]
    Rx = skew(r)
    # I X = [[A E - B E [r]x, B E], [C E - D E [r]x, D E]]
    BE, DE = B @ E, D @ E
    top_l, top_r = A @ E - BE @ Rx, BE
    bot_l, bot_r = C @ E - DE @ Rx, DE
    # X^T (I X): top = E^T top + [r]x E^T bot, bottom = E^T bot
    Et_bl, Et_br = E.T @ bot_l, E.T @ bot_r
    return jnp.block([[E.T @ top_l + Rx @ Et_bl, E.T @ top_r + Rx @ Et_br], [Et_bl, Et_br]])
