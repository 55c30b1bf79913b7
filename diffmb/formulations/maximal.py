"""Multibody dynamics in absolute (maximal) coordinates with quaternions (Xu & Zhong 2014).

Xu & Zhong (2014), *Symplectic integration for multibody dynamics based on quaternion
parameters*, Appl. Math. Mech. 35(10), eqs. (1)-(32).

Coordinates
-----------
Each body I carries ``u_I = [r_c (3), q (4)]``: the world position of its centre of mass and a
quaternion, scalar-first ``[w, x, y, z]``, Hamilton, rotating body -> world (the diffmb
convention, :mod:`diffmb.spatial.quaternion`). The system vector is ``u = [u_1, ..., u_n]``,
shape ``(7 n,)`` (eq. 18). A point with body-frame offset ``x'`` from the centre of mass is at
``x = r_c + R(q) x'``. The paper writes ``x = q_c + T^T x'`` (eq. 1) with ``T`` (eq. 3) the
world -> body matrix, i.e. ``T = R(q)^T``; everything below is written with ``R``.

Body angular velocity (eqs. 6-9): ``omega' = G_e(q) qdot`` with ``G_e(q) = 2 E(q)`` and
``E(q) = [[-x, w, z, -y], [-y, -z, w, x], [-z, y, -x, w]]`` (``E q = 0``, ``E E^T = |q|^2 I``).
Kinetic energy (eqs. 10-20): ``T = 1/2 udot^T Gbar(u)^T J Gbar(u) udot`` with
``Gbar = blockdiag(G(q_I))``, ``G = blockdiag(I_3, G_e)``, ``J = blockdiag(M_I I_3, J'_I)``.
``J'_I`` is the body-frame inertia about the centre of mass (any symmetric 3 x 3 here; the
paper assumes principal axes). The generalized mass ``Gbar^T J Gbar`` is singular along each
``q_I`` (a change of the quaternion's norm has no kinetic energy); the quaternion constraint
``g_I = q_I . q_I - 1`` (eq. 21) removes that direction.

Joints (eqs. 26-28) are holonomic constraints ``Phi(u) = 0``; body index ``-1`` is the ground:

* ``spherical``: ``r_b + R_b s_b - (r_a + R_a s_a) = 0`` (3 equations, eq. 28);
* ``revolute``: spherical + the world axis of b perpendicular to two unit vectors normal to the
  axis of a (5 equations);
* ``fixed``: spherical + vector part of ``(q_a q_rel)^* q_b`` = 0 (6 equations).

No tree is assumed: any topology, closed loops included (a redundant loop closure makes the
constraint Jacobian rank-deficient, which the integrators here do not handle).

Also here: the paper's closed-form point Jacobian (eqs. 29-32) for checking against autodiff,
the extended Lagrangian (eq. 24), a builder (:func:`build_system`; a compiled MuJoCo model is
converted by :func:`diffmb.io.mjcf_maximal.maximal_from_mjmodel`), and the index-1 DAE with
Baumgarte stabilisation (:func:`dae_rhs`, the system :class:`MaximalDAE` for
:func:`diffmb.simulate`) used as a comparison for the variational integrator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..spatial import quaternion as quat
from ..spatial import rotation
from ..systems import MAX_SPEED, AbstractODESystem, check_initial

__all__ = [
    "Body",
    "Joint",
    "MaximalSystem",
    "build_system",
    "E_matrix",
    "G_e",
    "body_omega",
    "mass_matrix",
    "kinetic_energy",
    "potential_energy",
    "energy",
    "quat_constraints",
    "joint_constraints",
    "constraints",
    "constraint_jacobian",
    "lagrangian",
    "points_world",
    "paper_T_matrices",
    "paper_point_jacobian",
    "dae_rhs",
    "MaximalDAE",
    "project_velocity",
]

_NC = {"spherical": 3, "revolute": 5, "fixed": 6}


# ----------------------------------------------------------------------------------------------
# Python-side description and builder
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Body:
    """A rigid body: mass (kg), inertia about the centre of mass in body axes (3 or 3 x 3)."""

    name: str
    mass: float
    inertia: Sequence

    def inertia_matrix(self) -> np.ndarray:
        J = np.asarray(self.inertia, float)
        return np.diag(J) if J.shape == (3,) else J


@dataclasses.dataclass
class Joint:
    """A joint between body ``a`` and body ``b`` (names or indices; ``None``/-1/"world": ground).

    ``point_a``/``point_b``: the joint point in each body's frame, relative to its centre of mass
    (for the ground: world coordinates). ``axis_a``/``axis_b``: revolute axis in each frame.
    ``q_rel``: for ``fixed``, the relative rotation ``q_a^* q_b`` to keep (default identity).
    """

    kind: str
    a: object
    b: object
    point_a: Sequence = (0.0, 0.0, 0.0)
    point_b: Sequence = (0.0, 0.0, 0.0)
    axis_a: Sequence | None = None
    axis_b: Sequence | None = None
    q_rel: Sequence | None = None
    name: str = ""


class MaximalSystem(eqx.Module):
    """Bodies in absolute coordinates and the joints between them (pytree).

    Static: body count, names and the joint table (kinds, body indices, constraint order).
    Traced (differentiable): masses ``(n,)``, inertias ``(n, 3, 3)``, gravity ``(3,)``,
    joint points ``(nj, 2, 3)``, normals/axes and relative quaternions.
    Joint constraints are ordered as the joints were given; joint j owns rows
    ``joint_rows[j]`` of :func:`joint_constraints`.
    """

    masses: jax.Array
    inertias: jax.Array
    gravity: jax.Array
    points: jax.Array  # (nj, 2, 3): point in frame a, point in frame b
    perp_a: jax.Array  # (nj, 2, 3): two unit vectors normal to the revolute axis, frame a
    axis_b: jax.Array  # (nj, 3): revolute axis in frame b
    q_rel: jax.Array  # (nj, 4): fixed joints' relative rotation
    n_bodies: int = eqx.field(static=True)
    body_names: tuple = eqx.field(static=True)
    joint_kinds: tuple = eqx.field(static=True)
    joint_bodies: tuple = eqx.field(static=True)  # ((a, b), ...), -1 = ground
    joint_names: tuple = eqx.field(static=True)

    @property
    def nq(self) -> int:
        return 7 * self.n_bodies

    @property
    def n_joint_constraints(self) -> int:
        return sum(_NC[k] for k in self.joint_kinds)

    @property
    def n_constraints(self) -> int:
        return self.n_bodies + self.n_joint_constraints

    @property
    def joint_rows(self) -> tuple:
        rows, i = [], 0
        for k in self.joint_kinds:
            rows.append(slice(i, i + _NC[k]))
            i += _NC[k]
        return tuple(rows)


def _perp_pair(axis):
    a = np.asarray(axis, float)
    a = a / np.linalg.norm(a)
    t = np.eye(3)[int(np.argmin(np.abs(a)))]
    e1 = np.cross(a, t)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(a, e1)
    return a, e1, e2


def build_system(
    bodies: Sequence[Body], joints: Sequence[Joint], gravity=(0.0, 0.0, -9.81)
) -> MaximalSystem:
    """Check and assemble a :class:`MaximalSystem` (numpy, outside ``jit``)."""
    names = [b.name for b in bodies]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate body names in {names}")
    masses, inertias = [], []
    for b in bodies:
        J = b.inertia_matrix()
        if not (np.isfinite(b.mass) and b.mass > 0):
            raise ValueError(f"body {b.name!r}: mass must be positive, got {b.mass}")
        if J.shape != (3, 3) or not np.allclose(J, J.T, atol=1e-12):
            raise ValueError(f"body {b.name!r}: inertia must be a symmetric 3x3 (or 3 diagonal)")
        ev = np.linalg.eigvalsh(J)
        if ev[0] <= 0 or ev[2] > ev[0] + ev[1] + 1e-9 * ev[2]:
            raise ValueError(f"body {b.name!r}: inertia not positive / violates triangle rule {ev}")
        masses.append(float(b.mass))
        inertias.append(0.5 * (J + J.T))

    def idx(x, jn):
        if x is None or (isinstance(x, str) and x == "world"):
            return -1
        if isinstance(x, str):
            if x not in names:
                raise ValueError(f"joint {jn!r}: unknown body {x!r}")
            return names.index(x)
        i = int(x)
        if not -1 <= i < len(bodies):
            raise ValueError(f"joint {jn!r}: body index {i} out of range")
        return i

    kinds, pairs, jnames, pts, perps, axb, qrel = [], [], [], [], [], [], []
    for j, jt in enumerate(joints):
        jn = jt.name or f"joint{j}"
        if jt.kind not in _NC:
            raise ValueError(f"joint {jn!r}: kind {jt.kind!r} not in {sorted(_NC)}")
        a, b = idx(jt.a, jn), idx(jt.b, jn)
        if a == b:
            raise ValueError(f"joint {jn!r}: joins body {a} to itself")
        kinds.append(jt.kind)
        pairs.append((a, b))
        jnames.append(jn)
        pts.append([np.asarray(jt.point_a, float), np.asarray(jt.point_b, float)])
        if jt.kind == "revolute":
            if jt.axis_a is None or jt.axis_b is None:
                raise ValueError(f"joint {jn!r}: revolute needs axis_a and axis_b")
            _, e1, e2 = _perp_pair(jt.axis_a)
            ab = np.asarray(jt.axis_b, float)
            perps.append([e1, e2])
            axb.append(ab / np.linalg.norm(ab))
        else:
            perps.append([np.zeros(3), np.zeros(3)])
            axb.append(np.zeros(3))
        qr = np.array([1.0, 0, 0, 0]) if jt.q_rel is None else np.asarray(jt.q_rel, float)
        qrel.append(qr / np.linalg.norm(qr))
    nj = len(joints)
    return MaximalSystem(
        masses=jnp.asarray(np.array(masses)),
        inertias=jnp.asarray(np.array(inertias).reshape(-1, 3, 3)),
        gravity=jnp.asarray(np.asarray(gravity, float)),
        points=jnp.asarray(np.array(pts).reshape(nj, 2, 3)),
        perp_a=jnp.asarray(np.array(perps).reshape(nj, 2, 3)),
        axis_b=jnp.asarray(np.array(axb).reshape(nj, 3)),
        q_rel=jnp.asarray(np.array(qrel).reshape(nj, 4)),
        n_bodies=len(bodies),
        body_names=tuple(names),
        joint_kinds=tuple(kinds),
        joint_bodies=tuple(pairs),
        joint_names=tuple(jnames),
    )


# ----------------------------------------------------------------------------------------------
# Kinematics and energies
# ----------------------------------------------------------------------------------------------


# The paper's names for the quaternion-rate maps of diffmb.spatial.rotation (eqs. 6-9):
# E(q) is rotation.G (omega_body = 2 E(q) qdot, E q = 0), G_e = 2 E = rotation.body_rate_matrix.
E_matrix = rotation.G
G_e = rotation.body_rate_matrix


def _split(u):
    uu = u.reshape(-1, 7)
    return uu[:, :3], uu[:, 3:]


def body_omega(u, udot):
    """Body-frame angular velocities ``(n, 3)`` from quaternion rates (eq. 8)."""
    _, q = _split(u)
    _, qd = _split(udot)
    return rotation.body_rate(q, qd)


def mass_matrix(sysm: MaximalSystem, u):
    """``Gbar(u)^T J Gbar(u)`` (7n, 7n), block diagonal (eqs. 19-20); singular along each q_I."""
    _, q = _split(u)
    n = sysm.n_bodies
    Ge = G_e(q)  # (n, 3, 4)
    Mq = jnp.einsum("nai,nab,nbj->nij", Ge, sysm.inertias, Ge)  # (n, 4, 4)
    Mr = sysm.masses[:, None, None] * jnp.eye(3, dtype=u.dtype)  # (n, 3, 3)
    B = jnp.zeros((n, 7, 7), u.dtype).at[:, :3, :3].set(Mr).at[:, 3:, 3:].set(Mq)
    return jnp.einsum("ij,iab->iajb", jnp.eye(n, dtype=u.dtype), B).reshape(7 * n, 7 * n)


def kinetic_energy(sysm: MaximalSystem, u, udot):
    """``1/2 udot^T Gbar^T J Gbar udot`` (eq. 19), evaluated per body without forming matrices."""
    rd, _ = _split(udot)
    w = body_omega(u, udot)
    tr = 0.5 * jnp.sum(sysm.masses * jnp.sum(rd * rd, axis=-1))
    rot = 0.5 * jnp.sum(jnp.einsum("ni,nij,nj->n", w, sysm.inertias, w))
    return tr + rot


def potential_energy(sysm: MaximalSystem, u):
    """Gravity ``V = -sum_I M_I g . r_cI`` (eq. 40); zero at r = 0."""
    r, _ = _split(u)
    return -jnp.sum(sysm.masses * (r @ sysm.gravity))


def energy(sysm: MaximalSystem, u, udot):
    return kinetic_energy(sysm, u, udot) + potential_energy(sysm, u)


def quat_constraints(sysm: MaximalSystem, u):
    """``g_I = q_I . q_I - 1`` (eq. 21), shape (n,)."""
    _, q = _split(u)
    return jnp.sum(q * q, axis=-1) - 1.0


def _poses_with_ground(u):
    r, q = _split(u)
    r = jnp.concatenate([r, jnp.zeros((1, 3), u.dtype)], axis=0)  # index -1 -> ground
    g = jnp.zeros((1, 4), u.dtype).at[0, 0].set(1.0)
    q = jnp.concatenate([q, g], axis=0)
    return r, q


def _rot(q, s):
    """``R(q) s`` with the homogeneous quadratic ``R`` of eq. (3) (``= T^T``), so that derivatives
    off the unit sphere match the paper's eqs. (29)-(32)."""
    return jnp.einsum("...ij,...j->...i", quat.to_rotmat(q), s)


def points_world(r, q, s):
    """``r + R(q) s`` (eq. 1/26), broadcast over leading axes."""
    return r + _rot(q, s)


def _joint_order(kinds):
    """Static permutation from [all position rows, revolute rows, fixed rows] to joint order."""
    nj = len(kinds)
    rev = [j for j, k in enumerate(kinds) if k == "revolute"]
    fix = [j for j, k in enumerate(kinds) if k == "fixed"]
    order = []
    for j, k in enumerate(kinds):
        order += [3 * j, 3 * j + 1, 3 * j + 2]
        if k == "revolute":
            i = 3 * nj + 2 * rev.index(j)
            order += [i, i + 1]
        elif k == "fixed":
            i = 3 * nj + 2 * len(rev) + 3 * fix.index(j)
            order += [i, i + 1, i + 2]
    return np.array(order), np.array(rev, int), np.array(fix, int)


def joint_constraints(sysm: MaximalSystem, u):
    """``Phi(u)`` (eqs. 26-28 and the revolute/fixed extensions), shape (m,), in joint order."""
    if not sysm.joint_kinds:
        return jnp.zeros((0,), u.dtype)
    r, q = _poses_with_ground(u)
    ia = np.array([a for a, _ in sysm.joint_bodies])
    ib = np.array([b for _, b in sysm.joint_bodies])
    ra, qa, rb, qb = r[ia], q[ia], r[ib], q[ib]
    pos = points_world(rb, qb, sysm.points[:, 1]) - points_world(ra, qa, sysm.points[:, 0])
    order, rev, fix = _joint_order(sysm.joint_kinds)
    parts = [pos.reshape(-1)]
    if rev.size:
        ab = _rot(qb[rev], sysm.axis_b[rev])  # (nr, 3)
        pa = jnp.einsum("nij,nkj->nki", quat.to_rotmat(qa[rev]), sysm.perp_a[rev])  # (nr, 2, 3)
        parts.append(jnp.einsum("nki,ni->nk", pa, ab).reshape(-1))
    if fix.size:
        err = quat.mul(quat.conj(quat.mul(qa[fix], sysm.q_rel[fix])), qb[fix])
        parts.append(err[:, 1:].reshape(-1))
    out = jnp.concatenate(parts)
    return out if (not rev.size and not fix.size) else out[order]


def constraints(sysm: MaximalSystem, u):
    """``C(u) = [g(u); Phi(u)]``, shape (n + m,)."""
    return jnp.concatenate([quat_constraints(sysm, u), joint_constraints(sysm, u)])


def constraint_jacobian(sysm: MaximalSystem, u):
    """``dC/du`` (n + m, 7n) by forward-mode autodiff."""
    return jax.jacfwd(lambda x: constraints(sysm, x))(u)


def lagrangian(sysm: MaximalSystem, u, udot, lam, gam):
    """Extended Lagrangian (eq. 24): ``T - V - lam . g(u) - gam . Phi(u)``."""
    return (
        kinetic_energy(sysm, u, udot)
        - potential_energy(sysm, u)
        - lam @ quat_constraints(sysm, u)
        - gam @ joint_constraints(sysm, u)
    )


# ----------------------------------------------------------------------------------------------
# The paper's closed forms (eqs. 29-32), for tests
# ----------------------------------------------------------------------------------------------


def paper_T_matrices():
    """The 4 x 4 matrices ``T_ij`` of eqs. (29)-(31), ``T_ij(q) = q . T_ij . q``, as (3, 3, 4, 4)
    (:func:`diffmb.spatial.rotation.world_to_body_quadratic_forms`); ``T = R(q)^T``."""
    return rotation.world_to_body_quadratic_forms()


def paper_point_jacobian(q, x0):
    """Closed-form Jacobian of ``Phi_I = r_c + T^T x'_0`` (eq. 26) w.r.t. ``[r_c, q]`` (eq. 32).

    Eq. (32) as printed labels the ``r_c`` block ``d/dq_e`` and stacks ``[K_1 q, K_2 q, K_3 q]``
    as a 4 x 3 block; the Jacobian (3 x 7) is ``[I_3, (K_1 q, K_2 q, K_3 q)^T]`` with
    ``K_i = 2 sum_j x'_0j T_ji`` (the ``T_ji`` are symmetric).
    """
    Tm = jnp.asarray(paper_T_matrices())
    K = 2.0 * jnp.einsum("j,jiab->iab", x0, Tm)  # K_i
    dq = jnp.einsum("iab,b->ia", K, q)  # row i = (K_i q)^T
    return jnp.concatenate([jnp.eye(3, dtype=q.dtype), dq], axis=1)


# ----------------------------------------------------------------------------------------------
# Index-reduced DAE with Baumgarte stabilisation (comparison for the variational integrator)
# ----------------------------------------------------------------------------------------------


def kkt_solve(M, Cu, rhs_top, rhs_bot):
    """Solve ``[[M, Cuᵀ], [Cu, 0]] [x; λ] = [rhs_top; rhs_bot]``: returns ``(x, λ)`` (regular
    although M is singular along each quaternion)."""
    n, m = M.shape[0], Cu.shape[0]
    K = jnp.block([[M, Cu.T], [Cu, jnp.zeros((m, m), M.dtype)]])
    sol = jnp.linalg.solve(K, jnp.concatenate([rhs_top, rhs_bot]))
    return sol[:n], sol[n:]


def project_velocity(sysm: MaximalSystem, u, udot):
    """Velocity consistent with the constraints: ``M-orthogonal projection`` of udot onto
    ``C'(u) v = 0`` (returns ``v`` with ``M v + C'^T mu = M udot``, ``C' v = 0``)."""
    M = mass_matrix(sysm, u)
    Cu = constraint_jacobian(sysm, u)
    v, _ = kkt_solve(M, Cu, M @ udot, jnp.zeros(Cu.shape[0], u.dtype))
    return v


def _dae_vector_field(t, y, args):
    sysm, alpha, beta = args
    u, ud = y
    M = mass_matrix(sysm, u)
    Cfun = lambda x: constraints(sysm, x)  # noqa: E731
    C, Cd = jax.jvp(Cfun, (u,), (ud,))
    _, Cdd = jax.jvp(lambda x: jax.jvp(Cfun, (x,), (ud,))[1], (u,), (ud,))
    Cu = jax.jacfwd(Cfun)(u)
    dTdu = jax.grad(lambda x: kinetic_energy(sysm, x, ud))(u)
    Mdot_ud = jax.jvp(lambda x: mass_matrix(sysm, x) @ ud, (u,), (ud,))[1]
    dVdu = jax.grad(lambda x: potential_energy(sysm, x))(u)
    top = dTdu - Mdot_ud - dVdu
    bot = -Cdd - 2.0 * alpha * Cd - beta**2 * C
    udd, _ = kkt_solve(M, Cu, top, bot)
    return (ud, udd)


def dae_rhs(sysm: MaximalSystem, alpha=10.0, beta=10.0):
    """Right-hand side ``f(t, (u, udot)) -> (udot, uddot)`` of the index-reduced DAE.

    Lagrange's equations of ``L = T - V`` with ``C(u) = [g; Phi]``:
    ``M(u) uddot + C'(u)^T mu = dT/du - (dM/dt) udot - dV/du`` and, instead of ``C = 0``
    (index 3), its second derivative with Baumgarte's (1972) stabilisation
    ``C'' (udot, udot) + C' uddot = -2 alpha C' udot - beta^2 C`` (index 1). The KKT matrix is
    regular although ``M`` is singular along each quaternion.
    """
    return lambda t, y, args=None: _dae_vector_field(t, y, (sysm, alpha, beta))


class MaximalDAE(AbstractODESystem):
    """The index-1 DAE of :func:`dae_rhs` as a system for :func:`diffmb.simulate`.

    State y = (u, u̇) (7n each); ``init`` projects the initial velocity onto the constraints.
    Baumgarte's ``alpha``, ``beta`` are traced (differentiable). Integrate it by
    :func:`diffmb.simulate`, e.g. ``simulate(MaximalDAE(sysm), u0, udot0, t1=T, dt=1e-3,
    solver="dopri8", rtol=1e-10, atol=1e-10, saveat=ts)``.
    """

    sysm: MaximalSystem
    alpha: jnp.ndarray = eqx.field(converter=lambda x: jnp.asarray(x, dtype=jnp.float64),
                                   default=10.0)
    beta: jnp.ndarray = eqx.field(converter=lambda x: jnp.asarray(x, dtype=jnp.float64),
                                  default=10.0)

    def init(self, q0, v0, params, dt):
        n = self.sysm.nq
        u0 = check_initial("MaximalDAE", "u0", q0, (n,))
        ud0 = jnp.zeros(n) if v0 is None else check_initial("MaximalDAE", "udot0", v0, (n,))
        return (u0, project_velocity(self.sysm, u0, ud0))

    def vector_field(self, t, y, params):
        return _dae_vector_field(t, y, (self.sysm, self.alpha, self.beta))

    def outputs(self, ys, params):
        return ys[0], ys[1], None

    def diverged(self, y):
        """A centre-of-mass speed or quaternion rate beyond :data:`~diffmb.systems.MAX_SPEED`."""
        return jnp.any(jnp.abs(y[1]) > MAX_SPEED)
