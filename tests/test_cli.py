"""The command line's promises: checkpoints and interruptions, exit codes (0 converged, 1 bad
input, 2 usage, 3 not converged, 130/143 interrupted) and one-line errors naming the file, row
or argument. Oracles: an uninterrupted ``diffmb identify`` on the same data (the resumed run must
give its estimate), MuJoCo's simulation of the files the fits read, and the files we wrote
ourselves. ``identify arm`` runs on the first 0.25 s of the shipped record (26 samples, one
shooting segment): the arm's fit compiles once per test process (~15 s), every later run takes
~1 s."""

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from diffmb import cli
from diffmb.cli import main
from diffmb.optim.lsq import read_checkpoint
from diffmb.studies import arm


def _short_csv(tmp_path, rows=26, name="short.csv", edit=None):
    lines = arm.CSV.read_text().splitlines()
    hdr = next(i for i, ln in enumerate(lines) if not ln.startswith("#"))
    body = lines[: hdr + 1 + rows]
    if edit is not None:
        c = body[hdr + 5].split(",")
        c[1] = repr(float(c[1]) + edit)
        body[hdr + 5] = ",".join(c)
    p = tmp_path / name
    p.write_text("\n".join(body) + "\n")
    return p


def _identify(csv, out, *extra):
    return main(["identify", "arm", "--data", str(csv), "--out", str(out), *extra])


def _interrupt_at(monkeypatch, iteration, exc):
    """Make the arm's fit raise ``exc`` from its callback after ``iteration`` iterations."""
    real = arm.fit

    def stop(info):
        if info["iteration"] == iteration:
            raise exc

    monkeypatch.setattr(arm, "fit", lambda *a, **k: real(*a, callback=stop, **k))


def _one_line(err):
    """The one line of ``err`` that is not a progress bar (tqdm rewrites its line with \\r)."""
    lines = [ln for ln in re.split(r"[\r\n]", err)
             if ln.strip() and not re.match(r"\w+:\s+\d+%\|", ln)]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.slow
def test_identify_interrupted_keeps_partial_results_and_resume_gives_the_same_estimate(
        tmp_path, monkeypatch, capsys):
    csv = _short_csv(tmp_path)
    # the oracle: one uninterrupted run (on 0.25 s of data the fit may stop at its iteration
    # cap: exit 3, and the resumed run must then stop there too)
    rc_ref = _identify(csv, tmp_path / "ref")
    assert rc_ref in (0, 3)
    assert (rc_ref == 3) == ("did not converge" in capsys.readouterr().err)
    ref = json.loads((tmp_path / "ref" / "results.json").read_text())
    assert ref["status"] == "complete" and (tmp_path / "ref" / "checkpoint.npz").exists()
    capsys.readouterr()

    # Ctrl-C after iteration 3: exit 130, the checkpoint stays, results.json is marked partial
    out = tmp_path / "run"
    with monkeypatch.context() as mp:
        _interrupt_at(mp, 3, KeyboardInterrupt)
        assert _identify(csv, out) == 130
    line = _one_line(capsys.readouterr().err)
    assert "interrupted (Ctrl-C) after iteration 3" in line and "--resume" in line, line
    part = json.loads((out / "results.json").read_text())
    meta, _ = read_checkpoint(out / "checkpoint.npz")
    assert part["status"] == "interrupted" and part["iteration"] == 3 == meta["state"]["k"]
    assert part["cost"] == meta["cost"] == meta["state"]["history"][-1]["cost"]
    assert set(part["params"]) == set(ref["identified"]) | set(ref["unidentifiable"])
    assert part["resume"].endswith("--resume") and str(out) in part["resume"]
    assert not list(out.glob("*.tmp*"))

    # without --resume the checkpoint is not silently reused (nor overwritten)
    before = (out / "checkpoint.npz").read_bytes()
    assert _identify(csv, out) == 2  # usage: the arguments conflict with what --out holds
    line = _one_line(capsys.readouterr().err)
    assert "--resume" in line and "fresh --out" in line and "3 iterations" in line, line
    assert (out / "checkpoint.npz").read_bytes() == before

    # --resume continues from iteration 3 and reaches the uninterrupted estimate
    assert _identify(csv, out, "--resume") == rc_ref
    assert "resuming from iteration 3" in capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete" and res["fit"]["resumed_from"] == 3
    assert res["fit"]["iterations"] == ref["fit"]["iterations"]
    assert res["identified"].keys() == ref["identified"].keys()
    for n, v in ref["identified"].items():
        assert res["identified"][n]["estimate"] == pytest.approx(v["estimate"], rel=1e-8), n
        assert res["identified"][n]["std"] == pytest.approx(v["std"], rel=1e-6), n

    # resuming a finished fit returns its answer at once
    assert _identify(csv, tmp_path / "ref", "--resume") == rc_ref
    again = json.loads((tmp_path / "ref" / "results.json").read_text())
    assert again["identified"] == ref["identified"]
    assert again["fit"]["resumed_from"] == ref["fit"]["iterations"]


@pytest.mark.slow
def test_identify_sigterm_keeps_partial_results(tmp_path, monkeypatch, capsys):
    csv = _short_csv(tmp_path)
    with monkeypatch.context() as mp:
        _interrupt_at(mp, 2, cli._Terminated)
        assert _identify(csv, tmp_path) == 143
    line = _one_line(capsys.readouterr().err)
    assert "terminated (SIGTERM) after iteration 2" in line and "--resume" in line, line
    part = json.loads((tmp_path / "results.json").read_text())
    assert part["status"] == "interrupted" and part["iteration"] == 2
    assert part["reason"] == "terminated (SIGTERM)"


def test_identify_interrupted_before_first_iteration(tmp_path, monkeypatch, capsys):
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(arm, "fit", boom)
    assert _identify(_short_csv(tmp_path), tmp_path / "o") == 130
    line = _one_line(capsys.readouterr().err)
    assert "before the first iteration was saved" in line, line
    part = json.loads((tmp_path / "o" / "results.json").read_text())
    assert part["status"] == "interrupted" and part["iteration"] == 0
    # nothing to resume: --resume starts from the beginning (and says so)
    monkeypatch.undo()
    _interrupt_at(monkeypatch, 1, KeyboardInterrupt)
    assert _identify(_short_csv(tmp_path), tmp_path / "o", "--resume") == 130
    assert "no checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("kind, reason", [
    ("garbage", "not an .npz file"),
    ("truncated", "truncated or corrupt"),
    ("no_meta", "without diffmb's '__meta__'"),
])
@pytest.mark.parametrize("resume", [False, True])
def test_identify_refuses_a_corrupt_checkpoint_in_one_line(tmp_path, capsys, kind, reason,
                                                           resume):
    out = tmp_path / "out"
    out.mkdir()
    ck = out / "checkpoint.npz"
    if kind == "garbage":
        ck.write_bytes(os.urandom(3000))
    elif kind == "truncated":
        np.savez(ck, z=np.zeros(40), __meta__=np.array(json.dumps({"x": 1})))
        ck.write_bytes(ck.read_bytes()[:200])
    else:
        np.savez(ck, z=np.zeros(40))
    before = ck.read_bytes()
    rc = _identify(_short_csv(tmp_path), out, *(["--resume"] if resume else []))
    line = _one_line(capsys.readouterr().err)
    assert rc == 1 and line.startswith("diffmb: error: ")
    assert str(ck) in line and reason in line, line
    assert ck.read_bytes() == before and not (out / "results.json").exists()


def test_identify_resume_refuses_the_checkpoint_of_other_data(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    with monkeypatch.context() as mp:
        _interrupt_at(mp, 2, KeyboardInterrupt)
        assert _identify(_short_csv(tmp_path), out) == 130
    before = (out / "checkpoint.npz").read_bytes()
    capsys.readouterr()
    other = _short_csv(tmp_path, name="other.csv", edit=1e-3)  # one angle differs
    assert _identify(other, out, "--resume") == 1  # bad input, not a usage error
    line = _one_line(capsys.readouterr().err.split("\n", 1)[1])  # after "resuming from ..."
    assert str(out / "checkpoint.npz") in line and "different problem" in line, line
    assert "data: saved" in line, line
    assert (out / "checkpoint.npz").read_bytes() == before


def test_reproduce_interrupted_keeps_what_was_written(tmp_path, monkeypatch, capsys):
    def done(out_dir, quick):
        (out_dir / "report.md").write_text("done\n")

    def half(out_dir, quick):
        (out_dir / "figure.png").write_bytes(b"half")
        raise KeyboardInterrupt

    studies = {"one": done, "two": half, "three": done}
    monkeypatch.setattr(cli, "STUDIES", dict.fromkeys(studies, "x"))
    monkeypatch.setattr(cli, "_study_module",
                        lambda n: types.SimpleNamespace(reproduce=studies[n]))
    assert main(["reproduce", "all", "--out", str(tmp_path)]) == 130
    line = _one_line(capsys.readouterr().err)
    assert "interrupted (Ctrl-C)" in line and f"output in {tmp_path} is incomplete" in line
    assert "'two' did not finish" in line, line
    assert (tmp_path / "one" / "report.md").exists()
    assert (tmp_path / "two" / "figure.png").read_bytes() == b"half"
    index = (tmp_path / "README.md").read_text()
    assert "**one**: [report](one/report.md)" in index
    assert "**two**: INTERRUPTED" in index and "**three**: not run" in index
    # a single study: its files are kept too
    assert main(["reproduce", "two", "--out", str(tmp_path / "single")]) == 130
    assert "incomplete" in capsys.readouterr().err
    assert (tmp_path / "single" / "figure.png").exists()


@pytest.mark.slow  # 40 s: a real process compiles the arm fit; in-process interrupts run in CI
def test_sigint_to_the_process_keeps_partial_results(tmp_path):
    """The real path: ``python -m diffmb.cli`` receives SIGINT during the fit (the whole 4 s
    record, so that the fit outlasts the signal) and exits 130 at once with partial results."""
    out = tmp_path / "out"
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
               or "--xla_backend_optimization_level=0")
    p = subprocess.Popen([sys.executable, "-m", "diffmb.cli", "identify", "arm", "--data",
                          str(arm.CSV), "--out", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        t0 = time.monotonic()
        while not (out / "checkpoint.npz").exists() and p.poll() is None:
            assert time.monotonic() - t0 < 240, "no checkpoint after 240 s"
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "interrupted (Ctrl-C) after iteration" in last and "--resume" in last, last
    part = json.loads((out / "results.json").read_text())
    meta, _ = read_checkpoint(out / "checkpoint.npz")
    assert part["status"] == "interrupted" and part["iteration"] == meta["state"]["k"] >= 1
    assert part["params"] == meta["params"]


# ----------------------------------------------------------------------------------------------
# Exit codes and one-line errors of `identify --model`. Oracle: MuJoCo simulates the files
# (a damped pendulum; a floating base with one hinge) and the damping it used is the answer.
# ----------------------------------------------------------------------------------------------

PENDULUM = """<mujoco model="pendulum"><option timestep="0.002" integrator="RK4"/>
<worldbody><body name="link"><joint name="hinge" type="hinge" axis="0 1 0" damping="{d}"/>
<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/></body></worldbody>
</mujoco>"""
TRUE_DAMPING = 0.15  # MuJoCo simulates the record with it; the file says 0.05


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    import mujoco

    from diffmb.io.csvdata import write_csv

    d = tmp_path_factory.mktemp("pendulum")
    (d / "pendulum.xml").write_text(PENDULUM.format(d=0.05))
    m = mujoco.MjModel.from_xml_string(PENDULUM.format(d=TRUE_DAMPING))
    data = mujoco.MjData(m)
    data.qpos[0] = 0.8
    t, q = [0.0], [0.8]
    for k in range(500):  # 1 s, sampled every 10 ms
        mujoco.mj_step(m, data)
        if (k + 1) % 5 == 0:
            t.append(data.time)
            q.append(float(data.qpos[0]))
    write_csv(d / "log.csv", np.array(t), {"q_hinge": np.array(q)})
    return d


def _model_args(d, out, csv=None, *extra):
    return ["identify", "--model", str(d / "pendulum.xml"), "--data",
            str(csv or d / "log.csv"), "--out", str(out), "--params", "joint.hinge.damping",
            *extra]


@pytest.mark.slow
def test_fit_without_convergence_exits_3_and_a_converged_one_0(pendulum, tmp_path, capsys):
    # one Levenberg–Marquardt iteration cannot reach MuJoCo's damping from the file's
    assert main(_model_args(pendulum, tmp_path / "one", None, "--max-steps", "1")) == 3
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("diffmb: identify ") and "did not converge" in line, line
    assert "max_steps = 1" in line and str(tmp_path / "one" / "results.json") in line, line
    res = json.loads((tmp_path / "one" / "results.json").read_text())
    assert res["success"] is False and res["iterations"] == 1
    # the same fit with the default iteration cap converges to MuJoCo's damping
    out = tmp_path / "full"
    assert main(_model_args(pendulum, out, None, "--replay")) == 0
    err = capsys.readouterr().err
    assert "did not converge" not in err and "error" not in err, err
    res = json.loads((out / "results.json").read_text())
    assert res["success"] is True
    assert res["identified"]["joint.hinge.damping"]["estimate"] == pytest.approx(TRUE_DAMPING,
                                                                                 rel=1e-6)
    # --replay: the fitted motion is saved for `diffmb replay`, beside the overlay page
    from diffmb.io import load_trajectory
    from diffmb.io.csvdata import read_csv

    traj, info = load_trajectory(out / "fitted.npz")
    t, ch = read_csv(pendulum / "log.csv")
    np.testing.assert_allclose(np.asarray(traj.ts), t)
    np.testing.assert_allclose(np.asarray(traj.q)[:, 0], ch["q_hinge"], atol=1e-6)  # MuJoCo's
    assert info["model_path"].endswith("pendulum.xml")
    page = (out / "replay.html").read_text()
    assert "measured" in page and "fitted" in page
    assert main(["replay", str(out / "fitted.npz"), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "replay.html").is_file()


def _csv(tmp_path, text, name):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@pytest.mark.parametrize("name, content, expect", [
    ("binary.csv", bytes(range(256)) * 4, "line 2: not a UTF-8 text file (byte 0x80"),
    ("huge.csv", "t,q_hinge\n0,0.8\n0.01,1e300\n0.02,0.7\n",
     "line 3, column 2 ('q_hinge'): value 1e300 is beyond"),
    ("nan.csv", "t,q_hinge\n0,0.8\n0.01,nan\n", "line 3, column 2 ('q_hinge'): value is 'nan'"),
    # time in milliseconds: 1490 s at the file's 2 ms step is 7.45e5 steps
    ("ms.csv", "t,q_hinge\n" + "".join(f"{10 * k},{0.8 - 0.001 * k}\n" for k in range(150)),
     "the record spans 1490 s (t = 0 to 1490, 150 rows), about 7.45e+05 simulation steps of "
     "dt = 0.002 s, more than the limit of 200000 (--max-sim-steps)"),
])
def test_bad_data_exits_1_in_one_line_before_the_fit(pendulum, tmp_path, monkeypatch, capsys,
                                                     name, content, expect):
    ident = importlib.import_module("diffmb.optim.identify")  # the module, not the function

    monkeypatch.setattr(ident, "identify", lambda *a, **k: pytest.fail("the fit started"))
    csv = _csv(tmp_path, content, name)
    assert main(_model_args(pendulum, tmp_path / "out", csv)) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"diffmb: error: {csv}") and expect in line, line


def test_bad_data_found_by_the_fit_exits_1_in_one_line(pendulum, tmp_path, capsys):
    csv = _csv(tmp_path, "t,q_knee\n0,0.8\n0.01,0.7\n", "channel.csv")
    assert main(_model_args(pendulum, tmp_path / "out", csv)) == 1
    line = _one_line(capsys.readouterr().err)
    assert line == (f"diffmb: error: {csv}, line 1, column 2: unknown channel 'q_knee'; "
                    "expected q_<joint>, v_<joint>, tau_<joint> for joints ['hinge']"), line


def test_the_step_limit_can_be_raised(pendulum, tmp_path, monkeypatch, capsys):
    """--max-sim-steps lifts the refusal: the record then reaches the fit."""
    ident = importlib.import_module("diffmb.optim.identify")  # the module, not the function

    seen = []
    monkeypatch.setattr(ident, "identify", lambda model, data, **k: seen.append(k) or
                        types.SimpleNamespace(results={"identified": {}, "success": True}))
    csv = _csv(tmp_path, "t,q_hinge\n" + "".join(f"{10 * k},{0.8 - 0.001 * k}\n"
                                                for k in range(150)), "ms.csv")
    assert main(_model_args(pendulum, tmp_path / "a", csv)) == 1
    assert "--max-sim-steps" in capsys.readouterr().err
    assert main(_model_args(pendulum, tmp_path / "b", csv, "--max-sim-steps", "800000")) == 0
    assert len(seen) == 1 and seen[0]["max_steps"] == cli.MAX_FIT_ITERATIONS


def test_a_step_longer_than_the_sampling_is_warned_about(pendulum, tmp_path, monkeypatch,
                                                          capsys):
    ident = importlib.import_module("diffmb.optim.identify")
    monkeypatch.setattr(ident, "identify", lambda model, data, **k:
                        types.SimpleNamespace(results={"identified": {}, "converged": True}))
    assert main(_model_args(pendulum, tmp_path / "a", None, "--dt", "0.05")) == 0
    line = _one_line(capsys.readouterr().err)
    assert "dt = 0.05 s is longer than" in line and "median sample interval 0.01 s" in line, line
    assert main(_model_args(pendulum, tmp_path / "b", None, "--dt", "0.01")) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("extra, expect", [
    (["--dt", "0"], "argument --dt: got 0; must be in (0, 1]"),
    (["--dt=-1e-3"], "argument --dt: got -1e-3; must be in (0, 1]"),
    (["--dt", "nan"], "argument --dt: got nan; must be finite"),
    (["--dt", "x"], "argument --dt: 'x' is not a number"),
    (["--max-steps", "0"], "argument --max-steps: got 0; must be >= 1"),
    (["--segments", "1.5"], "argument --segments: '1.5' is not an integer"),
    (["--max-sim-steps", "-5"], "argument --max-sim-steps: got -5; must be >= 1"),
    (["--floating-base"], "--floating-base applies to a URDF"),
    (["--params", "body.nobody.mass"], "no body named 'nobody'"),
    (["--sensors", "q_hinge.gain2"], "--sensors entry 'q_hinge.gain2'"),
])
def test_usage_errors_exit_2_in_one_line_naming_the_argument(pendulum, tmp_path, capsys, extra,
                                                             expect):
    assert main(_model_args(pendulum, tmp_path / "out", None, *extra)) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("diffmb") and "error: " in line and expect in line, line
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("argv, expect", [
    (["identify", "arm", "--floating-base"], "--floating-base applies to --model FILE"),
    (["identify", "arm", "--replay"], "--replay applies to --model FILE"),
    (["identify", "arm", "--dt", "0.01"], "--dt applies to --model FILE"),
    (["identify", "arm", "--max-steps", "5"], "--max-steps applies to --model FILE"),
    (["identify", "arm", "--segments", "3"], "--segments applies to --model FILE"),
    (["identify", "arm", "--max-sim-steps", "9"], "--max-sim-steps applies to --model FILE"),
])
def test_model_options_on_a_study_are_usage_errors(tmp_path, capsys, argv, expect):
    assert main([*argv, "--data", str(arm.CSV), "--out", str(tmp_path)]) == 2
    assert expect in _one_line(capsys.readouterr().err)


def test_a_model_file_that_cannot_be_loaded_is_bad_input(pendulum, tmp_path, capsys):
    bad = _csv(tmp_path, os.urandom(400), "robot.xml")
    assert main(["identify", "--model", str(bad), "--data", str(pendulum / "log.csv"),
                 "--out", str(tmp_path / "o")]) == 1
    line = _one_line(capsys.readouterr().err)  # MuJoCo's multi-line parse error on one line
    assert line.startswith(f"diffmb: error: {bad}: ") and "XML" in line, line
    urdf = _csv(tmp_path, '<robot name="r"><link name="a"><inertial><mass value="abc"/>'
                '</inertial></link></robot>', "robot.urdf")
    assert main(["identify", "--model", str(urdf), "--data", str(pendulum / "log.csv"),
                 "--out", str(tmp_path / "o")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert str(urdf) in line and "'a'" in line and "abc" in line, line


FLOATING_URDF = """<robot name="float2">
 <link name="base"><inertial><origin xyz="0 0 0"/><mass value="2.0"/>
  <inertia ixx="0.02" iyy="0.03" izz="0.04" ixy="0" ixz="0" iyz="0"/></inertial></link>
 <link name="arm"><inertial><origin xyz="0.2 0 0"/><mass value="0.5"/>
  <inertia ixx="0.001" iyy="0.008" izz="0.008" ixy="0" ixz="0" iyz="0"/></inertial></link>
 <joint name="hinge" type="revolute"><parent link="base"/><child link="arm"/>
  <origin xyz="0.1 0 0"/><axis xyz="0 1 0"/>
  <limit lower="-10" upper="10" effort="100" velocity="100"/>
  <dynamics damping="0.05"/></joint></robot>"""
FLOATING_MJCF = """<mujoco><option timestep="0.001" integrator="RK4"/><worldbody>
 <body name="base"><freejoint name="root_joint"/>
  <inertial pos="0 0 0" mass="2" diaginertia="0.02 0.03 0.04"/>
  <body name="arm" pos="0.1 0 0"><joint name="hinge" type="hinge" axis="0 1 0" damping="0.1"/>
   <inertial pos="0.2 0 0" mass="0.5" diaginertia="0.001 0.008 0.008"/></body></body>
</worldbody></mujoco>"""


@pytest.mark.slow  # ~2 min on 2 busy cores: the floating base's fit and replay compile
def test_identify_a_floating_base_urdf(tmp_path, capsys):
    """``--floating-base``: the URDF's root link flies freely; the record (MuJoCo simulating the
    same bodies under a free joint, hinge damping 0.1 where the URDF says 0.05) is fitted to
    MuJoCo's damping, and the saved fitted motion replays with the floating base recorded."""
    import mujoco

    from diffmb.io import load_trajectory
    from diffmb.io.csvdata import write_csv

    urdf = tmp_path / "float2.urdf"
    urdf.write_text(FLOATING_URDF)
    m = mujoco.MjModel.from_xml_string(FLOATING_MJCF)
    d = mujoco.MjData(m)
    d.qvel[:] = 0.2, -0.1, 0.3, 0.4, 0.5, -0.3, 3.0  # drift, tumble, swing: every q moves
    t, q = [0.0], [d.qpos.copy()]
    for k in range(500):
        mujoco.mj_step(m, d)
        if (k + 1) % 10 == 0:
            t.append(d.time)
            q.append(d.qpos.copy())
    q = np.array(q)
    ch = {f"q_root_joint_{i}": q[:, i] for i in range(7)} | {"q_hinge": q[:, 7]}
    write_csv(tmp_path / "log.csv", np.array(t), ch)
    args = ["identify", "--model", str(urdf), "--data", str(tmp_path / "log.csv"),
            "--params", "joint.hinge.damping"]
    # without the flag the file has a fixed base: the root's channels are unknown
    assert main([*args, "--out", str(tmp_path / "fixed")]) == 1
    assert "unknown channel 'q_root_joint_0'" in _one_line(capsys.readouterr().err)
    out = tmp_path / "out"
    assert main([*args, "--floating-base", "--replay", "--check-gradient", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["identified"]["joint.hinge.damping"]["estimate"] == pytest.approx(0.1, rel=1e-6)
    assert res["gradient_check"]["trusted"], res["gradient_check"]["verdict"]
    traj, info = load_trajectory(out / "fitted.npz")
    assert info["model_floating_base"] is True and np.asarray(traj.q).shape == (len(t), 8)
    assert res["model"] == str(urdf) and res["floating_base"] is True
    np.testing.assert_allclose(np.asarray(traj.q), q, atol=1e-6)
    assert main(["replay", str(out / "fitted.npz"), "--out", str(tmp_path / "r")]) == 0


@pytest.mark.parametrize("results, code, reason", [
    ({"identified": {}, "converged": False, "reason": "stopped after max_steps = 7"}, 3,
     "stopped after max_steps = 7"),
    ({"identified": {}, "success": np.bool_(False), "message": "no descent"}, 3, "no descent"),
    ({"identified": {}, "fit": {"message": "stopped after max_steps = 40 iterations"}}, 3,
     "stopped after max_steps = 40 iterations"),
    ({"identified": {}, "fit": {"converged": True, "message": "converged (step below xtol)"}},
     0, None),
    ({"identified": {}, "success": True}, 0, None),
    # the solver converged; a parameter the data cannot identify is reported in the results
    ({"identified": {}, "success": False, "message": "converged (step below xtol); not a "
      "successful fit: the data cannot identify body.b.mass"}, 0, None),
    ({"identified": {}, "converged": True, "success": False, "message": "converged"}, 0, None),
])
def test_a_study_whose_fit_did_not_converge_exits_3(tmp_path, monkeypatch, capsys, results,
                                                    code, reason):
    """Each study reports its fit's outcome in its results (a flag at the top or under "fit");
    the command line turns a fit that did not converge into exit code 3 with the reason."""
    def identify(data_csv, out_dir):
        return results

    monkeypatch.setattr(cli, "STUDIES", {"toy": "x"})
    monkeypatch.setattr(cli, "_study_module", lambda n: types.SimpleNamespace(identify=identify))
    csv = _csv(tmp_path, "t,y\n0,1\n1,2\n", "d.csv")
    assert main(["identify", "toy", "--data", str(csv), "--out", str(tmp_path / "o")]) == code
    err = capsys.readouterr().err
    if reason is None:
        assert err == ""
    else:
        line = _one_line(err)
        assert line.startswith("diffmb: identify toy: the fit did not converge") and reason in line


def test_the_command_line_imports_no_plotting_until_a_command_needs_it():
    code = ("import sys, diffmb.cli as c\n"
            "c.build_parser()\n"
            "assert c.main(['list']) == 0\n"
            "print(sorted(m for m in ('matplotlib', 'imageio', 'diffmb.viz', 'diffmb.bench.core')"
            " if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout


def test_reproduce_all_in_parallel_processes(tmp_path, monkeypatch, capsys):
    """``--jobs 2``: each study in its own process, its output in its log; a failing study is
    reported with the end of its log and the exit code is 1; the index links the others."""
    scripts = {"one": "open('report.md', 'w').write('one'); print('one ran')",
               "two": "import sys; print('two broke here'); sys.exit(3)",
               "three": "open('report.md', 'w').write('three')"}
    monkeypatch.setattr(cli, "STUDIES", dict.fromkeys(scripts, "x"))
    monkeypatch.setattr(cli, "_study_module", lambda n: None)
    monkeypatch.setattr(cli, "_study_command",
                        lambda n, d, quick: [sys.executable, "-c",
                                             f"import os; os.chdir({str(d)!r}); {scripts[n]}"])
    assert main(["reproduce", "all", "--jobs", "2", "--out", str(tmp_path)]) == 1
    cap = capsys.readouterr()
    assert "two: FAILED (exit 3)" in cap.err and "two broke here" in cap.err, cap.err
    assert (tmp_path / "one" / "reproduce.log").read_text().strip() == "one ran"
    index = (tmp_path / "README.md").read_text()
    assert "**one**: [report](one/report.md)" in index and "**two**: FAILED" in index
    assert "**three**: [report](three/report.md)" in index
    assert (tmp_path / "three" / "report.md").read_text() == "three"
    assert main(["reproduce", "all", "--jobs", "0", "--out", str(tmp_path)]) == 2
