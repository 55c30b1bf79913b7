"""Wheel–soil terramechanics: Bekker/Wong–Reece stresses on a rigid wheel, static sinkage, the
linearised model of Xu et al. (2021), and the wheel–soil force element.

Conventions (one rigid wheel of radius r [m] and width b [m] on deformable soil)
--------------------------------------------------------------------------------
* Angles θ [rad] are measured at the wheel centre from the downward normal, positive towards
  the direction of travel. The rim touches the soil on [θ₂, θ₁]: entry angle θ₁ ∈ [0, π/2]
  in front, exit angle θ₂ ≤ θ_m behind (default θ₂ = 0: no rebound behind the wheel). The
  sinkage is z = r (1 − cos θ₁) = 2 r sin²(θ₁/2).
* Slip ratio s (Xu et al. (2021) eq. 23, extended to braking): with v the centre's
  speed along the contact frame's x and ω the spin (positive rolling forward),
  s = (rω − v) / max(|rω|, |v|, v_ε): driving (|rω| ≥ |v|) s = (rω − v)/|rω| ∈ [0, 1],
  braking s = (rω − v)/|v| ∈ [−1, 0], s = −1 for a locked wheel sliding forward. The stress
  model uses s clipped to [−1, 1] (a wheel spinning against its travel is fully saturated).
  ``V_EPS`` = 0.01 m/s keeps s finite and continuous at rest: below v_ε the slip is a linear
  function of the speeds (a stiff viscous regime rather than a division by zero).
* Slip angle β = atan2(v_y, |v_x| + v_ε) (v_y along the contact frame's y).
* Stresses (Wong & Reece 1967; Bekker): k_eq = k_c/b + k_φ,
  front θ_m ≤ θ ≤ θ₁: σ = k_eq rⁿ (cos θ − cos θ₁)ⁿ,
  rear θ₂ ≤ θ ≤ θ_m: σ = k_eq rⁿ (cos θ* − cos θ₁)ⁿ, θ* = θ₁ − (θ − θ₂)/(θ_m − θ₂)·(θ₁ − θ_m),
  θ_m = (c₁ + c₂ s) θ₁ (Xu et al. eq. 27; Iagnemma & Dubowsky).
  Xu et al.'s eq. 24 writes k_eq rⁿ as (k₁ + k₂ b)(r/b)ⁿ: k₁ = k_c bⁿ⁻¹, k₂ = k_φ bⁿ⁻¹
  (:func:`paper_moduli`, :meth:`Soil.from_paper`).
* Shear (Janosi–Hanamoto), saturating for either sign of j:
  τ = (c + σ tan φ) sign(j) (1 − exp(−|j|/K)) with the rim-fixed shear displacement
  j(θ) = r (θ₁ − θ) − (v/ω)(sin θ₁ − sin θ) (Wong & Reece), i.e.
  j = r[θ₁ − θ − g(s)(sin θ₁ − sin θ)], g = v/(rω) = 1 − s (driving), 1/(1 + s) (braking);
  g is C¹ at s = 0 (g = 1, g' = −1 on both sides) and → ∞ for a locked wheel (saturation).
* Lateral shear (Ishigami, Miwa, Nagatani & Yoshida, J. Field Robotics 24 (2007) 233–250,
  eq. 14–16): τ_y = (c + σ tan φ) sign(j_y)(1 − exp(−|j_y|/K_y)),
  j_y = r g(s)(θ₁ − θ) tan β (the lateral speed times the time since entry, rim-fixed), and
  F_y = −r b ∫ τ_y dθ (opposing the lateral slip). Bulldozing on the wheel's side face is not
  modelled. Longitudinal and lateral shear saturate independently (the decoupled model of
  Ishigami et al.); combined they may exceed the Mohr–Coulomb bound by up to √2.
* Wheel forces (per unit stress, quadrature below), in the contact frame:
  load W = r b ∫(σ cos θ + τ sin θ) dθ (along the terrain normal),
  drawbar pull DP = r b ∫(τ cos θ − σ sin θ) dθ (along the heading x),
  resistance torque T = r² b ∫ τ dθ (the soil's torque on the wheel is −T about its axle),
  lateral force F_y (above). :func:`lateral_force_eq32` is Xu et al.'s empirical eq. 32.
* Quadrature: Gauss–Legendre with ``n_nodes`` nodes on each of [θ₂, θ_m] and [θ_m, θ₁] (the
  kink of σ at θ_m is a segment end), after the substitution t = u² towards the end where σ
  vanishes like (distance)ⁿ (θ₁ for the front, θ₂ for the rear), so that soils with n < 1
  (clay, n = 0.5) converge as fast as n = 1. Measured against ``scipy.integrate.quad``
  (``tests/test_terramechanics.py``): 16 nodes agree to 5e-11 relative (dry sand, n = 1.1,
  s = 0.9) and 1e-15 (n = 1, n = 0.5, braking); the default 32 (≤ 3e-13) leaves margin for
  the C¹ kink of the shear where j changes sign (braking).

Gradient safety: powers (·)ⁿ at zero base, the entry angle at zero sinkage (θ₁ =
2 asin √(z/2r), not acos(1 − z/r)), cos θ − cos θ₁ as 2 sin((θ₁+θ)/2) sin((θ₁−θ)/2), sign(j)
at j = 0 (C¹ branches, no sign function) and the slip at rest all have finite values and
derivatives (double-``where``).

Sources: Wong, *Theory of Ground Vehicles* (4th ed., 2008) ch. 2 and 4; Wong & Reece (1967);
Ishigami et al. (2007); Xu, Ju, Yu & Gu (2021), the Mars rover seed paper, eqs. 23–32.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics.kinematics import body_coms, body_frames, kinematics, point_velocities
from ..forces.elements import AbstractStatefulForce
from ..model import Model
from ..spatial.safe import safe_div, safe_sqrt
from ..validation import check_choice, check_value, is_concrete
from .element import AbstractGroundForce
from .geometry import _body, body_index
from .terrain import AbstractTerrain

__all__ = [
    "V_EPS",
    "Soil",
    "SOILS",
    "SOIL_SOURCES",
    "paper_moduli",
    "slip_ratio",
    "slip_angle",
    "entry_angle",
    "sinkage_from_angle",
    "max_stress_angle",
    "normal_stress",
    "shear_displacement",
    "shear_stress",
    "WheelForces",
    "wheel_forces",
    "normal_load",
    "linear_peak_stresses",
    "linear_stresses",
    "linear_normal_load",
    "linear_normal_load_printed",
    "linear_drawbar_pull",
    "linear_resistance_torque",
    "gross_traction",
    "linear_wheel_forces",
    "lateral_force_eq32",
    "static_sinkage",
    "single_wheel_curve",
    "single_wheel_table",
    "Wheel",
    "WheelSoil",
    "WheelSoilResult",
]

V_EPS = 1e-2  # m/s: the speed below which slip and slip angle become linear in the speeds
_G_MAX = 1e12  # cap of g(s) = 1/(1 + s) at s = −1 (a locked wheel): saturated, finite


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


# ---- soils -------------------------------------------------------------------------------------


_HALF_PI = 0.5 * np.pi
# admissible ranges of the soil fields: (lo, lo_open, hi, hi_open)
_SOIL_RANGES = dict(n=(0.0, True, None, False), k_c=(0.0, False, None, False),
                    k_phi=(0.0, False, None, False), c=(0.0, False, None, False),
                    phi=(0.0, False, _HALF_PI, True), K=(0.0, True, None, False),
                    K_y=(0.0, True, None, False), c1=(0.0, False, 1.0, False),
                    c2=(None, False, None, False), damping=(0.0, False, None, False),
                    unloading=(1.0, False, None, False))


def _check_soil(fields: dict):
    """Check the Soil fields given (scalars or one per wheel) against ``_SOIL_RANGES``; the
    Bekker moduli must not both vanish; θ_m = (c1 + c2 s) θ₁ must stay in [0, θ₁] for every
    slip in [−1, 1], i.e. |c2| <= min(c1, 1 − c1)."""
    for k, v in fields.items():
        lo, lo_open, hi, hi_open = _SOIL_RANGES[k]
        check_value("Soil", k, v, lo=lo, lo_open=lo_open, hi=hi, hi_open=hi_open)
    if is_concrete(fields.get("c1")) and is_concrete(fields.get("c2")):
        c1 = np.asarray(fields["c1"], float)
        lim = float(np.min(np.minimum(c1, 1.0 - c1)))
        check_value("Soil", "c2", fields["c2"], lo=-lim, hi=lim)
    kc, kp = fields.get("k_c"), fields.get("k_phi")
    if is_concrete((kc, kp)) and np.any(np.asarray(kc, float) + np.asarray(kp, float) <= 0):
        raise ValueError(f"Soil.k_c = {np.asarray(kc).tolist()}, Soil.k_phi = "
                         f"{np.asarray(kp).tolist()}: Bekker's moduli must not both be 0 "
                         "(the soil would carry no load)")


def _check_soil_arg(owner, soil):
    if not isinstance(soil, Soil):
        raise TypeError(f"{owner}: soil = {soil!r} is not a Soil")


def _check_wheel_args(owner, *, r=None, b=None, theta1=None, slip=None, theta2=None,
                      load=None, tan_beta=None):
    """Check the wheel numbers given to the functional API (concrete values only)."""
    if r is not None:
        check_value(owner, "r", r, lo=0.0, lo_open=True)
    if b is not None:
        check_value(owner, "b", b, lo=0.0, lo_open=True)
    if theta1 is not None:
        check_value(owner, "theta1", theta1, lo=0.0, hi=_HALF_PI)
    if slip is not None:
        check_value(owner, "slip", slip, lo=-1.0, hi=1.0)
    if theta2 is not None:
        check_value(owner, "theta2", theta2, lo=-_HALF_PI, hi=0.0)
    if load is not None:
        check_value(owner, "load", load, lo=0.0)
    if tan_beta is not None:
        check_value(owner, "tan_beta", tan_beta)


class Soil(eqx.Module):
    """Soil parameters (every field a traced array; scalars, or (nw,) for one soil per wheel).

    ``n`` sinkage exponent; ``k_c`` [N/m^(n+1)] cohesive and ``k_phi`` [N/m^(n+2)] frictional
    Bekker moduli; ``c`` cohesion [Pa]; ``phi`` internal friction angle [rad]; ``K`` shear
    deformation modulus [m] (Janosi); ``K_y`` lateral shear modulus [m] (default K);
    ``c1``, ``c2``: θ_m = (c1 + c2 s) θ₁. For the force element only: ``damping`` d [Pa·s/m], a
    viscous pressure d·ż on the contact's horizontal projection (W_d = d ż r b sin θ₁), and
    ``unloading`` κ [-]: on unloading below the remembered maximum sinkage m the load falls
    linearly from W(m) to 0 at m(1 − 1/κ) (see :class:`WheelSoil`). Neither is published for
    the soils of :data:`SOILS`; the defaults (d = 4.5e4 Pa·s/m, κ = 5) damp the single-wheel rig
    (6.6 kg on the regolith simulant: about critically) and make unloading 3–4 times stiffer
    than Bekker loading, as Wong reports for sands.

    Checked when built from concrete values (a ``ValueError`` naming the field, the value and
    the range): n > 0; k_c, k_φ ≥ 0 and not both 0; c ≥ 0; φ ∈ [0, π/2); K, K_y > 0;
    c1 ∈ [0, 1] and |c2| ≤ min(c1, 1 − c1) (θ_m ∈ [0, θ₁] for every slip in [−1, 1]);
    damping ≥ 0; unloading ≥ 1. :meth:`replace` checks the same."""

    n: jnp.ndarray
    k_c: jnp.ndarray
    k_phi: jnp.ndarray
    c: jnp.ndarray
    phi: jnp.ndarray
    K: jnp.ndarray
    K_y: jnp.ndarray
    c1: jnp.ndarray
    c2: jnp.ndarray
    damping: jnp.ndarray
    unloading: jnp.ndarray

    def __init__(self, n, k_c, k_phi, c, phi, K, *, K_y=None, c1=0.4, c2=0.15, damping=4.5e4,
                 unloading=5.0):
        _check_soil(dict(n=n, k_c=k_c, k_phi=k_phi, c=c, phi=phi, K=K, c1=c1, c2=c2,
                         damping=damping, unloading=unloading,
                         **({} if K_y is None else {"K_y": K_y})))
        self.n, self.k_c, self.k_phi = _f64(n), _f64(k_c), _f64(k_phi)
        self.c, self.phi, self.K = _f64(c), _f64(phi), _f64(K)
        self.K_y = self.K if K_y is None else _f64(K_y)
        self.c1, self.c2 = _f64(c1), _f64(c2)
        self.damping, self.unloading = _f64(damping), _f64(unloading)

    def k_eq(self, b):
        """Bekker's k_c/b + k_φ [N/m^(n+2)] for a wheel of width b [m]."""
        return self.k_c / b + self.k_phi

    @classmethod
    def from_paper(cls, n, k1, k2, b, c, phi, K, **kw):
        """A Soil from Xu et al.'s eq. 24 moduli (k₁ + k₂ b)(r/b)ⁿ measured with width b:
        k_c = k₁ b¹⁻ⁿ, k_φ = k₂ b¹⁻ⁿ."""
        check_value("Soil.from_paper", "b", b, lo=0.0, lo_open=True)
        check_value("Soil.from_paper", "n", n, lo=0.0, lo_open=True)
        s = _f64(b) ** (1.0 - _f64(n))
        return cls(n, _f64(k1) * s, _f64(k2) * s, c, phi, K, **kw)

    def replace(self, **kw) -> Soil:
        """A copy with some fields replaced (e.g. ``soil.replace(k_phi=...)``)."""
        names = list(kw)
        unknown = sorted(set(names) - set(_SOIL_RANGES))
        if unknown:
            raise TypeError(f"Soil.replace: unknown fields {unknown}; fields: "
                            f"{list(_SOIL_RANGES)}")
        full = {k: getattr(self, k) for k in _SOIL_RANGES}
        full.update(kw)
        _check_soil(full)
        return eqx.tree_at(lambda s: [getattr(s, k) for k in names], self,
                           [_f64(kw[k]) for k in names])


def paper_moduli(soil: Soil, b):
    """Xu et al.'s eq. 24 moduli (k₁, k₂) = (k_c bⁿ⁻¹, k_φ bⁿ⁻¹), so that
    (k₁ + k₂ b)(r/b)ⁿ = (k_c/b + k_φ) rⁿ."""
    s = _f64(b) ** (soil.n - 1.0)
    return soil.k_c * s, soil.k_phi * s


_DEG = np.pi / 180.0
SOILS: dict[str, Soil] = {
    "regolith_simulant": Soil(1.0, 1.37e3, 8.14e5, 800.0, 37.2 * _DEG, 0.036),
    "dry_sand": Soil(1.1, 0.99e3, 1528.43e3, 1.04e3, 28.0 * _DEG, 0.010),
    "lunar_soil": Soil(1.0, 1.4e3, 820e3, 170.0, 35.0 * _DEG, 1.78e-2),
    "clay": Soil(0.5, 13.19e3, 692.15e3, 4.14e3, 13.0 * _DEG, 0.006),
    "chrono_scm_default": Soil(1.1, 0.0, 2e6, 50.0, 20.0 * _DEG, 0.01),
}
"""Published soil sets (SI: k_c [N/m^(n+1)], k_φ [N/m^(n+2)], c [Pa], φ [rad], K [m]); c1 =
0.4, c2 = 0.15 (θ_m) everywhere (the test bed's values; not part of the sets), K_y = K. Sources
in :data:`SOIL_SOURCES`."""

SOIL_SOURCES: dict[str, str] = {
    "regolith_simulant": "lunar regolith simulant, Ishigami et al. (2007) J. Field Robotics "
                         "24(3); the single-wheel test bed of the rover study (n=1, k_c=1.37e3, "
                         "k_phi=8.14e5, c=800 Pa, phi=37.2 deg, K=0.036 m)",
    "dry_sand": "dry sand (Land Locomotion Lab), Wong, Theory of Ground Vehicles, Table 2.3 "
                "(n=1.1, k_c=0.99 kN/m^2.1, k_phi=1528.43 kN/m^3.1, c=1.04 kPa, phi=28 deg); "
                "K=0.010 m as in gz-terramechanics soil_params.yaml",
    "lunar_soil": "lunar soil, Bekker; Chrono demo_ROBOT_Viper_SCM.cpp (Kphi=0.82e6, "
                  "Kc=0.14e4, n=1.0, cohesion=0.017e4 Pa, friction=35 deg, Janosi=1.78e-2 m)",
    "clay": "clayey soil (Thailand, 38% moisture), Wong, Theory of Ground Vehicles, Table 2.3 "
            "(n=0.5, k_c=13.19 kN/m^1.5, k_phi=692.15 kN/m^2.5, c=4.14 kPa, phi=13 deg); "
            "K=0.006 m",
    "chrono_scm_default": "Chrono SCMTerrain defaults (Bekker_Kphi=2e6, Bekker_Kc=0, "
                          "Bekker_n=1.1, Mohr_cohesion=50 Pa, Mohr_friction=20 deg, "
                          "Janosi_shear=0.01 m)",
}


# ---- kinematics of slip ------------------------------------------------------------------------


def slip_ratio(v, omega, r, v_eps=V_EPS):
    """s = (rω − v)/max(|rω|, |v|, v_ε) (see the module doc); v [m/s] the centre's longitudinal
    speed, ω [rad/s] the spin, r [m]; continuous everywhere, finite gradient at rest."""
    rw = r * omega
    return (rw - v) / jnp.maximum(jnp.maximum(jnp.abs(rw), jnp.abs(v)), v_eps)


def slip_angle(v_x, v_y, v_eps=V_EPS):
    """β = atan2(v_y, |v_x| + v_ε) [rad] ∈ (−π/2, π/2); 0 at rest."""
    return jnp.arctan2(v_y, jnp.abs(v_x) + v_eps)


def _g(s):
    """v/(rω) as a function of the (clipped) slip: 1 − s driving, 1/(1 + s) braking."""
    braking = s < 0
    return jnp.where(braking, 1.0 / jnp.maximum(1.0 + jnp.where(braking, s, 0.0), 1.0 / _G_MAX),
                     1.0 - s)


def entry_angle(z, r):
    """θ₁ = 2 asin √(z/2r) (= acos(1 − z/r)) for sinkage z clipped to [0, r]: θ₁ ∈ [0, π/2]."""
    return 2.0 * jnp.arcsin(safe_sqrt(jnp.minimum(z, r) / (2.0 * r)))


def sinkage_from_angle(theta1, r):
    """z = r(1 − cos θ₁) = 2 r sin²(θ₁/2) [m]."""
    return 2.0 * r * jnp.sin(0.5 * theta1) ** 2


def max_stress_angle(theta1, s, soil: Soil):
    """θ_m = (c₁ + c₂ s) θ₁ (Xu et al. eq. 27), s clipped to [−1, 1]."""
    return (soil.c1 + soil.c2 * jnp.clip(s, -1.0, 1.0)) * theta1


# ---- stresses ----------------------------------------------------------------------------------


def _cos_gap(theta, theta1):
    """cos θ − cos θ₁ ≥ 0 for |θ| ≤ θ₁, without cancellation."""
    return jnp.maximum(2.0 * jnp.sin(0.5 * (theta1 + theta)) * jnp.sin(0.5 * (theta1 - theta)),
                       0.0)


def _pow(x, n):
    """xⁿ for x ≥ 0, 0 at x = 0 with a finite derivative."""
    pos = x > 0
    return jnp.where(pos, jnp.where(pos, x, 1.0) ** n, 0.0)


def normal_stress(theta, theta1, theta_m, soil: Soil, r, b, theta2=0.0):
    """Wong–Reece normal stress σ(θ) [Pa] (front and mapped rear region, module doc)."""
    keq = soil.k_eq(b) * r**soil.n
    span = theta_m - theta2
    frac = safe_div(theta - theta2, span)
    theta_star = jnp.where(theta >= theta_m, theta, theta1 - frac * (theta1 - theta_m))
    return keq * _pow(_cos_gap(theta_star, theta1), soil.n)


def shear_displacement(theta, theta1, s, r):
    """Rim-fixed shear displacement j(θ) [m] = r[θ₁ − θ − g(s)(sin θ₁ − sin θ)]."""
    return r * (theta1 - theta - _g(jnp.clip(s, -1.0, 1.0)) * (jnp.sin(theta1) - jnp.sin(theta)))


def _saturation(j, K):
    """sign(j)(1 − exp(−|j|/K)), C¹ with slope 1/K at j = 0 (no sign function; one expm1)."""
    pos = j >= 0
    e = -jnp.expm1(-jnp.where(pos, j, -j) / K)
    return jnp.where(pos, e, -e)


def shear_stress(sigma, j, soil: Soil, K=None):
    """τ = (c + σ tan φ) sign(j)(1 − exp(−|j|/K)) [Pa]; ``K`` defaults to soil.K."""
    return (soil.c + sigma * jnp.tan(soil.phi)) * _saturation(j, soil.K if K is None else K)


# ---- quadrature --------------------------------------------------------------------------------


def _unit_nodes(n_nodes: int):
    x, w = np.polynomial.legendre.leggauss(int(n_nodes))
    return 0.5 * (x + 1.0), 0.5 * w


class WheelForces(eqx.Module):
    """Wheel forces in the contact frame: ``load`` W [N] (along n), ``drawbar_pull`` DP [N]
    (along x), ``torque`` T [N·m] (resistance: the soil applies −T about the axle),
    ``lateral`` F_y [N] (along y). Fields broadcast with the inputs."""

    load: jax.Array
    drawbar_pull: jax.Array
    torque: jax.Array
    lateral: jax.Array


def _nodes(soil, r, b, theta1, slip, theta2, n_nodes):
    """Nodes θ (2N,), weights dθ (2N,) and the normal stress σ (2N,) on [θ₂, θ_m] (t = u²
    from θ₂) and [θ_m, θ₁] (from θ₁), rear segment first.

    The rear region's mapped angle θ* = θ₁ − (θ − θ₂)/(θ_m − θ₂)(θ₁ − θ_m) of the rear node
    with parameter u is θ₁ − u²(θ₁ − θ_m), the front node with the same u: σ is evaluated on
    the N front nodes and used for both segments, with θ₁ − θ* = u²(θ₁ − θ_m) computed
    without cancellation (cos θ* − cos θ₁ = 2 sin(θ₁ − d/2) sin(d/2), d = θ₁ − θ*)."""
    theta_m = max_stress_angle(theta1, slip, soil)
    u, w = _unit_nodes(n_nodes)
    u2, w2 = jnp.asarray(u * u), jnp.asarray(2.0 * u * w)
    d = (theta1 - theta_m) * u2
    gap = jnp.maximum(2.0 * jnp.sin(theta1 - 0.5 * d) * jnp.sin(0.5 * d), 0.0)
    sig = soil.k_eq(b) * r**soil.n * _pow(gap, soil.n)
    theta = jnp.concatenate([theta2 + (theta_m - theta2) * u2, theta1 - d])
    wts = jnp.concatenate([(theta_m - theta2) * w2, (theta1 - theta_m) * w2])
    return theta, wts, jnp.concatenate([sig, sig])


def wheel_forces(soil: Soil, r, b, theta1, slip, *, theta2=0.0, tan_beta=0.0,
                 n_nodes: int = 32) -> WheelForces:
    """Wong–Reece forces of one wheel (scalars): entry angle θ₁ [rad], slip s, exit angle θ₂
    [rad] (≤ θ_m), tan β of the slip angle; ``n_nodes`` Gauss–Legendre nodes per segment
    (static). Differentiable in every argument; finite gradients at θ₁ = 0 and s = 0."""
    _check_soil_arg("wheel_forces", soil)
    _check_wheel_args("wheel_forces", r=r, b=b, theta1=theta1, slip=slip, theta2=theta2,
                      tan_beta=tan_beta)
    theta1, slip, theta2 = _f64(theta1), _f64(slip), _f64(theta2)
    theta, wts, sigma = _nodes(soil, r, b, theta1, slip, theta2, n_nodes)
    tau = shear_stress(sigma, shear_displacement(theta, theta1, slip, r), soil)
    jy = r * _g(jnp.clip(slip, -1.0, 1.0)) * (theta1 - theta) * _f64(tan_beta)
    tau_y = shear_stress(sigma, jy, soil, soil.K_y)
    c, sn = jnp.cos(theta), jnp.sin(theta)
    W = r * b * jnp.sum(wts * (sigma * c + tau * sn))
    DP = r * b * jnp.sum(wts * (tau * c - sigma * sn))
    T = r * r * b * jnp.sum(wts * tau)
    Fy = -r * b * jnp.sum(wts * tau_y)
    return WheelForces(W, DP, T, Fy)


def normal_load(soil: Soil, r, b, theta1, slip, *, theta2=0.0, n_nodes: int = 32):
    """W(θ₁) [N] of :func:`wheel_forces` (the same quadrature, without the lateral shear, the
    drawbar pull and the torque)."""
    _check_soil_arg("normal_load", soil)
    _check_wheel_args("normal_load", r=r, b=b, theta1=theta1, slip=slip, theta2=theta2)
    theta1, slip, theta2 = _f64(theta1), _f64(slip), _f64(theta2)
    theta, wts, sigma = _nodes(soil, r, b, theta1, slip, theta2, n_nodes)
    tau = shear_stress(sigma, shear_displacement(theta, theta1, slip, r), soil)
    return r * b * jnp.sum(wts * (sigma * jnp.cos(theta) + tau * jnp.sin(theta)))


# ---- the linearised model (Xu et al. 2021 eqs. 26–31, after Yoshida / Iagnemma) ----------------


def linear_peak_stresses(soil: Soil, r, b, theta1, slip):
    """(θ_m, σ_m, τ_m): the angle of eq. 27 and the Wong–Reece stresses there (eqs. 24, 25)."""
    theta_m = max_stress_angle(theta1, slip, soil)
    sigma_m = soil.k_eq(b) * r**soil.n * _pow(_cos_gap(theta_m, theta1), soil.n)
    tau_m = shear_stress(sigma_m, shear_displacement(theta_m, theta1, slip, r), soil)
    return theta_m, sigma_m, tau_m


def linear_stresses(theta, soil: Soil, r, b, theta1, slip):
    """Eq. 26 (θ₂ = 0): σ, τ at θ ∈ [0, θ₁] [Pa]:
    σ₁ = σ_m (θ₁ − θ)/(θ₁ − θ_m), τ₁ = τ_m (θ₁ − θ)/(θ₁ − θ_m) for θ ≥ θ_m;
    σ₂ = σ_m θ/θ_m, τ₂ = c + (τ_m − c) θ/θ_m for θ < θ_m."""
    theta_m, sm, tm = linear_peak_stresses(soil, r, b, theta1, slip)
    front = theta >= theta_m
    f1 = safe_div(theta1 - theta, theta1 - theta_m)
    f2 = safe_div(theta, theta_m)
    sigma = jnp.where(front, sm * f1, sm * f2)
    tau = jnp.where(front, tm * f1, soil.c + (tm - soil.c) * f2)
    return sigma, tau


def _safe_angles(theta1, theta_m):
    """θ₁, θ_m and θ₁ − θ_m with the degenerate cases (θ_m = 0 or θ_m = θ₁) replaced by
    harmless values; ``ok`` says where the closed forms hold."""
    d = theta1 - theta_m
    ok = (theta_m > 0) & (d > 0)
    return jnp.where(ok, theta1, 1.0), jnp.where(ok, theta_m, 0.5), jnp.where(ok, d, 0.5), ok


def linear_normal_load(soil: Soil, r, b, theta1, slip):
    """W of the eq. 26 stresses in closed form [N] (θ₂ = 0). Derivation (r b ∫₀^θ₁ (σ cos θ +
    τ sin θ) dθ, segments [0, θ_m] and [θ_m, θ₁], ∫θ cos = θ sin + cos, ∫(θ₁ − θ) cos =
    (θ₁ − θ) sin − cos, ∫θ sin = sin − θ cos, ∫(θ₁ − θ) sin = −(θ₁ − θ) cos − sin):

        W = r b [σ_m (θ₁ cos θ_m − θ₁ + θ_m − θ_m cos θ₁) + τ_m (θ₁ sin θ_m − θ_m sin θ₁)
                 + c (θ_m − sin θ_m)(θ₁ − θ_m)] / (θ_m (θ₁ − θ_m)).

    This is the printed eq. 28 term by term (:func:`linear_normal_load_printed`, the
    transcription; checked by sympy and by quadrature in the tests): no discrepancy."""
    t1, tm, d, ok = _safe_angles(theta1, max_stress_angle(theta1, slip, soil))
    _, sm, km = linear_peak_stresses(soil, r, b, theta1, slip)
    num = (sm * (t1 * jnp.cos(tm) - t1 + tm - tm * jnp.cos(t1))
           + km * (t1 * jnp.sin(tm) - tm * jnp.sin(t1))
           + soil.c * (tm - jnp.sin(tm)) * d)
    return jnp.where(ok, r * b * num / (tm * d), 0.0)


def linear_normal_load_printed(soil: Soil, r, b, theta1, slip):
    """Eq. 28 as printed in Xu et al. (2021): N = r b/(θ_m(θ₁ − θ_m)) [σ_m(−θ_m C(θ₁) +
    θ₁ C(θ_m) − θ₁ + θ_m) − κ_m(θ_m S(θ₁) − θ₁ S(θ_m)) − c(θ₁ S(θ_m) − θ_m S(θ_m) − θ_m θ₁ +
    θ_m²)] [N]. Identical to :func:`linear_normal_load`."""
    t1, tm, d, ok = _safe_angles(theta1, max_stress_angle(theta1, slip, soil))
    _, sm, km = linear_peak_stresses(soil, r, b, theta1, slip)
    C, S = jnp.cos, jnp.sin
    br = (sm * (-tm * C(t1) + t1 * C(tm) - t1 + tm) - km * (tm * S(t1) - t1 * S(tm))
          - soil.c * (t1 * S(tm) - tm * S(tm) - tm * t1 + tm**2))
    return jnp.where(ok, r * b / (tm * d) * br, 0.0)


def linear_drawbar_pull(soil: Soil, r, b, theta1, slip):
    """DP of the eq. 26 stresses, r b ∫₀^θ₁ (τ cos θ − σ sin θ) dθ, in closed form [N]
    (derived here; the paper gives none):

        DP = r b [(τ_m − c)(cos θ_m − 1)/θ_m + τ_m (cos θ_m − cos θ₁)/(θ₁ − θ_m)
                  − σ_m (θ₁ sin θ_m − θ_m sin θ₁)/(θ_m (θ₁ − θ_m))]

    (the c sin θ_m terms of the rear segment cancel)."""
    t1, tm, d, ok = _safe_angles(theta1, max_stress_angle(theta1, slip, soil))
    _, sm, km = linear_peak_stresses(soil, r, b, theta1, slip)
    val = ((km - soil.c) * (jnp.cos(tm) - 1.0) / tm + km * (jnp.cos(tm) - jnp.cos(t1)) / d
           - sm * (t1 * jnp.sin(tm) - tm * jnp.sin(t1)) / (tm * d))
    return jnp.where(ok, r * b * val, 0.0)


def linear_resistance_torque(soil: Soil, r, b, theta1, slip):
    """Eq. 30: T = r² b ∫₀^θ₁ τ dθ = (r² b/2)(τ_m θ₁ + c θ_m) [N·m]."""
    theta_m, _, tm = linear_peak_stresses(soil, r, b, theta1, slip)
    return 0.5 * r * r * b * (tm * theta1 + soil.c * theta_m)


def gross_traction(soil: Soil, r, b, theta1, slip):
    """Eq. 31: the gross traction T/r = (r b/2)(τ_m θ₁ + c θ_m) [N] (the paper calls it the
    traction; it is not the drawbar pull, which subtracts the compaction resistance
    r b ∫σ sin θ: see :func:`linear_drawbar_pull`)."""
    return linear_resistance_torque(soil, r, b, theta1, slip) / r


def linear_wheel_forces(soil: Soil, r, b, theta1, slip) -> WheelForces:
    """Load (eq. 28), drawbar pull (the DP integral of the eq. 26 stresses) and torque (eq. 30)
    of the linearised model; lateral 0 (use :func:`lateral_force_eq32`)."""
    _check_soil_arg("linear_wheel_forces", soil)
    _check_wheel_args("linear_wheel_forces", r=r, b=b, theta1=theta1, slip=slip)
    return WheelForces(linear_normal_load(soil, r, b, theta1, slip),
                       linear_drawbar_pull(soil, r, b, theta1, slip),
                       linear_resistance_torque(soil, r, b, theta1, slip),
                       jnp.zeros_like(_f64(theta1)))


def lateral_force_eq32(N, alpha, soil: Soil, area, B):
    """Xu et al. eq. 32: L = (c A + N tan φ)(1 − exp(−B|α|)) sign(α) [N], with N the normal
    load [N], α the slip angle [rad], A the contact area [m²] and B [1/rad] an empirical
    constant. The paper prints "c b A", which is not a force (c A is); the sign makes L odd
    in α (it opposes the lateral slip when subtracted: the force on the wheel is −L)."""
    _check_soil_arg("lateral_force_eq32", soil)
    check_value("lateral_force_eq32", "N", N, lo=0.0)
    check_value("lateral_force_eq32", "alpha", alpha, lo=-_HALF_PI, hi=_HALF_PI)
    check_value("lateral_force_eq32", "area", area, lo=0.0)
    check_value("lateral_force_eq32", "B", B, lo=0.0, lo_open=True)
    return (soil.c * area + N * jnp.tan(soil.phi)) * _saturation(alpha, 1.0 / B)


# ---- static sinkage ----------------------------------------------------------------------------


def _load_fn(model: str, n_nodes: int):
    if model == "wong_reece":
        return lambda soil, r, b, t1, s, t2: normal_load(soil, r, b, t1, s, theta2=t2,
                                                         n_nodes=n_nodes)
    if model == "linearised":
        return lambda soil, r, b, t1, s, t2: linear_normal_load(soil, r, b, t1, s)
    raise ValueError(f"static_sinkage: model {model!r}; choose 'wong_reece' or 'linearised'")


def static_sinkage(soil: Soil, r, b, load, slip, *, theta2=0.0, model: str = "wong_reece",
                   name: str = "wheel", n_nodes: int = 32, tol: float = 1e-13,
                   max_iter: int = 60):
    """Entry angle θ₁ ∈ [0, π/2] [rad] with W(θ₁) = ``load`` [N] at slip s (``model``:
    "wong_reece" or "linearised", static); the sinkage is :func:`sinkage_from_angle`.

    Bracketed, safeguarded Newton (a Newton step that leaves the bracket, or does not shrink
    the residual by half, is replaced by bisection) on [0, π/2]; W(0) = 0 and W increases in
    θ₁ for 0 ≤ s ≤ 1 (eq. 29). Differentiated by the implicit function theorem
    (``jax.lax.custom_root``: dθ₁/dp = −(∂W/∂p)/(∂W/∂θ₁)), never through the iterations.
    If W(π/2) < load the wheel cannot carry the load: an error naming ``name`` (an equinox
    runtime error, under ``jit`` too)."""
    _check_soil_arg("static_sinkage", soil)
    _check_wheel_args("static_sinkage", r=r, b=b, slip=slip, theta2=theta2, load=load)
    check_value("static_sinkage", "tol", tol, lo=0.0, lo_open=True)
    Wf = _load_fn(model, n_nodes)
    load, slip, theta2 = _f64(load), _f64(slip), _f64(theta2)
    hi0 = jnp.asarray(0.5 * np.pi)

    def f(t1):
        return Wf(soil, r, b, t1, slip, theta2) - load

    def solve(f, x0):
        fp = jax.grad(f)

        def body(c):
            lo, hi, x, fx, k = c
            d = fp(x)
            xn = x - safe_div(fx, d, 0.0)
            bad = ~((xn > lo) & (xn < hi)) | (d <= 0)
            xn = jnp.where(bad, 0.5 * (lo + hi), xn)
            fn = f(xn)
            lo = jnp.where(fn < 0, xn, lo)
            hi = jnp.where(fn < 0, hi, xn)
            # a Newton step that did not halve the residual is followed by a bisection
            slow = jnp.abs(fn) > 0.5 * jnp.abs(fx)
            xm = 0.5 * (lo + hi)
            fm = f(xm)
            use_m = slow & ~bad
            lo = jnp.where(use_m & (fm < 0), xm, lo)
            hi = jnp.where(use_m & (fm >= 0), xm, hi)
            x = jnp.where(use_m, xm, xn)
            fx = jnp.where(use_m, fm, fn)
            return lo, hi, x, fx, k + 1

        def cond(c):
            lo, hi, x, fx, k = c
            return (k < max_iter) & (jnp.abs(fx) > tol * jnp.maximum(load, 1.0)) & \
                (hi - lo > 1e-15)

        x = jnp.clip(x0, 1e-3, hi0 - 1e-3)
        c = (jnp.asarray(0.0), hi0, x, f(x), jnp.asarray(0))
        return jax.lax.while_loop(cond, body, c)[2]

    def tangent_solve(g, y):
        return y / g(1.0)

    x0 = jnp.asarray(0.3)
    theta1 = jax.lax.custom_root(f, x0, solve, tangent_solve)
    w_max = Wf(soil, r, b, hi0, slip, theta2)
    return eqx.error_if(theta1, w_max < load,
                        f"static_sinkage: wheel {name!r} cannot carry the load: W(pi/2) is "
                        "below it (the wheel would sink past its axle)")


@eqx.filter_jit
def _curve(soil, r, b, load, slips, theta2, model, name):
    def one(s):
        t1 = static_sinkage(soil, r, b, load, s, theta2=theta2, model=model, name=name)
        if model == "wong_reece":
            F = wheel_forces(soil, r, b, t1, s, theta2=theta2)
            extra = jnp.zeros(())
        else:
            F = linear_wheel_forces(soil, r, b, t1, s)
            extra = gross_traction(soil, r, b, t1, s)
        return sinkage_from_angle(t1, r), F.drawbar_pull, F.torque, extra

    return jax.vmap(one)(slips)


def single_wheel_curve(soil: Soil | None = None, r=0.09, b=0.11, load=64.68, slips=None, *,
                       model: str = "wong_reece", theta2=0.0, name="single wheel"):
    """Rows ``{"slip", "sinkage_m", "drawbar_pull_N", "torque_Nm"}`` (plus
    ``"gross_traction_N"`` (eq. 31) for ``model="linearised"``) of a wheel carrying ``load``
    [N] at each slip (default 0, 0.1, …, 0.9); default: the rover study's test bed (regolith
    simulant, r = 0.09 m, b = 0.11 m, W = 64.68 N, θ₂ = 0). Python floats, SI units. The
    linearised rows use eq. 28 for the load balance, the DP integral of the eq. 26 stresses
    for ``drawbar_pull_N`` and eq. 30 for the torque."""
    soil = SOILS["regolith_simulant"] if soil is None else soil
    slips = np.round(np.arange(10) * 0.1, 10) if slips is None else np.asarray(slips, float)
    _check_soil_arg("single_wheel_curve", soil)
    check_choice("single_wheel_curve", "model", model, ("wong_reece", "linearised"))
    _check_wheel_args("single_wheel_curve", r=r, b=b, load=load, theta2=theta2)
    check_value("single_wheel_curve", "slips", slips, lo=-1.0, hi=1.0, ndim=1)

    z, dp, T, gt = _curve(soil, _f64(r), _f64(b), _f64(load), jnp.asarray(slips, jnp.float64),
                          _f64(theta2), model, name)
    rows = []
    for i, s in enumerate(slips):
        row = {"slip": float(s), "sinkage_m": float(z[i]), "drawbar_pull_N": float(dp[i]),
               "torque_Nm": float(T[i])}
        if model == "linearised":
            row["gross_traction_N"] = float(gt[i])
        rows.append(row)
    return rows


def single_wheel_table(soil: Soil | None = None, r=0.09, b=0.11, load=64.68, slips=None):
    """``{"wong_reece": rows, "linearised": rows}`` of :func:`single_wheel_curve` (the
    ``single_wheel`` entry of the rover study's results)."""
    return {m: single_wheel_curve(soil, r, b, load, slips, model=m)
            for m in ("wong_reece", "linearised")}


# ---- the force element -------------------------------------------------------------------------


class Wheel(eqx.Module):
    """A wheel on a body: ``body`` (name or index, static), ``axis`` (3,) its spin axis in the
    body frame (normalised; positive spin about it rolls the wheel along axis × n), ``pos``
    (3,) its centre in the body frame [m], ``radius`` r [m], ``width`` b [m], ``theta2`` exit
    angle θ₂ [rad] (default 0), ``name`` (static, for messages). Checked: r, b > 0,
    θ₂ ∈ [−π/2, 0], a finite nonzero axis, a finite pos."""

    axis: jnp.ndarray
    pos: jnp.ndarray
    radius: jnp.ndarray
    width: jnp.ndarray
    theta2: jnp.ndarray
    body: int | str = eqx.field(static=True)
    name: str | None = eqx.field(static=True)

    def __init__(self, body, radius, width, axis=(0.0, 1.0, 0.0), pos=(0.0, 0.0, 0.0),
                 theta2=0.0, name=None):
        own = "Wheel" if name is None else f"Wheel {name!r}"
        check_value(own, "radius", radius, lo=0.0, lo_open=True, shape=())
        check_value(own, "width", width, lo=0.0, lo_open=True, shape=())
        check_value(own, "axis", axis, shape=(3,))
        check_value(own, "pos", pos, shape=(3,))
        check_value(own, "theta2", theta2, lo=-_HALF_PI, hi=0.0, shape=())
        a = _f64(axis).reshape(3)
        if is_concrete(a) and not float(jnp.sum(a * a)) > 0:
            raise ValueError(f"{own}.axis = {np.asarray(axis).tolist()}: must be a nonzero "
                             "vector (the spin axis)")
        self.axis = a / jnp.sqrt(jnp.sum(a * a))
        self.pos = _f64(pos).reshape(3)
        self.radius, self.width = _f64(radius).reshape(()), _f64(width).reshape(())
        self.theta2 = _f64(theta2).reshape(())
        self.body, self.name = _body(own, body), name


class WheelSoilResult(eqx.Module):
    """Per wheel (nw,) at one state: ``sinkage`` z [m], ``theta1`` [rad], ``slip`` s,
    ``slip_angle`` β [rad], ``normal`` N [N] (≥ 0), ``drawbar_pull`` [N], ``torque`` T [N·m]
    (resistance), ``lateral`` [N], ``memory`` m [m] (the element state), ``frame`` (nw, 3, 3)
    the contact frames' axes [x, y, n] as columns, ``centre`` (nw, 3) [m], ``f_ext`` (nbody, 6),
    ``dstate`` (nw,) ṁ."""

    sinkage: jax.Array
    theta1: jax.Array
    slip: jax.Array
    slip_angle: jax.Array
    normal: jax.Array
    drawbar_pull: jax.Array
    torque: jax.Array
    lateral: jax.Array
    memory: jax.Array
    frame: jax.Array
    centre: jax.Array
    f_ext: jax.Array
    dstate: jax.Array


def _unit(x, fallback):
    s = jnp.sum(x * x)
    ok = s > 1e-24
    return jnp.where(ok, x / jnp.sqrt(jnp.where(ok, s, 1.0)), fallback)


def _sinkages(el, model, q):
    kin = kinematics(model, q, jnp.zeros(model.nv))
    c, a, _, _, _ = el._geometry(model, kin)
    return el._sinkage(c + kin.origin, a)[0]


def _per_wheel(soil: Soil, nw: int) -> Soil:
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (nw,)), soil)


class WheelSoil(AbstractGroundForce, AbstractStatefulForce):
    """Wheel–soil force element (Wong–Reece, :func:`wheel_forces`) for :func:`diffmb.simulate`.

    ``wheels``: :class:`Wheel` specs; ``terrain``: a Plane/HeightField; ``soil``: one
    :class:`Soil` shared by all wheels, a sequence of one per wheel, or a Soil with (nw,)
    fields (traced: ``force.<name>.soil.k_phi`` in :mod:`diffmb.optim`).

    Per wheel, at (q, v):

    * contact frame on the terrain under the wheel centre c: n the outward terrain normal there,
      x = a × n/|a × n| (a the world spin axis: the heading, tangent to the ground), y = n × x;
    * sinkage z = r |n − (n·a)a| − d (d the centre's signed distance to the terrain; the rim's
      deepest point along −n, exact for a cambered wheel on a plane), θ₁ = 2 asin √(z/2r);
    * speeds: v_x, v_y of the centre along x, y; spin ω = ω_wheel·a (``spin="absolute"``,
      default: the rim's slip velocity at the contact is v − rω with the wheel's absolute
      rotation, so a pitching carrier changes the slip) or (ω_wheel − ω_carrier)·a
      (``"relative"``: the wheel joint's rate, Xu et al. eq. 22); s and β from
      :func:`slip_ratio`, :func:`slip_angle` with ``v_eps``;
    * travel direction: the stress model assumes the soil enters in front (ω, v > 0). The
      forces are a blend w F(s) + (1 − w) F̃(−s), where F̃ is the same wheel mirrored
      front-to-back (DP and T change sign) and w the quintic smooth step from 0 at
      v_x = −v_ε to 1 at v_x = v_ε (C², w = ½ at rest): exact for |v_x| ≥ v_ε in either
      direction, continuous through v_x = 0, and zero DP and T for a wheel at rest;
    * soil memory (state m (nw,) [m], initially 0): the largest sinkage of the soil under the
      wheel. Loading (z ≥ m): Bekker/Wong–Reece, W_b(z). Unloading (z < m): W = W_b(m) ·
      max(0, 1 − κ(m − z)/m) (linear elastic unloading, ``soil.unloading`` κ). The memory
      follows ṁ = k_m max(z − m, 0) − max(m − z, 0)|v_x|/(r sin θ₁(m) + 1 mm): it tracks a
      deeper sinkage within 1/k_m (``memory_rate`` k_m = 500 s⁻¹) and relaxes as fresh soil
      arrives under a rolling wheel (one contact length travelled ≈ one time constant), so a
      wheel rolling steadily is on the loading curve (m = z: the static curves hold);
    * normal load N = max(λ W_b + d ż r b sin θ₁, 0) with λ = W/W_b ∈ [0, 1] the unloading
      factor, d = ``soil.damping`` and ż = −v·n: it never pulls; DP, T, F_y are scaled by
      N/W_b (all stresses scale with the normal load);
    * stresses (``stresses``): ``"wong_reece"`` (default, :func:`wheel_forces`) or
      ``"linearised"`` (Xu et al. eq. 26: :func:`linear_wheel_forces`, load eq. 28, torque
      eq. 30; θ₂ = 0 and ``lateral="eq32"`` required, the linear model has no lateral shear);
    * lateral force (``lateral``): ``"shear"`` (default) the lateral shear of
      :func:`wheel_forces` scaled by N/W_b; ``"eq32"`` Xu et al.'s eq. 32 with the element's
      N, F_y = −(c A + N tan φ) sign(β)(1 − exp(−B|β|)), A = b r (θ₁ − θ₂) the rim's contact
      area, B = ``lateral_B`` [1/rad] (required; the paper gives no value);
    * wrench on the wheel's body: force N n + DP x + F_y y at the wheel centre and the
      torque −T a about the axle, as f_ext (nbody, 6) [force, torque] at the body's com.

    Returns ``(tau = 0 (nv,), f_ext, ṁ (nw,))``; :meth:`evaluate` returns everything
    (:class:`WheelSoilResult`). Static options: ``n_nodes`` (quadrature), ``spin``;
    ``stresses`` and ``lateral`` are traced switches (elements that differ only in them share
    one compiled simulation). Generic
    contacts (:class:`~diffmb.contacts.Contacts`) must not also hold the wheel geoms.
    """

    wheels: tuple
    terrain: AbstractTerrain
    soil: Soil
    v_eps: jnp.ndarray
    memory_rate: jnp.ndarray
    lateral_B: jnp.ndarray
    # traced switches, 1.0 or 0.0 (floats, so that jax.grad of the element accepts them)
    eq32: jnp.ndarray  # lateral="eq32"
    linearised: jnp.ndarray  # stresses="linearised"
    n_nodes: int = eqx.field(static=True)
    spin: str = eqx.field(static=True)

    def __init__(self, wheels, terrain, soil, *, model: Model | None = None, v_eps=V_EPS,
                 memory_rate=500.0, n_nodes: int = 32, spin: str = "absolute",
                 lateral: str = "shear", lateral_B=None, stresses: str = "wong_reece"):
        wheels = (wheels,) if isinstance(wheels, Wheel) else tuple(wheels)
        if not wheels:
            raise ValueError("WheelSoil.wheels: give at least one wheel")
        for i, w in enumerate(wheels):
            if not isinstance(w, Wheel):
                raise TypeError(f"WheelSoil.wheels[{i}] = {w!r}: not a Wheel")
        if not isinstance(terrain, AbstractTerrain):
            raise TypeError(f"WheelSoil.terrain = {terrain!r}: not a terrain (Plane, "
                            "HeightField)")
        check_choice("WheelSoil", "spin", spin, ("absolute", "relative"))
        check_choice("WheelSoil", "lateral", lateral, ("shear", "eq32"))
        check_choice("WheelSoil", "stresses", stresses, ("wong_reece", "linearised"))
        if stresses == "linearised":
            if lateral != "eq32":
                raise ValueError("WheelSoil: stresses='linearised' has no lateral shear; give "
                                 "lateral='eq32' and lateral_B")
            for i, w in enumerate(wheels):
                if is_concrete(w.theta2) and float(w.theta2) != 0.0:
                    raise ValueError(f"WheelSoil.wheels[{i}].theta2 = {float(w.theta2):g}: the "
                                     "linearised stresses (eq. 26) need theta2 = 0")
        if lateral == "eq32":
            if lateral_B is None:
                raise ValueError("WheelSoil: lateral='eq32' needs lateral_B [1/rad] (eq. 32's "
                                 "B; Xu et al. give no value)")
            check_value("WheelSoil", "lateral_B", lateral_B, lo=0.0, lo_open=True, shape=())
        elif lateral_B is not None:
            raise ValueError("WheelSoil: lateral_B is eq. 32's constant; give it with "
                             "lateral='eq32'")
        check_value("WheelSoil", "v_eps", v_eps, lo=0.0, lo_open=True, shape=())
        check_value("WheelSoil", "memory_rate", memory_rate, lo=0.0, lo_open=True, shape=())
        if isinstance(n_nodes, (bool, np.bool_)) or not isinstance(n_nodes, (int, np.integer)):
            raise TypeError(f"WheelSoil.n_nodes = {n_nodes!r}: must be an integer")
        check_value("WheelSoil", "n_nodes", n_nodes, lo=1)
        nw = len(wheels)
        if isinstance(soil, Soil):
            for k in _SOIL_RANGES:
                shp = np.shape(getattr(soil, k))
                if shp not in ((), (1,), (nw,)):
                    raise TypeError(f"WheelSoil.soil.{k}: expected one value or one per wheel "
                                    f"({nw},), got shape {shp}")
            soil = _per_wheel(soil, nw)
        else:
            soils = list(soil)
            if len(soils) != nw:
                raise ValueError(f"WheelSoil.soil: {len(soils)} soils for {nw} wheels")
            for i, so in enumerate(soils):
                if not isinstance(so, Soil):
                    raise TypeError(f"WheelSoil.soil[{i}] = {so!r}: not a Soil")
            soil = jax.tree.map(lambda *xs: jnp.stack([jnp.reshape(x, ()) for x in xs]), *soils)
        if model is not None:
            for i, w in enumerate(wheels):
                body_index(model, w.body, f"WheelSoil.wheels[{i}]")
        self.wheels, self.terrain, self.soil = wheels, terrain, soil
        self.v_eps = _f64(v_eps).reshape(())
        self.memory_rate = _f64(memory_rate).reshape(())
        self.lateral_B = _f64(1.0 if lateral_B is None else lateral_B).reshape(())
        self.eq32 = jnp.asarray(float(lateral == "eq32"), jnp.float64)
        self.linearised = jnp.asarray(float(stresses == "linearised"), jnp.float64)
        self.n_nodes, self.spin = int(n_nodes), spin

    @property
    def wheel_names(self) -> tuple:
        return tuple(w.name if w.name is not None else f"wheel{i}"
                     for i, w in enumerate(self.wheels))

    @property
    def lateral(self) -> str:
        """The lateral force law given: "shear" or "eq32" (outside a trace)."""
        return "eq32" if float(self.eq32) > 0.5 else "shear"

    @property
    def stresses(self) -> str:
        """The stress model given: "wong_reece" or "linearised" (outside a trace)."""
        return "linearised" if float(self.linearised) > 0.5 else "wong_reece"

    def init_state(self, model):
        return jnp.zeros(len(self.wheels))

    def check_initial(self, model: Model, q) -> None:
        """Refuse a wheel whose initial sinkage exceeds its radius (the centre below the
        ground: outside the stress model, θ₁ ≤ π/2), naming the wheel and the sinkage."""
        z = self._initial_values(_sinkages, model, q)
        if z is None:
            return
        for w, name, zi in zip(self.wheels, self.wheel_names, z, strict=True):
            r = float(w.radius)
            if zi > r:
                raise ValueError(
                    f"{model.name}: wheel {name!r} starts {zi:.4g} m deep in terrain "
                    f"{self.terrain.name!r}, more than its radius {r:.4g} m (the stress model "
                    "holds up to a sinkage of one radius): start it on or above the ground")

    def _geometry(self, model, kin):
        """Per wheel: centre (rel. origin), world axis, ω_spin, centre velocity, body index."""
        Rb, pb = body_frames(model, kin)
        topo = kin.topo
        bodies = [body_index(model, w.body) for w in self.wheels]
        bi = np.asarray(bodies)
        R = Rb[bi]  # (nw, 3, 3): all wheels at once
        c = pb[bi] + jnp.einsum("wij,wj->wi", R, jnp.stack([w.pos for w in self.wheels]))
        a = jnp.einsum("wij,wj->wi", R, jnp.stack([w.axis for w in self.wheels]))
        om, vc = point_velocities(kin, c, bodies)
        if self.spin == "relative":
            rows = []
            for k in bodies:
                node = model.body_node[k]
                parent = model.node_parent[node] if node >= 0 else -1
                rows.append(kin.vel[topo.pos[parent], :3] if parent >= 0 else jnp.zeros(3))
            om = om - jnp.stack(rows)
        return c, a, jnp.sum(om * a, axis=-1), vc, bodies

    def _sinkage(self, cw, a):
        """Sinkage z (nw,) and terrain normal n (nw, 3) of the wheels with world centres cw
        and world axes a (nw, 3): the rim's deepest point below the terrain."""
        d, n = jax.vmap(self.terrain.signed_distance)(cw)
        r = jnp.stack([w.radius for w in self.wheels])
        u = n - jnp.sum(n * a, axis=-1, keepdims=True) * a
        un = jnp.sqrt(jnp.maximum(jnp.sum(u * u, axis=-1), 1e-24))
        return jnp.maximum(r * un - d, 0.0), n

    def evaluate(self, model: Model, q, v, state=None) -> WheelSoilResult:
        """Every per-wheel quantity at (q, v) and memory ``state`` (default zeros)."""
        nw = len(self.wheels)
        m = jnp.zeros(nw) if state is None else state
        kin = kinematics(model, q, v)
        c, a, om, vc, bodies = self._geometry(model, kin)
        cw = c + kin.origin
        z, n = self._sinkage(cw, a)
        r = jnp.stack([w.radius for w in self.wheels])
        b = jnp.stack([w.width for w in self.wheels])
        t2 = jnp.stack([w.theta2 for w in self.wheels])
        xh = jax.vmap(_unit)(jnp.cross(a, n), jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0]),
                                                             (nw, 3)))
        y = jnp.cross(n, xh)
        vx, vy = jnp.sum(vc * xh, -1), jnp.sum(vc * y, -1)
        zdot = -jnp.sum(vc * n, -1)
        eps = self.v_eps
        s = slip_ratio(vx, om, r, eps)
        beta = slip_angle(vx, vy, eps)
        tb = jnp.tan(beta)
        th1 = entry_angle(z, r)
        th1m = entry_angle(m, r)
        tt = jnp.clip(0.5 * (vx / eps + 1.0), 0.0, 1.0)
        wf = tt**3 * (10.0 - 15.0 * tt + 6.0 * tt**2)  # C² step: exactly 1 for v_x ≥ v_ε
        nn = self.n_nodes

        two = lambda x: jnp.tile(jnp.broadcast_to(x, (nw,)), 2)  # noqa: E731
        th = jnp.concatenate([th1, th1m])

        def linear(so, r_, b_, t2_, t1_, s_, tb_):
            return linear_wheel_forces(so, r_, b_, t1_, jnp.clip(s_, -1.0, 1.0))

        def wong_reece(so, r_, b_, t2_, t1_, s_, tb_):
            return wheel_forces(so, r_, b_, t1_, s_, theta2=t2_, tan_beta=tb_, n_nodes=nn)

        def at(sl):  # forces at the sinkage and the load at the memory angle, for slip sl, in
            # one batch of 2 nw quadratures (fewer kernels than two calls); the closed-form
            # linearised forces beside them, selected (finite values and derivatives both)
            ins = (jax.tree.map(two, self.soil), two(r), two(b), two(t2), th, two(sl), two(tb))
            F = jax.tree.map(lambda x, y: jnp.where(self.linearised > 0.5, y, x),
                             jax.vmap(wong_reece)(*ins), jax.vmap(linear)(*ins))
            return jax.tree.map(lambda x: x[:nw], F), F.load[nw:]

        def blended(FW):  # with the mirrored wheel, w F(s) + (1 − w) F̃(−s)
            (F, WmF), (G, WmG) = FW, at(-s)
            wb = 1.0 - wf
            return (WheelForces(wf * F.load + wb * G.load,
                                wf * F.drawbar_pull - wb * G.drawbar_pull,
                                wf * F.torque - wb * G.torque,
                                wf * F.lateral + wb * G.lateral), wf * WmF + wb * WmG)

        # the mirrored wheel only where some wheel moves slower than v_ε forwards (w < 1;
        # w = 1 gives F exactly): skipped in steady driving (batch 1; under vmap both run)
        Fz, Wm = jax.lax.cond(jnp.any(wf < 1.0), blended, lambda FW: FW, at(s))
        Wb = Fz.load
        kap = self.soil.unloading
        line = Wm * jnp.maximum(1.0 - kap * safe_div(m - z, m), 0.0)
        lam = jnp.where(z >= m, 1.0, jnp.minimum(safe_div(line, Wb, 1.0), 1.0))
        Wd = self.soil.damping * zdot * r * b * jnp.sin(th1)
        N = jnp.where(z > 0, jnp.maximum(lam * Wb + Wd, 0.0), 0.0)
        scale = safe_div(N, Wb)
        DP, T = scale * Fz.drawbar_pull, scale * Fz.torque
        area = b * r * (th1 - t2)
        Fy = jnp.where(self.eq32 > 0.5, -(self.soil.c * area + N * jnp.tan(self.soil.phi))
                       * _saturation(beta, 1.0 / self.lateral_B), scale * Fz.lateral)
        L = r * jnp.sin(th1m) + 1e-3
        dm = self.memory_rate * jnp.maximum(z - m, 0.0) - jnp.maximum(m - z, 0.0) * \
            jnp.abs(vx) / L
        force = N[:, None] * n + DP[:, None] * xh + Fy[:, None] * y
        com = body_coms(model, kin)[np.asarray(bodies)]
        torque = jnp.cross(c - com, force) - T[:, None] * a
        f_ext = jnp.zeros((model.n_bodies, 6)).at[np.asarray(bodies)].add(
            jnp.concatenate([force, torque], axis=1))
        frame = jnp.stack([xh, y, n], axis=-1)
        return WheelSoilResult(z, th1, s, beta, N, DP, T, Fy, m, frame, cw, f_ext, dm)

    def stateful_call(self, model, t, q, v, ctrl, state):
        res = self.evaluate(model, q, v, state)
        return jnp.zeros(model.nv), res.f_ext, res.dstate
