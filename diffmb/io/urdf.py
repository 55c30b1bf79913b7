"""URDF loader: links become bodies, fixed joints are merged into their parent for dynamics.

Parsed with ``defusedxml`` (no entity expansion). Conventions as URDF tools (Pinocchio, urdfdom):
a link without ``<inertial>`` has zero mass and inertia; ``continuous`` joints are plain angles
(nq = 1, unlike Pinocchio's (cos, sin)); ``floating`` joints are free joints with MuJoCo's q/v
layout; :func:`load_urdf` never opens meshes. :func:`urdf_forces` builds the force elements
(joint damping, friction, limits, mimic couplings and, given a ``ground``, contacts of the
``<collision>`` primitives and meshes) that make the file simulate as MuJoCo simulates it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import equinox as eqx
import numpy as np
from defusedxml import ElementTree as ET
from defusedxml.common import DefusedXmlException

from ..model import Model, ModelBuilder
from .sources import with_source

__all__ = ["load_urdf", "urdf_forces", "contacts_from_urdf", "rpy_to_matrix"]


def rpy_to_matrix(rpy):
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def _floats(src, elem, attr, default, n):
    s = elem.get(attr) if elem is not None else None
    if s is None:
        return np.array(default, float)
    try:
        x = np.array([float(t) for t in s.split()])
    except ValueError:
        raise ValueError(f"{src}: <{elem.tag}> attribute {attr}={s!r} is not numeric") from None
    if x.shape != (n,):
        raise ValueError(f"{src}: <{elem.tag}> attribute {attr}={s!r} needs {n} numbers")
    return x


def _origin(src, parent):
    o = parent.find("origin")
    return rpy_to_matrix(_floats(src, o, "rpy", (0, 0, 0), 3)), _floats(src, o, "xyz", (0, 0, 0), 3)


def _read(path):
    """(path as str, root element) of a URDF file, parsed without entity expansion."""
    src = str(path)
    try:
        root = ET.parse(src).getroot()
    except DefusedXmlException as e:
        raise ValueError(f"{src}: unsafe XML rejected ({type(e).__name__})") from None
    except ET.ParseError as e:
        raise ValueError(f"{src}: malformed XML: {e}") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"{src}: no such URDF file") from None
    if root.tag != "robot":
        raise ValueError(f"{src}: root element is <{root.tag}>, expected <robot>")
    return src, root


def load_urdf(path, floating_base: bool = False, gravity=(0.0, 0.0, -9.81), *,
              strict: bool = False) -> Model:
    """Load a URDF file into a :class:`Model`.

    ``floating_base``: attach the root link to the world by a free joint (q = [p, quat_wxyz],
    v = [ṗ_world, ω_body]), named ``"root_joint"``.

    Published files often carry implausible but harmless inertias (round-off negative
    eigenvalues, triangle-inequality violations, massless links with inertia): they load as in
    Pinocchio, with a :class:`diffmb.model.InertiaWarning` naming the link and the numbers;
    ``strict=True`` refuses them (``ValueError``). What cannot be simulated (non-finite numbers, a
    negative mass, a cycle, a missing parent, a singular mass matrix) is always refused. Rules and
    thresholds: :class:`diffmb.model.ModelBuilder`.
    """
    src, root = _read(path)
    links = {}
    for ln in root.findall("link"):
        name = ln.get("name")
        if not name:
            raise ValueError(f"{src}: <link> without a name")
        if name in links:
            raise ValueError(f"{src}: duplicate link {name!r}")
        links[name] = ln
    joints, child_of = [], {}
    for jn in root.findall("joint"):
        name, jt = jn.get("name"), jn.get("type")
        p, c = jn.find("parent"), jn.find("child")
        if p is None or c is None:
            raise ValueError(f"{src}: joint {name!r} lacks <parent> or <child>")
        pl, cl = p.get("link"), c.get("link")
        for role, ln in (("parent", pl), ("child", cl)):
            if ln not in links:
                raise ValueError(f"{src}: joint {name!r}: {role} link {ln!r} is not defined")
        if cl in child_of:
            raise ValueError(f"{src}: link {cl!r} is the child of two joints ({child_of[cl]}, {name})")
        child_of[cl] = name
        joints.append((name, jt, pl, cl, jn))
    if not links:
        raise ValueError(f"{src}: no <link> elements (an unexpanded xacro file?)")
    roots = [n for n in links if n not in child_of]
    if len(roots) != 1:
        if not roots:
            raise ValueError(f"{src}: the joints form a cycle (no root link)")
        raise ValueError(f"{src}: several root links {roots}: the link graph is not connected")
    children = {n: [] for n in links}
    for j in joints:
        children[j[2]].append(j)
    b = ModelBuilder(name=root.get("name", Path(src).stem), source=src, strict=strict)
    b.gravity = np.asarray(gravity, float)

    def add(link_name, parent_name, joint):
        ln = links[link_name]
        m, com, I = _inertial(src, ln)
        kw = dict(mass=m, com=com, inertia=I)
        if joint is None:  # the root
            js = [dict(name="root_joint", type="free")] if floating_base else []
            b.add_body(link_name, -1, joints=js, **kw)
        else:
            jname, jt, _, _, jn = joint
            R, p = _origin(src, jn)
            js = _joint(src, jname, jt, jn)
            b.add_body(link_name, parent_name, rot=R, pos=p, joints=js, **kw)
        for j in children[link_name]:
            add(j[3], link_name, j)

    seen = set()

    def check_cycle(n):
        if n in seen:
            raise ValueError(f"{src}: link {n!r} is reached twice: the joints form a cycle")
        seen.add(n)
        for j in children[n]:
            check_cycle(j[3])

    check_cycle(roots[0])
    if len(seen) != len(links):
        raise ValueError(f"{src}: links {sorted(set(links) - seen)} are in a cycle")
    add(roots[0], None, None)
    return with_source(b.build(), src, "urdf", floating_base=floating_base)  # Model.source


def _inertial(src, ln):
    ine = ln.find("inertial")
    if ine is None:
        return 0.0, np.zeros(3), np.zeros((3, 3))
    R, c = _origin(src, ine)
    where = f"link {ln.get('name')!r}"
    m = _link_number(src, where, ine.find("mass"), "value")
    ie = ine.find("inertia")
    g = {k: _link_number(src, where, ie, k) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
    I = np.array([[g["ixx"], g["ixy"], g["ixz"]], [g["ixy"], g["iyy"], g["iyz"]],
                  [g["ixz"], g["iyz"], g["izz"]]])
    if m < 0:
        raise ValueError(f"{src}: {where}: negative mass {m}")
    return m, c, R @ I @ R.T


def _number(src, where, elem, attr, default, *, nonnegative=False):
    """The number ``attr`` of ``elem`` (``default`` when absent); non-numeric, non-finite or (with
    ``nonnegative``) negative text is refused naming the file and ``where`` (a link or joint)."""
    x = elem.get(attr) if elem is not None else None
    if x is None:
        return default
    try:
        v = float(x)
    except ValueError:
        raise ValueError(f"{src}: {where}: <{elem.tag} {attr}={x!r}> is not a number") from None
    if not np.isfinite(v):
        raise ValueError(f"{src}: {where}: <{elem.tag} {attr}={x!r}> is not finite")
    if nonnegative and v < 0:
        raise ValueError(f"{src}: {where}: <{elem.tag} {attr}={x!r}> must be >= 0")
    return v


def _link_number(src, where, elem, attr):
    """A number of a link's ``<inertial>`` (0 when absent)."""
    return _number(src, where, elem, attr, 0.0)


def _joint(src, name, jt, jn):
    if jt == "fixed":
        return []
    dyn = jn.find("dynamics")
    damping = _attr(src, dyn, name, "damping", 0.0, nonnegative=True)
    if jt in ("revolute", "continuous", "prismatic"):
        axis = _floats(src, jn.find("axis"), "xyz", (1, 0, 0), 3)
        kind = "slide" if jt == "prismatic" else "hinge"
        return [dict(name=name, type=kind, axis=axis, damping=damping)]
    if jt == "floating":
        return [dict(name=name, type="free")]
    raise ValueError(
        f"{src}: joint {name!r}: unsupported joint type {jt!r}"
        " (supported: revolute, continuous, prismatic, fixed, floating)"
    )


def _attr(src, elem, name, attr, default, *, nonnegative=False):
    """A number of joint ``name``'s element ``elem``."""
    return _number(src, f"joint {name!r}", elem, attr, default, nonnegative=nonnegative)


def urdf_forces(path, model: Model | None = None, *, limits=True, friction=True, mimic=True,
                floating_base=False, exact_couplings=False, ground=None, ignore=(),
                self_collision=True) -> tuple:
    """The force elements that make a URDF file simulate as MuJoCo simulates it when it loads
    the same file (MuJoCo turns ``<dynamics damping friction>`` into damping and
    ``frictionloss``, ``<limit lower upper>`` of revolute/prismatic joints into limits and
    ``<mimic joint multiplier offset>`` into a joint equality).

    Joint damping (the Model's, filled by :func:`load_urdf`); ``friction``: a
    :class:`~diffmb.forces.JointFriction`; ``limits``: :class:`~diffmb.forces.JointLimits`;
    ``mimic``: :class:`~diffmb.forces.Couplings` with q_mimic = offset + multiplier·q_joint
    (soft, as MuJoCo's; ``exact_couplings=True`` holds them to round-off).
    URDF carries no solver settings: MuJoCo's defaults (``solref`` (0.02, 1), ``solimp``
    (0.9, 0.95, 0.001, 0.5, 2)) with each joint's effective mass 1/(M⁻¹)ᵢᵢ at q = 0 (MuJoCo's
    ``dof_invweight0``): limits are MuJoCo's soft constraint, friction and mimic couplings
    spring–dampers from :func:`~diffmb.forces.elements.soft_constraint_gains`. ``effort`` and
    ``velocity`` limits bound actuators and are not applied. ``model``: the Model of
    ``load_urdf(path, floating_base)`` (loaded if not given).

    ``ground``: None (default) builds no contacts; a height (a z-up floor plane at that height)
    or a terrain (:class:`~diffmb.contacts.Plane`, :class:`~diffmb.contacts.HeightField`) adds a
    :class:`~diffmb.contacts.Contacts` element between the links' ``<collision>`` shapes and
    that ground, as :func:`contacts_from_urdf` builds it (meshes as their convex hulls; a mesh
    file that cannot be read is refused unless ``ignore=("unsupported_contacts",)``), and with
    ``self_collision`` (default, as MuJoCo's importer) between the shapes of moving links that
    are not parent and child.
    """
    import jax.numpy as jnp

    from ..forces.elements import (
        Couplings,
        JointDamping,
        JointFriction,
        JointLimits,
        dof_qpos_addresses,
        friction_slope,
        soft_constraint_gains,
    )

    terrain = None if ground is None else _ground(ground)
    src, root = _read(path)
    if model is None:
        model = load_urdf(path, floating_base=floating_base)
    q0 = np.zeros(model.nq)
    for jt, a in zip(model.joint_types, model.joint_q, strict=True):
        if jt == "free":
            q0[a + 3] = 1.0
    w = np.diag(np.linalg.inv(np.asarray(_frames_and_mass(model, jnp.asarray(q0))[3])))
    dofs = {n: model.joint_v[model.joint_index(n)] for n in model.joint_names}
    qadr = {n: model.joint_q[model.joint_index(n)] for n in model.joint_names}
    fric, lim, mim = np.zeros(model.nv), [], []
    for jn in root.findall("joint"):
        name, jt = jn.get("name"), jn.get("type")
        if jt not in ("revolute", "continuous", "prismatic"):
            continue
        d = dofs[name]
        fric[d] = _attr(src, jn.find("dynamics"), name, "friction", 0.0, nonnegative=True)
        le = jn.find("limit")
        if jt != "continuous" and le is not None:
            lo, hi = _attr(src, le, name, "lower", 0.0), _attr(src, le, name, "upper", 0.0)
            if lo > hi:
                raise ValueError(f"{src}: joint {name!r}: <limit lower={lo} upper={hi}>: lower "
                                 "exceeds upper")
            if lo < hi:
                lim.append((name, lo, hi))
        me = jn.find("mimic")
        if me is not None:
            other = me.get("joint")
            if other not in dofs:
                raise ValueError(f"{src}: joint {name!r}: <mimic joint={other!r}> names no "
                                 "revolute, continuous or prismatic joint")
            mim.append((name, other, _attr(src, me, name, "multiplier", 1.0),
                        _attr(src, me, name, "offset", 0.0)))
    out = [JointDamping()]
    if friction and np.any(fric > 0):
        slope = friction_slope(1.0 / w)
        out.append(JointFriction(fric, slope))
    if limits and lim:
        ks, bs = zip(*(soft_constraint_gains(1.0 / w[dofs[n]]) for n, _, _ in lim), strict=True)
        out.append(JointLimits([dofs[n] for n, _, _ in lim], [qadr[n] for n, _, _ in lim],
                               [lo for _, lo, _ in lim], [hi for _, _, hi in lim], ks, bs,
                               solref=(0.02, 1.0), solimp=(0.9, 0.95, 0.001, 0.5, 2.0),
                               invweight=[w[dofs[n]] for n, _, _ in lim]))
    if mimic and mim:
        n = len(mim)
        c1, c2, poly, ks, bs = np.zeros((n, model.nv)), np.zeros((n, model.nv)), [], [], []
        for i, (a, b, mult, off) in enumerate(mim):
            c1[i, dofs[a]], c2[i, dofs[b]] = 1.0, 1.0
            poly.append([off, mult, 0.0, 0.0, 0.0])
            k, bb = soft_constraint_gains(1.0 / (w[dofs[a]] + w[dofs[b]]))
            ks.append(k)
            bs.append(bb)
        out.append(Couplings(c1, c2, 0.0, 0.0, np.array(poly), np.array(ks), np.array(bs),
                             dof_qpos_addresses(model), [f"mimic:{a}" for a, *_ in mim],
                             exact=exact_couplings))
    if terrain is not None:
        out += contacts_from_urdf(path, model, terrain, ignore=ignore,
                                  self_collision=self_collision)
    return tuple(out)


def _ground(ground):
    """The terrain of ``ground``: itself if a terrain, else a z-up plane at that height."""
    from ..contacts.terrain import AbstractTerrain, Plane
    from ..validation import check_value

    if isinstance(ground, AbstractTerrain):
        return ground
    if isinstance(ground, (bool, np.bool_, str)) or np.ndim(ground) != 0:
        raise TypeError(f"urdf_forces.ground = {ground!r}: the height of a z-up floor plane (a "
                        "number) or a terrain (Plane, HeightField)")
    check_value("urdf_forces", "ground", ground, shape=())
    return Plane((0.0, 0.0, 1.0), ground, name="ground")


@eqx.filter_jit  # compiled once per robot: op by op, these take seconds on a large one
def _frames_and_mass(model: Model, q):
    """Body coms, frames (rotations, origins) and the mass matrix at q."""
    import jax.numpy as jnp

    from ..dynamics.api import mass_matrix
    from ..dynamics.kinematics import body_coms, body_frames, kinematics

    kin = kinematics(model, q, jnp.zeros(model.nv))
    return body_coms(model, kin), *body_frames(model, kin), mass_matrix(model, q)


@eqx.filter_jit
def _partial_velocities(model: Model, q, points, bodies):
    import jax.numpy as jnp

    from ..dynamics.kinematics import kinematics, partial_velocities

    return partial_velocities(model, kinematics(model, q, jnp.zeros(model.nv)), points, bodies)


def _fused_inverse_weights(model: Model, geoms) -> list:
    """MuJoCo's translational ``body_invweight0`` for each of ``geoms`` (on moving links): the
    links on one node (a link and its fixed-joint descendants) are one body in MuJoCo (its URDF
    importer fuses them), and trace(J M⁻¹ Jᵀ)/3, J the Jacobian of their joint centre of mass,
    at ``model.qpos0``. Where that centre cannot translate (a link turning about an axis
    through it, where MuJoCo's contact would be rigid), the inverse weight of the geom's own
    centre, or where that cannot translate either, the rotational one (trace(Ω M⁻¹ Ωᵀ)/3) times
    the square of the geom's bounding radius; 0 where no joint moves the geom at all."""
    import jax.numpy as jnp

    from ..contacts.element import _rigid_weight
    from ..contacts.geometry import bounding_radius

    q = model.qpos0
    com, Rb, pb, M = (np.asarray(x) for x in _frames_and_mass(model, q))
    mass = np.asarray(model.body_mass)
    Minv = np.linalg.inv(M)
    bid = {n: i for i, n in enumerate(model.body_names)}
    reps, points = [], []
    for g in geoms:  # the fused body's centre of mass, then the geom's centre
        b = bid[g.body]
        group = [i for i, n in enumerate(model.body_node) if n == model.body_node[b]]
        mg = mass[group].sum()
        reps += [b, b]
        points += [mass[group] @ com[group] / mg if mg > 0 else com[b],
                   pb[b] + Rb[b] @ np.asarray(g.pos, float)]
    V, W = (np.asarray(x) for x in _partial_velocities(model, q, jnp.asarray(np.array(points)),
                                                       tuple(reps)))
    w = np.einsum("kin,nm,kim->k", V, Minv, V).reshape(-1, 2) / 3.0
    w_rot = np.einsum("kin,nm,kim->k", W, Minv, W).reshape(-1, 2)[:, 1] / 3.0
    tiny = float(_rigid_weight(model))
    out = []
    for g, (at_com, at_centre), wr in zip(geoms, w, w_rot, strict=True):
        turning = wr * float(bounding_radius(g, xp=np)) ** 2
        out.append(next((x for x in (at_com, at_centre, turning) if x > tiny), 0.0))
    return out


def _mesh_vertices(src, path, link, filename, scale):
    """The vertices (n, 3) of a ``<collision>`` mesh file, scaled; the file is found as the
    URDF loader finds meshes (``package://``, ``file://`` and relative paths against the URDF's
    folder and its parents, ``ROS_PACKAGE_PATH``, installed ``share`` folders) and read with
    ``trimesh``. A ValueError names the URDF, the link and the mesh file when it cannot."""
    from .geometry import _resolve_mesh

    f = _resolve_mesh(Path(path), filename)
    if f is None:
        raise ValueError(f"{src}: link {link!r}: <collision> mesh {filename!r} not found")
    try:
        import trimesh

        mesh = trimesh.load(str(f), force="mesh")
        V = np.asarray(mesh.vertices, dtype=float)
    except Exception as exc:  # noqa: BLE001  (any reader failure is the file's)
        raise ValueError(f"{src}: link {link!r}: <collision> mesh {filename!r} ({f}) cannot "
                         f"be read: {exc}") from exc
    if V.ndim != 2 or V.shape[0] < 4 or V.shape[1] != 3 or not np.all(np.isfinite(V)):
        raise ValueError(f"{src}: link {link!r}: <collision> mesh {filename!r} ({f}) has no "
                         "readable 3-d vertices")
    return V * scale


def _mesh_scales(root) -> list:
    """The ``scale`` of each ``<collision>`` (in file order; (1, 1, 1) when absent or not a
    mesh), as :func:`~diffmb.io.geometry.urdf_collision_geoms` lists them."""
    out = []
    for ln in root.findall("link"):
        for el in ln.findall("collision"):
            m = el.find("geometry/mesh")
            s = (m.get("scale") if m is not None else None) or "1 1 1"
            out.append(np.array([float(x) for x in s.split()], dtype=float))
    return out


def contacts_from_urdf(path, model: Model | None = None, ground=0.0, *, ignore=(),
                       floating_base=False, self_collision=True) -> tuple:
    """Contacts between the links' ``<collision>`` shapes and ``ground``, as MuJoCo collides the
    URDF file when a floor is added to it: ``(Contacts,)``, or ``()`` when no moving link has a
    collision shape.

    ``ground``: the height of a z-up floor plane, or a terrain (Plane, HeightField). Each
    ``<collision>`` box, sphere, cylinder or capsule (:func:`~diffmb.io.geometry.urdf_collision_geoms`)
    becomes a :mod:`~diffmb.contacts.geometry` shape on its link's body, posed by its
    ``<origin>`` in the link frame (a link on a fixed joint keeps its own body and frame, which
    ride on its parent's); a ``<mesh filename scale>`` becomes a
    :class:`~diffmb.contacts.geometry.ConvexMesh` of its vertices (scaled): its convex hull,
    which is what MuJoCo collides (a concave mesh too). The file is found as meshes are found
    for display (``package://``, relative paths) and read with ``trimesh``; a mesh that cannot
    be found or read raises ``ValueError`` naming the link and the file, unless
    ``ignore=("unsupported_contacts",)`` (then it is dropped with a warning naming it). Shapes
    on links welded to the world (no floating base) never move and are skipped. Parameters
    are MuJoCo's defaults for URDF geoms: friction 1, condim 3, ``solref`` (0.02, 1),
    ``solimp`` (0.9, 0.95), margin 0; normal stiffness and damping by
    :func:`~diffmb.forces.elements.soft_constraint_gains` from the effective mass of the body
    MuJoCo's importer makes of the link and its fixed-joint descendants (its
    ``body_invweight0``; where that body's centre of mass cannot translate, the shape's
    centre, or its rotation times its bounding radius: see ``_fused_inverse_weights``), shared
    among the shape's ``n_active`` points; the stiction spring takes the same stiffness and critical
    damping.

    ``self_collision`` (default True): also the pairs of shapes on two moving links that MuJoCo's
    importer lets collide (every shape has contype = conaffinity = 1): links on different
    bodies (after fusing fixed joints) that are not parent and child, with the pair's
    effective mass 1/(w_A + w_B) and the same defaults; links welded to the world take no
    part. ``model``: the Model of ``load_urdf(path, floating_base)`` (loaded if not given).
    """
    from ..contacts.element import Contacts, pair_n_active
    from ..contacts.geometry import Box, Capsule, ConvexMesh, Cylinder, Sphere
    from ..forces.elements import soft_constraint_gains
    from .geometry import urdf_collision_geoms

    terrain = _ground(ground)
    src, root = _read(path)
    if model is None:
        model = load_urdf(path, floating_base=floating_base)
    ignored = {str(x) for x in ((ignore,) if isinstance(ignore, str) else ignore)}
    node = dict(zip(model.body_names, model.body_node, strict=True))
    shapes = urdf_collision_geoms(src)
    scales = _mesh_scales(root)
    for g in shapes:
        if g.body not in node:
            raise ValueError(f"{src}: link {g.body!r} is no body of model {model.name!r}: pass "
                             "the Model loaded from this file")
    geoms, dropped = [], []
    moving = [(g, s) for g, s in zip(shapes, scales, strict=True) if node[g.body] >= 0]
    for g, scale in moving:
        kw = dict(pos=np.asarray(g.pos, float), quat=np.asarray(g.quat, float), name=g.name)
        if g.kind == "mesh":
            try:
                geom = ConvexMesh(g.body, _mesh_vertices(src, path, g.body, g.file, scale), **kw)
            except ValueError as exc:
                if "unsupported_contacts" not in ignored:
                    raise ValueError(f"{exc}; pass ignore=('unsupported_contacts',) to simulate "
                                     "without it") from exc
                dropped.append(f"{g.body!r} ({g.file})")
                continue
        else:
            size = np.asarray(g.size, float)
            n = {"box": 3, "sphere": 1}.get(g.kind, 2)
            if size.shape != (n,) or not (np.all(np.isfinite(size)) and np.all(size > 0)):
                raise ValueError(f"{src}: link {g.body!r}: <collision> {g.kind} of size "
                                 f"{size.tolist()} (MuJoCo's half-sizes): needs {n} finite "
                                 "sizes > 0")
            cls = {"sphere": Sphere, "capsule": Capsule, "cylinder": Cylinder}.get(g.kind)
            geom = Box(g.body, size, **kw) if g.kind == "box" else cls(g.body, *size, **kw)
        geoms.append(geom)
    kept = [(g, w) for g, w in zip(geoms, _fused_inverse_weights(model, geoms) if geoms else [],
                                   strict=True) if w > 0]  # 0: no joint moves it
    geoms, inv_w = [g for g, _ in kept], [w for _, w in kept]
    ms = [1.0 / w / g.n_active for g, w in kept]
    if dropped:
        warnings.warn(f"{src}: collision meshes dropped, these links do not touch the ground: "
                      + ", ".join(dropped), stacklevel=3)
    if not geoms:
        return ()
    pairs_a, others = list(geoms), [terrain] * len(geoms)
    if self_collision:
        for i, j in _self_collision_pairs(model, geoms):
            pairs_a.append(geoms[i])
            others.append(geoms[j])
            ms.append(1.0 / (inv_w[i] + inv_w[j]) / pair_n_active(geoms[i], geoms[j]))
    m_pt = np.array(ms)
    k, b = (np.asarray(x) for x in soft_constraint_gains(m_pt, (0.02, 1.0), (0.9, 0.95)))
    return (Contacts(pairs_a, others, model=model, stiffness=k, damping=b, mu=1.0,
                     tangential_stiffness=k, tangential_damping=2.0 * np.sqrt(k * m_pt)),)


def _self_collision_pairs(model: Model, geoms) -> list:
    """Index pairs (i, j), i < j, of ``geoms`` that MuJoCo's URDF import would collide: on
    different bodies (nodes) that are not parent and child in the tree of bodies."""
    nodes = set(int(n) for n in model.body_node)
    parent = {}
    for n in nodes:  # the nearest ancestor node that is a body (a free joint is two nodes)
        p = int(model.node_parent[n])
        while p >= 0 and p not in nodes:
            p = int(model.node_parent[p])
        parent[n] = p
    node = dict(zip(model.body_names, (int(n) for n in model.body_node), strict=True))
    out = []
    for i in range(len(geoms)):
        for j in range(i + 1, len(geoms)):
            a, b = node[geoms[i].body], node[geoms[j].body]
            if a != b and parent[a] != b and parent[b] != a:
                out.append((i, j))
    return out
