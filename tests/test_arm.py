"""Study `arm` (UR5). Fast: the shipped CSV's format and size, and `diffmb identify arm` on
broken CSV files (exit code 2 and a message naming file, line and column; the oracle is the
broken line we wrote). Slow (`-m slow`): `reproduce --quick` meets the issue's criteria against
the known generating parameters, and `identify` on the shipped CSV recovers them."""

import json

import numpy as np
import pytest

from diffmb.cli import main
from diffmb.optim import read_joint_csv
from diffmb.studies import arm


def test_shipped_csv_format():
    assert arm.CSV.exists() and arm.CSV.stat().st_size < 300_000
    m = arm.load_arm()
    rec = read_joint_csv(arm.CSV, m)
    assert rec.q.shape == (401, 6) and rec.tau.shape == (401, 6) and rec.v is None
    np.testing.assert_allclose(np.diff(rec.t), 0.01, atol=1e-9)
    head = arm.CSV.read_text().splitlines()
    cols = [ln for ln in head if not ln.startswith("#")][0].split(",")
    assert cols == ["t"] + [f"q_{j}" for j in m.joint_names] + [f"tau_{j}" for j in m.joint_names]


def _broken(tmp_path, name, edit):
    lines = arm.CSV.read_text().splitlines()
    hdr = next(i for i, ln in enumerate(lines) if not ln.startswith("#"))
    edit(lines, hdr)
    p = tmp_path / name
    p.write_text("\n".join(lines[: hdr + 20]) + "\n")
    return p, hdr


@pytest.mark.parametrize("case", ["nan", "time", "channel", "no_tau", "text"])
def test_identify_rejects_broken_csv(tmp_path, capsys, case):
    def edit(lines, h):
        if case == "nan":
            c = lines[h + 5].split(",")
            c[3] = "nan"
            lines[h + 5] = ",".join(c)
        elif case == "time":
            c = lines[h + 7].split(",")
            c[0] = "0.0"
            lines[h + 7] = ",".join(c)
        elif case == "channel":
            lines[h] = lines[h].replace("q_elbow_joint", "q_knee_joint")
        elif case == "no_tau":
            for i in range(h, len(lines)):
                lines[i] = ",".join(lines[i].split(",")[:7])
        elif case == "text":
            c = lines[h + 3].split(",")
            c[2] = "abc"
            lines[h + 3] = ",".join(c)

    p, h = _broken(tmp_path, f"{case}.csv", edit)
    rc = main(["identify", "arm", "--data", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1, err  # bad input (2 is a usage error)
    assert str(p) in err
    expect = {
        "nan": f"line {h + 6}, column 4",
        "time": f"line {h + 8}, column 1",
        "channel": f"line {h + 1}, column 4: unknown channel 'q_knee_joint'",
        "no_tau": "tau_<joint>",
        "text": f"line {h + 4}, column 3",
    }[case]
    assert expect in err, err


def test_identify_unknown_study_and_missing_file(tmp_path, capsys):
    assert main(["identify", "nosuch", "--data", str(arm.CSV), "--out", str(tmp_path)]) == 2
    assert "unknown study" in capsys.readouterr().err
    assert main(["identify", "arm", "--data", str(tmp_path / "none.csv"),
                 "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_reproduce_quick_meets_criteria(tmp_path):
    assert main(["reproduce", "arm", "--out", str(tmp_path), "--quick"]) == 0
    r = json.loads((tmp_path / "results.json").read_text())
    ident = r["identified"]
    assert "body.shoulder_link.mass" not in ident  # com on the pan axis: unidentifiable
    assert "body.shoulder_link.mass" in r["unidentifiable"]
    masses = [n for n in ident if n.endswith(".mass")]
    damps = [n for n in ident if n.endswith(".damping")]
    assert len(masses) == 5 and len(damps) == 6
    for n in masses:
        v = ident[n]
        assert abs(v["estimate"] - v["true"]) <= 0.01 * v["true"], (n, v)
        assert 0 < v["std"] < 0.01 * v["true"]
    for n in damps:
        v = ident[n]
        assert abs(v["estimate"] - v["true"]) <= 0.05 * v["true"], (n, v)
    assert r["swing"]["terminal_error_rad"] < 1e-2
    for f in ("arm_fit.png", "arm_swing.png", "report.md"):
        assert (tmp_path / f).exists()


@pytest.mark.slow
def test_identify_shipped_csv(tmp_path):
    assert main(["identify", "arm", "--data", str(arm.CSV), "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "results.json").read_text())
    for n, v in r["identified"].items():
        tol = 0.01 if n.endswith(".mass") else 0.05
        assert abs(v["estimate"] - v["true"]) <= tol * v["true"], (n, v)
