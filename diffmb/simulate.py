"""The time loop: :func:`simulate` integrates a Model with force elements and controls over diffrax.

State and vector field
----------------------
The integrator moves ``y = (q, v)`` with

    q̇ = qdot(model, q, v)      (identity for hinge/slide/translation; ½ q ⊗ [0, ω] per ball)
    v̇ = forward_dynamics(model, q, v, Σ tau_elements + [ctrl], Σ f_ext_elements)

Gravity is the Model's (inside ``forward_dynamics``); force elements add everything else.

Quaternions (``quaternion=``)
-----------------------------
* ``"exact"`` (default): the rate map ½ q ⊗ [0, ω] is linear in q, hence tangent to the sphere
  |q| = const, so the exact flow keeps |q| = 1; a Runge–Kutta step leaves it only by the local
  truncation error. After every accepted step each ball quaternion is projected back onto the
  unit sphere (a wrapped diffrax solver, :class:`ProjectedSolver`), and the dynamics are
  evaluated at q/|q| inside the stages. Projection after each step keeps the solver's order
  (the projection error is of the same order as the local error), and |q| − 1 stays at rounding
  level over any horizon. Saved states are normalised too (adaptive solvers interpolate).
* ``"unprojected"``: the same q̇ = ½ q ⊗ ω integrated as a plain ODE in R⁴ with no projection
  and the dynamics evaluated at the raw q (what the seed papers do); |q| drifts with the
  truncation error. Offered for comparison.

Solvers
-------
* ``"rk4"``: classic fixed-step Runge–Kutta 4. ``n = round((t1 − t0)/dt)`` steps of
  h = (t1 − t0)/n; every save time must fall on a step (within 1e-9 of a step) or a
  ``ValueError`` says which does not. ``saveat=None`` saves every step, t0 included.
  Steps end exactly on t0 + (t1 − t0) k/n (diffrax's ConstantStepSize), save times are
  snapped to those floats, so saved states are step end points, not interpolants.
* ``"tsit5"``, ``"dopri5"``, ``"dopri8"``: adaptive explicit RK with a PID controller (``rtol``,
  ``atol``; ``dt`` is only an initial guess, chosen automatically when None).
* ``"kvaerno5"``: adaptive implicit ESDIRK for stiff systems (same tolerances).
* ``saveat=None`` with an adaptive solver saves (t0, t1).
* ``adaptive=False`` runs tsit5/dopri5/dopri8/kvaerno5 with fixed steps on the same grid as
  rk4 (``dt`` then required; used to measure convergence orders).

Time loop and adjoints
----------------------
Fixed steps (``"rk4"``, or ``adaptive=False``) run diffrax's solver step in diffmb's own
``lax.scan`` over the step grid (``loop="auto"``): reverse mode then transposes one compact step
per iteration, where ``diffeqsolve``'s general while loop (step-size control, dense output,
events) spent 40 % more time on the chain's gradient. Memory of the default ``"recursive"``
adjoint: with ``checkpoints=None`` the state after every step is kept up to 1024 steps, and
the reverse pass of a step recomputes its stages (diffrax's checkpointed stage loop: storing every
stage's linearisation instead made the chain's gradient 1.5x slower on CPU, hundreds of small
residual arrays written and read per step cost more than one more vector field); beyond, or with
``checkpoints=c``, the steps are grouped into ``c`` (default ⌈√n⌉) chunks of which only the
entry states are stored and each chunk is recomputed once in the reverse pass — memory
O(c + n/c) steps, one extra forward pass. ``loop="diffrax"`` runs
``diffeqsolve`` instead (same states to round-off; ``tests/test_simulate.py`` compares them).

Adaptive solvers, ``progress=True`` and the adjoints other than the default always use
``diffeqsolve``. Adjoints: ``"recursive"`` (default; ``diffrax.RecursiveCheckpointAdjoint
(checkpoints)`` for adaptive solves), ``"direct"`` (``DirectAdjoint``: forward mode, jacfwd),
``"backsolve"`` (continuous adjoint, O(1) memory, approximate gradient).

Failures
--------
``traj.status`` (int32, 0 = success, see :data:`STATUS`) and ``traj.t_fail`` (the time the
integration stopped; +inf when it succeeded) are always returned, under ``jit``/``vmap`` too.
A non-finite state stops the solve at the end of the step that produced it (a diffrax
``Event``), a step size below ``dtmin`` (default 1e-12·|t1 − t0|) or ``max_steps`` steps stop it
as well. Saves after the failure hold ``inf``. Outside a trace, ``throw=True`` raises
:class:`SimulationError` naming the failure and its time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .dynamics.api import forward_dynamics
from .dynamics.configuration import ball_layout, normalize, qdot, unit_quaternions
from .forces.elements import total_force
from .model import Model

__all__ = [
    "simulate",
    "Trajectory",
    "SimulationError",
    "STATUS",
    "SUCCESS",
    "MAX_STEPS",
    "DT_MIN",
    "NONFINITE",
    "SOLVER_FAILURE",
    "RK4",
    "ProjectedSolver",
    "vector_field",
]

SUCCESS, MAX_STEPS, DT_MIN, NONFINITE, SOLVER_FAILURE = 0, 1, 2, 3, 4
STATUS = {
    SUCCESS: "success",
    MAX_STEPS: "maximum number of steps reached (increase max_steps)",
    DT_MIN: "step size collapsed below dtmin (stiff or singular dynamics?)",
    NONFINITE: "the state became non-finite (NaN/inf)",
    SOLVER_FAILURE: "the solver failed (e.g. non-converged implicit solve)",
}


class SimulationError(RuntimeError):
    """Raised outside a trace when a simulation fails and ``throw=True``."""


class Trajectory(eqx.Module):
    """Saved states of a simulation.

    ts (ns,), q (ns, nq), v (ns, nv); status: int32 code (see :data:`STATUS`); t_fail: time
    at which the integration stopped early (+inf on success); num_steps: accepted steps.
    Under ``vmap`` every field gains the batch axis in front.
    """

    ts: jnp.ndarray
    q: jnp.ndarray
    v: jnp.ndarray
    status: jnp.ndarray
    t_fail: jnp.ndarray
    num_steps: jnp.ndarray

    @property
    def ok(self):
        return self.status == SUCCESS

    def message(self) -> str:
        s = np.asarray(self.status)
        tf = np.asarray(self.t_fail)
        if s.ndim == 0:
            return STATUS.get(int(s), f"unknown status {int(s)}") + (
                "" if int(s) == 0 else f" at t = {float(tf):.9g}"
            )
        bad = np.flatnonzero(s.reshape(-1) != 0)
        if bad.size == 0:
            return "success"
        i = int(bad[0])
        return (
            f"{bad.size} of {s.size} simulations failed; first (index {i}): "
            f"{STATUS.get(int(s.reshape(-1)[i]), '?')} at t = {float(tf.reshape(-1)[i]):.9g}"
        )


class RK4(diffrax.AbstractERK):
    """Classic 4th-order Runge–Kutta (Kutta 1901), fixed step; no error estimate."""

    tableau = diffrax.ButcherTableau(
        c=np.array([0.5, 0.5, 1.0]),
        b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
        b_error=np.array([0.0, 0.0, 0.0, 0.0]),
        a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    )
    interpolation_cls = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


class ProjectedSolver(diffrax.AbstractWrappedSolver):
    """Wraps a diffrax solver; after every step the ball quaternions of q = y[0] are normalised.

    ``layout``: the model's :class:`~diffmb.dynamics.configuration.BallLayout` (static).
    """

    solver: diffrax.AbstractSolver
    layout: object = eqx.field(static=True)

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        return (_project(y1, self.layout), y_error, dense_info, solver_state, result)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


def _project(y, layout):
    q, v = y
    return (unit_quaternions(layout, q), v)


def _consumes_ctrl(forces) -> bool:
    return any(getattr(f, "uses_ctrl", False) for f in forces)


def vector_field(t, y, args):
    """(q̇, v̇) of the state y = (q, v); ``args = (model, forces, control, params, opts)``."""
    model, forces, control, params, opts = args
    exact, method = opts
    q, v = y
    qd = normalize(model, q) if exact else q
    ctrl = None if control is None else control(t, qd, v, params)
    tau, f_ext = total_force(forces, model, t, qd, v, ctrl)
    if ctrl is not None and not _consumes_ctrl(forces):
        ctrl = jnp.asarray(ctrl)
        if ctrl.shape != (model.nv,):
            raise ValueError(
                f"{model.name}: no force element consumes the control, so it is a generalized"
                f" force and must have shape ({model.nv},); got {ctrl.shape}. Pass actuators"
                " (diffmb.forces.elements.Actuators / GeneralizedForce) in `forces`."
            )
        tau = tau + ctrl
    a = forward_dynamics(model, qd, v, tau, f_ext, method=method)
    return (qdot(model, q, v), a)


_ADAPTIVE = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno5": diffrax.Kvaerno5,
}


def _rk4_grid(t0, t1, dt, saveat):
    span = t1 - t0
    if dt is None or not dt > 0:
        raise ValueError("fixed-step integration needs a step dt > 0")
    n = int(round(span / dt))
    if n < 1:
        raise ValueError(f"rk4: (t1 - t0)/dt = {span / dt:.6g} rounds to no step")
    grid = lambda k: t1 if k == n else t0 + span * (float(k) / float(n))
    if saveat is None:
        return n, np.array([grid(k) for k in range(n + 1)])
    out = []
    for s in np.asarray(saveat, dtype=float).reshape(-1):
        k = (s - t0) / span * n
        kr = int(round(k))
        if abs(k - kr) > 1e-9 * max(1.0, abs(k)) or not 0 <= kr <= n:
            raise ValueError(
                f"rk4: save time {s!r} is not on a step: steps are t0 + k*h with h = "
                f"{span / n!r} (t0={t0!r}, t1={t1!r}, {n} steps); nearest step k={kr}"
            )
        out.append(grid(kr))
    return n, np.array(out)


def _is_concrete(x) -> bool:
    try:
        np.asarray(x)
        return True
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return False


def simulate(
    model: Model,
    q0,
    v0=None,
    t1: float = None,
    dt: float | None = None,
    *,
    t0: float = 0.0,
    solver: str = "rk4",
    saveat: Sequence[float] | None = None,
    forces: Sequence = (),
    control: Callable | None = None,
    params=None,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    adjoint: str = "recursive",
    checkpoints: int | None = None,
    max_steps: int | None = None,
    dtmin: float | None = None,
    adaptive: bool | None = None,
    quaternion: str = "exact",
    method: str = "aba",
    progress: bool = False,
    throw: bool = True,
    loop: str = "auto",
) -> Trajectory:
    """Integrate the model from (q0, v0) at t0 to t1; returns a :class:`Trajectory`.

    q0 (nq,), v0 (nv,). ``forces``: :class:`~diffmb.forces.elements.AbstractForce` elements.
    ``control(t, q, v, params) -> u``: fed to the elements that consume controls (actuators),
    or added to tau as a generalized force (nv,) when none does; a
    :class:`diffmb.controls.KnotTable` is such a callable. ``params`` is passed to ``control``
    as is (differentiate with respect to it). ``t0``, ``t1``, ``dt`` and ``saveat`` are Python
    numbers (they fix the step grid and the output shapes). See the module docstring for
    solvers, quaternion handling, adjoints and failure codes.

    Example::

        traj = diffmb.simulate(model, q0, v0, t1=2.0, dt=0.002, solver="rk4",
                               saveat=[0.5, 1.0, 1.5, 2.0])
        traj.ts, traj.q, traj.v, traj.status
    """
    from .formulations.maximal import MaximalSystem

    if isinstance(model, MaximalSystem) or solver == "variational":
        if not isinstance(model, MaximalSystem) or solver != "variational":
            raise ValueError(
                'solver="variational" integrates a MaximalSystem (diffmb.formulations.maximal) and a'
                " MaximalSystem needs solver='variational'"
            )
        from .formulations.variational import simulate_variational

        # q is u (7 numbers per body: com position, quaternion); v is u̇ (com velocities and
        # quaternion rates); the returned trajectory also carries the node momenta and H.
        return simulate_variational(model, q0, v0, t1=t1, dt=dt, t0=t0, saveat=saveat,
                                    rtol=min(rtol, 1e-12), atol=min(atol, 1e-12), throw=throw)
    if t1 is None:
        raise ValueError("simulate: the final time t1 is required")
    if v0 is None:
        v0 = jnp.zeros(model.nv)
    t0, t1 = float(t0), float(t1)
    if not t1 > t0:
        raise ValueError(f"simulate: need t1 > t0, got t0={t0}, t1={t1}")
    if quaternion not in ("exact", "unprojected"):
        raise ValueError(f"quaternion must be 'exact' or 'unprojected', got {quaternion!r}")
    q0 = jnp.asarray(q0, dtype=jnp.float64)
    v0 = jnp.asarray(v0, dtype=jnp.float64)
    if q0.shape != (model.nq,) or v0.shape != (model.nv,):
        raise ValueError(
            f"{model.name}: q0 {q0.shape} / v0 {v0.shape}, expected ({model.nq},) / ({model.nv},)"
        )
    forces = tuple(forces)
    exact = quaternion == "exact"
    layout = ball_layout(model)

    if solver not in ("rk4", *_ADAPTIVE):
        raise ValueError(
            f"unknown solver {solver!r}; choose 'rk4', 'tsit5', 'dopri5', 'dopri8', 'kvaerno5'"
        )
    if adaptive is None:
        adaptive = solver != "rk4"
    if adaptive and solver == "rk4":
        raise ValueError('solver="rk4" has no error estimate: it runs with fixed steps only')
    base = RK4() if solver == "rk4" else _ADAPTIVE[solver]()
    if not adaptive:
        n, save_ts = _rk4_grid(t0, t1, dt, saveat)
        controller = diffrax.ConstantStepSize()
        dt0 = (t1 - t0) / n
        if max_steps is None:
            max_steps = n + 1
    else:
        save_ts = np.array([t0, t1]) if saveat is None else np.asarray(saveat, float).reshape(-1)
        if save_ts.size and (save_ts.min() < t0 or save_ts.max() > t1):
            raise ValueError(f"saveat must lie in [t0, t1] = [{t0}, {t1}]")
        dmin = 1e-12 * (t1 - t0) if dtmin is None else float(dtmin)
        controller = diffrax.PIDController(rtol=rtol, atol=atol, dtmin=dmin, force_dtmin=False)
        dt0 = dt
        if max_steps is None:
            max_steps = 100_000
    if np.any(np.diff(save_ts) < 0):
        raise ValueError("saveat must be non-decreasing")

    sol_ = ProjectedSolver(base, layout) if (exact and layout.nb) else base
    if adjoint == "recursive":
        adj = diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    elif adjoint == "direct":
        adj = diffrax.DirectAdjoint()
    elif adjoint == "backsolve":
        adj = diffrax.BacksolveAdjoint()
    else:
        raise ValueError(f"adjoint must be 'recursive', 'direct' or 'backsolve', got {adjoint!r}")

    if loop not in ("auto", "diffrax"):
        raise ValueError(f"loop must be 'auto' or 'diffrax', got {loop!r}")
    if not adaptive and loop == "auto" and adjoint == "recursive" and not progress:
        args = (model, forces, control, params, (exact, method))
        ts, qs, vs, status, t_end = _fixed_step_loop(
            sol_, args, t0, t1, n, save_ts, (q0, v0), checkpoints)
        return _finish(model, solver, layout, exact, throw, ts, qs, vs, status, t_end,
                       jnp.asarray(n, jnp.int32))

    use_event = adjoint != "backsolve"
    if use_event:
        saveat_ = diffrax.SaveAt(
            subs=[diffrax.SubSaveAt(ts=jnp.asarray(save_ts)), diffrax.SubSaveAt(t1=True)]
        )
        event = diffrax.Event(_nonfinite_cond)
    else:
        saveat_ = diffrax.SaveAt(ts=jnp.asarray(save_ts))
        event = None

    args = (model, forces, control, params, (exact, method))
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        sol_,
        jnp.asarray(t0, dtype=jnp.float64),  # arrays, not Python floats: a new t1 or dt does
        jnp.asarray(t1, dtype=jnp.float64),  # not recompile (only shapes and max_steps do)
        None if dt0 is None else jnp.asarray(dt0, dtype=jnp.float64),
        (q0, v0),
        args,
        saveat=saveat_,
        stepsize_controller=controller,
        adjoint=adj,
        event=event,
        max_steps=max_steps,
        throw=False,
        progress_meter=diffrax.TqdmProgressMeter() if progress else diffrax.NoProgressMeter(),
    )
    if use_event:
        ts, (qs, vs) = sol.ts[0], sol.ys[0]
        t_end = sol.ts[1][0]
    else:
        ts, (qs, vs) = sol.ts, sol.ys
        t_end = None

    R = diffrax.RESULTS
    res = sol.result
    status = jnp.where(
        res == R.successful,
        SUCCESS,
        jnp.where(
            res == R.max_steps_reached,
            MAX_STEPS,
            jnp.where(
                res == R.dt_min_reached,
                DT_MIN,
                jnp.where(res == R.event_occurred, NONFINITE, SOLVER_FAILURE),
            ),
        ),
    ).astype(jnp.int32)
    return _finish(model, solver, layout, exact, throw, ts, qs, vs, status, t_end,
                   sol.stats["num_accepted_steps"])


def _finish(model, solver, layout, exact, throw, ts, qs, vs, status, t_end, num_steps):
    """Status of non-finite saves, failure time, projection of saved quaternions, errors."""
    finite = jnp.all(jnp.isfinite(qs)) & jnp.all(jnp.isfinite(vs))
    status = jnp.where((status == SUCCESS) & ~finite, NONFINITE, status)
    if t_end is None:  # backsolve: locate the first non-finite save
        bad = ~(jnp.all(jnp.isfinite(qs), axis=-1) & jnp.all(jnp.isfinite(vs), axis=-1))
        t_end = jnp.where(jnp.any(bad), ts[jnp.argmax(bad)], ts[-1])
    t_fail = jnp.where(status == SUCCESS, jnp.inf, t_end)
    if exact and layout.nb:
        qs = unit_quaternions(layout, qs)
    traj = Trajectory(ts=ts, q=qs, v=vs, status=status, t_fail=t_fail, num_steps=num_steps)
    if throw and _is_concrete(status) and np.any(np.asarray(status) != SUCCESS):
        raise SimulationError(
            f"{model.name}: simulation failed: {traj.message()} (solver={solver!r}). "
            "Pass throw=False to get the trajectory and its status instead."
        )
    return traj


def _fixed_step_loop(solver, args, t0, t1, n, save_ts, y0, checkpoints):
    """n steps of ``solver`` on the grid t_k = t0 + (t1 − t0) k / n in a ``lax.scan``.

    Returns the states at ``save_ts`` (which lie on the grid), the status and the time at which
    the integration stopped. A step whose result is not finite freezes the state at +inf from
    there on (saves after the failure hold inf, as with the diffrax loop's event) and records
    the end time of that step.
    """
    term = diffrax.ODETerm(vector_field)
    span = t1 - t0
    t_of = lambda k: jnp.where(k == n, t1, t0 + span * (k / n))
    k_save = np.rint((np.asarray(save_ts) - t0) / span * n).astype(np.int64)
    state0 = solver.init(term, t0, t0 + span / n, y0, args)

    def step(carry, k):
        y, sstate, t_end, ok = carry
        ta, tb = t_of(k), t_of(k + 1)
        y1, _, _, sstate1, _ = solver.step(term, ta, tb, y, args, sstate, False)
        good = ok & jnp.all(jnp.isfinite(y1[0])) & jnp.all(jnp.isfinite(y1[1]))
        y1 = jax.tree.map(lambda a: jnp.where(good, a, jnp.inf), y1)
        t_end = jnp.where(ok & ~good, tb, t_end)
        return (y1, sstate1, t_end, good), y1

    if checkpoints is None and n <= 1024:
        chunks, size = 1, n
    else:
        chunks = int(np.ceil(np.sqrt(n))) if checkpoints is None else max(1, int(checkpoints))
        size = int(np.ceil(n / chunks))
    total = chunks * size  # steps beyond n (padding of the last chunk) leave the carry alone

    def chunk(carry, ks):
        def guarded(c, k):
            new, y = step(c, k)
            new = jax.tree.map(lambda a, b: jnp.where(k < n, a, b), new, c)
            return new, new[0]

        return jax.lax.scan(guarded if total > n else step, carry, ks)

    carry0 = (y0, state0, jnp.asarray(t1, jnp.float64), jnp.asarray(True))
    ks = jnp.arange(total, dtype=jnp.float64)
    if chunks == 1:
        (_, _, t_end, ok), ys = chunk(carry0, ks)
    else:
        body = jax.checkpoint(chunk, prevent_cse=False)
        (_, _, t_end, ok), ys = jax.lax.scan(body, carry0, ks.reshape(chunks, size))
        ys = jax.tree.map(lambda a: a.reshape(total, *a.shape[2:]), ys)
    ys = jax.tree.map(lambda a, b: jnp.concatenate([b[None], a[:n]])[k_save], ys, y0)
    status = jnp.where(ok, SUCCESS, NONFINITE).astype(jnp.int32)
    return jnp.asarray(save_ts, jnp.float64), ys[0], ys[1], status, t_end


def _nonfinite_cond(t, y, args, **kwargs):
    q, v = y
    return ~(jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(v)))
