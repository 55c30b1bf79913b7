"""Hub–beam–tip flexible arm of Zhao et al. (2012), eqs. 1–4, derived from the energies.

Geometry and sign conventions. The hub A turns by θ about its y axis; the tube B (Euler–Bernoulli,
planar, ``n`` equal Hermite elements, see :mod:`diffmb.formulations.fem`) is clamped to the hub at
radius ``r_a`` along x_a and bends in the x_a–z_a plane with deflection w(x) along +z_a; the
rigid tip body C (mass ``m_c``, inertia ``J_cy`` about its centre O_c) sits at the beam tip.
With ω = θ̇ e_y, ``e_y × e_x = −e_z``, and a tip slope w' = dw/dx rotates C about y by −w'.
Linear kinematics (the paper's assumption 4, no centrifugal stiffening):

    v_b(x) = (ẇ(x) − (r_a + x) θ̇) e_z,   v_C = (ẇ_L − R θ̇) e_z,  ω_C = (θ̇ − ẇ'_L) e_y,
    R = r_a + l_b.

Kinetic energy ``2T = J_ay θ̇² + ∫ρA (ẇ − (r_a + x)θ̇)² dx + m_c (ẇ_L − R θ̇)² + J_cy (θ̇ − ẇ'_L)²``
and strain energy ``2U = ∫ EI w''² dx`` give eq. 3 with

    J = J_ay + ∫ρA (r_a + x)² dx + m_c R² + J_cy
    I = −(r_a s0 + s1) − m_c R P_w − J_cy P_θ          (s0 = ∫ρA N, s1 = ∫ρA x N)
    M = Σ Pᵀ Mᵉ P + m_c P_wᵀ P_w + J_cy P_θᵀ P_θ,   K = Σ Pᵀ Kᵉ P

where P_w, P_θ pick the tip deflection w_L and slope w'_L. The paper prints
``I = 2 J_cy P_θ − m_c (r_a + r_b) P_w − ρ_x Σ ∫(…) N P`` (eq. 4): its θ_p is the tip rotation
about +y (= −w'_L here), so its sign agrees with ours, but the factor 2 does not: the cross term
of ½ J_cy (θ̇ + θ̇_p)² is J_cy θ̇ θ̇_p, whose Lagrange derivative gives a coupling J_cy.
:func:`paper_coupling` builds the printed expression (used only to reproduce Table 1 as printed).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array

from ..formulations import fem

__all__ = ["FlexibleArm", "paper_arm", "system_matrices", "paper_coupling", "tip_dofs"]


class FlexibleArm(eqx.Module):
    """Parameters of the hub–beam–tip arm (SI units); ``n_el`` is static."""

    J_ay: Array  # hub inertia about its y axis, kg m²
    r_a: Array  # hub radius (O_a to beam root), m
    rho: Array  # tube density, kg/m³
    D_o: Array  # tube outer diameter, m
    D_i: Array  # tube inner diameter, m
    l_b: Array  # beam length, m
    E: Array  # Young's modulus, Pa
    J_cy: Array  # tip body inertia about its own y axis, kg m²
    m_c: Array  # tip body mass, kg
    n_el: int = eqx.field(static=True, default=10)

    def __check_init__(self):
        import jax
        import numpy as np

        for name in ("J_ay", "rho", "D_o", "l_b", "E", "m_c"):
            v = getattr(self, name)
            if isinstance(v, jax.core.Tracer):
                continue
            if not np.all(np.asarray(v) > 0.0):
                raise ValueError(f"FlexibleArm.{name} must be positive, got {v}")
        if not any(isinstance(v, jax.core.Tracer) for v in (self.D_i, self.D_o)):
            if not np.all((np.asarray(self.D_i) >= 0.0) & (np.asarray(self.D_i) < self.D_o)):
                raise ValueError("FlexibleArm.D_i must satisfy 0 <= D_i < D_o")
        if self.n_el < 1:
            raise ValueError(f"FlexibleArm.n_el must be >= 1, got {self.n_el}")

    @property
    def ndof(self) -> int:
        """Number of elastic dofs (root clamped): 2 n_el."""
        return 2 * self.n_el


def paper_arm(n_el: int = 10, **overrides) -> FlexibleArm:
    """The paper's case (section 3): J_ay = 40 kg m², r_a = 0.5 m, ρ = 100 kg/m³, D_o = 0.2 m,
    D_i = 0.198 m, l_b = 10 m, E = 1 GPa, J_cy = 2 kg m², m_c = 2 kg."""
    p = dict(J_ay=40.0, r_a=0.5, rho=100.0, D_o=0.2, D_i=0.198, l_b=10.0, E=1.0e9, J_cy=2.0,
             m_c=2.0)
    p.update(overrides)
    return FlexibleArm(**{k: jnp.asarray(v, dtype=jnp.float64) for k, v in p.items()}, n_el=n_el)


def tip_dofs(arm: FlexibleArm) -> tuple[int, int]:
    """Indices of (w_L, w'_L) in the elastic coordinate vector d."""
    return arm.ndof - 2, arm.ndof - 1


def _beam(arm: FlexibleArm):
    area, inertia = fem.tube_section(arm.D_o, arm.D_i)
    rho_a = arm.rho * area
    Mb, Kb = fem.beam_matrices(arm.E * inertia, rho_a, arm.l_b, arm.n_el)
    ints = fem.beam_inertia_integrals(rho_a, arm.l_b, arm.n_el)
    clamp = (0, 1)
    M = fem.apply_dirichlet(Mb, clamp)
    K = fem.apply_dirichlet(Kb, clamp)
    s0 = fem.apply_dirichlet(ints["s0"], clamp)
    s1 = fem.apply_dirichlet(ints["s1"], clamp)
    return M, K, s0, s1, ints


@eqx.filter_jit
def system_matrices(arm: FlexibleArm) -> tuple[Array, Array, Array, Array]:
    """``(J (), I (n,), M (n, n), K (n, n))`` of eq. 3 from the derivation above."""
    M, K, s0, s1, ints = _beam(arm)
    iw, it = tip_dofs(arm)
    R = arm.r_a + arm.l_b
    n = arm.ndof
    Pw = jnp.zeros(n).at[iw].set(1.0)
    Pt = jnp.zeros(n).at[it].set(1.0)
    J = arm.J_ay + (arm.r_a**2 * ints["m"] + 2.0 * arm.r_a * ints["m1"] + ints["m2"]) \
        + arm.m_c * R**2 + arm.J_cy
    I = -(arm.r_a * s0 + s1) - arm.m_c * R * Pw - arm.J_cy * Pt
    M = M + arm.m_c * jnp.outer(Pw, Pw) + arm.J_cy * jnp.outer(Pt, Pt)
    return J, I, M, K


@eqx.filter_jit
def paper_coupling(arm: FlexibleArm) -> Array:
    """The coupling I of eq. 4 as printed (``2 J_cy P_θ`` with P_θ picking θ_p = −w'_L)."""
    _, _, s0, s1, _ = _beam(arm)
    iw, it = tip_dofs(arm)
    n = arm.ndof
    Pw = jnp.zeros(n).at[iw].set(1.0)
    P_thetap = jnp.zeros(n).at[it].set(-1.0)  # θ_p = −w'_L
    return 2.0 * arm.J_cy * P_thetap - arm.m_c * (arm.r_a + arm.l_b) * Pw - (arm.r_a * s0 + s1)


def sampled_response(arm: FlexibleArm, zeta, torque: Array, dt) -> dict[str, Array]:
    """Exact response from rest to a zero-order-held hub torque ``torque`` (nt,) sampled every
    ``dt``, with modal damping ratio ``zeta`` on every elastic system mode (all 2n kept, so this
    is eq. 3 plus modal damping). Returns ``{"theta", "tip_deflection", "tip_slope"}``, (nt,)
    each: hub angle θ, tip deflection w_L (along +z_a) and tip slope w'_L."""
    from ..formulations import modal

    J, I, M, K = system_matrices(arm)
    modes = modal.unconstrained_modes(J, I, M, K)
    theta, d = modal.unconstrained_zoh_response(modes, zeta, torque[:, None], dt)
    iw, it = tip_dofs(arm)
    return {"theta": theta[:, 0], "tip_deflection": d[:, iw], "tip_slope": d[:, it]}
