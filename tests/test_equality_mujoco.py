"""Connect and weld equalities against MuJoCo's soft equality constraints.

With contacts off and no limit violated, MuJoCo's constraint rows are the equality rows alone:
its cost is quadratic and its Newton solver (tolerance 1e-12) returns the exact minimiser, so
``diffmb.forward`` must give MuJoCo's ``qacc`` after ``mj_forward`` to round-off, violated
constraints included: a closed four-bar linkage (connect, several solref/solimp forms), a free
body welded to the world and a hinge chain welded to it with ``torquescale``, two free bodies
welded with a ``relpose``, the site forms of both, and Menagerie's Cassie (four connects
closing its leg linkages). Joint and tendon limits violated at the same time are solved with
the equality rows (:func:`solve_together`), as MuJoCo solves all its rows at once.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.forces import BodyWrench, JointDamping, JointSpring
from diffmb.forces.equality import Equalities, solve_together
from diffmb.io.mjcf import actuators_from_mjcf, joint_limits_from_mjcf, tendons_from_mjcf
from diffmb.io.mjcf_equality import (
    connect_weld_ids,
    equalities_from_mjcf,
    unsupported_equalities,
)

DATA = Path(__file__).parent / "data" / "equality"

_FOURBAR = """
<mujoco model="fourbar">
  <compiler angle="radian"/>
  <option timestep="0.001" integrator="RK4" tolerance="1e-12">
    <flag contact="disable"/>
  </option>
  <default><geom type="capsule" size="0.02"/></default>
  <worldbody>
    <body name="crank">
      <joint name="j1" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom fromto="0 0 0 0 0 0.3" mass="1"/>
      <body name="coupler" pos="0 0 0.3">
        <joint name="j2" type="hinge" axis="0 1 0"/>
        <geom fromto="0 0 0 0.5 0 0.1" mass="0.6"/>
      </body>
    </body>
    <body name="rocker" pos="0.45 0 0">
      <joint name="j3" type="hinge" axis="0 1 0" armature="0.01"/>
      <geom fromto="0 0 0 0.05 0 0.4" mass="0.8"/>
    </body>
  </worldbody>
  <equality>
    <connect name="loop" body1="coupler" body2="rocker" anchor="0.5 0 0.1" {attrs}/>
  </equality>
</mujoco>
"""

_SOFT = {  # connect attributes: defaults, the power arcs, the direct form, refsafe (T < 2 dt)
    "default": "",
    "arcs": 'solref="0.01 0.5" solimp="0.8 0.99 0.05 0.3 3"',
    "direct": 'solref="-20000 -40" solimp="0.85 0.95 0.01 0.5 2"',
    "refsafe": 'solref="0.0005 1.2" solimp="0.9 0.95 0 0.5 2"',
}

_WELDS = """
<mujoco model="welds">
  <option tolerance="1e-12"><flag contact="disable"/></option>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="free" pos="0.2 0.1 1" euler="10 20 30">
      <freejoint/>
      <geom type="box" size="0.1 0.2 0.05" mass="1.3"/>
    </body>
    <body name="l1" pos="0 0.6 1">
      <joint name="h1" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.7"/>
      <body name="l2" pos="0.3 0 0">
        <joint name="h2" axis="0 0 1"/>
        <joint name="s2" type="slide" axis="1 0 0"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0.05" size="0.03" mass="0.4"/>
      </body>
    </body>
  </worldbody>
  <equality>
    <weld name="hold" body1="free" solref="0.03 0.8" solimp="0.8 0.97 0.2 0.4 3"/>
    <weld name="arm" body1="l2" anchor="0.25 0 0.05" torquescale="0.3"/>
  </equality>
</mujoco>
"""

_PAIR = """
<mujoco model="pair">
  <option tolerance="1e-12" gravity="0.3 -0.2 -9.81"><flag contact="disable"/></option>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="a" pos="0 0 1"><freejoint/>
      <geom type="box" size="0.1 0.2 0.05" mass="1"/>
      <site name="sa" pos="0.1 0 0.02" quat="0.9 0.1 0.2 0.3"/></body>
    <body name="b" pos="0.5 0 1" euler="0.3 0.2 0.1"><freejoint/>
      <geom type="box" size="0.1 0.05 0.2" mass="2"/>
      <site name="sb" pos="0 0.1 0" quat="0.8 0.3 -0.2 0.1"/></body>
    <body name="c" pos="0 -0.5 1">
      <joint name="hc" axis="1 0 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.5"/>
      <site name="sc" pos="0 0 -0.3"/></body>
  </worldbody>
  <equality>
    <weld name="relpose" body1="a" body2="b" relpose="0.1 0.2 0.3 0.9 0.1 0.2 0.1"
          torquescale="2" solref="0.03 0.8" solimp="0.8 0.97 0.2 0.4 3"/>
    <weld name="sites" site1="sa" site2="sb" torquescale="0.5"/>
    <connect name="site_connect" site1="sc" site2="sa" solimp="0.7 0.99 0.3 0.5 1"/>
  </equality>
</mujoco>
"""


def _write(tmp_path, name, text):
    f = tmp_path / f"{name}.xml"
    f.write_text(text)
    return f


def _states(mj, rng, n, scale, vscale=1.0):
    """Random states about qpos0 (quaternions renormalised): the equalities are violated."""
    out = []
    d = mujoco.MjData(mj)
    for _ in range(n):
        d.qpos[:] = mj.qpos0 + scale * rng.normal(size=mj.nq)
        mujoco.mj_normalizeQuat(mj, d.qpos)
        out.append((d.qpos.copy(), vscale * rng.normal(size=mj.nv)))
    return out


def _pushing_limit_rows(mj, states):
    """MuJoCo's count of limit rows with a positive force in each state (q, v)."""
    d = mujoco.MjData(mj)
    out = []
    for q, v in states:
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(mj, d)
        out.append(int(np.sum(d.efc_force[d.ne : d.nefc] > 0)))
    return out


def _worst_qacc(path, forces, states, *, ctrl=None, mj=None, qfrc=None, xfrc=None):
    """max over states of |qacc - MuJoCo's| / max(1, |MuJoCo's|), and MuJoCo's equality
    violation norms."""
    model = diffmb.load_mjcf(path)
    mj = mujoco.MjModel.from_xml_path(str(path)) if mj is None else mj
    d = mujoco.MjData(mj)
    acc = jax.jit(lambda q, v, u: diffmb.forward(model, q, v, forces=forces, ctrl=u))
    worst, viol = 0.0, []
    for k, (q, v) in enumerate(states):
        d.qpos[:], d.qvel[:] = q, v
        u = None
        if ctrl is not None:
            d.ctrl[:] = u = ctrl[k]
        if qfrc is not None:
            d.qfrc_applied[:] = u = qfrc[k]
        if xfrc is not None:
            d.xfrc_applied[:] = xfrc
        mujoco.mj_forward(mj, d)
        assert d.ncon == 0
        viol.append(np.linalg.norm(d.efc_pos[: d.ne]))
        a = np.asarray(acc(jnp.asarray(q), jnp.asarray(v), None if u is None else jnp.asarray(u)))
        worst = max(worst, float(np.abs(a - d.qacc).max() / max(1.0, np.abs(d.qacc).max())))
    return worst, np.array(viol)


@pytest.mark.parametrize("soft", sorted(_SOFT))
def test_fourbar_connect_accelerations_like_mujoco(tmp_path, soft):
    """The closed four-bar, violated by up to ~0.2 m, at rest and moving, with a generalized
    force (qfrc_applied) as load: MuJoCo's qacc to 1e-9 relative."""
    path = _write(tmp_path, "fourbar", _FOURBAR.format(attrs=_SOFT[soft]))
    mj = mujoco.MjModel.from_xml_path(str(path))
    rng = np.random.default_rng(0)
    states = _states(mj, rng, 8, 0.3, 2.0) + [(np.zeros(3), np.zeros(3))]
    qfrc = 0.5 * rng.normal(size=(len(states), 3))
    forces = (JointDamping(), equalities_from_mjcf(path))
    worst, viol = _worst_qacc(path, forces, states, qfrc=qfrc, mj=mj)
    assert worst < 1e-9, worst
    assert viol.max() > 0.05  # far outside the impedance's transition for most solimp


@pytest.mark.slow
def test_welds_to_the_world_like_mujoco(tmp_path):
    """A free body welded to the world (its own solref/solimp, the norm of a 6-row violation
    on the power arcs) and a hinge–hinge–slide chain welded to it with torquescale 0.3:
    MuJoCo's qacc to 1e-9, small and large violations."""
    path = _write(tmp_path, "welds", _WELDS)
    mj = mujoco.MjModel.from_xml_path(str(path))
    eq = equalities_from_mjcf(path)
    assert eq.kind == ("weld", "weld") and eq.body2 == (-1, -1)
    rng = np.random.default_rng(1)
    states = _states(mj, rng, 4, 0.02, 0.3) + _states(mj, rng, 4, 0.5, 2.0)
    worst, viol = _worst_qacc(path, (JointDamping(), eq), states, mj=mj)
    assert worst < 1e-9, worst
    assert viol.min() < 0.2 < viol.max()


@pytest.mark.slow
def test_relpose_and_site_equalities_like_mujoco(tmp_path):
    """Two free bodies welded with a relpose (torquescale 2), the same pair welded through two
    rotated sites, and a site connect from a pendulum's tip to one of them, under a body
    wrench: MuJoCo's qacc to 1e-9."""
    path = _write(tmp_path, "pair", _PAIR)
    mj = mujoco.MjModel.from_xml_path(str(path))
    assert list(mj.eq_objtype) == [mujoco.mjtObj.mjOBJ_BODY] + [mujoco.mjtObj.mjOBJ_SITE] * 2
    model = diffmb.load_mjcf(path)
    eq = equalities_from_mjcf(path, model)
    assert eq.kind == ("weld", "weld", "connect") and eq.names == tuple(
        mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_EQUALITY, i) for i in range(3))
    wrench = np.zeros((mj.nbody, 6))
    wrench[mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, "b")] = [1.0, -2.0, 3.0, 0.1, 0.2, -0.3]
    forces = (BodyWrench("b", wrench[2]), eq)
    rng = np.random.default_rng(2)
    states = _states(mj, rng, 8, 0.3, 1.5)
    worst, _ = _worst_qacc(path, forces, states, mj=mj, xfrc=wrench)
    assert worst < 1e-9, worst


def test_constraint_rows_are_mujocos(tmp_path):
    """Rows, Jacobian, reference acceleration (with MuJoCo's J̇v term) and regulariser equal
    MuJoCo's efc_pos, efc_J, efc_aref and efc_R (a weld's orientation rows up to the sign of
    its error quaternion, which MuJoCo takes from the bodies' quaternions)."""
    path = _write(tmp_path, "pair", _PAIR)
    mj = mujoco.MjModel.from_xml_path(str(path))
    mj.opt.jacobian = mujoco.mjtJacobian.mjJAC_DENSE
    model = diffmb.load_mjcf(path)
    eq = equalities_from_mjcf(path, model)
    d = mujoco.MjData(mj)
    rows = jax.jit(lambda q, v: eq.constraint(model, q, v))
    for q, v in _states(mj, np.random.default_rng(3), 3, 0.3, 2.0):
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(mj, d)
        r, J, jdv = (np.asarray(x) for x in rows(jnp.asarray(q), jnp.asarray(v)))
        aref, R = (np.asarray(x) for x in eq.reference(r, J @ v, jdv))
        sign = np.sign(r * d.efc_pos[: d.ne])  # +-1 per row, one sign per weld orientation
        sign[sign == 0] = 1.0
        np.testing.assert_allclose(sign * r, d.efc_pos[: d.ne], rtol=0, atol=1e-12)
        efc_J = d.efc_J[: d.ne * mj.nv].reshape(d.ne, mj.nv)
        np.testing.assert_allclose(sign[:, None] * J, efc_J, rtol=0, atol=1e-12)
        np.testing.assert_allclose(sign * aref, d.efc_aref[: d.ne], rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(R, d.efc_R[: d.ne], rtol=1e-12, atol=0)


@pytest.mark.slow
def test_cassie_closed_legs_like_mujoco():
    """Menagerie's Cassie: four connects close the achilles and plantar rods of its legs.
    About the home keyframe, moving, with motor controls, springs, damping and its joint
    limits: inside the ranges, and perturbed so that a limit pushes while the loops are
    open (the limit rows solved with the equality rows): MuJoCo's qacc (contacts off) to 1e-9
    relative."""
    path = DATA / "cassie.xml"
    mj = mujoco.MjModel.from_xml_path(str(path))
    mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    mj.opt.tolerance = 1e-12
    forces = solve_together((JointDamping(), JointSpring(), actuators_from_mjcf(path),
                             equalities_from_mjcf(path), joint_limits_from_mjcf(path)))
    assert [type(f).__name__ for f in forces] == ["JointDamping", "JointSpring", "Actuators",
                                                  "Equalities"]
    rng = np.random.default_rng(4)
    states = []
    for scale in (0.02, 0.02, 0.4, 0.4, 0.4):
        q = np.array(mj.key_qpos[0])
        q[7:] += scale * rng.normal(size=mj.nq - 7)
        q[3:7] += 0.1 * rng.normal(size=4)
        mujoco.mj_normalizeQuat(mj, q)  # the free and ball joints' quaternions
        states.append((q, rng.normal(size=mj.nv)))
    ctrl = rng.uniform(-0.5, 0.5, size=(len(states), mj.nu))
    worst, viol = _worst_qacc(path, forces, states, ctrl=ctrl, mj=mj)
    assert worst < 1e-9, worst
    assert viol.min() > 1e-3  # the perturbation opened the loops
    pushing = _pushing_limit_rows(mj, states)
    assert pushing[:2] == [0, 0] and min(pushing[2:]) >= 1, pushing


_LIMITED = _FOURBAR.format(attrs="").replace(
    '<joint name="j1" type="hinge" axis="0 1 0" damping="0.05"/>',
    '<joint name="j1" type="hinge" axis="0 1 0" damping="0.05" range="-0.2 0.3" limited="true"/>',
).replace(
    '<joint name="j3" type="hinge" axis="0 1 0" armature="0.01"/>',
    '<joint name="j3" type="hinge" axis="0 1 0" armature="0.01" range="-0.25 0.2" '
    'limited="true" solreflimit="0.01 1.5"/>',
).replace("</equality>", """</equality>
  <tendon>
    <fixed name="t" limited="true" range="-0.15 0.1" solreflimit="0.03 0.9" damping="0.02">
      <joint joint="j1" coef="1"/><joint joint="j2" coef="0.5"/>
    </fixed>
  </tendon>""")


@pytest.mark.slow
def test_limits_solved_with_equalities_like_mujoco(tmp_path):
    """The four-bar with two joint limits and a fixed-tendon limit on its loop: violated
    limits and the open loop solved together (joint limits moved into the Equalities element,
    the tendon's limit rows too while its damping stays in a FixedTendons copy): MuJoCo's
    qacc to 1e-9 in every state, some with two limits pushing at once; solved apart, each
    blind to the other, they miss it by far."""
    path = _write(tmp_path, "limited", _LIMITED)
    mj = mujoco.MjModel.from_xml_path(str(path))
    apart = (JointDamping(), equalities_from_mjcf(path), joint_limits_from_mjcf(path),
             tendons_from_mjcf(path))
    forces = solve_together(apart)
    assert [type(f).__name__ for f in forces] == ["JointDamping", "Equalities", "FixedTendons"]
    assert not forces[2].needs_load and len(forces[1].limits) == 2
    states = _states(mj, np.random.default_rng(7), 16, 0.7, 1.0)
    worst, _ = _worst_qacc(path, forces, states, mj=mj)
    assert worst < 1e-9, worst
    pushing = _pushing_limit_rows(mj, states)
    assert sum(p >= 1 for p in pushing) >= 6 and max(pushing) >= 2, pushing
    worst_apart, _ = _worst_qacc(path, apart, states, mj=mj)
    assert worst_apart > 1e-2


@pytest.mark.slow
def test_fourbar_stays_closed_like_mujoco(tmp_path):
    """Released at rest, the four-bar swings under gravity for 1 s: RK4 at MuJoCo's 1 ms step
    against MuJoCo's own RK4 on the same file, joint angles to 1e-7 rad and the loop's gap
    (MuJoCo's violation, up to ~3 mm) to 1e-8 m, while the crank turns by more than
    0.5 rad."""
    path = _write(tmp_path, "fourbar", _FOURBAR.format(attrs=""))
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    ref_q, ref_gap = [], []
    for _ in range(1000):
        mujoco.mj_step(mj, d)
        mujoco.mj_forward(mj, d)
        ref_q.append(d.qpos.copy())
        ref_gap.append(np.linalg.norm(d.efc_pos[:3]))
    ref_q, ref_gap = np.array(ref_q), np.array(ref_gap)
    model = diffmb.load_mjcf(path)
    eq = equalities_from_mjcf(path, model)
    ts = np.arange(1, 1001) * 1e-3
    tr = diffmb.simulate(model, jnp.zeros(3), jnp.zeros(3), t1=1.0, dt=1e-3, solver="rk4",
                         saveat=ts, forces=(JointDamping(), eq))
    q = np.asarray(tr.q)
    gap = np.asarray(jax.vmap(lambda x: jnp.linalg.norm(eq.constraint(model, x, jnp.zeros(3))[0]))(
        tr.q))
    assert np.ptp(ref_q[:, 0]) > 0.5
    assert 1e-4 < ref_gap.max() < 5e-3  # MuJoCo's soft loop sags, and stays closed
    np.testing.assert_allclose(q, ref_q, rtol=0, atol=1e-7)
    np.testing.assert_allclose(gap, ref_gap, rtol=0, atol=1e-8)


_SMALL = """
<mujoco model="small">
  <worldbody>
    <body name="free" pos="0.2 0.1 1" euler="10 20 30"><freejoint/>
      <geom type="box" size="0.1 0.2 0.05" mass="1.3"/></body>
    <body name="arm" pos="0 0.6 1">
      <joint name="h" axis="0 1 0" damping="0.2" limited="true" range="-0.02 0.05"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.7"/></body>
  </worldbody>
  <equality>
    <weld body1="free" body2="arm" solref="0.03 0.8" solimp="0.8 0.97 0.2 0.4 3"
          torquescale="0.5"/>
  </equality>
</mujoco>
"""


@pytest.mark.slow
def test_equality_gradients_and_batches(tmp_path):
    """jax.grad of the accelerations through a violated weld (the impedance on its power arcs,
    the norm of the violation, the free body's quaternion) and a violated joint limit solved
    with it, against central differences, and vmap over states equal to one state at a time;
    a finite gradient at zero violation."""
    path = _write(tmp_path, "small", _SMALL)
    mj = mujoco.MjModel.from_xml_path(str(path))
    model = diffmb.load_mjcf(path)
    forces = solve_together((JointDamping(), equalities_from_mjcf(path),
                             joint_limits_from_mjcf(path)))
    states = _states(mj, np.random.default_rng(5), 4, 0.1, 0.5)
    states[0][0][7] = 0.12  # the arm's hinge beyond its upper limit, pushed further
    states[0][1][6] = 0.5
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = states[0]
    mujoco.mj_forward(mj, d)
    assert d.nefc == d.ne + 1 and d.efc_force[d.ne] > 0  # MuJoCo's limit pushes there
    w = np.random.default_rng(6).normal(size=mj.nv)
    f = jax.jit(lambda q, v: jnp.dot(diffmb.forward(model, q, v, forces=forces), w))
    g = jax.jit(jax.grad(f, argnums=(0, 1)))
    h = 1e-6
    for q, v in states[:2]:
        q, v = jnp.asarray(q), jnp.asarray(v)
        gq, gv = (np.asarray(x) for x in g(q, v))
        fq = [(f(q + h * e, v) - f(q - h * e, v)) / (2 * h) for e in np.eye(mj.nq)]
        fv = [(f(q, v + h * e) - f(q, v - h * e)) / (2 * h) for e in np.eye(mj.nv)]
        np.testing.assert_allclose(gq, np.array(fq), rtol=0, atol=1e-5 * max(1, np.abs(gq).max()))
        np.testing.assert_allclose(gv, np.array(fv), rtol=0, atol=1e-5 * max(1, np.abs(gv).max()))
    at_rest = g(jnp.asarray(mj.qpos0), jnp.zeros(mj.nv))  # zero violation
    assert all(np.all(np.isfinite(np.asarray(x))) for x in at_rest)
    acc = jax.jit(lambda q, v: diffmb.forward(model, q, v, forces=forces))
    qs = jnp.asarray(np.array([s[0] for s in states]))
    vs = jnp.asarray(np.array([s[1] for s in states]))
    batch = np.asarray(jax.vmap(acc)(qs, vs))
    one = np.array([np.asarray(acc(q, v)) for q, v in zip(qs, vs, strict=True)])
    np.testing.assert_allclose(batch, one, rtol=1e-12, atol=1e-12)


def test_reader_flags_inactive_and_static(tmp_path):
    """``<flag equality="disable"/>`` and inactive equalities build nothing (MuJoCo
    instantiates no rows for them); an equality between two bodies fixed to the world has no
    effect in MuJoCo (a zero Jacobian) and is skipped; joint equalities are left to the
    couplings reader."""
    text = """
<mujoco>
  {opt}
  <worldbody>
    <body name="fixed" pos="0 0 1"><geom size="0.1" mass="1"/></body>
    <body name="p" pos="0 0 2"><joint name="h" axis="0 1 0"/><geom size="0.1" mass="1"/></body>
    <body name="p2" pos="0 0 3"><joint name="h2" axis="0 1 0"/><geom size="0.1" mass="1"/></body>
  </worldbody>
  <equality>
    <weld body1="fixed"/>
    <connect body1="p" anchor="0 0 0" active="false"/>
    <connect body1="p" body2="p2" anchor="0 0 0"/>
    <joint joint1="h" joint2="h2"/>
  </equality>
</mujoco>"""
    on = _write(tmp_path, "on", text.format(opt="<option/>"))
    assert connect_weld_ids(on) == [2]
    eq = equalities_from_mjcf(on)
    assert eq.kind == ("connect",) and eq.body1 == (1,) and eq.body2 == (2,)
    off = _write(tmp_path, "off", text.format(opt='<option><flag equality="disable"/></option>'))
    assert equalities_from_mjcf(off) is None
    model = diffmb.load_mjcf(_write(tmp_path, "fourbar", _FOURBAR.format(attrs="")))
    with pytest.raises(ValueError, match=r"on\.xml: the model's bodies"):
        equalities_from_mjcf(on, model)
    assert unsupported_equalities(on) == [] and unsupported_equalities(off) == []


def test_unsupported_equalities_named():
    """A tendon equality on a spatial tendon is neither a coupling nor a connect/weld: it is
    listed by name; the connect, the joint equality and a weld of a body fixed to the world
    are not."""
    mj = mujoco.MjModel.from_xml_string("""
<mujoco>
  <worldbody>
    <body name="c" pos="1 0 0"><joint name="h" axis="0 1 0"/><geom size="0.1" mass="1"/>
      <site name="s1"/></body>
    <body name="fixed" pos="0 0 2"><geom size="0.1" mass="1"/></body>
    <site name="s0"/>
  </worldbody>
  <tendon><spatial name="sp"><site site="s0"/><site site="s1"/></spatial></tendon>
  <equality>
    <joint joint1="h"/><tendon name="rope" tendon1="sp"/>
    <connect name="pin" body1="c" anchor="0 0 0"/><weld body1="fixed"/>
  </equality>
</mujoco>""")
    assert unsupported_equalities(mj) == ["rope: tendon (on a spatial tendon)"]
    assert connect_weld_ids(mj) == [2]


@pytest.mark.parametrize("kw, err, msg", [
    (dict(kind=("ball",)), ValueError, r"Equalities.kind\[0\] = 'ball'"),
    (dict(body2=(-2,)), ValueError, r"Equalities.body2\[0\] = -2: must be a body index"),
    (dict(body2=(0,)), ValueError, r"Equalities.body2\[0\] = 0: the same body as body1"),
    (dict(body1=(0, 1)), TypeError, r"Equalities.body1: expected 1 body indices"),
    (dict(anchor1=np.zeros(3)), TypeError, r"Equalities.anchor1: expected shape \(1, 3\)"),
    (dict(anchor2=[[0.0, np.nan, 0.0]]), ValueError, r"Equalities.anchor2\[0, 1\] = nan"),
    (dict(frame1=np.zeros((1, 4))), ValueError, r"Equalities.frame1 norm\[0\] = 0"),
    (dict(solimp=(0.9, 1.2, 0.001, 0.5, 2)), ValueError, r"Equalities.solimp d_min, d_max"),
    (dict(invweight=-1.0), ValueError, r"Equalities.invweight = -1: must be >= 0"),
    (dict(torquescale=np.inf), ValueError, r"Equalities.torquescale = inf: must be finite"),
])
def test_equality_errors(kw, err, msg):
    args = dict(kind=("connect",), body1=(0,), body2=(-1,), anchor1=np.zeros((1, 3)),
                anchor2=np.zeros((1, 3)), invweight=1.0)
    args.update(kw)
    with pytest.raises(err, match=msg):
        Equalities(args.pop("kind"), args.pop("body1"), args.pop("body2"), args.pop("anchor1"),
                   args.pop("anchor2"), **args)


def test_body_index_checked_against_the_model(tmp_path):
    model = diffmb.load_mjcf(_write(tmp_path, "fourbar", _FOURBAR.format(attrs="")))
    eq = Equalities("connect", (5,), (-1,), np.zeros((1, 3)), np.zeros((1, 3)), invweight=1.0)
    with pytest.raises(ValueError, match=r"Equalities.body1\[0\] = 5: must be a body index in "
                                         r"\[-1, 3\)"):
        diffmb.forward(model, jnp.zeros(3), jnp.zeros(3), forces=(eq,))
