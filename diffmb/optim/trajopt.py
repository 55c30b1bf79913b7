"""Trajectory optimisation: open-loop controls that reach a target with little effort.

    res = diffmb.optim.trajopt(model, q0, v0, t1=2.0, dt=0.01, target_q=q_goal,
                               n_knots=11, kind="cubic", u_bounds=(-20.0, 20.0))
    res.control            # a KnotTable: simulate(model, q0, v0, ..., control=res.control)
    res.knots, res.effort, res.terminal_error, res.traj

Problem
-------
The control u(t) ∈ R^nu (a generalized force on ``dofs``, all by default) is a table of
``n_knots`` values at equally spaced times on [0, t1], interpolated piecewise-linearly
(``kind="linear"``) or by C¹ cubic Hermite splines (``"cubic"``, see
:class:`diffmb.controls.KnotTable`). The cost is

    J = ½ w_u ∫₀^t1 |u(t)|² dt + ½ w_T ( |q(t1) ⊖ q_target|² + |v(t1) − v_target|² )

written as a sum of squares: the effort integral by 4-point Gauss–Legendre quadrature on each
knot interval (exact for both interpolations: |u|² is a polynomial of degree ≤ 6 on an
interval and the 4-point rule is exact to degree 7), the target terms as residuals. It is
minimised by Levenberg–Marquardt (default) or Adam (see :func:`diffmb.optim.lsq.solve`, which
also gives the progress bar and the atomic ``checkpoint``).

Bounds ``u_bounds=(lo, hi)`` (scalars or (nu,)) are imposed on the knot values through
u = lo + (hi − lo) σ(z) (:func:`diffmb.optim.params.bounded`): for piecewise-linear tables this
bounds u(t) everywhere; cubic Hermite splines can overshoot between knots (by at most a
fraction of the knot differences).

Shooting
--------
``shooting="single"``: one simulation from (q0, v0). ``"multiple"`` with ``segments=S``
(:mod:`diffmb.optim.shooting`): the horizon is cut into S equal segments whose initial states
(after the first) are extra unknowns, initialised on the straight line from (q0, v0) to the
target, and continuity at the junctions enters as residuals with weight ``continuity_weight``;
the segments are simulated in parallel (``vmap``) and the optimiser can move the states where
the dynamics alone would diverge.
Segment lengths must be whole numbers of steps ``dt``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..controls import KnotTable
from ..dynamics.configuration import difference
from ..model import Model
from . import shooting as ms
from .lsq import solve
from .params import Transforms, bounded, force_elements

__all__ = ["trajopt", "TrajoptResult"]

_GL_X, _GL_W = np.polynomial.legendre.leggauss(4)


@dataclasses.dataclass
class TrajoptResult:
    """``knot_ts`` (k,), ``knots`` (k, nu): the optimal table; ``control``: it as a callable
    for :func:`diffmb.simulate` (generalized force on ``dofs``); ``cost`` (J above),
    ``effort`` = ∫|u|² dt, ``terminal_error`` = |q(t1) ⊖ q_target| (and ``terminal_v_error``),
    ``traj``: single-shooting re-simulation with the optimal control (saved every ``dt``);
    ``history``, ``success``, ``message``, ``n_iter``."""

    knot_ts: np.ndarray
    knots: np.ndarray
    control: object
    cost: float
    effort: float
    terminal_error: float
    terminal_v_error: float
    traj: object
    history: list
    success: bool
    message: str
    n_iter: int
    dofs: tuple


class _Control:
    """u on ``dofs`` scattered into a generalized force (nv,)."""

    def __init__(self, table, dofs, nv, scatter=True):
        self.table, self.dofs, self.nv, self.scatter = table, dofs, nv, scatter

    def __call__(self, t, q=None, v=None, params=None):
        u = self.table(t)
        if not self.scatter:
            return u
        return jnp.zeros(self.nv, u.dtype).at[jnp.asarray(self.dofs)].set(u)


def _sim_kwargs(simulate_kwargs) -> dict:
    sk = dict(simulate_kwargs or {})
    for bad in ("saveat", "t0", "t1", "control", "params", "dt", "forces"):
        if bad in sk:
            raise ValueError(f"simulate_kwargs[{bad!r}] is set by trajopt; remove it")
    sk["throw"] = False
    sk.setdefault("adjoint", "direct")  # Jacobians are taken in forward mode (jacfwd)
    return sk


def _knots(knot_ts, nu, u_bounds, u_init):
    """(z -> knot values, the starting z (n_knots, nu)): bounded by a logistic map or free."""
    if u_bounds is None:
        Z0 = np.zeros((len(knot_ts), nu)) if u_init is None else np.asarray(u_init, float)
        if Z0.shape != (len(knot_ts), nu):
            raise ValueError(f"u_init must have shape ({len(knot_ts)}, {nu})")
        return (lambda z: z), Z0
    lo = np.broadcast_to(np.asarray(u_bounds[0], float), (nu,))
    hi = np.broadcast_to(np.asarray(u_bounds[1], float), (nu,))
    if np.any(hi <= lo):
        raise ValueError("u_bounds: need hi > lo")
    U0 = np.zeros((len(knot_ts), nu)) + 0.5 * (lo + hi) if u_init is None else np.asarray(
        u_init, float)
    if U0.shape != (len(knot_ts), nu):
        raise ValueError(f"u_init must have shape ({len(knot_ts)}, {nu})")
    tr = Transforms(tuple(bounded(lo[j], hi[j]) for _ in knot_ts for j in range(nu)))
    try:
        Z0 = tr.inverse(U0).reshape(U0.shape)
    except ValueError:
        raise ValueError("u_init must lie strictly inside u_bounds") from None
    return (lambda z: tr.forward(z.reshape(-1)).reshape(z.shape)), Z0


@dataclasses.dataclass
class _Setup:
    """What the residual reads: the system, the horizon cut into ``S`` segments of ``Tseg``,
    the knot table, the effort quadrature and the target."""

    model: Model
    forces: tuple
    sk: dict
    q0: jnp.ndarray
    v0: jnp.ndarray
    tq: jnp.ndarray | None
    tv: jnp.ndarray | None
    dt: float
    S: int
    Tseg: float
    knot_ts: np.ndarray
    kind: str
    dofs: tuple
    to_u: object
    Z0: np.ndarray
    qrefs: object
    target_weight: float
    continuity_weight: float
    effort_weight: float

    def __post_init__(self):
        h = np.diff(self.knot_ts)  # 4-point Gauss–Legendre nodes and weights on every interval
        self.tq_nodes = (self.knot_ts[:-1, None]
                         + 0.5 * h[:, None] * (_GL_X[None, :] + 1.0)).reshape(-1)
        self.tq_w = (0.5 * h[:, None] * _GL_W[None, :]).reshape(-1)
        self.sq_w = jnp.asarray(np.sqrt(self.effort_weight * self.tq_w))
        self.uses_ctrl = any(f.uses_ctrl for f in self.forces)
        self.offsets = jnp.asarray(np.arange(self.S) * self.Tseg)

    def control(self, U):
        table = KnotTable(jnp.asarray(self.knot_ts), U, self.kind)
        return table, _Control(table, self.dofs, self.model.nv, scatter=not self.uses_ctrl)

    def seg_end(self, U, q_start, v_start, off):
        from ..simulation import simulate

        ctrl = ms.Shifted(self.control(U)[1], off)
        traj = simulate(self.model, q_start, v_start, t1=self.Tseg, dt=self.dt,
                        saveat=[self.Tseg], forces=self.forces, control=ctrl, **self.sk)
        return traj.q[-1], traj.v[-1]

    def residual(self, z):
        model, nv, nz, S = self.model, self.model.nv, self.Z0.size, self.S
        U = self.to_u(z[:nz].reshape(self.Z0.shape))
        ueval = jax.vmap(self.control(U)[0])(jnp.asarray(self.tq_nodes))
        rs = [(ueval * self.sq_w[:, None]).reshape(-1)]
        if S > 1:
            X = z[nz:].reshape(S - 1, 2 * nv)
            qs, vs = jax.vmap(lambda qr, x: ms.start_state(model, qr, x))(self.qrefs, X)
            q_st = jnp.concatenate([self.q0[None], qs])
            v_st = jnp.concatenate([self.v0[None], vs])
        else:
            q_st, v_st = self.q0[None], self.v0[None]
        qe, ve = jax.vmap(lambda a, b, o: self.seg_end(U, a, b, o))(q_st, v_st, self.offsets)
        wT = jnp.sqrt(self.target_weight)
        if self.tq is not None:
            rs.append(wT * difference(model, self.tq, qe[-1]))
        if self.tv is not None:
            rs.append(wT * (ve[-1] - self.tv))
        if S > 1:
            c = jax.vmap(lambda a, b, c, d: ms.continuity(model, a, b, c, d,
                                                          self.continuity_weight))(
                qe[:-1], ve[:-1], q_st[1:], v_st[1:])
            rs.append(c.reshape(-1))
        return jnp.concatenate(rs)


def _setup(model, q0, v0, t1, dt, target_q, target_v, n_knots, kind, dofs, u_bounds, u_init,
           effort_weight, target_weight, forces, shooting, segments, continuity_weight,
           simulate_kwargs) -> tuple[_Setup, np.ndarray]:
    """The validated problem and the segment states' starting values."""
    if kind not in ("linear", "cubic"):
        raise ValueError(f"kind must be 'linear' or 'cubic', got {kind!r}")
    if shooting not in ("single", "multiple"):
        raise ValueError(f"shooting must be 'single' or 'multiple', got {shooting!r}")
    if target_q is None and target_v is None:
        raise ValueError("trajopt needs target_q and/or target_v")
    sk = _sim_kwargs(simulate_kwargs)
    forces = tuple(force_elements(tuple(forces))[0].values())
    dofs = tuple(range(model.nv)) if dofs is None else tuple(int(d) for d in dofs)
    q0 = jnp.asarray(q0, jnp.float64)
    tq = None if target_q is None else jnp.asarray(target_q, jnp.float64)
    t1 = float(t1)
    knot_ts = np.linspace(0.0, t1, int(n_knots))
    S = 1 if shooting == "single" else int(segments)
    n_steps = int(round(t1 / dt))
    if abs(n_steps * dt - t1) > 1e-9 * t1 or n_steps % S:
        raise ValueError(
            f"t1 = {t1} must be a whole number of steps dt = {dt} divisible by {S} segments"
        )
    to_u, Z0 = _knots(knot_ts, len(dofs), u_bounds, u_init)
    qrefs, Xs0 = None, np.zeros(0)  # segment states after the first: dq around qrefs, v
    if S > 1:
        qrefs, Xs0 = ms.states_on_line(model, q0, tq, t1, S)
        qrefs, Xs0 = jnp.asarray(qrefs), Xs0.reshape(-1)
    su = _Setup(model, forces, sk, q0, jnp.asarray(v0, jnp.float64), tq,
                None if target_v is None else jnp.asarray(target_v, jnp.float64), dt, S, t1 / S,
                knot_ts, kind, dofs, to_u, Z0, qrefs, target_weight, continuity_weight,
                effort_weight)
    return su, Xs0


def trajopt(model: Model, q0, v0, *, t1: float, dt: float, target_q=None, target_v=None,
            n_knots: int = 11, kind: str = "linear", dofs: Sequence[int] | None = None,
            u_bounds=None, u_init=None, effort_weight: float = 1.0, target_weight: float = 1e4,
            forces=(), shooting: str = "single", segments: int = 4,
            continuity_weight: float = 1e3, solver: str = "lm", max_steps: int = 200,
            ftol: float = 1e-10, xtol: float = 1e-10, learning_rate: float = 1e-2,
            simulate_kwargs: Mapping | None = None, progress: bool = True, checkpoint=None,
            callback=None) -> TrajoptResult:
    """Optimise an open-loop control from (q0, v0) at 0 towards a target at ``t1``.

    Args:
        model, q0 (nq,), v0 (nv,): the system and its initial state.
        t1, dt: horizon and integration step (rk4 by default; ``simulate_kwargs`` for more).
        target_q (nq,), target_v (nv,): the target (either may be None: not penalised).
        n_knots, kind: control table size and interpolation (``"linear"`` or ``"cubic"``).
        dofs: actuated dofs (indices into v); default all.
        u_bounds: ``(lo, hi)`` on the knot values; u_init: (n_knots, nu) starting knots.
        effort_weight, target_weight: w_u and w_T of the cost.
        forces: force elements (damping, springs, ...) for :func:`diffmb.simulate`.
        shooting, segments, continuity_weight: see the module docstring.
        solver: ``"lm"`` or ``"adam"`` (or ``"gn"``); max_steps, ftol, xtol, learning_rate.
        progress, checkpoint, callback: as in :func:`diffmb.optim.fit`.
    """
    from ..simulation import simulate

    su, Xs0 = _setup(model, q0, v0, t1, dt, target_q, target_v, n_knots, kind, dofs, u_bounds,
                     u_init, effort_weight, target_weight, forces, shooting, segments,
                     continuity_weight, simulate_kwargs)
    res_jac = jax.jit(lambda z: (su.residual(z), jax.jacfwd(su.residual)(z)))
    res = jax.jit(su.residual)
    z0 = np.concatenate([su.Z0.reshape(-1), Xs0])
    fp = {"n_unknowns": int(z0.size), "n_knots": int(n_knots), "kind": kind,
          "shooting": shooting, "t1": float(t1)}
    out = solve(lambda z: res_jac(jnp.asarray(z)), z0, res=lambda z: res(jnp.asarray(z)),
                solver=solver, max_steps=max_steps, ftol=ftol, xtol=xtol,
                learning_rate=learning_rate, progress=progress, desc="trajopt",
                checkpoint=checkpoint, callback=callback, fingerprint=fp)
    U = np.asarray(su.to_u(jnp.asarray(out.z[: su.Z0.size].reshape(su.Z0.shape))))
    table, control = su.control(jnp.asarray(U))
    traj = simulate(model, su.q0, su.v0, t1=float(t1), dt=dt, forces=su.forces, control=control,
                    **su.sk)
    ueval = np.asarray(jax.vmap(table)(jnp.asarray(su.tq_nodes)))
    effort = float(np.sum(su.tq_w[:, None] * ueval**2))
    tq, tv = su.tq, su.tv
    e_q = float(jnp.linalg.norm(difference(model, tq, traj.q[-1]))) if tq is not None else \
        float("nan")
    e_v = float(jnp.linalg.norm(traj.v[-1] - tv)) if tv is not None else float("nan")
    cost = 0.5 * effort_weight * effort + 0.5 * target_weight * (
        (e_q**2 if tq is not None else 0.0) + (e_v**2 if tv is not None else 0.0))
    return TrajoptResult(
        knot_ts=su.knot_ts, knots=U, control=control, cost=float(cost), effort=effort,
        terminal_error=e_q, terminal_v_error=e_v, traj=traj, history=out.history,
        success=out.success, message=out.message, n_iter=out.n_iter, dofs=su.dofs,
    )
