"""What :func:`diffmb.simulate` integrates: the system interface and the tree system.

A system says what is integrated; :func:`diffmb.simulate` owns the one time loop. Every system
is an equinox Module (abstract or final, equinox's pattern) with

* ``init(q0, v0, params, dt) -> y0``: the state pytree the integrator moves, built from the
  user's initial positions and velocities (and checked: shapes, finiteness, named);
* ``projection() -> project or None``: a pure function y -> y applied after every accepted step;
* ``outputs(ys, params) -> (q, v, aux)``: what a :class:`~diffmb.simulation.Trajectory` shows of
  the saved states (leading axis: the saves);
* ``diverged(y) -> bool``: True when y has left the physically meaningful region (default:
  never); the run then stops with the status :data:`DIVERGED`;

and, by kind,

* :class:`AbstractODESystem`: ``vector_field(t, y, params) -> dy/dt``, integrated by a diffrax
  solver (Runge–Kutta, fixed or adaptive steps); :class:`AbstractSecondOrderSystem` is one whose
  state is ``(q, v, *rest)`` with q̇ a function of (q, v) alone (what the velocity-implicit
  Euler step needs);
* :class:`AbstractDiscreteSystem`: ``step(t, y, h, params) -> (y_next, code)``, its own one-step
  map on a fixed grid (a variational integrator, the exact discretisation of a linear system);
  ``code`` is :data:`SUCCESS` or a failure code of :data:`STATUS`.

:data:`STATUS` is the one table of status codes of every system and solver.

Final systems: :class:`TreeSystem` (a :class:`~diffmb.Model` with force elements and a control,
here), :class:`~diffmb.formulations.maximal.MaximalDAE` (absolute coordinates, Baumgarte DAE),
:class:`~diffmb.formulations.variational.VariationalSystem` (the symplectic step),
:class:`~diffmb.formulations.modal.LinearSecondOrderSystem` and
:class:`~diffmb.formulations.modal.ModalZOHSystem` (modal models), and
:class:`~diffmb.models.uav.UAVSystem` (the UAV's quaternion-Lagrange, rotor-Kane and tree forms).
"""

from __future__ import annotations

import abc
import dataclasses
import warnings
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .contacts.element import AbstractContacts, AbstractGroundForce
from .controls import AbstractStatefulControl
from .dynamics.api import forward_dynamics, mass_matrix
from .dynamics.configuration import ball_layout, normalize, qdot, unit_quaternions
from .dynamics.crba import crba_kin
from .dynamics.kinematics import kinematics
from .dynamics.rnea import rnea_kin
from .dynamics.small_linalg import cho_factor, cho_solve, solve, spd_solve
from .forces.elements import (
    AbstractForce,
    AbstractStatefulForce,
    Couplings,
    JointLimits,
    SoftRows,
    init_states,
    total_force,
)
from .forces.unilateral import AbstractUnilateral, UnilateralRows, solve_lcp
from .model import Model

__all__ = [
    "AbstractSystem",
    "AbstractODESystem",
    "AbstractDiscreteSystem",
    "AbstractSecondOrderSystem",
    "AbstractStatefulControl",
    "LinearStages",
    "TreeSystem",
    "STATUS",
    "CONTACT_OVERFLOW",
    "MAX_SPEED",
    "forward",
    "unilateral_forces",
    "check_initial",
    "concrete",
]

SUCCESS, MAX_STEPS, DT_MIN, NONFINITE, SOLVER_FAILURE, DIVERGED, CONTACT_OVERFLOW = range(7)
LCP_TOL = 1e-6  # the largest LCP violation (scaled, solve_lcp) that counts as solved

#: a generalized speed (m/s or rad/s) beyond which a tree's state has diverged
MAX_SPEED = 1e6

#: status codes of every simulation (``Trajectory.status``), for every system and solver
STATUS = {
    SUCCESS: "success",
    MAX_STEPS: "maximum number of steps reached (increase max_steps)",
    DT_MIN: "step size collapsed below dtmin (stiff or singular dynamics?)",
    NONFINITE: "the state became non-finite (NaN/inf), or a unilateral LCP had no solution",
    SOLVER_FAILURE: "the solver failed (e.g. an implicit solve such as Newton's did not "
                    "converge)",
    DIVERGED: f"the state diverged (a speed beyond {MAX_SPEED:.0e} m/s or rad/s): take a "
              "smaller step dt or an implicit solver ('implicit_euler_v', 'kvaerno5')",
    CONTACT_OVERFLOW: "more contact points pushed at once than a contact element's implicit "
                      "step linearises (its max_points, default 64): raise it with "
                      "Contacts(..., max_points=n) or contacts.with_max_points(n)",
}


class AbstractSystem(eqx.Module):
    """A system integrated by :func:`diffmb.simulate` (see the module docstring)."""

    @abc.abstractmethod
    def init(self, q0, v0, params, dt):
        raise NotImplementedError

    @abc.abstractmethod
    def outputs(self, ys, params):
        raise NotImplementedError

    def projection(self) -> Callable | None:
        """A pure function y -> y applied after every step (no traced data), or None."""
        return None

    def diverged(self, y):
        """True (a boolean scalar) when the state ``y`` has left the physically meaningful
        region: the run stops there with :data:`DIVERGED`. Default: never."""
        return jnp.asarray(False)

    @property
    def name(self) -> str:
        return type(self).__name__


class AbstractODESystem(AbstractSystem):
    """A system given by its vector field dy/dt = f(t, y, params)."""

    @abc.abstractmethod
    def vector_field(self, t, y, params):
        raise NotImplementedError


class AbstractSecondOrderSystem(AbstractODESystem):
    """An ODE system with state ``y = (q, v, *rest)`` whose position rate depends on (q, v)
    alone: ``vector_field(t, y, params)[0] == position_rate(q, v)``."""

    @abc.abstractmethod
    def position_rate(self, q, v):
        raise NotImplementedError

    def diverged(self, y):
        """A generalized speed beyond :data:`MAX_SPEED` (m/s or rad/s)."""
        return jnp.any(jnp.abs(y[1]) > MAX_SPEED)

    def linear_stages(self, t, y, params, h, rows_at_start=False, cone_passes=1):
        """The stiff forces linearised over a step of size h from ``y``, for a linearly
        implicit step (:class:`~diffmb.simulation.ImplicitContactEuler`,
        :class:`~diffmb.simulation.ImplicitContactROS2`): a :class:`LinearStages`. Systems
        that offer such a step override this. ``rows_at_start``: soft constraint rows take
        a_ref at the step's start (MuJoCo's Euler step) in ``W`` and ``r``.
        ``cone_passes``: solve W Δv = r, take the sticking contact points' friction cones
        at the end of that step (:meth:`~diffmb.contacts.AbstractContacts.relinearise`) and
        rebuild W and r, ``cone_passes − 1`` times."""
        raise TypeError(f"{self.name}: this system offers no linearly implicit stages; use an "
                        "explicit solver or 'implicit_euler_v'")


class LinearStages(NamedTuple):
    """A second-order system's stiff forces linearised once at a state y over a step of size
    h, for every stage of a linearly implicit step that reuses the one matrix W.

    A stage increment k = (k_q, k_v, k_s) (position rate in velocity coordinates, velocity
    rate, element and control state rates) solves (I − h J) k = R for a right-hand side
    R = (R_q, R_v, R_s), J the vector field linearised as the Euler step linearises it (the
    stiff forces over positions that move by h (R_q + h k_v) and stiction states that move
    implicitly; the other states explicit). ``stage(M R_v, R_q, R_s)`` reduces it to
    W Δv = r and returns ``(r, increment)``; ``increment(Δv)`` is k, Δv = h k_v.

    * ``W`` (nv, nv), ``r``, ``finish``: the Euler step, W Δv = r (R = the vector field at
      y; ``finish(Δv)`` the state after it);
    * ``M``: the mass matrix at y (``stage`` takes the force M R_v, not R_v);
    * ``force``: M a at y, the generalized force of the Euler step (gravity, velocity
      products and every element's force, the soft rows' included);
    * ``rates``: the state rates at y as the step uses them (the structure of y[2]; None
      without state);
    * ``field(t, y)``: the vector field for the later stages: the system's, with the contact
      points and the soft limit rows (MuJoCo's constraint form) that do not push at y kept
      from pushing (the linearisation has no block for them: a contact or limit that engages
      during the step starts to push at the next step, as in the Euler step, instead of
      entering a stage as an unlinearised stiff spring).
    """

    W: jnp.ndarray
    r: jnp.ndarray
    finish: Callable
    M: jnp.ndarray
    force: jnp.ndarray
    rates: object
    stage: Callable
    field: Callable
    overflow: jnp.ndarray = None  # () bool: a contact element had more points pushing than
    #                               it linearises (its max_points): the step is not valid


class AbstractDiscreteSystem(AbstractSystem):
    """A system advanced by its own step map y_{k+1} = Φ(t_k, y_k, h) on a fixed grid."""

    @abc.abstractmethod
    def step(self, t, y, h, params):
        raise NotImplementedError


def concrete(x, dtype=None):
    """``x`` as a numpy array, or None when it is (or holds) a tracer: the one test for "can
    this value be checked in Python now" (outside ``jit``/``grad``/``vmap``)."""
    if x is None or isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x, dtype=dtype)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def check_initial(name: str, what: str, x, shape) -> jnp.ndarray:
    """``x`` as float64 of ``shape``; a clear error naming ``what`` if not (finite when concrete)."""
    x = jnp.asarray(x, dtype=jnp.float64)
    if x.shape != tuple(shape):
        raise ValueError(f"{name}: {what} has shape {x.shape}, expected {tuple(shape)}")
    xa = concrete(x)
    if xa is not None and not np.all(np.isfinite(xa)):
        bad = np.flatnonzero(~np.isfinite(xa.reshape(-1)))
        raise ValueError(f"{name}: {what} has non-finite entries at indices {bad.tolist()}")
    return x


def _has_state(obj) -> bool:
    return isinstance(obj, AbstractStatefulForce | AbstractStatefulControl)


class TreeSystem(AbstractSecondOrderSystem):
    """A :class:`~diffmb.Model` with force elements and a control: y = (q, v) or (q, v, s).

    q̇ = qdot(model, q, v) (the exact quaternion-rate map for ball nodes) and
    v̇ = forward_dynamics(model, q, v, Σ tau + [ctrl], Σ f_ext). ``s`` holds the states of the
    elements that derive from :class:`~diffmb.forces.AbstractStatefulForce` and of a control that
    derives from :class:`AbstractStatefulControl` (each gives ``init_state(model)``):
    ``s = (element states: a tuple aligned with ``forces``, None for a stateless element, or None
    when no element has state; the control's state or None)``.

    ``quaternion="exact"`` evaluates the dynamics at q/|q| and projects the ball quaternions
    back onto the unit sphere after every step; ``"unprojected"`` integrates q̇ = ½ q ⊗ ω as a
    plain ODE in R⁴ (the papers' form). ``method`` selects the forward-dynamics algorithm.
    """

    model: Model
    forces: tuple = ()
    control: Callable | None = None
    quaternion: str = eqx.field(static=True, default="exact")
    method: str = eqx.field(static=True, default="aba")

    def __check_init__(self):
        if self.quaternion not in ("exact", "unprojected"):
            raise ValueError(f"quaternion must be 'exact' or 'unprojected', got {self.quaternion!r}")
        for i, f in enumerate(self.forces):
            if not isinstance(f, AbstractForce):
                raise TypeError(f"forces[{i}]: expected a force element (diffmb.forces."
                                f"AbstractForce), got {type(f).__name__}")

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def stateful(self) -> bool:
        return any(_has_state(f) for f in self.forces) or _has_state(self.control)

    def init(self, q0, v0, params, dt):
        m = self.model
        q0 = check_initial(m.name, "q0", q0, (m.nq,))
        v0 = jnp.zeros(m.nv) if v0 is None else v0
        v0 = check_initial(m.name, "v0", v0, (m.nv,))
        lay = ball_layout(m)
        if lay.nb:
            qa = concrete(q0)
            n2 = None if qa is None else np.sum(qa[lay.q_idx] ** 2, axis=-1)
            if n2 is not None and np.any(n2 < 1e-12):
                starts = np.asarray(lay.q_idx)[n2 < 1e-12, 0].tolist()
                raise ValueError(f"{m.name}: q0 has a zero quaternion at q[{starts[0]}:"
                                 f"{starts[0] + 4}] (a ball or free joint's rotation)")
        q0, v0 = _project_initial(m, self.forces, q0, v0)
        for f in self.forces:  # a shape started deep in the ground is refused, by name
            if isinstance(f, AbstractGroundForce):
                f.check_initial(m, q0)
        if not self.stateful:
            return (q0, v0)
        return (q0, v0, self.initial_state())

    def initial_state(self):
        """s0: the elements' and the control's ``init_state(model)``."""
        sc = self.control.init_state(self.model) if _has_state(self.control) else None
        stateful = any(_has_state(f) for f in self.forces)
        return (init_states(self.forces, self.model) if stateful else None, sc)

    def projection(self):
        lay = ball_layout(self.model)
        if self.quaternion != "exact" or not lay.nb:
            return None
        return _TreeProjection(lay)

    def vector_field(self, t, y, params):
        q, v = y[0], y[1]
        s = y[2] if len(y) > 2 else None
        qd = normalize(self.model, q) if self.quaternion == "exact" else q
        a, ds = _accelerations(self.model, self.forces, self.control, t, qd, v, params, s,
                               self.method)
        dq = qdot(self.model, q, v)
        return (dq, a) if s is None else (dq, a, ds)

    def position_rate(self, q, v):
        return qdot(self.model, q, v)

    def linear_stages(self, t, y, params, h, rows_at_start=False, cone_passes=1):
        """The tree's stiff forces linearised over a step of size h from y, as a
        :class:`LinearStages`: the linearly implicit Euler step (see
        :class:`~diffmb.simulation.ImplicitContactEuler`) and any stage of a multi-stage one
        (:class:`~diffmb.simulation.ImplicitContactROS2`). With M the mass matrix, Q the
        generalized forces at the start of the step, C the velocity-product and gravity terms,
        and the stiff forces linearised over the step as Q(end) ≈ Q + A Δv + c,

            (M − h A) Δv = h (Q − C + c),   v₁ = v + Δv,   q₁ = q + h q̇(q, v₁).

        A and c: each contact element's per-point blocks mapped by its contact Jacobians, the
        stiction states eliminated point by point (:meth:`~diffmb.contacts.AbstractContacts.
        linearise`); MuJoCo's soft joint limits with the load they carry
        (:meth:`~diffmb.forces.JointLimits.soft_rows`, joining the step's solve by
        :meth:`~diffmb.forces.SoftRows.step_matrix`); the joint-space forces of the other elements (servos, damping, springs,
        joint friction, tendons through their :meth:`~diffmb.forces.AbstractForce.
        implicit_proxy`) and of the control by ∂τ/∂v + h ∂τ/∂q along the step (q moves by
        h q̇(q, v₁)), forward mode over the elements alone. Body forces of other elements (fluid, buoyancy), soft equalities and
        the velocity-product terms stay explicit, and so do the other element and control
        states (Euler). Exact couplings hold v₁ on C v = 0 (the M-orthogonal projection).
        ``method`` is not used: M and C come from CRBA and RNEA, on the kinematics the contacts
        use. ``cone_passes`` > 1 re-takes the contacts' cones at the solved step's end
        (:meth:`AbstractSecondOrderSystem.linear_stages`); the soft rows keep the first
        pass's load."""
        m = self.model
        if any(isinstance(f, AbstractUnilateral) for f in self.forces):
            raise TypeError(f"{self.name}: unilateral elements (diffmb.forces.unilateral) have "
                            "no linearly implicit step; use an explicit solver or "
                            "'implicit_euler_v'")
        q, v = y[0], y[1]
        s = y[2] if len(y) > 2 else None
        fs, sc = (None, None) if s is None else s
        qd = normalize(m, q) if self.quaternion == "exact" else q
        ctrl, dsc = _control(self.control, t, qd, v, params, sc, m)
        kin = kinematics(m, qd, v)  # shared by the contacts, CRBA and RNEA
        # contacts whose normals are MuJoCo's soft rows (normal='constraint')
        con = [k for k, f in enumerate(self.forces)
               if isinstance(f, AbstractContacts) and f.needs_load]
        if con and not rows_at_start:
            raise TypeError(f"{self.name}: contacts with normal='constraint' take "
                            "solver='implicit' (MuJoCo's Euler step) or an explicit solver")
        lins = {k: f.linearise(m, qd, v, None if fs is None else fs[k], h, kin)
                for k, f in enumerate(self.forces)
                if isinstance(f, AbstractContacts) and k not in con}
        Qc = sum((lin.Q for lin in lins.values()), jnp.zeros(m.nv))
        # soft rows solved under the others' load (MuJoCo's limits): which rows push
        row_els = [k for k, f in enumerate(self.forces)
                   if k not in lins and f.needs_load and isinstance(f, JointLimits)]
        rest = [k for k in range(len(self.forces))
                if k not in lins and k not in row_els and k not in con]
        sub = tuple(self.forces[k] for k in rest)
        sub_s = None if fs is None else tuple(fs[k] for k in rest)
        tau, f_ext, ds = total_force(sub, m, t, qd, v, ctrl, sub_s, extra_load=Qc)
        generalized = ctrl is not None and not _consumes_ctrl(self.forces)
        if generalized:
            tau = tau + jnp.asarray(ctrl)
        M = crba_kin(m, kin)
        cho = cho_factor(M)
        bias = rnea_kin(m, kin, jnp.zeros(m.nv), f_ext)  # C − Σ Jᵀ f_ext
        a0 = cho_solve(cho, tau + Qc - bias)  # without the rows
        if con:  # every soft row solved together, as MuJoCo's solver does
            geos, parts = {}, []
            for k in con:
                geos[k], part = self.forces[k].step_rows(
                    m, qd, v, None if fs is None else fs[k], h, kin)
                parts.append(part)
            parts += [self.forces[k].rows(m, qd) for k in row_els]
            parts = [dataclasses.replace(p, solref=p.step_solref(h)) for p in parts]
            every = SoftRows.join(parts)
            sizes = [p.y.shape[0] for p in parts]
            solved = every.solved(v, cho, a0).split(sizes)
            stick = [k for k in con if self.forces[k].friction != "pyramid"]
            if stick:  # again with their friction in the load (it moves load between rows)
                Qf = sum((self.forces[k].linearise_at(geos[k], h, solved[con.index(k)]).Q
                          for k in stick), jnp.zeros(m.nv))
                solved = every.solved(v, cho, a0 + cho_solve(cho, Qf)).split(sizes)
            crows = dict(zip(con, solved[:len(con)], strict=True))
            rows = solved[len(con):]
            for k in con:
                lins[k] = self.forces[k].linearise_at(geos[k], h, crows[k])
                Qc = Qc + lins[k].Q
        else:
            crows = {}
            rows = [self.forces[k].soft_rows(m, t, qd, v, ctrl, tau + Qc, f_ext, (cho, a0))
                    for k in row_els]
        A = sum((lin.A for lin in lins.values()), jnp.zeros((m.nv, m.nv)))
        c = sum((lin.c for lin in lins.values()), jnp.zeros(m.nv))
        proxies = tuple(p for p in (f.implicit_proxy() for f in sub) if p is not None)
        blocks = [(p, None if self.control is not None and p.uses_ctrl else
                   p.joint_blocks(m, t, qd, v, ctrl)) for p in proxies]
        closed = [b for _, b in blocks if b is not None]  # their blocks in closed form
        proxies = tuple(p for p, b in blocks if b is None)
        Kq = sum((b[0] for b in closed), jnp.zeros((m.nv, m.nv))) if closed else None
        if closed:
            A = A + sum(b[1] for b in closed) + h * Kq
            c = c + h * (Kq @ v)
        if proxies or self.control is not None:
            stateful = tuple(isinstance(p, AbstractStatefulForce) for p in proxies)
            p_s = None if fs is None or not any(stateful) else tuple(
                fs[rest[sub.index(p)]] if st else None for p, st in zip(proxies, stateful,
                                                                       strict=True))

            def tau_of(w, vv):  # with the control's own dependence on (q, v) (a PD law)
                qq = qd + qdot(m, qd, w)
                u, _ = _control(self.control, t, qq, vv, params, sc, m)
                out = total_force(proxies, m, t, qq, vv, u, p_s)[0]
                return out + jnp.asarray(u) if generalized else out

            Kp, Dv = jax.jacfwd(tau_of, argnums=(0, 1))(jnp.zeros(m.nv), v)
            A, c = A + Dv + h * Kp, c + h * (Kp @ v)
            Kq = Kp if Kq is None else Kq + Kp
        # the pushing soft rows join the step's own solve (SoftRows.step_matrix)
        every = rows + list(crows.values())
        if rows_at_start and crows:
            # MuJoCo's Euler step: the rows' forces as its solver finds them at the start
            # (with M alone), the step implicit in the rest (damping) around them
            W = M - h * A
            r = h * (tau + Qc - bias + c + sum((rw.tau for rw in every), jnp.zeros(m.nv)))
        else:  # the rows in the step's own solve
            W = M - h * A + sum((rw.step_matrix(h, rows_at_start) for rw in every),
                                jnp.zeros((m.nv, m.nv)))
            r = h * (tau + Qc - bias + c) + sum((rw.step_rhs(h, v, at_start=rows_at_start)
                                                 for rw in every), jnp.zeros(m.nv))
        passes = cone_passes if any(self.forces[k].relinearises for k in lins) else 1
        for _ in range(passes - 1):  # the cone at the end of the step just solved
            dv = solve(W, r)
            new = {k: self.forces[k].relinearise(lin, dv, h,
                                                 crows[k].f if k in crows else None)
                   for k, lin in lins.items()}
            dQ = sum((new[k].Q + new[k].c - lin.Q - lin.c for k, lin in lins.items()),
                     jnp.zeros(m.nv))
            W = W - h * sum((new[k].A - lin.A for k, lin in lins.items()),
                            jnp.zeros((m.nv, m.nv)))
            r = r + h * dQ
            Qc = Qc + sum((new[k].Q - lin.Q for k, lin in lins.items()), jnp.zeros(m.nv))
            lins = new
        tau = tau + sum((rw.tau for rw in every), jnp.zeros(m.nv))
        Cx = _exact_coupling_matrix(self.forces)

        def finish(dv):
            v1 = v + dv
            if Cx is not None:
                X = cho_solve(cho, Cx.T)
                v1 = v1 - X @ solve(Cx @ X, Cx @ v1)
                dv = v1 - v
            q1 = q + h * qdot(m, q, v1)
            if s is None:
                return (q1, v1)
            fs1 = None
            if fs is not None:
                fs1 = [None] * len(self.forces)
                for k, lin in lins.items():
                    fs1[k] = None if fs[k] is None else fs[k] + lin.state_change(dv)
                for j, k in enumerate(rest):
                    if fs[k] is not None:
                        fs1[k] = jax.tree.map(lambda x, d: x + h * d, fs[k], ds[j])
                fs1 = tuple(fs1)
            sc1 = None if sc is None else jax.tree.map(lambda x, d: x + h * d, sc, dsc)
            return (q1, v1, (fs1, sc1))

        rates = None
        if s is not None:
            fr = None
            if fs is not None:
                fr = [None] * len(self.forces)
                for k, lin in lins.items():
                    fr[k] = None if fs[k] is None else lin.zd
                for j, k in enumerate(rest):
                    if fs[k] is not None:
                        fr[k] = ds[j]
                fr = tuple(fr)
            rates = (fr, dsc)

        def stage(F, rate, srates):
            # c with the positions moving at `rate` and the states at `srates` (Euler: v, ż)
            rfs = None if srates is None else srates[0]
            cg, dz0 = jnp.zeros(m.nv), {}
            for k, lin in lins.items():
                zr = lin.zd if rfs is None or rfs[k] is None else rfs[k]
                ck, dz0[k] = lin.explicit_change(h, rate, zr)
                cg = cg + ck
            if Kq is not None:
                cg = cg + h * (Kq @ rate)
            rhs = h * (F + cg)
            if rows:
                MiF = cho_solve(cho, F)
                rhs = rhs + sum(rw.step_rhs(h, rate, rw.J @ MiF) for rw in rows)

            def increment(dv):
                if Cx is not None:
                    X = cho_solve(cho, Cx.T)
                    dv = dv - X @ solve(Cx @ X, Cx @ dv)
                kq, kv = rate + dv, dv / h
                if s is None:
                    return (kq, kv)
                kf = None
                if fs is not None:
                    kf = list(rfs)
                    for k, lin in lins.items():
                        if fs[k] is not None:
                            kf[k] = lin.stage_state_change(dz0[k], dv) / h
                    kf = tuple(kf)
                return (kq, kv, (kf, srates[1]))

            return rhs, increment

        row_on = {k: rw.f > 0 for k, rw in zip(row_els, rows, strict=True) if rw is not None}
        masked = tuple(f.masked(lins[k].on) if k in lins else
                       f.masked(row_on[k]) if k in row_on else f
                       for k, f in enumerate(self.forces))

        def field(t_, y_):
            s_ = y_[2] if len(y_) > 2 else None
            q_ = normalize(m, y_[0]) if self.quaternion == "exact" else y_[0]
            a_, ds_ = _accelerations(m, masked, self.control, t_, q_, y_[1], params, s_,
                                     self.method)
            dq_ = qdot(m, y_[0], y_[1])
            return (dq_, a_) if s_ is None else (dq_, a_, ds_)

        drops = [lin.dropped for lin in lins.values() if lin.dropped is not None]
        overflow = jnp.any(jnp.stack(drops)) if drops else jnp.asarray(False)
        return LinearStages(W=W, r=r, finish=finish, M=M, force=tau + Qc - bias, rates=rates,
                            stage=stage, field=field, overflow=overflow)

    def outputs(self, ys, params):
        q = ys[0]
        lay = ball_layout(self.model)
        if self.quaternion == "exact" and lay.nb:
            q = unit_quaternions(lay, q)
        return q, ys[1], (ys[2] if len(ys) > 2 else None)


class _TreeProjection:
    """y -> y with unit ball quaternions (hashable: a static field of the projected solver)."""

    def __init__(self, layout):
        self.layout = layout

    def __call__(self, y):
        return (unit_quaternions(self.layout, y[0]), *y[1:])

    def __hash__(self):
        return hash(id(self.layout))

    def __eq__(self, other):
        return isinstance(other, _TreeProjection) and other.layout is self.layout


def _consumes_ctrl(forces) -> bool:
    return any(isinstance(f, AbstractForce) and f.uses_ctrl for f in forces)


def _control(control, t, q, v, params, sc, model):
    """The control's output and its state derivative (None without state or control)."""
    dsc = None
    if control is None:
        ctrl = None
    elif _has_state(control):
        ctrl, dsc = control(t, q, v, params, sc)
    else:
        ctrl = control(t, q, v, params)
    if control is not None and ctrl is None:
        raise ValueError(f"{model.name}: the control returned None; return the control vector"
                         " (zeros for none)")
    return ctrl, dsc


def _accelerations(model, forces, control, t, q, v, params, s, method):
    """a (nv,) and the state derivative ds (None without state) at (t, q, v, s)."""
    fs = None if s is None else s[0]
    tau, f_ext, dfs, dsc = _applied_forces(model, forces, control, t, q, v, params, s)
    C = _exact_coupling_matrix(forces)
    rows = _unilateral_rows(model, forces, t, q, v)
    if rows is not None:
        a, f = unilateral_forward_dynamics(model, q, v, tau, f_ext, C, rows, method)
        if fs is not None:
            dfs = _impulse_rates(model, forces, fs, dfs, f)
    elif C is None:
        a = forward_dynamics(model, q, v, tau, f_ext, method=method)
    elif method == "aba":
        a = coupled_forward_dynamics(model, q, v, tau, f_ext, C)
    else:
        a = project_accelerations(model, q, forward_dynamics(model, q, v, tau, f_ext,
                                                             method=method), C)
    return a, (None if s is None else (dfs, dsc))


def _applied_forces(model, forces, control, t, q, v, params, s):
    """τ (nv,), f_ext and the elements' and the control's state rates at (t, q, v, s): the
    elements' forces and the control (a generalized force where no element consumes it)."""
    fs, sc = (None, None) if s is None else s
    ctrl, dsc = _control(control, t, q, v, params, sc, model)
    tau, f_ext, dfs = total_force(forces, model, t, q, v, ctrl, fs)
    if ctrl is not None and not _consumes_ctrl(forces):
        ctrl = jnp.asarray(ctrl)
        if ctrl.shape != (model.nv,):
            raise ValueError(
                f"{model.name}: no force element consumes the control, so it is a generalized"
                f" force and must have shape ({model.nv},); got {ctrl.shape}. Pass actuators"
                " (diffmb.forces.Actuators / GeneralizedForce) in `forces`."
            )
        tau = tau + ctrl
    return tau, f_ext, dfs, dsc


def _unilateral_rows(model, forces, t, q, v):
    """The stacked :class:`~diffmb.forces.unilateral.UnilateralRows` of the unilateral
    elements among ``forces``, or None."""
    rs = [f.rows(model, t, q, v) for f in forces if isinstance(f, AbstractUnilateral)]
    if not rs:
        return None
    return UnilateralRows(*(jnp.concatenate(x, axis=0) for x in zip(*rs, strict=True)))


def _impulse_rates(model, forces, fs, dfs, f):
    """The state rates ``dfs`` with those of the stateful unilateral elements set to their
    multipliers (their states are the impulses ∫ f dt)."""
    out, k = list(dfs), 0
    for i, el in enumerate(forces):
        if isinstance(el, AbstractUnilateral):
            m = el.n_rows(model)
            if fs[i] is not None:
                out[i] = f[k:k + m]
            k += m
    return tuple(out)


def unilateral_forward_dynamics(model: Model, q, v, tau, f_ext, C, rows, method="aba"):
    """The accelerations with unilateral rows (:mod:`diffmb.forces.unilateral`) and the exact
    linear couplings C v = 0 (None: none) held, and the multipliers f (m,).

    One forward dynamics over 1 + nc + m right-hand sides (``vmap``) gives a₀ = FD(τ, f_ext)
    and X = FD(τ + Q_j) − a₀ = M⁻¹Q_j for the couplings' rows and each row's force per unit
    multiplier; the couplings are held by Gauss's principle on a₀ and X (as
    :func:`coupled_forward_dynamics`), then f solves the LCP (J X) f + (J a₀ + drift) ≥ 0,
    f ≥ 0, complementary (:func:`~diffmb.forces.unilateral.solve_lcp`) and a = a₀ + X f."""
    nc = 0 if C is None else C.shape[0]
    fe = jnp.zeros((model.n_bodies, 6)) if f_ext is None else f_ext
    taus = [tau[None]] + ([] if C is None else [tau[None] + C]) + [tau[None] + rows.tau]
    fes = [fe[None], jnp.broadcast_to(fe, (nc, *fe.shape)), fe[None] + rows.f_ext]
    A = jax.vmap(lambda t_, f_: forward_dynamics(model, q, v, t_, f_, method=method))(
        jnp.concatenate(taus, axis=0), jnp.concatenate(fes, axis=0))
    a0, X = A[0], (A[1:] - A[0]).T  # X (nv, nc + m)
    Xu = X[:, nc:]
    if C is not None:
        Xc = X[:, :nc]
        K = solve(C @ Xc, jnp.concatenate([(C @ a0)[:, None], C @ Xu], axis=1))
        a0, Xu = a0 - Xc @ K[:, 0], Xu - Xc @ K[:, 1:]
    f, violation = solve_lcp(rows.J @ Xu, rows.J @ a0 + rows.drift, rows.active)
    # an LCP without a solution (A not a P-matrix) makes the accelerations NaN: the run then
    # fails with a status instead of going on with the least violating set's forces
    ok = violation <= LCP_TOL
    return jnp.where(ok, a0 + Xu @ f, jnp.nan), f


def _exact_coupling_matrix(forces):
    """The stacked C (m, nv) of the exact linear couplings among ``forces``, or None."""
    rows = [f.jacobian() for f in forces if isinstance(f, Couplings) and f.exact]
    return jnp.concatenate(rows, axis=0) if rows else None


def project_accelerations(model: Model, q, a0, C):
    """a = a₀ − M⁻¹Cᵀ(C M⁻¹ Cᵀ)⁻¹ C a₀: the accelerations with the linear velocity constraints
    C v = 0 held (Gauss's principle; the constraint forces Cᵀλ do no work)."""
    M = mass_matrix(model, q)
    X = spd_solve(M, C.T)
    lam = solve(C @ X, C @ a0)
    return a0 - X @ lam


def coupled_forward_dynamics(model: Model, q, v, tau, f_ext, C):
    """The accelerations with the exact linear couplings C v = 0 held, by ABA alone (no mass
    matrix): one ABA over m + 1 right-hand sides (``vmap``: the kinematics and the
    articulated inertias are shared, only the τ sweeps are repeated) gives a₀ = FD(τ) and
    X = FD(τ + Cᵀ) − a₀ = M⁻¹Cᵀ; then a = a₀ − X (C X)⁻¹ C a₀ (Gauss's principle, as
    :func:`project_accelerations`). C a = 0 holds to round-off whatever the rounding in X,
    since λ is solved with the same X. O(n) per coupling instead of CRBA and dense solves."""
    taus = jnp.concatenate([tau[None], tau[None] + C], axis=0)  # (m + 1, nv)
    A = jax.vmap(lambda t: forward_dynamics(model, q, v, t, f_ext))(taus)
    a0, X = A[0], (A[1:] - A[0]).T  # X (nv, m)
    CX = C @ X
    if CX.shape == (1, 1):  # one coupling (a differential): a scalar division
        return a0 - X[:, 0] * ((C[0] @ a0) / CX[0, 0])
    return a0 - X @ solve(CX, C @ a0)


def _project_initial(model: Model, forces, q0, v0):
    """q0, v0 moved onto the exact couplings' invariants (least change of the coupled
    coordinates); a warning names the couplings when they had to move by more than 1e-9."""
    cs = [f for f in forces if isinstance(f, Couplings) and f.exact]
    if not cs:
        return q0, v0
    C = jnp.concatenate([f.jacobian() for f in cs], axis=0)
    r = jnp.concatenate([f.residual(q0) for f in cs])
    P = C.T @ solve(C @ C.T, jnp.eye(C.shape[0]))  # right pseudo-inverse
    dq_dof = -P @ r
    dof_qadr = cs[0].dof_qadr
    idx = np.array([a for a in dof_qadr if a >= 0], dtype=np.int32)
    dofs = np.array([d for d, a in enumerate(dof_qadr) if a >= 0], dtype=np.int32)
    q1 = q0.at[idx].add(dq_dof[dofs])
    v1 = v0 - P @ (C @ v0)
    moved = concrete(jnp.concatenate([jnp.abs(r), jnp.abs(C @ v0)]))
    if moved is not None and np.max(moved) > 1e-9:
        names = [n for f in cs for n in f.names]
        warnings.warn(f"{model.name}: q0/v0 violate the exact couplings {names} (by up to "
                      f"{float(np.max(moved)):.3g}); projected onto them", stacklevel=4)
    return q1, v1


def unilateral_forces(model: Model, q, v, *, t=0.0, forces=(), ctrl=None, state=None,
                      method="aba"):
    """The multipliers f (m,) of the unilateral elements among ``forces`` (in their order) at
    (t, q, v), as :func:`diffmb.simulate` solves them (arguments as :func:`forward`; the
    normal forces of :class:`~diffmb.contacts.UnilateralWheelSoil`)."""
    forces = tuple(forces)
    if not any(isinstance(f, AbstractUnilateral) for f in forces):
        raise ValueError(f"{model.name}: no unilateral element among the forces")
    q = check_initial(model.name, "q", q, (model.nq,))
    v = check_initial(model.name, "v", v, (model.nv,))
    s = None
    if any(_has_state(f) for f in forces):
        s = (init_states(forces, model) if state is None else tuple(state), None)
    ctl = None if ctrl is None else (lambda t_, q_, v_, p_: ctrl)
    tau, f_ext, _, _ = _applied_forces(model, forces, ctl, t, q, v, None, s)
    rows = _unilateral_rows(model, forces, t, q, v)
    return unilateral_forward_dynamics(model, q, v, tau, f_ext,
                                       _exact_coupling_matrix(forces), rows, method)[1]


def forward(model: Model, q, v, *, t=0.0, forces=(), ctrl=None, state=None, method="aba"):
    """The accelerations that :func:`diffmb.simulate` integrates (MuJoCo's ``qacc``).

    q (nq,), v (nv,); ``forces``: force elements; ``ctrl``: the control vector (fed to the
    elements that consume controls, else a generalized force (nv,)). Returns ``a`` (nv,), or
    ``(a, ds)`` when an element has state (``state``: the elements' states as ``simulate``
    carries them, a tuple aligned with ``forces``; default their ``init_state(model)``).
    Evaluated at q as given (no normalisation of quaternions).
    """
    forces = tuple(forces)
    q = check_initial(model.name, "q", q, (model.nq,))
    v = check_initial(model.name, "v", v, (model.nv,))
    stateful = any(_has_state(f) for f in forces)
    s = None
    if stateful:
        s = (init_states(forces, model) if state is None else tuple(state), None)
    ctl = None if ctrl is None else (lambda t_, q_, v_, p_: ctrl)
    a, ds = _accelerations(model, forces, ctl, t, q, v, None, s, method)
    return a if not stateful else (a, ds[0])
