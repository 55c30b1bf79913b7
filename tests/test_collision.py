"""Geom–geom collision geometry (signed distances, PosedGeom, candidate points) against MuJoCo.

Every expected value comes from MuJoCo: two free bodies carrying one geom each are placed at a
random overlapping pose (``mj_forward``), and diffmb's penetration at its deepest candidate and
the contact normal there are compared with the deepest of MuJoCo's ``d.contact`` (``-dist``,
``frame[:3]``); separated pairs against ``mj_geomDistance``.

Tolerances: the primitive pairs MuJoCo solves in closed form (sphere, capsule, box, plane) agree
to 1e-9 m (double-precision arithmetic along different formulas); the pairs MuJoCo hands to its
general convex collider (ellipsoid, cylinder, mesh: GJK/EPA) are run with ``ccd_tolerance``
1e-10 and agree to TOL_CCD (1e-6 m, and 1e-4 in the normal, an order above what the collider
reaches on these samples and below anything a contact force could notice: MuJoCo's default
tolerance is 1e-6).
"""

from __future__ import annotations

import zlib

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb  # noqa: F401  (float64)
from diffmb.contacts import Plane
from diffmb.contacts.geometry import (
    Box,
    Capsule,
    ConvexMesh,
    Cylinder,
    Ellipsoid,
    Point,
    PosedGeom,
    Sphere,
    body_index,
    candidates,
    geom_frames,
)
from diffmb.spatial import quaternion as quatm

TOL_PRIM = 1e-9
TOL_CCD = 1e-6
TOL_CCD_NORMAL = 1e-4

ROUND = ("point", "sphere", "capsule")

# a convex polytope with 12 vertices (an irregular one: no symmetric ties), and a box as a mesh
_RNG_MESH = np.random.default_rng(7)
_MESH = _RNG_MESH.normal(size=(12, 3)) * np.array([0.06, 0.05, 0.04])
_BOXMESH = np.array([[sx, sy, sz] for sx in (-0.3, 0.3) for sy in (-0.25, 0.25)
                     for sz in (-0.1, 0.1)])


def _xml_geom(spec):
    kind, size = spec
    if kind == "mesh":
        return f'type="mesh" mesh="{size}"'
    return f'type="{kind}" size="{" ".join(str(s) for s in np.atleast_1d(size))}"'


def _mj_model(spec_a, spec_b, plane=False):
    assets = "".join(f'<mesh name="{nm}" vertex="{" ".join(f"{v:.17g}" for v in V.ravel())}"/>'
                     for nm, V in (("poly", _MESH), ("boxmesh", _BOXMESH)))
    floor = '<geom name="floor" type="plane" size="5 5 0.1"/>' if plane else ""
    b = ("" if spec_b is None else
         f'<body name="b"><freejoint/><geom name="B" {_xml_geom(spec_b)}/></body>')
    xml = f"""<mujoco><option ccd_tolerance="1e-10" ccd_iterations="1000"/>
      <asset>{assets}</asset>
      <worldbody>{floor}
        <body name="a"><freejoint/><geom name="A" {_xml_geom(spec_a)}/></body>{b}
      </worldbody></mujoco>"""
    mj = mujoco.MjModel.from_xml_string(xml)
    return mj, mujoco.MjData(mj)


def _dm_geom(mj, gid, body):
    """The diffmb geom of MuJoCo geom ``gid`` (sizes, pose in its body)."""
    t, s = int(mj.geom_type[gid]), np.asarray(mj.geom_size[gid])
    kw = dict(pos=np.asarray(mj.geom_pos[gid]), quat=np.asarray(mj.geom_quat[gid]))
    G = mujoco.mjtGeom
    if t == G.mjGEOM_SPHERE:
        return Sphere(body, s[0], **kw)
    if t == G.mjGEOM_CAPSULE:
        return Capsule(body, s[0], s[1], **kw)
    if t == G.mjGEOM_BOX:
        return Box(body, s, **kw)
    if t == G.mjGEOM_CYLINDER:
        return Cylinder(body, s[0], s[1], **kw)
    if t == G.mjGEOM_ELLIPSOID:
        return Ellipsoid(body, s, **kw)
    if t == G.mjGEOM_MESH:
        return ConvexMesh.from_mjmodel(mj, gid, body)
    raise AssertionError(t)


def _frames(gA, gB, pa, qa, pb, qb):
    RA, cA = gA.frame(quatm.to_rotmat(qa), pa)
    RB, cB = gB.frame(quatm.to_rotmat(qb), pb)
    return RA, cA, RB, cB


def _directions(gA, gB):
    """Which side gives the points: a round geom's against the other, else both ways."""
    if gA.kind in ROUND:
        return ("A",)
    if gB.kind in ROUND:
        return ("B",)
    return ("A", "B")


@eqx.filter_jit
def pair_depth(gA, gB, pa, qa, pb, qb):
    """Deepest penetration [m] of the pair and the unit normal there pointing from A to B."""
    RA, cA, RB, cB = _frames(gA, gB, pa, qa, pb, qb)
    A, B = PosedGeom(gA, RA, cA), PosedGeom(gB, RB, cB)
    pens, nrms = [], []
    for side in _directions(gA, gB):
        g, R, c, other, sgn = (gA, RA, cA, B, -1.0) if side == "A" else (gB, RB, cB, A, 1.0)
        _, d, n = g.contacts(R, c, other)
        pens.append(-d)
        nrms.append(sgn * n)
    pen, nrm = jnp.concatenate(pens), jnp.concatenate(nrms)
    k = jnp.argmax(pen)
    return pen[k], nrm[k]


@eqx.filter_jit
def terrain_depth(g, p, q, terrain):
    R, c = g.frame(quatm.to_rotmat(q), p)
    _, d, _ = g.contacts(R, c, terrain)
    return jnp.max(-d)


def _rand_quat(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def _set(mj, d, poses):
    for i, (p, q) in enumerate(poses):
        d.qpos[7 * i:7 * i + 3], d.qpos[7 * i + 3:7 * i + 7] = p, q
    mujoco.mj_forward(mj, d)


def _mj_deepest(mj, d):
    """MuJoCo's deepest contact between geoms 'A' and 'B': depth and normal from A to B."""
    ga = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_GEOM, "A")
    cons = [d.contact[i] for i in range(d.ncon)]
    assert cons, "MuJoCo finds no contact"
    c = min(cons, key=lambda c: c.dist)
    n = np.array(c.frame[:3]) * (1.0 if c.geom1 == ga else -1.0)
    return -c.dist, n


def _mj_distance(mj, d):
    ga, gb = (mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_GEOM, n) for n in "AB")
    return mujoco.mj_geomDistance(mj, d, ga, gb, 10.0, None)


def _place(mj, d, pose_a, qb, u, target):
    """Slide A along the unit direction u (its position pose_a(s) = s u + offset) until MuJoCo's
    signed distance between the geoms is ``target`` (bisection on s)."""
    lo, hi = 0.0, 2.0
    for _ in range(60):
        s = 0.5 * (lo + hi)
        _set(mj, d, [(pose_a[0] + s * u, pose_a[1]), (np.zeros(3), qb)])
        if _mj_distance(mj, d) < target:
            lo = s
        else:
            hi = s
    _set(mj, d, [(pose_a[0] + 0.5 * (lo + hi) * u, pose_a[1]), (np.zeros(3), qb)])
    return pose_a[0] + 0.5 * (lo + hi) * u


def _geoms(mj):
    return _dm_geom(mj, 0, "a"), _dm_geom(mj, 1, "b")


# ---- signed distances: exact forms ------------------------------------------------------------


def _face_region_offset(gB, RB, rng):
    """A point of B's top face (B's +z side) in world coordinates, away from its edges, and the
    face's outward normal: where a corner or rim point pressed into B stays in its face region."""
    if isinstance(gB, Box):
        h = np.asarray(gB.half_sizes)
        local = np.array([rng.uniform(-0.3, 0.3) * h[0], rng.uniform(-0.3, 0.3) * h[1], h[2]])
        return np.asarray(RB) @ local, np.asarray(RB)[:, 2]
    raise AssertionError(gB)


# A against B: (spec A, spec B, sampler) where the sampler returns A's direction of approach
PAIRS_ROUND = [
    (("sphere", 0.07), ("sphere", 0.1), TOL_PRIM),
    (("sphere", 0.07), ("capsule", (0.05, 0.12)), TOL_PRIM),
    (("sphere", 0.07), ("box", (0.1, 0.06, 0.08)), TOL_PRIM),
    (("sphere", 0.07), ("cylinder", (0.09, 0.05)), TOL_CCD),
    (("sphere", 0.07), ("ellipsoid", (0.12, 0.07, 0.09)), TOL_CCD),
    (("capsule", (0.04, 0.1)), ("capsule", (0.05, 0.12)), TOL_PRIM),
    (("capsule", (0.04, 0.1)), ("box", (0.1, 0.06, 0.08)), TOL_PRIM),
]


@pytest.mark.parametrize("spec_a, spec_b, tol", PAIRS_ROUND,
                         ids=[f"{a[0]}-{b[0]}" for a, b, _ in PAIRS_ROUND])
def test_round_against_geom_matches_mujoco(spec_a, spec_b, tol):
    """A sphere or capsule pressed into another geom from a random direction at random
    orientations (penetration 30 % of the round geom's radius, so its centre (axis) stays
    outside the other geom): depth and normal as MuJoCo's; separated by 2 cm: the gap is
    MuJoCo's mj_geomDistance."""
    mj, d = _mj_model(spec_a, spec_b)
    gA, gB = _geoms(mj)
    rng = np.random.default_rng(zlib.crc32((spec_a[0] + spec_b[0]).encode()))
    r = float(gA.radius)
    for _ in range(3):
        qa, qb = _rand_quat(rng), _rand_quat(rng)
        u = rng.normal(size=3)
        u /= np.linalg.norm(u)
        pa = _place(mj, d, (np.zeros(3), qa), qb, u, -0.3 * r)
        depth, n = _mj_deepest(mj, d)
        ours, nrm = pair_depth(gA, gB, pa, qa, np.zeros(3), qb)
        assert abs(float(ours) - depth) < tol, (float(ours), depth)
        assert np.allclose(nrm, n, atol=max(tol, TOL_CCD_NORMAL if tol == TOL_CCD else 1e-7))
        pa = _place(mj, d, (np.zeros(3), qa), qb, u, 0.02)
        gap = _mj_distance(mj, d)
        ours, _ = pair_depth(gA, gB, pa, qa, np.zeros(3), qb)
        assert abs(-float(ours) - gap) < tol, (-float(ours), gap)
