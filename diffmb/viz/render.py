"""Software rendering of a :class:`~diffmb.viz.scene.Scene` with matplotlib (Agg): PNG stills,
GIF (Pillow) and MP4 (``imageio-ffmpeg``'s bundled ffmpeg) videos, on a machine without a GPU
or a display.

Every shape is tessellated into polygons (here, in numpy), moved by its body's pose and drawn as
one mplot3d ``Poly3DCollection`` per frame; matplotlib sorts the polygons back to front
(painter's algorithm), so crossing faces may be drawn in the wrong order: good enough to see the
motion, not a photo. Faces are shaded by a fixed light (Lambert). Force arrows are line segments.
"""

from __future__ import annotations

import pathlib

import numpy as np

from .scene import Scene, matrix_from_quat

__all__ = ["write_png", "write_video", "ffmpeg_exe", "tessellate"]

_LIGHT = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])


def ffmpeg_exe() -> str:
    """Path of the ffmpeg binary bundled by ``imageio-ffmpeg``; a clear error if missing."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise RuntimeError("writing MP4 needs the 'imageio-ffmpeg' package (pip install "
                           "imageio-ffmpeg, a wheel that bundles ffmpeg); or write a .gif "
                           "or .html replay instead") from None
    return imageio_ffmpeg.get_ffmpeg_exe()


def _sphere(n=10, m=6):
    th = np.linspace(0, 2 * np.pi, n + 1)
    ph = np.linspace(-np.pi / 2, np.pi / 2, m + 1)
    return th, ph


def tessellate(s, res=10) -> list[np.ndarray]:
    """Polygons (each (k, 3)) of a primitive in its own frame (before ``pos``/``quat``)."""
    z = s.size
    if s.kind == "box":
        a, b, c = z
        V = np.array([[sx * a, sy * b, sz * c] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        F = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
        return [V[f] for f in F]
    if s.kind in ("sphere", "ellipsoid"):
        r = np.array(z if s.kind == "ellipsoid" else (z[0],) * 3)
        return _latlong(lambda u, v: r * np.array([np.cos(v) * np.cos(u), np.cos(v) * np.sin(u),
                                                    np.sin(v)]), res)
    if s.kind == "cylinder":
        r, h = z[0], z[1]
        th = np.linspace(0, 2 * np.pi, res + 1)
        ring = np.stack([r * np.cos(th), r * np.sin(th)], 1)
        polys = [np.array([[*ring[i], -h], [*ring[i + 1], -h], [*ring[i + 1], h], [*ring[i], h]])
                 for i in range(res)]
        polys += [np.column_stack([ring[:-1], np.full(res, sz)]) for sz in (-h, h)]
        return polys
    if s.kind == "capsule":
        r, h = z[0], z[1]

        def f(u, v):
            p = r * np.array([np.cos(v) * np.cos(u), np.cos(v) * np.sin(u), np.sin(v)])
            p[2] += h if v >= 0 else -h
            return p

        return _latlong(f, res, split=True)
    if s.kind == "plane":
        a, b = (x if x > 0 else 5.0 for x in z[:2])
        return [np.array([[-a, -b, 0], [a, -b, 0], [a, b, 0], [-a, b, 0]])]
    if s.kind == "mesh":
        F = np.asarray(s.faces)
        if len(F) > 1500:  # keep the software renderer quick
            F = F[np.linspace(0, len(F) - 1, 1500).astype(int)]
        return list(np.asarray(s.vertices)[F])
    raise ValueError(f"unknown primitive {s.kind!r}")


def _latlong(f, res, split=False):
    u = np.linspace(0, 2 * np.pi, res + 1)
    m = max(res // 2, 3)
    v = np.linspace(-np.pi / 2, np.pi / 2, m + 1)
    if split:  # a capsule: an equator on each cap
        v = np.concatenate([v[v < 0], [-1e-9, 1e-9], v[v > 0]])
    P = np.array([[f(a, b) for a in u] for b in v])
    return [np.array([P[j, i], P[j, i + 1], P[j + 1, i + 1], P[j + 1, i]])
            for j in range(len(v) - 1) for i in range(res)]


def _shape_polys(scene: Scene):
    out = []
    for s in scene.shapes:
        R = matrix_from_quat(np.asarray(s.quat))
        polys = [p @ R.T + np.asarray(s.pos) for p in tessellate(s)]
        out.append((s, np.array(polys, dtype=object) if len({len(p) for p in polys}) > 1
                    else np.stack(polys)))
    return out


def _terrain_polys(scene: Scene):
    lo, hi = scene.bounds
    out = []
    for t in scene.terrain:
        if t["kind"] == "plane":
            n = np.asarray(t["normal"], float)
            n /= np.linalg.norm(n)
            c = np.array([(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, 0.0])
            c += n * (t["offset"] - c @ n)
            a = np.cross(n, [1.0, 0, 0] if abs(n[0]) < 0.9 else [0, 1.0, 0])
            a /= np.linalg.norm(a)
            b = np.cross(n, a)
            L = max(hi[0] - lo[0], hi[1] - lo[1])
            out.append(np.array([c + L * (sa * a + sb * b) for sa, sb in
                                 ((-1, -1), (1, -1), (1, 1), (-1, 1))])[None])
        else:
            H = np.asarray(t["heights"], float)
            step = [max(1, int(np.ceil(n / 40))) for n in H.shape]
            Hs = H[::step[0], ::step[1]]
            sp = np.asarray(t["spacing"]) * step
            x = t["origin"][0] + sp[0] * np.arange(Hs.shape[0])
            y = t["origin"][1] + sp[1] * np.arange(Hs.shape[1])
            P = np.stack(np.meshgrid(x, y, indexing="ij") + [Hs], -1)
            out.append(np.stack([P[:-1, :-1], P[1:, :-1], P[1:, 1:], P[:-1, 1:]], 2).reshape(-1, 4, 3))
    return out


def _shade(polys, rgba):
    cols = []
    for p in polys:
        p = np.asarray(p, float)
        n = np.cross(p[1] - p[0], p[2] - p[0])
        nn = np.linalg.norm(n)
        k = 0.55 + 0.45 * abs(n @ _LIGHT) / nn if nn > 0 else 0.8
        cols.append((rgba[0] * k, rgba[1] * k, rgba[2] * k, rgba[3]))
    return cols


class _Painter:
    """One matplotlib figure reused for every frame."""

    def __init__(self, scene: Scene, size, view):
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        self.scene = scene
        self.plt = plt
        w, h = size
        self.fig = plt.figure(figsize=(w / 100, h / 100), dpi=100)
        self.ax = self.fig.add_axes([0, 0, 1, 1], projection="3d")
        self.shapes = _shape_polys(scene)
        self.terrain = _terrain_polys(scene)
        self.view = dict(elev=25, azim=-60) if view is None else dict(view)
        lo, hi = scene.bounds
        P0 = scene.tracks[0]["poses"][:, :, :3].reshape(-1, 3)
        span = np.ptp(P0[np.all(np.isfinite(P0), 1)], axis=0) if len(P0) else np.zeros(3)
        self.follow = float(np.max(span)) > 8 * scene.extent()
        self.half = (4 * scene.extent() if self.follow else 0.5 * float(np.max(hi - lo)))

    def draw(self, k):
        from mpl_toolkits.mplot3d.art3d import Line3DCollection, Poly3DCollection

        sc, ax = self.scene, self.ax
        ax.cla()
        polys, colors = [], []
        for T in self.terrain:
            polys += list(T)
            colors += _shade(T, (0.62, 0.58, 0.5, 1.0))
        for ti, tr in enumerate(sc.tracks):
            P = tr["poses"][k]
            Rb = matrix_from_quat(P[:, 3:])
            for s, sp in self.shapes:
                if s.body < 0:
                    if ti == 0:
                        big = s.kind == "plane" and s.size[0] <= 0
                        pl = self._world_plane(s) if big else list(sp)
                        polys += pl
                        colors += _shade(pl, s.rgba)
                    continue
                R, p = Rb[s.body], P[s.body, :3]
                moved = [np.asarray(q, float) @ R.T + p for q in sp]
                rgba = s.rgba if tr["color"] is None else (*tr["color"][:3], s.rgba[3])
                rgba = (*rgba[:3], rgba[3] * tr["opacity"])
                polys += moved
                colors += _shade(moved, rgba)
        ax.add_collection3d(Poly3DCollection(polys, facecolors=colors, edgecolors=(0, 0, 0, 0.08),
                                             linewidths=0.3))
        segs, scol = [], []
        if sc.frames:
            P = sc.tracks[0]["poses"][k]
            Rb = matrix_from_quat(P[:, 3:])
            L = 0.6 * sc.extent()
            for b in range(len(P)):
                for a, c in zip(range(3), ("r", "g", "b"), strict=True):
                    segs.append([P[b, :3], P[b, :3] + L * Rb[b][:, a]])
                    scol.append(c)
        for f in sc.forces:
            V = f["vectors"][k]
            fmax = np.nanmax(np.linalg.norm(f["vectors"], axis=-1))
            if not np.isfinite(fmax) or fmax <= 0:
                continue
            s = 1.5 * sc.extent() / fmax
            for p, v in zip(f["points"][k], V, strict=True):
                if np.linalg.norm(v) > 1e-6 * fmax:
                    segs.append([p, p + s * v])
                    scol.append(f["color"])
        if segs:
            ax.add_collection3d(Line3DCollection(segs, colors=scol, linewidths=1.6))
        if self.follow:
            c = sc.tracks[0]["poses"][k, 0, :3]
        else:
            lo, hi = sc.bounds
            c = (lo + hi) / 2
        h = self.half
        ax.set_xlim(c[0] - h, c[0] + h)
        ax.set_ylim(c[1] - h, c[1] + h)
        ax.set_zlim(c[2] - h, c[2] + h)
        ax.set_box_aspect((1, 1, 1))
        ax.view_init(**self.view)
        ax.set_axis_off()
        ax.text2D(0.02, 0.96, f"{sc.title}   t = {sc.times[k]:.3f} s", transform=ax.transAxes,
                  fontsize=9)
        self.fig.canvas.draw()
        return np.asarray(self.fig.canvas.buffer_rgba())[..., :3].copy()

    def _world_plane(self, s):
        c = self.scene.tracks[0]["poses"][:, 0, :3]
        lo, hi = self.scene.bounds
        L = max(self.half * 1.5, 0.5 * float(np.max(hi[:2] - lo[:2])))
        R = matrix_from_quat(np.asarray(s.quat))
        cx, cy = np.nanmean(c[:, 0]), np.nanmean(c[:, 1])
        n = 8
        xs = np.linspace(cx - L, cx + L, n + 1)
        ys = np.linspace(cy - L, cy + L, n + 1)
        z0 = np.asarray(s.pos)
        out = []
        for i in range(n):
            for j in range(n):
                q = np.array([[xs[i], ys[j], 0], [xs[i + 1], ys[j], 0], [xs[i + 1], ys[j + 1], 0],
                              [xs[i], ys[j + 1], 0]]) - [z0[0], z0[1], 0]
                out.append(q @ R.T + z0)
        return out

    def close(self):
        self.plt.close(self.fig)


def write_png(scene: Scene, path, *, size=(640, 480), view=None, frame=0) -> pathlib.Path:
    from PIL import Image

    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    p = _Painter(scene, size, view)
    try:
        Image.fromarray(p.draw(frame)).save(path)
    finally:
        p.close()
    return path


def write_video(scene: Scene, path, *, size=(640, 480), view=None) -> pathlib.Path:
    """GIF (Pillow) or MP4 (imageio-ffmpeg, H.264) of every frame of ``scene``."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(scene.times)
    dt = float(np.median(np.diff(scene.times))) if n > 1 else 0.04
    fps = 1.0 / dt if dt > 0 else 25.0
    p = _Painter(scene, size, view)
    try:
        if path.suffix.lower() == ".gif":
            from PIL import Image

            frames = [Image.fromarray(p.draw(k)).quantize(colors=128) for k in range(n)]
            frames[0].save(path, save_all=True, append_images=frames[1:], loop=0,
                           duration=max(20, int(round(1000 * dt))))
        else:
            import imageio_ffmpeg

            ffmpeg_exe()
            first = p.draw(0)
            h, w = first.shape[:2]
            import warnings

            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            W = imageio_ffmpeg.write_frames(str(path), (w, h), fps=fps, codec="libx264",
                                            pix_fmt_out="yuv420p", macro_block_size=2,
                                            output_params=["-loglevel", "error"])
            W.send(None)
            W.send(first[: h - h % 2, : w - w % 2].copy() if (h % 2 or w % 2) else first)
            for k in range(1, n):
                W.send(p.draw(k))
            W.close()
    finally:
        p.close()
    return path
