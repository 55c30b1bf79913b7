"""URDF loader: links become bodies, fixed joints are merged into their parent for dynamics.

Parsed with ``defusedxml`` (no entity expansion). Conventions as URDF tools (Pinocchio, urdfdom):
a link without ``<inertial>`` has zero mass and inertia; ``continuous`` joints are plain angles
(nq = 1, unlike Pinocchio's (cos, sin)); ``floating`` joints are free joints with MuJoCo's q/v
layout; meshes are never opened.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from defusedxml import ElementTree as ET
from defusedxml.common import DefusedXmlException

from ..model import Model, ModelBuilder

__all__ = ["load_urdf", "rpy_to_matrix"]


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
    return b.build()


def _inertial(src, ln):
    ine = ln.find("inertial")
    if ine is None:
        return 0.0, np.zeros(3), np.zeros((3, 3))
    R, c = _origin(src, ine)
    me = ine.find("mass")
    m = float(me.get("value", 0.0)) if me is not None else 0.0
    ie = ine.find("inertia")
    g = {k: float(ie.get(k, 0.0)) if ie is not None else 0.0
         for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
    I = np.array([[g["ixx"], g["ixy"], g["ixz"]], [g["ixy"], g["iyy"], g["iyz"]],
                  [g["ixz"], g["iyz"], g["izz"]]])
    where = f"link {ln.get('name')!r}"
    if m < 0:
        raise ValueError(f"{src}: {where}: negative mass {m}")
    return m, c, R @ I @ R.T


def _joint(src, name, jt, jn):
    if jt == "fixed":
        return []
    dyn = jn.find("dynamics")
    damping = float(dyn.get("damping", 0.0)) if dyn is not None else 0.0
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
