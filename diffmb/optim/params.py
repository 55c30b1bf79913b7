"""Physical parameters chosen by name, read from and written into a Model (and force elements).

Names
-----
=================================  ========  =============================================
``body.<body>.mass``               ()        ``model.body_mass[i]`` [kg]
``body.<body>.com``                (3,)      centre of mass in the body frame [m]
``body.<body>.inertia``            (6,)      inertia about the com, body axes, unique entries
                                             ``[Ixx, Iyy, Izz, Ixy, Ixz, Iyz]`` [kg m²]
``body.<body>.inertia_diag``       (3,)      its diagonal ``[Ixx, Iyy, Izz]`` (off-diagonal kept)
``body.<body>.inertial``           (10,)     all ten: ``[m, cx, cy, cz, Ixx, Iyy, Izz, Ixy, Ixz,
                                             Iyz]`` (com and inertia as above)
``joint.<joint>.damping``          (nv_j,)   viscous damping of the joint's dofs (``()`` for a
                                             1-dof joint) [N m s/rad or N s/m]
``joint.<joint>.stiffness``        (nv_j,)   joint spring [N m/rad or N/m]
``joint.<joint>.armature``         (nv_j,)   reflected rotor inertia [kg m² or kg]
``sensor.<channel>.<field>``       ()        gain, bias or delay [s] of a measured channel
                                             (:mod:`diffmb.optim.sensors`; ``forces["sensors"]``)
``force.<elem>.<field>``           any       an array field of the force element ``forces[elem]``
                                             (equinox Module), e.g. ``force.aero.CLa``, or of
                                             one of its sub-modules: ``force.floor.terrain.heights``
``force.<elem>.<field>[i]``        ()        entry i of a vector field, the others kept (one
                                             pair's friction: ``force.contacts.mu[0]``)
``force.<elem>.timeconst``         (np,)     a contact element's solref time constant T [s] per
                                             pair (> 0); the stiffness and damping built from
                                             solref (a file's, or the mass-normalised
                                             defaults) follow it: k, k_t ∝ 1/T², b, b_t ∝ 1/T
``force.<elem>.dampratio``         (np,)     its solref damping ratio ζ per pair (> 0): k, k_t
                                             ∝ 1/ζ² (MuJoCo's b' = 2/(d_max T) does not
                                             depend on ζ; a file's stiction damper ∝ 1/ζ)
=================================  ========  =============================================

What an element derives from the masses follows a written ``body.*`` or ``joint.*.armature``
parameter (its ``with_model``): a contact element's rows' ``invweight``
(``normal="constraint"``), as MuJoCo recomputes ``body_invweight0`` when it compiles a model
with other masses. (The spring laws' gains, built from the masses, stay as built.)

Body and joint names are ``model.body_names`` / ``model.joint_names`` (verbatim from the file).
Unknown bodies, joints, fields or elements raise ``KeyError`` naming the offender and listing
what exists.

A contact element's fields (``mu``, ``stiffness``, ``timeconst``, ...) are checked against the
ranges its constructor enforces (``timeconst``, ``dampratio`` > 0, ``mu`` ≥ 0, ...); fitting
``timeconst`` or ``dampratio`` of an element whose stiffness and damping were all given
explicitly (or with the Hunt–Crossley law) is refused: nothing would follow them. Fit either
solref or the stiffness/damping it sets, not both (each write rescales what follows solref).

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

:func:`default_transform` is ``positive`` for mass, inertia_diag, damping, armature (and a contact
element's ``timeconst``, ``dampratio``), the
identity otherwise. :class:`Transforms` maps a whole flat vector, one :class:`Transform` per
entry (this is what :func:`~diffmb.optim.least_squares`, :func:`~diffmb.optim.fit` and
:func:`~diffmb.optim.trajopt` use).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
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
    "physical_inertia",
    "expand",
]

_BODY_FIELDS = ("mass", "com", "inertia", "inertia_diag", "inertial")
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
    if field == "inertial":
        rows = jnp.array([a for a, _ in _IU])
        cols = jnp.array([b for _, b in _IU])

        def get_all(m, f):
            return jnp.concatenate([m.body_mass[i][None], m.body_com[i],
                                    m.body_inertia[i][rows, cols]])

        def set_all(m, f, x):
            x = jnp.asarray(x)
            Ic = jnp.zeros((3, 3), x.dtype).at[rows, cols].set(x[4:]).at[cols, rows].set(x[4:])
            m = eqx.tree_at(lambda t: (t.body_mass, t.body_com, t.body_inertia), m,
                            (m.body_mass.at[i].set(x[0]), m.body_com.at[i].set(x[1:4]),
                             m.body_inertia.at[i].set(Ic)))
            return m, f

        def check_all(m, x):
            Ic = np.zeros((3, 3))
            Ic[[a for a, _ in _IU], [b for _, b in _IU]] = x[4:]
            Ic[[b for _, b in _IU], [a for a, _ in _IU]] = x[4:]
            _check_body(name, body, float(x[0]), Ic)

        return Param(name, (10,), get_all, set_all, check_all)
    if field == "inertia_diag":
        d = jnp.arange(3)

        def set_diag(m, f, x):
            Ic = m.body_inertia[i].at[d, d].set(x)
            return eqx.tree_at(lambda t: t.body_inertia, m, m.body_inertia.at[i].set(Ic)), f

        def check_diag(m, x):
            Ic = _concrete(m.body_inertia)
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
    index = None
    m = re.fullmatch(r"(.*)\[(\d+)\]", path)
    if m:  # one entry of an array field: force.<elem>.<field>[i]
        path, index = m.group(1), int(m.group(2))
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
    if index is not None:
        if len(shape) != 1 or not index < shape[0]:
            raise KeyError(f"parameter {name!r}: {field!r} of element {elem!r} has shape "
                           f"{shape}; an index [i] picks one entry of a vector, i < its length")
        whole = _force_param(forces, name, path)
        full = lambda f: jnp.broadcast_to(jnp.asarray(at(f[elem])), shape)  # noqa: E731

        def set_entry(m, f, x):
            return whole.set(m, f, full(f).at[index].set(jnp.reshape(x, ())))

        def check_entry(m, x):  # the entry in the field's ranges (the others as built)
            if whole.check is not None:
                v = np.array(full(forces), dtype=float)
                v[index] = x
                whole.check(m, v)

        return Param(name, (), lambda m, f: full(f)[index], set_entry, check_entry)

    def get(m, f):
        return jnp.asarray(at(f[elem]))

    # an element may derive fields from others (a contact element's stiffness from its solref)
    # and check its own ranges: with_parameter(field, x) and check_parameter(field, x)
    hook = len(attrs) == 1 and hasattr(owner, "with_parameter")

    def set_(m, f, x):
        f = dict(f)
        old = at(f[elem])
        x = jnp.reshape(jnp.asarray(x), shape)
        if hook:
            f[elem] = f[elem].with_parameter(field, x)
        elif not eqx.is_array(old):  # a Python float field: replace it by an array leaf
            f[elem] = eqx.tree_at(at, f[elem], x, is_leaf=lambda v: v is old)
        else:
            f[elem] = eqx.tree_at(at, f[elem], x)
        return m, f

    check = None
    if len(attrs) == 1 and hasattr(owner, "check_parameter"):
        def check(m, x):
            try:
                owner.check_parameter(field, x)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"parameter {name!r}: {exc}") from None

    return Param(name, shape, get, set_, check)


def _sensor_param(model: Model, forces, name: str, channel: str, field: str) -> Param:
    """``sensor.<channel>.<gain|bias|delay>``: an entry of ``forces["sensors"]``
    (:class:`~diffmb.optim.sensors.Sensors`)."""
    from .sensors import SENSOR_FIELDS, Sensors

    if field not in SENSOR_FIELDS:
        raise KeyError(f"parameter {name!r}: unknown sensor field {field!r}; choose "
                       f"{SENSOR_FIELDS}")
    sens = None if forces is None else forces.get("sensors")
    if not isinstance(sens, Sensors):
        raise KeyError(f"parameter {name!r}: sensor parameters need a Sensors(model) in forces "
                       "under the key 'sensors'")
    k = sens.index(model, name, channel)

    def set_(m, f, x):
        f = dict(f)
        f["sensors"] = eqx.tree_at(lambda e: getattr(e, field), f["sensors"],
                                   getattr(f["sensors"], field).at[k].set(x))
        return m, f

    def check(m, x):
        if field == "delay" and x < 0:
            raise ValueError(f"parameter {name!r}: a negative delay is non-causal, got {x}")

    return Param(name, (), lambda m, f: getattr(f["sensors"], field)[k], set_, check)


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
    if len(parts) < 3 or parts[0] not in ("body", "joint", "force", "sensor"):
        raise KeyError(
            f"parameter {name!r}: expected 'body.<name>.<field>', 'joint.<name>.<field>', "
            "'force.<element>.<field>' or 'sensor.<channel>.<field>'"
        )
    kind, field = parts[0], parts[-1]
    target = ".".join(parts[1:-1])  # names may contain dots
    if kind == "sensor":
        return _sensor_param(model, forces, name, target, field)
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
        if forces and any(k.startswith("body.") or k.endswith(".armature") for k in values):
            # what the elements derive from the masses follows them (a contact's rows' weight)
            forces = {k: e.with_model(model) if hasattr(e, "with_model") else e
                      for k, e in forces.items()}
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


def expand(model: Model, patterns, forces: Mapping | None = None) -> list[str]:
    """Parameter names from patterns with shell wildcards in the body or joint name:
    ``"body.*.mass,joint.*.damping"`` (a comma-separated string or a list) -> one name per
    matching body or joint, in the model's order. A pattern that
    matches nothing raises ``KeyError`` naming it; names without wildcards pass unchanged."""
    import fnmatch

    if isinstance(patterns, str):
        patterns = [p for p in (x.strip() for x in patterns.split(",")) if p]
    out: list[str] = []
    for pat in patterns:
        parts = pat.split(".")
        if len(parts) < 3 or not any(ch in pat for ch in "*?["):
            out.append(pat)
            continue
        kind, target, field = parts[0], ".".join(parts[1:-1]), parts[-1]
        if kind == "body":
            pool = list(model.body_names)
        elif kind == "joint":
            pool = list(model.joint_names)
        else:
            raise KeyError(f"parameter pattern {pat!r}: wildcards are allowed in body and joint "
                           "names only")
        hits = [f"{kind}.{n}.{field}" for n in pool if fnmatch.fnmatchcase(n, target)]
        if not hits:
            raise KeyError(f"parameter pattern {pat!r} matches no {kind}; {kind}s: {pool}")
        out += hits
    return list(dict.fromkeys(out))


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


# Block transforms of inertial parameters (Rucker & Wensing 2022, "Smooth parameterization of
# rigid-body inertia"): the 4 x 4 pseudo-inertia J = [[Σ_o, m c], [m cᵀ, m]] (Σ_o the second
# moment of mass about the body origin) is positive definite exactly when the body is physically
# realisable (m > 0, Σ_c = Σ_o − m c cᵀ ≻ 0, which implies I_c ⪰ 0 and the triangle
# inequalities). J = U Uᵀ with U = e^α [[A, c], [0, 1]], A upper triangular with an exponential
# diagonal: every z maps to a realisable body and every realisable body has one z.
_BLOCK = {"pseudo_inertia": 10, "inertia_cholesky": 6}
_TRIU = ((0, 0), (1, 1), (2, 2), (0, 1), (1, 2), (0, 2))  # A's entries: d1 d2 d3 s12 s23 s13


def _upper_from(z6):
    """A (3, 3) upper triangular from (d1, d2, d3, s12, s23, s13): exp on the diagonal."""
    z6 = jnp.asarray(z6)
    diag = jnp.exp(z6[:3])
    A = jnp.zeros((3, 3), z6.dtype)
    A = A.at[(0, 1, 2), (0, 1, 2)].set(diag)
    return A.at[(0, 1, 0), (1, 2, 2)].set(z6[3:])


def _unique(Ic):
    return jnp.stack([Ic[a, b] for a, b in _IU])


def _sigma_c(Ic):
    """Second moment of mass about the com from the inertia about the com (numpy)."""
    return 0.5 * np.trace(Ic) * np.eye(3) - Ic


def _upper_cholesky(S):
    """A upper triangular with A Aᵀ = S (S positive definite), as the 6 log/raw entries."""
    P = np.eye(3)[::-1]
    A = P @ np.linalg.cholesky(P @ S @ P) @ P
    return np.concatenate([np.log(np.diag(A)), [A[0, 1], A[1, 2], A[0, 2]]])


def _feasible_sigma(S, what: str, scale: float = 1.0):
    """Σ_c projected onto the positive definite cone (eigenvalues >= 1e-12 of the largest), with an
    :class:`~diffmb.model.InertiaWarning` naming ``what`` when it moved."""
    S = 0.5 * (S + S.T)
    w, V = np.linalg.eigh(S)
    floor = 1e-12 * max(float(w.max()), 1e-300)
    if w.min() >= floor:
        return S
    w2 = np.maximum(w, floor)
    S2 = (V * w2) @ V.T
    Ic_old, Ic_new = (scale * (np.trace(X) * np.eye(3) - X) for X in (S, S2))
    warnings.warn(
        f"{what}: the inertia {np.round(Ic_old, 12).tolist()} is not strictly realisable (second "
        f"moment about the com has eigenvalues {np.round(scale * w, 12).tolist()}); starting "
        f"from the nearest realisable one {np.round(Ic_new, 12).tolist()}", InertiaWarning,
        stacklevel=4)
    return S2


@dataclasses.dataclass(frozen=True)
class Transform:
    """``p = forward(z)`` (traceable), ``z = inverse(p)`` (numpy), ``lo < p < hi`` open.

    Scalar kinds map each entry alone; the block kinds ``"pseudo_inertia"`` (10 entries of
    ``body.<b>.inertial``) and ``"inertia_cholesky"`` (6 entries of ``body.<b>.inertia``) map a
    whole parameter (see :func:`physical_inertia`)."""

    kind: str
    lo: float | None = None
    hi: float | None = None

    @property
    def block(self) -> int:
        return _BLOCK.get(self.kind, 1)

    def forward(self, z):
        if self.kind == "pseudo_inertia":
            z = jnp.asarray(z)
            m = jnp.exp(2.0 * z[0])
            A = _upper_from(z[1:7])
            S = A @ A.T
            Ic = jnp.trace(S) * jnp.eye(3, dtype=z.dtype) - S
            return jnp.concatenate([m[None], z[7:10], m * _unique(Ic)])
        if self.kind == "inertia_cholesky":
            A = _upper_from(z)
            S = A @ A.T
            return _unique(jnp.trace(S) * jnp.eye(3, dtype=S.dtype) - S)
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
        """dp/dz at z (traceable); scalar kinds only (a block's Jacobian is a full matrix, see
        :meth:`Transforms.jacobian`)."""
        if self.kind in _BLOCK:
            raise TypeError(f"the {self.kind!r} transform maps a block: use Transforms.jacobian")
        if self.kind == "identity":
            return jnp.ones_like(z)
        if self.kind in ("positive", "lower"):
            return jnp.exp(z)
        if self.kind == "upper":
            return -jnp.exp(z)
        s = jax.nn.sigmoid(z)
        return (self.hi - self.lo) * s * (1.0 - s)

    def inverse(self, p, what: str = "inertia"):
        p = np.asarray(p, dtype=float)
        if not np.all(np.isfinite(p)):
            raise ValueError(f"value {p} is not finite")
        if self.kind in _BLOCK:
            Ic = np.zeros((3, 3))
            u = p[4:] if self.kind == "pseudo_inertia" else p
            Ic[[a for a, _ in _IU], [b for _, b in _IU]] = u
            Ic[[b for _, b in _IU], [a for a, _ in _IU]] = u
            if self.kind == "inertia_cholesky":
                return _upper_cholesky(_feasible_sigma(_sigma_c(Ic), what))
            if not p[0] > 0:
                raise ValueError(f"mass {p[0]} is not positive")
            S = _feasible_sigma(_sigma_c(Ic / p[0]), what, scale=p[0])
            return np.concatenate([[0.5 * np.log(p[0])], _upper_cholesky(S), p[1:4]])
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


def physical_inertia(field: str) -> Transform:
    """The block transform that keeps ``body.<b>.<field>`` physically realisable: for
    ``inertial`` (mass, com, inertia) the log-Cholesky factor of the 4 x 4 pseudo-inertia (all
    ten together), for ``inertia`` alone the log-Cholesky factor of the second moment of mass
    about the com, Σ_c = ½ tr(I_c) 1 − I_c ≻ 0 (with the mass positive, this is the same
    condition). A starting value that is not strictly realisable (a zero or flat inertia, a
    violated triangle inequality) starts from the nearest realisable one, with an
    :class:`~diffmb.model.InertiaWarning`."""
    kinds = {"inertial": "pseudo_inertia", "inertia": "inertia_cholesky"}
    if field not in kinds:
        raise ValueError(f"no physical-inertia transform for field {field!r}; choose {list(kinds)}")
    return Transform(kinds[field])


def default_transform(name: str) -> Transform:
    """``positive`` for mass, inertia_diag, damping and armature (and a contact element's
    ``timeconst`` and ``dampratio``); :func:`physical_inertia` for
    ``body.<b>.inertial`` and ``body.<b>.inertia``; the identity otherwise."""
    field = name.split(".")[-1]
    if name.startswith("body.") and field in ("inertial", "inertia"):
        return physical_inertia(field)
    if field in ("mass", "inertia_diag", "damping", "armature") or (
            name.startswith("force.") and field in ("timeconst", "dampratio")):
        return positive()
    return identity()


@dataclasses.dataclass(frozen=True)
class Transforms:
    """One :class:`Transform` per entry of a flat vector: ``p = forward(z)`` entrywise.

    Hashable (a tuple of frozen transforms), so it may be static under ``jit``. Entries that
    share a transform are mapped together (one vector operation per distinct transform).
    """

    items: tuple

    @property
    def size(self) -> int:
        return len(self.items)

    def __post_init__(self):
        object.__setattr__(self, "items", tuple(self.items))
        i = 0
        while i < len(self.items):  # a block transform covers `block` consecutive entries
            k = self.items[i].block
            if k > 1 and self.items[i : i + k] != (self.items[i],) * k:
                raise ValueError(f"the {self.items[i].kind!r} transform needs {k} consecutive "
                                 f"entries from entry {i}")
            i += k

    @property
    def diagonal(self) -> bool:
        """True when every entry is mapped alone (no block transform)."""
        return all(t.block == 1 for t in self.items)

    def _groups(self):
        """(transform, index array) per distinct transform; a block transform's indices are
        (n_blocks, block)."""
        idx: dict = {}
        for i, t in enumerate(self.items):
            idx.setdefault(t, []).append(i)
        return [(t, np.asarray(ii).reshape(-1, t.block) if t.block > 1 else np.asarray(ii))
                for t, ii in idx.items()]

    def _map(self, method: str, z):
        z = jnp.asarray(z)
        out = jnp.zeros_like(z)
        for t, ii in self._groups():
            if t.block > 1:
                out = out.at[ii].set(jax.vmap(getattr(t, method))(z[ii]))
            else:
                out = out.at[ii].set(getattr(t, method)(z[ii]))
        return out

    def forward(self, z):
        """p (n,) from z (n,) (traceable)."""
        return self._map("forward", z)

    def derivative(self, z):
        """dp/dz (n,) when the Jacobian is diagonal (no block transform; traceable)."""
        return self._map("derivative", z)

    def jacobian(self, z):
        """dp/dz (n, n), block diagonal (traceable)."""
        if self.diagonal:
            return jnp.diag(self.derivative(z))
        return jax.jacfwd(self.forward)(jnp.asarray(z))

    def inverse(self, p, names: Sequence[str] | None = None) -> np.ndarray:
        """z (n,) from p (n,) (numpy); a value outside its interval raises ``ValueError``
        naming the entry (``names[i]``, or its index)."""
        p = np.asarray(p, dtype=float).reshape(-1)
        if p.size != self.size:
            raise ValueError(f"expected {self.size} values, got {p.size}")
        z = np.empty(self.size)
        i = 0
        while i < self.size:
            t = self.items[i]
            k = t.block
            nm = (repr(names[i].split("[")[0]) if k > 1 else repr(names[i])) \
                if names is not None else f"[{i}]"
            try:
                z[i : i + k] = t.inverse(p[i : i + k], what=f"initial value of {nm}") \
                    if k > 1 else t.inverse(p[i])
            except ValueError as e:
                raise ValueError(f"initial value of {nm}: {e}") from None
            i += k
        return z


def force_elements(forces, owner: str = "forces") -> tuple[dict, bool]:
    """``({name: element}, named)`` of ``forces``: a sequence of force elements (named ``_0``,
    ``_1``, ...) or a dict ``{name: element}`` whose ``"sensors"`` entry may be a
    :class:`~diffmb.optim.sensors.Sensors`. Anything else is refused with ``TypeError``."""
    from ..forces.elements import AbstractForce
    from .sensors import Sensors

    named = isinstance(forces, Mapping)
    items = dict(forces) if named else {f"_{i}": f for i, f in enumerate(forces)}
    for k, e in items.items():
        if named and k == "sensors" and isinstance(e, Sensors):
            continue
        if not isinstance(e, AbstractForce):
            where = f"{owner}[{k!r}]" if named else f"{owner}[{k[1:]}]"
            raise TypeError(f"{where}: expected a force element (a diffmb.forces.AbstractForce),"
                            f" got {type(e).__name__}")
    return items, named


def control_consumer(fdict: Mapping):
    """The first element of ``fdict`` that consumes the control vector (``uses_ctrl``), or None;
    the ``"sensors"`` entry is no force element."""
    return next((e for k, e in fdict.items() if k != "sensors" and e.uses_ctrl), None)
