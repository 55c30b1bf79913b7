"""Is this gradient worth having? :func:`check_gradient` puts every estimate side by side.

    chk = diffmb.optim.check_gradient(loss, theta)
    print(chk)          # the table and a one-line verdict
    chk.trusted         # True when reverse = forward = central differences

For a scalar ``loss(theta)`` (theta an array or a pytree of arrays) it computes, along a few
directions d (the coordinate axes when theta has at most ``max_directions`` entries, else random
unit vectors):

* **reverse mode**, ``jax.grad``, projected on d;
* **forward mode**, ``jax.jvp`` along each d: reverse ≠ forward points at a wrong custom rule
  (``forward`` None where the loss holds a ``custom_vjp``, as ``simulate``'s default adjoint
  does: ``adjoint="direct"`` gives both);
* **central differences** (f(θ + εd) − f(θ − εd)) / 2ε at several steps ε = h · max(1, rms θ)
  (``steps``): on a smooth loss they approach the reverse-mode value as h falls until round-off
  takes over; where they disagree at every step the loss is not smooth at those scales (stiff
  contact, a discontinuity, chaos);
* **smoothed estimates** of the gradient of E[f(θ + σw)], w ~ N(0, I), from ``samples``
  antithetic draws: the zeroth-order one (f(θ + σw) − f(θ − σw)) / 2σ · w and the first-order
  one (the mean of ∇f(θ ± σw)), each with its standard error. The first-order estimate is unbiased
  for the smoothed gradient when f is continuous; where it differs from the zeroth-order one by
  many standard errors it is biased (a discontinuity or a stiff region that the exact gradient
  cannot see: Suh et al., "Do differentiable simulators give better policy gradients?", 2022);
* with ``horizons`` (then ``loss(theta, T)``): the reverse-mode gradient's norm at each horizon
  and its exponential growth rate (the slope of log ‖∇f‖ against T), which says how far a
  rollout can be differentiated before the gradient explodes (Metz et al. 2021).

Non-finite values are reported where they appear. The verdict (``chk.verdict``) is one line:
``trusted``, ``trusted locally`` (exact but the smoothed gradient differs: the landscape is
rough at scale σ), or ``not trusted`` with the reason. Nothing here changes the loss; the
estimates cost 2·len(steps)·k + 2·samples evaluations and samples·2 + 1 gradients.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

#: default central-difference steps, relative to max(1, rms θ)
STEPS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
#: reverse and forward mode agree to this relative difference (both exact: round-off only)
MODE_TOL = 1e-6
#: reverse mode and the best central difference agree to this relative difference
CD_TOL = 1e-4
#: the smoothed estimates differ by more than this many standard errors: biased
BIAS_SE = 4.0
#: ... and by more than this fraction of their size
SMOOTH_REL = 0.1
#: gradient norm growing by more than this factor over the horizons: exploding
EXPLODE = 1e3


@dataclasses.dataclass
class GradientCheck:
    """The estimates of :func:`check_gradient`, projected on ``directions`` (k, n) where a
    field is (k,): ``reverse`` (n,) the full reverse-mode gradient (flattened θ),
    ``forward`` (k,), ``central`` {h: (k,)}, ``smoothed_zero`` / ``smoothed_first`` (n,) and
    their standard errors ``*_se`` (n,), ``sigma`` the smoothing scale; ``rel_forward``,
    ``rel_central`` {h: float} and ``rel_smoothed`` the largest relative differences over the
    directions, ``bias_se`` the largest |first − zeroth order| in standard errors; with
    horizons, ``horizons``, ``norms`` and ``growth_rate`` [1/unit of T]. ``trusted`` and the
    one-line ``verdict``."""

    directions: np.ndarray
    reverse: np.ndarray
    forward: np.ndarray | None
    central: dict
    sigma: float
    smoothed_zero: np.ndarray
    smoothed_zero_se: np.ndarray
    smoothed_first: np.ndarray
    smoothed_first_se: np.ndarray
    value: float
    rel_forward: float
    rel_central: dict
    best_step: float
    rel_smoothed: float
    bias_se: float
    finite: bool
    nonfinite: list
    horizons: tuple = ()
    norms: tuple = ()
    growth_rate: float | None = None
    trusted: bool = False
    verdict: str = ""

    def table(self) -> str:
        """The estimates along each direction, as text."""
        d = self.directions
        rev = d @ self.reverse
        zo, fo = d @ self.smoothed_zero, d @ self.smoothed_first
        zse = np.sqrt((d**2) @ self.smoothed_zero_se**2)
        fse = np.sqrt((d**2) @ self.smoothed_first_se**2)
        steps = sorted(self.central, reverse=True)
        head = ["dir", "reverse", "forward"] + [f"cd h={h:.0e}" for h in steps] + [
            f"smooth0 σ={self.sigma:.1e}", "smooth1"]
        rows = [head]
        for i in range(d.shape[0]):
            fw = "–" if self.forward is None else f"{self.forward[i]:.6g}"
            rows.append([str(i), f"{rev[i]:.6g}", fw]
                        + [f"{self.central[h][i]:.6g}" for h in steps]
                        + [f"{zo[i]:.4g}±{zse[i]:.2g}", f"{fo[i]:.4g}±{fse[i]:.2g}"])
        rel = ["rel", "", f"{self.rel_forward:.1e}"] + [
            f"{self.rel_central[h]:.1e}" for h in steps] + [f"{self.rel_smoothed:.1e}", ""]
        rows.append(rel)
        w = [max(len(r[j]) for r in rows) for j in range(len(head))]
        lines = ["  ".join(c.rjust(w[j]) for j, c in enumerate(r)) for r in rows]
        if self.horizons:
            lines.append("horizon  " + "  ".join(f"T={t:g}: |g|={n:.3g}"
                                                 for t, n in zip(self.horizons, self.norms,
                                                                 strict=True)))
            if self.growth_rate is not None:
                lines.append(f"growth rate of |g|: {self.growth_rate:.3g} per unit of T")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table() + "\n" + self.verdict


def _rel_vec(a, b) -> float:
    """|a − b| / max(|a|, |b|) over the whole vector (directional values)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    scale = max(float(np.linalg.norm(a)), float(np.linalg.norm(b)), 1e-300)
    return float(np.linalg.norm(a - b)) / scale


def _directions(n, max_directions, rng):
    if n <= max_directions:
        return np.eye(n)
    d = rng.standard_normal((max_directions, n))
    return d / np.linalg.norm(d, axis=1, keepdims=True)


def _flat_loss(loss, theta, horizon):
    """(x0 flat float64, f of the flat vector, unravel)."""
    x0, unravel = ravel_pytree(theta)
    x0 = jnp.asarray(x0, jnp.float64)
    if horizon is None:
        f = lambda x: jnp.asarray(loss(unravel(x)), jnp.float64)  # noqa: E731
    else:
        f = lambda x: jnp.asarray(loss(unravel(x), horizon), jnp.float64)  # noqa: E731
    return x0, f, unravel


def _scalar(f, x0):
    y = jax.eval_shape(f, x0)
    if y.shape != ():
        raise ValueError(f"check_gradient: the loss must return a scalar, got shape {y.shape}")


def _nonfinite(name, x) -> list:
    x = np.atleast_1d(np.asarray(x, float))
    bad = np.flatnonzero(~np.isfinite(x))
    return [f"{name}[{i}]" for i in bad[:5]] + ([f"{name}: {bad.size - 5} more"]
                                                 if bad.size > 5 else [])


def _smoothed(f, x0, sigma, samples, rng, fv=None):
    """The zeroth- and first-order estimates of ∇ E f(x0 + σw) from ``samples`` antithetic
    pairs, with their per-entry standard errors: (zo, zo_se, fo, fo_se). ``fv``: the caller's
    ``jit(vmap(f))``, if it has one (else compiled here)."""
    n = x0.size
    W = rng.standard_normal((samples, n))
    Wj = jnp.asarray(W)
    pts = jnp.concatenate([x0 + sigma * Wj, x0 - sigma * Wj])
    fx = np.asarray((jax.jit(jax.vmap(f)) if fv is None else fv)(pts))
    zo_i = ((fx[:samples] - fx[samples:]) / (2 * sigma))[:, None] * W  # (samples, n)
    gx = np.asarray(jax.jit(jax.vmap(jax.grad(f)))(pts))
    fo_i = 0.5 * (gx[:samples] + gx[samples:])  # antithetic pairs
    return (zo_i.mean(0), zo_i.std(0, ddof=1) / np.sqrt(samples),
            fo_i.mean(0), fo_i.std(0, ddof=1) / np.sqrt(samples))


def smoothed_gradient(loss, theta, *, sigma: float, samples: int = 16, estimator="alpha",
                      gamma: float | None = None, seed: int = 0):
    """An estimate of the gradient of the Gaussian-smoothed loss E[loss(θ + σw)], w ~ N(0, I):
    ``(gradient like theta, info)``.

    ``estimator``: ``"zero"`` (from loss values only: unbiased for any integrable loss, high
    variance), ``"first"`` (the mean of exact gradients at the samples: low variance, biased
    where the loss jumps or is too stiff for its gradient to see), or ``"alpha"`` (the blend
    α·first + (1 − α)·zero of Suh et al. 2022: α minimises the variance, and is cut back where
    the two disagree by more than the zeroth-order estimate's 95 % bound ε, so that the bias
    α‖first − zero‖ stays within ``gamma`` − ε; default ``gamma`` = 2ε). ``info``: ``alpha``,
    ``zero``/``first`` and their standard errors ``zero_se``/``first_se`` (flat), ``bias`` =
    ‖first − zero‖ and ``eps``. Each call costs 2·``samples`` losses and gradients."""
    if samples < 2:
        raise ValueError(f"smoothed_gradient: samples must be ≥ 2, got {samples}")
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"smoothed_gradient: sigma must be a positive finite number, got {sigma}")
    if estimator not in ("zero", "first", "alpha"):
        raise ValueError(f"smoothed_gradient: estimator must be 'zero', 'first' or 'alpha', got "
                         f"{estimator!r}")
    x0, f, unravel = _flat_loss(loss, theta, None)
    _scalar(f, x0)
    zo, zo_se, fo, fo_se = _smoothed(f, x0, float(sigma), samples, np.random.default_rng(seed))
    v0, v1 = float(np.sum(zo_se**2)), float(np.sum(fo_se**2))
    eps = 2.0 * math.sqrt(v0)
    bias = float(np.linalg.norm(fo - zo))
    gamma = 2.0 * eps if gamma is None else float(gamma)
    alpha = {"zero": 0.0, "first": 1.0}.get(estimator)
    if alpha is None:
        alpha = v0 / (v0 + v1) if v0 + v1 > 0 else 1.0
        if alpha * bias > gamma - eps:
            alpha = max(0.0, (gamma - eps) / bias)
    g = alpha * fo + (1.0 - alpha) * zo
    info = dict(alpha=alpha, zero=zo, zero_se=zo_se, first=fo, first_se=fo_se, bias=bias,
                eps=eps)
    return unravel(jnp.asarray(g)), info


def check_gradient(loss, theta, *, steps=STEPS, sigma=None, samples: int = 16,
                   max_directions: int = 8, horizons=None, seed: int = 0) -> GradientCheck:
    """Reverse mode, forward mode, central differences and smoothed estimates of the gradient
    of the scalar ``loss(theta)`` side by side (see the module doc), and a verdict.

    ``steps``: central-difference steps relative to max(1, rms θ). ``sigma``: the smoothing
    scale (default 1e-2 · max(1, rms θ)). ``samples``: antithetic pairs for the smoothed
    estimates. ``max_directions``: θ with more entries is checked along this many random unit
    directions. ``horizons``: a sequence of horizons T; ``loss(theta, T)`` is then called for
    each (the last is the one checked in full) and the growth of ‖∇f‖ with T is reported.
    The loss must be traceable by JAX (``jit``, ``grad``, ``jvp``, ``vmap``)."""
    steps = tuple(float(h) for h in steps)
    if not steps or any(not (h > 0 and math.isfinite(h)) for h in steps):
        raise ValueError(f"check_gradient: steps must be positive finite numbers, got {steps}")
    if samples < 2:
        raise ValueError(f"check_gradient: samples must be ≥ 2 (a standard error needs two), "
                         f"got {samples}")
    if max_directions < 1:
        raise ValueError(f"check_gradient: max_directions must be ≥ 1, got {max_directions}")
    hs = None if horizons is None else tuple(float(t) for t in horizons)
    if hs is not None and not hs:
        raise ValueError("check_gradient: horizons is empty")
    x0, f, _ = _flat_loss(loss, theta, None if hs is None else hs[-1])
    n = x0.size
    if n == 0:
        raise ValueError("check_gradient: theta has no entries")
    _scalar(f, x0)
    rng = np.random.default_rng(seed)
    scale = max(1.0, float(np.sqrt(np.mean(np.asarray(x0) ** 2))))
    sigma = 1e-2 * scale if sigma is None else float(sigma)
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"check_gradient: sigma must be a positive finite number, got {sigma}")
    D = _directions(n, max_directions, rng)
    Dj = jnp.asarray(D)

    fv = jax.jit(jax.vmap(f))
    value, g = jax.jit(jax.value_and_grad(f))(x0)
    value, g = float(value), np.asarray(g)
    try:
        fwd = np.asarray(jax.jit(jax.vmap(lambda d: jax.jvp(f, (x0,), (d,))[1]))(Dj))
    except TypeError as e:  # a custom_vjp inside (simulate's default adjoint): reverse only
        if "custom_vjp" not in str(e):
            raise
        fwd = None

    central = {}
    for h in steps:
        eps = h * scale
        pts = jnp.concatenate([x0 + eps * Dj, x0 - eps * Dj])
        fx = np.asarray(fv(pts))
        k = D.shape[0]
        central[h] = (fx[:k] - fx[k:]) / (2 * eps)

    zo, zo_se, fo, fo_se = _smoothed(f, x0, sigma, samples, rng, fv)

    nonfinite = (_nonfinite("loss", value) + _nonfinite("reverse", g)
                 + ([] if fwd is None else _nonfinite("forward", fwd))
                 + _nonfinite("smoothed first order", fo))
    finite = not nonfinite
    rev_d = D @ g
    rel_forward = float("nan") if fwd is None else _rel_vec(rev_d, fwd)
    rel_central = {h: _rel_vec(rev_d, c) for h, c in central.items()}
    best_step = min(rel_central, key=lambda h: (not math.isfinite(rel_central[h]),
                                                rel_central[h]))
    zo_d, fo_d = D @ zo, D @ fo
    se_d = np.sqrt((D**2) @ zo_se**2 + (D**2) @ fo_se**2)
    bias = np.abs(zo_d - fo_d) / np.maximum(se_d, 1e-300)
    bias_se = float(np.max(bias)) if np.all(np.isfinite(bias)) else float("inf")
    rel_smoothed = _rel_vec(rev_d, zo_d)

    norms, growth = (), None
    if hs is not None:
        ns = []
        for T in hs[:-1]:
            _, fT, _ = _flat_loss(loss, theta, T)
            ns.append(float(np.linalg.norm(np.asarray(jax.jit(jax.grad(fT))(x0)))))
        ns.append(float(np.linalg.norm(g)))
        norms = tuple(ns)
        ok = [(t, v) for t, v in zip(hs, ns, strict=True) if math.isfinite(v) and v > 0]
        if len(ok) >= 2:
            t_, v_ = np.array(ok).T
            growth = float(np.polyfit(t_, np.log(v_), 1)[0])

    trusted, verdict = _verdict(finite, nonfinite, rel_forward, rel_central, best_step,
                                bias_se, zo_d, fo_d, rev_d, rel_smoothed, sigma, norms, hs)
    return GradientCheck(
        directions=D, reverse=g, forward=fwd, central=central, sigma=sigma,
        smoothed_zero=zo, smoothed_zero_se=zo_se, smoothed_first=fo, smoothed_first_se=fo_se,
        value=value, rel_forward=rel_forward, rel_central=rel_central, best_step=best_step,
        rel_smoothed=rel_smoothed, bias_se=bias_se, finite=finite, nonfinite=nonfinite,
        horizons=hs or (), norms=norms, growth_rate=growth, trusted=trusted, verdict=verdict)


def _fwd(rel_forward) -> str:
    if math.isnan(rel_forward):
        return " (forward mode unavailable: a custom_vjp inside; simulate(..., adjoint='direct'))"
    return f" = forward ({rel_forward:.1e})"


def _verdict(finite, nonfinite, rel_forward, rel_central, best_step, bias_se, zo_d, fo_d,
             rev_d, rel_smoothed, sigma, norms, hs):
    if not finite:
        return False, "not trusted: non-finite values in " + ", ".join(nonfinite)
    if not math.isnan(rel_forward) and rel_forward > MODE_TOL:
        return False, (f"not trusted: reverse and forward mode differ by {rel_forward:.1e} "
                       "(relative): a derivative rule is wrong")
    best = rel_central[best_step]
    explode = ""
    if len(norms) >= 2 and norms[0] > 0 and norms[-1] / norms[0] > EXPLODE:
        explode = (f"; the gradient norm grows {norms[-1] / norms[0]:.1e}× from T={hs[0]:g} to "
                   f"T={hs[-1]:g}: shorten the horizon (multiple shooting) or smooth")
    if best > CD_TOL:
        return False, (f"not trusted: reverse mode and central differences differ by "
                       f"{best:.1e} at best (h={best_step:.0e}; "
                       + ", ".join(f"{h:.0e}: {r:.1e}" for h, r in sorted(rel_central.items()))
                       + "): the loss is not smooth at these scales (stiff contact, a "
                       "discontinuity or chaos)" + explode)
    smooth_gap = _rel_vec(zo_d, fo_d)
    if bias_se > BIAS_SE and smooth_gap > SMOOTH_REL:
        return True, (f"trusted locally: reverse{_fwd(rel_forward)} = central "
                      f"differences ({best:.1e} at h={best_step:.0e}), but at scale "
                      f"σ={sigma:.1e} the first-order smoothed gradient differs from the "
                      f"zeroth-order one by {bias_se:.1f} standard errors ({smooth_gap:.0%}): "
                      "the exact gradient misses a discontinuity or stiff region nearby"
                      + explode)
    return True, (f"trusted: reverse{_fwd(rel_forward)} = central differences "
                  f"({best:.1e} at h={best_step:.0e}); smoothed at σ={sigma:.1e}: "
                  f"{rel_smoothed:.1e} from the exact gradient" + explode)
