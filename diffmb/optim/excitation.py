"""Optimal excitation: torque inputs that make an identification experiment informative.

    res = diffmb.optim.design_excitation(
        model, ["body.forearm_link.mass", "joint.elbow_joint.damping"], q0=q_eq,
        forces=(JointDamping(),), t1=4.0, dt=0.005, n_knots=21, torque_limits=(-20, 20),
        joint_limits=(q_eq - 0.8, q_eq + 0.8), noise_std=5e-4, criterion="D", steps=100)
    res.control       # a KnotTable: simulate(model, q0, v0, ..., control=res.control)
    res.std           # predicted standard errors of the parameters [their units]
    res.criterion_before, res.criterion_after, res.fim, res.history

    # no parameter worse than a hand-made input (every std <= 0.9 x its), start from it:
    res = diffmb.optim.design_excitation(..., init=sine_knots, reference=sine_table,
                                         max_std_ratio=0.9)
    res.std_ratio, res.meets_reference

Fisher information
------------------
The experiment simulates ``model`` from (q0, v0) with a known input u(t) and measures the
channels ``measure`` (``"q"`` and/or ``"v"``) at the sample times t_k = k ``sample_dt``
(k = 0..K, t = 0 included, as :func:`~diffmb.optim.fit` reads a record), each corrupted by
independent Gaussian noise of standard deviation ``noise_std`` (per channel). For parameters θ
(named as in :mod:`diffmb.optim.params`) the Fisher information of the output-error problem is

    F = Jᵀ Σ⁻¹ J,      J = ∂ y(t_k; θ) / ∂θ   (all samples and channels stacked)

with Σ the diagonal noise covariance. J is computed by ``jax.jacfwd`` through
:func:`diffmb.simulate` (``adjoint="direct"``, RK4 on the step grid ``dt``).

* Coordinates: ``scaled=True`` (default) gives F in relative coordinates θ = p (1 + δ), i.e.
  column j of J multiplied by |p_j|: F_s = D F D with D = diag |p|. Its inverse is the
  covariance of the relative errors δ, and log det F_s does not depend on the units of the
  parameters. ``scaled=False`` gives F in the parameters' own units.
* Initial state: ``initial_state="estimated"`` (default, what :func:`~diffmb.optim.fit` does
  with single shooting: it estimates (q0, v0) together with θ) appends the 2 nv initial-state
  columns to J and returns the information on θ with them marginalised out, the Schur
  complement F_θθ − F_θx F_xx⁻¹ F_xθ. ``"known"``: the initial state is exact. Hinge and slide
  joints only for ``"estimated"`` (q0 is differentiated in coordinates).
* The predicted standard errors are sqrt(diag F⁻¹) — the Cramér–Rao bound, which the
  Gauss–Newton covariance of a fit reproduces when the noise level is the one assumed.

Design
------
:func:`design_excitation` chooses the knots of a piecewise-linear torque table
(:class:`~diffmb.controls.KnotTable`, ``n_knots`` equally spaced on [0, t1], one column per
actuated dof ``dofs``) to maximise

* ``criterion="D"``: log det F_s (the volume of the confidence ellipsoid of the relative
  errors shrinks as det F_s^(−1/2)); a tiny ridge 1e-12 · tr(F_s)/n keeps it finite at a
  singular start;
* ``criterion="E"``: the smallest eigenvalue of F_s (the worst-determined direction). λ_min is
  not differentiable where eigenvalues cross, so the objective is a soft-min of the log
  eigenvalues, −τ log Σ_i exp(−log λ_i / τ) (τ = ``softmin_tau``, default 0.1: a smooth lower
  bound of log λ_min within τ log n of it). The exact λ_min is reported.

No worse than a reference, on every parameter (``reference=``): D-optimality maximises the
volume of information and may pay for it with a wider interval on some parameter (E, the
worst direction, can too). Given a reference experiment — a control, whose F_ref is computed
here with the same record, noise and initial state, or F_ref itself — the design maximises
the criterion subject to

    σ_i ≤ ρ σ_ref,i  for every parameter i,   σ² = diag F_s⁻¹,  ρ = ``max_std_ratio`` (0.9)

through a smooth penalty ``ratio_weight`` Σ_i max(0, log(σ_i/σ_ref,i) − log ρ + m)² (m =
``ratio_margin``, 0.02: aim a little inside the bound), added to the joint-limit penalty below.
Start from the reference input (``init`` = its knots) so that the first iterate is the
reference itself (ratios 1) and the penalty pulls every ratio down from there. The design
returned is the best iterate (by the criterion) meeting the bound and the joint limits;
if none does, the iterate within the joint limits of smallest largest ratio, and
``meets_reference`` is False. ``std_ratio`` reports σ_i/σ_ref,i of the returned design.

Limits:

* Torques: each knot is u = lo + (hi − lo) σ(z) (logistic σ, :func:`~.params.bounded`) with
  z unconstrained, as in :func:`~diffmb.optim.trajopt`; a piecewise-linear table then lies
  within [lo, hi] at every time, exactly.
* Joints: a smooth penalty on the simulated q at every integration step,
  w Σ_k Σ_j (max(0, q_kj − hi_j + m_j)² + max(0, lo_j + m_j − q_kj)²) / r_j² with r_j the
  range, m_j = ``limit_margin`` · r_j (default 5 %) and w = ``limit_weight``; the penalty starts
  inside the limits so that the optimum does not sit on them. The returned design is the best
  iterate (by the criterion) whose simulated q stays within the limits at every step; if no
  iterate does, the last one is returned and ``joint_violation`` (max excess [rad or m]) says
  by how much. ``joint_limits=None`` takes the ranges of the :class:`~diffmb.forces.JointLimits`
  elements among ``forces`` (the file's joint ranges), if any.

Optimiser: Adam (``optax``) on z with a tqdm bar. Gradients are reverse mode through the
forward-mode Jacobian (``jax.grad`` of the criterion, which contains ``jax.jacfwd`` of the
outputs through ``simulate``): reverse-over-forward costs a few forward passes with n_θ (+ 2 nv)
tangents whatever the number of knots, whereas forward-over-forward would need one such pass
per knot value (n_knots · nu of them).

Assumptions: white Gaussian noise of known level, the model structure is right and the
parameters are near their true values (the information is evaluated at ``model``'s values: a
locally optimal design), the input is known exactly, and the experiment starts from (q0, v0).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..controls import KnotTable
from ..model import JointType, Model
from .params import ParamSet, Transforms, bounded, force_elements

__all__ = ["fisher_information", "design_excitation", "ExcitationResult", "d_criterion",
           "e_criterion"]


# ----------------------------------------------------------------------------------------------
# Fisher information
# ----------------------------------------------------------------------------------------------


def _noise(model: Model, measure, noise_std) -> jnp.ndarray:
    """1/σ per measured channel, in the order of ``measure`` (q: nq entries, v: nv)."""
    widths = {"q": model.nq, "v": model.nv}
    for m in measure:
        if m not in widths:
            raise ValueError(f"measure: unknown channel group {m!r} (use 'q' and/or 'v')")
    if isinstance(noise_std, Mapping):
        unknown = set(noise_std) - set(measure)
        if unknown:
            raise KeyError(f"noise_std: {sorted(unknown)} not among the measured {list(measure)}")
        parts = [np.broadcast_to(np.asarray(noise_std[m], float), (widths[m],)) for m in measure]
    else:
        parts = [np.broadcast_to(np.asarray(noise_std, float), (widths[m],)) for m in measure]
    s = np.concatenate(parts)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("noise_std must be finite and > 0")
    return jnp.asarray(1.0 / s)


def _grid(t1, dt, sample_dt):
    n = int(round(t1 / dt))
    if n < 1 or abs(n * dt - t1) > 1e-9 * max(1.0, t1):
        raise ValueError(f"t1 = {t1} must be a whole number of steps dt = {dt}")
    sample_dt = dt if sample_dt is None else float(sample_dt)
    every = int(round(sample_dt / dt))
    if every < 1 or abs(every * dt - sample_dt) > 1e-9 * max(1.0, sample_dt) or n % every:
        raise ValueError(f"sample_dt = {sample_dt} must be a whole number of steps dt = {dt} "
                         f"dividing t1 = {t1}")
    return n, every


class _Problem:
    """What the Fisher information and the design share: the parameters, the simulation on the
    step grid, the sampled and whitened outputs."""

    def __init__(self, model, params, *, q0, v0, forces, t1, dt, sample_dt, noise_std, measure,
                 scaled, initial_state, simulate_kwargs):
        if initial_state not in ("known", "estimated"):
            raise ValueError(f"initial_state must be 'known' or 'estimated', got {initial_state!r}")
        if isinstance(measure, str):
            measure = (measure,)
        self.measure = tuple(measure)
        self.model = model
        self.fdict, self.named = force_elements(forces)
        self.ps = ParamSet(model, [params] if isinstance(params, str) else list(params),
                           self.fdict)
        self.p0 = self.ps.flatten(self.ps.get(model, self.fdict))
        self.scaled = bool(scaled)
        self.estimated = initial_state == "estimated"
        if self.estimated and any(JointType(t).nq != JointType(t).nv for t in model.joint_types):
            raise ValueError("initial_state='estimated' needs hinge/slide joints only (q0 is "
                             "differentiated in coordinates); use initial_state='known'")
        self.q0 = jnp.asarray(q0, jnp.float64).reshape(model.nq)
        self.v0 = (jnp.zeros(model.nv) if v0 is None
                   else jnp.asarray(v0, jnp.float64).reshape(model.nv))
        self.t1, self.dt = float(t1), float(dt)
        self.n, self.every = _grid(self.t1, self.dt, sample_dt)
        self.winv = _noise(model, self.measure, noise_std)
        sk = dict(simulate_kwargs or {})
        for bad in ("saveat", "t0", "t1", "dt", "control", "params", "forces", "adjoint"):
            if bad in sk:
                raise ValueError(f"simulate_kwargs[{bad!r}] is set here; remove it")
        self.sk = sk

    @property
    def sample_ts(self):
        return np.arange(0, self.n + 1, self.every) * self.dt

    def simulate(self, p, q0, v0, control):
        """States at every step (n + 1, ...) for parameters p (flat, original units)."""
        from ..simulation import simulate

        m, f = self.ps.set(self.model, self.fdict, self.ps.unflatten(p), check=False)
        return simulate(m, q0, v0, t1=self.t1, dt=self.dt, forces=tuple(f.values()),
                        control=control, adjoint="direct", throw=False, **self.sk)

    def outputs(self, traj):
        """Whitened measured outputs at the sample times, flattened."""
        parts = [getattr(traj, m)[:: self.every] for m in self.measure]
        return (jnp.concatenate(parts, axis=1) * self.winv[None, :]).reshape(-1)

    def fim(self, control):
        """(F, traj): F of the parameters (scaled or not, initial state marginalised or not)
        and the nominal trajectory (every step). Traceable in ``control``."""
        n_p, nv = self.ps.size, self.model.nv

        def out(x):
            p = self.p0 * (1.0 + x[:n_p]) if self.scaled else self.p0 + x[:n_p]
            q0 = self.q0 + x[n_p:n_p + nv] if self.estimated else self.q0
            v0 = self.v0 + x[n_p + nv:] if self.estimated else self.v0
            tr = self.simulate(p, q0, v0, control)
            return self.outputs(tr), tr

        nx = n_p + (2 * nv if self.estimated else 0)
        J, traj = jax.jacfwd(out, has_aux=True)(jnp.zeros(nx))
        F = J.T @ J
        if self.estimated:
            A, B, C = F[:n_p, :n_p], F[:n_p, n_p:], F[n_p:, n_p:]
            F = A - B @ jnp.linalg.solve(C, B.T)
            F = 0.5 * (F + F.T)
        return F, traj

    def std(self, F):
        """Predicted standard errors (original units) from F (in this problem's coordinates)."""
        Finv = np.linalg.inv(np.asarray(F))
        s = np.sqrt(np.clip(np.diag(Finv), 0.0, None))
        return s * np.abs(np.asarray(self.p0)) if self.scaled else s


def fisher_information(
    model: Model,
    params: Sequence[str],
    control,
    *,
    q0,
    v0=None,
    t1: float,
    dt: float,
    noise_std,
    forces=(),
    measure: Sequence[str] = ("q",),
    sample_dt: float | None = None,
    scaled: bool = True,
    initial_state: str = "estimated",
    simulate_kwargs: Mapping | None = None,
) -> jnp.ndarray:
    """Fisher information F = Jᵀ Σ⁻¹ J (n, n) of the parameters ``params`` (names, see
    :mod:`diffmb.optim.params`; n scalar entries) for the experiment that drives ``model``
    from (q0 (nq,), v0 (nv,), zeros by default) with ``control`` (any control of
    :func:`diffmb.simulate`, e.g. a :class:`~diffmb.controls.KnotTable` of torques) for
    ``t1`` seconds (RK4 at ``dt``) and samples ``measure`` every ``sample_dt`` (default ``dt``)
    with noise ``noise_std`` (a scalar, a per-channel array, or ``{"q": σ_q, "v": σ_v}``).

    ``scaled=True``: relative coordinates (F_s = D F D, D = diag |p|), else original units.
    ``initial_state``: ``"estimated"`` (default; marginalised, as :func:`~diffmb.optim.fit`
    estimates it) or ``"known"``. See the module docstring. Traceable in ``control``'s arrays
    (``jax.grad`` of a criterion of F with respect to the knot values works).
    """
    prob = _Problem(model, params, q0=q0, v0=v0, forces=forces, t1=t1, dt=dt,
                    sample_dt=sample_dt, noise_std=noise_std, measure=measure, scaled=scaled,
                    initial_state=initial_state, simulate_kwargs=simulate_kwargs)
    return prob.fim(control)[0]


# ----------------------------------------------------------------------------------------------
# Criteria
# ----------------------------------------------------------------------------------------------


def d_criterion(F):
    """log det F with a ridge 1e-12 · tr(F)/n (finite at a singular F); traceable."""
    n = F.shape[0]
    ridge = 1e-12 * jnp.trace(F) / n
    return jnp.linalg.slogdet(F + ridge * jnp.eye(n))[1]


def e_criterion(F, tau: float = 0.1):
    """Smooth log λ_min(F): −τ log Σ exp(−log λ_i / τ) (≤ log λ_min, within τ log n)."""
    n = F.shape[0]
    lam = jnp.linalg.eigvalsh(F + 1e-12 * jnp.trace(F) / n * jnp.eye(n))
    ll = jnp.log(jnp.clip(lam, 1e-300, None))
    return -tau * jax.nn.logsumexp(-ll / tau)


def _exact(criterion, F):
    F = np.asarray(F)
    if criterion == "D":
        s, ld = np.linalg.slogdet(F)
        return float(ld) if s > 0 else -np.inf
    return float(np.linalg.eigvalsh(F)[0])


# ----------------------------------------------------------------------------------------------
# Design
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ExcitationResult:
    """Outcome of :func:`design_excitation`.

    ``control``: the designed input for :func:`diffmb.simulate` (the :class:`KnotTable`
    ``table`` itself when all dofs are actuated, else a wrapper scattering it onto ``dofs``);
    ``knot_ts`` (k,), ``knots`` (k, nu) [N m or N]; ``criterion``: "D" or "E";
    ``criterion_before``/``criterion_after``: the exact criterion (D: log det F_s; E: λ_min(F_s))
    of the initial and the returned design; ``fim``/``fim_before``: F (coordinates per
    ``scaled``) of the returned/initial design; ``std``/``std_before``: predicted standard errors
    sqrt(diag F⁻¹) in the parameters' units, {scalar name: float}; ``names``: scalar names;
    ``traj``: the returned design simulated (every step); ``joint_violation``: its largest
    excess over the joint limits (0 when within) [rad or m]; ``feasible``: within them;
    ``history``: per Adam step {step, criterion (exact), objective (smoothed criterion minus
    penalty), penalty, violation[, max_std_ratio]}; ``best_step``: the step returned. With a
    ``reference``: ``std_reference`` (its predicted standard errors), ``std_ratio``
    (σ_i / σ_ref,i of the returned design) and ``meets_reference`` (every ratio ≤
    ``max_std_ratio`` and within the joint limits); None without one.
    """

    control: object
    table: KnotTable
    knot_ts: np.ndarray
    knots: np.ndarray
    dofs: tuple
    criterion: str
    criterion_before: float
    criterion_after: float
    fim: np.ndarray
    fim_before: np.ndarray
    std: dict
    std_before: dict
    names: tuple
    scaled: bool
    traj: object
    joint_violation: float
    feasible: bool
    history: list
    best_step: int
    torque_limits: tuple
    joint_limits: tuple | None
    std_reference: dict | None = None
    std_ratio: dict | None = None
    meets_reference: bool | None = None


class _Scatter:
    """A table on ``dofs`` as a generalized force (nv,)."""

    def __init__(self, table, dofs, nv):
        self.table, self.dofs, self.nv = table, tuple(dofs), nv

    def __call__(self, t, q=None, v=None, params=None):
        u = self.table(t)
        return jnp.zeros(self.nv, u.dtype).at[jnp.asarray(self.dofs)].set(u)


def _joint_limits(model, forces, joint_limits):
    """(qadr (m,), lo (m,), hi (m,)) numpy, or None."""
    if joint_limits is False:
        return None
    if joint_limits is None:
        from ..forces.elements import JointLimits

        fl = forces.values() if isinstance(forces, Mapping) else forces
        els = [f for f in fl if isinstance(f, JointLimits) and f.dof]
        if not els:
            return None
        qadr = np.concatenate([np.asarray(e.qadr, int) for e in els])
        lo = np.concatenate([np.asarray(e.lower, float) for e in els])
        hi = np.concatenate([np.asarray(e.upper, float) for e in els])
    elif isinstance(joint_limits, Mapping):
        qadr, lo, hi = [], [], []
        for name, (a, b) in joint_limits.items():
            j = model.joint_index(name)
            if JointType(model.joint_types[j]).nq != 1:
                raise ValueError(f"joint_limits: joint {name!r} is not a hinge or slide")
            qadr.append(model.joint_q[j])
            lo.append(float(a))
            hi.append(float(b))
        qadr, lo, hi = np.array(qadr, int), np.array(lo), np.array(hi)
    else:
        lo = np.broadcast_to(np.asarray(joint_limits[0], float), (model.nq,))
        hi = np.broadcast_to(np.asarray(joint_limits[1], float), (model.nq,))
        keep = np.isfinite(lo) & np.isfinite(hi)
        qadr, lo, hi = np.flatnonzero(keep), lo[keep], hi[keep]
    if np.any(hi <= lo):
        raise ValueError("joint_limits: need upper > lower for every limited joint")
    return (qadr, lo, hi) if qadr.size else None


def _is_matrix(x, n):
    """Whether ``reference`` is a Fisher matrix rather than a control."""
    if callable(x):
        return False
    try:
        return np.shape(x) == (n, n)
    except Exception:  # pragma: no cover
        return False


def _default_init(knot_ts, lo, hi, t1, seed):
    """Two sines per channel at 35 % of the half range around the middle (distinct periods)."""
    rng = np.random.default_rng(seed)
    nu = lo.shape[0]
    mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    u = np.zeros((knot_ts.size, nu))
    for j in range(nu):
        f1, f2 = (1.5 + j) / t1, (3.5 + 1.7 * j) / t1
        ph = rng.uniform(0, 2 * np.pi, 2)
        u[:, j] = mid[j] + 0.35 * half[j] * (0.6 * np.sin(2 * np.pi * f1 * knot_ts + ph[0])
                                             + 0.4 * np.sin(2 * np.pi * f2 * knot_ts + ph[1]))
    return u


def _knot_setup(nv, dofs, torque_limits, n_knots, t1, init, seed):
    """(dofs, lo, hi, knot times, the knots' transforms, the starting z (n_knots, nu))."""
    dofs = tuple(range(nv)) if dofs is None else tuple(int(d) for d in dofs)
    nu = len(dofs)
    lo = np.broadcast_to(np.asarray(torque_limits[0], float), (nu,)).copy()
    hi = np.broadcast_to(np.asarray(torque_limits[1], float), (nu,)).copy()
    if np.any(~(hi > lo)):
        raise ValueError("torque_limits: need hi > lo")
    knot_ts = np.linspace(0.0, float(t1), int(n_knots))
    U0 = _default_init(knot_ts, lo, hi, float(t1), seed) if init is None else np.asarray(
        init, float)
    if U0.shape != (knot_ts.size, nu):
        raise ValueError(f"init must have shape ({knot_ts.size}, {nu}), got {U0.shape}")
    tr = Transforms(tuple(bounded(lo[j], hi[j]) for _ in knot_ts for j in range(nu)))
    try:
        z0 = tr.inverse(U0.reshape(-1)).reshape(U0.shape)
    except ValueError:
        raise ValueError("init must lie strictly inside torque_limits") from None
    return dofs, lo, hi, knot_ts, tr, z0


def _limit_penalty(lim, limit_margin, limit_weight):
    """traj -> (penalty, largest excess over the joint limits), traceable."""
    if lim is None:
        return lambda traj: (jnp.asarray(0.0), jnp.asarray(0.0))
    qadr, jlo, jhi = lim
    rng_ = jhi - jlo
    qadr_j, jlo_j, jhi_j = jnp.asarray(qadr), jnp.asarray(jlo), jnp.asarray(jhi)
    mlo, mhi = jnp.asarray(jlo + limit_margin * rng_), jnp.asarray(jhi - limit_margin * rng_)
    rng_j = jnp.asarray(rng_)

    def penalty(traj):
        q = traj.q[:, qadr_j]
        over = jnp.maximum(q - mhi, 0.0) + jnp.maximum(mlo - q, 0.0)
        viol = jnp.max(jnp.maximum(q - jhi_j, 0.0) + jnp.maximum(jlo_j - q, 0.0))
        return limit_weight * jnp.sum((over / rng_j) ** 2), viol

    return penalty


def _reference_variances(prob, reference, max_std_ratio):
    """diag F_ref⁻¹ (scaled coordinates) of a reference control or Fisher matrix."""
    n_p = prob.ps.size
    if not 0.0 < float(max_std_ratio):
        raise ValueError("max_std_ratio must be > 0")
    if _is_matrix(reference, n_p):
        ref = np.asarray(reference, float)
    else:
        ref = np.asarray(jax.jit(lambda: prob.fim(reference)[0])())
    if ref.shape != (n_p, n_p) or not np.all(np.isfinite(ref)):
        raise ValueError(f"reference: need a control or a finite ({n_p}, {n_p}) F")
    var_ref = np.diag(np.linalg.inv(ref))
    if np.any(~(var_ref > 0)):
        raise ValueError("reference: its Fisher information is singular (some parameter "
                         "has no finite variance); it cannot be a bound")
    return var_ref


def _objective(prob, make_control, tr, criterion, softmin_tau, penalty, var_ref,
               max_std_ratio, ratio_margin, ratio_weight):
    """z -> (−(criterion − penalty), (F, smoothed criterion, penalty, violation, largest std
    ratio)), traceable."""
    if var_ref is not None:
        log_sref = jnp.asarray(0.5 * np.log(var_ref))
        log_rho = float(np.log(max_std_ratio))

    def objective(z):
        U = tr.forward(z.reshape(-1)).reshape(z.shape)
        F, traj = prob.fim(make_control(U)[0])
        crit = d_criterion(F) if criterion == "D" else e_criterion(F, softmin_tau)
        pen, viol = penalty(traj)
        viol = jnp.where(jnp.all(traj.status == 0), viol, jnp.inf)
        if var_ref is not None:  # log(σ_i / σ_ref,i)
            var = jnp.diag(jnp.linalg.inv(F))
            lr = 0.5 * jnp.log(jnp.clip(var, 1e-300, None)) - log_sref
            pen = pen + ratio_weight * jnp.sum(
                jnp.maximum(lr - log_rho + ratio_margin, 0.0) ** 2)
            ratio = jnp.exp(jnp.max(lr))
        else:
            ratio = jnp.asarray(0.0)
        return -(crit - pen), (F, crit, pen, viol, ratio)

    return objective


def _make_control(knot_ts, dofs, nv, U):
    """(the control for simulate, its KnotTable) of knot values U (n_knots, nu)."""
    table = KnotTable(jnp.asarray(knot_ts), U, "linear")
    return (table if dofs == tuple(range(nv)) else _Scatter(table, dofs, nv)), table


def _reference_std(prob, var_ref, F):
    """({name: σ_ref}, {name: σ/σ_ref}) of the design F, or (None, None) without a reference."""
    if var_ref is None:
        return None, None
    names = prob.ps.scalar_names
    s_ref = np.sqrt(var_ref) * np.abs(np.asarray(prob.p0))
    return (dict(zip(names, s_ref.tolist(), strict=True)),
            dict(zip(names, (prob.std(F) / s_ref).tolist(), strict=True)))


def _rank(viol, exact, ratio, reference, max_std_ratio):
    """Order of iterates: the feasible one of largest criterion (feasible: within the joint
    limits and, with a reference, every std ratio ≤ max_std_ratio); else, within the joint
    limits, the smallest largest std ratio; else the least joint violation."""
    ok_j = viol <= 0.0 and np.isfinite(exact)
    ok_r = reference is None or ratio <= max_std_ratio
    if ok_j and ok_r:
        return (2, exact)
    if ok_j:
        return (1, -ratio)
    return (0, -viol)


def _adam(objective, z0, steps, learning_rate, criterion, rank, progress, callback):
    """Adam (optax, cosine-decayed rate) on the objective: (history, the first iterate's
    (criterion, F, violation), the best's (key, step, z, F, violation, criterion))."""
    import optax

    vg = jax.jit(jax.value_and_grad(objective, has_aux=True))
    opt = optax.adam(optax.cosine_decay_schedule(learning_rate, max(int(steps), 1), alpha=0.1))
    z = jnp.asarray(z0)
    state = opt.init(z)
    history, best, first = [], None, None
    bar = None
    try:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(steps), desc=f"excitation ({criterion})", disable=not progress,
                   leave=False)
    except ImportError:  # pragma: no cover
        pass
    try:
        for k in range(int(steps) + 1):
            (val, (F, crit, pen, viol, ratio)), g = vg(z)
            Fn = np.asarray(F)
            exact = _exact(criterion, Fn) if np.all(np.isfinite(Fn)) else -np.inf
            viol = float(viol)
            ratio = float(ratio) if np.isfinite(float(ratio)) else np.inf
            info = {"step": k, "criterion": exact, "objective": float(-val),
                    "smoothed": float(crit), "penalty": float(pen), "violation": viol}
            key = rank(viol, exact, ratio, info)
            history.append(info)
            if first is None:
                first = (exact, Fn, viol)
            if best is None or key > best[0]:
                best = (key, k, np.asarray(z), Fn, viol, exact)
            if callback is not None:
                callback(info)
            if k == int(steps) or not np.all(np.isfinite(np.asarray(g))):
                break
            with jax.numpy_dtype_promotion("standard"):  # optax mixes int32 counts, floats
                upd, state = opt.update(g, state, z)
                z = optax.apply_updates(z, upd)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(crit=f"{exact:.4g}", viol=f"{viol:.2g}")
    finally:
        if bar is not None:
            bar.close()
    return history, first, best


def design_excitation(model: Model, params: Sequence[str], *, q0, v0=None, forces=(), t1: float,
                      dt: float, n_knots: int, torque_limits, joint_limits=None,
                      dofs: Sequence[int] | None = None, criterion: str = "D", noise_std,
                      measure: Sequence[str] = ("q",), sample_dt: float | None = None,
                      initial_state: str = "estimated", init=None, steps: int = 100,
                      learning_rate: float = 0.1, limit_margin: float = 0.05,
                      limit_weight: float = 1e3, softmin_tau: float = 0.1, reference=None,
                      max_std_ratio: float = 0.9, ratio_margin: float = 0.02,
                      ratio_weight: float = 1e3, seed: int = 0,
                      simulate_kwargs: Mapping | None = None, progress: bool = True,
                      callback=None) -> ExcitationResult:
    """Design a piecewise-linear torque table that maximises the information on ``params``.

    Args:
        model, params: the system (at the parameter values the design is for) and the names of
            the parameters to identify (:mod:`diffmb.optim.params`).
        q0 (nq,), v0 (nv,): initial state of the experiment (v0 zeros by default).
        forces: force elements (sequence or ``{name: element}`` for ``force.*`` parameters).
        t1, dt: record length [s] and RK4 step; ``sample_dt``: sample interval (default dt).
        n_knots: knots of the table, equally spaced on [0, t1].
        torque_limits: ``(lo, hi)``, scalars or (nu,): bounds on every knot (hence on u(t)).
        joint_limits: ``(lo (nq,), hi (nq,))`` (±inf: unlimited), ``{joint: (lo, hi)}``,
            None (the ranges of :class:`~diffmb.forces.JointLimits` in ``forces``, if any) or
            False (none).
        dofs: actuated dofs (v indices), default all.
        criterion: ``"D"`` or ``"E"``; noise_std, measure, initial_state: see
            :func:`fisher_information` (the design works in scaled coordinates).
        init: (n_knots, nu) starting knots strictly inside the torque limits (default: two
            sines per channel at 35 % of the range); steps, learning_rate: Adam's (the rate
            decays by a cosine to a tenth over the steps).
        limit_margin, limit_weight: the joint-limit penalty (module docstring).
        softmin_tau: temperature of the E-criterion's soft-min.
        reference: an experiment not to be worse than, on every parameter: a control (its
            Fisher information is computed here, same record, noise and initial state) or its
            F (n, n) in this problem's scaled coordinates. With it, every predicted standard
            error must be at most ``max_std_ratio`` (0.9) times the reference's: a smooth
            penalty ``ratio_weight`` Σ_i max(0, log(σ_i/σ_ref,i) − log ρ + ``ratio_margin``)²
            joins the criterion, and the design returned is the best iterate meeting the ratio
            (module docstring). Start from the reference input (``init``) when it is a table.
        progress: tqdm bar; callback: ``callback(info)`` after each step.
    """
    if criterion not in ("D", "E"):
        raise ValueError(f"criterion must be 'D' or 'E', got {criterion!r}")
    prob = _Problem(model, params, q0=q0, v0=v0, forces=forces, t1=t1, dt=dt,
                    sample_dt=sample_dt, noise_std=noise_std, measure=measure, scaled=True,
                    initial_state=initial_state, simulate_kwargs=simulate_kwargs)
    nv = model.nv
    dofs, lo, hi, knot_ts, tr, z0 = _knot_setup(nv, dofs, torque_limits, n_knots, t1, init, seed)
    lim = _joint_limits(model, forces, joint_limits)
    var_ref = None if reference is None else _reference_variances(prob, reference, max_std_ratio)

    make_control = functools.partial(_make_control, knot_ts, dofs, nv)

    def rank(viol, exact, ratio, info):
        if reference is not None:
            info["max_std_ratio"] = ratio
        return _rank(viol, exact, ratio, reference, max_std_ratio)

    objective = _objective(prob, make_control, tr, criterion, softmin_tau,
                           _limit_penalty(lim, limit_margin, limit_weight), var_ref,
                           max_std_ratio, ratio_margin, ratio_weight)
    history, (crit_b, F_b, _), (key_best, k_best, z_best, F_a, viol_a, crit_a) = _adam(
        objective, z0, steps, learning_rate, criterion, rank, progress, callback)
    U = np.asarray(tr.forward(jnp.asarray(z_best).reshape(-1))).reshape(z0.shape)
    control, table = make_control(jnp.asarray(U))
    names = prob.ps.scalar_names
    std_ref, std_ratio = _reference_std(prob, var_ref, F_a)
    return ExcitationResult(
        control=control, table=table, knot_ts=knot_ts, knots=U, dofs=dofs,
        criterion=criterion, criterion_before=float(crit_b), criterion_after=float(crit_a),
        fim=F_a, fim_before=F_b,
        std=dict(zip(names, prob.std(F_a).tolist(), strict=True)),
        std_before=dict(zip(names, prob.std(F_b).tolist(), strict=True)),
        names=names, scaled=True, traj=prob.simulate(prob.p0, prob.q0, prob.v0, control),
        joint_violation=max(float(viol_a), 0.0), feasible=bool(viol_a <= 0.0),
        history=history, best_step=int(k_best), torque_limits=(lo, hi),
        joint_limits=None if lim is None else lim, std_reference=std_ref, std_ratio=std_ratio,
        meets_reference=None if reference is None else bool(key_best[0] == 2),
    )
