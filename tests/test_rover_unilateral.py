"""The paper's unilateral wheel–ground contact (Xu et al. 2021, eqs. 33–42): the LCP solver,
the rover's statics on it, a lifted wheel, and a differentiable run."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import HeightField, Plane, UnilateralWheelSoil
from diffmb.contacts import terramechanics as tm
from diffmb.dynamics.kinematics import body_coms, body_frames, kinematics
from diffmb.forces import Couplings, solve_lcp
from diffmb.models import rover
from diffmb.studies import rover as study

G = rover.MARS_G


# ---- (a) the LCP solver ---------------------------------------------------------------------


def _brute_lcp(A, b):
    """Every solution of the LCP by trying each active set in numpy (independent of solve_lcp)."""
    m = len(b)
    out = []
    for S in itertools.product([False, True], repeat=m):
        S = np.array(S)
        f = np.zeros(m)
        if S.any():
            f[S] = np.linalg.solve(A[np.ix_(S, S)], -b[S])
        w = A @ f + b
        if np.all(f >= -1e-12) and np.all(w >= -1e-12):
            out.append(f)
    return out


def test_lcp_hand_solved():
    # A = [[2, 1], [1, 2]], b = (-1, 1): f = (1/2, 0), w = (0, 3/2) (checked by hand)
    f, viol = solve_lcp(jnp.array([[2.0, 1.0], [1.0, 2.0]]), jnp.array([-1.0, 1.0]))
    np.testing.assert_allclose(np.asarray(f), [0.5, 0.0], atol=1e-14)
    assert float(viol) < 1e-14
    # non-symmetric: A = [[2, 1], [0.5, 1]], b = (-2, -2): both active, f = (0, 2)? solve:
    # 2 f1 + f2 = 2, 0.5 f1 + f2 = 2 -> f1 = 0, f2 = 2; w = 0
    f, _ = solve_lcp(jnp.array([[2.0, 1.0], [0.5, 1.0]]), jnp.array([-2.0, -2.0]))
    np.testing.assert_allclose(np.asarray(f), [0.0, 2.0], atol=1e-14)
    # an inactive row carries nothing and constrains nothing
    f, _ = solve_lcp(jnp.array([[2.0, 1.0], [1.0, 2.0]]), jnp.array([-1.0, -5.0]),
                     jnp.array([True, False]))
    np.testing.assert_allclose(np.asarray(f), [0.5, 0.0], atol=1e-14)


def test_lcp_against_brute_force_and_complementarity():
    rng = np.random.default_rng(1)
    solve = jax.jit(solve_lcp)
    for _ in range(20):
        B = rng.normal(size=(6, 6))
        A = B @ B.T + 0.5 * np.eye(6) + 0.3 * rng.normal(size=(6, 6))  # non-symmetric P-matrix
        if np.min(np.linalg.eigvalsh(0.5 * (A + A.T))) <= 0:  # keep it positive definite
            continue
        b = rng.normal(size=6)
        f, viol = solve(jnp.asarray(A), jnp.asarray(b))
        f = np.asarray(f)
        w = A @ f + b
        assert np.min(f) >= -1e-10 and np.min(w) >= -1e-10
        assert abs(f @ w) <= 1e-10
        assert float(viol) <= 1e-12
        sols = _brute_lcp(A, b)
        assert len(sols) == 1  # a positive definite A: one solution
        np.testing.assert_allclose(f, sols[0], atol=1e-10)


def test_lcp_checks_shapes():
    with pytest.raises(ValueError, match="shape"):
        solve_lcp(jnp.eye(3), jnp.zeros(2))
    with pytest.raises(ValueError, match="at most"):
        solve_lcp(jnp.eye(11), jnp.zeros(11))


# ---- the rover on the unilateral contact ----------------------------------------------------


def _wheels():
    return [tm.Wheel(f"wheel_{w}", rover.WHEEL_RADIUS, rover.WHEEL_WIDTH, axis=(0, 1, 0),
                     name=w) for w in rover.WHEELS]


def _z0(model):
    w = float(np.sum(model.body_mass)) * G / 6
    t1 = tm.static_sinkage(tm.SOILS[study.SOIL], rover.WHEEL_RADIUS, rover.WHEEL_WIDTH, w, 0.0)
    return float(tm.sinkage_from_angle(t1, rover.WHEEL_RADIUS))


def _locks(model, forces, joints):
    """The file's differential and exact locks q_j = 0 of ``joints`` (one Couplings element)."""
    d = next(f for f in forces if isinstance(f, Couplings))
    rows1, rows2 = [np.asarray(d.coef1[0])], [np.asarray(d.coef2[0])]
    for j in joints:
        e = np.zeros(model.nv)
        e[model.joint_v[model.joint_index(j)]] = 1.0
        rows1.append(e)
        rows2.append(np.zeros(model.nv))
    n = len(rows1)
    poly = np.zeros((n, 5))
    poly[0] = np.asarray(d.polycoef[0])
    ref1 = np.r_[float(d.ref1[0]), np.zeros(n - 1)]
    ref2 = np.r_[float(d.ref2[0]), np.zeros(n - 1)]
    return Couplings(np.array(rows1), np.array(rows2), ref1, ref2, poly, 0.0, 0.0, d.dof_qadr,
                     names=("differential", *joints), exact=True)


_forces_at = eqx.filter_jit(lambda model, q, fs: diffmb.unilateral_forces(
    model, q, jnp.zeros(model.nv), forces=fs))


_separation = eqx.filter_jit(lambda el, model, q: el.separation(model, q))


@eqx.filter_jit
def _body_points(model, q):
    kin = kinematics(model, q, jnp.zeros(model.nv))
    _, pb = body_frames(model, kin)
    return pb + kin.origin, body_coms(model, kin) + kin.origin


def _geometry(model, q):
    """World origins and centres of mass (nbody, 3) of the bodies at q."""
    pos, com = _body_points(model, q)
    return np.asarray(pos), np.asarray(com)


def test_statics_on_flat_ground_matches_the_hand_load_split():
    """At rest on flat ground with the rockers held to the differential's shafts and the
    bogies free, the rocker–bogie is statically determinate: Σ N, the moments about x and y,
    each bogie's moment about its pivot and the differential's equal torques on both sides
    give the six normal forces (solved here from the bodies' masses and positions)."""
    model, forces, _ = rover.load()
    z0 = _z0(model)
    # flat ground as the lifted-wheel test's height field and a third lock on a wheel's spin
    # (at rest it carries no load): the same shapes, one compilation for both tests
    el = UnilateralWheelSoil(_wheels(), _pit(0.0, 0.0, depth=0.0), tm.SOILS[study.SOIL], z0,
                             model=model)
    q = study._settled_q0(model)  # the file's pose lowered by z0: every separation 0
    np.testing.assert_allclose(np.asarray(_separation(el, model, q)), 0.0, atol=1e-12)
    lock = _locks(model, forces, ("rocker_l", "rocker_r", "wheel_lf"))
    f = np.asarray(_forces_at(model, q, (lock, el)))
    mass = np.asarray(model.body_mass)
    weight = float(np.sum(mass)) * G
    assert abs(np.sum(f) / weight - 1.0) < 1e-8

    pos, com = _geometry(model, q)
    wx = np.array([pos[model.body_index(f"wheel_{w}"), 0] for w in rover.WHEELS])
    wy = np.array([pos[model.body_index(f"wheel_{w}"), 1] for w in rover.WHEELS])
    rows, rhs = [np.ones(6), wx, wy], [weight, G * mass @ com[:, 0], G * mass @ com[:, 1]]
    sides = {"l": [0, 1, 2], "r": [3, 4, 5]}
    torque = {}
    for s, (f_, m_, r_) in sides.items():
        bog = [f"bogie_{s}", f"steer_{s}m", f"wheel_{s}m", f"steer_{s}r", f"wheel_{s}r"]
        xb = pos[model.body_index(f"bogie_{s}"), 0]
        ib = [model.body_index(b) for b in bog]
        row = np.zeros(6)
        row[[m_, r_]] = wx[[m_, r_]] - xb
        rows.append(row)
        rhs.append(G * mass[ib] @ (com[ib, 0] - xb))
        side = [f"diff_{s}", f"rocker_{s}", f"steer_{s}f", f"wheel_{s}f", *bog]
        xd = pos[model.body_index(f"diff_{s}"), 0]
        idd = [model.body_index(b) for b in side]
        row = np.zeros(6)
        row[[f_, m_, r_]] = -(wx[[f_, m_, r_]] - xd)
        torque[s] = (row, G * mass[idd] @ (com[idd, 0] - xd))  # T = row·N + const
    rows.append(torque["l"][0] - torque["r"][0])
    rhs.append(torque["r"][1] - torque["l"][1])
    hand = np.linalg.solve(np.array(rows), np.array(rhs))
    np.testing.assert_allclose(f, hand, rtol=1e-8, atol=1e-8 * weight)
    assert hand[2] > hand[0]  # the rear wheels carry more than the front in this layout


def _pit(x, y, depth=0.1, half=0.25):
    """A flat ground with a square pit of ``depth`` around (x, y)."""
    xs = np.arange(-2.0, 2.0 + 1e-9, 0.05)
    H = np.zeros((len(xs), len(xs)))
    near = (np.abs(xs[:, None] - x) < half) & (np.abs(xs[None, :] - y) < half)
    H[near] = -depth
    return HeightField(H, origin=(-2.0, -2.0), spacing=(0.05, 0.05), name="pit")


def test_lifted_wheel_carries_nothing():
    """The left front wheel over a pit: f = 0 there, and the five others (rockers and the
    differential held, bogies free: determinate) carry the weight."""
    model, forces, _ = rover.load()
    z0 = _z0(model)
    q = study._settled_q0(model)
    pos, _ = _geometry(model, q)
    c = pos[model.body_index("wheel_lf")]
    el = UnilateralWheelSoil(_wheels(), _pit(c[0], c[1]), tm.SOILS[study.SOIL], z0, model=model)
    s = np.asarray(_separation(el, model, q))
    assert s[0] > 0.05 and np.all(np.abs(s[1:]) < 1e-12)
    lock = _locks(model, forces, ("rocker_l", "rocker_r", "diff_l"))
    f = np.asarray(_forces_at(model, q, (lock, el)))
    weight = float(np.sum(model.body_mass)) * G
    assert f[0] == 0.0
    assert np.all(f[1:] > 0)
    assert abs(np.sum(f) / weight - 1.0) < 1e-8


def test_checks_its_arguments():
    model, _, _ = rover.load()
    soil = tm.SOILS[study.SOIL]
    with pytest.raises(ValueError, match=r"sinkage\[2\] = 0.2"):
        UnilateralWheelSoil(_wheels(), Plane(), soil, [0.01, 0.01, 0.2, 0.01, 0.01, 0.01])
    with pytest.raises(ValueError, match="time_constant"):
        UnilateralWheelSoil(_wheels(), Plane(), soil, 0.01, time_constant=0.0)
    with pytest.raises(ValueError, match="sinkage"):
        UnilateralWheelSoil(_wheels(), Plane(), soil, -0.01)
    with pytest.raises(TypeError, match="not a Soil"):
        UnilateralWheelSoil(_wheels(), Plane(), "regolith", 0.01)
    with pytest.raises(ValueError, match="margin"):
        UnilateralWheelSoil(_wheels(), Plane(), soil, 0.01, margin=-1.0)
    el = UnilateralWheelSoil(_wheels(), Plane(), soil, 0.01, model=model)
    system = diffmb.TreeSystem(model, forces=(el,))
    with pytest.raises(TypeError, match="no linearly implicit step"):
        system.linear_stages(0.0, (jnp.asarray(model.qpos0), jnp.zeros(model.nv)), None, 0.01)
    with pytest.raises(ValueError, match="nope"):
        UnilateralWheelSoil([tm.Wheel("nope", 0.15, 0.15)], Plane(), soil, 0.01, model=model)


@pytest.mark.slow
def test_short_run_is_finite_and_differentiable_in_the_soil():
    """0.1 s of the straight drive on the unilateral contact (explicit Euler, 5 ms): no NaN,
    and a finite, nonzero derivative of the final forward position with respect to the soil's
    cohesion c (through the traction ratios; the sinkage z0 is held)."""
    import diffrax

    model, forces, _ = rover.load()
    z0 = _z0(model)
    q0 = study._settled_q0(model)
    soil = tm.SOILS[study.SOIL]

    def final_x(c):
        el = UnilateralWheelSoil(_wheels(), Plane(), soil.replace(c=c), z0, model=model)
        tr = diffmb.simulate(model, q0, None, t1=0.1, dt=5e-3, solver=diffrax.Euler(),
                             forces=forces + (el,), control=rover.behaviour_control("straight"),
                             saveat=[0.1])
        return tr.q[-1, 0]

    x, g = jax.value_and_grad(final_x)(jnp.asarray(float(soil.c)))
    assert np.isfinite(float(x)) and np.isfinite(float(g))
    assert float(g) != 0.0


class _SlideRow(diffmb.forces.unilateral.AbstractUnilateral):
    """One row on a slide joint: w = a + drift ≥ 0, its generalized force ``sign`` per unit f.
    sign = −1 pushes the joint the wrong way: with gravity pulling it down (b = −g < 0) the
    LCP −f + b ≥ 0, f ≥ 0 has no solution."""

    sign: float

    def rows(self, model, t, q, v):
        return diffmb.forces.UnilateralRows(
            J=jnp.ones((1, 1)), drift=jnp.zeros(1), tau=self.sign * jnp.ones((1, 1)),
            f_ext=jnp.zeros((1, model.n_bodies, 6)), active=jnp.ones(1, bool))

    def n_rows(self, model):
        return 1


def test_a_unilateral_problem_without_solution_fails_the_run(tmp_path):
    p = tmp_path / "slide.xml"
    p.write_text('<mujoco><option gravity="0 0 -9.81"/><worldbody><body name="b">'
                 '<joint name="z" type="slide" axis="0 0 1"/><geom type="sphere" size="0.1" '
                 'mass="1"/></body></worldbody></mujoco>')
    model = diffmb.load_mjcf(str(p))
    kw = dict(t1=0.01, dt=1e-3, solver="rk4")
    # the right way: the row holds the joint against gravity (f = m g, no motion)
    tr = diffmb.simulate(model, jnp.zeros(1), jnp.zeros(1), forces=(_SlideRow(1.0),), **kw)
    np.testing.assert_allclose(np.asarray(tr.q), 0.0, atol=1e-15)
    f = diffmb.unilateral_forces(model, jnp.zeros(1), jnp.zeros(1), forces=(_SlideRow(1.0),))
    np.testing.assert_allclose(np.asarray(f), [9.81], rtol=1e-12)
    # the wrong way: no solution, so the run fails and says why
    tr = diffmb.simulate(model, jnp.zeros(1), jnp.zeros(1), forces=(_SlideRow(-1.0),),
                         throw=False, **kw)
    assert int(tr.status) == diffmb.systems.NONFINITE, tr.message()
    assert "unilateral LCP had no solution" in tr.message()
    with pytest.raises(diffmb.SimulationError, match="unilateral LCP had no solution"):
        diffmb.simulate(model, jnp.zeros(1), jnp.zeros(1), forces=(_SlideRow(-1.0),), **kw)
