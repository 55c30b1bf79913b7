"""See the motion: replays of trajectories as a self-contained HTML page, a GIF/MP4 video or a
PNG still (``docs/viz.md``).

    diffmb.viz.replay(model, traj, "replay.html")            # three.js page, no network needed
    diffmb.viz.replay(model, traj, "run.mp4")                # or .gif: software-rendered video
    diffmb.viz.still(model, q, "pose.png")                   # one configuration, for a report

``model`` is a :class:`~diffmb.Model` (its file's geoms are drawn when it was loaded from a file,
``Model.source``, else a skeleton), a :class:`PosedBodies`, or any system whose type is
registered with :func:`primitives_of` and :func:`poses_of` (the UAV and the absolute-coordinate
chain are, in :mod:`diffmb.viz.systems`). Body poses are computed here for every frame.
"""

from __future__ import annotations

import pathlib

import numpy as np

from ..io.trajectory import model_from_info, save_trajectory
from . import systems as systems
from .scene import (
    PosedBodies,
    Primitive,
    Scene,
    body_names_of,
    build_scene,
    frames,
    poses_of,
    primitives_of,
    shapes_of,
)

__all__ = ["replay", "still", "Primitive", "PosedBodies", "Scene", "build_scene", "poses_of",
           "primitives_of", "body_names_of", "shapes_of", "FORMATS", "model_from_info", "frames",
           "study_replay", "beam_frames"]

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
    from .scene import frames as recorded  # ``frames`` is the keyword here

    trajs = [recorded(np.zeros(1), qq[None]) for qq in np.atleast_2d(q)]
    scene = build_scene(model, trajs, frames=frames, title=title, terrain=terrain)
    return render.write_png(scene, path, size=size, view=view)


def beam_frames(ts, theta, tip, length, n=10, width=0.02, hub=0.05):
    """Replay data of a flexible arm from its hub angle ``theta`` (ns,) [rad] about z and tip
    deflection ``tip`` (ns,) [m]: a hub cylinder and ``n`` box segments along the cubic
    cantilever shape w(x) = tip (3 s² − s³)/2, s = x/length. Returns ``(PosedBodies,
    Trajectory)``."""
    from .scene import PALETTE

    ts, theta, tip = (np.asarray(a, float).reshape(-1) for a in (ts, theta, tip))
    s = np.linspace(0, 1, n + 1)
    shape = (3 * s**2 - s**3) / 2
    seg = length / n
    shapes = [Primitive("cylinder", (hub, 0.03), 0, rgba=(0.4, 0.4, 0.45, 1.0), name="hub")]
    shapes += [Primitive("box", (seg / 2, width / 2, 0.01), i + 1,
                         rgba=PALETTE[i % 2] + (1.0,), name=f"segment{i}") for i in range(n)]
    names = ["hub"] + [f"segment{i}" for i in range(n)]
    q = np.zeros((len(ts), n + 1, 7))
    q[:, 0, 3] = np.cos(theta / 2)
    q[:, 0, 6] = np.sin(theta / 2)
    for i in range(n):
        x = (s[i] + s[i + 1]) / 2 * length
        w = tip[:, None] * shape[[i, i + 1]][None]
        phi = theta + np.arctan2(w[:, 1] - w[:, 0], seg)  # the segment's direction
        wm = w.mean(1)
        c, sn = np.cos(theta), np.sin(theta)
        q[:, i + 1, 0] = c * x - sn * wm
        q[:, i + 1, 1] = sn * x + c * wm
        q[:, i + 1, 3] = np.cos(phi / 2)
        q[:, i + 1, 6] = np.sin(phi / 2)
    return PosedBodies(shapes, names), frames(ts, q.reshape(len(ts), -1))


def study_replay(out_dir, model, traj, *, name="replay.html", fps=25.0, **kw) -> str:
    """Write ``out_dir/replay.html`` for a study (frames resampled at ``fps``) and return the
    line its ``report.md`` links it with; a failure is reported in that line, never raised (a
    replay is a view of the results, not one of them). For a :class:`~diffmb.Model` loaded from
    a file the trajectory is saved too (``replay.npz``, :func:`diffmb.io.save_trajectory`), which
    ``diffmb replay DIR/replay.npz --out DIR2`` replays again."""
    try:
        p = replay(model, traj, pathlib.Path(out_dir) / name, fps=fps, **kw)
    except Exception as e:  # noqa: BLE001 - the study's results stand without the replay
        return f"Replay: not written ({type(e).__name__}: {e})."
    saved = ""
    try:
        from ..model import Model

        if isinstance(model, Model) and model.source is not None:
            npz = pathlib.Path(out_dir) / (pathlib.Path(name).stem + ".npz")
            save_trajectory(traj, npz, model)
            saved = f"; trajectory in [{npz.name}]({npz.name}) for `diffmb replay`"
    except Exception:  # noqa: BLE001,S110 - the saved trajectory is a convenience
        saved = ""
    return (f"Replay: [{name}]({name}) (open in a browser; three.js page, no network needed, "
            f"{p.stat().st_size / 1e6:.1f} MB{saved}).")
