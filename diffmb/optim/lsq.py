"""Generic nonlinear least squares with parameter transforms, covariance and identifiability.

``least_squares(residual_fn, params0, args)`` minimises ``½‖r(p, args)‖²`` over named scalar
parameters with optimistix (Levenberg–Marquardt or Gauss–Newton), in transformed coordinates:

* ``positive`` names: ``p = exp(z)``;
* a lower bound only: ``p = lo + exp(z)``; an upper bound only: ``p = hi − exp(z)``;
* both bounds: ``p = lo + (hi − lo) σ(z)`` with σ the logistic function;
* otherwise ``p = z``.

At the optimum the Jacobian ``J = ∂r/∂p`` is taken in the *original* coordinates, and

    s² = ‖r‖² / (m − n_p),   cov = s² (JᵀJ)⁻¹,   std = √diag(cov)

(the Gauss–Newton / Fisher approximation, e.g. Seber & Wild, *Nonlinear Regression*, §2.1).
Identifiability is judged on the column-scaled Jacobian ``J diag(|p|)`` (relative sensitivities;
columns of zero-valued parameters are left unscaled) by its singular values: any singular value
below ``rank_rtol · σ_max`` names the parameters with a large component in its right singular
vector; they are reported in a ``UserWarning``, their standard errors are ``inf`` and the
covariance uses the pseudo-inverse.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jax.flatten_util import ravel_pytree

__all__ = ["LSQResult", "least_squares", "covariance", "UnidentifiableWarning"]


class UnidentifiableWarning(UserWarning):
    """The data cannot identify some parameters (rank-deficient Fisher information)."""


@dataclasses.dataclass(frozen=True)
class LSQResult:
    """Outcome of :func:`least_squares`; all numbers are numpy / Python floats.

    ``params`` and ``std`` map names to estimates and standard errors; ``cov`` is (n_p, n_p) in
    the order of ``names``; ``residual_norm = ‖r‖₂`` at the optimum, ``cost = ½‖r‖²``,
    ``s2`` the residual variance estimate, ``dof = m − n_p``; ``jac`` the Jacobian in original
    coordinates; ``singular_values`` those of the column-scaled Jacobian; ``unidentifiable`` the
    names flagged; ``success`` whether the solver converged within ``max_steps``.
    """

    params: dict[str, float]
    std: dict[str, float]
    cov: np.ndarray
    names: tuple[str, ...]
    residual_norm: float
    cost: float
    s2: float
    dof: int
    n_steps: int
    success: bool
    jac: np.ndarray
    singular_values: np.ndarray
    unidentifiable: tuple[str, ...]

    @property
    def correlation(self) -> np.ndarray:
        d = np.sqrt(np.diag(self.cov))
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.cov / np.outer(d, d)


def _transforms(names, positive, lower, upper):
    fwd, inv = {}, {}
    for n in names:
        lo = lower.get(n)
        hi = upper.get(n)
        if lo is None and n in positive:
            lo = 0.0
        if lo is not None and hi is not None:
            if not hi > lo:
                raise ValueError(f"parameter {n!r}: upper bound {hi} must exceed lower {lo}")
            fwd[n] = lambda z, lo=lo, hi=hi: lo + (hi - lo) * jax.nn.sigmoid(z)
            inv[n] = lambda p, lo=lo, hi=hi: math.log((p - lo) / (hi - p))
        elif lo is not None:
            fwd[n] = lambda z, lo=lo: lo + jnp.exp(z)
            inv[n] = lambda p, lo=lo: math.log(p - lo)
        elif hi is not None:
            fwd[n] = lambda z, hi=hi: hi - jnp.exp(z)
            inv[n] = lambda p, hi=hi: math.log(hi - p)
        else:
            fwd[n] = lambda z: z
            inv[n] = lambda p: p
    return fwd, inv


def _check_inside(name, value, positive, lower, upper):
    lo = lower.get(name, 0.0 if name in positive else None)
    hi = upper.get(name)
    if not np.isfinite(value):
        raise ValueError(f"initial value of {name!r} is not finite: {value}")
    if lo is not None and not value > lo:
        raise ValueError(f"initial value of {name!r} = {value} must be > lower bound {lo}")
    if hi is not None and not value < hi:
        raise ValueError(f"initial value of {name!r} = {value} must be < upper bound {hi}")


def covariance(names, p, J, r, rank_rtol: float = 1e-8, *, warn: bool = True,
               report=None, stacklevel: int = 2) -> dict:
    """Covariance, standard errors and identifiability from the Jacobian at an optimum.

    names (n,), p (n,) estimates, J (m, n) = ∂r/∂p in original coordinates, r (m,) residuals.
    Returns a dict with ``rss``, ``s2 = rss/(m − n)``, ``dof``, ``cov`` (n, n), ``std``
    ({name: float}, inf for unidentifiable), ``sv`` (singular values of ``J diag(|p|)``) and
    ``bad`` (names flagged, see the module docstring). ``report``: optional subset of names to
    name in the warning (others, e.g. nuisance states, are still treated as unidentifiable but
    not named); a warning is issued only if ``warn`` and a reported name is flagged.
    """
    names = tuple(names)
    p_np = np.asarray(p, dtype=float)
    J = np.asarray(J, dtype=float)
    r = np.asarray(r, dtype=float)
    m, n_p = J.shape
    rss = float(r @ r)
    dof = m - n_p
    s2 = rss / dof if dof > 0 else float("nan")
    scale = np.where(p_np != 0.0, np.abs(p_np), 1.0)
    Js = J * scale[None, :]
    _, sv, vt = np.linalg.svd(Js, full_matrices=False)
    smax = sv[0] if sv.size else 0.0
    bad = set()
    for k, s in enumerate(sv):
        if not s > rank_rtol * smax or smax == 0.0:
            v = np.abs(vt[k])
            bad.update(names[i] for i in np.nonzero(v > 0.1 * v.max())[0])
    bad_t = tuple(n for n in names if n in bad)
    shown = bad_t if report is None else tuple(n for n in bad_t if n in set(report))
    if warn and shown:
        warnings.warn(
            "least_squares: the data cannot identify parameter(s) "
            f"{', '.join(shown)} (rank-deficient Fisher information JᵀJ; scaled singular "
            + (f"values {np.array2string(sv, precision=3)})" if sv.size <= 12 else
               f"values: largest {sv[0]:.3e}, smallest {np.array2string(sv[-3:], precision=3)})"),
            UnidentifiableWarning,
            stacklevel=stacklevel,
        )
    # covariance in scaled coordinates, pseudo-inverse with the same cut-off
    inv_s = np.where(sv > rank_rtol * smax, 1.0 / np.where(sv > 0, sv, 1.0) ** 2, 0.0)
    cov_s = (vt.T * inv_s[None, :]) @ vt
    cov = s2 * cov_s * np.outer(scale, scale)
    std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    std_d = {n: (float("inf") if n in bad else float(std[i])) for i, n in enumerate(names)}
    return {"rss": rss, "s2": s2, "dof": dof, "cov": cov, "std": std_d, "sv": sv, "bad": bad_t}


def least_squares(
    residual_fn: Callable,
    params0: Mapping[str, float],
    args=None,
    *,
    positive: Iterable[str] = (),
    lower: Mapping[str, float] | None = None,
    upper: Mapping[str, float] | None = None,
    solver: str = "lm",
    rtol: float = 1e-10,
    atol: float = 1e-10,
    max_steps: int = 200,
    rank_rtol: float = 1e-8,
) -> LSQResult:
    """Fit named scalar parameters by nonlinear least squares.

    Args:
        residual_fn: ``residual_fn(params, args) -> r`` with ``params`` a dict of scalar JAX
            arrays (keys of ``params0``) and ``r`` any pytree of arrays (flattened, m entries).
            Must be traceable by JAX (it is differentiated and jitted).
        params0: initial values, strictly inside any bounds.
        positive: names constrained to be > 0 (log transform).
        lower, upper: optional bounds per name (open intervals).
        solver: ``"lm"`` (optimistix.LevenbergMarquardt) or ``"gn"`` (optimistix.GaussNewton).
        rtol, atol: solver tolerances; max_steps: iteration cap (``success`` is False if hit).
        rank_rtol: relative singular-value threshold for the identifiability check.

    Returns:
        :class:`LSQResult`. Warns :class:`UnidentifiableWarning` naming parameters the data
        cannot identify.
    """
    names = tuple(params0)
    if not names:
        raise ValueError("params0 is empty")
    positive = set(positive)
    lower = dict(lower or {})
    upper = dict(upper or {})
    for n in list(positive) + list(lower) + list(upper):
        if n not in params0:
            raise ValueError(f"bound or positivity given for unknown parameter {n!r}")
    for n in names:
        _check_inside(n, float(params0[n]), positive, lower, upper)
    fwd, inv = _transforms(names, positive, lower, upper)

    def to_params(z):
        return {n: fwd[n](z[i]) for i, n in enumerate(names)}

    def flat_residual(p, a):
        r, _ = ravel_pytree(residual_fn(p, a))
        return r

    def fn_z(z, a):
        return flat_residual(to_params(z), a)

    z0 = jnp.array([inv[n](float(params0[n])) for n in names], dtype=jnp.float64)
    if solver == "lm":
        opt = optx.LevenbergMarquardt(rtol=rtol, atol=atol)
    elif solver == "gn":
        opt = optx.GaussNewton(rtol=rtol, atol=atol)
    else:
        raise ValueError(f"solver must be 'lm' or 'gn', got {solver!r}")
    sol = optx.least_squares(fn_z, opt, z0, args, max_steps=max_steps, throw=False)
    success = bool(sol.result == optx.RESULTS.successful)
    z = sol.value
    p_hat = to_params(z)
    p_vec = jnp.stack([p_hat[n] for n in names])

    def fn_p(pv, a):
        return flat_residual({n: pv[i] for i, n in enumerate(names)}, a)

    @jax.jit
    def res_and_jac(pv, a):
        return fn_p(pv, a), jax.jacfwd(fn_p)(pv, a)

    r, J = res_and_jac(p_vec, args)
    stats = covariance(names, np.asarray(p_vec), np.asarray(J), np.asarray(r), rank_rtol,
                       stacklevel=3)
    p_np = np.asarray(p_vec)
    J = np.asarray(J)
    rss, s2, dof, cov, sv, bad_t = (stats[k] for k in ("rss", "s2", "dof", "cov", "sv", "bad"))
    std_d = stats["std"]
    return LSQResult(
        params={n: float(p_np[i]) for i, n in enumerate(names)},
        std=std_d,
        cov=cov,
        names=names,
        residual_norm=math.sqrt(rss),
        cost=0.5 * rss,
        s2=s2,
        dof=dof,
        n_steps=int(sol.stats["num_steps"]),
        success=success,
        jac=J,
        singular_values=sv,
        unidentifiable=bad_t,
    )
