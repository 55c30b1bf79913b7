"""The contact force element: pairs of geoms and terrains, as body wrenches.

:class:`Contacts` (stiction friction, stateful: the default) and :class:`CoulombContacts`
(regularised Coulomb, stateless) are force elements for :func:`diffmb.simulate`: they return
``tau = 0`` and ``f_ext`` (nbody, 6) = [force, torque] in the world frame at each body's centre
of mass (torque = (p − com) × f), summed over every candidate point of every pair
(:mod:`~diffmb.contacts.geometry`); the laws are :mod:`~diffmb.contacts.law`.

Pairs
-----
One element holds every pair of a robot and evaluates its kinematics once. A pair is a geom A
(on a body, or on the world with ``body="world"``) and an "other side" B: a terrain (Plane,
HeightField) or another geom. ``Contacts(geoms, terrain)`` pairs every geom with one terrain;
``Contacts(geoms, others)`` with a sequence pairs ``geoms[i]`` with ``others[i]`` (a terrain or
a geom; the same geom object may appear in several pairs). Which side gives the candidate
points: against a terrain, A's; between geoms, a round geom's (point, sphere, capsule: A's if A
is round, else B's if B is round), otherwise both directions (A's points in B and B's points in
A: a box on a box is carried by the upper box's corners). Every pair has a fixed number of
points. At each point the law sees the penetration into the other geom (its signed distance,
:meth:`~diffmb.contacts.geometry.AbstractGeom.signed_distance_local`) plus the pair's
``margin`` (the contact acts from that distance) and the relative velocity of the two bodies'
material points there; the force +f acts on the body giving the point and −f on the other at
the same point (nothing on the world or a terrain), so momentum is conserved.

The numbers are checked when the element is built from concrete values (a ``ValueError``
naming the class, the field, the value and its range: ``stiffness`` > 0, ``damping`` ≥ 0,
``mu`` ≥ 0, ``exponent`` ≥ 1, ``dissipation`` ≥ 0, ``tangential_*`` > 0, ``eps`` > 0,
``timeconst``, ``dampratio`` > 0, 0 < ``dmin`` ≤ ``dmax`` < 1, ``margin`` finite; geom bodies
within ``model``); traced values are not checked. Before a run :func:`diffmb.simulate` calls
:meth:`AbstractGroundForce.check_initial`: a pair that starts deeper than
:data:`MAX_INITIAL_PENETRATION` (0.5) of its thinner geom's size is refused naming both.

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
for a free body); a pair of two bodies takes m_eff = 1/(1/m_A + 1/m_B) as MuJoCo adds their
``body_invweight0`` (the world's is 0), and ``n_active`` of the side giving the points (the
larger of the two when both do).

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
effective mass a point feels in the contact's modes. The implicit contact step
(``solver="implicit"``, :class:`~diffmb.simulation.ImplicitContactEuler`, through
:meth:`AbstractContacts.linearise`) has no such bound: it takes the file's own 5–20 ms.
"""

from __future__ import annotations

import abc
import copy

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics._world import _inv3
from ..dynamics.api import mass_matrix
from ..dynamics.crba import crba_kin
from ..dynamics.kinematics import (
    body_coms,
    body_frames,
    body_jacobian,
    kinematics,
    masked_partial_velocities,
    partial_velocities,
    point_velocities,
    support_mask,
)
from ..dynamics.rnea import rnea_kin
from ..dynamics.small_linalg import cho_factor, cho_solve
from ..forces.elements import (
    AbstractForce,
    AbstractStatefulForce,
    SoftRows,
    soft_constraint_gains,
)
from ..model import Model
from ..spatial import quaternion as quatm
from ..validation import check_choice, check_value, is_concrete
from . import law as L
from .geometry import AbstractGeom, PosedGeom, body_index, bounding_radius
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
    "ContactLinearisation",
    "backward_smoothed",
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


def _rigid_weight(model: Model):
    """An inverse weight below which a contact counts as unmovable: 1e-10 / the total mass."""
    return 1e-10 / jnp.maximum(jnp.sum(model.body_mass), 1e-300)


def _point_inv_weight(model: Model, q, a, b=None):
    """trace(J M⁻¹ Jᵀ)/3 of the relative velocity of geoms ``a`` and ``b`` (None: the world) at
    the centre of ``a``; where no joint moves that point, the rotational inverse weight
    trace(Ω M⁻¹ Ωᵀ)/3 times the square of ``a``'s bounding radius. Raises ValueError, naming
    the geoms, where no joint moves ``a`` relative to ``b`` at all: such a pair never pushes."""
    from .geometry import geom_frames

    q = model.qpos0 if q is None else _f64(q)
    kin = kinematics(model, q)
    (_, x), = geom_frames(model, kin, [a])
    x = x - kin.origin
    J = jnp.zeros((3, model.nv))
    W = jnp.zeros((3, model.nv))
    for g, sign in ((a, 1.0), (b, -1.0)):
        if g is not None and _bid(model, g) >= 0:
            V, Om = partial_velocities(model, kin, x[None], [_bid(model, g)])
            J, W = J + sign * V[0], W + sign * Om[0]
    Minv = jnp.linalg.inv(mass_matrix(model, q))
    w = jnp.trace(J @ Minv @ J.T) / 3.0
    turning = jnp.trace(W @ Minv @ W.T) / 3.0 * bounding_radius(a) ** 2
    tiny = _rigid_weight(model)
    w = jnp.where(w > tiny, w, turning)
    if is_concrete(w) and not float(w) > float(tiny):
        other = "the ground" if b is None else f"geom {b.name!r}"
        raise ValueError(f"Contacts: geom {a.name!r} (body {a.body!r}) against {other}: no "
                         "joint moves the geom, so the pair can never push; leave it out")
    return w


ROUND = ("point", "sphere", "capsule")

#: the normal laws of a contact element: the pointwise springs of :mod:`~diffmb.contacts.law`
#: and "constraint", MuJoCo's soft constraint rows solved against the load (:func:`_rows_of`)
NORMALS = L.NORMAL_LAWS + ("constraint",)


def _is_world(body) -> bool:
    return isinstance(body, str) and body == "world"


def _bid(model: Model, g, owner="geom") -> int:
    """Body index of geom ``g`` in ``model``; -1 for the world."""
    return -1 if _is_world(g.body) else body_index(model, g.body, owner)


def pair_inv_weights(el, model: Model, q=None):
    """Per pair (np,), the inverse weight MuJoCo gives its contact rows: the sum of the two
    bodies' :func:`effective_mass` inverses (0 for the world), or, where neither body's com
    translates (a link turning about it), the inverse weight of their relative motion at the
    geom (:func:`_point_inv_weight`); at q (default ``model.qpos0``; traceable)."""
    per_body = {}

    def inv_weight(b):
        if b < 0:
            return jnp.zeros(())
        if b not in per_body:
            per_body[b] = 1.0 / effective_mass(model, b, q)
        return per_body[b]

    out = []
    for ia, kind, ib in el.pairs:
        a = el.geoms[ia]
        other = el.geoms[ib] if kind == "geom" else None
        w = inv_weight(_bid(model, a))
        if other is not None:
            w = w + inv_weight(_bid(model, other))
        if not is_concrete(w):
            w = jnp.where(w > _rigid_weight(model), w, _point_inv_weight(model, q, a, other))
        elif not float(w) > float(_rigid_weight(model)):
            w = _point_inv_weight(model, q, a, other)
        out.append(w)
    return jnp.stack(out)


def _params(el, model, q, normal, stiffness, damping, mu, exponent, dissipation,
            tangential_stiffness, tangential_damping, eps, margin, timeconst, dampratio, dmin,
            dmax, torsion=0.0, rolling=0.0, spin_eps=0.05, invweight=None):
    """The per-pair parameter arrays (np,) (and eps ()), defaults filled in."""
    npair = len(el.pairs)
    full = lambda x: jnp.broadcast_to(_f64(x), (npair,))
    need = [x is None for x in (stiffness, damping, tangential_stiffness, tangential_damping)]
    k_soft = b_soft = m_pt = None
    rows = normal == "constraint" and invweight is None  # the rows' weight from the model
    if any(need) or rows:
        if model is None:
            raise ValueError("Contacts: pass model= for the mass-normalised default stiffness and"
                             " damping (or give stiffness, damping, tangential_stiffness and "
                             "tangential_damping; with normal='constraint' also invweight)")
        m = 1.0 / pair_inv_weights(el, model, q)
        na = np.array(el.pair_active, dtype=float)
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
    scale = None  # the rows' invweight over the model's pair inverse weight at qpos0
    if normal == "constraint" and invweight is None:
        invweight = 1.0 / m
        scale = jnp.ones(npair) if q is None else invweight / pair_inv_weights(el, model)
    elif normal == "constraint":
        invweight = full(invweight)
    follow = []  # the defaulted fields, as powers (T, ζ) of solref
    if normal in ("linear", "constraint"):
        follow = [(f, *SOLREF_POWERS[f]) for f, dflt in zip(SOLREF_POWERS, need, strict=True)
                  if dflt]
        if stiffness is not None:  # k_t defaults to the given k
            follow = [x for x in follow if x[0] != "tangential_stiffness"]
        if "tangential_stiffness" not in [x[0] for x in follow]:  # b_t = 2 ζ √(k_t m) ∝ ζ
            follow = [(f, 0.0, 1.0) if f == "tangential_damping" else (f, a, b)
                      for f, a, b in follow]
    return dict(stiffness=k, damping=b, exponent=n, dissipation=c, mu=full(mu),
                tangential_stiffness=kt, tangential_damping=bt, margin=full(margin),
                eps=_f64(eps).reshape(()), torsion=full(torsion), rolling=full(rolling),
                spin_eps=_f64(spin_eps).reshape(()), timeconst=full(timeconst),
                dampratio=full(dampratio), solref_fields=tuple(follow),
                solref_pairs=(True,) * npair if follow else (),
                invweight=invweight if normal == "constraint" else None, invweight_scale=scale)


# how the mass-normalised defaults scale with solref: field ∝ T^a ζ^b (module docstring:
# k ∝ 1/(T ζ)², b = 2 ζ √(k m) ∝ 1/T; the stiction spring k_t = k, b_t = 2 ζ √(k_t m) ∝ 1/T)
SOLREF_POWERS = {"stiffness": (-2.0, -2.0), "damping": (-1.0, 0.0),
                 "tangential_stiffness": (-2.0, -2.0), "tangential_damping": (-1.0, 0.0)}


MAX_INITIAL_PENETRATION = 0.5
"""Largest initial penetration accepted, as a fraction of a geom's own size
(:meth:`~diffmb.contacts.geometry.AbstractGeom.thickness`: a sphere's radius, a box's smallest
half-size, ...; for two geoms the thinner one's). A compliant contact started deeper stores the
energy of a spring compressed far beyond its rest deflection (~0.3 mm with the defaults) and
launches the body: a sphere started 0.5 m below the floor would leave it at tens of m/s."""


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
        are concrete (also inside an outer trace: a compiled call runs at once on concrete
        inputs), else None: nothing to check."""
        if not (is_concrete(q) and is_concrete(self) and is_concrete(model)):
            return None
        q = np.asarray(q, dtype=np.float64)
        arr, static = eqx.partition((self, model), eqx.is_array)
        try:
            run = _compiled_values(depths, arr, static, q)
        except TypeError:  # an unhashable static part: evaluate op by op
            with jax.ensure_compile_time_eval():
                return np.asarray(depths(self, model, jnp.asarray(q)))
        return np.asarray(run(arr, q))


_COMPILED_VALUES: dict = {}


def _compiled_values(depths, arr, static, q):
    """``depths`` compiled for the arrays ``arr`` of (element, model) with static parts
    ``static`` and the state q, once per structure and shapes."""
    key = (depths, static, jax.tree.structure(arr),
           tuple(np.shape(x) for x in jax.tree.leaves(arr)), np.shape(q))
    if key not in _COMPILED_VALUES:
        fn = jax.jit(lambda a, qq: depths(*eqx.combine(a, static), qq))
        # run once per structure: XLA's cheapest compile, not its fastest code
        _COMPILED_VALUES[key] = fn.lower(arr, q).compile(
            {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True})
    return _COMPILED_VALUES[key]


class _Points(eqx.Module):
    """Everything at the candidate points (nc = Σ n_points), world frame; ``normal``, ``ft``
    and ``velocity`` as seen by the pair's geom A (the normal of the force on A, the friction
    force on A, A's velocity relative to B)."""

    point: jnp.ndarray  # (nc, 3)
    normal: jnp.ndarray  # (nc, 3)
    penetration: jnp.ndarray  # (nc,)
    velocity: jnp.ndarray  # (nc, 3)
    fn: jnp.ndarray  # (nc,)
    ft: jnp.ndarray  # (nc, 3)
    dz: jnp.ndarray  # (nc, 3)
    f_ext: jnp.ndarray  # (nbody, 6)


def _geom_frame(model, Rb, pb, o, g):
    """World rotation and origin of geom ``g`` (the world body: its own pose)."""
    b = _bid(model, g)
    if b < 0:
        return quatm.to_rotmat(g.quat), g.pos
    return g.frame(Rb[b], pb[b] + o)


def _blank(g):
    """``g`` without its static body and name, so that geoms of one kind and size stack."""
    g = copy.copy(g)
    object.__setattr__(g, "body", 0)
    object.__setattr__(g, "name", None)
    return g


def _kind(g):
    """What must agree for geoms to share one batched evaluation: the structure and the array
    shapes of the blanked geom."""
    leaves, tree = jax.tree_util.tree_flatten(_blank(g))
    return tree, tuple(np.shape(x) for x in leaves)


def _stack(items):
    return jax.tree.map(lambda *x: jnp.stack(x), *items)


def _raw_points(el, model: Model, kin, cull=False):
    """Per point: world position P, the other side's outward normal n, its signed distance d,
    and the static body indices of the source (force +f) and destination (−f) sides. The
    directions are evaluated in batches of the same geom kinds (one vmapped evaluation per
    kind, so the compiled size grows with the kinds of pairs, not their number) and returned
    in the order of ``el.directions``.

    ``cull``: of a batch of geom–geom directions with more than ⌈max_points / m⌉ of them
    (m points each), only that many are evaluated, those whose bounding spheres are nearest
    (:func:`_nearest`); the others get a distance bound d ≥ margin (no force) and return in
    ``overflow`` (a traced bool, else None) whether any of them might touch."""
    Rb, pb = body_frames(model, kin)
    o = kin.origin
    frames = [_geom_frame(model, Rb, pb, o, g) for g in el.geoms]
    terrains = el.terrains
    groups, src, dst, first = {}, [], [], []
    for k, (_pair, s_idx, d_kind, d_idx, _sign) in enumerate(el.directions):
        gs = el.geoms[s_idx]
        key = (_kind(gs), ("terrain", d_idx) if d_kind == "terrain"
               else _kind(el.geoms[d_idx]))
        groups.setdefault(key, []).append(k)
        bd = -1 if d_kind == "terrain" else _bid(model, el.geoms[d_idx])
        first.append(len(src))
        src += [_bid(model, gs)] * gs.n_points
        dst += [bd] * gs.n_points
    out_P, out_D, out_N, order, overflow = [], [], [], [], []
    for (_, other_key), ks in groups.items():
        dirs = [el.directions[k] for k in ks]
        gs = _stack([_blank(el.geoms[d[1]]) for d in dirs])
        R = jnp.stack([frames[d[1]][0] for d in dirs])
        c = jnp.stack([frames[d[1]][1] for d in dirs])
        if other_key[0] == "terrain":
            terrain = terrains[other_key[1]]
            p, d, n = jax.vmap(lambda g, R, c, t=terrain: g.contacts(R, c, t))(gs, R, c)
        else:
            og = _stack([_blank(el.geoms[d[3]]) for d in dirs])
            oR = jnp.stack([frames[d[3]][0] for d in dirs])
            oc = jnp.stack([frames[d[3]][1] for d in dirs])
            narrow = jax.vmap(lambda g, R, c, og, oR, oc: g.contacts(R, c, PosedGeom(og, oR, oc)))
            cap = -(-el.max_points // el.geoms[dirs[0][1]].n_points)
            if cull and len(dirs) > cap:
                p, d, n, over = _nearest(el, dirs, narrow, (gs, R, c, og, oR, oc), cap)
                overflow.append(over)
            else:
                p, d, n = narrow(gs, R, c, og, oR, oc)
        m = p.shape[1]
        out_P.append(p.reshape(-1, 3))
        out_D.append(d.reshape(-1))
        out_N.append(n.reshape(-1, 3))
        order += [first[k] + i for k in ks for i in range(m)]
    inv = np.empty(len(order), dtype=int)
    inv[np.array(order)] = np.arange(len(order))
    out = (jnp.concatenate(out_P)[inv], jnp.concatenate(out_D)[inv],
           jnp.concatenate(out_N)[inv], np.array(src), np.array(dst))
    if not cull:
        return out
    return out + (jnp.any(jnp.stack(overflow)) if overflow else None,)


def _nearest(el, dirs, narrow, args, cap):
    """``narrow(*args)`` (a batch of geom–geom directions) at the ``cap`` directions whose
    bounding spheres are nearest (the bound |c_a − c_b| − r_a − r_b − margin), the others'
    points at their geom's centre with the distance bound (≥ margin: apart) and an upward
    normal; and whether one left out might touch (its bound ≤ 0)."""
    gs, R, c, og, oR, oc = args
    radius = lambda g: jnp.asarray(bounding_radius(g), jnp.float64)  # noqa: E731
    ra = jnp.stack([radius(el.geoms[d[1]]) for d in dirs])
    rb = jnp.stack([radius(el.geoms[d[3]]) for d in dirs])
    margin = el.margin[np.array([d[0] for d in dirs])]
    gap = jnp.linalg.norm(c - oc, axis=-1) - ra - rb
    bound = jax.lax.stop_gradient(gap - margin)
    neg, sel = jax.lax.top_k(-bound, cap + 1)
    sel = sel[:cap]
    pick = lambda t: jax.tree.map(lambda x: x[sel], t)  # noqa: E731
    p, d, n = narrow(*pick(args))
    m = p.shape[1]
    P = jnp.broadcast_to(c[:, None, :], (len(dirs), m, 3)).at[sel].set(p)
    D = jnp.broadcast_to(jnp.maximum(gap, margin)[:, None], (len(dirs), m)).at[sel].set(d)
    N = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0]), (len(dirs), m, 3)).at[sel].set(n)
    return P, D, N, -neg[cap] <= 0.0


def _acting_point(el, P, d, n):
    """Where the forces act: the candidate point P (on the source geom) for the spring laws;
    for MuJoCo's rows (normal='constraint') the middle of the overlap, P − d n/2, as
    MuJoCo places its contacts (the lever arm of the friction then matches its)."""
    if el.normal != "constraint":
        return P
    return P - 0.5 * d[:, None] * n


def _body_velocities(model, kin, P, bodies):
    """Velocities (k, 3) of the material points P of ``bodies`` (the world's are 0)."""
    moving = bodies >= 0
    _, vp = point_velocities(kin, P - kin.origin, [int(b) for b in np.where(moving, bodies, 0)])
    return jnp.where(moving[:, None], vp, 0.0)


def _body_spins(model, kin, bodies):
    """Angular velocities (k, 3) of ``bodies`` (the world's are 0)."""
    moving = bodies >= 0
    w, _ = point_velocities(kin, jnp.zeros((len(bodies), 3)),
                            [int(b) for b in np.where(moving, bodies, 0)])
    return jnp.where(moving[:, None], w, 0.0)


def _evaluate(el, model: Model, q, v, z, on=None, fn=None, ft=None) -> _Points:
    """The element's points and forces at (q, v, z); ``on`` (nc,) bool: only those points
    push (the others as out of contact); ``fn`` (nc,): the normal forces (normal='constraint':
    solved against the load, :func:`_loaded_points`), ``ft`` (nc, 3) the friction with them
    (friction='pyramid')."""
    kin = kinematics(model, q, v)
    P, d, n, src, dst = _raw_points(el, model, kin)
    P = _acting_point(el, P, d, n)
    pi = np.asarray(el.point_geom)
    sign = np.asarray(el.point_sign, dtype=float)[:, None]
    vrel = _body_velocities(model, kin, P, src) - _body_velocities(model, kin, P, dst)
    pen = -d + el.margin[pi]
    ddelta = -jnp.sum(n * vrel, axis=-1)
    if fn is None:
        if el.normal == "constraint":
            raise TypeError(f"{type(el).__name__}: normal='constraint' forces need the load "
                            "they act against (diffmb.forces.total_force passes it)")
        fn = _normal_force(el, pen, ddelta, pi)
    if on is not None:
        fn = jnp.where(on, fn, 0.0)
    if ft is None:
        ft, dz = L.tangential(el.friction, fn, vrel, n, z, el.mu[pi],
                              el.tangential_stiffness[pi], el.tangential_damping[pi], el.eps,
                              _creep(el, pen, pi))
    else:  # the rows' friction: the stiction states only relax
        dz = -(el.tangential_stiffness[pi] / el.tangential_damping[pi])[:, None] * z
    f = fn[:, None] * n + ft
    com = jnp.concatenate([body_coms(model, kin) + kin.origin, jnp.zeros((1, 3))])
    nb = model.n_bodies
    rows_s, rows_d = np.where(src >= 0, src, nb), np.where(dst >= 0, dst, nb)
    tq = jnp.zeros_like(f)
    if el.spin:  # torsional and rolling friction: a pure torque, +τ on the source side
        wrel = _body_spins(model, kin, src) - _body_spins(model, kin, dst)
        tq = L.spin_friction(fn, wrel, n, el.torsion[pi], el.rolling[pi], el.spin_eps)
    w_s = jnp.concatenate([f, jnp.cross(P - com[rows_s], f) + tq], axis=1)
    w_d = -jnp.concatenate([f, jnp.cross(P - com[rows_d], f) + tq], axis=1)
    f_ext = jnp.zeros((nb + 1, 6)).at[rows_s].add(w_s).at[rows_d].add(w_d)[:nb]
    return _Points(P, sign * n, pen, sign * vrel, fn, sign * ft, dz, f_ext)


class _PointGeometry(eqx.Module):
    """What a contact element's linearisation over a step is taken at: the K linearised
    points' penetrations, normals, relative velocities and spins, stiction states, geoms
    and Jacobians (see :func:`_linearise`)."""

    pen: jnp.ndarray  # (K,)
    n: jnp.ndarray  # (K, 3)
    u: jnp.ndarray  # (K, 3)
    w: jnp.ndarray  # (K, 3)
    z: jnp.ndarray  # (K, 3)
    z_all: jnp.ndarray  # (nc, 3)
    pi: object  # (K,) int: each point's geom
    Jc: jnp.ndarray  # (K, 3, nv)
    Jw: jnp.ndarray  # (K, 3, nv)
    idx: jnp.ndarray = None  # (K,) int: the points linearised (None: all)
    dropped: jnp.ndarray = None
    axis: jnp.ndarray = None  # (K, 3): MuJoCo's first tangent hint (0: none; _frame_axes)


class ContactLinearisation(eqx.Module):
    """One contact element's forces at (q, v, z) and their linearisation over a step of size
    h, for an implicit step (:meth:`AbstractContacts.linearise`): the generalized contact force
    is ``Q`` at the start of the step and Q + A Δv + c at its end to first order, Δv the change
    of the generalized velocities over the step; the stiction state moves by
    ``state_change(Δv)``. For a stage of a multi-stage step whose positions move at another
    rate and whose stiction states at another rate than the element's own (a Rosenbrock
    stage), :meth:`explicit_change` gives the terms that replace ``c`` and ``dz0``.

    The blocks are taken at the K = ``AbstractContacts.max_points`` nearest of the nc
    candidate points (``idx`` (K,), None: all of them); the others are out of contact, their
    stiction states relax (ż = −k_t z / b_t, implicitly: ``hs_free``). ``dropped``: more than K
    points pushed, or a geom pair left out of the narrow phase by its bounding spheres might
    touch (:func:`_raw_points`'s ``cull``); the step then reports
    :data:`~diffmb.systems.CONTACT_OVERFLOW`."""

    Q: jnp.ndarray  # (nv,)
    A: jnp.ndarray  # (nv, nv)
    c: jnp.ndarray  # (nv,)
    dz0: jnp.ndarray  # (nc, 3): Δz at Δv = 0
    dz_du: jnp.ndarray  # (K, 3, 3): Δz per change of the point's relative velocity
    Jc: jnp.ndarray  # (K, 3, nv): the points' relative velocities per generalized velocity
    zd: jnp.ndarray = None  # (nc, 3): the stiction rate ż at the start of the step
    hS: jnp.ndarray = None  # (K, 3, 3): h (I − h ∂ż/∂z)⁻¹
    Fx: jnp.ndarray = None  # (K, 3, 3): ∂f/∂x
    Fz: jnp.ndarray = None  # (K, 3, 3): ∂f/∂z
    Gx: jnp.ndarray = None  # (K, 3, 3): ∂ż/∂x
    Jw: jnp.ndarray = None  # (K, 3, nv): the points' relative spins (with spin friction)
    Tx: jnp.ndarray = None  # (K, 3, 3): ∂torque/∂x (with spin friction)
    on: jnp.ndarray = None  # (nc,) bool: the points that push at the start of the step
    idx: jnp.ndarray = None  # (K,) int: the points linearised (None: all)
    hs_free: jnp.ndarray = None  # (nc,): h / (1 + h k_t / b_t), the others' relaxation
    dropped: jnp.ndarray = None  # () bool: a pushing point was not among the K
    geo: _PointGeometry = None  # where it was taken (for :func:`_relinearise`)
    f: jnp.ndarray = None  # (K, 3): the points' forces at the start
    E: jnp.ndarray = None  # (K, 3, 3): their change per Δu over the step
    cf: jnp.ndarray = None  # (K, 3): their change at Δu = 0
    fn: jnp.ndarray = None  # (K,): normal='constraint': the rows' forces the friction took

    def _spread(self, x):
        """Per-point rows (K, 3) placed at their points (nc, 3), zero elsewhere."""
        if self.idx is None:
            return x
        return jnp.zeros(self.dz0.shape, x.dtype).at[self.idx].add(x)

    def stage_state_change(self, dz0, dv):
        """The stiction states' change over a stage with Δv = ``dv`` whose change at Δv = 0
        is ``dz0`` (nc, 3)."""
        return dz0 + self._spread(jnp.einsum("pij,pjk,k->pi", self.dz_du, self.Jc, dv))

    def state_change(self, dv):
        return self.stage_state_change(self.dz0, dv)

    def explicit_change(self, h, rate, zrate):
        """``(c, dz0)`` when over the step the generalized positions move by h (``rate`` + Δv)
        (``rate`` (nv,) in velocity coordinates) and the stiction states at the rate
        ``zrate`` (nc, 3) before their own implicit part: with ``rate`` = v and ``zrate`` =
        ż these are ``c`` and ``dz0``. The state moves by ``stage_state_change(dz0, Δv)``."""
        mv = lambda X, y: jnp.einsum("pij,pj->pi", X, y)  # noqa: E731
        ru = jnp.einsum("pin,n->pi", self.Jc, rate)
        zr = zrate if self.idx is None else zrate[self.idx]
        dz0 = mv(self.hS, zr + h * mv(self.Gx, ru))
        c = jnp.einsum("pin,pi->n", self.Jc, h * mv(self.Fx, ru) + mv(self.Fz, dz0))
        if self.Tx is not None:
            c = c + h * jnp.einsum("pin,pi->n", self.Jw, mv(self.Tx, ru))
        if self.idx is not None:
            dz0 = (self.hs_free[:, None] * zrate).at[self.idx].set(dz0)
        return c, dz0


def _spring_stiffness(el, pen, pi):
    """The normal spring's stiffness at the points ``pi`` at penetration ``pen``: k, or with the
    element's ``solimp`` k g(δ)/g(δ_k) (:func:`~diffmb.contacts.law.impedance_stiffness`)."""
    k = el.stiffness[pi]
    if el.solimp is None:
        return k
    return L.impedance_stiffness(pen, k, el.solimp[pi], el.solimp_depth[pi])


def _creep(el, pen, pi):
    """The stiction law's creep rate at the points ``pi`` at penetration ``pen`` (0.0 without
    creep; with ``solimp``, :func:`~diffmb.contacts.law.impedance_creep`)."""
    if el.creep is None:
        return 0.0
    if el.solimp is None:
        return el.creep[pi]
    return L.impedance_creep(pen, el.creep[pi], el.solimp[pi], el.solimp_depth[pi])


def _normal_force(el, pen, ddelta, pi, smoothing=True):
    """The normal law at the points ``pi``; with the element's ``backward_smoothing`` (and
    ``smoothing``) its value with the smoothed law's derivative."""
    args = (pen, ddelta, _spring_stiffness(el, pen, pi), el.damping[pi], el.dissipation[pi],
            el.exponent[pi])
    if smoothing and el.backward_smoothing is not None:
        return L.normal_force_backward_smoothed(el.normal, *args, el.backward_smoothing)
    return L.normal_force(el.normal, *args)


def _point_law(el, n, z0, w0, pi, smoothing=True, fn_row=None):
    """Force (3,), ż (3,) and torque (3,) at one point as functions of its penetration, its
    relative velocity u, stiction state change dz and spin change dw (A's side); without
    ``smoothing`` the exact law's derivatives (for the step's Jacobian). ``fn_row``: the
    normal force of a constraint row, held (the force is then the friction alone: the row
    acts in the step's solve)."""

    def law(pen, u, dz, dw):
        fn = fn_row if fn_row is not None else _normal_force(el, pen, -jnp.dot(n, u), pi,
                                                               smoothing)
        ft, zd = L.tangential(el.friction, fn, u, n, z0 + dz, el.mu[pi],
                              el.tangential_stiffness[pi], el.tangential_damping[pi], el.eps,
                              _creep(el, pen, pi))
        tq = jnp.zeros(3)
        if el.spin:
            tq = L.spin_friction(fn, w0 + dw, n, el.torsion[pi], el.rolling[pi], el.spin_eps)
        return (ft if fn_row is not None else fn * n + ft), zd, tq

    return law


def _moving(model, kin, bodies):
    """(k, nv) of 0/1, static: which dofs move each of ``bodies`` (none for the world's)."""
    moving = bodies >= 0
    return support_mask(model, kin, np.where(moving, bodies, 0)) * moving[:, None]


def _stiction_spring(el, n, u, z, pi):
    """The stiction spring–damper's force −k_t P z − b_t P u (P = I − n nᵀ) at the points ``pi``
    (K, 3)."""
    kt, bt = el.tangential_stiffness[pi], el.tangential_damping[pi]
    tangent = lambda x: x - n * jnp.sum(n * x, axis=-1, keepdims=True)  # noqa: E731
    return -kt[:, None] * tangent(z) - bt[:, None] * tangent(u)


def _linear_stiction_blocks(el, pen, n, u, z, pi, trial=None, fn_row=None):
    """The per-point force f, stiction rate ż and their 3 × 3 derivatives with respect to the
    displacement x, the relative velocity u and the state z, in closed form for the linear
    normal law with stiction (what :func:`_point_law` under ``jacfwd`` gives, without it):
    f_n = k δ + b δ̇ (k following ``solimp`` where given) where positive and in contact; the
    friction f_t = f while the spring–damper f = −k_t P z − b_t P u (P = I − n nᵀ) lies in the
    cone |f| ≤ μ f_n, else μ f_n f/|f|; ż = −(f_t + k_t z)/b_t + c f_t with the creep rate c.

    ``trial = (f_L, F_L)`` (K, 3), (K,): a spring force and its bound μ f_n predicted at the
    step's end (:func:`_relinearise`). A point that sticks at the start and whose f_L
    leaves the cone (|f_L| > F_L) slides: f_t is the cone map linearised at (f_L, F_L),
    F f̂_L + (F_L/|f_L|)(I − f̂_L f̂_Lᵀ) f, whose radial part is the bound itself. The step
    then jumps where f_L crosses the cone (the cone map's tangent does: its radial slope
    goes from 1 to 0); a blend over a band beyond the cone, tried to keep it continuous,
    was less accurate against a converged reference at every step tried.

    ``fn_row`` (K,): normal='constraint': the rows' forces solved at the step's start, held
    over the step as MuJoCo's Euler step holds its constraint forces (taking them along the
    rows' own line over the step, f₀ − R⁻¹ J Δv/h, moved the thrown cube further from
    MuJoCo's record); f is then the friction alone (the rows act in the step's solve)."""
    b = el.damping[pi]
    kt, bt, mu = el.tangential_stiffness[pi], el.tangential_damping[pi], el.mu[pi]
    ddelta = -jnp.sum(n * u, axis=-1)
    if fn_row is not None:  # held: no derivative
        fn, act, dspring = fn_row, jnp.zeros_like(pen), jnp.zeros_like(pen)
    else:
        # the spring's force and its derivative (elementwise: the tangent of ones)
        spring, dspring = jax.jvp(lambda p: _spring_stiffness(el, p, pi) * p, (pen,),
                                  (jnp.ones_like(pen),))
        raw = spring + b * ddelta
        act = ((pen > 0) & (raw > 0)).astype(jnp.float64)  # on and positive
        # its value; with backward smoothing that value differentiates as the smoothed law
        # (the blocks below, the step's Jacobian, stay the exact law's)
        fn = act * raw if el.backward_smoothing is None else _normal_force(el, pen, ddelta,
                                                                           pi)
    P = jnp.eye(3) - n[:, :, None] * n[:, None, :]
    fs = _stiction_spring(el, n, u, z, pi)
    F = mu * fn
    nf = L._norm(fs)[:, 0]  # 0 with a zero derivative at fs = 0 (a point at rest)
    # inside the cone; F = 0 (out of contact) is a cone of one point: no friction and no
    # derivative, also at fs = 0
    stick = (nf <= F) & (F > 0)
    slide = ~stick  # on the cone's boundary
    nf_safe = jnp.where(nf > 0, nf, 1.0)
    fhat = fs / nf_safe[:, None]
    ratio = jnp.where(stick, 1.0, F / nf_safe)
    ft = jnp.where(stick[:, None], fs, F[:, None] * fhat)
    # d ft / d fs and d ft / d F (zero while sticking)
    dft_dfs = ratio[:, None, None] * (jnp.eye(3) - jnp.where(
        slide[:, None, None], fhat[:, :, None] * fhat[:, None, :], 0.0))
    dft_dF = jnp.where(slide[:, None], fhat, 0.0)
    if trial is not None:  # a sticking point whose spring leaves the cone over the step
        fL, FL = trial
        nL = L._norm(fL)[:, 0]
        FLp = jnp.maximum(FL, 0.0)
        out = stick & (nL > FLp)
        hL = fL / jnp.where(nL > 0, nL, 1.0)[:, None]
        kL = jnp.where(nL > 0, FLp / jnp.where(nL > 0, nL, 1.0), 0.0)
        across = fs - hL * jnp.sum(hL * fs, axis=-1, keepdims=True)  # (I − f̂_L f̂_Lᵀ) f
        ft = jnp.where(out[:, None], F[:, None] * hL + kL[:, None] * across, ft)
        dft_dfs = jnp.where(out[:, None, None], kL[:, None, None] * (
            jnp.eye(3) - hL[:, :, None] * hL[:, None, :]), dft_dfs)
        dft_dF = jnp.where(out[:, None], hL, dft_dF)
    dfn_dpen = act * dspring
    dfn_du = -(act * b)[:, None] * n
    dft_du = -bt[:, None, None] * dft_dfs @ P + mu[:, None, None] * dft_dF[:, :, None] * \
        dfn_du[:, None, :]
    dft_dz = -kt[:, None, None] * dft_dfs @ P
    dft_dpen = (mu * dfn_dpen)[:, None] * dft_dF
    f = fn[:, None] * n + ft
    # ż = α f_t − k_t z / b_t, α = c − 1/b_t (c the creep rate, varying with δ)
    if el.creep is None:
        cr, dcr = jnp.zeros_like(pen), jnp.zeros_like(pen)
    else:
        cr, dcr = jax.jvp(lambda p: _creep(el, p, pi), (pen,), (jnp.ones_like(pen),))
    alpha = (cr - 1.0 / bt)[:, None, None]
    zd = -(ft + kt[:, None] * z) / bt[:, None] + cr[:, None] * ft
    to_x = lambda d: -d[:, :, None] * n[:, None, :]  # noqa: E731 - ∂/∂x = −∂/∂δ nᵀ
    Fx = to_x(dfn_dpen[:, None] * n + dft_dpen)
    Fu = n[:, :, None] * dfn_du[:, None, :] + dft_du
    Fz = dft_dz
    Gx = alpha * to_x(dft_dpen) + to_x(dcr[:, None] * ft)
    Gu = alpha * dft_du
    Gz = alpha * dft_dz - (kt / bt)[:, None, None] * jnp.eye(3)
    if fn_row is not None:
        f = ft
    return f, zd, (Fx, Fu, Fz), (Gx, Gu, Gz)


def _point_geometry(el, model: Model, q, v, z, kin=None, every=False) -> _PointGeometry:
    """The points' geometry and Jacobians at (q, v, z): the K = ``max_points`` nearest
    (``every``: all nc candidates)."""
    kin = kinematics(model, q) if kin is None else kin
    P, d, n, src, dst, *culled = _raw_points(el, model, kin, cull=not every)
    P = _acting_point(el, P, d, n)
    culled = culled[0] if culled else None
    pi_all = np.asarray(el.point_geom)
    pen0 = -d + el.margin[pi_all]
    nc = el.n_points
    # the points' relative velocity per dof: +1 where a dof moves the source, −1 the
    # destination (a terrain or the world is at rest)
    mask = _moving(model, kin, src) - _moving(model, kin, dst)
    K = nc if every else min(nc, el.max_points)
    idx = dropped = None
    pi, z_all = pi_all, z
    axis = _frame_axes(el, model, kin) if el.friction == "pyramid" else None
    if K < nc:  # the K nearest points (the others are apart: no force, no block)
        top, idx = jax.lax.top_k(jax.lax.stop_gradient(pen0), K + 1)
        idx, dropped = idx[:K], top[K] > 0.0
        P, n, pen0, z = P[idx], n[idx], pen0[idx], z[idx]
        pi, mask = jnp.asarray(pi_all)[idx], jnp.asarray(mask)[idx]
        axis = None if axis is None else axis[idx]
    if culled is not None:
        dropped = culled if dropped is None else dropped | culled
    Jc, Jw = masked_partial_velocities(kin, P - kin.origin, mask)  # (K, 3, nv)
    return _PointGeometry(pen=pen0, n=n, u=Jc @ v, w=Jw @ v, z=z, z_all=z_all, pi=pi, Jc=Jc,
                          Jw=Jw, idx=idx, dropped=dropped, axis=axis)


def _closed_form(el) -> bool:
    """The element's blocks come in closed form (:func:`_linear_stiction_blocks`)."""
    return (el.normal in ("linear", "constraint") and el.friction in ("stiction", "pyramid")
            and not el.spin)


def _rows_of(el, g: _PointGeometry) -> SoftRows:
    """normal='constraint': the points ``g`` as MuJoCo's soft contact rows, forces not yet
    solved: row coordinate y = −δ (the distance beyond the margin), ẏ = n·u (J = nᵀ Jc),
    the pair's ``invweight``, solref (``timeconst``, ``dampratio``) and ``solimp``."""
    pi = g.pi
    sr = jnp.stack([el.timeconst[pi], el.dampratio[pi]], axis=-1)
    if el.friction == "pyramid":
        D = _pyramid_edges(el, g.n, pi, g.axis)  # (K, 4, 3)
        k = g.pen.shape[0]
        J = jnp.einsum("pei,pin->pen", D, g.Jc).reshape(4 * k, -1)
        rep4 = lambda x: jnp.repeat(x, 4, axis=0)  # noqa: E731
        mu = el.mu[pi]
        # the edges' weight (MuJoCo's mj_makeImpedance): 2 μ² (1 + μ²)/impratio of the
        # pair's; a frictionless pair's single normal row as four equal rows in parallel
        scale = jnp.where(jnp.asarray(el.frictionless, bool)[pi], 4.0,
                          2.0 * mu * mu * (1.0 + mu * mu) / el.impratio)
        zero = jnp.zeros(4 * k)
        return SoftRows(J=J, y=rep4(-g.pen), f=zero, active=zero > 0,
                        invweight=rep4(el.invweight[pi] * scale), solref=rep4(sr),
                        solimp=rep4(el.solimp[pi]))
    J = jnp.einsum("pi,pin->pn", g.n, g.Jc)
    zero = jnp.zeros(g.pen.shape)
    return SoftRows(J=J, y=-g.pen, f=zero, active=zero > 0, invweight=el.invweight[pi],
                    solref=sr, solimp=el.solimp[pi])


def _frame_axes(el, model: Model, kin):
    """Per candidate point (nc, 3), the axis MuJoCo's collision function gives its contact
    frame: a capsule's axis where a capsule meets a plane or height field or a sphere (checked
    on MuJoCo's ``contact.frame``), zero elsewhere (``mju_makeFrame``'s default)."""
    Rb, pb = body_frames(model, kin)
    out = []
    for _pair, s_idx, d_kind, d_idx, _sign in el.directions:
        gs = el.geoms[s_idx]
        other = None if d_kind == "terrain" else el.geoms[d_idx]
        cap = gs if gs.kind == "capsule" and (other is None or other.kind == "sphere") else \
            other if other is not None and other.kind == "capsule" and gs.kind == "sphere" \
            else None
        a = (_geom_frame(model, Rb, pb, kin.origin, cap)[0][:, 2] if cap is not None
             else jnp.zeros(3))
        out.append(jnp.broadcast_to(a, (gs.n_points, 3)))
    return jnp.concatenate(out)


def _tangents(n, axis=None):
    """Two unit tangents (K, 3) each of the normals n (K, 3), as MuJoCo's ``mju_makeFrame``
    takes them: ``axis`` (K, 3) where it is given and not along n, else the world y axis (or z
    where n is near y), made orthogonal to n; and n × it."""
    y = jnp.where((jnp.abs(n[:, 1]) < 0.5)[:, None], jnp.array([0.0, 1.0, 0.0]),
                  jnp.array([0.0, 0.0, 1.0]))
    if axis is not None:
        a = axis - jnp.sum(axis * n, axis=-1, keepdims=True) * n
        y = jnp.where((jnp.linalg.norm(a, axis=-1) > 0.5)[:, None], axis, y)
    t1 = y - jnp.sum(y * n, axis=-1, keepdims=True) * n
    t1 = t1 / jnp.linalg.norm(t1, axis=-1, keepdims=True)
    return t1, jnp.cross(n, t1)


def _pyramid_edges(el, n, pi, axis=None):
    """The directions (K, 4, 3) of the four edge rows of MuJoCo's pyramidal cone at each
    point: n ± μ t₁, n ± μ t₂ (:func:`_tangents`, ``axis`` its hint); a frictionless pair's
    all n."""
    t1, t2 = _tangents(n, axis)
    mu = jnp.where(jnp.asarray(el.frictionless, bool)[pi], 0.0, el.mu[pi])[:, None]
    return jnp.stack([n + mu * t1, n - mu * t1, n + mu * t2, n - mu * t2], axis=1)


def _row_point_forces(el, g: _PointGeometry, rows: SoftRows):
    """normal='constraint': the rows' forces as each point's normal force (K,) and friction
    (K, 3) (friction='pyramid': the edges' sum; else zero friction)."""
    if el.friction != "pyramid":
        return rows.f, jnp.zeros(g.n.shape)
    fe = rows.f.reshape(-1, 4)
    f = jnp.einsum("pe,pei->pi", fe, _pyramid_edges(el, g.n, g.pi, g.axis))
    fn = jnp.sum(fe, axis=-1)
    return fn, f - fn[:, None] * g.n


def _friction_force(el, g: _PointGeometry, fn):
    """The friction and spin forces at the points ``g`` with normal forces ``fn``: their
    generalized force (nv,), the friction (K, 3) and ż (K, 3)."""
    pi = g.pi
    ft, dz = L.tangential(el.friction, fn, g.u, g.n, g.z, el.mu[pi],
                          el.tangential_stiffness[pi], el.tangential_damping[pi], el.eps,
                          _creep(el, g.pen, pi))
    Q = jnp.einsum("pin,pi->n", g.Jc, ft)
    if el.spin:
        tq = L.spin_friction(fn, g.w, g.n, el.torsion[pi], el.rolling[pi], el.spin_eps)
        Q = Q + jnp.einsum("pin,pi->n", g.Jw, tq)
    return Q, ft, dz


def _loaded_points(el, model: Model, q, v, z, tau, f_ext, on=None, extra=()):
    """normal='constraint' at (q, v, z) under the load ``tau`` (nv,), ``f_ext`` (the other
    elements' forces): the normal rows solved together as MuJoCo's solver solves them
    (:meth:`~diffmb.forces.SoftRows.solved`), the friction bounded by μ times their force, and the rows solved
    again with that friction in the load (it shifts the load between the points). Returns
    the rows, the generalized force of rows and friction (nv,), ż (nc, 3), and each point's
    normal force (nc,) and friction (nc, 3); ``on`` (nc,) bool: only those points push.
    friction='pyramid': the edge rows carry the friction too, solved once. ``extra``: other
    elements' rows (:class:`~diffmb.forces.SoftRows`, e.g. joint limits) solved together with
    these, as MuJoCo's solver does; then also returns them solved (a list, last)."""
    kin = kinematics(model, q, v)
    g = _point_geometry(el, model, q, v, z, kin, every=True)
    rows = _rows_of(el, g)
    if on is not None:
        on_rows = jnp.repeat(on, 4) if el.friction == "pyramid" else on
        rows = eqx.tree_at(lambda r: r.y, rows, jnp.where(on_rows, rows.y, 1.0))
    cho = cho_factor(crba_kin(model, kin))
    a0 = cho_solve(cho, tau - rnea_kin(model, kin, jnp.zeros(model.nv), f_ext))
    parts = [rows, *extra]
    sizes = [p.y.shape[0] for p in parts]
    every = SoftRows.join(parts)
    out = every.solved(v, cho, a0).split(sizes)
    rows = out[0]
    if el.friction == "pyramid":
        fn, ft = _row_point_forces(el, g, rows)
        relax = el.tangential_stiffness / el.tangential_damping
        res = (rows, rows.tau, -relax[g.pi][:, None] * z, fn, ft)
    else:
        Qf, _, _ = _friction_force(el, g, rows.f)
        out = every.solved(v, cho, a0 + cho_solve(cho, Qf)).split(sizes)
        rows = out[0]
        Qf, ft, dz = _friction_force(el, g, rows.f)
        res = (rows, rows.tau + Qf, dz, rows.f, ft)
    return res + (out[1:],) if extra else res


def _linearise(el, model: Model, q, v, z, h, kin=None) -> ContactLinearisation:
    """Per point, the 3 × 3 derivatives of force, stiction rate and torque with respect to
    the point's displacement x, velocity u, state z and spin w, mapped to generalized
    coordinates by the points' Jacobians. Over a step, x moves by h u₁ (u₁ = u + Δu, the
    positions follow the new velocities) and z by Δz = h (I − h G_z)⁻¹ (ż + G_x h u₁ +
    G_u Δu): the stiction state is eliminated point by point, so only an nv × nv system
    remains. ``kin``: the kinematics at q when the caller has them."""
    return _assemble(el, _point_geometry(el, model, q, v, z, kin), h)


def _assemble(el, g: _PointGeometry, h, trial=None, fn=None) -> ContactLinearisation:
    """The linearisation over a step of size h at the points ``g``; ``trial``: the cone
    linearised at other spring forces (:func:`_linear_stiction_blocks`); ``fn`` (K,):
    normal='constraint': the friction alone, bounded by these row forces."""
    pen0, n, u, z, w, pi, Jc, Jw, idx = g.pen, g.n, g.u, g.z, g.w, g.pi, g.Jc, g.Jw, g.idx
    stiction = el.friction == "stiction"
    # directions: the penetration (the displacement x enters only through δ = δ0 − n·x), u,
    # and where they act, z and w
    argnums = (0, 1) + ((2,) if stiction else ()) + ((3,) if el.spin else ())

    def blocks(pen0, n, u0, z0, w0, pi, fn):
        law = _point_law(el, n, z0, w0, pi, smoothing=False, fn_row=fn)
        zero = jnp.zeros(3)
        f, zd, tq = _point_law(el, n, z0, w0, pi, fn_row=fn)(pen0, u0, zero, zero)
        D = jax.jacfwd(law, argnums=argnums)(pen0, u0, zero, zero)
        full = [[d[argnums.index(a)] if a in argnums else jnp.zeros((3,) + ((3,) if a else ()))
                 for a in range(4)] for d in D]
        # ∂/∂x = −∂/∂δ nᵀ
        for row in full:
            row[0] = -row[0][:, None] * n[None, :]
        return f, zd, tq, full

    if _closed_form(el):
        f, zd, (Fx, Fu, Fz), (Gx, Gu, Gz) = _linear_stiction_blocks(el, pen0, n, u, z, pi,
                                                                    trial, fn)
    else:
        f, zd, tq, D = jax.vmap(blocks, in_axes=(0,) * 6 + (None if fn is None else 0,))(
            pen0, n, u, z, w, jnp.asarray(pi), fn)
        (Fx, Fu, Fz, _), (Gx, Gu, Gz, _), (Tx, Tu, _, Tw) = D
    mv = lambda X, y: jnp.einsum("pij,pj->pi", X, y)  # noqa: E731
    hS = h * _inv3(jnp.eye(3) - h * Gz)  # (K, 3, 3), by the adjugate
    dz0 = mv(hS, zd + h * mv(Gx, u))
    dz_du = hS @ (Gu + h * Gx)
    E = Fu + h * Fx + Fz @ dz_du  # force per Δu
    cf = h * mv(Fx, u) + mv(Fz, dz0)
    on = jnp.any(f != 0.0, axis=-1) if fn is None else fn > 0.0
    hs_free = None
    if idx is not None:  # the others: out of contact, ż = −k_t z / b_t
        nc = el.n_points
        pi_all = np.asarray(el.point_geom)
        gf = -el.tangential_stiffness[pi_all] / el.tangential_damping[pi_all]
        zd_free = gf[:, None] * g.z_all
        hs_free = h / (1.0 - h * gf)
        zd, dz0 = zd_free.at[idx].set(zd), (hs_free[:, None] * zd_free).at[idx].set(dz0)
        on = jnp.zeros(nc, bool).at[idx].set(on)
    Q = jnp.einsum("pin,pi->n", Jc, f)
    A = jnp.einsum("pin,pij,pjm->nm", Jc, E, Jc)
    c = jnp.einsum("pin,pi->n", Jc, cf)
    if el.spin:  # the torque per Δu (through f_n) and per Δw
        Q = Q + jnp.einsum("pin,pi->n", Jw, tq)
        A = A + jnp.einsum("pin,pij,pjm->nm", Jw, Tu + h * Tx, Jc) \
            + jnp.einsum("pin,pij,pjm->nm", Jw, Tw, Jw)
        c = c + h * jnp.einsum("pin,pi->n", Jw, mv(Tx, u))
    return ContactLinearisation(Q=Q, A=A, c=c, dz0=dz0, dz_du=dz_du, Jc=Jc, zd=zd, hS=hS,
                                Fx=Fx, Fz=Fz, Gx=Gx, Jw=Jw if el.spin else None,
                                Tx=Tx if el.spin else None, on=on, idx=idx,
                                hs_free=hs_free, dropped=g.dropped, geo=g, f=f, E=E, cf=cf,
                                fn=fn)


def _relinearise(el, lin: ContactLinearisation, dv, h, fn_end=None) -> ContactLinearisation:
    """``lin`` with the friction cone linearised at the spring forces its own step predicts
    at the step's end for Δv = ``dv`` (and their cone μ f_n): a point that the start's
    linearisation holds sticking while its spring force leaves the cone over the step slides
    instead (a point that slides at the start keeps its slide). Only for the blocks in
    closed form (:func:`_closed_form`); ``lin`` otherwise. normal='constraint': ``fn_end``
    (K,), the rows' forces over the step (MuJoCo's Euler step holds those of its start)."""
    if not (_closed_form(el) and el.friction == "stiction"):
        return lin
    g = lin.geo
    du = jnp.einsum("pin,n->pi", g.Jc, dv)
    mv = lambda X, y: jnp.einsum("pij,pj->pi", X, y)  # noqa: E731
    f1 = lin.f + mv(lin.E, du) + lin.cf
    dz0 = lin.dz0 if g.idx is None else lin.dz0[g.idx]
    fs1 = _stiction_spring(el, g.n, g.u + du, g.z + dz0 + mv(lin.dz_du, du), g.pi)
    fn1 = jnp.sum(g.n * f1, axis=-1) if fn_end is None else fn_end
    F1 = el.mu[g.pi] * jnp.maximum(fn1, 0.0)
    return _assemble(el, g, h, (fs1, F1), lin.fn)


class AbstractContacts(AbstractGroundForce):
    """What both contact elements hold: ``geoms`` (a tuple of the distinct
    :mod:`~diffmb.contacts.geometry` shapes of every pair), ``terrain`` (the first terrain of
    the pairs, None when every pair is between geoms) and ``more_terrains`` (the others), the
    static pair list ``pairs`` ((geom index, "terrain" or "geom", index) per pair), the static
    law choices ``normal`` and ``friction``, and the per-pair parameters (np,), traced
    (``force.<name>.mu`` etc. in :mod:`diffmb.optim`): ``stiffness`` k [N/m or N/mⁿ],
    ``damping`` b [N s/m] (linear law), ``exponent`` n and ``dissipation`` c [s/m]
    (Hunt–Crossley), ``mu``, ``tangential_stiffness`` k_t [N/m] and ``tangential_damping`` b_t
    [N s/m] (stiction), ``margin`` [m] (the contact acts from this distance; 0: from touch),
    ``torsion`` and ``rolling`` [m] (torsional and rolling friction, MuJoCo's ``friction[1]``
    and ``[2]``: torques up to that length × f_n, :func:`~diffmb.contacts.law.spin_friction`,
    evaluated only where given, static ``spin``), their regularising angular speed
    ``spin_eps`` [rad/s] (scalar) and the Coulomb law's regularising speed ``eps`` [m/s]
    (scalar), and solref's ``timeconst`` T [s] and ``dampratio`` ζ: the gains built from
    solref (static ``solref_fields``, on the pairs ``solref_pairs``) follow them when they are
    written (:meth:`with_solref`; ``force.<name>.timeconst``). With one terrain for all
    geoms (``Contacts(geoms, terrain)``), the pairs are the geoms, in order."""

    geoms: tuple
    terrain: AbstractTerrain | None
    more_terrains: tuple
    stiffness: jnp.ndarray
    damping: jnp.ndarray
    exponent: jnp.ndarray
    dissipation: jnp.ndarray
    mu: jnp.ndarray
    tangential_stiffness: jnp.ndarray
    tangential_damping: jnp.ndarray
    margin: jnp.ndarray
    eps: jnp.ndarray
    torsion: jnp.ndarray
    rolling: jnp.ndarray
    spin_eps: jnp.ndarray
    timeconst: jnp.ndarray
    dampratio: jnp.ndarray
    normal: str = eqx.field(static=True)
    friction: str = eqx.field(static=True)
    pairs: tuple = eqx.field(static=True)  # (np,) (geom index, "terrain" | "geom", index)
    pair_active: tuple = eqx.field(static=True)  # (np,) points that carry the pair at once
    # (pair, source geom, "terrain" | "geom", destination index, ±1) per direction
    directions: tuple = eqx.field(static=True)
    point_geom: tuple = eqx.field(static=True)  # (nc,) pair index of each candidate point
    point_sign: tuple = eqx.field(static=True)  # (nc,) +1: A's point, -1: B's point in A
    spin: bool = eqx.field(static=True, default=False)  # torsional/rolling friction evaluated
    # width [m] of the normal law's smoothing in the backward pass only (None: exact)
    backward_smoothing: float | None = eqx.field(static=True, default=None)
    # (field, a, b) per field that follows solref as T^a ζ^b, and per pair whether it does
    solref_fields: tuple = eqx.field(static=True, default=())
    solref_pairs: tuple = eqx.field(static=True, default=())
    # the most points an implicit step linearises (the nearest; ContactLinearisation)
    max_points: int = eqx.field(static=True, default=64)
    # MuJoCo's impedance that the linear spring follows (np, 5) and the depth [m] (np,) at
    # which its stiffness is ``stiffness``; None: a constant stiffness
    solimp: jnp.ndarray | None = None
    solimp_depth: jnp.ndarray | None = None
    # the stiction law's creep rate c [m/(N s)] (np,) (at ``solimp_depth``, following the
    # impedance as (1 − d)/d where ``solimp`` is given); None: the springs stick
    creep: jnp.ndarray | None = None
    # normal='constraint': MuJoCo's inverse weight of each pair's normal row [1/kg] (np,),
    # its regulariser R = (1 − d)/d · invweight; None for the other laws
    invweight: jnp.ndarray | None = None
    # per pair, invweight / the pair's inverse weight in the model at qpos0, where invweight
    # follows the model's masses (:meth:`with_model`); None: invweight is fixed
    invweight_scale: jnp.ndarray | None = None
    # friction='pyramid': MuJoCo's impratio, and per pair whether it is frictionless (one
    # normal row, condim 1) rather than a pyramid of four edge rows
    impratio: float = eqx.field(static=True, default=1.0)
    frictionless: tuple = eqx.field(static=True, default=())

    @property
    def terrains(self) -> tuple:
        """Every distinct terrain of the pairs."""
        return () if self.terrain is None else (self.terrain, *self.more_terrains)

    @property
    def others(self) -> tuple:
        """The other side of each pair (a terrain or a geom), in pair order."""
        return tuple(self.terrains[ib] if kind == "terrain" else self.geoms[ib]
                     for _, kind, ib in self.pairs)

    @property
    def n_points(self) -> int:
        """Number of candidate points nc (Σ over the pairs' directions of the source geom's
        ``n_points``)."""
        return len(self.point_geom)

    def with_backward_smoothing(self, width):
        """This element with ``backward_smoothing = width`` [m] (None: exact derivatives)."""
        new = copy.copy(self)
        object.__setattr__(new, "backward_smoothing",
                           _check_smoothing(type(self).__name__, width))
        return new

    def with_max_points(self, max_points: int):
        """This element with an implicit step linearising at most ``max_points`` contact
        points at once (the nearest): a run in which more push stops with
        :data:`~diffmb.systems.CONTACT_OVERFLOW`."""
        new = copy.copy(self)
        object.__setattr__(new, "max_points", _check_max_points(type(self).__name__,
                                                                max_points))
        return new

    def with_solref(self, timeconst=None, dampratio=None):
        """This element with solref's ``timeconst`` T [s] and/or ``dampratio`` ζ (one number or
        one per pair, > 0; traceable) changed, and the parameters that follow solref rescaled
        to them: those built mass-normalised (the defaults of a linear law, or a file's
        solref, :func:`~diffmb.io.mjcf.contacts_from_mjcf`): k, k_t ∝ 1/(T ζ)², b ∝ 1/T, b_t ∝
        1/T (defaults) or 1/(T ζ) (a file's critical stiction damper), the impedance at the
        file's rest depth held (within about 1 % of a file compiled with the new solref, whose
        rest depth moves with it). Raises ValueError when
        no parameter follows solref (stiffness and damping given, or Hunt–Crossley)."""
        owner = type(self).__name__
        if not self.solref_fields:
            raise ValueError(f"{owner}: no parameter follows solref (timeconst, dampratio): "
                             "stiffness, damping, tangential_stiffness and tangential_damping "
                             "were given, or the normal law is not linear")
        npair = len(self.pairs)
        new = {}
        for field, val in (("timeconst", timeconst), ("dampratio", dampratio)):
            if val is None:
                new[field] = getattr(self, field)
                continue
            check_value(owner, field, val, lo=0.0, lo_open=True)
            if np.ndim(val) > 0 and np.shape(val) not in ((npair,), (1,)):
                raise ValueError(f"{owner}.{field}: expected one number or one per pair "
                                 f"({npair},), got shape {np.shape(val)}")
            new[field] = jnp.broadcast_to(_f64(val), (npair,))
        follow = np.asarray(self.solref_pairs, dtype=bool)
        T = jnp.where(follow, new["timeconst"], 1.0)
        T0 = jnp.where(follow, self.timeconst, 1.0)
        z = jnp.where(follow, new["dampratio"], 1.0)
        z0 = jnp.where(follow, self.dampratio, 1.0)
        names = [f for f, _, _ in self.solref_fields]
        vals = [getattr(self, f) * (T / T0) ** a * (z / z0) ** b
                for f, a, b in self.solref_fields]
        return eqx.tree_at(lambda e: [getattr(e, f) for f in names] + [e.timeconst, e.dampratio],
                           self, vals + [new["timeconst"], new["dampratio"]])

    def following_masses(self, model: Model):
        """This element (``normal='constraint'``) with its rows' ``invweight`` following the
        masses and inertias of the model given to :meth:`with_model`, in proportion to the
        pairs' inverse weights in ``model`` at ``qpos0`` (as MuJoCo recomputes its
        ``body_invweight0`` when a model is compiled with other masses)."""
        if self.normal != "constraint":
            raise ValueError(f"{type(self).__name__}: only normal='constraint' has an invweight "
                             "to follow the masses")
        return eqx.tree_at(lambda e: e.invweight_scale, self,
                           self.invweight / pair_inv_weights(self, model),
                           is_leaf=lambda x: x is None)

    def with_model(self, model: Model):
        """This element with what follows the model's masses recomputed from ``model``: the
        rows' ``invweight`` where it follows them (built from the model, or
        :meth:`following_masses`); itself otherwise. :class:`~diffmb.optim.params.ParamSet`
        calls it after writing a body's mass or inertia (traceable)."""
        if self.invweight_scale is None:
            return self
        return eqx.tree_at(lambda e: e.invweight, self,
                           self.invweight_scale * pair_inv_weights(self, model))

    def with_parameter(self, field: str, value):
        """This element with the array ``field`` set to ``value`` (for
        :mod:`diffmb.optim.params`): ``timeconst`` and ``dampratio`` through
        :meth:`with_solref`, any other field as given."""
        if field in ("timeconst", "dampratio"):
            return self.with_solref(**{field: value})
        return eqx.tree_at(lambda e: getattr(e, field), self, value)

    def check_parameter(self, field: str, value) -> None:
        """Raise ValueError naming the field when a concrete ``value`` is outside the field's
        range (the constructor's checks), or when ``field`` is ``timeconst``/``dampratio`` and
        no parameter follows solref."""
        owner = type(self).__name__
        if field in ("timeconst", "dampratio") and not self.solref_fields:
            self.with_solref()  # raises, naming why
        if field in _RANGES:
            lo, lo_open = _RANGES[field]
            if field == "tangential_stiffness" and isinstance(self, CoulombContacts):
                return
            check_value(owner, field, value, lo=lo, lo_open=lo_open)

    def evaluate(self, model: Model, q, v, state=None, tau=None, f_ext=None, extra=()
                 ) -> _Points:
        """Points, normals, penetrations, velocities, forces (nc, ...) and the body wrenches
        at (q, v) (and stiction state (nc, 3), default zeros). normal='constraint': the
        forces against the load ``tau`` (nv,), ``f_ext`` (the other elements' forces; zero
        and None: gravity and the velocity terms alone), solved with the rows ``extra``
        (joint limits: :meth:`~diffmb.forces.JointLimits.rows`)."""
        z = jnp.zeros((self.n_points, 3)) if state is None else state
        fn = ft = None
        if self.normal == "constraint":
            tau = jnp.zeros(model.nv) if tau is None else tau
            _, _, _, fn, ft, *_ = _loaded_points(self, model, q, v, z, tau, f_ext,
                                                 extra=tuple(extra))
            if self.friction != "pyramid":
                ft = None  # the stiction law again, from fn
        return _evaluate(self, model, q, v, z, fn=fn, ft=ft)

    def linearise(self, model: Model, q, v, state, h, kin=None) -> ContactLinearisation:
        """The forces linearised over a step of size ``h`` (a Python or traced number) from
        (q, v) and stiction state (nc, 3) (None: zeros), for an implicit step: see
        :class:`ContactLinearisation`. ``kin``: ``kinematics(model, q)`` (or with v) when the
        caller has them. normal='constraint': :meth:`step_rows` and :meth:`linearise_at`."""
        if self.normal == "constraint":
            raise TypeError(f"{type(self).__name__}: normal='constraint' linearises with the "
                            "load (step_rows, then linearise_at)")
        z = jnp.zeros((self.n_points, 3)) if state is None else state
        return _linearise(self, model, q, v, z, h, kin)

    @property
    def needs_load(self) -> bool:
        """True for normal='constraint': the rows act against the other elements' load."""
        return self.normal == "constraint"

    @property
    def load_rank(self) -> int:
        """0: :func:`~diffmb.forces.total_force` evaluates the contact rows before the other
        loaded elements (limits, equalities), which then carry them as load."""
        return 0

    def step_rows(self, model: Model, q, v, state, h, kin):
        """normal='constraint' over a step of size ``h``: ``(geometry, rows)``, the K nearest
        points and their rows (:class:`~diffmb.forces.SoftRows`: the normals, with
        friction='pyramid' the cone's edges), forces not yet solved (the step solves them with
        every other row, solref under MuJoCo's ``refsafe`` at h: :meth:`linearise_at`)."""
        z = jnp.zeros((self.n_points, 3)) if state is None else state
        g = _point_geometry(self, model, q, v, z, kin)
        return g, _rows_of(self, g)

    def linearise_at(self, g: _PointGeometry, h, rows) -> ContactLinearisation:
        """The friction at the points ``g`` linearised over the step as :meth:`linearise` does,
        bounded by the solved ``rows``' forces (friction='pyramid': the rows hold it; no
        blocks)."""
        if self.friction == "pyramid":
            return _assemble(self, g, h, fn=jnp.zeros(g.pen.shape))
        return _assemble(self, g, h, fn=rows.f)

    @property
    def relinearises(self) -> bool:
        """Whether :meth:`relinearise` changes a linearisation (the closed-form blocks of the
        linear law with stiction and without spin friction)."""
        return _closed_form(self) and self.friction == "stiction"

    def relinearise(self, lin: ContactLinearisation, dv, h, fn_end=None
                    ) -> ContactLinearisation:
        """``lin`` (from :meth:`linearise` with the same h) with the friction cone taken at
        the end of the step that Δv = ``dv`` predicts: one active-set pass on stick and slip
        (:func:`_relinearise`)."""
        return _relinearise(self, lin, dv, h, fn_end)

    def masked(self, on) -> AbstractForce:
        """This element with only the points ``on`` (nc,) bool pushing, the others as out of
        contact (a later stage of a linearly implicit step keeps out the points that did not
        push at its start, as its linearisation does)."""
        return _MaskedContacts(self, on)

    def energy(self, model: Model, q, state=None):
        """Elastic energy stored in the contacts (J): the normal springs of every pair, and
        the stiction springs ½ k_t |z|² when ``state`` z (nc, 3) is given."""
        pi = np.asarray(self.point_geom)
        if self.normal == "constraint":  # the rows store no energy of their own
            z = jnp.zeros((self.n_points, 3)) if state is None else state
            return 0.5 * jnp.sum(self.tangential_stiffness[pi] * jnp.sum(z**2, axis=-1))
        r = self.evaluate(model, q, jnp.zeros(model.nv))
        if self.solimp is None:
            e = jnp.sum(L.normal_energy(self.normal, r.penetration, self.stiffness[pi],
                                        self.exponent[pi]))
        else:
            e = jnp.sum(L.impedance_energy(r.penetration, self.stiffness[pi], self.solimp[pi],
                                           self.solimp_depth[pi]))
        if state is not None:
            e = e + 0.5 * jnp.sum(self.tangential_stiffness[pi] * jnp.sum(state**2, axis=-1))
        return e

    def check_initial(self, model: Model, q) -> None:
        """Refuse a pair that starts deeper than :data:`MAX_INITIAL_PENETRATION` times the
        size of its thinner geom (a ValueError naming both, the depth and the limit); nothing
        under a trace. Points (no size) are not checked (a pair of a point and a geom: against
        the geom's size)."""
        pen = self._initial_values(_penetrations, model, q)
        if pen is None:
            return
        pi = np.asarray(self.point_geom)
        names = _geom_names(self)
        for i, (ia, kind, ib) in enumerate(self.pairs):
            g = self.geoms[ia]
            with jax.ensure_compile_time_eval():  # concrete sizes also inside an outer trace
                sizes = [float(g.thickness())]
                if kind == "geom":
                    sizes.append(float(self.geoms[ib].thickness()))
            sizes = [s for s in sizes if s > 0]
            if not sizes or not np.any(pi == i):
                continue
            size = min(sizes)
            depth = float(np.max(pen[pi == i]))
            if depth <= MAX_INITIAL_PENETRATION * size:
                continue
            if kind == "terrain":
                raise ValueError(
                    f"{model.name}: geom {names[ia]!r} ({g.kind}) starts {depth:.4g} m deep in "
                    f"terrain {self.terrains[ib].name!r}, more than {MAX_INITIAL_PENETRATION:g} "
                    f"of its size {size:.4g} m: start it on or above the ground (a compliant "
                    "contact this deep would launch it)")
            h = self.geoms[ib]
            raise ValueError(
                f"{model.name}: geoms {names[ia]!r} ({g.kind}) and {names[ib]!r} ({h.kind}) "
                f"start {depth:.4g} m inside each other, more than {MAX_INITIAL_PENETRATION:g} "
                f"of the thinner one's size {size:.4g} m: start them apart or touching (a "
                "compliant contact this deep would launch them)")


def _penetrations(el, model, q):
    nc = el.n_points
    return _evaluate(el, model, q, jnp.zeros(model.nv), jnp.zeros((nc, 3)),
                     fn=jnp.zeros(nc), ft=jnp.zeros((nc, 3))).penetration


def _geom_names(el) -> list:
    return [g.name if g.name is not None else f"{g.kind}{i}" for i, g in enumerate(el.geoms)]


# admissible ranges of the law parameters: (lo, lo_open)
_RANGES = dict(stiffness=(0.0, True), damping=(0.0, False), mu=(0.0, False),
               exponent=(1.0, False), dissipation=(0.0, False), creep=(0.0, False),
               tangential_stiffness=(0.0, True), tangential_damping=(0.0, True),
               eps=(0.0, True), timeconst=(0.0, True), dampratio=(0.0, True),
               dmin=(0.0, True), dmax=(0.0, True), margin=(None, False),
               torsion=(0.0, False), rolling=(0.0, False), spin_eps=(0.0, True),
               invweight=(0.0, True))


def _check_params(owner, npair, kw):
    for field, (lo, lo_open) in _RANGES.items():
        val = kw.get(field)
        if val is None:
            continue
        if field == "tangential_stiffness" and owner == "CoulombContacts":
            continue
        shape = () if field in ("eps", "dmin", "dmax", "spin_eps") else None
        check_value(owner, field, val, lo=lo, lo_open=lo_open, shape=shape,
                    hi=1.0 if field in ("dmin", "dmax") else None,
                    hi_open=field in ("dmin", "dmax"))
        if shape is None and is_concrete(val) and np.ndim(val) > 0 and \
                np.shape(val) not in ((npair,), (1,)):
            raise TypeError(f"{owner}.{field}: expected one number or one per pair ({npair},), "
                            f"got shape {np.shape(val)}")
    if is_concrete((kw["dmin"], kw["dmax"])) and float(kw["dmin"]) > float(kw["dmax"]):
        raise ValueError(f"{owner}.dmin = {float(kw['dmin']):g}: must be <= dmax = "
                         f"{float(kw['dmax']):g}")


# solimp's columns: name, admissible, in words
_SOLIMP_RANGES = (("d_min", lambda x: (x >= 0) & (x <= 1), "in [0, 1]"),
                  ("d_max", lambda x: (x >= 0) & (x <= 1), "in [0, 1]"),
                  ("width", lambda x: x >= 0, ">= 0 [m]"),
                  ("mid", lambda x: (x >= 0) & (x <= 1), "in [0, 1]"),
                  ("power", lambda x: x >= 1, ">= 1"))


def _check_solimp(owner, npair, normal, solimp, depth):
    """``solimp`` as (np, 5) and ``solimp_depth`` as (np,) float arrays (both None, or both
    given), checked where concrete: d_min, d_max and mid in [0, 1] (d is clipped to
    [1e-4, 0.9999] as MuJoCo clips it), width ≥ 0, power ≥ 1, the depth finite and ≥ 0; only
    for the linear law."""
    if solimp is None and depth is None:
        return None, None
    if normal == "constraint" and depth is None:  # the rows' impedance; no spring to follow it
        depth = 0.0
    if solimp is None or depth is None:
        raise ValueError(f"{owner}: give solimp and solimp_depth together (the depth [m] at "
                         "which the spring's stiffness is `stiffness`)")
    if normal not in ("linear", "constraint"):
        raise ValueError(f"{owner}.solimp: the spring follows MuJoCo's impedance only with "
                         f"normal='linear' (and the rows of 'constraint'), not {normal!r}")
    if np.shape(solimp) not in ((5,), (npair, 5)):
        raise TypeError(f"{owner}.solimp: expected (5,) or one row per pair ({npair}, 5), got "
                        f"shape {np.shape(solimp)}")
    if np.shape(depth) not in ((), (1,), (npair,)):
        raise TypeError(f"{owner}.solimp_depth: expected one number or one per pair "
                        f"({npair},), got shape {np.shape(depth)}")
    check_value(owner, "solimp_depth", depth, lo=0.0)
    si = jnp.broadcast_to(_f64(solimp), (npair, 5))
    dep = jnp.broadcast_to(_f64(depth), (npair,))
    if is_concrete(si):
        for j, (name, ok, where) in enumerate(_SOLIMP_RANGES):
            col = np.asarray(si)[:, j]
            bad = ~(np.isfinite(col) & ok(col))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"{owner}.solimp[{i}]: {name} = {col[i]!r} must be {where}")
    return si, dep


def _check_creep(owner, npair, creep):
    """``creep`` [m/(N s)] as a (np,) float array (None: no creep), finite and ≥ 0 where
    concrete."""
    if creep is None:
        return None
    if np.ndim(creep) > 0 and np.shape(creep) not in ((npair,), (1,)):
        raise TypeError(f"{owner}.creep: expected one number or one per pair ({npair},), got "
                        f"shape {np.shape(creep)}")
    check_value(owner, "creep", creep, lo=0.0)
    return jnp.broadcast_to(_f64(creep), (npair,))


def follow_solref(el, timeconst, dampratio, pairs):
    """``el`` (built with explicit stiffness, damping, tangential_stiffness and critical
    tangential_damping 2 √(k_t m_pt), e.g. from a file's solref) recording the solref (T, ζ)
    (np,) they were computed from, so that :meth:`AbstractContacts.with_solref` rescales them
    on the pairs where ``pairs`` (np,) is True."""
    npair = len(el.pairs)
    new = copy.copy(el)
    object.__setattr__(new, "timeconst", jnp.broadcast_to(_f64(timeconst), (npair,)))
    object.__setattr__(new, "dampratio", jnp.broadcast_to(_f64(dampratio), (npair,)))
    pairs = tuple(bool(x) for x in np.broadcast_to(np.asarray(pairs, dtype=bool), (npair,)))
    fields = tuple((f, *SOLREF_POWERS[f]) for f in SOLREF_POWERS if f != "tangential_damping")
    # MuJoCo's creep R/b ∝ T (R does not depend on solref)
    fields = fields + (("tangential_damping", -1.0, -1.0),) + \
        ((("creep", 1.0, 0.0),) if el.creep is not None else ())
    object.__setattr__(new, "solref_fields", fields if any(pairs) else ())
    object.__setattr__(new, "solref_pairs", pairs if any(pairs) else ())
    return new


def backward_smoothed(forces, width):
    """``forces`` (a sequence of force elements, e.g. :func:`diffmb.mjcf_forces`'s) with every
    contact element's ``backward_smoothing`` set to ``width`` [m] (None: exact derivatives)."""
    return tuple(f.with_backward_smoothing(width) if isinstance(f, AbstractContacts) else f
                 for f in forces)


#: the default of :attr:`AbstractContacts.max_points`
MAX_POINTS = 64


def _check_max_points(owner, k):
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"{owner}.max_points = {k!r}: expected a positive integer (the most "
                         "contact points an implicit step linearises at once)")
    return int(k)


def _check_smoothing(owner, width):
    """``backward_smoothing``: None or a width > 0 [m], a static Python float."""
    if width is None:
        return None
    if isinstance(width, bool) or not isinstance(width, (int, float, np.floating, np.integer)):
        raise TypeError(f"{owner}.backward_smoothing = {width!r}: a width in metres (a Python "
                        "number) or None")
    width = float(width)
    if not (np.isfinite(width) and width > 0):
        raise ValueError(f"{owner}.backward_smoothing = {width!r}: must be a finite width > 0 "
                         "[m] (or None: exact gradients)")
    return width


def _index(items, x) -> int:
    """Index of ``x`` in ``items`` by identity, appending it when new."""
    for i, y in enumerate(items):
        if y is x:
            return i
    items.append(x)
    return len(items) - 1


def pair_n_active(geom, other) -> int:
    """How many candidate points of the pair (``geom``, ``other``) carry it at once: against a
    terrain the geom's ``n_active``; between geoms that of the side giving the points (a
    round geom: point, sphere, capsule), the larger of the two when both do."""
    if not isinstance(other, AbstractGeom):
        return geom.n_active
    if geom.kind in ROUND:
        return geom.n_active
    if other.kind in ROUND:
        return other.n_active
    return max(geom.n_active, other.n_active)


def _pair_directions(geoms, pairs):
    """Per pair: its n_active and its directions (source geom, destination, sign)."""
    active, dirs = [], []
    for p, (ia, kind, ib) in enumerate(pairs):
        a = geoms[ia]
        if kind == "terrain":
            active.append(a.n_active)
            dirs.append((p, ia, "terrain", ib, 1))
            continue
        b = geoms[ib]
        active.append(pair_n_active(a, b))
        if a.kind in ROUND:
            dirs.append((p, ia, "geom", ib, 1))
        elif b.kind in ROUND:
            dirs.append((p, ib, "geom", ia, -1))
        else:
            dirs += [(p, ia, "geom", ib, 1), (p, ib, "geom", ia, -1)]
    return tuple(active), tuple(dirs)


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
    if isinstance(terrain, (AbstractTerrain, AbstractGeom)):
        others = (terrain,) * len(geoms)
    elif isinstance(terrain, (list, tuple)):
        others = tuple(terrain)
        if len(others) != len(geoms):
            raise TypeError(f"{owner}.terrain: one terrain or geom per geom ({len(geoms)}), "
                            f"got {len(others)}")
    else:
        raise TypeError(f"{owner}.terrain = {terrain!r}: not a terrain (Plane, HeightField), "
                        "a geom, or a sequence of them (one per geom)")
    for i, t in enumerate(others):
        if not isinstance(t, (AbstractTerrain, AbstractGeom)):
            raise TypeError(f"{owner}.terrain[{i}] = {t!r}: not a terrain (Plane, HeightField) "
                            "or a contact geom")
        if isinstance(t, AbstractGeom) and t is geoms[i]:
            raise ValueError(f"{owner}.terrain[{i}]: geom {t.name!r} paired with itself")
        if _is_world(geoms[i].body) and (isinstance(t, AbstractTerrain) or _is_world(t.body)):
            raise ValueError(f"{owner}.geoms[{i}] ({geoms[i].name!r}) is on the world and so "
                             f"is terrain[{i}]: a pair needs a moving body")
    check_choice(owner, "normal", normal, NORMALS)
    self.backward_smoothing = _check_smoothing(owner, kw.pop("backward_smoothing", None))
    if normal == "constraint":
        if self.backward_smoothing is not None:
            raise ValueError(f"{owner}: backward_smoothing smooths a spring's normal law; "
                             "normal='constraint' has none (its force comes from a solve)")
        if kw.get("solimp") is None:  # MuJoCo's default impedance
            kw["solimp"] = (0.9, 0.95, 0.001, 0.5, 2.0)
    elif kw.get("invweight") is not None:
        raise ValueError(f"{owner}.invweight: the normal rows' inverse weight is for "
                         f"normal='constraint', not {normal!r}")
    self.max_points = _check_max_points(owner, kw.pop("max_points", MAX_POINTS))
    self.solimp, self.solimp_depth = _check_solimp(owner, len(geoms), normal,
                                                   kw.pop("solimp", None),
                                                   kw.pop("solimp_depth", None))
    self.creep = _check_creep(owner, len(geoms), kw.pop("creep", None))
    if model is not None and not isinstance(model, Model):
        raise TypeError(f"{owner}.model = {model!r}: not a diffmb Model")
    _check_params(owner, len(geoms), kw)
    if q is not None and model is not None:
        check_value(owner, "q", q, shape=(model.nq,))
    if model is not None:  # now rather than inside a trace
        for i, (g, t) in enumerate(zip(geoms, others, strict=True)):
            ba = _bid(model, g, f"{owner}.geoms[{i}]")
            if isinstance(t, AbstractGeom):
                bb = _bid(model, t, f"{owner}.terrain[{i}]")
                if ba == bb:
                    raise ValueError(f"{owner}: geoms {g.name!r} and {t.name!r} (pair {i}) are "
                                     f"on the same body {model.body_names[ba]!r}: they cannot "
                                     "collide")
    uniq, terrains, pairs = [], [], []
    for g in geoms:
        _index(uniq, g)
    for g, t in zip(geoms, others, strict=True):
        ia = _index(uniq, g)
        if isinstance(t, AbstractTerrain):
            pairs.append((ia, "terrain", _index(terrains, t)))
        else:
            pairs.append((ia, "geom", _index(uniq, t)))
    self.geoms = tuple(uniq)
    self.terrain = terrains[0] if terrains else None
    self.more_terrains = tuple(terrains[1:])
    self.pairs = tuple(pairs)
    self.pair_active, self.directions = _pair_directions(self.geoms, self.pairs)
    self.normal, self.friction = normal, friction
    self.spin = kw.get("torsion") is not None or kw.get("rolling") is not None
    kw = {k: x for k, x in kw.items() if x is not None or k not in ("torsion", "rolling")}
    for name, val in _params(self, model, q, normal, **kw).items():
        setattr(self, name, val)
    if friction == "pyramid":  # condim 1: a single normal row, whatever μ is made later
        self.frictionless = tuple(bool(x) for x in np.asarray(self.mu) == 0.0) \
            if is_concrete(self.mu) else (False,) * len(pairs)
    pg, ps = [], []
    for p, s, _, _, sign in self.directions:
        n = self.geoms[s].n_points
        pg += [p] * n
        ps += [sign] * n
    self.point_geom, self.point_sign = tuple(pg), tuple(ps)


_DOC_ARGS = """
    ``geoms``: :mod:`~diffmb.contacts.geometry` shapes; ``terrain``: a Plane/HeightField (or a
    geom) that every geom meets, or a sequence with one terrain or geom per geom (pair i is
    ``geoms[i]`` with ``terrain[i]``; see the module docstring). Parameters, each a number or
    one per pair (traced): ``stiffness`` k, ``damping`` b (default: mass-normalised from
    ``model`` at ``q`` (default ``model.qpos0``) by :func:`soft_contact_params` with
    ``timeconst``, ``dampratio``, ``dmin``, ``dmax``), ``mu`` (1.0), ``margin`` [m] (0: the
    contact acts from this distance, as MuJoCo's ``margin``), ``normal`` = "linear" (default)
    or "hunt_crossley" (``exponent`` n, ``dissipation`` c; with the default stiffness, k and c
    give the same rest penetration and rest damping as the linear law; with a given stiffness c
    defaults to 0), ``torsion`` and ``rolling`` [m] (torsional and rolling friction, MuJoCo's
    ``condim`` 4 and 6; None: not evaluated) with their regularising angular speed
    ``spin_eps`` [rad/s] (0.05). ``backward_smoothing`` [m] (None): contacts from distance in
    the backward pass only (:func:`~diffmb.contacts.law.normal_force_backward_smoothed`): the
    simulation is unchanged, its derivatives see the normal law smoothed over this width.
    ``max_points`` (:data:`MAX_POINTS`): the most points an implicit step linearises at once,
    the nearest of the candidates (the others are apart, so the step is the same); a run in
    which more push stops with :data:`~diffmb.systems.CONTACT_OVERFLOW`.
    ``solimp`` (MuJoCo's (d_min, d_max, width, mid, power), one row or one per pair) with
    ``solimp_depth`` [m] (one or one per pair): the linear law's spring follows MuJoCo's
    impedance, k g(δ)/g(δ_k) with g = d²/(1 − d), equal to ``stiffness`` at that depth, so it
    pushes as MuJoCo's contact row at every depth
    (:func:`~diffmb.contacts.law.impedance_stiffness`); None (default): a constant k.
    ``normal="constraint"``: each point's normal force is MuJoCo's soft contact row (its
    ``solref`` = (``timeconst``, ``dampratio``), ``solimp`` (default MuJoCo's) and the
    pair's ``invweight`` [1/kg], R = (1 − d)/d · invweight; default 1/m of the pair's
    effective mass from ``model``), the rows solved together against the other forces' load
    as MuJoCo's solver does: the point then moves as ÿ = (1 − d) ÿ₀ + d a_ref, at MuJoCo's
    depth and with its dynamics (the spring laws rest at its depth, but are stiffer away
    from it). Friction and its parameters as with the other laws; ``stiffness`` and
    ``damping`` are not used by the normal. ``friction="pyramid"`` (:class:`Contacts`, with
    ``normal="constraint"``): the friction too is MuJoCo's, its pyramidal cone's four edge rows
    per point, n ± μ t₁ and n ± μ t₂, each with R = 2 μ² (1 + μ²)/``impratio`` · (1 − d)/d ·
    invweight, solved with the others (a pair built with μ = 0: one normal row); the forces act
    at the middle of the overlap, as MuJoCo's.
"""


class Contacts(AbstractContacts, AbstractStatefulForce):
    """Compliant contacts with spring–damper stiction (the default friction).

    State: the tangential deformations z (n_points, 3) [m], zero initially. Returns
    ``(tau = 0, f_ext (nbody, 6), ż)``. ``tangential_stiffness`` k_t (default k) and
    ``tangential_damping`` b_t (default 2 ζ √(k_t m_pt), critical) set the stiction spring.
    ``creep`` [m/(N s)] (one or one per pair; None, the default: none): a point that sticks
    under a tangential load L slides on at c |L|, as MuJoCo's soft friction lets it
    (:func:`~diffmb.contacts.law.creep_rate`; with ``solimp`` c is the rate at
    ``solimp_depth`` and follows the impedance as (1 − d)/d, as MuJoCo's does).
    """

    def __init__(self, geoms, terrain, *, model=None, q=None, stiffness=None, damping=None,
                 mu=1.0, normal="linear", exponent=1.0, dissipation=None,
                 tangential_stiffness=None, tangential_damping=None, margin=0.0,
                 timeconst=0.02, dampratio=1.0, dmin=0.9, dmax=0.95, torsion=None,
                 rolling=None, spin_eps=0.05, backward_smoothing=None,
                 max_points=MAX_POINTS, solimp=None, solimp_depth=None, creep=None,
                 invweight=None, friction="stiction", impratio=1.0):
        check_choice("Contacts", "friction", friction, ("stiction", "pyramid"))
        if friction == "pyramid":
            if normal != "constraint":
                raise ValueError("Contacts: friction='pyramid' is MuJoCo's pyramidal cone of "
                                 "soft rows: it needs normal='constraint'")
            if torsion is not None or rolling is not None or creep is not None:
                raise ValueError("Contacts: friction='pyramid' takes no torsion, rolling or "
                                 "creep (its edge rows creep as MuJoCo's do)")
            check_value("Contacts", "impratio", impratio, lo=0.0, lo_open=True, shape=())
            self.impratio = float(impratio)
        _init(self, geoms, terrain, friction, model, q, normal, stiffness=stiffness,
              damping=damping, mu=mu, exponent=exponent, dissipation=dissipation,
              tangential_stiffness=tangential_stiffness, tangential_damping=tangential_damping,
              eps=1e-3, margin=margin, timeconst=timeconst, dampratio=dampratio, dmin=dmin,
              dmax=dmax, torsion=torsion, rolling=rolling, spin_eps=spin_eps,
              backward_smoothing=backward_smoothing, max_points=max_points, solimp=solimp,
              solimp_depth=solimp_depth, creep=creep, invweight=invweight)

    def init_state(self, model):
        return jnp.zeros((self.n_points, 3))

    def stateful_call(self, model, t, q, v, ctrl, state):
        if self.normal == "constraint":
            return self.loaded_stateful_call(model, t, q, v, ctrl, jnp.zeros(model.nv), None,
                                             state)
        r = _evaluate(self, model, q, v, state)
        return jnp.zeros(model.nv), r.f_ext, r.dz

    def loaded_stateful_call(self, model, t, q, v, ctrl, tau, f_ext, state):
        if self.normal != "constraint":
            return self.stateful_call(model, t, q, v, ctrl, state)
        _, Q, dz, _, _ = _loaded_points(self, model, q, v, state, tau, f_ext)
        return Q, None, dz

    def loaded_with_rows(self, model, t, q, v, ctrl, tau, f_ext, state, extra):
        """:meth:`loaded_stateful_call` with the other elements' rows ``extra`` (joint
        limits) solved together with the contact rows, as MuJoCo's solver does:
        ``(tau, ż, extra solved)`` (:func:`~diffmb.forces.total_force` calls it)."""
        _, Q, dz, _, _, solved = _loaded_points(self, model, q, v, state, tau, f_ext,
                                                extra=tuple(extra))
        return Q, dz, solved


class CoulombContacts(AbstractContacts, AbstractForce):
    """Compliant contacts with regularised Coulomb friction (stateless):
    f_t = −μ f_n v_t/√(|v_t|² + ε²), ``eps`` ε [m/s] (default 1e-3). Returns
    ``(tau = 0, f_ext (nbody, 6))``."""

    def __init__(self, geoms, terrain, *, model=None, q=None, stiffness=None, damping=None,
                 mu=1.0, eps=1e-3, normal="linear", exponent=1.0, dissipation=None,
                 margin=0.0, timeconst=0.02, dampratio=1.0, dmin=0.9, dmax=0.95, torsion=None,
                 rolling=None, spin_eps=0.05, backward_smoothing=None,
                 max_points=MAX_POINTS, solimp=None, solimp_depth=None, invweight=None):
        _init(self, geoms, terrain, "coulomb", model, q, normal, stiffness=stiffness,
              damping=damping, mu=mu, exponent=exponent, dissipation=dissipation,
              tangential_stiffness=0.0, tangential_damping=1.0, eps=eps, margin=margin,
              timeconst=timeconst, dampratio=dampratio, dmin=dmin, dmax=dmax, torsion=torsion,
              rolling=rolling, spin_eps=spin_eps, backward_smoothing=backward_smoothing,
              max_points=max_points, solimp=solimp, solimp_depth=solimp_depth,
              invweight=invweight)

    def __call__(self, model, t, q, v, ctrl):
        return self.loaded_call(model, t, q, v, ctrl, jnp.zeros(model.nv), None)

    def loaded_call(self, model, t, q, v, ctrl, tau, f_ext):
        z = jnp.zeros((self.n_points, 3))
        if self.normal == "constraint":
            return _loaded_points(self, model, q, v, z, tau, f_ext)[1], None  # (pyramid too)
        return jnp.zeros(model.nv), _evaluate(self, model, q, v, z).f_ext


class _MaskedContacts(AbstractForce):
    """A contact element of which only the points ``on`` push (:meth:`AbstractContacts.
    masked`); evaluated with or without the element's state as the element is."""

    el: AbstractContacts
    on: jnp.ndarray

    def __call__(self, model, t, q, v, ctrl):
        r = _evaluate(self.el, model, q, v, jnp.zeros((self.el.n_points, 3)), self.on)
        return jnp.zeros(model.nv), r.f_ext

    def stateful_call(self, model, t, q, v, ctrl, state):
        r = _evaluate(self.el, model, q, v, state, self.on)
        return jnp.zeros(model.nv), r.f_ext, r.dz


Contacts.__init__.__doc__ = _DOC_ARGS
CoulombContacts.__init__.__doc__ = _DOC_ARGS


class ContactResult(eqx.Module):
    """Contact points along a trajectory, world frame; ns saves (leading axes of the
    trajectory), nc candidate points of all contact elements: ``point`` (ns, nc, 3) m,
    ``normal`` (ns, nc, 3) the direction of the normal force on the pair's geom (the terrain's
    or the other geom's outward normal), ``penetration`` (ns, nc) m (plus the pair's
    ``margin``; −:data:`~diffmb.contacts.terrain.NO_GROUND` for a point beyond a height field's
    extent), ``fn`` (ns, nc) N (≥ 0), ``ft`` (ns, nc, 3) N the friction force on the pair's
    geom, ``velocity`` (ns, nc, 3) m/s of the pair's geom relative to the other side at the
    point; ``pairs``: (geom name, other name) of each point's pair (the terrain's or the other
    geom's name; a pair between two geoms whose points both sides give lists it once per
    point). ``result["fn"]`` works too."""

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
    """(geom name, other name) of each candidate point: its pair's geom A and other side."""
    names = _geom_names(el)
    other = lambda kind, ib: el.terrains[ib].name if kind == "terrain" else names[ib]  # noqa: E731
    return [(names[el.pairs[p][0]], other(*el.pairs[p][1:])) for p in el.point_geom]


@eqx.filter_jit
def _evaluate_many(el, model, q, v, z):
    return jax.vmap(lambda qi, vi, zi: _evaluate(el, model, qi, vi, zi))(q, v, z)


@eqx.filter_jit
def _evaluate_loaded_many(el, model, others, t, q, v, z, states, ctrl):
    """normal='constraint': the points along a trajectory against the load of ``others``
    (the other force elements, with their ``states`` or None, and the controls ``ctrl`` or
    None) at each save."""
    from ..forces.elements import JointLimits, total_force

    # the limits' rows solved with the contact rows (as the step solves them)
    lim = [j for j, f in enumerate(others) if isinstance(f, JointLimits) and f.needs_load]
    rest = tuple(f for j, f in enumerate(others) if j not in lim)

    def one(ti, qi, vi, zi, si, ui):
        s_rest = None if si is None else tuple(x for j, x in enumerate(si) if j not in lim)
        tau, f_ext, _ = total_force(rest, model, ti, qi, vi, ui, s_rest)
        if ui is not None and not any(getattr(f, "uses_ctrl", False) for f in others) \
                and ui.shape == (model.nv,):
            tau = tau + ui  # a control no element consumes is a generalized force
        extra = [others[j].rows(model, qi) for j in lim]
        return el.evaluate(model, qi, vi, zi, tau, f_ext, extra)

    return jax.vmap(one)(t, q, v, z, states, ctrl)


def contact_forces(model: Model, traj, forces, ctrl=None) -> ContactResult:
    """Evaluate the contact elements among ``forces`` (the tuple given to ``simulate``) along
    ``traj`` (a :class:`~diffmb.Trajectory`: ts, q (..., nq), v (..., nv), aux holding the
    stiction states), concatenating their points; see :class:`ContactResult`. An element
    with normal='constraint' is solved against the load of the other elements of ``forces``
    at each save and of ``ctrl`` (the control at the saves, (..., nu), or one for all; None:
    no control), as ``simulate`` applied them."""
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
        if el.needs_load:
            others = tuple(f for j, f in enumerate(forces) if j != k)
            st = None
            if states is not None:
                st = tuple(None if j == k or x is None else
                           jax.tree.map(lambda a: a.reshape(q.shape[0], *a.shape[len(lead):]),
                                        x)
                           for j, x in enumerate(states))
                st = tuple(x for j, x in enumerate(st) if j != k)
                if all(x is None for x in st):
                    st = None
            ts = jnp.broadcast_to(jnp.asarray(traj.ts), lead).reshape(-1)
            u = None
            if ctrl is not None:
                u = jnp.asarray(ctrl, dtype=jnp.float64)
                u = jnp.broadcast_to(u, lead + u.shape[-1:]).reshape(q.shape[0], -1)
            r = _evaluate_loaded_many(el, model, others, ts, q, v, z, st, u)
        else:
            r = _evaluate_many(el, model, q, v, z)
        parts.append(r)
        pairs += _pairs(el)
    if not parts:
        raise ValueError("contact_forces: no Contacts/CoulombContacts element in forces")
    cat = lambda name, tail: jnp.concatenate([getattr(r, name) for r in parts], axis=1).reshape(
        *lead, -1, *tail)
    return ContactResult(cat("point", (3,)), cat("normal", (3,)), cat("penetration", ()),
                         cat("velocity", (3,)), cat("fn", ()), cat("ft", (3,)), tuple(pairs))
