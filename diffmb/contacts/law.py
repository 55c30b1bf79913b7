"""Compliant contact laws: normal force and tangential friction at one contact point.

Conventions: δ is the penetration (m, > 0 in contact), δ̇ = dδ/dt = −n·v its rate (m/s), n
the terrain's outward unit normal, v the contact point's velocity (terrain at rest). Forces are
on the body, in the world frame. The choice of law is static (a string, see
:data:`NORMAL_LAWS`, :data:`FRICTION_LAWS`), its parameters are traced arrays; every function
works elementwise/under ``vmap`` and is gradient-safe: finite value and gradient at δ = 0 and
at zero sliding speed (double-``where`` around powers and norms).

Normal laws (never pulling: f_n = max(·, 0), and 0 out of contact):

* ``"linear"``: f_n = k δ + b δ̇ (spring–damper; the force jumps by b δ̇ at touch-down);
* ``"hunt_crossley"``: f_n = k δⁿ (1 + c δ̇), exponent n ≥ 1 (n = 3/2: Hertz), dissipation
  c [s/m]; the damping vanishes with δ, so the force is continuous at touch-down. n = 1,
  c = 0 is the linear spring without damping; the linear spring–damper is its own choice.

The linear law's spring may follow MuJoCo's impedance (a contact element's ``solimp``): its
stiffness is then k g(δ)/g(δ_k), g(δ) = d(δ)²/(1 − d(δ)) with d MuJoCo's impedance
(:func:`~diffmb.forces.elements.soft_impedance`), so that it equals k at the depth δ_k. A MuJoCo
contact row at rest at depth δ pushes with m K g(δ) δ (m the pair's effective mass, K solref's
stiffness): with k = m K g(δ_k) this spring pushes the same at every depth, whatever load the
point carries (:func:`impedance_stiffness`, :func:`impedance_energy`).

Torsional and rolling friction (MuJoCo's ``condim`` 4 and 6, :func:`spin_friction`): on the
relative angular velocity ω of the two sides, split into its spin s = n·ω about the normal and
its rolling part ω_r = ω − s n, the regularised Coulomb torques τ = −f_n [μ_s s n/√(s² + ε_ω²)
+ μ_r ω_r/√(|ω_r|² + ε_ω²)], μ_s and μ_r lengths (m), ε_ω [rad/s]; they creep at ~ε_ω under a
torque below the bound.

Backward-only smoothing ("contacts from distance" in the backward pass, Paulus, Geist et al.
2025): :func:`normal_force_backward_smoothed` returns the exact normal force but differentiates
as :func:`smoothed_normal_force`, a stand-in that acts from a distance: with width w [m],
δ_s = w softplus(δ/w) (→ δ in contact, w e^{−d/w} at a gap d) and σ = sigmoid(δ/w),

    linear:        f_s = max(k δ_s + b σ δ̇, 0),     Hunt–Crossley: f_s = max(k δ_sⁿ (1 + c δ̇), 0).

The spring's stiffness k σ and the damper's touch-down step b σ δ̇ are smoothed symmetrically
about δ = 0, so the smoothing adds no first-order bias where a trajectory passes through
contact (∫ (σ − H) dδ = 0), while a body within a few w of contact already feels
∂f/∂δ ≈ k e^{−d/w}. Values (the forward simulation) are unchanged.

Friction laws:

* ``"coulomb"``: regularised Coulomb, f_t = −μ f_n v_t / √(|v_t|² + ε²), stateless; it creeps
  at speed ~ε |f_t|/(μ f_n) under a tangential load below the Coulomb bound.
* ``"stiction"`` (default): a tangential spring–damper per contact point with deformation state
  z (3,): trial f = −k_t z_t − b_t v_t, bound F = μ f_n, f_t = f min(1, F/|f|), and
  ż = −(f_t + k_t z)/b_t. While sticking (|f| ≤ F) ż = v_t (the spring follows the point); while
  slipping the spring stays at the Coulomb bound; out of contact (F = 0) z relaxes to 0 with the
  time constant b_t/k_t. z and v_t are projected onto the tangent plane (z's normal part relaxes
  at the same rate). Passive: the spring energy ½ k_t |z|² plus the work of f_t never grows
  (b_t × power = −[s|f + k_t z|² + (1 − s)|k_t z|²] ≤ 0, s = min(1, F/|f|)).

  Creep (MuJoCo's soft friction, opt-in): with a creep rate c [m/(N s)] the spring's anchor
  also slides with the friction force, ż = −(f_t + k_t z)/b_t + c f_t, so a point that sticks
  under a steady tangential load L moves on at the speed c |L|, as a MuJoCo contact does (its
  friction rows hold a load with the velocity R f / b: c = R/b, :func:`creep_rate`). c = 0
  sticks. Passive while c b_t < 4 (the dissipation b_t|v|² + c|f_t|² + c b_t v·f_t while
  sticking is then a positive definite form).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "NORMAL_LAWS",
    "FRICTION_LAWS",
    "spring_damper",
    "hunt_crossley",
    "normal_force",
    "smoothed_normal_force",
    "normal_force_backward_smoothed",
    "regularised_coulomb",
    "stiction",
    "tangential",
    "spin_friction",
    "normal_energy",
    "impedance_ratio",
    "impedance_stiffness",
    "impedance_energy",
    "creep_rate",
    "impedance_creep",
]

NORMAL_LAWS = ("linear", "hunt_crossley")
FRICTION_LAWS = ("stiction", "coulomb")


def spring_damper(delta, ddelta, k, b):
    """Linear law f_n = max(k δ + b δ̇, 0) for δ > 0, else 0 (N)."""
    on = delta > 0
    return jnp.where(on, jnp.maximum(k * delta + b * ddelta, 0.0), 0.0)


def hunt_crossley(delta, ddelta, k, c, n):
    """Hunt–Crossley f_n = max(k δⁿ (1 + c δ̇), 0) for δ > 0, else 0 (N); δⁿ gradient-safe."""
    on = delta > 0
    dpos = jnp.where(on, delta, 1.0)
    dn = jnp.where(on, dpos**n, 0.0)
    return jnp.where(on, jnp.maximum(k * dn * (1.0 + c * ddelta), 0.0), 0.0)


def normal_force(law: str, delta, ddelta, k, b, c, n):
    """f_n of the static choice ``law`` (see :data:`NORMAL_LAWS`): b is the linear law's
    damping [N s/m], c and n the Hunt–Crossley dissipation [s/m] and exponent."""
    if law == "linear":
        return spring_damper(delta, ddelta, k, b)
    if law == "hunt_crossley":
        return hunt_crossley(delta, ddelta, k, c, n)
    raise ValueError(f"unknown normal law {law!r}; choose one of {NORMAL_LAWS}")


def smoothed_normal_force(law: str, delta, ddelta, k, b, c, n, width):
    """The smooth stand-in of :func:`normal_force` with width ``width`` w [m] > 0 (see the
    module doc): equal to the law in deep contact (δ ≫ w), k w e^{δ/w} at a gap."""
    w = width
    ds = w * jax.nn.softplus(delta / w)
    if law == "linear":
        raw = k * ds + b * jax.nn.sigmoid(delta / w) * ddelta
    elif law == "hunt_crossley":
        raw = k * ds**n * (1.0 + c * ddelta)
    else:
        raise ValueError(f"unknown normal law {law!r}; choose one of {NORMAL_LAWS}")
    return jnp.maximum(raw, 0.0)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 7))
def normal_force_backward_smoothed(law: str, delta, ddelta, k, b, c, n, width):
    """:func:`normal_force`'s value with :func:`smoothed_normal_force`'s derivative (width
    ``width`` [m], a Python float): contacts from distance in the backward pass only."""
    return normal_force(law, delta, ddelta, k, b, c, n)


@normal_force_backward_smoothed.defjvp
def _normal_force_backward_smoothed_jvp(law, width, primals, tangents):
    value = normal_force(law, *primals)
    smooth = lambda *a: smoothed_normal_force(law, *a, width)  # noqa: E731
    _, tangent = jax.jvp(smooth, primals, tangents)
    return value, tangent


def normal_energy(law: str, delta, k, n):
    """Elastic energy stored in the normal spring (J): ½ k δ² (linear) or k δⁿ⁺¹/(n + 1)."""
    on = delta > 0
    dpos = jnp.where(on, delta, 1.0)
    if law == "linear":
        return jnp.where(on, 0.5 * k * dpos**2, 0.0)
    return jnp.where(on, k * dpos ** (n + 1.0) / (n + 1.0), 0.0)


def impedance_ratio(delta, solimp):
    """g(δ) = d²/(1 − d) of MuJoCo's impedance d at the penetration max(δ, 0) (``solimp``
    (..., 5), broadcast against δ)."""
    from ..forces.elements import soft_impedance

    d = soft_impedance(jnp.maximum(delta, 0.0), solimp)
    return d * d / (1.0 - d)


def impedance_stiffness(delta, k, solimp, depth):
    """The stiffness k g(δ)/g(δ_k) at penetration δ of a spring that follows MuJoCo's impedance
    ``solimp`` and has stiffness k at the depth ``depth`` δ_k [m] (module docstring)."""
    return k * impedance_ratio(delta, solimp) / impedance_ratio(depth, solimp)


def creep_rate(b, impratio, mu, pyramidal, d, inv_weight):
    """MuJoCo's creep of a contact that sticks under a tangential load: the slip speed per
    newton c = R/b [m/(N s)] of its friction rows, R = (1 − d)/d · A / impratio with A the
    pair's inverse weight ``inv_weight`` [1/kg] (MuJoCo's diagonal approximation, the bodies'
    ``body_invweight0``), ``b`` solref's damping [1/s], ``d`` the impedance; a pyramidal cone's
    two edges per direction share the load with R (1 + μ²) between them (``pyramidal``: bool,
    or one per contact). Elementwise."""
    cone = 1.0 + np.asarray(pyramidal, dtype=float) * mu * mu
    return (1.0 - d) / d * inv_weight * cone / (b * impratio)


def impedance_creep(delta, c, solimp, depth):
    """The creep rate c h(δ)/h(δ_k), h = (1 − d)/d, at penetration δ of a contact whose rate is
    c at the depth ``depth`` δ_k [m] and follows MuJoCo's impedance ``solimp`` (a MuJoCo
    friction row's R/b moves with d as (1 − d)/d)."""
    return c * _regulariser_ratio(delta, solimp) / _regulariser_ratio(depth, solimp)


def _regulariser_ratio(delta, solimp):
    """(1 − d)/d of MuJoCo's impedance d at the penetration max(δ, 0): a soft row's R over
    its inverse weight."""
    from ..forces.elements import soft_impedance

    d = soft_impedance(jnp.maximum(delta, 0.0), solimp)
    return (1.0 - d) / d


def _graded_rule(levels=12, nodes=8):
    """Gauss–Legendre nodes and weights on [0, 1], ``nodes`` per part, the parts halving
    towards both ends (g = d²/(1 − d) grows like 1/(1 − d) where d nears 1 at an end)."""
    cuts = np.unique(np.concatenate([0.5 ** np.arange(1, levels + 1),
                                     1.0 - 0.5 ** np.arange(1, levels + 1), [0.0, 1.0]]))
    gx, gw = np.polynomial.legendre.leggauss(nodes)
    a, b = cuts[:-1, None], cuts[1:, None]
    return ((a + (b - a) * 0.5 * (gx + 1.0)).ravel(), ((b - a) * 0.5 * gw).ravel())


_GRADED = _graded_rule()


def impedance_energy(delta, k, solimp, depth):
    """Elastic energy ∫₀^δ k g(s)/g(δ_k) s ds [J] of the spring of :func:`impedance_stiffness`
    (0 for δ ≤ 0): Gauss–Legendre on the pieces between solimp's breakpoints (``mid``·width,
    width, and where d reaches MuJoCo's clip 0.9999), on which g is smooth, in parts graded
    towards the pieces' ends."""
    si = jnp.asarray(solimp, dtype=jnp.float64)
    dpos = jnp.maximum(delta, 0.0)
    dmin, dmax, width, mid, power = (si[..., i] for i in range(5))
    power = jnp.maximum(power, 1.0)
    # where d reaches MuJoCo's clip 0.9999 inside the width (solimp's y = (d − dmin)/(dmax − dmin))
    yc = jnp.clip((0.9999 - dmin) / jnp.where(dmax > dmin, dmax - dmin, 1.0), 0.0, 1.0)
    xc = jnp.where(yc >= mid, 1.0 - ((1.0 - yc) * (1.0 - mid) ** (power - 1.0)) ** (1.0 / power),
                   (yc * mid ** (power - 1.0)) ** (1.0 / power))
    xc = jnp.where(dmax > 0.9999, xc, 1.0)
    knots = jnp.sort(jnp.stack([mid, xc, jnp.ones_like(mid)], -1), -1) * \
        width[..., None]
    cuts = [jnp.zeros_like(dpos)] + [jnp.minimum(dpos, knots[..., i]) for i in range(3)] + [dpos]
    x, w = (jnp.asarray(a) for a in _GRADED)
    e = 0.0
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        s = a[..., None] + (b - a)[..., None] * x
        f = impedance_stiffness(s, k[..., None], si[..., None, :], depth[..., None]) * s
        e = e + (b - a) * jnp.sum(w * f, axis=-1)
    return e


def _tangent(x, n):
    return x - jnp.sum(x * n, axis=-1, keepdims=True) * n


def _norm(x):
    s = jnp.sum(x * x, axis=-1, keepdims=True)
    pos = s > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, s, 1.0)), 0.0)


def regularised_coulomb(fn, v, n, mu, eps):
    """f_t = −μ f_n v_t / √(|v_t|² + ε²) (N, (..., 3)); v_t the tangential part of v (...,3),
    ``eps`` [m/s] the regularising speed (> 0)."""
    vt = _tangent(v, n)
    s = jnp.sqrt(jnp.sum(vt * vt, axis=-1, keepdims=True) + eps * eps)
    return -jnp.asarray(mu * fn)[..., None] * vt / s


def stiction(fn, v, n, z, mu, kt, bt, creep=0.0):
    """Spring–damper stiction (see the module doc): ``(f_t (..., 3), ż (..., 3))``.

    fn (...,) N; v, n, z (..., 3); mu, kt [N/m], bt [N s/m], creep [m/(N s)] (0: none)
    broadcast against fn."""
    vt = _tangent(v, n)
    zt = _tangent(z, n)
    kt, bt = jnp.asarray(kt)[..., None], jnp.asarray(bt)[..., None]
    f = -kt * zt - bt * vt
    F = jnp.asarray(mu * fn)[..., None]
    # f min(1, F/|f|) = f F / max(|f|, F): 0 when F = 0 (out of contact) also at f = 0, so the
    # derivative there is 0 too, not that of the unclipped spring-damper
    den = jnp.maximum(_norm(f), F)
    ok = den > 0
    ft = jnp.where(ok, f * F / jnp.where(ok, den, 1.0), 0.0)
    return ft, -(ft + kt * z) / bt + jnp.asarray(creep)[..., None] * ft


def tangential(law: str, fn, v, n, z, mu, kt, bt, eps, creep=0.0):
    """Friction force of the static choice ``law`` and ż (zeros for ``"coulomb"``); ``creep``
    [m/(N s)]: the stiction law's creep rate."""
    if law == "stiction":
        return stiction(fn, v, n, z, mu, kt, bt, creep)
    if law == "coulomb":
        return regularised_coulomb(fn, v, n, mu, eps), jnp.zeros_like(v)
    raise ValueError(f"unknown friction law {law!r}; choose one of {FRICTION_LAWS}")


def spin_friction(fn, w, n, mu_spin, mu_roll, eps):
    """Torsional and rolling friction torque (N m, (..., 3)) on the side whose angular
    velocity relative to the other is ``w`` (..., 3), about the normal ``n``: see the module
    doc. ``mu_spin``, ``mu_roll`` [m] and ``eps`` [rad/s] broadcast against ``fn``."""
    s = jnp.sum(w * n, axis=-1, keepdims=True)
    wr = w - s * n
    fn = jnp.asarray(fn)[..., None]
    spin = jnp.asarray(mu_spin)[..., None] * s / jnp.sqrt(s * s + eps * eps) * n
    roll = jnp.asarray(mu_roll)[..., None] * wr / jnp.sqrt(
        jnp.sum(wr * wr, axis=-1, keepdims=True) + eps * eps)
    return -fn * (spin + roll)
