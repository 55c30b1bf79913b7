"""Forward dynamics, M(q) and bias force against sympy.physics.mechanics (symbolic oracles).

Each system is written down once as plain numbers (``_PLANAR``, ``_CHAIN_*``); from those numbers we
generate (a) MJCF text that diffmb loads through MuJoCo's compiler and (b) a sympy mechanics model
(``LagrangesMethod`` for the planar double pendulum, ``KanesMethod`` for the 3-D chains). The sympy
equations M(q) q̈ = F(q, q̇, τ) are lambdified and evaluated at random states; diffmb's four
``forward_dynamics`` methods, ``mass_matrix`` and ``bias_force`` must match to 1e-10 relative
(max|Δ| / max(1, max|ref|)). As a check that the MJCF and the sympy model are the same physical
system, the sympy accelerations are also compared with MuJoCo's own ``qacc``.

MuJoCo conventions used by the generator: body ``pos``/``quat`` relative to the parent body frame;
a hinge rotates the body frame about ``axis`` (body-frame components) through the anchor ``pos``
(body frame); a slide translates the body along ``axis``; ``<inertial pos>`` is the com in the
body frame and ``fullinertia`` the inertia about the com in body-frame axes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import sympy as sp
from sympy.physics import mechanics as me

import diffmb
from diffmb.io.mjcf import from_mjmodel

TOL = 1e-10
G = 9.81
METHODS = ("aba", "crba", "lagrange", "kane")
N_STATES = 6


def rel_err(x, ref):
    x, ref = np.asarray(x, float), np.asarray(ref, float)
    return float(np.max(np.abs(x - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def _unit(a):
    a = np.asarray(a, float)
    return a / np.linalg.norm(a)


def _quat_R(q):
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _rand_inertia(rng, scale):
    """A full, non-diagonal, physically valid (triangle inequality) inertia about the com."""
    A = rng.normal(size=(3, 3))
    Rq, _ = np.linalg.qr(A)
    d = scale * np.array([1.0, 1.4, 1.9])  # principal moments: d1 + d2 > d3
    I = Rq @ np.diag(d) @ Rq.T
    return 0.5 * (I + I.T)


# ------------------------------------------------------------------------------------------
# The systems, written down once.
# ------------------------------------------------------------------------------------------

# Planar double pendulum: two hinges about world/body y, gravity −z, rods hanging along −z,
# coms slightly off the rod line (still in the x–z plane), inertias diagonal (Iyy is what matters).
_PLANAR = [
    dict(name="b1", pos=(0.0, 0.0, 0.0), quat=(1.0, 0.0, 0.0, 0.0), joint="hinge",
         jpos=(0.0, 0.0, 0.0), axis=(0.0, 1.0, 0.0), mass=1.3, com=(0.05, 0.0, -0.45),
         inertia=np.diag([0.09, 0.11, 0.03])),
    dict(name="b2", pos=(0.0, 0.0, -0.9), quat=(1.0, 0.0, 0.0, 0.0), joint="hinge",
         jpos=(0.0, 0.0, 0.0), axis=(0.0, 1.0, 0.0), mass=0.8, com=(-0.03, 0.0, -0.35),
         inertia=np.diag([0.05, 0.06, 0.012])),
]


def _chain(second_joint: str):
    """3-D two-body chain: non-axis-aligned, non-parallel axes, offset anchors and coms, rotated
    body frames, full inertias. ``second_joint`` is "hinge" or "slide"."""
    rng = np.random.default_rng(7)
    return [
        dict(name="b1", pos=(0.1, -0.2, 0.3), quat=tuple(_unit([0.9, 0.2, -0.3, 0.1])),
             joint="hinge", jpos=(0.05, 0.1, -0.02), axis=tuple(_unit([0.3, 0.8, 0.5])),
             mass=1.7, com=(0.12, -0.07, -0.31), inertia=_rand_inertia(rng, 0.04)),
        dict(name="b2", pos=(0.25, 0.1, -0.6), quat=tuple(_unit([0.7, -0.4, 0.3, 0.5])),
             joint=second_joint, jpos=(-0.04, 0.06, 0.08), axis=tuple(_unit([-0.6, 0.2, 0.7])),
             mass=0.9, com=(-0.08, 0.15, -0.22), inertia=_rand_inertia(rng, 0.02)),
    ]


_CHAIN_HH = _chain("hinge")
_CHAIN_HS = _chain("slide")


# ------------------------------------------------------------------------------------------
# Generator 1: MJCF text (a serial chain).
# ------------------------------------------------------------------------------------------


def _f(x):
    return " ".join(repr(float(v)) for v in np.ravel(x))


def mjcf(spec) -> str:
    body_xml = ""
    for b in reversed(spec):
        I = b["inertia"]
        full = [I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]]
        body_xml = (
            f'<body name="{b["name"]}" pos="{_f(b["pos"])}" quat="{_f(b["quat"])}">'
            f'<joint name="j_{b["name"]}" type="{b["joint"]}" pos="{_f(b["jpos"])}" '
            f'axis="{_f(b["axis"])}"/>'
            f'<inertial pos="{_f(b["com"])}" mass="{_f(b["mass"])}" fullinertia="{_f(full)}"/>'
            f"{body_xml}</body>"
        )
    return (
        '<mujoco><compiler angle="radian"/>'
        f'<option gravity="0 0 {-G!r}" integrator="Euler"/>'
        f"<worldbody>{body_xml}</worldbody></mujoco>"
    )


# ------------------------------------------------------------------------------------------
# Generator 2: sympy mechanics from the same spec.
# ------------------------------------------------------------------------------------------


def _S(x):
    """An exact sympy Float of a Python float (keeps all 53 bits)."""
    return sp.Float(float(x), 30)


def _vec(frame, x):
    return sum((_S(c) * e for c, e in zip(x, (frame.x, frame.y, frame.z), strict=True)),
               me.Vector(0))


def _inertia_dyadic(frame, I):
    return me.inertia(frame, _S(I[0, 0]), _S(I[1, 1]), _S(I[2, 2]), _S(I[0, 1]), _S(I[1, 2]),
                      _S(I[2, 0]))


def _joint_basis(axis):
    """Ra: orthonormal, columns (t, axis × t, axis) in body-frame components, so that a hinge
    rotation about ``axis`` is Ra Rz(q) Raᵀ. Describing each hinge body in the frame whose z is
    the axis keeps sympy's expressions ~20× smaller than ``orientnew("Axis")`` about a generic
    axis."""
    a = _unit(axis)
    t = np.cross(a, [1.0, 0.0, 0.0] if abs(a[0]) < 0.9 else [0.0, 1.0, 0.0])
    t /= np.linalg.norm(t)
    return np.column_stack([t, np.cross(a, t), a])


def _mat(A):
    return sp.Matrix(np.asarray(A, float)).applyfunc(_S)


def sympy_system(spec):
    """The chain in sympy: bodies, gravity loads and joint loads (torque pairs on hinges, force
    pairs at coincident points on slides) and q symbols; point velocities by the one- and
    two-point theorems (functions of q and q̇).

    Each body lives in a sympy frame K (the hinge frame for a hinge body, its parent's frame for a
    slide body); ``T`` (numeric) maps the body's MJCF frame components into K components."""
    n = len(spec)
    q = me.dynamicsymbols(f"q1:{n + 1}")
    qd = [sp.diff(qi, me.dynamicsymbols._t) for qi in q]
    tau = sp.symbols(f"tau1:{n + 1}")
    N = me.ReferenceFrame("N")
    O = me.Point("O")
    O.set_vel(N, 0)
    Kp, Tp, Op = N, np.eye(3), O  # parent frame, parent body axes in Kp, parent body origin
    bodies, gravity, joint_loads = [], [], []
    for i, b in enumerate(spec):
        R = Tp @ _quat_R(b["quat"])  # the body's axes at q = 0, in Kp components
        O0 = Op.locatenew(f"O0_{i}", _vec(Kp, Tp @ np.asarray(b["pos"], float)))
        O0.v2pt_theory(Op, N, Kp)
        if b["joint"] == "hinge":
            Ra = _joint_basis(b["axis"])
            H = me.ReferenceFrame(f"H{i}")  # fixed in the parent, z along the hinge axis
            H.orient_explicit(Kp, _mat(R @ Ra))
            K = H.orientnew(f"K{i}", "Axis", (q[i], H.z))
            T = Ra.T
            J = O0.locatenew(f"J{i}", _vec(Kp, R @ np.asarray(b["jpos"], float)))  # anchor
            J.v2pt_theory(O0, N, Kp)
            Ob = J.locatenew(f"Ob{i}", -_vec(K, T @ np.asarray(b["jpos"], float)))
            Ob.v2pt_theory(J, N, K)
            joint_loads += [(K, tau[i] * K.z), (Kp, -tau[i] * H.z)]
        else:  # slide: translation along the axis (fixed in the parent), no rotation
            K, T = Kp, R
            axis = _vec(Kp, R @ _unit(b["axis"]))
            Ob = O0.locatenew(f"Ob{i}", q[i] * axis)
            Ob.set_vel(Kp, qd[i] * axis)
            Ob.v1pt_theory(O0, N, Kp)
        C = Ob.locatenew(f"C{i}", _vec(K, T @ np.asarray(b["com"], float)))
        C.v2pt_theory(Ob, N, K)
        m = _S(b["mass"])
        I = T @ b["inertia"] @ T.T
        bodies.append(me.RigidBody(f"body{i}", C, K, m, (_inertia_dyadic(K, I), C)))
        gravity.append((C, -m * _S(G) * N.z))
        if b["joint"] == "slide":
            # action on the body at its com, reaction on the parent at the coincident point
            # fixed in the parent (velocity by the two-point theorem on the parent)
            joint_loads.append((C, tau[i] * axis))
            if Kp is not N:
                P = me.Point(f"P{i}")
                P.set_vel(N, Op.vel(N) + (Kp.ang_vel_in(N) ^ C.pos_from(Op)))
                joint_loads.append((P, -tau[i] * axis))
        Kp, Tp, Op = K, T, Ob
    return dict(N=N, O=O, q=q, tau=tau, bodies=bodies, gravity=gravity,
                joint_loads=joint_loads)


def _lambdify(q, qd, tau, M, F):
    """M(q), F(q, q̇, τ) as numpy functions of plain arrays (q, q̇ are dynamicsymbols and their
    derivatives or the generalized speeds; lambdify replaces them by dummies)."""
    fM = sp.lambdify([q, qd, tau], M, "numpy", cse=False)
    fF = sp.lambdify([q, qd, tau], F, "numpy", cse=False)
    return lambda x, xd, t: (np.asarray(fM(x, xd, t), float),
                             np.asarray(fF(x, xd, t), float).ravel())


def lagrange_oracle(spec):
    """LagrangesMethod: f(q, q̇, τ) -> (M, forcing) with M q̈ = forcing. Gravity enters through
    the potential energy, joint torques through the force list."""
    s = sympy_system(spec)
    q, tau, N, O = s["q"], s["tau"], s["N"], s["O"]
    qd = [sp.diff(qi, me.dynamicsymbols._t) for qi in q]
    for body in s["bodies"]:
        body.potential_energy = body.mass * _S(G) * body.masscenter.pos_from(O).dot(N.z)
    LM = me.LagrangesMethod(me.Lagrangian(N, *s["bodies"]), q, forcelist=s["joint_loads"],
                            frame=N)
    LM.form_lagranges_equations()
    return _lambdify(q, qd, tau, LM.mass_matrix, LM.forcing)


def kane_oracle(spec):
    """KanesMethod with u = q̇: f(q, u, τ) -> (M, forcing) with M u̇ = forcing."""
    s = sympy_system(spec)
    q, tau, N = s["q"], s["tau"], s["N"]
    n = len(q)
    u = me.dynamicsymbols(f"u1:{n + 1}")
    qd = [sp.diff(qi, me.dynamicsymbols._t) for qi in q]
    # the velocities are functions of q̇; KanesMethod maps q̇ -> u through kd_eqs
    KM = me.KanesMethod(N, q_ind=q, u_ind=u, kd_eqs=[a - b for a, b in zip(qd, u, strict=True)])
    KM.kanes_equations(s["bodies"], s["gravity"] + s["joint_loads"])
    return _lambdify(q, u, tau, KM.mass_matrix, KM.forcing)


# ------------------------------------------------------------------------------------------
# diffmb side: one jitted, vmapped function returning every quantity.
# ------------------------------------------------------------------------------------------


@jax.jit
@functools.partial(jax.vmap, in_axes=(None, 0, 0, 0))
def _all_quantities(model, q, v, tau):
    """Every method at a batch of states. The model is an argument (its numbers are leaves, its
    topology static), so systems with the same topology and names share one compilation."""
    acc = tuple(diffmb.forward_dynamics(model, q, v, tau, method=m) for m in METHODS)
    return acc, diffmb.mass_matrix(model, q), diffmb.bias_force(model, q, v)


def _states(rng, n, joint_types):
    q = rng.uniform(-np.pi, np.pi, size=(N_STATES, n))
    for i, jt in enumerate(joint_types):
        if jt == "slide":
            q[:, i] = rng.uniform(-0.5, 0.5, size=N_STATES)
    v = rng.uniform(-3.0, 3.0, size=(N_STATES, n))
    tau = rng.uniform(-2.0, 2.0, size=(N_STATES, n))
    return q, v, tau


def _compare(spec, oracle, seed):
    mj = mujoco.MjModel.from_xml_string(mjcf(spec))
    model = from_mjmodel(mj)
    n = len(spec)
    assert model.nq == model.nv == n
    q, v, tau = _states(np.random.default_rng(seed), n, [b["joint"] for b in spec])
    acc, Ms, bs = _all_quantities(model, jnp.asarray(q), jnp.asarray(v), jnp.asarray(tau))
    md = mujoco.MjData(mj)
    errs = {k: 0.0 for k in (*METHODS, "M", "bias", "mujoco")}
    for k in range(N_STATES):
        Mref, Fref = oracle(q[k], v[k], tau[k])
        qdd_ref = np.linalg.solve(Mref, Fref)
        # sympy's forcing F = τ − bias: joint torques enter one-to-one as generalized forces
        _, F0 = oracle(q[k], v[k], np.zeros(n))
        errs["M"] = max(errs["M"], rel_err(Ms[k], Mref))
        errs["bias"] = max(errs["bias"], rel_err(bs[k], -F0))
        for j, m in enumerate(METHODS):
            errs[m] = max(errs[m], rel_err(acc[j][k], qdd_ref))
        # the oracle of the oracle: MuJoCo on the very same MJCF text
        md.qpos[:], md.qvel[:], md.qfrc_applied[:] = q[k], v[k], tau[k]
        mujoco.mj_forward(mj, md)
        errs["mujoco"] = max(errs["mujoco"], rel_err(md.qacc, qdd_ref))
    return errs


def _assert_small(errs):
    assert errs["mujoco"] < 1e-9, errs  # the MJCF and the sympy model are the same system
    bad = {k: e for k, e in errs.items() if k != "mujoco" and not e <= TOL}
    assert not bad, errs


@pytest.mark.slow
def test_planar_double_pendulum_vs_sympy_lagrange():
    errs = _compare(_PLANAR, lagrange_oracle(_PLANAR), seed=0)
    print("planar double pendulum (LagrangesMethod):", errs)
    _assert_small(errs)


@pytest.mark.parametrize("spec", [_CHAIN_HH, _CHAIN_HS], ids=["hinge-hinge", "hinge-slide"])
def test_3d_two_body_chain_vs_sympy_kane(spec):
    errs = _compare(spec, kane_oracle(spec), seed=1)
    print(f"3-D chain {spec[0]['joint']}-{spec[1]['joint']} (KanesMethod):", errs)
    _assert_small(errs)
