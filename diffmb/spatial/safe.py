"""Gradient-safe elementary functions (finite value and gradient at their singular points)."""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["safe_norm", "safe_sqrt", "safe_div", "safe_acos", "abs_times"]


def safe_norm(x, axis=-1, keepdims=False, eps=0.0):
    """Euclidean norm whose gradient at x = 0 is 0 instead of NaN (double-where)."""
    s = jnp.sum(x * x, axis=axis, keepdims=keepdims)
    nz = s > 0
    return jnp.where(nz, jnp.sqrt(jnp.where(nz, s, 1.0)), 0.0) + eps


def safe_sqrt(x):
    """sqrt(max(x, 0)) with zero gradient at x <= 0."""
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def safe_div(a, b, default=0.0):
    ok = b != 0
    return jnp.where(ok, a / jnp.where(ok, b, 1.0), default)


def safe_acos(x):
    """acos clipped to [-1, 1] with a finite gradient at ±1."""
    inside = jnp.abs(x) < 1.0
    xc = jnp.where(inside, x, 0.0)
    return jnp.where(inside, jnp.arccos(xc), jnp.where(x >= 1.0, 0.0, jnp.pi))


def abs_times(v):
    """|v| v (quadratic drag), smooth with gradient 2|v| everywhere."""
    return jnp.abs(v) * v
