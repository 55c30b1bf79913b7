"""Modular robots from a module graph (Xu, Yang, Ge & Wang (2018), §2).

A :class:`Module` is a module *type*: its geoms (geometry, mass, which ones displace fluid and
which ones touch the floor), its fluid coefficients and its ports — frames on the module where
another module may attach, each with the joint it offers. A :class:`Configuration` names module
instances ``s0 … sn`` (the paper's order: column j of its matrices is the j-th instance),
connects their ports and picks a root; from it come the accessibility and path matrices (the
paper's Definitions 1–2, by :mod:`diffmb.topology`), an MJCF document and, through MuJoCo's
compiler and :func:`diffmb.io.mjcf.from_mjmodel` / :func:`diffmb.mjcf_forces`, a ``Model`` in
MuJoCo's state layout with the force elements of every module.

Frames
------
A module's frame is its own (the paper puts its origin at the module's start point ``s_kO``).
A port is a frame ``(pos, quat)`` in the module frame whose x axis points out of the module.
Mating port ``c`` of a child to port ``p`` of its parent puts the child's port frame on the
parent's turned by π about z (the two x axes oppose, the z axes agree). The joint of a
connection is the parent port's, its axis written in the parent port's frame, its anchor the
port's origin. A non-root module's body frame is its module frame; the root's body frame is
``root_port``'s frame (the module frame when ``root_port`` is None), placed at ``pos``,
``quat`` in the world, on a free joint unless ``floating=False``.

Reconfiguration within a tree: :meth:`Configuration.lock` welds a joint where it stands (an
inelastic impact that keeps the total momentum), :meth:`Configuration.release` turns a weld back
into its port's joint. Between robots: :func:`dock` welds two free robots where two ports meet
(an inelastic impact, the same law), :func:`undock` separates a robot at a connection; the
state crosses each change through the modules' world poses and motions. Within one robot:
:func:`close_loop` welds two of its own ports where they meet (a closed loop, such as a snake's
two ends docked into a ring: MuJoCo's soft weld equality between the ports, the same law of
impact), :meth:`Configuration.open_loop` releases it.

Shared parameters: every module of a type has the type's mass, drag and added mass, so one set
per type describes every configuration. :func:`shared_parameters` reads that set from a built
model, :func:`with_shared_parameters` writes one into it (differentiably: identify the set from
one configuration's record, simulate another with it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import numpy as np

from . import topology

__all__ = ["Geom", "Joint", "Port", "Module", "Connection", "Configuration", "dock", "undock",
           "close_loop", "loop_gap", "port_gap", "module_frames", "state_from_frames",
           "SHARED_FIELDS", "shared_parameters", "with_shared_parameters"]

GEOM_TYPES = {"sphere": 1, "capsule": 2, "ellipsoid": 3, "cylinder": 2, "box": 3}  # sizes
JOINT_TYPES = ("hinge", "slide")
KINDS = topology.KINDS  # ('joint', 'rigid')
_FLIP = np.diag([-1.0, -1.0, 1.0])  # mating: π about z


def _vec(owner, name, x, n, *, positive=False, nonzero=False):
    a = np.asarray(x, dtype=float).reshape(-1)
    if a.shape != (n,):
        raise ValueError(f"{owner}: {name} must have {n} numbers, got {np.asarray(x).tolist()!r}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{owner}: {name} = {a.tolist()} is not finite")
    if positive and not np.all(a > 0):
        raise ValueError(f"{owner}: {name} = {a.tolist()} must be > 0")
    if nonzero and not np.linalg.norm(a) > 1e-12:
        raise ValueError(f"{owner}: {name} = {a.tolist()} must be a non-zero vector")
    return a


def _scalar(owner, name, x, *, positive=False):
    v = float(x)
    if not np.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(f"{owner}: {name} = {x!r} must be finite and {'>' if positive else '>='} 0")
    return v


def _name(what, x) -> str:
    """A name written into MJCF: letters, digits and ``_ . - :``."""
    if not isinstance(x, str) or not re.fullmatch(r"[A-Za-z0-9_.:\-]+", x):
        raise ValueError(f"{what} {x!r} must be a non-empty string of letters, digits, '_', '.', "
                         "'-' or ':'")
    return x


def _rot(owner, quat):
    """Rotation matrix of a scalar-first quaternion (normalised; refused if ~0)."""
    q = _vec(owner, "quat", quat, 4, nonzero=True)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _quat(R):
    """Scalar-first unit quaternion of a rotation matrix (Shepperd's method)."""
    t = np.trace(R)
    if t > 0:
        s = 2.0 * np.sqrt(1.0 + t)
        q = [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        q = [0.0] * 4
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (R[j, i] + R[i, j]) / s
        q[1 + k] = (R[k, i] + R[i, k]) / s
    q = np.array(q)
    return q if q[0] >= 0 else -q


def _joint_motion(joint, x):
    """(R, p): the motion of a joint at position x in its port's frame (a hinge turns about its
    axis through the port's origin, a slide moves along it); identity for x = 0."""
    if joint is None or x == 0:
        return np.eye(3), np.zeros(3)
    a = np.asarray(joint.axis, float) / np.linalg.norm(joint.axis)
    if joint.type == "slide":
        return np.eye(3), x * a
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(x) * K + (1 - np.cos(x)) * K @ K, np.zeros(3)


def _fmt(a) -> str:
    return " ".join(repr(float(x)) for x in np.asarray(a, float).reshape(-1))


@dataclasses.dataclass(frozen=True)
class Geom:
    """One solid of a module, in the module frame.

    type: 'sphere' | 'capsule' | 'ellipsoid' | 'cylinder' | 'box'; size: MuJoCo's (radius;
    radius, half-length; semi-axes; radius, half-height; half-sizes) [m]; mass [kg] (> 0, its
    inertia is MuJoCo's for a uniform solid of that shape); ``fluid``: it displaces fluid and
    feels drag; ``contact``: it touches the floor, with friction ``friction``.
    """

    type: str
    size: tuple
    mass: float
    pos: tuple = (0.0, 0.0, 0.0)
    quat: tuple = (1.0, 0.0, 0.0, 0.0)
    fluid: bool = True
    contact: bool = False
    friction: float = 1.0
    name: str = ""

    def __post_init__(self):
        who = f"geom {self.name or self.type!r}"
        if self.name:
            _name("geom name", self.name)
        if self.type not in GEOM_TYPES:
            raise ValueError(f"{who}: type {self.type!r}; accepted: {tuple(GEOM_TYPES)}")
        size = _vec(who, "size", self.size, GEOM_TYPES[self.type], positive=True)
        object.__setattr__(self, "size", tuple(size))
        object.__setattr__(self, "mass", _scalar(who, "mass", self.mass, positive=True))
        object.__setattr__(self, "pos", tuple(_vec(who, "pos", self.pos, 3)))
        _rot(who, self.quat)
        object.__setattr__(self, "quat", tuple(_vec(who, "quat", self.quat, 4)))
        object.__setattr__(self, "friction", _scalar(who, "friction", self.friction))


@dataclasses.dataclass(frozen=True)
class Joint:
    """The one-degree-of-freedom joint a port offers (the paper's requirement ①).

    type: 'hinge' | 'slide'; axis (3,) in the port's frame; ``range``: (lower, upper) limits
    [rad or m] or None (unlimited); damping [N m s/rad], armature [kg m²], stiffness [N m/rad];
    ``kp`` > 0 adds a position servo (MuJoCo's ``<position kp kv>``) on the joint, None none.
    """

    type: str = "hinge"
    axis: tuple = (0.0, 1.0, 0.0)
    range: tuple | None = None
    damping: float = 0.0
    armature: float = 0.0
    stiffness: float = 0.0
    kp: float | None = None
    kv: float = 0.0

    def __post_init__(self):
        who = f"{self.type} joint"
        if self.type not in JOINT_TYPES:
            raise ValueError(f"joint type {self.type!r}; accepted: {JOINT_TYPES}")
        object.__setattr__(self, "axis", tuple(_vec(who, "axis", self.axis, 3, nonzero=True)))
        if self.range is not None:
            lo, hi = _vec(who, "range", self.range, 2)
            if not lo < hi:
                raise ValueError(f"{who}: range ({lo}, {hi}) needs lower < upper")
            object.__setattr__(self, "range", (float(lo), float(hi)))
        for f in ("damping", "armature", "stiffness", "kv"):
            object.__setattr__(self, f, _scalar(who, f, getattr(self, f)))
        if self.kp is not None:
            object.__setattr__(self, "kp", _scalar(who, "kp", self.kp, positive=True))


@dataclasses.dataclass(frozen=True)
class Port:
    """A place on a module where another may attach: a frame (``pos``, scalar-first ``quat``)
    in the module frame, x pointing out of the module, and the joint it offers (None: the port
    only takes rigid connections)."""

    name: str
    pos: tuple = (0.0, 0.0, 0.0)
    quat: tuple = (1.0, 0.0, 0.0, 0.0)
    joint: Joint | None = None

    def __post_init__(self):
        _name("port name", self.name)
        who = f"port {self.name!r}"
        object.__setattr__(self, "pos", tuple(_vec(who, "pos", self.pos, 3)))
        _rot(who, self.quat)
        object.__setattr__(self, "quat", tuple(_vec(who, "quat", self.quat, 4)))
        if self.joint is not None and not isinstance(self.joint, Joint):
            raise ValueError(f"{who}: joint must be a diffmb.modular.Joint or None")

    @property
    def rot(self) -> np.ndarray:
        return _rot(f"port {self.name!r}", self.quat)


@dataclasses.dataclass(frozen=True)
class Module:
    """A module type: ``geoms`` (at least one), ``ports`` (unique names) and MuJoCo's five
    ellipsoid fluid coefficients ``fluidcoef`` (blunt drag, slender drag, angular drag, Kutta
    lift, Magnus lift) of its fluid geoms. Its mass is the sum of its geoms'."""

    name: str
    geoms: tuple
    ports: tuple
    fluidcoef: tuple = (0.5, 0.25, 1.5, 1.0, 1.0)

    def __post_init__(self):
        _name("module type name", self.name)
        who = f"module type {self.name!r}"
        geoms, ports = tuple(self.geoms), tuple(self.ports)
        if not geoms or not all(isinstance(g, Geom) for g in geoms):
            raise ValueError(f"{who}: geoms must be one or more diffmb.modular.Geom")
        if not all(isinstance(p, Port) for p in ports):
            raise ValueError(f"{who}: ports must be diffmb.modular.Port")
        names = [p.name for p in ports]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"{who}: port {dup[0]!r} is defined twice")
        gnames = [g.name for g in geoms if g.name]
        dup = sorted({n for n in gnames if gnames.count(n) > 1})
        if dup:
            raise ValueError(f"{who}: geom {dup[0]!r} is defined twice")
        object.__setattr__(self, "geoms", geoms)
        object.__setattr__(self, "ports", ports)
        object.__setattr__(self, "fluidcoef", tuple(_vec(who, "fluidcoef", self.fluidcoef, 5)))

    @property
    def mass(self) -> float:
        return float(sum(g.mass for g in self.geoms))

    def port(self, name: str) -> Port:
        for p in self.ports:
            if p.name == name:
                return p
        raise KeyError(name)


@dataclasses.dataclass(frozen=True)
class Connection:
    """Port ``parent_port`` of module ``parent`` mated to port ``child_port`` of ``child``;
    ``kind`` 'joint' (the parent port's joint, named ``name``: default ``"<parent>_<port>"``) or
    'rigid' (welded). Written either way round: the side nearer the root is the parent.
    ``angle``: a 'rigid' connection holds the parent port's joint at this position [rad or m]
    (0 for a 'joint' connection, whose zero is the mated pose). ``offset``: a 'rigid'
    connection may weld the ports apart, ``(x, y, z, qw, qx, qy, qz)``: the child port's mated
    frame (turned by π about z) in the parent port's frame, after the joint's ``angle``
    (None: mated exactly; :func:`dock` welds ports where they meet)."""

    parent: str
    parent_port: str
    child: str
    child_port: str
    kind: str = "joint"
    name: str | None = None
    angle: float = 0.0
    offset: tuple | None = None

    def __str__(self):
        return f"{self.parent}.{self.parent_port} -> {self.child}.{self.child_port}"

    def reversed(self) -> Connection:
        offset = self.offset
        if offset is not None:  # P·O·F = C  ⇔  C·(F O⁻¹ F)·F = P  (F = F⁻¹: π about z)
            Ro = _rot(str(self), offset[3:])
            R = _FLIP @ Ro.T @ _FLIP
            offset = (*(-_FLIP @ Ro.T @ np.asarray(offset[:3], float)), *_quat(R))
        return Connection(self.child, self.child_port, self.parent, self.parent_port, self.kind,
                          self.name, self.angle, offset)


class Configuration:
    """Module instances, their connections and a root: a robot.

    modules: ``{instance: Module}`` in the paper's order (s0 … sn); connections: sequence of
    :class:`Connection` or tuples ``(parent, parent_port, child, child_port[, kind[, name]])``;
    root: the base instance; ``loops``: rigid connections (:class:`Connection` or tuples, kind
    'rigid') that close kinematic loops between modules already connected: each is a weld
    equality (MuJoCo's soft ``<weld>`` between a site on each port, default ``solref`` and
    ``solimp``; :class:`~diffmb.forces.equality.Equalities` in ``build()``'s forces), with the
    parent port's joint held at ``angle`` and the ports ``offset`` as a rigid connection's; they
    are not in the span tree, its matrices or the Model's coordinates. ``root_port``: the port
    whose frame is the root's body frame (None:
    the module frame); ``pos``, ``quat``: that frame in the world; ``floating``: a free joint
    (MuJoCo's ``root``-named ``<freejoint>``) or fixed to the world. Fluid: ``density`` [kg/m³],
    ``viscosity`` [Pa s]; ``gravity`` [m/s²]; ``floor``: friction coefficient of a plane z = 0
    that the contact geoms touch, or None (no floor).

    Refused with ``ValueError`` naming the module and port: an unknown module or port, a port
    used twice, a cycle (the connection that closes it; close it with ``loops``), a module not
    connected to the root, a 'joint' connection whose parent port offers no joint, a loop that is
    not 'rigid' or ties a module to itself.
    """

    def __init__(self, modules: Mapping[str, Module], connections: Sequence, root: str, *,
                 loops: Sequence = (), root_port: str | None = None, pos=(0.0, 0.0, 0.0), quat=(1.0, 0.0, 0.0, 0.0),
                 floating: bool = True, density: float = 0.0, viscosity: float = 0.0,
                 gravity=(0.0, 0.0, -9.81), floor: float | None = None, timestep: float = 0.002,
                 name: str = "modular"):
        self.name = _name("configuration name", name)
        self.modules = dict(modules)
        if not self.modules:
            raise ValueError("a configuration needs at least one module")
        for k, m in self.modules.items():
            _name("module instance name", k)
            if not isinstance(m, Module):
                raise ValueError(f"module {k!r}: {m!r} is not a diffmb.modular.Module")
        self.names = tuple(self.modules)
        if root not in self.modules:
            raise ValueError(f"root: unknown module {root!r} (modules: {', '.join(self.names)})")
        self.root = root
        if root_port is not None:
            self._port(root, root_port, "root_port")
        self.root_port = root_port
        self.pos = tuple(_vec("configuration", "pos", pos, 3))
        _rot("configuration", quat)
        self.quat = tuple(_vec("configuration", "quat", quat, 4))
        self.floating = bool(floating)
        self.density = _scalar("configuration", "density", density)
        self.viscosity = _scalar("configuration", "viscosity", viscosity)
        self.gravity = tuple(_vec("configuration", "gravity", gravity, 3))
        self.floor = None if floor is None else _scalar("configuration", "floor", floor)
        self.timestep = _scalar("configuration", "timestep", timestep, positive=True)
        self.connections = self._oriented([self._connection(k, c)
                                           for k, c in enumerate(connections)])
        self.loops = self._loops(loops)
        names = [self.joint_name(c) for c in self.connections if c.kind == "joint"]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"joint name {dup[0]!r} is used by two connections")
        if self.floating and "root" in names:
            raise ValueError("joint name 'root' is the free joint's: name the connection otherwise")
        if not self.floating and not names:
            raise ValueError(f"configuration {self.name!r} has no degree of freedom: the root "
                             f"{self.root!r} is fixed (floating=False) and every connection is rigid")

    # ---------------------------------------------------------------- validation and tree
    def _port(self, module, port, where) -> Port:
        if module not in self.modules:
            raise ValueError(f"{where}: unknown module {module!r} (modules: {', '.join(self.names)})")
        m = self.modules[module]
        try:
            return m.port(port)
        except KeyError:
            raise ValueError(f"{where}: module {module!r} (type {m.name!r}) has no port {port!r} "
                             f"(ports: {', '.join(p.name for p in m.ports) or 'none'})") from None

    def _connection(self, k, c) -> Connection:
        if not isinstance(c, Connection):
            if not isinstance(c, (tuple, list)) or not 4 <= len(c) <= 6:
                raise ValueError(f"connection {k}: {c!r} is not (parent, parent_port, child, "
                                 "child_port[, kind[, name]])")
            c = Connection(*c)
        where = f"connection {k} ({c})"
        if c.name is not None:
            _name(f"{where}: joint name", c.name)
        if c.kind not in KINDS:
            raise ValueError(f"{where}: kind {c.kind!r}; accepted: {KINDS}")
        self._port(c.parent, c.parent_port, where)
        self._port(c.child, c.child_port, where)
        return c

    def _oriented(self, conns) -> tuple:
        """Refuse ports used twice, cycles and loose modules; orient every connection from the
        root outwards (the directed span tree); return them in the input order."""
        used = {}
        for k, c in enumerate(conns):
            for mod, port in ((c.parent, c.parent_port), (c.child, c.child_port)):
                if (mod, port) in used:
                    raise ValueError(f"port {mod}.{port} is used twice: by connection "
                                     f"{used[(mod, port)]} and connection {k} ({c})")
                used[(mod, port)] = k
        group = {n: n for n in self.names}

        def find(n):
            while group[n] != n:
                group[n] = group[group[n]]
                n = group[n]
            return n

        for k, c in enumerate(conns):
            a, b = find(c.parent), find(c.child)
            if a == b:
                raise ValueError(f"connection {k} ({c}) closes a cycle: modules {c.parent!r} and "
                                 f"{c.child!r} are already connected (port {c.child}.{c.child_port})")
            group[a] = b
        loose = [n for n in self.names if find(n) != find(self.root)]
        if loose:
            raise ValueError(f"module {loose[0]!r} is not connected to the root {self.root!r}: "
                             "no connection reaches any of its ports "
                             f"({', '.join(p.name for p in self.modules[loose[0]].ports)})"
                             + (f"; nor are {loose[1:]}" if len(loose) > 1 else ""))
        depth = {self.root: 0}
        frontier = [self.root]
        while frontier:
            nxt = []
            for n in frontier:
                for c in conns:
                    for a, b in ((c.parent, c.child), (c.child, c.parent)):
                        if a == n and b not in depth:
                            depth[b] = depth[n] + 1
                            nxt.append(b)
            frontier = nxt
        out = []
        for k, c in enumerate(conns):
            if depth[c.parent] > depth[c.child]:
                c = c.reversed()
            joint = self.modules[c.parent].port(c.parent_port).joint
            if c.kind == "joint" and joint is None:
                raise ValueError(f"connection {k} ({c}): kind 'joint' but port "
                                 f"{c.parent}.{c.parent_port} offers no joint (make it 'rigid')")
            if not np.isfinite(c.angle):
                raise ValueError(f"connection {k} ({c}): angle = {c.angle!r} is not finite")
            if c.offset is not None:
                if c.kind != "rigid":
                    raise ValueError(f"connection {k} ({c}): an offset needs a 'rigid' connection")
                off = _vec(f"connection {k} ({c})", "offset", c.offset, 7)
                _rot(f"connection {k} ({c}) offset", off[3:])
                c = dataclasses.replace(c, offset=tuple(off))
            if c.angle != 0 and (c.kind == "joint" or joint is None):
                raise ValueError(f"connection {k} ({c}): angle = {c.angle!r} needs a 'rigid' "
                                 f"connection on a port with a joint ({c.parent}.{c.parent_port})")
            out.append(c)
        return tuple(out)

    def _loops(self, loops) -> tuple:
        used = {(m, p): f"connection {k}" for k, c in enumerate(self.connections)
                for m, p in ((c.parent, c.parent_port), (c.child, c.child_port))}
        out = []
        for k, c in enumerate(loops):
            if not isinstance(c, Connection):
                if not isinstance(c, (tuple, list)) or not 4 <= len(c) <= 6:
                    raise ValueError(f"loop {k}: {c!r} is not (parent, parent_port, child, "
                                     "child_port[, 'rigid'[, name]])")
                c = Connection(*c)
            where = f"loop {k} ({c})"
            if c.kind != "rigid":
                raise ValueError(f"{where}: kind {c.kind!r}; a loop closes as a weld: 'rigid'")
            if c.name is not None:
                _name(f"{where}: name", c.name)
            joint = self._port(c.parent, c.parent_port, where).joint
            self._port(c.child, c.child_port, where)
            if c.parent == c.child:
                raise ValueError(f"{where}: ties module {c.parent!r} to itself")
            for m, p in ((c.parent, c.parent_port), (c.child, c.child_port)):
                if (m, p) in used:
                    raise ValueError(f"port {m}.{p} is used twice: by {used[(m, p)]} and {where}")
                used[(m, p)] = where
            if not np.isfinite(c.angle):
                raise ValueError(f"{where}: angle = {c.angle!r} is not finite")
            if c.angle != 0 and joint is None:
                raise ValueError(f"{where}: angle = {c.angle!r} needs a port with a joint "
                                 f"({c.parent}.{c.parent_port} has none)")
            if c.offset is not None:
                off = _vec(where, "offset", c.offset, 7)
                _rot(f"{where} offset", off[3:])
                c = dataclasses.replace(c, offset=tuple(off))
            out.append(c)
        names = [self.loop_name(c) for c in out]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"loop name {dup[0]!r} is used by two loops")
        return tuple(out)

    def loop_name(self, c: Connection) -> str:
        """The weld equality's name of loop ``c``: its ``name`` or ``loop_<parent>_<port>``."""
        return c.name or f"loop_{c.parent}_{c.parent_port}"

    def open_loop(self, loop) -> Configuration:
        """This configuration without loop ``loop`` (its index in ``loops`` or its name): the
        same bodies and coordinates, so a state (q, v) carries over unchanged (a release, no
        impulse)."""
        names = [self.loop_name(c) for c in self.loops]
        if isinstance(loop, str):
            if loop not in names:
                raise ValueError(f"configuration {self.name!r} has no loop {loop!r} (loops: "
                                 f"{names})")
            k = names.index(loop)
        else:
            k = int(loop)
            if not -len(names) <= k < len(names):
                raise ValueError(f"configuration {self.name!r}: loop index {loop} out of range "
                                 f"({len(names)} loops)")
            k %= len(names)
        return self._replaced(None, None, loops=self.loops[:k] + self.loops[k + 1:])

    @property
    def graph(self) -> tuple:
        """``((i, j, kind), ...)``: the link graph of :mod:`diffmb.topology` (instance indices,
        parent first)."""
        ix = {n: i for i, n in enumerate(self.names)}
        return tuple((ix[c.parent], ix[c.child], c.kind) for c in self.connections)

    def span_tree(self) -> topology.SpanTree:
        return topology.span_tree(len(self.names), self.graph, self.names.index(self.root))

    def accessibility_matrix(self) -> np.ndarray:
        """Definition 1: (n+1, n+1) int64, ``A[i, j] = 1`` iff a directed path leads from
        ``s_i`` to ``s_j``; rows and columns in module order."""
        return topology.accessibility_matrix(len(self.names), self.graph,
                                             self.names.index(self.root))

    def path_matrix(self) -> np.ndarray:
        """Definition 2: (m, n+1) int64, one row per terminal module in module order, ``P[k, j]
        = 1`` iff path k contains ``s_j``."""
        return topology.path_matrix(len(self.names), self.graph, self.names.index(self.root))

    # ---------------------------------------------------------------- MJCF
    def _children(self, n):
        return sorted((c for c in self.connections if c.parent == n),
                      key=lambda c: self.names.index(c.child))

    def joint_name(self, c: Connection) -> str:
        return c.name or f"{c.parent}_{c.parent_port}"

    def __repr__(self):
        loops = f", loops={[str(c) for c in self.loops]}" if self.loops else ""
        return (f"Configuration({self.name!r}, modules={list(self.names)}, root={self.root!r}, "
                f"connections={[str(c) for c in self.connections]}{loops})")

    def to_mjcf(self, path=None) -> str:
        """The configuration as an MJCF document that MuJoCo compiles (returned as a string,
        and written to ``path`` when given): bodies in depth-first order from the root (children
        in module order), each module's geoms, the joints of the connections, their servos as
        ``<position>`` actuators, and for every loop a site on each of its ports (``<loop>_1``
        on the parent's port frame after ``angle`` and ``offset``, ``<loop>_2`` on the child's
        turned by π about z) and a ``<weld>`` equality between them."""
        xml = self._mjcf()
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(xml)
        return xml

    def _mjcf(self) -> str:
        lines = [f'<mujoco model="{self.name}">', '  <compiler angle="radian"/>',
                 f'  <option timestep="{self.timestep!r}" gravity="{_fmt(self.gravity)}" '
                 f'density="{self.density!r}" viscosity="{self.viscosity!r}"/>',
                 "  <worldbody>"]
        if self.floor is not None:
            lines.append('    <geom name="floor" type="plane" size="50 50 0.1" contype="0" '
                         f'conaffinity="1" friction="{self.floor!r} 0.005 0.0001"/>')
        actuators = []
        root = self.modules[self.root]
        T = np.eye(4)
        if self.root_port is not None:
            p = root.port(self.root_port)
            T[:3, :3], T[:3, 3] = p.rot, p.pos
        self._body(lines, actuators, self.root, np.asarray(self.pos), _rot("", self.quat),
                   np.linalg.inv(T), None, 2)
        lines.append("  </worldbody>")
        if self.loops:
            lines += ["  <equality>", *(f'    <weld name="{self.loop_name(c)}" '
                                        f'site1="{self.loop_name(c)}_1" '
                                        f'site2="{self.loop_name(c)}_2"/>' for c in self.loops),
                      "  </equality>"]
        if actuators:
            lines += ["  <actuator>", *actuators, "  </actuator>"]
        lines.append("</mujoco>")
        return "\n".join(lines) + "\n"

    def _body(self, lines, actuators, n, pos, R, Tm, conn, ind):
        """Body ``n`` at (pos, R) in its parent's body frame; ``Tm``: its module frame in its
        body frame (4×4); ``conn``: the connection that carries it (None for the root)."""
        pad = "  " * ind
        m = self.modules[n]
        lines.append(f'{pad}<body name="{n}" pos="{_fmt(pos)}" quat="{_fmt(_quat(R))}">')
        if conn is None:
            if self.floating:
                lines.append(f'{pad}  <freejoint name="root"/>')
        elif conn.kind == "joint":
            pp = self.modules[conn.parent].port(conn.parent_port)
            cp = m.port(conn.child_port)
            j = pp.joint
            axis = cp.rot @ _FLIP.T @ np.asarray(j.axis)
            name = self.joint_name(conn)
            attrs = (f'name="{name}" type="{j.type}" pos="{_fmt(cp.pos)}" axis="{_fmt(axis)}" '
                     f'damping="{j.damping!r}" armature="{j.armature!r}" '
                     f'stiffness="{j.stiffness!r}"')
            if j.range is not None:
                attrs += f' limited="true" range="{_fmt(j.range)}"'
            lines.append(f"{pad}  <joint {attrs}/>")
            if j.kp is not None:
                actuators.append(f'    <position name="{name}" joint="{name}" kp="{j.kp!r}" '
                                 f'kv="{j.kv!r}"/>')
        for k, g in enumerate(m.geoms):
            Rg = Tm[:3, :3] @ _rot("", g.quat)
            pg = Tm[:3, :3] @ np.asarray(g.pos) + Tm[:3, 3]
            fluid = (f'fluidshape="ellipsoid" fluidcoef="{_fmt(m.fluidcoef)}"' if g.fluid
                     else 'fluidshape="none"')
            contact = (f'contype="1" conaffinity="0" friction="{g.friction!r} 0.005 0.0001"'
                       if g.contact else 'contype="0" conaffinity="0"')
            gname = f"{n}" if k == 0 else f"{n}_{g.name or k}"
            lines.append(f'{pad}  <geom name="{gname}" type="{g.type}" size="{_fmt(g.size)}" '
                         f'pos="{_fmt(pg)}" quat="{_fmt(_quat(Rg))}" mass="{g.mass!r}" '
                         f"{contact} {fluid}/>")
        for c in self.loops:
            for end, mod, port in ((1, c.parent, c.parent_port), (2, c.child, c.child_port)):
                if mod != n:
                    continue
                P = m.port(port)
                Rs, ps = P.rot, np.asarray(P.pos)
                if end == 1:  # the parent's port after the joint's angle and the offset
                    Rj, pj = _joint_motion(P.joint, c.angle)
                    if c.offset is not None:
                        pj = pj + Rj @ np.asarray(c.offset[:3])
                        Rj = Rj @ _rot(str(c), c.offset[3:])
                    Rs, ps = Rs @ Rj, ps + Rs @ pj
                else:  # the child's port turned by π about z: P·J·O = C·F
                    Rs = Rs @ _FLIP
                lines.append(f'{pad}  <site name="{self.loop_name(c)}_{end}" '
                             f'pos="{_fmt(Tm[:3, :3] @ ps + Tm[:3, 3])}" '
                             f'quat="{_fmt(_quat(Tm[:3, :3] @ Rs))}"/>')
        for c in self._children(n):
            pp, cp = m.port(c.parent_port), self.modules[c.child].port(c.child_port)
            # child module frame in this body: Tm · P · J(angle) · flip · C⁻¹
            Rj, pj = _joint_motion(pp.joint, c.angle)
            if c.offset is not None:
                pj = pj + Rj @ np.asarray(c.offset[:3])
                Rj = Rj @ _rot(str(c), c.offset[3:])
            Rp = Tm[:3, :3] @ pp.rot
            Rc = Rp @ Rj @ _FLIP @ cp.rot.T
            pc = Rp @ pj + Tm[:3, :3] @ np.asarray(pp.pos) + Tm[:3, 3] - Rc @ np.asarray(cp.pos)
            self._body(lines, actuators, c.child, pc, Rc, np.eye(4), c, ind + 1)
        lines.append(f"{pad}</body>")

    def mjmodel(self):
        """The MJCF compiled by MuJoCo (``mujoco.MjModel``)."""
        import mujoco

        try:
            return mujoco.MjModel.from_xml_string(self.to_mjcf())
        except ValueError as e:
            raise ValueError(f"configuration {self.name!r}: MuJoCo could not compile it: {e}") \
                from None

    def build(self, *, fluid=None, contacts=True):
        """``(model, forces)``: the ``Model`` (MuJoCo's qpos/qvel layout, bodies named after the
        instances, joints after the connections) and the force elements of :func:`diffmb.
        mjcf_forces` on the MJCF: joint damping and springs, servos, limits, floor contacts of
        the contact geoms (``contacts``), the modules' fluid forces and the loops' weld
        equalities (one :class:`~diffmb.forces.equality.Equalities` element). ``fluid``: 'potential'
        (potential-flow added inertia in the Model, buoyancy and drag per fluid geom, as
        :func:`diffmb.models.underwater.load`), 'mujoco' (MuJoCo's ellipsoid model, as MuJoCo
        simulates the MJCF) or False; None (default): 'potential' in a fluid (``density`` > 0),
        else False."""
        from .io.mjcf import _Named, from_mjmodel, mjcf_forces

        if fluid is None:
            fluid = "potential" if self.density > 0 else False
        if fluid not in ("potential", "mujoco", False):
            raise ValueError(f"fluid={fluid!r}; accepted: 'potential', 'mujoco', False")
        if fluid == "potential" and not self.density > 0:
            raise ValueError(f"configuration {self.name!r}: fluid='potential' needs a fluid "
                             "density > 0 (Configuration(density=...)); or build(fluid=False)")
        mj = self.mjmodel()
        where = f"<configuration {self.name}>"
        model = from_mjmodel(mj, source=where, name=self.name,
                             added_mass="potential" if fluid == "potential" else None)
        return model, mjcf_forces(_Named(mj, where), fluid=fluid, contacts=contacts)

    # ---------------------------------------------------------------- locking and releasing
    def _replaced(self, k, c, loops=None) -> Configuration:
        conns = list(self.connections)
        if k is not None:
            conns[k] = c
        return Configuration(self.modules, conns, self.root,
                             loops=self.loops if loops is None else loops,
                             root_port=self.root_port,
                             pos=self.pos, quat=self.quat, floating=self.floating,
                             density=self.density, viscosity=self.viscosity, gravity=self.gravity,
                             floor=self.floor, timestep=self.timestep, name=self.name)

    def _joint_index(self, joint) -> int:
        for k, c in enumerate(self.connections):
            if c.kind == "joint" and self.joint_name(c) == joint:
                return k
        raise ValueError(f"configuration {self.name!r} has no joint {joint!r} (joints: "
                         f"{[self.joint_name(c) for c in self.connections if c.kind == 'joint']})")

    def lock(self, joint: str, model, q, v):
        """Lock ``joint`` where it stands, an inelastic impact: ``(configuration, q, v)`` after
        it, the connection welded at the joint's position (``angle``) and the speeds that keep
        every other generalized momentum, ``v⁺ = (Gᵀ M G)⁻¹ Gᵀ M v`` with G the speeds without
        the locked one and M ``model``'s mass matrix at q (with its added inertia): the total
        linear and angular momentum (of the bodies and, with added inertia, of the fluid's
        impulse) pass through unchanged. ``model``: this configuration's (:meth:`build`);
        q (nq,), v (nv,). The new configuration's Model has q, v without the joint's entries."""
        import jax
        import jax.numpy as jnp

        from .dynamics.api import mass_matrix

        if self.loops:
            raise ValueError(f"lock: configuration {self.name!r} has loops "
                             f"{[self.loop_name(c) for c in self.loops]}: open them first "
                             "(open_loop)")
        k = self._joint_index(joint)
        c = self.connections[k]
        j = model.joint_names.index(self.joint_name(c))
        iq, iv = model.joint_q[j], model.joint_v[j]
        q, v = np.asarray(q, float), np.asarray(v, float)
        new = self._replaced(k, dataclasses.replace(c, kind="rigid", angle=float(q[iq])))
        keep = np.delete(np.arange(model.nv), iv)
        M = np.asarray(jax.jit(mass_matrix)(model, jnp.asarray(q)))
        v_new = np.linalg.solve(M[np.ix_(keep, keep)], (M @ v)[keep])
        return new, np.delete(q, iq), v_new

    def release(self, connection: int, name: str | None = None):
        """Release the rigid connection ``connection`` (its index) into its port's joint, named
        ``name``: ``(configuration, insert)`` with ``insert(q, v) -> (q, v)`` mapping a state of
        the old Model to the new one (the joint at its welded ``angle``, moving with its parent:
        the same motion, the same momentum)."""
        c = self.connections[int(connection)]
        if c.kind != "rigid":
            raise ValueError(f"connection {connection} ({c}) is not rigid")
        if c.offset is not None:
            raise ValueError(f"connection {connection} ({c}) welds its ports apart (a docking "
                             "offset): its port's joint cannot take it; undock() separates it")
        new = self._replaced(int(connection),
                             dataclasses.replace(c, kind="joint", name=name or c.name, angle=0.0))
        import mujoco

        mj = new.mjmodel()
        j = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT,
                              new.joint_name(new.connections[int(connection)]))
        iq, iv = int(mj.jnt_qposadr[j]), int(mj.jnt_dofadr[j])

        def insert(q, v):
            return (np.insert(np.asarray(q, float), iq, c.angle),
                    np.insert(np.asarray(v, float), iv, 0.0))

        return new, insert

    # ---------------------------------------------------------------- Kane along the paths
    def kane_support(self, model) -> np.ndarray:
        """(nb, nv) int64: ``[b, r] = 1`` iff generalized speed r moves body b, read from the
        paper's matrices (§3.1): the modules on the path from s0 to s_k are the non-zeros of a
        path row through s_k up to s_k's depth (depth of s_j = Σ_i A[i, j], its number of
        ancestors); a joint's speeds belong to the module it carries (the free joint's to the
        root). ``model``: this configuration's, from :meth:`build`."""
        on_path = topology.path_support(self.path_matrix(), self.accessibility_matrix())
        col = {m: j for j, m in enumerate(self.names)}
        owner = {"root": self.root} if self.floating else {}
        owner.update({self.joint_name(c): c.child for c in self.connections if c.kind == "joint"})
        if sorted(model.body_names) != sorted(self.names) or sorted(model.joint_names) != sorted(owner):
            raise ValueError(f"configuration {self.name!r}: the model's bodies {model.body_names} "
                             f"and joints {model.joint_names} are not this configuration's "
                             "(use the Model of .build())")
        ends = [*model.joint_v[1:], model.nv]
        dof_module = np.zeros(model.nv, np.int64)
        for j, name in enumerate(model.joint_names):
            dof_module[model.joint_v[j]:ends[j]] = col[owner[name]]
        rows = [col[b] for b in model.body_names]
        return on_path[np.ix_(rows, dof_module)].astype(np.int64)

    def kane_forward_dynamics(self, model, q, v, tau, f_ext=None):
        """Kane's equations (§3.2) with the partial velocities assembled along the paths
        (:meth:`kane_support`), solved for v̇: (nv,). Rigid-body law and added inertia, as
        ``diffmb.forward_dynamics``; q (nq,), v (nv,), tau (nv,), f_ext (nb, 6) or None."""
        from .dynamics.kane import forward_dynamics_kane

        return forward_dynamics_kane(model, q, v, tau, f_ext, support=self.kane_support(model))

    def kane_inverse_dynamics(self, model, q, v, qdd, f_ext=None):
        """τ (nv,) from Kane's equations along the paths (:meth:`kane_forward_dynamics`)."""
        from .dynamics.kane import inverse_dynamics_kane

        return inverse_dynamics_kane(model, q, v, qdd, f_ext, support=self.kane_support(model))

    @classmethod
    def from_graph(cls, graph, modules, ports, *, joint_names=None, **kw) -> Configuration:
        """A configuration from a :mod:`diffmb.topology` link graph ``((i, j, kind), ...)``
        (instances ``s0 … sn``, root ``s0``). ``modules``: one Module for all or a sequence per
        instance; ``ports``: ``{(i, j): (parent_port, child_port)}``; ``joint_names``:
        ``{(i, j): name}``. Other keywords go to :class:`Configuration`."""
        graph = tuple(graph)
        if not graph:
            raise ValueError("from_graph needs at least one connection; a single module is "
                             "Configuration({'s0': module}, [], 's0')")
        for c in graph:
            if len(c) != 3 or not all(isinstance(x, (int, np.integer)) and x >= 0 for x in c[:2]):
                raise ValueError(f"graph entry {c!r} is not (i, j, kind) with module indices "
                                 "i, j >= 0")
        n = 1 + max(max(i, j) for i, j, _ in graph)
        mods = [modules] * n if isinstance(modules, Module) else list(modules)
        if len(mods) != n:
            raise ValueError(f"the graph has {n} modules, {len(mods)} module types given")
        names = joint_names or {}
        conns = []
        for i, j, kind in graph:
            if (i, j) not in ports:
                raise ValueError(f"connection s{i}-s{j}: no ports given in ports[({i}, {j})]")
            pp, cp = ports[(i, j)]
            conns.append(Connection(f"s{i}", pp, f"s{j}", cp, kind, names.get((i, j))))
        kw.setdefault("root", "s0")
        return cls({f"s{k}": m for k, m in enumerate(mods)}, conns, **kw)



# -------------------------------------------------------------------- docking and undocking
# A robot is ``(configuration, model, q, v)`` with ``model`` its configuration's (``build()``).


def _jacobians(model, q):
    """(nb, 6, nv): world angular velocity and world velocity of the centre of mass of every
    body per generalized speed, bodies in ``model.body_names`` order."""
    import jax.numpy as jnp

    return np.asarray(_jitted()["jac"](model, jnp.asarray(q, float)))


def _mass(model, q):
    import jax.numpy as jnp

    return np.asarray(_jitted()["mass"](model, jnp.asarray(q, float)))


_JIT = {}


def _jitted():
    """The kinematics docking needs, compiled once per model structure."""
    if not _JIT:
        import jax
        import jax.numpy as jnp

        from .dynamics.api import mass_matrix
        from .dynamics.kinematics import body_poses, kinematics, partial_velocities

        def jac(model, q):
            V, W = partial_velocities(model, kinematics(model, q))
            return jnp.concatenate([W, V], axis=1)

        _JIT.update(jac=jax.jit(jac), mass=jax.jit(mass_matrix), poses=jax.jit(body_poses))
    return _JIT


def _check_robot(robot, what):
    if not (isinstance(robot, (tuple, list)) and len(robot) == 4
            and isinstance(robot[0], Configuration)):
        raise ValueError(f"{what}: expected (configuration, model, q, v), got {type(robot)}")
    cfg, model, q, v = robot
    q, v = np.asarray(q, float).reshape(-1), np.asarray(v, float).reshape(-1)
    if (q.shape, v.shape) != ((model.nq,), (model.nv,)):
        raise ValueError(f"{what} ({cfg.name!r}): q {q.shape} and v {v.shape} do not fit its "
                         f"model (nq {model.nq}, nv {model.nv})")
    if sorted(model.body_names) != sorted(cfg.names):
        raise ValueError(f"{what} ({cfg.name!r}): the model's bodies {model.body_names} are not "
                         "the configuration's modules (use the Model of .build())")
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(v))):
        raise ValueError(f"{what} ({cfg.name!r}): q or v is not finite")
    return cfg, model, q, v


def module_frames(cfg: Configuration, model, q) -> dict:
    """``{instance: (R (3, 3), p (3,))}``: every module frame in the world at q (nq,)."""
    import jax.numpy as jnp

    R, p = (np.asarray(x) for x in _jitted()["poses"](model, jnp.asarray(q, float)))
    out = {}
    for b, n in enumerate(model.body_names):
        Rm, pm = R[b], p[b]
        if n == cfg.root and cfg.root_port is not None:  # the root's body frame is its port's
            P = cfg.modules[n].port(cfg.root_port)
            Rm = R[b] @ P.rot.T
            pm = p[b] - Rm @ np.asarray(P.pos)
        out[n] = (Rm, pm)
    return out


def _port_arg(port, what):
    if not (isinstance(port, (tuple, list)) and len(port) == 2
            and all(isinstance(x, str) for x in port)):
        raise ValueError(f"{what}: expected (instance, port) names, got {port!r}")
    return tuple(port)


def _port_frame(cfg, frames, module, port):
    P = cfg._port(module, port, f"port {module}.{port} of {cfg.name!r}")
    Rm, pm = frames[module]
    return Rm @ P.rot, pm + Rm @ np.asarray(P.pos)


def port_gap(robot_a, port_a, robot_b, port_b):
    """``(distance [m], angle [rad])`` between port ``port_a = (instance, port)`` of robot a and
    ``port_b`` of robot b (either ``(configuration, model, q, v)``; the same robot twice for
    two ports of one): the distance of their origins and the rotation angle from b's port frame
    to the mated pose (a's port frame turned by π about z)."""
    ca, ma, qa, _ = _check_robot(robot_a, "robot_a")
    cb, mb, qb, _ = _check_robot(robot_b, "robot_b")
    port_a, port_b = _port_arg(port_a, "port_a"), _port_arg(port_b, "port_b")
    Ra, pa = _port_frame(ca, module_frames(ca, ma, qa), *port_a)
    Rb, pb = _port_frame(cb, module_frames(cb, mb, qb), *port_b)
    E = (Ra @ _FLIP).T @ Rb
    return (float(np.linalg.norm(pb - pa)),
            float(np.arccos(np.clip(0.5 * (np.trace(E) - 1.0), -1.0, 1.0))))


def _twist_swing(Q, axis):
    """Q = T(θ) S: θ [rad], the rotation about ``axis`` (unit) that leaves the smallest rest S,
    and S's angle [rad] (swing–twist decomposition of a rotation matrix)."""
    w, *x = _quat(Q)
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    theta = 2.0 * np.arctan2(float(a @ np.asarray(x)), w)
    w, *x = _quat(_joint_motion(Joint("hinge", tuple(a)), -theta)[0] @ Q)
    return theta, float(2.0 * np.arctan2(np.linalg.norm(x), abs(w)))


def loop_gap(robot, port_a, port_b):
    """``(distance [m], angle [rad], joint angle [rad or 0])`` between two ports ``(instance,
    port)`` of one robot ``(configuration, model, q, v)``: the distance of their origins, and,
    with ``port_a``'s hinge free to turn, the angle left from b's port frame to the mated pose
    and the hinge angle that leaves the least (a port without a hinge: :func:`port_gap`'s angle
    and 0). The test for :func:`close_loop`."""
    cfg, model, q, _ = _check_robot(robot, "robot")
    port_a, port_b = _port_arg(port_a, "port_a"), _port_arg(port_b, "port_b")
    frames = module_frames(cfg, model, q)
    Ra, pa = _port_frame(cfg, frames, *port_a)
    Rb, pb = _port_frame(cfg, frames, *port_b)
    joint = cfg.modules[port_a[0]].port(port_a[1]).joint
    Q = Ra.T @ Rb @ _FLIP  # P·Q·F = C
    dist = float(np.linalg.norm(pb - pa))
    if joint is None or joint.type != "hinge":
        return dist, float(np.arccos(np.clip(0.5 * (np.trace(Q) - 1.0), -1.0, 1.0))), 0.0
    theta, ang = _twist_swing(Q, joint.axis)
    return dist, ang, theta


def close_loop(robot, port_a, port_b, *, tol=0.02, angle_tol=0.1, name=None):
    """Weld two ports of one robot ``(configuration, model, q, v)`` where they stand: a closed
    loop (a snake's ends docked into a ring), an inelastic impact.

    ``port_a``, ``port_b``: ``(instance, port)``, free ports of two different modules. Refused
    (``ValueError``) when :func:`loop_gap` finds them more than ``tol`` [m] apart or
    ``angle_tol`` [rad] from the mated pose (``port_a``'s hinge, if any, free). Returns
    ``(configuration, q, v)``: the configuration with a new loop (``Connection(port_a ...,
    port_b ..., 'rigid', angle=<hinge angle>, offset=<the ports' residual pose>, name=name)``,
    a weld equality exactly satisfied at q), the same q, and the speeds after the impact,
    ``v⁺ = G (Gᵀ M G)⁻¹ Gᵀ M v`` with G a basis of the speeds that keep the welds (J G = 0, J
    the weld rows, the relative twist of the two port frames, and the other loops' rows; rows
    the robot's joints cannot violate, such as a planar ring's out-of-plane ones, drop out) and
    M the mass matrix with the model's added inertia (= v − M⁻¹Jᵀλ with J v⁺ = 0): the ports
    move together afterwards, and the impulse is an equal and opposite
    wrench pair inside the robot, so the total linear and angular momentum (bodies and, with
    added inertia, the fluid's impulse) are kept. The configuration's Model
    (``build(fluid=...)``, potential flow if ``model`` has added inertia, else none) has
    ``model``'s coordinates."""
    import jax
    import jax.numpy as jnp

    from .forces.equality import Equalities

    cfg, model, q, v = _check_robot(robot, "robot")
    port_a, port_b = _port_arg(port_a, "close_loop: port_a"), _port_arg(port_b,
                                                                         "close_loop: port_b")
    dist, ang, theta = loop_gap(robot, port_a, port_b)
    if dist > tol or ang > angle_tol:
        raise ValueError(f"close_loop: ports {port_a[0]}.{port_a[1]} and {port_b[0]}.{port_b[1]}"
                         f" are {dist:.3g} m and {ang:.3g} rad from mating (tol {tol} m, "
                         f"angle_tol {angle_tol} rad)")
    frames = module_frames(cfg, model, q)
    Ra, pa = _port_frame(cfg, frames, *port_a)
    Rb, pb = _port_frame(cfg, frames, *port_b)
    joint = cfg.modules[port_a[0]].port(port_a[1]).joint
    RJ, _ = _joint_motion(joint if joint is not None and joint.type == "hinge" else None, theta)
    Ro = RJ.T @ Ra.T @ Rb @ _FLIP  # P·J·O·F = C (a hinge turns about the port's origin)
    offset = (*(RJ.T @ Ra.T @ (pb - pa)), *_quat(Ro))
    loop = Connection(port_a[0], port_a[1], port_b[0], port_b[1], "rigid", name, theta, offset)
    new = cfg._replaced(None, None, loops=(*cfg.loops, loop))
    m2, f2 = new.build(fluid="potential" if model.has_added_inertia else False, contacts=False)
    if (m2.nq, m2.nv, m2.joint_names) != (model.nq, model.nv, model.joint_names):
        raise ValueError(f"close_loop: the model is not {cfg.name!r}'s (use the Model of .build())")
    eq = next(f for f in f2 if isinstance(f, Equalities))
    r, J, _ = jax.jit(Equalities.constraint)(eq, m2, jnp.asarray(q), jnp.asarray(v))
    r, J = np.asarray(r), np.asarray(J)
    if not np.abs(r[-6:]).max() <= 1e-9:
        raise RuntimeError(f"close_loop: the new weld is {np.abs(r[-6:]).max():.2e} from closed")
    # the motions that keep every weld: the null space of J (rows may be redundant: a planar
    # ring's hinges cannot open its welds out of the plane); v⁺ = G (GᵀMG)⁻¹ GᵀM v
    _, sv, Vt = np.linalg.svd(J)
    rank = int(np.sum(sv > 1e-10 * max(1.0, sv.max(initial=0.0))))
    G = Vt[rank:].T
    M = _mass(m2, q)
    return new, q, G @ np.linalg.solve(G.T @ M @ G, G.T @ (M @ v))


def state_from_frames(cfg: Configuration, model, frames, *, tol=1e-6):
    """q (nq,) of ``model`` (``cfg``'s) that puts every module frame where ``frames``
    (``{instance: (R, p)}``, as :func:`module_frames`) says: the free joint's pose from the
    root's, each joint's position from the relative pose of its two ports. Refused when a
    connection cannot put its child there (more than ``tol`` off, m or rad)."""
    q = np.array(model.qpos0, float)
    Rm, pm = frames[cfg.root]
    if cfg.root_port is not None:
        P = cfg.modules[cfg.root].port(cfg.root_port)
        Rm, pm = Rm @ P.rot, pm + Rm @ np.asarray(P.pos)
    if cfg.floating:
        q[:3], q[3:7] = pm, _quat(Rm)
    for c in cfg.connections:
        Rp, pp = _port_frame(cfg, frames, c.parent, c.parent_port)
        Rc, pc = _port_frame(cfg, frames, c.child, c.child_port)
        RJ, pJ = Rp.T @ Rc @ _FLIP, Rp.T @ (pc - pp)  # P·J·F = C
        joint = cfg.modules[c.parent].port(c.parent_port).joint
        x = 0.0
        if c.kind == "joint":
            a = np.asarray(joint.axis) / np.linalg.norm(joint.axis)
            if joint.type == "hinge":
                x = float(np.arctan2(0.5 * a @ np.array([RJ[2, 1] - RJ[1, 2], RJ[0, 2] - RJ[2, 0],
                                                         RJ[1, 0] - RJ[0, 1]]),
                                     0.5 * (np.trace(RJ) - 1.0)))
            else:
                x = float(a @ pJ)
            q[model.joint_q[model.joint_index(cfg.joint_name(c))]] = x
        Rx, px = _joint_motion(joint, x if c.kind == "joint" else c.angle)
        if c.kind == "rigid" and c.offset is not None:
            px = px + Rx @ np.asarray(c.offset[:3])
            Rx = Rx @ _rot(str(c), c.offset[3:])
        err = max(np.abs(Rx - RJ).max(), np.abs(px - pJ).max())
        if not err <= tol:
            raise ValueError(f"configuration {cfg.name!r}: connection {c} cannot put module "
                             f"{c.child!r} where it is ({err:.2e} off)")
    return q


def _project(cfg, model, q, robots):
    """The speeds (nv,) of ``model`` at q after an inelastic impact of ``robots`` (a sequence of
    (configuration, model, q, v) holding the same bodies, by name): the new generalized momenta
    are the old ones on every motion the new system can make, ``M v⁺ = Gᵀ M_old v`` with G the
    old speeds of the new motions (``J_old G = J_new``, J: the bodies' world twists)."""
    J = _jacobians(model, q)
    rows = {n: b for b, n in enumerate(model.body_names)}
    nv_old = sum(r[1].nv for r in robots)
    J_old = np.zeros((model.n_bodies, 6, nv_old))
    M_old = np.zeros((nv_old, nv_old))
    v_old = np.zeros(nv_old)
    k = 0
    for _c, m, qq, vv in robots:
        Jr = _jacobians(m, qq)
        for b, n in enumerate(m.body_names):
            J_old[rows[n], :, k:k + m.nv] = Jr[b]
        M_old[k:k + m.nv, k:k + m.nv] = _mass(m, qq)
        v_old[k:k + m.nv] = vv
        k += m.nv
    A, B = J_old.reshape(-1, nv_old), J.reshape(-1, model.nv)
    G = np.linalg.lstsq(A, B, rcond=None)[0]
    scale = max(1.0, np.abs(B).max())
    if not np.abs(A @ G - B).max() <= 1e-9 * scale:
        raise ValueError(f"configuration {cfg.name!r}: its motions are not motions of the "
                         "robots it was made from")
    return np.linalg.solve(_mass(model, q), G.T @ (M_old @ v_old))


def _merged(a: Configuration, b: Configuration, conn: Connection, name) -> Configuration:
    clash = sorted(set(a.names) & set(b.names))
    if clash:
        raise ValueError(f"dock: module {clash[0]!r} is in both {a.name!r} and {b.name!r} "
                         "(rename the instances of one; two ports of one robot: close_loop)")
    for f in ("density", "viscosity", "gravity", "floor"):
        if getattr(a, f) != getattr(b, f):
            raise ValueError(f"dock: {a.name!r} and {b.name!r} differ in {f} "
                             f"({getattr(a, f)!r} vs {getattr(b, f)!r})")
    return Configuration({**a.modules, **b.modules}, [*a.connections, *b.connections, conn],
                         a.root, root_port=a.root_port, pos=a.pos, quat=a.quat,
                         floating=a.floating, density=a.density, viscosity=a.viscosity,
                         gravity=a.gravity, floor=a.floor, timestep=a.timestep, name=name)


def dock(robot_a, robot_b, port_a, port_b, *, tol=0.02, angle_tol=0.1, name=None):
    """Dock two free robots where port ``port_a = (instance, port)`` of ``robot_a`` meets
    ``port_b`` of ``robot_b`` (each ``(configuration, model, q, v)``, the model its
    configuration's ``build()``): the two ports lock in a rigid connection where they stand
    (their residual misalignment becomes the weld's ``offset``), an inelastic impact.

    Returns ``(configuration, q, v)``: one robot with a's modules and root, b's modules hanging
    from ``port_a`` (b's connections oriented away from a's root: a connection that now runs
    the other way takes its new parent port's joint, whose position is read from the pose),
    every module where it was, and the speeds of the plastic impact: the new generalized
    momenta are the old ones on every motion of the docked robot, so the total linear and
    angular momentum (of the bodies and, with added inertia, the fluid's impulse) are kept.
    Its Model is ``configuration.build(fluid=...)`` with a's added inertia (potential flow or
    none). Refused when the ports are more than ``tol`` [m] or ``angle_tol`` [rad] from the
    mated pose, or when the robots share a module name or differ in fluid, gravity or floor.
    ``name``: the docked configuration's (default ``<a>_<b>``)."""
    ca, ma, qa, va = _check_robot(robot_a, "robot_a")
    cb, mb, qb, vb = _check_robot(robot_b, "robot_b")
    if not (ca.floating and cb.floating):
        raise ValueError("dock: both robots must be floating (a free root joint)")
    for c in (ca, cb):
        if c.loops:
            raise ValueError(f"dock: {c.name!r} has loops {[c.loop_name(x) for x in c.loops]}: "
                             "open them first (open_loop); two ports of one robot: close_loop")
    port_a, port_b = _port_arg(port_a, "dock: port_a"), _port_arg(port_b, "dock: port_b")
    if ma.has_added_inertia != mb.has_added_inertia:
        raise ValueError(f"dock: {ca.name!r} and {cb.name!r} disagree on added inertia "
                         "(build both with the same fluid model)")
    fa, fb = module_frames(ca, ma, qa), module_frames(cb, mb, qb)
    Ra, pa = _port_frame(ca, fa, *port_a)
    Rb, pb = _port_frame(cb, fb, *port_b)
    dist, ang = port_gap(robot_a, port_a, robot_b, port_b)
    if dist > tol or ang > angle_tol:
        raise ValueError(f"dock: ports {port_a[0]}.{port_a[1]} and {port_b[0]}.{port_b[1]} are "
                         f"{dist:.3g} m and {ang:.3g} rad from mating (tol {tol} m, "
                         f"angle_tol {angle_tol} rad)")
    Ro = Ra.T @ Rb @ _FLIP  # P·O·F = C
    offset = (*(Ra.T @ (pb - pa)), *_quat(Ro))
    conn = Connection(port_a[0], port_a[1], port_b[0], port_b[1], "rigid", offset=offset)
    cfg = _merged(ca, cb, conn, name or f"{ca.name}_{cb.name}")
    model, _ = cfg.build(fluid="potential" if ma.has_added_inertia else False, contacts=False)
    q = state_from_frames(cfg, model, {**fa, **fb})
    return cfg, q, _project(cfg, model, q, [(ca, ma, qa, va), (cb, mb, qb, vb)])


def undock(robot, connection: int, *, names=None):
    """Separate ``robot`` ``(configuration, model, q, v)`` at connection ``connection`` (its
    index in ``configuration.connections``; rigid or a joint): two robots ``[(configuration,
    q, v), (configuration, q, v)]``, the one with the root first; the other floats from the
    connection's child (its module frame its body frame). Every module keeps its pose and its
    motion (a release: no impulse), so the momenta add up to the robot's. ``names``: the two
    configurations' names (default ``<name>`` and ``<name>_<child>``)."""
    cfg, model, q, v = _check_robot(robot, "robot")
    if cfg.loops:
        raise ValueError(f"undock: {cfg.name!r} has loops {[cfg.loop_name(x) for x in cfg.loops]}"
                         ": open them first (open_loop)")
    c = cfg.connections[int(connection)]
    rest = [x for k, x in enumerate(cfg.connections) if k != int(connection)]
    side = {c.child}
    grew = True
    while grew:
        grew = False
        for x in rest:
            if x.parent in side and x.child not in side:
                side.add(x.child)
                grew = True
    frames = module_frames(cfg, model, q)
    J = _jacobians(model, q)
    twist = {n: J[b] @ v for b, n in enumerate(model.body_names)}
    na, nb = names or (cfg.name, f"{cfg.name}_{c.child}")
    R, p = frames[c.child]
    kw = dict(density=cfg.density, viscosity=cfg.viscosity, gravity=cfg.gravity, floor=cfg.floor,
              timestep=cfg.timestep)
    parts = [Configuration({n: m for n, m in cfg.modules.items() if n not in side},
                           [x for x in rest if x.child not in side], cfg.root,
                           root_port=cfg.root_port, pos=cfg.pos, quat=cfg.quat,
                           floating=cfg.floating, name=na, **kw),
             Configuration({n: m for n, m in cfg.modules.items() if n in side},
                           [x for x in rest if x.child in side], c.child, pos=p, quat=_quat(R),
                           name=nb, **kw)]
    out = []
    for part in parts:
        m, _ = part.build(fluid="potential" if model.has_added_inertia else False,
                          contacts=False)
        qq = state_from_frames(part, m, frames)
        Jp = _jacobians(m, qq)
        target = np.stack([twist[n] for n in m.body_names])
        vv = np.linalg.lstsq(Jp.reshape(-1, m.nv), target.reshape(-1), rcond=None)[0]
        out.append((part, qq, vv))
    return out



# -------------------------------------------------------------------- shared (per-type) parameters
# name: (shape per fluid geom of the type, or () per module), meaning
SHARED_FIELDS = {
    "mass": "() kg: the module's mass; its geoms' masses scale with it (com kept, inertia scaled)",
    "added_inertia": "(6,) or (g, 6): diagonal of each fluid geom's added inertia at its centre, "
                     "in its axes, [angular (kg m²); linear (kg)] (potential flow)",
    "quad_force": "(3,) or (g, 3) N s²/m²: quadratic drag per axis of each fluid geom",
    "quad_torque": "(3,) or (g, 3) N m s²: quadratic angular drag per axis of each fluid geom",
    "lin_force": "(3,) or (g, 3) N s/m: linear drag per axis of each fluid geom",
    "lin_torque": "(3,) or (g, 3) N m s: linear angular drag per axis of each fluid geom",
}
_DRAG = ("quad_force", "quad_torque", "lin_force", "lin_torque")


def _shared_layout(cfg: Configuration, model):
    """``(bodies, entries, X)``: ``{type: [(body index, instance)]}``, the potential-flow entries
    ``[(body index, instance, fluid row)]`` in :class:`~diffmb.forces.hydro.Hydrodynamics`
    order (the row of the geom among its type's fluid geoms; None for a non-fluid geom) and
    each entry's 6 × 6 motion transform from the body frame to the geom's centre and axes."""
    import mujoco

    from .forces.hydro import _motion_transform
    from .io.mjcf_fluid import _potential_geoms

    if sorted(model.body_names) != sorted(cfg.names):
        raise ValueError(f"configuration {cfg.name!r}: the model's bodies {model.body_names} are "
                         "not its modules (use the Model of .build())")
    bodies = {}
    for n in cfg.names:
        bodies.setdefault(cfg.modules[n].name, []).append((model.body_index(n), n))
    where = {}
    for n, m in cfg.modules.items():
        rows = 0
        for k, g in enumerate(m.geoms):
            where[n if k == 0 else f"{n}_{g.name or k}"] = (n, rows if g.fluid else None)
            rows += g.fluid
    mj = cfg.mjmodel()
    entries, X = [], []
    for _b, g in _potential_geoms(mj):
        n, row = where[mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_GEOM, g)]
        entries.append((model.body_index(n), n, row))
        X.append(_motion_transform(_rot("geom", mj.geom_quat[g]), np.asarray(mj.geom_pos[g], float)))
    return bodies, entries, X


def _hydro(forces, what):
    from .forces.hydro import Hydrodynamics

    k = [i for i, f in enumerate(forces) if isinstance(f, Hydrodynamics)]
    if len(k) != 1:
        raise ValueError(f"{what}: drag needs exactly one Hydrodynamics element in forces (build "
                         f"with fluid='potential'), found {len(k)}")
    return k[0]


def shared_parameters(cfg: Configuration, model, forces=()) -> dict:
    """The per-type parameters a built model carries: ``{module type name: {field: array}}``
    with the fields of :data:`SHARED_FIELDS` (``mass`` always; ``added_inertia`` with potential-
    flow added inertia and one fluid geom per module; the drag fields with a Hydrodynamics
    element in ``forces``). ``model``, ``forces``: ``cfg.build()``'s. Refused (``ValueError``
    naming the module) when two modules of a type disagree."""
    bodies, entries, X = _shared_layout(cfg, model)
    forces = tuple(forces)
    from .forces.hydro import Hydrodynamics

    hydro = [f for f in forces if isinstance(f, Hydrodynamics)]
    h = forces[_hydro(forces, "shared_parameters")] if hydro else None
    per = {n: {"mass": np.asarray(model.body_mass[b], float)}
           for bs in bodies.values() for b, n in bs}
    mods = {n: [(e, Xe) for e, Xe in zip(entries, X, strict=True) if e[1] == n]
            for n in cfg.names}
    for n, ents in mods.items():
        if model.has_added_inertia and len(ents) == 1:  # M_b = Xᵀ M_g X
            (b, _, _), Xe = ents[0]
            Xi = np.linalg.inv(Xe)
            Mg = Xi.T @ np.asarray(model.body_added_inertia[b]) @ Xi
            per[n]["added_inertia"] = np.diag(Mg).copy()
        if h is not None:
            idx = [i for i, e in enumerate(entries) if e[1] == n and e[2] is not None]
            for f in _DRAG:
                per[n][f] = np.asarray(getattr(h, f))[idx]
    out = {}
    for t, bs in bodies.items():
        first = bs[0][1]
        for _, n in bs[1:]:
            for f, x in per[first].items():
                y = per[n].get(f)
                if y is None or y.shape != x.shape or not np.allclose(
                        x, y, rtol=1e-8, atol=1e-12 * max(1.0, float(np.abs(x).max(initial=0)))):
                    raise ValueError(f"shared_parameters: module {n!r} (type {t!r}) has {f} "
                                     f"{None if y is None else y.tolist()}, module {first!r} "
                                     f"{x.tolist()}: not one value per type")
        out[t] = {f: (x[0] if x.ndim == 2 and x.shape[0] == 1 else x)
                  for f, x in per[first].items()}
    return out


def with_shared_parameters(cfg: Configuration, model, forces, params):
    """``(model, forces)`` with per-type parameters written into every module of each type.

    ``params``: ``{module type name: {field: value}}``, fields of :data:`SHARED_FIELDS`
    (a field left out keeps the model's values); values may be traced, so ``jax.grad`` /
    ``jax.jacfwd`` of a simulation of ``cfg`` with respect to them works, and one set
    identified on one configuration is simulated on another. ``model``, ``forces``:
    ``cfg.build()``'s (``added_inertia`` needs ``fluid='potential'``'s added inertia, the drag
    fields its Hydrodynamics element). A type's added inertia replaces its modules' whole
    added inertia (the sum over their fluid geoms). Refused with ``ValueError``: an unknown
    type or field, a wrong shape, a type without fluid geoms given a fluid field, a concrete
    value that is not finite or is negative (mass: not > 0)."""
    import equinox as eqx
    import jax.numpy as jnp

    from .validation import is_concrete

    if not isinstance(params, Mapping):
        raise ValueError(f"with_shared_parameters: params must be {{module type: {{field: "
                         f"value}}}}, got {type(params).__name__}")
    bodies, entries, X = _shared_layout(cfg, model)
    forces = tuple(forces)
    n_fluid = {m.name: sum(g.fluid for g in m.geoms) for m in cfg.modules.values()}
    for t, fields in params.items():
        if t not in bodies:
            raise ValueError(f"with_shared_parameters: configuration {cfg.name!r} has no module "
                             f"type {t!r} (types: {', '.join(bodies)})")
        if not isinstance(fields, Mapping):
            raise ValueError(f"with_shared_parameters: params[{t!r}] must be {{field: value}}")
        for f, x in fields.items():
            if f not in SHARED_FIELDS:
                raise ValueError(f"with_shared_parameters: params[{t!r}]: unknown field {f!r} "
                                 f"(fields: {', '.join(SHARED_FIELDS)})")
            x = jnp.asarray(x, float)
            g = n_fluid[t]
            if f != "mass" and g == 0:
                raise ValueError(f"with_shared_parameters: module type {t!r} has no fluid geom "
                                 f"for {f!r}")
            w = 6 if f == "added_inertia" else 3
            ok = {(), } if f == "mass" else {(w,), (g, w)}
            if x.shape not in ok:
                raise ValueError(f"with_shared_parameters: params[{t!r}][{f!r}] has shape "
                                 f"{x.shape}; expected {' or '.join(map(str, sorted(ok)))}")
            if is_concrete(x):
                xn = np.asarray(x)
                if not np.all(np.isfinite(xn)) or np.any(xn < 0) or (f == "mass" and xn <= 0):
                    raise ValueError(f"with_shared_parameters: params[{t!r}][{f!r}] = "
                                     f"{xn.tolist()} must be finite and "
                                     f"{'> 0' if f == 'mass' else '>= 0'}")
    if any(f == "added_inertia" for v in params.values() for f in v) \
            and not model.has_added_inertia:
        raise ValueError("with_shared_parameters: added_inertia needs a model with added "
                         "inertia (build(fluid='potential'))")
    k_h = (_hydro(forces, "with_shared_parameters")
           if any(f in _DRAG for v in params.values() for f in v) else None)
    mass, inertia = model.body_mass, model.body_inertia
    added = model.body_added_inertia
    h = forces[k_h] if k_h is not None else None
    for t, fields in params.items():
        def rows(f, fields=fields, t=t):
            return jnp.broadcast_to(jnp.asarray(fields[f], float),
                                    (n_fluid[t], 6 if f == "added_inertia" else 3))

        for b, n in bodies[t]:
            if "mass" in fields:
                m = jnp.asarray(fields["mass"], float)
                inertia = inertia.at[b].multiply(m / mass[b])
                mass = mass.at[b].set(m)
            if "added_inertia" in fields:
                d = rows("added_inertia")
                Mb = sum(jnp.asarray(Xe).T @ jnp.diag(d[e[2]]) @ jnp.asarray(Xe)
                         for e, Xe in zip(entries, X, strict=True) if e[1] == n)
                added = added.at[b].set(0.5 * (Mb + Mb.T))
        for f in _DRAG:
            if f in fields:
                vals = rows(f)
                idx = [i for i, e in enumerate(entries) if e[2] is not None
                       and cfg.modules[e[1]].name == t]
                new = getattr(h, f).at[jnp.asarray(idx)].set(
                    vals[jnp.asarray([entries[i][2] for i in idx])])
                h = eqx.tree_at(lambda e, f=f: getattr(e, f), h, new)
    model = eqx.tree_at(lambda m: (m.body_mass, m.body_inertia), model, (mass, inertia))
    if model.has_added_inertia:
        model = eqx.tree_at(lambda m: m.body_added_inertia, model, added)
    if h is not None:
        forces = forces[:k_h] + (h,) + forces[k_h + 1:]
    return model, forces
