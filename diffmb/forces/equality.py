"""MuJoCo's connect and weld equality constraints (closed kinematic loops, welded bodies) as
its soft constraints.

A connect holds a point of one body on a point of another (a ball joint closing a loop: 3
rows); a weld also holds their orientations (6 rows). Each row has MuJoCo's soft-constraint
law: bilateral (no one-sided clamp), with the impedance d from ``solimp`` at the norm of the
equality's violation, the reference acceleration from ``solref`` and MuJoCo's regulariser
R = (1 − d)/d · diagApprox, and all rows are solved together with M(q) as MuJoCo's solver does.
Build them from a file with :func:`diffmb.io.mjcf_equality.equalities_from_mjcf`.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics.crba import crba_kin
from ..dynamics.kinematics import (
    body_frames,
    kinematics,
    node_accelerations,
    partial_velocities,
    point_accelerations,
)
from ..dynamics.rnea import rnea_kin
from ..dynamics.small_linalg import cho_factor, cho_solve, solve
from ..spatial import quaternion as quat
from ..spatial.safe import safe_norm
from ..validation import check_value, is_concrete
from .elements import (
    AbstractForce,
    FixedTendons,
    JointLimits,
    _num,
    _soft_reference,
    _soft_rows,
    soft_impedance,
)

__all__ = ["Equalities", "soft_equality_rows", "solve_together"]

_KINDS = ("connect", "weld")


def _gains(solref, solimp):
    """MuJoCo's stiffness k and damping b of soft rows (``mj_makeImpedance``): k = 1/(d_max²
    T² ζ²), b = 2/(d_max T) for ``solref`` = (T, ζ), T > 0; k = −T/d_max², b = −ζ/d_max for the
    direct form; d_max clamped to [1e-4, 0.9999] as MuJoCo clamps it."""
    T, zeta = solref[..., 0], solref[..., 1]
    dmax = jnp.clip(solimp[..., 1], 1e-4, 0.9999)
    pos = T > 0
    Ts = jnp.where(pos, T, 1.0)
    k = jnp.where(pos, 1.0 / jnp.maximum(dmax**2 * Ts**2 * zeta**2, 1e-15), -T / dmax**2)
    b = jnp.where(zeta > 0, 2.0 / jnp.maximum(dmax * Ts, 1e-15), -zeta / dmax)
    return k, b


def _impedance(r, solimp):
    """MuJoCo's ``getimpedance`` at violation r ≥ 0: the solimp arcs
    (:func:`~diffmb.forces.elements.soft_impedance`) on solimp clamped as MuJoCo clamps it, and
    the flat value (d_min + d_max)/2 where width is zero or d_min = d_max."""
    dmin = jnp.clip(solimp[..., 0], 1e-4, 0.9999)
    dmax = jnp.clip(solimp[..., 1], 1e-4, 0.9999)
    width = jnp.maximum(solimp[..., 2], 0.0)
    mid = jnp.clip(solimp[..., 3], 1e-4, 0.9999)
    power = jnp.maximum(solimp[..., 4], 1.0)
    si = jnp.stack([dmin, dmax, width, mid, power], axis=-1)
    flat = (width <= 1e-15) | (dmin == dmax)
    return jnp.where(flat, 0.5 * (dmin + dmax), soft_impedance(r, si))


def soft_equality_rows(M, h, J, aref, R, unilateral=None, candidate=None, iters=8):
    """Forces f (n,) of n soft rows with Jacobian J (n, nv), reference accelerations ``aref``
    (n,) and regulariser R (n,), solved with the mass matrix M (nv, nv) as MuJoCo's solver
    solves them: with a₀ = M⁻¹h the accelerations under the generalised force h (nv,) alone
    (τ − bias, external wrenches included), a = a₀ + M⁻¹Jᵀf and, on the rows that act,
    (J M⁻¹ Jᵀ + diag R) f = a_ref − J a₀ (the minimiser of MuJoCo's cost).

    Bilateral rows (equalities) always act. Rows flagged ``unilateral`` (limits) act only
    where ``candidate`` (violated) and they push (f > 0, i.e. J a < a_ref); they are found by
    Newton's active-set steps on MuJoCo's piecewise-quadratic cost (``iters``; the set is
    fixed before the final solve, which ``grad`` differentiates)."""
    L = cho_factor(M)
    A = J @ cho_solve(L, J.T)
    b = aref - J @ cho_solve(L, h)
    K = A + jnp.diag(R)
    if unilateral is None or not np.any(unilateral):
        return solve(K, b)
    uni = np.asarray(unilateral, bool)
    candidate = jnp.ones(uni.shape, bool) if candidate is None else candidate

    def forces(active, K, b):
        m = active.astype(jnp.float64)
        return m * solve(m[:, None] * K * m[None, :] + jnp.diag(1.0 - m), m * b)

    A_, b_, K_ = (jax.lax.stop_gradient(x) for x in (A, b, K))
    active = ~uni | (candidate & (b_ > 0))
    for _ in range(iters):  # J a − a_ref = A f − b < 0: the row pushes
        active = ~uni | (candidate & (A_ @ forces(active, K_, b_) < b_))
    return forces(active, K, b)


class Equalities(AbstractForce):
    """MuJoCo's connect and weld equalities, one soft constraint each (``mj_instantiateEquality``,
    ``mj_makeImpedance``, ``mj_referenceConstraint``).

    Equality i ties frame 1 — point ``anchor1[i]`` and orientation ``frame1[i]`` (w, x, y, z)
    fixed in body ``body1[i]`` — to frame 2 (``anchor2[i]``, ``frame2[i]`` in ``body2[i]``);
    bodies are indices into ``model.body_names``, −1 the world. With p_k the anchors' world
    positions and Q_k = q_k ⊗ frame_k the frames' world orientations:

        connect  r = p₁ − p₂                                      (3 rows)
        weld     r = [p₁ − p₂;  s · Im(Q₂* ⊗ Q₁)]                 (6 rows, s = ``torquescale``)

    J = ∂ṙ/∂v (for the orientation rows ½ s Im(Q₂* ⊗ (ω₁ − ω₂) ⊗ Q₁), MuJoCo's Jacobian). Each
    row's reference acceleration and regulariser are MuJoCo's:

        a_ref = −b J v − k d r − J̇ v,   R = max((1 − d)/d · w, 1e-15)

    with k, b from ``solref`` (T, ζ) (k = 1/(d_max² T² ζ²), b = 2/(d_max T); negative: the
    direct form k = −T/d_max², b = −ζ/d_max), d = d(‖r‖) from ``solimp`` at the norm of the
    equality's whole violation (3 or 6 rows), and w MuJoCo's diagonal approximation
    ``invweight[i]`` = (translation, rotation): the sum of the two bodies' ``body_invweight0``.
    The rows are solved together with M(q) (:func:`soft_equality_rows`), so the element needs
    the other forces: :func:`~diffmb.forces.elements.total_force` evaluates it last
    (:meth:`loaded_call`; called alone it sees gravity and the velocity terms only). The loop
    then closes as MuJoCo's does, r̈ = (1 − d) r̈₀ + d (−b ṙ − k d r) on a lone row, and
    rests at MuJoCo's violation under load.

    Limits of another element evaluated last (:class:`~diffmb.forces.JointLimits`,
    :class:`~diffmb.forces.FixedTendons`) are solved apart from these rows: each counts the
    other as no load. Costs one kinematics pass (shared by the rows, M and the bias), a mass
    matrix with its Cholesky factor and an RNEA per call.
    """

    anchor1: jnp.ndarray  # (n, 3) in body1's frame
    anchor2: jnp.ndarray  # (n, 3) in body2's frame
    frame1: jnp.ndarray  # (n, 4) frame orientation in body1 (welds)
    frame2: jnp.ndarray  # (n, 4) frame orientation in body2 (welds)
    torquescale: jnp.ndarray  # (n,) (welds)
    solref: jnp.ndarray  # (n, 2)
    solimp: jnp.ndarray  # (n, 5)
    invweight: jnp.ndarray  # (n, 2) MuJoCo's diagApprox: translation, rotation
    kind: tuple = eqx.field(static=True)
    body1: tuple = eqx.field(static=True)
    body2: tuple = eqx.field(static=True)
    names: tuple = eqx.field(static=True)
    limits: tuple = ()  # JointLimits / FixedTendons whose limit rows are solved with these

    def __init__(self, kind, body1, body2, anchor1, anchor2, *, frame1=None, frame2=None,
                 torquescale=1.0, solref=(0.02, 1.0), solimp=(0.9, 0.95, 0.001, 0.5, 2.0),
                 invweight, names=None, limits=()):
        E = "Equalities"
        kind = (kind,) if isinstance(kind, str) else tuple(kind)
        n = len(kind)
        for i, k in enumerate(kind):
            if k not in _KINDS:
                raise ValueError(f"{E}.kind[{i}] = {k!r}: choose one of {list(_KINDS)}")
        self.kind = kind
        for f, b in (("body1", body1), ("body2", body2)):
            b = tuple(b)
            if len(b) != n:
                raise TypeError(f"{E}.{f}: expected {n} body indices (one per equality), got "
                                f"{len(b)}")
            for i, x in enumerate(b):
                if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                    raise TypeError(f"{E}.{f}[{i}] = {x!r}: a body index (int) is required")
                if x < -1:
                    raise ValueError(f"{E}.{f}[{i}] = {x}: must be a body index >= 0, or -1 "
                                     "(the world)")
            setattr(self, f, tuple(int(x) for x in b))
        same = [i for i in range(n) if self.body1[i] == self.body2[i]]
        if same:
            i = same[0]
            raise ValueError(f"{E}.body2[{i}] = {self.body2[i]}: the same body as body1 (an "
                             "equality ties two different bodies)")
        self.anchor1 = _num(E, "anchor1", anchor1, (n, 3))
        self.anchor2 = _num(E, "anchor2", anchor2, (n, 3))
        unit = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
        self.frame1 = _num(E, "frame1", unit if frame1 is None else frame1, (n, 4))
        self.frame2 = _num(E, "frame2", unit if frame2 is None else frame2, (n, 4))
        for f in ("frame1", "frame2"):
            x = getattr(self, f)
            if is_concrete(x):
                check_value(E, f + " norm", np.linalg.norm(np.asarray(x), axis=-1), lo=0.0,
                            lo_open=True)
        self.torquescale = _num(E, "torquescale", torquescale, (n,), broadcast=True)
        self.invweight = _num(E, "invweight", invweight, (n, 2), broadcast=True, lo=0.0)
        self.solref, self.solimp, _ = _soft_rows(E, n, solref, solimp, jnp.ones(n))
        self.names = tuple(names) if names is not None else tuple(f"equality{i}" for i in range(n))
        if len(self.names) != n:
            raise TypeError(f"{E}.names: expected {n} names, got {len(self.names)}")
        limits = tuple(limits)
        for i, el in enumerate(limits):
            soft = (isinstance(el, JointLimits) and el.solref is not None) or (
                isinstance(el, FixedTendons) and el.limit_solref is not None)
            if not soft:
                raise TypeError(f"{E}.limits[{i}]: {type(el).__name__} is not a JointLimits or "
                                "FixedTendons element in MuJoCo's soft-constraint form "
                                "(solref, solimp and invweight given)")
        self.limits = limits

    @property
    def n(self) -> int:
        return len(self.kind)

    @property
    def needs_load(self) -> bool:
        """True: the rows are solved with the other forces (:func:`total_force`)."""
        return self.n > 0

    def _rows(self):
        """Static row layout: indices into the 6 n candidate rows, and each row's equality."""
        rows, owner = [], []
        for i, k in enumerate(self.kind):
            r = range(6 * i, 6 * i + (6 if k == "weld" else 3))
            rows += list(r)
            owner += [i] * len(r)
        return np.array(rows, dtype=np.int32), np.array(owner, dtype=np.int32)

    def _check_model(self, model):
        nb = model.n_bodies
        for f in ("body1", "body2"):
            bad = [i for i, b in enumerate(getattr(self, f)) if b >= nb]
            if bad:
                i = bad[0]
                raise ValueError(f"Equalities.{f}[{i}] = {getattr(self, f)[i]}: must be a body "
                                 f"index in [-1, {nb}) (model has {nb} bodies)")

    def constraint(self, model, q, v):
        """MuJoCo's ``efc_pos``, ``efc_J`` and J̇v of the rows: ``(r (m,), J (m, nv),
        jdot_v (m,))``, m = 3 per connect + 6 per weld, rows in equality order."""
        return self._constraint(model, kinematics(model, q, v), v)

    def _constraint(self, model, kin, v):
        self._check_model(model)
        n = self.n
        b = np.array(self.body1 + self.body2)  # (2n,) body1 rows first
        world = b < 0
        live = jnp.asarray(~world, dtype=jnp.float64)
        bi = np.where(world, 0, b)
        Rb, pb = body_frames(model, kin)
        R = jnp.where(world[:, None, None], jnp.eye(3), Rb[bi])
        p = jnp.where(world[:, None], -kin.origin, pb[bi])
        anchor = jnp.concatenate([self.anchor1, self.anchor2])
        x = p + jnp.einsum("kij,kj->ki", R, anchor)  # anchors, relative to kin.origin
        V, W = partial_velocities(model, kin, x, bi)  # (2n, 3, nv)
        V, W = V * live[:, None, None], W * live[:, None, None]
        acc0 = node_accelerations(kin, jnp.zeros(model.nv))  # J̇v: accelerations at a = 0
        dw, ddx = point_accelerations(kin, acc0, x, bi)
        dw, ddx = dw * live[:, None], ddx * live[:, None]
        w = W @ v  # (2n, 3)

        r_t = x[:n] - x[n:]
        J_t = V[:n] - V[n:]
        jdv_t = ddx[:n] - ddx[n:]

        # orientation: Q_e = Q₂* ⊗ Q₁ = quaternion of (R₂F₂)ᵀ R₁F₁; ω in frame 2 drives it
        fq = jnp.concatenate([self.frame1, self.frame2])
        fn = safe_norm(fq, axis=-1)  # MuJoCo multiplies the frames as given: |f₁||f₂| scales
        RF = R @ quat.to_rotmat(fq / fn[:, None])
        Re = jnp.swapaxes(RF[n:], -1, -2) @ RF[:n]
        Qe = jax.vmap(quat.from_rotmat)(Re)
        e0, ev = Qe[:, :1], Qe[:, 1:]
        s = (self.torquescale * fn[:n] * fn[n:])[:, None]
        RF2t = jnp.swapaxes(RF[n:], -1, -2)
        r_r = s * ev
        Wd = RF2t @ (W[:n] - W[n:])  # (n, 3, nv) relative angular velocity in frame 2
        # Im((0, ω) ⊗ Q_e) = e₀ ω + ω × e_v
        J_r = 0.5 * s[:, :, None] * (e0[:, :, None] * Wd
                                     + jnp.cross(Wd, ev[:, :, None], axisa=1, axisb=1, axisc=1))
        dwr = w[:n] - w[n:]
        om = RF2t @ dwr[..., None]
        om = om[..., 0]
        omd = (RF2t @ (dw[:n] - dw[n:] - jnp.cross(w[n:], dwr))[..., None])[..., 0]
        jdv_r = 0.5 * s * (e0 * omd + jnp.cross(omd, ev)
                           - 0.5 * jnp.sum(om * om, -1, keepdims=True) * ev)

        rows, _ = self._rows()
        r = jnp.concatenate([r_t, r_r], axis=1).reshape(-1)[rows]
        J = jnp.concatenate([J_t, J_r], axis=1).reshape(6 * n, model.nv)[rows]
        jdv = jnp.concatenate([jdv_t, jdv_r], axis=1).reshape(-1)[rows]
        return r, J, jdv

    def reference(self, r, Jv, jdv):
        """MuJoCo's ``efc_aref`` and ``efc_R`` (m,) of the rows at violation r, rates J v and
        J̇v (:meth:`constraint`)."""
        rows, owner = self._rows()
        n = self.n
        full = jnp.zeros(6 * n).at[rows].set(r).reshape(n, 6)
        d = _impedance(safe_norm(full, axis=-1), self.solimp)[owner]  # norm per equality
        k, b = _gains(self.solref, self.solimp)
        rot = np.array([(i % 6) >= 3 for i in rows])
        w = jnp.where(rot, self.invweight[owner, 1], self.invweight[owner, 0])
        aref = -b[owner] * Jv - k[owner] * d * r - jdv
        return aref, jnp.maximum((1.0 - d) / d * w, 1e-15)

    def limit_rows(self, model, q, v):
        """The limit rows of the elements in ``limits``: ``(J (m, nv), aref (m,), R (m,),
        violated (m,))``, one row per limited dof or tendon on its violated side (MuJoCo's
        limit row, as :func:`~diffmb.forces.elements.soft_limit_rows` builds it)."""
        Js, arefs, Rs, viol = [], [], [], []
        for el in self.limits:
            if isinstance(el, JointLimits):
                if not el.dof:
                    continue
                x = jnp.stack([q[a] for a in el.qadr])
                C = jnp.eye(model.nv)[np.asarray(el.dof)]
                lim, lo, hi = np.ones(len(el.dof), bool), el.lower, el.upper
                w, sr, si = el.invweight, el.solref, el.solimp
            else:
                if len(el.dof_qadr) != model.nv:
                    raise TypeError(f"{type(el).__name__}.coef: expected {len(el.dof_qadr)} "
                                    f"columns to be the model's nv = {model.nv}")
                x, C = el.geometry(model, q)  # lengths and their Jacobian
                lim, lo, hi = np.array(el.limited, bool), el.lower, el.upper
                w, sr, si = el.limit_invweight, el.limit_solref, el.limit_solimp
            below, above = lim & (x < lo), lim & (x > hi)
            side = jnp.where(below, 1.0, jnp.where(above, -1.0, 0.0))
            y = jnp.where(below, x - lo, jnp.where(above, hi - x, 1.0))
            J = side[:, None] * C
            aref, R = _soft_reference(y, J @ v, w, sr, si)
            Js.append(J)
            arefs.append(aref)
            Rs.append(R)
            viol.append(below | above)
        if not Js:
            z = jnp.zeros(0)
            return jnp.zeros((0, model.nv)), z, z, jnp.zeros(0, bool)
        return (jnp.concatenate(Js), jnp.concatenate(arefs), jnp.concatenate(Rs),
                jnp.concatenate(viol))

    def __call__(self, model, t, q, v, ctrl):
        return self.loaded_call(model, t, q, v, ctrl, jnp.zeros(model.nv), None)

    def loaded_call(self, model, t, q, v, ctrl, tau, f_ext):
        """Generalised constraint forces Jᵀf (nv,) with ``tau`` (nv,) and ``f_ext``
        (nbody, 6 or None) acting besides them."""
        if not self.n:
            return jnp.zeros(model.nv), None
        kin = kinematics(model, q, v)  # shared by the rows, M and the bias
        r, J, jdv = self._constraint(model, kin, v)
        aref, R = self.reference(r, J @ v, jdv)
        h = tau - rnea_kin(model, kin, jnp.zeros(model.nv), f_ext)
        M = crba_kin(model, kin)
        Jl, arefl, Rl, viol = self.limit_rows(model, q, v)
        if not Jl.shape[0]:
            return J.T @ soft_equality_rows(M, h, J, aref, R), None
        m = J.shape[0]
        J = jnp.concatenate([J, Jl])
        uni = np.arange(J.shape[0]) >= m
        cand = jnp.concatenate([jnp.ones(m, bool), viol])
        f = soft_equality_rows(M, h, J, jnp.concatenate([aref, arefl]),
                               jnp.concatenate([R, Rl]), uni, cand)
        return J.T @ f, None


def solve_together(forces) -> tuple:
    """``forces`` with the soft limits (MuJoCo's constraint form) of its
    :class:`~diffmb.forces.JointLimits` and :class:`~diffmb.forces.FixedTendons` elements
    solved with its :class:`Equalities` rows, as MuJoCo's solver solves all constraint rows
    at once: the joint limits move into ``Equalities.limits``, the tendons' limit rows too
    while their springs, damping and friction stay in a copy of the tendon element without
    limits. Without an Equalities element (or without soft limits) ``forces`` is returned as
    it is; the order of the other elements is kept."""
    forces = tuple(forces)
    eqs = [k for k, f in enumerate(forces) if isinstance(f, Equalities) and f.n]
    if not eqs:
        return forces
    if len(eqs) > 1:
        raise ValueError(f"solve_together: {len(eqs)} Equalities elements (at {eqs}); join "
                         "them into one to solve their rows together")
    limits, out = [], []
    for f in forces:
        if isinstance(f, JointLimits) and f.solref is not None:
            limits.append(f)
            continue
        if isinstance(f, FixedTendons) and f.limit_solref is not None and any(f.limited):
            limits.append(f)
            out.append(f.without_limits())
            continue
        out.append(f)
    if not limits:
        return forces
    k = next(i for i, f in enumerate(out) if isinstance(f, Equalities) and f.n)
    eq = out[k]
    out[k] = dataclasses.replace(eq, limits=eq.limits + tuple(limits))
    return tuple(out)
