"""diffmb.contacts: terrains, geoms, laws and the contact force element.

Expected values come from closed forms (Coulomb sliding, rolling on an incline, static
deflection of the mass-normalised springs), from an independent high-accuracy integration of
the 1-D contact ODE (Hunt–Crossley restitution, scipy), and from finite differences. Bodies are
free bodies loaded from MJCF (their geoms give only the inertia; contact geoms are attached by
hand). Simulations use the default path: RK4 at dt = 1 ms, unless stated.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import diffmb
from diffmb.contacts import (
    Box,
    Capsule,
    Contacts,
    CoulombContacts,
    Cylinder,
    HeightField,
    Plane,
    Point,
    Sphere,
    candidates,
    contact_forces,
    effective_mass,
    hunt_crossley,
    regularised_coulomb,
    rough_terrain,
    soft_contact_params,
    spring_damper,
    stiction,
)
from diffmb.contacts.element import _evaluate
from diffmb.contacts.geometry import CYLINDER_EPS
from diffmb.dynamics.configuration import qdot

G = 9.81
H = 0.1  # box half-size and ball radius, m
M_BOX, M_BALL = 2.0, 1.0

BODY = """<mujoco><option gravity="0 0 {g}"/><worldbody><body name="{name}"><freejoint/>
<geom type="{geom}" size="{size}" mass="{mass}" contype="0" conaffinity="0"/></body>
</worldbody></mujoco>"""


def _load(tmp_path_factory, name, geom, size, mass, g=-G):
    p = tmp_path_factory.mktemp(name) / f"{name}.xml"
    p.write_text(BODY.format(name=name, geom=geom, size=size, mass=mass, g=g))
    return diffmb.load_mjcf(p)


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    return _load(tmp_path_factory, "box", "box", f"{H} {H} {H}", M_BOX)


@pytest.fixture(scope="module")
def ball(tmp_path_factory):
    return _load(tmp_path_factory, "ball", "sphere", f"{H}", M_BALL)


@pytest.fixture(scope="module")
def ball0(tmp_path_factory):  # no gravity: a clean impact
    return _load(tmp_path_factory, "ball0", "sphere", f"{H}", M_BALL, g=0.0)


def _k_per_point(m, n_active):
    return float(soft_contact_params(m, n_active=n_active)[0])


def _quat_y(theta):
    return jnp.array([np.cos(theta / 2), 0.0, np.sin(theta / 2), 0.0])


def _box_contacts(model, mu=0.5, terrain=None):
    return Contacts([Box("box", (H, H, H), name="cube")], terrain or Plane(), model=model, mu=mu)


def _box_rest_q(model, alpha=0.0):
    """Box resting with its bottom face on a plane through 0 tilted by alpha about y (rising
    along +x), at the closed-form static penetration."""
    n = np.array([-np.sin(alpha), 0.0, np.cos(alpha)])
    delta0 = M_BOX * G * np.cos(alpha) / 4 / _k_per_point(M_BOX, 4)
    c = (H - delta0) * n
    return jnp.concatenate([jnp.asarray(c), _quat_y(-alpha)])


# ---- mass-normalised defaults, stability ----------------------------------------------------


@pytest.mark.slow
def test_soft_params_and_effective_mass(box):
    assert float(effective_mass(box, "box")) == pytest.approx(M_BOX, rel=1e-12)
    k, b = soft_contact_params(M_BOX, n_active=4)
    d = 0.925
    r = d / (1 - d)
    assert float(k) == pytest.approx(M_BOX / 4 * r / (0.95**2 * 0.02**2), rel=1e-12)
    assert float(b) == pytest.approx(2 * np.sqrt(float(k) * M_BOX / 4), rel=1e-12)  # ζ = 1
    # the one solref/solimp mapping of diffmb (limits, friction, MJCF contacts), traceable here
    from diffmb.forces.elements import soft_constraint_gains

    assert np.allclose((k, b), soft_constraint_gains(M_BOX / 4), rtol=1e-12)
    kj, bj = jax.jit(soft_contact_params, static_argnames="n_active")(M_BOX, 0.03, 0.8,
                                                                         n_active=2)
    assert np.allclose((kj, bj), soft_constraint_gains(M_BOX / 2, (0.03, 0.8)), rtol=1e-12)
    # same total stiffness on 4 corners as on one point; rest penetration 0.2-0.4 mm
    assert 4 * float(k) == pytest.approx(float(soft_contact_params(M_BOX)[0]), rel=1e-12)
    assert 0.2e-3 < M_BOX * G / (4 * float(k)) < 0.4e-3
    # the element's parameters are top-level array fields: fit them by name
    c = _box_contacts(box, mu=0.7)
    assert np.allclose(c.stiffness, k) and np.allclose(c.damping, b)
    got = diffmb.optim.get_params(box, ["force.contacts.mu"], {"contacts": c})
    assert np.allclose(got["force.contacts.mu"], 0.7)


@pytest.mark.slow
def test_rk4_stability_four_corners(box):
    """Every eigenvalue of the linearised (q, v, z) dynamics of a cube resting on 4 corners,
    times dt = 1 ms, lies in RK4's stability region |R(hλ)| ≤ 1."""
    c = _box_contacts(box, mu=0.5)
    q0 = _box_rest_q(box)

    def f(x):
        q, v, z = x[:7], x[7:13], x[13:].reshape(8, 3)
        qn = q.at[3:].set(q[3:] / jnp.linalg.norm(q[3:]))  # simulate's "exact" quaternions
        a, ds = diffmb.forward(box, qn, v, forces=(c,), state=(z,))
        return jnp.concatenate([qdot(box, q, v), a, ds[0].reshape(-1)])

    x0 = jnp.concatenate([q0, jnp.zeros(6), jnp.zeros(24)])
    z = np.linalg.eigvals(np.asarray(jax.jit(jax.jacfwd(f))(x0))) * 1e-3
    R = 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24
    assert np.max(np.abs(R)) <= 1.0 + 1e-9
    assert np.max(np.abs(z)) < 1.3  # the docstring's bound: h|λ| ≈ 1.1-1.2


# ---- (a) rest, (b) sliding -------------------------------------------------------------------


@pytest.mark.slow
def test_box_at_rest_carries_its_weight(box):
    c = _box_contacts(box)
    q0 = jnp.array([0.0, 0.0, H, 1.0, 0.0, 0.0, 0.0])  # touching, δ = 0
    forces = (c,)
    tr = diffmb.simulate(box, q0, jnp.zeros(6), t1=1.0, dt=1e-3, forces=forces,
                         saveat=[0.0, 1.0])
    res = contact_forces(box, tr, forces)
    assert res.fn.shape == (2, 8) and res.point.shape == (2, 8, 3) and res.ft.shape == (2, 8, 3)
    assert res.pairs == (("cube", "plane"),) * 8
    assert float(jnp.sum(res.fn[-1])) == pytest.approx(M_BOX * G, rel=1e-2)
    assert np.all(np.asarray(res.fn) >= 0)
    pen = float(jnp.max(res.penetration[-1]))
    assert 0.2e-3 < pen < 0.4e-3
    assert pen == pytest.approx(M_BOX * G / 4 / _k_per_point(M_BOX, 4), rel=1e-2)
    # at rest the contact forces carry the weight: Σ (f_n n + f_t) = (0, 0, m g), also read
    # through the mapping interface
    F = np.sum(np.asarray(res["fn"][-1])[:, None] * np.asarray(res["normal"][-1])
               + np.asarray(res["ft"][-1]), axis=0)
    assert np.allclose(F, [0.0, 0.0, M_BOX * G], rtol=0.0, atol=1e-3 * M_BOX * G)
    assert set(res.keys()) == {"point", "normal", "penetration", "velocity", "fn", "ft", "pairs"}
    assert np.allclose(res.normal[-1], [0.0, 0.0, 1.0])


@pytest.mark.parametrize("law", ["stiction", "coulomb"])
def test_box_sliding_stopping_distance(box, law):
    mu, v0 = 0.5, 1.0
    if law == "stiction":
        c = _box_contacts(box, mu=mu)
    else:
        c = CoulombContacts([Box("box", (H, H, H))], Plane(), model=box, mu=mu, eps=1e-3)
    q0 = _box_rest_q(box)
    tr = diffmb.simulate(box, q0, jnp.array([v0, 0, 0, 0, 0, 0]), t1=0.4, dt=1e-3,
                         forces=(c,), saveat=[0.0, 0.4])
    dist = float(tr.q[-1, 0] - tr.q[0, 0])
    expected = v0**2 / (2 * mu * G)
    assert dist == pytest.approx(expected, rel=1e-2)
    assert abs(float(tr.v[-1, 0])) < 1e-3


# ---- (c) sphere on an incline ------------------------------------------------------------------


@pytest.mark.parametrize("mu, rolls", [(1.0, True), (0.05, False)])
def test_sphere_on_incline(ball, mu, rolls):
    alpha = 0.3
    n = np.array([-np.sin(alpha), 0.0, np.cos(alpha)])
    down = np.array([-np.cos(alpha), 0.0, -np.sin(alpha)])
    c = Contacts([Sphere("ball", H)], Plane(n), model=ball, mu=mu)
    delta0 = M_BALL * G * np.cos(alpha) / _k_per_point(M_BALL, 1)
    q0 = jnp.concatenate([jnp.asarray((H - delta0) * n), jnp.array([1.0, 0, 0, 0])])
    t1, t2 = 0.1, 0.5
    tr = diffmb.simulate(ball, q0, jnp.zeros(6), t1=t2, dt=1e-3, forces=(c,),
                         saveat=[t1, t2])
    s = np.asarray(tr.v[:, :3]) @ down
    a = (s[1] - s[0]) / (t2 - t1)
    expected = 5 / 7 * G * np.sin(alpha) if rolls else G * (np.sin(alpha) - mu * np.cos(alpha))
    assert 2 / 7 * np.tan(alpha) < 1.0 and 3.5 * 0.05 < np.tan(alpha)  # the regimes hold
    assert a == pytest.approx(expected, rel=1e-2)


@pytest.mark.slow
def test_wheel_rolls_down_an_incline(tmp_path_factory):
    """A solid disc (Cylinder geom, axis along y) rolls with a = (2/3) g sin α."""
    wheel = _load(tmp_path_factory, "wheel", "cylinder", "0.1 0.02\" quat=\"0.70710678 0.70710678 0 0",
                  1.0)
    alpha = 0.3
    n = np.array([-np.sin(alpha), 0.0, np.cos(alpha)])
    down = np.array([-np.cos(alpha), 0.0, -np.sin(alpha)])
    geom = Cylinder("wheel", 0.1, 0.02, quat=(0.70710678, 0.70710678, 0.0, 0.0))
    c = Contacts([geom], Plane(n), model=wheel, mu=1.0)
    delta0 = 0.5 * G * np.cos(alpha) / _k_per_point(1.0, 2)
    q0 = jnp.concatenate([jnp.asarray((0.1 - delta0) * n), jnp.array([1.0, 0, 0, 0])])
    tr = diffmb.simulate(wheel, q0, jnp.zeros(6), t1=0.5, dt=1e-3, forces=(c,),
                         saveat=[0.1, 0.5])
    s = np.asarray(tr.v[:, :3]) @ down
    a = (s[1] - s[0]) / 0.4
    assert a == pytest.approx(2 / 3 * G * np.sin(alpha), rel=1e-2)
    res = contact_forces(wheel, tr, (c,))
    assert float(jnp.sum(res.fn[-1])) == pytest.approx(G * np.cos(alpha), rel=1e-2)
    assert np.allclose(np.asarray(res.fn[-1])[[1, 2, 4, 5]], 0.0)  # the ±120° rim points stay unloaded


# ---- (d) stiction on a slope --------------------------------------------------------------------


@pytest.mark.slow
def test_box_stiction_on_slope_creeps_less_than_1mm(box):
    alpha, mu = 0.3, 0.6
    assert np.tan(alpha) < mu
    terrain = Plane((-np.sin(alpha), 0.0, np.cos(alpha)))
    c = _box_contacts(box, mu=mu, terrain=terrain)
    q0 = _box_rest_q(box, alpha)
    tr = diffmb.simulate(box, q0, jnp.zeros(6), t1=5.0, dt=1e-3, forces=(c,),
                         saveat=[0.0, 5.0])
    creep = float(jnp.linalg.norm(tr.q[-1, :3] - tr.q[0, :3]))
    assert creep < 1e-3
    res = contact_forces(box, tr, (c,))
    assert float(jnp.sum(res.fn[-1])) == pytest.approx(M_BOX * G * np.cos(alpha), rel=1e-2)


# ---- (e) Hunt–Crossley restitution -------------------------------------------------------------


@pytest.mark.slow
def test_hunt_crossley_restitution(ball0):
    k, n, cdiss, v_in = 1e6, 1.5, 0.3, 1.0
    c = Contacts([Sphere(0, H)], Plane(), normal="hunt_crossley", stiffness=k, exponent=n,
                 dissipation=cdiss, damping=0.0, mu=0.0, tangential_stiffness=1e3,
                 tangential_damping=10.0)
    q0 = jnp.array([0.0, 0.0, H, 1.0, 0.0, 0.0, 0.0])  # touching
    tr = diffmb.simulate(ball0, q0, jnp.array([0.0, 0.0, -v_in, 0, 0, 0]), t1=0.03, dt=1e-4,
                         forces=(c,), saveat=[0.03])
    e_sim = float(tr.v[-1, 2]) / v_in

    # independent: the 1-D contact ODE m δ̈ = −k δⁿ (1 + c δ̇), δ(0) = 0, δ̇(0) = v_in
    def rhs(t, y):
        d, dd = y
        f = k * max(d, 0.0) ** n * (1 + cdiss * dd) if d > 0 else 0.0
        return [dd, -max(f, 0.0) / M_BALL]

    def out(t, y):
        return y[0]

    out.terminal, out.direction = True, -1
    sol = solve_ivp(rhs, (0, 1.0), [0.0, v_in], method="DOP853", rtol=1e-12, atol=1e-15,
                    events=out, first_step=1e-7)
    e_ref = -sol.y_events[0][0][1] / v_in
    assert 0.5 < e_ref < 0.95
    assert e_sim == pytest.approx(e_ref, rel=1e-2)
    assert sol.t_events[0][0] < 0.03  # the ball has left the ground by t = 0.03 s


# ---- (f) passivity -------------------------------------------------------------------------------


@pytest.mark.slow
def test_contact_never_adds_energy(box):
    c = _box_contacts(box, mu=0.5)
    q0 = jnp.array([0.0, 0.0, H + 0.05, 1.0, 0.0, 0.0, 0.0])
    v0 = jnp.array([1.0, 0.3, 0.0, 1.0, 2.0, 3.0])
    tr = diffmb.simulate(box, q0, v0, t1=1.0, dt=1e-3, forces=(c,))
    z = tr.aux[0][0]

    def energy(q, v, z):
        return (diffmb.kinetic_energy(box, q, v) + diffmb.potential_energy(box, q)
                + c.energy(box, q, z))

    E = np.asarray(jax.vmap(energy)(tr.q, tr.v, z))
    dE = np.diff(E)
    assert np.max(dE) < 1e-8 * abs(E[0])  # non-increasing up to round-off (measured 9e-16 J)
    assert E[-1] < E[0]
    assert np.min(np.asarray(contact_forces(box, tr, (c,)).fn)) >= 0.0


# ---- (g) gradient of the stopping distance -------------------------------------------------------


def _slide(box, mu, z0, vx):
    """x displacement of the box after 0.4 s, started at height z0 with speed vx along x."""
    q0 = jnp.concatenate([jnp.zeros(2), jnp.reshape(z0, (1,)), jnp.array([1.0, 0, 0, 0])])
    c = _box_contacts(box, mu=mu)
    v0 = jnp.zeros(6).at[0].set(vx)
    tr = diffmb.simulate(box, q0, v0, t1=0.4, dt=1e-3, forces=(c,), saveat=[0.4])
    return tr.q[-1, 0] - q0[0]


@pytest.fixture(scope="module")
def slide_grad(box):
    """d(displacement)/d(mu, z0, vx), compiled once for (g) and (h)."""
    return jax.jit(jax.grad(lambda mu, z0, vx: _slide(box, mu, z0, vx), argnums=(0, 1, 2)))


@pytest.mark.slow
def test_stopping_distance_gradient_wrt_mu(box, slide_grad):
    v0, mu = 1.0, 0.5
    z0 = float(_box_rest_q(box)[2])  # at rest penetration
    dist = jax.jit(lambda mu: _slide(box, mu, z0, v0))
    g = float(slide_grad(mu, z0, v0)[0])
    eps = 1e-4
    fd = (float(dist(mu + eps)) - float(dist(mu - eps))) / (2 * eps)
    closed = -(v0**2) / (2 * mu**2 * G)
    assert g == pytest.approx(fd, rel=1e-2)
    assert g == pytest.approx(closed, rel=1e-2)


# ---- (h) gradient safety at touch-down and zero sliding speed ---------------------------------


def test_laws_gradient_safe_at_zero():
    z3 = jnp.zeros(3)
    n = jnp.array([0.0, 0.0, 1.0])
    for f in (
        lambda x: spring_damper(x[0], x[1], x[2], x[3]),
        lambda x: hunt_crossley(x[0], x[1], x[2], x[3], 1.5 + x[4]),
        lambda x: jnp.sum(regularised_coulomb(x[2], x[5:8], n, x[3], 1e-3)),
        lambda x: jnp.sum(stiction(x[2] * x[0], x[5:8], n, x[8:11], x[3], x[2], x[3])[0]),
        lambda x: jnp.sum(stiction(x[2] * x[0], x[5:8], n, x[8:11], x[3], x[2], x[3])[1]),
    ):
        x = jnp.concatenate([jnp.array([0.0, 0.0, 1e4, 10.0, 0.0]), z3, z3])  # δ = 0, v = 0
        val, grad = jax.jit(jax.value_and_grad(f))(x)
        assert np.isfinite(float(val)) and np.all(np.isfinite(np.asarray(grad)))
    # stiction: out of contact no force and zero gradient, sticking: the spring-damper
    ft = lambda fn, v: stiction(fn, v, n, z3, 0.5, 1e3, 10.0)[0]
    assert np.allclose(jax.jacfwd(ft, argnums=1)(0.0, z3), 0.0)
    assert np.allclose(jax.jacfwd(ft, argnums=1)(100.0, z3), -10.0 * np.diag([1, 1, 0]))


@pytest.mark.slow
def test_element_gradients_finite_at_touchdown(ball):
    c = Contacts([Sphere("ball", H), Cylinder("ball", 0.05, 0.02, pos=(0, 0, -0.05))], Plane(),
                 model=ball, mu=0.8)
    q = jnp.array([0.0, 0.0, H, 1.0, 0.0, 0.0, 0.0])  # δ = 0 exactly, the cylinder's axis ∥ n
    v = jnp.zeros(6)
    z = jnp.zeros((c.n_points, 3))
    r = eqx.filter_jit(c.evaluate)(ball, q, v, z)
    assert float(r.penetration[0]) == 0.0

    def f(q, v, c):
        a, ds = diffmb.forward(ball, q, v, forces=(c,), state=(z,))
        return jnp.sum(a) + jnp.sum(ds[0])

    gq, gv, gc = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, v, c)
    for leaf in jax.tree_util.tree_leaves((gq, gv, gc)):
        assert np.all(np.isfinite(np.asarray(leaf)))



def test_simulation_gradients_finite_from_touchdown(box, slide_grad):
    """Through a simulation that starts exactly at touch-down (δ = 0 at 4 corners), at rest
    (zero sliding speed) and sliding."""
    for vx in (0.0, 1.0):
        g = slide_grad(0.5, H, vx)
        assert np.all(np.isfinite(np.asarray(g)))


# ---- (i) height field --------------------------------------------------------------------------


def _plane_field(sx=0.2, sy=-0.1, h0=0.05):
    xs = -1.0 + 0.1 * np.arange(21)
    X, Y = np.meshgrid(xs, xs, indexing="ij")
    return HeightField(h0 + sx * X + sy * Y, origin=(-1.0, -1.0), spacing=(0.1, 0.1)), \
        (sx, sy, h0)


@pytest.mark.slow
def test_heightfield_reproduces_a_slope_and_carries_a_sphere(ball):
    hf, (sx, sy, h0) = _plane_field()
    n_exact = np.array([-sx, -sy, 1.0]) / np.sqrt(1 + sx**2 + sy**2)
    rng = np.random.default_rng(0)
    xy = rng.uniform(-1.2, 1.2, (50, 2))  # inside the grid and a little beyond (clamped)
    inside = np.all(np.abs(xy) <= 1.0, axis=1)
    h = np.asarray(jax.vmap(hf.height)(jnp.asarray(xy)))
    nrm = np.asarray(jax.vmap(hf.normal)(jnp.asarray(xy)))
    tol = 1e-12  # Catmull–Rom with linear ghost samples reproduces a plane exactly
    assert np.allclose(h[inside], h0 + xy[inside] @ [sx, sy], atol=tol)
    assert np.allclose(nrm[inside], n_exact, atol=tol)

    # a sphere resting on the field: its candidate point has the slope's normal and the
    # closed-form penetration; the contact force is along the normal
    c = Contacts([Sphere("ball", H)], hf, model=ball, mu=1.0)
    delta = 3e-4
    p_surf = np.array([0.13, -0.27, h0 + 0.13 * sx - 0.27 * sy])
    centre = p_surf + (H - delta) * n_exact
    q = jnp.concatenate([jnp.asarray(centre), jnp.array([1.0, 0, 0, 0])])
    r = _evaluate(c, ball, q, jnp.zeros(6), jnp.zeros((1, 3)))
    assert np.allclose(r.normal[0], n_exact, atol=tol)
    assert float(r.penetration[0]) == pytest.approx(delta, rel=1e-9)
    assert np.allclose(r.point[0], centre - H * n_exact, atol=1e-12)
    k = float(c.stiffness[0])
    assert np.allclose(r.f_ext[0, :3], k * delta * n_exact, rtol=1e-9)


def test_heightfield_is_c1():
    rng = np.random.default_rng(1)
    hf = HeightField(rng.normal(0.0, 0.05, (8, 9)), origin=(0.0, 0.0), spacing=(0.2, 0.25))
    eps = 1e-9
    jumps_n, jumps_h = [], []
    for i in range(1, 7):  # every interior cell boundary in x, at several y
        for y in (0.13, 0.61, 1.4):
            a = jnp.array([0.2 * i - eps, y])
            b = jnp.array([0.2 * i + eps, y])
            jumps_n.append(float(jnp.max(jnp.abs(hf.normal(a) - hf.normal(b)))))
            jumps_h.append(abs(float(hf.height(a) - hf.height(b))))
    for j in range(1, 8):  # and in y
        a, b = jnp.array([0.55, 0.25 * j - eps]), jnp.array([0.55, 0.25 * j + eps])
        jumps_n.append(float(jnp.max(jnp.abs(hf.normal(a) - hf.normal(b)))))
    assert max(jumps_n) < 1e-6 and max(jumps_h) < 1e-8
    # the normal is that of the interpolated surface: −∇h agrees with autodiff of height
    xy = jnp.array([0.77, 1.03])
    gh = jax.grad(hf.height)(xy)
    nz = hf.normal(xy)
    assert np.allclose(-np.asarray(nz[:2]) / float(nz[2]), gh, rtol=1e-10)
    # samples are interpolated exactly
    assert float(hf.height(jnp.array([0.4, 0.5]))) == pytest.approx(float(hf.heights[2, 2]))


def test_heightfield_follows_a_smooth_surface_within_grid_tolerance():
    """h = A sin(κx) cos(κy) sampled at λ/32: the bicubic interpolant's height is within its
    O(dx³) grid tolerance A (κ dx)³/10, its normal within the O(dx²) slope tolerance
    A κ (κ dx)²/6 (Catmull–Rom's node slopes are central differences)."""
    A, lam = 0.05, 1.0
    kap, dx = 2 * np.pi / lam, lam / 32
    xs = dx * np.arange(65)
    X, Y = np.meshgrid(xs, xs, indexing="ij")
    hf = HeightField(A * np.sin(kap * X) * np.cos(kap * Y), spacing=(dx, dx))
    xy = np.random.default_rng(3).uniform(0.1, 1.9, (40, 2))
    h = np.asarray(jax.vmap(hf.height)(jnp.asarray(xy)))
    nrm = np.asarray(jax.vmap(hf.normal)(jnp.asarray(xy)))
    x, y = xy[:, 0], xy[:, 1]
    hx = A * kap * np.cos(kap * x) * np.cos(kap * y)
    hy = -A * kap * np.sin(kap * x) * np.sin(kap * y)
    n_ex = np.stack([-hx, -hy, np.ones_like(hx)], 1) / np.sqrt(1 + hx**2 + hy**2)[:, None]
    assert np.max(np.abs(h - A * np.sin(kap * x) * np.cos(kap * y))) < A * (kap * dx) ** 3 / 10
    assert np.max(np.abs(nrm - n_ex)) < A * kap * (kap * dx) ** 2 / 6


@pytest.mark.slow
def test_sphere_on_rough_terrain(ball):
    ground = rough_terrain(0, size=2.0, resolution=0.05, amplitude=0.01, wavelength=0.5)
    c = Contacts([Sphere("ball", H)], ground, model=ball, mu=0.8)
    z0 = float(ground.height(jnp.zeros(2))) + H + 0.02
    tr = diffmb.simulate(ball, jnp.array([0.0, 0.0, z0, 1.0, 0, 0, 0]), jnp.zeros(6), t1=0.4,
                         dt=1e-3, forces=(c,), saveat=[0.2, 0.4])
    res = contact_forces(ball, tr, (c,))
    assert bool(tr.ok)
    pen = float(res.penetration[-1, 0])
    assert 0.0 < pen < 1e-3  # carried by the ground, near the flat-ground 0.29 mm
    assert float(jnp.linalg.norm(res.normal[-1, 0])) == pytest.approx(1.0, abs=1e-12)
    assert res.pairs == (("sphere0", "rough"),)


def test_rough_terrain_is_seeded_with_the_given_rms():
    a = rough_terrain(3, size=(4.0, 2.0), resolution=0.05, amplitude=0.03, wavelength=0.6)
    b = rough_terrain(3, size=(4.0, 2.0), resolution=0.05, amplitude=0.03, wavelength=0.6)
    c = rough_terrain(4, size=(4.0, 2.0), resolution=0.05, amplitude=0.03, wavelength=0.6)
    Ha = np.asarray(a.heights)
    assert Ha.shape == (81, 41)
    assert np.array_equal(Ha, np.asarray(b.heights)) and not np.allclose(Ha, c.heights)
    assert np.sqrt(np.mean(Ha**2)) == pytest.approx(0.03, rel=1e-12)
    assert np.allclose(a.origin, [-2.0, -1.0])
    d, n = a.signed_distance(jnp.array([0.3, 0.2, 1.0]))
    assert np.isfinite(float(d)) and float(jnp.linalg.norm(n)) == pytest.approx(1.0)


# ---- geometry closed forms ---------------------------------------------------------------------


def test_geom_candidate_points():
    terrain = Plane()
    R = jnp.asarray(np.eye(3))
    c = jnp.array([0.1, 0.2, 0.3])
    assert np.allclose(Sphere(0, 0.1).points(R, c, terrain), [[0.1, 0.2, 0.2]])
    assert np.allclose(Point(0).points(R, c, terrain), [c])
    cap = Capsule(0, 0.05, 0.2).points(R, c, terrain)
    assert np.allclose(cap, [[0.1, 0.2, 0.45], [0.1, 0.2, 0.05]])
    box_pts = np.asarray(Box(0, (0.1, 0.2, 0.3)).points(R, c, terrain))
    assert box_pts.shape == (8, 3) and np.allclose(box_pts.min(0), [0.0, 0.0, 0.0])
    # a wheel tilted by 0.4 rad: the deepest rim points match a brute-force search of each rim
    th = 0.4
    Rw = jnp.asarray(np.array([[1, 0, 0], [0, np.cos(th), -np.sin(th)],
                               [0, np.sin(th), np.cos(th)]]) @ np.array(
        [[1, 0, 0], [0, 0, -1], [0, 1, 0]]))  # axis ≈ horizontal, then tilted
    r, h = 0.3, 0.05
    pts = np.asarray(Cylinder(0, r, h).points(Rw, c, terrain))
    phi = np.linspace(0, 2 * np.pi, 200001)
    a = np.asarray(Rw)[:, 2]
    w = np.array([0.0, 0.0, 1.0]) - a[2] * a
    tol = r * CYLINDER_EPS**2 / (2 * np.dot(w, w)) + 1e-10  # the documented regularisation bound
    for k, sgn in enumerate((1.0, -1.0)):
        e = np.asarray(c) + sgn * h * np.asarray(Rw)[:, 2]
        rim = e + r * (np.cos(phi)[:, None] * np.asarray(Rw)[:, 0]
                       + np.sin(phi)[:, None] * np.asarray(Rw)[:, 1])
        assert pts[3 * k, 2] == pytest.approx(rim[:, 2].min(), abs=tol)
        assert pts[3 * k + 1, 2] > pts[3 * k, 2] + r  # the ±120° points stay well above
    # standing on an end face: three points per rim at the same height
    pts = np.asarray(Cylinder(0, r, h).points(R, c, terrain))
    assert np.allclose(pts[3:, 2], c[2] - h) and np.allclose(pts[:3, 2], c[2] + h)


def test_candidate_velocities_are_material_point_velocities(ball):
    rng = np.random.default_rng(2)
    quat = rng.normal(size=4)
    quat /= np.linalg.norm(quat)
    q = jnp.concatenate([jnp.array([0.3, -0.2, 0.5]), jnp.asarray(quat)])
    v = jnp.asarray(rng.normal(size=6))
    geoms = (Sphere("ball", H), Capsule("ball", 0.02, 0.1, pos=(0.05, 0, 0), quat=quat),
             Box("ball", (0.05, 0.06, 0.07)), Cylinder("ball", 0.1, 0.03), Point("ball"))
    cand = candidates(ball, geoms, Plane(), q, v)
    assert cand.point.shape == (1 + 2 + 8 + 6 + 1, 3) and cand.body == (0,) * 18
    R, p = diffmb.body_pose(ball, q, "ball")
    w_world = R @ v[3:]
    expected = v[:3] + jnp.cross(w_world, cand.point - p)  # com at the body origin here
    assert np.allclose(cand.velocity, expected, atol=1e-12)
    assert np.allclose(cand.penetration, -cand.point[:, 2], atol=1e-12)


# ---- (j) a batch ------------------------------------------------------------------------------


@pytest.mark.slow
def test_jit_vmap_batch_of_drops(ball):
    c = Contacts([Sphere("ball", H)], Plane(), model=ball, mu=0.5)
    delta0 = M_BALL * G / _k_per_point(M_BALL, 1)

    @jax.jit
    def drop(h0):
        q0 = jnp.concatenate([jnp.zeros(2), (H + h0)[None], jnp.array([1.0, 0, 0, 0])])
        tr = diffmb.simulate(ball, q0, jnp.zeros(6), t1=0.6, dt=1e-3, forces=(c,),
                             saveat=[0.6])
        return tr.q[-1, 2], tr.status

    heights = jnp.linspace(0.0, 0.07, 8)
    zf, status = jax.vmap(drop)(heights)
    assert np.all(np.asarray(status) == 0)
    assert np.allclose(np.asarray(zf), H - delta0, rtol=0, atol=0.01 * delta0)


# ---- numbers that have no meaning are refused where they enter ---------------------------------


def _laws(**kw):
    """Contacts on a ball with every parameter given (no model needed) and ``kw`` replaced."""
    base = dict(stiffness=1e4, damping=50.0, tangential_stiffness=1e4, tangential_damping=50.0)
    base.update(kw)
    return Contacts([Sphere("ball", H, name="ball")], Plane(), **base)


BAD = [
    ("mu", lambda: _laws(mu=-1.0), ValueError, r"Contacts\.mu = -1: must be >= 0"),
    ("mu", lambda: _laws(mu=np.nan), ValueError, r"Contacts\.mu = nan: must be finite"),
    ("mu", lambda: _laws(mu=np.array([0.5, -0.1])), ValueError, r"Contacts\.mu\[1\]"),
    ("stiffness", lambda: _laws(stiffness=0.0), ValueError, r"Contacts\.stiffness = 0: must be > 0"),
    ("stiffness", lambda: _laws(stiffness=-5.0), ValueError, r"Contacts\.stiffness = -5"),
    ("damping", lambda: _laws(damping=-1.0), ValueError, r"Contacts\.damping = -1: must be >= 0"),
    ("exponent", lambda: _laws(normal="hunt_crossley", exponent=0.5), ValueError,
     r"Contacts\.exponent = 0\.5: must be >= 1"),
    ("normal", lambda: _laws(normal="hertz"), ValueError, r"Contacts\.normal = 'hertz'"),
    ("tangential_damping", lambda: _laws(tangential_damping=0.0), ValueError,
     r"Contacts\.tangential_damping = 0: must be > 0"),
    ("dmax", lambda: Contacts([Sphere("ball", H)], Plane(), stiffness=1.0, damping=1.0,
                              tangential_stiffness=1.0, tangential_damping=1.0, dmax=1.5),
     ValueError, r"Contacts\.dmax = 1\.5: must be in \(0, 1\)"),
    ("eps", lambda: CoulombContacts([Sphere("ball", H)], Plane(), stiffness=1.0, damping=1.0,
                                    eps=0.0), ValueError, r"CoulombContacts\.eps = 0"),
    ("radius", lambda: Sphere("ball", -0.1), ValueError, r"Sphere\.radius = -0\.1: must be > 0"),
    ("radius", lambda: Sphere("ball", 0.0, name="b"), ValueError, r"Sphere 'b'\.radius = 0"),
    ("radius", lambda: Capsule("ball", np.nan, 0.1), ValueError, r"Capsule\.radius = nan"),
    ("half_sizes", lambda: Box("box", (0.1, 0.0, 0.1)), ValueError,
     r"Box\.half_sizes\[1\] = 0: must be > 0"),
    ("half_sizes", lambda: Box("box", (0.1, 0.1)), TypeError, r"Box\.half_sizes: expected shape"),
    ("half_height", lambda: Cylinder("w", 0.1, -0.02), ValueError, r"Cylinder\.half_height"),
    ("quat", lambda: Sphere("ball", 0.1, quat=(0.0, 0.0, 0.0, 0.0)), ValueError,
     r"Sphere\.quat = .*nonzero"),
    ("pos", lambda: Point("ball", (0.0, np.inf, 0.0)), ValueError, r"Point\.pos\[1\] = inf"),
    ("body", lambda: Point(-1), ValueError, r"Point\.body = -1: must be >= 0"),
    ("heights", lambda: HeightField([[0.0, np.nan], [0.0, 0.0]]), ValueError,
     r"HeightField 'heightfield'\.heights\[0, 1\] = nan: must be finite"),
    ("heights", lambda: HeightField(np.zeros(5)), TypeError, r"HeightField .*\.heights"),
    ("spacing", lambda: HeightField(np.zeros((3, 3)), spacing=(0.1, 0.0)), ValueError,
     r"HeightField 'heightfield'\.spacing\[1\] = 0: must be > 0"),
    ("normal", lambda: Plane((0.0, 0.0, 0.0)), ValueError, r"Plane 'plane'\.normal = .*nonzero"),
    ("offset", lambda: Plane(offset=np.nan, name="floor"), ValueError,
     r"Plane 'floor'\.offset = nan: must be finite"),
    ("amplitude", lambda: rough_terrain(0, amplitude=-0.01), ValueError,
     r"rough_terrain\.amplitude = -0\.01: must be >= 0"),
    ("wavelength", lambda: rough_terrain(0, wavelength=0.0), ValueError,
     r"rough_terrain\.wavelength = 0: must be > 0"),
]


@pytest.mark.parametrize("field, make, exc, match", BAD, ids=[f"{b[0]}-{i}" for i, b in
                                                             enumerate(BAD)])
def test_meaningless_numbers_are_refused_naming_class_field_and_range(field, make, exc, match):
    with pytest.raises(exc, match=match) as info:
        make()
    assert field in str(info.value)


def test_geom_on_a_body_the_model_lacks_is_refused_naming_the_model(ball):
    with pytest.raises(ValueError, match=r"Contacts\.geoms\[1\]\.body = 5: must be an index "
                                         r"in \[0, 1\) \(model 'ball' has 1 body\)"):
        Contacts([Sphere("ball", H), Sphere(5, H)], Plane(), model=ball)
    with pytest.raises(ValueError, match=r"Contacts\.geoms\[0\]\.body = 'wheel': no such body "
                                         r"in model 'ball'"):
        Contacts([Sphere("wheel", H)], Plane(), model=ball)


def test_traced_parameters_are_not_checked():
    """Inside jit the numbers come from an optimiser's step: no check, no concretisation."""
    mu = jax.jit(lambda m: _laws(mu=m).mu)(-1.0)
    assert float(mu[0]) == -1.0
    r = jax.jit(lambda r: Sphere("ball", r).radius)(-0.5)
    assert float(r) == -0.5


def test_sphere_started_deep_below_the_floor_is_refused_by_name(ball):
    """0.5 m below the floor the compliant contact would launch the ball (to 18.6 m in 0.5 s
    with the default law): simulate refuses it, naming the geom and the depth; a ball resting
    at its static penetration starts normally."""
    c = Contacts([Sphere("ball", H, name="ball")], Plane(name="floor"), model=ball, mu=0.5)
    q_deep = jnp.array([0.0, 0.0, -0.5, 1.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"geom 'ball' \(sphere\) starts 0\.6 m deep in terrain "
                                         r"'floor', more than 0\.5 of its size 0\.1 m"):
        diffmb.simulate(ball, q_deep, None, t1=0.01, dt=1e-3, forces=(c,))
    # a traced start (a batch, a gradient) is not checked
    jax.jit(lambda q: c.check_initial(ball, q) or q)(q_deep)
    # the limit sits at half the radius: 0.049 m deep passes the check, 0.051 m does not
    c.check_initial(ball, jnp.array([0.0, 0.0, H - 0.049, 1.0, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"starts 0\.051 m deep"):
        c.check_initial(ball, jnp.array([0.0, 0.0, H - 0.051, 1.0, 0.0, 0.0, 0.0]))
    # a box: its size is its smallest half-size; the check sees the deepest corner
    b = Contacts([Box("ball", (0.2, 0.2, 0.02), name="slab")], Plane(), model=ball)
    with pytest.raises(ValueError, match=r"geom 'slab' \(box\) starts 0\.015 m deep"):
        b.check_initial(ball, jnp.array([0.0, 0.0, 0.005, 1.0, 0.0, 0.0, 0.0]))


def test_heightfield_has_no_ground_beyond_its_extent():
    """The ground exists on the grid's rectangle, edges included: just inside the edge the
    distance is the field's, just beyond it the gap is NO_GROUND with the upward normal."""
    from diffmb.contacts.terrain import NO_GROUND

    hf, (sx, sy, h0) = _plane_field()  # x, y in [-1, 1]
    for x in (-1.0, 1.0):
        d, _ = hf.signed_distance(jnp.array([x, 0.0, 0.0]))
        assert float(d) == pytest.approx(-(h0 + sx * x) / np.sqrt(1 + sx**2 + sy**2), rel=1e-12)
        d, n = hf.signed_distance(jnp.array([x * (1 + 1e-9), 0.0, 0.0]))
        assert float(d) == NO_GROUND and np.array_equal(np.asarray(n), [0.0, 0.0, 1.0])
    d, _ = hf.signed_distance(jnp.array([0.5, 1.0 + 1e-9, -5.0]))
    assert float(d) == NO_GROUND  # deep below the field's level, beside it: still no ground


def _resting(ball, v0, w0):
    """The ball at its rest penetration on a z-up floor, moving with (v0, w0)."""
    delta0 = M_BALL * G / _k_per_point(M_BALL, 1)
    q0 = jnp.array([0.0, 0.0, H - delta0, 1.0, 0.0, 0.0, 0.0])
    return q0, jnp.concatenate([jnp.asarray(v0, float), jnp.asarray(w0, float)])


def test_torsional_friction_spins_a_ball_down_at_the_closed_form_rate(ball):
    """A ball spinning about the vertical on a floor, torsional friction μ_s = 0.02 m: the
    torque μ_s m g decelerates it at μ_s m g / (2/5 m r²) = 49.05 rad/s² (a closed form); with
    no torsion given the spin is kept."""
    mu_s = 0.02
    q0, v0 = _resting(ball, [0, 0, 0], [0, 0, 10.0])
    rate = mu_s * M_BALL * G / (0.4 * M_BALL * H**2)
    t1, t2 = 0.05, 0.15
    for torsion, expected in ((mu_s, -rate), (None, 0.0)):
        c = Contacts([Sphere("ball", H)], Plane(), model=ball, mu=1.0, torsion=torsion)
        tr = diffmb.simulate(ball, q0, v0, t1=t2, dt=1e-3, forces=(c,), saveat=[t1, t2])
        w = np.asarray(tr.v[:, 5])
        assert (w[1] - w[0]) / (t2 - t1) == pytest.approx(expected, rel=1e-3, abs=1e-6)


def test_rolling_friction_slows_a_rolling_ball_at_the_closed_form_rate(ball):
    """A ball rolling without slipping at 1 m/s, rolling friction μ_r = 0.01 m: about the
    contact point (7/5 m r²) ω̇ = −μ_r m g, so it slows at 5 μ_r g / (7 r) = 0.7007 m/s²
    (a closed form), still rolling."""
    mu_r = 0.01
    q0, v0 = _resting(ball, [1.0, 0, 0], [0, 1.0 / H, 0])
    c = Contacts([Sphere("ball", H)], Plane(), model=ball, mu=1.0, rolling=mu_r)
    t1, t2 = 0.05, 0.3
    tr = diffmb.simulate(ball, q0, v0, t1=t2, dt=1e-3, forces=(c,), saveat=[t1, t2])
    vx = np.asarray(tr.v[:, 0])
    assert (vx[1] - vx[0]) / (t2 - t1) == pytest.approx(-5 * mu_r * G / (7 * H), rel=1e-2)
    np.testing.assert_allclose(np.asarray(tr.v[-1, 4]) * H, vx[-1], rtol=1e-3)  # rolls
