"""Geom–geom collision geometry (signed distances, PosedGeom, candidate points) against MuJoCo.

Every expected value comes from MuJoCo: two free bodies carrying one geom each are placed at a
random overlapping pose (``mj_forward``), and diffmb's penetration at its deepest candidate and
the contact normal there are compared with the deepest of MuJoCo's ``d.contact`` (``-dist``,
``frame[:3]``); separated pairs against ``mj_geomDistance``.

Tolerances: the pairs MuJoCo solves in closed form (sphere, capsule, box, plane) agree to
TOL_PRIM = 1e-12 m (double-precision arithmetic along different formulas; 1e-7 in a capsule's
normal, whose axis point is found to 4e-9 of its half-length by golden section). The pairs
MuJoCo hands to its general convex collider (ellipsoid, cylinder, mesh: GJK/EPA, default
tolerance 1e-6) are run with ``ccd_tolerance`` 1e-10 and compared at TOL_CCD = 1e-8 m and
1e-6 in the normal: 100 times that tolerance (a cylinder's curved support converges to
~3e-10, the others to ~1e-15).
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
from diffmb.dynamics.kinematics import kinematics
from diffmb.spatial import quaternion as quatm

TOL_PRIM = 1e-12
TOL_CCD = 1e-8
TOL_CCD_NORMAL = 1e-6

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


def _pair_depth(gA, gB, pa, qa, pb, qb):
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


# one compiled function per pair of geom types: depth, normal and the gradient of the depth
# with respect to the poses (pa, qa, pb, qb)
_depth_normal_grad = eqx.filter_jit(jax.value_and_grad(
    lambda gA, gB, *pose: _pair_depth(gA, gB, *pose), argnums=(2, 3, 4, 5), has_aux=True))


def depth_and_grad(gA, gB, *pose):
    (depth, _), grads = _depth_normal_grad(gA, gB, *(jnp.asarray(x) for x in pose))
    return depth, grads


def pair_depth(gA, gB, *pose):
    return _depth_normal_grad(gA, gB, *(jnp.asarray(x) for x in pose))[0]


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
    (("sphere", 0.03), ("mesh", "poly"), TOL_CCD),
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


def _place_along(mj, d, names, poses_of, target):
    """Bisection on s in [0, 2] so that MuJoCo's signed distance between the geoms ``names``
    is ``target`` at the poses ``poses_of(s)`` (increasing s separates them)."""
    ga, gb = (mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_GEOM, n) for n in names)
    lo, hi = 0.0, 2.0
    for _ in range(60):
        s = 0.5 * (lo + hi)
        _set(mj, d, poses_of(s))
        if mujoco.mj_geomDistance(mj, d, ga, gb, 10.0, None) < target:
            lo = s
        else:
            hi = s
    s = 0.5 * (lo + hi)
    _set(mj, d, poses_of(s))
    return s


PAIRS_FACE = [
    (("box", (0.05, 0.07, 0.09)), ("box", (0.3, 0.25, 0.1)), TOL_PRIM),
    (("mesh", "poly"), ("box", (0.3, 0.25, 0.1)), TOL_CCD),
    (("cylinder", (0.06, 0.04)), ("box", (0.3, 0.25, 0.1)), TOL_CCD),
    (("ellipsoid", (0.06, 0.04, 0.05)), ("box", (0.3, 0.25, 0.1)), TOL_CCD),
    (("mesh", "poly"), ("mesh", "boxmesh"), TOL_CCD),
]


@pytest.mark.parametrize("spec_a, spec_b, tol", PAIRS_FACE,
                         ids=[f"{a[0]}-{b[0]}" for a, b, _ in PAIRS_FACE])
def test_corner_into_face_matches_mujoco(spec_a, spec_b, tol):
    """A box corner, mesh vertex, cylinder rim or ellipsoid pressed 5 mm into the face of a
    larger box (or box-shaped mesh) at random orientations, near the middle of the face: the
    deepest candidate's depth and normal are MuJoCo's (one deepest point: no ties at a random
    orientation)."""
    mj, d = _mj_model(spec_a, spec_b)
    gA, gB = _geoms(mj)
    rng = np.random.default_rng(zlib.crc32((spec_a[0] + spec_b[0] + "face").encode()))
    for _ in range(3):
        qa, qb = _rand_quat(rng), _rand_quat(rng)
        RB = quatm.to_rotmat(jnp.asarray(qb))
        axes = np.asarray(gB.frame(RB, jnp.zeros(3))[0])  # B's geom axes (a mesh is realigned)
        half = (np.asarray(gB.half_sizes) if isinstance(gB, Box) else
                0.5 * np.ptp(np.asarray(gB.vertices), axis=0))
        k = int(np.argmin(half))  # press on the largest faces, away from their edges
        n_face = axes[:, k]
        lateral = np.delete(axes, k, axis=1) @ (np.delete(half, k) * rng.uniform(-0.3, 0.3, 2))
        s = _place_along(mj, d, "AB",
                         lambda s, o=lateral, n=n_face, qa=qa, qb=qb:
                         [(o + s * n, qa), (np.zeros(3), qb)], -0.005)
        depth, n = _mj_deepest(mj, d)
        ours, nrm = pair_depth(gA, gB, lateral + s * n_face, qa, np.zeros(3), qb)
        assert abs(float(ours) - depth) < tol, (float(ours), depth)
        assert np.allclose(nrm, n, atol=1e-7 if tol == TOL_PRIM else TOL_CCD_NORMAL)


@pytest.mark.parametrize("spec, tol", [
    (("ellipsoid", (0.06, 0.04, 0.05)), TOL_PRIM), (("mesh", "poly"), TOL_PRIM),
    (("cylinder", (0.06, 0.04)), 1e-9), (("box", (0.05, 0.07, 0.09)), TOL_PRIM)],
    ids=["ellipsoid", "mesh", "cylinder", "box"])
def test_against_plane_matches_mujoco(spec, tol):
    """Ellipsoid, mesh, cylinder and box pressed 5 mm into MuJoCo's floor plane at random
    orientations: the deepest candidate's depth is MuJoCo's deepest contact's (the cylinder's
    to the bound r ε²/(2|w|²) of its regularised rim direction, ~3e-10 m here)."""
    mj, d = _mj_model(spec, None, plane=True)
    g = _dm_geom(mj, 1, "a")
    rng = np.random.default_rng(zlib.crc32((spec[0] + "plane").encode()))
    for _ in range(3):
        qa = _rand_quat(rng)
        s = _place_along(mj, d, ("A", "floor"), lambda s, qa=qa: [(np.array([0.0, 0.0, s]), qa)],
                         -0.005)
        cons = [d.contact[i] for i in range(d.ncon)]
        depth = -min(c.dist for c in cons)
        ours = terrain_depth(g, np.array([0.0, 0.0, s]), qa, Plane())
        assert abs(float(ours) - depth) < tol, (float(ours), depth)


def test_convex_mesh_reads_mujocos_hull():
    """A mesh with an interior vertex and a concave notch: from_mjmodel keeps exactly the
    vertices of the hull MuJoCo built (its mesh_graph), in the recentred frame MuJoCo collides;
    its planes are the hull's merged faces (a box-shaped mesh: 6 planes); a concave mesh
    against the floor rests on its hull like MuJoCo's."""
    notch = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1],
                      [1, 1, 1], [0, 1, 1], [0.5, 0.5, 0.2], [0.5, 0.5, 0.9]]) * 0.1
    xml = f"""<mujoco><asset><mesh name="m" vertex="{' '.join(map(str, notch.ravel()))}"/>
      <mesh name="b" vertex="{' '.join(map(str, _BOXMESH.ravel()))}"/></asset>
      <worldbody><geom name="floor" type="plane" size="1 1 .1"/>
      <body name="a" pos="0 0 0.3"><freejoint/><geom name="A" type="mesh" mesh="m"/></body>
      <body name="b" pos="1 0 0.3"><freejoint/><geom name="B" type="mesh" mesh="b"/></body>
      </worldbody></mujoco>"""
    mj = mujoco.MjModel.from_xml_string(xml)
    g = ConvexMesh.from_mjmodel(mj, 1, "a")
    assert g.name == "A" and g.n_points == 8 and g.planes.shape == (6, 4)
    V = np.asarray(mj.mesh_vert[:10], dtype=float)
    hull8 = V[np.linalg.norm(V - V.mean(0), axis=1) > 0.05]  # the cube's corners
    assert np.allclose(np.sort(np.asarray(g.vertices), axis=0), np.sort(hull8, axis=0))
    gb = ConvexMesh.from_mjmodel(mj, 2, "b", name="slab")
    assert gb.name == "slab" and gb.planes.shape == (6, 4)
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(3)
    qa = _rand_quat(rng)
    s = _place_along(mj, d, ("A", "floor"),
                     lambda s: [(np.array([0.0, 0.0, s]), qa), (np.array([1.0, 0, 0.3]),
                                                                np.array([1.0, 0, 0, 0]))],
                     -0.004)
    depth = -min(d.contact[i].dist for i in range(d.ncon) if 1 in (d.contact[i].geom1,
                                                                   d.contact[i].geom2))
    ours = terrain_depth(g, np.array([0.0, 0.0, s]), qa, Plane())
    assert abs(float(ours) - depth) < TOL_PRIM


# ---- closed forms ------------------------------------------------------------------------------


@eqx.filter_jit
def sd_many(g, X):
    return jax.vmap(g.signed_distance_local)(X)


def test_signed_distances_closed_forms():
    """Box, cylinder, capsule and point distances at hand-computed points (inside, on faces,
    outside edges and corners); an ellipsoid with equal radii is a sphere; a box-shaped mesh is
    the box everywhere (inside, and outside its faces, edges and corners)."""
    e = np.hypot(0.05, 0.1)
    cases = [
        (Box(0, (0.3, 0.2, 0.1)), [
            ((0.0, 0.0, 0.0), -0.1, (0, 0, 1)), ((0.0, 0.25, 0.0), 0.05, (0, 1, 0)),
            ((0.4, 0.2, 0.0), 0.1, (1, 0, 0)),
            ((0.6, 0.6, 0.5), np.sqrt(0.41), np.array([0.3, 0.4, 0.4]) / np.sqrt(0.41)),
            ((0.35, -0.3, 0.0), e, (0.05 / e, -0.1 / e, 0))]),
        (Cylinder(0, 0.2, 0.1), [
            ((0.1, 0.0, 0.05), -0.05, (0, 0, 1)), ((0.0, 0.15, 0.0), -0.05, (0, 1, 0)),
            ((0.3, 0.0, 0.2), np.hypot(0.1, 0.1), (0.5**0.5, 0, 0.5**0.5)),
            ((0.0, 0.0, -0.3), 0.2, (0, 0, -1)), ((0.0, 0.5, 0.0), 0.3, (0, 1, 0))]),
        (Capsule(0, 0.05, 0.2), [((0.0, 0.3, 0.1), 0.25, (0, 1, 0)),
                                 ((0.0, 0.0, 0.4), 0.15, (0, 0, 1))]),
        (Point(0), [((0.3, 0.4, 0.0), 0.5, (0.6, 0.8, 0.0))]),
    ]
    for g, rows in cases:
        X, D, N = (np.array([r[i] for r in rows], dtype=float) for i in range(3))
        d, n = sd_many(g, jnp.asarray(X))
        assert np.allclose(d, D, atol=1e-15) and np.allclose(n, N, atol=1e-15), g.kind
    X = jnp.asarray(np.random.default_rng(0).normal(size=(20, 3)) * 0.3)
    de, ds = sd_many(Ellipsoid(0, (0.2, 0.2, 0.2)), X)[0], sd_many(Sphere(0, 0.2), X)[0]
    assert np.allclose(de, ds, atol=1e-13)
    dm, db = sd_many(ConvexMesh(0, _BOXMESH), X)[0], sd_many(Box(0, (0.3, 0.25, 0.1)), X)[0]
    outside = np.sum(np.abs(np.asarray(X)) > np.array([0.3, 0.25, 0.1]), axis=1)
    assert np.sum(outside == 0) >= 2 and np.sum(outside >= 2) >= 3  # inside; edge/corner regions
    assert np.allclose(dm, db, atol=1e-15)


def test_ellipsoid_distance_is_exact():
    """Points at a known distance along the normal of random surface points (inside within the
    smallest radius of curvature, and outside): the ellipsoid's signed distance and normal are
    exact; the gradient of d is the normal, and in the radii the finite difference; the centre
    is at -r_min."""
    r = np.array([0.3, 0.2, 0.5])
    g = Ellipsoid(0, r)
    u = np.random.default_rng(1).normal(size=(10, 3))
    y = u / np.sqrt(np.sum((u / r) ** 2, axis=1, keepdims=True))
    nrm = y / r**2
    nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
    grad = eqx.filter_jit(jax.vmap(jax.grad(lambda x: g.signed_distance_local(x)[0])))
    for dd in (0.2, 0.01, -0.03):
        X = jnp.asarray(y + dd * nrm)
        d, n = sd_many(g, X)
        assert np.allclose(d, dd, atol=1e-13) and np.allclose(n, nrm, atol=1e-12)
        assert np.allclose(grad(X), nrm, atol=1e-12)
    d, n = sd_many(g, jnp.zeros((1, 3)))
    assert abs(float(d[0]) + 0.2) < 1e-6 and np.allclose(n, (0, 1, 0))
    assert np.all(np.isfinite(grad(jnp.zeros((1, 3)))))
    # the derivative in the radii is the central difference of the distance
    x = jnp.asarray(y[0] + 0.05 * nrm[0])
    dist = jax.jit(lambda rr: Ellipsoid(0, rr).signed_distance_local(x)[0])
    g_r = np.asarray(jax.jit(jax.grad(dist))(jnp.asarray(r)))
    h = 1e-6
    fd = [(float(dist(r + h * e)) - float(dist(r - h * e))) / (2 * h) for e in np.eye(3)]
    assert np.allclose(g_r, fd, atol=1e-7) and np.linalg.norm(fd) > 0.1


# ---- gradients at degenerate configurations ---------------------------------------------------

I4 = np.array([1.0, 0.0, 0.0, 0.0])
QTILT = np.array([np.cos(0.35), np.sin(0.35) * 0.6, np.sin(0.35) * 0.8, 0.0])

DEGENERATE = [
    ("sphere in sphere, same centre", Sphere("a", 0.07), Sphere("b", 0.1),
     (np.zeros(3), I4), (np.zeros(3), I4), 0.17),
    ("parallel coincident capsules", Capsule("a", 0.05, 0.1), Capsule("b", 0.05, 0.1),
     (np.zeros(3), I4), (np.zeros(3), I4), 0.1),
    ("sphere touching down on a box face", Sphere("a", 0.07), Box("b", (0.3, 0.2, 0.1)),
     (np.array([0.1, 0.05, 0.17]), I4), (np.zeros(3), I4), 0.0),
    ("sphere centre on a box edge", Sphere("a", 0.07), Box("b", (0.3, 0.2, 0.1)),
     (np.array([0.3, 0.0, 0.1]), I4), (np.zeros(3), I4), 0.07),
    ("box flat on a box (parallel faces)", Box("a", (0.05, 0.05, 0.05)),
     Box("b", (0.3, 0.2, 0.1)), (np.array([0.0, 0.0, 0.149]), I4), (np.zeros(3), I4), 0.001),
    ("box corner on a box edge", Box("a", (0.05, 0.05, 0.05)), Box("b", (0.3, 0.2, 0.1)),
     (np.array([0.35, 0.0, 0.15]), I4), (np.zeros(3), I4), 0.0),
    ("boxes with the same centre", Box("a", (0.05, 0.05, 0.05)), Box("b", (0.1, 0.1, 0.1)),
     (np.zeros(3), I4), (np.zeros(3), I4), 0.05),
    ("capsule flat on a box face", Capsule("a", 0.05, 0.1), Box("b", (0.3, 0.2, 0.1)),
     (np.array([0.0, 0.0, 0.15]), np.array([0.5**0.5, 0.5**0.5, 0.0, 0.0])), (np.zeros(3), I4),
     0.0),
    ("cylinder end face flat on a box", Cylinder("a", 0.05, 0.05), Box("b", (0.3, 0.2, 0.1)),
     (np.array([0.0, 0.0, 0.149]), I4), (np.zeros(3), I4), 0.001),
    ("ellipsoid and sphere, same centre", Ellipsoid("a", (0.06, 0.04, 0.05)),
     Sphere("b", 0.1), (np.zeros(3), I4), (np.zeros(3), I4), 0.14),
    ("mesh inside a box, same centre", ConvexMesh("a", _BOXMESH * 0.2),
     Box("b", (0.3, 0.2, 0.1)), (np.zeros(3), I4), (np.zeros(3), I4), None),
    ("ellipsoid touching a box edge", Ellipsoid("a", (0.06, 0.04, 0.05)),
     Box("b", (0.3, 0.25, 0.1)), (np.array([0.3, 0.0, 0.15]), QTILT), (np.zeros(3), I4), None),
]


@pytest.mark.parametrize("case", DEGENERATE, ids=[c[0] for c in DEGENERATE])
def test_gradients_finite_at_degenerate_configurations(case):
    """jax.grad of the deepest penetration with respect to both poses (positions and
    quaternions) is finite at touch-down, coincident centres, edges and parallel faces; where
    the depth is known in closed form it is that."""
    _, gA, gB, (pa, qa), (pb, qb), expected = case
    val, grads = depth_and_grad(gA, gB, pa, qa, pb, qb)
    assert np.isfinite(float(val))
    assert all(np.all(np.isfinite(np.asarray(gr))) for gr in grads), grads
    if expected is not None:
        assert abs(float(val) - expected) < 1e-9, (float(val), expected)


@pytest.mark.parametrize("spec_a, spec_b", [
    (("capsule", (0.04, 0.1)), ("box", (0.1, 0.06, 0.08))),
    (("sphere", 0.07), ("ellipsoid", (0.12, 0.07, 0.09))),
    (("cylinder", (0.06, 0.04)), ("box", (0.3, 0.25, 0.1))),
], ids=lambda s: s[0])
def test_depth_gradient_matches_finite_differences(spec_a, spec_b):
    """At generic overlapping poses, jax.grad of the deepest penetration with respect to A's
    position is the central finite difference of the depth (the capsule's search parameter and
    the ellipsoid's closest point sit under stop_gradient: the envelope theorem keeps the
    gradient exact)."""
    mj, _ = _mj_model(spec_a, spec_b)
    gA, gB = _geoms(mj)
    rng = np.random.default_rng(zlib.crc32((spec_a[0] + spec_b[0] + "fd").encode()))
    qa, qb = jnp.asarray(_rand_quat(rng)), jnp.asarray(_rand_quat(rng))
    R = quatm.to_rotmat(qb)
    u = R[:, 2] + 0.3 * R[:, 0]
    u = u / jnp.linalg.norm(u)
    f = lambda p: pair_depth(gA, gB, p, qa, jnp.zeros(3), qb)[0]
    zero = jnp.zeros(3)
    lo, hi = 0.0, 0.3  # the depth falls along u: find where it is 1 cm
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(f(mid * u)) > 0.01 else (lo, mid)
    p0 = 0.5 * (lo + hi) * u
    assert 0.0 < float(f(p0)) < 0.02
    g = np.asarray(depth_and_grad(gA, gB, p0, qa, zero, qb)[1][0])
    h = 1e-6
    fd = np.array([(float(f(p0 + h * e)) - float(f(p0 - h * e))) / (2 * h) for e in np.eye(3)])
    assert np.allclose(g, fd, atol=1e-6), (g, fd)


# ---- bodies and the world ----------------------------------------------------------------------


def test_geoms_on_the_world_and_candidates(tmp_path):
    """A geom on body "world" (index -1) sits at its pose in the world frame with zero
    velocity; a sphere on a moving body against it (a PosedGeom from geom_frames) has its
    centre's velocity and the depth of the closed form."""
    p = tmp_path / "ball.xml"
    p.write_text('<mujoco><worldbody><body name="ball"><freejoint/><geom type="sphere" '
                 'size="0.1"/></body></worldbody></mujoco>')
    model = diffmb.load_mjcf(p)
    assert body_index(model, "world") == -1
    table = Box("world", (0.5, 0.5, 0.05), pos=(0.0, 0.0, 0.3), name="table")
    q = jnp.array([0.1, 0.0, 0.44, 1.0, 0.0, 0.0, 0.0])
    v = jnp.array([0.3, 0.0, -1.0, 0.0, 0.0, 0.0])
    c = jax.jit(lambda q, v: candidates(model, [table], Plane(), q, v))(q, v)
    assert c.body == (-1,) * 8 and np.all(np.asarray(c.velocity) == 0.0)
    assert np.allclose(np.sort(np.asarray(c.point)[:, 2]), [0.25] * 4 + [0.35] * 4)
    ball = Sphere("ball", 0.1)

    @jax.jit
    def against_table(q, v):
        kin = kinematics(model, q, v)
        (R, cw), = geom_frames(model, kin, [table])
        return candidates(model, [ball], PosedGeom(table, R, cw), q, v, kin=kin)

    c = against_table(q, v)
    assert np.isclose(float(c.penetration[0]), 0.01) and np.allclose(c.normal[0], (0, 0, 1))
    assert np.allclose(c.velocity[0], (0.3, 0.0, -1.0)) and c.body == (0,)
    assert np.allclose(c.point[0], (0.1, 0.0, 0.34))


# ---- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize("make, exc, match", [
    (lambda: Ellipsoid("b", (0.1, -0.2, 0.1)), ValueError, r"Ellipsoid\.radii\[1\] = -0\.2"),
    (lambda: Ellipsoid("b", (0.1, 0.2), name="e"), TypeError, r"Ellipsoid 'e'\.radii: expected"),
    (lambda: ConvexMesh("b", np.eye(3)[:, :2]), TypeError, r"ConvexMesh\.vertices: expected"),
    (lambda: ConvexMesh("b", np.c_[np.random.default_rng(0).normal(size=(9, 2)), np.zeros(9)],
                        name="foot"), ValueError, r"ConvexMesh 'foot'\.vertices: .*flat"),
    (lambda: ConvexMesh("b", np.zeros((3, 3))), ValueError, r"ConvexMesh\.vertices: .*flat"),
    (lambda: ConvexMesh("b", [[0, 0, 0], [1, 0, 0], [0, np.nan, 0], [0, 0, 1]]), ValueError,
     r"ConvexMesh\.vertices"),
    (lambda: ConvexMesh.from_mjmodel(_mj_model(("sphere", 0.1), None)[0], 0, "a"), ValueError,
     r"geom 'A' is not a mesh"),
])
def test_new_geoms_refuse_bad_input(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_per_instance_point_counts_and_thickness():
    """n_points is read on instances (a mesh's is its hull's vertex count); thickness is the
    ellipsoid's smallest radius and half a box-shaped mesh's smallest width."""
    m = ConvexMesh("b", np.vstack([_BOXMESH, [[0.0, 0.0, 0.0]]]))
    assert m.n_points == 8 and Ellipsoid("b", (0.1, 0.2, 0.3)).n_points == 1
    assert Box("b", (1, 1, 1)).n_points == 8
    assert np.isclose(float(m.thickness()), 0.1)
    assert np.isclose(float(Ellipsoid("b", (0.3, 0.2, 0.25)).thickness()), 0.2)
    assert m.points(jnp.eye(3), jnp.zeros(3), Plane()).shape == (8, 3)
