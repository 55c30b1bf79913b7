"""Multiple-shooting mechanics (diffmb.optim.shooting). Oracles: one uninterrupted simulation
(cut at a junction and restarted from its own state, the continuity residual is zero), MuJoCo's
mj_integratePos for the start-state map on a model with a ball and a free joint, and the
arithmetic of the segment cut (every interval covered once)."""

from pathlib import Path

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.controls import piecewise_linear
from diffmb.forces.elements import JointDamping
from diffmb.optim import shooting as ms

XML = Path(__file__).parent / "data" / "sim_actuated.xml"


@pytest.mark.parametrize("n, S", [(51, 4), (10, 3), (5, 10), (2, 1)])
def test_segments_cover_every_interval_once(n, S):
    segs = ms.segments([n, 7], S)
    for rec, m in ((0, n), (1, 7)):
        mine = [s for s in segs if s.rec == rec]
        assert mine[0].a == 0 and mine[-1].b == m - 1 and mine[-1].last
        assert len(mine) == max(1, min(S, m - 1))
        for s, t in zip(mine[:-1], mine[1:], strict=True):
            assert s.b == t.a and s.b > s.a and not s.last
    assert ms.junctions(segs) == [(i, i + 1) for i in range(len(segs) - 1)
                                  if segs[i].rec == segs[i + 1].rec]


def test_start_state_matches_mujoco_integrate_pos():
    mj = mujoco.MjModel.from_xml_path(str(XML))
    model = diffmb.load_mjcf(XML)
    rng = np.random.default_rng(0)
    q_ref = mj.qpos0.copy()
    s = np.concatenate([0.3 * rng.standard_normal(mj.nv), rng.standard_normal(mj.nv)])
    q0, v0 = ms.start_state(model, jnp.asarray(q_ref), jnp.asarray(s))
    ref = q_ref.copy()
    mujoco.mj_integratePos(mj, ref, s[: mj.nv], 1.0)
    np.testing.assert_allclose(np.asarray(q0), ref, atol=1e-13, rtol=0)
    np.testing.assert_array_equal(np.asarray(v0), s[mj.nv :])
    # a state that meets itself is continuous
    c = ms.continuity(model, q0, v0, q0, v0, 10.0)
    assert c.shape == (2 * mj.nv,) and float(jnp.abs(c).max()) < 1e-12


@pytest.mark.slow
def test_restarted_segment_is_continuous_with_the_whole_simulation():
    b = diffmb.ModelBuilder("pend")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.02, 0.001),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0), damping=0.1)])
    m = b.build()
    ts = np.linspace(0.0, 1.0, 11)
    ctrl = piecewise_linear(ts, 2.0 * np.sin(6.0 * ts)[:, None])
    kw = dict(dt=0.01, forces=(JointDamping(),))
    whole = diffmb.simulate(m, np.array([0.3]), np.zeros(1), t1=1.0, saveat=ts, control=ctrl,
                            **kw)
    # the second half, in local time from 0 with the control shifted by its start
    qm, vm = whole.q[5], whole.v[5]
    half = diffmb.simulate(m, qm, vm, t1=0.5, saveat=ts[:6], control=ms.Shifted(ctrl, 0.5), **kw)
    np.testing.assert_allclose(np.asarray(half.q), np.asarray(whole.q[5:]), atol=1e-12)
    # first half ends where the second starts: continuity residual zero; a gap shows in it
    first = diffmb.simulate(m, np.array([0.3]), np.zeros(1), t1=0.5, saveat=[0.5], control=ctrl,
                            **kw)
    c = ms.continuity(m, first.q[-1], first.v[-1], qm, vm, 1e3)
    assert float(jnp.abs(c).max()) < 1e-9
    c = ms.continuity(m, first.q[-1], first.v[-1], qm + 0.01, vm, 2.0)
    np.testing.assert_allclose(np.asarray(c), [-0.02, 0.0], atol=1e-9)


def test_initial_guesses():
    b = diffmb.ModelBuilder("slider")
    b.add_body("cart", -1, mass=1.0, inertia=(0.01, 0.01, 0.01),
               joints=[dict(name="x", type="slide", axis=(1, 0, 0))])
    m = b.build()
    t = np.array([0.0, 0.1, 0.3, 0.4])
    q = (t**2)[:, None]
    # central difference inside, one-sided at the ends; measured v wins
    assert ms.state_from_samples(m, t, q, None, 0)[1][0] == pytest.approx(0.1)
    assert ms.state_from_samples(m, t, q, None, 1)[1][0] == pytest.approx(0.09 / 0.3)
    assert ms.state_from_samples(m, t, q, None, 3)[1][0] == pytest.approx(0.07 / 0.1)
    assert ms.state_from_samples(m, t, q, 2 * q, 2)[1][0] == pytest.approx(0.18)
    assert ms.state_from_samples(m, t, None, None, 2, q0=[1.0], v0=None)[1][0] == 0.0
    q_refs, s0 = ms.states_on_line(m, np.array([0.0]), np.array([2.0]), 4.0, 4)
    np.testing.assert_allclose(q_refs[:, 0], [0.5, 1.0, 1.5])
    np.testing.assert_allclose(s0, [[0.0, 0.5]] * 3)
