"""The six-wheeled Mars rover of Xu, Ju, Yu & Gu (2021) (seed 002): model file, drive commands and
behaviours.

The rover is the MJCF file ``diffmb/assets/rover.xml``: a body on a free joint, a differential
whose two output shafts are held equal and opposite (an exact linear coupling,
:class:`diffmb.Couplings` with ``exact=True``), an active rocker on each output shaft and an
active bogie on each rocker, six steering axes and six wheel axes; 24 generalized velocities in
MuJoCo's layout. Behaviours are driven through the file's actuators (position servos on the
suspension and steering joints, velocity servos on the wheels), as a MuJoCo user would:

    ctrl = [rocker_l, rocker_r, bogie_l, bogie_r, steer × 6, wheel × 6]      (rad, rad/s)

with wheels in the order lf, lm, lr, rf, rm, rr. :func:`drive_command` turns a desired body
twist (forward speed v, yaw rate ω) into steering angles and wheel speeds by rigid-body
kinematics of the wheel contact points (Ackermann steering; ω ≠ 0 with v = 0 turns in place).

The single-wheel test rig of the wheel–soil model is here too: :func:`single_wheel_rig` (a
carriage, a loaded hub and a wheel), :class:`ConstantSlipDrive` (its PI drive at constant slip)
and :func:`simulate_single_wheel` (a run of the rig on flat soil, averaged over its end).
"""

from __future__ import annotations

import pathlib
from importlib import resources

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..contacts import terramechanics as tm
from ..contacts.terrain import Plane
from ..forces.elements import AbstractStatefulForce
from ..model import Model, ModelBuilder
from ..simulation import simulate
from ..validation import check_index, check_value

WHEELS = ("lf", "lm", "lr", "rf", "rm", "rr")
WHEEL_RADIUS = 0.15  # m
WHEEL_WIDTH = 0.15  # m
MARS_G = 3.72  # m/s²
# steering-axis positions in the body frame at the nominal pose (x forward, y left), m
STEER_XY = np.array([[0.6, 0.55], [0.0, 0.55], [-0.6, 0.55],
                     [0.6, -0.55], [0.0, -0.55], [-0.6, -0.55]])
WHEEL_OFFSET = np.array([0.1, 0.1, 0.1, -0.1, -0.1, -0.1])  # wheel centre beside its steer axis
N_SUSPENSION = 4  # rocker_l, rocker_r, bogie_l, bogie_r
BEHAVIOURS = ("straight", "arc", "turn_in_place", "lift_wheel")
LIFTED_WHEEL = "lf"  # the wheel that "lift_wheel" takes off flat ground (its normal force 0)
WHEEL_MASS = 3.674  # kg, the paper's (section 4)
PAPER_WHEEL_INERTIA = (2.0, 2.0, 2.0)  # kg m², the paper's (section 4) and rover.xml's


def thin_shell_wheel_inertia(m=WHEEL_MASS, r=WHEEL_RADIUS, b=WHEEL_WIDTH):
    """Principal inertia (transverse, axial, transverse) [kg m²] in the wheel body's axes (spin
    axis y) of a thin cylindrical shell of mass m, radius r and width b: axial m r², transverse
    m (r²/2 + b²/12). All of the mass on the rim: the largest axial inertia any wheel of mass m
    within radius r can have (I = ∫ ρ² dm ≤ m r²)."""
    ax = m * r * r
    tr = m * (r * r / 2 + b * b / 12)
    return (tr, ax, tr)


def with_wheel_inertia(model: Model, inertia) -> Model:
    """``model`` with the principal inertia (3,) [kg m²] (wheel body axes) of all six wheels
    replaced; masses, centres and everything else kept."""
    idx = np.array([model.body_names.index(n) for n in wheel_body_names()])
    new = jnp.asarray(model.body_inertia).at[idx].set(jnp.diag(_f64(inertia)))
    return eqx.tree_at(lambda m: m.body_inertia, model, new)


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def rover_path() -> pathlib.Path:
    return pathlib.Path(str(resources.files("diffmb") / "assets" / "rover.xml"))


def load():
    """``(model, forces, path)``: the rover Model and the file's elements with the differential
    held exactly (damping, limits, actuators; the file's wheels do not collide through MuJoCo's
    contacts: add ground forces, e.g. the study's wheel–soil element
    :func:`diffmb.studies.rover.rover_wheel_soil`, or rigid :class:`~diffmb.contacts.Contacts`
    on Cylinder geoms of the wheel bodies)."""
    from ..io.mjcf import load_mjcf, mjcf_forces

    path = rover_path()
    return load_mjcf(path), mjcf_forces(path, exact_couplings=True), path


def wheel_body_names() -> tuple:
    return tuple(f"wheel_{w}" for w in WHEELS)


def drive_command(v, omega):
    """Steering angles (6,) [rad] and wheel spin rates (6,) [rad/s] for a body moving forward at
    ``v`` [m/s] while yawing at ``omega`` [rad/s] (left positive).

    The steering axis i at (x_i, y_i) moves with (v − ω y_i, ω x_i): it is steered to that
    direction, wrapped to |δ| ≤ π/2 (a wheel reversing instead of turning round), and its wheel
    spins at the speed of its centre along the heading over the radius. Straight driving
    (ω = 0) gives δ = 0 and ω_i = v/r; turning in place (v = 0) points every wheel along the
    circle about the body centre. Differentiable and traceable in v and ω.
    """
    x, y = jnp.asarray(STEER_XY[:, 0]), jnp.asarray(STEER_XY[:, 1])
    vx, vy = v - omega * y, omega * x
    speed2 = vx * vx + vy * vy
    moving = speed2 > 1e-24
    delta = jnp.arctan2(jnp.where(moving, vy, 0.0), jnp.where(moving, vx, 1.0))
    flip = jnp.abs(delta) > 0.5 * jnp.pi
    delta = jnp.where(flip, delta - jnp.sign(delta) * jnp.pi, delta)
    # the wheel centre sits WHEEL_OFFSET beside the axis along the steered y axis
    off = jnp.asarray(WHEEL_OFFSET)
    cx, cy = x - off * jnp.sin(delta), y + off * jnp.cos(delta)
    ux, uy = jnp.cos(delta), jnp.sin(delta)
    along = (v - omega * cy) * ux + omega * cx * uy
    return delta, along / WHEEL_RADIUS


def behaviour_params(name: str, *, v=0.1, radius=2.0, yaw_rate=0.1, lift=0.35):
    """The numbers (3,) = (forward speed, yaw rate, left-bogie lift) of a behaviour:
    ``"straight"`` (v), ``"arc"`` (v on a circle of ``radius`` to the left),
    ``"turn_in_place"`` (``yaw_rate``), ``"lift_wheel"`` (the left bogie servo turned by
    ``lift`` rad while driving straight: the bogie presses its middle wheel down and the left
    rocker tips back about it, so the left **front** wheel, :data:`LIFTED_WHEEL`, leaves the
    ground while the left rear wheel stays on it)."""
    table = {"straight": (v, 0.0, 0.0), "arc": (v, v / radius, 0.0),
             "turn_in_place": (0.0, yaw_rate, 0.0), "lift_wheel": (v, 0.0, lift)}
    if name not in table:
        raise ValueError(f"unknown behaviour {name!r}; choose one of {BEHAVIOURS}")
    return jnp.asarray(table[name], dtype=jnp.float64)


def drive_controls(t, p, ramp=0.5):
    """The actuator controls (16,) at time t for behaviour numbers ``p`` = (v, ω, lift)
    (:func:`behaviour_params`): wheels steered to :func:`drive_command`'s angles from the
    start, speeds and the bogie lift ramped up smoothly over ``ramp`` seconds (C¹ from rest).
    Traceable in p, so one compiled simulation serves every behaviour."""
    s = jnp.clip(t / ramp, 0.0, 1.0)
    gain = s * s * (3.0 - 2.0 * s)
    delta, spin = drive_command(p[0], p[1])
    susp = jnp.zeros(N_SUSPENSION).at[2].set(p[2] * gain)
    return jnp.concatenate([susp, delta, gain * spin])


def drive_control(t, q, v, params):
    """``simulate`` control: :func:`drive_controls` with ``params`` = (v, ω, lift)."""
    return drive_controls(t, params)


def behaviour_command(name: str, t, **kw):
    """The actuator controls (16,) of a named behaviour at time t (see :func:`behaviour_params`)."""
    return drive_controls(t, behaviour_params(name, **kw))


def behaviour_control(name: str, **kw):
    """A ``simulate`` control ``(t, q, v, params) -> ctrl`` for a named behaviour."""
    p = behaviour_params(name, **kw)

    def control(t, q, v, params):
        return drive_controls(t, p)

    return control


# ---- the single-wheel test rig -----------------------------------------------------------------


class ConstantSlipDrive(AbstractStatefulForce):
    """Drives a single-wheel rig at a constant slip: the carriage's slide dof ``carriage_dof``
    is pulled at ``speed`` [m/s] by a proportional force k_v (V − v_c), and the wheel's hinge
    dof ``wheel_dof`` follows ω* = v_c/(r(1 − s)) (driving, 0 ≤ s < 1) with a PI torque
    τ = k_p (ω* − ω) + k_i e, ė = ω* − ω (state e (), rad), so that the steady slip equals
    ``slip`` exactly whatever the soil's torque. ``slip``, ``speed``, ``radius`` and the gains
    are traced; ``model`` (optional) checks the dof indices against it. Returns
    ``(tau (nv,), None, ė)``."""

    slip: jnp.ndarray
    speed: jnp.ndarray
    radius: jnp.ndarray
    k_v: jnp.ndarray
    k_p: jnp.ndarray
    k_i: jnp.ndarray
    carriage_dof: int = eqx.field(static=True)
    wheel_dof: int = eqx.field(static=True)

    def __init__(self, slip, speed, radius, carriage_dof=0, wheel_dof=2, k_v=500.0, k_p=1.0,
                 k_i=40.0, *, model: Model | None = None):
        own = "ConstantSlipDrive"
        check_value(own, "slip", slip, lo=0.0, hi=1.0, hi_open=True, shape=())
        check_value(own, "speed", speed, shape=())
        check_value(own, "radius", radius, lo=0.0, lo_open=True, shape=())
        for name, g in (("k_v", k_v), ("k_p", k_p), ("k_i", k_i)):
            check_value(own, name, g, lo=0.0, shape=())
        for name, d in (("carriage_dof", carriage_dof), ("wheel_dof", wheel_dof)):
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
                raise TypeError(f"{own}.{name} = {d!r}: must be an integer dof index")
            check_value(own, name, d, lo=0)
            if model is not None:
                check_index(own, name, d, model.nv, what=f"model {model.name!r} nv = {model.nv}")
        if int(carriage_dof) == int(wheel_dof):
            raise ValueError(f"{own}: carriage_dof and wheel_dof are both {int(wheel_dof)}; "
                             "they must be different dofs")
        self.slip, self.speed, self.radius = _f64(slip), _f64(speed), _f64(radius)
        self.k_v, self.k_p, self.k_i = _f64(k_v), _f64(k_p), _f64(k_i)
        self.carriage_dof, self.wheel_dof = int(carriage_dof), int(wheel_dof)

    def init_state(self, model):
        return jnp.zeros(())

    def target_spin(self, v):
        return v[self.carriage_dof] / (self.radius * (1.0 - self.slip))

    def stateful_call(self, model, t, q, v, ctrl, state):
        err = self.target_spin(v) - v[self.wheel_dof]
        tau = jnp.zeros(model.nv)
        tau = tau.at[self.carriage_dof].add(self.k_v * (self.speed - v[self.carriage_dof]))
        tau = tau.at[self.wheel_dof].add(self.k_p * err + self.k_i * state)
        return tau, None, err


def single_wheel_rig(r=0.09, b=0.11, load=64.68, *, gravity=9.81, wheel_mass=1.0,
                     wheel_inertia=0.004, carriage_mass=10.0) -> Model:
    """The single-wheel test rig as a :class:`~diffmb.Model`: ``carriage`` on a horizontal
    slide (joint ``x``, world x), ``hub`` on a vertical slide below it (joint ``z``, the wheel
    centre at height r + q_z: sinkage −q_z on the plane z = 0) carrying the load, and ``wheel``
    on a hinge about y (joint ``spin``; positive spin rolls towards +x). Hub and wheel weigh
    ``load``/``gravity`` together (the load on the soil); v = (v_x, ż, ω)."""
    own = "single_wheel_rig"
    for name, x in (("r", r), ("b", b), ("load", load), ("gravity", gravity),
                    ("wheel_mass", wheel_mass), ("wheel_inertia", wheel_inertia),
                    ("carriage_mass", carriage_mass)):
        check_value(own, name, x, lo=0.0, lo_open=True, shape=())
    m_load = float(load) / float(gravity)
    if not m_load > wheel_mass:
        raise ValueError(f"single_wheel_rig: load/g = {m_load} kg must exceed the wheel mass")
    mb = ModelBuilder("single_wheel_rig")
    mb.gravity = np.array([0.0, 0.0, -float(gravity)])
    mb.add_body("carriage", -1, pos=(0.0, 0.0, 2 * float(r)), mass=carriage_mass,
                inertia=(0.1, 0.1, 0.1), joints=[dict(name="x", type="slide", axis=(1, 0, 0))])
    mb.add_body("hub", "carriage", pos=(0.0, 0.0, -float(r)), mass=m_load - wheel_mass,
                inertia=(0.01, 0.01, 0.01), joints=[dict(name="z", type="slide",
                                                         axis=(0, 0, 1))])
    I = float(wheel_inertia)
    mb.add_body("wheel", "hub", mass=wheel_mass, inertia=(0.6 * I, I, 0.6 * I),
                joints=[dict(name="spin", type="hinge", axis=(0, 1, 0))])
    return mb.build()


@eqx.filter_jit
def _static_z(soil, r, b, load, slip):
    return tm.sinkage_from_angle(tm.static_sinkage(soil, r, b, load, slip), r)


@eqx.filter_jit
def _rig_outputs(el, drive, model, q, v, mem, integ):
    def at(q, v, mm, e):
        res = el.evaluate(model, q, v, mm)
        tau, _, _ = drive.stateful_call(model, 0.0, q, v, None, e)
        return res.slip[0], res.sinkage[0], res.drawbar_pull[0], res.torque[0], tau[0], tau[2]

    return jax.vmap(at)(q, v, mem, integ)


def simulate_single_wheel(slip, *, soil: tm.Soil | None = None, r=0.09, b=0.11, load=64.68,
                          speed=0.2, t1=3.0, dt=1e-3, z0=None, average=0.2,
                          gains=(500.0, 1.0, 40.0)):
    """Run the rig of :func:`single_wheel_rig` on flat soil at a constant ``slip`` (0 ≤ s < 1)
    and carriage ``speed`` [m/s] for ``t1`` s with RK4 at ``dt``, from sinkage ``z0`` (default:
    80 % of the static sinkage) with the spin ω* and the carriage at ``speed``; ``gains``
    (k_v, k_p, k_i) of :class:`ConstantSlipDrive` (zeros: an undriven rig). Returns a dict
    of the means over the last ``average`` s: ``slip``, ``sinkage_m``, ``drawbar_pull_N``,
    ``torque_Nm`` (from the element), ``tow_force_N`` (the carriage controller's force, = −DP
    in steady state), ``drive_torque_Nm`` (the wheel's PI torque, = T), and ``traj``."""
    own = "simulate_single_wheel"
    soil = tm.SOILS["regolith_simulant"] if soil is None else soil
    if not isinstance(soil, tm.Soil):
        raise TypeError(f"{own}: soil = {soil!r} is not a Soil")
    check_value(own, "slip", slip, lo=0.0, hi=1.0, hi_open=True, shape=())
    check_value(own, "t1", t1, lo=0.0, lo_open=True, shape=())
    check_value(own, "dt", dt, lo=0.0, lo_open=True, hi=t1, shape=())
    check_value(own, "average", average, lo=0.0, lo_open=True, hi=t1, shape=())
    check_value(own, "z0", z0, lo=0.0, hi=r, shape=(), allow_none=True)
    check_value(own, "gains", gains, lo=0.0, shape=(3,))
    model = single_wheel_rig(r, b, load)
    wheel = tm.Wheel("wheel", r, b, axis=(0.0, 1.0, 0.0), name="wheel")
    el = tm.WheelSoil([wheel], Plane(), soil, model=model)
    drive = ConstantSlipDrive(slip, speed, r, k_v=gains[0], k_p=gains[1], k_i=gains[2],
                              model=model)
    if z0 is None:
        z0 = 0.8 * float(_static_z(soil, _f64(r), _f64(b), _f64(load), _f64(slip)))
    q0 = jnp.array([0.0, -float(z0), 0.0])
    v0 = jnp.array([float(speed), 0.0, float(speed) / (r * (1.0 - float(slip)))])
    n_avg = max(1, int(round(average / dt)))
    n = int(round(t1 / dt))
    saveat = [dt * k for k in range(n - n_avg, n + 1)]
    traj = simulate(model, q0, v0, t1=t1, dt=dt, forces=(el, drive), saveat=saveat)
    mem, integ = traj.aux[0]  # (element states aligned with forces, control state)

    out = _rig_outputs(el, drive, model, traj.q, traj.v, mem, integ)
    keys = ("slip", "sinkage_m", "drawbar_pull_N", "torque_Nm", "tow_force_N", "drive_torque_Nm")
    res = {k: float(jnp.mean(x)) for k, x in zip(keys, out, strict=True)}
    res["traj"] = traj
    return res
