"""Physical parameters chosen by name, read from and written into a Model (and force elements).

Names
-----
=================================  ========  =============================================
``body.<body>.mass``               ()        ``model.body_mass[i]`` [kg]
``body.<body>.com``                (3,)      centre of mass in the body frame [m]
``body.<body>.inertia``            (6,)      inertia about the com, body axes, unique entries
                                             ``[Ixx, Iyy, Izz, Ixy, Ixz, Iyz]`` [kg m²]
``body.<body>.inertia_diag``       (3,)      its diagonal ``[Ixx, Iyy, Izz]`` (off-diagonal kept)
``joint.<joint>.damping``          (nv_j,)   viscous damping of the joint's dofs (``()`` for a
                                             1-dof joint) [N m s/rad or N s/m]
``joint.<joint>.stiffness``        (nv_j,)   joint spring [N m/rad or N/m]
``joint.<joint>.armature``         (nv_j,)   reflected rotor inertia [kg m² or kg]
``force.<elem>.<field>``           any       an array field of the force element ``forces[elem]``
                                             (equinox Module), e.g. ``force.aero.CLa``, or of
                                             one of its sub-modules: ``force.floor.terrain.heights``
=================================  ========  =============================================

Body and joint names are ``model.body_names`` / ``model.joint_names`` (verbatim from the file).
Unknown bodies, joints, fields or elements raise ``KeyError`` naming the offender and listing
what exists.

Values are validated where they enter (``set_params`` and ``ParamSet.set``): a value whose shape
is not the parameter's (a scalar is never broadcast to a vector) raises ``ValueError`` naming
the parameter and both shapes, always (shapes are static, also under a trace). A *concrete*
value that is not finite, a negative mass, a negative damping/stiffness/armature, or an inertia
that is not symmetric positive semi-definite or violates the triangle inequality
``I1 + I2 >= I3`` beyond round-off (:func:`diffmb.model.check_inertia`, the checks and
thresholds of :class:`~diffmb.model.ModelBuilder`) raises ``ValueError`` naming the parameter. Traced values
(inside ``jit``/``grad``/``vmap``) are written unchecked.

Reading and writing are pure functions of the pytrees (``equinox.tree_at``), so
``set`` works under ``jit``/``grad``/``vmap``: the gradient of a simulation with respect to a
named parameter is ``jax.grad(lambda x: loss(ps.set(model, forces, {name: x})[0]))``.

Note that ``model.damping``/``stiffness`` are what :class:`~diffmb.forces.elements.JointDamping`
and ``JointSpring`` use when built without explicit coefficients; ``joint.*.damping`` has an
effect on a simulation only if such an element is in ``forces``.

Transforms
----------
An optimiser works on an unconstrained ``z``; :class:`Transform` maps it to the parameter:

* :func:`identity`: ``p = z``;
* :func:`positive`: ``p = exp(z)`` (masses, damping);
* :func:`bounded` ``(lo, hi)``: ``p = lo + (hi − lo) σ(z)`` (logistic σ); one-sided bounds
  ``p = lo + exp(z)`` / ``p = hi − exp(z)``.

:func:`default_transform` is ``positive`` for mass, inertia_diag, damping and armature, the
identity otherwise. :class:`Transforms` maps a whole flat vector, one :class:`Transform` per
entry (this is what :func:`~diffmb.optim.least_squares`, :func:`~diffmb.optim.fit` and
:func:`~diffmb.optim.trajopt` use).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..model import InertiaWarning, Model, check_inertia
from ..systems import concrete

__all__ = [
    "Param",
    "ParamSet",
    "get_params",
    "set_params",
    "Transform",
    "identity",
    "positive",
    "bounded",
    "default_transform",
    "Transforms",
]

_BODY_FIELDS = ("mass", "com", "inertia", "inertia_diag")
_JOINT_FIELDS = ("damping", "stiffness", "armature")
_IU = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))  # inertia unique entries


@dataclasses.dataclass(frozen=True)
class Param:
    """One named parameter: its shape and pure get/set functions on (model, forces)."""

    name: str
    shape: tuple
    get: Callable  # (model, forces_dict) -> array of `shape`
    set: Callable  # (model, forces_dict, value) -> (model, forces_dict)
    check: Callable | None = None  # (model, concrete float array of `shape`) -> None or raises

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))


def _body_param(model: Model, name: str, body: str, field: str) -> Param:
    if body not in model.body_names:
        raise KeyError(
            f"parameter {name!r}: no body named {body!r}; bodies: {list(model.body_names)}"
        )
    i = model.body_names.index(body)
    if field == "mass":
        return Param(
            name,
            (),
            lambda m, f: m.body_mass[i],
            lambda m, f, x: (eqx.tree_at(lambda t: t.body_mass, m, m.body_mass.at[i].set(x)), f),
            lambda m, x: _check_body(name, body, float(x), np.zeros((3, 3))),
        )
    if field == "com":
        return Param(
            name,
            (3,),
            lambda m, f: m.body_com[i],
            lambda m, f, x: (eqx.tree_at(lambda t: t.body_com, m, m.body_com.at[i].set(x)), f),
        )
    if field == "inertia":
        rows = jnp.array([a for a, _ in _IU])
        cols = jnp.array([b for _, b in _IU])

        def set_inertia(m, f, x):
            x = jnp.asarray(x)
            Ic = jnp.zeros((3, 3), x.dtype).at[rows, cols].set(x).at[cols, rows].set(x)
            return eqx.tree_at(lambda t: t.body_inertia, m, m.body_inertia.at[i].set(Ic)), f

        def check_full(m, x):
            Ic = np.zeros((3, 3))
            Ic[[a for a, _ in _IU], [b for _, b in _IU]] = x
            Ic[[b for _, b in _IU], [a for a, _ in _IU]] = x
            _check_body(name, body, 1.0, Ic)

        return Param(name, (6,), lambda m, f: m.body_inertia[i][rows, cols], set_inertia,
                     check_full)
    if field == "inertia_diag":
        d = jnp.arange(3)

        def set_diag(m, f, x):
            Ic = m.body_inertia[i].at[d, d].set(x)
            return eqx.tree_at(lambda t: t.body_inertia, m, m.body_inertia.at[i].set(Ic)), f

        def check_diag(m, x):
            Ic = _concrete(getattr(m, "body_inertia", None))
            if Ic is None or Ic.ndim != 3 or Ic.shape[1:] != (3, 3) or i >= Ic.shape[0]:
                Ic = np.zeros((3, 3))  # model traced or batched: judge the diagonal alone
            else:
                Ic = Ic[i].copy()
            Ic[[0, 1, 2], [0, 1, 2]] = x
            _check_body(name, body, 1.0, Ic)

        return Param(name, (3,), lambda m, f: jnp.diagonal(m.body_inertia[i]), set_diag,
                     check_diag)
    raise KeyError(f"parameter {name!r}: unknown body field {field!r}; choose {_BODY_FIELDS}")


def _joint_param(model: Model, name: str, joint: str, field: str) -> Param:
    if joint not in model.joint_names:
        raise KeyError(
            f"parameter {name!r}: no joint named {joint!r}; joints: {list(model.joint_names)}"
        )
    if field not in _JOINT_FIELDS:
        raise KeyError(f"parameter {name!r}: unknown joint field {field!r}; choose {_JOINT_FIELDS}")
    sl = model.joint_dofs(joint)
    n = sl.stop - sl.start
    shape = () if n == 1 else (n,)

    def get(m, f):
        a = getattr(m, field)[sl]
        return a[0] if n == 1 else a

    def set_(m, f, x):
        a = getattr(m, field)
        x = jnp.reshape(jnp.asarray(x), (n,))
        return eqx.tree_at(lambda t: getattr(t, field), m, a.at[sl].set(x)), f

    def check(m, x):
        if np.any(x < 0):
            raise ValueError(
                f"parameter {name!r}: negative {field} is non-physical, got {x.tolist()}"
            )

    return Param(name, shape, get, set_, check)


def _array_fields(elem) -> list[str]:
    out = []
    for fl in dataclasses.fields(elem):
        v = getattr(elem, fl.name, None)
        if eqx.is_array(v) or isinstance(v, float):
            out.append(fl.name)
    return out


def _force_param(forces: Mapping | None, name: str, path: str, _field=None) -> Param:
    """``force.<elem>.<field>`` or a nested ``force.<elem>.<sub>.<field>`` (e.g.
    ``force.floor.terrain.heights`` of a Contacts element); ``<elem>`` is the longest leading part of
    ``path`` that names an element (element names may contain dots)."""
    parts = path.split(".")
    elem = next((".".join(parts[:k]) for k in range(len(parts) - 1, 0, -1)
                 if forces and ".".join(parts[:k]) in forces), None)
    if elem is None:
        have = list(forces) if forces else []
        raise KeyError(
            f"parameter {name!r}: no force element named {'.'.join(parts[:-1])!r}; pass forces "
            f"as a dict {{name: element}} (elements given: {have})"
        )
    attrs = parts[len(elem.split(".")):]
    owner = forces[elem]
    for a in attrs[:-1]:
        sub = getattr(owner, a, None)
        if not isinstance(sub, eqx.Module):
            raise KeyError(f"parameter {name!r}: element {elem!r} has no sub-module {a!r}")
        owner = sub
    field = attrs[-1]
    fields = _array_fields(owner)
    if field not in fields:
        raise KeyError(
            f"parameter {name!r}: element {elem!r} ({type(owner).__name__}) has no array field "
            f"{field!r}; array fields: {fields}"
        )
    shape = tuple(np.shape(getattr(owner, field)))
    at = lambda e: functools.reduce(getattr, attrs, e)  # noqa: E731

    def get(m, f):
        return jnp.asarray(at(f[elem]))

    def set_(m, f, x):
        f = dict(f)
        old = at(f[elem])
        x = jnp.reshape(jnp.asarray(x), shape)
        if not eqx.is_array(old):  # a Python float field: replace it by an array leaf
            f[elem] = eqx.tree_at(at, f[elem], x, is_leaf=lambda v: v is old)
        else:
            f[elem] = eqx.tree_at(at, f[elem], x)
        return m, f

    return Param(name, shape, get, set_)


def _concrete(x):
    """``x`` as a float numpy array, or None when it is (or holds) a tracer."""
    return concrete(x, dtype=float)


def _check_body(name: str, body: str, mass: float, Ic: np.ndarray) -> None:
    """Mass and inertia of one body by :func:`~diffmb.model.check_inertia` (the builder's checks
    and thresholds): its errors are raised, a clearly negative eigenvalue or a violated triangle
    inequality (which a builder defers or only warns about) is refused, other (harmless)
    remarks are passed on as :class:`~diffmb.model.InertiaWarning`."""
    issues = check_inertia(body, mass, Ic, source=f"parameter {name!r}", warn=False)
    refused = [i for i in issues if i.kind in ("not_psd", "triangle")]
    if refused:
        extra = f": {Ic.tolist()}" if refused[0].kind == "not_psd" else ""
        raise ValueError(f"parameter {name!r}: body {body!r}: "
                         + "; ".join(i.detail for i in refused) + extra)
    if issues:
        warnings.warn(f"parameter {name!r}: body {body!r}: " + "; ".join(i.detail for i in issues),
                      InertiaWarning, stacklevel=5)


def _validate(p: Param, model: Model, x) -> None:
    """Refuse a value of the wrong shape (always) or, when concrete, a non-finite or
    non-physical one; ``ValueError`` naming the parameter."""
    try:
        given = tuple(np.shape(x))
    except Exception:  # e.g. a list holding tracers
        given = None
    if given is not None and given != p.shape:
        raise ValueError(
            f"parameter {p.name!r}: expected a value of shape {p.shape}, got shape {given} "
            "(values are not broadcast)"
        )
    a = _concrete(x)
    if a is None:
        return  # traced: passes through unchanged
    if not np.all(np.isfinite(a)):
        raise ValueError(f"parameter {p.name!r}: value is not finite: {a.tolist()}")
    if p.check is not None:
        p.check(model, a)


def parse(model: Model, name: str, forces: Mapping | None = None) -> Param:
    """Resolve one parameter name (see the module docstring) to a :class:`Param`."""
    parts = name.split(".")
    if len(parts) < 3 or parts[0] not in ("body", "joint", "force"):
        raise KeyError(
            f"parameter {name!r}: expected 'body.<name>.<field>', 'joint.<name>.<field>' or "
            "'force.<element>.<field>'"
        )
    kind, field = parts[0], parts[-1]
    target = ".".join(parts[1:-1])  # names may contain dots
    if kind == "body":
        if field not in _BODY_FIELDS:
            raise KeyError(f"parameter {name!r}: unknown body field {field!r}; choose {_BODY_FIELDS}")
        return _body_param(model, name, target, field)
    if kind == "joint":
        return _joint_param(model, name, target, field)
    return _force_param(forces, name, ".".join(parts[1:]))


class ParamSet:
    """An ordered set of named parameters with flat-vector views.

    ``ps = ParamSet(model, ["body.link2.mass", "joint.j1.damping"], forces={"aero": aero})``

    * ``ps.get(model, forces) -> {name: array}``; ``ps.set(model, forces, values) -> (model,
      forces)`` (pure, traceable; ``forces`` is a dict or None; values are validated, see the
      module docstring);
    * ``ps.flatten(values) -> (n,)`` and ``ps.unflatten(vec) -> {name: array}``;
    * ``ps.scalar_names``: one name per entry of the flat vector (``name`` for a scalar,
      ``name[k]`` for entry k of a vector parameter).
    """

    def __init__(self, model: Model, names: Sequence[str], forces: Mapping | None = None):
        if isinstance(names, str):
            names = [names]
        names = list(names)
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"parameters named twice: {dup}")
        self.params = [parse(model, n, forces) for n in names]
        self.names = tuple(names)
        self.scalar_names = tuple(
            n if p.shape == () else f"{n}[{k}]"
            for n, p in zip(self.names, self.params, strict=True)
            for k in range(p.size)
        )
        self.size = sum(p.size for p in self.params)

    def get(self, model: Model, forces: Mapping | None = None) -> dict:
        return {p.name: p.get(model, forces) for p in self.params}

    def set(self, model: Model, forces: Mapping | None, values: Mapping, *,
            check: bool = True) -> tuple:
        """(model, forces) with ``values`` written; ``check=False`` skips the physical checks
        (a fit's final estimate is returned even when it is not physical, and flagged)."""
        for k in values:
            if k not in self.names:
                raise KeyError(f"unknown parameter {k!r}; this set has {list(self.names)}")
        for p in self.params:  # validate all before writing any
            if check and p.name in values:
                _validate(p, model, values[p.name])
        for p in self.params:
            if p.name in values:
                model, forces = p.set(model, forces, values[p.name])
        return model, forces

    def flatten(self, values: Mapping) -> jnp.ndarray:
        return jnp.concatenate(
            [jnp.reshape(jnp.asarray(values[p.name], dtype=jnp.float64), (-1,)) for p in self.params]
        )

    def unflatten(self, vec) -> dict:
        out, i = {}, 0
        for p in self.params:
            out[p.name] = jnp.reshape(vec[i : i + p.size], p.shape)
            i += p.size
        return out

    def owner(self, scalar_name: str) -> str:
        """The parameter name a scalar entry belongs to."""
        return scalar_name.split("[")[0] if scalar_name not in self.names else scalar_name


def get_params(model: Model, names: Sequence[str], forces: Mapping | None = None) -> dict:
    """``{name: np.ndarray}`` of the named parameters (see the module docstring)."""
    ps = ParamSet(model, names, forces)
    return {k: np.asarray(v) for k, v in ps.get(model, forces).items()}


def set_params(model: Model, values: Mapping, forces: Mapping | None = None):
    """Write named parameters; returns the new Model, or ``(model, forces)`` if forces given."""
    ps = ParamSet(model, list(values), forces)
    m, f = ps.set(model, forces, values)
    return m if forces is None else (m, f)


# ----------------------------------------------------------------------------------------------
# Transforms
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Transform:
    """``p = forward(z)`` (traceable), ``z = inverse(p)`` (numpy), ``lo < p < hi`` open."""

    kind: str
    lo: float | None = None
    hi: float | None = None

    def forward(self, z):
        if self.kind == "identity":
            return z
        if self.kind == "positive":
            return jnp.exp(z)
        if self.kind == "lower":
            return self.lo + jnp.exp(z)
        if self.kind == "upper":
            return self.hi - jnp.exp(z)
        return self.lo + (self.hi - self.lo) * jax.nn.sigmoid(z)

    def derivative(self, z):
        """dp/dz at z (traceable)."""
        if self.kind == "identity":
            return jnp.ones_like(z)
        if self.kind in ("positive", "lower"):
            return jnp.exp(z)
        if self.kind == "upper":
            return -jnp.exp(z)
        s = jax.nn.sigmoid(z)
        return (self.hi - self.lo) * s * (1.0 - s)

    def inverse(self, p):
        p = np.asarray(p, dtype=float)
        if not np.all(np.isfinite(p)):
            raise ValueError(f"value {p} is not finite")
        if self.kind == "identity":
            return p
        lo = 0.0 if self.kind == "positive" else self.lo
        if self.kind in ("positive", "lower", "bounded") and np.any(~(p > lo)):
            raise ValueError(f"value {p} is not above the lower bound {lo}")
        if self.kind in ("upper", "bounded") and np.any(~(p < self.hi)):
            raise ValueError(f"value {p} is not below the upper bound {self.hi}")
        if self.kind == "positive":
            return np.log(p)
        if self.kind == "lower":
            return np.log(p - self.lo)
        if self.kind == "upper":
            return np.log(self.hi - p)
        return np.log((p - self.lo) / (self.hi - p))


def identity() -> Transform:
    return Transform("identity")


def positive() -> Transform:
    return Transform("positive")


def bounded(lo: float | None = None, hi: float | None = None) -> Transform:
    """Open interval (lo, hi); either end may be None (then a one-sided exp transform)."""
    if lo is None and hi is None:
        return identity()
    if lo is None:
        return Transform("upper", hi=float(hi))
    if hi is None:
        return Transform("lower", lo=float(lo))
    if not float(hi) > float(lo):
        raise ValueError(f"upper bound {hi} must exceed lower bound {lo}")
    return Transform("bounded", float(lo), float(hi))


def default_transform(name: str) -> Transform:
    field = name.split(".")[-1]
    if field in ("mass", "inertia_diag", "damping", "armature"):
        return positive()
    return identity()


@dataclasses.dataclass(frozen=True)
class Transforms:
    """One :class:`Transform` per entry of a flat vector: ``p = forward(z)`` entrywise.

    Hashable (a tuple of frozen transforms), so it may be static under ``jit``. Entries that
    share a transform are mapped together (one vector operation per distinct transform).
    """

    items: tuple

    def __post_init__(self):
        object.__setattr__(self, "items", tuple(self.items))

    @property
    def size(self) -> int:
        return len(self.items)

    def _groups(self):
        idx: dict = {}
        for i, t in enumerate(self.items):
            idx.setdefault(t, []).append(i)
        return [(t, np.asarray(ii)) for t, ii in idx.items()]

    def _map(self, method: str, z):
        z = jnp.asarray(z)
        out = jnp.zeros_like(z)
        for t, ii in self._groups():
            out = out.at[ii].set(getattr(t, method)(z[ii]))
        return out

    def forward(self, z):
        """p (n,) from z (n,) (traceable)."""
        return self._map("forward", z)

    def derivative(self, z):
        """dp/dz (n,): the transform's Jacobian is diagonal (traceable)."""
        return self._map("derivative", z)

    def inverse(self, p, names: Sequence[str] | None = None) -> np.ndarray:
        """z (n,) from p (n,) (numpy); a value outside its interval raises ``ValueError``
        naming the entry (``names[i]``, or its index)."""
        p = np.asarray(p, dtype=float).reshape(-1)
        if p.size != self.size:
            raise ValueError(f"expected {self.size} values, got {p.size}")
        z = np.empty(self.size)
        for i, t in enumerate(self.items):
            try:
                z[i] = t.inverse(p[i])
            except ValueError as e:
                nm = repr(names[i]) if names is not None else f"[{i}]"
                raise ValueError(f"initial value of {nm}: {e}") from None
        return z
