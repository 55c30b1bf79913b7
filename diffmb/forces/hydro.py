"""Hydrodynamics: MuJoCo's two fluid models, and a potential-flow model (buoyancy, drag, currents,
added-mass coefficients of ellipsoids) whose added inertia lives in the :class:`~diffmb.Model`.

Two families, not to be mixed on one model:

* **MuJoCo's fluid models** (``mjcf_forces(path, fluid="mujoco")``), reproduced term by term from
  MuJoCo's documentation (``doc/computation/fluid.rst``) and its ``engine_passive.c``:
  :class:`MujocoInertiaBoxFluid` (the default: per body, quadratic drag and Stokes resistance of
  the body's equivalent inertia box) and :class:`MujocoEllipsoidFluid` (``fluidshape="ellipsoid"``,
  per geom: blunt/slender/angular drag, Kutta and Magnus lift, Stokes resistance and the
  *velocity* terms of the added mass). MuJoCo leaves out the added-mass *acceleration* term and
  buoyancy; so do these elements. They refuse a Model that carries added inertia (the velocity
  terms would count twice).
* **Potential flow** (``load_mjcf(path, added_mass="potential")`` +
  ``mjcf_forces(path, fluid="potential")``): the added inertia M_A is folded into the Model's
  inertia (``Model.body_added_inertia``), so ABA/CRBA/RNEA/Kane carry its acceleration term and
  the Kirchhoff/Munk velocity terms; :class:`Hydrodynamics` adds buoyancy ρVg at each centre of
  buoyancy, linear and quadratic drag per axis on the velocity relative to a uniform current, and
  the current correction of Fossen's M_A ν̇_r + C_A(ν_r) ν_r.

The elements are built from plain arrays; :mod:`diffmb.io.mjcf_fluid` builds them from a
compiled MJCF file. Their constructors refuse numbers without meaning (a negative density,
volume or drag coefficient, non-finite values, axes that are not rotations, wrong shapes) with a
message naming the class and the field, and ``__call__`` refuses body indices outside the Model.

Conventions: SI units; spatial vectors [angular; linear]; world z-up unless the
Model's gravity says otherwise. ``density`` ρ in kg/m³; ``viscosity`` μ as MuJoCo uses it (Stokes
drag 6πμ r v: a dynamic viscosity in Pa·s, water ≈ 0.0009). Wrenches are returned as
``f_ext`` rows (world [force, torque] at each body's centre of mass).

Added-mass coefficients (Lamb, *Hydrodynamics*, 6th ed. 1932, §§114–115, 373; Kirchhoff): an
ellipsoid with semi-axes (a, b, c) along its x, y, z axes has

    α₀ = abc ∫₀^∞ dλ / ((a²+λ) Δ),  Δ = √((a²+λ)(b²+λ)(c²+λ))   (β₀, γ₀ cyclically)
    m_x = ρV α₀/(2 − α₀),   I_x = (ρV/5) (b²−c²)² (γ₀−β₀) / (2(b²−c²) + (b²+c²)(β₀−γ₀))

computed here exactly with Carlson's symmetric integral α₀ = ⅔ abc R_D(b², c², a²) (Carlson,
Numer. Algorithms 10 (1995)), where MuJoCo's compiler uses a 15-point quadrature.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..dynamics.kinematics import (
    body_coms,
    body_frames,
    kinematics,
    point_velocities,
)
from ..model import Model
from ..spatial.safe import safe_norm, safe_sqrt
from ..spatial.spatial import cross_force
from ..validation import check_index, check_value, is_concrete
from .elements import AbstractForce

__all__ = [
    "MujocoInertiaBoxFluid",
    "MujocoEllipsoidFluid",
    "Hydrodynamics",
    "carlson_rd",
    "lamb_integrals",
    "ellipsoid_added_mass",
    "lamb_k_factors",
    "geom_volume",
    "geom_added_inertia",
    "added_inertia_from_fossen",
]

_MINVAL = 1e-15  # MuJoCo's mjMINVAL


def _field(owner, name, x, shape, **bounds):
    """``x`` as a float64 array of ``shape`` (broadcast from a scalar or a broadcastable shape,
    or reshaped from a flat vector of the same size), its values checked by :func:`check_value`
    (type, finiteness, ``bounds``) when concrete; ``TypeError`` naming the shape otherwise."""
    check_value(owner, name, x, **bounds)
    a = jnp.asarray(x, dtype=jnp.float64)
    shape = tuple(int(n) for n in shape)
    if a.shape == shape:
        return a
    if a.ndim == 1 and a.size == int(np.prod(shape)):
        return a.reshape(shape)
    try:
        return jnp.broadcast_to(a, shape)
    except (ValueError, TypeError):
        want = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
        rows = " (one row per entry)" if name not in ("wind", "current") else ""
        raise TypeError(f"{owner}.{name}: expected shape {want}{rows} or one that broadcasts to "
                        f"it, got {a.shape}") from None


def _rotations(owner, name, R, tol=1e-6):
    """Refuse (concrete) matrices (k, 3, 3) that are not proper rotations; return ``R``."""
    if is_concrete(R):
        Rn = np.asarray(R)
        err = np.abs(np.einsum("kji,kjl->kil", Rn, Rn) - np.eye(3)).max(axis=(1, 2))
        bad = np.flatnonzero((err > tol) | (np.linalg.det(Rn) <= 0))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{owner}.{name}[{i}] = {Rn[i].tolist()}: must be a rotation matrix "
                             f"(RᵀR = I to {tol:g}, det R = +1)")
    return R


def _bodies(owner, bodies):
    """Body indices as a tuple of ints ≥ 0 (checked against the Model when called)."""
    try:
        out = tuple(int(b) for b in bodies)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}.bodies = {bodies!r}: expected a sequence of body indices") \
            from None
    check_value(owner, "bodies", np.asarray(out, dtype=np.int64), lo=0)
    return out


def _check_bodies(owner, bodies, model: Model):
    check_index(owner, "bodies", bodies, model.n_bodies,
                what=f"model {model.name!r} has {model.n_bodies} bodies")


# ------------------------------------------------------------------------------------------
# Shared plumbing: velocities of points fixed on bodies, wrenches back to the coms.
# ------------------------------------------------------------------------------------------


def _entry_motion(model: Model, kin, bodies, pos, rot):
    """World axes (k, 3, 3), points rel. to ``kin.origin`` (k, 3), and world angular and linear
    velocities (k, 3) of k frames fixed on ``bodies`` (static indices) at ``pos``/``rot``
    (body frame)."""
    Rb, pb = body_frames(model, kin)
    b = np.asarray(bodies)
    Rb, pb = Rb[b], pb[b]
    R = jnp.einsum("kij,kjl->kil", Rb, rot)
    x = pb + jnp.einsum("kij,kj->ki", Rb, pos)
    w, xd = point_velocities(kin, x, b)
    return R, x, w, xd


def _wrenches(model: Model, kin, bodies, x, F, T):
    """World forces F (k, 3) at points x (k, 3) and torques T (k, 3) on ``bodies`` ->
    f_ext (nb, 6) [force, torque] at the body coms."""
    c = body_coms(model, kin)[np.asarray(bodies)]
    rows = jnp.concatenate([F, T + jnp.cross(x - c, F)], axis=-1)
    return jnp.zeros((model.n_bodies, 6), rows.dtype).at[np.asarray(bodies)].add(rows)


def _refuse_added(model: Model, what: str):
    if model.has_added_inertia:
        raise ValueError(
            f"{model.name}: {what} (MuJoCo's fluid model) applies the added-mass velocity terms "
            "itself, and this Model already carries added inertia (Model.body_added_inertia), "
            "whose velocity terms the dynamics include: they would count twice. Use "
            "fluid='potential' with added inertia, or a Model loaded without added_mass.")


# ------------------------------------------------------------------------------------------
# MuJoCo's inertia-box model
# ------------------------------------------------------------------------------------------


class MujocoInertiaBoxFluid(AbstractForce):
    """MuJoCo's default fluid model, per body (its ``mj_inertiaBoxFluidModel``).

    Each body is replaced by the box with its mass and principal inertias (full sides
    ``s_i = √(6 (I_j + I_k − I_i)/m)``, at least √(6·1e-15/m)), in its principal axes
    ``frame_rot`` (body frame; MuJoCo's ``body_iquat``) at its centre of mass. With ω and v the
    angular velocity and the com velocity minus ``wind`` in those axes:

        f_i = −3πμ d v_i − ½ρ s_j s_k |v_i| v_i,   g_i = −πμ d³ ω_i − ρ s_i (s_j⁴ + s_k⁴)/64 |ω_i| ω_i

    with d = (s_x + s_y + s_z)/3. Mass and inertia are read from the Model at each call (so a
    gradient reaches them). ``density`` ρ [kg/m³], ``viscosity`` μ [Pa·s], ``wind`` [m/s] world.
    """

    density: jnp.ndarray
    viscosity: jnp.ndarray
    wind: jnp.ndarray
    frame_rot: jnp.ndarray  # (k, 3, 3) principal axes in the body frame
    bodies: tuple = eqx.field(static=True)

    def __init__(self, bodies, frame_rot=None, *, density, viscosity=0.0, wind=(0.0, 0.0, 0.0)):
        o = "MujocoInertiaBoxFluid"
        self.bodies = _bodies(o, bodies)
        k = len(self.bodies)
        self.frame_rot = _rotations(o, "frame_rot", _field(
            o, "frame_rot", np.eye(3) if frame_rot is None else frame_rot, (k, 3, 3)))
        self.density = _field(o, "density", density, (), lo=0.0)
        self.viscosity = _field(o, "viscosity", viscosity, (), lo=0.0)
        self.wind = _field(o, "wind", wind, (3,))

    def __call__(self, model, t, q, v, ctrl):
        _refuse_added(model, "MujocoInertiaBoxFluid")
        _check_bodies("MujocoInertiaBoxFluid", self.bodies, model)
        if not self.bodies:
            return jnp.zeros(model.nv), None
        b = np.asarray(self.bodies)
        kin = kinematics(model, q, v)
        Rb, _ = body_frames(model, kin)
        R = jnp.einsum("kij,kjl->kil", Rb[b], self.frame_rot)
        c = body_coms(model, kin)[b]
        w, xd = point_velocities(kin, c, b)
        # principal inertias in the principal axes (the model's inertia, so gradients reach it)
        I = jnp.einsum("kji,kjl,klm->kim", self.frame_rot, model.body_inertia[b], self.frame_rot)
        Ip = jnp.diagonal(I, axis1=1, axis2=2)
        m = model.body_mass[b]
        perm = Ip.sum(axis=1, keepdims=True) - 2.0 * Ip  # I_j + I_k − I_i
        box = jnp.sqrt(jnp.maximum(_MINVAL, perm) / m[:, None] * 6.0)
        lw = jnp.einsum("kji,kj->ki", R, w)
        lv = jnp.einsum("kji,kj->ki", R, xd - self.wind)
        d = box.mean(axis=1, keepdims=True)
        s0, s1, s2 = box[:, 0], box[:, 1], box[:, 2]
        area = jnp.stack([s1 * s2, s0 * s2, s0 * s1], axis=1)
        p4 = box**4
        mom = jnp.stack([s0 * (p4[:, 1] + p4[:, 2]), s1 * (p4[:, 0] + p4[:, 2]),
                         s2 * (p4[:, 0] + p4[:, 1])], axis=1)
        mu, rho = self.viscosity, self.density
        f = -3.0 * jnp.pi * d * mu * lv - 0.5 * rho * area * jnp.abs(lv) * lv
        g = -jnp.pi * d**3 * mu * lw - rho * mom * jnp.abs(lw) * lw / 64.0
        F = jnp.einsum("kij,kj->ki", R, f)
        T = jnp.einsum("kij,kj->ki", R, g)
        return jnp.zeros(model.nv), _wrenches(model, kin, b, c, F, T)


# ------------------------------------------------------------------------------------------
# MuJoCo's ellipsoid model
# ------------------------------------------------------------------------------------------


def _ellipsoid_local_force(lw, lv, r, coef, vmass, vinertia, rho, mu):
    """MuJoCo's ellipsoid fluid force in the geom frame, k geoms at once.

    lw, lv (k, 3): angular velocity and velocity of the geom centre relative to the wind, geom
    axes; r (k, 3) semi-axes; coef (k, 5) [blunt, slender, angular, Kutta, Magnus]; vmass,
    vinertia (k, 3): virtual mass and inertia per unit density. Returns torque, force (k, 3).
    """
    blunt, slender, angular, kutta, magnus = (coef[:, i] for i in range(5))
    # added mass: velocity (Kirchhoff) terms only, as MuJoCo applies them
    P = rho * vmass * lv
    L = rho * vinertia * lw
    torque = jnp.cross(P, lv) + jnp.cross(L, lw)
    force = jnp.cross(P, lw)
    # geometry of the equivalent ellipsoid
    r0, r1, r2 = r[:, 0], r[:, 1], r[:, 2]
    vol = 4.0 / 3.0 * jnp.pi * r0 * r1 * r2
    dmax = jnp.max(r, axis=1)
    dmin = jnp.min(r, axis=1)
    dmid = r.sum(axis=1) - dmax - dmin
    a_max = jnp.pi * dmax * dmid
    # Magnus lift
    f_magnus = (magnus * rho * vol)[:, None] * jnp.cross(lw, lv)
    # projected area normal to v and the Kutta lift
    q2 = jnp.stack([r1 * r2, r2 * r0, r0 * r1], axis=1) ** 2  # (r_j r_k)²
    denom = jnp.sum(q2 * q2 * lv * lv, axis=1)
    num = jnp.sum(q2 * lv * lv, axis=1)
    a_proj = jnp.pi * safe_sqrt(denom / jnp.maximum(_MINVAL, num))
    speed = safe_norm(lv)
    normal = q2 * lv
    cos_alpha = num / jnp.maximum(_MINVAL, speed * denom)
    circ = (kutta * rho * cos_alpha * a_proj)[:, None] * jnp.cross(normal, lv)
    f_kutta = jnp.cross(circ, lv)
    # Stokes resistance of the equivalent sphere and quadratic drag
    diam = 2.0 / 3.0 * r.sum(axis=1)
    r4 = r**4
    m4 = jnp.stack([jnp.maximum(r4[:, 1], r4[:, 2]), jnp.maximum(r4[:, 2], r4[:, 0]),
                    jnp.maximum(r4[:, 0], r4[:, 1])], axis=1)
    ii = 8.0 / 15.0 * jnp.pi * r * m4
    i_max = (8.0 / 15.0 * jnp.pi * dmid * dmax**4)[:, None]
    mom = lw * (angular[:, None] * ii + slender[:, None] * (i_max - ii))
    drag_lin = mu * 3.0 * jnp.pi * diam + rho * speed * (a_proj * blunt
                                                         + slender * (a_max - a_proj))
    drag_ang = mu * jnp.pi * diam**3 + rho * safe_norm(mom)
    torque = torque - drag_ang[:, None] * lw
    force = force + f_magnus + f_kutta - drag_lin[:, None] * lv
    return torque, force


class MujocoEllipsoidFluid(AbstractForce):
    """MuJoCo's ellipsoid fluid model (``fluidshape="ellipsoid"``), per geom (its
    ``mj_ellipsoidFluidModel``, ``mj_addedMassForces`` and ``mj_viscousForces``).

    Each entry is an ellipsoid with semi-axes ``semiaxes`` (k, 3) fixed on body ``bodies[k]`` at
    ``pos`` (k, 3) with axes ``rot`` (k, 3, 3) (body frame). With ω and v its angular velocity
    and the velocity of its centre minus ``wind``, in its axes, the fluid applies at its centre
    (MuJoCo's ``doc/computation/fluid.rst``, notation there):

    - added mass, velocity terms only: f = p × ω, g = p × v + l × ω, with p = ρ m_V ∘ v,
      l = ρ I_V ∘ ω (``virtual_mass`` m_V, ``virtual_inertia`` I_V per unit density, (k, 3));
    - quadratic drag −ρ [C_blunt A_proj + C_slender (A_max − A_proj)] |v| v and angular drag
      −ρ |ω ∘ (C_ang I_D + C_slender (I_max − I_D))| ω, I_D,i = 8π/15 r_i max(r_j, r_k)⁴;
    - Kutta lift and Magnus lift C_M ρ V ω × v;
    - Stokes resistance −3πμ D v and −πμ D³ ω with D = ⅔ (r_x + r_y + r_z).

    ``coef`` (k, 5) = MJCF ``fluidcoef`` [blunt, slender, angular, Kutta, Magnus] (defaults
    0.5, 0.25, 1.5, 1.0, 1.0); ``scale`` (k,) multiplies each entry's wrench (MuJoCo's
    interaction coefficient, 1). Every coefficient is an array leaf (differentiable).
    """

    density: jnp.ndarray
    viscosity: jnp.ndarray
    wind: jnp.ndarray
    pos: jnp.ndarray
    rot: jnp.ndarray
    semiaxes: jnp.ndarray
    coef: jnp.ndarray
    virtual_mass: jnp.ndarray
    virtual_inertia: jnp.ndarray
    scale: jnp.ndarray
    bodies: tuple = eqx.field(static=True)

    def __init__(self, bodies, semiaxes, pos=None, rot=None, *, density, viscosity=0.0,
                 wind=(0.0, 0.0, 0.0), coef=(0.5, 0.25, 1.5, 1.0, 1.0), virtual_mass=None,
                 virtual_inertia=None, scale=None):
        o = "MujocoEllipsoidFluid"
        self.bodies = _bodies(o, bodies)
        k = len(self.bodies)
        self.semiaxes = _field(o, "semiaxes", semiaxes, (k, 3), lo=0.0, lo_open=True)
        self.pos = _field(o, "pos", np.zeros(3) if pos is None else pos, (k, 3))
        self.rot = _rotations(o, "rot", _field(o, "rot", np.eye(3) if rot is None else rot,
                                               (k, 3, 3)))
        self.coef = _field(o, "coef", coef, (k, 5))
        for j, drag in enumerate(("blunt", "slender", "angular")):  # lift coefficients: any sign
            check_value(o, f"coef[:, {j}] ({drag} drag)", self.coef[:, j], lo=0.0)
        if virtual_mass is None or virtual_inertia is None:
            vm, vi = zip(*(_virtual_coefficients_np(r) for r in np.asarray(self.semiaxes)),
                         strict=True) if k else ((), ())
            virtual_mass = vm if virtual_mass is None else virtual_mass
            virtual_inertia = vi if virtual_inertia is None else virtual_inertia
        self.virtual_mass = _field(o, "virtual_mass", np.asarray(virtual_mass, float), (k, 3),
                                   lo=0.0)
        self.virtual_inertia = _field(o, "virtual_inertia", np.asarray(virtual_inertia, float),
                                      (k, 3), lo=0.0)
        self.scale = _field(o, "scale", np.ones(k) if scale is None else scale, (k,), lo=0.0)
        self.density = _field(o, "density", density, (), lo=0.0)
        self.viscosity = _field(o, "viscosity", viscosity, (), lo=0.0)
        self.wind = _field(o, "wind", wind, (3,))

    def __call__(self, model, t, q, v, ctrl):
        _refuse_added(model, "MujocoEllipsoidFluid")
        _check_bodies("MujocoEllipsoidFluid", self.bodies, model)
        if not self.bodies:
            return jnp.zeros(model.nv), None
        kin = kinematics(model, q, v)
        R, x, w, xd = _entry_motion(model, kin, self.bodies, self.pos, self.rot)
        lw = jnp.einsum("kji,kj->ki", R, w)
        lv = jnp.einsum("kji,kj->ki", R, xd - self.wind)
        g, f = _ellipsoid_local_force(lw, lv, self.semiaxes, self.coef, self.virtual_mass,
                                      self.virtual_inertia, self.density, self.viscosity)
        F = jnp.einsum("kij,kj->ki", R, self.scale[:, None] * f)
        T = jnp.einsum("kij,kj->ki", R, self.scale[:, None] * g)
        return jnp.zeros(model.nv), _wrenches(model, kin, self.bodies, x, F, T)


_SPHERE, _CAPSULE, _ELLIPSOID, _CYLINDER, _BOX, _MESH = 2, 3, 4, 5, 6, 7


def _semiaxes(gtype, size):
    """MuJoCo's ellipsoid semi-axes of a geom (``mju_geomSemiAxes``)."""
    s = np.asarray(size, float)
    if gtype == _SPHERE:
        return np.array([s[0], s[0], s[0]])
    if gtype == _CAPSULE:
        return np.array([s[0], s[0], s[1] + s[0]])
    if gtype == _CYLINDER:
        return np.array([s[0], s[0], s[1]])
    return s[:3].copy()


# ------------------------------------------------------------------------------------------
# Potential flow: Lamb's coefficients of an ellipsoid
# ------------------------------------------------------------------------------------------


def carlson_rd(x, y, z, iterations: int = 12):
    """Carlson's symmetric elliptic integral R_D(x, y, z) = 3/2 ∫₀^∞ dt / ((t+z)^{3/2}
    √((t+x)(t+y))), x, y ≥ 0, z > 0 (broadcasting, differentiable).

    Duplication theorem R_D(x, y, z) = ¼ R_D(x', y', z') + 3/(√z (z + λ)), x' = (x + λ)/4,
    λ = √x√y + √y√z + √z√x (Carlson, Numer. Algorithms 10 (1995) 13–26), a fixed number of
    times (each step shrinks the spread of the arguments four-fold), then Carlson's fifth-order
    series about their mean. Twelve steps reach float64 round-off for axis ratios up to 1e3.
    """
    x, y, z = (jnp.asarray(a, dtype=jnp.float64) for a in (x, y, z))
    acc = jnp.zeros(jnp.broadcast_shapes(x.shape, y.shape, z.shape))
    fac = 1.0
    for _ in range(iterations):
        sx, sy, sz = jnp.sqrt(x), jnp.sqrt(y), jnp.sqrt(z)
        lam = sx * (sy + sz) + sy * sz
        acc = acc + fac / (sz * (z + lam))
        fac = fac * 0.25
        x, y, z = 0.25 * (x + lam), 0.25 * (y + lam), 0.25 * (z + lam)
    mean = 0.2 * (x + y + 3.0 * z)
    dx, dy, dz = (mean - x) / mean, (mean - y) / mean, (mean - z) / mean
    ea, eb = dx * dy, dz * dz
    ec, ed = ea - eb, ea - 6.0 * eb
    ee = ed + 2.0 * ec
    series = (1.0 + ed * (-3.0 / 14.0 + 9.0 / 88.0 * ed - 9.0 / 52.0 * dz * ee)
              + dz * (ee / 6.0 + dz * (-9.0 / 22.0 * ec + dz * 3.0 / 26.0 * ea)))
    return 3.0 * acc + fac * series / (mean * jnp.sqrt(mean))


def lamb_integrals(semiaxes):
    """Lamb's (α₀, β₀, γ₀) of an ellipsoid with semi-axes (..., 3) = (a, b, c) along x, y, z:
    α₀ = abc ∫₀^∞ dλ / ((a²+λ)Δ) = ⅔ abc R_D(b², c², a²) and cyclically; α₀ + β₀ + γ₀ = 2.
    Dimensionless; (..., 3)."""
    r = jnp.asarray(semiaxes, dtype=jnp.float64)
    a2, b2, c2 = r[..., 0] ** 2, r[..., 1] ** 2, r[..., 2] ** 2
    abc = r[..., 0] * r[..., 1] * r[..., 2]
    return (2.0 / 3.0) * abc[..., None] * jnp.stack(
        [carlson_rd(b2, c2, a2), carlson_rd(c2, a2, b2), carlson_rd(a2, b2, c2)], axis=-1)


def _lamb_rotational(r2j, r2k, kj, kk):
    """Lamb's (b²−c²)²(γ₀−β₀) / (2(b²−c²) + (b²+c²)(β₀−γ₀)) for rotation about the third axis
    (0 when the two other semi-axes are equal: an axisymmetric body rolling moves no fluid)."""
    d = r2j - r2k
    den = 2.0 * d + (r2j + r2k) * (kj - kk)
    ok = jnp.abs(d) > 1e-9 * (r2j + r2k)
    return jnp.where(ok, d * d * (kk - kj) / jnp.where(ok, den, 1.0), 0.0)


def ellipsoid_added_mass(semiaxes, density=1.0):
    """Added masses and moments of inertia of an ellipsoid in unbounded ideal fluid (Lamb
    §§114–115, Kirchhoff): ``(m_A (..., 3) [kg], I_A (..., 3) [kg·m²])`` along/about its own axes,
    about its centre; ``semiaxes`` (..., 3) [m], ``density`` [kg/m³]. The 6 × 6 added inertia
    is diag(I_A, m_A) in diffmb's [angular; linear] order (no coupling, by symmetry).
    A sphere gets m_A = ½ρV, I_A = 0."""
    r = jnp.asarray(semiaxes, dtype=jnp.float64)
    k = lamb_integrals(r)
    rho_v = density * 4.0 / 3.0 * jnp.pi * r[..., 0] * r[..., 1] * r[..., 2]
    m = rho_v[..., None] * k / (2.0 - k)
    r2 = r * r
    rot = jnp.stack([_lamb_rotational(r2[..., 1], r2[..., 2], k[..., 1], k[..., 2]),
                     _lamb_rotational(r2[..., 2], r2[..., 0], k[..., 2], k[..., 0]),
                     _lamb_rotational(r2[..., 0], r2[..., 1], k[..., 0], k[..., 1])], axis=-1)
    return m, rho_v[..., None] / 5.0 * rot


def _virtual_coefficients_np(semiaxes):
    """MuJoCo's virtual mass and inertia per unit density (exact, not its quadrature)."""
    m, i = ellipsoid_added_mass(np.asarray(semiaxes, float), 1.0)
    return np.asarray(m), np.asarray(i)


def lamb_k_factors(ratio) -> dict:
    """Lamb's added-mass factors of a prolate spheroid with axis ratio a/b = ``ratio`` (> 1):
    ``{"k1", "k2", "k_prime"}`` — axial and transverse added mass over the displaced mass ρV,
    and the transverse rotational added inertia over the displaced fluid's moment of inertia
    ρV(a² + b²)/5. From the general ellipsoid integrals (:func:`lamb_integrals`); Lamb §373
    tabulates them (a/b = 2: k1 = 0.210, k2 = 0.704, k′ = 0.239; a/b → ∞: 0, 1, 1)."""
    a = float(ratio)
    m, i = ellipsoid_added_mass(np.array([a, 1.0, 1.0]), 1.0)
    rho_v = 4.0 / 3.0 * np.pi * a
    return {"k1": float(m[0]) / rho_v, "k2": float(m[1]) / rho_v,
            "k_prime": float(i[1]) / (rho_v * (a * a + 1.0) / 5.0)}


# ------------------------------------------------------------------------------------------
# Shapes: volumes, projected areas and added inertia of MJCF geoms
# ------------------------------------------------------------------------------------------

_GEOM_NAMES = {_SPHERE: "sphere", _CAPSULE: "capsule", _ELLIPSOID: "ellipsoid",
               _CYLINDER: "cylinder", _BOX: "box", _MESH: "mesh"}


def _kind(gtype):
    kind = {v: k for k, v in _GEOM_NAMES.items()}.get(gtype, gtype) if isinstance(gtype, str) \
        else int(gtype)
    if kind not in (_SPHERE, _CAPSULE, _ELLIPSOID, _CYLINDER, _BOX):
        raise ValueError(f"geom type {gtype!r}: volume and added mass are defined for sphere, "
                         "capsule, ellipsoid, cylinder and box")
    return kind


_N_SIZES = {_SPHERE: 1, _CAPSULE: 2, _CYLINDER: 2, _ELLIPSOID: 3, _BOX: 3}


def _sizes(owner, k, size):
    """The geom's sizes as float64 (MuJoCo's 3-vector, unused entries ignored); the ones it
    uses must be finite and > 0 (a negative radius would give a negative volume)."""
    check_value(owner, "size", size, ndim=1)
    s = np.asarray(size, float)
    n = _N_SIZES[k]
    if s.size < n:
        raise TypeError(f"{owner}.size = {s.tolist()}: a {_GEOM_NAMES[k]} needs {n} size(s)")
    check_value(owner, f"size[:{n}] ({_GEOM_NAMES[k]})", s[:n], lo=0.0, lo_open=True)
    return s


def geom_volume(gtype, size) -> float:
    """Volume [m³] of a MuJoCo primitive (``gtype``: name or ``mjtGeom`` code; ``size`` as
    MJCF's: radius, half-length, half-sides, each > 0)."""
    k = _kind(gtype)
    s = _sizes("geom_volume", k, size)
    if k == _SPHERE:
        return 4.0 / 3.0 * np.pi * s[0] ** 3
    if k == _ELLIPSOID:
        return 4.0 / 3.0 * np.pi * s[0] * s[1] * s[2]
    if k == _CAPSULE:
        return np.pi * s[0] ** 2 * (2.0 * s[1] + 4.0 / 3.0 * s[0])
    if k == _CYLINDER:
        return 2.0 * np.pi * s[0] ** 2 * s[1]
    return 8.0 * s[0] * s[1] * s[2]


def _projected_areas(k, s):
    """Areas [m²] projected on the planes normal to the geom's x, y, z axes."""
    if k in (_SPHERE, _ELLIPSOID):
        r = _semiaxes(k, s)
        return np.pi * np.array([r[1] * r[2], r[2] * r[0], r[0] * r[1]])
    if k == _BOX:
        return 4.0 * np.array([s[1] * s[2], s[2] * s[0], s[0] * s[1]])
    side = 4.0 * s[0] * s[1] + (np.pi * s[0] ** 2 if k == _CAPSULE else 0.0)
    return np.array([side, side, np.pi * s[0] ** 2])


def _equivalent_semiaxes(k, s):
    """The ellipsoid standing in for a geom: the geom's own semi-axes for spheres and
    ellipsoids; otherwise MuJoCo's fluid semi-axes (half-extents: r, r, h + r for a capsule;
    r, r, h for a cylinder; the half-sides of a box) scaled uniformly to the geom's volume."""
    r = _semiaxes(k, s)
    if k in (_SPHERE, _ELLIPSOID):
        return r
    return r * (geom_volume(k, s) / (4.0 / 3.0 * np.pi * np.prod(r))) ** (1.0 / 3.0)


def geom_added_inertia(gtype, size, density) -> np.ndarray:
    """Potential-flow added inertia (6, 6) of a MuJoCo primitive about its centre, in its axes,
    [angular; linear] order.

    Spheres and ellipsoids: Lamb's exact coefficients (:func:`ellipsoid_added_mass`). Boxes,
    cylinders and capsules: those of the ellipsoid with the geom's volume and its half-extents'
    proportions (:func:`_equivalent_semiaxes`) — an approximation of ours: a cube gets the
    equal-volume sphere's ½ρV, where boundary-element results for a cube are about 0.6–0.7 ρV
    (e.g. DNV-RP-C205, Table A-2); a long cylinder gets a spheroid's k₂ → 1, as the 2-D strip
    theory value ρπr² per length.
    """
    k = _kind(gtype)
    s = _sizes("geom_added_inertia", k, size)
    check_value("geom_added_inertia", "density", density, lo=0.0)
    m, i = ellipsoid_added_mass(_equivalent_semiaxes(k, s), float(density))
    return np.diag(np.concatenate([np.asarray(i), np.asarray(m)]))


def added_inertia_from_fossen(M_A, *, derivatives: bool = False) -> np.ndarray:
    """Fossen's 6 × 6 added mass (order [u, v, w, p, q, r]: linear then angular, about the body
    origin CO in body axes) in diffmb's [angular; linear] order. ``derivatives=True``: the
    input is the matrix of hydrodynamic derivatives [X_u̇ X_v̇ …], and M_A = −that (Fossen,
    *Handbook of Marine Craft Hydrodynamics and Motion Control*, 2011, §6.3)."""
    M = np.asarray(M_A, float).reshape(6, 6)
    if derivatives:
        M = -M
    P = np.zeros((6, 6))
    P[:3, 3:] = P[3:, :3] = np.eye(3)
    return P @ M @ P


def _motion_transform(R, p):
    """6 × 6 map of a motion [ω; v_O] (frame O) to the same motion at point p with axes R
    (given in frame O): [Rᵀω; Rᵀ(v_O − p × ω)]."""
    P = np.array([[0.0, -p[2], p[1]], [p[2], 0.0, -p[0]], [-p[1], p[0], 0.0]])
    X = np.zeros((6, 6))
    X[:3, :3] = X[3:, 3:] = R.T
    X[3:, :3] = -R.T @ P
    return X


# ------------------------------------------------------------------------------------------
# The potential-flow force element
# ------------------------------------------------------------------------------------------


class Hydrodynamics(AbstractForce):
    """Buoyancy, linear and quadratic drag per axis, and a uniform current, on k *entries*:
    frames fixed on bodies (``bodies[k]``; ``pos`` (k, 3) and axes ``rot`` (k, 3, 3) in the
    body frame; for an MJCF geom its centre, i.e. its centre of buoyancy, and its axes).

    - Buoyancy: F = −ρ V g (the Model's gravity) at the entry's point, ``volume`` (k,) [m³],
      fully immersed; its torque about the com, (r_CB − r_com) × F, comes with it.
    - Drag on u = Rᵀ(ṙ − v_c), the entry point's velocity relative to the ``current`` v_c
      (world, m/s), and on Ω = Rᵀω, in the entry's axes, per axis i:
      f_i = −(``lin_force``_i + ``quad_force``_i |u_i|) u_i,
      g_i = −(``lin_torque``_i + ``quad_torque``_i |Ω_i|) Ω_i (N·s/m, N·s²/m², N·m·s,
      N·m·s²). Fossen's damping: lin = −X_u, quad = −X_|u|u.
    - Current and added inertia: with the Model's added inertia M_A (``has_added_inertia``)
      the dynamics apply M_A ν̇ + C_A(ν) ν on the absolute body velocity ν (body origin, body
      axes); Fossen's law is M_A ν̇_r + C_A(ν_r) ν_r with ν_r = ν − ν_c, ν_c = [0; Rᵀv_c]. This
      element adds the difference as a force, M_A ν̇_c − C_A(ν_r) ν_r + C_A(ν) ν with
      ν̇_c = [0; −ω × Rᵀv_c] and C_A(ν) ν = ν ×* M_A ν (``current_added_mass=False`` leaves it
      out). A body drifting with the current then feels no added-mass force at all.

    Every number is an array leaf (differentiable): identify drag, volume, density or current.
    """

    density: jnp.ndarray
    current: jnp.ndarray
    pos: jnp.ndarray
    rot: jnp.ndarray
    volume: jnp.ndarray
    lin_force: jnp.ndarray
    quad_force: jnp.ndarray
    lin_torque: jnp.ndarray
    quad_torque: jnp.ndarray
    bodies: tuple = eqx.field(static=True)
    current_added_mass: bool = eqx.field(static=True, default=True)

    def __init__(self, bodies, *, density=1000.0, pos=None, rot=None, volume=0.0, lin_force=0.0,
                 quad_force=0.0, lin_torque=0.0, quad_torque=0.0, current=(0.0, 0.0, 0.0),
                 current_added_mass=True):
        o = "Hydrodynamics"
        self.bodies = _bodies(o, bodies)
        k = len(self.bodies)
        self.pos = _field(o, "pos", np.zeros(3) if pos is None else pos, (k, 3))
        self.rot = _rotations(o, "rot", _field(o, "rot", np.eye(3) if rot is None else rot,
                                               (k, 3, 3)))
        self.volume = _field(o, "volume", volume, (k,), lo=0.0)
        self.lin_force = _field(o, "lin_force", lin_force, (k, 3), lo=0.0)
        self.quad_force = _field(o, "quad_force", quad_force, (k, 3), lo=0.0)
        self.lin_torque = _field(o, "lin_torque", lin_torque, (k, 3), lo=0.0)
        self.quad_torque = _field(o, "quad_torque", quad_torque, (k, 3), lo=0.0)
        self.density = _field(o, "density", density, (), lo=0.0)
        self.current = _field(o, "current", current, (3,))
        self.current_added_mass = bool(current_added_mass)

    @classmethod
    def for_bodies(cls, model: Model, names, **kw):
        """The element on bodies given by name (one entry each), other arguments as above."""
        return cls([model.body_index(n) for n in names], **kw)

    def __call__(self, model, t, q, v, ctrl):
        _check_bodies("Hydrodynamics", self.bodies, model)
        kin = kinematics(model, q, v)
        f = None
        if self.bodies:
            R, x, w, xd = _entry_motion(model, kin, self.bodies, self.pos, self.rot)
            u = jnp.einsum("kji,kj->ki", R, xd - self.current)
            om = jnp.einsum("kji,kj->ki", R, w)
            fl = -(self.lin_force + self.quad_force * jnp.abs(u)) * u
            gl = -(self.lin_torque + self.quad_torque * jnp.abs(om)) * om
            F = jnp.einsum("kij,kj->ki", R, fl) - (self.density * self.volume)[:, None] \
                * model.gravity
            T = jnp.einsum("kij,kj->ki", R, gl)
            f = _wrenches(model, kin, self.bodies, x, F, T)
        if self.current_added_mass and model.has_added_inertia:
            fc = self._current_correction(model, kin)
            f = fc if f is None else f + fc
        return jnp.zeros(model.nv), f

    def _current_correction(self, model, kin):
        """M_A ν̇_c − C_A(ν_r) ν_r + C_A(ν) ν per body (see the class docstring)."""
        Rb, pb = body_frames(model, kin)
        nb = model.n_bodies
        w, vo = point_velocities(kin, pb, np.arange(nb))
        wb = jnp.einsum("kji,kj->ki", Rb, w)
        nu = jnp.concatenate([wb, jnp.einsum("kji,kj->ki", Rb, vo)], axis=-1)
        vc = jnp.einsum("kji,j->ki", Rb, self.current)
        nu_c = jnp.concatenate([jnp.zeros_like(vc), vc], axis=-1)
        dnu_c = jnp.concatenate([jnp.zeros_like(vc), -jnp.cross(wb, vc)], axis=-1)
        M = model.body_added_inertia
        mv = lambda A, x: jnp.einsum("kij,kj->ki", A, x)  # noqa: E731
        nu_r = nu - nu_c
        fb = mv(M, dnu_c) - cross_force(nu_r, mv(M, nu_r)) + cross_force(nu, mv(M, nu))
        T = jnp.einsum("kij,kj->ki", Rb, fb[:, :3])
        F = jnp.einsum("kij,kj->ki", Rb, fb[:, 3:])
        return _wrenches(model, kin, np.arange(nb), pb, F, T)
