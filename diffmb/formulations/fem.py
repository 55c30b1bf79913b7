"""Planar Euler–Bernoulli beam finite elements (Hermite cubics).

Conventions (used by :mod:`diffmb.formulations.modal` and :mod:`diffmb.models.flexible_arm`):

* A straight beam lies along the local x axis from x = 0 (root) to x = L (tip) and deflects
  transversally by w(x). Node k sits at x_k; its two degrees of freedom are ``[w_k, w'_k]``
  (deflection and slope dw/dx), so a mesh of ``n`` elements has ``2 (n + 1)`` global dofs,
  ordered ``[w_0, w'_0, w_1, w'_1, ..., w_n, w'_n]``.
* Inside element e of length ``le`` with ξ = (x − x_e) / le ∈ [0, 1], the Hermite cubics are

      N1 = 1 − 3ξ² + 2ξ³,  N2 = le (ξ − 2ξ² + ξ³),  N3 = 3ξ² − 2ξ³,  N4 = le (−ξ² + ξ³)

  and w = N · [w_e, w'_e, w_{e+1}, w'_{e+1}].
* Element mass (consistent) ``ρA ∫ Nᵀ N dx`` and stiffness ``EI ∫ N''ᵀ N'' dx`` are the textbook
  closed forms (e.g. Przemieniecki, *Theory of Matrix Structural Analysis*, 1968, §11).
* Shape-function integrals for a body that rotates about an axis through the point x = −r0 of the
  beam line (a hub of radius r0): ``s0 = ∫ ρA N dx`` and ``s1 = ∫ ρA x N dx`` (global x from the
  beam root), assembled into global vectors, and the rigid moments ``∫ ρA dx``, ``∫ ρA x dx``,
  ``∫ ρA x² dx``. They give the rigid–flexible coupling ``−(r0 s0 + s1)`` of a beam whose points
  move with velocity ``ẇ − (r0 + x) θ̇`` (see :mod:`diffmb.models.flexible_arm`).

Every function is pure JAX, differentiable in the section properties and element lengths; the
mesh size ``n`` is a static Python int.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

__all__ = [
    "hermite_shape",
    "element_mass",
    "element_stiffness",
    "element_shape_integrals",
    "assemble",
    "assemble_vector",
    "beam_matrices",
    "beam_inertia_integrals",
    "apply_dirichlet",
    "free_dofs",
    "tube_section",
]


def hermite_shape(xi: ArrayLike, le: ArrayLike) -> Array:
    """Hermite cubic shape functions N(ξ) for an element of length ``le``: shape (..., 4)."""
    xi = jnp.asarray(xi)
    le = jnp.asarray(le)
    return jnp.stack(
        [
            1.0 - 3.0 * xi**2 + 2.0 * xi**3,
            le * (xi - 2.0 * xi**2 + xi**3),
            3.0 * xi**2 - 2.0 * xi**3,
            le * (-(xi**2) + xi**3),
        ],
        axis=-1,
    )


def element_mass(rho_a: ArrayLike, le: ArrayLike) -> Array:
    """Consistent mass matrix ``ρA ∫₀^le Nᵀ N dx`` of one element: (4, 4)."""
    le = jnp.asarray(le)
    m = jnp.array(
        [
            [156.0, 22.0, 54.0, -13.0],
            [22.0, 4.0, 13.0, -3.0],
            [54.0, 13.0, 156.0, -22.0],
            [-13.0, -3.0, -22.0, 4.0],
        ]
    )
    s = jnp.stack([jnp.ones_like(le), le, jnp.ones_like(le), le])
    return rho_a * le / 420.0 * m * s[:, None] * s[None, :]


def element_stiffness(ei: ArrayLike, le: ArrayLike) -> Array:
    """Bending stiffness matrix ``EI ∫₀^le N''ᵀ N'' dx`` of one element: (4, 4)."""
    le = jnp.asarray(le)
    k = jnp.array(
        [
            [12.0, 6.0, -12.0, 6.0],
            [6.0, 4.0, -6.0, 2.0],
            [-12.0, -6.0, 12.0, -6.0],
            [6.0, 2.0, -6.0, 4.0],
        ]
    )
    s = jnp.stack([jnp.ones_like(le), le, jnp.ones_like(le), le])
    return ei / le**3 * k * s[:, None] * s[None, :]


def element_shape_integrals(le: ArrayLike) -> tuple[Array, Array]:
    """``(∫₀^le N dx, ∫₀^le x_e N dx)`` with x_e the local coordinate: two (4,) vectors."""
    le = jnp.asarray(le)
    n0 = le * jnp.stack([0.5 * jnp.ones_like(le), le / 12.0, 0.5 * jnp.ones_like(le), -le / 12.0])
    n1 = le**2 * jnp.stack(
        [3.0 / 20.0 * jnp.ones_like(le), le / 30.0, 7.0 / 20.0 * jnp.ones_like(le), -le / 20.0]
    )
    return n0, n1


def _dofs(n_el: int):
    return np.arange(4)[None, :] + 2 * np.arange(n_el)[:, None]  # (n_el, 4)


def assemble(element_matrices: Array) -> Array:
    """Assemble (n, 4, 4) element matrices of a chain of elements into (2n+2, 2n+2)."""
    n_el = element_matrices.shape[0]
    dofs = _dofs(n_el)
    ndof = 2 * (n_el + 1)
    out = jnp.zeros((ndof, ndof), dtype=element_matrices.dtype)
    return out.at[dofs[:, :, None], dofs[:, None, :]].add(element_matrices)


def assemble_vector(element_vectors: Array) -> Array:
    """Assemble (n, 4) element vectors into a global (2n+2,) vector."""
    n_el = element_vectors.shape[0]
    out = jnp.zeros((2 * (n_el + 1),), dtype=element_vectors.dtype)
    return out.at[_dofs(n_el)].add(element_vectors)


def _per_element(x: ArrayLike, n_el: int) -> Array:
    return jnp.broadcast_to(jnp.asarray(x, dtype=jnp.float64), (n_el,))


@functools.partial(jax.jit, static_argnames="n_el")
def beam_matrices(
    ei: ArrayLike, rho_a: ArrayLike, length: ArrayLike, n_el: int
) -> tuple[Array, Array]:
    """Global (M, K), each (2n+2, 2n+2), of a beam of ``n_el`` equal elements, free ends.

    ``ei`` and ``rho_a`` may be scalars or per-element arrays (n_el,).
    """
    le = _per_element(length, n_el) / float(n_el)
    ei = _per_element(ei, n_el)
    rho_a = _per_element(rho_a, n_el)
    me = jax.vmap(element_mass)(rho_a, le)
    ke = jax.vmap(element_stiffness)(ei, le)
    return assemble(me), assemble(ke)


@functools.partial(jax.jit, static_argnames="n_el")
def beam_inertia_integrals(rho_a: ArrayLike, length: ArrayLike, n_el: int) -> dict:
    """Shape-function integrals of a beam of ``n_el`` equal elements (global dofs, free ends).

    Returns a dict with ``s0 = ∫ρA N dx`` (2n+2,), ``s1 = ∫ρA x N dx`` (2n+2,) with x measured
    from the beam root, and the rigid moments ``m = ∫ρA dx``, ``m1 = ∫ρA x dx``,
    ``m2 = ∫ρA x² dx``.
    """
    le = _per_element(length, n_el) / float(n_el)
    rho_a = _per_element(rho_a, n_el)
    x0 = jnp.concatenate([jnp.zeros((1,)), jnp.cumsum(le)[:-1]])  # element start coordinates
    n0, n1 = jax.vmap(element_shape_integrals)(le)  # (n, 4) each
    s0 = assemble_vector(rho_a[:, None] * n0)
    s1 = assemble_vector(rho_a[:, None] * (n1 + x0[:, None] * n0))
    x1 = x0 + le
    m = jnp.sum(rho_a * le)
    m1 = jnp.sum(rho_a * (x1**2 - x0**2) / 2.0)
    m2 = jnp.sum(rho_a * (x1**3 - x0**3) / 3.0)
    return {"s0": s0, "s1": s1, "m": m, "m1": m1, "m2": m2}


def free_dofs(ndof: int, fixed: tuple[int, ...] | list[int]):
    """Indices (numpy int array) of the dofs not in ``fixed`` (negative indices allowed)."""
    fixed_set = {int(i) % ndof for i in fixed}
    return np.array([i for i in range(ndof) if i not in fixed_set], dtype=int)


def apply_dirichlet(mat_or_vec: Array, fixed: tuple[int, ...] | list[int]) -> Array:
    """Remove the rows (and columns, for a matrix) of homogeneous Dirichlet dofs ``fixed``.

    A clamped root is ``fixed=(0, 1)``; a pinned root ``(0,)``; a clamped tip ``(-2, -1)``.
    """
    return _apply_dirichlet(mat_or_vec, tuple(int(i) for i in fixed))


@functools.partial(jax.jit, static_argnums=1)
def _apply_dirichlet(a: Array, fixed: tuple[int, ...]) -> Array:
    free = free_dofs(a.shape[0], fixed)
    if a.ndim == 1:
        return a[free]
    return a[free][:, free]


def tube_section(d_outer: ArrayLike, d_inner: ArrayLike) -> tuple[Array, Array]:
    """Area and second moment of area ``(A, I)`` of a circular tube."""
    area = jnp.pi / 4.0 * (d_outer**2 - d_inner**2)
    inertia = jnp.pi / 64.0 * (d_outer**4 - d_inner**4)
    return area, inertia
