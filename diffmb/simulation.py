"""The one time loop: :func:`simulate` integrates any system of :mod:`diffmb.systems` over diffrax.

Systems
-------
``simulate(model, q0, v0, ...)`` wraps a :class:`~diffmb.Model`, its force elements and its
control in a :class:`~diffmb.systems.TreeSystem`, which moves ``y = (q, v)`` (``(q, v, s)`` when
an element or the control has state) with

    q̇ = qdot(model, q, v)      (identity for hinge/slide/translation; ½ q ⊗ [0, ω] per ball)
    v̇ = forward_dynamics(model, q, v, Σ tau_elements + [ctrl], Σ f_ext_elements)

Gravity is the Model's (inside ``forward_dynamics``); force elements add everything else.
``simulate(system, q0, v0, ...)`` integrates any other system the same way: an ODE system by a
diffrax solver, a discrete system (:class:`~diffmb.systems.AbstractDiscreteSystem`) by its own
step map on the fixed grid, both in the loop below; what a system adds to (q, v) comes back in
``Trajectory.aux``.

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
  and the dynamics evaluated at the raw q (what the papers do); |q| drifts with the
  truncation error. Offered for comparison.

Solvers
-------
``solver`` is a name of :data:`SOLVERS` (the one table of names and solver objects) or any
diffrax solver instance (``diffrax.Heun()``, ``ImplicitVelocityEuler(jacobian_every=k)``,
...); ``adjoint`` a name below or a diffrax adjoint instance. A solver with an error estimate
(a ``diffrax.AbstractAdaptiveSolver``) runs with adaptive steps unless ``adaptive=False``;
any other runs with fixed steps.

* ``"rk4"``: classic fixed-step Runge–Kutta 4. ``n = (t1 − t0)/dt`` steps; dt must divide
  t1 − t0 (to 1e-9 relative, else a ``ValueError`` names dt, t1 − t0 and the nearest dividing
  step); every save time must fall on a step (within 1e-9 of a step) or a ``ValueError`` says
  which does not. ``saveat=None`` saves every step, t0 included.
  Steps end exactly on t0 + (t1 − t0) k/n (diffrax's ConstantStepSize), save times are
  snapped to those floats, so saved states are step end points, not interpolants.
* ``"tsit5"``, ``"dopri5"``, ``"dopri8"``: adaptive explicit RK with a PID controller (``rtol``,
  ``atol``, both finite and > 0; ``dt`` is only an initial guess, chosen automatically when
  None).
* ``"kvaerno5"``: adaptive implicit ESDIRK for stiff systems (same tolerances).
* ``"implicit_euler_v"`` or :class:`ImplicitVelocityEuler` ``(jacobian_every=k)``: Euler made
  linearly implicit in the velocities, fixed steps, first order, for a Model whose stiff modes
  are dissipative (damping, servo gains, wheel slip): v₁ = v + h (I − h ∂a/∂v)⁻¹ a, then
  q₁ = q + h q̇(q, v₁); ∂a/∂v by forward mode every k steps. A diffrax solver like the others.
* ``"implicit"`` or :class:`ImplicitContactEuler`: the implicit contact step, fixed steps,
  first order: Euler linearly implicit in the velocities with the stiff forces (contact and
  stiction springs and dampers, soft limits, servos, damping) linearised over the step,
  (M − h A) Δv = h (Q − C + c), then q₁ = q + h q̇(q, v₁); for a Model with contacts at the
  file's own timestep.
* ``"implicit2"`` or :class:`ImplicitContactROS2`: the second-order implicit contact step, fixed
  steps: the two-stage Rosenbrock–W method ROS2 (γ = 1 + 1/√2, L-stable) on the same
  linearisation and the same matrix as ``"implicit"`` (one factorisation, two solves, one more
  evaluation of the vector field per step); contact points and soft limit rows that do not
  push at the start of a step stay out of its second stage.
* ``saveat=None`` with an adaptive solver saves (t0, t1).
* ``adaptive=False`` runs tsit5/dopri5/dopri8/kvaerno5 with fixed steps on the same grid as
  rk4 (``dt`` then required; used to measure convergence orders); ``adaptive=True`` with a
  solver that has no error estimate is refused.

Time loop and adjoints
----------------------
Fixed steps (a solver without error estimate, or ``adaptive=False``, or a discrete system) run
in diffmb's own ``lax.scan`` over the step grid (``loop="auto"``): reverse mode then transposes
one compact step per iteration (see ``docs/performance.md`` for what this saves). Memory of the default
``"recursive"`` adjoint: with ``checkpoints=None`` the state after every step is kept up to 1024
steps, and the reverse pass of a step recomputes its stages; beyond, or with ``checkpoints=c``,
the steps are grouped into ``c`` (default ⌈√n⌉) chunks of which only the entry states are
stored and each chunk is recomputed once in the reverse pass — memory O(c + n/c) steps, one
extra forward pass. ``loop="diffrax"`` runs ``diffeqsolve`` instead (same states to round-off).

Adaptive solvers, ``progress=True`` and ``"backsolve"`` always use ``diffeqsolve``. Adjoints:
``"recursive"`` (default; ``diffrax.RecursiveCheckpointAdjoint(checkpoints)`` for adaptive
solves), ``"direct"`` (forward mode: ``jax.jvp``/``jacfwd`` through the solve; fixed steps run
in the same scan with the stages in a plain loop, adaptive ones by ``DirectAdjoint``),
``"backsolve"`` (continuous adjoint, O(1) memory, approximate gradient).

Failures
--------
``traj.status`` (int32, 0 = success, see :data:`diffmb.STATUS`, the one table of every system)
and ``traj.t_fail`` (the time the integration stopped; +inf when it succeeded) are always
returned, under ``jit``/``vmap`` too. A non-finite state stops the solve at the end of the step
that produced it (a diffrax ``Event`` in diffrax's loop), and so does a diverged one
(``DIVERGED``: the system's ``diverged(y)``; for a Model, any generalized speed |v_i| beyond
``MAX_SPEED`` = 1e6 m/s or rad/s, far beyond any mechanism's and reached only by an unstable
integration — the message suggests a smaller step or an implicit solver). A step size below
``dtmin`` (default 1e-12·|t1 − t0|) or ``max_steps`` steps stop it as well. Saves after the
failure hold ``inf``. Outside a trace, ``throw=True`` raises :class:`SimulationError` naming the
failure and its time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .dynamics import small_linalg
from .model import Model
from .systems import (
    CONTACT_OVERFLOW,
    DIVERGED,
    DT_MIN,
    MAX_SPEED,
    MAX_STEPS,
    NONFINITE,
    SOLVER_FAILURE,
    STATUS,
    SUCCESS,
    AbstractDiscreteSystem,
    AbstractODESystem,
    AbstractSecondOrderSystem,
    AbstractSystem,
    TreeSystem,
    concrete,
)
from .validation import check_value

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
    "DIVERGED",
    "MAX_SPEED",
    "SOLVERS",
    "RK4",
    "ImplicitVelocityEuler",
    "ImplicitContactEuler",
    "ImplicitContactROS2",
    "ProjectedSolver",
    "TruncatedBackprop",
]

class SimulationError(RuntimeError):
    """Raised outside a trace when a simulation fails and ``throw=True``: names the failure
    (:data:`STATUS`), the time and the solver."""


class Trajectory(eqx.Module):
    """Saved states of a simulation.

    ts (ns,), q (ns, nq), v (ns, nv); status: int32 code (see :data:`STATUS`); t_fail: time
    at which the integration stopped early (+inf on success); num_steps: accepted steps;
    aux: the saved states of stateful elements/controls, or what a system adds (None if none).
    Under ``vmap`` every field gains the batch axis in front. Saved to and read from ``.npz``
    files by :func:`diffmb.io.save_trajectory` and :func:`diffmb.io.load_trajectory`.
    """

    ts: jnp.ndarray
    q: jnp.ndarray
    v: jnp.ndarray
    status: jnp.ndarray
    t_fail: jnp.ndarray
    num_steps: jnp.ndarray
    aux: object = None

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


class _RK4Stages(diffrax.AbstractERK):
    """Kutta's tableau for diffrax's explicit Runge–Kutta stages (zero error weights)."""

    tableau = diffrax.ButcherTableau(
        c=np.array([0.5, 0.5, 1.0]),
        b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
        b_error=np.array([0.0, 0.0, 0.0, 0.0]),
        a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    )
    interpolation_cls = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


class RK4(diffrax.AbstractSolver):
    """Classic 4th-order Runge–Kutta (Kutta 1901), fixed step. It has no error estimate, so
    it is not a ``diffrax.AbstractAdaptiveSolver`` (its stages are diffrax's explicit RK
    stages). ``scan_kind`` as diffrax's Runge–Kutta solvers."""

    scan_kind: str | None = None
    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def _stages(self):
        return _RK4Stages(scan_kind=self.scan_kind)

    def order(self, terms):
        return 4

    def init(self, terms, t0, t1, y0, args):
        return self._stages().init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        return self._stages().step(terms, t0, t1, y0, args, solver_state, made_jump)

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


class _Wrapped(diffrax.AbstractWrappedSolver):
    """A diffrax solver that delegates everything to ``solver`` (subclasses change ``step``)."""

    solver: diffrax.AbstractSolver

    def __check_init__(self):
        if not isinstance(self.solver, diffrax.AbstractSolver):
            raise TypeError(f"{type(self).__name__}.solver: a diffrax solver is required, got "
                            f"{type(self.solver).__name__}")

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
        return self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


class ProjectedSolver(_Wrapped):
    """Wraps a diffrax solver; after every step the state is mapped by ``project`` (a pure,
    hashable function of y, e.g. the projection of ball quaternions onto the unit sphere)."""

    project: Callable = eqx.field(static=True)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        return (self.project(y1), y_error, dense_info, solver_state, result)


class TruncatedBackprop(_Wrapped):
    """Wraps a diffrax solver for fixed-step runs: the state entering a step that starts at
    ``origin + k · every`` (k = 1, 2, …) is passed through ``jax.lax.stop_gradient``, so reverse
    mode stops there (truncated backpropagation through time). The forward run is unchanged,
    bit for bit (the cut is ``jnp.where(boundary, stop_gradient(y), y)``, which selects the same
    value); a gradient of a cost is then the sum over the segments [t_k, t_{k+1}] of the
    derivative of what the segment's states contribute, with the segment's start state held
    fixed. ``every`` [s] should be a multiple of the step: boundaries are found from the
    step's start time to 1e-6 of ``every``. Pass it as ``simulate``'s ``solver``
    (e.g. ``TruncatedBackprop(ImplicitContactEuler(), 0.5)``)."""

    every: float = eqx.field(static=True)
    origin: float = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        if not (float(self.every) > 0 and np.isfinite(self.every)):
            raise ValueError(f"TruncatedBackprop.every must be a positive finite time, got "
                             f"{self.every}")

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        k = (t0 - self.origin) / self.every
        cut = (jnp.abs(k - jnp.round(k)) < 1e-6) & (k > 0.5)
        y0 = jax.tree.map(lambda a: jnp.where(cut, jax.lax.stop_gradient(a), a), y0)
        return self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)


class _SecondOrderStep(diffrax.AbstractSolver):
    """What the fixed-step solvers of systems with state (q, v, ...) share: any term, linear
    interpolation between steps, the system read from ``args = (system, params)`` (checked
    in :meth:`init`, by the subclass's name), no solver state unless a subclass keeps one."""

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = diffrax.LocalLinearInterpolation

    def init(self, terms, t0, t1, y0, args):
        _second_order_system(args, type(self).__name__)
        return None

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


class ImplicitVelocityEuler(_SecondOrderStep):
    """Euler's method made linearly implicit in the velocities (a one-stage Rosenbrock–W
    method, first order), for the stiff dissipative modes of mechanical systems — joint and
    servo damping, wheel slip, contact damping — whose real eigenvalues bound explicit Euler's
    step by h < 2/|λ| (and by 1/|λ| for a monotone decay). For a system with state
    (q, v[, s]) (an :class:`~diffmb.systems.AbstractSecondOrderSystem`, e.g. a
    :class:`~diffmb.Model`'s :class:`~diffmb.systems.TreeSystem`), a step of size h is

        v₁ = v + h (I − h J)⁻¹ a(t, q, v, s),   q₁ = q + h q̇(q, v₁),   s₁ = s + h ṡ(t, q, v, s)

    with J = ∂a/∂v (nv × nv, forward mode) at the start of the step. A linear damping
    a = −c v is then integrated by implicit Euler (v₁ = v/(1 + h c): stable and monotone for
    every h > 0), the positions follow the new velocities (symplectic Euler: oscillatory modes
    stay bounded for h ω < 2), the element states s are explicit. ``jacobian_every = k``
    takes J afresh every k steps and holds it in between: the order does not depend on J (a
    W-method), a mode λ with a held λ̃ is damped by 1 + hλ/(1 − hλ̃), inside (−1, 1) whenever
    λ̃ ≤ λ/2 < 0. Linear velocity constraints C v = 0 held by the dynamics (C a = 0, so
    C J = 0) stay held: C (I − hJ)⁻¹ = C.

    A diffrax solver: fixed steps (no error estimate), linear interpolation; the solver state
    is ((I − h J)⁻¹, the step count); the system is read from ``args = (system, params)``,
    the form :func:`simulate` passes to its vector field ``vf(t, y, (system, params))``.
    """

    jacobian_every: int = eqx.field(static=True, default=1)

    def __check_init__(self):
        if isinstance(self.jacobian_every, bool) or not isinstance(self.jacobian_every, int) \
                or self.jacobian_every < 1:
            raise ValueError(f"ImplicitVelocityEuler.jacobian_every = {self.jacobian_every!r}: "
                             "must be an integer >= 1")

    def order(self, terms):
        return 1

    def init(self, terms, t0, t1, y0, args):
        system = _second_order_system(args, type(self).__name__)
        for f in getattr(system, "forces", ()):
            if getattr(f, "backward_smoothing", None) is not None:
                raise ValueError(
                    f"ImplicitVelocityEuler: {type(f).__name__}.backward_smoothing = "
                    f"{f.backward_smoothing:g} m would enter this solver's forward-mode Jacobian"
                    " and change the simulation; use solver='implicit' (ImplicitContactEuler) "
                    "or an explicit solver, whose steps do not differentiate the contact law")
        nv = jnp.shape(y0[1])[0]
        return (jnp.zeros((nv, nv), jnp.result_type(y0[1])), jnp.asarray(0, jnp.int32))

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        system = _second_order_system(args, type(self).__name__)
        Winv, k = solver_state
        h = t1 - t0

        def inverse():
            acc = lambda v: terms.vf(t0, (y0[0], v, *y0[2:]), args)[1]  # noqa: E731
            J = jax.jacfwd(acc)(y0[1])
            return small_linalg.inv(jnp.eye(J.shape[0]) - h * J)

        if self.jacobian_every == 1:
            Winv = inverse()
        else:  # the count is unbatched under vmap: a cond, not a select
            Winv = jax.lax.cond(k % self.jacobian_every == 0, inverse, lambda: Winv)
        d = terms.vf(t0, y0, args)
        v1 = y0[1] + h * (Winv @ d[1])
        q1 = y0[0] + h * system.position_rate(y0[0], v1)
        rest = jax.tree.map(lambda a, b: a + h * b, tuple(y0[2:]), tuple(d[2:]))
        y1 = (q1, v1, *rest)
        return y1, None, dict(y0=y0, y1=y1), (Winv, k + 1), diffrax.RESULTS.successful


class StepResult(diffrax.RESULTS):
    """diffrax's results, and the failures of diffmb's own steps."""

    contact_overflow = "more contact points pushed than a contact element linearises"


def _step_result(st):
    """The result of a linearly implicit step from its :class:`~diffmb.systems.LinearStages`."""
    return StepResult.where(st.overflow, StepResult.contact_overflow, StepResult.successful)


class _DiffraxResults(_Wrapped):
    """A linearly implicit contact step for diffrax's own loop, which takes only its own
    results: a contact overflow becomes diffrax's ``internal_error`` (read back as
    :data:`~diffmb.systems.CONTACT_OVERFLOW` by :func:`_diffeqsolve`)."""

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        *out, res = self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)
        R = diffrax.RESULTS
        return (*out, R.where(res == StepResult.contact_overflow, R.internal_error,
                              R.successful))


def _status_of(res):
    """A diffrax or diffmb step result -> the status code of :data:`STATUS`."""
    if res._enumeration is not StepResult:
        res = StepResult.promote(res)
    code = jnp.where(res == StepResult.successful, SUCCESS, SOLVER_FAILURE)
    return jnp.where(res == StepResult.contact_overflow, CONTACT_OVERFLOW, code)


class ImplicitContactEuler(_SecondOrderStep):
    """The implicit contact step: Euler's method linearly implicit in the velocities, the
    contact and stiction springs, the limits, servos and damping (a one-stage Rosenbrock–W
    method, first order), positions following the new velocities (symplectic Euler). For a
    system that offers :meth:`~diffmb.systems.AbstractSecondOrderSystem.linear_stages`
    (a :class:`~diffmb.Model`'s :class:`~diffmb.systems.TreeSystem`), a step of size h solves

        (M − h A) Δv = h (M a + c),   v₁ = v + Δv,   q₁ = q + h q̇(q, v₁)

    with the stiff forces linearised over the step, Q(q₁, v₁, z₁) ≈ Q + A Δv + c: per contact
    point 3 × 3 blocks (normal spring and damper, stiction spring and damper, torsional and
    rolling friction) mapped by the contact Jacobians, the stiction states eliminated point by
    point, and the joint-space forces' ∂τ/∂v + h ∂τ/∂q. A spring k on a mass m is then
    integrated as (m + h b + h² k) Δv = h (f − h k v): stable for every h > 0 and damped
    (the eigenvalue 1/(1 + h b/m + h² k/m) of a pure spring's amplitude per step), so the
    step is set by accuracy, not by the stiffest contact. The Jacobian blocks are taken afresh
    at every step (they cost one forward-mode pass over the contact law and the kinematics).
    MuJoCo's soft constraint rows (joint and tendon limits) take MuJoCo's own Euler step: on a
    pushing row J a = a_ref − R f with a_ref at the step's start and solref under MuJoCo's
    refsafe at h (:meth:`~diffmb.forces.SoftRows.step_matrix`), so a limit moves as in MuJoCo
    at the file's step.

    Stick and slip over the step: ``cone_passes = 2`` (the default) solves the step once,
    then takes each sticking point's friction cone again at the spring force that solution
    predicts at the step's end, and solves again: a point whose stiction spring would leave
    the cone during the step slides (friction μ f_n along that force) instead of being held
    by a stiff spring linearised as sticking for the whole step. A point that slides at the
    start keeps its slide; it sticks from the step after its spring re-enters the cone.
    ``cone_passes = 1`` linearises at the start alone; more passes repeat the second. Each
    pass costs the contact blocks and one nv × nv solve, not the kinematics.

    Gradients differentiate the linear solve (reverse or forward mode). A diffrax solver:
    fixed steps, linear interpolation; the system is read from ``args = (system, params)``.
    """

    cone_passes: int = eqx.field(static=True, default=2)

    def __check_init__(self):
        if isinstance(self.cone_passes, bool) or not isinstance(self.cone_passes, int) \
                or self.cone_passes < 1:
            raise ValueError(f"ImplicitContactEuler.cone_passes = {self.cone_passes!r}: must "
                             "be an integer >= 1")

    def order(self, terms):
        return 1

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        system, params = args
        st = system.linear_stages(t0, y0, params, t1 - t0, rows_at_start=True,
                                  cone_passes=self.cone_passes)
        y1 = st.finish(small_linalg.solve(st.W, st.r))
        return y1, None, dict(y0=y0, y1=y1), None, _step_result(st)


#: ROS2's γ = 1 + 1/√2: the stability function's z² coefficient γ² − 2γ + 1/2 vanishes
ROS2_GAMMA = 1.0 + 1.0 / np.sqrt(2.0)


class ImplicitContactROS2(_SecondOrderStep):
    """The second-order implicit contact step: the two-stage Rosenbrock–W method ROS2
    (Verwer, Spee, Blom and Hundsdorfer 1999), γ = 1 + 1/√2, with the stiff forces linearised
    once per step as :class:`ImplicitContactEuler` linearises them (per contact point blocks,
    the stiction states eliminated point by point, soft limits, servos, damping). For
    y = (q, v, s) and J that linearisation of the vector field f, a step of size h is

        (I − γh J) k₁ = f(y),   (I − γh J) k₂ = f(y + h k₁) − 2 k₁,
        y₁ = y + h (3/2 k₁ + 1/2 k₂),

    the position parts of k in velocity coordinates (q₁ = q + q̇(q, h (3/2 k₁ + 1/2 k₂)),
    quaternions then projected as after every step). Both stages solve with the one matrix
    W = M − γh A of an Euler step of size γh (one factorisation per step); a stage's
    position and stiction-state parts are eliminated as in that step
    (:meth:`~diffmb.systems.TreeSystem.linear_stages`). The second stage's f is the system's
    vector field with the contact points and soft limit rows that do not push at y kept from
    pushing: the linearisation has no block for them, so a contact or limit that engages
    during a step starts to push at the next step (as in the Euler step) instead of entering
    the stage as an unlinearised stiff spring.

    Second order for any J (a W-method: the order does not rest on the linearisation being
    exact, so contact Jacobians that change over the step, the velocity-product terms and
    the explicit element states keep it), L-stable for the linearised modes: a stiff spring
    or contact mode is damped to zero in a step (R(∞) = 0), while a mode resolved by the
    step is integrated to second order instead of the Euler step's first (whose numerical
    damping of a mode ω is ~ h ω² / 2 per unit time). Its cost per step is one linearisation,
    one LU factorisation, two solves and one more evaluation of the vector field than the
    Euler step. Order two holds on smooth stretches; contact switching, stick–slip
    transitions and the soft limits' activation are not smooth and lower it there.

    Gradients differentiate the linear solves (reverse or forward mode). A diffrax solver:
    fixed steps, linear interpolation; the system is read from ``args = (system, params)``.
    """

    def order(self, terms):
        return 2

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        system, params = args
        h = t1 - t0
        st = system.linear_stages(t0, y0, params, ROS2_GAMMA * h)
        lu = small_linalg.lu_factor(st.W)
        solve = lambda r: small_linalg.lu_solve(lu, r)  # noqa: E731
        r1, inc1 = st.stage(st.force, y0[1], st.rates)
        k1 = inc1(solve(r1))
        y2 = _advance(system, y0, h, k1)
        f2 = st.field(t1, y2)
        comb = lambda a, b: a - 2.0 * b  # noqa: E731
        rate2 = comb(y2[1], k1[0])
        srates2 = None if len(y0) < 3 else jax.tree.map(comb, tuple(f2[2]), tuple(k1[2]))
        r2, inc2 = st.stage(st.M @ comb(f2[1], k1[1]), rate2, srates2)
        k2 = inc2(solve(r2))
        k = jax.tree.map(lambda a, b: 1.5 * a + 0.5 * b, k1, k2)
        y1 = _advance(system, y0, h, k)
        return y1, None, dict(y0=y0, y1=y1), None, _step_result(st)


def _advance(system, y, h, k):
    """y + h k with k's position part in velocity coordinates (mapped by q̇(q, ·))."""
    out = (y[0] + system.position_rate(y[0], h * k[0]), y[1] + h * k[1])
    if len(y) > 2:
        out = out + (jax.tree.map(lambda a, b: a + h * b, tuple(y[2]), tuple(k[2])),)
    return out


def _second_order_system(args, who):
    system = args[0] if isinstance(args, tuple) and len(args) == 2 else None
    if not isinstance(system, AbstractSecondOrderSystem):
        got = type(system).__name__ if system is not None else f"args of type {type(args).__name__}"
        raise TypeError(
            f"{who} integrates a system with state (q, v, ...) (an "
            "AbstractSecondOrderSystem such as a Model's TreeSystem) given as args = (system, "
            f"params), as diffmb.simulate passes it; got {got}")
    return system


def _vector_field(t, y, args):
    system, params = args
    return system.vector_field(t, y, params)


#: solver names and the solver objects they stand for
SOLVERS = {
    "rk4": RK4(),
    "tsit5": diffrax.Tsit5(),
    "dopri5": diffrax.Dopri5(),
    "dopri8": diffrax.Dopri8(),
    "kvaerno5": diffrax.Kvaerno5(),
    "implicit_euler_v": ImplicitVelocityEuler(),
    "implicit": ImplicitContactEuler(),
    "implicit2": ImplicitContactROS2(),
}


MAX_LOOP_BYTES = 4 * 2**30  # the fixed-step loop keeps every step's state
MAX_SAVES = 10_000_000


def _grid(t0, t1, dt, saveat, what="rk4"):
    """Number of steps n and the save times on the grid t0 + (t1 − t0) k / n; t1 − t0 must be a
    whole number of steps dt (to 1e-9 relative)."""
    span = t1 - t0
    if dt is None:
        raise ValueError(f"{what}: fixed-step integration needs a step dt > 0")
    n = int(round(span / dt))
    if n < 1:
        raise ValueError(f"{what}: (t1 - t0)/dt = {span / dt:.6g} rounds to no step; take "
                         f"dt <= t1 - t0 = {span!r}")
    if abs(n * dt - span) > 1e-9 * span:
        raise ValueError(
            f"{what}: dt = {dt!r} does not divide t1 - t0 = {span!r} ({span / dt:.9g} steps); "
            f"the nearest dividing step is dt = {span / n!r} ({n} steps)")
    grid = lambda k: t1 if k == n else t0 + span * (float(k) / float(n))
    if saveat is None and n > MAX_SAVES:
        raise ValueError(f"{what}: saving all {n} steps is too much; give saveat (at most "
                         f"{MAX_SAVES} saves), a larger dt or an adaptive solver")
    if saveat is None:
        return n, np.array([grid(k) for k in range(n + 1)])
    out = []
    for s in np.asarray(saveat, dtype=float).reshape(-1):
        k = (s - t0) / span * n
        kr = int(round(k))
        if abs(k - kr) > 1e-9 * max(1.0, abs(k)) or not 0 <= kr <= n:
            raise ValueError(
                f"{what}: save time {s!r} is not on a step: steps are t0 + k*h with h = "
                f"{span / n!r} (t0={t0!r}, t1={t1!r}, {n} steps); nearest step k={kr}"
            )
        out.append(grid(kr))
    return n, np.array(out)


def _as_system(system, forces, control, quaternion, method) -> AbstractSystem:
    if isinstance(system, Model):
        return TreeSystem(system, tuple(forces), control, quaternion=quaternion, method=method)
    if not isinstance(system, AbstractSystem):
        raise TypeError(
            f"simulate: expected a diffmb.Model or a system of diffmb.systems, got "
            f"{type(system).__name__}"
        )
    if tuple(forces) or control is not None:
        raise ValueError(f"simulate: forces and control belong to a Model; {system.name} is a "
                         "system that carries its own loads")
    return system


def _solver(solver, adaptive):
    """(diffrax solver, adaptive?) from a name of :data:`SOLVERS` or a diffrax solver instance.
    A solver runs adaptively when it has an error estimate (``diffrax.AbstractAdaptiveSolver``)
    unless ``adaptive=False``."""
    if isinstance(solver, str):
        if solver not in SOLVERS:
            raise ValueError(f"unknown solver {solver!r}; choose one of {list(SOLVERS)} or pass "
                             "a diffrax solver")
        solver = SOLVERS[solver]
    if not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"solver must be a name of {list(SOLVERS)} or a diffrax solver, got "
                        f"{type(solver).__name__}")
    has_error = isinstance(solver, diffrax.AbstractAdaptiveSolver)
    if adaptive and not has_error:
        raise ValueError(f"{type(solver).__name__} has no error estimate: it runs with fixed "
                         "steps only")
    return solver, (has_error if adaptive is None else bool(adaptive))


def _forward_mode_stages(solver):
    """The solver with its Runge–Kutta stage loop as a bounded scan, which forward-mode
    autodiff (``jax.jvp``, ``jacfwd``) and reverse mode both differentiate (diffrax's default
    stage loop is reverse-only)."""
    if isinstance(solver, diffrax.AbstractRungeKutta | RK4) and solver.scan_kind is None:
        return eqx.tree_at(lambda s: s.scan_kind, solver, "bounded", is_leaf=lambda x: x is None)
    return solver


def _adjoint(adjoint, checkpoints):
    if isinstance(adjoint, diffrax.AbstractAdjoint):
        return adjoint
    if adjoint == "recursive":
        return diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    if adjoint == "direct":
        return diffrax.DirectAdjoint()
    if adjoint == "backsolve":
        return diffrax.BacksolveAdjoint()
    raise ValueError(f"adjoint must be 'recursive', 'direct' or 'backsolve' or a diffrax adjoint,"
                     f" got {adjoint!r}")


def simulate(
    system,
    q0,
    v0=None,
    t1: float = None,
    dt: float | None = None,
    *,
    t0: float = 0.0,
    solver="rk4",
    saveat: Sequence[float] | None = None,
    forces: Sequence = (),
    control: Callable | None = None,
    params=None,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    adjoint="recursive",
    checkpoints: int | None = None,
    max_steps: int | None = None,
    dtmin: float | None = None,
    adaptive: bool | None = None,
    quaternion: str = "exact",
    method: str = "aba",
    progress: bool = False,
    throw: bool = True,
    loop: str = "auto",
    loop_steps: int | None = None,
) -> Trajectory:
    """Integrate a system from (q0, v0) at t0 to t1; returns a :class:`Trajectory`.

    ``system``: a :class:`~diffmb.Model` (with ``forces``, ``control``, ``quaternion`` and
    ``method``: see :class:`~diffmb.systems.TreeSystem`), or any system of
    :mod:`diffmb.systems`. q0 (nq,), v0 (nv,) for a Model; for other systems what their
    ``init`` takes. ``forces``: :class:`~diffmb.forces.AbstractForce` elements.
    ``control(t, q, v, params) -> u``: fed to the elements that consume controls (actuators),
    or added to tau as a generalized force (nv,) when none does; a
    :class:`diffmb.controls.KnotTable` is such a callable. ``params`` is passed to ``control``
    (and to a system's vector field) as is: differentiate with respect to it. ``t0``, ``t1``,
    ``dt`` and ``saveat`` are Python numbers (they fix the step grid and the output shapes).
    ``rtol``, ``atol`` must be finite and > 0; with fixed steps ``dt`` must divide t1 − t0
    (to 1e-9 relative). A state whose generalized speed exceeds 1e6 (m/s or rad/s) stops
    the run with status ``DIVERGED`` (a smaller dt or an implicit solver is the cure).
    See the module docstring for solvers, quaternion handling, adjoints and failure codes.

    Fixed-step runs are compiled once per structure (the model's topology, the elements, the
    control object, the grid, the solver) and reused for new values of every array (the model's
    numbers, q0, v0, params): a Python loop over parameter values costs run time, not compile
    time. A control written as a new ``lambda`` at each call is a new structure. With
    ``loop_steps`` (an integer, at least the run's number of steps) the loop is compiled for
    that many steps and the grid (t0, t1, dt) and the save times are traced too: fixed-step
    runs with the same ``loop_steps`` and number of saves share one compiled program whatever
    their step and horizon (the steps beyond the run's leave the state alone).

    Example::

        traj = diffmb.simulate(model, q0, v0, t1=2.0, dt=0.002, solver="rk4",
                               saveat=[0.5, 1.0, 1.5, 2.0])
        traj.ts, traj.q, traj.v, traj.status
    """
    system = _as_system(system, forces, control, quaternion, method)
    if t1 is None:
        raise ValueError(f"{system.name}: simulate needs the final time t1")
    t0, t1 = float(t0), float(t1)
    if not np.isfinite(t0) or not np.isfinite(t1) or not t1 > t0:
        raise ValueError(f"{system.name}: simulate needs finite t1 > t0, got t0={t0}, t1={t1}")
    if loop not in ("auto", "diffrax"):
        raise ValueError(f"loop must be 'auto' or 'diffrax', got {loop!r}")
    check_value("simulate", "rtol", rtol, lo=0.0, lo_open=True)
    check_value("simulate", "atol", atol, lo=0.0, lo_open=True)
    check_value("simulate", "dt", dt, lo=0.0, lo_open=True, allow_none=True)
    check_value("simulate", "loop_steps", loop_steps, lo=1, allow_none=True)

    if isinstance(system, AbstractDiscreteSystem):  # its own step map on the fixed grid
        n, save_ts = _grid(t0, t1, dt, saveat, system.name)
        y0 = system.init(q0, v0, params, (t1 - t0) / n)
        traj = _run_fixed(None, (system, params), t0, t1, n, save_ts, y0, checkpoints,
                          loop_steps)
        return _checked(traj, system, "step map", throw)
    if not isinstance(system, AbstractODESystem):
        raise TypeError(f"{system.name}: a system must be an AbstractODESystem or an "
                        "AbstractDiscreteSystem")

    base, adaptive = _solver(solver, adaptive)
    name = solver if isinstance(solver, str) else type(solver).__name__
    if adaptive:
        save_ts = np.array([t0, t1]) if saveat is None else np.asarray(saveat, float).reshape(-1)
        if save_ts.size and (save_ts.min() < t0 or save_ts.max() > t1):
            raise ValueError(f"saveat must lie in [t0, t1] = [{t0}, {t1}]")
        dmin = 1e-12 * (t1 - t0) if dtmin is None else float(dtmin)
        controller = diffrax.PIDController(rtol=rtol, atol=atol, dtmin=dmin, force_dtmin=False)
        dt0, max_steps = dt, (100_000 if max_steps is None else max_steps)
    else:
        n, save_ts = _grid(t0, t1, dt, saveat, name)
        controller = diffrax.ConstantStepSize()
        dt0, max_steps = (t1 - t0) / n, (n + 1 if max_steps is None else max_steps)
    if np.any(np.diff(save_ts) < 0):
        raise ValueError("saveat must be non-decreasing")
    y0 = system.init(q0, v0, params, dt0)
    adj = _adjoint(adjoint, checkpoints)
    args = (system, params)

    recursive = isinstance(adj, diffrax.RecursiveCheckpointAdjoint) and (
        adjoint == "recursive" or adj.checkpoints is None)
    direct = isinstance(adj, diffrax.DirectAdjoint)
    fixed_loop = not adaptive and loop == "auto" and (recursive or direct) and not progress
    if fixed_loop and direct:  # forward mode: the stages in a bounded loop (default: reverse-only)
        base = _forward_mode_stages(base)
    project = system.projection()
    sol_ = base if project is None else ProjectedSolver(base, project)
    if fixed_loop:
        traj = _run_fixed(sol_, args, t0, t1, n, save_ts, y0, checkpoints, loop_steps)
    else:
        if loop_steps is not None:
            raise ValueError("simulate: loop_steps is for fixed-step runs in diffmb's loop "
                             "(not adaptive, loop='auto', the recursive or direct adjoint, "
                             "no progress bar)")
        if isinstance(base, ImplicitContactEuler | ImplicitContactROS2):
            sol_ = _DiffraxResults(sol_)
        out = _diffeqsolve(sol_, controller, adj, t0, t1, dt0, y0, args, save_ts, max_steps,
                           progress)
        traj = _trajectory(system, params, *out)
    return _checked(traj, system, name, throw)


def _diffeqsolve(solver, controller, adj, t0, t1, dt0, y0, args, save_ts, max_steps, progress):
    """diffrax's own loop (adaptive steps, other adjoints, progress): saves, status, end time,
    accepted steps. A non-finite state ends the solve (an ``Event``) except with backsolve."""
    use_event = not isinstance(adj, diffrax.BacksolveAdjoint)
    if use_event:
        saveat_ = diffrax.SaveAt(
            subs=[diffrax.SubSaveAt(ts=jnp.asarray(save_ts)), diffrax.SubSaveAt(t1=True)]
        )
        event = diffrax.Event(_stop_cond)
    else:
        saveat_ = diffrax.SaveAt(ts=jnp.asarray(save_ts))
        event = None
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_vector_field),
        solver,
        jnp.asarray(t0, dtype=jnp.float64),  # arrays, not Python floats: a new t1 or dt does
        jnp.asarray(t1, dtype=jnp.float64),  # not recompile (only shapes and max_steps do)
        None if dt0 is None else jnp.asarray(dt0, dtype=jnp.float64),
        y0,
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
        ts, ys, t_end = sol.ts[0], sol.ys[0], sol.ts[1][0]
        stopped = jnp.where(_all_finite(sol.ys[1]), DIVERGED, NONFINITE)
    else:
        ts, ys, t_end = sol.ts, sol.ys, None
        stopped = NONFINITE
    R = diffrax.RESULTS
    codes = ((R.successful, SUCCESS), (R.max_steps_reached, MAX_STEPS),
             (R.dt_min_reached, DT_MIN), (R.event_occurred, stopped))
    if isinstance(solver, _DiffraxResults):
        codes = codes + ((R.internal_error, CONTACT_OVERFLOW),)
    status = jnp.asarray(SOLVER_FAILURE, jnp.int32)
    for r, code in reversed(codes):
        status = jnp.where(sol.result == r, code, status)
    return ts, ys, status.astype(jnp.int32), t_end, sol.stats["num_accepted_steps"]


def _all_finite(y, axis=None):
    leaves = jax.tree.leaves(y)
    if not leaves:
        return jnp.asarray(True)
    out = [jnp.all(jnp.isfinite(x), axis=axis) for x in leaves]
    r = out[0]
    for o in out[1:]:
        r = r & o
    return r


def _trajectory(system, params, ts, ys, status, t_end, num_steps):
    """Status of non-finite or diverged saves, failure time and the system's outputs as a
    Trajectory."""
    finite = _all_finite(ys)
    status = jnp.where((status == SUCCESS) & ~finite, NONFINITE, status)
    if t_end is None:  # backsolve: locate the first non-finite or diverged save
        bad = ~_all_finite(jax.tree.map(lambda a: a.reshape(a.shape[0], -1), ys), axis=-1)
        far = jax.vmap(system.diverged)(ys) & ~bad
        status = jnp.where((status == SUCCESS) & jnp.any(far), DIVERGED, status)
        bad = bad | far
        t_end = jnp.where(jnp.any(bad), ts[jnp.argmax(bad)], ts[-1])
    t_fail = jnp.where(status == SUCCESS, jnp.inf, t_end)
    q, v, aux = system.outputs(ys, params)
    return Trajectory(ts=ts, q=q, v=v, status=status, t_fail=t_fail, num_steps=num_steps,
                      aux=aux)


def _checked(traj, system, solver, throw):
    """Outside a trace and with ``throw``: raise SimulationError for a failed run."""
    status = concrete(traj.status)
    if throw and status is not None and np.any(status != SUCCESS):
        raise SimulationError(
            f"{system.name}: simulation failed: {traj.message()} (solver={solver!r}). "
            "Pass throw=False to get the trajectory and its status instead."
        )
    return traj


def _fixed_run(solver, args, t0, t1, n, save_ts, y0, checkpoints, length=None):
    """The fixed-step loop and the outputs. ``solver`` None: the system's own step map."""
    system, params = args
    stepper = _discrete_step(system) if solver is None else _ode_step(solver)
    ts, ys, status, t_end = _fixed_step_loop(stepper, args, t0, t1, n, save_ts, y0,
                                             checkpoints, length)
    return _trajectory(system, params, ts, ys, status, t_end, jnp.asarray(n, jnp.int32))


# compiled once per structure: arrays (the model's numbers, q0, v0, params) are traced; the
# grid (unless loop_steps makes it traced), the solver and the system's static parts are the
# cache key
_fixed_run_jit = eqx.filter_jit(_fixed_run)


def _run_fixed(solver, args, t0, t1, n, save_ts, y0, checkpoints, loop_steps=None):
    if loop_steps is not None and loop_steps < n:
        raise ValueError(f"{args[0].name}: loop_steps = {loop_steps} is fewer than the run's "
                         f"{n} steps")
    length = n if loop_steps is None else int(loop_steps)
    size = sum(int(np.size(x)) for x in jax.tree.leaves(y0)) * 8 * (length + 1)
    if size > MAX_LOOP_BYTES:
        raise ValueError(
            f"{args[0].name}: {length} fixed steps of a {size // (8 * (length + 1))}-number "
            f"state need {size / 2**30:.1f} GiB (every step's state is kept); choose a larger "
            "dt, a shorter horizon or an adaptive solver")
    if loop_steps is None:  # the grid static
        grid = (t0, t1, n, tuple(float(t) for t in save_ts))
    else:  # the grid traced
        grid = (jnp.asarray(t0, jnp.float64), jnp.asarray(t1, jnp.float64),
                jnp.asarray(n, jnp.float64), jnp.asarray(save_ts, jnp.float64))
    try:
        return _fixed_run_jit(solver, args, *grid, y0, checkpoints, length)
    except TypeError as e:  # an unhashable static part (e.g. a control object): no cache
        if "hash" not in str(e):
            raise
        return _fixed_run(solver, args, *grid, y0, checkpoints, length)


def _ode_step(solver):
    """One step of a diffrax solver as (y, solver state, ta, tb, args) -> (y1, state1, code)."""
    term = diffrax.ODETerm(_vector_field)

    def init(t0, h, y0, args):
        return solver.init(term, t0, t0 + h, y0, args)

    def step(y, sstate, ta, tb, args):
        y1, _, _, sstate1, res = solver.step(term, ta, tb, y, args, sstate, False)
        return y1, sstate1, _status_of(res)

    return init, step


def _discrete_step(system):
    def init(t0, h, y0, args):
        return None

    def step(y, sstate, ta, tb, args):
        sys_, params = args
        y1, code = sys_.step(ta, y, tb - ta, params)
        return y1, sstate, code

    return init, step


def _fixed_step_loop(stepper, args, t0, t1, n, save_ts, y0, checkpoints, length=None):
    """n steps on the grid t_k = t0 + (t1 − t0) k / n in a ``lax.scan`` of ``length`` (default
    n, a Python int) steps: the steps from n on leave the carry alone (n, t0, t1 and
    ``save_ts`` may then be traced).

    Returns the states at ``save_ts`` (which lie on the grid), the status and the time at which
    the integration stopped. The first step that fails (non-finite result or a failure code)
    freezes the carried state at the last good one and records the end time of that step; saves
    from there on hold +inf (as with the diffrax loop's event).
    """
    init, one_step = stepper
    length = n if length is None else length
    span = t1 - t0
    t_of = lambda k: jnp.where(k == n, t1, t0 + span * (k / n))
    k_save = jnp.rint((jnp.asarray(save_ts, jnp.float64) - t0) / span * n).astype(jnp.int64)
    state0 = init(t0, span / n, y0, args)

    def step(carry, k):
        y, sstate, t_end, status = carry
        ta, tb = t_of(k), t_of(k + 1)
        y1, sstate1, code = one_step(y, sstate, ta, tb, args)
        ok = status == SUCCESS
        code = jnp.where(_all_finite(y1), code, NONFINITE)
        code = jnp.where((code == SUCCESS) & args[0].diverged(y1), DIVERGED, code)
        good = ok & (code == SUCCESS)
        y1 = jax.tree.map(lambda a, b: jnp.where(good, a, b), y1, y)
        t_end = jnp.where(ok & ~good, tb, t_end)
        status = jnp.where(ok, code, status).astype(jnp.int32)
        return (y1, sstate1, t_end, status), y1

    if checkpoints is None and length <= 1024:
        chunks, size = 1, length
    else:
        chunks = int(np.ceil(np.sqrt(length))) if checkpoints is None else \
            max(1, int(checkpoints))
        size = int(np.ceil(length / chunks))
    total = chunks * size  # steps beyond n (loop_steps, padding of the last chunk) leave the
    #                        carry alone

    def chunk(carry, ks):
        def guarded(c, k):
            new, y = step(c, k)
            new = jax.tree.map(lambda a, b: jnp.where(k < n, a, b), new, c)
            return new, y

        exact = isinstance(n, int | np.integer) and total == n
        return jax.lax.scan(step if exact else guarded, carry, ks)

    carry0 = (y0, state0, jnp.asarray(t1, jnp.float64), jnp.asarray(SUCCESS, jnp.int32))
    ks = jnp.arange(total, dtype=jnp.float64)
    if chunks == 1:
        (_, _, t_end, status), ys = chunk(carry0, ks)
    else:
        body = jax.checkpoint(chunk, prevent_cse=False)
        (_, _, t_end, status), ys = jax.lax.scan(body, carry0, ks.reshape(chunks, size))
        ys = jax.tree.map(lambda a: a.reshape(total, *a.shape[2:]), ys)
    ys = jax.tree.map(lambda a, b: jnp.concatenate([b[None], a])[k_save], ys, y0)
    # saves at or after the failed step hold +inf (the carried state froze at the last good one)
    k_fail = jnp.round((t_end - t0) / span * n)
    after = (status != SUCCESS) & (k_save.astype(jnp.float64) >= k_fail)
    ys = jax.tree.map(
        lambda a: jnp.where(after.reshape((-1,) + (1,) * (a.ndim - 1)), jnp.inf, a), ys)
    return jnp.asarray(save_ts, jnp.float64), ys, status, t_end


def _stop_cond(t, y, args, **kwargs):
    """The event that ends diffrax's loop: a non-finite or diverged state."""
    return ~_all_finite(y) | args[0].diverged(y)
