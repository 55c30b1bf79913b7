"""Optimiser comparisons at equal time: gradient methods against CMA-ES on one objective.

:func:`compare_optimisers` runs a gradient method (Adam, :func:`adam_runs`; a batched line
search along the gradient, :func:`line_search_runs`; or guided evolutionary strategies,
:func:`guided_es_runs`) and ``cmaes.CMA`` (:func:`cmaes_runs`: ask/tell, default population, a
generation evaluated in one ``jax.vmap`` call) on the same objective J(θ), from the same
seed-dependent starts, each for a budget of seconds that includes its compile: every compiled
function is compiled once, cold (:func:`compile_cold`), and that time is charged to every
seed's clock, as if each seed ran in a fresh process. Seeds are interleaved (gradient method,
then CMA-ES, for each seed) so both share the machine's load. Both the wall clock
(``time.perf_counter``) and the process's CPU time are recorded; the budget applies to one.

``cmaes`` is imported only when CMA-ES runs (a test and benchmark dependency).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["compare_optimisers", "adam_runs", "line_search_runs", "guided_es_runs",
           "cmaes_runs", "compile_cold", "check_comparison", "final_value", "time_to_reach", "now", "Run", "KINDS",
           "population_size", "value_with_gradient_of", "periodic_knots", "plot_comparison"]

KINDS = ("adam", "line-search", "guided-es")


def now():
    """(wall, CPU) seconds: ``time.perf_counter`` and this process's ``time.process_time``."""
    return np.array([time.perf_counter(), time.process_time()])


def compile_cold(fn, *args):
    """AOT-compile ``fn`` (jitted) for ``args`` with JAX's persistent cache off (a cold,
    fresh-process compile); returns (compiled, (wall, CPU) seconds of tracing, lowering and
    compiling)."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    cc.reset_cache()  # JAX decides once per process whether to use the cache: decide again
    try:
        t0 = now()
        out = jax.jit(fn).lower(*args).compile()
        return out, now() - t0
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        cc.reset_cache()


class Run:
    """One method's run on one seed: both clocks start at the method's compile time; the
    budget applies to clock ``on`` (0 wall, 1 CPU); best-so-far J after every step."""

    def __init__(self, compile_s, budget_s, on, theta0):
        self.t, self.budget, self.on = np.array(compile_s, float), budget_s, on
        self.wall, self.cpu, self.J, self.best, self.n = [], [], [], np.inf, 0
        self.gradients = 0
        self.theta_best = np.asarray(theta0, float)  # kept when nothing ran within budget

    def going(self):
        return self.t[self.on] < self.budget

    def record(self, dt, vals, thetas):
        self.t = self.t + dt
        self.n += len(vals)
        i = int(np.argmin(vals))
        if vals[i] < self.best:
            self.best, self.theta_best = float(vals[i]), np.asarray(thetas[i])
        self.wall.append(float(self.t[0]))
        self.cpu.append(float(self.t[1]))
        self.J.append(self.best)

    def result(self):
        return {"wall_s": self.wall, "cpu_s": self.cpu, "J": self.J, "evaluations": self.n,
                "gradients": self.gradients, "theta_best": self.theta_best}


def adam_runs(vg, theta0, compile_s, budget_s, *, lr, batch, spread, seed, on=0, b1=0.9,
               b2=0.999, eps=1e-8):
    """``batch`` independent runs of Adam (Kingma & Ba 2015, its default moments) on
    reverse-mode gradients, the first from ``theta0`` and the others from ``theta0 + spread ε``
    (ε ~ N(0, I)), each step one call of ``vg`` (``jax.vmap`` of ``value_and_grad`` of J over
    the batch), until the budget clock passes ``budget_s`` (:class:`Run`). J is the value at
    each iterate, the best over the batch counts; a non-finite gradient entry counts as 0."""
    rng = np.random.default_rng(seed)
    th0 = np.asarray(theta0, float)
    th = th0 + spread * rng.normal(size=(batch, th0.size))
    th[0] = th0
    m, v = np.zeros_like(th), np.zeros_like(th)
    run, k = Run(compile_s, budget_s, on, theta0), 0
    while run.going():
        t0 = now()
        vals, g = vg(jnp.asarray(th))
        vals, g = np.asarray(vals, float), np.asarray(g, float)
        g = np.where(np.isfinite(g), g, 0.0)
        k += 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        th_next = th - lr * (m / (1 - b1**k)) / (np.sqrt(v / (1 - b2**k)) + eps)
        run.record(now() - t0, np.where(np.isfinite(vals), vals, np.inf), th)
        run.gradients += len(th)
        th = th_next
    return run.result()


def line_search_runs(vg, fwd, theta0, compile_s, budget_s, *, batch, alpha0, ratio, jitter,
                      seed, on=0):
    """Gradient descent with a batched line search: at θ the reverse-mode gradient g (``vg``,
    ``value_and_grad`` of J), then ``batch`` step sizes α along −g/max|g| (α the largest move of
    one entry of θ; geometric, ratio ``ratio``, about the last accepted α, first ``alpha0``)
    walked in one vmapped call (``fwd``); the best step is taken if it lowers J. Where none
    does, the next direction is the gradient at θ + ``jitter`` ε (ε ~ N(0, I)) and the steps are
    tried again from θ (or from that neighbour, where it walks better): a stationary or
    misleading gradient does not stall the search. Until the budget clock passes ``budget_s``
    (:class:`Run`); every walk counts towards the best J."""
    rng = np.random.default_rng(seed)
    th = np.asarray(theta0, float)
    run = Run(compile_s, budget_s, on, theta0)
    offsets = np.arange(batch) - batch // 2
    alpha, val, g = alpha0, np.inf, None
    x = th
    while run.going():
        t0 = now()
        if g is None:  # a gradient at x: θ, or its jittered neighbour after a failed search
            vx, gx = vg(jnp.asarray(x))
            vx, g = float(vx), np.asarray(gx, float)
            g = np.where(np.isfinite(g), g, 0.0)
            run.record(now() - t0, [vx if np.isfinite(vx) else np.inf], [x])
            run.gradients += 1
            vx = vx if np.isfinite(vx) else np.inf
            if x is th or vx < val:  # a jittered neighbour that walks better is kept
                th, val = x, vx
            continue
        scale = np.max(np.abs(g))
        d = g / scale if scale > 0 else rng.normal(size=th.size)
        alphas = alpha * ratio ** offsets
        xs = th - alphas[:, None] * d
        vals = np.asarray(fwd(jnp.asarray(xs)), float)
        vals = np.where(np.isfinite(vals), vals, np.inf)
        run.record(now() - t0, vals, xs)
        i = int(np.argmin(vals))
        if vals[i] < val:
            th, alpha, x = xs[i], float(alphas[i]), xs[i]
        else:
            x = th + jitter * rng.normal(size=th.size)
        g = None
    return run.result()


def guided_es_runs(vg, fwd, theta0, compile_s, budget_s, *, pairs, sigma, alpha, k, beta,
                    lr, seed, on=0, b1=0.9, b2=0.999, eps=1e-8):
    """Guided evolutionary strategies (Maheswaranathan et al. 2019, "Guided evolutionary
    strategies: augmenting random search with surrogate gradients"): at θ a reverse-mode
    gradient (``vg``; the surrogate, kept with the last ``k`` − 1 before it), then ``pairs``
    antithetic perturbations ε ~ σ N(0, α/n I + (1 − α)/k U Uᵀ) (U an orthonormal basis of the
    kept gradients, n = θ's size) walked in one vmapped call (``fwd``, 2 ``pairs`` walks), the
    estimate ĝ = β/(2σ² pairs) Σ ε (J(θ + ε) − J(θ − ε)) of the smoothed gradient, and an Adam
    step (lr ``lr``, Kingma & Ba's moments) on it. The gradient only shapes where the walks
    sample; the step follows the walks. Until the budget clock passes ``budget_s``
    (:class:`Run`); every walk counts towards the best J; a non-finite walk counts as J = 1."""
    rng = np.random.default_rng(seed)
    th = np.asarray(theta0, float)
    n = th.size
    run = Run(compile_s, budget_s, on, theta0)
    m, v, it, kept = np.zeros(n), np.zeros(n), 0, []
    while run.going():
        t0 = now()
        val, g = vg(jnp.asarray(th))
        val, g = float(val), np.asarray(g, float)
        g = np.where(np.isfinite(g), g, 0.0)
        run.gradients += 1
        if np.any(g):
            kept = (kept + [g])[-k:]
        W = rng.normal(size=(pairs, n))
        if kept:
            U = np.linalg.qr(np.stack(kept, axis=1))[0]
            e = np.sqrt(alpha / n) * W + np.sqrt((1 - alpha) / U.shape[1]) * (
                rng.normal(size=(pairs, U.shape[1])) @ U.T)
        else:
            e = W / np.sqrt(n)
        e = sigma * e
        xs = np.concatenate([th + e, th - e])
        vals = np.asarray(fwd(jnp.asarray(xs)), float)
        vals = np.where(np.isfinite(vals), vals, 1.0)
        gh = beta / (2 * sigma**2 * pairs) * ((vals[:pairs] - vals[pairs:]) @ e)
        it += 1
        m = b1 * m + (1 - b1) * gh
        v = b2 * v + (1 - b2) * gh * gh
        th_next = th - lr * (m / (1 - b1**it)) / (np.sqrt(v / (1 - b2**it)) + eps)
        run.record(now() - t0, np.concatenate([[val if np.isfinite(val) else np.inf], vals]),
                   np.concatenate([th[None], xs]))
        th = th_next
    return run.result()


def cmaes_runs(fwd, theta0, compile_s, budget_s, sigma0, seed, on=0):
    """``cmaes.CMA`` (its default population) from ``theta0``: each generation asked, evaluated
    in one vmapped call, told; until the budget clock passes ``budget_s`` (:class:`Run`)."""
    from cmaes import CMA

    es = CMA(mean=np.asarray(theta0, float), sigma=sigma0, seed=seed)
    run = Run(compile_s, budget_s, on, theta0)
    while run.going():
        t0 = now()
        xs = np.stack([es.ask() for _ in range(es.population_size)])
        vals = np.asarray(fwd(jnp.asarray(xs)))
        vals = np.where(np.isfinite(vals), vals, 1.0)
        es.tell(list(zip(xs, vals.tolist(), strict=True)))
        run.record(now() - t0, vals, xs)
    out = run.result()
    out["population"] = int(es.population_size)
    return out


def final_value(run, budget_s, clock="wall_s"):
    """Best-so-far J among the evaluations finished within ``budget_s`` on ``clock``."""
    js = [j for w, j in zip(run[clock], run["J"], strict=True) if w <= budget_s]
    return js[-1] if js else float("inf")


def time_to_reach(run, target, clock="wall_s"):
    """Time on ``clock`` [s] at which the best-so-far J first reached ``target`` (inf:
    never)."""
    for w, j in zip(run[clock], run["J"], strict=True):
        if j <= target:
            return w
    return float("inf")


def _knot_basis(phase, n, xp=jnp):
    """Trigonometric basis of the periodic interpolant through ``n`` (even) equally spaced
    knots per cycle: 1, cos 2πkφ, sin 2πkφ (k = 1 … n/2 − 1), cos nπφ."""
    a = 2 * xp.pi * xp.asarray(phase, float)
    k = xp.arange(1.0, n // 2)
    return xp.concatenate([xp.ones(1), xp.cos(k * a), xp.sin(k * a),
                           xp.cos(n // 2 * a)[None]])


_KNOT_TO_COEF = {}


def periodic_knots(phase, K):
    """The band-limited periodic interpolant (period 1 in ``phase``) through the knot values
    ``K`` (rows, n), n even, given at phases 0, 1/n, …, (n − 1)/n: the rows' values (rows,) at
    ``phase`` (a scalar)."""
    K = jnp.asarray(K)
    n = K.shape[-1]
    if n not in _KNOT_TO_COEF:  # knot values -> basis coefficients
        ph = np.arange(n) / n
        _KNOT_TO_COEF[n] = np.linalg.inv(np.stack([_knot_basis(s, n, np) for s in ph]))
    return (_knot_basis(phase, n) @ jnp.asarray(_KNOT_TO_COEF[n])) @ K.T


@jax.custom_jvp
def value_with_gradient_of(value, surrogate):
    """``value``, differentiated as ``surrogate`` (which must have the same value in exact
    arithmetic): the primal is ``value`` untouched, so a forward-only program computes it with
    the surrogate as dead code (no rounding of value + (S − S), no other fusion)."""
    return value


@value_with_gradient_of.defjvp
def _value_with_gradient_of_jvp(primals, tangents):
    return primals[0], tangents[1]


def population_size(dim: int, sigma0: float = 1.0) -> int:
    """``cmaes.CMA``'s default population for ``dim`` parameters (4 + ⌊3 ln dim⌋)."""
    from cmaes import CMA

    return int(CMA(mean=np.zeros(dim), sigma=sigma0).population_size)


def _scalar(fn):
    """θ -> the scalar J of an objective that returns J or (J, aux)."""
    def f(th):
        out = fn(th)
        return out[0] if isinstance(out, tuple) else out
    return f


def check_comparison(clock, seeds, budget_s, who="compare_optimisers"):
    """ValueError unless ``clock`` is "wall" or "cpu", ``seeds`` non-empty and
    ``budget_s`` > 0."""
    if clock not in ("wall", "cpu"):
        raise ValueError(f"{who}: clock = {clock!r}, expected 'wall' or 'cpu'")
    if not seeds or not budget_s > 0:
        raise ValueError(f"{who}: need seeds and budget_s > 0, got seeds = {seeds}, "
                         f"budget_s = {budget_s}")


def compare_optimisers(J: Callable, dim: int, start: Callable, *, seeds, budget_s: float,
                       settings: dict, J_gradient: Callable | None = None, clock: str = "wall",
                       sigma0: float = 1.0, method: str | None = None,
                       compile_fn: Callable | None = None, who: str = "compare_optimisers",
                       log: Callable = print) -> dict:
    """A gradient method against CMA-ES on J at equal time, compile included, every seed.

    ``J(θ) -> J`` or ``(J, aux)`` (θ of shape (``dim``,)), jax-traceable; both methods call it.
    ``J_gradient``: the function whose ``jax.value_and_grad`` the gradient method uses (default
    J; e.g. J with truncated backpropagation, the same value with a cheaper gradient).
    ``start(seed) -> θ₀`` (``dim``,): both methods' start for that seed. ``settings``: the
    gradient method, ``{"kind": "adam", "lr", "batch", "spread"}``, ``{"kind": "line-search",
    "batch", "alpha0", "ratio", "jitter"}`` or ``{"kind": "guided-es", "pairs", "sigma",
    "alpha", "k", "beta", "lr"}`` (see :func:`adam_runs`, :func:`line_search_runs`,
    :func:`guided_es_runs`); ``method`` its name in the result. ``sigma0``: CMA-ES's initial
    step size [θ units]. ``budget_s``: seconds per method and seed on ``clock`` ("wall" or
    "cpu", the process's CPU time, which other processes' load does not inflate), the method's
    cold compile (``compile_fn``, default :func:`compile_cold`) charged to every seed.

    Returns ``{"gradient": ..., "cmaes": ..., "budget_s", "clock", "seeds", "_batch"}``: per
    method every seed's best-so-far J against both clocks (``seeds``: ``wall_s``, ``cpu_s``,
    ``J``, ``J_final``, ``evaluations``, ``gradients``), the compile times [s], the median
    final J and every seed's best θ; the gradient method's time to reach CMA-ES's final J
    (per seed and median; inf where never), its ``method`` and ``settings``; CMA-ES's
    ``population_size`` and ``sigma0``. ``_batch``: (CMA-ES's compiled batch of J, its
    population), for the caller's checks (not JSON)."""
    check_comparison(clock, seeds, budget_s, who)
    gm = dict(settings)
    kind = gm.pop("kind", None)
    if kind not in KINDS:
        raise ValueError(f"{who}: settings['kind'] = {kind!r}, expected one of {KINDS}")
    compile_fn = compile_cold if compile_fn is None else compile_fn
    on, key = (0, "wall_s") if clock == "wall" else (1, "cpu_s")
    Jg = J if J_gradient is None else J_gradient
    lam = population_size(dim, sigma0)
    value_grad = jax.value_and_grad(_scalar(Jg))
    if kind == "adam":
        vg, c_grad = compile_fn(jax.vmap(value_grad), jnp.zeros((gm["batch"], dim)))

        def descend(th0, s):
            return adam_runs(vg, th0, c_grad, budget_s, seed=s, on=on, **gm)
    else:  # one gradient, then a batch of evaluations: both compiles are the method's
        nb = gm["batch"] if kind == "line-search" else 2 * gm["pairs"]
        vg, c1 = compile_fn(value_grad, jnp.zeros(dim))
        steps, c2 = compile_fn(jax.vmap(_scalar(J)), jnp.zeros((nb, dim)))
        c_grad = c1 + c2
        runs_of = line_search_runs if kind == "line-search" else guided_es_runs

        def descend(th0, s):
            return runs_of(vg, steps, th0, c_grad, budget_s, seed=s, on=on, **gm)
    # CMA-ES's batch from its own function: JAX would otherwise reuse the line search's
    # compiled batch of the same shape, and CMA-ES's compile would cost it nothing
    fwd, c_fwd = compile_fn(jax.vmap(_scalar(J)), jnp.zeros((lam, dim)))
    log(f"[{who}] compile (wall, CPU): gradient ({method or kind}) {np.round(c_grad, 1)} s, "
        f"CMA-ES batch of {lam} {np.round(c_fwd, 1)} s")
    runs = {"gradient": [], "cmaes": []}
    for s in seeds:
        th0 = np.asarray(start(s), float)
        g = descend(th0, s)
        c = cmaes_runs(fwd, th0, c_fwd, budget_s, sigma0, s, on)
        for name, r in (("gradient", g), ("cmaes", c)):
            r["seed"] = int(s)
            r["J_final"] = final_value(r, budget_s, key)
            runs[name].append(r)
        log(f"[{who}] seed {s}: gradient J = {g['J_final']:.4f} ({g['gradients']} gradients, "
            f"{g['evaluations']} evaluations), CMA-ES J = {c['J_final']:.4f} "
            f"({c['evaluations']} evaluations)")
    reach = [time_to_reach(g, c["J_final"], key)
             for g, c in zip(runs["gradient"], runs["cmaes"], strict=True)]
    out = {}
    for name, rs in runs.items():
        cs = c_grad if name == "gradient" else c_fwd
        out[name] = {
            "seeds": [{"seed": r["seed"], "wall_s": r["wall_s"], "cpu_s": r["cpu_s"],
                       "J": r["J"], "J_final": r["J_final"], "evaluations": r["evaluations"],
                       "gradients": r["gradients"]} for r in rs],
            "compile_s": float(cs[on]), "compile_wall_s": float(cs[0]),
            "compile_cpu_s": float(cs[1]),
            "median_J_final": float(np.median([r["J_final"] for r in rs])),
            "theta_best": [np.asarray(r["theta_best"]).tolist() for r in rs]}
    out["gradient"]["time_to_reach_cmaes_final_s"] = float(np.median(reach))
    out["gradient"]["time_to_reach_cmaes_final_per_seed_s"] = reach
    out["gradient"]["method"] = method or kind
    out["gradient"]["settings"] = dict(gm, kind=kind)
    out["cmaes"]["population_size"] = int(lam)
    out["cmaes"]["sigma0"] = sigma0
    out["budget_s"] = budget_s
    out["clock"] = key
    out["seeds"] = [int(s) for s in seeds]
    out["_batch"] = (fwd, lam)
    return out


def plot_comparison(out_dir, go, plt):
    """The figure of a :func:`compare_optimisers` result ``go``: best-so-far J against time on
    the budget clock, compile included, every seed of both methods (thin) and their medians
    (thick), saved as ``out_dir/fig_gait_optimisation.png``; returns (file, caption)."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    grid = np.linspace(0.0, go["budget_s"], 400)
    for name, col in (("gradient", "C0"), ("cmaes", "C3")):
        curves = []
        for r in go[name]["seeds"]:
            w = np.concatenate([[go[name]["compile_s"]], r[go["clock"]]])
            j = np.concatenate([[np.nan], r["J"]])
            ax.step(w, j, where="post", color=col, lw=0.7, alpha=0.6)
            k = np.searchsorted(w, grid, side="right") - 1
            curves.append(np.where(k >= 0, j[np.clip(k, 0, None)], np.nan))
        med = np.median(np.asarray(curves), axis=0)
        ax.plot(grid, med, color=col, lw=2.5, label=f"{name}: median of {len(curves)} seeds")
        ax.axvline(go[name]["compile_s"], color=col, ls=":", lw=1)
    ax.set_xlabel(("process CPU time" if go["clock"] == "cpu_s" else "wall time")
                  + ", compile included [s]")
    ax.set_ylabel("best J so far (reference model)")
    ax.set_title(f"gait: gradient ({go['gradient']['method']}) vs CMA-ES (dotted: compile "
                 "time)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "fig_gait_optimisation.png", dpi=100)
    plt.close(fig)
    return ("fig_gait_optimisation.png", "objective against time, every seed of both methods "
            "(thin) and their medians (thick)")
