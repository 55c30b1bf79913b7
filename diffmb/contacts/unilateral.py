"""Unilateral wheel–ground contact (Xu, Ju, Yu & Gu 2021, eqs. 33–42) with Bekker/Wong–Reece
traction: each wheel's normal force is the multiplier of a unilateral constraint on its contact
point's normal acceleration, and its traction, lateral force and resistance torque are that
multiplier times the wheel–soil model's forces per unit normal load."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics.configuration import qdot
from ..dynamics.kinematics import body_coms, body_frames, kinematics, point_velocities
from ..forces.elements import AbstractStatefulForce
from ..forces.unilateral import AbstractUnilateral, UnilateralRows
from ..model import Model
from ..spatial.safe import safe_div
from ..validation import check_value, is_concrete
from .geometry import body_index
from .terrain import AbstractTerrain
from .terramechanics import (
    V_EPS,
    Soil,
    Wheel,
    WheelForces,
    _per_wheel,
    _unit,
    entry_angle,
    slip_angle,
    slip_ratio,
    wheel_forces,
)

__all__ = ["UnilateralWheelSoil", "UnilateralWheelResult"]


class UnilateralWheelResult(eqx.Module):
    """Per wheel (nw,) at one state, per unit normal force: ``separation`` s [m] (the rim's
    distance above its contact depth: s = d − r|n − (n·a)a| + z₀, d the centre's terrain
    distance), ``separation_rate`` ṡ [m/s], ``slip``, ``slip_angle`` [rad], ``traction``
    DP/W_b, ``lateral`` F_y/W_b, ``torque`` T/W_b [m] (resistance), ``frame`` (nw, 3, 3) the
    contact axes [x, y, n] as columns, ``centre`` (nw, 3) world [m]."""

    separation: jax.Array
    separation_rate: jax.Array
    slip: jax.Array
    slip_angle: jax.Array
    traction: jax.Array
    lateral: jax.Array
    torque: jax.Array
    frame: jax.Array
    centre: jax.Array


class UnilateralWheelSoil(AbstractUnilateral, AbstractStatefulForce):
    """The paper's unilateral wheel–ground contact (eqs. 33–42) as a force element.

    Per wheel i, with the geometry of :class:`~diffmb.contacts.terramechanics.WheelSoil`
    (contact frame x, y, n on the terrain under the wheel centre, world spin axis a, slip s and
    slip angle β of the centre's velocity and the wheel's absolute spin):

    * sinkage: held at ``sinkage`` z₀ (nw,) [m] (a rule the caller states, e.g. the static
      sinkage under the nominal load); θ₁₀ = acos(1 − z₀/r);
    * separation s_i(q) = d − r|n − (n·a)a| + z₀ (zero when the rim's deepest point is z₀
      below the terrain); the constraint row is its acceleration with Baumgarte's
      stabilisation, w_i = s̈_i + 2 ṡ_i/τ + s_i/τ² ≥ 0 (critically damped, τ =
      ``time_constant``), for the wheels with s_i ≤ ``margin``; the others carry no force;
    * multiplier f_i ≥ 0, f_i w_i = 0 (eqs. 40–42): the normal force N_i = f_i;
    * forces per unit f_i: n + ρ_x x + ρ_y y at the wheel centre and the torque −ρ_T a about
      the axle, ρ = (DP, F_y, T)/W_b of :func:`~diffmb.contacts.terramechanics.wheel_forces` at
      θ₁₀ and the current slip and slip angle (Wong–Reece stresses with the lateral shear; the
      travel blend of WheelSoil for |v_x| < ``v_eps``: zero traction and torque at rest), so
      the resultant is proportional to the normal force (one unilateral row per wheel).

    J = ∂s/∂q q̇(q, ·) and J̇v come from forward-mode derivatives of s along the motion (exact
    for any terrain with a C¹ surface; a Catmull–Rom height field's curvature jumps at cell
    edges). The multipliers are solved with the couplings held (:func:`diffmb.forces.unilateral.
    solve_lcp`: exact enumeration of the 2^nw active sets). Its state (nw,) [N s] is the
    impulse of each wheel's normal force, ∫ f dt (zero at the start): the mean normal forces
    between saves are its differences over the save interval.

    Checked: wheels are :class:`~diffmb.contacts.terramechanics.Wheel`, one soil (or one per
    wheel), 0 ≤ z₀ < r, τ > 0, margin ≥ 0, v_eps > 0, n_nodes ≥ 1, at most 10 wheels.
    """

    wheels: tuple
    terrain: AbstractTerrain
    soil: Soil
    sinkage: jnp.ndarray
    time_constant: jnp.ndarray
    margin: jnp.ndarray
    v_eps: jnp.ndarray
    n_nodes: int = eqx.field(static=True)

    def __init__(self, wheels, terrain, soil, sinkage, *, model: Model | None = None,
                 time_constant=0.02, margin=5e-3, v_eps=V_EPS, n_nodes: int = 6):
        own = "UnilateralWheelSoil"
        wheels = (wheels,) if isinstance(wheels, Wheel) else tuple(wheels)
        if not wheels:
            raise ValueError(f"{own}.wheels: give at least one wheel")
        if len(wheels) > 10:
            raise ValueError(f"{own}.wheels: {len(wheels)} wheels; the complementarity solve "
                             "enumerates 2^nw active sets and takes at most 10")
        for i, w in enumerate(wheels):
            if not isinstance(w, Wheel):
                raise TypeError(f"{own}.wheels[{i}] = {w!r}: not a Wheel")
        if not isinstance(terrain, AbstractTerrain):
            raise TypeError(f"{own}.terrain = {terrain!r}: not a terrain (Plane, HeightField)")
        if not isinstance(soil, Soil):
            raise TypeError(f"{own}.soil = {soil!r}: not a Soil")
        nw = len(wheels)
        z0 = jnp.broadcast_to(jnp.asarray(sinkage, dtype=jnp.float64), (nw,)) \
            if np.ndim(sinkage) == 0 else jnp.asarray(sinkage, dtype=jnp.float64)
        check_value(own, "sinkage", z0, lo=0.0, shape=(nw,))
        if is_concrete(z0):
            r = np.array([float(w.radius) for w in wheels])
            bad = np.flatnonzero(np.asarray(z0) >= r)
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"{own}.sinkage[{i}] = {float(z0[i]):.4g} m: must be below the "
                                 f"wheel's radius {r[i]:.4g} m")
        check_value(own, "time_constant", time_constant, lo=0.0, lo_open=True, shape=())
        check_value(own, "margin", margin, lo=0.0, shape=())
        check_value(own, "v_eps", v_eps, lo=0.0, lo_open=True, shape=())
        if isinstance(n_nodes, (bool, np.bool_)) or not isinstance(n_nodes, (int, np.integer)):
            raise TypeError(f"{own}.n_nodes = {n_nodes!r}: must be an integer")
        check_value(own, "n_nodes", n_nodes, lo=1)
        if model is not None:
            for i, w in enumerate(wheels):
                body_index(model, w.body, f"{own}.wheels[{i}]")
        self.wheels, self.terrain = wheels, terrain
        self.soil = _per_wheel(soil, nw)
        self.sinkage = z0
        self.time_constant = jnp.asarray(time_constant, dtype=jnp.float64).reshape(())
        self.margin = jnp.asarray(margin, dtype=jnp.float64).reshape(())
        self.v_eps = jnp.asarray(v_eps, dtype=jnp.float64).reshape(())
        self.n_nodes = int(n_nodes)

    @property
    def wheel_names(self) -> tuple:
        return tuple(w.name if w.name is not None else f"wheel{i}"
                     for i, w in enumerate(self.wheels))

    def n_rows(self, model: Model) -> int:
        return len(self.wheels)

    def init_state(self, model):
        return jnp.zeros(len(self.wheels))

    def stateful_call(self, model, t, q, v, ctrl, state):
        # the rate of the impulses is set to the multipliers by the solve (AbstractUnilateral)
        return jnp.zeros(model.nv), None, jnp.zeros(len(self.wheels))

    def __call__(self, model, t, q, v, ctrl):
        return AbstractUnilateral.__call__(self, model, t, q, v, ctrl)

    def _bodies(self, model):
        return [body_index(model, w.body) for w in self.wheels]

    def _centres(self, model, kin):
        """World-axis centres relative to ``kin.origin`` and spin axes (nw, 3) of the wheels."""
        Rb, pb = body_frames(model, kin)
        bi = np.asarray(self._bodies(model))
        R = Rb[bi]
        c = pb[bi] + jnp.einsum("wij,wj->wi", R, jnp.stack([w.pos for w in self.wheels]))
        a = jnp.einsum("wij,wj->wi", R, jnp.stack([w.axis for w in self.wheels]))
        return c, a

    def separation(self, model: Model, q):
        """s (nw,) [m] at q: the rim's deepest point's height above the contact depth z₀."""
        kin = kinematics(model, q, jnp.zeros(model.nv))
        c, a = self._centres(model, kin)
        d, n = jax.vmap(self.terrain.signed_distance)(c + kin.origin)
        r = jnp.stack([w.radius for w in self.wheels])
        u = n - jnp.sum(n * a, axis=-1, keepdims=True) * a
        un = jnp.sqrt(jnp.maximum(jnp.sum(u * u, axis=-1), 1e-24))
        return d - r * un + self.sinkage

    def _sdot(self, model, q, v):
        """ṡ (nw,) at (q, v): the separations' rate along q̇(q, v) (linear in v)."""
        return jax.jvp(lambda x: self.separation(model, x), (q,), (qdot(model, q, v),))[1]

    def _jacobian(self, model, q):
        """J (nw, nv) = ∂ṡ/∂v, taken at v = 0 (ṡ is linear in v), so that it does not depend
        on v (an implicit step's ∂a/∂v then does not differentiate it again)."""
        return jax.jacfwd(lambda vv: self._sdot(model, q, vv))(jnp.zeros(model.nv))

    def evaluate(self, model: Model, q, v) -> UnilateralWheelResult:
        """Every per-wheel quantity at (q, v) (per unit normal force)."""
        return self._evaluate(model, q, v, self._jacobian(model, q))[0]

    def _evaluate(self, model, q, v, J):
        nw = len(self.wheels)
        s, sd = self.separation(model, q), J @ v
        kin = kinematics(model, q, v)
        c, a = self._centres(model, kin)
        bodies = self._bodies(model)
        om, vc = point_velocities(kin, c, bodies)
        om = jnp.sum(om * a, axis=-1)
        _, n = jax.vmap(self.terrain.signed_distance)(c + kin.origin)
        xh = jax.vmap(_unit)(jnp.cross(a, n), jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0]),
                                                             (nw, 3)))
        y = jnp.cross(n, xh)
        vx, vy = jnp.sum(vc * xh, -1), jnp.sum(vc * y, -1)
        r = jnp.stack([w.radius for w in self.wheels])
        b = jnp.stack([w.width for w in self.wheels])
        t2 = jnp.stack([w.theta2 for w in self.wheels])
        eps = self.v_eps
        sl = slip_ratio(vx, om, r, eps)
        beta = slip_angle(vx, vy, eps)
        tb = jnp.tan(beta)
        th0 = entry_angle(self.sinkage, r)
        tt = jnp.clip(0.5 * (vx / eps + 1.0), 0.0, 1.0)
        wf = tt**3 * (10.0 - 15.0 * tt + 6.0 * tt**2)  # WheelSoil's travel blend
        nn = self.n_nodes

        def at(sv):
            return jax.vmap(lambda so, r_, b_, t2_, t1_, s_, tb_: wheel_forces(
                so, r_, b_, t1_, s_, theta2=t2_, tan_beta=tb_, n_nodes=nn))(
                self.soil, r, b, t2, th0, sv, tb)

        def blended(F):  # w F(s) + (1 − w) F̃(−s), F̃ the wheel mirrored front to back
            G, wb = at(-sl), 1.0 - wf
            return WheelForces(wf * F.load + wb * G.load,
                               wf * F.drawbar_pull - wb * G.drawbar_pull,
                               wf * F.torque - wb * G.torque, wf * F.lateral + wb * G.lateral)

        F = jax.lax.cond(jnp.any(wf < 1.0), blended, lambda F: F, at(sl))
        ev = UnilateralWheelResult(
            s, sd, sl, beta, safe_div(F.drawbar_pull, F.load), safe_div(F.lateral, F.load),
            safe_div(F.torque, F.load), jnp.stack([xh, y, n], axis=-1), c + kin.origin)
        return ev, kin, c, a

    def rows(self, model: Model, t, q, v) -> UnilateralRows:
        J = self._jacobian(model, q)
        ev, kin, c, a = self._evaluate(model, q, v, J)
        Jdv = jax.jvp(lambda qq: self._sdot(model, qq, v), (q,), (qdot(model, q, v),))[1]
        tc = self.time_constant
        drift = Jdv + 2.0 * ev.separation_rate / tc + ev.separation / (tc * tc)
        bodies = np.asarray(self._bodies(model))
        xh, y, n = ev.frame[..., 0], ev.frame[..., 1], ev.frame[..., 2]
        force = n + ev.traction[:, None] * xh + ev.lateral[:, None] * y
        com = body_coms(model, kin)[bodies]
        torque = jnp.cross(c - com, force) - ev.torque[:, None] * a
        nw = len(self.wheels)
        f_ext = jnp.zeros((nw, model.n_bodies, 6)).at[np.arange(nw), bodies].set(
            jnp.concatenate([force, torque], axis=1))
        return UnilateralRows(J, drift, jnp.zeros((nw, model.nv)), f_ext,
                              ev.separation <= self.margin)
