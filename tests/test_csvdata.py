"""CSV reader tests: the error messages name the file, line and column (DESIGN.md)."""

import numpy as np
import pytest

from diffmb.io.csvdata import read_csv, write_csv


def _write(tmp_path, text, name="d.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reads_channels_and_round_trips(tmp_path):
    p = _write(tmp_path, "# comment\nt,a,b\n0,1,2\n0.5,3,4e-3\n1.0,-5,6\n")
    t, ch = read_csv(p)
    np.testing.assert_array_equal(t, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(ch["b"], [2.0, 4e-3, 6.0])
    assert list(ch) == ["a", "b"]
    t2, ch2 = read_csv(p, channels=["b"])
    assert list(ch2) == ["b"]
    q = tmp_path / "w.csv"
    write_csv(q, t, ch)
    t3, ch3 = read_csv(q)
    np.testing.assert_array_equal(t3, t)
    np.testing.assert_array_equal(ch3["a"], ch["a"])


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("t,a\n0,1\n1,2\n1,3\n", r"line 4, column 1 \('t'\).*not strictly increasing"),
        ("t,a\n0,1\n2,2\n1,3\n", r"line 4, column 1 \('t'\).*not strictly increasing"),
        ("t,a\n0,1\n1,nan\n", r"line 3, column 2 \('a'\).*not finite"),
        ("t,a\n0,1\n1,inf\n", r"line 3, column 2 \('a'\).*not finite"),
        ("t,a\n0,1\n1,abc\n", r"line 3, column 2 \('a'\).*non-numeric value 'abc'"),
        ("t,a,b\n0,1,2\n1,,3\n", r"line 3, column 2 \('a'\).*missing value"),
        ("t,a,b\n0,1,2\n1,3\n", r"line 3: expected 3 values, found 2"),
        ("time,a\n0,1\n", r"line 1, column 1: first column must be 't'"),
        ("t,a,a\n0,1,2\n", r"line 1, column 3: duplicate column name 'a'"),
        ("t,a\n", r"no data rows"),
        ("", r"no header row"),
    ],
)
def test_errors_name_file_line_column(tmp_path, text, pattern):
    p = _write(tmp_path, text, name="bad_file.csv")
    with pytest.raises(ValueError, match=pattern) as exc:
        read_csv(p)
    assert "bad_file.csv" in str(exc.value)


def test_unknown_channel(tmp_path):
    p = _write(tmp_path, "t,a\n0,1\n1,2\n", name="chan.csv")
    with pytest.raises(ValueError, match=r"chan\.csv: unknown channel 'torque'.*\['a'\]"):
        read_csv(p, channels=["torque"])


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="nope.csv"):
        read_csv(tmp_path / "nope.csv")


def test_shipped_flexible_arm_csv():
    from importlib.resources import files

    path = files("diffmb") / "assets" / "flexible_arm_tip.csv"
    assert path.stat().st_size < 300_000
    t, ch = read_csv(path, channels=["torque", "tip_deflection", "hub_angle"])
    assert t[0] == 0.0 and np.all(np.diff(t) > 0)
    assert set(ch) == {"torque", "tip_deflection", "hub_angle"}
