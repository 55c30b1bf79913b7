"""Creep: a contact that sticks under a tangential load slides on as MuJoCo's soft friction lets
it (the stiction law's ``creep``, set by :func:`diffmb.mjcf_forces` from the file).

Expected values: MuJoCo itself, run in the test on the same file. A sphere on a slide joint (x)
rides on a carrier on a slide joint (z) over a plane; after it settles, a motor pushes it along
x with a force well inside the friction cone, and the sphere's steady speed is measured in both
simulators. MuJoCo's speed there is R f / b of its friction rows (R its regulariser, b solref's
damping); nothing of diffmb computes it."""

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Box, Contacts, Plane

XML = """<mujoco><option timestep="{dt}" cone="{cone}" impratio="{impratio}"/>
<worldbody><geom type="plane" size="5 5 .1" friction="{mu} .005 .0001" solimp="{floor}"/>
<body pos="0 0 .05"><joint name="z" type="slide" axis="0 0 1"/>
<inertial pos="0 0 0" mass="{carrier}" diaginertia=".1 .1 .1"/>
<body><joint name="x" type="slide" axis="1 0 0"/>
<geom type="sphere" size=".05" mass="2" friction="{mu} .005 .0001" solref="{solref}"
 solimp="{solimp}"/>
</body></body></worldbody>
<actuator><motor joint="x" ctrllimited="true" ctrlrange="0 100"/></actuator></mujoco>"""

PUSH, T_PUSH, T_MEASURE = 5.0, 1.0, 0.5  # N, when the push starts, how long the speed is taken

CASES = {
    "elliptic": dict(cone="elliptic", impratio=1, mu=1, carrier=1, solref="0.02 1",
                     solimp="0.9 0.95 0.001 0.5 2"),
    # the pyramidal cone where its edges push as one elliptic row ((condim-1) impratio =
    # mu^2 (1 + mu^2)), so both rest at the same depth
    "pyramidal": dict(cone="pyramidal", impratio=0.15625, mu=0.5, carrier=1, solref="0.02 1",
                      solimp="0.9 0.95 0.001 0.5 2"),
    # mixed with the floor's defaults: T 0.015, d_min 0.45 over 1.5 mm
    "soft impedance": dict(cone="elliptic", impratio=3, mu=0.8, carrier=1, solref="0.01 0.5",
                           solimp="0 0.95 0.002 0.5 2"),
    "heavy carrier": dict(cone="elliptic", impratio=1, mu=1, carrier=10, solref="0.02 1",
                          solimp="0.5 0.99 0.003 0.3 3"),
}


def _write(tmp_path, case, dt, name="creep.xml", **kw):
    path = tmp_path / name
    # the floor's solimp: MuJoCo's default unless given
    path.write_text(XML.format(dt=dt, **{"floor": "0.9 0.95 0.001 0.5 2", **CASES[case], **kw}))
    return path


def _mujoco_speed(path):
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    steps = lambda t: int(round(t / m.opt.timestep))  # noqa: E731
    for _ in range(steps(T_PUSH)):
        mujoco.mj_step(m, d)
    d.ctrl[0] = PUSH
    for _ in range(steps(T_PUSH)):
        mujoco.mj_step(m, d)
    x0 = d.qpos[1]
    for _ in range(steps(T_MEASURE)):
        mujoco.mj_step(m, d)
    return (d.qpos[1] - x0) / T_MEASURE


def _diffmb_speed(path, dt, solver, ignore=()):
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path, ignore=ignore)
    push = lambda t, q, v, p: jnp.where(t >= T_PUSH, PUSH, 0.0)[None]  # noqa: E731
    t1 = 2 * T_PUSH + T_MEASURE
    tr = diffmb.simulate(model, np.zeros(2), np.zeros(2), t1=t1, dt=dt, forces=forces,
                         solver=solver, control=push, saveat=[2 * T_PUSH, t1])
    return float(tr.q[1, 1] - tr.q[0, 1]) / T_MEASURE


@pytest.mark.parametrize("case", list(CASES))
def test_a_sticking_contact_creeps_at_mujocos_speed(tmp_path, case):
    path = _write(tmp_path, case, 0.002)
    ref = _mujoco_speed(path)
    assert 2e-4 < ref < 3e-2  # it creeps, slowly: the push is inside the cone
    assert _diffmb_speed(path, 0.002, "implicit") == pytest.approx(ref, rel=0.01)


def test_the_explicit_reference_creeps_the_same(tmp_path):
    path = _write(tmp_path, "elliptic", 0.001)
    assert _diffmb_speed(path, 0.001, "rk4") == pytest.approx(_mujoco_speed(path), rel=0.01)


def test_ignore_creep_holds_the_contact(tmp_path):
    path = _write(tmp_path, "elliptic", 0.002)
    assert abs(_diffmb_speed(path, 0.002, "implicit", ignore=("creep",))) < \
        1e-3 * _mujoco_speed(path)


def test_creep_follows_solref_when_it_is_written(tmp_path):
    """MuJoCo's R/b grows as T: written through ``with_solref`` (as ``fit`` writes it), the
    creep of a file compiled with the new T (a flat impedance, so that the rest depth, which
    moves with T, does not change d)."""
    flat = "0.9 0.9 0.001 0.5 2"
    el = diffmb.mjcf_forces(_write(tmp_path, "elliptic", 0.002, solimp=flat, floor=flat))[-1]
    # the floor's solref is MuJoCo's default (0.02, 1): the pair mixes 0.02 and 0.04 to 0.03
    ref = diffmb.mjcf_forces(_write(tmp_path, "elliptic", 0.002, "other.xml", solimp=flat,
                                    floor=flat, solref="0.04 1"))[-1]
    moved = el.with_solref(timeconst=0.03)
    np.testing.assert_allclose(np.asarray(moved.creep), np.asarray(ref.creep), rtol=1e-9)
    assert float(ref.creep[0]) == pytest.approx(1.5 * float(el.creep[0]), rel=1e-9)


@pytest.mark.parametrize("creep, match", [(-1e-4, "creep"), (np.nan, "creep"),
                                          (np.inf, "creep")])
def test_creep_is_checked_where_it_enters(creep, match):
    with pytest.raises(ValueError, match=match):
        Contacts([Box("b", (0.1, 0.1, 0.1))], Plane(), stiffness=1e4, damping=10.0,
                 tangential_stiffness=1e4, tangential_damping=10.0, creep=creep)


def test_creep_shape_is_checked():
    with pytest.raises(TypeError, match="creep"):
        Contacts([Box("b", (0.1, 0.1, 0.1))], Plane(), stiffness=1e4, damping=10.0,
                 tangential_stiffness=1e4, tangential_damping=10.0, creep=[1e-4, 2e-4])
