"""Controls for ``simulate(..., control=...)``: open-loop tables of knots, and central pattern
generators (:class:`CPG`, a stateful control).

A control is any callable ``control(t, q, v, params) -> u``. A :class:`KnotTable` interpolates
a table of values in time and ignores (q, v); its ``values`` are an array leaf, so a gradient
with respect to the table is a gradient with respect to the knot values. With
``params_are_values=True`` the table takes its values from ``simulate``'s ``params`` instead
(then ``jax.grad`` with respect to ``params`` is the gradient with respect to the knots).

kinds:
  * ``"linear"``: piecewise linear, constant extrapolation beyond the ends.
  * ``"cubic"``: C¹ piecewise cubic Hermite with Catmull–Rom/finite-difference slopes
    (three-point non-uniform formula inside, one-sided at the ends); exact for linear data.
  * ``"zoh"``: zero-order hold (value of the last knot at or before t).

Tables and CPGs check their numbers when built from concrete values (finite knots and values,
strictly increasing times, one row of values per knot; a CPG's frequency, gains and rates), and
the indices a CPG drives against the Model it runs on; a wrong value raises ``ValueError``, a
wrong type or shape ``TypeError``, naming the class, the field and the admissible range.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .validation import check_choice, check_index, check_value, is_concrete

__all__ = ["KnotTable", "piecewise_linear", "cubic", "zero_order_hold", "AbstractStatefulControl", "CPG",
           "GAITS"]


class KnotTable(eqx.Module):
    """u(t) from knots ``ts`` (k,) strictly increasing and ``values`` (k, nu) or (k,).

    ``uniform=True`` promises (nearly) evenly spaced knots: the interval is then found in O(1)
    from (t − ts[0])/h and corrected by one knot either way, instead of a binary search at every
    evaluation; the values are the same.
    """

    ts: jnp.ndarray
    values: jnp.ndarray | None
    kind: str = eqx.field(static=True, default="linear")
    params_are_values: bool = eqx.field(static=True, default=False)
    uniform: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_choice("KnotTable", "kind", self.kind, ("linear", "cubic", "zoh"))
        check_value("KnotTable", "ts", self.ts)
        if np.ndim(self.ts) != 1:
            raise TypeError(f"KnotTable.ts: expected a 1-D array of knot times, got shape "
                            f"{np.shape(self.ts)}")
        k = np.shape(self.ts)[0]
        if k < 2:
            raise ValueError(f"KnotTable.ts: {k} knot(s); a table needs at least 2")
        if is_concrete(self.ts):
            ts = np.asarray(self.ts, dtype=float)
            bad = np.flatnonzero(np.diff(ts) <= 0)
            if bad.size:
                i = int(bad[0]) + 1
                raise ValueError(f"KnotTable.ts[{i}] = {ts[i]:.9g}: must be > ts[{i - 1}] = "
                                 f"{ts[i - 1]:.9g} (knot times strictly increasing)")
            if self.uniform:  # the O(1) lookup corrects its guess by one knot at most
                h = (ts[-1] - ts[0]) / (k - 1)
                off = np.abs(ts - (ts[0] + h * np.arange(k)))
                if off.max() > 0.5 * h:
                    i = int(np.argmax(off))
                    raise ValueError(
                        f"KnotTable.ts[{i}] = {ts[i]:.9g}: uniform=True needs every knot within "
                        f"half a mean spacing ({0.5 * h:.6g}) of the even grid, this one is "
                        f"{off[i]:.6g} off; pass uniform=False")
        if self.values is not None:
            check_value("KnotTable", "values", self.values)
            _check_rows("KnotTable.values", self.values, k)

    def __call__(self, t, q=None, v=None, params=None):
        vals = params if self.params_are_values else self.values
        if vals is None:
            raise TypeError("KnotTable: no values; give values, or params_are_values=True and "
                            "the values as simulate's params")
        vals = jnp.asarray(vals, dtype=jnp.float64)
        ts = jnp.asarray(self.ts, dtype=jnp.float64)
        k = ts.shape[0]
        _check_rows("KnotTable values (from params)" if self.params_are_values
                    else "KnotTable.values", vals, k)
        if self.uniform:
            h0 = (ts[-1] - ts[0]) / (k - 1)
            i = jnp.clip(jnp.floor((t - ts[0]) / h0).astype(jnp.int32), 0, k - 2)
            i = jnp.clip(i - (t < ts[i]).astype(jnp.int32) + (t >= ts[i + 1]).astype(jnp.int32),
                         0, k - 2)
        else:
            i = jnp.clip(jnp.searchsorted(ts, t, side="right") - 1, 0, k - 2)
        t0, t1 = ts[i], ts[i + 1]
        h = t1 - t0
        s = jnp.clip((t - t0) / h, 0.0, 1.0)
        y0, y1 = vals[i], vals[i + 1]
        if self.kind == "zoh":
            return jnp.where(t >= t1, y1, y0)
        if self.kind == "linear":
            return y0 + s * (y1 - y0)
        m = _slopes(ts, vals)
        m0, m1 = m[i] * h, m[i + 1] * h
        s2, s3 = s * s, s * s * s
        return (
            (2 * s3 - 3 * s2 + 1) * y0
            + (s3 - 2 * s2 + s) * m0
            + (-2 * s3 + 3 * s2) * y1
            + (s3 - s2) * m1
        )


def _check_rows(what, vals, k):
    """One row of values per knot: shape (k,) or (k, ...)."""
    shape = np.shape(vals)
    if len(shape) == 0 or shape[0] != k:
        raise TypeError(f"{what}: expected shape ({k},) or ({k}, nu), one row per knot "
                        f"(len(ts) = {k}), got {tuple(shape)}")


def _slopes(ts, y):
    """Finite-difference slopes at the knots (three-point non-uniform, one-sided at the ends)."""
    h = jnp.diff(ts)
    d = (y[1:] - y[:-1]) / h.reshape((-1,) + (1,) * (y.ndim - 1))
    if ts.shape[0] == 2:
        return jnp.stack([d[0], d[0]])
    hl = h[:-1].reshape((-1,) + (1,) * (y.ndim - 1))
    hr = h[1:].reshape((-1,) + (1,) * (y.ndim - 1))
    inner = (hr * d[:-1] + hl * d[1:]) / (hl + hr)
    return jnp.concatenate([d[:1], inner, d[-1:]], axis=0)


def piecewise_linear(ts, values=None):
    """Piecewise-linear table; with ``values=None`` the values come from ``params``."""
    return KnotTable(jnp.asarray(ts, float), values, "linear", values is None)


def cubic(ts, values=None):
    """C¹ cubic Hermite table; with ``values=None`` the values come from ``params``."""
    return KnotTable(jnp.asarray(ts, float), values, "cubic", values is None)


def zero_order_hold(ts, values=None):
    return KnotTable(jnp.asarray(ts, float), values, "zoh", values is None)


def _indices(field, idx):
    """A tuple of non-negative ints (checked against the Model when the CPG runs)."""
    try:
        arr = np.asarray(idx)
    except Exception:  # noqa: BLE001 - ragged or foreign input
        arr = np.asarray(None)
    integral = np.issubdtype(arr.dtype, np.integer) or arr.size == 0 or (
        np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr))
        and np.all(arr == np.round(arr)))
    if arr.ndim != 1 or not integral:
        raise TypeError(f"CPG.{field} = {idx!r}: expected a sequence of integer indices")
    out = tuple(int(i) for i in arr)
    check_value("CPG", field, np.asarray(out, dtype=np.int64), lo=0)
    return out


def _number(field, x, shape, **bounds):
    """``x`` as float64 of ``shape`` (a scalar broadcasts), values checked when concrete."""
    check_value("CPG", field, x, **bounds)
    a = jnp.asarray(x, dtype=jnp.float64)
    if a.shape == shape:
        return a
    if a.ndim == 0 or (a.ndim == 1 and a.size == 1):
        return jnp.broadcast_to(a.reshape(()), shape)
    if shape == ():
        raise TypeError(f"CPG.{field}: expected a scalar, got shape {a.shape}")
    raise TypeError(f"CPG.{field}: expected shape ({shape[0]},), one value per driven joint, or "
                    f"a scalar, got {a.shape}")


# phase of each leg in cycles, legs ordered (left fore, right fore, left hind, right hind)
GAITS = {
    "walk": (0.0, 0.5, 0.75, 0.25),  # lateral-sequence walk: LF, RH, RF, LH a quarter apart
    "trot": (0.0, 0.5, 0.5, 0.0),  # diagonal pairs together
    "pace": (0.0, 0.5, 0.0, 0.5),  # lateral pairs together
    "bound": (0.0, 0.0, 0.5, 0.5),  # fore pair, then hind pair
}


class AbstractStatefulControl(eqx.Module):
    """A control with a state s that ``simulate`` integrates with (q, v) (e.g. oscillators):

        s0 = control.init_state(model)
        u, ds_dt = control(t, q, v, params, s)
    """

    @abc.abstractmethod
    def init_state(self, model):
        raise NotImplementedError

    @abc.abstractmethod
    def __call__(self, t, q, v, params, state):
        raise NotImplementedError


class CPG(AbstractStatefulControl):
    """A central pattern generator: n coupled Hopf oscillators driving joint targets.

    Oscillator i has state zᵢ = (xᵢ, yᵢ) and follows (Righetti & Ijspeert 2006, "Programmable
    central pattern generators"; the Hopf form of Ijspeert 2008, "Central pattern generators
    for locomotion control in animals and robots")

        żᵢ = α (1 − |zᵢ|²) zᵢ + ω J zᵢ + k Σⱼ (R(φᵢ − φⱼ) zⱼ − zᵢ),    J = [[0, −1], [1, 0]]

    with ω = 2π ``frequency``, R(·) a plane rotation and φ the ``phase_lags`` [rad]: a stable
    limit cycle of unit radius, and the coupling vanishes exactly on the pattern
    zᵢ = (cos(ωt + φᵢ), sin(ωt + φᵢ)), which attracts neighbouring states at rate ~k. The
    initial state is that pattern at t = 0. Joint i's target is
    q*ᵢ = ``offsets``ᵢ + ``amplitudes``ᵢ xᵢ.

    ``output="targets"``: the control is q* (n,), for position actuators (MJCF ``<position>``);
    ``output="torque"``: a PD law τ = kp (q* − q) − kd q̇ on the joints' dofs, as a generalized
    force (nv,). ``joints``: the q indices (and ``dofs`` the v indices for the torque output) of
    the driven joints. Every number is a traced leaf (gait optimisation differentiates through
    ``frequency``, ``amplitudes``, ``offsets``, ``phase_lags``, ``kp``, ``kd``); stateful
    control: ``simulate`` integrates z and returns it in ``Trajectory.aux``.
    """

    frequency: jnp.ndarray  # () Hz
    amplitudes: jnp.ndarray  # (n,) rad or m
    offsets: jnp.ndarray  # (n,)
    phase_lags: jnp.ndarray  # (n,) rad
    kp: jnp.ndarray  # (n,)
    kd: jnp.ndarray  # (n,)
    alpha: jnp.ndarray  # () 1/s, convergence to the limit cycle
    coupling: jnp.ndarray  # () 1/s
    joints: tuple = eqx.field(static=True)
    dofs: tuple | None = eqx.field(static=True, default=None)
    output: str = eqx.field(static=True, default="targets")

    def __init__(self, joints, frequency, amplitudes, offsets=0.0, phase_lags=0.0, *,
                 output="targets", dofs=None, kp=0.0, kd=0.0, alpha=10.0, coupling=2.0):
        check_choice("CPG", "output", output, ("targets", "torque"))
        self.joints = _indices("joints", joints)
        n = len(self.joints)
        if n == 0:
            raise ValueError("CPG.joints = (): a CPG drives at least one joint")
        self.dofs = None if dofs is None else _indices("dofs", dofs)
        if output == "torque" and (self.dofs is None or len(self.dofs) != n):
            raise ValueError(f"CPG.dofs = {dofs!r}: output='torque' needs dofs, one v index per "
                             f"joint ({n} joints)")
        self.output = output
        self.frequency = _number("frequency", frequency, (), lo=0.0)
        self.amplitudes = _number("amplitudes", amplitudes, (n,))
        self.offsets = _number("offsets", offsets, (n,))
        self.phase_lags = _number("phase_lags", phase_lags, (n,))
        self.kp = _number("kp", kp, (n,), lo=0.0)
        self.kd = _number("kd", kd, (n,), lo=0.0)
        self.alpha = _number("alpha", alpha, (), lo=0.0, lo_open=True)
        self.coupling = _number("coupling", coupling, (), lo=0.0)

    @classmethod
    def gait(cls, pattern: str, legs, frequency, amplitudes, offsets=0.0, **kw):
        """A CPG whose ``legs`` (a list of 4 lists of q indices, legs ordered LF, RF, LH, RH;
        each leg's joints share its phase) follow :data:`GAITS` ``[pattern]``."""
        check_choice("CPG.gait", "pattern", pattern, tuple(GAITS))
        if len(legs) != 4:
            raise ValueError(f"CPG.gait.legs: {len(legs)} legs given; give 4 (LF, RF, LH, RH), "
                             "each a list of q indices")
        joints = [j for leg in legs for j in leg]
        lags = [2 * np.pi * GAITS[pattern][k] for k, leg in enumerate(legs) for _ in leg]
        return cls(joints, frequency, amplitudes, offsets, lags, **kw)

    def init_state(self, model=None):
        """The pattern at t = 0 (n, 2); with a ``model``, first checks that the driven joints
        and dofs are indices of it."""
        if model is not None:
            self.check_model(model)
        return jnp.stack([jnp.cos(self.phase_lags), jnp.sin(self.phase_lags)], axis=-1)

    def check_model(self, model):
        """Refuse joints (q indices) or dofs (v indices) outside ``model`` (``ValueError``)."""
        check_index("CPG", "joints", self.joints, model.nq,
                    what=f"model {model.name!r} has nq = {model.nq}")
        if self.dofs is not None:
            check_index("CPG", "dofs", self.dofs, model.nv,
                        what=f"model {model.name!r} has nv = {model.nv}")

    def dynamics(self, z):
        """ż (n, 2) at oscillator states z (n, 2)."""
        w = 2 * jnp.pi * self.frequency
        r2 = jnp.sum(z * z, axis=-1, keepdims=True)
        rot = jnp.stack([-z[:, 1], z[:, 0]], axis=-1)
        d = self.phase_lags[:, None] - self.phase_lags[None, :]  # φᵢ − φⱼ
        c, s = jnp.cos(d), jnp.sin(d)
        rz_x = c * z[None, :, 0] - s * z[None, :, 1]
        rz_y = s * z[None, :, 0] + c * z[None, :, 1]
        n = z.shape[0]
        pull = jnp.stack([jnp.sum(rz_x, axis=1), jnp.sum(rz_y, axis=1)], axis=-1) - n * z
        return self.alpha * (1.0 - r2) * z + w * rot + self.coupling * pull

    def targets(self, z):
        """Joint targets q* (n,)."""
        return self.offsets + self.amplitudes * z[:, 0]

    def __call__(self, t, q, v, params, z):
        # shapes are static: indices beyond q or v would be clamped by JAX, so refuse them here
        check_index("CPG", "joints", self.joints, np.shape(q)[0], what=f"q has {np.shape(q)[0]}")
        if self.dofs is not None:
            check_index("CPG", "dofs", self.dofs, np.shape(v)[0],
                        what=f"v has {np.shape(v)[0]}")
        qt = self.targets(z)
        dz = self.dynamics(z)
        if self.output == "targets":
            return qt, dz
        qi = q[jnp.asarray(self.joints)]
        vi = v[jnp.asarray(self.dofs)]
        tau = self.kp * (qt - qi) - self.kd * vi
        return jnp.zeros(v.shape[0]).at[jnp.asarray(self.dofs)].add(tau), dz
