"""The four-box chain MJCF (Xu & Zhong 2014, section 5) compiled by MuJoCo.

Oracles: the paper's numbers (M = 12 kg, J = diag(9.25, 10, 1.25), 1 x 0.5 x 3 m boxes, joints
at local (0, 0, +-1.5)), the box inertia formula, scipy's intrinsic z-x'-z'' Euler angles for
the initial attitudes, and MuJoCo's own energy bookkeeping.
"""

from importlib import resources

import jax
import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import diffmb  # noqa: F401
from diffmb.formulations import maximal as mx
from diffmb.io.mjcf_maximal import maximal_from_mjmodel

EULER = [(np.pi / 4, np.pi / 4, 0.0)] * 2 + [(np.pi / 4, 3 * np.pi / 4, 0.0)] * 2


def _path():
    return str(resources.files("diffmb") / "assets" / "chain4.xml")


@pytest.fixture(scope="module")
def chain():
    mj = mujoco.MjModel.from_xml_path(_path())
    d = mujoco.MjData(mj)
    mujoco.mj_forward(mj, d)
    return mj, d


def _paper_initial_state():
    """Rotations and COM positions from the Euler angles, walking down from the origin."""
    Rs = [Rotation.from_euler("ZXZ", e).as_matrix() for e in EULER]  # upper case = intrinsic
    coms, pivot = [], np.zeros(3)
    for R in Rs:
        com = pivot - R @ np.array([0.0, 0.0, 1.5])
        coms.append(com)
        pivot = com + R @ np.array([0.0, 0.0, -1.5])
    return Rs, np.array(coms)


def test_options_mass_and_inertia(chain):
    mj, _ = chain
    assert mj.opt.timestep == 0.002
    assert mj.opt.integrator == int(mujoco.mjtIntegrator.mjINT_RK4)
    np.testing.assert_allclose(mj.opt.gravity, [0.0, 0.0, -9.8])
    assert mj.nq == 16 and mj.nv == 12 and mj.njnt == 4
    assert all(int(t) == int(mujoco.mjtJoint.mjJNT_BALL) for t in mj.jnt_type)
    a, b, c, m = 1.0, 0.5, 3.0, 12.0
    box = m / 12.0 * np.array([b**2 + c**2, a**2 + c**2, a**2 + b**2])
    np.testing.assert_allclose(box, [9.25, 10.0, 1.25])
    np.testing.assert_allclose(mj.body_mass[1:], 12.0, rtol=0, atol=0)
    np.testing.assert_allclose(mj.body_inertia[1:], np.tile(box, (4, 1)), rtol=1e-15)
    np.testing.assert_allclose(mj.body_ipos[1:], 0.0, atol=0)
    np.testing.assert_allclose(mj.body_iquat[1:], np.tile([1.0, 0, 0, 0], (4, 1)), atol=1e-15)
    # geoms are visual only and match the box
    np.testing.assert_allclose(mj.geom_size, np.tile([0.5, 0.25, 1.5], (4, 1)))
    assert not np.any(mj.geom_contype) and not np.any(mj.geom_conaffinity)


def test_initial_state_matches_paper(chain):
    mj, d = chain
    Rs, coms = _paper_initial_state()
    np.testing.assert_allclose(mj.qpos0, np.tile([1.0, 0, 0, 0], 4), atol=0)
    np.testing.assert_allclose(d.xipos[1:], coms, atol=1e-14)
    for k in range(4):
        np.testing.assert_allclose(d.xmat[k + 1].reshape(3, 3), Rs[k], atol=1e-15)
    np.testing.assert_allclose(coms[0], [-0.75, 0.75, -1.5 / np.sqrt(2)], atol=1e-15)
    # joints: ball k at local (0, 0, +1.5) of body k; joint 1 at the origin; each joint is also
    # the (0, 0, -1.5) end of the parent
    np.testing.assert_allclose(mj.jnt_pos, np.tile([0.0, 0, 1.5], (4, 1)))
    np.testing.assert_allclose(d.xanchor[0], 0.0, atol=1e-15)
    for k in range(1, 4):
        end = d.xipos[k] + d.xmat[k].reshape(3, 3) @ np.array([0.0, 0, -1.5])
        np.testing.assert_allclose(d.xanchor[k], end, atol=1e-14)
    # all COMs in the plane spanned by z and (-1, 1, 0)/sqrt 2
    n = np.array([1.0, 1.0, 0.0]) / np.sqrt(2)
    assert np.abs(d.xipos[1:] @ n).max() < 1e-15


def test_mujoco_rk4_conserves_energy_at_rest_release(chain):
    mj, _ = chain
    mj.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    d = mujoco.MjData(mj)
    mujoco.mj_forward(mj, d)
    e0 = d.energy.sum()
    Rs, coms = _paper_initial_state()
    np.testing.assert_allclose(e0, 12.0 * 9.8 * coms[:, 2].sum(), rtol=1e-14)  # V = M g z, at rest
    es = []
    for _ in range(500):  # 1 s at dt = 0.002 (the file's own RK4)
        mujoco.mj_step(mj, d)
        es.append(d.energy.sum())
    assert np.all(np.isfinite(d.qpos))
    assert np.abs(np.array(es) - e0).max() / abs(e0) < 1e-4


def test_maximal_conversion_of_the_chain(chain):
    mj, d = chain
    sysm, u0 = maximal_from_mjmodel(mj)
    assert sysm.joint_kinds == ("spherical",) * 4
    assert sysm.joint_bodies == ((-1, 0), (0, 1), (1, 2), (2, 3))
    np.testing.assert_allclose(np.asarray(sysm.points)[:, 0, 2], [0.0, -1.5, -1.5, -1.5],
                               atol=1e-15)
    np.testing.assert_allclose(np.asarray(sysm.points)[:, 1], np.tile([0.0, 0, 1.5], (4, 1)),
                               atol=1e-15)
    np.testing.assert_allclose(np.asarray(u0).reshape(4, 7)[:, :3], d.xipos[1:], atol=0)
    C = jax.jit(mx.constraints)(sysm, u0)
    assert np.abs(np.asarray(C)).max() < 1e-15
    V = jax.jit(mx.potential_energy)(sysm, u0)
    np.testing.assert_allclose(V, 12.0 * 9.8 * d.xipos[1:, 2].sum(), rtol=1e-14)
