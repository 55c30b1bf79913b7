"""RNEA/CRBA/ABA against Pinocchio (URDF) and MuJoCo (MJCF): independent engines."""

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.spatial import quaternion as Q

from .oracles import PinocchioPair, all_quantities, erd_path, rel_err

TOL = 1e-9

FIXED_URDFS = [  # one robot in the fast suite, the others in the slow one
    "ur_description/urdf/ur5_robot.urdf",
    pytest.param("panda_description/urdf/panda.urdf", marks=pytest.mark.slow),
    pytest.param("double_pendulum_description/urdf/double_pendulum_continuous.urdf",
                 marks=pytest.mark.slow),
]


def _check_pin(pair, rng, n_states=3):
    pin = pair.pin
    m = pair.model
    for _ in range(n_states):
        q, v, tau = pair.random_state(rng)
        f_ext = jnp.zeros((m.n_bodies, 6))
        M, b, a, a2, t = (np.asarray(x) for x in all_quantities(m, q, v, tau, f_ext))
        qp, vp, tp, perm = pair.to_pin(q, v, tau)
        Mp = pin.crba(pair.pm, pair.pd, qp)
        Mp = np.triu(Mp) + np.triu(Mp, 1).T
        free = "free" in m.joint_types
        if not free:
            assert rel_err(M[np.ix_(perm, perm)], Mp) < TOL
            assert rel_err(b[perm], pin.rnea(pair.pm, pair.pd, qp, vp, 0 * vp)) < TOL
            assert rel_err(a[perm], pin.aba(pair.pm, pair.pd, qp, vp, tp)) < TOL
        else:
            # free flyer: Pinocchio's v_lin = Rᵀ ṗ, so a_pin_lin = Rᵀ p̈ − ω × v_lin
            R = np.asarray(Q.to_rotmat(jnp.asarray(q[3:7])))
            T = np.eye(m.nv)
            T[:3, :3] = R
            Mv = T.T @ M @ T
            assert rel_err(Mv[np.ix_(perm, perm)], Mp) < TOL
            ap = np.array(a)
            ap[:3] = R.T @ a[:3] - np.cross(v[3:6], R.T @ v[:3])
            assert rel_err(ap[perm], pin.aba(pair.pm, pair.pd, qp, vp, tp)) < TOL
        assert rel_err(a2, a) < TOL
        assert rel_err(t, tau) < TOL


@pytest.mark.parametrize("rel", FIXED_URDFS)
def test_fixed_base_urdf_vs_pinocchio(rel):
    _check_pin(PinocchioPair(erd_path(rel)), np.random.default_rng(0))


@pytest.mark.slow
def test_floating_quadruped_urdf_vs_pinocchio():
    _check_pin(PinocchioPair(erd_path("solo_description/robots/solo12.urdf"), floating=True),
               np.random.default_rng(1))


@pytest.mark.slow
def test_humanoid_urdf_loads_and_matches_pinocchio():
    pair = PinocchioPair(erd_path("talos_data/robots/talos_reduced.urdf"))
    assert pair.model.nv >= 29
    _check_pin(pair, np.random.default_rng(2), n_states=1)


# ---------------------------------------------------------------- MuJoCo -----------------------


def _mj_random_state(mj, rng):
    q = mj.qpos0.copy()
    for j in range(mj.njnt):
        a = mj.jnt_qposadr[j]
        if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            q[a : a + 3] = rng.normal(size=3)
            qq = rng.normal(size=4)
            q[a + 3 : a + 7] = qq / np.linalg.norm(qq)
        elif mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
            qq = rng.normal(size=4)
            q[a : a + 4] = qq / np.linalg.norm(qq)
        else:
            q[a] += rng.uniform(-1, 1)
    return q, rng.normal(size=mj.nv), rng.normal(size=mj.nv)


def mujoco_reference(mj, q, v, tau, xfrc):
    """M, bias, qacc of MuJoCo's own smooth dynamics (no contacts, limits or passive forces)."""
    mj.opt.disableflags |= (
        mujoco.mjtDisableBit.mjDSBL_CONTACT
        | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
        | mujoco.mjtDisableBit.mjDSBL_SPRING
        | mujoco.mjtDisableBit.mjDSBL_DAMPER
        | mujoco.mjtDisableBit.mjDSBL_ACTUATION
    )
    mj.body_gravcomp[:] = 0.0
    mj.opt.density, mj.opt.viscosity = 0.0, 0.0  # no fluid forces
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:], d.qfrc_applied[:] = q, v, tau
    d.xfrc_applied[1:] = xfrc
    mujoco.mj_forward(mj, d)
    M = np.zeros((mj.nv, mj.nv))
    mujoco.mj_fullM(mj, d, M)
    return M, d.qfrc_bias.copy(), d.qacc.copy()


def check_mjcf(path, rng, n_states=3, force_space=False):
    """Compare with MuJoCo at random states. ``force_space``: compare accelerations through M
    (for models so ill-conditioned that round-off in a is amplified by cond(M))."""
    mj = mujoco.MjModel.from_xml_path(str(path))
    model = diffmb.load_mjcf(path)
    assert (model.nq, model.nv) == (mj.nq, mj.nv)
    for _ in range(n_states):
        q, v, tau = _mj_random_state(mj, rng)
        xf = rng.normal(size=(mj.nbody - 1, 6))
        Mr, br, ar = mujoco_reference(mj, q, v, tau, xf)
        M, b, a, a2, t = (np.asarray(x) for x in all_quantities(model, q, v, tau, jnp.asarray(xf)))
        W = Mr if force_space else np.eye(mj.nv)
        assert rel_err(M, Mr) < TOL
        assert rel_err(b, br) < TOL
        assert rel_err(W @ a, W @ ar) < TOL
        assert rel_err(W @ a2, W @ ar) < TOL
        assert rel_err(t, tau) < TOL
    return model


@pytest.mark.slow
def test_mjcf_hinge_slide_ball_free_armature_vs_mujoco(data_dir):
    m = check_mjcf(data_dir / "humanoid_like.xml", np.random.default_rng(3))
    assert m.joint_names[:3] == ("root", "abdomen_z", "abdomen_y")


@pytest.mark.slow
def test_mujoco_testdata_model_vs_mujoco():
    """MuJoCo's own test model. It has tiny bodies (cond(M) ~ 1e12), so accelerations are
    compared through M (force space), where round-off is not amplified."""
    import os

    path = os.path.join(os.path.dirname(mujoco.__file__), "testdata", "model.xml")
    check_mjcf(path, np.random.default_rng(4), n_states=2, force_space=True)
