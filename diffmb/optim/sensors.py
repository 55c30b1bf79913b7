"""Sensor models of measured joint channels: y_meas(t) = gain · y(t − delay) + bias + noise.

One :class:`Sensors` holds a gain, a bias and a delay [s] per channel of a joint-space record
(the ``q_<joint>`` channels in q order, then the ``v_<joint>`` channels in v order, see
:func:`diffmb.optim.sysid.joint_channels`). Its entries are parameters like any other, named
``sensor.<channel>.<field>`` with field ``gain``, ``bias`` or ``delay`` (e.g.
``sensor.q_elbow.delay``), identified by :func:`diffmb.optim.fit` when the element is passed in
``forces`` under the key ``"sensors"``. It is not a force: the fit applies it to the simulated
outputs before comparing them with the data. The noise level of a channel is its residual
standard deviation, estimated by :func:`diffmb.optim.identify` (maximum likelihood, by
reweighting).

Only position channels of hinge and slide joints (whose q is a plain number) and velocity
channels take a sensor model; a channel of a ball or free joint is refused by name. A delay
needs a fixed-step simulation (``dt``): the simulated trajectory is saved at every step and
interpolated to the delayed sample times (cubic Hermite for positions, whose slope is the
velocity; linear for velocities).
"""

from __future__ import annotations

import fnmatch

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..model import JointType, Model

__all__ = ["Sensors", "SENSOR_FIELDS", "sensor_channels", "expand_sensors"]

SENSOR_FIELDS = ("gain", "bias", "delay")


def sensor_channels(model: Model) -> tuple[tuple[str, ...], np.ndarray]:
    """(channel names: q channels then v channels, mask (nq + nv,) of those that may take a
    sensor model)."""
    names, ok = [], []
    for prefix in ("q", "v"):
        for j, jn in enumerate(model.joint_names):
            jt = JointType(model.joint_types[j])
            n = jt.nq if prefix == "q" else jt.nv
            scalar = jt in (JointType.HINGE, JointType.SLIDE) or prefix == "v"
            names += [f"{prefix}_{jn}"] if n == 1 else [f"{prefix}_{jn}_{k}" for k in range(n)]
            ok += [scalar] * n
    return tuple(names), np.asarray(ok, bool)


class Sensors(eqx.Module):
    """Gain, bias and delay per channel (defaults 1, 0, 0 s); see the module docstring."""

    channels: tuple = eqx.field(static=True)
    gain: jnp.ndarray
    bias: jnp.ndarray
    delay: jnp.ndarray

    def __init__(self, model: Model, gain=None, bias=None, delay=None):
        self.channels, _ = sensor_channels(model)
        n = len(self.channels)
        mk = lambda x, d: jnp.full((n,), d, jnp.float64) if x is None else jnp.asarray(  # noqa: E731
            x, jnp.float64).reshape(n)
        self.gain, self.bias, self.delay = mk(gain, 1.0), mk(bias, 0.0), mk(delay, 0.0)

    def index(self, model: Model, name: str, channel: str) -> int:
        """Index of ``channel``; ``KeyError`` naming the parameter for an unknown channel or one
        that takes no sensor model."""
        names, ok = sensor_channels(model)
        if channel not in names:
            raise KeyError(f"parameter {name!r}: no channel {channel!r}; channels: {list(names)}")
        k = names.index(channel)
        if not ok[k]:
            raise KeyError(f"parameter {name!r}: channel {channel!r} is a component of a "
                           "quaternion or free-joint position; sensor models apply to hinge and "
                           "slide positions and to velocities only")
        return k


def expand_sensors(model: Model, spec) -> list[str]:
    """Parameter names from a ``--sensors`` spec: comma-separated ``<channel-pattern>.<field>``
    with shell wildcards in the channel (``"q_*.bias,q_elbow.delay"``); ``<field>`` one of
    gain, bias, delay; ``noise`` is accepted and left to :func:`diffmb.optim.identify`
    (returned separately). Returns ``(parameter names, noise channel patterns)``."""
    if isinstance(spec, str):
        spec = [p for p in (x.strip() for x in spec.split(",")) if p]
    names, ok = sensor_channels(model)
    out, noise = [], []
    for item in spec:
        chan, _, field = item.rpartition(".")
        if not chan or field not in SENSOR_FIELDS + ("noise",):
            raise ValueError(f"--sensors entry {item!r}: expected <channel>.<field> with field "
                             f"one of {SENSOR_FIELDS + ('noise',)}, e.g. 'q_elbow.delay'")
        hits = [c for c, o in zip(names, ok, strict=True) if o and fnmatch.fnmatchcase(c, chan)]
        if not hits:
            raise ValueError(f"--sensors entry {item!r}: {chan!r} matches no channel that takes "
                             f"a sensor model; channels: {[c for c, o in zip(names, ok, strict=True) if o]}")
        if field == "noise":
            noise += hits
        else:
            out += [f"sensor.{c}.{field}" for c in hits]
    return list(dict.fromkeys(out)), list(dict.fromkeys(noise))
