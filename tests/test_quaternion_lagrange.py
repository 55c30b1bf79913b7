"""Quaternion Lagrange formulation (seed 000) against independent derivations.

Oracles: quaternion kinematics q̇ = ½ q ⊗ [0, ω] (Hamilton product, diffmb.spatial.quaternion);
the virtual-work identity written in closed form; Newton–Euler about a non-centroidal point
(eom_closed_form, derived by hand, not by autodiff); the closed-form gyroscopic moment −ω × Σh;
conservation of the energy and of the world angular momentum computed body by body in this file.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb  # noqa: F401
from diffmb.formulations import quaternion_lagrange as ql
from diffmb.formulations import rotor_kane as kane
from diffmb.spatial import quaternion as quat


def _rand_quat(rng):
    q = rng.standard_normal(4)
    return jnp.asarray(q / np.linalg.norm(q))


def _vehicle(rng, c_zero=False):
    """Asymmetric airframe + 2 rotors on different axes; mass properties by parts."""
    mb = 2.0
    A = rng.standard_normal((3, 3)) * 0.02
    Jb = jnp.asarray(np.diag([0.12, 0.2, 0.27]) + A @ A.T)
    rm = jnp.array([0.1, 0.07])
    rpos = jnp.array([[0.3, -0.2, 0.05], [-0.1, 0.25, -0.04]])
    if c_zero:
        rpos = jnp.array([[0.3, -0.2, 0.05], [-0.3, 0.2, -0.05]])
        rm = jnp.array([0.1, 0.1])
    ax = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]])
    jax_ = jnp.array([5e-3, 3e-3])
    jt = jnp.array([2.5e-3, 1.6e-3])
    return dict(mb=mb, Jb=Jb, rm=rm, rpos=rpos, ax=ax, jax=jax_, jt=jt)


def _rotor_body(v, g=(0.0, 0.0, 9.81)):
    return ql.rotor_body_from_parts(jnp.asarray(v["mb"]), v["Jb"], v["rm"], v["rpos"], v["ax"],
                                    v["jax"], v["jt"], jnp.asarray(g))


def _kane_sys(v, g=(0.0, 0.0, 9.81)):
    Ir = jnp.stack([v["jax"][k] * jnp.outer(v["ax"][k], v["ax"][k])
                    + v["jt"][k] * (jnp.eye(3) - jnp.outer(v["ax"][k], v["ax"][k])) for k in range(2)])
    return kane.KaneSystem(jnp.concatenate([jnp.array([v["mb"]]), v["rm"]]),
                           jnp.concatenate([v["Jb"][None], Ir]),
                           jnp.concatenate([jnp.zeros((1, 3)), v["rpos"]]),
                           jnp.concatenate([jnp.zeros((1, 3)), v["ax"]]), jnp.asarray(g))


def test_maps_and_constraint():
    rng = np.random.default_rng(0)

    @jax.jit
    @jax.vmap
    def parts(q, w):
        S, G = ql.S_matrix(q), ql.Gamma_matrix(q)
        qdot = 0.5 * quat.mul(q, jnp.concatenate([jnp.zeros(1), w]))
        return S @ G, ql.Xi_matrix(q) @ ql.Upsilon_matrix(q), G @ w, qdot, S @ qdot

    qs = jnp.stack([_rand_quat(rng) for _ in range(8)])
    ws = jnp.asarray(rng.standard_normal((8, 3)))
    SG, XU, Gw, qdot, Sqd = parts(qs, ws)
    np.testing.assert_allclose(SG, np.broadcast_to(np.eye(3), SG.shape), atol=1e-14)  # eq. 30
    np.testing.assert_allclose(XU, 0.0, atol=1e-14)  # eq. 29
    np.testing.assert_allclose(Gw, qdot, atol=1e-14)
    np.testing.assert_allclose(Sqd, ws, atol=1e-14)


def test_seed_quaternion_boundary():
    """Seed 000's scalar-last q = [0, sin 1.5°, 0, cos 1.5°] is a 3° nose-up pitch in NED."""
    h = np.deg2rad(1.5)
    q = quat.from_scalar_last(jnp.array([0.0, np.sin(h), 0.0, np.cos(h)]))
    R = np.asarray(quat.to_rotmat(q))
    nose = R @ np.array([1.0, 0.0, 0.0])
    np.testing.assert_allclose(nose, [np.cos(np.deg2rad(3)), 0.0, -np.sin(np.deg2rad(3))], atol=1e-15)


def test_generalized_forces_virtual_work():
    """tau of eq. 20 does the same virtual work as the loads; Upsilon^T tau is eq. 39."""
    rng = np.random.default_rng(1)
    gf = jax.jit(ql.generalized_forces)
    for _ in range(3):
        q = _rand_quat(rng)
        f = jnp.asarray(rng.standard_normal((3, 3)))
        pts = jnp.asarray(rng.standard_normal((3, 3)))
        m = jnp.asarray(rng.standard_normal(3))
        tau = gf(q, f, pts, m)
        dv = rng.standard_normal(6)
        dp = ql.Upsilon_matrix(q) @ dv  # an admissible virtual displacement
        R = np.asarray(quat.to_rotmat(q))
        dr, dth = dv[:3], dv[3:]
        work = sum((R @ np.asarray(f[k])) @ (dr + R @ np.cross(dth, np.asarray(pts[k]))) for k in range(3))
        work += np.asarray(m) @ dth
        np.testing.assert_allclose(float(tau @ dp), work, rtol=1e-12)
        red = np.concatenate([R @ np.asarray(f).sum(0), np.asarray(m) + np.cross(pts, f).sum(0)])
        np.testing.assert_allclose(ql.Upsilon_matrix(q).T @ tau, red, atol=1e-12)
        np.testing.assert_allclose(ql.reduced_generalized_forces(q, f, pts, m), red, atol=1e-12)


def test_autodiff_lagrange_equals_newton_euler_and_kane():
    """Three independent routes to vdot: autodiff of L, hand Newton–Euler, Kane body by body."""
    rng = np.random.default_rng(2)
    v = _vehicle(rng)
    body, ks = _rotor_body(v), _kane_sys(v)

    @jax.jit
    def three(p, vel, Om, Omd, f, m):
        q = p[3:]
        pts = jnp.concatenate([jnp.zeros((1, 3)), v["rpos"]])
        tau = ql.generalized_forces(q, f, pts, m.sum(0))
        a1 = ql.eom(body, p, vel, tau, Om, Omd)
        red = ql.reduced_generalized_forces(q, f, pts, m.sum(0))
        a2 = ql.eom_closed_form(body, q, vel, red[:3], red[3:], Om, Omd)
        R = quat.to_rotmat(q)
        a3 = kane.kane_eom(ks, q, vel, f @ R.T, m, jnp.concatenate([jnp.zeros(1), Om]),
                           jnp.concatenate([jnp.zeros(1), Omd]))
        return a1, a2, a3

    for _ in range(4):
        q = _rand_quat(rng)
        p = jnp.concatenate([jnp.asarray(rng.standard_normal(3)), q])
        vel = jnp.asarray(rng.standard_normal(6))
        Om = jnp.asarray(rng.uniform(-300, 300, 2))
        Omd = jnp.asarray(rng.uniform(-50, 50, 2))
        f = jnp.asarray(rng.standard_normal((3, 3)))
        m = jnp.asarray(rng.standard_normal((3, 3)))
        a1, a2, a3 = three(p, vel, Om, Omd, f, m)
        scale = max(1.0, float(jnp.abs(a1).max()))
        assert float(jnp.abs(a1 - a2).max()) / scale < 1e-11
        assert float(jnp.abs(a1 - a3).max()) / scale < 1e-11


def test_rotor_gyroscopic_moment():
    """With the reference point at the composite c.g., J (omegadot_rotors - omegadot_locked)
    = -omega x sum h_r exactly, in the Lagrange and the Kane formulation."""
    rng = np.random.default_rng(3)
    v = _vehicle(rng, c_zero=True)
    body, ks = _rotor_body(v, (0.0, 0.0, 0.0)), _kane_sys(v, (0.0, 0.0, 0.0))
    assert float(jnp.abs(body.com).max()) < 1e-15
    q = _rand_quat(rng)
    p = jnp.concatenate([jnp.zeros(3), q])
    vel = jnp.asarray(rng.standard_normal(6))
    Om = jnp.array([400.0, -250.0])
    w = np.asarray(vel[3:])
    h = sum(float(v["jax"][k] * Om[k]) * np.asarray(v["ax"][k]) for k in range(2))
    expected = -np.cross(w, h)
    lag = jax.jit(lambda Om: ql.eom(body, p, vel, jnp.zeros(7), Om))
    a_on, a_off = lag(Om), lag(jnp.zeros(2))
    np.testing.assert_allclose(body.inertia @ (a_on - a_off)[3:], expected, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose((a_on - a_off)[:3], 0.0, atol=1e-13)
    kn = jax.jit(lambda Om3: kane.kane_eom(ks, q, vel, jnp.zeros((3, 3)), jnp.zeros((3, 3)), Om3))
    k_on, k_off = kn(jnp.concatenate([jnp.zeros(1), Om])), kn(jnp.zeros(3))
    np.testing.assert_allclose(body.inertia @ (k_on - k_off)[3:], expected, rtol=1e-11, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# Torque-free conservation, every formulation
# ---------------------------------------------------------------------------------------------


def _tree_model(v):
    import pathlib
    import tempfile

    rot = ""
    for k, n in enumerate(("c", "d")):
        a = np.asarray(v["ax"][k])
        # build each rotor frame so its local x is the spin axis
        zq = quat.from_rotmat(_frame_with_x(a))
        rot += (f'<body name="rotor_{n}" pos="{" ".join(map(repr, np.asarray(v["rpos"][k]).tolist()))}" '
                f'quat="{" ".join(map(repr, np.asarray(zq).tolist()))}">'
                f'<joint name="spin_{n}" type="hinge" axis="1 0 0"/>'
                f'<inertial pos="0 0 0" mass="{float(v["rm"][k])!r}" diaginertia="{float(v["jax"][k])!r} '
                f'{float(v["jt"][k])!r} {float(v["jt"][k])!r}"/></body>')
    J = np.asarray(v["Jb"]).tolist()
    fi = " ".join(repr(float(x)) for x in (J[0][0], J[1][1], J[2][2], J[0][1], J[0][2], J[1][2]))
    xml = (f'<mujoco><option gravity="0 0 0"/><worldbody><body name="b"><freejoint name="root"/>'
           f'<inertial pos="0 0 0" mass="{v["mb"]!r}" fullinertia="{fi}"/>{rot}</body></worldbody></mujoco>')
    with tempfile.TemporaryDirectory() as d:
        f = pathlib.Path(d) / "m.xml"
        f.write_text(xml)
        return diffmb.load_mjcf(f)


def _frame_with_x(a):
    a = a / np.linalg.norm(a)
    t = np.array([0.0, 0.0, 1.0]) if abs(a[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    y = np.cross(t, a)
    y /= np.linalg.norm(y)
    return np.stack([a, y, np.cross(a, y)], axis=1)


def _invariants(v, x, Om):
    """Energy of the (rigid, Om = 0) vehicle and world angular momentum about the origin, summed
    body by body from each body's own velocity: independent of every formulation."""
    r, q, V, w = x[:3], x[3:7] / jnp.linalg.norm(x[3:7]), x[7:10], x[10:13]
    R = quat.to_rotmat(q)
    E = 0.5 * v["mb"] * V @ V + 0.5 * w @ v["Jb"] @ w
    H = v["mb"] * jnp.cross(r, V) + R @ (v["Jb"] @ w)
    for k in range(2):
        a = v["ax"][k]
        I = v["jax"][k] * jnp.outer(a, a) + v["jt"][k] * (jnp.eye(3) - jnp.outer(a, a))
        xk = r + R @ v["rpos"][k]
        vk = V + R @ jnp.cross(w, v["rpos"][k])
        wk = w + Om[k] * a
        E = E + 0.5 * v["rm"][k] * vk @ vk + 0.5 * wk @ I @ wk
        H = H + v["rm"][k] * jnp.cross(xk, vk) + R @ (I @ wk)
    return E, H


def _rhs_all(v):
    body, ks = _rotor_body(v, (0.0, 0.0, 0.0)), _kane_sys(v, (0.0, 0.0, 0.0))
    model = _tree_model(v)

    def lag(t, x, Om):
        vd = ql.eom(body, x[:7], x[7:], jnp.zeros(7), Om)
        return ql.state_derivative(x[:7], x[7:], vd)

    def kan(t, x, Om):
        ud = kane.kane_eom(ks, x[3:7], x[7:], jnp.zeros((3, 3)), jnp.zeros((3, 3)),
                           jnp.concatenate([jnp.zeros(1), Om]))
        return ql.state_derivative(x[:7], x[7:], ud)

    def tree(t, x, Om):
        qt = jnp.concatenate([x[:7], jnp.zeros(2)])
        vt = jnp.concatenate([x[7:], Om])
        h = diffmb.bias_force(model, qt, vt)
        M = diffmb.mass_matrix(model, qt)
        return ql.state_derivative(x[:7], x[7:], jnp.linalg.solve(M[:6, :6], -h[:6]))

    return {"lagrange": lag, "kane": kan, "tree": tree}


def _conservation(t1):
    """Two runs per formulation (vmapped, one compilation): rotors locked (energy and angular
    momentum conserved) and rotors spinning at constant rate (angular momentum conserved; the
    motors do work, so energy is not an invariant)."""
    rng = np.random.default_rng(4)
    v = _vehicle(rng)
    Oms = jnp.array([[0.0, 0.0], [300.0, -200.0]])
    x0 = jnp.concatenate([jnp.array([1.0, -2.0, 0.5]), _rand_quat(rng), jnp.array([0.3, -0.2, 0.1]),
                          jnp.array([0.8, -1.1, 0.6])])
    for name, f in _rhs_all(v).items():

        @jax.jit
        @jax.vmap
        def solve(Om, f=f):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(f), diffrax.Dopri8(), 0.0, t1, 0.01, x0, args=Om,
                stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-12),
                saveat=diffrax.SaveAt(t1=True), max_steps=100_000)
            return sol.ys[-1]

        x1s = solve(Oms)
        for i, spin in enumerate((False, True)):
            E0, H0 = _invariants(v, x0, Oms[i])
            E1, H1 = _invariants(v, x1s[i], Oms[i])
            if not spin:
                assert abs(float(E1 - E0)) / abs(float(E0)) < 1e-10, name
            assert float(jnp.abs(H1 - H0).max()) / float(jnp.abs(H0).max()) < 1e-10, (name, spin)


@pytest.mark.slow
def test_conservation_torque_free_short():
    _conservation(3.0)


@pytest.mark.slow
def test_conservation_torque_free_100s():
    _conservation(100.0)
