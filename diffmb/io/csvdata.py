"""Reader for measured time series (DESIGN.md, "Measured data (CSV)").

Format: a header row whose first name is ``t``, then one row per sample. ``t`` is time in
seconds, strictly increasing; every other column is a named channel in SI units. Lines that
start with ``#`` (before or after the header) are comments. Anything else — a missing or
non-numeric value, NaN or infinity, a row with the wrong number of cells, a duplicated or empty
column name, non-increasing time, a requested channel the file does not have — raises
``ValueError`` naming the file, the line (1-based, as an editor shows it) and the column.
"""

from __future__ import annotations

import csv
import math
import pathlib
from collections.abc import Iterable

import numpy as np

__all__ = ["read_csv", "write_csv"]


def read_csv(
    path: str | pathlib.Path, channels: Iterable[str] | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Read ``path``; return ``(t (n,), {channel: (n,) float64})``.

    ``channels``: names to return (all if None); each must be a column of the file.
    """
    path = pathlib.Path(path)
    where = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{where}: cannot read file ({exc})") from exc
    rows = []
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or (len(row) == 1 and row[0].strip() == ""):
            continue
        if row[0].lstrip().startswith("#"):
            continue
        rows.append((lineno, [c.strip() for c in row]))
    if not rows:
        raise ValueError(f"{where}: no header row (expected first column 't')")
    head_line, header = rows[0]
    if header[0] != "t":
        raise ValueError(
            f"{where}, line {head_line}, column 1: first column must be 't', got {header[0]!r}"
        )
    seen = {}
    for j, name in enumerate(header, start=1):
        if name == "":
            raise ValueError(f"{where}, line {head_line}, column {j}: empty column name")
        if name in seen:
            raise ValueError(
                f"{where}, line {head_line}, column {j}: duplicate column name {name!r} "
                f"(also column {seen[name]})"
            )
        seen[name] = j
    if len(rows) < 2:
        raise ValueError(f"{where}: no data rows after the header (line {head_line})")
    if channels is None:
        wanted = list(header[1:])
    else:
        wanted = list(channels)
        for c in wanted:
            if c == "t":
                continue
            if c not in seen:
                raise ValueError(
                    f"{where}: unknown channel {c!r}; the file has columns {header[1:]}"
                )
        wanted = [c for c in wanted if c != "t"]
    ncol = len(header)
    data = np.empty((len(rows) - 1, ncol))
    for i, (lineno, row) in enumerate(rows[1:]):
        if len(row) != ncol:
            raise ValueError(
                f"{where}, line {lineno}: expected {ncol} values, found {len(row)}"
            )
        for j, cell in enumerate(row):
            col = f"column {j + 1} ({header[j]!r})"
            if cell == "":
                raise ValueError(f"{where}, line {lineno}, {col}: missing value")
            try:
                v = float(cell)
            except ValueError:
                raise ValueError(
                    f"{where}, line {lineno}, {col}: non-numeric value {cell!r}"
                ) from None
            if not math.isfinite(v):
                raise ValueError(f"{where}, line {lineno}, {col}: value is {cell!r} (not finite)")
            data[i, j] = v
    t = data[:, 0]
    dt = np.diff(t)
    bad = np.nonzero(~(dt > 0.0))[0]
    if bad.size:
        k = int(bad[0]) + 1
        raise ValueError(
            f"{where}, line {rows[1:][k][0]}, column 1 ('t'): "
            f"time not strictly increasing ({t[k - 1]!r} then {t[k]!r})"
        )
    return t, {c: data[:, seen[c] - 1].copy() for c in wanted}


def write_csv(path: str | pathlib.Path, t: np.ndarray, channels: dict[str, np.ndarray],
              fmt: str = "%.10g") -> None:
    """Write ``t`` and named channels in the format :func:`read_csv` reads."""
    names = list(channels)
    cols = [np.asarray(t, dtype=float)] + [np.asarray(channels[n], dtype=float) for n in names]
    arr = np.column_stack(cols)
    np.savetxt(path, arr, delimiter=",", header=",".join(["t"] + names), comments="", fmt=fmt)
