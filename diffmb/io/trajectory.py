"""Trajectories on disk: :func:`save_trajectory` and :func:`load_trajectory` (``.npz``), and
:func:`model_from_info`, the model a saved trajectory was computed on.

A saved file holds ts, q, v, status, t_fail and num_steps (not ``aux``) and an ``info`` record
(JSON): the model's name, nq, nv, joint and body names and, for a model loaded from a file
(``Model.source``), the file's absolute path, SHA-256, kind (``"mjcf"``/``"urdf"``), the URDF
loader's ``floating_base`` and the file's text when under 1 MB: what a replay or a refit needs.
"""

from __future__ import annotations

import json
import pathlib
import tempfile

import numpy as np

from ..model import Model, ModelSource
from .sources import SUFFIXES, file_source, load_model, sha256_of

__all__ = ["save_trajectory", "load_trajectory", "model_from_info", "FORMAT", "VERSION"]

FORMAT, VERSION = "diffmb.Trajectory", 2
TEXT_LIMIT = 1_000_000  # bytes: a model file's text is embedded below this size


def _source_of(model) -> ModelSource | None:
    if model is None:
        return None
    if isinstance(model, ModelSource):
        return model
    if isinstance(model, Model):
        return model.source
    if isinstance(model, str | pathlib.Path):
        p = pathlib.Path(model)
        if not p.is_file():
            raise FileNotFoundError(f"save_trajectory: model file {p} does not exist")
        kind = SUFFIXES.get(p.suffix.lower())
        if kind is None:
            raise ValueError(f"save_trajectory: {p}: unknown model file type {p.suffix!r}; "
                             "expected .xml (MJCF) or .urdf")
        return file_source(p, kind)
    raise TypeError(f"save_trajectory: model must be a diffmb.Model, a ModelSource or a model "
                    f"file path, got {type(model).__name__}")


def save_trajectory(traj, path, model=None) -> pathlib.Path:
    """Write ``traj`` (a :class:`~diffmb.Trajectory`) to ``path`` (``.npz``) with the ``info``
    record of the module docstring; ``model``: the :class:`~diffmb.Model` it was computed on
    (its ``source`` is recorded), a :class:`~diffmb.model.ModelSource`, or a model file path.
    The text is embedded only while the file still has the recorded SHA-256. Returns the path."""
    path = pathlib.Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: save_trajectory writes .npz files")
    info: dict = {"format": FORMAT, "version": VERSION}
    if isinstance(model, Model):
        info.update(model_name=model.name, nq=int(model.nq), nv=int(model.nv),
                    joint_names=list(model.joint_names), body_names=list(model.body_names))
    src = _source_of(model)
    if src is not None:
        info.update(model_path=src.path, model_kind=src.kind, model_sha256=src.sha256,
                    model_floating_base=bool(src.floating_base))
        p = pathlib.Path(src.path)
        if p.is_file() and p.stat().st_size < TEXT_LIMIT and sha256_of(p) == src.sha256:
            info["model_text"] = p.read_bytes().decode("utf-8", "replace")
    v = None if traj.v is None else np.asarray(traj.v)
    arrays = dict(ts=np.asarray(traj.ts), q=np.asarray(traj.q), status=np.asarray(traj.status),
                  t_fail=np.asarray(traj.t_fail), num_steps=np.asarray(traj.num_steps))
    if v is not None:
        arrays["v"] = v
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, info=np.array(json.dumps(info)), **arrays)
    return path


def load_trajectory(path):
    """``(trajectory, info)`` from a file written by :func:`save_trajectory` (``info``: a dict,
    see the module docstring)."""
    import jax.numpy as jnp

    from ..simulation import SUCCESS, Trajectory

    try:
        f = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a saved diffmb trajectory ({e})") from None
    with f:
        missing = [k for k in ("ts", "q") if k not in f.files]
        if missing:
            raise ValueError(f"{path}: not a saved diffmb trajectory (missing {missing})")
        get = lambda k, d: jnp.asarray(f[k]) if k in f.files else d
        tr = Trajectory(ts=get("ts", None), q=get("q", None), v=get("v", None),
                        status=get("status", jnp.int32(SUCCESS)),
                        t_fail=get("t_fail", jnp.asarray(jnp.inf)),
                        num_steps=get("num_steps", jnp.int32(0)))
        try:
            info = json.loads(str(f["info"])) if "info" in f.files else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: its info record is not JSON ({e})") from None
    if not isinstance(info, dict):
        raise ValueError(f"{path}: its info record is not a JSON object")
    return tr, info


def model_from_info(info: dict, *, where: str = "trajectory file", floating_base=None) -> Model:
    """The Model recorded by :func:`save_trajectory`: its file when it still has the recorded
    SHA-256, else the embedded text (loaded from a temporary copy), else an error saying what
    is missing. ``floating_base`` overrides the recorded URDF option."""
    path, kind, sha = info.get("model_path"), info.get("model_kind"), info.get("model_sha256")
    if not path:
        raise ValueError(f"{where}: no model recorded (save with save_trajectory(traj, path, "
                         "model)); pass the model file explicitly (--model FILE)")
    if kind not in ("mjcf", "urdf"):
        raise ValueError(f"{where}: recorded model kind {kind!r} is not 'mjcf' or 'urdf'")
    if floating_base and kind != "urdf":
        raise ValueError(f"{where}: floating_base applies to a URDF model; the recorded model "
                         f"is the MJCF file {path}")
    fb = bool(info.get("model_floating_base", False)) if floating_base is None else floating_base
    fb = fb if kind == "urdf" else None
    p = pathlib.Path(path)
    if p.is_file() and sha256_of(p) == sha:
        model = load_model(p, floating_base=fb)
    else:
        text = info.get("model_text")
        if text is None:
            raise ValueError(f"{where}: model file {path} is missing or changed (SHA-256 "
                             "differs) and its text was not embedded; pass --model FILE")
        suffix = ".urdf" if kind == "urdf" else ".xml"
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="diffmb-model-")) / (p.stem + suffix)
        tmp.write_text(text)
        model = load_model(tmp, floating_base=fb)
    nq = info.get("nq")
    if nq is not None and int(nq) != model.nq:
        raise ValueError(f"{where}: the recorded model had nq = {nq}, {path} loads with nq = "
                         f"{model.nq}" + (" (a URDF: check --floating-base)" if kind == "urdf"
                                          else ""))
    return model
