"""The drawable geometry of model files, for viewers (:mod:`diffmb.viz`): each shape as a
:class:`Geom` in MuJoCo's size conventions, fixed to a body named as in the Model.

* :func:`mjcf_geoms`: every geom of an MJCF file as MuJoCo compiles it (meshes with MuJoCo's
  vertices and faces); a world height field is returned as a terrain
  (:class:`~diffmb.contacts.HeightField`) instead;
* :func:`urdf_geoms`: each link's ``<visual>`` (else ``<collision>``) box, cylinder, sphere,
  capsule and STL mesh (``package://`` resolved against the URDF's folder, its parents,
  ``ROS_PACKAGE_PATH`` and installed ``share/`` folders);
* :func:`urdf_collision_geoms`: each link's ``<collision>`` shapes, meshes named but not read
  (what contacts are built from).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys

import numpy as np

from ..spatial.quaternion import from_rotmat
from .urdf import rpy_to_matrix

__all__ = ["Geom", "mjcf_geoms", "urdf_geoms", "urdf_collision_geoms", "read_stl"]

KINDS = ("box", "sphere", "capsule", "cylinder", "ellipsoid", "plane", "mesh")
_MJ_KINDS = {0: "plane", 2: "sphere", 3: "capsule", 4: "ellipsoid", 5: "cylinder", 6: "box",
             7: "mesh"}
_MJ_SIZES = {"plane": 2, "sphere": 1, "capsule": 2, "ellipsoid": 3, "cylinder": 2, "box": 3}


@dataclasses.dataclass(frozen=True, eq=False)
class Geom:
    """One shape of a file. ``size``: box half-extents (3); sphere (r,); capsule (r, half-length)
    and cylinder (r, half-height) along the shape's z; ellipsoid radii (3); plane half-sizes
    (x, y) (0: unbounded); mesh (1,) with ``vertices`` (nv, 3) and ``faces`` (nf, 3) in the
    shape's frame. ``body``: the body's name (None: the world); ``pos``, ``quat`` (wxyz): the
    shape in the body frame; ``rgba``: None where the file gives no colour; ``group``: MuJoCo's
    geom group (0 for URDF); ``file``: a URDF mesh's ``filename`` as the file writes it."""

    kind: str
    size: tuple
    body: str | None
    pos: tuple = (0.0, 0.0, 0.0)
    quat: tuple = (1.0, 0.0, 0.0, 0.0)
    rgba: tuple | None = None
    name: str = ""
    group: int = 0
    vertices: np.ndarray | None = None
    faces: np.ndarray | None = None
    file: str = ""


def mjcf_geoms(path) -> tuple[list[Geom], list, list[str]]:
    """``(geoms, terrains, notes)`` of an MJCF file: its geoms (MuJoCo's default grey,
    rgba (0.5, 0.5, 0.5, 1), as ``rgba=None``), its world height fields as
    :class:`~diffmb.contacts.HeightField` terrains, and a note for each geom type not read."""

    from .mjcf import _as_mjmodel, _terrain_from_geom, object_name

    mj, _ = _as_mjmodel(path)
    geoms, terrains, notes = [], [], []
    for g in range(mj.ngeom):
        t = int(mj.geom_type[g])
        bid = int(mj.geom_bodyid[g])
        body = None if bid == 0 else object_name(mj, "BODY", bid)
        name = object_name(mj, "GEOM", g)
        rgba = tuple(float(x) for x in mj.geom_rgba[g])
        rgba = None if np.allclose(rgba, (0.5, 0.5, 0.5, 1.0)) else rgba
        if t == 1 and body is None:  # a world height field: terrain
            terrains.append(_terrain_from_geom(mj, g, name))
            continue
        kind = _MJ_KINDS.get(t)
        if kind is None:
            notes.append(f"geom {name!r} of type {t} not drawn")
            continue
        kw = dict(body=body, pos=tuple(float(x) for x in mj.geom_pos[g]),
                  quat=tuple(float(x) for x in mj.geom_quat[g]), rgba=rgba, name=name,
                  group=int(mj.geom_group[g]))
        if kind == "mesh":
            m = int(mj.geom_dataid[g])
            va, vn = int(mj.mesh_vertadr[m]), int(mj.mesh_vertnum[m])
            fa, fn = int(mj.mesh_faceadr[m]), int(mj.mesh_facenum[m])
            geoms.append(Geom("mesh", (1.0,), vertices=np.array(mj.mesh_vert[va:va + vn], float),
                              faces=np.array(mj.mesh_face[fa:fa + fn]), **kw))
        else:
            size = tuple(float(x) for x in mj.geom_size[g][:_MJ_SIZES[kind]])
            geoms.append(Geom(kind, size, **kw))
    return geoms, terrains, notes


def urdf_geoms(path) -> tuple[list[Geom], list[str]]:
    """``(geoms, missing)`` of a URDF file: each link's ``<visual>`` shapes (else its
    ``<collision>`` ones); ``missing``: the links with a visual or collision element none of
    whose shapes could be read (a mesh file not found, or not STL)."""
    from defusedxml import ElementTree as ET

    path = pathlib.Path(path)
    root = ET.parse(str(path)).getroot()
    colors = {}
    for m in root.findall("material"):
        c = m.find("color")
        if m.get("name") and c is not None:
            colors[m.get("name")] = tuple(float(x) for x in c.get("rgba", "0.7 0.7 0.75 1").split())
    geoms, missing = [], []
    for ln in root.findall("link"):
        name = ln.get("name")
        ok = False
        for tag in ("visual", "collision"):
            for el in ln.findall(tag):
                geom = _urdf_geom(el, name, path, colors)
                if geom is not None:
                    geoms.append(geom)
                    ok = True
            if ok:
                break
        if not ok and (ln.find("visual") is not None or ln.find("collision") is not None):
            missing.append(name)
    return geoms, missing


def urdf_collision_geoms(path) -> list[Geom]:
    """Each link's ``<collision>`` shapes, in file order, as MuJoCo's URDF importer reads them:
    box (half-extents), sphere, cylinder and capsule ((r, half-length) along the shape's z),
    posed by ``<origin xyz rpy>`` in the link frame; a mesh is a ``Geom("mesh")`` with only its
    ``file`` (not opened). Names: the element's ``name``, else the link's (``<link>_<k>`` for
    the k-th of several). A ``<collision>`` without a readable shape raises ``ValueError``
    naming the file and the link."""
    from defusedxml import ElementTree as ET

    path = pathlib.Path(path)
    root = ET.parse(str(path)).getroot()
    geoms, used = [], set()
    for ln in root.findall("link"):
        link = ln.get("name")
        els = ln.findall("collision")
        for k, el in enumerate(els):
            try:
                g = _urdf_geom(el, link, path, {}, read_mesh=False)
            except (TypeError, ValueError, AttributeError):
                g = None
            if g is None:
                raise ValueError(f"{path}: link {link!r}: <collision> {k} has no readable box, "
                                 "sphere, cylinder, capsule or mesh")
            name = el.get("name") or (link if len(els) == 1 else f"{link}_{k}")
            while name in used:
                name += "_"
            used.add(name)
            geoms.append(dataclasses.replace(g, name=name))
    return geoms


def _urdf_geom(el, link, path, colors, read_mesh=True):
    o = el.find("origin")
    xyz = np.zeros(3) if o is None else np.array([float(x) for x in o.get("xyz", "0 0 0").split()])
    rpy = (0, 0, 0) if o is None else [float(x) for x in o.get("rpy", "0 0 0").split()]
    quat = np.asarray(from_rotmat(rpy_to_matrix(rpy)), float)
    rgba = None
    mat = el.find("material")
    if mat is not None:
        c = mat.find("color")
        if c is not None:
            rgba = tuple(float(x) for x in c.get("rgba").split())
        elif mat.get("name") in colors:
            rgba = colors[mat.get("name")]
    g = el.find("geometry")
    if g is None or len(g) == 0:
        return None
    s = g[0]
    kw = dict(body=link, pos=tuple(float(x) for x in xyz), quat=tuple(float(x) for x in quat),
              rgba=rgba, name=link)
    if s.tag == "box":
        return Geom("box", tuple(float(x) / 2 for x in s.get("size").split()), **kw)
    if s.tag == "sphere":
        return Geom("sphere", (float(s.get("radius")),), **kw)
    if s.tag in ("cylinder", "capsule"):
        return Geom(s.tag, (float(s.get("radius")), float(s.get("length")) / 2), **kw)
    if s.tag == "mesh" and not read_mesh:
        return Geom("mesh", (1.0,), file=s.get("filename", ""), **kw)
    if s.tag == "mesh":
        f = _resolve_mesh(path, s.get("filename", ""))
        if f is None or f.suffix.lower() != ".stl":
            return None
        v, faces = read_stl(f)
        scale = np.array([float(x) for x in s.get("scale", "1 1 1").split()])
        v, faces = _weld(v * scale, faces)
        return Geom("mesh", (1.0,), vertices=v, faces=faces, file=s.get("filename", ""), **kw)
    return None


def _resolve_mesh(urdf: pathlib.Path, filename: str):
    if filename.startswith("file://"):
        filename = filename[7:]
    rel = filename
    roots = [urdf.parent, *urdf.parent.parents]
    roots += [pathlib.Path(p) for p in os.environ.get("ROS_PACKAGE_PATH", "").split(os.pathsep) if p]
    for pre in {sys.prefix, sys.base_prefix}:
        roots.append(pathlib.Path(pre) / "share")
        roots += list(pathlib.Path(pre).glob("lib/python*/site-packages/cmeel.prefix/share"))
    if filename.startswith("package://"):
        rel = filename[len("package://"):]
        cands = [rel, rel.split("/", 1)[1] if "/" in rel else rel]
    else:
        cands = [rel]
    if os.path.isabs(rel) and os.path.exists(rel):
        return pathlib.Path(rel)
    for root in roots:
        for c in cands:
            f = root / c
            if f.is_file():
                return f
    return None


def read_stl(path) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (3 n, 3) and faces (n, 3) of a binary or ASCII STL file."""
    data = pathlib.Path(path).read_bytes()
    if len(data) >= 84:
        n = int(np.frombuffer(data[80:84], "<u4")[0])
        if 84 + 50 * n == len(data):
            rec = np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
            tri = np.frombuffer(data[84:], rec, n)["v"].astype(float)
            return tri.reshape(-1, 3), np.arange(3 * n).reshape(n, 3)
    words = data.decode("ascii", "replace").split()
    vs = [[float(words[i + 1]), float(words[i + 2]), float(words[i + 3])]
          for i, w in enumerate(words) if w == "vertex"]
    if not vs or len(vs) % 3:
        raise ValueError(f"{path}: not a readable STL file")
    v = np.asarray(vs)
    return v, np.arange(len(v)).reshape(-1, 3)


def _weld(v, f):
    """Merge duplicate vertices (STL repeats them per triangle)."""
    key = np.round(v, 7)
    u, inv = np.unique(key, axis=0, return_inverse=True)
    return u, inv.reshape(-1)[f]
