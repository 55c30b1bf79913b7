"""The self-contained HTML replay: one file, three.js and the data inside, no network.

Layout of the page: ``<script type="text/plain" id="three-src">`` holds the vendored three.js ES
module (``vendor/three.module.min.js``, MIT, see ``vendor/three.LICENSE``), which the page's
own module (``replay.js``) imports from a Blob URL; ``<script type="application/json"
id="scene-data">`` holds the scene: shapes, terrain and, per frame, every body's pose
[x, y, z, qw, qx, qy, qz] as little-endian float32, base64-encoded.
"""

from __future__ import annotations

import base64
import json
import pathlib

import numpy as np

from .scene import Scene

__all__ = ["write_html", "scene_json"]

_HERE = pathlib.Path(__file__).parent
THREE_JS = _HERE / "vendor" / "three.module.min.js"
THREE_LICENSE = _HERE / "vendor" / "three.LICENSE"
HFIELD_MAX = 256  # height fields are decimated to at most this many samples per side


def _b64(a, dtype="<f4") -> str:
    return base64.b64encode(np.ascontiguousarray(np.asarray(a), dtype=dtype).tobytes()).decode()


def _floats(x, nd=7):
    return [round(float(v), nd) for v in np.ravel(x)]


def scene_json(scene: Scene) -> dict:
    """The scene as the page reads it (arrays as base64 float32 / uint32)."""
    lo, hi = scene.bounds
    ext = scene.extent()
    shapes = []
    for s in scene.shapes:
        d = dict(kind=s.kind, body=int(s.body), size=_floats(s.size), pos=_floats(s.pos),
                 quat=_floats(s.quat), rgba=_floats(s.rgba, 4), name=s.name)
        if s.kind == "mesh":
            d["vertices"] = _b64(s.vertices)
            d["faces"] = _b64(s.faces, "<u4")
        shapes.append(d)
    terrain = []
    for t in scene.terrain:
        if t["kind"] == "plane":
            terrain.append(dict(kind="plane", normal=_floats(t["normal"]), offset=float(t["offset"]),
                                rgba=_floats(t["rgba"], 4)))
        else:
            H, sp = np.asarray(t["heights"], float), np.asarray(t["spacing"], float)
            step = [max(1, int(np.ceil(n / HFIELD_MAX))) for n in H.shape]
            H = H[::step[0], ::step[1]]
            terrain.append(dict(kind="hfield", heights=_b64(H), shape=list(H.shape),
                                origin=_floats(t["origin"]), spacing=_floats(sp * step),
                                rgba=_floats(t["rgba"], 4)))
    tracks = [dict(label=t["label"], color=None if t["color"] is None else _floats(t["color"], 4),
                   opacity=float(t["opacity"]), poses=_b64(t["poses"])) for t in scene.tracks]
    forces = [dict(kind=f["kind"], label=f["label"], color=_floats(f["color"], 4),
                   n=int(f["points"].shape[1]), points=_b64(np.nan_to_num(f["points"])),
                   vectors=_b64(np.nan_to_num(f["vectors"])), show_points=bool(f["show_points"]))
              for f in scene.forces]
    P = scene.tracks[0]["poses"][:, 0, :3]
    span = float(np.max(np.ptp(P[np.all(np.isfinite(P), 1)], axis=0))) if len(P) else 0.0
    roots = [b for b, p in enumerate(scene.body_parents) if p < 0]
    return dict(version=1, title=scene.title, bodyNames=list(scene.body_names),
                bodyParents=list(scene.body_parents), shapes=shapes, terrain=terrain,
                times=_b64(scene.times), tracks=tracks, forces=forces, frames=scene.frames,
                bounds=[_floats(lo), _floats(hi)], extent=ext, follow=span > 8 * ext,
                root=roots[0] if roots else 0, notes=list(scene.notes))


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
html, body {{ margin: 0; height: 100%; overflow: hidden; font: 13px system-ui, sans-serif; }}
#view {{ position: absolute; inset: 0 0 44px 0; }}
#view canvas {{ display: block; }}
#bar {{ position: absolute; left: 0; right: 0; bottom: 0; height: 44px; display: flex; gap: 10px;
  align-items: center; padding: 0 10px; background: #fafafa; border-top: 1px solid #ccc;
  box-sizing: border-box; }}
#slider {{ flex: 1; }}
#time {{ font-variant-numeric: tabular-nums; min-width: 150px; }}
#title {{ position: absolute; left: 10px; top: 8px; font-weight: 600; color: #333; }}
#legend {{ position: absolute; right: 10px; top: 8px; background: rgba(255,255,255,.8);
  padding: 4px 6px; border-radius: 4px; }}
#legend:empty {{ display: none; }}
.sw {{ display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; }}
#notes {{ position: absolute; left: 10px; bottom: 52px; color: #555; font-size: 11px;
  max-width: 60%; }}
#msg {{ display: none; position: absolute; top: 40%; left: 10%; right: 10%; padding: 12px;
  background: #fee; border: 1px solid #c66; }}
</style>
</head>
<body>
<div id="view"></div>
<div id="title"></div>
<div id="legend"></div>
<div id="notes"></div>
<div id="msg"></div>
<div id="bar">
<button id="play" type="button">Play</button>
<input id="slider" type="range" min="0" max="0" step="1" value="0" aria-label="frame">
<span id="time"></span>
<label>speed <select id="speed">
<option value="0.1">0.1x</option><option value="0.25">0.25x</option>
<option value="0.5">0.5x</option><option value="1" selected>1x</option>
<option value="2">2x</option><option value="4">4x</option></select></label>
<label><input id="frames" type="checkbox"> frames</label>
<label><input id="forces" type="checkbox" checked> forces</label>
<label><input id="follow" type="checkbox"> follow</label>
</div>
<!-- three.js {three_version}, MIT licence:
{license}-->
<script type="text/plain" id="three-src">{three}</script>
<script type="application/json" id="scene-data">{data}</script>
<script type="module">
{page}
</script>
</body>
</html>
"""


def write_html(scene: Scene, path) -> pathlib.Path:
    """Write the replay page of ``scene`` to ``path``; returns the path."""
    path = pathlib.Path(path)
    three = THREE_JS.read_text(encoding="utf-8")
    version = three.split('const t="', 1)[1].split('"', 1)[0] if 'const t="' in three else "?"
    data = json.dumps(scene_json(scene), separators=(",", ":"), allow_nan=False)
    data = data.replace("</", "<\\/")  # no "</script>" inside the JSON block
    page = (_HERE / "replay.js").read_text(encoding="utf-8")
    html = _PAGE.format(title=_escape(scene.title), three=three, data=data, page=page,
                        license=THREE_LICENSE.read_text(encoding="utf-8").replace("--", "- -"),
                        three_version=f"r{version}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
