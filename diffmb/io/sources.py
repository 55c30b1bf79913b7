"""Which file a loaded :class:`~diffmb.Model` came from.

``load_mjcf`` and ``load_urdf`` remember the path of the file they read, keyed by the model's
static topology (name, body and joint names, nq), so that a model whose parameters were changed
afterwards (``eqx.tree_at``, a fit) still finds its file. :func:`source_of` gives the path back
(or None for a model built by hand); :mod:`diffmb.viz` reads the geometry there and
``Trajectory.save`` records it with its SHA-256.
"""

from __future__ import annotations

import os

__all__ = ["remember", "source_of"]

_SOURCES: dict[tuple, tuple[str, str]] = {}


def _key(model) -> tuple:
    return (model.name, tuple(model.body_names), tuple(model.joint_names), int(model.nq))


def remember(model, path, kind: str) -> None:
    """Record that ``model`` was loaded from ``path`` (``kind``: "mjcf" or "urdf")."""
    _SOURCES[_key(model)] = (os.path.abspath(str(path)), kind)


def source_of(model) -> tuple[str, str] | None:
    """``(absolute path, kind)`` of the file ``model`` was loaded from, or None."""
    try:
        return _SOURCES.get(_key(model))
    except AttributeError:
        return None
