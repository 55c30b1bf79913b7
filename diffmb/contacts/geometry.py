"""Contact geometry attached to bodies, and its candidate contact points against a terrain.

A geom is an equinox Module: a static body (an index into ``model.body_names`` or a body name)
and optional ``name``, and traced numbers: its size (MuJoCo's conventions) and its pose in the
body frame, ``pos`` (3,) and ``quat`` (4,) wxyz. The body frame is the frame of
:func:`diffmb.body_poses`; for a model from :func:`diffmb.load_mjcf` it is MuJoCo's body frame
(``ModelBuilder`` keeps MuJoCo's ``body_pos``/``body_quat``; the centre of mass sits at
``body_ipos`` in it, and a free joint's q is the pose of this frame), so a MuJoCo ``<geom>``'s
``pos``/``quat`` can be copied over as they are.

Against a terrain every geom gives a FIXED number of candidate points (``n_points``, static, so
every function traces once and vmaps), each a point of the geom's surface that is deepest
along the terrain normal (or a corner):

=========  ========  ======  ==================================================================
geom       size      points  candidates (c centre, R axes, n terrain normal at the feature)
=========  ========  ======  ==================================================================
Point      –         1       the point itself (``pos``)
Sphere     (r,)      1       c − r n
Capsule    (r, h)    2       its two end spheres, centres c ± h R[:, 2]
Box        (3,)      8       the corners c + R (±sx, ±sy, ±sz)
Cylinder   (r, h)    6       per rim (centres e = c ± h a, a = R[:, 2]): the deepest rim point
                             e − r u, u = w/|w|, w = n − (n·a) a, and the two rim points at
                             ±120° from it
=========  ========  ======  ==================================================================

Cylinder: the deepest rim point is exact for a wheel (any tilt). When the axis is (nearly)
parallel to n the deepest direction is undefined; u is then regularised towards the geom's x
axis, u = (w + ε R[:, 0])/|w + ε R[:, 0]| with ε = 1e-4 (a gradient-safe norm), which changes
the deepest point's depth by at most r ε²/(2|w|²) (≤ 5e-7 r for tilts above 6°), and the three
points per rim at 120° then carry a cylinder standing on an end face (a wheel rolling on its
tread touches with one point per rim: the ±120° points sit 1.5 r higher).

``n_active`` is how many candidates can carry the body at once (sphere 1, capsule 2, box 4,
cylinder 2, point 1): :func:`~diffmb.contacts.soft_contact_params` shares the body's
effective mass among them.
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

__all__ = ["AbstractGeom", "Point", "Sphere", "Capsule", "Box", "Cylinder", "Candidates",
           "candidates", "body_index"]


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def _normalise(x):
    s = jnp.sum(x * x, axis=-1, keepdims=True)
    pos = s > 0
    return jnp.where(pos, x / jnp.sqrt(jnp.where(pos, s, 1.0)), 0.0)


class AbstractGeom(eqx.Module):
    """A contact shape on a body; see the module docstring.

    ``points(R, c, terrain) -> (n_points, 3)``: world candidate points given the geom frame's
    world rotation R (3, 3) and origin c (3,).
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
    def thickness(self):
        """The geom's own size [m] for the initial-penetration check: its half-thickness
        along its thinnest direction (sphere, capsule: r; box: the smallest half-size;
        cylinder: min(r, h)); 0 for a point (no size: not checked)."""
        raise NotImplementedError

    def frame(self, Rb, pb):
        """World rotation (3, 3) and origin (3,) of the geom from its body's (Rb, pb)."""
        return Rb @ quatm.to_rotmat(self.quat), pb + Rb @ self.pos


def _body(owner, body):
    if isinstance(body, (bool, np.bool_)) or not isinstance(body, (int, np.integer, str)):
        raise TypeError(f"{owner}.body = {body!r}: a body name (str) or index (int)")
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


def _sphere_point(c, r, terrain):
    _, n = terrain.signed_distance(c)
    return c - r * n


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

    def thickness(self):
        return self.radius


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

    def points(self, R, c, terrain):
        a = self.half_length * R[:, 2]
        return jnp.stack([_sphere_point(c + a, self.radius, terrain),
                          _sphere_point(c - a, self.radius, terrain)])

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

    def thickness(self):
        return jnp.minimum(self.radius, self.half_height)


# ---- candidate points of geoms on a model ------------------------------------------------------


def body_index(model: Model, body, owner: str = "geom") -> int:
    """Row of ``body`` (a name or an index) in ``model.body_names``, checked: a ValueError
    naming ``owner`` and the model when there is no such body."""
    if isinstance(body, str):
        if body not in model.body_names:
            raise ValueError(f"{owner}.body = {body!r}: no such body in model {model.name!r}; "
                             f"bodies: {list(model.body_names)}")
        return model.body_names.index(body)
    check_index(owner, "body", int(body), model.n_bodies,
                what=f"model {model.name!r} has {model.n_bodies} "
                     f"bod{'y' if model.n_bodies == 1 else 'ies'}")
    return int(body)


class Candidates(eqx.Module):
    """The candidate contact points of a tuple of geoms, nc = Σ n_points, world frame:
    ``point`` (nc, 3) m, ``normal`` (nc, 3) the terrain's outward unit normal there,
    ``penetration`` (nc,) m (≥ 0 in contact, else minus the gap), ``velocity`` (nc, 3) m/s of
    the body's material point at ``point`` (terrain at rest: the relative velocity), ``body``
    (static, nc) the body index of each point."""

    point: jax.Array
    normal: jax.Array
    penetration: jax.Array
    velocity: jax.Array
    body: tuple = eqx.field(static=True)


def candidates(model: Model, geoms, terrain, q, v=None, *, kin: KinematicsData | None = None):
    """:class:`Candidates` of ``geoms`` against ``terrain`` at q (nq,) and v (nv,) (zero
    velocities if None), from the shared kinematics (pass ``kin = kinematics(model, q, v)`` to
    reuse one)."""
    if kin is None:
        kin = kinematics(model, q, jnp.zeros(model.nv) if v is None else v)
    Rb, pb = body_frames(model, kin)  # origins relative to kin.origin
    o = kin.origin
    pts, bodies = [], []
    for g in geoms:
        b = body_index(model, g.body)
        R, c = g.frame(Rb[b], pb[b] + o)
        pts.append(g.points(R, c, terrain))
        bodies += [b] * g.n_points
    P = jnp.concatenate(pts, axis=0)
    d, n = jax.vmap(terrain.signed_distance)(P)
    _, vp = point_velocities(kin, P - o, bodies)
    return Candidates(P, n, -d, vp, tuple(bodies))
