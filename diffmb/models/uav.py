"""The diamond joined-wing UAV of Wu et al. (2019): airframe b + two propellers c (left) and d (right).

World frame NED (x north, y east, z down; gravity +9.81 along z); body axes x forward, y right
wing, z down. State x (13,) = [r (3), q (4, scalar-first, body -> world), V (3) = rdot world,
omega (3) body rates], with r the airframe's centre of mass (the paper's reference point).

Rotor directions: both rotors' axes are +x_b (tractor, thrust forward). The left rotor c spins
at +Omega about +x_b (clockwise seen from behind), the right rotor d at -Omega (counter-clockwise
seen from behind): equal and opposite spin momenta and torques, so at the paper's flight
condition the gyroscopic and torque couplings cancel and the motion stays symmetric.

Every number is a traced leaf of :class:`UAVParams`; the table with units and reasoning is in
``diffmb/studies/uav.py``'s report (and :data:`PARAM_TABLE`).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..forces.aero import (
    AeroDerivatives,
    PropellerParams,
    air_data,
    body_aero,
    propeller_thrust_torque,
)
from ..formulations import quaternion_lagrange as ql
from ..formulations import rotor_kane as kane
from ..spatial import quaternion as quat
from ..spatial import rotation
from ..systems import AbstractODESystem, check_initial

__all__ = [
    "UAVParams",
    "PARAM_TABLE",
    "default_params",
    "initial_state",
    "controls",
    "rotor_speeds",
    "force_law",
    "rotor_body",
    "kane_system",
    "rhs_lagrange",
    "rhs_lagrange_closed",
    "rhs_kane",
    "make_rhs_tree",
    "tree_rhs",
    "rhs_printed",
    "mjcf_string",
    "UAVSystem",
    "fly",
    "flight_outputs",
]

G0 = 9.81

# name: (value, unit, reasoning)
PARAM_TABLE = {
    "m_b": (2.20, "kg", "airframe of a ~1.6 m span foam/composite joined-wing UAV with battery"),
    "Jb_xx": (0.160, "kg m^2", "roll inertia ~ m (0.27 b)^2, mass spread along two joined wings"),
    "Jb_yy": (0.090, "kg m^2", "pitch inertia, short fuselage, front and rear wings ~0.3 m apart"),
    "Jb_zz": (0.240, "kg m^2", "~ Jxx + Jyy (thin planform), kept below the sum (triangle ineq.)"),
    "Jb_xz": (-0.008, "kg m^2", "tensor entry -I_xz: small product of inertia from the fin"),
    "m_rotor": (0.060, "kg", "16x10 in propeller + spinner + motor bell, each rotor"),
    "Jax_rotor": (4.2e-4, "kg m^2", "axial: 2-blade 0.40 m prop m L^2/12 + bell, each rotor"),
    "Jt_rotor": (2.1e-4, "kg m^2", "transverse: axisymmetric (disc) idealisation, Jax / 2"),
    "rotor_x": (0.25, "m", "props ahead of the airframe centre of mass (tractor on front wing)"),
    "rotor_y": (0.35, "m", "+-0.35 m: 0.40 m discs clear the fuselage"),
    "rotor_z": (0.02, "m", "thrust line 2 cm below the c.g. (NED z down): small nose-up moment"),
    "rpm": (2000.0, "rev/min", "Wu et al. (2019): both propellers at 2000 r/min, opposite directions"),
    "prop_D": (0.40, "m", "16 in propeller, big and slow for 2000 r/min"),
    "prop_ct": ((0.110, -0.090, 0.0), "-", "C_T(J) = 0.11 - 0.09 J: P/D ~ 1, zero thrust at J ~ 1.2"),
    "prop_cq": ((0.0080, -0.0030, 0.0), "-", "C_Q(J): C_P = 2 pi C_Q ~ 0.05 at static thrust"),
    "rho": (1.225, "kg/m^3", "ISA sea level (60 m altitude: 0.7 % lower, ignored)"),
    "S": (0.55, "m^2", "reference area of the two joined wings"),
    "b": (1.60, "m", "span"),
    "c": (0.35, "m", "mean aerodynamic chord ~ S / b"),
    "CL0": (0.30, "-", "cambered sections, wing incidence"),
    "CLa": (4.60, "1/rad", "finite-span lift slope, aspect ratio ~4.7 per wing"),
    "CLq": (5.0, "1/rad", "pitch-rate lift, rear wing acting as a tail"),
    "CLde": (0.40, "1/rad", "elevator lift effectiveness"),
    "CD0": (0.035, "-", "zero-lift drag of a small UAV with exposed props and gear"),
    "K": (0.055, "-", "induced drag 1/(pi e AR), e ~ 0.8, effective AR ~ 7 (joined wing)"),
    "CYb": (-0.35, "1/rad", "fin and fuselage side force"),
    "CYp": (0.0, "1/rad", "negligible"),
    "CYr": (0.15, "1/rad", "fin side force from yaw rate"),
    "CYdr": (0.12, "1/rad", "rudder"),
    "Clb": (-0.08, "1/rad", "dihedral effect (joined wings: front dihedral, rear anhedral)"),
    "Clp": (-0.45, "1/rad", "roll damping, AR ~ 7"),
    "Clr": (0.10, "1/rad", "~ C_L / 4 at cruise"),
    "Clda": (0.20, "1/rad", "ailerons on both wings"),
    "Cldr": (0.005, "1/rad", "small rudder roll"),
    "Cm0": (0.03, "-", "trims alpha ~ 3 deg with zero elevator"),
    "Cma": (-0.60, "1/rad", "static margin ~ 0.13 c with C_La = 4.6"),
    "Cmq": (-8.0, "1/rad", "pitch damping, rear wing ~0.3 m behind the c.g."),
    "Cmde": (-0.50, "1/rad", "elevator effectiveness"),
    "Cnb": (0.06, "1/rad", "weathercock stability from the fin"),
    "Cnp": (-0.04, "1/rad", "adverse yaw from roll rate"),
    "Cnr": (-0.10, "1/rad", "yaw damping"),
    "Cnda": (-0.01, "1/rad", "adverse aileron yaw"),
    "Cndr": (-0.05, "1/rad", "rudder yaw power (positive rudder: nose left)"),
}

_AERO_KEYS = list(AeroDerivatives.__dataclass_fields__)


class UAVParams(eqx.Module):
    """All numbers of the vehicle (array leaves, differentiable)."""

    m_b: jnp.ndarray
    J_b: jnp.ndarray  # (3, 3) about the airframe's centre of mass, body axes
    rotor_mass: jnp.ndarray  # (2,)
    rotor_pos: jnp.ndarray  # (2, 3) hub = rotor centre of mass, rel. airframe c.g., body axes
    rotor_axis: jnp.ndarray  # (2, 3) thrust axis (unit)
    rotor_jax: jnp.ndarray  # (2,)
    rotor_jt: jnp.ndarray  # (2,)
    rotor_dir: jnp.ndarray  # (2,) +1 / -1: spin sense about rotor_axis
    rpm: jnp.ndarray  # (2,) magnitude, rev/min
    prop: PropellerParams
    aero: AeroDerivatives
    gravity: jnp.ndarray  # (3,) world (NED)
    controls0: jnp.ndarray  # (3,) [aileron, elevator, rudder] rad
    doublet: jnp.ndarray  # (3,) elevator doublet [t_start s, half-width s, amplitude rad]
    ctrl_table: jnp.ndarray  # (n, 4) [t, da, de, dr] zero-order-hold control increments (data)


def default_params() -> UAVParams:
    P = {k: v[0] for k, v in PARAM_TABLE.items()}
    f = lambda x: jnp.asarray(np.asarray(x, dtype=np.float64))
    Jb = np.array(
        [[P["Jb_xx"], 0.0, P["Jb_xz"]], [0.0, P["Jb_yy"], 0.0], [P["Jb_xz"], 0.0, P["Jb_zz"]]]
    )
    x, y, z = P["rotor_x"], P["rotor_y"], P["rotor_z"]
    aero = AeroDerivatives.from_dict({**{k: P[k] for k in _AERO_KEYS if k in P}})
    return UAVParams(
        m_b=f(P["m_b"]),
        J_b=f(Jb),
        rotor_mass=f([P["m_rotor"]] * 2),
        rotor_pos=f([[x, -y, z], [x, y, z]]),
        rotor_axis=f([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
        rotor_jax=f([P["Jax_rotor"]] * 2),
        rotor_jt=f([P["Jt_rotor"]] * 2),
        rotor_dir=f([1.0, -1.0]),
        rpm=f([P["rpm"]] * 2),
        prop=PropellerParams(f(P["prop_D"]), f(P["rho"]), f(P["prop_ct"]), f(P["prop_cq"])),
        aero=aero,
        gravity=f([0.0, 0.0, G0]),
        controls0=f([0.0, 0.0, 0.0]),
        doublet=f([0.0, 0.0, 0.0]),
        ctrl_table=f([[0.0, 0.0, 0.0, 0.0]]),
    )


def initial_state(pitch_deg=3.0, altitude=60.0, speed=12.0):
    """Wu et al. (2019) section 5.2: r = [0, 0, -60], q = [0, sin 1.5 deg, 0, cos 1.5 deg] (scalar-last),
    V = [12, 0, 0], omega = 0. Returned scalar-first."""
    half = np.deg2rad(pitch_deg) / 2.0
    q_seed = jnp.array([0.0, np.sin(half), 0.0, np.cos(half)])  # [sigma, eta], scalar-last
    q = quat.from_scalar_last(q_seed)
    return jnp.concatenate(
        [jnp.array([0.0, 0.0, -altitude]), q, jnp.array([speed, 0.0, 0.0]), jnp.zeros(3)]
    )


def controls(params: UAVParams, t):
    """[aileron, elevator, rudder] (rad) at time t: trim + an elevator doublet (+A then -A)."""
    t0, w, A = params.doublet[0], params.doublet[1], params.doublet[2]
    up = (t >= t0) & (t < t0 + w)
    down = (t >= t0 + w) & (t < t0 + 2.0 * w)
    de = jnp.where(up, A, 0.0) - jnp.where(down, A, 0.0)
    tab = params.ctrl_table
    # zero-order hold of measured controls: the last sample at or before t (1e-9 s tolerance)
    i = jnp.clip(jnp.searchsorted(tab[:, 0], t + 1e-9, side="right") - 1, 0, tab.shape[0] - 1)
    return params.controls0 + jnp.stack([jnp.zeros_like(de), de, jnp.zeros_like(de)]) + tab[i, 1:]


def rotor_speeds(params: UAVParams):
    """Signed spin rates (rad/s) of rotors c, d about their axes."""
    return params.rotor_dir * params.rpm * (2.0 * jnp.pi / 60.0)


def force_law(params: UAVParams, x, t):
    """Applied (non-gravity) loads on each body, the one force law shared by every formulation.

    Returns f (3, 3) and m (3, 3): rows airframe b, rotor c, rotor d; forces in body axes acting
    at each body's centre of mass (airframe: its c.g. = O; rotors: their hubs), moments in body
    axes. Gravity is not included (each formulation has its own way of adding it).
    """
    q, V, w = _unit(x[3:7]), x[7:10], x[10:13]
    R = quat.to_rotmat(q)
    v_b = R.T @ V
    # stability derivatives are about the aircraft's (composite) centre of mass c: airspeed of
    # that point, force applied there, i.e. at O with the transfer moment c x F.
    c = aero_reference_point(params)
    Fa, Ma = body_aero(params.aero, v_b + jnp.cross(w, c), w, controls(params, t))
    Ma = Ma + jnp.cross(c, Fa)
    Om = rotor_speeds(params)

    def rotor(pos, axis, om, sdir):
        v_hub = v_b + jnp.cross(w, pos)
        T, Q = propeller_thrust_torque(params.prop, om, jnp.dot(axis, v_hub))
        return T * axis, -Q * sdir * axis

    fr, mr = jax.vmap(rotor)(params.rotor_pos, params.rotor_axis, Om, params.rotor_dir)
    return jnp.concatenate([Fa[None], fr]), jnp.concatenate([Ma[None], mr])


def _unit(q):
    """The dynamics of every formulation is evaluated at q/|q| (rotation matrices, maps); the
    integrated quaternion itself is never projected (its drift is reported)."""
    return q / jnp.sqrt(jnp.dot(q, q))


def aero_reference_point(params: UAVParams):
    """Composite centre of mass (body axes, rel. the airframe c.g.): moment reference of the
    stability derivatives."""
    m = params.m_b + jnp.sum(params.rotor_mass)
    return jnp.sum(params.rotor_mass[:, None] * params.rotor_pos, axis=0) / m


def rotor_body(params: UAVParams) -> ql.RotorBody:
    return ql.rotor_body_from_parts(
        params.m_b, params.J_b, params.rotor_mass, params.rotor_pos, params.rotor_axis,
        params.rotor_jax, params.rotor_jt, params.gravity,
    )


def _points(params):
    return jnp.concatenate([jnp.zeros((1, 3)), params.rotor_pos])


def rhs_lagrange(t, x, params: UAVParams):
    """Quaternion Lagrange (eqs. 22-36 by autodiff of L, multipliers eliminated with Upsilon)."""
    p, v = x[:7], x[7:]
    pu = jnp.concatenate([p[:3], _unit(p[3:])])
    f, m = force_law(params, x, t)
    tau = ql.generalized_forces(pu[3:], f, _points(params), jnp.sum(m, axis=0))
    vdot = ql.eom(rotor_body(params), pu, v, tau, rotor_speeds(params))
    return ql.state_derivative(p, v, vdot)


def rhs_lagrange_closed(t, x, params: UAVParams):
    """The reduced Lagrange equations written out (corrected eq. 40), eq. 39 forces."""
    p, v = x[:7], x[7:]
    qu = _unit(p[3:])
    f, m = force_law(params, x, t)
    red = ql.reduced_generalized_forces(qu, f, _points(params), jnp.sum(m, axis=0))
    vdot = ql.eom_closed_form(rotor_body(params), qu, v, red[:3], red[3:], rotor_speeds(params))
    return ql.state_derivative(p, v, vdot)


def kane_system(params: UAVParams) -> kane.KaneSystem:
    a = params.rotor_axis
    I_r = jax.vmap(lambda ax, ja, jt: ja * jnp.outer(ax, ax) + jt * (jnp.eye(3) - jnp.outer(ax, ax)))(
        a, params.rotor_jax, params.rotor_jt
    )
    return kane.KaneSystem(
        mass=jnp.concatenate([params.m_b[None], params.rotor_mass]),
        inertia=jnp.concatenate([params.J_b[None], I_r]),
        pos=_points(params),
        spin_axis=jnp.concatenate([jnp.zeros((1, 3)), a]),
        gravity=params.gravity,
    )


def rhs_kane(t, x, params: UAVParams):
    """Kane's equations of the three bodies b, c, d (eqs. 43-45)."""
    q, v = x[3:7], x[7:]
    qu = _unit(q)
    f, m = force_law(params, x, t)
    R = quat.to_rotmat(qu)
    Om = jnp.concatenate([jnp.zeros(1), rotor_speeds(params)])
    udot = kane.kane_eom(kane_system(params), qu, v, f @ R.T, m, Om)
    return jnp.concatenate([v[:3], ql.Gamma_matrix(q) @ v[3:], udot])


def rhs_printed(t, x, args):
    """The paper's eqs. 13-19 literally: J = J_b + J_c + J_d (no parallel axis), A = 1/2 J Omega^2,
    U = m g e3.r (NED: gravity then points up). ``args = (params, gravity_sign)``; gravity_sign =
    -1 repairs only the sign of gravity."""
    pp, gs = args
    m = pp.m_b + jnp.sum(pp.rotor_mass)
    a = pp.rotor_axis
    Jr = [pp.rotor_jax[k] * jnp.outer(a[k], a[k]) + pp.rotor_jt[k] * (jnp.eye(3) - jnp.outer(a[k], a[k]))
          for k in range(2)]
    Jsum = pp.J_b + Jr[0] + Jr[1]
    L = lambda p, pd, Om: ql.printed_lagrangian(m, Jsum, pp.rotor_jax, 9.81 * gs, p, pd, Om)
    p, v = x[:7], x[7:]
    pu = jnp.concatenate([p[:3], p[3:] / jnp.linalg.norm(p[3:])])
    f, mm = force_law(pp, x, t)
    pts = jnp.concatenate([jnp.zeros((1, 3)), pp.rotor_pos])
    tau = ql.generalized_forces(pu[3:], f, pts, jnp.sum(mm, axis=0))
    return ql.state_derivative(p, v, ql.eom(rotor_body(pp), pu, v, tau, rotor_speeds(pp), L=L))


# --------------------------------------------------------------------------------------------
# The vehicle as a tree (MJCF), for MuJoCo and for diffmb's core.
# --------------------------------------------------------------------------------------------


def mjcf_string(params: UAVParams, altitude=60.0) -> str:
    """Free airframe + two hinge rotors, NED gravity. Numbers from ``params`` (numpy, not traced)."""
    P = jax.tree_util.tree_map(np.asarray, params)
    J = P.J_b
    fi = f"{J[0,0]:.17g} {J[1,1]:.17g} {J[2,2]:.17g} {J[0,1]:.17g} {J[0,2]:.17g} {J[1,2]:.17g}"
    rot = []
    for k, name in enumerate(("rotor_c", "rotor_d")):
        pos = " ".join(f"{v:.17g}" for v in P.rotor_pos[k])
        ax = " ".join(f"{v:.17g}" for v in P.rotor_axis[k])
        assert np.allclose(P.rotor_axis[k], [1, 0, 0]), "MJCF writer assumes rotor axes along x"
        rot.append(
            f'      <body name="{name}" pos="{pos}">\n'
            f'        <joint name="spin_{name[-1]}" type="hinge" axis="{ax}"/>\n'
            f'        <inertial pos="0 0 0" mass="{P.rotor_mass[k]:.17g}" '
            f'diaginertia="{P.rotor_jax[k]:.17g} {P.rotor_jt[k]:.17g} {P.rotor_jt[k]:.17g}"/>\n'
            f"      </body>\n"
        )
    g = " ".join(f"{v:.17g}" for v in P.gravity)
    return (
        '<mujoco model="diamond_uav">\n'
        f'  <option gravity="{g}" timestep="0.01"/>\n'
        "  <worldbody>\n"
        f'    <body name="airframe" pos="0 0 {-altitude:.17g}">\n'
        '      <freejoint name="root"/>\n'
        f'      <inertial pos="0 0 0" mass="{P.m_b:.17g}" fullinertia="{fi}"/>\n'
        + "".join(rot)
        + "    </body>\n  </worldbody>\n</mujoco>\n"
    )


def make_rhs_tree(model):
    """rhs(t, x, params) through diffmb's core: M and the RNEA bias of the tree model (free
    airframe + 2 hinges, MuJoCo layout), rotor accelerations prescribed (0): partitioned solve
    M_ff a_f = -(bias - J^T f_ext)_f. ``model`` = diffmb.load_mjcf(mjcf_string(params))."""
    import diffmb

    names = model.body_names
    rows = [names.index(n) for n in ("airframe", "rotor_c", "rotor_d")]
    n_b = len(names)

    def rhs(t, x, params: UAVParams):
        r, q, V, w = x[:3], x[3:7], x[7:10], x[10:13]
        Om = rotor_speeds(params)
        qt = jnp.concatenate([r, _unit(q), jnp.zeros(2)])
        vt = jnp.concatenate([V, w, Om])
        f, m = force_law(params, x, t)
        R = quat.to_rotmat(_unit(q))
        fw = jnp.concatenate([f @ R.T, m @ R.T], axis=1)  # (3, 6) world [force, torque]
        f_ext = jnp.zeros((n_b, 6)).at[jnp.array(rows)].set(fw)
        h = diffmb.inverse_dynamics(model, qt, vt, jnp.zeros(8), f_ext)  # bias - J^T f_ext
        M = diffmb.mass_matrix(model, qt)
        a_f = jnp.linalg.solve(M[:6, :6], -h[:6])
        return jnp.concatenate([V, ql.Gamma_matrix(q) @ w, a_f])

    return rhs


def tree_rhs(params: UAVParams):
    """:func:`make_rhs_tree` of the vehicle's MJCF (:func:`mjcf_string`) loaded by diffmb."""
    import pathlib
    import tempfile

    from ..io.mjcf import load_mjcf

    with tempfile.TemporaryDirectory() as d:
        f = pathlib.Path(d) / "uav.xml"
        f.write_text(mjcf_string(params))
        model = load_mjcf(f)
    return make_rhs_tree(model)


# --------------------------------------------------------------------------------------------
# Integration and outputs.
# --------------------------------------------------------------------------------------------


class UAVSystem(AbstractODESystem):
    """One formulation of the UAV as a system for :func:`diffmb.simulate`.

    ``rhs(t, x, params) -> ẋ`` is one of :func:`rhs_lagrange`, :func:`rhs_lagrange_closed`,
    :func:`rhs_kane` or a :func:`make_rhs_tree` function; ``params`` (:class:`UAVParams`) is
    simulate's ``params``. State y = (p (7,) = [r, q], w (6,) = [V, ω]); the quaternion is
    integrated additively and never projected (the paper's form; its drift is reported).
    """

    rhs: Callable = eqx.field(static=True)

    def init(self, q0, v0, params, dt):
        p0 = check_initial("UAV", "position/quaternion x[:7]", q0, (7,))
        return (p0, check_initial("UAV", "velocities x[7:]", v0, (6,)))

    def vector_field(self, t, y, params):
        xd = self.rhs(t, jnp.concatenate(y), params)
        return (xd[:7], xd[7:])

    def outputs(self, ys, params):
        return ys[0], ys[1], None


def fly(rhs, x0, params, t1, dt, save_every=1):
    """The paper's fixed-step RK4 flight from x0 (13,) by :func:`diffmb.simulate`.

    Returns (ts (n_out+1,), xs (n_out+1, 13)) every ``save_every`` steps of ``dt``, n_out =
    ⌊t1 / dt / save_every⌋; ``t1``, ``dt`` and ``save_every`` are Python numbers. A flight
    whose state becomes non-finite returns +inf from there on (no exception: fits use it).
    Differentiable in forward (the fits' ``jacfwd``) and reverse mode.
    """
    from ..simulation import simulate

    n_out = int(round(t1 / dt)) // save_every
    n = n_out * save_every
    saveat = None if save_every == 1 else [n * dt * (k * save_every / n) for k in range(n_out + 1)]
    tr = simulate(UAVSystem(rhs), x0[:7], x0[7:], t1=n * dt, dt=dt, saveat=saveat,
                  params=params, solver="rk4", adjoint="direct", throw=False)
    return tr.ts, jnp.concatenate([tr.q, tr.v], axis=-1)


def flight_outputs(x):
    """Altitude [m], speed [m/s], angle of attack [rad], pitch [rad] of states (..., 13)."""

    def one(xx):
        R = quat.to_rotmat(xx[3:7])
        V, alpha, _ = air_data(R.T @ xx[7:10])
        return jnp.stack([-xx[2], V, alpha, rotation.rpy_from_quat(xx[3:7])[1]])

    return jax.vmap(one)(x.reshape(-1, 13)).reshape(x.shape[:-1] + (4,))
