"""Contact geometry attached to bodies: signed distances, and candidate contact points against a
terrain or another geom.

A geom is an equinox Module: a static body (an index into ``model.body_names``, a body name,
or ``"world"`` for a geom fixed in the world frame) and optional ``name``, and traced numbers:
its size (MuJoCo's conventions) and its pose in the body frame, ``pos`` (3,) and ``quat`` (4,)
wxyz. The body frame is the frame of :func:`diffmb.body_poses`; for a model from
:func:`diffmb.load_mjcf` it is MuJoCo's body frame (``ModelBuilder`` keeps MuJoCo's
``body_pos``/``body_quat``; the centre of mass sits at ``body_ipos`` in it, and a free joint's q
is the pose of this frame), so a MuJoCo ``<geom>``'s ``pos``/``quat`` can be copied over as
they are.

Signed distance. ``geom.signed_distance_local(x) -> (d, n)`` at a point x (3,) of the geom's
own frame: d [m] (< 0 inside) and the outward unit normal n (geom frame), finite with a finite
gradient everywhere (the centre, edges and corners included; where the normal is undefined a
fixed direction is returned). ``PosedGeom(geom, R, c)`` places a geom in the world (rotation R,
origin c) and gives ``signed_distance(p)`` in world coordinates, so it stands wherever a terrain
does: every geom's ``points(R, c, other)`` takes ``other`` a terrain or a PosedGeom.

=========  ========  ===================================================================
geom       size      signed distance
=========  ========  ===================================================================
Point      –         distance to the point (d ≥ 0)
Sphere     (r,)      exact
Capsule    (r, h)    exact (distance to the axis segment z ∈ [−h, h], minus r)
Box        (3,)      exact, outside edges and corners included
Cylinder   (r, h)    exact, outside rim edges included
Ellipsoid  (3,)      exact to rounding (closest point by bisection on its Lagrange
                     multiplier, 64 steps); within 1e-6 r_min of it inside, near the plane
                     through the centre normal to the shortest axis
ConvexMesh vertices  exact: inside, max over the hull's face planes; outside, the distance
                     to the nearest hull triangle
=========  ========  ===================================================================

Candidate points. Against a terrain or a PosedGeom every geom gives a FIXED number of candidate
points (``n_points``, static, so every function traces once and vmaps), each a point of the
geom's surface that is deepest along the other side's normal (or a corner).
``geom.contacts(R, c, other) -> (points, d, n)`` gives them with their signed distances and
the other side's normals: ``other.signed_distance`` at each point, except that a sphere or
capsule against a PosedGeom is measured from its centre (axis point) e, d = d(e) − r, n = n(e):
exact whenever e lies outside the other geom (the surface point alone can sit nearer another
face of a box than the one it was pushed through).

==========  ===========  ===============================================================
geom        points       candidates (c centre, R axes, n the other side's normal there)
==========  ===========  ===============================================================
Point       1            the point itself (``pos``)
Sphere      1            c − r n (n taken at c; against a PosedGeom d = d(c) − r)
Capsule     2            against a terrain: its two end spheres, centres c ± h R[:, 2];
                         against a PosedGeom: per half of its axis segment (t ∈ [−h, 0] and
                         [0, h]) the sphere point at the t where the other geom's signed
                         distance of c + t R[:, 2] is least (golden-section search, 40 steps,
                         under ``stop_gradient``: value and gradient stay exact since the
                         distance is stationary in t there)
Box         8            the corners c + R (±sx, ±sy, ±sz)
Cylinder    6            per rim (centres e = c ± h a, a = R[:, 2]): the deepest rim point
                         e − r u, u = w/|w|, w = n − (n·a) a, and the two rim points at
                         ±120° from it
Ellipsoid   1            its support point along −n (n taken at c): exact for a plane
ConvexMesh  hull verts   every vertex of the convex hull (its own ``n_points``)
==========  ===========  ===============================================================

Cylinder: the deepest rim point is exact for a wheel (any tilt). When the axis is (nearly)
parallel to n the deepest direction is undefined; u is then regularised towards the geom's x
axis, u = (w + ε R[:, 0])/|w + ε R[:, 0]| with ε = 1e-4 (a gradient-safe norm), which changes
the deepest point's depth by at most r ε²/(2|w|²) (≤ 5e-7 r for tilts above 6°), and the three
points per rim at 120° then carry a cylinder standing on an end face (a wheel rolling on its
tread touches with one point per rim: the ±120° points sit 1.5 r higher).

ConvexMesh: the geom is the convex hull of its vertices (a concave mesh is collided as its hull,
as MuJoCo does). The hull is computed when the geom is built (``scipy.spatial.ConvexHull``): its
vertices and its face planes (coplanar triangles merged into one plane) are kept; flat or
degenerate input is refused. :meth:`ConvexMesh.from_mjmodel` reads a compiled MuJoCo mesh geom
(the hull MuJoCo's compiler built, in the frame MuJoCo collides it in).

A geom on ``body="world"`` is fixed in the world frame (:func:`body_index` gives -1;
:func:`geom_frames` and :func:`candidates` pose it at its ``pos``/``quat`` in world
coordinates, with zero velocity): a table, a wall, an obstacle for a body to collide with.

Pairs are collided point-against-distance: a box on a box is carried by the corners of each
inside the other, which is exact for a corner pressed into a face but does not see an edge
crossing an edge (no corner inside), and underestimates a deep overlap of similar boxes.

``n_active`` is how many candidates can carry the body at once (sphere 1, capsule 2, box 4,
cylinder 2, point 1, ellipsoid 1, convex mesh 4): :func:`~diffmb.contacts.soft_contact_params`
shares the body's effective mass among them.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics.kinematics import KinematicsData, body_frames, kinematics, point_velocities
from ..model import Model
from ..spatial import quaternion as quatm
from ..validation import check_index, check_value, is_concrete

__all__ = ["AbstractGeom", "Point", "Sphere", "Capsule", "Box", "Cylinder", "Ellipsoid",
           "ConvexMesh", "PosedGeom", "Candidates", "candidates", "geom_frames", "body_index",
           "WORLD"]

WORLD = "world"  # the body of a geom fixed in the world frame (body_index: -1)


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def _normalise(x):
    s = jnp.sum(x * x, axis=-1, keepdims=True)
    pos = s > 0
    return jnp.where(pos, x / jnp.sqrt(jnp.where(pos, s, 1.0)), 0.0)


def _unit(x, fallback, tiny=1e-24):
    """(x/|x|, |x|), gradient-safe: (``fallback``, 0) where |x|² <= tiny."""
    s = jnp.sum(x * x, axis=-1)
    ok = s > tiny
    r = jnp.sqrt(jnp.where(ok, s, 1.0))
    return jnp.where(ok, x / r, jnp.asarray(fallback, dtype=x.dtype)), jnp.where(ok, r, 0.0)


_EX = np.array([1.0, 0.0, 0.0])
_EZ = np.array([0.0, 0.0, 1.0])


# ---- signed distances in a geom's own frame ----------------------------------------------------


def _sd_sphere(x, radius):
    n, r = _unit(x, _EZ)
    return r - radius, n


def _sd_segment(x, radius, h):
    """Capsule: the points within ``radius`` of the z segment [−h, h]."""
    z = jnp.clip(x[2], -h, h)
    n, r = _unit(x - z * _EZ, _EX)
    return r - radius, n


def _sd_box(x, half):
    s = jnp.where(x >= 0, 1.0, -1.0)
    q = jnp.abs(x) - half
    n_out, out = _unit(jnp.maximum(q, 0.0) * s, _EZ)
    k = jnp.argmax(q)
    n_in = jax.nn.one_hot(k, 3, dtype=x.dtype) * s
    return out + jnp.minimum(q[k], 0.0), jnp.where(out > 0, n_out, n_in)


def _sd_cylinder(x, radius, h):
    u, rho = _unit(x[:2], _EX[:2])
    sz = jnp.where(x[2] >= 0, 1.0, -1.0)
    dr, dz = rho - radius, jnp.abs(x[2]) - h
    w, out = _unit(jnp.stack([jnp.maximum(dr, 0.0), jnp.maximum(dz, 0.0)]), _EX[:2])
    n_out = jnp.concatenate([w[0] * u, (w[1] * sz)[None]])
    n_in = jnp.where(dr > dz, jnp.concatenate([u, jnp.zeros(1)]), sz * _EZ)
    return out + jnp.minimum(jnp.maximum(dr, dz), 0.0), jnp.where(out > 0, n_out, n_in)


ELLIPSOID_ITERS = 64
ELLIPSOID_BAND = 1e-6


def _sd_ellipsoid(x, radii):
    """Exact signed distance to the ellipsoid Σ (x_i/r_i)² = 1. The closest point is
    y = r² x/(r² + t) with t the root in (−r_min², ∞) of F(t) = Σ (r_i x_i/(r_i² + t))² − 1
    (decreasing there), found by bisection under stop_gradient; d = n·(x − y) with
    n = x/(r² + t) normalised has the value and gradient (n) of the distance. The coordinate
    along the shortest axis is kept at least ``ELLIPSOID_BAND`` r_min away from 0 (where the
    root can leave the interval), which moves d by at most that much. The gradient in the radii
    is the surface's normal displacement at the closest point."""
    k = jnp.argmin(radii)
    e = jax.nn.one_hot(k, 3, dtype=x.dtype)
    xs, rs = jax.lax.stop_gradient(x), jax.lax.stop_gradient(radii)
    band = ELLIPSOID_BAND * rs[k]
    xk = xs[k]
    shift = (jnp.where(jnp.abs(xk) < band, jnp.where(xk >= 0, band, -band), xk) - xk) * e
    xs = xs + shift
    r2 = rs * rs

    def F(t):
        return jnp.sum((rs * xs / (r2 + t)) ** 2) - 1.0

    def step(_, lh):
        lo, hi = lh
        mid = 0.5 * (lo + hi)
        pos = F(mid) > 0
        return jnp.where(pos, mid, lo), jnp.where(pos, hi, mid)

    lo, hi = jax.lax.fori_loop(0, ELLIPSOID_ITERS, step,
                               (-r2[k], jnp.max(rs) * jnp.sqrt(jnp.sum(xs * xs))))
    t = 0.5 * (lo + hi)
    y = r2 * xs / (r2 + t)
    n, _ = _unit((x + shift) / (radii * radii + t), e)
    # the surface moves with the radii: ∂d/∂r_i = −(y_i²/r_i³)/|y/r²| at the closest point
    dd_dr = -(y * y / (r2 * rs)) / jnp.sqrt(jnp.sum((y / r2) ** 2))
    return jnp.dot(n, x - y) + jnp.dot(dd_dr, radii - rs), n


def _sdiv(a, b):
    ok = b != 0
    return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


def _closest_on_triangles(p, T):
    """The closest point to p (3,) on each triangle T (nt, 3, 3) (Voronoi regions of its
    vertices, edges and face, as in Ericson's Real-Time Collision Detection, 5.1.5)."""
    A, B, C = T[:, 0], T[:, 1], T[:, 2]
    ab, ac = B - A, C - A
    dot = lambda u, v: jnp.sum(u * v, axis=-1)
    d1, d2 = dot(ab, p - A), dot(ac, p - A)
    d3, d4 = dot(ab, p - B), dot(ac, p - B)
    d5, d6 = dot(ab, p - C), dot(ac, p - C)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    s = va + vb + vc
    face = A + ab * _sdiv(vb, s)[:, None] + ac * _sdiv(vc, s)[:, None]
    on_ab = A + ab * _sdiv(d1, d1 - d3)[:, None]
    on_ac = A + ac * _sdiv(d2, d2 - d6)[:, None]
    on_bc = B + (C - B) * _sdiv(d4 - d3, (d4 - d3) + (d5 - d6))[:, None]
    out = face
    for cond, q in [((va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0), on_bc),
                    ((vb <= 0) & (d2 >= 0) & (d6 <= 0), on_ac),
                    ((d6 >= 0) & (d5 <= d6), C),
                    ((vc <= 0) & (d1 >= 0) & (d3 <= 0), on_ab),
                    ((d3 >= 0) & (d4 <= d3), B),
                    ((d1 <= 0) & (d2 <= 0), A)]:  # the first region that holds wins
        out = jnp.where(cond[:, None], q, out)
    return out


def _sd_polytope(x, planes, triangles):
    """Signed distance to a convex polytope: inside, max over its face planes [n, offset]
    (nf, 4) of n·x − offset (the normal of the max); outside, the distance to the nearest of
    its boundary triangles (nt, 3, 3) (the normal towards x)."""
    v = planes[:, :3] @ x - planes[:, 3]
    k = jnp.argmax(v)
    q = _closest_on_triangles(x, triangles)
    e = x - q
    j = jnp.argmin(jnp.sum(e * e, axis=-1))
    n_out, d_out = _unit(e[j], planes[k, :3])
    outside = v[k] > 0
    return jnp.where(outside, d_out, v[k]), jnp.where(outside, n_out, planes[k, :3])


class AbstractGeom(eqx.Module):
    """A contact shape on a body; see the module docstring.

    ``points(R, c, other) -> (n_points, 3)``: world candidate points given the geom frame's
    world rotation R (3, 3) and origin c (3,), against ``other`` (a terrain or a
    :class:`PosedGeom`). ``signed_distance_local(x) -> (d, n)``: the signed distance and outward
    unit normal at x (3,) in the geom's frame.
    """

    body: int | str = eqx.field(static=True)
    pos: jnp.ndarray  # (3,) m, in the body frame
    quat: jnp.ndarray  # (4,) wxyz, geom axes in the body frame
    name: str | None = eqx.field(static=True)

    kind: ClassVar[str]
    n_points: ClassVar[int]
    n_active: ClassVar[int]

    @abc.abstractmethod
    def points(self, R, c, terrain):
        raise NotImplementedError

    @abc.abstractmethod
    def signed_distance_local(self, x):
        raise NotImplementedError

    def contacts(self, R, c, other):
        """The candidate points (n_points, 3) against ``other``, their signed distances
        (n_points,) [m] (< 0: penetration) and ``other``'s outward unit normals (n_points, 3),
        world frame. By default ``other.signed_distance`` at each point; a sphere or capsule
        against a :class:`PosedGeom` measures from its centre (axis point), d = d_c − r, which
        is exact for an exact signed distance whenever the centre is outside the other geom."""
        P = self.points(R, c, other)
        d, n = jax.vmap(other.signed_distance)(P)
        return P, d, n

    @abc.abstractmethod
    def thickness(self):
        """The geom's own size [m] for the initial-penetration check: its half-thickness
        along its thinnest direction (sphere, capsule: r; box: the smallest half-size;
        cylinder: min(r, h); ellipsoid: the smallest radius; convex mesh: half its smallest
        width across its face normals); 0 for a point (no size: not checked)."""
        raise NotImplementedError

    def frame(self, Rb, pb):
        """World rotation (3, 3) and origin (3,) of the geom from its body's (Rb, pb)."""
        return Rb @ quatm.to_rotmat(self.quat), pb + Rb @ self.pos


class PosedGeom(eqx.Module):
    """A geom placed in the world: geom frame rotation ``R`` (3, 3) and origin ``c`` (3,).
    ``signed_distance(p) -> (d, n)`` at a world point p (3,): d [m] (< 0 inside), n the outward
    unit normal in world axes; it stands for a terrain in :meth:`AbstractGeom.points` and
    :func:`candidates`."""

    geom: AbstractGeom
    R: jnp.ndarray
    c: jnp.ndarray

    @property
    def name(self):
        return self.geom.name

    def signed_distance(self, p):
        d, n = self.geom.signed_distance_local(self.R.T @ (_f64(p) - self.c))
        return d, self.R @ n


def _body(owner, body):
    if isinstance(body, (bool, np.bool_)) or not isinstance(body, (int, np.integer, str)):
        raise TypeError(f"{owner}.body = {body!r}: a body name (str), index (int) or "
                        f"{WORLD!r}")
    if not isinstance(body, str):
        check_value(owner, "body", int(body), lo=0)
    return body if isinstance(body, str) else int(body)


def _pose(owner, pos, quat):
    """pos (3,) and the normalised quat (4,), checked: finite, right shape, nonzero quat."""
    check_value(owner, "pos", pos, shape=(3,))
    check_value(owner, "quat", quat, shape=(4,))
    q = _f64(quat).reshape(4)
    if is_concrete(q) and not float(jnp.sum(q * q)) > 0:
        raise ValueError(f"{owner}.quat = {np.asarray(quat).tolist()}: must be a nonzero "
                         "quaternion (w, x, y, z)")
    return _f64(pos).reshape(3), q / jnp.sqrt(jnp.sum(q * q))


def _size(owner, field, value, *, lo_open=True, shape=()):
    """A size field: finite, > 0 (``lo_open``) or >= 0, of ``shape``."""
    check_value(owner, field, value, lo=0.0, lo_open=lo_open, shape=shape)
    return _f64(value).reshape(shape)


def _owner(cls, name):
    """The owner in messages: the class, and the geom's name when it has one."""
    return cls if name is None else f"{cls} {name!r}"


def _sphere_point(c, r, other):
    _, n = other.signed_distance(c)
    return c - r * n


def _sphere_contacts(cs, r, other):
    """Points, signed distances and normals of spheres of radius r centred at cs (k, 3)
    against ``other``, measured from the centres."""
    d, n = jax.vmap(other.signed_distance)(cs)
    return cs - r * n, d - r, n


class Point(AbstractGeom):
    """A single contact point at ``pos`` in the body frame (a foot, a skid)."""

    kind: ClassVar[str] = "point"
    n_points: ClassVar[int] = 1
    n_active: ClassVar[int] = 1

    def __init__(self, body, pos=(0.0, 0.0, 0.0), name=None):
        own = _owner("Point", name)
        self.body, self.name = _body(own, body), name
        self.pos, self.quat = _pose(own, pos, (1.0, 0.0, 0.0, 0.0))

    def points(self, R, c, terrain):
        return c[None]

    def signed_distance_local(self, x):
        return _sd_sphere(_f64(x), 0.0)

    def thickness(self):
        return jnp.zeros(())


class Sphere(AbstractGeom):
    """Sphere of radius ``radius`` (MuJoCo size (r,)) centred at ``pos``."""

    radius: jnp.ndarray
    kind: ClassVar[str] = "sphere"
    n_points: ClassVar[int] = 1
    n_active: ClassVar[int] = 1

    def __init__(self, body, radius, pos=(0.0, 0.0, 0.0), quat=(1.0, 0.0, 0.0, 0.0), name=None):
        own = _owner("Sphere", name)
        self.body, self.name = _body(own, body), name
        self.radius = _size(own, "radius", radius)
        self.pos, self.quat = _pose(own, pos, quat)

    def points(self, R, c, terrain):
        return _sphere_point(c, self.radius, terrain)[None]

    def contacts(self, R, c, other):
        if isinstance(other, PosedGeom):
            return _sphere_contacts(c[None], self.radius, other)
        return super().contacts(R, c, other)

    def signed_distance_local(self, x):
        return _sd_sphere(_f64(x), self.radius)

    def thickness(self):
        return self.radius


_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0
SEGMENT_ITERS = 40


def _segment_argmin(f, lo, hi):
    """The t in [lo, hi] that minimises f (convex), by ``SEGMENT_ITERS`` golden-section steps
    (the interval shrinks to 0.618^40 ≈ 4e-9 of its length); the ends are compared too, so a
    minimum at an end is found exactly."""

    def step(_, s):
        a, b, x1, x2, f1, f2 = s
        left = f1 < f2  # the minimum lies in [a, x2]
        a, b = jnp.where(left, a, x1), jnp.where(left, x2, b)
        x1n = jnp.where(left, b - _GOLDEN * (b - a), x2)
        x2n = jnp.where(left, x1, a + _GOLDEN * (b - a))
        fn = f(jnp.where(left, x1n, x2n))
        return a, b, x1n, x2n, jnp.where(left, fn, f2), jnp.where(left, f1, fn)

    x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    a, b, *_ = jax.lax.fori_loop(0, SEGMENT_ITERS, step, (lo, hi, x1, x2, f(x1), f(x2)))
    ts = jnp.stack([lo, hi, 0.5 * (a + b)])
    fs = jnp.stack([f(lo), f(hi), f(ts[2])])
    return ts[jnp.argmin(fs)]


class Capsule(AbstractGeom):
    """Capsule: radius r and half-length h of its axis segment, the geom's local z (MuJoCo size
    (r, h))."""

    radius: jnp.ndarray
    half_length: jnp.ndarray
    kind: ClassVar[str] = "capsule"
    n_points: ClassVar[int] = 2
    n_active: ClassVar[int] = 2

    def __init__(self, body, radius, half_length, pos=(0.0, 0.0, 0.0),
                 quat=(1.0, 0.0, 0.0, 0.0), name=None):
        own = _owner("Capsule", name)
        self.body, self.name = _body(own, body), name
        self.radius = _size(own, "radius", radius)
        self.half_length = _size(own, "half_length", half_length, lo_open=False)
        self.pos, self.quat = _pose(own, pos, quat)

    def _centres(self, R, c, other):
        """The two sphere centres on the axis: the ends against a terrain, the deepest point
        of each half against a PosedGeom."""
        a = R[:, 2]
        if isinstance(other, PosedGeom):
            cs, as_, hs, o = jax.lax.stop_gradient((c, a, self.half_length, other))
            f = lambda t: o.signed_distance(cs + t * as_)[0]
            ts = [_segment_argmin(f, -hs, jnp.zeros_like(hs)),
                  _segment_argmin(f, jnp.zeros_like(hs), hs)]
        else:
            ts = [self.half_length, -self.half_length]
        return jnp.stack([c + t * a for t in ts])

    def points(self, R, c, terrain):
        return jnp.stack([_sphere_point(e, self.radius, terrain)
                          for e in self._centres(R, c, terrain)])

    def contacts(self, R, c, other):
        if isinstance(other, PosedGeom):
            return _sphere_contacts(self._centres(R, c, other), self.radius, other)
        return super().contacts(R, c, other)

    def signed_distance_local(self, x):
        return _sd_segment(_f64(x), self.radius, self.half_length)

    def thickness(self):
        return self.radius


_CORNERS = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)],
                    dtype=float)


class Box(AbstractGeom):
    """Box with half-sizes (sx, sy, sz) along the geom axes (MuJoCo size); 8 corner points."""

    half_sizes: jnp.ndarray
    kind: ClassVar[str] = "box"
    n_points: ClassVar[int] = 8
    n_active: ClassVar[int] = 4

    def __init__(self, body, half_sizes, pos=(0.0, 0.0, 0.0), quat=(1.0, 0.0, 0.0, 0.0),
                 name=None):
        own = _owner("Box", name)
        self.body, self.name = _body(own, body), name
        self.half_sizes = _size(own, "half_sizes", half_sizes, shape=(3,))
        self.pos, self.quat = _pose(own, pos, quat)

    def points(self, R, c, terrain):
        return c + (_CORNERS * self.half_sizes) @ R.T

    def signed_distance_local(self, x):
        return _sd_box(_f64(x), self.half_sizes)

    def thickness(self):
        return jnp.min(self.half_sizes)


_C120, _S120 = -0.5, np.sqrt(3.0) / 2.0
CYLINDER_EPS = 1e-4


class Cylinder(AbstractGeom):
    """Cylinder (a wheel): radius r, half-height h along the geom's local z (MuJoCo size (r, h));
    6 points: the deepest point of each rim and the rim points at ±120° from it."""

    radius: jnp.ndarray
    half_height: jnp.ndarray
    kind: ClassVar[str] = "cylinder"
    n_points: ClassVar[int] = 6
    n_active: ClassVar[int] = 2

    def __init__(self, body, radius, half_height, pos=(0.0, 0.0, 0.0),
                 quat=(1.0, 0.0, 0.0, 0.0), name=None):
        own = _owner("Cylinder", name)
        self.body, self.name = _body(own, body), name
        self.radius = _size(own, "radius", radius)
        self.half_height = _size(own, "half_height", half_height)
        self.pos, self.quat = _pose(own, pos, quat)

    def points(self, R, c, terrain):
        a = R[:, 2]
        out = []
        for sgn in (1.0, -1.0):
            e = c + sgn * self.half_height * a
            _, n = terrain.signed_distance(e)
            w = n - jnp.dot(n, a) * a + CYLINDER_EPS * R[:, 0]
            u = _normalise(w)
            u2 = jnp.cross(a, u)
            for cs, sn in ((1.0, 0.0), (_C120, _S120), (_C120, -_S120)):
                out.append(e - self.radius * (cs * u + sn * u2))
        return jnp.stack(out)

    def signed_distance_local(self, x):
        return _sd_cylinder(_f64(x), self.radius, self.half_height)

    def thickness(self):
        return jnp.minimum(self.radius, self.half_height)


class Ellipsoid(AbstractGeom):
    """Ellipsoid with semi-axes ``radii`` (rx, ry, rz) along the geom axes (MuJoCo size); one
    point: its support point along the other side's inward normal."""

    radii: jnp.ndarray
    kind: ClassVar[str] = "ellipsoid"
    n_points: ClassVar[int] = 1
    n_active: ClassVar[int] = 1

    def __init__(self, body, radii, pos=(0.0, 0.0, 0.0), quat=(1.0, 0.0, 0.0, 0.0), name=None):
        own = _owner("Ellipsoid", name)
        self.body, self.name = _body(own, body), name
        self.radii = _size(own, "radii", radii, shape=(3,))
        self.pos, self.quat = _pose(own, pos, quat)

    def points(self, R, c, terrain):
        _, n = terrain.signed_distance(c)
        u = -(R.T @ n)  # support direction, geom frame
        w, s = _unit(self.radii * u, _EZ)
        return (c + R @ (self.radii * w))[None]

    def signed_distance_local(self, x):
        return _sd_ellipsoid(_f64(x), self.radii)

    def thickness(self):
        return jnp.min(self.radii)


def _convex_hull(owner, V):
    """Hull vertices (k, 3) (in input order), merged face planes (nf, 4) [n, offset] with
    n·x <= offset inside, and boundary triangles (nt, 3, 3) of the points V (nv, 3);
    ValueError naming ``owner`` when the points span no volume."""
    from scipy.spatial import ConvexHull, QhullError

    scale = float(np.max(np.ptp(V, axis=0))) if len(V) else 0.0
    try:
        if len(V) < 4 or not scale > 0:
            raise QhullError("fewer than 4 distinct points")
        hull = ConvexHull(V)
    except QhullError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else "qhull failed"
        raise ValueError(f"{owner}.vertices: the {len(V)} points are flat or degenerate "
                         f"(they span no volume: {msg})") from None
    if not hull.volume > 1e-12 * scale**3:
        raise ValueError(f"{owner}.vertices: the {len(V)} points are flat or degenerate "
                         f"(hull volume {hull.volume:.3g} for an extent of {scale:.3g})")
    n_ = hull.equations[:, :3] / np.linalg.norm(hull.equations[:, :3], axis=1, keepdims=True)
    planes = np.concatenate([n_, -hull.equations[:, 3:]], axis=1)
    # coplanar triangles share a plane: keep one (to 1e-9; a pair split by the rounding
    # only repeats a plane, which changes no distance)
    key = np.round(np.concatenate([n_, planes[:, 3:] / scale], axis=1) * 1e9)
    _, first = np.unique(key, axis=0, return_index=True)
    return V[np.sort(hull.vertices)], planes[np.sort(first)], V[hull.simplices]


class ConvexMesh(AbstractGeom):
    """The convex hull of ``vertices`` (nv, 3) (geom frame); its candidates are the hull's
    vertices (``n_points`` of them, per instance). ``vertices`` keeps the hull's vertices only,
    ``planes`` (nf, 4) its face planes [n, offset] (n·x <= offset inside, coplanar triangles
    merged), ``triangles`` (nt, 3, 3) its boundary triangles. The hull is computed here, so the
    vertices must be concrete numbers."""

    vertices: jnp.ndarray
    planes: jnp.ndarray
    triangles: jnp.ndarray
    kind: ClassVar[str] = "mesh"
    n_active: ClassVar[int] = 4

    def __init__(self, body, vertices, pos=(0.0, 0.0, 0.0), quat=(1.0, 0.0, 0.0, 0.0),
                 name=None):
        own = _owner("ConvexMesh", name)
        self.body, self.name = _body(own, body), name
        if not is_concrete(vertices):
            raise TypeError(f"{own}.vertices: must be concrete numbers (the convex hull is "
                            "computed when the geom is built), not traced")
        check_value(own, "vertices", vertices, ndim=2)
        V = np.asarray(vertices, dtype=float)
        if V.shape[1] != 3:
            raise TypeError(f"{own}.vertices: expected shape (nv, 3), got {V.shape}")
        hv, planes, tris = _convex_hull(own, V)
        self.vertices, self.planes, self.triangles = _f64(hv), _f64(planes), _f64(tris)
        self.pos, self.quat = _pose(own, pos, quat)

    @property
    def n_points(self) -> int:
        return self.vertices.shape[0]

    @classmethod
    def from_mjmodel(cls, mj, geom_id: int, body, name=None):
        """The convex mesh geom ``geom_id`` of a compiled ``mujoco.MjModel``, on ``body``: the
        vertices of the convex hull MuJoCo built for it (``mesh_graph``; all of the mesh's
        compiled vertices when it has no hull), in the geom frame MuJoCo collides it in
        (``geom_pos``/``geom_quat``: MuJoCo moves a mesh to its inertial frame when it
        compiles it and poses the geom accordingly). ``name`` defaults to the geom's name."""
        g = int(geom_id)
        check_index("ConvexMesh.from_mjmodel", "geom_id", g, int(mj.ngeom),
                    what=f"the model has {int(mj.ngeom)} geoms")
        gname = mj.geom(g).name or None
        if int(mj.geom_type[g]) != 7:  # mjGEOM_MESH
            raise ValueError(f"ConvexMesh.from_mjmodel: geom {gname or g!r} is not a mesh "
                             f"(geom type {int(mj.geom_type[g])})")
        m = int(mj.geom_dataid[g])
        adr, num = int(mj.mesh_vertadr[m]), int(mj.mesh_vertnum[m])
        V = np.asarray(mj.mesh_vert[adr:adr + num], dtype=float)
        gadr = int(mj.mesh_graphadr[m])
        if gadr >= 0:
            nv = int(mj.mesh_graph[gadr])
            V = V[np.asarray(mj.mesh_graph[gadr + 2 + nv:gadr + 2 + 2 * nv], dtype=int)]
        return cls(body, V, pos=np.asarray(mj.geom_pos[g], dtype=float),
                   quat=np.asarray(mj.geom_quat[g], dtype=float),
                   name=gname if name is None else name)

    def points(self, R, c, terrain):
        return c + self.vertices @ R.T

    def signed_distance_local(self, x):
        return _sd_polytope(_f64(x), self.planes, self.triangles)

    def thickness(self):
        w = self.vertices @ self.planes[:, :3].T  # (nv, nf)
        return 0.5 * jnp.min(jnp.max(w, axis=0) - jnp.min(w, axis=0))


# ---- candidate points of geoms on a model ------------------------------------------------------


def body_index(model: Model, body, owner: str = "geom") -> int:
    """Row of ``body`` (a name or an index) in ``model.body_names``, checked: a ValueError
    naming ``owner`` and the model when there is no such body. ``"world"`` (when the model has
    no body of that name) is -1: the fixed world frame."""
    if isinstance(body, str):
        if body not in model.body_names:
            if body == WORLD:
                return -1
            raise ValueError(f"{owner}.body = {body!r}: no such body in model {model.name!r}; "
                             f"bodies: {list(model.body_names)} (or {WORLD!r})")
        return model.body_names.index(body)
    check_index(owner, "body", int(body), model.n_bodies,
                what=f"model {model.name!r} has {model.n_bodies} "
                     f"bod{'y' if model.n_bodies == 1 else 'ies'}")
    return int(body)


def bounding_radius(g, xp=jnp):
    """The radius (m) of the sphere about geom ``g``'s centre that holds it (0 for a point);
    traced where the geom's sizes are. ``xp``: the array module (``numpy`` for concrete sizes
    at build time)."""
    if g.kind == "mesh":
        return xp.max(xp.linalg.norm(xp.asarray(g.vertices), axis=1))
    if g.kind == "box":
        return xp.linalg.norm(xp.asarray(g.half_sizes))
    if g.kind == "capsule":
        return xp.asarray(g.radius) + xp.asarray(g.half_length)
    if g.kind == "cylinder":
        return xp.hypot(xp.asarray(g.radius), xp.asarray(g.half_height))
    if g.kind == "ellipsoid":
        return xp.max(xp.asarray(g.radii))
    return xp.asarray(getattr(g, "radius", 0.0), dtype=xp.float64)


def geom_frames(model: Model, kin: KinematicsData, geoms):
    """World rotation (3, 3) and origin (3,) of each geom (a list of pairs), from the shared
    kinematics; a geom on the world (body -1) is posed in the fixed world frame."""
    Rb, pb = body_frames(model, kin)  # origins relative to kin.origin
    out = []
    for g in geoms:
        b = body_index(model, g.body)
        out.append(g.frame(jnp.eye(3), jnp.zeros(3)) if b < 0 else
                   g.frame(Rb[b], pb[b] + kin.origin))
    return out


class Candidates(eqx.Module):
    """The candidate contact points of a tuple of geoms, nc = Σ n_points, world frame:
    ``point`` (nc, 3) m, ``normal`` (nc, 3) the terrain's outward unit normal there,
    ``penetration`` (nc,) m (≥ 0 in contact, else minus the gap), ``velocity`` (nc, 3) m/s of
    the body's material point at ``point`` (terrain at rest: the relative velocity; zero for a
    geom on the world), ``body`` (static, nc) the body index of each point (-1: the world)."""

    point: jax.Array
    normal: jax.Array
    penetration: jax.Array
    velocity: jax.Array
    body: tuple = eqx.field(static=True)


def candidates(model: Model, geoms, terrain, q, v=None, *, kin: KinematicsData | None = None):
    """:class:`Candidates` of ``geoms`` against ``terrain`` (a terrain or a :class:`PosedGeom`)
    at q (nq,) and v (nv,) (zero velocities if None), from the shared kinematics (pass
    ``kin = kinematics(model, q, v)`` to reuse one)."""
    if kin is None:
        kin = kinematics(model, q, jnp.zeros(model.nv) if v is None else v)
    o = kin.origin
    out, bodies = [], []
    for g, (R, c) in zip(geoms, geom_frames(model, kin, geoms), strict=True):
        out.append(g.contacts(R, c, terrain))
        bodies += [body_index(model, g.body)] * g.n_points
    P, d, n = (jnp.concatenate(x, axis=0) for x in zip(*out, strict=True))
    b = np.asarray(bodies)
    _, vp = point_velocities(kin, P - o, np.maximum(b, 0).tolist())
    vp = jnp.where((b >= 0)[:, None], vp, 0.0) if (b < 0).any() else vp
    return Candidates(P, n, -d, vp, tuple(bodies))
