"""The implicit contact steps: Euler (``solver="implicit"``,
:class:`diffmb.simulation.ImplicitContactEuler`) and, where both are checked the same way, the
second-order step (``solver="implicit2"``, :class:`diffmb.simulation.ImplicitContactROS2`, its
own checks in tests/test_implicit_ros2.py).

Expected values: closed forms (the static deflection of the mass-normalised springs, Coulomb
sliding on a slope, stopping distance), a converged explicit reference (RK4 at 0.1 ms) for the
convergence rate, autodiff of the contact element's own force evaluation for the linearisation,
and central differences of the same discrete map for gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Plane
from diffmb.contacts.element import _evaluate
from diffmb.dynamics.kinematics import body_jacobian

from ._box_scene import G, H, M, box_model, contacts, corner_stiffness, rest_q


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    return box_model(tmp_path_factory)


# both steps; the second-order one in the slow suite (its own fast checks are elsewhere)
STEPS = ["implicit", pytest.param("implicit2", marks=pytest.mark.slow)]


def test_linearised_contact_force_is_the_elements_derivative(box):
    """With h = 0 the contact block A is ∂Q/∂v of the element's generalized force (its body
    wrench mapped by the body Jacobian), and Q is that force; the box slides and presses."""
    c = contacts(box)
    q = rest_q() - jnp.array([0, 0, 2e-4, 0, 0, 0, 0])
    v = jnp.array([0.3, -0.1, -0.02, 0.2, -0.3, 0.1])
    z = jnp.full((c.n_points, 3), 1e-5)

    def Q(v_):
        f = _evaluate(c, box, q, v_, z).f_ext[0]  # [force, torque] at the com
        J = body_jacobian(box, q, 0)  # [angular; linear]
        return J[3:].T @ f[:3] + J[:3].T @ f[3:]

    lin = c.linearise(box, q, v, z, 0.0)
    assert np.allclose(lin.Q, Q(v), rtol=1e-10, atol=1e-9)
    assert np.allclose(lin.A, jax.jacfwd(Q)(v), rtol=1e-8, atol=1e-6)


@pytest.mark.parametrize("solver", STEPS)
def test_rests_at_the_static_deflection_at_a_10ms_step(box, solver):
    """Dropped from 2 cm: the cube rests level, still, its corners m g / (4 k) deep, the
    contacts carrying its weight."""
    c = contacts(box)
    q0 = jnp.array([0.0, 0.0, H + 0.02, 1.0, 0.0, 0.0, 0.0])
    tr = diffmb.simulate(box, q0, jnp.zeros(6), t1=1.0, dt=0.01, forces=(c,), solver=solver,
                         saveat=[1.0])
    res = diffmb.contacts.contact_forces(box, tr, (c,))
    assert float(jnp.sum(res.fn[-1])) == pytest.approx(M * G, rel=1e-6)
    assert float(jnp.max(res.penetration[-1])) == pytest.approx(M * G / 4 / corner_stiffness(),
                                                                rel=1e-6)
    assert H - float(tr.q[-1, 2]) == pytest.approx(M * G / 4 / corner_stiffness(), rel=1e-6)
    assert np.allclose(tr.q[-1, 3:], [1.0, 0.0, 0.0, 0.0], atol=1e-12)
    assert float(jnp.max(jnp.abs(tr.v[-1]))) < 1e-6


def test_rk4_fails_on_a_contact_100x_stiffer_at_10ms(box):
    """A contact 100x stiffer than the default (ω = 1850 rad/s, h ω = 18.5): RK4 at 10 ms
    fails or launches the box (energy from nowhere); the implicit steps are checked on it
    below."""
    k = 100 * corner_stiffness()
    c = contacts(box, stiffness=k, damping=2 * np.sqrt(k * M / 4))
    bad = diffmb.simulate(box, rest_q(k=k), jnp.array([0, 0, -0.5, 0, 0, 0.0]), t1=0.5,
                          dt=0.01, forces=(c,), throw=False)
    assert int(bad.status) != 0 or float(bad.q[-1, 2]) > 1.0


@pytest.mark.parametrize("solver", STEPS)
def test_stable_where_rk4_diverges(box, solver):
    """The same contact 100x stiffer at 10 ms: the implicit step rests at k's static
    deflection, never launched."""
    k = 100 * corner_stiffness()
    c = contacts(box, stiffness=k, damping=2 * np.sqrt(k * M / 4))
    tr = diffmb.simulate(box, rest_q(k=k), jnp.array([0, 0, -0.5, 0, 0, 0.0]), t1=0.5,
                         dt=0.01, forces=(c,), solver=solver)
    assert float(tr.q[-1, 2]) == pytest.approx(H - M * G / 4 / k, abs=1e-7)
    assert float(jnp.max(tr.q[:, 2])) < H + 0.01


@pytest.mark.parametrize("solver", STEPS)
@pytest.mark.parametrize("mu, slides", [(0.6, False), (0.2, True)])
def test_stiction_on_a_slope_at_a_10ms_step(box, mu, slides, solver):
    """Below the friction angle (tan α = 0.309 < 0.6) the box holds (creep < 1 mm in 3 s);
    above it, it slides with a = g (sin α − μ cos α)."""
    alpha = 0.3
    down = np.array([-np.cos(alpha), 0.0, -np.sin(alpha)])
    c = contacts(box, mu=mu, terrain=Plane((-np.sin(alpha), 0.0, np.cos(alpha))))
    tr = diffmb.simulate(box, rest_q(alpha), jnp.zeros(6), t1=3.0, dt=0.01, forces=(c,),
                         solver=solver, saveat=[0.0, 1.0, 3.0])
    if not slides:
        assert float(jnp.linalg.norm(tr.q[-1, :3] - tr.q[0, :3])) < 1e-3
    else:
        s = np.asarray(tr.v[:, :3]) @ down
        a = (s[2] - s[1]) / 2.0
        assert a == pytest.approx(G * (np.sin(alpha) - mu * np.cos(alpha)), rel=1e-2)


def test_stopping_distance(box):
    mu, v0 = 0.5, 1.0
    tr = diffmb.simulate(box, rest_q(), jnp.array([v0, 0, 0, 0, 0, 0]), t1=0.4, dt=0.002,
                         forces=(contacts(box, mu=mu),), solver="implicit", saveat=[0.0, 0.4])
    assert float(tr.q[-1, 0] - tr.q[0, 0]) == pytest.approx(v0**2 / (2 * mu * G), rel=2e-2)


@pytest.mark.slow
def test_first_order_convergence_to_a_converged_reference(box):
    """A box landing while sliding and spinning: the state error at t = 0.12 s against RK4
    at 0.1 ms halves with the step (observed order ≥ 0.8 on each halving)."""
    c = contacts(box, mu=0.4)
    q0 = jnp.array([0.0, 0.0, H + 0.005, 1.0, 0.0, 0.0, 0.0])
    v0 = jnp.array([0.8, 0.1, -0.3, 0.0, 0.0, 2.0])
    T = 0.12
    ref = diffmb.simulate(box, q0, v0, t1=T, dt=1e-4, forces=(c,), saveat=[T])
    y = lambda tr: jnp.concatenate([tr.q[-1], tr.v[-1]])  # noqa: E731
    errs = []
    for h in (4e-3, 2e-3, 1e-3, 5e-4):
        tr = diffmb.simulate(box, q0, v0, t1=T, dt=h, forces=(c,), solver="implicit",
                             saveat=[T])
        errs.append(float(jnp.linalg.norm(y(tr) - y(ref))))
    rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(rates > 0.8), (errs, rates)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["implicit", "implicit2"])
def test_gradient_equals_central_differences_and_forward_mode(box, solver):
    """d x(0.3)/d (v0, μ) through 60 implicit steps of a sliding box: reverse mode, forward
    mode and central differences of the same discrete map agree."""
    q0 = rest_q()

    def x_end(p):
        c = contacts(box, mu=p[1])
        tr = diffmb.simulate(box, q0, jnp.array([p[0], 0, 0, 0, 0, 0]), t1=0.3, dt=0.005,
                             forces=(c,), solver=solver, saveat=[0.3])
        return tr.q[-1, 0]

    p = jnp.array([1.0, 0.5])
    g = jax.grad(x_end)(p)
    fwd = jax.jacfwd(x_end)(p)
    e = 1e-6
    fd = np.array([(x_end(p + e * d) - x_end(p - e * d)) / (2 * e) for d in np.eye(2)])
    assert np.all(np.isfinite(g))
    assert np.allclose(g, fd, rtol=1e-5, atol=1e-8)
    assert np.allclose(fwd, g, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["implicit", "implicit2"])
@pytest.mark.parametrize("dt", [0.005, 0.02])
def test_bench_quadruped_settles_at_the_file_step_and_at_20ms(dt, solver):
    """The contact benchmark's quadruped (soft limits in MuJoCo's constraint form, servos,
    stiction), dropped from the benchmark's random states: at the file's 5 ms and at MuJoCo's
    20 ms every member ends in the benchmark's settle band, still."""
    from diffmb.bench.contacts import BAND, QUADRUPED, VMAX, initial_states

    model = diffmb.load_mjcf(QUADRUPED)
    forces = diffmb.mjcf_forces(QUADRUPED)
    q, v = initial_states(4)

    def final(q0, v0):
        tr = diffmb.simulate(model, q0, v0, t1=1.0, dt=dt, forces=forces, solver=solver,
                             saveat=[1.0], throw=False)
        return tr.q[-1], tr.v[-1], tr.status

    qf, vf, st = jax.jit(jax.vmap(final))(jnp.asarray(q), jnp.asarray(v))
    assert np.all(np.asarray(st) == 0)
    assert np.all((BAND[0] < qf[:, 2]) & (qf[:, 2] < BAND[1])), qf[:, 2]
    assert np.all(jnp.linalg.norm(vf[:, :3], axis=1) < VMAX)


@pytest.mark.slow
def test_every_bench_drop_settles_at_20ms():
    """All 1024 of the contact benchmark's drops (some start with feet 4–7 cm in the floor,
    as MuJoCo is given them) at MuJoCo's 20 ms with the implicit step: each ends in the
    settle band, still. Without the cone pass (``cone_passes=1``) one lands with its feet
    held by stiction springs linearised as sticking over the whole step and still moves
    at 0.49 m/s after 1 s."""
    from diffmb.bench.contacts import QUADRUPED, initial_states, settle_stats

    model = diffmb.load_mjcf(QUADRUPED)
    forces = diffmb.mjcf_forces(QUADRUPED)
    q, v = initial_states(1024)

    def final(q0, v0):
        tr = diffmb.simulate(model, q0, v0, t1=1.0, dt=0.02, forces=forces,
                             solver="implicit", saveat=[1.0], throw=False)
        return tr.q[-1], tr.v[-1]

    qf, vf = jax.jit(jax.vmap(final))(jnp.asarray(q), jnp.asarray(v))
    stats = settle_stats(qf, vf)
    assert stats["settled"], stats


@pytest.mark.parametrize("creep", [None, 3e-4])
@pytest.mark.parametrize("impedance", [False, True])
@pytest.mark.parametrize("state", ["stick", "slide", "lift"])
def test_closed_form_blocks_equal_the_laws_autodiff(box, state, impedance, creep):
    """The closed-form per-point blocks of the linear law with stiction equal forward-mode
    autodiff of the point law itself (the general path), sticking, sliding and lifting off;
    also with a spring that follows MuJoCo's impedance (its stiffness varies with depth) and
    with creep (its rate too, with the impedance)."""
    from diffmb.contacts.element import _linear_stiction_blocks, _point_law

    # k at the points' depth as without; there ∂f/∂δ = k (1 + δ g'/g) ≈ 5.3 k
    kw = dict(solimp=(0.015, 1.0, 3e-4, 0.5, 2.0), solimp_depth=1e-4) if impedance else {}
    c = contacts(box, mu=0.4, creep=creep, **kw)
    rng = np.random.default_rng({"stick": 0, "slide": 1, "lift": 2}[state])
    npt = c.n_points
    pi = np.asarray(c.point_geom)
    n = rng.standard_normal((npt, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    pen = np.full(npt, -1e-4 if state == "lift" else 1e-4)
    u = rng.standard_normal((npt, 3)) * (1e-2 if state == "slide" else 1e-6)
    z = rng.standard_normal((npt, 3)) * (1e-4 if state == "slide" else 1e-8)
    f, zd, (Fx, Fu, Fz), (Gx, Gu, Gz) = _linear_stiction_blocks(
        c, jnp.asarray(pen), jnp.asarray(n), jnp.asarray(u), jnp.asarray(z), pi)
    for p in range(npt):
        law = _point_law(c, jnp.asarray(n[p]), jnp.asarray(z[p]), jnp.zeros(3), int(pi[p]))
        zero = jnp.zeros(3)
        f_p, zd_p, _ = law(pen[p], jnp.asarray(u[p]), zero, zero)
        (fp, fu, fz), (gp, gu, gz) = jax.jacfwd(lambda a, b_, c_, law=law, zero=zero: law(a, b_, c_, zero)[:2],
                                                argnums=(0, 1, 2))(pen[p], jnp.asarray(u[p]),
                                                                   zero)
        np.testing.assert_allclose(f[p], f_p, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(zd[p], zd_p, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(Fx[p], -fp[:, None] * n[p][None, :], rtol=1e-10, atol=1e-6)
        np.testing.assert_allclose(Fu[p], fu, rtol=1e-10, atol=1e-6)
        np.testing.assert_allclose(Fz[p], fz, rtol=1e-10, atol=1e-6)
        np.testing.assert_allclose(Gx[p], -gp[:, None] * n[p][None, :], rtol=1e-10, atol=1e-6)
        np.testing.assert_allclose(Gu[p], gu, rtol=1e-10, atol=1e-6)
        np.testing.assert_allclose(Gz[p], gz, rtol=1e-10, atol=1e-6)
    if state == "slide":  # the case is what it says
        fn = np.einsum("pi,pi->p", np.asarray(f), n)
        F = 0.4 * fn
        ft = np.asarray(f) - fn[:, None] * n
        assert np.all(np.linalg.norm(ft, axis=1) >= F * (1 - 1e-9))


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_cone_taken_at_a_trial_force_is_the_cone_maps_tangent_there(box, where):
    """The cone pass (``trial`` of the closed-form blocks): for a point that sticks at the
    start, the friction is the exact cone map f ↦ f (|f| ≤ F), F f/|f| (beyond), linearised
    at the trial spring force f_L and bound F_L: f_t = g(f_L, F_L) + ∂g (f − f_L, F − F_L).
    Expected from jax.jvp of that map written here (not the code's blocks), at the start's
    (f, F); and its derivatives in u and z are the code's blocks."""
    from diffmb.contacts.element import _linear_stiction_blocks

    c = contacts(box, mu=0.5)
    npt = c.n_points
    pi = np.asarray(c.point_geom)
    rng = np.random.default_rng(7)
    n = np.tile([0.0, 0.0, 1.0], (npt, 1))
    pen = np.full(npt, 1e-4)
    u = np.zeros((npt, 3))
    z = np.zeros((npt, 3))
    z[:, :2] = rng.standard_normal((npt, 2)) * 1e-7  # sticking: well inside the cone
    kt, bt = np.asarray(c.tangential_stiffness)[pi], np.asarray(c.tangential_damping)[pi]
    fn = np.asarray(c.stiffness)[pi] * pen
    F = 0.5 * fn
    fs = -kt[:, None] * z
    assert np.all(np.linalg.norm(fs, axis=1) < F)
    dirs = np.zeros((npt, 3))
    dirs[:, :2] = rng.standard_normal((npt, 2))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    FL = F * rng.uniform(0.7, 1.3, npt)
    fL = dirs * (FL * (0.5 if where == "inside" else 3.0))[:, None]

    def cone(f, bound):
        nf = jnp.linalg.norm(f)
        return jnp.where(nf <= bound, f, bound * f / nf)

    f, zd, (Fx, Fu, Fz), _ = _linear_stiction_blocks(
        c, jnp.asarray(pen), jnp.asarray(n), jnp.asarray(u), jnp.asarray(z), pi,
        (jnp.asarray(fL), jnp.asarray(FL)))
    for p in range(npt):
        g, dg = jax.jvp(cone, (jnp.asarray(fL[p]), FL[p]),
                        (jnp.asarray(fs[p] - fL[p]), F[p] - FL[p]))
        expected = np.asarray(g + dg)
        np.testing.assert_allclose(np.asarray(f[p])[:2], expected[:2], rtol=1e-10, atol=1e-15)
        J = jax.jacfwd(cone)(jnp.asarray(fL[p]), FL[p])  # ∂g/∂f at the trial
        P = np.diag([1.0, 1.0, 0.0])
        np.testing.assert_allclose(np.asarray(Fz[p])[:2, :2], (-kt[p] * np.asarray(J) @ P)[:2, :2],
                                   rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(np.asarray(Fu[p])[:2, :2], (-bt[p] * np.asarray(J) @ P)[:2, :2],
                                   rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("at_start", [True, False])
@pytest.mark.parametrize("rate_scale", [1.0, 0.0])
def test_soft_rows_in_the_steps_solve_equal_mujocos_constraint_equations(rate_scale, at_start):
    """The soft limit rows that push join the step's matrix (SoftRows.step_matrix/step_rhs).
    Expected: the step solved with the rows as separate unknowns, from MuJoCo's soft
    constraint on each pushing row, J a = a_ref − R f with a = Δv/h and a_ref at the step's
    start (−b J v − k d y, as MuJoCo's own step computes it; the Euler step) or over the step
    (−b J v₁ − k d (y + h J v₁); the second-order step's matrix), beside
    M Δv = h (F + A Δv + c + Jᵀ f): one (nv + m) linear system, solved by numpy; a row that
    does not push carries f = 0. The second case (a stage whose positions do not move) checks
    the rows' rate term on its own."""
    from diffmb.forces.elements import SoftRows, _soft_gains, soft_impedance

    rng = np.random.default_rng(3)
    nv, m, h = 6, 4, 0.01
    B = rng.normal(size=(nv, nv))
    Mm = B @ B.T + nv * np.eye(nv)
    A = -np.diag(rng.uniform(1, 5, nv)) + 0.1 * rng.normal(size=(nv, nv))
    J = rng.normal(size=(m, nv))
    y = np.array([-2e-3, -5e-4, -1e-3, 0.2])
    active = np.array([True, True, False, False])
    invw = rng.uniform(0.5, 2.0, m)
    solref = np.array([[0.02, 1.0]] * m)
    solimp = np.array([[0.9, 0.95, 0.001, 0.5, 2.0]] * m)
    v, F, c = rng.normal(size=nv), rng.normal(size=nv), rng.normal(size=nv)
    rate = rate_scale * v
    rows = SoftRows(J=jnp.asarray(J), y=jnp.asarray(y), f=jnp.zeros(m), active=jnp.asarray(active),
                    invweight=jnp.asarray(invw), solref=jnp.asarray(solref),
                    solimp=jnp.asarray(solimp))
    dv = np.linalg.solve(Mm - h * A + np.asarray(rows.step_matrix(h, at_start)),
                         h * (F + c) + np.asarray(rows.step_rhs(h, jnp.asarray(rate),
                                                                at_start=at_start)))

    k, b = (np.asarray(x) for x in _soft_gains(jnp.asarray(solref), jnp.asarray(solimp)))
    d = np.asarray(soft_impedance(jnp.maximum(-jnp.asarray(y), 0.0), jnp.asarray(solimp)))
    R = (1 - d) / d * invw
    Ja = J[active]
    n = Ja.shape[0]
    K = np.zeros((nv + n, nv + n))
    K[:nv, :nv], K[:nv, nv:] = Mm - h * A, -h * Ja.T
    # over the step: J Δv/h + β J Δv + R f = −β J rate − k d y, β = b + h k d; at the start:
    # J Δv/h + R f = −b J rate − k d y (h = T/2: MuJoCo's refsafe leaves T as it is)
    beta = b + h * k * d
    K[nv:, :nv] = (1 / h + (0.0 * beta if at_start else beta)[active])[:, None] * Ja
    K[nv:, nv:] = np.diag(R[active])
    rate_gain = b if at_start else beta
    rhs = np.concatenate([h * (F + c), -rate_gain[active] * (Ja @ rate) - (k * d * y)[active]])
    expected = np.linalg.solve(K, rhs)[:nv]
    np.testing.assert_allclose(dv, expected, rtol=1e-10, atol=1e-14)
