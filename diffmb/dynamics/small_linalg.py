"""Dense factorisations and solves for the small matrices of a time step, in plain XLA ops.

Cholesky (symmetric positive definite A = L Lᵀ) and LU with partial pivoting (square A,
P A = L U) as loops over the columns (``lax.fori_loop``, full-width masked updates: the
compiled size does not grow with the order). Under ``jax.vmap`` they stay ordinary batched
XLA ops instead of jaxlib's batched LAPACK custom calls, which cost a fixed overhead per call
and on CPU can deadlock on their own thread pool (docs/performance.md, "Why the Humanoid
wedges").

The solves are ``lax.custom_linear_solve``: x = A⁻¹ b with the tangent
dx = A⁻¹ (db − dA x) and the cotangents by the transposed solve, both reusing the
factorisation, which is not itself differentiated. They work under ``jit``, ``vmap``, ``jvp``
and ``grad``. A matrix that is singular (LU) or not positive definite (Cholesky) gives
non-finite solutions, as ``jnp.linalg.solve`` and ``jax.scipy.linalg.cho_solve`` do; NaN or
inf in A or b propagate.

Matrices larger than :data:`MAX_ORDER` go to ``jax.numpy.linalg`` / ``jax.scipy.linalg``;
:func:`uses_loops` is that rule, and every function here follows it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

#: the largest order factored by the loops here; larger matrices go to LAPACK (on CPU)
MAX_ORDER = 64


def uses_loops(n: int) -> bool:
    """Whether an n × n matrix is factored and solved by this module's loops (True) or by
    ``jax.numpy.linalg`` / ``jax.scipy.linalg`` (False)."""
    return n <= MAX_ORDER


class Cholesky(NamedTuple):
    """The Cholesky factorisation of ``a`` (n, n): ``l`` lower triangular (zeros above),
    a = l lᵀ, taken on ``a`` without its derivatives (the solves carry them)."""

    a: jax.Array
    l: jax.Array  # noqa: E741


class LU(NamedTuple):
    """The LU factorisation of ``a`` (n, n) with partial pivoting: ``lu`` packs the unit lower
    factor below the diagonal and the upper factor on and above it, a[perm] = L U (loops), or
    ``perm`` holds LAPACK's pivots (``jax.scipy.linalg.lu_factor``, when not
    :func:`uses_loops`)."""

    a: jax.Array
    lu: jax.Array
    perm: jax.Array


def _check_square(a, who):
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{who}: a square matrix (n, n) is required, got shape {a.shape}"
                         " (batch with jax.vmap)")


def _cholesky_loop(a):
    n = a.shape[-1]
    idx = jnp.arange(n)

    def column(j, L):  # left-looking: column j from the columns before it
        v = a[:, j] - L @ L[j, :]
        d = jnp.sqrt(v[j])
        return L.at[:, j].set(jnp.where(idx > j, v / d, jnp.where(idx == j, d, 0.0)))

    L = lax.fori_loop(0, n, column, jnp.zeros_like(a))
    return jnp.where(jnp.all(jnp.diagonal(L) > 0), L, jnp.nan)


def _lu_loop(a):
    n = a.shape[-1]
    idx = jnp.arange(n)

    def column(j, carry):  # right-looking, rows left in place; the pivot rows are marked
        A, free, perm = carry
        c = A[:, j]
        p = jnp.argmax(jnp.where(free, jnp.abs(c), -1.0))  # the largest |pivot| left
        free = free & (idx != p)
        l = jnp.where(free, c / c[p], 0.0)  # noqa: E741
        u = jnp.where(idx > j, A[p], 0.0)
        A = jnp.where((idx == j)[None, :] & free[:, None], l[:, None],
                      A - l[:, None] * u[None, :])
        return A, free, perm.at[j].set(p)

    A, _, perm = lax.fori_loop(0, n, column, (a, jnp.ones(n, bool), idx), unroll=2)
    return A[perm], perm


def _forward(L, b, unit):
    """y with L y = b, L lower triangular (only its strict lower part and, unless ``unit``,
    its diagonal read); b (n,) or (n, k)."""
    n = L.shape[-1]
    idx = jnp.arange(n)

    def row(i, y):
        r = b[i] - jnp.where(idx < i, L[i], 0.0) @ y
        return y.at[i].set(r if unit else r / L[i, i])

    return lax.fori_loop(0, n, row, jnp.zeros_like(b))


def _backward(U, b, unit):
    """x with U x = b, U upper triangular (only its strict upper part and, unless ``unit``,
    its diagonal read); b (n,) or (n, k)."""
    n = U.shape[-1]
    idx = jnp.arange(n)

    def row(t, x):
        i = n - 1 - t
        r = b[i] - jnp.where(idx > i, U[i], 0.0) @ x
        return x.at[i].set(r if unit else r / U[i, i])

    return lax.fori_loop(0, n, row, jnp.zeros_like(b))


def _linear_solve(a, b, solve, transpose_solve):
    """A⁻¹ b by ``solve``, differentiated as x = A⁻¹ b (``transpose_solve``: Aᵀ⁻¹ b, None
    when A is symmetric)."""
    return lax.custom_linear_solve(
        lambda x: a @ x, b, lambda _, r: solve(r),
        transpose_solve=None if transpose_solve is None else lambda _, r: transpose_solve(r),
        symmetric=transpose_solve is None)


def cholesky(a):
    """The lower Cholesky factor L of a symmetric positive-definite ``a`` (n, n) (its lower
    triangle read), zeros above the diagonal, differentiable; NaN everywhere when ``a`` is not
    positive definite. ``(cholesky(a), True)`` is a ``jax.scipy.linalg.cho_factor`` pair."""
    a = jnp.asarray(a)
    _check_square(a, "cholesky")
    if not uses_loops(a.shape[-1]):
        return jnp.linalg.cholesky(a)
    return _cholesky_loop(a)


def cho_factor(a) -> Cholesky:
    """The Cholesky factorisation of a symmetric positive-definite ``a`` (n, n), for
    :func:`cho_solve`."""
    a = jnp.asarray(a)
    _check_square(a, "cho_factor")
    return Cholesky(a, cholesky(lax.stop_gradient(a)))


def cho_solve(factor: Cholesky, b):
    """x = A⁻¹ b (b (n,) or (n, k)) for the factorisation of a symmetric positive-definite A,
    differentiable with respect to A and b."""
    a, L = factor.a, lax.stop_gradient(factor.l)
    b = jnp.asarray(b, jnp.result_type(a, b))
    if not uses_loops(a.shape[-1]):
        solve = lambda r: jax.scipy.linalg.cho_solve((L, True), r)  # noqa: E731
    else:
        Lt = L.T
        solve = lambda r: _backward(Lt, _forward(L, r, False), False)  # noqa: E731
    return _linear_solve(a, b, solve, None)


def lu_factor(a) -> LU:
    """The LU factorisation with partial pivoting of a square ``a`` (n, n), for
    :func:`lu_solve`."""
    a = jnp.asarray(a)
    _check_square(a, "lu_factor")
    a0 = lax.stop_gradient(a)
    if not uses_loops(a.shape[-1]):
        return LU(a, *jax.scipy.linalg.lu_factor(a0))
    return LU(a, *_lu_loop(a0))


def lu_solve(factor: LU, b):
    """x = A⁻¹ b (b (n,) or (n, k)) for the LU factorisation of A, differentiable with respect
    to A and b."""
    a, lu, perm = factor.a, lax.stop_gradient(factor.lu), factor.perm
    b = jnp.asarray(b, jnp.result_type(a, b))
    if not uses_loops(a.shape[-1]):
        def solve(r):
            return jax.scipy.linalg.lu_solve((lu, perm), r)

        def transpose_solve(r):
            return jax.scipy.linalg.lu_solve((lu, perm), r, trans=1)
    else:
        lut = lu.T

        def solve(r):
            return _backward(lu, _forward(lu, r[perm], True), False)

        def transpose_solve(r):  # Aᵀ = Uᵀ Lᵀ P
            w = _backward(lut, _forward(lut, r, False), True)
            return jnp.zeros_like(w).at[perm].set(w)
    return _linear_solve(a, b, solve, transpose_solve)


def solve(a, b):
    """x = A⁻¹ b for a square ``a`` (n, n) and b (n,) or (n, k) (LU with partial pivoting), as
    ``jnp.linalg.solve``."""
    return lu_solve(lu_factor(a), b)


def spd_solve(a, b):
    """x = A⁻¹ b for a symmetric positive-definite ``a`` (n, n) and b (n,) or (n, k)
    (Cholesky)."""
    return cho_solve(cho_factor(a), b)


def inv(a):
    """A⁻¹ of a square ``a`` (n, n) (LU with partial pivoting)."""
    a = jnp.asarray(a)
    return solve(a, jnp.eye(a.shape[-1], dtype=a.dtype))
