"""The one reader and writer of measured time series (the CSV format of ``diffmb identify``).

Format: a header row whose first name is ``t``, then one row per sample. ``t`` is time in
seconds, strictly increasing; every other column is a named channel in SI units. Lines that
start with ``#`` (before or after the header) are comments. The file is UTF-8 text; a leading
byte-order mark is skipped. Anything else — a file that is not UTF-8 text (binary data), a
missing or non-numeric value, NaN or infinity, a value beyond ±``max_abs`` (default
:data:`MAX_ABS` = 1e12: no measured quantity in SI units comes near it, while 1e300 would
overflow the first computation with it), a row with the wrong number of cells, a duplicated or
empty column name, a column the caller does not allow, non-increasing time, a requested channel
the file does not have, a column named in ``varying`` that holds one value in every row —
raises :class:`CSVError` (a ``ValueError``) naming the file, the line (1-based, as an editor
shows it) and the column; its attributes ``path``, ``line``, ``column``, ``name`` and
``reason`` hold the same facts for callers that report them differently.

Users: :func:`diffmb.optim.read_joint_csv` (joint channels ``q_*``, ``v_*``, ``tau_*``) and the
studies' readers.
"""

from __future__ import annotations

import csv
import math
import pathlib
from collections.abc import Iterable

import numpy as np

__all__ = ["read_csv", "write_csv", "CSVError", "MAX_ABS"]

MAX_ABS = 1e12  # largest magnitude accepted in a cell (SI units)


class CSVError(ValueError):
    """A malformed CSV file; the message names the file, line and column where known."""

    def __init__(self, path, reason, line=None, column=None, name=None):
        self.path, self.reason, self.line, self.column, self.name = (
            str(path), reason, line, column, name)
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column}" + (f" ({name!r})" if name is not None else "")
        super().__init__(f"{where}: {reason}")


def read_csv(
    path: str | pathlib.Path,
    channels: Iterable[str] | None = None,
    *,
    allowed: Iterable[str] | None = None,
    expected: str | None = None,
    max_abs: float = MAX_ABS,
    varying: Iterable[str] = (),
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Read ``path``; return ``(t (n,), {channel: (n,) float64})``.

    ``channels``: names to return (all if None); each must be a column of the file.
    ``allowed``: if given, every column after ``t`` must be one of these names (else an error
    naming the header line and column; ``expected`` describes the allowed names in it).
    ``max_abs``: largest magnitude accepted in any cell. ``varying``: columns (those present)
    that must not hold the same value in every row, e.g. measured channels: a constant one
    carries no information and is most often a disconnected or frozen sensor.
    """
    path = pathlib.Path(path)
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CSVError(where, f"cannot read file ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise CSVError(where, f"not a UTF-8 text file (byte 0x{raw[exc.start]:02x} at offset "
                       f"{exc.start}): a CSV of numbers is expected", line) from None
    rows = []
    reader = csv.reader(text.splitlines())
    try:
        for lineno, row in enumerate(reader, start=1):
            if not row or (len(row) == 1 and row[0].strip() == ""):
                continue
            if row[0].lstrip().startswith("#"):
                continue
            rows.append((lineno, [c.strip() for c in row]))
    except csv.Error as exc:  # a NUL byte, a quote left open: not a CSV of numbers
        raise CSVError(where, f"not a readable CSV file ({exc})", reader.line_num) from None
    if not rows:
        raise CSVError(where, "no header row (expected first column 't')")
    head_line, header = rows[0]
    if header[0] != "t":
        sep = next((c for c in (";", "\t", " ", "|") if len(header) == 1 and c in header[0]), None)
        hint = "" if sep is None else f" (the columns seem separated by {sep!r}: use commas)"
        raise CSVError(where, f"first column must be 't', got {header[0]!r}{hint}", head_line, 1)
    allowed = None if allowed is None else set(allowed)
    seen = {}
    for j, name in enumerate(header, start=1):
        if name == "":
            raise CSVError(where, "empty column name", head_line, j)
        if name in seen:
            raise CSVError(where, f"duplicate column name {name!r} (also column {seen[name]})",
                           head_line, j)
        if j > 1 and allowed is not None and name not in allowed:
            raise CSVError(where, f"unknown channel {name!r}; expected "
                           f"{expected or sorted(allowed)}", head_line, j)
        seen[name] = j
    if len(rows) < 2:
        raise CSVError(where, f"no data rows after the header (line {head_line})")
    if channels is None:
        wanted = list(header[1:])
    else:
        wanted = list(channels)
        for c in wanted:
            if c == "t":
                continue
            if c not in seen:
                raise CSVError(where, f"unknown channel {c!r}; the file has columns {header[1:]}")
        wanted = [c for c in wanted if c != "t"]
    ncol = len(header)
    data = np.empty((len(rows) - 1, ncol))
    for i, (lineno, row) in enumerate(rows[1:]):
        if len(row) != ncol:
            raise CSVError(where, f"expected {ncol} values, found {len(row)}", lineno)
        for j, cell in enumerate(row):
            if cell == "":
                raise CSVError(where, "missing value", lineno, j + 1, header[j])
            try:
                v = float(cell)
            except ValueError:
                raise CSVError(where, f"non-numeric value {cell!r}", lineno, j + 1,
                               header[j]) from None
            if not math.isfinite(v):
                raise CSVError(where, f"value is {cell!r} (not finite)", lineno, j + 1, header[j])
            if abs(v) > max_abs:
                raise CSVError(where, f"value {cell} is beyond ±{max_abs:g} (not a measured "
                               "quantity in SI units)", lineno, j + 1, header[j])
            data[i, j] = v
    t = data[:, 0]
    dt = np.diff(t)
    bad = np.nonzero(~(dt > 0.0))[0]
    if bad.size:
        k = int(bad[0]) + 1
        raise CSVError(where, f"time not strictly increasing ({float(t[k - 1])!r} then "
                       f"{float(t[k])!r})",
                       rows[1:][k][0], 1, "t")
    for c in varying:
        j = seen.get(c)
        col = None if j is None or j == 1 else data[:, j - 1]
        if col is not None and col.size > 1 and np.all(col == col[0]):
            raise CSVError(where, f"the channel is constant ({col[0]:.10g} in all "
                           f"{col.size} rows): a measured channel that never changes "
                           "carries no information (a disconnected or frozen sensor?); remove "
                           "the column or record motion", head_line, j, c)
    return t, {c: data[:, seen[c] - 1].copy() for c in wanted}


def write_csv(path: str | pathlib.Path, t: np.ndarray, channels: dict[str, np.ndarray],
              fmt: str = "%.10g", comment: str | None = None) -> None:
    """Write ``t`` and named channels in the format :func:`read_csv` reads; ``comment`` (any
    number of lines) goes above the header as ``#`` lines."""
    names = list(channels)
    cols = [np.asarray(t, dtype=float)] + [np.asarray(channels[n], dtype=float) for n in names]
    arr = np.column_stack(cols)
    head = ",".join(["t"] + names)
    if comment:
        head = "\n".join("# " + line for line in comment.splitlines()) + "\n" + head
    np.savetxt(path, arr, delimiter=",", header=head, comments="", fmt=fmt)
