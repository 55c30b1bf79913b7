"""6-D spatial algebra (diffmb.spatial.spatial) against the explicit 6x6 formulas of
Featherstone, Rigid Body Dynamics Algorithms (2008), ch. 2, written out here in numpy, and
against physical identities (kinetic energy and power invariance under change of frame).
"""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads
from scipy.spatial.transform import Rotation

from diffmb.spatial import spatial as sp

SETTINGS = settings(max_examples=25, deadline=None)


def close(a, b, tol=1e-12):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=tol)


def sk(a):
    return np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])


# Featherstone ch. 2, typed out independently with numpy
def crm_ref(v):
    w, u = v[:3], v[3:]
    return np.block([[sk(w), np.zeros((3, 3))], [sk(u), sk(w)]])


def X_ref(E, r):  # eq. 2.24: ^B X_A = rot(E) xlt(r)
    rot = np.block([[E, np.zeros((3, 3))], [np.zeros((3, 3)), E]])
    xlt = np.block([[np.eye(3), np.zeros((3, 3))], [-sk(r), np.eye(3)]])
    return rot @ xlt


def mcI_ref(m, c, Ic):  # eq. 2.63
    C = sk(c)
    return np.block([[Ic + m * C @ C.T, m * C], [m * C.T, m * np.eye(3)]])


@st.composite
def frames(draw):
    x = np.array(draw(st.lists(st.floats(-2.0, 2.0), min_size=6, max_size=6)))
    E = Rotation.from_rotvec(x[:3]).as_matrix()
    return jnp.asarray(E), jnp.asarray(x[3:])


vec6 = st.lists(st.floats(-3.0, 3.0), min_size=6, max_size=6).map(lambda v: jnp.asarray(v))


@st.composite
def inertias(draw):
    x = np.array(draw(st.lists(st.floats(-1.0, 1.0), min_size=7, max_size=7)))
    m = 1.0 + 2.0 * abs(x[0])
    c = x[1:4]
    # principal moments satisfying the triangle inequality, random principal axes
    a = 0.5 + np.abs(x[4:7])
    d = np.array([a[1] + a[2], a[0] + a[2], a[0] + a[1]])
    Q = Rotation.from_rotvec(x[4:7] * 2.0).as_matrix()
    Ic = Q @ np.diag(d) @ Q.T
    return jnp.asarray(m), jnp.asarray(c), jnp.asarray(Ic)


@SETTINGS
@given(vec6, vec6, vec6)
def test_cross_products(v, u, f):
    C = crm_ref(np.asarray(v))
    close(sp.crm(v), C)
    close(sp.crf(v), -C.T)
    close(sp.cross_motion(v, u), C @ np.asarray(u))
    close(sp.cross_force(v, f), -C.T @ np.asarray(f))
    close(sp.cross_motion(v, v), np.zeros(6))
    # duality: (v x u) . f = - u . (v x* f)
    close(sp.cross_motion(v, u) @ f, -(u @ sp.cross_force(v, f)), 1e-10)


@SETTINGS
@given(frames(), vec6, vec6)
def test_transforms(fr, m, f):
    E, r = fr
    X = X_ref(np.asarray(E), np.asarray(r))
    close(sp.to_matrix(E, r), X)
    Xinv = np.linalg.inv(X)
    close(Xinv @ X, np.eye(6))
    close(sp.apply_motion(E, r, m), X @ np.asarray(m))
    close(sp.apply_motion_inverse(E, r, m), Xinv @ np.asarray(m))
    close(sp.apply_force(E, r, f), np.linalg.inv(X).T @ np.asarray(f))  # X* = X^-T
    close(sp.apply_force_transpose(E, r, f), X.T @ np.asarray(f))
    Ei, ri = sp.inverse(E, r)
    close(sp.to_matrix(Ei, ri), Xinv)
    close(sp.to_matrix(Ei, ri) @ sp.to_matrix(E, r), np.eye(6))
    # power m . f is frame-invariant
    close(sp.apply_motion(E, r, m) @ sp.apply_force(E, r, f), m @ f, 1e-10)
    # the transform of a cross product: X (v x u) = (X v) x (X u)
    u = jnp.flip(m)
    lhs = sp.apply_motion(E, r, sp.cross_motion(m, u))
    rhs = sp.cross_motion(sp.apply_motion(E, r, m), sp.apply_motion(E, r, u))
    close(lhs, rhs, 1e-10)


@SETTINGS
@given(frames(), frames())
def test_compose(f1, f2):
    E1, r1 = f1
    E2, r2 = f2
    E, r = sp.compose(E2, r2, E1, r1)
    close(
        sp.to_matrix(E, r),
        X_ref(np.asarray(E2), np.asarray(r2)) @ X_ref(np.asarray(E1), np.asarray(r1)),
    )


@SETTINGS
@given(inertias(), frames(), vec6)
def test_spatial_inertia(inert, fr, v):
    m, c, Ic = inert
    E, r = fr
    I_ref = mcI_ref(float(m), np.asarray(c), np.asarray(Ic))
    close(sp.spatial_inertia(m, c, Ic), I_ref)
    Is = sp.spatial_inertia_structured(m, c, Ic)
    close(sp.inertia_to_matrix(Is), I_ref)
    close(sp.inertia_apply(Is, v), I_ref @ np.asarray(v))
    # X^T I X, structured and blockwise
    X = X_ref(np.asarray(E), np.asarray(r))
    IA_ref = X.T @ I_ref @ X
    close(sp.inertia_to_matrix(sp.inertia_transform(E, r, Is)), IA_ref, 1e-10)
    close(sp.inertia_transform(E, r, jnp.asarray(I_ref)), IA_ref, 1e-10)
    # general (non-symmetric) 6x6 through the blockwise path
    M = np.arange(36.0).reshape(6, 6) / 7.0 - 2.0
    close(sp.inertia_transform(E, r, jnp.asarray(M)), X.T @ M @ X, 1e-10)
    # kinetic energy 1/2 v^T I v is frame-invariant: v_B = X v_A
    vB = sp.apply_motion(E, r, v)
    ke_A = 0.5 * v @ sp.inertia_apply(sp.inertia_transform(E, r, Is), v)
    ke_B = 0.5 * vB @ sp.inertia_apply(Is, vB)
    close(ke_A, ke_B, 1e-10)
    # the transformed inertia is that of the same body: mass, com r + E^T c, Ic rotated
    IA = sp.inertia_transform(E, r, Is)
    c_A = np.asarray(r) + np.asarray(E).T @ np.asarray(c)
    Ic_A = np.asarray(E).T @ np.asarray(Ic) @ np.asarray(E)
    close(sp.inertia_to_matrix(IA), mcI_ref(float(m), c_A, Ic_A), 1e-10)
    # positive definite; sum of inertias
    assert np.all(np.linalg.eigvalsh(I_ref) > 0)
    close(sp.inertia_to_matrix(sp.inertia_add(Is, Is)), 2 * I_ref)
    # momentum rate identity: d/dt(I v) for a body moving with v is v x* (I v) (Featherstone 2.74)
    # check the power identity v . (v x* I v) = 0
    close(v @ sp.cross_force(v, sp.inertia_apply(Is, v)), 0.0, 1e-9)


def test_jit_vmap_grad():
    rng = np.random.default_rng(0)
    Es = jnp.asarray(Rotation.from_rotvec(rng.normal(size=(4, 3))).as_matrix())
    rs = jnp.asarray(rng.normal(size=(4, 3)))
    ms = jnp.asarray(rng.normal(size=(4, 6)))
    out = jax.jit(jax.vmap(sp.apply_motion))(Es, rs, ms)
    for k in range(4):
        close(out[k], sp.to_matrix(Es[k], rs[k]) @ ms[k])
    Is = sp.spatial_inertia_structured(jnp.asarray(2.0), jnp.array([0.1, 0.2, -0.3]), jnp.eye(3))
    batched = jax.vmap(sp.inertia_transform, in_axes=(0, 0, None))(Es, rs, Is)
    assert batched.Ibar.shape == (4, 3, 3)
    for f, args in (
        (sp.apply_motion, (Es[0], rs[0], ms[0])),
        (sp.apply_force_transpose, (Es[0], rs[0], ms[1])),
        (sp.cross_force, (ms[0], ms[1])),
        (
            lambda E, r, h: sp.inertia_transform(E, r, sp.SpatialInertia(Is.mass, h, Is.Ibar)).Ibar,
            (Es[0], rs[0], Is.h),
        ),
    ):
        check_grads(jax.jit(f), args, order=1, modes=("fwd", "rev"))
