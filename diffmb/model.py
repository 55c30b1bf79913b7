"""The kinematic tree: a static topology plus traced physical parameters.

Vocabulary
----------
*Bodies* are what a user names (URDF links, MJCF bodies): each has a mass, a centre of mass and an
inertia about it, and a frame. *Nodes* are what the recursive algorithms walk: one node per
elementary joint, in an order where every parent precedes its children (the directed span tree of
Xu et al. (2021) §2.2). A body rigidly attached to its parent (URDF ``fixed``, an MJCF body without joints)
adds no node: it rides on its parent's node and its inertia is merged there *inside* the traced
functions, so gradients still reach its mass. A body with several MJCF joints gets a chain of nodes,
the last one carrying it. A free joint is two nodes: a translation along the parent's (world's) axes
then a ball joint, which gives MuJoCo's layout q = [p_world, quat], v = [ṗ_world, ω_body].

Node kinematics: the frame of node i at q is its placement in the parent node's frame at q = 0
(``node_rot``, ``node_pos``) followed by the joint motion. Every node frame sits at its joint's
anchor, so joint motion subspaces are constant in node coordinates:

    hinge  S = [a; 0]     slide  S = [0; a]     ball  S = [I; 0]     trans3  S = [0; I]
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass, field

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .spatial import quaternion as quat
from .spatial.rotation import skew

__all__ = [
    "Model",
    "ModelSource",
    "ModelBuilder",
    "JointType",
    "HINGE",
    "SLIDE",
    "BALL",
    "TRANS3",
    "FREE",
    "NODE_TYPES",
    "JOINT_TYPES",
]


class JointType(str, enum.Enum):
    """The one table of joint types: widths in q and v, and the nodes each joint expands to.

    In the manner of MJX's ``JointType`` (``qpos_width()``/``dof_width()``). Members are ``str``s
    equal to their values (``JointType.HINGE == "hinge"``, same hash), and the static tuples
    ``Model.node_type`` and ``Model.joint_types`` store those plain strings; ``JointType(s)`` looks
    one up. *Node* types are what the recursive algorithms walk, *joint* types what a user writes:

    ======  ==  ==  ===============  ==========================================================
    type    nq  nv  nodes            notes
    ======  ==  ==  ===============  ==========================================================
    hinge   1   1   (hinge,)         node and joint: rotation about ``axis``
    slide   1   1   (slide,)         node and joint: translation along ``axis``
    ball    4   3   (ball,)          node and joint: q a unit quaternion, v = ω (node frame)
    trans3  3   3   (trans3,)        node only: translation along the parent node's axes
    free    7   6   (trans3, ball)   joint only: MuJoCo's q = [p_world, quat], v = [ṗ_world, ω]
    ======  ==  ==  ===============  ==========================================================
    """

    # value, nq, nv, nodes (empty: the type is itself a node)
    HINGE = ("hinge", 1, 1, ())
    SLIDE = ("slide", 1, 1, ())
    BALL = ("ball", 4, 3, ())
    TRANS3 = ("trans3", 3, 3, ())
    FREE = ("free", 7, 6, ("trans3", "ball"))

    def __new__(cls, value, nq, nv, nodes):
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj._nq, obj._nv, obj._nodes = nq, nv, nodes
        return obj

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__

    @property
    def nq(self) -> int:
        """Width in the generalized positions q (MJX's ``qpos_width``)."""
        return self._nq

    @property
    def nv(self) -> int:
        """Width in the generalized velocities v (MJX's ``dof_width``)."""
        return self._nv

    @property
    def nodes(self) -> tuple[JointType, ...]:
        """The node types this joint expands to, parent first."""
        return tuple(JointType(n) for n in self._nodes) or (self,)

    @property
    def is_node(self) -> bool:
        return not self._nodes

    @property
    def is_joint(self) -> bool:
        return self is not JointType.TRANS3


HINGE, SLIDE, BALL, TRANS3, FREE = (JointType.HINGE, JointType.SLIDE, JointType.BALL,
                                    JointType.TRANS3, JointType.FREE)
NODE_TYPES = tuple(t for t in JointType if t.is_node)  # (HINGE, SLIDE, BALL, TRANS3)
JOINT_TYPES = tuple(t for t in JointType if t.is_joint)  # (HINGE, SLIDE, BALL, FREE)


@dataclass(frozen=True)
class ModelSource:
    """The file a :class:`Model` was loaded from: what reproduces it.

    ``path``: absolute path; ``sha256``: hex digest of the file's bytes when it was read;
    ``kind``: ``"mjcf"`` or ``"urdf"``; ``floating_base``: the URDF loader's option (a free
    joint at the root). Hashable, so it is a static field of the Model.
    """

    path: str
    sha256: str
    kind: str
    floating_base: bool = False


class Model(eqx.Module):
    """Static topology (hashable tuples) + physical parameters (array leaves, differentiable).

    Shapes: n = number of nodes, nb = number of bodies.

    Added inertia (``body_added_inertia``, set by :func:`with_added_inertia`, ``ModelBuilder``'s
    ``added_inertia=`` or ``load_mjcf(path, added_mass="potential")``): a fluid's added mass
    M_A per body, a symmetric positive semi-definite (6, 6) about the body frame origin in body
    axes, ordered [angular; linear] like every spatial vector here (Fossen's [linear; angular]
    M_A is converted by :func:`diffmb.forces.hydro.added_inertia_from_fossen`). With the static
    flag ``has_added_inertia`` the body's inertia in the dynamics is rigid + added: RNEA, CRBA,
    ABA and Kane (``forward_dynamics(method="kane")``) include M_A v̇ and the Kirchhoff/Munk
    velocity terms ν ×* M_A ν; gravity acts on the rigid inertia only (buoyancy is a force
    element, :class:`diffmb.forces.Hydrodynamics`). ``kinetic_energy`` and ``momentum`` then
    include the fluid's kinetic energy and impulse; ``potential_energy`` is the rigid bodies'
    weight only; the recursive Lagrange formulation refuses such a model; the inertial
    regressor Y stays the rigid one (τ = Y π + RNEA's added-inertia part). Without the flag
    the field is ignored (zeros from the builder) and the fast rigid kernels run unchanged.
    """

    # --- static topology --------------------------------------------------------------------
    node_parent: tuple = eqx.field(static=True)  # (n,) parent node, -1 = world
    node_type: tuple = eqx.field(static=True)  # (n,) HINGE | SLIDE | BALL | TRANS3
    node_q: tuple = eqx.field(static=True)  # (n,) first index into q
    node_v: tuple = eqx.field(static=True)  # (n,) first index into v
    body_node: tuple = eqx.field(static=True)  # (nb,) node carrying each body, -1 = world
    body_names: tuple = eqx.field(static=True)
    joint_names: tuple = eqx.field(static=True)  # in generalized-velocity order
    joint_types: tuple = eqx.field(static=True)  # "hinge" | "slide" | "ball" | "free"
    joint_q: tuple = eqx.field(static=True)  # first q index of each joint
    joint_v: tuple = eqx.field(static=True)  # first v index of each joint
    joint_nodes: tuple = eqx.field(static=True)  # node indices of each joint
    nq: int = eqx.field(static=True)
    nv: int = eqx.field(static=True)
    name: str = eqx.field(static=True)

    # --- traced parameters ------------------------------------------------------------------
    node_rot: jnp.ndarray  # (n, 3, 3) node axes in parent node frame at q = 0
    node_pos: jnp.ndarray  # (n, 3) node origin in parent node frame at q = 0
    node_axis: jnp.ndarray  # (n, 3) hinge/slide unit axis in node frame (unused otherwise)
    body_rot: jnp.ndarray  # (nb, 3, 3) body axes in its node frame
    body_pos: jnp.ndarray  # (nb, 3) body origin in its node frame
    body_mass: jnp.ndarray  # (nb,)
    body_com: jnp.ndarray  # (nb, 3) centre of mass in body frame
    body_inertia: jnp.ndarray  # (nb, 3, 3) inertia about the com, body axes
    armature: jnp.ndarray  # (nv,) reflected rotor inertia added to diag(M)
    damping: jnp.ndarray  # (nv,) viscous joint damping (a force element, used by simulate)
    stiffness: jnp.ndarray  # (nv,) joint springs (force element)
    qpos_spring: jnp.ndarray  # (nq,) spring reference
    qpos0: jnp.ndarray  # (nq,) reference configuration
    gravity: jnp.ndarray  # (3,) world gravity vector
    # (nb, 6, 6) added (fluid) inertia of each body about its frame origin, body axes,
    # [angular; linear]; symmetric PSD. Used by the dynamics only when has_added_inertia.
    body_added_inertia: jnp.ndarray | None = None
    has_added_inertia: bool = eqx.field(static=True, default=False)
    # the file the model was loaded from (None for a model built in Python); eqx.tree_at and
    # fits change parameters only, so a fitted model keeps it
    source: ModelSource | None = eqx.field(static=True, default=None)

    @property
    def n_nodes(self) -> int:
        return len(self.node_parent)

    @property
    def n_bodies(self) -> int:
        return len(self.body_names)

    def body_index(self, name: str) -> int:
        try:
            return self.body_names.index(name)
        except ValueError:
            raise KeyError(f"no body named {name!r}; bodies: {list(self.body_names)}") from None

    def joint_index(self, name: str) -> int:
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise KeyError(f"no joint named {name!r}; joints: {list(self.joint_names)}") from None

    def joint_dofs(self, name: str) -> slice:
        """Slice of v (and of tau) belonging to joint ``name``."""
        j = self.joint_index(name)
        return slice(self.joint_v[j], self.joint_v[j] + JointType(self.joint_types[j]).nv)

    def neutral(self) -> jnp.ndarray:
        return self.qpos0

    def __repr__(self):  # short: the full pytree is long
        return f"Model({self.name!r}, nq={self.nq}, nv={self.nv}, bodies={self.n_bodies})"


# ------------------------------------------------------------------------------------------
# Builder: plain numpy, outside jit, validates physics and names the offender.
# ------------------------------------------------------------------------------------------


class InertiaWarning(UserWarning):
    """A body's inertia is physically implausible but can be simulated; it is loaded as is.

    ``ModelBuilder(strict=True)`` (and ``load_urdf``/``load_mjcf(..., strict=True)``) refuses it
    instead. The rules and thresholds are in :class:`ModelBuilder`'s docstring.
    """


__all__ += ["InertiaWarning", "InertiaIssue", "check_inertia", "check_added_inertia",
            "with_added_inertia"]

INERTIA_ROUNDOFF = 1e-9  # eigenvalue >= -1e-9 * max(1, trace) (kg·m²): round-off in the file
INERTIA_TRIANGLE = 1e-6  # I1 + I2 >= I3 - 1e-6 * I3: files print about six significant digits


@dataclass(frozen=True)
class InertiaIssue:
    """One implausible property of a body's inertia, found by :func:`check_inertia`.

    ``kind``: ``"not_psd"`` (an eigenvalue below ``-1e-9 * max(1, trace)``), ``"roundoff"`` (a
    negative eigenvalue at round-off level), ``"triangle"`` (principal inertias violate
    ``I1 + I2 >= I3``) or ``"zero_mass"`` (zero mass, non-zero inertia); ``detail``: what is
    wrong, with the numbers; ``message``: ``detail`` prefixed by the source and the body.
    """

    kind: str
    body: str
    detail: str
    message: str
    eigenvalues: np.ndarray = field(compare=False, repr=False)

    def __str__(self):
        return self.message


def check_inertia(name: str, mass, inertia, *, strict: bool = False, warn: bool = True,
                  source: str | None = None) -> list[InertiaIssue]:
    """Check one body's mass and its inertia about the centre of mass ((3, 3), or (3,) for a
    diagonal), by the rules and thresholds of :class:`ModelBuilder`.

    Raises ``ValueError`` naming the body (and ``source``, when given) for what cannot be
    simulated: a non-finite or negative mass, a non-finite, non-symmetric or mis-shaped inertia.
    Returns the implausible properties (:class:`InertiaIssue`, empty when there are none); each
    is warned as an :class:`InertiaWarning` (``warn=True``), or refused with ``ValueError``
    (``strict=True``). A clearly negative eigenvalue (``kind == "not_psd"``) is one of them
    here; :class:`ModelBuilder` instead judges it with the body's rigid assembly (refused only
    when the assembly is not positive semi-definite either).
    """
    where = (f"{source}: " if source else "") + f"body {name!r}"
    try:
        m = float(mass)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: mass must be a number, got {mass!r}") from None
    if not np.isfinite(m) or m < 0:
        raise ValueError(f"{where}: mass must be finite and >= 0, got {m}")
    Ic = np.asarray(inertia, dtype=float)
    if Ic.shape == (3,):
        Ic = np.diag(Ic)
    if Ic.shape != (3, 3):
        raise ValueError(f"{where}: inertia must be (3, 3) or a (3,) diagonal, got shape "
                         f"{Ic.shape}")
    if not np.all(np.isfinite(Ic)):
        raise ValueError(f"{where}: inertia has non-finite entries: {Ic.tolist()}")
    if not np.allclose(Ic, Ic.T, atol=1e-9 * max(1.0, np.abs(Ic).max())):
        raise ValueError(f"{where}: inertia is not symmetric: {Ic.tolist()}")
    ev = np.linalg.eigvalsh(0.5 * (Ic + Ic.T))
    noise = 64 * np.finfo(float).eps * np.abs(ev).max()
    roundoff = INERTIA_ROUNDOFF * max(1.0, ev.sum())
    found = []
    if ev[0] < -roundoff:
        found.append(("not_psd", f"inertia is not positive semi-definite (eigenvalues {ev},"
                                 f" below -{INERTIA_ROUNDOFF:g} * max(1, trace))"))
    elif ev[0] < -noise:
        found.append(("roundoff", f"inertia eigenvalue {ev[0]:.3g} < 0 at round-off level"
                                  f" (eigenvalues {ev}; tolerance -{INERTIA_ROUNDOFF:g} *"
                                  " max(1, trace))"))
    a, b, c = ev
    if not found or found[0][0] != "not_psd":
        if a + b < c - max(INERTIA_TRIANGLE * c, roundoff):
            found.append(("triangle", f"principal inertias {ev} violate the triangle inequality"
                                      f" (I1 + I2 >= I3: {a + b:.6g} < {c:.6g}); no mass"
                                      " distribution has them"))
    if m == 0 and np.abs(Ic).max() > 0:
        found.append(("zero_mass", f"zero mass with non-zero inertia (eigenvalues {ev})"))
    issues = [InertiaIssue(k, name, d, f"{where}: {d}", ev) for k, d in found]
    if issues and strict:
        raise ValueError(f"{where}: " + "; ".join(i.detail for i in issues)
                         + " (refused because strict=True)")
    if issues and warn:
        warnings.warn(f"{where}: " + "; ".join(i.detail for i in issues), InertiaWarning,
                      stacklevel=2)
    return issues


def check_added_inertia(name: str, added, *, source: str | None = None) -> np.ndarray:
    """Check one body's added inertia (6, 6) ([angular; linear], about the body frame origin,
    body axes); returns it symmetrised. Refused (``ValueError`` naming the body): a wrong shape,
    non-finite entries, asymmetry beyond 1e-9 · max(1, max|M|), or an eigenvalue below
    -1e-9 · max(1, trace) (not positive semi-definite: the fluid would give kinetic energy)."""
    where = (f"{source}: " if source else "") + f"body {name!r}"
    M = np.asarray(added, dtype=float)
    if M.shape != (6, 6):
        raise ValueError(f"{where}: added inertia must be (6, 6), got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{where}: added inertia has non-finite entries: {M.tolist()}")
    if not np.allclose(M, M.T, rtol=0.0, atol=1e-9 * max(1.0, np.abs(M).max())):
        raise ValueError(f"{where}: added inertia is not symmetric: {M.tolist()}")
    M = 0.5 * (M + M.T)
    ev = np.linalg.eigvalsh(M)
    if ev[0] < -INERTIA_ROUNDOFF * max(1.0, ev.sum()):
        raise ValueError(f"{where}: added inertia is not positive semi-definite (eigenvalues "
                         f"{ev}, below -{INERTIA_ROUNDOFF:g} * max(1, trace))")
    return M


def with_added_inertia(model: Model, added, *, source: str | None = None) -> Model:
    """``model`` with added inertia: ``added`` is (nb, 6, 6) in ``model.body_names`` order or a
    dict ``{body name: (6, 6)}`` (other bodies none), each [angular; linear] about the body
    frame origin in body axes (see :class:`Model`). Checked by :func:`check_added_inertia`;
    replaces any added inertia the model had and sets ``has_added_inertia``."""
    import dataclasses

    nb = model.n_bodies
    src = source or model.name
    if isinstance(added, dict):
        M = np.zeros((nb, 6, 6))
        for nm, Mi in added.items():
            M[model.body_index(nm)] = Mi
    else:
        M = np.asarray(added, dtype=float)
        if M.shape != (nb, 6, 6):
            raise ValueError(f"{src}: added inertia must be ({nb}, 6, 6) (one per body, in "
                             f"model.body_names order), got shape {M.shape}")
    M = np.stack([check_added_inertia(n, M[i], source=src)
                  for i, n in enumerate(model.body_names)])
    return dataclasses.replace(model, body_added_inertia=jnp.asarray(M),
                               has_added_inertia=True)


@dataclass
class _Body:
    name: str
    parent: int  # body index, -1 world
    rot: np.ndarray  # body frame in parent body frame
    pos: np.ndarray
    mass: float
    com: np.ndarray
    inertia: np.ndarray
    joints: list = field(default_factory=list)  # list of dicts (name, type, pos, axis, ...)
    added: np.ndarray | None = None  # (6, 6) added inertia, body frame origin and axes


class ModelBuilder:
    """Assemble a :class:`Model` body by body (numpy, outside jit).

    Each body is placed in its parent body's frame by (``rot``, ``pos``) and moves relative to it
    by zero or more joints, applied in order. Joint ``pos`` (anchor) and ``axis`` are in the body's
    own frame, as in MJCF; URDF bodies use anchor 0. ``source`` names the file in errors.

    Validation (every message names ``source`` and the body or joint, with the numbers)
    -----------------------------------------------------------------------------------
    Each body alone is checked by :func:`check_inertia` (also used on named parameters).
    Refused (``ValueError``): what cannot be simulated.

    - a non-finite number (mass, inertia, placement, centre of mass, joint anchor or axis), a
      negative mass, a non-symmetric inertia, a placement ``rot`` that is not a rotation;
    - a parent not yet defined (so no cycle can be built), a duplicate body or joint name;
    - a *rigid assembly* whose inertia has a clearly negative eigenvalue: the bodies riding on one
      joint node (a body and everything welded to it) sum to an inertia about their common centre
      of mass with an eigenvalue below ``-1e-9 * max(1, trace)`` (kg·m²): spun about that axis it
      would have negative kinetic energy, so M is no longer guaranteed positive definite (a
      single body with such an eigenvalue alone on its joint is such an assembly). Bodies welded
      to the world never enter the dynamics and are only warned about;
    - a singular mass matrix: the articulated-body pivot ``D_i = S_iᵀ I^A_i S_i`` (+ armature) of
      some joint is ``<= 1e-12 * max|diag I^A_i|`` at a generic configuration (fixed seed), i.e.
      the joint moves no mass and no inertia (a massless leaf body on a joint, a massless
      subtree, a point mass on its own hinge axis). ``det M = Π det D_i``, so this is exactly
      "M singular there", judged against the scale of what that joint carries (a 1-gram finger
      passes; an exact zero does not). Pinocchio loads such files; its ABA then returns NaN.

    Loaded with an :class:`InertiaWarning` (implausible but harmless, as Pinocchio loads them;
    ``strict=True`` raises ``ValueError`` instead):

    - an inertia eigenvalue in ``[-1e-9 * max(1, trace), -64 ε max|λ|)``: round-off in the file
      (iCub's ``ixz = 1.35e-20``). 1e-9 is the relative tolerance at which diffmb's dynamics are
      compared with Pinocchio's, on the scale ``max(1, |x|)`` that the test suite uses for relative
      errors: such an eigenvalue is indistinguishable from 0 at that tolerance. Below
      ``64 ε max|λ|`` it is the eigen-solver's own round-off and passes silently;
    - a clearly negative eigenvalue of a single body whose rigid assembly (see above) is positive
      semi-definite, or which is welded to the world: physically impossible for that body, but
      what the algorithms see is valid (Tiago's antenna, -3.5e-8 kg·m², welded to its base);
    - principal inertias violating the triangle inequality ``I1 + I2 >= I3`` by more than
      ``max(1e-6 I3, 1e-9 max(1, trace))`` (files print about six significant digits; below the
      round-off level above it is noise): no mass distribution has them, but the spatial inertia
      is still positive semi-definite (ANYmal's dummy base diag(0, 0, 3e-6));
    - zero mass with a non-zero inertia (Bolt's feet): a spatial inertia diag(I, 0) is still
      positive semi-definite.
    """

    def __init__(self, name: str = "model", source: str = "<model>", *, strict: bool = False):
        self.name = name
        self.source = source
        self.strict = bool(strict)
        self.bodies: list[_Body] = []
        self.gravity = np.array([0.0, 0.0, -9.81])
        self._negative: dict[str, np.ndarray] = {}  # body -> eigenvalues, clearly negative

    def add_body(
        self,
        name,
        parent=-1,
        *,
        rot=None,
        pos=(0, 0, 0),
        mass=0.0,
        com=(0, 0, 0),
        inertia=None,
        joints=(),
        added_inertia=None,
    ) -> int:
        """Add a body; ``added_inertia`` (6, 6): its fluid added inertia ([angular; linear],
        about the body frame origin, body axes; see :class:`Model`), checked by
        :func:`check_added_inertia`."""
        if isinstance(parent, str):
            names = [b.name for b in self.bodies]
            if parent not in names:
                raise ValueError(f"{self.source}: body {name!r}: parent {parent!r} is not defined")
            parent = names.index(parent)
        if parent >= len(self.bodies):
            raise ValueError(f"{self.source}: body {name!r}: parent index {parent} not yet defined")
        if any(b.name == name for b in self.bodies):
            raise ValueError(f"{self.source}: duplicate body name {name!r}")
        R = np.eye(3) if rot is None else np.asarray(rot, float).reshape(3, 3)
        Ic = np.zeros((3, 3)) if inertia is None else np.asarray(inertia, float)
        if Ic.shape == (3,):
            Ic = np.diag(Ic)
        self._check_placement(name, R, pos, com, joints)
        js = []
        for j in joints:
            j = dict(j)
            jt = j.get("type")
            if jt not in JOINT_TYPES:
                raise ValueError(
                    f"{self.source}: body {name!r}: joint {j.get('name')!r} has unknown type {jt!r}"
                    f" (supported: hinge, slide, ball, free, fixed)"
                )
            j.setdefault("pos", np.zeros(3))
            j["pos"] = np.asarray(j["pos"], float)
            if jt in ("hinge", "slide"):
                ax = np.asarray(j.get("axis", (0, 0, 1)), float)
                nrm = np.linalg.norm(ax)
                if not np.isfinite(nrm) or nrm < 1e-12:
                    raise ValueError(f"{self.source}: joint {j.get('name')!r}: zero or bad axis")
                j["axis"] = ax / nrm
            if jt == "free" and (parent != -1 or js):
                raise ValueError(
                    f"{self.source}: joint {j.get('name')!r}: a free joint must be the only joint"
                    " of a body attached to the world"
                )
            js.append(j)
        self._check_inertia(name, float(mass), Ic)
        added = (None if added_inertia is None
                 else check_added_inertia(name, added_inertia, source=self.source))
        self.bodies.append(
            _Body(name, parent, R, np.asarray(pos, float), float(mass), np.asarray(com, float), Ic, js,
                  added)
        )
        return len(self.bodies) - 1

    # --- validation (see the class docstring for the rules and thresholds) -------------------

    _ROUNDOFF = INERTIA_ROUNDOFF
    _TRIANGLE = INERTIA_TRIANGLE
    _SINGULAR = 1e-12  # articulated pivot <= 1e-12 * scale of what the joint carries: singular M

    def _implausible(self, msg):
        """Warn (default) or refuse (``strict=True``) an implausible but harmless inertia."""
        if self.strict:
            raise ValueError(f"{msg} (refused because strict=True)")
        warnings.warn(msg, InertiaWarning, stacklevel=4)

    def _check_placement(self, name, R, pos, com, joints):
        where = f"{self.source}: body {name!r}"
        for what, x in (("rot", R), ("pos", pos), ("com", com)):
            if not np.all(np.isfinite(np.asarray(x, float))):
                raise ValueError(f"{where}: {what} has non-finite entries: {np.asarray(x).tolist()}")
        if not np.allclose(R.T @ R, np.eye(3), atol=1e-6) or np.linalg.det(R) < 0:
            raise ValueError(f"{where}: rot is not a rotation matrix: {R.tolist()}")
        for j in joints:
            for k in ("pos", "axis", "armature", "damping", "stiffness", "qpos0"):
                if k in j and not np.all(np.isfinite(np.asarray(j[k], float))):
                    raise ValueError(
                        f"{where}: joint {j.get('name')!r}: {k} has non-finite entries: {j[k]}"
                    )

    def _check_inertia(self, name, m, Ic):
        """Checks on one body alone (:func:`check_inertia`); a clearly negative eigenvalue is
        judged with the body's rigid assembly in :meth:`build`."""
        issues = check_inertia(name, m, Ic, source=self.source, warn=False)
        for i in issues:
            if i.kind == "not_psd":
                self._negative[name] = i.eigenvalues
        shown = [i.detail + ", loaded as is" for i in issues if i.kind != "not_psd"]
        if shown:
            self._implausible(f"{self.source}: body {name!r}: " + "; ".join(shown))

    def _check_assemblies(self, body_node, body_rot, body_pos, node_joint):
        """Each node's welded bodies must have a positive semi-definite inertia about their com."""
        src = self.source
        by_node: dict[int, list[int]] = {}
        for bi, n in enumerate(body_node):
            by_node.setdefault(n, []).append(bi)
        for n, bis in by_node.items():
            bad = [bi for bi in bis if self.bodies[bi].name in self._negative]
            if not bad:
                continue
            names = [self.bodies[bi].name for bi in bis]
            if n < 0:
                for bi in bad:
                    b = self.bodies[bi]
                    self._implausible(
                        f"{src}: body {b.name!r}: inertia is not positive semi-definite"
                        f" (eigenvalues {self._negative[b.name]}); it is welded to the world, so it"
                        " never enters the dynamics, loaded as is"
                    )
                continue
            ms = np.array([self.bodies[bi].mass for bi in bis])
            cs = np.array([body_pos[bi] + body_rot[bi] @ self.bodies[bi].com for bi in bis])
            mt = ms.sum()
            ct = (ms @ cs) / mt if mt > 0 else np.zeros(3)
            It = np.zeros((3, 3))
            for bi, mi, ci in zip(bis, ms, cs, strict=True):
                Rb = body_rot[bi]
                d = ci - ct
                It += Rb @ self.bodies[bi].inertia @ Rb.T + mi * (d @ d * np.eye(3) - np.outer(d, d))
            evt = np.linalg.eigvalsh(0.5 * (It + It.T))
            tol = self._ROUNDOFF * max(1.0, evt.sum())
            for bi in bad:
                b = self.bodies[bi]
                msg = (
                    f"{src}: body {b.name!r}: inertia is not positive semi-definite (eigenvalues"
                    f" {self._negative[b.name]}, below -{self._ROUNDOFF:g} * max(1, trace))"
                )
                if evt[0] < -tol:
                    raise ValueError(
                        f"{msg}, and the rigid assembly {names} moved by joint {node_joint[n]!r}"
                        f" has inertia eigenvalues {evt} about its centre of mass: not a rigid body"
                        " (spinning about that axis has negative kinetic energy), so the mass"
                        " matrix is not guaranteed positive definite"
                    )
                self._implausible(
                    f"{msg}; physically impossible for one body, but the rigid assembly {names}"
                    f" moved by joint {node_joint[n]!r} is positive semi-definite (eigenvalues"
                    f" {evt}), loaded as is"
                )

    def _check_pivots(self, node_parent, node_type, node_rot, node_pos, node_axis, node_v,
                      body_node, body_rot, body_pos, armature, node_joint):
        """Articulated-body pivots at a generic configuration: M is singular iff one vanishes."""
        rng = np.random.default_rng(0)  # a fixed generic configuration: reproducible messages
        n = len(node_parent)
        IA = np.zeros((n, 6, 6))
        mass = np.zeros(n)  # subtree mass, for the message
        for bi, nd in enumerate(body_node):
            if nd < 0:
                continue
            b = self.bodies[bi]
            c = body_pos[bi] + body_rot[bi] @ b.com
            C = np.asarray(skew(c))
            IA[nd, :3, :3] += body_rot[bi] @ b.inertia @ body_rot[bi].T + b.mass * C @ C.T
            IA[nd, :3, 3:] += b.mass * C
            IA[nd, 3:, :3] += b.mass * C.T
            IA[nd, 3:, 3:] += b.mass * np.eye(3)
            mass[nd] += b.mass
        arm = np.asarray(armature, float)
        for i in reversed(range(n)):
            nt, a = node_type[i], np.asarray(node_axis[i], float)
            if nt == "hinge":
                S = np.concatenate([a, np.zeros(3)])[:, None]
            elif nt == "slide":
                S = np.concatenate([np.zeros(3), a])[:, None]
            elif nt == "ball":
                S = np.vstack([np.eye(3), np.zeros((3, 3))])
            else:  # trans3
                S = np.vstack([np.zeros((3, 3)), np.eye(3)])
            U = IA[i] @ S
            D = S.T @ U + np.diag(arm[node_v[i] : node_v[i] + S.shape[1]])
            D = 0.5 * (D + D.T)
            dmin = np.linalg.eigvalsh(D)[0]
            scale = max(np.abs(np.diag(IA[i])).max(), np.abs(np.diag(D)).max())
            if dmin <= self._SINGULAR * scale:
                bodies = [self.bodies[bi].name for bi, nd in enumerate(body_node) if nd == i]
                raise ValueError(
                    f"{self.source}: body {bodies[0] if bodies else '?'!r}, joint"
                    f" {node_joint[i]!r}: the mass matrix would be singular: the joint moves no"
                    f" mass or inertia (articulated pivot {dmin:.3g}, subtree mass {mass[i]:.3g}"
                    " kg); give the body a mass and inertia, or make the joint fixed"
                )
            p = node_parent[i]
            if p < 0:
                continue
            # pose of node i in its parent node at a generic q, then I^A to the parent's frame
            R, r = np.asarray(node_rot[i], float), np.asarray(node_pos[i], float)
            if nt == "hinge":
                R = R @ _rotation(a, rng.uniform(-np.pi, np.pi))
            elif nt == "slide":
                r = r + R @ a * rng.normal(scale=0.1)
            elif nt == "ball":
                w = rng.normal(size=3)
                R = R @ _rotation(w / np.linalg.norm(w), rng.uniform(-np.pi, np.pi))
            else:
                r = r + R @ rng.normal(scale=0.1, size=3)
            E = R.T
            X = np.zeros((6, 6))
            X[:3, :3] = X[3:, 3:] = E
            X[3:, :3] = -E @ np.asarray(skew(r))
            Ia = IA[i] - U @ np.linalg.solve(D, U.T)
            IA[p] += X.T @ Ia @ X
            mass[p] += mass[i]

    def build(self) -> Model:
        if not self.bodies:
            raise ValueError(f"{self.source}: model has no bodies")
        node_parent, node_type, node_rot, node_pos, node_axis = [], [], [], [], []
        node_q, node_v = [], []
        joint_names, joint_types, joint_q, joint_v, joint_nodes = [], [], [], [], []
        armature, damping, stiffness, qspring, qpos0 = [], [], [], [], []
        body_node, body_rot, body_pos = [], [], []
        nq = nv = 0
        for b in self.bodies:
            # Pose of this body's frame relative to the node that carries its parent.
            if b.parent < 0:
                pnode, P_R, P_p = -1, np.eye(3), np.zeros(3)
            else:
                pnode = body_node[b.parent]
                P_R, P_p = body_rot[b.parent], body_pos[b.parent]
            # frame of the body at q=0 in parent node coordinates
            F_R = P_R @ b.rot
            F_p = P_p + P_R @ b.pos
            if not b.joints:
                body_node.append(pnode)
                body_rot.append(F_R)
                body_pos.append(F_p)
                continue
            cur_node, anchor_prev = pnode, None
            nodes_of_body = []
            for j in b.joints:
                jn = []
                for k, nt in enumerate(JointType(j["type"]).nodes):
                    if anchor_prev is None:
                        R0, p0 = F_R, F_p + F_R @ j["pos"]
                    else:  # previous node shares the body axes; step between anchors
                        R0, p0 = np.eye(3), (j["pos"] - anchor_prev) if k == 0 else np.zeros(3)
                    if nt == TRANS3:
                        if j["type"] == "free":
                            # MuJoCo: qpos holds the world pose of the body frame itself.
                            R0, p0 = np.eye(3), np.zeros(3)
                        if not np.allclose(R0, np.eye(3)):
                            raise ValueError(f"{self.source}: translation node must be axis-aligned")
                    node_parent.append(cur_node)
                    node_type.append(nt.value)  # plain str in the static tuple
                    node_rot.append(R0)
                    node_pos.append(p0)
                    node_axis.append(j.get("axis", np.array([0.0, 0.0, 1.0])))
                    node_q.append(nq)
                    node_v.append(nv)
                    nq += nt.nq
                    nv += nt.nv
                    cur_node = len(node_parent) - 1
                    jn.append(cur_node)
                    anchor_prev = j["pos"] if j["type"] != "free" else np.zeros(3)
                nodes_of_body += jn
                jt = j["type"]
                jnq, jnv = JointType(jt).nq, JointType(jt).nv
                joint_names.append(j.get("name") or f"{b.name}_joint{len(joint_names)}")
                joint_types.append(JointType(jt).value)
                joint_q.append(nq - jnq)
                joint_v.append(nv - jnv)
                joint_nodes.append(tuple(jn))
                armature += [float(j.get("armature", 0.0))] * jnv
                damping += [float(j.get("damping", 0.0))] * jnv
                stiffness += [float(j.get("stiffness", 0.0))] * jnv
                if jt == "free":
                    q0 = np.concatenate([F_p, np.asarray(quat.from_rotmat(F_R))])
                    # The free body's placement is carried by q, not by a fixed transform.
                elif jt == "ball":
                    q0 = np.array([1.0, 0, 0, 0])
                else:
                    q0 = np.array([float(j.get("qpos0", 0.0))])
                qpos0.append(q0)
                qspring.append(np.asarray(j.get("qpos_spring", q0), float).reshape(-1))
            body_node.append(cur_node)
            # body frame relative to the last node (whose origin is the last joint's anchor)
            last = b.joints[-1]
            off = np.zeros(3) if last["type"] == "free" else last["pos"]
            body_rot.append(np.eye(3))
            body_pos.append(-off)
        names = [b.name for b in self.bodies]
        if len(set(joint_names)) != len(joint_names):
            dup = sorted({n for n in joint_names if joint_names.count(n) > 1})
            raise ValueError(f"{self.source}: duplicate joint names {dup}")
        if nv == 0:
            raise ValueError(f"{self.source}: model has no degrees of freedom")
        node_joint = {n: joint_names[k] for k, ns in enumerate(joint_nodes) for n in ns}
        self._check_assemblies(body_node, body_rot, body_pos, node_joint)
        self._check_pivots(node_parent, node_type, node_rot, node_pos, node_axis, node_v,
                           body_node, body_rot, body_pos, armature, node_joint)
        f = lambda x: jnp.asarray(np.asarray(x, dtype=np.float64))
        return Model(
            node_parent=tuple(int(p) for p in node_parent),
            node_type=tuple(node_type),
            node_q=tuple(node_q),
            node_v=tuple(node_v),
            body_node=tuple(int(n) for n in body_node),
            body_names=tuple(names),
            joint_names=tuple(joint_names),
            joint_types=tuple(joint_types),
            joint_q=tuple(joint_q),
            joint_v=tuple(joint_v),
            joint_nodes=tuple(joint_nodes),
            nq=nq,
            nv=nv,
            name=self.name,
            node_rot=f(np.array(node_rot)),
            node_pos=f(np.array(node_pos)),
            node_axis=f(np.array(node_axis)),
            body_rot=f(np.array(body_rot)),
            body_pos=f(np.array(body_pos)),
            body_mass=f([b.mass for b in self.bodies]),
            body_com=f(np.array([b.com for b in self.bodies])),
            body_inertia=f(np.array([b.inertia for b in self.bodies])),
            armature=f(armature),
            damping=f(damping),
            stiffness=f(stiffness),
            qpos_spring=f(np.concatenate(qspring)),
            qpos0=f(np.concatenate(qpos0)),
            gravity=f(self.gravity),
            body_added_inertia=f(np.array([np.zeros((6, 6)) if b.added is None else b.added
                                           for b in self.bodies])),
            has_added_inertia=any(b.added is not None for b in self.bodies),
        )


def _rotation(axis, angle):
    """Rotation by ``angle`` about the unit ``axis`` (Rodrigues; validation helper, numpy)."""
    K = np.asarray(skew(np.asarray(axis, float)))
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K
