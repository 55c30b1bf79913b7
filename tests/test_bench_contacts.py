"""The contacts benchmark's pieces that are not timings: initial states, the settle check, the
model handed to jaxsim. Nothing is simulated or timed here."""

from pathlib import Path

import mujoco
import numpy as np
from defusedxml import ElementTree as ET

import diffmb
import diffmb.bench as bench
from diffmb.bench import contacts


def test_registered_and_shipped_with_the_package():
    assert "contacts" in bench.BENCHMARKS
    pkg = Path(diffmb.__file__).resolve().parent
    assert contacts.QUADRUPED.is_file() and pkg in contacts.QUADRUPED.resolve().parents
    assert contacts.MODULE == "diffmb.bench.contacts"


def test_initial_states_are_seeded_and_inside_the_ranges():
    q, v = contacts.initial_states(16)
    q2, v2 = contacts.initial_states(16)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(v, v2)
    mj = mujoco.MjModel.from_xml_path(str(contacts.QUADRUPED))
    assert q.shape == (16, mj.nq) and v.shape == (16, mj.nv)
    assert np.all((q[:, 2] >= 0.35) & (q[:, 2] <= 0.45))
    np.testing.assert_allclose(np.linalg.norm(q[:, 3:7], axis=1), 1.0, atol=1e-12)
    lo, hi = mj.jnt_range[2::2].T  # knees
    assert np.all((q[:, 8::2] >= lo) & (q[:, 8::2] <= hi))


def test_settle_check():
    q, v = contacts.initial_states(3)
    q[:, 2] = 0.256
    v[:] = 0.0
    assert contacts.settle_stats(q, v)["settled"]
    q[1, 2] = 0.21  # sunk below the band
    s = contacts.settle_stats(q, v)
    assert not s["settled"] and s["n_settled"] == 2
    q[1, 2], v[2, 0] = 0.256, np.nan  # exploded
    s = contacts.settle_stats(q, v)
    assert not s["settled"] and s["n_finite"] == 2
    v[2, 0] = 0.1  # still moving
    assert not contacts.settle_stats(q, v)["settled"]


def test_sdf_for_jaxsim_has_the_quadrupeds_bodies_and_joints():
    """The SDF handed to jaxsim, read as plain XML (jaxsim itself is an optional peer)."""
    mj = mujoco.MjModel.from_xml_path(str(contacts.QUADRUPED))
    sdf = contacts.quadruped_sdf(np.full(8, 100.0), np.full(8, 1.0))
    model = ET.fromstring(sdf).find("model")
    links = model.findall("link")
    assert [lk.get("name") for lk in links] == [mj.body(b).name for b in range(1, mj.nbody)]
    assert [j.get("name") for j in model.findall("joint")] == [
        mj.joint(j).name for j in range(1, mj.njnt)]
    masses = [float(lk.find("inertial/mass").text) for lk in links]
    np.testing.assert_allclose(masses, mj.body_mass[1:], rtol=1e-10)
    # torso sphere + per leg: hip end of the thigh, knee (the shin's start), foot tip
    assert sum(len(lk.findall("collision")) for lk in links) == 1 + 4 * 3
