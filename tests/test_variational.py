"""The symplectic variational integrator (Xu & Zhong 2014, eqs. 33-39) against independent
references.

Oracles: the closed-form period of a compound pendulum (complete elliptic integral, scipy),
MuJoCo's RK4 at a fine step for a spinning body on a ball joint, the measured convergence
order (expected 2 for the midpoint discrete Lagrangian), the h^2 scaling and boundedness of the
energy error, and central differences for the implicit-function-theorem gradient.

Every 1-body run here has the same static structure (names, 4000 steps, every node saved), so
one compilation serves all of them.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy.special import ellipk

import diffmb
from diffmb.formulations import maximal as mx
from diffmb.formulations import variational as vi
from diffmb.io.mjcf_maximal import maximal_from_mjmodel, state_from_mjdata
from diffmb.simulation import SOLVER_FAILURE, SimulationError
from diffmb.spatial import quaternion as quat

N = 4000  # steps of every run below (same compilation)
M, L = 2.0, 0.5
JX, JY, JZ = 0.3, 0.25, 0.1


def _xml(gravity="0 0 -9.81", ipos="0 0 -0.5", inertia=f"{JX} {JY} {JZ}"):
    return f"""
<mujoco>
  <option timestep="1e-4" integrator="RK4" gravity="{gravity}">
    <flag contact="disable"/>
  </option>
  <worldbody>
    <body name="b">
      <joint name="ball" type="ball" pos="0 0 0"/>
      <inertial pos="{ipos}" mass="{M}" diaginertia="{inertia}"/>
    </body>
  </worldbody>
</mujoco>"""


def _state(mj, qpos, qvel):
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(mj, d)
    return d


def _quat_x(a):
    return np.array([np.cos(a / 2), np.sin(a / 2), 0.0, 0.0])


@pytest.fixture(scope="module")
def pendulum():
    mj = mujoco.MjModel.from_xml_string(_xml())
    sysm, _ = maximal_from_mjmodel(mj)
    return mj, sysm


def _run(sysm, u0, ud0, dt):
    tr = diffmb.simulate(vi.VariationalSystem(sysm), u0, ud0, t1=N * dt, dt=dt)
    assert int(tr.status) == 0
    return tr


@pytest.mark.slow
def test_planar_pendulum_period_constraints_and_energy(pendulum):
    mj, sysm = pendulum
    th0 = 1.2
    u0, ud0 = state_from_mjdata(mj, _state(mj, _quat_x(th0), np.zeros(3)))
    # closed form: T = 4 sqrt(I_p / (m g l)) K(sin^2(th0/2))  (scipy's ellipk takes m = k^2)
    Ip = JX + M * L**2
    T_exact = 4.0 * np.sqrt(Ip / (M * 9.81 * L)) * ellipk(np.sin(th0 / 2) ** 2)

    def period(tr):
        r = np.asarray(tr.q)[:, :3]
        th = np.arctan2(r[:, 1], -r[:, 2])  # swing angle about x (COM below the pivot)
        ts = np.asarray(tr.ts)
        i = np.nonzero((th[:-1] > 0) & (th[1:] <= 0))[0]  # downward zero crossings
        tc = ts[i] + th[i] / (th[i] - th[i + 1]) * (ts[i + 1] - ts[i])
        return np.mean(np.diff(tc))

    errs, drift = [], []
    for dt in (0.004, 0.002):
        tr = _run(sysm, u0, ud0, dt)
        # every constraint holds at every node
        C = np.asarray(jax.jit(jax.vmap(mx.constraints, in_axes=(None, 0)))(sysm, tr.q))
        assert np.abs(C).max() < 1e-10
        H = np.asarray(tr.aux["energy"])
        dH = np.abs(H - H[0]) / abs(H[0])
        errs.append(dH.max())
        drift.append((dH[: N // 2].max(), dH[N // 2 :].max()))
        np.testing.assert_allclose(period(tr), T_exact, rtol=3e-4 if dt > 0.003 else 1e-4)
    # bounded: the second half of the run has no larger energy error than the first (no drift)
    for first, second in drift:
        assert second < 1.5 * first
    # symplectic midpoint: energy error O(h^2)
    assert 3.0 < errs[0] / errs[1] < 5.0, errs
    assert errs[1] < 1e-4


@pytest.fixture(scope="module")
def spinning_top(pendulum):
    """Asymmetric body on a ball joint, tilted and spinning: 3-D motion."""
    mj, sysm = pendulum
    q0 = np.array([0.9, 0.3, -0.2, 0.25])
    q0 /= np.linalg.norm(q0)
    w0 = np.array([0.8, -1.5, 6.0])  # body-frame angular velocity (MuJoCo ball qvel)
    d = _state(mj, q0, w0)
    u0, ud0 = state_from_mjdata(mj, d)
    return mj, sysm, d, u0, ud0


@pytest.mark.slow  # four step sizes compile; the pendulum test checks the period and the O(h²) energy
def test_second_order_and_mujoco_agreement(spinning_top):
    mj, sysm, d, u0, ud0 = spinning_top
    t_cmp = 1.0
    # MuJoCo reference: RK4 at dt = 1e-4 (4th order, error ~1e-12 here)
    for _ in range(int(round(t_cmp / mj.opt.timestep))):
        mujoco.mj_step(mj, d)
    mujoco.mj_forward(mj, d)
    ref = np.r_[d.xipos[1], d.xquat[1]]
    us = {}
    for n in (100, 200, 400, 800):  # dt = t_cmp / n
        tr = _run(sysm, u0, ud0, t_cmp / n)
        us[n] = np.asarray(tr.q[n])
        np.testing.assert_allclose(tr.ts[n], t_cmp, rtol=1e-12)
    errs = [np.abs(us[n] - ref).max() for n in (100, 200, 400, 800)]
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(orders - 2.0) < 0.15), (errs, orders)
    assert errs[-1] < 1e-4
    # the method is symmetric: error expansion in h^2, h^4 -> Richardson gives ~4th order
    rich = (4.0 * us[800] - us[400]) / 3.0
    assert np.abs(rich - ref).max() < 2e-7


@pytest.mark.slow
def test_step_gradient_implicit_vs_central_differences(spinning_top):
    """One step's Jacobian (implicit function theorem through optimistix) vs central FD."""
    mj, sysm, d, u0, ud0 = spinning_top
    p0 = vi.legendre(sysm, u0, ud0)
    h = 0.01

    @jax.jit
    def f(x):  # x = [p (7), mass]
        un = vi.step(eqx_tree_at(sysm, x[7]), u0, x[:7], h)[0]
        return un

    x0 = jnp.concatenate([p0, jnp.array([M])])
    J = jax.jit(jax.jacrev(f))(x0)
    eps = 1e-6
    Jfd = np.stack([(f(x0 + e) - f(x0 - e)) / (2 * eps) for e in np.eye(8) * eps], axis=1)
    np.testing.assert_allclose(np.asarray(J), Jfd, atol=1e-8 * np.abs(Jfd).max())


def _spin_loss(sysm, u0, dt):
    w = jnp.array([0.3, -0.7, 1.1])

    def loss(params):
        tilt, mass, spin = params
        qn = quat.mul(jnp.array([jnp.cos(tilt / 2), jnp.sin(tilt / 2), 0.0, 0.0]), u0[3:])
        r = -mx._rot(qn, sysm.points[0, 1])  # pivot (COM -> pivot offset) stays at the origin
        wb = jnp.array([0.8, -1.5, spin])
        qd = 0.5 * quat.mul(qn, jnp.concatenate([jnp.zeros(1), wb]))
        ud = jnp.concatenate([jnp.cross(mx._rot(qn, wb), r), qd])
        tr = diffmb.simulate(vi.VariationalSystem(eqx_tree_at(sysm, mass)),
                             jnp.concatenate([r, qn]), ud, t1=N * dt, dt=dt)
        return w @ tr.q[-1, :3] + tr.q[-1, 4]

    return loss


@pytest.mark.slow
def test_trajectory_gradient_matches_central_differences(spinning_top):
    mj, sysm, d, u0, ud0 = spinning_top
    loss = _spin_loss(sysm, u0, 2.5e-4)  # 4000 steps, 1 s
    p0 = jnp.array([0.2, M, 6.0])
    g = jax.grad(loss)(p0)
    eps = 1e-4  # round-off accumulated over 4000 steps (~1e-12) needs a large FD step
    fd = [(loss(p0 + e) - loss(p0 - e)) / (2 * eps) for e in np.eye(3) * eps]
    np.testing.assert_allclose(np.asarray(g), np.array(fd), rtol=1e-6, atol=1e-9)


def eqx_tree_at(sysm, mass):
    import equinox as eqx

    return eqx.tree_at(lambda s: s.masses, sysm, jnp.reshape(mass, (1,)))


@pytest.mark.slow
def test_failure_is_reported_not_silent(spinning_top):
    mj, sysm, d, u0, ud0 = spinning_top
    dt = 0.5  # far too large for a body spinning at 6 rad/s: Newton cannot converge
    system = vi.VariationalSystem(sysm)
    with pytest.raises(SimulationError, match=r"solver failed .*did not converge\) at t = 0.5"):
        diffmb.simulate(system, u0, 10.0 * ud0, t1=N * dt, dt=dt)
    tr = diffmb.simulate(system, u0, 10.0 * ud0, t1=N * dt, dt=dt, throw=False)
    assert int(tr.status) == SOLVER_FAILURE
    k = int(round(float(tr.t_fail) / dt))
    assert 1 <= k <= N
    assert np.all(np.isnan(np.asarray(tr.q[k:])))
    assert np.all(np.isfinite(np.asarray(tr.q[:k])))


@pytest.mark.slow
def test_variational_system_in_the_common_loop():
    """The step runs in simulate's fixed-step loop: its Trajectory carries the node momenta and
    the Hamiltonian in aux, and a mechanism that is not a system is refused by name."""
    from pathlib import Path

    mj = mujoco.MjModel.from_xml_path(str(Path(diffmb.__file__).parent / "assets" / "chain4.xml"))
    sysm, u0 = maximal_from_mjmodel(mj)
    traj = diffmb.simulate(vi.VariationalSystem(sysm), u0, t1=0.02, dt=0.002)
    assert isinstance(traj, diffmb.Trajectory)
    assert traj.q.shape == (11, 28) and int(traj.status) == 0
    H = np.asarray(traj.aux["energy"])
    assert abs(H[-1] - H[0]) < 1e-6 * abs(H[0])
    # the saved momenta are the Legendre transform of the saved velocities (eq. 37)
    p = np.asarray(traj.aux["p"][-1])
    np.testing.assert_allclose(p, np.asarray(vi.legendre(sysm, traj.q[-1], traj.v[-1])),
                               rtol=0, atol=1e-9 * np.abs(p).max())
    with pytest.raises(TypeError, match="MaximalSystem"):
        diffmb.simulate(sysm, u0, t1=0.02, dt=0.002)
