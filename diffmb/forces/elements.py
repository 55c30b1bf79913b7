"""Force elements that :func:`diffmb.simulate` adds to the rigid-body law.

Every element is an :class:`AbstractForce`: an equinox Module called as

    tau, f_ext = element(model, t, q, v, ctrl)

with ``tau`` a generalized force (nv,) and ``f_ext`` either ``None`` or body wrenches (nbody, 6)
``[force, torque]`` in the world frame at each body's centre of mass (MuJoCo's ``xfrc_applied``
convention, rows in ``model.body_names`` order). ``simulate`` sums the outputs of all elements and
calls ``forward_dynamics(model, q, v, tau, f_ext)``.

Gravity belongs to the Model (``bias_force`` includes it): no element here adds it, and a user
element must not either.

Numbers are array leaves (``jax.grad`` reaches them: a damping coefficient, an actuator gain),
indices and flags are static. Elements whose ``uses_ctrl`` is True consume the control vector
returned by ``simulate``'s ``control``; if no element does, the control is a generalized force
(nv,) added to tau directly.

Writing your own element (a smooth Coulomb friction on every dof, a few lines)::

    import equinox as eqx, jax.numpy as jnp
    from diffmb.forces.elements import AbstractForce

    class SmoothCoulomb(AbstractForce):
        mu: jnp.ndarray            # (nv,) friction torque/force levels, differentiable
        v_eps: float = 1e-2        # velocity scale of the tanh regularisation

        def __call__(self, model, t, q, v, ctrl):
            return -self.mu * jnp.tanh(v / self.v_eps), None

    traj = diffmb.simulate(model, q0, v0, t1=1.0, dt=1e-3, forces=(SmoothCoulomb(mu),))

An element that pushes on bodies returns ``f_ext`` instead (see :class:`BodyWrench`).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics import small_linalg
from ..model import Model
from ..spatial import quaternion as quat
from ..validation import check_index, check_value, is_concrete

__all__ = [
    "AbstractForce",
    "AbstractStatefulForce",
    "JointDamping",
    "JointSpring",
    "Actuators",
    "GeneralizedForce",
    "JointLimits",
    "JointFriction",
    "FixedTendons",
    "SpatialTendons",
    "Couplings",
    "BodyWrench",
    "GravityCompensation",
    "soft_constraint_gains",
    "friction_slope",
    "limit_force",
    "soft_impedance",
    "mujoco_contact_gains",
    "mujoco_rest_depth",
    "soft_limit_force",
    "soft_limit_rows",
    "soft_row_gains",
    "SoftRows",
    "friction_force",
    "dof_qpos_addresses",
    "total_force",
    "init_states",
    "ActivatedActuators",
]


class AbstractForce(eqx.Module):
    """A force element: ``(model, t, q, v, ctrl) -> (tau (nv,), f_ext (nbody, 6) | None)``."""

    uses_ctrl: ClassVar[bool] = False

    @property
    def needs_load(self) -> bool:
        """True for an element that acts against the others' load (MuJoCo's constraint form):
        :func:`total_force` evaluates it last through ``loaded_call``."""
        return False

    def loaded_call(self, model: Model, t, q, v, ctrl, tau, f_ext):
        """The element's output given ``tau`` (nv,) and ``f_ext`` acting besides it; an element
        whose ``needs_load`` is False ignores them."""
        return self(model, t, q, v, ctrl)

    @property
    def load_rank(self) -> int:
        """Order among the loaded elements: those of rank 0 (contact rows) come first and are
        load for those of rank 1 (limits, equalities), which do not load each other."""
        return 1

    def implicit_proxy(self):
        """The element whose joint-space force an implicit step linearises in place of this
        one (:class:`~diffmb.simulation.ImplicitContactEuler`): itself, or for an element
        that needs the others' load a spring–damper of the same stiffness and damping
        (None: the element stays explicit)."""
        return None if self.needs_load else self

    def joint_blocks(self, model, t, q, v, ctrl):
        """(∂τ/∂w, ∂τ/∂v) (nv, nv) of this element's joint-space force along q + q̇(q, w) at
        w = 0, in closed form; None (the default): an implicit step takes them by forward
        mode. Only for an element that is its own :meth:`implicit_proxy`, applies no body
        force and reads no state; one that reads ``ctrl`` gives them for a ``ctrl`` that does
        not depend on (q, v) (under a control law the step takes forward mode instead)."""
        return None

    @abc.abstractmethod
    def __call__(self, model: Model, t, q, v, ctrl):
        raise NotImplementedError


class AbstractStatefulForce(AbstractForce):
    """A force element with a state s that ``simulate`` integrates with (q, v) (stiction
    springs, soil memory, oscillators):

        s0 = element.init_state(model)
        tau, f_ext, ds_dt = element.stateful_call(model, t, q, v, ctrl, s)

    ``s`` is any pytree of arrays; ``Trajectory.aux`` returns it at the save times. The plain
    ``element(model, t, q, v, ctrl)`` of :class:`AbstractForce` has no state to read: it
    raises ``TypeError``.
    """

    @abc.abstractmethod
    def init_state(self, model: Model):
        raise NotImplementedError

    @abc.abstractmethod
    def stateful_call(self, model: Model, t, q, v, ctrl, state):
        """``(tau (nv,), f_ext (nbody, 6) | None, ds_dt)`` at state ``state``."""
        raise NotImplementedError

    def loaded_stateful_call(self, model: Model, t, q, v, ctrl, tau, f_ext, state):
        """:meth:`stateful_call` given ``tau`` (nv,) and ``f_ext`` acting besides the element
        (for an element whose ``needs_load`` is True)."""
        return self.stateful_call(model, t, q, v, ctrl, state)

    def __call__(self, model: Model, t, q, v, ctrl):
        raise TypeError(f"{type(self).__name__} has a state: evaluate it with "
                        "stateful_call(model, t, q, v, ctrl, state), or through diffmb.forward/"
                        "simulate, which carry the state from init_state(model)")


def _arr(x):
    return None if x is None else jnp.asarray(x, dtype=jnp.float64)


def _num(owner, field, x, shape=None, *, broadcast=False, **bounds):
    """``x`` as a float64 array, checked by :func:`~diffmb.validation.check_value` (finite,
    ``bounds``) when concrete. ``shape``: the required shape (``-1`` any length); with
    ``broadcast`` a scalar is accepted and broadcast to it."""
    if x is None:
        return None
    if is_concrete(x):
        a = np.asarray(x)
        if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
            raise TypeError(f"{owner}.{field} = {x!r}: not a number or array of numbers")
        if shape is not None and not (broadcast and a.ndim == 0):
            check_value(owner, field, a, shape=shape)
        check_value(owner, field, a, **bounds)
    arr = _arr(x)
    if broadcast and shape is not None and -1 not in shape:
        arr = jnp.broadcast_to(arr, tuple(shape))
    return arr


def _ordered(owner, field, lo, hi, mask=None):
    """Refuse lower > upper (where ``mask``) when the values are concrete."""
    if not is_concrete((lo, hi)):
        return
    lo, hi = np.asarray(lo, float).reshape(-1), np.asarray(hi, float).reshape(-1)
    m = np.ones(lo.shape, bool) if mask is None else np.asarray(mask, bool).reshape(-1)
    bad = np.flatnonzero(m & (lo > hi))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{owner}.{field}[{i}] = [{lo[i]:.6g}, {hi[i]:.6g}]: the lower bound "
                         "must not exceed the upper")


def _indices(owner, field, idx, n, what, *, allow=()):
    """Static indices checked against a model size at evaluation (``allow``: sentinels such
    as -1)."""
    bad = [i for i in idx if i not in allow]
    check_index(owner, field, bad, n, what=what)


def _model_shape(owner, field, x, n, what):
    """A per-dof (or per-coordinate) array must be a scalar or have length ``n`` of the model."""
    if x is not None and x.shape not in ((), (n,)):
        raise TypeError(f"{owner}.{field}: expected shape () or ({n},) ({what}), got {x.shape}")


class JointDamping(AbstractForce):
    """Viscous joint damping tau = -d ⊙ v; d defaults to ``model.damping`` (MJCF ``damping``)."""

    damping: jnp.ndarray | None = None

    def __init__(self, damping=None):
        self.damping = _num("JointDamping", "damping", damping, lo=0.0)

    def __call__(self, model, t, q, v, ctrl):
        _model_shape("JointDamping", "damping", self.damping, model.nv, f"model nv = {model.nv}")
        d = model.damping if self.damping is None else self.damping
        return -d * v, None

    def joint_blocks(self, model, t, q, v, ctrl):
        _model_shape("JointDamping", "damping", self.damping, model.nv, f"model nv = {model.nv}")
        d = model.damping if self.damping is None else self.damping
        return jnp.zeros((model.nv, model.nv)), -jnp.diag(jnp.broadcast_to(d, (model.nv,)))


class JointSpring(AbstractForce):
    """Joint springs, MuJoCo's passive stiffness (MJCF ``stiffness``/``springref``).

    hinge/slide: tau = -k (q - q_s); ball: tau = -k log(q_s⁻¹ ⊗ q) (node-frame rotation vector,
    MuJoCo's ``mju_subQuat``); free: both, translation in the world frame. ``stiffness`` (nv,)
    and ``qpos_spring`` (nq,) default to ``model.stiffness`` / ``model.qpos_spring``.
    """

    stiffness: jnp.ndarray | None = None
    qpos_spring: jnp.ndarray | None = None

    def __init__(self, stiffness=None, qpos_spring=None):
        self.stiffness = _num("JointSpring", "stiffness", stiffness, lo=0.0)
        self.qpos_spring = _num("JointSpring", "qpos_spring", qpos_spring, shape=(-1,))

    def __call__(self, model, t, q, v, ctrl):
        _model_shape("JointSpring", "stiffness", self.stiffness, model.nv,
                     f"model nv = {model.nv}")
        if self.qpos_spring is not None and self.qpos_spring.shape != (model.nq,):
            raise TypeError(f"JointSpring.qpos_spring: expected shape ({model.nq},) (model nq = "
                            f"{model.nq}), got {self.qpos_spring.shape}")
        k = model.stiffness if self.stiffness is None else self.stiffness
        qs = model.qpos_spring if self.qpos_spring is None else self.qpos_spring
        parts = []
        for jt, a in zip(model.joint_types, model.joint_q, strict=True):
            if jt in ("hinge", "slide"):
                parts.append(q[a : a + 1] - qs[a : a + 1])
            elif jt == "ball":
                parts.append(quat.difference(qs[a : a + 4], q[a : a + 4]))
            else:  # free
                parts.append(q[a : a + 3] - qs[a : a + 3])
                parts.append(quat.difference(qs[a + 3 : a + 7], q[a + 3 : a + 7]))
        return -k * jnp.concatenate(parts), None

    def joint_blocks(self, model, t, q, v, ctrl):
        """Linear coordinates: −k on the diagonal; a rotation: −k times the 3 × 3 derivative
        of its rotation vector along q + ½ q ⊗ (0, w)."""
        self(model, t, q, v, ctrl)  # the shape checks
        k = model.stiffness if self.stiffness is None else self.stiffness
        qs = model.qpos_spring if self.qpos_spring is None else self.qpos_spring
        nv = model.nv
        D = jnp.eye(nv)
        for jt, a, b in zip(model.joint_types, model.joint_q, model.joint_v, strict=True):
            rot = {"ball": (a, b), "free": (a + 3, b + 3)}.get(jt)
            if rot is None:
                continue
            qa, r0 = rot
            qj, qsj = q[qa : qa + 4], qs[qa : qa + 4]

            def vec(w, qj=qj, qsj=qsj):
                return quat.difference(qsj, qj + 0.5 * quat.mul(qj, jnp.concatenate(
                    [jnp.zeros(1, w.dtype), w])))

            D = D.at[r0 : r0 + 3, r0 : r0 + 3].set(jax.jacfwd(vec)(jnp.zeros(3, q.dtype)))
        return -jnp.broadcast_to(k, (nv,))[:, None] * D, jnp.zeros((nv, nv))


class Actuators(AbstractForce):
    """MuJoCo-style actuators with joint transmission, no activation dynamics.

    For actuator i on dof ``dof[i]`` (MuJoCo's pipeline, ``mj_fwdActuation``):

        u  = clip(ctrl_i, ctrlrange_i)               if ctrllimited_i
        l  = gear_i q,  l̇ = gear_i v                 (actuator length and velocity)
        f  = gain_i u + bias_i0 + bias_i1 l + bias_i2 l̇
        f  = clip(f, forcerange_i)                   if forcelimited_i
        tau[dof_i] += gear_i f

    motor: gain 1, bias 0; position(kp, kv): gain kp, bias (0, -kp, -kv); velocity(kv): gain kv,
    bias (0, 0, -kv). Build from a file with :func:`diffmb.io.mjcf.actuators_from_mjcf`. ``ctrl`` has shape (nu,).

    Fixed-tendon transmissions: ``coef`` (nu, nv) gives each actuator's coordinate as a linear
    combination of the hinge/slide positions, l = gear (coef · q), l̇ = gear (coef · v), and
    tau += coefᵀ (gear f); a joint transmission is a unit row. ``dof_qadr`` (nv,) maps dofs to
    q (see :func:`dof_qpos_addresses`); ``dof``/``qadr`` are then informative only (-1 for a
    tendon).

    ``enabled`` (nu,) static flags: a disabled actuator applies no force (MuJoCo's
    ``<flag actuation="disable"/>`` and ``actuatorgroupdisable``). ``joint_forcerange`` (nv, 2)
    with ``joint_forcelimited`` (nv,) flags: the summed actuator force on each flagged dof is
    clamped to its range (MJCF joint ``actuatorfrcrange``, applied to MuJoCo's
    ``qfrc_actuator``).
    """

    uses_ctrl: ClassVar[bool] = True
    gear: jnp.ndarray  # (nu,)
    gain: jnp.ndarray  # (nu,)
    bias: jnp.ndarray  # (nu, 3)
    ctrlrange: jnp.ndarray  # (nu, 2)
    forcerange: jnp.ndarray  # (nu, 2)
    dof: tuple = eqx.field(static=True)
    qadr: tuple = eqx.field(static=True)
    ctrllimited: tuple = eqx.field(static=True)
    forcelimited: tuple = eqx.field(static=True)
    names: tuple = eqx.field(static=True)
    coef: jnp.ndarray | None = None  # (nu, nv) tendon transmissions, or None (joints)
    dof_qadr: tuple | None = eqx.field(static=True, default=None)
    joint_forcerange: jnp.ndarray | None = None  # (nv, 2), or None
    joint_forcelimited: tuple | None = eqx.field(static=True, default=None)
    enabled: tuple | None = eqx.field(static=True, default=None)

    def __init__(
        self,
        dof,
        qadr,
        gear,
        gain,
        bias,
        ctrlrange=None,
        ctrllimited=None,
        forcerange=None,
        forcelimited=None,
        names=None,
        *,
        coef=None,
        dof_qadr=None,
        joint_forcerange=None,
        joint_forcelimited=None,
        enabled=None,
    ):
        A = "Actuators"
        nu = len(dof)
        if (coef is None) != (dof_qadr is None):
            raise ValueError("Actuators: coef and dof_qadr go together")
        self.dof_qadr = None if dof_qadr is None else tuple(int(a) for a in dof_qadr)
        self.coef = None if coef is None else _num(A, "coef", coef, (nu, len(self.dof_qadr)))
        self.dof, self.qadr = tuple(int(d) for d in dof), tuple(int(a) for a in qadr)
        if len(self.qadr) != nu:
            raise TypeError(f"Actuators.qadr: expected {nu} entries (one per actuator), got "
                            f"{len(self.qadr)}")
        if coef is None and any(d < 0 for d in self.dof) or any(d < -1 for d in self.dof):
            i = next(i for i, d in enumerate(self.dof) if d < (-1 if coef is not None else 0))
            raise ValueError(f"Actuators.dof[{i}] = {self.dof[i]}: must be a dof index >= 0 "
                             "(-1 only for a tendon row of coef)")
        self.gear = _num(A, "gear", gear, (nu,), broadcast=True)
        self.gain = _num(A, "gain", gain, (nu,), broadcast=True)
        self.bias = _num(A, "bias", bias, (nu, 3))
        self.ctrlrange = _num(A, "ctrlrange", np.zeros((nu, 2)) if ctrlrange is None
                              else ctrlrange, (nu, 2))
        self.forcerange = _num(A, "forcerange", np.zeros((nu, 2)) if forcerange is None
                               else forcerange, (nu, 2))
        flags = lambda x, n: tuple(bool(b) for b in ([False] * n if x is None else x))  # noqa: E731
        self.ctrllimited, self.forcelimited = flags(ctrllimited, nu), flags(forcelimited, nu)
        for f in ("ctrllimited", "forcelimited"):
            if len(getattr(self, f)) != nu:
                raise TypeError(f"Actuators.{f}: expected {nu} flags, got {len(getattr(self, f))}")
        _ordered(A, "ctrlrange", self.ctrlrange[:, 0], self.ctrlrange[:, 1], self.ctrllimited)
        _ordered(A, "forcerange", self.forcerange[:, 0], self.forcerange[:, 1], self.forcelimited)
        self.names = tuple(names) if names is not None else tuple(f"act{i}" for i in range(nu))
        if len(self.names) != nu:
            raise TypeError(f"Actuators.names: expected {nu} names, got {len(self.names)}")
        self.enabled = None if enabled is None else flags(enabled, nu)
        if (joint_forcerange is None) != (joint_forcelimited is None):
            raise ValueError("Actuators: joint_forcerange and joint_forcelimited go together")
        self.joint_forcelimited = None
        self.joint_forcerange = None
        if joint_forcerange is not None:
            self.joint_forcelimited = tuple(bool(b) for b in joint_forcelimited)
            nv = len(self.joint_forcelimited)
            self.joint_forcerange = _num(A, "joint_forcerange", joint_forcerange, (nv, 2))
            _ordered(A, "joint_forcerange", self.joint_forcerange[:, 0],
                     self.joint_forcerange[:, 1], self.joint_forcelimited)

    @property
    def nu(self) -> int:
        return len(self.dof)

    def actuator_force(self, q, v, ctrl):
        """Scalar actuator forces (nu,) before the gear maps them to joints; ``ctrl`` None (no
        control given to ``simulate``) is MuJoCo's default, zero."""
        return self._law(self._input(ctrl), *self._coordinates(q, v))

    def _input(self, ctrl):
        """The control, checked and clipped to ``ctrlrange`` where ``ctrllimited``."""
        ctrl = jnp.zeros(self.nu) if ctrl is None else jnp.asarray(ctrl, dtype=jnp.float64)
        if ctrl.size != self.nu:  # shapes are static: checked under jit too
            raise TypeError(f"Actuators: ctrl has shape {tuple(ctrl.shape)}, expected ({self.nu},) "
                            f"(one value per actuator: {', '.join(self.names[:6])}"
                            f"{', ...' if self.nu > 6 else ''})")
        ctrl = ctrl.reshape(self.nu)
        lim = np.array(self.ctrllimited)
        return jnp.where(lim, jnp.clip(ctrl, self.ctrlrange[:, 0], self.ctrlrange[:, 1]), ctrl)

    def _coordinates(self, q, v):
        """The actuators' joint or tendon coordinates and their rates (before the gear)."""
        if self.coef is not None:
            return self.coef @ _dof_positions(q, self.dof_qadr), self.coef @ v
        qa = jnp.stack([q[a] for a in self.qadr]) if self.nu else jnp.zeros(0)
        va = jnp.stack([v[d] for d in self.dof]) if self.nu else jnp.zeros(0)
        return qa, va

    def _law(self, u, qa, va):
        """Scalar forces (nu,) from the clipped inputs u and the coordinates qa, va."""
        length, vel = self.gear * qa, self.gear * va
        f = self.gain * u + self.bias[:, 0] + self.bias[:, 1] * length + self.bias[:, 2] * vel
        flim = np.array(self.forcelimited)
        f = jnp.where(flim, jnp.clip(f, self.forcerange[:, 0], self.forcerange[:, 1]), f)
        if self.enabled is not None:
            f = jnp.where(np.array(self.enabled, bool), f, 0.0)
        return f

    def _check_model(self, model):
        where = f"model nv = {model.nv}"
        if self.coef is not None:
            if len(self.dof_qadr) != model.nv:
                raise TypeError(f"Actuators.dof_qadr: expected {model.nv} entries ({where}), "
                                f"got {len(self.dof_qadr)}")
        else:
            _indices("Actuators", "dof", self.dof, model.nv, where)
            _indices("Actuators", "qadr", self.qadr, model.nq, f"model nq = {model.nq}")
        if self.joint_forcelimited is not None and len(self.joint_forcelimited) != model.nv:
            raise TypeError(f"Actuators.joint_forcerange: expected ({model.nv}, 2) ({where}), "
                            f"got {len(self.joint_forcelimited)} rows")

    def __call__(self, model, t, q, v, ctrl):
        self._check_model(model)
        f = self.actuator_force(q, v, ctrl)
        if self.coef is not None:
            tau = self.coef.T @ (self.gear * f)
        else:
            tau = jnp.zeros(model.nv).at[jnp.asarray(self.dof, dtype=jnp.int32)].add(self.gear * f)
        if self.joint_forcelimited is not None and any(self.joint_forcelimited):
            lim = np.array(self.joint_forcelimited, bool)
            r = self.joint_forcerange
            tau = jnp.where(lim, jnp.clip(tau, r[:, 0], r[:, 1]), tau)
        return tau, None

    def joint_blocks(self, model, t, q, v, ctrl):
        """Each actuator's force depends on its own coordinate and rate only: its two
        derivatives (clipping included) come from one forward-mode pass each, and the
        transmission maps them to the joints (the joint force ranges clip the sums). Valid for
        a ``ctrl`` that does not depend on (q, v) (an implicit step with a control law takes
        forward mode through both)."""
        self._check_model(model)
        nv = model.nv
        u = self._input(ctrl)
        qa, va = self._coordinates(q, v)
        one = jnp.ones(self.nu)
        dfq = jax.jvp(lambda x: self._law(u, x, va), (qa,), (one,))[1]
        dfv = jax.jvp(lambda x: self._law(u, qa, x), (va,), (one,))[1]
        if self.coef is not None:  # ball and free dofs have no position in the tendons
            lin = np.array([a >= 0 for a in self.dof_qadr], float)
            Tq, Tv = self.coef * lin[None, :], self.coef
        else:
            Tq = Tv = jnp.eye(nv)[np.array(self.dof, dtype=np.int32)] if self.nu else \
                jnp.zeros((0, nv))
        Kq = Tv.T @ ((self.gear * dfq)[:, None] * Tq)
        Dv = Tv.T @ ((self.gear * dfv)[:, None] * Tv)
        if self.joint_forcelimited is not None and any(self.joint_forcelimited):
            lim = np.array(self.joint_forcelimited, bool)
            r = self.joint_forcerange
            tau = Tv.T @ (self.gear * self._law(u, qa, va))  # the sums the ranges clip
            pass_ = jax.jvp(lambda x: jnp.where(lim, jnp.clip(x, r[:, 0], r[:, 1]), x),
                            (tau,), (jnp.ones(nv),))[1]
            Kq, Dv = pass_[:, None] * Kq, pass_[:, None] * Dv
        return Kq, Dv


class ActivatedActuators(AbstractStatefulForce):
    """MuJoCo's actuators with activation dynamics: an :class:`Actuators` force law whose
    input, for the actuators with dynamics, is an activation state ``act`` instead of the
    control (``mj_fwdActuation``):

        u = clip(ctrl, ctrlrange)          where ``ctrllimited``
        integrator:             act' = u
        filter, filterexact:    act' = (u − act) / timeconst
        act' = 0 where ``actlimited`` and act is at a bound of ``actrange`` moving outward
        input = act clipped to ``actrange`` where ``actlimited`` (dynamics) or u (none);
        force as :class:`Actuators` with that input

    ``dynamics`` (nu,) static: "none", "integrator", "filter" or "filterexact" (the same
    continuous law; MuJoCo's two names differ only in how its Euler step integrates it).
    The state is ``act`` for the actuators with dynamics, in their order, starting at 0 (or
    ``act0``). The activation is integrated in continuous time with (q, v): MuJoCo's
    ``actearly`` (the force of a step uses the next step's activation) is a one-step lead of its
    discrete scheme, which a continuous solver does not have. Build from a file with
    :func:`diffmb.io.mjcf.actuators_from_mjcf`.
    """

    uses_ctrl: ClassVar[bool] = True
    actuators: Actuators
    timeconst: jnp.ndarray  # (nu,) s (filters; ignored elsewhere)
    actrange: jnp.ndarray  # (nu, 2)
    act0: jnp.ndarray  # (na,) initial activations
    dynamics: tuple = eqx.field(static=True)
    actlimited: tuple = eqx.field(static=True)
    ctrllimited: tuple = eqx.field(static=True)

    def __init__(self, actuators: Actuators, dynamics, timeconst=None, actlimited=None,
                 actrange=None, act0=None):
        A = "ActivatedActuators"
        if not isinstance(actuators, Actuators):
            raise TypeError(f"{A}.actuators: an Actuators element, got {type(actuators).__name__}")
        nu = actuators.nu
        self.dynamics = tuple(str(d) for d in dynamics)
        if len(self.dynamics) != nu:
            raise TypeError(f"{A}.dynamics: expected {nu} entries (one per actuator), got "
                            f"{len(self.dynamics)}")
        for i, d in enumerate(self.dynamics):
            if d not in ("none", "integrator", "filter", "filterexact"):
                raise ValueError(f"{A}.dynamics[{i}] = {d!r} (actuator "
                                 f"{actuators.names[i]!r}): accepted: none, integrator, filter, "
                                 "filterexact")
        tc = np.ones(nu) if timeconst is None else timeconst
        self.timeconst = _num(A, "timeconst", tc, (nu,), broadcast=True)
        if is_concrete(self.timeconst):
            for i, d in enumerate(self.dynamics):
                if d.startswith("filter") and not float(self.timeconst[i]) > 0:
                    raise ValueError(f"{A}.timeconst[{i}] = {float(self.timeconst[i])} (actuator "
                                     f"{actuators.names[i]!r}, {d}): must be > 0")
        self.actlimited = tuple(bool(b) for b in ([False] * nu if actlimited is None
                                                   else actlimited))
        if len(self.actlimited) != nu:
            raise TypeError(f"{A}.actlimited: expected {nu} flags, got {len(self.actlimited)}")
        self.actrange = _num(A, "actrange", np.zeros((nu, 2)) if actrange is None else actrange,
                             (nu, 2))
        _ordered(A, "actrange", self.actrange[:, 0], self.actrange[:, 1], self.actlimited)
        # the control is clamped before the dynamics; the activation drives the force unclamped
        self.ctrllimited = actuators.ctrllimited
        dyn = [d != "none" for d in self.dynamics]
        self.actuators = dataclasses.replace(
            actuators,
            ctrllimited=[c and not x for c, x in zip(actuators.ctrllimited, dyn, strict=True)])
        na = sum(dyn)
        self.act0 = _num(A, "act0", np.zeros(na) if act0 is None else act0, (na,))

    @property
    def nu(self) -> int:
        return self.actuators.nu

    @property
    def names(self) -> tuple:
        return self.actuators.names

    @property
    def active(self) -> np.ndarray:
        """Indices of the actuators with activation dynamics (the state's order)."""
        return np.flatnonzero([d != "none" for d in self.dynamics])

    def init_state(self, model):
        return self.act0

    def stateful_call(self, model, t, q, v, ctrl, state):
        nu, idx = self.nu, self.active
        ctrl = jnp.zeros(nu) if ctrl is None else jnp.asarray(ctrl, dtype=jnp.float64)
        if ctrl.size != nu:
            raise TypeError(f"ActivatedActuators: ctrl has shape {tuple(ctrl.shape)}, expected "
                            f"({nu},)")
        ctrl = ctrl.reshape(nu)
        r = self.actuators.ctrlrange
        u = jnp.where(np.array(self.ctrllimited), jnp.clip(ctrl, r[:, 0], r[:, 1]), ctrl)
        act = jnp.asarray(state, dtype=jnp.float64).reshape(len(idx))
        ui, tc = u[idx], self.timeconst[idx]
        integ = np.array([self.dynamics[i] == "integrator" for i in idx], bool)
        dact = jnp.where(integ, ui, (ui - act) / jnp.where(integ, 1.0, tc))
        lo, hi = self.actrange[idx, 0], self.actrange[idx, 1]
        lim = np.array([self.actlimited[i] for i in idx], bool)
        held = lim & (((act >= hi) & (dact > 0)) | ((act <= lo) & (dact < 0)))
        dact = jnp.where(held, 0.0, dact)
        # a step may carry act just past a bound; the force takes the clamped value
        act = jnp.where(lim, jnp.clip(act, lo, hi), act)
        tau, f = self.actuators(model, t, q, v, u.at[idx].set(act))
        return tau, f, dact


class GeneralizedForce(AbstractForce):
    """The control vector as a generalized force: tau[dofs] = scale ⊙ ctrl (all dofs if None)."""

    uses_ctrl: ClassVar[bool] = True
    scale: jnp.ndarray | None = None
    dofs: tuple | None = eqx.field(static=True, default=None)

    def __init__(self, dofs=None, scale=None):
        self.dofs = None if dofs is None else tuple(int(d) for d in dofs)
        if self.dofs is not None:
            check_index("GeneralizedForce", "dofs", self.dofs, 2**31, what="a dof >= 0")
        self.scale = _num("GeneralizedForce", "scale", scale)

    def __call__(self, model, t, q, v, ctrl):
        if self.dofs is not None:
            _indices("GeneralizedForce", "dofs", self.dofs, model.nv, f"model nv = {model.nv}")
        if ctrl is None:
            raise TypeError("GeneralizedForce needs a control vector: pass ctrl (forward) or "
                            "control (simulate)")
        u = jnp.asarray(ctrl, dtype=jnp.float64)
        if self.scale is not None:
            u = self.scale * u
        if self.dofs is None:
            return u.reshape(model.nv), None
        return jnp.zeros(model.nv).at[jnp.asarray(self.dofs, dtype=jnp.int32)].add(u), None


def soft_constraint_gains(m_eff, solref=(0.02, 1.0), solimp=(0.9, 0.95), d=None):
    """Penalty gains (k, b) that reproduce a MuJoCo soft constraint on a coordinate of effective
    mass ``m_eff`` (MuJoCo's ``*_invweight0`` inverted).

    With ``solref = (T, ζ)`` and ``solimp = (d_min, d_max, ...)`` MuJoCo's constrained
    acceleration is a = (1 − d) a₀ − d (b' ẋ + k' r), k' = 1/(d_max² T² ζ²), b' = 2/(d_max T),
    r the violation and a₀ the unconstrained acceleration, so a load rests at the violation
    r = (1 − d)/d · a₀/k'. The spring k = m d/(1 − d) k' rests at the same violation, and
    b = 2 ζ √(k m) gives it MuJoCo's damping ratio ζ (its natural frequency is √(d/(1 − d))
    times MuJoCo's). Scaling b' like k' instead would overdamp it √(d/(1 − d)) ≈ 3.5 times and
    put a fast mode at −m d/(1 − d) b'/m ≈ −1300 s⁻¹, near the edge of RK4's stability at
    dt = 1 ms once several constraints share a mode; with this b the fastest rate is
    √(k/m) ≈ 185 s⁻¹ for the defaults. A negative ``solref`` (−k', −b') gives both directly:
    (k, b) = m d/(1 − d) (k', b'). ``d`` defaults to mid-transition, (d_min + d_max)/2.
    ``m_eff`` may be an array (one mass per coordinate); every input may be traced.
    """
    f = lambda x: jnp.asarray(x, dtype=jnp.float64)  # noqa: E731  (all may be traced)
    T, zeta, dmin, dmax, m = f(solref[0]), f(solref[1]), f(solimp[0]), f(solimp[1]), f(m_eff)
    dm = 0.5 * (dmin + dmax) if d is None else f(d)
    g = m * dm / (1.0 - dm)
    positive = T > 0
    Ts = jnp.where(positive, T, 1.0)
    k = jnp.where(positive, g / (dmax**2 * Ts**2 * zeta**2), -g * T)
    b = jnp.where(positive, 2.0 * zeta * jnp.sqrt(jnp.where(positive, k * m, 1.0)), -g * zeta)
    return k, b


def friction_slope(m_eff, solref=(0.02, 1.0), solimp=(0.9, 0.95)):
    """The viscous slope c of :func:`friction_force` that reproduces MuJoCo's friction-loss
    constraint below its level: the constraint's reference acceleration is −b' ẋ
    (b' = 2/(d_max T), or −solref[1] if negative), so a joint loaded below the friction level
    creeps at ẋ = (1 − d)/d · a₀/b' with d = d_min (no violation); c = m d/(1 − d) b'."""
    T, zeta = (float(x) for x in np.asarray(solref, float)[:2])
    dmin, dmax = (float(x) for x in np.asarray(solimp, float)[:2])
    b = 2.0 / (dmax * T) if T > 0 else -zeta
    return np.asarray(m_eff, float) * dmin / (1.0 - dmin) * b


def limit_force(x, xd, lower, upper, stiffness, damping):
    """One-sided spring–damper beyond [lower, upper] on coordinates x with rates xd (zero
    inside): −k (x − upper) − b ẋ above, k (lower − x) − b ẋ below."""
    over = jnp.maximum(x - upper, 0.0)
    under = jnp.maximum(lower - x, 0.0)
    active = (over > 0) | (under > 0)
    return -stiffness * over + stiffness * under - jnp.where(active, damping * xd, 0.0)


def soft_impedance(r, solimp, xp=jnp):
    """MuJoCo's impedance d(r) of a soft constraint at violation r ≥ 0 from ``solimp`` =
    (d_min, d_max, width, mid, power): d_min at r = 0, d_max from r = width on, between them
    the two power arcs joined at ``mid`` (``power`` 1: a straight line); a zero width gives
    the flat (d_min + d_max)/2, as MuJoCo's; clipped to [1e-4, 0.9999] as MuJoCo clips it.
    ``solimp`` (5,) or (n, 5); every input may be traced. ``xp``: the array module (``numpy``
    for concrete inputs at build time, where JAX would dispatch every operation)."""
    si = xp.asarray(solimp, dtype=xp.float64)
    dmin, dmax, width, mid, power = (si[..., i] for i in range(5))
    power = xp.maximum(power, 1.0)
    wide = width > 1e-15
    x = xp.clip(r / xp.where(wide, width, 1.0), 0.0, 1.0)
    low = x <= mid
    base = xp.where(low, x, 1.0 - x)
    scale = xp.where(low, mid, 1.0 - mid)
    arc = xp.where(base > 0, base, 1.0) ** power / xp.where(scale > 0, scale, 1.0) ** (power - 1)
    arc = xp.where(base > 0, arc, 0.0)
    y = xp.where(power == 1.0, x, xp.where(low, arc, 1.0 - arc))
    y = xp.where(wide, xp.where(x < 1.0, y, 1.0), 0.5)
    return xp.clip(dmin + y * (dmax - dmin), 1e-4, 0.9999)


def refsafe(solref, h, xp=jnp):
    """``solref`` (..., 2) as MuJoCo uses it at the time step h with ``refsafe`` (its default):
    a positive time constant at least 2 h; a negative (direct) one as given. ``xp``: as in
    :func:`soft_impedance`."""
    sr = xp.asarray(solref, dtype=xp.float64)
    T = xp.where(sr[..., 0] > 0, xp.maximum(sr[..., 0], 2.0 * h), sr[..., 0])
    return xp.stack([T, sr[..., 1]], axis=-1)


def _soft_gains(solref, solimp, xp=jnp):
    """MuJoCo's reference stiffness k and damping b of soft rows from ``solref`` = (T, ζ)
    (k = 1/(d_max² T² ζ²), b = 2/(d_max T); or k = −T/d_max², b = −ζ/d_max when negative).
    ``xp``: as in :func:`soft_impedance`."""
    sr = xp.asarray(solref, dtype=xp.float64)
    T, zeta = sr[..., 0], sr[..., 1]
    dmax = xp.asarray(solimp, dtype=xp.float64)[..., 1]
    pos = T > 0
    Ts = xp.where(pos, T, 1.0)
    zs = xp.where(pos, zeta, 1.0)
    k = xp.where(pos, 1.0 / (dmax**2 * Ts**2 * zs**2), -T / dmax**2)
    b = xp.where(pos, 2.0 / (dmax * Ts), -zeta / dmax)
    return k, b


def _soft_reference(y, yd, invweight, solref, solimp):
    """MuJoCo's reference acceleration a_ref and regulariser R of soft rows (see
    :func:`soft_limit_force`)."""
    k, b = _soft_gains(solref, solimp)
    d = soft_impedance(jnp.maximum(-y, 0.0), solimp)
    return -b * yd - k * d * y, jnp.maximum((1.0 - d) / d * invweight, 1e-15)


def soft_row_gains(solref, solimp, invweight):
    """Stiffness and damping (force per unit violation and per unit rate) of MuJoCo's soft
    rows at the impedance d = (d_min + d_max)/2: the row moves as ÿ + d b ẏ + d² k y = (1 − d)
    ÿ₀ (:func:`soft_limit_force`), so on its mass 1/A they are d² k/A and d b/A."""
    si = jnp.asarray(solimp, dtype=jnp.float64)
    k, b = _soft_gains(solref, si)
    d = jnp.clip(0.5 * (si[..., 0] + si[..., 1]), 1e-4, 0.9999)
    return d * d * k / invweight, d * b / invweight


def mujoco_contact_gains(m_eff, n_points, solref=(0.02, 1.0),
                         solimp=(0.9, 0.95, 0.001, 0.5, 2.0), gravity=9.81, load=None,
                         rows=1.0, depth=None):
    """Per-point normal stiffness k and damping b that rest a contact pair as MuJoCo's contact
    rows rest it. ``m_eff`` = 1/(``body_invweight0`` of one body + of the other) is the pair's
    effective mass and ``n_points`` the number of its points that carry it at once (a capsule
    lying flat: 2, a box's face: 4).

    MuJoCo gives every contact row the pair's whole inverse weight, R = (1 − d)/d / m_eff,
    whatever the number of contacts, and a_ref = −b' ẏ − k' d y (:func:`soft_limit_force`),
    so a row at rest pushes with f = m_eff k' d²/(1 − d) r at depth r, d = d(r)
    (:func:`soft_impedance`), times ``rows`` (a contact's normal force over one normal row's:
    1 for the elliptic cone, (condim − 1) impratio/(μ² (1 + μ²)) for the pyramidal one).
    The linear spring k = rows m_eff k' d*²/(1 − d*) has that force at the depth r*
    (:func:`mujoco_rest_depth`) where each of the n_points points carries ``load`` g/n_points
    (``load`` [kg], default m_eff: a free body resting on them; ``gravity`` = |g|), so a body
    that puts that load on them rests there as MuJoCo does (at other loads the spring that
    follows solimp, :func:`~diffmb.contacts.law.impedance_stiffness`, does). b = 2 ζ √(k
    m_eff/n_points) damps the body on its n_points points critically (ζ = 1; ``solref``'s ζ
    when positive). ``depth``: r* when the caller has it (else found here). Every input is
    concrete; arrays broadcast. Raises ValueError unless m_eff and n_points are finite and
    positive."""
    m = np.asarray(m_eff, float)
    n = np.asarray(n_points, float)
    sr = np.asarray(solref, float)
    r = mujoco_rest_depth(m, n, sr, solimp, gravity, load, rows) if depth is None \
        else np.asarray(depth, float)
    si = np.broadcast_to(np.asarray(solimp, float), r.shape + (5,))
    d = soft_impedance(r, si, xp=np)
    k = np.asarray(rows, float) * m * _soft_gains(sr, si, xp=np)[0] * d * d / (1.0 - d)
    zeta = np.where(sr[..., 0] > 0, sr[..., 1], 1.0)
    return k, 2.0 * zeta * np.sqrt(k * m / n)


def mujoco_rest_depth(m_eff, n_points, solref=(0.02, 1.0),
                      solimp=(0.9, 0.95, 0.001, 0.5, 2.0), gravity=9.81, load=None, rows=1.0):
    """The depth r* [m] at which each of ``n_points`` MuJoCo contacts of a pair of effective
    mass ``m_eff`` carries ``load`` g/n_points at rest (``load`` [kg], default m_eff;
    ``gravity`` = |g|): the root of rows m_eff k' d(r)²/(1 − d(r)) r = load g/n_points (see
    :func:`mujoco_contact_gains`; ``rows``: a contact's normal force over one normal row's,
    1 for the elliptic cone), by bisection in numpy. Arrays broadcast. Raises ValueError
    unless m_eff and n_points are finite and positive."""
    m = np.asarray(m_eff, float)
    n = np.asarray(n_points, float)
    for name, x in (("m_eff", m), ("n_points", n)):
        if not (np.all(np.isfinite(x)) and np.all(x > 0)):
            raise ValueError(f"mujoco_rest_depth: {name} = {x.tolist()} must be finite and "
                             "> 0")
    sr = np.asarray(solref, float)
    si = np.broadcast_to(np.asarray(solimp, float), np.broadcast(m, n).shape + (5,))
    K = _soft_gains(sr, si[..., :2], xp=np)[0] * np.asarray(rows, float)
    carried = m if load is None else np.asarray(load, float)
    target = np.broadcast_to(float(gravity) * carried / (m * n), si.shape[:-1])

    def rest_force(r):  # force per unit of m_eff of one row at depth r
        d = soft_impedance(r, si, xp=np)
        return K * d * d / (1.0 - d) * r

    lo, hi = np.zeros(target.shape), np.full(target.shape, 1e-3)
    while np.any(rest_force(hi) < target):
        hi = np.where(rest_force(hi) < target, 2.0 * hi, hi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = rest_force(mid) < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def soft_limit_force(y, yd, ydd_free, invweight, solref, solimp):
    """The force of MuJoCo's soft limit constraint on one row, as its solver returns it for a
    single row: the row coordinate y is the signed distance into the admissible side (y < 0:
    violated by r = −y), ẏ its rate, ÿ₀ its acceleration without the constraint and A the
    row's inverse mass (MuJoCo's ``*_invweight0``). With d = d(r) (:func:`soft_impedance`),
    b = 2/(d_max T), k = 1/(d_max² T² ζ²) for ``solref`` = (T, ζ) (or k = −T/d_max²,
    b = −ζ/d_max for a negative ``solref``):

        a_ref = −b ẏ − k d y,   R = (1 − d)/d · A,   f = max((a_ref − ÿ₀)/(A + R), 0)

    and f = 0 where y ≥ 0. The row then accelerates as ÿ = (1 − d) ÿ₀ + d a_ref. For a large
    violation d = d_max and f ≈ m d_max² k r: the force grows with MuJoCo's stiffness, and only
    pushes (MuJoCo's limit never pulls a joint back into the violation). Arrays broadcast;
    every input may be traced."""
    aref, R = _soft_reference(y, yd, invweight, solref, solimp)
    f = jnp.maximum((aref - ydd_free) / (invweight + R), 0.0)
    return jnp.where(y < 0, f, 0.0)


class SoftRows(eqx.Module):
    """Soft constraint rows at one state, as an element solved them under its load: Jacobian
    J (m, nv) (row coordinate rate ẏ = J v), coordinate y (m,) (y < 0: violated), forces
    f (m,) ≥ 0 (0: the row does not push), the rows that push ``active`` (m,) bool, MuJoCo's
    ``invweight``, ``solref`` and ``solimp`` per row. ``tau`` = Jᵀ f. An implicit step adds
    the pushing rows to its own solve (:meth:`step_matrix`, :meth:`step_rhs`)."""

    J: jnp.ndarray
    y: jnp.ndarray
    f: jnp.ndarray
    active: jnp.ndarray
    invweight: jnp.ndarray
    solref: jnp.ndarray
    solimp: jnp.ndarray

    @property
    def tau(self):
        return self.J.T @ self.f

    @staticmethod
    def join(parts) -> SoftRows:
        """The rows of ``parts`` (a sequence of :class:`SoftRows` on the same dofs) as one."""
        cat = lambda name: jnp.concatenate([getattr(r, name) for r in parts])  # noqa: E731
        return SoftRows(**{f: cat(f) for f in ("J", "y", "f", "active", "invweight", "solref",
                                               "solimp")})

    def split(self, sizes) -> list:
        """These rows cut into consecutive parts of ``sizes`` rows (the inverse of
        :meth:`join`)."""
        out, i = [], 0
        for n in sizes:
            out.append(jax.tree.map(lambda x, i=i, n=n: x[i:i + n], self))
            i += n
        return out

    def solved(self, v, cho, a0) -> SoftRows:
        """These rows with their forces and pushing set solved together under the load whose
        accelerations are ``a0`` (nv,) (:func:`soft_limit_rows`; ``cho``: M's factor)."""
        f, on = soft_limit_rows(None, None, v, None, None, self.J, self.y, self.invweight,
                                self.solref, self.solimp, dynamics=(cho, a0), active=True)
        return dataclasses.replace(self, f=f, active=on)

    def _step_gains(self, h, at_start=False):
        """(on/R, b + h k d, h k d) per row, R and k d at the rows' current depth; zeros for
        the last two with ``at_start``."""
        si = jnp.broadcast_to(jnp.asarray(self.solimp, jnp.float64), self.y.shape + (5,))
        d = soft_impedance(jnp.maximum(-self.y, 0.0), si)
        w = self.active.astype(jnp.float64) / jnp.maximum((1.0 - d) / d * self.invweight, 1e-15)
        if at_start:
            return w, jnp.zeros_like(d), jnp.zeros_like(d)
        k, b = _soft_gains(self.solref, si)
        return w, b + h * k * d, h * k * d

    def step_solref(self, h):
        """``solref`` with MuJoCo's ``refsafe`` at the step h (:func:`refsafe`)."""
        return refsafe(self.solref, h)

    def step_matrix(self, h, at_start=False):
        """Jᵀ diag(w (1 + h β)) J, w = 1/R on the pushing rows (0 elsewhere), β = b + h k d:
        what the rows add to the matrix M − h A of a linearly implicit step of size h.

        On a pushing row MuJoCo's soft constraint holds J a = a_ref − R f, so f =
        R⁻¹ (a_ref − J a). Over the step a = Δv/h and a_ref = −b J v₁ − k d (y + h J v₁)
        (positions following the new velocities), which puts the rows into the step's own
        system: (M − h A + Jᵀ w (1 + h β) J) Δv = h (Q + c) + :meth:`step_rhs`, the same Δv
        as solving the rows apart with K = J M⁻¹ Jᵀ + R (Woodbury's identity: that system
        times I + Jᵀ w J M⁻¹), without K's factorisations. ``at_start``: a_ref at the step's
        start instead, −b J v − k d y (β = 0), as MuJoCo's own step computes it, with solref
        under refsafe at h (:meth:`step_solref`): MuJoCo's Euler step."""
        w, beta, _ = self._step_gains(h, at_start)
        return self.J.T @ ((w * (1.0 + h * beta))[:, None] * self.J)

    def step_rhs(self, h, rate, ja=None, at_start=False):
        """What the rows add to the right-hand side h (F + c) of a stage of that step whose
        positions move at ``rate``: h Jᵀ w (J M⁻¹ F − h k d J rate) with ``ja`` = J M⁻¹ F for
        a force F that includes the rows' own; ``ja`` None: the Euler step with F without the
        rows (then J M⁻¹ F is replaced by a_ref at the current state, which the rows' force
        makes it; with ``at_start``, a_ref of :meth:`step_solref`)."""
        w, _, hkd = self._step_gains(h, at_start)
        if ja is None:
            ja, _ = _soft_reference(self.y, self.J @ rate, self.invweight,
                                    self.step_solref(h) if at_start else self.solref,
                                    self.solimp)
        return h * (self.J.T @ (w * (ja - hkd * (self.J @ rate))))


def _masked_cholesky(K, on):
    """The Cholesky factorisation (:mod:`~diffmb.dynamics.small_linalg`) of K (m, m) on the
    rows ``on`` (m,) (0/1), identity elsewhere (a symmetric positive definite matrix for any
    mask when K is)."""
    Km = on[:, None] * K * on[None, :] + jnp.diag(1.0 - on)
    return small_linalg.cho_factor(Km)


def _line_minimum(ga, dMd, jar, jd, D):
    """The minimum α ≥ 0 of the convex piecewise quadratic along a descent direction,
    φ(α) = ga α + ½ dMd α² + Σ ½ Dᵢ min(jarᵢ + α jdᵢ, 0)², exactly: φ′ is piecewise linear
    and nondecreasing, with breaks where a row's jarᵢ + α jdᵢ crosses 0; it is evaluated at
    every break (m² work, no loop) and its zero found on the piece where it changes sign."""
    safe = jnp.where(jd != 0.0, jd, 1.0)
    brk = jnp.where((jd != 0.0) & (D > 0.0), -jar / safe, 0.0)
    cand = jnp.concatenate([jnp.zeros(1), jnp.maximum(brk, 0.0)])  # (m + 1,)

    def slope(al):  # φ′(α), φ″ just above α
        x = jar + al * jd
        on = (x < 0.0) | ((x == 0.0) & (jd < 0.0))
        return (ga + al * dMd + jnp.sum(jnp.where(on, D * x * jd, 0.0)),
                dMd + jnp.sum(jnp.where(on, D * jd * jd, 0.0)))

    d1, d2 = jax.vmap(slope)(cand)
    below = d1 < 0.0
    lo = jnp.argmax(jnp.where(below, cand, -jnp.inf))  # the last break still descending
    a_lo, s_lo, c_lo = cand[lo], d1[lo], d2[lo]
    al = a_lo - s_lo / jnp.where(c_lo > 0.0, c_lo, 1.0)  # the zero on the piece above a_lo
    nxt = jnp.min(jnp.where(cand > a_lo, cand, jnp.inf))
    return jnp.where(jnp.any(below), jnp.minimum(al, nxt), 0.0)


def _soft_active_rows(M, a0, J, aref, R, violated, iters=50):
    """The rows that push at the minimum of MuJoCo's soft-constraint cost over the
    accelerations a, ½ (a − a₀)ᵀ M (a − a₀) + Σ ½ (J a − a_ref)ᵢ² / Rᵢ over the violated rows
    with J a < a_ref (convex, piecewise quadratic): Newton's steps with an exact line search
    (:func:`_line_minimum`), as MuJoCo's Newton solver takes them, until the pushing set holds
    (at most ``iters`` steps). Constants in, a bool mask (m,) out."""
    D = jnp.where(violated, 1.0 / R, 0.0)
    dM = lambda x: M @ x  # noqa: E731

    def pushing(a):
        return violated & (J @ a - aref < 0.0)

    jar0 = J @ a0 - aref  # the cost at a₀: what the steps remove
    cost0 = 0.5 * jnp.sum(jnp.where(pushing(a0), D * jar0 * jar0, 0.0))

    def update(c):
        i, a, _ = c
        on = pushing(a)
        jar = J @ a - aref
        g = dM(a - a0) + J.T @ (D * jnp.where(on, jar, 0.0))
        H = M + J.T @ (jnp.where(on, D, 0.0)[:, None] * J)
        da = -small_linalg.spd_solve(H, g)
        jd, ga = J @ da, da @ dM(a - a0)
        al = _line_minimum(ga, da @ dM(da), jar, jd, D)
        a1 = a + al * da
        # done where the Newton decrement gᵀH⁻¹g is below 1e-12 of the cost at a₀: rows at
        # their boundary (J a = a_ref, no force either way) would otherwise flip on and off
        # in round-off to the cap, and a vmapped batch pays every member's iterations
        more = jnp.any(pushing(a1) != on) | (jnp.abs(al - 1.0) > 1e-12)
        return i + 1, a1, more & (-(g @ da) > 1e-12 * cost0)

    a = jax.lax.while_loop(lambda c: (c[0] < iters) & c[2], update,
                           (0, a0, jnp.asarray(True)))[1]
    return pushing(a)


def soft_limit_rows(model, q, v, tau, f_ext, J, y, invweight, solref, solimp, iters=50,
                    dynamics=None, active=False):
    """Forces f (n,) ≥ 0 of n soft limit rows with Jacobian J (n, nv) and distances y (n,)
    (y < 0: violated), solved together as MuJoCo's solver does: a = a₀ + M⁻¹Jᵀf with a₀ the
    accelerations under ``tau``/``f_ext`` alone, and on the rows that push
    (A + R) f = a_ref − J a₀, A = J M⁻¹ Jᵀ at q, R and a_ref from ``invweight`` (MuJoCo's
    ``*_invweight0``), ``solref``/``solimp`` (:func:`soft_limit_force`, which this is for one
    row at A = ``invweight``). The rows that push are those at the minimum of MuJoCo's
    piecewise-quadratic cost, found by Newton's steps with an exact line search
    (:func:`_soft_active_rows`, at most ``iters``; one suffices for a single row); the
    forces are then solved on them (differentiable; the set is not).
    ``dynamics``: ``(small_linalg.cho_factor(M), a₀)`` when the caller has them (an implicit
    step).
    ``active``: also return the rows that push (n,) bool, ``(f, active)``."""
    from ..dynamics.api import forward_dynamics, mass_matrix

    if dynamics is None:
        cho = small_linalg.cho_factor(mass_matrix(model, q))
        a0 = forward_dynamics(model, q, v, tau, f_ext)
    else:
        cho, a0 = dynamics
    X = small_linalg.cho_solve(cho, J.T)
    A, ydd0 = J @ X, J @ a0
    aref, R = _soft_reference(y, J @ v, invweight, solref, solimp)
    violated = y < 0
    n = y.shape[0]

    def forces(K, r, on):  # K⁻¹ r on the rows ``on``, 0 elsewhere
        m = on.astype(jnp.float64)
        return small_linalg.cho_solve(_masked_cholesky(K, m), m * r)

    K, r = A + jnp.diag(R), aref - ydd0
    pushing = violated & (ydd0 < aref)
    if n > 1 and iters > 0:
        # the active set decides nothing differentiable: found on constants
        pushing = _soft_active_rows(*jax.lax.stop_gradient((cho.a, a0, J, aref, R)),
                                    violated, iters)
    f = jnp.where(pushing, forces(K, r, pushing), 0.0)
    return (f, pushing) if active else f


def friction_force(level, slope, xd):
    """Smooth dry friction −f s(c ẋ / f), s(x) = x / (1 + x⁸)^(1/8): viscous with slope c near
    rest, saturating at the level f; zero (with a finite gradient) where f = 0."""
    on = level > 0
    f_safe = jnp.where(on, level, 1.0)
    x = slope * xd / f_safe
    return jnp.where(on, -f_safe * x / (1.0 + x**8) ** 0.125, 0.0)


def _dof_positions(q, dof_qadr):
    """q at the hinge/slide dofs, laid out by dof (nv,); 0 at dofs of ball and free joints
    (``dof_qadr`` entry -1), whose coordinates are not lengths."""
    idx = np.array([max(a, 0) for a in dof_qadr], dtype=np.int32)
    mask = np.array([a >= 0 for a in dof_qadr])
    return jnp.where(mask, q[idx], 0.0) if len(idx) else jnp.zeros(0)


def dof_qpos_addresses(model: Model) -> tuple:
    """For each dof, the q index of its hinge/slide coordinate, or -1 (ball/free dofs)."""
    out = [-1] * model.nv
    for jt, a, d in zip(model.joint_types, model.joint_q, model.joint_v, strict=True):
        if jt in ("hinge", "slide"):
            out[d] = a
    return tuple(out)


def _soft_rows(owner, n, solref, solimp, invweight, prefix=""):
    """``(solref (n, 2), solimp (n, 5), invweight (n,))`` of n soft-constraint rows (one row
    given is shared by all), checked; all None when none is given."""
    given = [x is not None for x in (solref, solimp, invweight)]
    if not any(given):
        return None, None, None
    if not all(given):
        raise TypeError(f"{owner}: {prefix}solref, {prefix}solimp and {prefix}invweight go "
                        "together (MuJoCo's soft constraint) or not at all (the penalty "
                        "spring-damper)")
    rows = lambda x, w: jnp.broadcast_to(  # noqa: E731
        jnp.asarray(x, dtype=jnp.float64), (n, w)) if np.ndim(x) == 1 else x
    sr = _num(owner, prefix + "solref", rows(solref, 2), (n, 2))
    si = _num(owner, prefix + "solimp", rows(solimp, 5), (n, 5))
    w = _num(owner, prefix + "invweight", invweight, (n,), broadcast=True, lo=0.0, lo_open=True)
    if is_concrete(si):
        a, f = np.asarray(si), prefix + "solimp"
        # MuJoCo loads any of these in [0, 1] and clamps them when it evaluates (d to
        # [1e-4, 0.9999], power to >= 1): so does soft_impedance
        check_value(owner, f + " d_min, d_max", a[:, :2], lo=0.0, hi=1.0)
        check_value(owner, f + " width", a[:, 2], lo=0.0)
        check_value(owner, f + " mid", a[:, 3], lo=0.0, hi=1.0)
        check_value(owner, f + " power", a[:, 4])
    return sr, si, w


class JointLimits(AbstractForce):
    """Soft joint limits on hinge/slide joints, acting only beyond the range [lower, upper].

    Given ``solref``/``solimp`` (one row, or one per dof) and ``invweight`` (each dof's inverse
    mass, MuJoCo's ``dof_invweight0``), the force is MuJoCo's soft limit constraint
    (:func:`soft_limit_force`, one row per violated side): it needs the dof's acceleration
    without the limit, so :func:`total_force` evaluates the element after the others and
    passes their sum (:meth:`loaded_call`; called alone, the element sees gravity and the
    velocity terms only). The joint then moves as MuJoCo's does, ä = (1 − d) ä₀ + d a_ref:
    it rests at MuJoCo's violation under any load and, pushed far out, returns with MuJoCo's
    stiffness and time constant; the force only pushes. The violated limits are solved together
    (:func:`soft_limit_rows`), as MuJoCo's solver does; the limits of another such element
    (fixed tendons) count as load neither way. :func:`diffmb.io.mjcf.joint_limits_from_mjcf`
    builds it so. It costs a mass matrix and a forward dynamics while a limit is violated.

    Without them, a penalty spring–damper (``stiffness``/``damping`` per dof):

        d = q - upper > 0:  tau = -k d - b v        d = lower - q > 0:  tau = k d - b v

    (:func:`soft_constraint_gains` gives k, b that rest at MuJoCo's violation; for large
    violations this spring is ~13× stiffer than MuJoCo's constraint.) ``stiffness`` and
    ``damping`` are kept in both forms.
    """

    lower: jnp.ndarray
    upper: jnp.ndarray
    stiffness: jnp.ndarray
    damping: jnp.ndarray
    solref: jnp.ndarray | None
    solimp: jnp.ndarray | None
    invweight: jnp.ndarray | None
    dof: tuple = eqx.field(static=True)
    qadr: tuple = eqx.field(static=True)

    def __init__(self, dof, qadr, lower, upper, stiffness, damping, *, solref=None, solimp=None,
                 invweight=None):
        L = "JointLimits"
        n = len(dof)
        self.dof, self.qadr = tuple(int(d) for d in dof), tuple(int(a) for a in qadr)
        if len(self.qadr) != n:
            raise TypeError(f"JointLimits.qadr: expected {n} entries (one per dof), got "
                            f"{len(self.qadr)}")
        check_index(L, "dof", self.dof, 2**31, what="a dof >= 0")
        check_index(L, "qadr", self.qadr, 2**31, what="a q index >= 0")
        self.lower = _num(L, "lower", lower, (n,), broadcast=True)
        self.upper = _num(L, "upper", upper, (n,), broadcast=True)
        _ordered(L, "[lower, upper]", self.lower, self.upper)
        self.stiffness = _num(L, "stiffness", stiffness, (n,), broadcast=True, lo=0.0)
        self.damping = _num(L, "damping", damping, (n,), broadcast=True, lo=0.0)
        self.solref, self.solimp, self.invweight = _soft_rows(L, n, solref, solimp, invweight)

    @property
    def needs_load(self) -> bool:
        """True for MuJoCo's constraint form: :func:`total_force` passes the other forces."""
        return self.solref is not None

    def __call__(self, model, t, q, v, ctrl):
        return self.loaded_call(model, t, q, v, ctrl, jnp.zeros(model.nv), None)

    def implicit_proxy(self):
        """Itself in the penalty form; in MuJoCo's constraint form None: an implicit step
        linearises the rows with the load (:meth:`soft_rows`)."""
        return self if self.solref is None else None

    def soft_rows(self, model, t, q, v, ctrl, tau, f_ext, dynamics=None, on=None
                  ) -> SoftRows | None:
        """MuJoCo's constraint form: the rows (one per dof, on its violated side) and their
        forces under the load ``tau``/``f_ext`` (:class:`SoftRows`; ``dynamics``: see
        :func:`soft_limit_rows`; ``on`` (ndof,) bool: only those rows may push); None in the
        penalty form."""
        if self.solref is None:
            return None
        rows = self.rows(model, q, on)
        J, y = rows.J, rows.y
        below_or_above = y < 0.0

        def solve():
            return soft_limit_rows(model, q, v, tau, f_ext, J, y, self.invweight, self.solref,
                                   self.solimp, dynamics=dynamics, active=True)

        def none_violated():
            n = len(self.dof)
            return jnp.zeros(n), jnp.zeros(n, bool)

        f, active = jax.lax.cond(jnp.any(below_or_above), solve, none_violated)
        return dataclasses.replace(rows, f=f, active=active)

    def rows(self, model, q, on=None) -> SoftRows:
        """MuJoCo's constraint form: the rows (one per dof, on its violated side; y = 1 and
        J = 0 where none is), forces not solved (``on``: as :meth:`soft_rows`)."""
        _indices("JointLimits", "dof", self.dof, model.nv, f"model nv = {model.nv}")
        _indices("JointLimits", "qadr", self.qadr, model.nq, f"model nq = {model.nq}")
        qa = jnp.stack([q[a] for a in self.qadr])
        idx = jnp.asarray(self.dof, dtype=jnp.int32)
        below, above = qa < self.lower, qa > self.upper
        if on is not None:
            below, above = below & on, above & on
        side = jnp.where(below, 1.0, jnp.where(above, -1.0, 0.0))  # the violated row's sign
        y = jnp.where(below, qa - self.lower, jnp.where(above, self.upper - qa, 1.0))
        J = side[:, None] * jnp.eye(model.nv)[idx]
        n = len(self.dof)
        return SoftRows(J=J, y=y, f=jnp.zeros(n), active=jnp.zeros(n, bool),
                        invweight=self.invweight, solref=self.solref, solimp=self.solimp)

    def masked(self, on) -> AbstractForce:
        """These limits (MuJoCo's constraint form) with only the rows ``on`` (ndof,) bool
        allowed to push (a later stage of a linearly implicit step keeps out the rows that did
        not push at its start, as its linearisation does)."""
        return _MaskedLimits(self, on)

    def loaded_call(self, model, t, q, v, ctrl, tau, f_ext):
        """The limit forces with ``tau`` (nv,) and ``f_ext`` (nbody, 6 or None) acting besides
        the limits (for MuJoCo's constraint form; the penalty form ignores them)."""
        _indices("JointLimits", "dof", self.dof, model.nv, f"model nv = {model.nv}")
        _indices("JointLimits", "qadr", self.qadr, model.nq, f"model nq = {model.nq}")
        if not self.dof:
            return jnp.zeros(model.nv), None
        if self.solref is None:
            qa = jnp.stack([q[a] for a in self.qadr])
            va = jnp.stack([v[d] for d in self.dof])
            idx = jnp.asarray(self.dof, dtype=jnp.int32)
            f = limit_force(qa, va, self.lower, self.upper, self.stiffness, self.damping)
            return jnp.zeros(model.nv).at[idx].add(f), None
        return self.soft_rows(model, t, q, v, ctrl, tau, f_ext).tau, None


class _MaskedLimits(AbstractForce):
    """Soft limits in MuJoCo's constraint form of which only the rows ``on`` may push (a later
    stage of a linearly implicit step: :meth:`JointLimits.masked`)."""

    el: JointLimits
    on: jnp.ndarray

    @property
    def needs_load(self) -> bool:
        return True

    def __call__(self, model, t, q, v, ctrl):
        return self.loaded_call(model, t, q, v, ctrl, jnp.zeros(model.nv), None)

    def loaded_call(self, model, t, q, v, ctrl, tau, f_ext):
        return self.el.soft_rows(model, t, q, v, ctrl, tau, f_ext, on=self.on).tau, None


class JointFriction(AbstractForce):
    """Dry friction on joints (MJCF ``frictionloss``) as a smooth, differentiable law:

        tau = −f ⊙ s(c ⊙ v / f),   s(x) = x / (1 + x⁸)^(1/8)

    viscous with slope c near zero velocity and saturating at the friction level f (nv,) away
    from it: a smooth clip (s is within 2 % of min(|x|, 1) sign x except near |x| = 1). :func:`diffmb.io.mjcf.joint_friction_from_mjcf` takes c from the file's ``solref``
    and ``solimp`` so that a joint loaded below f creeps at MuJoCo's rate (its soft friction
    constraint is this viscous law, clipped at f). Entries with f = 0 give no force (and a zero,
    finite gradient). MuJoCo's constraint equals this law where it saturates (fast motion) and
    in steady creep; in between, where MuJoCo needs less than f to slow a light link at its
    constraint's rate, this law is stiffer.
    """

    friction: jnp.ndarray  # (nv,) N m or N
    slope: jnp.ndarray  # (nv,) N m s/rad or N s/m

    def __init__(self, friction, slope):
        self.friction = _num("JointFriction", "friction", friction, (-1,), lo=0.0)
        self.slope = _num("JointFriction", "slope", slope, self.friction.shape, broadcast=True,
                          lo=0.0)

    def __call__(self, model, t, q, v, ctrl):
        _model_shape("JointFriction", "friction", self.friction, model.nv,
                     f"model nv = {model.nv}")
        return friction_force(self.friction, self.slope, v), None


class FixedTendons(AbstractForce):
    """MuJoCo's fixed tendons: lengths L = C q, linear in the hinge/slide positions, with their
    passive forces and limits, applied to the joints as tau = Cᵀ f (``mj_passive``, the friction
    constraint of ``mj_instantiateFriction`` as a smooth law, and the limit constraint):

        spring   f = k (L_lo − L) below L_lo, k (L_hi − L) above L_hi, 0 between (deadband)
        damping  f = −b L̇
        friction f = −F s(c L̇ / F)              (:func:`friction_force`)
        limits   beyond [lower, upper] where ``limited``: MuJoCo's soft limit constraint
                 (:func:`soft_limit_force` on the tendon's row, with its acceleration
                 without the limits, as :class:`JointLimits`) when ``limit_solref``,
                 ``limit_solimp`` and ``limit_invweight`` (MuJoCo's ``tendon_invweight0``)
                 are given, else a one-sided spring–damper (``limit_stiffness``/``_damping``)

    ``coef`` (nten, nv) over dofs (zero at ball/free dofs); ``dof_qadr`` (nv,) from
    :func:`dof_qpos_addresses`. Build from a file with :func:`diffmb.io.mjcf.tendons_from_mjcf`.
    """

    coef: jnp.ndarray  # (nten, nv)
    stiffness: jnp.ndarray  # (nten,)
    springlength: jnp.ndarray  # (nten, 2) deadband [L_lo, L_hi]
    damping: jnp.ndarray  # (nten,)
    frictionloss: jnp.ndarray  # (nten,)
    friction_slope: jnp.ndarray  # (nten,)
    lower: jnp.ndarray  # (nten,)
    upper: jnp.ndarray  # (nten,)
    limit_stiffness: jnp.ndarray  # (nten,)
    limit_damping: jnp.ndarray  # (nten,)
    limit_solref: jnp.ndarray | None  # (nten, 2)
    limit_solimp: jnp.ndarray | None  # (nten, 5)
    limit_invweight: jnp.ndarray | None  # (nten,)
    dof_qadr: tuple = eqx.field(static=True)
    limited: tuple = eqx.field(static=True)
    names: tuple = eqx.field(static=True)

    def __init__(self, coef, dof_qadr, *, stiffness=0.0, springlength=0.0, damping=0.0,
                 frictionloss=0.0, friction_slope=0.0, limited=None, range=None,
                 limit_stiffness=0.0, limit_damping=0.0, limit_solref=None, limit_solimp=None,
                 limit_invweight=None, names=None):
        T = "FixedTendons"
        self.dof_qadr = tuple(int(a) for a in dof_qadr)
        self.coef = _num(T, "coef", coef, (-1, len(self.dof_qadr)))
        n = self.coef.shape[0]
        vec = lambda f, x: _num(T, f, x, (n,), broadcast=True, lo=0.0)  # noqa: E731
        self.stiffness, self.damping = vec("stiffness", stiffness), vec("damping", damping)
        sl = _num(T, "springlength", springlength)
        self.springlength = jnp.broadcast_to(sl[..., None] if sl.ndim < 2 else sl, (n, 2))
        _ordered(T, "springlength", self.springlength[:, 0], self.springlength[:, 1])
        self.frictionloss = vec("frictionloss", frictionloss)
        self.friction_slope = vec("friction_slope", friction_slope)
        self.limited = tuple(bool(b) for b in ([False] * n if limited is None else limited))
        rng = jnp.zeros((n, 2)) if range is None else _num(T, "range", range, (n, 2))
        _ordered(T, "range", rng[:, 0], rng[:, 1], self.limited)
        self.lower, self.upper = rng[:, 0], rng[:, 1]
        self.limit_stiffness = vec("limit_stiffness", limit_stiffness)
        self.limit_damping = vec("limit_damping", limit_damping)
        if limit_invweight is not None and is_concrete(limit_invweight) and np.ndim(limit_invweight):
            # a tendon without a limit never reads its row (MuJoCo gives 0 to one that no
            # joint lengthens at qpos0)
            limit_invweight = np.where(self.limited, limit_invweight, 1.0)
        soft = _soft_rows(T, n, limit_solref, limit_solimp, limit_invweight, "limit_")
        self.limit_solref, self.limit_solimp, self.limit_invweight = soft
        self.names = tuple(names) if names is not None else tuple(f"tendon{i}" for i in range(n))

    @property
    def needs_load(self) -> bool:
        """True when a limit is MuJoCo's constraint: :func:`total_force` passes the others."""
        return self.limit_solref is not None and any(self.limited)

    def lengths(self, q):
        """Tendon lengths (nten,)."""
        return self.coef @ _dof_positions(q, self.dof_qadr)

    def geometry(self, model, q):
        """Lengths L (nten,) and their Jacobian J (nten, nv), L̇ = J v."""
        return self.lengths(q), self.coef

    def without_limits(self):
        """The same tendons with no limit (springs, damping and friction kept)."""
        out = copy.copy(self)
        object.__setattr__(out, "limited", (False,) * len(self.limited))
        return out

    def implicit_proxy(self):
        """The tendons with their soft limit rows as penalty springs of the same stiffness
        and damping (:func:`soft_row_gains`)."""
        if self.limit_solref is None:
            return self
        out = copy.copy(self)
        k, b = soft_row_gains(self.limit_solref, self.limit_solimp, self.limit_invweight)
        for f, x in (("limit_stiffness", k), ("limit_damping", b), ("limit_solref", None),
                     ("limit_solimp", None), ("limit_invweight", None)):
            object.__setattr__(out, f, x)
        return out

    def __call__(self, model, t, q, v, ctrl):
        return self.loaded_call(model, t, q, v, ctrl, jnp.zeros(model.nv), None)

    def loaded_call(self, model, t, q, v, ctrl, tau, f_ext):
        """The tendon forces with ``tau`` (nv,) and ``f_ext`` acting besides them (used by the
        limits in MuJoCo's constraint form; called alone: gravity and velocity terms only)."""
        if len(self.dof_qadr) != model.nv:
            raise TypeError(f"{type(self).__name__}.coef: expected {len(self.dof_qadr)} columns "
                            f"to be the model's nv = {model.nv}")
        L, J = self.geometry(model, q)
        Ld = J @ v
        lo, hi = self.springlength[:, 0], self.springlength[:, 1]
        f = self.stiffness * (jnp.maximum(lo - L, 0.0) - jnp.maximum(L - hi, 0.0))
        f = f - self.damping * Ld + friction_force(self.frictionloss, self.friction_slope, Ld)
        lim = np.array(self.limited)
        if self.limit_solref is None:
            f = f + jnp.where(lim, limit_force(L, Ld, self.lower, self.upper,
                                               self.limit_stiffness, self.limit_damping), 0.0)
            return J.T @ f, None
        below, above = lim & (L < self.lower), lim & (L > self.upper)
        side = jnp.where(below, 1.0, jnp.where(above, -1.0, 0.0))
        y = jnp.where(below, L - self.lower, jnp.where(above, self.upper - L, 1.0))

        def solve():  # one row per tendon: the violated side, with the passive forces as load
            fl = soft_limit_rows(model, q, v, tau + J.T @ f, f_ext, side[:, None] * J, y,
                                 self.limit_invweight, self.limit_solref, self.limit_solimp)
            return side * fl

        f = f + jax.lax.cond(jnp.any(below | above), solve, lambda: jnp.zeros(L.shape))
        return J.T @ f, None


class SpatialTendons(FixedTendons):
    """MuJoCo's spatial tendons through sites (no wrapping geoms or pulleys): each tendon is a
    path of straight segments between sites fixed on bodies, its length L the sum of the
    segment lengths and L̇ = J v with J = Σ uᵢᵀ (Vᵢ₊₁ − Vᵢ) (uᵢ the unit vector of segment i,
    Vᵢ the point Jacobian of site i). Springs, damping, friction loss and limits are those of
    :class:`FixedTendons` on these lengths, applied as tau = Jᵀ f (the tension pulling the sites
    of each segment together).

    ``paths``: per tendon, the sites in order as ``(body name or "world", (x, y, z))`` with the
    position in the body's frame; the other keywords as :class:`FixedTendons`. Build from a
    file with :func:`diffmb.io.mjcf.tendons_from_mjcf`.
    """

    site_pos: jnp.ndarray  # (nsite, 3) all paths' sites, in their bodies' frames
    site_body: tuple = eqx.field(static=True)  # (nsite,) body names ("world" for fixed sites)
    path_start: tuple = eqx.field(static=True)  # (nten + 1,) offsets into the sites

    def __init__(self, paths, dof_qadr, **kw):
        T = "SpatialTendons"
        paths = [list(p) for p in paths]
        for i, p in enumerate(paths):
            if len(p) < 2:
                raise ValueError(f"{T}.paths[{i}]: a tendon needs at least two sites, got {len(p)}")
        nv = len(tuple(dof_qadr))
        super().__init__(np.zeros((len(paths), nv)), dof_qadr, **kw)
        self.site_body = tuple(str(b) for p in paths for b, _ in p)
        self.site_pos = _num(T, "site_pos", np.array([x for p in paths for _, x in p], float),
                             (len(self.site_body), 3))
        self.path_start = tuple(int(x) for x in np.cumsum([0] + [len(p) for p in paths]))

    def lengths(self, q):
        raise TypeError("SpatialTendons.lengths needs the model: use geometry(model, q)")

    def geometry(self, model, q):
        from ..dynamics.kinematics import body_frames, kinematics, partial_velocities

        kin = kinematics(model, q)
        Rb, pb = body_frames(model, kin)
        world = np.array([b == "world" for b in self.site_body])
        idx = [0 if w else model.body_index(b) for b, w in zip(self.site_body, world,
                                                               strict=True)]
        x = jnp.einsum("kij,kj->ki", Rb[np.array(idx)], self.site_pos) + pb[np.array(idx)]
        x = jnp.where(world[:, None], self.site_pos - kin.origin, x)  # relative to kin.origin
        V, _ = partial_velocities(model, kin, x, idx)
        V = jnp.where(world[:, None, None], 0.0, V)
        Ls, Js = [], []
        for a, b in zip(self.path_start[:-1], self.path_start[1:], strict=True):
            d = x[a + 1:b] - x[a:b - 1]
            n = jnp.sqrt(jnp.sum(d * d, axis=-1))
            u = d / jnp.maximum(n, 1e-12)[:, None]
            Ls.append(jnp.sum(n))
            Js.append(jnp.einsum("si,sin->n", u, V[a + 1:b] - V[a:b - 1]))
        return jnp.stack(Ls), jnp.stack(Js)


class Couplings(AbstractForce):
    """Joint and fixed-tendon equalities (MJCF ``<equality><joint>``/``<tendon>``, URDF
    ``<mimic>``) as stiff spring–dampers, a penalty form of MuJoCo's soft equality constraint.

    Coordinates x₁ = c₁ · q and x₂ = c₂ · q (rows of ``coef1``/``coef2`` (n, nv) over the
    hinge/slide dofs: a unit row for a joint, the tendon's coefficients for a tendon), reference
    values x₁⁰, x₂⁰ (MuJoCo's ``qpos0``; 0 for URDF) and a quartic ``polycoef`` p (n, 5):

        r = x₁ − x₁⁰ − p₀ − Σ_{k=1..4} p_k (x₂ − x₂⁰)^k        (r = x₁ − x₁⁰ − p₀ without x₂)
        f = −k r − b ṙ,   tau = (∂r/∂q)ᵀ f

    URDF ``<mimic multiplier="m" offset="o"/>`` is p = (o, m, 0, 0, 0). ``stiffness``/
    ``damping`` (n,) from :func:`soft_constraint_gains` with the pair's effective mass.

    ``exact=True`` (linear couplings only: p₂ = p₃ = p₄ = 0) enforces them to round-off instead
    (a mechanism's differential, gears): the element applies no force and
    :func:`diffmb.forward`/``simulate`` project the accelerations onto C a = 0 (C = ∂r/∂q,
    constant), a = a₀ − M⁻¹Cᵀ(C M⁻¹ Cᵀ)⁻¹ C a₀ (Gauss's principle: the constraint forces do no
    work); Runge–Kutta steps preserve the linear invariants C q and C v exactly, and ``simulate``
    projects q₀ and v₀ onto them (warning if they had to move). q and v keep the full layout.
    ``as_exact()`` returns the exact version of a penalty element.
    """

    coef1: jnp.ndarray  # (n, nv)
    coef2: jnp.ndarray  # (n, nv), zero rows where there is no second coordinate
    ref1: jnp.ndarray  # (n,)
    ref2: jnp.ndarray  # (n,)
    polycoef: jnp.ndarray  # (n, 5)
    stiffness: jnp.ndarray  # (n,)
    damping: jnp.ndarray  # (n,)
    dof_qadr: tuple = eqx.field(static=True)
    names: tuple = eqx.field(static=True)
    exact: bool = eqx.field(static=True, default=False)

    def __init__(self, coef1, coef2, ref1, ref2, polycoef, stiffness, damping, dof_qadr,
                 names=None, exact=False):
        C = "Couplings"
        self.dof_qadr = tuple(int(a) for a in dof_qadr)
        self.coef1 = _num(C, "coef1", coef1, (-1, len(self.dof_qadr)))
        n = self.coef1.shape[0]
        self.coef2 = _num(C, "coef2", coef2, (n, len(self.dof_qadr)))
        self.ref1 = _num(C, "ref1", ref1, (n,), broadcast=True)
        self.ref2 = _num(C, "ref2", ref2, (n,), broadcast=True)
        self.polycoef = _num(C, "polycoef", polycoef, (n, 5))
        self.stiffness = _num(C, "stiffness", stiffness, (n,), broadcast=True, lo=0.0)
        self.damping = _num(C, "damping", damping, (n,), broadcast=True, lo=0.0)
        self.names = tuple(names) if names is not None else tuple(f"eq{i}" for i in range(n))
        self.exact = bool(exact)
        p = None
        if exact and not isinstance(self.polycoef, jax.core.Tracer):
            p = np.asarray(self.polycoef)
        if p is not None and np.any(p[:, 2:]):
            bad = [self.names[i] for i in np.flatnonzero(np.any(p[:, 2:] != 0, axis=1))]
            raise ValueError(f"Couplings {bad}: exact=True needs linear couplings "
                             "(polycoef p2 = p3 = p4 = 0)")

    def as_exact(self):
        """The same couplings enforced exactly (see the class docstring)."""
        return Couplings(self.coef1, self.coef2, self.ref1, self.ref2, self.polycoef,
                         self.stiffness, self.damping, self.dof_qadr, self.names, exact=True)

    def jacobian(self):
        """C = ∂r/∂q over dofs (n, nv) of linear couplings: coef1 − p₁ coef2."""
        return self.coef1 - self.polycoef[:, 1:2] * self.coef2

    def residual(self, q):
        """Constraint residuals r (n,)."""
        qd = _dof_positions(q, self.dof_qadr)
        x1, x2 = self.coef1 @ qd - self.ref1, self.coef2 @ qd - self.ref2
        p = self.polycoef
        poly = p[:, 1] * x2 + p[:, 2] * x2**2 + p[:, 3] * x2**3 + p[:, 4] * x2**4
        return x1 - p[:, 0] - poly

    def __call__(self, model, t, q, v, ctrl):
        if len(self.dof_qadr) != model.nv:
            raise TypeError(f"Couplings.coef1: expected {len(self.dof_qadr)} columns to be the "
                            f"model's nv = {model.nv}")
        if self.exact:  # enforced by projecting the accelerations, see project_couplings
            return jnp.zeros(model.nv), None
        qd = _dof_positions(q, self.dof_qadr)
        x2 = self.coef2 @ qd - self.ref2
        p = self.polycoef
        slope = p[:, 1] + 2 * p[:, 2] * x2 + 3 * p[:, 3] * x2**2 + 4 * p[:, 4] * x2**3
        J = self.coef1 - slope[:, None] * self.coef2  # (n, nv) = ∂r/∂q over dofs
        f = -self.stiffness * self.residual(q) - self.damping * (J @ v)
        return J.T @ f, None


class GravityCompensation(AbstractForce):
    """MuJoCo's ``gravcomp``: on each body of ``bodies`` (names), the world-frame force
    −factor · m · g at its centre of mass, cancelling that fraction of its weight (1: all of
    it, as a buoyant body of its own density). Masses come from the model at evaluation, so
    they can be fitted."""

    factor: jnp.ndarray  # (k,)
    bodies: tuple = eqx.field(static=True)

    def __init__(self, bodies, factor):
        self.bodies = tuple(str(b) for b in bodies)
        self.factor = _num("GravityCompensation", "factor", factor, (len(self.bodies),),
                           broadcast=True)

    def __call__(self, model, t, q, v, ctrl):
        idx = jnp.asarray([model.body_index(b) for b in self.bodies], dtype=jnp.int32)
        force = -(self.factor * model.body_mass[idx])[:, None] * model.gravity[None, :]
        f = jnp.zeros((model.n_bodies, 6)).at[idx, :3].add(force)
        return jnp.zeros(model.nv), f


class BodyWrench(AbstractForce):
    """A constant world-frame wrench [force, torque] (6,) at the com of body ``body`` (a name)."""

    wrench: jnp.ndarray
    body: str = eqx.field(static=True)

    def __init__(self, body: str, wrench):
        if not isinstance(body, str):
            raise TypeError(f"BodyWrench.body = {body!r}: a body name (str) is required")
        self.body = body
        self.wrench = _num("BodyWrench", "wrench", wrench, (6,))

    def __call__(self, model, t, q, v, ctrl):
        b = model.body_index(self.body)
        f = jnp.zeros((model.n_bodies, 6)).at[b].set(self.wrench)
        return jnp.zeros(model.nv), f


def init_states(forces, model: Model) -> tuple:
    """The elements' initial states, aligned with ``forces`` (None for stateless elements)."""
    return tuple(el.init_state(model) if isinstance(el, AbstractStatefulForce) else None
                 for el in forces)


def total_force(forces, model: Model, t, q, v, ctrl, states=None, extra_load=None):
    """Sum of the elements' outputs: ``(tau (nv,), f_ext (nbody, 6) or None, ds)``.

    Elements whose ``needs_load`` is True (limits as MuJoCo's constraint) come last: each is
    called as ``loaded_call(model, t, q, v, ctrl, tau, f_ext)`` with the sum of the others
    (and the control, where no element consumes it: it is then a generalized force).
    ``states``: the stateful elements' states aligned with ``forces`` (None: no element has
    state); ``ds`` is their time derivative, aligned likewise (None when ``states`` is None).
    ``extra_load``: a generalized force (nv,) acting besides ``forces`` (counted in the load the
    loaded elements see, not in the returned tau).
    """
    tau = jnp.zeros(model.nv)
    f_ext = None
    ds = []
    later = []
    for k, el in enumerate(forces):
        if el.needs_load:  # evaluated last, with the others' sum
            later.append(k)
            ds.append(None)
            continue
        if states is not None and states[k] is not None:
            ti, fi, dsi = el.stateful_call(model, t, q, v, ctrl, states[k])
        else:
            ti, fi = el(model, t, q, v, ctrl)
            dsi = None
        ds.append(dsi)
        tau = tau + ti
        if fi is not None:
            f_ext = fi if f_ext is None else f_ext + fi
    load = tau if extra_load is None else tau + extra_load
    if later and ctrl is not None and not any(getattr(f, "uses_ctrl", False) for f in forces):
        c = jnp.asarray(ctrl)  # a control no element consumes is a generalized force
        load = load + c if c.shape == (model.nv,) else load
    first = jnp.zeros(model.nv)  # the rank-0 elements' forces: load for the others
    # joint limits in MuJoCo's form, solved with the first contact rows (as MuJoCo's solver
    # solves every row at once), else after them
    limits = [k for k in later if isinstance(forces[k], JointLimits) and forces[k].needs_load]
    joined = {}
    for k in sorted(later, key=lambda k: forces[k].load_rank):
        el = forces[k]
        if k in joined:
            tau = tau + joined[k]
            continue
        seen = load + first if el.load_rank else load
        if limits and hasattr(el, "loaded_with_rows") and states is not None \
                and states[k] is not None:
            ti, ds[k], solved = el.loaded_with_rows(model, t, q, v, ctrl, seen, f_ext,
                                                    states[k],
                                                    [forces[j].rows(model, q) for j in limits])
            joined.update({j: r.tau for j, r in zip(limits, solved, strict=True)})
            limits = []
        elif states is not None and states[k] is not None:
            ti, _, ds[k] = el.loaded_stateful_call(model, t, q, v, ctrl, seen, f_ext, states[k])
        else:
            ti = el.loaded_call(model, t, q, v, ctrl, seen, f_ext)[0]
        tau = tau + ti
        if not el.load_rank:
            first = first + ti
    return tau, f_ext, (None if states is None else tuple(ds))
