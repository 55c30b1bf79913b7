"""Sweep over published scenes: does ``diffmb`` load each one, and does it behave like MuJoCo?

Scenes (:func:`scene_files`): the MJCF files of dm-control's suite (``dm_control/suite/*.xml``),
gymnasium's MuJoCo assets (``gymnasium/envs/mujoco/assets/*.xml``), the URDF robots of
example-robot-data, and, in a source checkout, the scenes under ``tests/data/scenes`` (a few of
MuJoCo Menagerie's). A package that is not installed contributes nothing.

For each scene (:func:`check_scene`):

* MuJoCo compiles it (else the row is ``skipped``: not a scene MuJoCo can simulate, e.g. a
  template filled in by code, or a URDF whose meshes MuJoCo cannot read).
* diffmb loads it with the defaults a user writes first: ``load_mjcf(path)`` and
  ``mjcf_forces(path)``; a URDF with ``load_urdf(path, floating_base)`` and
  ``urdf_forces(path, model, floating_base, ground=0.0)``. An exception is a ``refused`` row with
  the exception's first line; ``out_of_scope`` says whether it names only features outside
  diffmb's scope (:data:`OUT_OF_SCOPE`: plugins, flex, SDF collisions).
* Both simulate ``t`` seconds (2 s) from the ``home`` keyframe (or the first keyframe, or
  ``qpos0``) with its ``ctrl`` (or zero): MuJoCo with the file's own timestep and integrator,
  diffmb with the implicit contact step (:data:`SOLVER`, ``--solver rk4`` for the explicit
  reference) at the file's timestep (adjusted to divide 0.1 s), halved until its run is
  finite (at most :data:`MAX_HALVINGS` times); the step used is in the row.
* A URDF gets what MuJoCo's URDF importer makes of it plus a free joint on its root link (unless
  the root link is ``world``) and a floor plane at z = 0 with MuJoCo's default contact
  parameters, the robot lifted so that its lowest collision geom starts 5 mm above the floor.

Compared (:data:`CRITERIA`), at ``t``, or at ``t_fall`` (0.3 s) when the root body falls over in
both (its z axis turns by more than :data:`FALL_TILT` rad between 0 and ``t`` in each): the root
body's height (the body of the first joint: the robot's base), the pose of every other
free-floating body (objects), the hinge-joint angles (ball joints by their rotation angle), the
sum of the contact normal forces over the weight of what the contacts carry (the bodies below
free joints, or every moving body where there is none), the number of contacts
that carry load and the deepest penetration (geometric penetration plus the pair's margin in
both). The wall time of 1 s simulated is the compiled run's time over ``t``; the compile time is
that of ``jax.jit(...).lower(...).compile()``.

Run: ``python -m diffmb.bench.scenes [--only SUBSTRS] [--out DIR] [--list] [--load-only]`` prints
the table
(markdown, :func:`table`) and writes ``DIR/bench_scenes.json`` (every row).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import jax
import numpy as np

T = 2.0  # s simulated
T_FALL = 0.3  # s: the comparison time when the scene falls over in both
FALL_TILT = 0.5  # rad: the root body's z axis turned by more than this = it fell over
MAX_HALVINGS = 3
SOLVER = "implicit"  # diffmb's solver: the implicit contact step
DROP = 0.005  # m: a URDF robot's lowest collision geom starts this far above the floor
LOAD_FRACTION = 1e-6  # a contact "carries load" above this fraction of the weight (>= 1e-9 N)

# behaviour criteria: the tolerance of each
CRITERIA = {
    "height": 5e-3,  # m: |root-body height, diffmb − MuJoCo|
    "objects": 5e-3,  # m: max |position| difference of the other free bodies
    "joints": 0.05,  # rad: max hinge/ball joint-angle difference
    "weight": 0.01,  # |Σ fn / weight − 1| where MuJoCo's own is within this of 1
    "penetration": (0.1, 5e-4),  # deepest ≤ MuJoCo's × (1 + 0.1) + 0.5 mm
}
OUT_OF_SCOPE = ("plugin", "flex", "sdf")  # refusal words naming features outside the scope


# ---------------------------------------------------------------------------------- files
def _site_packages() -> list[Path]:
    import site

    paths = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
    return [Path(p) for p in dict.fromkeys(paths) if p and Path(p).is_dir()]


def _package_dir(name: str) -> Path | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _example_robot_data() -> Path | None:
    try:
        import example_robot_data

        p = Path(example_robot_data.getModelPath("ur_description/urdf/ur5_robot.urdf"))
        return p / "robots" if (p / "robots").is_dir() else p
    except Exception:  # noqa: BLE001 - not installed or laid out differently: look for it
        for sp in _site_packages():
            for cand in sp.glob("cmeel.prefix/share/example-robot-data/robots"):
                return cand
    return None


def checkout_scenes() -> Path | None:
    """``tests/data/scenes`` of the source checkout this package was imported from, if any."""
    p = Path(__file__).resolve().parents[2] / "tests" / "data" / "scenes"
    return p if p.is_dir() else None


def scene_files(extra=()) -> list[tuple[str, Path]]:
    """``[(source, path)]`` of every scene found on this machine, sorted within each source:
    ``dm_control``, ``gymnasium``, ``example-robot-data`` (URDF), ``menagerie`` (the scene
    files under ``tests/data/scenes/menagerie``: each model's ``scene*.xml`` or
    ``mjx_single_*.xml``), then ``extra`` paths (source ``extra``)."""
    out = []
    dmc = _package_dir("dm_control")
    if dmc is not None:
        out += [("dm_control", Path(f)) for f in sorted(glob.glob(str(dmc / "suite" / "*.xml")))]
    gym = _package_dir("gymnasium")
    if gym is not None:
        out += [("gymnasium", Path(f)) for f in
                sorted(glob.glob(str(gym / "envs" / "mujoco" / "assets" / "*.xml")))]
    erd = _example_robot_data()
    if erd is not None:
        out += [("example-robot-data", Path(f)) for f in
                sorted(glob.glob(str(erd / "**" / "*.urdf"), recursive=True))]
    ck = checkout_scenes()
    if ck is not None:
        men = sorted(set(glob.glob(str(ck / "menagerie" / "*" / "scene*.xml")))
                     | set(glob.glob(str(ck / "menagerie" / "*" / "mjx_single_*.xml"))))
        out += [("menagerie", Path(f)) for f in men]
    out += [("extra", Path(p)) for p in extra]
    return out


def scene_name(source: str, path: Path) -> str:
    """A short name: the path below the source's own folder."""
    path = Path(path)
    s = str(path)
    for key in ("dm_control/suite/", "envs/mujoco/assets/", "/robots/", "/scenes/menagerie/"):
        if key in s:
            return s.split(key, 1)[1]
    return path.name


# ------------------------------------------------------------------------------- helpers
def _first_line(e: BaseException, path) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    for p in (str(path), os.path.realpath(str(path))):
        if msg.startswith(p + ":"):
            msg = msg[len(p) + 1:].strip()
    return f"{type(e).__name__}: {msg}"


def _is_out_of_scope(why: str) -> bool:
    """A refusal that names only features outside the scope: every ``'name'``/listed feature
    word in it is one of :data:`OUT_OF_SCOPE`."""
    low = why.lower()
    return any(w in low for w in OUT_OF_SCOPE) and not any(
        w in low for w in ("geom pairs", "tendon", "equalit", "mesh", "actuator", "fluid",
                           "ellipsoid", "weld", "connect", "condim", "gravcomp"))


def _tilt(R0, R) -> float:
    c = float(np.clip(np.dot(np.asarray(R0)[:, 2], np.asarray(R)[:, 2]), -1.0, 1.0))
    return math.acos(c)


def _rot_angle(Ra, Rb) -> float:
    c = (float(np.trace(np.asarray(Ra).T @ np.asarray(Rb))) - 1.0) / 2.0
    return math.acos(float(np.clip(c, -1.0, 1.0)))


def _quat_R(q):
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _initial_state(mj):
    """qpos, qvel, ctrl: the ``home`` keyframe, else the first keyframe, else qpos0 and zero."""
    import mujoco

    k = -1
    if mj.nkey:
        k = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_KEY, "home")
        k = 0 if k < 0 else k
    if k >= 0:
        return (np.array(mj.key_qpos[k], float), np.array(mj.key_qvel[k], float),
                np.array(mj.key_ctrl[k], float), k)
    return np.array(mj.qpos0, float), np.zeros(mj.nv), np.zeros(mj.nu), None


# --------------------------------------------------------------------------------- MuJoCo
def _mujoco_snapshot(mj, d, bodies) -> dict:
    """What is compared, read from MjData after mj_forward: body poses, joint positions,
    contacts."""
    import mujoco

    fn, pen = [], []
    f6 = np.zeros(6)
    for i in range(d.ncon):
        c = d.contact[i]
        mujoco.mj_contactForce(mj, d, i, f6)
        fn.append(float(f6[0]))
        pen.append(float(c.includemargin - c.dist))
    return dict(p={b: np.array(d.xpos[i]) for b, i in bodies.items()},
                R={b: np.array(d.xmat[i]).reshape(3, 3) for b, i in bodies.items()},
                qpos=np.array(d.qpos), fn=np.array(fn), pen=np.array(pen))


def _run_mujoco(mj, q0, v0, u, times):
    """Snapshots at each of ``times`` (MuJoCo's own timestep and integrator)."""
    import mujoco

    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = q0, v0
    if mj.nu:
        d.ctrl[:] = u
    mujoco.mj_forward(mj, d)
    bodies = {i: i for i in range(1, mj.nbody)}
    snaps, step = [], 0
    for t in times:
        n = int(round(t / mj.opt.timestep))
        if n > step:
            mujoco.mj_step(mj, d, nstep=n - step)
            step = n
        mujoco.mj_forward(mj, d)
        snaps.append(_mujoco_snapshot(mj, d, bodies))
    return snaps


# ------------------------------------------------------------------------------- loaders
def _mjcf_case(path, contacts=True):
    """(mj, model, forces, q0, v0, ctrl, key): MuJoCo's model and diffmb's of an MJCF file
    (``contacts``: as :func:`diffmb.mjcf_forces` takes it)."""
    import mujoco

    import diffmb

    mj = mujoco.MjModel.from_xml_path(str(path))
    q0, v0, u, key = _initial_state(mj)

    def load():
        return diffmb.load_mjcf(path), diffmb.mjcf_forces(path, contacts=contacts)

    return mj, load, q0, v0, u, key


def _urdf_spec(path):
    """MuJoCo's import of a URDF file with package:// meshes resolved, a free joint on the
    root link (unless it is ``world``) and a floor plane; (spec, floating)."""
    import mujoco

    src = Path(path).read_text()
    pkg_root = Path(path).resolve()
    # package://<pkg>/rest -> <the folder holding <pkg>>/<pkg>/rest, searched upwards
    def resolve(m):
        pkg, rest = m.group(1), m.group(2)
        for parent in pkg_root.parents:
            if (parent / pkg).is_dir():
                return str(parent / pkg / rest)
        return m.group(0)

    src = re.sub(r"package:///?([^/\"']+)/([^\"']+)", resolve, src)
    tmp = Path(tempfile.mkdtemp(prefix="diffmb_scene_")) / Path(path).name
    tmp.write_text(src)
    spec = mujoco.MjSpec.from_file(str(tmp))
    spec.strippath = False
    for m in spec.meshes:
        if m.file and not Path(m.file).is_absolute():
            m.file = str((Path(path).parent / m.file).resolve())
    import xml.etree.ElementTree as ET

    root = ET.fromstring(src)
    links = {ln.get("name") for ln in root.findall("link")}
    children = {j.find("child").get("link") for j in root.findall("joint")
                if j.find("child") is not None}
    roots = [ln for ln in links if ln not in children]
    floating = not (len(roots) == 1 and roots[0] == "world")
    if floating:
        first = spec.worldbody.first_body()
        if first is not None:
            first.add_freejoint(name="root_joint")  # load_urdf's name for it
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1], name="floor")
    return spec, floating, tmp


def _lift(mj, q0) -> np.ndarray:
    """q0 with the free root lifted so that the lowest colliding geom is DROP above z = 0."""
    import mujoco

    d = mujoco.MjData(mj)
    d.qpos[:] = q0
    mujoco.mj_forward(mj, d)
    floor = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    fromto = np.zeros(6)
    dmin = np.inf
    for g in range(mj.ngeom):
        if g == floor or mj.body_weldid[mj.geom_bodyid[g]] == 0:
            continue
        if not (mj.geom_contype[g] or mj.geom_conaffinity[g]):
            continue
        dmin = min(dmin, mujoco.mj_geomDistance(mj, d, floor, g, 10.0, fromto))
    q = np.array(q0)
    if np.isfinite(dmin):
        q[2] += DROP - dmin
    return q


def _urdf_case(path, contacts=True):
    import mujoco

    import diffmb

    spec, floating, tmp = _urdf_spec(path)
    try:
        mj = spec.compile()
    finally:
        tmp.unlink(missing_ok=True)
        tmp.parent.rmdir()
    q0 = np.array(mj.qpos0, float)
    if floating and mj.njnt and mj.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE:
        q0 = _lift(mj, q0)

    def load():
        model = diffmb.load_urdf(path, floating_base=floating)
        return model, diffmb.urdf_forces(path, model, floating_base=floating, ground=0.0)

    return mj, load, q0, np.zeros(mj.nv), np.zeros(mj.nu), None


# --------------------------------------------------------------------------------- diffmb
def _hold(t, q, v, p):
    return p


def _joint_maps(mj, model):
    """MuJoCo joint id -> (diffmb q address, kind) by name; MuJoCo body id -> diffmb body index
    by name (MJCF: the same layout)."""
    import mujoco

    jmap = {}
    for j in range(mj.njnt):
        nm = mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_JOINT, j)
        kind = int(mj.jnt_type[j])
        if nm in model.joint_names:
            jd = model.joint_names.index(nm)
            jmap[j] = (int(model.joint_q[jd]), kind)
    bmap = {}
    for i in range(1, mj.nbody):
        nm = mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_BODY, i)
        if nm in model.body_names:
            bmap[i] = model.body_names.index(nm)
    return jmap, bmap


def _mj_to_diffmb_q(mj, model, jmap, q_mj):
    q = np.array(model_qpos0(model), float)
    for j, (qa, _) in jmap.items():
        n = {0: 7, 1: 4, 2: 1, 3: 1}[int(mj.jnt_type[j])]
        a = int(mj.jnt_qposadr[j])
        q[qa:qa + n] = q_mj[a:a + n]
    return q


def model_qpos0(model):
    return np.asarray(getattr(model, "qpos0", np.zeros(model.nq)), float)


def _run_diffmb(model, forces, q0, v0, u, times, dt0, t1, solver=None):
    """Compile and run diffmb's simulate at the largest step in dt0, dt0/2, ... whose run is
    finite; (traj, dt, compile_s, run_s, finite)."""
    solver = SOLVER if solver is None else solver
    import jax
    import jax.numpy as jnp

    import diffmb

    use_ctrl = u is not None and len(u) > 0
    dt = dt0
    for _ in range(MAX_HALVINGS + 1):
        def go(q, v, p, dt=dt):
            return diffmb.simulate(model, q, v, t1=t1, dt=dt, forces=forces,
                                   control=_hold if use_ctrl else None,
                                   params=p if use_ctrl else None, saveat=list(times),
                                   throw=False, solver=solver)

        args = (jnp.asarray(q0), jnp.asarray(v0), jnp.asarray(u if use_ctrl else np.zeros(0)))
        t = time.perf_counter()
        compiled = jax.jit(go).lower(*args).compile()
        compile_s = time.perf_counter() - t
        t = time.perf_counter()
        traj = jax.block_until_ready(compiled(*args))
        run_s = time.perf_counter() - t
        finite = bool(np.all(np.isfinite(np.asarray(traj.q))) and
                      np.all(np.isfinite(np.asarray(traj.v))))
        if finite:
            return traj, dt, compile_s, run_s, True
        dt = dt / 2
    return traj, dt * 2, compile_s, run_s, False


def _diffmb_snapshots(model, forces, traj, ctrl=None):
    import jax.numpy as jnp

    import diffmb

    R, p = [], []
    for k in range(traj.q.shape[0]):
        Rk, pk = diffmb.body_poses(model, jnp.asarray(traj.q[k]))
        R.append(np.asarray(Rk))
        p.append(np.asarray(pk))
    try:
        res = diffmb.contacts.contact_forces(model, traj, forces, ctrl)
        fn, pen = np.asarray(res.fn), np.asarray(res.penetration)
    except ValueError:  # no contact element
        fn = pen = np.zeros((traj.q.shape[0], 0))
    return [dict(R=R[k], p=p[k], qpos=np.asarray(traj.q[k]), fn=fn[k], pen=pen[k])
            for k in range(traj.q.shape[0])]


def _file_dt(mj, t1, t_fall) -> float:
    """The file's timestep, or the nearest smaller one that divides 0.1 s (so that t_fall and t
    lie on the grid)."""
    dt = float(mj.opt.timestep)
    ok = all(abs(x / dt - round(x / dt)) < 1e-9 * max(1.0, x / dt) for x in (t1, t_fall))
    return dt if ok else 0.1 / math.ceil(0.1 / dt - 1e-9)


# ------------------------------------------------------------------------------- the row
def check_scene(path, t: float = T, *, source: str = "", t_fall: float = T_FALL,
                simulate: bool = True, solver: str | None = None, contacts=True) -> dict:
    """One row of the sweep for the scene at ``path`` (MJCF, or URDF by its extension); see the
    module docstring. Keys: ``scene``, ``source``, ``status`` (``accepted`` / ``refused`` /
    ``skipped``), ``why``, ``out_of_scope``, and for an accepted scene ``key``, ``dt_file``,
    ``dt``, ``finite``, ``falls`` ({"mujoco", "diffmb"}: bool), ``t_cmp``, ``root``,
    ``height_mujoco``, ``height_diffmb``, ``dheight`` (m), ``dobjects`` (m or None),
    ``djoints`` (rad or None), ``weight_mujoco``, ``weight_diffmb`` (Σ fn / weight or None),
    ``contacts_mujoco``, ``contacts_diffmb``, ``pen_mujoco``, ``pen_diffmb`` (m),
    ``compile_s``, ``wall_1s`` (s per simulated second), ``checks`` ({criterion: True / False /
    None (not applicable)}) and ``behaves`` (every applicable check passed).
    ``simulate=False``: only whether it loads (an accepted row then has ``simulated`` False).
    ``contacts="constraint"``: an MJCF scene's contact normals as MuJoCo's soft rows
    (:func:`diffmb.mjcf_forces`)."""
    import mujoco

    path = Path(path)
    row = dict(scene=scene_name(source, path), source=source, path=str(path), status="skipped",
               why="", out_of_scope=False)
    urdf = path.suffix.lower() == ".urdf"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mj, load, q0, v0, u, key = (_urdf_case if urdf else _mjcf_case)(path, contacts)
        except Exception as e:  # noqa: BLE001 - MuJoCo cannot compile it: not a scene
            row["why"] = "MuJoCo cannot compile it: " + _first_line(e, path)
            return row
        if mj.nv == 0:
            row["why"] = "nothing moves in MuJoCo (no degree of freedom)"
            return row
        try:
            model, forces = load()
        except Exception as e:  # noqa: BLE001 - the refusal is the result
            row.update(status="refused", why=_first_line(e, path))
            row["out_of_scope"] = _is_out_of_scope(row["why"])
            return row
    row.update(status="accepted", simulated=simulate, key=None if key is None else
               (mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_KEY, key) or str(key)))
    if not simulate:
        return row
    times = (0.0, t_fall, t)
    snap_mj = _run_mujoco(mj, q0, v0, u, times)
    jmap, bmap = _joint_maps(mj, model)
    qd0 = q0 if not urdf else _mj_to_diffmb_q(mj, model, jmap, q0)
    vd0 = v0 if not urdf else np.zeros(model.nv)
    ud = u if mj.nu else None
    dt_file = _file_dt(mj, t, t_fall)
    traj, dt, compile_s, run_s, finite = _run_diffmb(model, forces, qd0, vd0, ud, times,
                                                     dt_file, t, solver)
    row.update(dt_file=float(mj.opt.timestep), dt=dt, finite=finite, compile_s=compile_s,
               wall_1s=run_s / t)
    if not finite:
        row["checks"] = {k: False for k in CRITERIA}
        row["behaves"] = False
        return row
    snap_d = _diffmb_snapshots(model, forces, traj, ud)
    root = int(mj.jnt_bodyid[0])
    row["root"] = mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_BODY, root) or f"body{root}"
    falls = {"mujoco": _tilt(snap_mj[0]["R"][root], snap_mj[-1]["R"][root]) > FALL_TILT}
    if root in bmap:
        b = bmap[root]
        falls["diffmb"] = _tilt(snap_d[0]["R"][b], snap_d[-1]["R"][b]) > FALL_TILT
    else:
        falls["diffmb"] = False
    k = 1 if falls["mujoco"] and falls["diffmb"] else 2
    row.update(falls=falls, t_cmp=times[k])
    sm, sd = snap_mj[k], snap_d[k]
    row.update(_compare(mj, model, jmap, bmap, root, sm, sd))
    return row


def _compare(mj, model, jmap, bmap, root, sm, sd) -> dict:
    import mujoco

    out = {}
    zm = float(sm["p"][root][2])
    zd = float(sd["p"][bmap[root]][2]) if root in bmap else float("nan")
    out.update(height_mujoco=zm, height_diffmb=zd, dheight=abs(zd - zm))
    # other free-floating bodies (objects)
    objs = [int(mj.jnt_bodyid[j]) for j in range(mj.njnt)
            if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE and mj.jnt_bodyid[j] != root]
    dob = [float(np.linalg.norm(sm["p"][b] - sd["p"][bmap[b]])) for b in objs if b in bmap]
    out["dobjects"] = max(dob) if dob else None
    # joint angles
    dj = []
    for j, (qa, kind) in jmap.items():
        a = int(mj.jnt_qposadr[j])
        if kind == mujoco.mjtJoint.mjJNT_HINGE:
            dj.append(abs(float(sd["qpos"][qa]) - float(sm["qpos"][a])))
        elif kind == mujoco.mjtJoint.mjJNT_BALL:
            dj.append(_rot_angle(_quat_R(sm["qpos"][a:a + 4]), _quat_R(sd["qpos"][qa:qa + 4])))
    out["djoints"] = max(dj) if dj else None
    # load carried by contacts
    # the bodies the contacts must carry: the trees hanging from free joints, else every body
    # that moves (a planar walker on slide joints)
    free_roots = {int(mj.jnt_bodyid[j]) for j in range(mj.njnt)
                  if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE}
    moving = [i for i in range(1, mj.nbody) if mj.body_weldid[i] != 0
              and (not free_roots or int(mj.body_rootid[i]) in free_roots)]
    weight = float(sum(mj.body_mass[i] for i in moving)) * float(np.linalg.norm(mj.opt.gravity))
    tiny = max(LOAD_FRACTION * weight, 1e-9)
    fn_m, fn_d = np.asarray(sm["fn"]), np.asarray(sd["fn"])
    out["weight_mujoco"] = float(fn_m.sum()) / weight if weight > 0 else None
    out["weight_diffmb"] = float(fn_d.sum()) / weight if weight > 0 else None
    out["contacts_mujoco"] = int(np.sum(fn_m > tiny))
    out["contacts_diffmb"] = int(np.sum(fn_d > tiny))
    pm = np.asarray(sm["pen"])[fn_m > tiny] if fn_m.size else np.zeros(0)
    pd = np.asarray(sd["pen"])[fn_d > tiny] if fn_d.size else np.zeros(0)
    out["pen_mujoco"] = float(max(pm.max(), 0.0)) if pm.size else 0.0
    out["pen_diffmb"] = float(max(pd.max(), 0.0)) if pd.size else 0.0
    rel, ab = CRITERIA["penetration"]
    wm = out["weight_mujoco"]
    checks = {
        "height": bool(out["dheight"] <= CRITERIA["height"]),
        "objects": None if out["dobjects"] is None else bool(out["dobjects"] <= CRITERIA["objects"]),
        "joints": None if out["djoints"] is None else bool(out["djoints"] <= CRITERIA["joints"]),
        "weight": (None if wm is None or abs(wm - 1.0) > CRITERIA["weight"] else
                   bool(abs(out["weight_diffmb"] - 1.0) <= CRITERIA["weight"])),
        "penetration": bool(out["pen_diffmb"] <= out["pen_mujoco"] * (1 + rel) + ab),
    }
    out["checks"] = checks
    out["behaves"] = all(v for v in checks.values() if v is not None)
    return out


# ---------------------------------------------------------------------------------- table
def summary(rows) -> dict:
    """Counts: scenes, accepted, refused, skipped, refused out of scope, behaving; the
    acceptance rate over the scenes MuJoCo simulates (accepted + refused) counting an
    out-of-scope refusal as accepted, per source and in all."""
    def count(rs):
        acc = sum(r["status"] == "accepted" for r in rs)
        ref = sum(r["status"] == "refused" for r in rs)
        oos = sum(r["status"] == "refused" and r["out_of_scope"] for r in rs)
        beh = sum(bool(r.get("behaves")) for r in rs)
        sim = sum(r["status"] == "accepted" and r.get("simulated", True) for r in rs)
        n = acc + ref
        return dict(scenes=len(rs), accepted=acc, refused=ref, out_of_scope=oos,
                    skipped=sum(r["status"] == "skipped" for r in rs), behaves=beh,
                    simulated=sim,
                    rate=(acc + oos) / n if n else None)

    out = {"all": count(rows)}
    for s in dict.fromkeys(r["source"] for r in rows):
        out[s] = count([r for r in rows if r["source"] == s])
    return out


def _fmt(x, spec, scale=1.0):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return format(x * scale, spec)


def table(rows) -> str:
    """The sweep as markdown: a summary per source, then one line per scene."""
    s = summary(rows)
    lines = ["| source | scenes | accepted | refused (out of scope) | skipped | behave like MuJoCo "
             "/ simulated | acceptance |", "|---|---:|---:|---:|---:|---:|---:|"]
    for k, c in s.items():
        lines.append(f"| {k} | {c['scenes']} | {c['accepted']} | {c['refused']} "
                     f"({c['out_of_scope']}) | {c['skipped']} | {c['behaves']} / {c['simulated']} | "
                     f"{_fmt(c['rate'], '.0%')} |")
    lines += ["", "| scene | status | rest height MuJoCo / diffmb (m) | Δheight (mm) | Δjoints "
              "(rad) | Δobjects (mm) | Σfn/weight MuJoCo / diffmb | contacts MuJoCo / diffmb | "
              "penetration MuJoCo / diffmb (mm) | dt (ms) | wall of 1 s (s) | compile (s) "
              "| behaves |",
              "|---|---|---|---:|---:|---:|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        name = f"{r['source']}/{r['scene']}"
        if r["status"] != "accepted":
            # paths below the packages' own folders only: no machine path in the table
            why = re.sub(r"/\S*/(?:example-robot-data/robots|site-packages|scenes)/", "",
                         r["why"]).replace("|", "\\|")
            if len(why) > 160:
                why = why[:157] + "..."
            tag = r["status"] + (" (out of scope)" if r.get("out_of_scope") else "")
            lines.append(f"| {name} | {tag}: {why} | | | | | | | | | | | |")
            continue
        if r.get("simulated") is False:
            lines.append(f"| {name} | accepted (not simulated in this run) | | | | | | | | | | | |")
            continue
        if r.get("error"):
            err = r["error"].replace("|", "\\|")[:160]
            lines.append(f"| {name} | accepted, but the run failed: {err} | | | | | | | | | | | no |")
            continue
        if not r.get("finite", True):
            lines.append(f"| {name} | accepted: not finite down to dt = {_fmt(r['dt'], '.3g', 1e3)}"
                         f" ms | | | | | | | | | {_fmt(r['wall_1s'], '.3g')} | "
                         f"{_fmt(r['compile_s'], '.3g')} | no |")
            continue
        fell = " (fell in both: at 0.3 s)" if r["t_cmp"] < T else ""
        failed = [k for k, v in r["checks"].items() if v is False]
        lines.append(
            f"| {name} | accepted{fell} | {_fmt(r['height_mujoco'], '.4f')} / "
            f"{_fmt(r['height_diffmb'], '.4f')} | {_fmt(r['dheight'], '.2f', 1e3)} | "
            f"{_fmt(r['djoints'], '.3f')} | {_fmt(r['dobjects'], '.2f', 1e3)} | "
            f"{_fmt(r['weight_mujoco'], '.3f')} / {_fmt(r['weight_diffmb'], '.3f')} | "
            f"{r['contacts_mujoco']} / {r['contacts_diffmb']} | "
            f"{_fmt(r['pen_mujoco'], '.2f', 1e3)} / {_fmt(r['pen_diffmb'], '.2f', 1e3)} | "
            f"{_fmt(r['dt'], '.3g', 1e3)} | {_fmt(r['wall_1s'], '.3g')} | "
            f"{_fmt(r['compile_s'], '.3g')} | "
            f"{'yes' if r['behaves'] else 'no: ' + ', '.join(failed)} |")
    return "\n".join(lines) + "\n"


def sweep(only: str | None = None, t: float = T, progress=None, simulate=True,
          solver: str | None = None, contacts=True) -> list[dict]:
    """:func:`check_scene` over :func:`scene_files` (with ``only``, a comma-separated list of
    substrings: those whose ``source/name`` contains one of them)."""
    keys = [k.strip() for k in (only or "").split(",") if k.strip()]
    rows = []
    for source, path in scene_files():
        name = scene_name(source, path)
        if keys and not any(k in f"{source}/{name}" for k in keys):
            continue
        try:
            row = check_scene(path, t, source=source, simulate=simulate, solver=solver,
                              contacts=contacts)
        except Exception as e:  # noqa: BLE001 - a failure of the comparison itself is a row
            row = dict(scene=name, source=source, path=str(path), status="accepted",
                       why="", out_of_scope=False, finite=False, dt=None, wall_1s=None,
                       compile_s=None, behaves=False, error=_first_line(e, path))
        rows.append(row)
        if progress:
            progress(row)
    return rows


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def main(argv=None) -> int:
    """``python -m diffmb.bench.scenes [--only SUBSTRS] [--t T] [--out DIR] [--list]``: the table."""
    ap = argparse.ArgumentParser(prog="python -m diffmb.bench.scenes",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated substrings: the scenes whose 'source/name' contains one")
    ap.add_argument("--t", type=float, default=T, help=f"seconds simulated (default {T})")
    ap.add_argument("--out", default=None, help="write DIR/bench_scenes.json")
    ap.add_argument("--list", action="store_true", help="list the scene files and stop")
    ap.add_argument("--solver", default=SOLVER, help=f"diffmb's solver (default {SOLVER!r})")
    ap.add_argument("--contacts", default="spring", choices=("spring", "constraint"),
                    help="contact normals: springs at MuJoCo's depth (default) or MuJoCo's "
                    "soft rows (MJCF scenes)")
    ap.add_argument("--load-only", action="store_true",
                    help="only whether each scene loads (accepted / refused / skipped)")
    a = ap.parse_args(argv)
    jax.config.update("jax_enable_compilation_cache", False)  # compile times measured cold
    if a.list:
        for source, path in scene_files():
            print(f"{source}\t{path}")
        return 0

    done = []

    def write(rows):
        if a.out:
            out = Path(a.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "bench_scenes.json").write_text(json.dumps(
                {"summary": _jsonable(summary(rows)), "rows": _jsonable(rows)}, indent=1))

    def progress(r):
        done.append(r)
        write(done)  # the rows so far survive an interrupted sweep
        how = ("loads" if r.get("simulated") is False else
               "behaves" if r.get("behaves") else "differs")
        print(f"{r['source']}/{r['scene']}: {r['status']} {r.get('why') or how}",
              file=sys.stderr, flush=True)

    rows = sweep(a.only, a.t, progress, simulate=not a.load_only, solver=a.solver,
                 contacts=True if a.contacts == "spring" else "constraint")
    write(rows)
    print(table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
