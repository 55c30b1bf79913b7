"""Validation of numbers where they enter: one helper for every element, terrain, soil and control.

Constructors call :func:`check_value` (and :func:`check_index`) on their fields when they are
built from concrete values. Traced values (inside ``jit``, ``grad`` or ``vmap``) pass through
unchecked: they come from an already validated object or from an optimiser's step.

Contracts: a bad value raises ``ValueError``, a bad type or shape raises ``TypeError``; the
message names the owner (class), the field, the offending value and the admissible range::

    Soil.phi = 1.5708: must be in [0, 1.5708)
    CPG.dofs[2] = 7: must be an index in [0, 2) (model nv = 2)
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

__all__ = ["is_concrete", "check_value", "check_index", "check_choice"]


def is_concrete(x) -> bool:
    """True when ``x`` (any pytree) holds no JAX tracer, so its values can be read."""
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def _fmt(x) -> str:
    x = float(x)
    return f"{x:.6g}"


def _range_text(lo, hi, lo_open, hi_open) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_fmt(lo)}, {_fmt(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_fmt(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_fmt(hi)}"
    return "finite"


def check_value(owner: str, field: str, value, *, lo=None, hi=None, lo_open: bool = False,
                hi_open: bool = False, finite: bool = True, shape: Sequence[int] | None = None,
                ndim: int | None = None, allow_none: bool = False):
    """Check a number or array field; return ``value`` unchanged.

    owner, field: names for the message (``"Soil"``, ``"phi"``).
    lo, hi: bounds (inclusive unless ``lo_open``/``hi_open``); ``None`` for no bound.
    finite: refuse NaN and ±inf (default). ``shape``/``ndim``: required shape (``-1`` matches any
    length). Traced values are returned without checks.
    """
    if value is None:
        if allow_none:
            return value
        raise TypeError(f"{owner}.{field}: a value is required, got None")
    if not is_concrete(value):
        return value
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - any conversion failure is a type error here
        raise TypeError(f"{owner}.{field} = {value!r}: not a number or array of numbers") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{owner}.{field} = {value!r}: not a number or array of numbers "
                        f"(dtype {arr.dtype})")
    if np.iscomplexobj(arr):
        raise TypeError(f"{owner}.{field} = {value!r}: complex values are not accepted")
    if ndim is not None and arr.ndim != ndim:
        raise TypeError(f"{owner}.{field}: expected {ndim} dimension(s), got shape {arr.shape}")
    if shape is not None:
        shape = tuple(shape)
        if len(shape) != arr.ndim or any(s not in (-1, a) for s, a in zip(shape, arr.shape, strict=True)):
            dims = ["n" if s == -1 else str(s) for s in shape]
            want = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
            raise TypeError(f"{owner}.{field}: expected shape {want}, got {arr.shape}")
    a = arr.astype(float)
    flat = a.reshape(-1)
    where = (lambda i: "" if a.ndim == 0 else f"[{', '.join(map(str, np.unravel_index(i, a.shape)))}]")
    if finite:
        bad = np.flatnonzero(~np.isfinite(flat))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{owner}.{field}{where(i)} = {flat[i]}: must be finite")
    ok = np.ones(flat.shape, bool)
    with np.errstate(invalid="ignore"):
        if lo is not None:
            ok &= (flat > lo) if lo_open else (flat >= lo)
        if hi is not None:
            ok &= (flat < hi) if hi_open else (flat <= hi)
    bad = np.flatnonzero(~ok)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{owner}.{field}{where(i)} = {_fmt(flat[i])}: must be "
                         f"{_range_text(lo, hi, lo_open, hi_open)}")
    return value


def check_index(owner: str, field: str, idx, n: int, *, what: str = "index"):
    """Check integer indices ``idx`` (scalar or sequence) lie in ``[0, n)``; return them unchanged.

    ``what`` names the space, e.g. ``"model nv = 2"``, in the message.
    """
    if not is_concrete(idx):
        return idx
    arr = np.asarray(idx)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) \
                and np.all(arr == np.round(arr)):
            arr = arr.astype(int)
        else:
            raise TypeError(f"{owner}.{field} = {idx!r}: indices must be integers")
    flat = arr.reshape(-1)
    bad = np.flatnonzero((flat < 0) | (flat >= n))
    if bad.size:
        i = int(bad[0])
        sub = "" if arr.ndim == 0 else f"[{i}]"
        raise ValueError(f"{owner}.{field}{sub} = {int(flat[i])}: must be an index in [0, {n}) "
                         f"({what})")
    return idx


def check_choice(owner: str, field: str, value, choices: Sequence):
    """Check ``value`` is one of ``choices``; return it unchanged."""
    if value not in tuple(choices):
        raise ValueError(f"{owner}.{field} = {value!r}: choose one of {list(choices)}")
    return value
