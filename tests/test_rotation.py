"""Quaternions, Euler angles and quaternion-rate maps (diffmb.spatial.quaternion / rotation).

Oracles: Hamilton's multiplication table, Rodrigues' formula, scipy.spatial.transform.Rotation
(Euler angles), the matrices as printed in Wu et al. (2019) and Xu & Zhong (2014) (typed here from the papers), and
central finite differences of quaternion trajectories.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads
from scipy.spatial.transform import Rotation

from diffmb.spatial import quaternion as quat
from diffmb.spatial import rotation as rot

SETTINGS = settings(max_examples=25, deadline=None)
QFR = jax.jit(quat.from_rotmat)
KE_GRAD = jax.jit(jax.grad(rot.rotational_kinetic_energy, argnums=(0, 1, 2)))

vec3 = st.lists(st.floats(-3.0, 3.0), min_size=3, max_size=3).map(np.array)


@st.composite
def unit_quats(draw):
    v = np.array(draw(st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4)))
    if np.linalg.norm(v) < 0.1:
        v = v + np.array([0.5, 0.1, -0.2, 0.3])
    return jnp.asarray(v / np.linalg.norm(v))


def rodrigues(axis, angle):
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def close(a, b, tol=1e-12):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=tol)


def close_pm(a, b, tol=1e-12):
    """Quaternions equal up to sign (double cover)."""
    a, b = np.asarray(a), np.asarray(b)
    close(a * (1.0 if a @ b >= 0 else -1.0), b, tol)


# ------------------------------------------------------------------------------ quaternion.py


def test_hamilton_basis_table():
    one, i, j, k = (jnp.eye(4)[n] for n in range(4))
    close(quat.mul(i, j), k)
    close(quat.mul(j, k), i)
    close(quat.mul(k, i), j)
    close(quat.mul(j, i), -k)
    for e in (i, j, k):
        close(quat.mul(e, e), -one)
    close(quat.mul(quat.mul(i, j), k), -one)  # i j k = -1


@SETTINGS
@given(unit_quats(), unit_quats(), unit_quats())
def test_mul_associative_and_conj(p, q, r):
    close(quat.mul(quat.mul(p, q), r), quat.mul(p, quat.mul(q, r)))
    close(quat.conj(quat.mul(p, q)), quat.mul(quat.conj(q), quat.conj(p)))
    close(quat.mul(q, quat.inverse(q)), jnp.array([1.0, 0, 0, 0]))
    # the product composes rotations
    close(quat.to_rotmat(quat.mul(p, q)), quat.to_rotmat(p) @ quat.to_rotmat(q))


@SETTINGS
@given(vec3, st.floats(-6.0, 6.0))
def test_to_rotmat_rodrigues(axis, angle):
    if np.linalg.norm(axis) < 1e-3:
        axis = np.array([0.3, -0.2, 0.9])
    axis = axis / np.linalg.norm(axis)
    q = quat.from_axis_angle(jnp.asarray(axis), angle)
    R = np.asarray(quat.to_rotmat(q))
    close(R, rodrigues(axis, angle))
    close(R.T @ R, np.eye(3))
    assert abs(np.linalg.det(R) - 1.0) < 1e-12
    v = np.array([0.4, -1.3, 2.0])
    close(quat.rotate(q, jnp.asarray(v)), R @ v)
    close(quat.rotate_inv(q, jnp.asarray(v)), R.T @ v)
    close(quat.exp(jnp.asarray(axis * angle)), q)


@SETTINGS
@given(vec3)
def test_exp_log_round_trip(phi):
    phi = phi * (3.0 / max(3.0, np.linalg.norm(phi)))  # angle below pi: log is the inverse
    q = quat.exp(jnp.asarray(phi))
    assert abs(float(jnp.linalg.norm(q)) - 1.0) < 1e-14
    close(quat.log(q), phi, 1e-11)
    close(quat.log(-q), phi, 1e-11)  # double cover


def test_exp_log_gradients_at_zero():
    z = jnp.zeros(3)
    for jac in (jax.jacfwd, jax.jacrev):
        Je = jax.jit(jac(quat.exp))(z)
        close(Je, np.vstack([np.zeros(3), 0.5 * np.eye(3)]))
        Jl = jax.jit(jac(quat.log))(jnp.array([1.0, 0.0, 0.0, 0.0]))
        close(Jl, np.hstack([np.zeros((3, 1)), 2.0 * np.eye(3)]))
    # a loss through exp and log at the identity: finite and right
    loss = lambda p: jnp.sum(quat.log(quat.exp(p)) * jnp.array([1.0, 2.0, 3.0]))
    close(jax.jit(jax.grad(loss))(z), [1.0, 2.0, 3.0], 1e-12)
    f = jax.jit(quat.exp)
    check_grads(f, (jnp.array([1e-9, -2e-9, 0.0]),), order=1, modes=("fwd", "rev"))
    check_grads(f, (jnp.array([0.3, -0.7, 1.1]),), order=1, modes=("fwd", "rev"))


@SETTINGS
@given(unit_quats(), vec3)
def test_difference_inverts_integrate(q0, w):
    q1 = quat.integrate(q0, jnp.asarray(w) * 0.3, 1.0)
    close_pm(quat.integrate(q0, quat.difference(q0, q1), 1.0), q1)
    close(quat.difference(q0, q1), jnp.asarray(w) * 0.3)  # |w| 0.3 < pi: the shortest arc

@SETTINGS
@given(unit_quats())
def test_from_rotmat_round_trip(q):
    R = quat.to_rotmat(q)
    for q_back in (quat.from_rotmat(np.asarray(R)), QFR(R)):
        close_pm(q_back, q)
        assert q_back[0] >= 0.0


def test_from_rotmat_all_branches_and_grad():
    # rotations by ~pi about each axis exercise the x, y, z branches; identity the w branch
    angles = [0.0, np.pi - 1e-3, np.pi - 1e-3, np.pi - 1e-3, np.pi]
    axes = [[1, 0, 0], [1, 0.1, 0], [0.1, 1, 0], [0, 0.1, 1], [0.6, 0.0, 0.8]]
    for ax, an in zip(axes, angles, strict=True):
        ax = np.array(ax, float) / np.linalg.norm(ax)
        R = rodrigues(ax, an)
        q_ref = Rotation.from_matrix(R).as_quat()  # scalar-last
        q_ref = np.r_[q_ref[3], q_ref[:3]]
        q_ref = q_ref * (1.0 if q_ref[0] > 0 else -1.0)
        close(QFR(jnp.asarray(R)), q_ref, 1e-12)
    Rs = jnp.stack([jnp.asarray(rodrigues(np.array([0, 0, 1.0]), a)) for a in (0.1, 2.0, 3.0)])
    qs = jax.jit(jax.vmap(quat.from_rotmat))(Rs)
    close(jax.vmap(quat.to_rotmat)(qs), Rs)
    g = jax.jit(jax.grad(lambda R: jnp.sum(quat.from_rotmat(R) ** 3)))(jnp.eye(3))
    assert np.all(np.isfinite(np.asarray(g)))


# ------------------------------------------------------------------------------ Euler angles


@SETTINGS
@given(st.floats(-3.1, 3.1), st.floats(-1.5, 1.5), st.floats(-3.1, 3.1))
def test_euler_zyx(psi, theta, phi):
    ypr = jnp.array([psi, theta, phi])
    ref = Rotation.from_euler("ZYX", [psi, theta, phi])  # intrinsic z-y'-x''
    close(rot.rotmat_from_euler_zyx(ypr), ref.as_matrix())
    close(quat.to_rotmat(rot.quat_from_euler_zyx(ypr)), ref.as_matrix())
    x, y, z, w = ref.as_quat()
    q_ref = np.array([w, x, y, z])
    q = np.asarray(rot.quat_from_euler_zyx(ypr))
    close(q * np.sign(q @ q_ref), q_ref)
    close(rot.euler_zyx_from_quat(jnp.asarray(q)), ypr, 1e-9)
    close(rot.euler_zyx_from_rotmat(jnp.asarray(ref.as_matrix())), ypr, 1e-9)


@SETTINGS
@given(unit_quats(), st.floats(0.2, 3.0))
def test_rpy_from_quat(q, scale):
    """Roll, pitch, yaw: the ZYX angles reversed, for quaternions of any norm; checked against
    the textbook closed form (atan2/asin of the quaternion entries)."""
    w, x, y, z = np.asarray(q) * scale
    n2 = w * w + x * x + y * y + z * z
    ref = [
        np.arctan2(2 * (w * x + y * z), n2 - 2 * (x * x + y * y)),
        np.arcsin(np.clip(2 * (w * y - z * x) / n2, -1.0, 1.0)),
        np.arctan2(2 * (w * z + x * y), n2 - 2 * (y * y + z * z)),
    ]
    rpy = jax.jit(rot.rpy_from_quat)(jnp.asarray(q) * scale)

    def wrapped(a, b):  # angles equal modulo 2π: at the ±π branch cut a signed zero decides
        return np.angle(np.exp(1j * (np.asarray(a) - np.asarray(b))))

    close(wrapped(rpy, ref), 0.0, 1e-7)  # asin loses digits near gimbal lock; atan2 does not
    # the same angles from the unit quaternion, to rounding: near gimbal lock roll and yaw
    # alone are ill-conditioned (their rounding grows as 1 / cos(pitch))
    zyx = rot.euler_zyx_from_quat(jnp.asarray(q))
    close(wrapped(rpy, zyx[::-1]), 0.0, 1e-12 / max(abs(np.cos(ref[1])), 1e-6))

@SETTINGS
@given(st.floats(-3.1, 3.1), st.floats(0.05, 3.09), st.floats(-3.1, 3.1))
def test_euler_zxz(phi, theta, psi):
    zxz = jnp.array([phi, theta, psi])
    ref = Rotation.from_euler("ZXZ", [phi, theta, psi])  # intrinsic z-x'-z''
    close(rot.rotmat_from_euler_zxz(zxz), ref.as_matrix())
    close(quat.to_rotmat(rot.quat_from_euler_zxz(zxz)), ref.as_matrix())
    close(rot.euler_zxz_from_quat(rot.quat_from_euler_zxz(zxz)), zxz, 1e-9)
    close(rot.euler_zxz_from_rotmat(jnp.asarray(ref.as_matrix())), zxz, 1e-9)


@pytest.mark.slow
def test_euler_jit_vmap_grad():
    angles = jnp.array([[0.3, -0.2, 1.0], [-2.0, 0.7, 0.1]])
    close(jax.jit(jax.vmap(rot.quat_from_euler_zyx))(angles), rot.quat_from_euler_zyx(angles))
    for f in (rot.quat_from_euler_zyx, rot.rotmat_from_euler_zxz):
        check_grads(jax.jit(f), (angles[0],), order=1, modes=("fwd", "rev"))
    q = rot.quat_from_euler_zyx(angles[0])
    for f in (rot.euler_zyx_from_quat, rot.euler_zxz_from_quat):
        check_grads(jax.jit(f), (q,), order=1, modes=("fwd", "rev"))
    # d(euler)/d(euler) through the quaternion is the identity
    J = jax.jacfwd(lambda a: rot.euler_zyx_from_quat(rot.quat_from_euler_zyx(a)))(angles[0])
    close(J, np.eye(3), 1e-10)


# ------------------------------------------------------------------------------ rate maps


def wu2019_S_printed(q_sl):
    """Wu et al. (2019) eq. 5/11 typed from the paper: S = [2(eta I - sigma^x), -2 sigma]."""
    s, eta = np.asarray(q_sl[:3]), float(q_sl[3])
    sx = np.array([[0, -s[2], s[1]], [s[2], 0, -s[0]], [-s[1], s[0], 0]])
    return np.hstack([2 * (eta * np.eye(3) - sx), -2 * s[:, None]])


def wu2019_Gamma_printed(q_sl):
    """Wu et al. (2019) eq. 8/32 typed from the paper: Gamma = 1/2 [eta I + sigma^x; -sigma^T]."""
    s, eta = np.asarray(q_sl[:3]), float(q_sl[3])
    sx = np.array([[0, -s[2], s[1]], [s[2], 0, -s[0]], [-s[1], s[0], 0]])
    return 0.5 * np.vstack([eta * np.eye(3) + sx, -s[None, :]])


XU2014_G = np.array(  # eq. 7 as printed
    [
        [[0, 1, 0, 0], [-1, 0, 0, 0], [0, 0, 0, -1], [0, 0, 1, 0]],
        [[0, 0, 1, 0], [0, 0, 0, 1], [-1, 0, 0, 0], [0, -1, 0, 0]],
        [[0, 0, 0, 1], [0, 0, -1, 0], [0, 1, 0, 0], [-1, 0, 0, 0]],
    ],
    dtype=float,
)


@SETTINGS
@given(unit_quats())
def test_scalar_last_rate_matrices(q):
    q_sl = quat.to_scalar_last(q)
    S, Gam = rot.body_rate_matrix_scalar_last(q_sl), rot.quat_rate_matrix_scalar_last(q_sl)
    close(S, wu2019_S_printed(q_sl))
    close(Gam, wu2019_Gamma_printed(q_sl))
    close(S @ Gam, np.eye(3))  # eq. 30 / 33
    close(S @ q_sl, np.zeros(3))  # the unit-norm direction is in the null space of S
    # Xi Upsilon = 0 (eq. 29): the constraint row [2 sigma^T, 2 eta] annihilates Gamma
    close(2.0 * q_sl @ Gam, np.zeros(3))
    # on a non-unit quaternion S Gamma = |q|^2 I
    close(rot.body_rate_matrix_scalar_last(2.0 * q_sl) @ rot.quat_rate_matrix_scalar_last(2.0 * q_sl), 4.0 * np.eye(3))


@SETTINGS
@given(unit_quats())
def test_G_E_identities(q):
    Gq, Eq = rot.G(q), rot.E(q)
    close(Gq @ Gq.T, np.eye(3))
    close(Eq @ Eq.T, np.eye(3))
    close(Gq @ q, np.zeros(3))
    close(Eq @ q, np.zeros(3))
    close(Eq @ Gq.T, quat.to_rotmat(q))  # R = E G^T
    # Xu & Zhong (2014) eq. 6-9 as printed: omega_i = 2 q.G_i.qdot, G_e = -[2 G_i q]^T = 2 G
    close(-np.einsum("ikl,l->ik", XU2014_G, np.asarray(q)), Gq)
    close(rot.body_rate_bilinear_forms(), XU2014_G, 0.0)
    close(rot.body_rate_matrix(q), -2.0 * np.einsum("ikl,l->ik", XU2014_G, np.asarray(q)))
    qdot = jnp.array([0.3, -0.1, 0.7, 0.2])
    close(rot.body_rate_matrix(q) @ qdot, [2 * q @ XU2014_G[i] @ qdot for i in range(3)])


@SETTINGS
@given(unit_quats(), vec3)
def test_rates_against_finite_differences(q0, w):
    """q(t) = q0 ⊗ exp(w t) turns at constant body rate w; exp(w t) ⊗ q0 at world rate w."""
    h = 1e-5
    t0 = 0.37
    qb = lambda t: quat.mul(q0, quat.exp(w * t))
    qw = lambda t: quat.mul(quat.exp(w * t), q0)
    for path, rate_of, qdot_of in (
        (qb, rot.body_rate, rot.quat_rate_from_body_rate),
        (qw, rot.world_rate, rot.quat_rate_from_world_rate),
    ):
        q = path(t0)
        qdot_fd = (path(t0 + h) - path(t0 - h)) / (2 * h)
        close(qdot_of(q, jnp.asarray(w)), qdot_fd, 1e-8)
        close(rate_of(q, qdot_fd), w, 1e-8)
    q = qb(t0)
    qdot = rot.quat_rate_from_body_rate(q, jnp.asarray(w))
    close(2.0 * rot.G(q) @ qdot, w)
    close(0.5 * rot.G(q).T @ w, qdot)
    close(2.0 * rot.E(q) @ qdot, quat.to_rotmat(q) @ w)
    close(rot.body_rate_matrix_scalar_last(quat.to_scalar_last(q)) @ quat.to_scalar_last(qdot), w)
    close(rot.quat_rate_matrix_scalar_last(quat.to_scalar_last(q)) @ w, quat.to_scalar_last(qdot))
    # Rdot = R [w_body]x = [w_world]x R
    Rdot_fd = (quat.to_rotmat(qb(t0 + h)) - quat.to_rotmat(qb(t0 - h))) / (2 * h)
    R = quat.to_rotmat(q)
    close(Rdot_fd, R @ rot.skew(jnp.asarray(w)), 1e-8)
    close(Rdot_fd, rot.skew(R @ w) @ R, 1e-8)


def test_rate_maps_jit_vmap_grad():
    qs = jax.vmap(rot.quat_from_euler_zyx)(jnp.array([[0.1, 0.2, 0.3], [1.0, -0.5, 2.0]]))
    ws = jnp.array([[1.0, -2.0, 0.5], [0.0, 0.3, -0.1]])
    Gs = jax.jit(jax.vmap(rot.G))(qs)
    close(Gs, rot.G(qs))
    close(jnp.einsum("bij,bi->bj", Gs, ws) * 0.5, rot.quat_rate_from_body_rate(qs, ws))
    for f in (rot.body_rate, rot.world_rate, rot.quat_rate_from_body_rate):
        x = ws[0] if f is rot.quat_rate_from_body_rate else qs[1]
        check_grads(jax.jit(f), (qs[0], x), order=1, modes=("fwd", "rev"))
    check_grads(jax.jit(rot.G), (qs[0],), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------- T_ij (Xu & Zhong 2014)


def test_world_to_body_quadratic_forms_printed():
    F = np.asarray(rot.world_to_body_quadratic_forms())
    # the four matrices printed in eq. 30
    close(F[0, 0], np.diag([1.0, 1, -1, -1]), 0.0)
    close(F[1, 1], np.diag([1.0, -1, 1, -1]), 0.0)
    close(F[0, 1], [[0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0]], 0.0)
    close(F[1, 2], [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], 0.0)


@SETTINGS
@given(unit_quats())
def test_world_to_body_quadratic_forms_regenerate_T(q):
    """Eq. 29 with the nine matrices of eq. 30/31 reproduces eq. 3, T = R^T (world -> body)."""
    F = rot.world_to_body_quadratic_forms()
    T = jnp.einsum("k,ijkl,l->ij", q, F, q)
    e0, e1, e2, e3 = np.asarray(q)
    T_printed = np.array(  # eq. 3 typed from the paper
        [
            [e0**2 + e1**2 - e2**2 - e3**2, 2 * (e1 * e2 + e0 * e3), 2 * (e1 * e3 - e0 * e2)],
            [2 * (e1 * e2 - e0 * e3), e0**2 - e1**2 + e2**2 - e3**2, 2 * (e2 * e3 + e0 * e1)],
            [2 * (e1 * e3 + e0 * e2), 2 * (e2 * e3 - e0 * e1), e0**2 - e1**2 - e2**2 + e3**2],
        ]
    )
    close(T, T_printed)
    close(rot.world_to_body_rotmat(q), T_printed)
    close(quat.to_rotmat(q).T, T_printed)


@SETTINGS
@given(unit_quats(), st.lists(st.floats(-1.0, 1.0), min_size=13, max_size=13))
def test_rotational_kinetic_energy(q, xs):
    xs = np.array(xs)
    L = np.tril(xs[:9].reshape(3, 3)) + 1.5 * np.eye(3)
    J = jnp.asarray(L @ L.T)  # random SPD inertia
    qdot = jnp.asarray(xs[9:])  # arbitrary, with a component along q
    omega = 2.0 * quat.mul(quat.conj(q), qdot)[1:]  # omega_body = 2 vec(q* ⊗ qdot)
    ref = 0.5 * omega @ J @ omega
    close(rot.rotational_kinetic_energy(J, q, qdot), ref)
    # Xu & Zhong (2014) eq. 6 and 10: sum_ij 1/2 J_ij omega_i omega_j, omega_i = 2 q.G_i.qdot
    om = np.array([2 * np.asarray(q) @ XU2014_G[i] @ np.asarray(qdot) for i in range(3)])
    close(0.5 * om @ np.asarray(J) @ om, ref)
    g = KE_GRAD(J, q, qdot)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in g)


@pytest.mark.parametrize("f", [rot.rot_x, rot.rot_y, rot.rot_z])
def test_axis_rotations(f):
    axis = {rot.rot_x: [1, 0, 0], rot.rot_y: [0, 1, 0], rot.rot_z: [0, 0, 1]}[f]
    close(f(0.7), rodrigues(np.array(axis, float), 0.7))
