"""diffmb.viz: the self-contained HTML replay (file-level checks and a headless Chromium run),
software-rendered stills and videos, the shapes and poses of non-Model systems, trajectories on
disk (diffmb.io.save_trajectory/load_trajectory) with the model's file as data, and
``diffmb replay``."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb import viz
from diffmb.io import load_trajectory, save_trajectory
from diffmb.simulation import Trajectory
from diffmb.viz.scene import matrix_from_quat, quat_from_matrix


def _traj(ts, q, nv=None):
    q = jnp.asarray(q)
    return Trajectory(ts=jnp.asarray(ts), q=q, v=jnp.zeros(q.shape[:-1] + (nv or q.shape[-1],)),
                      status=jnp.int32(0), t_fail=jnp.inf, num_steps=jnp.int32(len(ts)))


def chain_model(n=30):
    """A planar-ish chain of n bodies, hinges alternating about y and x, 0.1 m links."""
    b = diffmb.ModelBuilder(f"chain{n}")
    for i in range(n):
        b.add_body(f"link{i}", i - 1, pos=(0, 0, 0) if i == 0 else (0.1, 0, 0), mass=1.0,
                   com=(0.05, 0, 0), inertia=np.diag([1e-3, 2e-3, 2e-3]),
                   joints=[dict(name=f"j{i}", type="hinge", axis=(0, 1, 0) if i % 2 else (1, 0, 0.3))])
    return b.build()


def _page_data(path):
    html = path.read_text()
    m = re.search(r'<script type="application/json" id="scene-data">(.*?)</script>', html, re.S)
    return html, json.loads(m.group(1).replace("<\\/", "</"))


def _f32(s):
    return np.frombuffer(base64.b64decode(s), "<f4")


@pytest.mark.slow
def test_html_is_self_contained_small_and_decodes_to_fk(tmp_path):
    model = chain_model(30)
    ts = np.arange(1001) * 0.01  # 10 s at 100 Hz
    q = 0.6 * np.sin(ts[:, None] * (1 + 0.1 * np.arange(30)) + np.arange(30))
    path = viz.replay(model, _traj(ts, q), tmp_path / "chain.html")
    size = path.stat().st_size
    assert size < 5e6, f"{size / 1e6:.2f} MB"
    html, data = _page_data(path)
    # nothing is loaded from the network: no http(s) URL but the XHTML namespace string in three
    urls = set(re.findall(r"https?://[^\s\"')<>]+", html))
    assert urls <= {"http://www.w3.org/1999/xhtml"}, urls
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "Permission is hereby granted" in html  # three.js's MIT licence travels with it
    assert data["bodyNames"] == list(model.body_names)
    times = _f32(data["times"])
    np.testing.assert_allclose(times, ts, atol=1e-5)
    P = _f32(data["tracks"][0]["poses"]).reshape(len(ts), 30, 7)
    for k in (0, 137, 1000):
        R, p = diffmb.body_poses(model, jnp.asarray(q[k]))
        np.testing.assert_allclose(P[k, :, :3], np.asarray(p), atol=1e-5)
        np.testing.assert_allclose(matrix_from_quat(P[k, :, 3:]), np.asarray(R), atol=1e-5)


def test_quaternion_round_trip():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(200, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q *= np.sign(q[:, :1])
    np.testing.assert_allclose(quat_from_matrix(matrix_from_quat(q)), q, atol=1e-12)


def test_bad_input_is_named(tmp_path):
    model = chain_model(3)
    with pytest.raises(ValueError, match="nq = 3"):
        viz.replay(model, _traj(np.arange(4.0), np.zeros((4, 5))), tmp_path / "a.html")
    with pytest.raises(ValueError, match="unknown replay file type '.avi'"):
        viz.replay(model, _traj(np.arange(4.0), np.zeros((4, 3))), tmp_path / "a.avi")
    with pytest.raises(TypeError, match="Trajectory"):
        viz.replay(model, [np.zeros((4, 3))], tmp_path / "a.html")
    with pytest.raises(ValueError, match="labels"):
        viz.replay(model, _traj(np.arange(4.0), np.zeros((4, 3))), tmp_path / "a.html",
                   labels=["a", "b"])


@pytest.mark.slow
def test_batches_and_lists_overlay(tmp_path):
    model = chain_model(3)
    ts = np.linspace(0, 1, 11)
    qb = np.stack([np.full((11, 3), 0.1 * i) for i in range(4)])
    _, data = _page_data(viz.replay(model, _traj(ts, qb), tmp_path / "b.html"))
    assert len(data["tracks"]) == 4
    assert data["tracks"][1]["opacity"] < 1 and data["tracks"][1]["color"] != data["tracks"][2]["color"]
    # a list: measured and identified, on different time grids (resampled onto the first)
    t2 = np.linspace(0, 1, 21)
    _, data = _page_data(viz.replay(model, [_traj(ts, qb[1]), _traj(t2, np.full((21, 3), 0.3))],
                                    tmp_path / "c.html", labels=["measured", "identified"]))
    assert [t["label"] for t in data["tracks"]] == ["measured", "identified"]
    P = _f32(data["tracks"][1]["poses"]).reshape(11, -1, 7)
    R, p = diffmb.body_poses(model, jnp.full(3, 0.3))
    np.testing.assert_allclose(P[5, :, :3], np.asarray(p), atol=1e-5)


BOX_MJCF = """<mujoco model="boxdrop">
  <worldbody>
    <geom name="floor" type="plane" size="0 0 1"/>
    <body name="box" pos="0 0 0.1"><freejoint/>
      <geom name="b" type="box" size="0.1 0.1 0.1" rgba="0.2 0.4 0.9 1"/></body>
    <body name="ball" pos="0.5 0 0.3"><joint name="slide" type="slide" axis="1 0 0"/>
      <geom name="s" type="sphere" size="0.12" rgba="1 0 0 1"/></body>
  </worldbody>
</mujoco>"""


def _box_model(tmp_path):
    f = tmp_path / "boxdrop.xml"
    f.write_text(BOX_MJCF)
    return diffmb.load_mjcf(f)


@pytest.mark.slow
def test_mjcf_geoms_and_contact_forces(tmp_path):
    from diffmb.contacts import CoulombContacts, Plane
    from diffmb.contacts.geometry import Box

    model = _box_model(tmp_path)
    ts = np.linspace(0, 1, 5)
    q = np.tile(np.asarray(model.qpos0), (5, 1))
    q[:, 2] = 0.099  # the box 1 mm into the floor: every bottom corner pushes back
    el = CoulombContacts([Box("box", (0.1, 0.1, 0.1))], Plane(), model=model)
    path = viz.replay(model, _traj(ts, q, model.nv), tmp_path / "box.html", forces=(el,),
                      frames=True)
    _, data = _page_data(path)
    kinds = sorted(s["kind"] for s in data["shapes"])
    assert kinds == ["box", "plane", "sphere"]
    assert data["frames"] is True
    (layer,) = data["forces"]
    V = _f32(layer["vectors"]).reshape(5, layer["n"], 3)
    fz = V[0, :, 2]
    assert np.sum(fz > 0) == 4 and np.all(fz >= 0)  # four corners in contact, pushing up
    np.testing.assert_allclose(V[:, :, :2], 0, atol=1e-6)


@pytest.mark.slow
def test_terrain_of_a_contact_element_is_drawn(tmp_path):
    from diffmb.contacts import CoulombContacts, HeightField
    from diffmb.contacts.geometry import Sphere

    model = chain_model(2)
    H = np.add.outer(np.linspace(0, 0.3, 4), np.linspace(0, 0.1, 3))  # (nx, ny) = (4, 3)
    hf = HeightField(H, origin=(-1.0, -0.5), spacing=(0.5, 0.5))
    el = CoulombContacts([Sphere("link1", 0.05)], hf, model=model)
    tr = _traj(np.linspace(0, 1, 3), np.zeros((3, 2)))
    _, data = _page_data(viz.replay(model, tr, tmp_path / "t.html", forces=(el,)))
    (t,) = data["terrain"]
    assert t["kind"] == "hfield" and t["shape"] == [4, 3]
    np.testing.assert_allclose(_f32(t["heights"]).reshape(4, 3), H, atol=1e-6)


@pytest.mark.slow
def test_stills_and_videos(tmp_path):
    from PIL import Image

    model = _box_model(tmp_path)
    q = np.tile(np.asarray(model.qpos0), (6, 1))
    q[:, 7] = np.linspace(0, 0.3, 6)
    png = viz.still(model, q[0], tmp_path / "s.png", size=(320, 240))
    im = np.asarray(Image.open(png).convert("RGB"))
    assert im.shape == (240, 320, 3)
    red = (im[..., 0] > 150) & (im[..., 1] < 80) & (im[..., 2] < 80)
    assert red.sum() > 50  # the red ball is in the picture
    gif = viz.replay(model, _traj(np.linspace(0, 0.2, 6), q, model.nv), tmp_path / "r.gif",
                     size=(200, 150))
    assert Image.open(gif).n_frames == 6
    mp4 = viz.replay(model, _traj(np.linspace(0, 0.2, 6), q, model.nv), tmp_path / "r.mp4",
                     size=(200, 150))
    assert mp4.read_bytes()[4:8] == b"ftyp"
    with pytest.raises(ValueError, match="PNG"):
        viz.still(model, q[0], tmp_path / "s.jpg")


def test_urdf_meshes_or_bones(tmp_path):
    from diffmb.viz.scene import shapes_of

    urdf = os.path.join(os.path.dirname(diffmb.__file__), "assets", "ur5_robot.urdf")
    model = diffmb.load_urdf(urdf)
    shapes, _ = shapes_of(model)
    drawn = {model.body_names[s.body] for s in shapes if s.body >= 0}
    # every link with a visual or collision element is drawn (a mesh, or a bone where the mesh
    # file is not found)
    assert {"shoulder_link", "upper_arm_link", "forearm_link", "wrist_3_link"} <= drawn


def test_hand_built_model_gets_a_skeleton(tmp_path):
    from diffmb.viz.scene import shapes_of

    notes = []
    shapes, _ = shapes_of(chain_model(4), notes=notes)
    assert sum(s.kind == "capsule" for s in shapes) == 3 and "skeleton" in notes[0]


def test_maximal_chain_shapes_and_poses(tmp_path):
    from diffmb.formulations.maximal import MaximalDAE
    from diffmb.studies.chain import chain_system

    mj, sysm, u0 = chain_system()
    system = MaximalDAE(sysm)
    P = viz.poses_of(system, u0)
    assert P.shape == (sysm.n_bodies, 7)
    np.testing.assert_allclose(P, np.asarray(u0).reshape(-1, 7), atol=1e-12)
    shapes = viz.primitives_of(system)
    assert len(shapes) == sysm.n_bodies and all(s.kind == "box" for s in shapes)
    # the chain's bodies are MuJoCo's uniform boxes: the box drawn is the geom's own size
    for i, s in enumerate(shapes):
        g = [k for k in range(mj.ngeom) if mj.geom_bodyid[k] == i + 1]
        assert len(g) == 1
        np.testing.assert_allclose(sorted(s.size), sorted(mj.geom_size[g[0]]), rtol=1e-6)
    path = viz.replay(system, _traj(np.linspace(0, 1, 3), np.tile(u0, (3, 1))),
                      tmp_path / "chain.html")
    _, data = _page_data(path)
    assert data["bodyNames"] == list(sysm.body_names)


def test_unregistered_system_is_named_and_a_registered_one_is_drawn(tmp_path):
    class Pendulum(diffmb.AbstractODESystem):
        def init(self, q0, v0, params, dt):
            return (q0, v0)

        def outputs(self, ys, params):
            return ys[0], ys[1], None

        def vector_field(self, t, y, params):
            return (y[1], -jnp.sin(y[0]))

    sys_ = Pendulum()
    with pytest.raises(TypeError, match="Pendulum.*primitives_of.register"):
        viz.replay(sys_, _traj(np.linspace(0, 1, 3), np.zeros((3, 1))), tmp_path / "p.html")
    viz.primitives_of.register(Pendulum, lambda s: [viz.Primitive("sphere", (0.1,), 0)])

    def bob(s, q):
        q = np.asarray(q)
        one = np.zeros(q.shape[:-1] + (1, 7))
        one[..., 0, 0], one[..., 0, 2] = np.sin(q[..., 0]), -np.cos(q[..., 0])
        one[..., 0, 3] = 1.0
        return one

    viz.poses_of.register(Pendulum, bob)

    _, data = _page_data(viz.replay(sys_, _traj(np.linspace(0, 1, 3), np.full((3, 1), np.pi / 2)),
                                    tmp_path / "p.html"))
    P = _f32(data["tracks"][0]["poses"]).reshape(3, 1, 7)
    np.testing.assert_allclose(P[:, 0, :3], [[1.0, 0.0, 0.0]] * 3, atol=1e-6)  # bob at (l, 0, 0)


def test_trajectory_save_load(tmp_path):
    import hashlib

    model = _box_model(tmp_path)
    tr = _traj(np.linspace(0, 1, 4), np.tile(np.asarray(model.qpos0), (4, 1)), model.nv)
    f = save_trajectory(tr, tmp_path / "run.npz", model)
    back, info = load_trajectory(f)
    np.testing.assert_array_equal(np.asarray(back.q), np.asarray(tr.q))
    np.testing.assert_array_equal(np.asarray(back.ts), np.asarray(tr.ts))
    assert info["model_path"] == str((tmp_path / "boxdrop.xml").resolve())
    assert info["model_sha256"] == hashlib.sha256(BOX_MJCF.encode()).hexdigest()
    assert "<mujoco" in info["model_text"] and info["model_floating_base"] is False
    m2 = diffmb.io.model_from_info(info)
    assert m2.nq == model.nq and m2.source == model.source
    with pytest.raises(ValueError, match="not a saved diffmb trajectory"):
        load_trajectory(tmp_path / "boxdrop.xml")


ROBOT_MJCF = """<mujoco model="robot">
  <worldbody>
    <body name="arm" pos="0 0 1"><joint name="j" type="hinge" axis="0 1 0"/>
      <geom name="g" type="box" size="{s} {s} {s}" mass="{m}"/></body>
  </worldbody>
  <actuator><motor name="m1" joint="j"/></actuator>
</mujoco>"""


def test_two_files_with_one_stem_keep_their_own_source(tmp_path):
    """a/robot.xml (9 kg, 0.3 m box) and b/robot.xml (1 kg, 0.1 m box): each model, each saved
    trajectory and each replay refers to its own file."""
    import hashlib

    from diffmb.cli import main

    files = {}
    for d, m, s in (("a", 9.0, 0.3), ("b", 1.0, 0.1)):
        (tmp_path / d).mkdir()
        text = ROBOT_MJCF.format(m=m, s=s)
        (tmp_path / d / "robot.xml").write_text(text)
        files[d] = (tmp_path / d / "robot.xml", m, s, hashlib.sha256(text.encode()).hexdigest())
    models = {d: diffmb.load_mjcf(f) for d, (f, *_) in files.items()}
    for d, (f, m, s, sha) in files.items():
        model = models[d]
        assert model.source.path == str(f.resolve()) and model.source.sha256 == sha
        assert float(model.body_mass[0]) == pytest.approx(m)
        # a fit changes parameters only: the file stays the model's
        fitted = eqx.tree_at(lambda mm: mm.body_mass, model, model.body_mass * 2)
        assert fitted.source == model.source
        npz = save_trajectory(_traj(np.linspace(0, 1, 3), np.zeros((3, 1))), tmp_path / f"{d}.npz",
                              fitted)
        _, info = load_trajectory(npz)
        assert (info["model_path"], info["model_sha256"]) == (str(f.resolve()), sha)
        again = diffmb.io.model_from_info(info)
        assert float(again.body_mass[0]) == pytest.approx(m)
        assert main(["replay", str(npz), "--out", str(tmp_path / f"out_{d}")]) == 0
        _, data = _page_data(tmp_path / f"out_{d}" / "replay.html")
        (box,) = [sh for sh in data["shapes"] if sh["kind"] == "box"]
        np.testing.assert_allclose(box["size"], [s] * 3, rtol=1e-6)
    # the file changed after the save: the embedded text replays the recorded robot
    files["a"][0].write_text(ROBOT_MJCF.format(m=2.0, s=0.2))
    _, info = load_trajectory(tmp_path / "a.npz")
    assert float(diffmb.io.model_from_info(info).body_mass[0]) == pytest.approx(9.0)
    assert chain_model(2).source is None  # a model built in Python has no file


def test_load_model_by_suffix(tmp_path):
    f = tmp_path / "robot.xml"
    f.write_text(ROBOT_MJCF.format(m=1.0, s=0.1))
    assert diffmb.io.load_model(f).source.kind == "mjcf"
    urdf = os.path.join(os.path.dirname(diffmb.__file__), "assets", "ur5_robot.urdf")
    fixed, free = diffmb.io.load_model(urdf), diffmb.io.load_model(urdf, floating_base=True)
    assert (free.nq, free.nv) == (fixed.nq + 7, fixed.nv + 6)
    assert free.source.floating_base and not fixed.source.floating_base
    with pytest.raises(ValueError, match=r"robot\.obj.*\.xml \(MJCF\) or \.urdf"):
        diffmb.io.load_model(tmp_path / "robot.obj")
    with pytest.raises(ValueError, match="floating_base applies to URDF"):
        diffmb.io.load_model(f, floating_base=True)
    with pytest.raises(FileNotFoundError, match="nope.urdf"):
        diffmb.io.load_model(tmp_path / "nope.urdf")


@pytest.mark.slow
def test_floating_base_urdf_replays(tmp_path):
    """A floating-base URDF's trajectory records the floating base; replay rebuilds it, and a
    CSV record replays on --model FILE.urdf --floating-base."""
    from diffmb.cli import main

    urdf = os.path.join(os.path.dirname(diffmb.__file__), "assets", "ur5_robot.urdf")
    model = diffmb.load_urdf(urdf, floating_base=True)
    q = np.tile(np.asarray(model.qpos0), (3, 1))
    q[:, 2] = [0.0, 0.5, 1.0]  # the base rises 1 m
    npz = save_trajectory(_traj(np.linspace(0, 1, 3), q, model.nv), tmp_path / "f.npz", model)
    _, info = load_trajectory(npz)
    assert info["model_floating_base"] is True
    assert diffmb.io.model_from_info(info).nq == model.nq
    assert main(["replay", str(npz), "--out", str(tmp_path / "o")]) == 0
    _, data = _page_data(tmp_path / "o" / "replay.html")
    P = _f32(data["tracks"][0]["poses"]).reshape(3, model.n_bodies, 7)
    R, p = diffmb.body_poses(model, jnp.asarray(q[2]))
    np.testing.assert_allclose(P[2, :, :3], np.asarray(p), atol=1e-5)
    from diffmb.optim.sysid import write_joint_csv

    csv = tmp_path / "free.csv"
    write_joint_csv(csv, model, np.linspace(0, 1, 3), q=q)
    assert main(["replay", "--model", urdf, "--floating-base", "--traj", str(csv),
                 "--out", str(tmp_path / "p")]) == 0
    assert main(["replay", "--model", urdf, "--traj", str(csv), "--out", str(tmp_path / "r")]) == 1


def _chromium():
    for name in (os.environ.get("DIFFMB_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome", "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary found (apt-get install "
                    "chromium, or set DIFFMB_CHROMIUM): the browser test needs one")
def test_replay_in_headless_chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    model = _box_model(tmp_path)
    n = 21
    ts = np.linspace(0, 2, n)
    q = np.tile(np.asarray(model.qpos0), (n, 1))
    q[:, 0] = np.linspace(-0.6, -0.3, n)  # the box slides in x
    q[:, 7] = np.linspace(0.0, 0.4, n)  # the red ball slides in +x
    path = viz.replay(model, _traj(ts, q, model.nv), tmp_path / "page.html")
    ball = model.body_index("ball")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=_chromium(),
            args=["--no-sandbox", "--disable-gpu", "--use-angle=swiftshader",
                  "--enable-unsafe-swiftshader", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 800, "height": 600})
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            page.wait_for_function("window.diffmbReplay && (window.diffmbReplay.ready || "
                                   "window.diffmbReplay.error)", timeout=20000)
            api = "window.diffmbReplay"
            assert page.evaluate(f"{api}.error") is None
            assert page.evaluate(f"{api}.bodyNames") == list(model.body_names)
            assert page.evaluate(f"{api}.nFrames") == n
            assert not [u for u in requests if u.startswith(("http:", "https:"))]
            for k in (0, 10, 20):
                assert page.evaluate(f"{api}.setFrame({k})") == k
                js = np.array(page.evaluate(f"{api}.bodyPoses({k})"))
                R, p = diffmb.body_poses(model, jnp.asarray(q[k]))
                np.testing.assert_allclose(js, np.asarray(p), atol=1e-5)
                x, y = page.evaluate(f"{api}.project(...{api}.bodyPoses({k})[{ball}])")
                shot = page.screenshot()
                from io import BytesIO

                from PIL import Image

                im = np.asarray(Image.open(BytesIO(shot)).convert("RGB")).astype(int)
                r, g, b = im[int(round(y)), int(round(x))]
                assert r > 120 and g < 70 and b < 70, (k, x, y, (r, g, b))
                # the ball moved with the frame: where it was at frame 0 is no longer red at 20
                if k == 0:
                    x0, y0 = x, y
            r, g, b = im[int(round(y0)), int(round(x0))]
            assert not (r > 120 and g < 70 and b < 70)
            # the slider drives the frame; setTime picks the frame at or before t
            page.fill("#slider", "5")
            assert page.evaluate(f"{api}.frame") == 5
            assert page.evaluate(f"{api}.setTime(1.05)") == 10
            page.click("#play")
            assert page.evaluate(f"{api}.playing") is True
            assert errors == [], errors
        finally:
            browser.close()


def test_uav_and_beam_shapes_and_poses(tmp_path):
    from diffmb.models import uav

    system = uav.UAVSystem(uav.rhs_kane)
    q = np.array([1.0, 2.0, -60.0, np.cos(0.2), 0.0, 0.0, np.sin(0.2)])  # yaw 0.4 rad, 60 m up
    (P,) = viz.poses_of(system, q)
    np.testing.assert_allclose(P[:3], [1.0, -2.0, 60.0])
    R = matrix_from_quat(P[3:])  # z-up world: the nose (body x) keeps its heading mirrored
    np.testing.assert_allclose(R[:, 0], [np.cos(0.4), -np.sin(0.4), 0.0], atol=1e-12)
    np.testing.assert_allclose(R[:, 2], [0.0, 0.0, -1.0], atol=1e-12)  # body z (down) points down
    assert {"fuselage", "rotor_c", "rotor_d"} <= {s.name for s in viz.primitives_of(system)}
    bodies, frames = viz.beam_frames(np.linspace(0, 1, 5), np.zeros(5), np.full(5, 0.1), 1.0)
    assert isinstance(frames, Trajectory)
    tip = viz.poses_of(bodies, frames.q[-1])[-1, :3]
    assert tip[0] == pytest.approx(0.95) and 0.09 < tip[1] < 0.1
    line = viz.study_replay(tmp_path, system, viz.frames(np.linspace(0, 1, 3), np.tile(q, (3, 1))))
    assert line.startswith("Replay: [replay.html]") and (tmp_path / "replay.html").is_file()


def test_cli_replay(tmp_path):
    from diffmb.cli import main

    model = _box_model(tmp_path)
    tr = _traj(np.linspace(0, 1, 4), np.tile(np.asarray(model.qpos0), (4, 1)), model.nv)
    npz = save_trajectory(tr, tmp_path / "run.npz", model)
    assert main(["replay", str(npz), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "replay.html").stat().st_size > 500_000
    csv = tmp_path / "log.csv"
    csv.write_text("t,q_slide\n0,0\n0.5,0.1\n1,0.2\n")
    assert main(["replay", "--model", str(tmp_path / "boxdrop.xml"), "--traj", str(csv),
                 "--out", str(tmp_path / "p")]) == 1  # the free joint's q_box_* columns missing
    assert main(["replay", "--out", str(tmp_path / "q")]) == 2
    assert main(["replay", "--model", str(tmp_path / "boxdrop.xml"), "--floating-base",
                 "--traj", str(csv), "--out", str(tmp_path / "q")]) == 2  # URDF only
    assert main(["replay", str(npz), "--floating-base", "--out", str(tmp_path / "q")]) == 2


def test_cli_replay_reads_what_identify_reads(tmp_path, capsys):
    """The record ``identify --model`` fits (t, q_, v_, ctrl_<actuator>) replays as it is."""
    from diffmb.cli import main

    f = tmp_path / "robot.xml"
    f.write_text(ROBOT_MJCF.format(m=1.0, s=0.1))
    csv = tmp_path / "rec.csv"
    csv.write_text("t,q_j,v_j,ctrl_m1\n0,0,0,0.5\n0.5,0.1,0.2,0.5\n1,0.2,0.2,0.4\n")
    assert main(["replay", "--model", str(f), "--traj", str(csv), "--out", str(tmp_path / "o")]) == 0
    _, data = _page_data(tmp_path / "o" / "replay.html")
    P = _f32(data["tracks"][0]["poses"]).reshape(3, 1, 7)
    R, _ = diffmb.body_poses(diffmb.load_mjcf(f), jnp.asarray([0.2]))
    np.testing.assert_allclose(matrix_from_quat(P[2, 0, 3:]), np.asarray(R)[0], atol=1e-5)
    csv.write_text("t,q_j,ctrl_m2\n0,0,0.5\n1,0.2,0.4\n")  # no actuator m2
    assert main(["replay", "--model", str(f), "--traj", str(csv), "--out", str(tmp_path / "p")]) == 1
    assert "ctrl_m2" in capsys.readouterr().err


def test_study_replay_saves_the_trajectory_for_the_cli(tmp_path):
    """A study's replay line links replay.html and replay.npz; the npz replays again."""
    from diffmb.cli import main

    model = _box_model(tmp_path)
    tr = _traj(np.linspace(0, 1, 4), np.tile(np.asarray(model.qpos0), (4, 1)), model.nv)
    line = viz.study_replay(tmp_path / "study", model, tr)
    assert "replay.html" in line and "replay.npz" in line
    again, info = load_trajectory(tmp_path / "study" / "replay.npz")
    np.testing.assert_allclose(np.asarray(again.q), np.asarray(tr.q))
    assert main(["replay", str(tmp_path / "study" / "replay.npz"), "--out",
                 str(tmp_path / "o")]) == 0


def _imports(path):
    """(module, names) of every import statement in a source file, relative ones resolved."""
    import ast
    import pathlib

    path = pathlib.Path(path)
    pkg = list(path.relative_to(pathlib.Path(diffmb.__file__).parent.parent).with_suffix("").parts)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.append((mod, tuple(a.name for a in node.names)))
    return out


def test_files_are_read_in_io_and_drawn_in_viz():
    """viz reads no compiled MjModel and uses no private name of io; the model, the systems and
    simulate import neither io nor viz (a model's file is its ``source`` field)."""
    import pathlib

    root = pathlib.Path(diffmb.__file__).parent
    for f in sorted((root / "viz").glob("*.py")):
        for mod, names in _imports(f):
            assert not mod.startswith("mujoco"), (f.name, mod)
            if mod.startswith("diffmb.io"):
                assert not any(n.startswith("_") for n in names), (f.name, mod, names)
    for name in ("model.py", "simulation.py", "systems.py"):
        mods = [m for m, names in _imports(root / name)
                for m in [m] + [f"{m}.{n}" for n in names]]
        assert not [m for m in mods if m.startswith(("diffmb.io", "diffmb.viz"))], name
