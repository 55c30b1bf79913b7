"""Open-loop controls as tables of knots, usable as ``simulate(..., control=table)``.

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
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

__all__ = ["KnotTable", "piecewise_linear", "cubic", "zero_order_hold"]


class KnotTable(eqx.Module):
    """u(t) from knots ``ts`` (k,) strictly increasing and ``values`` (k, nu) or (k,)."""

    ts: jnp.ndarray
    values: jnp.ndarray | None
    kind: str = eqx.field(static=True, default="linear")
    params_are_values: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if self.kind not in ("linear", "cubic", "zoh"):
            raise ValueError(f"KnotTable: unknown kind {self.kind!r} (linear, cubic, zoh)")
        try:
            ts = np.asarray(self.ts)
        except Exception:  # traced knots: cannot check
            return
        if ts.ndim != 1 or ts.size < 2 or np.any(np.diff(ts) <= 0):
            raise ValueError("KnotTable: ts must be 1-D, at least 2 knots, strictly increasing")

    def __call__(self, t, q=None, v=None, params=None):
        vals = params if self.params_are_values else self.values
        vals = jnp.asarray(vals, dtype=jnp.float64)
        ts = jnp.asarray(self.ts, dtype=jnp.float64)
        k = ts.shape[0]
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
