"""CSV reader tests: the error messages name the file, line and column."""

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
        ("t,a\n0,1\n2,2\n1,3\n", r"line 4, column 1 \('t'\): time not strictly increasing "
                                  r"\(2\.0 then 1\.0\)$"),
        ("t,a\n0,1\n1,nan\n", r"line 3, column 2 \('a'\).*not finite"),
        ("t,a\n0,1\n1,inf\n", r"line 3, column 2 \('a'\).*not finite"),
        ("t,a\n0,1\n1,abc\n", r"line 3, column 2 \('a'\).*non-numeric value 'abc'"),
        ("t,a,b\n0,1,2\n1,,3\n", r"line 3, column 2 \('a'\).*missing value"),
        ("t,a,b\n0,1,2\n1,3\n", r"line 3: expected 3 values, found 2"),
        ("time,a\n0,1\n", r"line 1, column 1: first column must be 't'"),
        ("t;a\n0;1\n", r"line 1, column 1: first column must be 't', got 't;a' \(the columns "
                        r"seem separated by ';': use commas\)"),
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


def test_byte_order_mark_is_skipped(tmp_path):
    """A UTF-8 byte-order mark (as spreadsheet programs write) is not part of the first name."""
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbft,a\r\n0,1\r\n0.5,2\r\n")
    t, ch = read_csv(p)
    np.testing.assert_array_equal(t, [0.0, 0.5])
    assert list(ch) == ["a"]


@pytest.mark.parametrize("data, pattern", [
    (bytes(range(256)), r"line 2: not a UTF-8 text file \(byte 0x80 at offset 128\)"),
    (b"t,a\n0,1\x00\n1,2\n", r"line 2, column 2 \('a'\): non-numeric value '1\\x00'"),
    (b"\x1f\x8b\x08\x00\xff\xfe\n", r"line 1: not a UTF-8 text file \(byte 0x8b at offset 1\)"),
])
def test_binary_file_is_refused_naming_the_file(tmp_path, data, pattern):
    p = tmp_path / "binary.csv"
    p.write_bytes(data)
    with pytest.raises(ValueError, match=pattern) as exc:
        read_csv(p)
    assert str(exc.value).startswith(f"{p}, line ")


@pytest.mark.parametrize("cell", ["1e300", "-2e13", "1e308"])
def test_absurd_values_are_refused_naming_line_and_column(tmp_path, cell):
    p = _write(tmp_path, f"t,a,b\n0,1,2\n0.1,3,{cell}\n", name="big.csv")
    with pytest.raises(ValueError, match=rf"big\.csv, line 3, column 3 \('b'\): value {cell} "
                                         r"is beyond ±1e\+12"):
        read_csv(p)
    _, ch = read_csv(p, max_abs=float("inf"))  # the caller may lift the bound
    assert ch["b"][1] == float(cell)
    read_csv(_write(tmp_path, "t,a\n0,1e12\n1,-1e12\n", name="edge.csv"))  # the bound itself


def test_constant_channel_named_in_varying_is_refused(tmp_path):
    p = _write(tmp_path, "# note\nt,u,y\n0,1,0.5\n0.1,2,0.5\n0.2,3,0.5\n", name="flat.csv")
    with pytest.raises(ValueError, match=r"flat\.csv, line 2, column 3 \('y'\): the channel is "
                                         r"constant \(0\.5 in all 3 rows\)"):
        read_csv(p, varying=["y"])
    t, ch = read_csv(p, varying=["u", "absent"])  # a varying column, and one the file lacks
    assert list(ch) == ["u", "y"]
