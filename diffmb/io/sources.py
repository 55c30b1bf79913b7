"""Model files: :func:`load_model` by suffix, and where a model came from as data
(:class:`~diffmb.model.ModelSource`: path and SHA-256).

``load_mjcf`` and ``load_urdf`` set ``Model.source`` with :func:`with_source`; the field is
static, so a model whose parameters were changed afterwards (``eqx.tree_at``, a fit) keeps it.
:mod:`diffmb.viz` reads the geometry there and :func:`diffmb.io.save_trajectory` records it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib

from ..model import Model, ModelSource

__all__ = ["file_source", "with_source", "sha256_of", "load_model"]

KINDS = ("mjcf", "urdf")


def sha256_of(path) -> str:
    """Hex SHA-256 of the bytes of the file ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_source(path, kind: str, *, floating_base: bool = False) -> ModelSource:
    """The :class:`ModelSource` of the file ``path`` as it is now (absolute path, SHA-256)."""
    if kind not in KINDS:
        raise ValueError(f"{path}: model file kind {kind!r}; one of {KINDS}")
    p = pathlib.Path(path).resolve()
    return ModelSource(path=str(p), sha256=sha256_of(p), kind=kind,
                       floating_base=bool(floating_base))


def with_source(model: Model, path, kind: str, *, floating_base: bool = False) -> Model:
    """``model`` with ``source`` set to the file ``path`` (see :func:`file_source`)."""
    return dataclasses.replace(model, source=file_source(path, kind, floating_base=floating_base))


SUFFIXES = {".xml": "mjcf", ".urdf": "urdf"}


def load_model(path, *, floating_base: bool | None = None, **kw) -> Model:
    """Load a model file by its suffix: ``.xml`` by :func:`~diffmb.io.mjcf.load_mjcf`, ``.urdf``
    by :func:`~diffmb.io.urdf.load_urdf` (``floating_base``: a free joint at the root link;
    an MJCF file's root joints are its own, so ``floating_base=True`` is refused for it).
    ``kw`` goes to the loader (``strict``, ``gravity``, ``added_mass``)."""
    p = pathlib.Path(path)
    kind = SUFFIXES.get(p.suffix.lower())
    if kind is None:
        raise ValueError(f"{p}: unknown model file type {p.suffix or '(none)'!r}; expected .xml "
                         "(MJCF) or .urdf")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such model file")
    if kind == "urdf":
        from .urdf import load_urdf

        return load_urdf(p, floating_base=bool(floating_base), **kw)
    if floating_base:
        raise ValueError(f"{p}: floating_base applies to URDF files; an MJCF file frees its root "
                         "body itself (<freejoint/>)")
    from .mjcf import load_mjcf

    return load_mjcf(p, **kw)
