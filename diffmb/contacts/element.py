"""The contact force element: geoms on bodies against a terrain, as body wrenches.

:class:`Contacts` (stiction friction, stateful: the default) and :class:`CoulombContacts`
(regularised Coulomb, stateless) are force elements for :func:`diffmb.simulate`: they return
``tau = 0`` and ``f_ext`` (nbody, 6) = [force, torque] in the world frame at each body's centre
of mass (torque = (p − com) × f), summed over every candidate point of every geom
(:mod:`~diffmb.contacts.geometry`); the laws are :mod:`~diffmb.contacts.law`.

The numbers are checked when the element is built from concrete values (a ``ValueError``
naming the class, the field, the value and its range: ``stiffness`` > 0, ``damping`` ≥ 0,
``mu`` ≥ 0, ``exponent`` ≥ 1, ``dissipation`` ≥ 0, ``tangential_*`` > 0, ``eps`` > 0,
``timeconst``, ``dampratio`` > 0, 0 < ``dmin`` ≤ ``dmax`` < 1; geom bodies within ``model``);
traced values are not checked. Before a run :func:`diffmb.simulate` calls
:meth:`AbstractGroundForce.check_initial`: a geom that starts deeper in the terrain than
:data:`MAX_INITIAL_PENETRATION` (0.5) of its own size is refused by name.

Default parameters: mass-normalised (MuJoCo's solref/solimp)
-----------------------------------------------------------
MuJoCo's soft contact with ``solref = (T, ζ)`` and ``solimp = (dmin, dmax, ...)`` moves a
contact of effective mass m by a = (1 − d) a₀ + d (−b' δ̇ − k' δ) with b' = 2/(dmax T),
k' = 1/(dmax² T² ζ²) and impedance d ∈ [dmin, dmax] (rising with δ over solimp's width; here
its mid value d = (dmin + dmax)/2): a weight m g rests at δ = (1 − d) g/(d k'), the deflection
of a spring k = m d/(1−d) k', and the motion has damping ratio √d ζ ≈ ζ (critically damped at
ζ = 1). :func:`soft_contact_params` returns, per candidate point, the spring with MuJoCo's
deflection and the damper with damping ratio ζ:

    d = (dmin + dmax)/2,  r = d/(1 − d),  m_pt = m_eff / n_active,
    k = m_pt r / (dmax² T² ζ²),   b = 2 ζ √(k m_pt) = m_pt √r · 2/(dmax T)

so a body resting on its ``n_active`` points (box: 4 corners) has the same total stiffness as
on one. Defaults (T = 0.02 s, ζ = 1, d = 0.925, r = 12.33): k/m_pt = 34 164 s⁻², ω = 184.8 rad/s,
b/m_pt = 369.7 s⁻¹; a body rests at δ = g m_pt/k = 0.287 mm. (Scaling b by r instead of √r,
b = m_pt r 2/(dmax T), keeps the deflection too but gives ζ_eff = ζ √r = 3.5 and a stiff
eigenvalue of −1271 s⁻¹ per point, up to −3900 s⁻¹ in the rocking modes of a flat box: outside
RK4's stability region at dt = 1 ms.) The tangential spring of the stiction law gets k_t = k
and the critical damping b_t = 2 ζ √(k_t m_pt). ``effective_mass`` is MuJoCo's
``body_invweight0`` analogue: 1/(mean diagonal of J M⁻¹ Jᵀ) of the body's com translation (m
for a free body).

Stability with the default solver (RK4, fixed step)
---------------------------------------------------
RK4 is stable on the negative real axis for h|λ| ≤ 2.785, on the imaginary axis for
h|λ| ≤ 2.83: at dt = 1 ms, up to |λ| ≈ 2800 s⁻¹. Per point the defaults give the double
root λ = −ω = −184.8 s⁻¹. On 4 corners a box's modes are at most 3× faster: the rocking modes
(corners at ±a, half-height c: I = m (a² + c²)/3) have stiffness and damping 4 (k, b) a² on
inertia I, i.e. (k, b)/m_pt times 3 a²/(a² + c²) ≤ 3 (overdamped: fast root ≤ 3 b/m_pt =
1109 s⁻¹), and the yaw mode (corners at (±a, ±a′)) is damped by 4 b_t (a² + a′²) on inertia
m (a² + a′²)/3, again 3 b_t/m_pt = 1109 s⁻¹. So h|λ| ≤ 1.11 for any box (≈ 1.2 measured for a cube, the full Jacobian of (q, v, z)
with the stiction states: ``tests/test_contacts.py``), well inside the region. For other
bodies and steps keep dt · 3 · 2 √r /(dmax T) · (m_pt/m_mode) ≤ 2.78, m_mode the smallest
effective mass a point feels in the contact's modes.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics.api import mass_matrix
from ..dynamics.kinematics import body_coms, body_jacobian, kinematics
from ..forces.elements import AbstractForce, AbstractStatefulForce, soft_constraint_gains
from ..model import Model
from ..validation import check_choice, check_value, is_concrete
from . import law as L
from .geometry import AbstractGeom, body_index, candidates
from .terrain import AbstractTerrain

__all__ = [
    "AbstractGroundForce",
    "MAX_INITIAL_PENETRATION",
    "Contacts",
    "CoulombContacts",
    "AbstractContacts",
    "ContactResult",
    "soft_contact_params",
    "effective_mass",
    "contact_forces",
]


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def soft_contact_params(m_eff, timeconst=0.02, dampratio=1.0, dmin=0.9, dmax=0.95, n_active=1):
    """Per-point normal stiffness k [N/m] and damping b [N s/m] of a body of effective mass
    ``m_eff`` [kg] resting on ``n_active`` points, from MuJoCo's solref (``timeconst`` [s],
    ``dampratio``) and solimp (``dmin``, ``dmax``): see the module docstring. The same mapping
    as :func:`diffmb.forces.elements.soft_constraint_gains`, applied to m_eff/n_active (the
    masses may be traced)."""
    return soft_constraint_gains(_f64(m_eff) / n_active, (timeconst, dampratio), (dmin, dmax))


def effective_mass(model: Model, body, q=None):
    """1 / (mean diagonal of J M⁻¹ Jᵀ), J (3, nv) the Jacobian of the com of ``body`` (name or
    index): the mass a force at the com feels (MuJoCo's ``body_invweight0``); at q (default
    ``model.qpos0``)."""
    q = model.qpos0 if q is None else _f64(q)
    J = body_jacobian(model, q, body)[3:]
    A = J @ jnp.linalg.solve(mass_matrix(model, q), J.T)
    return 3.0 / jnp.trace(A)


def _params(geoms, model, q, normal, stiffness, damping, mu, exponent, dissipation,
            tangential_stiffness, tangential_damping, eps, timeconst, dampratio, dmin, dmax):
    """The per-geom parameter arrays (ng,) (and eps ()), defaults filled in."""
    ng = len(geoms)
    full = lambda x: jnp.broadcast_to(_f64(x), (ng,))
    need = [x is None for x in (stiffness, damping, tangential_stiffness, tangential_damping)]
    k_soft = b_soft = m_pt = None
    if any(need):
        if model is None:
            raise ValueError("Contacts: pass model= for the mass-normalised default stiffness and"
                             " damping (or give stiffness, damping, tangential_stiffness and "
                             "tangential_damping)")
        bodies = [body_index(model, g.body) for g in geoms]
        per_body = {b: effective_mass(model, b, q) for b in set(bodies)}
        m = jnp.stack([per_body[b] for b in bodies])
        na = np.array([g.n_active for g in geoms], dtype=float)
        k_soft, b_soft = soft_contact_params(m, timeconst, dampratio, dmin, dmax, na)
        m_pt = m / na
    n = full(exponent)
    k_lin = k_soft if stiffness is None else full(stiffness)
    if normal == "hunt_crossley" and stiffness is None:
        # same rest penetration δ0 = m_pt g / k as the linear law: k_hc δ0ⁿ = k δ0, and the
        # same damping at rest: k_hc δ0ⁿ c = b
        g = jnp.sqrt(jnp.sum(model.gravity**2))
        delta0 = m_pt * g / k_soft
        k = k_soft * delta0 ** (1.0 - n)
        c = b_soft / (k_soft * delta0) if dissipation is None else full(dissipation)
    else:
        k = k_lin
        c = full(0.0 if dissipation is None else dissipation)
    b = b_soft if damping is None else full(damping)
    kt = k_lin if tangential_stiffness is None else full(tangential_stiffness)
    bt = 2.0 * dampratio * jnp.sqrt(kt * m_pt) if tangential_damping is None \
        else full(tangential_damping)
    return dict(stiffness=k, damping=b, exponent=n, dissipation=c, mu=full(mu),
                tangential_stiffness=kt, tangential_damping=bt, eps=_f64(eps).reshape(()))


MAX_INITIAL_PENETRATION = 0.5
"""Largest initial penetration accepted, as a fraction of a geom's own size
(:meth:`~diffmb.contacts.geometry.AbstractGeom.thickness`: a sphere's radius, a box's smallest
half-size, ...). A compliant contact started deeper stores the energy of a spring compressed
far beyond its rest deflection (~0.3 mm with the defaults) and launches the body: a sphere
started 0.5 m below the floor would leave it at tens of m/s."""


class AbstractGroundForce(eqx.Module):
    """A force element between bodies and a terrain (:class:`Contacts`,
    :class:`CoulombContacts`, :class:`~diffmb.contacts.terramechanics.WheelSoil`).

    ``check_initial(model, q0)`` is called by :func:`diffmb.simulate` with the initial
    configuration (when it is concrete, not under a trace) and raises ``ValueError`` naming the
    shape and its depth when a shape starts deeper in the ground than the element allows."""

    @abc.abstractmethod
    def check_initial(self, model: Model, q) -> None:
        raise NotImplementedError

    def _initial_values(self, depths, model: Model, q):
        """``depths(self, model, q)`` as a numpy array when the element, the model and ``q``
        are concrete (also inside an outer trace), else None: nothing to check."""
        if not (is_concrete(q) and is_concrete(self) and is_concrete(model)):
            return None
        with jax.ensure_compile_time_eval():
            out = depths(self, model, jnp.asarray(q, dtype=jnp.float64))
        return np.asarray(out) if is_concrete(out) else None


class _Points(eqx.Module):
    """Everything at the candidate points (nc = Σ n_points), world frame."""

    point: jnp.ndarray  # (nc, 3)
    normal: jnp.ndarray  # (nc, 3)
    penetration: jnp.ndarray  # (nc,)
    velocity: jnp.ndarray  # (nc, 3)
    fn: jnp.ndarray  # (nc,)
    ft: jnp.ndarray  # (nc, 3)
    dz: jnp.ndarray  # (nc, 3)
    f_ext: jnp.ndarray  # (nbody, 6)


def _evaluate(el, model: Model, q, v, z) -> _Points:
    kin = kinematics(model, q, v)
    cand = candidates(model, el.geoms, el.terrain, q, v, kin=kin)
    gi = np.asarray(el.point_geom)
    bodies = np.asarray(cand.body)
    ddelta = -jnp.sum(cand.normal * cand.velocity, axis=-1)
    fn = L.normal_force(el.normal, cand.penetration, ddelta, el.stiffness[gi], el.damping[gi],
                        el.dissipation[gi], el.exponent[gi])
    ft, dz = L.tangential(el.friction, fn, cand.velocity, cand.normal, z, el.mu[gi],
                          el.tangential_stiffness[gi], el.tangential_damping[gi], el.eps)
    f = fn[:, None] * cand.normal + ft
    com = body_coms(model, kin)[bodies] + kin.origin
    w = jnp.concatenate([f, jnp.cross(cand.point - com, f)], axis=1)
    f_ext = jnp.zeros((model.n_bodies, 6)).at[bodies].add(w)
    return _Points(cand.point, cand.normal, cand.penetration, cand.velocity, fn, ft, dz, f_ext)


class AbstractContacts(AbstractGroundForce):
    """What both contact elements hold: ``geoms`` (a tuple of
    :mod:`~diffmb.contacts.geometry` shapes), a ``terrain``, the static law choices ``normal``
    and ``friction``, and the per-geom parameters (ng,), traced (``force.<name>.mu`` etc. in
    :mod:`diffmb.optim`): ``stiffness`` k [N/m or N/mⁿ], ``damping`` b [N s/m] (linear law),
    ``exponent`` n and ``dissipation`` c [s/m] (Hunt–Crossley), ``mu``,
    ``tangential_stiffness`` k_t [N/m] and ``tangential_damping`` b_t [N s/m] (stiction), and
    the Coulomb law's regularising speed ``eps`` [m/s] (scalar)."""

    geoms: tuple
    terrain: AbstractTerrain
    stiffness: jnp.ndarray
    damping: jnp.ndarray
    exponent: jnp.ndarray
    dissipation: jnp.ndarray
    mu: jnp.ndarray
    tangential_stiffness: jnp.ndarray
    tangential_damping: jnp.ndarray
    eps: jnp.ndarray
    normal: str = eqx.field(static=True)
    friction: str = eqx.field(static=True)
    point_geom: tuple = eqx.field(static=True)  # (nc,) geom index of each candidate point

    @property
    def n_points(self) -> int:
        """Number of candidate points nc (Σ of the geoms' ``n_points``)."""
        return len(self.point_geom)

    def evaluate(self, model: Model, q, v, state=None) -> _Points:
        """Points, normals, penetrations, velocities, forces (nc, ...) and the body wrenches
        at (q, v) (and stiction state (nc, 3), default zeros)."""
        z = jnp.zeros((self.n_points, 3)) if state is None else state
        return _evaluate(self, model, q, v, z)

    def energy(self, model: Model, q, state=None):
        """Elastic energy stored in the contacts (J): the normal springs, and the stiction
        springs ½ k_t |z|² when ``state`` z (nc, 3) is given."""
        r = self.evaluate(model, q, jnp.zeros(model.nv))
        gi = np.asarray(self.point_geom)
        e = jnp.sum(L.normal_energy(self.normal, r.penetration, self.stiffness[gi],
                                    self.exponent[gi]))
        if state is not None:
            e = e + 0.5 * jnp.sum(self.tangential_stiffness[gi] * jnp.sum(state**2, axis=-1))
        return e

    def check_initial(self, model: Model, q) -> None:
        """Refuse a geom that starts deeper in the terrain than :data:`MAX_INITIAL_PENETRATION`
        times its own size (a ValueError naming the geom, its depth and the limit); nothing
        under a trace. Points (no size) are not checked."""
        pen = self._initial_values(_penetrations, model, q)
        if pen is None:
            return
        gi = np.asarray(self.point_geom)
        for i, (g, name) in enumerate(zip(self.geoms, _geom_names(self), strict=True)):
            size = float(g.thickness())
            depth = float(np.max(pen[gi == i]))
            if size > 0 and depth > MAX_INITIAL_PENETRATION * size:
                raise ValueError(
                    f"{model.name}: geom {name!r} ({g.kind}) starts {depth:.4g} m deep in "
                    f"terrain {self.terrain.name!r}, more than {MAX_INITIAL_PENETRATION:g} of "
                    f"its size {size:.4g} m: start it on or above the ground (a compliant "
                    "contact this deep would launch it)")


@eqx.filter_jit
def _penetrations(el, model, q):
    return candidates(model, el.geoms, el.terrain, q).penetration


def _geom_names(el) -> list:
    return [g.name if g.name is not None else f"{g.kind}{i}" for i, g in enumerate(el.geoms)]


# admissible ranges of the law parameters: (lo, lo_open)
_RANGES = dict(stiffness=(0.0, True), damping=(0.0, False), mu=(0.0, False),
               exponent=(1.0, False), dissipation=(0.0, False),
               tangential_stiffness=(0.0, True), tangential_damping=(0.0, True),
               eps=(0.0, True), timeconst=(0.0, True), dampratio=(0.0, True),
               dmin=(0.0, True), dmax=(0.0, True))


def _check_params(owner, ng, kw):
    for field, (lo, lo_open) in _RANGES.items():
        val = kw.get(field)
        if val is None:
            continue
        if field == "tangential_stiffness" and owner == "CoulombContacts":
            continue
        shape = () if field in ("eps", "timeconst", "dampratio", "dmin", "dmax") else None
        check_value(owner, field, val, lo=lo, lo_open=lo_open, shape=shape,
                    hi=1.0 if field in ("dmin", "dmax") else None,
                    hi_open=field in ("dmin", "dmax"))
        if shape is None and is_concrete(val) and np.ndim(val) > 0 and \
                np.shape(val) not in ((ng,), (1,)):
            raise TypeError(f"{owner}.{field}: expected one number or one per geom ({ng},), "
                            f"got shape {np.shape(val)}")
    if is_concrete((kw["dmin"], kw["dmax"])) and float(kw["dmin"]) > float(kw["dmax"]):
        raise ValueError(f"{owner}.dmin = {float(kw['dmin']):g}: must be <= dmax = "
                         f"{float(kw['dmax']):g}")


def _init(self, geoms, terrain, friction, model, q, normal, **kw):
    owner = type(self).__name__
    if isinstance(geoms, AbstractGeom):
        geoms = (geoms,)
    geoms = tuple(geoms)
    if not geoms:
        raise ValueError(f"{owner}.geoms: give at least one geom")
    for i, g in enumerate(geoms):
        if not isinstance(g, AbstractGeom):
            raise TypeError(f"{owner}.geoms[{i}] = {g!r}: not a contact geom (Sphere, Box, ...)")
    if not isinstance(terrain, AbstractTerrain):
        raise TypeError(f"{owner}.terrain = {terrain!r}: not a terrain (Plane, HeightField)")
    check_choice(owner, "normal", normal, L.NORMAL_LAWS)
    if model is not None and not isinstance(model, Model):
        raise TypeError(f"{owner}.model = {model!r}: not a diffmb Model")
    _check_params(owner, len(geoms), kw)
    if q is not None and model is not None:
        check_value(owner, "q", q, shape=(model.nq,))
    if model is not None:
        for i, g in enumerate(geoms):
            body_index(model, g.body, f"{owner}.geoms[{i}]")  # now rather than inside a trace
    self.geoms, self.terrain = geoms, terrain
    self.normal, self.friction = normal, friction
    for name, val in _params(geoms, model, q, normal, **kw).items():
        setattr(self, name, val)
    self.point_geom = tuple(i for i, g in enumerate(geoms) for _ in range(g.n_points))


_DOC_ARGS = """
    ``geoms``: :mod:`~diffmb.contacts.geometry` shapes; ``terrain``: a Plane/HeightField.
    Parameters, each a number or one per geom (traced): ``stiffness`` k, ``damping`` b
    (default: mass-normalised from ``model`` at ``q`` (default ``model.qpos0``) by
    :func:`soft_contact_params` with ``timeconst``, ``dampratio``, ``dmin``, ``dmax``), ``mu``
    (1.0), ``normal`` = "linear" (default) or "hunt_crossley" (``exponent`` n, ``dissipation``
    c; with the default stiffness, k and c give the same rest penetration and rest damping as
    the linear law; with a given stiffness c defaults to 0).
"""


class Contacts(AbstractContacts, AbstractStatefulForce):
    """Compliant contacts with spring–damper stiction (the default friction).

    State: the tangential deformations z (n_points, 3) [m], zero initially. Returns
    ``(tau = 0, f_ext (nbody, 6), ż)``. ``tangential_stiffness`` k_t (default k) and
    ``tangential_damping`` b_t (default 2 ζ √(k_t m_pt), critical) set the stiction spring.
    """

    def __init__(self, geoms, terrain, *, model=None, q=None, stiffness=None, damping=None,
                 mu=1.0, normal="linear", exponent=1.0, dissipation=None,
                 tangential_stiffness=None, tangential_damping=None, timeconst=0.02,
                 dampratio=1.0, dmin=0.9, dmax=0.95):
        _init(self, geoms, terrain, "stiction", model, q, normal, stiffness=stiffness,
              damping=damping, mu=mu, exponent=exponent, dissipation=dissipation,
              tangential_stiffness=tangential_stiffness, tangential_damping=tangential_damping,
              eps=1e-3, timeconst=timeconst, dampratio=dampratio, dmin=dmin, dmax=dmax)

    def init_state(self, model):
        return jnp.zeros((self.n_points, 3))

    def stateful_call(self, model, t, q, v, ctrl, state):
        r = _evaluate(self, model, q, v, state)
        return jnp.zeros(model.nv), r.f_ext, r.dz


class CoulombContacts(AbstractContacts, AbstractForce):
    """Compliant contacts with regularised Coulomb friction (stateless):
    f_t = −μ f_n v_t/√(|v_t|² + ε²), ``eps`` ε [m/s] (default 1e-3). Returns
    ``(tau = 0, f_ext (nbody, 6))``."""

    def __init__(self, geoms, terrain, *, model=None, q=None, stiffness=None, damping=None,
                 mu=1.0, eps=1e-3, normal="linear", exponent=1.0, dissipation=None,
                 timeconst=0.02, dampratio=1.0, dmin=0.9, dmax=0.95):
        _init(self, geoms, terrain, "coulomb", model, q, normal, stiffness=stiffness,
              damping=damping, mu=mu, exponent=exponent, dissipation=dissipation,
              tangential_stiffness=0.0, tangential_damping=1.0, eps=eps, timeconst=timeconst,
              dampratio=dampratio, dmin=dmin, dmax=dmax)

    def __call__(self, model, t, q, v, ctrl):
        r = _evaluate(self, model, q, v, jnp.zeros((self.n_points, 3)))
        return jnp.zeros(model.nv), r.f_ext


Contacts.__init__.__doc__ = _DOC_ARGS
CoulombContacts.__init__.__doc__ = _DOC_ARGS


class ContactResult(eqx.Module):
    """Contact points along a trajectory, world frame; ns saves (leading axes of the
    trajectory), nc candidate points of all contact elements: ``point`` (ns, nc, 3) m,
    ``normal`` (ns, nc, 3), ``penetration`` (ns, nc) m (−:data:`~diffmb.contacts.terrain.NO_GROUND`
    for a point beyond a height field's extent), ``fn`` (ns, nc) N (≥ 0), ``ft``
    (ns, nc, 3) N, ``velocity`` (ns, nc, 3) m/s of the contact points; ``pairs``: (geom name,
    terrain name) of each point. ``result["fn"]`` works too."""

    point: jnp.ndarray
    normal: jnp.ndarray
    penetration: jnp.ndarray
    velocity: jnp.ndarray
    fn: jnp.ndarray
    ft: jnp.ndarray
    pairs: tuple = eqx.field(static=True)

    def __getitem__(self, key):
        return getattr(self, key)

    def keys(self):
        return ("point", "normal", "penetration", "velocity", "fn", "ft", "pairs")


def _pairs(el) -> list:
    out = []
    for g, gname in zip(el.geoms, _geom_names(el), strict=True):
        out += [(gname, el.terrain.name)] * g.n_points
    return out


@eqx.filter_jit
def _evaluate_many(el, model, q, v, z):
    return jax.vmap(lambda qi, vi, zi: _evaluate(el, model, qi, vi, zi))(q, v, z)


def contact_forces(model: Model, traj, forces) -> ContactResult:
    """Evaluate the contact elements among ``forces`` (the tuple given to ``simulate``) along
    ``traj`` (a :class:`~diffmb.Trajectory`: ts, q (..., nq), v (..., nv), aux holding the
    stiction states), concatenating their points; see :class:`ContactResult`."""
    forces = tuple(forces)
    states = None
    if traj.aux is not None and traj.aux[0] is not None:
        states = traj.aux[0]
    lead = traj.q.shape[:-1]
    q = traj.q.reshape(-1, model.nq)
    v = traj.v.reshape(-1, model.nv)
    parts, pairs = [], []
    for k, el in enumerate(forces):
        if not isinstance(el, AbstractContacts):
            continue
        if isinstance(el, Contacts):
            if states is None or states[k] is None:
                raise ValueError("contact_forces: traj.aux holds no stiction state for the "
                                 f"Contacts element at forces[{k}]: pass the same forces as "
                                 "to simulate")
            z = states[k].reshape(-1, el.n_points, 3)
        else:
            z = jnp.zeros((q.shape[0], el.n_points, 3))
        r = _evaluate_many(el, model, q, v, z)
        parts.append(r)
        pairs += _pairs(el)
    if not parts:
        raise ValueError("contact_forces: no Contacts/CoulombContacts element in forces")
    cat = lambda name, tail: jnp.concatenate([getattr(r, name) for r in parts], axis=1).reshape(
        *lead, -1, *tail)
    return ContactResult(cat("point", (3,)), cat("normal", (3,)), cat("penetration", ()),
                         cat("velocity", (3,)), cat("fn", ()), cat("ft", (3,)), tuple(pairs))
