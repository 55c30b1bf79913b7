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
"""

from __future__ import annotations

import pathlib
from importlib import resources

import jax.numpy as jnp
import numpy as np

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


def rover_path() -> pathlib.Path:
    return pathlib.Path(str(resources.files("diffmb") / "assets" / "rover.xml"))


def load():
    """``(model, forces, path)``: the rover Model and the file's elements with the differential
    held exactly (damping, limits, actuators; the file's wheels do not collide through MuJoCo's
    contacts: add ground forces, e.g. :func:`wheel_soil` or rigid :func:`rigid_ground`)."""
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
    ``"turn_in_place"`` (``yaw_rate``), ``"lift_wheel"`` (the left bogie raised by ``lift``
    rad, lifting the left rear wheel, while driving straight)."""
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
