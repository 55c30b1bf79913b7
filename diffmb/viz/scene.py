"""What a replay shows, computed in Python: shapes, terrain, body poses per frame, force arrows.

A :class:`Scene` is renderer-neutral (plain numpy): the HTML page (:mod:`diffmb.viz.html`) and
the matplotlib renderer (:mod:`diffmb.viz.render`) both draw one.

Shapes (:class:`Primitive`) follow MuJoCo's size conventions, in the frame of their body:
``box`` half-extents (3); ``sphere`` (r,); ``capsule`` (r, half-length) and ``cylinder``
(r, half-height) along the shape's local z; ``ellipsoid`` radii (3); ``plane`` half-sizes
(x, y) (0: sized to the motion); ``mesh`` vertices/faces. ``body = -1`` is the world.

Where the shapes come from (the files are read by :mod:`diffmb.io.geometry`):

* a :class:`~diffmb.Model` loaded by ``load_mjcf``: the file's geoms as MuJoCo compiles them
  (meshes included, as MuJoCo centres them; height fields become terrain); geom groups above 2
  and fully transparent geoms are hidden, as MuJoCo's viewer does by default;
* a model loaded by ``load_urdf``: each link's ``<visual>`` (else ``<collision>``) box, cylinder,
  sphere, and STL meshes whose files are found (``package://`` resolved against the URDF's folder,
  its parents, ``ROS_PACKAGE_PATH`` and installed ``share/`` folders); other meshes are drawn as
  bones;
* any other model (built by hand, or a file that cannot be read): a skeleton, one capsule "bone"
  from each body's parent frame to its frame and a small sphere at each frame;
* a system that is not a Model: :func:`primitives_of`, :func:`poses_of` and
  :func:`body_names_of`, dispatched on the system's type (``functools.singledispatch``; the
  UAV and the absolute-coordinate systems are registered in :mod:`diffmb.viz.systems`).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import numpy as np

from ..dynamics.kinematics import body_poses
from ..model import Model
from ..simulation import Trajectory
from ..spatial.quaternion import from_rotmat, to_rotmat

__all__ = ["Primitive", "PosedBodies", "Scene", "build_scene", "shapes_of", "primitives_of",
           "poses_of", "body_names_of", "quat_from_matrix", "matrix_from_quat", "frames"]

_from_rotmats = jax.jit(jax.vmap(from_rotmat))
PALETTE = [(0.12, 0.47, 0.71), (1.0, 0.50, 0.05), (0.17, 0.63, 0.17), (0.84, 0.15, 0.16),
           (0.58, 0.40, 0.74), (0.55, 0.34, 0.29), (0.89, 0.47, 0.76), (0.50, 0.50, 0.50),
           (0.74, 0.74, 0.13), (0.09, 0.75, 0.81)]
KINDS = ("box", "sphere", "capsule", "cylinder", "ellipsoid", "plane", "mesh")


@dataclasses.dataclass
class Primitive:
    """One shape fixed to a body (``body`` index into the poses; -1: the world)."""

    kind: str
    size: tuple = (0.05, 0.05, 0.05)
    body: int = -1
    pos: tuple = (0.0, 0.0, 0.0)
    quat: tuple = (1.0, 0.0, 0.0, 0.0)
    rgba: tuple = (0.7, 0.7, 0.75, 1.0)
    vertices: np.ndarray | None = None  # mesh only: (nv, 3) in the shape's frame
    faces: np.ndarray | None = None  # mesh only: (nf, 3) vertex indices
    name: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Primitive {self.name!r}: unknown kind {self.kind!r}; one of {KINDS}")
        if self.kind == "mesh" and (self.vertices is None or self.faces is None):
            raise ValueError(f"Primitive {self.name!r}: a mesh needs vertices and faces")
        self.size = tuple(float(x) for x in np.atleast_1d(self.size))
        self.pos = tuple(float(x) for x in self.pos)
        q = np.asarray(self.quat, float)
        self.quat = tuple(float(x) for x in q / np.linalg.norm(q))
        rgba = tuple(float(x) for x in self.rgba)
        self.rgba = rgba + (1.0,) * (4 - len(rgba))


@dataclasses.dataclass
class PosedBodies:
    """Bodies whose poses are the trajectory's q itself: q = [p_1, quat_1, p_2, quat_2, ...]
    (7 per body, quaternion wxyz), e.g. poses computed by a study. ``shapes``: its
    :class:`Primitive` list; ``body_names``: one name per body."""

    shapes: list
    body_names: tuple

    def __post_init__(self):
        self.shapes, self.body_names = list(self.shapes), tuple(self.body_names)


def frames(ts, q, v=None, aux=None) -> Trajectory:
    """A :class:`~diffmb.Trajectory` of recorded states for a replay: ``ts`` (ns,), ``q``
    (ns, nq) or (B, ns, nq); ``v`` and ``aux`` optional (force arrows need them)."""
    ts, q = np.asarray(ts, float), np.asarray(q, float)
    return Trajectory(ts=ts, q=q, v=None if v is None else np.asarray(v, float),
                      status=np.zeros(q.shape[:-2], np.int32), t_fail=np.full(q.shape[:-2], np.inf),
                      num_steps=np.full(q.shape[:-2], q.shape[-2], np.int32), aux=aux)


@dataclasses.dataclass
class Scene:
    """Everything a renderer needs. Arrays are float64 here; writers convert to float32.

    ``times`` (nf,); ``tracks``: list of dicts {label, color, opacity, poses (nf, nb, 7)};
    ``forces``: list of dicts {kind, label, color, points (nf, n, 3), vectors (nf, n, 3) [N]};
    ``terrain``: list of dicts ({kind: "plane", normal, offset} or {kind: "hfield", heights
    (nx, ny), origin (2,), spacing (2,)}); ``bounds`` (2, 3): box around the motion.
    """

    body_names: tuple
    body_parents: tuple
    shapes: list
    times: np.ndarray
    tracks: list
    forces: list = dataclasses.field(default_factory=list)
    terrain: list = dataclasses.field(default_factory=list)
    frames: bool = False
    title: str = "diffmb replay"
    notes: list = dataclasses.field(default_factory=list)

    @property
    def bounds(self) -> np.ndarray:
        P = np.concatenate([t["poses"][..., :3].reshape(-1, 3) for t in self.tracks])
        P = P[np.all(np.isfinite(P), axis=1)]
        if P.size == 0:
            return np.array([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
        lo, hi = P.min(0), P.max(0)
        pad = max(self.extent() * 0.6, 0.05)
        return np.stack([lo - pad, hi + pad])

    def extent(self) -> float:
        """Characteristic size of the bodies' shapes [m] (for axes, arrows, planes)."""
        r = [_radius(s) for s in self.shapes if s.body >= 0 and s.kind != "plane"]
        return float(np.clip(max(r) if r else 0.1, 0.02, 10.0))


# ------------------------------------------------------------------------------------------
# rotations
# ------------------------------------------------------------------------------------------


def quat_from_matrix(R) -> np.ndarray:
    """Unit quaternions wxyz (..., 4), w >= 0, of rotation matrices (..., 3, 3)
    (:func:`diffmb.spatial.quaternion.from_rotmat` over the leading axes)."""
    R = np.asarray(R, float)
    flat = R.reshape(-1, 3, 3)
    q = np.asarray(_from_rotmats(flat)) if len(flat) else np.zeros((0, 4))
    return q.reshape(R.shape[:-2] + (4,))


def matrix_from_quat(q) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of quaternions wxyz (..., 4) (normalised first)."""
    q = np.asarray(q, float)
    return np.asarray(to_rotmat(q / np.linalg.norm(q, axis=-1, keepdims=True)))


def _radius(s: Primitive) -> float:
    if s.kind == "mesh":
        v = s.vertices
        return float(np.max(np.linalg.norm(v, axis=1))) if len(v) else 0.0
    if s.kind == "capsule":
        return s.size[0] + s.size[1]
    if s.kind == "cylinder":
        return float(np.hypot(s.size[0], s.size[1]))
    return float(np.linalg.norm(s.size) if s.kind == "box" else max(s.size))


# ------------------------------------------------------------------------------------------
# shapes of a Model
# ------------------------------------------------------------------------------------------


def _body_parents(model) -> tuple:
    """Parent body of each body (-1: world) from the node tree."""
    node_body = {}
    for b, n in enumerate(model.body_node):
        node_body.setdefault(n, b)  # the first body on a node is the one the node moves
    out = []
    for b, n in enumerate(model.body_node):
        if n < 0:
            out.append(-1)
            continue
        if node_body[n] != b:  # welded to the node's first body
            out.append(node_body[n])
            continue
        p = model.node_parent[n]
        while p >= 0 and p not in node_body:
            p = model.node_parent[p]
        out.append(node_body.get(p, -1) if p >= 0 else -1)
    return tuple(out)


def _skeleton(model, q0, notes) -> list:
    """Capsule bones from each body's parent frame to its frame, spheres at the frames."""
    R, p = (np.asarray(a) for a in body_poses(model, q0))
    parents = _body_parents(model)
    L = [np.linalg.norm(p[b] - p[parents[b]]) for b in range(len(p)) if parents[b] >= 0]
    r = 0.04 * (np.median([x for x in L if x > 1e-6]) if any(x > 1e-6 for x in L) else 1.0)
    r = float(np.clip(r, 0.005, 0.2))
    shapes = []
    for b in range(len(p)):
        color = PALETTE[b % len(PALETTE)] + (1.0,)
        shapes.append(Primitive("sphere", (1.6 * r,), b, rgba=color, name=f"{model.body_names[b]}"))
        pb = parents[b]
        if pb < 0:
            continue
        d = R[b].T @ (p[pb] - p[b])  # the parent's origin in this body's frame
        n = np.linalg.norm(d)
        if n < 1e-9:
            continue
        shapes.append(Primitive("capsule", (r, n / 2), b, pos=tuple(d / 2),
                                quat=tuple(_quat_z_to(d / n)), rgba=color,
                                name=f"bone {model.body_names[b]}"))
    notes.append("bodies drawn as a skeleton (bones between body frames): the model carries no "
                 "geometry of its own")
    return shapes


def _soft(c, k=0.25):
    """A palette colour mixed with white (for bodies without a colour of their own)."""
    return tuple(float((1 - k) * x + k) for x in c) + (1.0,)


def _quat_z_to(d) -> np.ndarray:
    """Quaternion rotating +z onto unit vector d."""
    z = np.array([0.0, 0.0, 1.0])
    c = float(z @ d)
    if c < -1 + 1e-12:
        return np.array([0.0, 1.0, 0.0, 0.0])
    axis = np.cross(z, d)
    q = np.array([1.0 + c, *axis])
    return q / np.linalg.norm(q)


def _primitive(g, b, rgba) -> Primitive:
    return Primitive(g.kind, g.size, b, pos=g.pos, quat=g.quat, rgba=rgba, vertices=g.vertices,
                     faces=g.faces, name=g.name)


def _mjcf_shapes(model, path, notes):
    """The file's geoms; groups above 2 and transparent geoms hidden (MuJoCo's viewer default);
    MuJoCo's default grey coloured by body; world height fields as terrain."""
    from ..io.geometry import mjcf_geoms

    geoms, terrains, more = mjcf_geoms(path)
    notes += more
    index = {n: i for i, n in enumerate(model.body_names)}
    shapes = []
    for g in geoms:
        if g.group > 2 or (g.rgba is not None and g.rgba[3] == 0):
            continue
        if g.body is not None and g.body not in index:
            continue
        b = -1 if g.body is None else index[g.body]
        rgba = g.rgba or ((0.62, 0.58, 0.5, 1.0) if b < 0 else _soft(PALETTE[(b + 1) % len(PALETTE)]))
        shapes.append(_primitive(g, b, rgba))
    terrain = [dict(kind="hfield", heights=np.asarray(t.heights), origin=np.asarray(t.origin),
                    spacing=np.asarray(t.spacing), rgba=(0.62, 0.58, 0.5, 1.0)) for t in terrains]
    return shapes, terrain


def _urdf_shapes(model, path, notes):
    """Each link's visual (else collision) shapes; the links whose meshes are not read."""
    from ..io.geometry import urdf_geoms

    geoms, missing = urdf_geoms(path)
    index = {n: i for i, n in enumerate(model.body_names)}
    shapes = [_primitive(g, index[g.body], g.rgba or (0.7, 0.7, 0.75, 1.0))
              for g in geoms if g.body in index]
    missing = [n for n in missing if n in index]
    if missing:
        notes.append(f"links {missing}: mesh files not found or not STL; drawn as bones")
    return shapes, missing


def _unregistered(system) -> str:
    return (f"{type(system).__name__}: diffmb.viz does not know how to draw it; register its "
            "shapes with @diffmb.viz.primitives_of.register and its body poses with "
            "@diffmb.viz.poses_of.register")


@functools.singledispatch
def primitives_of(system) -> list:
    """The shapes of ``system``'s bodies: a list of :class:`Primitive` whose ``body`` indexes
    the rows of :func:`poses_of`. One implementation per system type, registered with
    ``@diffmb.viz.primitives_of.register`` (with :func:`poses_of` and :func:`body_names_of`)."""
    raise TypeError(_unregistered(system))


@functools.singledispatch
def poses_of(system, q) -> np.ndarray:
    """World poses (..., nb, 7) = [p, quat wxyz] of ``system``'s bodies for q (..., nq) (a
    trajectory's q); registered per system type like :func:`primitives_of`."""
    raise TypeError(_unregistered(system))


@functools.singledispatch
def body_names_of(system) -> tuple | None:
    """Names of the bodies in :func:`poses_of` order (None: numbered)."""
    return None


@body_names_of.register
def _(system: PosedBodies):
    return system.body_names


@primitives_of.register
def _(system: PosedBodies):
    return list(system.shapes)


@poses_of.register
def _(system: PosedBodies, q):
    q = np.asarray(q, float)
    n = len(system.body_names)
    if q.shape[-1] != 7 * n:
        raise ValueError(f"PosedBodies: q has width {q.shape[-1]}, expected 7 x {n} bodies = "
                         f"{7 * n}")
    return q.reshape(*q.shape[:-1], n, 7)


@body_names_of.register
def _(system: Model):
    return system.body_names


@primitives_of.register
def _(system: Model):
    return shapes_of(system)[0]


@poses_of.register
def _(system: Model, q):
    q = np.asarray(q, float)
    if q.shape[-1] != system.nq:
        raise ValueError(f"trajectory q has width {q.shape[-1]} but model {system.name!r} has "
                         f"nq = {system.nq} (joints {list(system.joint_names)})")
    flat = q.reshape(-1, system.nq)
    fk = jax.jit(jax.vmap(lambda qq: body_poses(system, qq)))
    Rs, ps = [], []
    for i in range(0, len(flat), 4096):  # bounded memory for long replays
        R, p = fk(flat[i:i + 4096])
        Rs.append(np.asarray(R))
        ps.append(np.asarray(p))
    R, p = np.concatenate(Rs), np.concatenate(ps)
    out = np.concatenate([p, quat_from_matrix(R)], axis=-1)
    return out.reshape(*q.shape[:-1], system.n_bodies, 7)


def shapes_of(system, q0=None, notes=None) -> tuple[list, list]:
    """``(shapes, terrain)``: a Model's file geometry (``Model.source``; MJCF height fields are
    terrain), else its skeleton; any other system's :func:`primitives_of`."""
    notes = [] if notes is None else notes
    if not isinstance(system, Model):
        shapes = list(primitives_of(system))
        for s in shapes:
            if not isinstance(s, Primitive):
                raise TypeError(f"primitives_of({type(system).__name__}) must return "
                                f"diffmb.viz.Primitive objects, got {type(s).__name__}")
        return shapes, []
    src = system.source
    q0 = np.asarray(system.qpos0) if q0 is None else q0
    if src is not None and os.path.exists(src.path):
        try:
            if src.kind == "mjcf":
                return _mjcf_shapes(system, src.path, notes)
            shapes, missing = _urdf_shapes(system, src.path, notes)
            if missing or not shapes:
                bones = _skeleton(system, q0, [])
                keep = {system.body_index(n) for n in missing} if shapes else None
                shapes += [s for s in bones if keep is None or s.body in keep]
            return shapes, []
        except Exception as e:  # an unreadable file: fall back to the skeleton, say so
            notes.append(f"geometry of {src.path} not read ({type(e).__name__}: {e})")
    return _skeleton(system, q0, notes), []


def _poses(system, q) -> np.ndarray:
    """:func:`poses_of` checked: (..., nb, 7) with unit quaternions."""
    q = np.asarray(q, float)
    P = np.array(poses_of(system, q), dtype=float)
    if P.shape[:-2] != q.shape[:-1] or P.shape[-1] != 7:
        raise ValueError(f"poses_of({type(system).__name__}) must return (..., nb, 7) for q of "
                         f"shape {q.shape}, got {P.shape}")
    P[..., 3:] /= np.linalg.norm(P[..., 3:], axis=-1, keepdims=True)
    return P


# ------------------------------------------------------------------------------------------
# trajectories, forces, the scene
# ------------------------------------------------------------------------------------------


def _as_runs(traj, labels):
    """[(label, ts (ns,), q (ns, nq), traj, batch index)] from a Trajectory (batched or not) or
    a list of them."""
    items = list(traj) if isinstance(traj, list | tuple) else [traj]
    runs = []
    for i, tr in enumerate(items):
        if not isinstance(tr, Trajectory):
            raise TypeError(f"traj[{i}]: expected a diffmb.Trajectory (diffmb.viz.frames(ts, q) "
                            f"makes one from arrays), got {type(tr).__name__}")
        ts, q = np.asarray(tr.ts, float), np.asarray(tr.q, float)
        if q.ndim == 2:
            runs.append([f"run {i}", ts.reshape(-1), q, tr, None])
        elif q.ndim == 3:
            for b in range(q.shape[0]):
                t_b = ts[b] if ts.ndim == 2 else ts
                runs.append([f"run {i}.{b}" if len(items) > 1 else f"run {b}", t_b, q[b], tr, b])
        else:
            raise ValueError(f"traj[{i}].q has shape {q.shape}: expected (ns, nq) or (batch, ns, nq)")
        if runs[-1][1].shape[0] != runs[-1][2].shape[0]:
            raise ValueError(f"traj[{i}]: {runs[-1][1].shape[0]} times but {runs[-1][2].shape[0]} "
                             "saved states")
    if labels is not None:
        labels = list(labels)
        if len(labels) != len(runs):
            raise ValueError(f"labels: {len(labels)} given for {len(runs)} trajectories")
        for r, lab in zip(runs, labels, strict=True):
            r[0] = str(lab)
    return runs


def _resample(ts, P, times):
    """Poses P (ns, nb, 7) at ``times`` (linear in position, normalised lerp of quaternions)."""
    if ts.shape == times.shape and np.allclose(ts, times):
        return P
    idx = np.clip(np.searchsorted(ts, times) - 1, 0, max(len(ts) - 2, 0))
    if len(ts) < 2:
        return np.repeat(P[:1], len(times), 0)
    w = np.clip((times - ts[idx]) / np.maximum(ts[idx + 1] - ts[idx], 1e-300), 0, 1)[:, None, None]
    a, b = P[idx], P[idx + 1]
    sgn = np.where(np.sum(a[..., 3:] * b[..., 3:], -1, keepdims=True) < 0, -1.0, 1.0)
    out = (1 - w) * a + w * np.concatenate([b[..., :3], sgn * b[..., 3:]], -1)
    out[..., 3:] /= np.linalg.norm(out[..., 3:], axis=-1, keepdims=True)
    return out


def _frame_indices(n, max_frames):
    if max_frames is None or n <= max_frames:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, max_frames)).astype(int))


def _force_layers(model, tr, batch, forces, idx, notes):
    """Contact points/forces and fluid/aero body forces of the first run, at frames ``idx``."""
    from ..contacts.element import AbstractContacts, contact_forces

    layers = []
    if not forces:
        return layers
    if not isinstance(model, Model):
        notes.append("forces= ignored: force elements act on a diffmb.Model only")
        return layers
    import jax.numpy as jnp

    if tr.v is None:
        notes.append("forces= ignored: the trajectory has no velocities")
        return layers
    sel = lambda a: np.asarray(a) if batch is None else np.asarray(a)[batch]
    q, v = sel(tr.q)[idx], sel(tr.v)[idx]
    ts = np.asarray(tr.ts if batch is None or np.ndim(tr.ts) == 1 else np.asarray(tr.ts)[batch])[idx]
    contacts = [f for f in forces if isinstance(f, AbstractContacts)]
    if contacts:
        aux = None if tr.aux is None else jax.tree.map(lambda a: sel(a)[idx], tr.aux)
        r = contact_forces(model, frames(ts, q, v, aux), forces)
        pts = np.asarray(r.point)
        vec = np.asarray(r.fn)[..., None] * np.asarray(r.normal) + np.asarray(r.ft)
        layers.append(dict(kind="contact", label="contact forces", color=(0.9, 0.1, 0.1),
                           points=pts, vectors=vec, show_points=True))
    from ..forces.aero import BodyAerodynamics
    from ..forces.hydro import Hydrodynamics, MujocoEllipsoidFluid, MujocoInertiaBoxFluid

    fluid = (Hydrodynamics, MujocoEllipsoidFluid, MujocoInertiaBoxFluid, BodyAerodynamics)
    for el in forces:
        if not isinstance(el, fluid):
            continue
        from ..dynamics.kinematics import body_coms, kinematics

        def one(qq, vv, tt, el=el):
            _, f_ext = el(model, tt, qq, vv, None)
            kin = kinematics(model, qq)
            c = body_coms(model, kin) + kin.origin
            return (jnp.zeros_like(c) if f_ext is None else f_ext[:, :3]), c

        try:
            F, C = jax.jit(jax.vmap(one))(q, v, ts)
        except Exception as e:
            notes.append(f"{type(el).__name__}: forces not drawn ({type(e).__name__}: {e})")
            continue
        layers.append(dict(kind="body", label=f"{type(el).__name__} force on each body",
                           color=(0.1, 0.45, 0.95), points=np.asarray(C), vectors=np.asarray(F),
                           show_points=False))
    other = [type(f).__name__ for f in forces if not isinstance(f, (AbstractContacts, *fluid))]
    if other:
        notes.append(f"not drawn: forces of {sorted(set(other))}")
    return layers


def _terrains(forces, terrain):
    from ..contacts.element import AbstractContacts
    from ..contacts.terrain import HeightField, Plane
    from ..contacts.terramechanics import WheelSoil

    items = list(terrain) if isinstance(terrain, list | tuple) else ([terrain] if terrain else [])
    for f in forces or ():
        own = f.terrains if isinstance(f, AbstractContacts) else \
            (f.terrain,) if isinstance(f, WheelSoil) else ()
        items += [t for t in own if not any(t is x for x in items)]
    out = []
    for t in items:
        if isinstance(t, Plane):
            out.append(dict(kind="plane", normal=np.asarray(t.n, float),
                            offset=float(np.asarray(t.offset)), rgba=(0.55, 0.5, 0.42, 1.0)))
        elif isinstance(t, HeightField):
            out.append(dict(kind="hfield", heights=np.asarray(t.heights, float),
                            origin=np.asarray(t.origin, float), spacing=np.asarray(t.spacing, float),
                            rgba=(0.55, 0.5, 0.42, 1.0)))
        else:
            raise TypeError(f"terrain: {type(t).__name__} is not a diffmb.contacts Plane or "
                            "HeightField")
    return out


def _name(system) -> str:
    from ..systems import AbstractSystem

    return system.name if isinstance(system, Model | AbstractSystem) else type(system).__name__


def build_scene(model, traj, *, forces=(), frames=False, labels=None, terrain=None,
                max_frames=None, fps=None, title=None) -> Scene:
    """The :class:`Scene` of ``traj`` (a Trajectory, a batch of them, or a list) on ``model``
    (a Model, or a system registered with :func:`primitives_of` and :func:`poses_of`).
    ``fps``: resample the frames at this rate; ``max_frames``: keep at most this many (evenly
    spaced)."""
    notes: list[str] = []
    runs = _as_runs(traj, labels)
    t0 = runs[0][1]
    if t0.size == 0:
        raise ValueError("traj: the trajectory has no saved states")
    if fps is not None and len(t0) > 1:
        n = int(np.floor((t0[-1] - t0[0]) * fps + 1e-9)) + 1
        times = t0[0] + np.arange(n) / fps
        idx = np.clip(np.searchsorted(t0, times - 1e-12), 0, len(t0) - 1)
    else:
        times, idx = t0, np.arange(len(t0))
    keep = _frame_indices(len(times), max_frames)
    times, idx = times[keep], idx[keep]
    tracks = []
    multi = len(runs) > 1
    for i, (label, ts, q, _, _) in enumerate(runs):
        finite = np.all(np.isfinite(q), axis=-1)
        if not np.all(finite):  # failed runs hold inf after the failure: hold the last pose
            last = np.flatnonzero(finite)
            if last.size == 0:
                raise ValueError(f"{label}: no finite state in the trajectory")
            notes.append(f"{label}: non-finite states after t = {ts[last[-1]]:.6g} s; "
                         "the last finite pose is held")
            q = q.copy()
            q[last[-1] + 1:] = q[last[-1]]
        if i == 0:
            P = _poses(model, q[idx])
        else:  # only the saves around the frame times, then interpolated onto them
            k = np.searchsorted(ts, times)
            sel = np.unique(np.clip(np.concatenate([k - 1, k]), 0, len(ts) - 1))
            P = _resample(ts[sel], _poses(model, q[sel]), times)
        color = PALETTE[i % len(PALETTE)] if multi else None
        opacity = 1.0 if i == 0 else (0.45 if len(runs) <= 4 else 0.3)
        tracks.append(dict(label=label, color=color, opacity=opacity, poses=P))
    q0 = runs[0][2][0] if np.all(np.isfinite(runs[0][2][0])) else None
    shapes, terr = shapes_of(model, q0, notes)
    if not shapes:
        raise ValueError(f"{type(model).__name__}: nothing to draw (no shapes)")
    terr += _terrains(forces, terrain)
    if any(s.kind == "plane" and s.body < 0 for s in shapes):
        terr = [t for t in terr if t["kind"] != "plane"]
    layers = _force_layers(model, runs[0][3], runs[0][4], forces, idx, notes)
    names = tuple(body_names_of(model) or
                  [f"body{i}" for i in range(tracks[0]["poses"].shape[1])])
    if len(names) != tracks[0]["poses"].shape[1]:
        raise ValueError(f"{len(names)} body names for {tracks[0]['poses'].shape[1]} poses")
    parents = _body_parents(model) if isinstance(model, Model) else tuple(-1 for _ in names)
    return Scene(body_names=names, body_parents=parents, shapes=shapes, times=np.asarray(times),
                 tracks=tracks, forces=layers, terrain=terr, frames=bool(frames),
                 title=title or f"diffmb replay: {_name(model)}",
                 notes=notes)
