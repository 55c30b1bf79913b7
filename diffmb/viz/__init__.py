"""See the motion: replays of trajectories as a self-contained HTML page, a GIF/MP4 video or a
PNG still (``docs/viz.md``).

    diffmb.viz.replay(model, traj, "replay.html")            # three.js page, no network needed
    diffmb.viz.replay(model, traj, "run.mp4")                # or .gif: software-rendered video
    diffmb.viz.still(model, q, "pose.png")                   # one configuration, for a report

``model`` is a :class:`~diffmb.Model` (its file's geoms are drawn when it was loaded by
``load_mjcf``/``load_urdf``, else a skeleton) or any system with the replay protocol
(``body_shapes()`` and ``body_poses(q)``, see :class:`diffmb.systems.AbstractSystem`), or a
:class:`PosedBodies`. Body poses are computed here by forward kinematics for every frame.
"""

from __future__ import annotations

import pathlib

import numpy as np

from .scene import PosedBodies, Primitive, Scene, build_scene, poses_of, shapes_of

__all__ = ["replay", "still", "Primitive", "PosedBodies", "Scene", "build_scene", "poses_of",
           "shapes_of", "FORMATS", "model_from_info"]

FORMATS = (".html", ".gif", ".mp4", ".png")


def _format(path) -> str:
    suf = pathlib.Path(path).suffix.lower()
    if suf not in FORMATS:
        raise ValueError(f"{path}: unknown replay file type {suf or '(none)'!r}; use one of "
                         f"{', '.join(FORMATS)}")
    return suf


def replay(model, traj, path="replay.html", *, forces=(), frames=False, labels=None,
           terrain=None, max_frames=None, fps=None, title=None, size=(640, 480),
           view=None) -> pathlib.Path:
    """Write a replay of ``traj`` on ``model`` to ``path`` and return the path.

    ``traj``: a :class:`~diffmb.Trajectory`; a batched one (q of shape (B, ns, nq)) or a list
    of trajectories are overlaid (the first opaque, the others in distinct translucent colours,
    resampled onto the first one's times). ``forces``: the force elements given to
    ``simulate``: contact elements' points and forces (:func:`diffmb.contacts.contact_forces`)
    and the fluid/aerodynamic elements' force on each body are drawn as arrows, for the first
    trajectory. ``frames``: draw each body's axes (x red, y green, z blue). ``labels``: one per
    trajectory. ``terrain``: a ``diffmb.contacts`` Plane or HeightField to draw (terrains of
    contact elements are drawn anyway).

    The file type follows the suffix: ``.html`` (all saved frames, at most ``max_frames``
    (default 20 000), or resampled at ``fps``), ``.gif`` / ``.mp4`` (rendered with matplotlib
    at ``fps`` (default 25) frames per second, at most ``max_frames`` (default 300) frames,
    ``size`` pixels; MP4 needs ``imageio-ffmpeg``), ``.png`` (the first frame).
    """
    fmt = _format(path)
    path = pathlib.Path(path)
    if fmt == ".html":
        from .html import write_html

        scene = build_scene(model, traj, forces=forces, frames=frames, labels=labels,
                            terrain=terrain, max_frames=20_000 if max_frames is None else max_frames,
                            fps=fps, title=title)
        return write_html(scene, path)
    from . import render

    if fmt == ".png":
        scene = build_scene(model, traj, forces=forces, frames=frames, labels=labels,
                            terrain=terrain, max_frames=1, title=title)
        return render.write_png(scene, path, size=size, view=view)
    if fmt == ".mp4":
        render.ffmpeg_exe()  # fail before the rendering work
    scene = build_scene(model, traj, forces=forces, frames=frames, labels=labels, terrain=terrain,
                        fps=25.0 if fps is None else fps,
                        max_frames=300 if max_frames is None else max_frames, title=title)
    return render.write_video(scene, path, size=size, view=view)


def still(model, q, path="still.png", *, frames=False, title=None, size=(640, 480),
          view=None, terrain=None) -> pathlib.Path:
    """A PNG picture of ``model`` at configuration ``q`` (nq,), or several configurations
    overlaid (``q`` of shape (k, nq))."""
    from . import render

    if pathlib.Path(path).suffix.lower() != ".png":
        raise ValueError(f"{path}: still() writes PNG files (suffix .png)")
    q = np.asarray(q, float)
    if q.ndim not in (1, 2):
        raise ValueError(f"still: q must be (nq,) or (k, nq), got shape {q.shape}")

    class _Pose:
        pass

    trajs = []
    for qq in np.atleast_2d(q):
        t = _Pose()
        t.ts, t.q, t.v, t.aux = np.zeros(1), qq[None], None, None
        trajs.append(t)
    scene = build_scene(model, trajs, frames=frames, title=title, terrain=terrain)
    return render.write_png(scene, path, size=size, view=view)


def model_from_info(info: dict, *, where: str = "trajectory file"):
    """The Model recorded by ``Trajectory.save``: its file when it still exists with the same
    SHA-256, else the embedded text (written next to a temporary copy), else an error saying
    what is missing."""
    import hashlib
    import tempfile

    from ..io.mjcf import load_mjcf
    from ..io.urdf import load_urdf

    path, kind, sha = info.get("model_path"), info.get("model_kind"), info.get("model_sha256")
    if not path:
        raise ValueError(f"{where}: no model recorded (save with Trajectory.save(path, "
                         "model=...)); pass the model file explicitly (--model FILE)")
    load = load_urdf if kind == "urdf" else load_mjcf
    p = pathlib.Path(path)
    if p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest() == sha:
        return load(p)
    text = info.get("model_text")
    if text is None:
        raise ValueError(f"{where}: model file {path} is missing or changed (SHA-256 differs) "
                         "and its text was not embedded; pass --model FILE")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="diffmb-model-")) / p.name
    tmp.write_text(text)
    return load(tmp)
