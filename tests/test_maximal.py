"""Absolute coordinates (Xu & Zhong 2014, eqs. 3-32) against independent references.

Oracles: scipy's rotations, the paper's printed matrices (eqs. 3, 7, 30-31), jax autodiff of
the same quantities written independently, and MuJoCo (positions, velocities, kinetic and
potential energy, and the motion of a ball/hinge/weld tree integrated by MuJoCo's RK4).
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import diffmb
from diffmb.formulations import maximal as mx
from diffmb.io.mjcf_maximal import maximal_from_mjmodel, state_from_mjdata
from diffmb.spatial import quaternion as quat

RNG = np.random.default_rng(7)


def _rand_quat():
    q = RNG.normal(size=4)
    return q / np.linalg.norm(q)


def test_paper_T_matrices_give_world_to_body_rotation():
    # eq. (29): T_ij = q . T_ij . q with eqs. (30)-(31); T (eq. 3) is world -> body = R^T.
    Tm = mx.paper_T_matrices()
    for _ in range(5):
        q = _rand_quat()
        T = np.einsum("a,ijab,b->ij", q, Tm, q)
        R = Rotation.from_quat(np.r_[q[1:], q[0]]).as_matrix()  # scipy is scalar-last
        np.testing.assert_allclose(T, R.T, atol=1e-14)


def test_G_e_matches_paper_gyro_matrices_and_angular_velocity():
    G1 = np.array([[0, 1, 0, 0], [-1, 0, 0, 0], [0, 0, 0, -1], [0, 0, 1, 0]], float)
    G2 = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [-1, 0, 0, 0], [0, -1, 0, 0]], float)
    G3 = np.array([[0, 0, 0, 1], [0, 0, -1, 0], [0, 1, 0, 0], [-1, 0, 0, 0]], float)
    rdot = jax.jit(lambda q, qd: jax.jvp(quat.to_rotmat, (q,), (qd,)))
    for _ in range(5):
        q = _rand_quat()
        qd = RNG.normal(size=4)
        qd -= (qd @ q) * q  # tangent to the unit sphere
        Ge_paper = -np.stack([2 * G1 @ q, 2 * G2 @ q, 2 * G3 @ q])  # eq. (9)
        np.testing.assert_allclose(mx.G_e(jnp.asarray(q)), Ge_paper, atol=1e-14)
        # omega' from R^T Rdot (independent of eq. 6): skew(omega) = R^T Rdot
        R, Rd = rdot(jnp.asarray(q), jnp.asarray(qd))
        W = np.asarray(R.T @ Rd)
        w = np.array([W[2, 1], W[0, 2], W[1, 0]])
        np.testing.assert_allclose(Ge_paper @ qd, w, atol=1e-13)


def test_eq32_closed_form_jacobian_vs_autodiff():
    @jax.jit
    def both(u, x0):
        ad = jax.jacfwd(lambda u: mx.points_world(u[:3], u[3:], x0))(u)
        return mx.paper_point_jacobian(u[3:], x0), ad

    for _ in range(5):
        # also off the unit sphere: both sides are quadratic in q
        u, x0 = jnp.asarray(RNG.normal(size=7)), jnp.asarray(RNG.normal(size=3))
        cf, ad = both(u, x0)
        np.testing.assert_allclose(cf, ad, atol=1e-13)


def _three_body_xml():
    return """
<mujoco>
  <option timestep="0.0005" integrator="RK4" gravity="0.3 -0.2 -9.81">
    <flag contact="disable" energy="enable"/>
  </option>
  <worldbody>
    <body name="a" pos="0.1 0 0.2" quat="0.9 0.1 -0.3 0.2">
      <joint name="ball_a" type="ball" pos="0 0.05 0.3"/>
      <inertial pos="0.02 -0.01 0.05" quat="0.8 0.2 0.1 -0.3" mass="1.3"
                diaginertia="0.05 0.04 0.02"/>
      <body name="b" pos="0.1 0.2 -0.3" euler="0.3 -0.2 0.5">
        <joint name="hinge_b" type="hinge" axis="0.3 1 0.2" pos="0 0.1 0.1"/>
        <inertial pos="0.05 0.02 -0.1" mass="0.7" diaginertia="0.03 0.02 0.015"/>
        <body name="c" pos="0.2 0 -0.1" euler="0.1 0.4 -0.2">
          <inertial pos="0 0.05 0" mass="0.4" diaginertia="0.01 0.008 0.006"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>"""


@pytest.fixture(scope="module")
def three_body():
    mj = mujoco.MjModel.from_xml_string(_three_body_xml())
    d = mujoco.MjData(mj)
    d.qpos[:4] = _rand_quat()
    d.qpos[4] = 0.7
    d.qvel[:] = RNG.normal(size=mj.nv)
    mujoco.mj_forward(mj, d)
    sysm, _ = maximal_from_mjmodel(mj)
    return mj, d, sysm


def test_mjcf_converter_state_energy_and_constraints(three_body):
    mj, d, sysm = three_body
    assert sysm.joint_kinds == ("spherical", "revolute", "fixed")
    u, ud = state_from_mjdata(mj, d)
    lam, gam = jnp.asarray(RNG.normal(size=3)), jnp.asarray(RNG.normal(size=14))

    @jax.jit
    def quantities(sysm, u, ud, lam, gam):
        C = mx.constraints(sysm, u)
        return dict(
            C=C,
            Cdot=mx.constraint_jacobian(sysm, u) @ ud,
            T=mx.kinetic_energy(sysm, u, ud),
            V=mx.potential_energy(sysm, u),
            TM=0.5 * ud @ mx.mass_matrix(sysm, u) @ ud,
            L=mx.lagrangian(sysm, u, ud, lam, gam),
        )

    out = quantities(sysm, u, ud, lam, gam)
    assert np.abs(out["C"]).max() < 1e-13
    assert np.abs(out["Cdot"]).max() < 1e-12
    # MuJoCo's kinetic and potential energy (V = -sum m g . x_com, zero at the origin)
    np.testing.assert_allclose(out["T"], d.energy[1], rtol=1e-12)
    np.testing.assert_allclose(out["V"], d.energy[0], rtol=1e-12, atol=1e-12)
    # eq. (19) as a matrix product equals the per-body sum
    np.testing.assert_allclose(out["TM"], d.energy[1], rtol=1e-12)
    # extended Lagrangian (eq. 24)
    C = np.asarray(out["C"])
    ref = d.energy[1] - d.energy[0] - np.asarray(lam) @ C[:3] - np.asarray(gam) @ C[3:]
    np.testing.assert_allclose(out["L"], ref, rtol=1e-12)


def test_dae_baumgarte_vs_mujoco_rk4(three_body):
    mj, d0, sysm = three_body
    u0, ud0 = state_from_mjdata(mj, d0)
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = d0.qpos, d0.qvel
    mj.opt.timestep = 2e-4
    ts = [0.25, 0.5]
    ref = []
    for t in ts:
        while d.time < t - 1e-9:
            mujoco.mj_step(mj, d)
        mujoco.mj_forward(mj, d)
        ref.append(np.array(d.xipos[1:]).ravel())
    tr = diffmb.simulate(mx.MaximalDAE(sysm), u0, ud0, t1=0.5, dt=1e-3, saveat=ts,
                         solver="tsit5", rtol=1e-10, atol=1e-10)
    us = tr.q
    assert int(tr.status) == 0
    com = np.asarray(us).reshape(len(ts), -1, 7)[:, :, :3].reshape(len(ts), -1)
    np.testing.assert_allclose(com, np.array(ref), atol=1e-7)
    cons = jax.jit(jax.vmap(mx.constraints, in_axes=(None, 0)))(sysm, us)
    assert np.abs(np.asarray(cons)).max() < 1e-7


def test_builder_rejects_bad_input():
    ok = mx.Body("a", 1.0, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="mass"):
        mx.build_system([mx.Body("a", -1.0, [1.0, 1.0, 1.0])], [])
    with pytest.raises(ValueError, match="triangle"):
        mx.build_system([mx.Body("a", 1.0, [1.0, 1.0, 5.0])], [])
    with pytest.raises(ValueError, match="unknown body"):
        mx.build_system([ok], [mx.Joint("spherical", "world", "b")])
    with pytest.raises(ValueError, match="revolute needs"):
        mx.build_system([ok], [mx.Joint("revolute", None, "a")])
