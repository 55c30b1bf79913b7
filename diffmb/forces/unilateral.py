"""Unilateral constraints at the acceleration level and the linear complementarity problem.

An element deriving from :class:`AbstractUnilateral` applies no force through
:func:`~diffmb.forces.elements.total_force`; it gives ``rows(model, t, q, v)``, a
:class:`UnilateralRows` of m rows, and :func:`diffmb.simulate`/:func:`diffmb.forward` solve for
its multipliers f (m,) after the free accelerations, as they do for exact couplings:

    row quantity       w = J a + drift ≥ 0      (a normal acceleration with its stabilisation)
    multiplier         f ≥ 0,   fᵀ w = 0        (complementarity)
    generalized force  Σ_i f_i (tau_i + J_bᵀ f_ext_i)   (per unit f_i: a joint-space part and
                                                        body wrenches, not necessarily along J)

With a₀ the accelerations without the rows and X = M⁻¹ Q (Q the generalized forces per unit
multiplier, exact couplings held), a = a₀ + X f and w = (J X) f + (J a₀ + drift): the LCP
A f + b ≥ 0, f ≥ 0, fᵀ(A f + b) = 0 with A = J X (not symmetric when the force is not along J),
solved by :func:`solve_lcp`. Rows marked inactive carry no force and are not constrained.
"""

from __future__ import annotations

import abc
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..model import Model
from .elements import AbstractForce

__all__ = ["AbstractUnilateral", "UnilateralRows", "solve_lcp", "LCP_MAX_ROWS"]

#: the largest LCP that :func:`solve_lcp` enumerates (2^m active sets in one batch)
LCP_MAX_ROWS = 10


class UnilateralRows(NamedTuple):
    """m unilateral rows at one state: ``J`` (m, nv), ``drift`` (m,) (w = J a + drift),
    ``tau`` (m, nv) and ``f_ext`` (m, nbody, 6) the generalized force and the body wrenches
    (force, torque at the body's centre of mass, world axes) per unit multiplier, ``active``
    (m,) bool: the rows that may carry force (the others get f = 0 and are not constrained)."""

    J: jnp.ndarray
    drift: jnp.ndarray
    tau: jnp.ndarray
    f_ext: jnp.ndarray
    active: jnp.ndarray


class AbstractUnilateral(AbstractForce):
    """A force element whose force is the multiplier of unilateral rows (see the module
    docstring): ``rows(model, t, q, v) -> UnilateralRows``. Its ``__call__`` adds nothing.

    One that also derives from :class:`~diffmb.forces.AbstractStatefulForce` carries the
    impulses ∫ f dt (m,) of its rows as its state: the solve sets their rate to f (its
    ``stateful_call`` returns a placeholder), so a trajectory's saved states give the mean
    multipliers between saves without evaluating them again."""

    @abc.abstractmethod
    def rows(self, model: Model, t, q, v) -> UnilateralRows:
        raise NotImplementedError

    @abc.abstractmethod
    def n_rows(self, model: Model) -> int:
        """m, the number of rows (static)."""
        raise NotImplementedError

    def __call__(self, model: Model, t, q, v, ctrl):
        return jnp.zeros(model.nv), None


def _active_sets(m: int) -> np.ndarray:
    """All 2^m subsets of m rows as a boolean (2^m, m) table (row k: the bits of k)."""
    k = np.arange(2 ** m)[:, None]
    return ((k >> np.arange(m)[None, :]) & 1).astype(bool)


def solve_lcp(A, b, active=None):
    """The solution f (m,) of the LCP A f + b ≥ 0, f ≥ 0, fᵀ(A f + b) = 0, and its violation.

    Exact enumeration: for each of the 2^m active sets S (one batched solve) f_S solves
    (A f + b)_S = 0 with f = 0 off S; the set whose solution violates f ≥ 0 and A f + b ≥ 0
    least is returned (a set whose system is singular counts as infinitely violated). For a
    P-matrix A (e.g. A = J M⁻¹ Jᵀ of independent rows, and its small non-symmetric
    perturbations) exactly one solution exists and its violation is round-off; sets that
    differ only in rows with f_i = w_i = 0 give that same solution. Where no set satisfies the
    conditions (A not a P-matrix), the least violating one is returned and ``violation`` says
    by how much: max(−f_i |A_ii|, −w_i, 0) over the rows, in the units of b, divided by
    1 + max|b|. Rows with ``active`` False are removed (f_i = 0, w_i unconstrained).

    Differentiable piecewise (within the selected set, the derivatives of its linear solve),
    traceable under jit/vmap; m ≤ :data:`LCP_MAX_ROWS`."""
    A, b = jnp.asarray(A), jnp.asarray(b)
    m = b.shape[0]
    if A.shape != (m, m):
        raise ValueError(f"solve_lcp: A has shape {A.shape}, expected ({m}, {m}) for b of "
                         f"shape {b.shape}")
    if m > LCP_MAX_ROWS:
        raise ValueError(f"solve_lcp: {m} rows; enumeration handles at most {LCP_MAX_ROWS}")
    on = jnp.ones(m, bool) if active is None else jnp.asarray(active, bool)
    eye = jnp.eye(m, dtype=A.dtype)
    both = on[:, None] & on[None, :]
    A = jnp.where(both, A, eye)  # removed rows: f_i = 0, w_i = 0, no coupling to the others
    b = jnp.where(on, b, 0.0)
    scale = 1.0 + jnp.max(jnp.abs(b))
    dA = jnp.diagonal(A)
    sets = jnp.asarray(_active_sets(m))

    def one(S):
        K = jnp.where(S[:, None] & S[None, :], A, 0.0) + jnp.diag(jnp.where(S, 0.0, 1.0))
        f = jnp.where(S, jnp.linalg.solve(K, jnp.where(S, -b, 0.0)), 0.0)
        w = A @ f + b
        viol = jnp.maximum(jnp.max(jnp.maximum(-f * jnp.abs(dA), -w)), 0.0) / scale
        ok = jnp.all(jnp.isfinite(f)) & jnp.isfinite(viol)
        return jnp.where(ok, f, 0.0), jnp.where(ok, viol, jnp.inf)

    F, V = jax.vmap(one)(sets)
    k = jnp.argmin(V)
    return F[k], V[k]
