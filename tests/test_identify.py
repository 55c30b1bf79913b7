"""Identification for any robot file (``diffmb identify --model``), checked against MuJoCo.

The data are simulated by MuJoCo itself (RK4) from an MJCF arm with motors; diffmb only reads
the file and the CSV. Expected values are the parameters MuJoCo simulated with, and closed forms
(the identifiable combination of armature and inertia about a fixed axis).
"""

import json
import pathlib
import warnings

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy.interpolate import CubicHermiteSpline

from diffmb.cli import main
from diffmb.io.csvdata import write_csv
from diffmb.optim import identify
from diffmb.optim.identify import base_parameters, check_record, noise_from_data
from diffmb.optim.params import Transforms, expand, physical_inertia, positive
from diffmb.optim.sysid import Record

ARM = pathlib.Path(__file__).parent / "data" / "arm3_motors.xml"
JOINTS = ("shoulder", "elbow", "wrist")
TRUE = {"body.link1.mass": 1.2, "body.link2.mass": 0.8, "body.link3.mass": 0.4,
        "joint.shoulder.damping": 0.3, "joint.elbow.damping": 0.2, "joint.wrist.damping": 0.1}


def _u(t):
    return np.array([3 * np.sin(2.1 * t) + 1.5 * np.sin(5.3 * t),
                     1.5 * np.sin(3.2 * t + 0.4) + 0.6 * np.sin(7.1 * t),
                     0.4 * np.sin(4.3 * t + 1.0)])


def mujoco_record(path, xml=ARM, *, t1=2.0, ts=0.0093, delay=0.0, bias=0.0, noise=1e-3,
                  seed=1, ctrl_fn=_u, joints=JOINTS, actuators=None):
    """Simulate the file in MuJoCo (its RK4, ctrl held over each step at the mid-step value),
    sample q at ``ts`` intervals (off the 2 ms step grid), delay/bias the elbow channel, add
    noise; write the CSV with ctrl_<actuator> columns."""
    m = mujoco.MjModel.from_xml_path(str(xml))
    d = mujoco.MjData(m)
    dt = m.opt.timestep
    n = int(round(t1 / dt))
    T, Q, V = [0.0], [d.qpos.copy()], [d.qvel.copy()]
    for _ in range(n):
        d.ctrl[:] = ctrl_fn(d.time + 0.5 * dt)
        mujoco.mj_step(m, d)
        T.append(d.time)
        Q.append(d.qpos.copy())
        V.append(d.qvel.copy())
    T, Q, V = np.array(T), np.array(Q), np.array(V)
    tsamp = np.arange(0.0, t1 - 0.03, ts)
    q = np.column_stack([
        CubicHermiteSpline(T, Q[:, c], V[:, c])(np.clip(tsamp - (delay if c == 1 else 0.0), 0,
                                                       None)) for c in range(Q.shape[1])])
    q[:, min(1, q.shape[1] - 1)] += bias
    q += np.random.default_rng(seed).normal(0.0, noise, q.shape)
    ctrl = np.array([ctrl_fn(t) for t in tsamp]).reshape(len(tsamp), -1)
    actuators = actuators or [f"m_{j}" for j in joints]
    ch = {f"q_{j}": q[:, c] for c, j in enumerate(joints)}
    ch.update({f"ctrl_{a}": ctrl[:, c] for c, a in enumerate(actuators)})
    write_csv(path, tsamp, ch)
    return tsamp, q, ctrl


@pytest.fixture(scope="module")
def delayed_log(tmp_path_factory):
    p = tmp_path_factory.mktemp("ident") / "log.csv"
    mujoco_record(p, t1=1.5, delay=0.006, bias=0.02)
    return p


@pytest.mark.slow
def test_identify_mjcf_arm_with_sensor_delay_and_bias(delayed_log, tmp_path):
    """Masses and damping of MuJoCo's arm, the elbow sensor's delay (6 ms, three step lengths
    off the sample grid) and bias, and the noise level, from 9.3 ms samples of a 2 ms
    simulation: each estimate within 4 standard errors of what MuJoCo simulated."""
    res = identify(ARM, delayed_log, sensors="q_elbow.delay,q_elbow.bias,q_*.noise",
                   out=tmp_path, progress=False)
    truth = dict(TRUE, **{"sensor.q_elbow.delay": 0.006, "sensor.q_elbow.bias": 0.02})
    assert set(res.identified) == set(truth)
    for k, v in truth.items():
        e, s = res.identified[k]["estimate"], res.identified[k]["std"]
        assert 0 < s < 0.01 * max(abs(v), 0.01), (k, s)
        assert abs(e - v) < 4 * s, (k, e, v, s)
    for c in ("q_shoulder", "q_elbow", "q_wrist"):
        assert abs(res.results["noise"][c]["estimate"] - 1e-3) < 0.15e-3
    assert res.results["success"] and res.results["base_parameters"] == []
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["identified"]["body.link2.mass"]["std"] > 0
    assert (tmp_path / "report.md").read_text().count("sensor.q_elbow.delay") >= 1
    assert (tmp_path / "fit_q.png").stat().st_size > 10_000


@pytest.mark.slow  # ~25 s: a third arm fit compiles; tests/test_cli.py runs `identify --model`
def test_cli_identify_model(tmp_path):
    """``diffmb identify --model FILE --data CSV --out DIR --params ...`` writes results.json
    with {name: {"estimate", "std"}}; exactly one of STUDY and --model."""
    log = tmp_path / "log.csv"
    mujoco_record(log, t1=1.0, ts=0.01)
    out = tmp_path / "out"
    code = main(["identify", "--model", str(ARM), "--data", str(log), "--out", str(out),
                 "--params", "joint.*.damping"])
    assert code == 0
    r = json.loads((out / "results.json").read_text())
    assert r["converged"] is True and r["message"].startswith("converged")
    for j in JOINTS:
        est = r["identified"][f"joint.{j}.damping"]
        assert abs(est["estimate"] - TRUE[f"joint.{j}.damping"]) < 4 * est["std"]
    assert main(["identify", "arm", "--model", str(ARM), "--data", str(log),
                 "--out", str(tmp_path / "o2")]) == 2
    assert main(["identify", "--data", str(log), "--out", str(tmp_path / "o3")]) == 2


@pytest.fixture(scope="module")
def spin(tmp_path_factory):
    """A link turning about a fixed vertical axis, simulated by MuJoCo."""
    d = tmp_path_factory.mktemp("spin")
    xml = d / "spin.xml"
    xml.write_text("""<mujoco><option timestep="0.002" integrator="RK4"/>
      <default><geom contype="0" conaffinity="0"/></default>
      <worldbody><body name="link"><joint name="j" axis="0 0 1" armature="0.05" damping="0.1"/>
      <geom type="box" size="0.2 0.05 0.05" pos="0.1 0 0" mass="2"/></body></worldbody>
      <actuator><motor name="m" joint="j"/></actuator></mujoco>""")
    log = d / "spin.csv"
    mujoco_record(log, xml=xml, t1=1.0, ts=0.01, ctrl_fn=lambda t: np.array([np.sin(3 * t)]),
                  joints=("j",), actuators=["m"])
    return xml, log


@pytest.mark.slow
def test_profile_likelihood_brackets_the_truth(spin, tmp_path):
    """The damping's profile-likelihood interval (refits over a grid) contains the value MuJoCo
    simulated and, the model being close to linear in it there, agrees with the Laplace
    interval (asymptotic theory: both are the same χ² region)."""
    xml, log = spin
    res = identify(xml, log, params="joint.j.damping,joint.j.armature", progress=False,
                   profile=["joint.j.damping"], profile_points=5, out=tmp_path)
    pr = res.results["profiles"]["joint.j.damping"]
    lo, hi = pr["ci95"]
    assert lo is not None and hi is not None and lo < 0.1 < hi
    llo, lhi = pr["laplace_ci95"]
    assert abs((hi - lo) / (lhi - llo) - 1.0) < 0.2
    assert min(pr["statistic"]) < 0.5 and max(pr["statistic"]) > 6.0
    assert "Profile likelihoods" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_base_parameters_name_the_combination(spin):
    """A link turning about a fixed vertical axis: the data determine I_zz + armature, not each
    (closed form: coefficient 1 in their units), and I_xx, I_yy not at all."""
    xml, log = spin
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = identify(xml, log, params="body.link.inertia_diag,joint.j.armature",
                       progress=False)
    groups = res.results["base_parameters"]
    combo = next(g for g in groups if g["combination"])
    assert set(combo["parameters"]) == {"body.link.inertia_diag[2]", "joint.j.armature"}
    c = [v for k, v in combo["coefficients"].items() if k != combo["parameters"][0]]
    assert c == pytest.approx([1.0], abs=1e-6)
    mj = mujoco.MjModel.from_xml_path(str(xml))
    izz_armature = float(mj.body_inertia[1][2] + mj.dof_armature[0])
    assert abs(combo["estimate"] - izz_armature) < 4 * combo["std"] + 1e-9
    alone = {g["parameters"][0] for g in groups if g["combination"] is None}
    assert {"body.link.inertia_diag[0]", "body.link.inertia_diag[1]"} <= alone
    assert not res.results["success"]


def test_base_parameters_linear_algebra():
    """J with column 2 = 0.5 col 0 − 2 col 1 ... in scaled units: a planted dependency found
    with its coefficients (independent of the fit)."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 3))
    J = np.column_stack([A[:, 0], A[:, 1], A[:, 2], 0.5 * A[:, 0]])  # p3 acts as 0.5 p0
    groups = base_parameters(J, ["a", "b", "c", "d"], np.ones(4))
    g = [x for x in groups if x["combination"]][0]
    coef = g["coefficients"]
    # identifiable: a + 0.5 d (or d + 2 a)
    if g["parameters"][0] == "a":
        assert coef["d"] == pytest.approx(0.5)
    else:
        assert coef["a"] == pytest.approx(2.0)


def test_pseudo_inertia_transform_is_always_physical():
    tr = Transforms((positive(),) + (physical_inertia("inertial"),) * 10
                    + (physical_inertia("inertia"),) * 6)
    rng = np.random.default_rng(3)
    iu = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))
    for _ in range(20):
        p = np.asarray(tr.forward(jnp.asarray(rng.normal(scale=1.0, size=17))))
        for m, u in ((p[1], p[5:11]), (1.0, p[11:17])):
            Ic = np.zeros((3, 3))
            for k, (a, b) in enumerate(iu):
                Ic[a, b] = Ic[b, a] = u[k]
            ev = np.linalg.eigvalsh(Ic)
            assert m > 0 and ev[0] > 0 and ev[0] + ev[1] >= ev[2] * (1 - 1e-12)
        # the 4x4 pseudo-inertia (Wensing et al.) of the ten is positive definite
        m, c = p[1], p[2:5]
        Ic = np.zeros((3, 3))
        for k, (a, b) in enumerate(iu):
            Ic[a, b] = Ic[b, a] = p[5 + k]
        Io = Ic + m * (c @ c * np.eye(3) - np.outer(c, c))
        Jp = np.block([[0.5 * np.trace(Io) * np.eye(3) - Io, m * c[:, None]],
                       [m * c[None, :], np.array([[m]])]])
        assert np.linalg.eigvalsh(Jp)[0] > 0
        np.testing.assert_allclose(np.asarray(tr.forward(jnp.asarray(tr.inverse(p)))), p,
                                   rtol=1e-9, atol=1e-12)
    # a flat (rod-like, zero) inertia starts from the nearest realisable one, with a warning
    flat = np.array([1.0, 2.0, 0, 0, 0, 0.0, 0.1, 0.1, 0, 0, 0, 0.0, 0.1, 0.1, 0, 0, 0])
    with pytest.warns(UserWarning, match="not strictly realisable"):
        z = tr.inverse(flat)
    assert np.all(np.isfinite(z))


def test_expand_patterns():
    import diffmb

    m = diffmb.load_mjcf(ARM)
    assert expand(m, "body.*.mass,joint.el*.damping") == [
        "body.link1.mass", "body.link2.mass", "body.link3.mass", "joint.elbow.damping"]
    with pytest.raises(KeyError, match="matches no body"):
        expand(m, "body.arm*.mass")


def test_bad_data_is_named(tmp_path):
    import diffmb

    m = diffmb.load_mjcf(ARM)
    t = np.arange(0, 1, 0.01)
    q = np.column_stack([np.sin(t), np.cos(t), t])
    gap = Record(t=np.concatenate([t[:50], t[50:] + 0.5]), q=q, source="gap.csv")
    with pytest.raises(ValueError, match=r"gap.csv: time gap .*data rows 50-51"):
        check_record(gap, m)
    sat = q.copy()
    sat[30:45, 1] = sat[:, 1].max() + 0.1
    with pytest.raises(ValueError, match=r"column 'q_elbow' stays at its maximum .*rows 31-45"):
        check_record(Record(t=t, q=sat, source="sat.csv"), m)
    # a CSV without the actuators' inputs
    log = tmp_path / "noinput.csv"
    write_csv(log, t, {f"q_{j}": q[:, c] for c, j in enumerate(JOINTS)})
    with pytest.raises(ValueError, match=r"actuators \['m_shoulder', 'm_elbow', 'm_wrist'\]"):
        identify(ARM, log, progress=False)
    bad = tmp_path / "badcol.csv"
    write_csv(bad, t, {"q_shoulder": q[:, 0], "q_knee": q[:, 1]})
    with pytest.raises(ValueError, match=r"badcol.csv, line 1, column 3: unknown channel 'q_knee'"):
        identify(ARM, bad, progress=False)
    nan = tmp_path / "nan.csv"
    nan.write_text("t,q_shoulder,q_elbow,q_wrist\n0,0,0,0\n0.01,nan,0,0\n")
    with pytest.raises(ValueError, match=r"nan.csv, line 3, column 2 \('q_shoulder'\)"):
        identify(ARM, nan, progress=False)
    with pytest.raises(ValueError, match="matches no channel"):
        identify(ARM, log, sensors="q_knee.delay", progress=False)
    sigma = noise_from_data(Record(t=t, q=q + np.random.default_rng(0).normal(0, 2e-3, q.shape)),
                            m)
    assert sigma["q_elbow"] == pytest.approx(2e-3, rel=0.3)


@pytest.mark.slow  # ~30 s: the fast suite checks the pseudo-inertia transform itself
def test_inertial_parameters_fit_in_pseudo_inertia_coordinates(tmp_path):
    """All ten inertial parameters of the wrist link from a planar motion: the mass, com and the
    inertia about the hinge axis come out as MuJoCo's (from the file's capsule); the components
    a planar motion cannot see are named as having no effect, and every iterate stays
    physically realisable (the fit runs in log-Cholesky coordinates)."""
    log = tmp_path / "plain.csv"
    mujoco_record(log, t1=1.2, ts=0.01)
    mj = mujoco.MjModel.from_xml_path(str(ARM))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = identify(ARM, log, params="body.link3.inertial,joint.wrist.damping", progress=False,
                     init={"body.link3.inertial": np.array([0.5, 0.05, 0, 0, 1e-3, 2e-3, 2e-3,
                                                            0, 0, 0])})
    est = np.asarray(r.identified["body.link3.inertial"]["estimate"])
    std = r.identified["body.link3.inertial"]["std"]
    # MuJoCo's body inertia is principal (body_iquat); about the body's y axis it is the
    # capsule's transverse moment
    assert abs(est[0] - mj.body_mass[3]) < 4 * std[0]
    assert abs(est[1] - mj.body_ipos[3][0]) < 4 * std[1]
    assert abs(est[5] - mj.body_inertia[3][0]) < 4 * std[5]
    dead = {g["parameters"][0] for g in r.results["base_parameters"] if g["combination"] is None}
    assert {"body.link3.inertial[2]", "body.link3.inertial[7]",
            "body.link3.inertial[9]"} <= dead


@pytest.mark.slow
def test_fit_from_a_known_initial_state(tmp_path):
    """fit(initial_state="known"): single shooting from the record's given rest state (MuJoCo's
    arm starts at q = 0, v = 0); the parameters are the only unknowns (Jacobian columns)."""
    import diffmb
    from diffmb.optim import fit
    from diffmb.optim.sysid import read_joint_csv

    log = tmp_path / "log.csv"
    # inputs sampled every 4 ms: MuJoCo holds each step's mid-step value, diffmb interpolates the
    # samples; at 10 ms that difference (O(h²)) biases the damping by a few of its small σ
    mujoco_record(log, t1=1.5, ts=0.004)
    model = diffmb.load_mjcf(ARM)
    forces = {f"e{i}": e for i, e in enumerate(diffmb.mjcf_forces(ARM))}
    rec = read_joint_csv(log, model, ["m_shoulder", "m_elbow", "m_wrist"])
    rec.q0, rec.v0 = np.zeros(3), np.zeros(3)
    names = [f"joint.{j}.damping" for j in JOINTS]
    res = fit(model, rec, names, forces=forces, simulate_kwargs={"dt": 0.002},
              weights={"q": 1e3}, initial_state="known", progress=False,
              init={n: 0.5 for n in names})
    assert res.jacobian.shape[1] == len(names) and res.success
    for n in names:
        assert abs(res.estimates[n] - TRUE[n]) < 4 * res.std[n]
    with pytest.raises(ValueError, match="needs the record's q0 and v0"):
        fit(model, read_joint_csv(log, model, ["m_shoulder", "m_elbow", "m_wrist"]), names,
            forces=forces, simulate_kwargs={"dt": 0.002}, initial_state="known", progress=False)


def test_constant_or_implausible_cells_are_refused_with_their_row():
    """A measured channel that never changes and a cell beyond the plausible magnitude are
    refused by name, with the data row (1-based, counted by hand from the arrays built here)."""
    import diffmb

    m = diffmb.load_mjcf(ARM)
    t = np.arange(0, 1, 0.01)
    q = np.column_stack([np.sin(t), np.cos(t), t])
    const = q.copy()
    const[:, 2] = 0.25
    with pytest.raises(ValueError, match=r"const.csv: measured column 'q_wrist' is constant "
                                         r"\(0.25 in all 100 data rows\)"):
        check_record(Record(t=t, q=const, source="const.csv"), m)
    huge = q.copy()
    huge[41, 1] = 1e300
    with pytest.raises(ValueError, match=r"huge.csv: data row 42 \(t = 0.41\), column 'q_elbow': "
                                         r"1e\+300 is not a plausible value"):
        check_record(Record(t=t, q=huge, source="huge.csv"), m)
    ctrl = np.column_stack([np.sin(3 * t)] * 3)
    ctrl[7, 2] = -5e12
    with pytest.raises(ValueError, match=r"data row 8 \(t = 0.07\), column 'ctrl_m_wrist'"):
        check_record(Record(t=t, q=q, ctrl=ctrl, source="u.csv"), m,
                     ("m_shoulder", "m_elbow", "m_wrist"))
    check_record(Record(t=t, q=q, ctrl=np.column_stack([np.sin(3 * t)] * 3)), m)  # plausible


def test_non_finite_array_cell_is_named_with_row_and_column():
    import diffmb
    from diffmb.optim.sysid import load_data

    m = diffmb.load_mjcf(ARM)
    t = np.arange(0, 0.5, 0.01)
    q = np.column_stack([np.sin(t), np.cos(t), t])
    q[12, 0] = np.inf
    with pytest.raises(ValueError, match=r"data\[0\]: data row 13 \(t = 0.12\), column "
                                         r"'q_shoulder': non-finite value inf"):
        load_data(m, {"t": t, "q": q})
    t_nan = t.copy()
    t_nan[3] = np.nan
    with pytest.raises(ValueError, match=r"t must be 1-D, finite"):
        load_data(m, {"t": t_nan, "q": np.zeros_like(q)})


@pytest.mark.slow
def test_load_robot_reads_files_through_load_model(tmp_path):
    """The model of ``identify(path)`` is ``diffmb.io.load_model``'s; a URDF's root can float
    (a free joint: 7 more coordinates, 6 more speeds than the file's two hinges)."""
    from diffmb.io import load_model
    from diffmb.model import JointType
    from diffmb.optim.identify import load_robot

    m, forces, dt = load_robot(ARM)
    assert m.nq == load_model(ARM).nq == 3 and m.source.kind == "mjcf"
    assert dt == mujoco.MjModel.from_xml_path(str(ARM)).opt.timestep
    assert any(type(e).__name__ == "Actuators" for e in forces.values())
    urdf = tmp_path / "two.urdf"
    urdf.write_text("""<robot name="two">
      <link name="base"><inertial><mass value="1"/><inertia ixx="0.1" iyy="0.1" izz="0.1"
        ixy="0" ixz="0" iyz="0"/></inertial></link>
      <link name="a"><inertial><mass value="0.5"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
        ixy="0" ixz="0" iyz="0"/></inertial></link>
      <link name="b"><inertial><mass value="0.5"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
        ixy="0" ixz="0" iyz="0"/></inertial></link>
      <joint name="j1" type="revolute"><parent link="base"/><child link="a"/>
        <axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
      <joint name="j2" type="revolute"><parent link="a"/><child link="b"/>
        <origin xyz="0.3 0 0"/><axis xyz="0 0 1"/>
        <limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
    </robot>""")
    fixed, _, dt_u = load_robot(urdf)
    free, _, _ = load_robot(urdf, floating_base=True)
    assert dt_u == 1e-3 and (fixed.nq, fixed.nv) == (2, 2) and (free.nq, free.nv) == (9, 8)
    assert JointType(free.joint_types[0]) == JointType.FREE and free.source.floating_base
    with pytest.raises(ValueError, match=r"arm3_motors.xml: floating_base applies to URDF"):
        load_robot(ARM, floating_base=True)
    with pytest.raises(ValueError, match=r"floating_base applies to a URDF file, not to a Model"):
        identify(fixed, {"t": [0.0, 0.1], "q": [[0.0, 0.0]] * 2}, dt=1e-3, floating_base=True)
