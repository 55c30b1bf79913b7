"""The benchmarks ship inside the package and their runner fails clearly; nothing is timed here."""

import argparse
import ast
import importlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import diffmb
import diffmb.bench as bench
from diffmb import cli

PACKAGE = Path(diffmb.__file__).resolve().parent
VALID = "valid names: core, sim, variational, contacts, sysid, rover, robots"


def test_benchmarks_are_modules_of_the_installed_package():
    assert Path(bench.__file__).resolve().parent == PACKAGE / "bench"
    assert list(bench.BENCHMARKS) == ["core", "sim", "variational", "contacts", "sysid",
                                     "rover", "robots"]
    for name in bench.BENCHMARKS:
        spec = importlib.util.find_spec(f"diffmb.bench.{name}")
        assert spec is not None and Path(spec.origin).resolve().parent == PACKAGE / "bench"
        mod = importlib.import_module(f"diffmb.bench.{name}")
        assert callable(mod.run)
        assert "experiments" not in Path(spec.origin).read_text()  # no path outside the package
    sim = importlib.import_module("diffmb.bench.sim")
    assert sim.CHAIN.is_file() and PACKAGE in sim.CHAIN.resolve().parents
    assert sim.MODULE == "diffmb.bench.sim"  # subprocesses re-launch it with `python -m`


def test_runner_rejects_unknown_names_before_running_anything(monkeypatch, tmp_path):
    def no_run(name):
        raise AssertionError(f"benchmark {name!r} started")

    monkeypatch.setattr(bench, "load", no_run)
    with pytest.raises(bench.UnknownBenchmark, match=f"'nope'; {VALID}"):
        bench.run_all(tmp_path, quick=True, only="core,nope")
    with pytest.raises(ValueError, match=VALID):
        bench.select(",")
    assert bench.select("sim, core,sim") == ["sim", "core"]


def test_cli_bench_unknown_name_is_one_line_and_code_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "run_all", lambda *a, **k: pytest.fail("benchmarks ran"))
    out = tmp_path / "out"
    assert cli.main(["bench", "--quick", "--only", "core,warp", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"diffmb: error: unknown benchmark 'warp'; {VALID}\n"
    assert not out.exists()


def test_cli_out_under_a_file_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "run_all", lambda *a, **k: pytest.fail("benchmarks ran"))
    f = tmp_path / "results.txt"
    f.write_text("not a directory")
    assert cli.main(["bench", "--only", "core", "--out", str(f / "bench")]) == 2
    err = capsys.readouterr().err
    assert "is under" in err and "a file, not a directory" in err and "Traceback" not in err
    assert cli.main(["reproduce", "arm", "--quick", "--out", str(f)]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_records_with_a_missing_peer_are_null_in_json(tmp_path):
    assert bench.case(2.0, "s", "peer", 4.0)["ratio"] == 0.5
    for missing in (None, float("nan")):
        r = bench.case(2.0, "s", "not installed", missing)
        assert r["peer_value"] is None and r["ratio"] is None
    bench.write_json(tmp_path / "bench.json", {"a": bench.case(1.0, "s", "p", float("nan")),
                                               "b": {"x": math.inf}})
    data = json.loads((tmp_path / "bench.json").read_text())  # standard JSON: no NaN
    assert data == {"a": {"value": 1.0, "unit": "s", "peer": "p", "peer_value": None,
                          "ratio": None}, "b": {"x": None}}


def test_ctrl_c_gives_code_130_without_traceback(monkeypatch, tmp_path, capsys):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_all", interrupted)
    assert cli.main(["bench", "--only", "core", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


def test_sigterm_gives_code_143_without_traceback(tmp_path):
    code = (
        "import os, signal, time, sys\n"
        "import diffmb.bench, diffmb.cli\n"
        "def run_all(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(60)\n"
        "diffmb.bench.run_all = run_all\n"
        "sys.exit(diffmb.cli.main())\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", code, "bench", "--only", "sim", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 143, p.stderr
    assert "terminated (SIGTERM)" in p.stderr and "Traceback" not in p.stderr


def _subcommands():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_bench_help_names_every_benchmark(capsys):
    assert cli.main(["bench", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert f"subset of: {', '.join(bench.BENCHMARKS)} (default: all)" in text
    for name in bench.BENCHMARKS:
        assert name in text


def test_help_of_every_subcommand_matches_the_docs(capsys):
    """Every option of every subcommand's --help is in the command-line section of docs/api.md
    (and each subcommand is listed there), and nothing documented there is missing from it."""
    api = (PACKAGE.parent / "docs" / "api.md").read_text()
    section = api.split("## 6. Command line", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for line in section.splitlines():
        documented |= set(re.findall(r"(--[a-z][a-z-]*)", line))
    offered = set()
    for name, p in _subcommands().items():
        assert f"diffmb {name}" in section, name
        assert cli.main([name, "--help"]) == 0
        text = capsys.readouterr().out
        opts = {o for a in p._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
        for o in opts:
            assert o in text, (name, o)
            assert o in documented, f"diffmb {name} {o} is not in docs/api.md"
        offered |= opts
    assert documented <= offered, documented - offered


def test_the_bench_package_does_not_import_the_command_line():
    """The command line imports the benchmarks, never the other way (no import circle)."""
    for path in (PACKAGE / "bench").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mods = [("." * node.level) + (node.module or "")]
                mods += [m + "." + a.name for m in mods for a in node.names]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                continue
            for m in mods:
                assert not re.fullmatch(r"(diffmb|\.\.)\.?cli(\..*)?", m), (path.name, m)


def test_python_m_diffmb_bench_refuses_unknown_names_with_code_2(tmp_path):
    p = subprocess.run([sys.executable, "-m", "diffmb.bench", "--only", "warp", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert p.returncode == 2, p.stderr
    assert f"unknown benchmark 'warp'; {VALID}" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_rover_bench_and_study_time_the_same_traverse_the_same_way(monkeypatch, tmp_path):
    """`diffmb bench --only rover` reports what the study's speed() measures with its defaults
    (the HORIZON s traverse, best of REALTIME_REPS runs), the compile time beside it; the
    one-core child compiles cold (no persistent cache), as the bench runner does."""
    import types

    from diffmb.bench import rover as bench_rover
    from diffmb.studies import rover as study

    calls = []

    def fake_speed(model, forces, horizon=study.HORIZON, reps=study.REALTIME_REPS, **kw):
        calls.append((horizon, reps))
        return {"realtime_factor": 123.0, "wall_s": study.HORIZON / 123.0, "compile_s": 21.0,
                "realtime_walls_s": [0.05, study.HORIZON / 123.0], "realtime_cores": 1,
                "realtime_reps": reps, "realtime_horizon_s": horizon, "compile_cold": True,
                "batch_rovers_per_s": 5.0, "batch_wall_s": 1.0, "batch_all_ok": True,
                "horizon_s": horizon, "batch_horizon_s": 0.25}

    monkeypatch.setattr(study, "speed", fake_speed)
    res = bench_rover.run(tmp_path, quick=True)
    assert calls == [(study.HORIZON, study.REALTIME_REPS)]
    rt = res["realtime_factor"]
    assert rt["value"] == 123.0 and rt["horizon_s"] == study.HORIZON
    assert rt["reps"] == study.REALTIME_REPS and rt["compile_s"] == 21.0
    assert res["compile_s"]["value"] == 21.0 and res["compile_s"]["cold"] is True

    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"], seen["env"] = cmd, kw["env"]
        return types.SimpleNamespace(returncode=0, stdout='{"realtime_factor": 1.0}\n',
                                     stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert study._realtime_one_core(5.0, 5) == {"realtime_factor": 1.0}
    assert "_realtime(5.0, 5)" in seen["cmd"][-1]
    assert seen["env"]["DIFFMB_COMPILATION_CACHE"] == "0"
    assert seen["env"]["JAX_ENABLE_COMPILATION_CACHE"] == "false"


def test_robots_bench_drops_are_the_stand_raised_and_turned_about_the_vertical():
    """bench robots' starts: a drop is the standing pose 0.1 m higher, turned about the world
    vertical only (the body's tilt unchanged: scipy's rotations), with unit quaternions."""
    import numpy as np
    from scipy.spatial.transform import Rotation

    from diffmb.bench import robots

    path = robots.robot_files().get("ant")
    assert path is not None, "gymnasium's Ant (the test extra) is needed"
    qs, vs, _ = robots.initial_states(path, "stand", 4)
    qd, vd, _ = robots.initial_states(path, "drop", 4)
    assert np.all(vs == 0) and np.any(vd[:, :6] != 0) and np.all(vd[:, 6:] == 0)
    np.testing.assert_allclose(qd[:, 2], qs[:, 2] + robots.DROP_M)
    np.testing.assert_allclose(qd[:, 7:], qs[:, 7:])
    np.testing.assert_allclose(np.linalg.norm(qd[:, 3:7], axis=1), 1.0, rtol=1e-12)
    tilt = lambda q: Rotation.from_quat(q[:, [4, 5, 6, 3]]).apply([0, 0, 1])  # noqa: E731
    np.testing.assert_allclose(tilt(qd), tilt(qs), atol=1e-12)
    yaw = Rotation.from_quat(qd[:, [4, 5, 6, 3]]).as_euler("ZYX")[:, 0]
    assert np.ptp(yaw) > 0.1  # the members are turned differently
