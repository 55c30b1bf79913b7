"""docs/guide.md runs as written: its ```python blocks, in order, in one namespace. Oracles
inside the guide itself (MuJoCo's qacc, Pinocchio's ABA, a central difference, the known
parameters that generated the identification data)."""

import pathlib
import re

import pytest

GUIDE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guide.md"


def _blocks():
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), flags=re.S | re.M)


def test_guide_has_blocks():
    blocks = _blocks()
    assert len(blocks) >= 10
    assert all(b.strip() for b in blocks)


@pytest.mark.slow  # 66 s, most of it compiling the guide's examples from a cold cache
def test_guide_runs_in_order():
    import mujoco  # noqa: F401 - the guide's oracles need both
    import pinocchio  # noqa: F401
    ns = {"__name__": "guide"}
    for i, code in enumerate(_blocks()):
        try:
            exec(compile(code, f"{GUIDE.name}[block {i + 1}]", "exec"), ns)
        except Exception as e:
            raise AssertionError(f"guide block {i + 1} failed:\n{code}") from e
