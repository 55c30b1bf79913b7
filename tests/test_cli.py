"""The command line's promises about checkpoints and interruptions (issue "No silent wrong
answers"). Oracles: an uninterrupted ``diffmb identify`` on the same data (the resumed run must
give its estimate), the files we wrote ourselves, and the exit codes of the CLI's docstring.
``identify arm`` runs on the first 0.25 s of the shipped record (26 samples, one shooting
segment): the arm's fit compiles once per test process (~15 s), every later run takes ~1 s."""

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


def test_identify_interrupted_keeps_partial_results_and_resume_gives_the_same_estimate(
        tmp_path, monkeypatch, capsys):
    csv = _short_csv(tmp_path)
    # the oracle: one uninterrupted run
    assert _identify(csv, tmp_path / "ref") == 0
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
    assert _identify(csv, out) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--resume" in line and "fresh --out" in line and "3 iterations" in line, line
    assert (out / "checkpoint.npz").read_bytes() == before

    # --resume continues from iteration 3 and reaches the uninterrupted estimate
    assert _identify(csv, out, "--resume") == 0
    assert "resuming from iteration 3" in capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete" and res["fit"]["resumed_from"] == 3
    assert res["fit"]["iterations"] == ref["fit"]["iterations"]
    assert res["identified"].keys() == ref["identified"].keys()
    for n, v in ref["identified"].items():
        assert res["identified"][n]["estimate"] == pytest.approx(v["estimate"], rel=1e-8), n
        assert res["identified"][n]["std"] == pytest.approx(v["std"], rel=1e-6), n

    # resuming a finished fit returns its answer at once
    assert _identify(csv, tmp_path / "ref", "--resume") == 0
    again = json.loads((tmp_path / "ref" / "results.json").read_text())
    assert again["identified"] == ref["identified"]
    assert again["fit"]["resumed_from"] == ref["fit"]["iterations"]


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
    assert rc == 2 and line.startswith("diffmb: error: ")
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
    assert _identify(other, out, "--resume") == 2
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
