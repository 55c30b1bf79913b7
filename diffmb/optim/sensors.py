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

Built from concrete values, gains and biases must be finite and delays finite and ≥ 0, each a
scalar or one value per channel: a wrong value raises ``ValueError``, a wrong shape
``TypeError``, naming the field and the channel.
"""

from __future__ import annotations

import fnmatch

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..model import JointType, Model
from ..validation import check_value, is_concrete

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


def _per_channel(channels, field, x, default, **bounds):
    """(n,) float64 from None (the default), a scalar or one value per channel; concrete values
    checked channel by channel (finite, ``bounds``)."""
    n = len(channels)
    if x is None:
        return jnp.full((n,), default, jnp.float64)
    check_value("Sensors", field, x, finite=False)  # a number or an array of numbers
    a = jnp.asarray(x, jnp.float64)
    if a.shape != (n,):
        if a.size != 1:
            raise TypeError(f"Sensors.{field}: expected a scalar or shape ({n},), one value per "
                            f"channel {list(channels)}, got {a.shape}")
        a = jnp.full((n,), a.reshape(()), jnp.float64)
    if is_concrete(a):
        an = np.asarray(a)
        for i, c in enumerate(channels):
            check_value("Sensors", f"{field}[{c!r}]", an[i], **bounds)
    return a


class Sensors(eqx.Module):
    """Gain, bias and delay per channel (defaults 1, 0, 0 s); see the module docstring."""

    channels: tuple = eqx.field(static=True)
    gain: jnp.ndarray
    bias: jnp.ndarray
    delay: jnp.ndarray

    def __init__(self, model: Model, gain=None, bias=None, delay=None):
        if not isinstance(model, Model):
            raise TypeError(f"Sensors.model: expected a diffmb Model, got {type(model).__name__}")
        self.channels, _ = sensor_channels(model)
        self.gain = _per_channel(self.channels, "gain", gain, 1.0)
        self.bias = _per_channel(self.channels, "bias", bias, 0.0)
        self.delay = _per_channel(self.channels, "delay", delay, 0.0, lo=0.0)

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
