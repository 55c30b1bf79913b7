"""Wheel–soil terramechanics (diffmb.contacts.terramechanics) against independent references:
scipy quadrature of the stresses written again here in numpy, sympy integration of the
linearised distributions, central differences, and the static curves for the dynamic rig."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate as si
import sympy as sp

import diffmb
from diffmb.contacts import Plane
from diffmb.contacts import terramechanics as tm
from diffmb.models import rover

R, B, LOAD = 0.09, 0.11, 64.68
REG = tm.SOILS["regolith_simulant"]
_wheel_forces = eqx.filter_jit(tm.wheel_forces)  # one compilation per node count


@jax.jit
def _static(soil, load, s):
    """Static θ₁, sinkage z and the Wong–Reece forces of the test-bed wheel."""
    t1 = tm.static_sinkage(soil, R, B, load, s)
    return t1, tm.sinkage_from_angle(t1, R), tm.wheel_forces(soil, R, B, t1, s)


# ---- an independent numpy transcription of the Wong–Reece integrands --------------------------


def _np_soil(soil):
    return {k: float(getattr(soil, k)) for k in
            ("n", "k_c", "k_phi", "c", "phi", "K", "K_y", "c1", "c2")}


def _np_forces(soil, r, b, th1, s, th2=0.0, tanb=0.0):
    p = _np_soil(soil)
    thm = (p["c1"] + p["c2"] * s) * th1
    k = (p["k_c"] / b + p["k_phi"]) * r ** p["n"]
    g = 1.0 - s if s >= 0 else 1.0 / (1.0 + s)

    def sigma(t):
        if t >= thm:
            ts = t
        else:
            ts = th1 - (t - th2) / (thm - th2) * (th1 - thm)
        return k * max(np.cos(ts) - np.cos(th1), 0.0) ** p["n"]

    def sat(j, K):
        return np.sign(j) * (1.0 - np.exp(-abs(j) / K))

    def tau(t):
        j = r * ((th1 - t) - g * (np.sin(th1) - np.sin(t)))
        return (p["c"] + sigma(t) * np.tan(p["phi"])) * sat(j, p["K"])

    def tau_y(t):
        j = r * g * (th1 - t) * tanb
        return (p["c"] + sigma(t) * np.tan(p["phi"])) * sat(j, p["K_y"])

    def q(f):
        opts = dict(limit=200, epsabs=0.0, epsrel=1e-12)
        return si.quad(f, th2, thm, **opts)[0] + si.quad(f, thm, th1, **opts)[0]

    W = r * b * q(lambda t: sigma(t) * np.cos(t) + tau(t) * np.sin(t))
    DP = r * b * q(lambda t: tau(t) * np.cos(t) - sigma(t) * np.sin(t))
    T = r * r * b * q(tau)
    Fy = -r * b * q(tau_y)
    return np.array([W, DP, T, Fy])


def _vec(F):
    return np.array([float(F.load), float(F.drawbar_pull), float(F.torque), float(F.lateral)])


CASES = [("regolith_simulant", 0.7, 0.3, 0.0, 0.2), ("regolith_simulant", 0.5, -0.4, -0.1, -0.3),
         ("clay", 0.4, 0.0, 0.0, 0.0), ("dry_sand", 0.9, 0.9, -0.2, 0.5)]


@pytest.mark.parametrize("soil,th1,s,th2,tanb", CASES)
def test_quadrature_against_scipy_and_a_2000_node_reference(soil, th1, s, th2, tanb):
    so = tm.SOILS[soil]
    th1, s, th2, tanb = (jnp.asarray(x) for x in (th1, s, th2, tanb))  # traced: one compilation
    F32 = _vec(_wheel_forces(so, R, B, th1, s, theta2=th2, tan_beta=tanb))
    F2000 = _vec(_wheel_forces(so, R, B, th1, s, theta2=th2, tan_beta=tanb, n_nodes=2000))
    ref = _np_forces(so, R, B, *(float(x) for x in (th1, s, th2, tanb)))
    scale = np.max(np.abs(ref))
    assert np.max(np.abs(F2000 - ref)) / scale < 1e-9
    assert np.max(np.abs(F32 - F2000)) / scale < 1e-6
    # and converging: 8 nodes are visibly worse than 32
    F8 = _vec(_wheel_forces(so, R, B, th1, s, theta2=th2, tan_beta=tanb, n_nodes=8))
    assert np.max(np.abs(F8 - F2000)) >= np.max(np.abs(F32 - F2000))


@pytest.mark.parametrize("th1,s,tanb", [(0.35, 0.2, 0.05), (0.25, 0.6, -0.2), (0.5, 0.05, 0.0)])
def test_the_rovers_node_count_against_scipy(th1, s, tanb):
    """The rover's wheels (r = b = 0.15 m) with the study's N_NODES per segment: within 1e-5
    of the largest force (driving, the traverse's range of entry angles); the memory's
    load-only quadrature equals the full one's load."""
    from diffmb.studies import rover as study

    rw = 0.15
    args = (jnp.asarray(th1), jnp.asarray(s))
    F = _vec(_wheel_forces(REG, rw, rw, *args, tan_beta=jnp.asarray(tanb),
                           n_nodes=study.N_NODES))
    ref = _np_forces(REG, rw, rw, th1, s, 0.0, tanb)
    assert np.max(np.abs(F - ref)) / np.max(np.abs(ref)) < 1e-5
    W = float(tm.normal_load(REG, rw, rw, *args, n_nodes=study.N_NODES))
    assert abs(W - F[0]) <= 1e-12 * abs(F[0])


@jax.jit
def _load_grid(soil, th, s):
    W = jax.vmap(jax.vmap(lambda t, si: tm.normal_load(soil, R, B, t, si), (0, None)),
                 (None, 0))(th, s)
    Wl = jax.vmap(jax.vmap(lambda t, si: tm.linear_normal_load(soil, R, B, t, si), (0, None)),
                  (None, 0))(th, s)
    return W, Wl


def test_load_monotone_in_entry_angle():
    th = jnp.linspace(0.0, np.pi / 2, 200)
    s = jnp.linspace(0.0, 1.0, 11)
    for name in ("regolith_simulant", "dry_sand", "clay"):
        W, Wl = _load_grid(tm.SOILS[name], th, s)
        assert np.all(np.diff(np.asarray(W), axis=1) > 0), name
        assert np.all(np.diff(np.asarray(Wl)[:, 1:], axis=1) > 0), name


@pytest.mark.parametrize("model", ["wong_reece", "linearised"])
def test_static_sinkage_balances_the_load(model):
    Wf = tm.normal_load if model == "wong_reece" else tm.linear_normal_load
    s, load = (jnp.asarray(x).ravel() for x in np.meshgrid([0.0, 0.25, 0.9], [1.0, LOAD, 300.0]))

    @jax.jit
    @jax.vmap
    def balance(s, load):
        t1 = tm.static_sinkage(REG, R, B, load, s, model=model)
        return t1, Wf(REG, R, B, t1, s)

    t1, W = balance(s, load)
    assert np.all((np.asarray(t1) > 0) & (np.asarray(t1) < np.pi / 2))
    np.testing.assert_allclose(np.asarray(W), np.asarray(load), rtol=1e-10)


def test_static_sinkage_refuses_a_load_it_cannot_carry():
    with pytest.raises(Exception, match="front_left"):
        tm.static_sinkage(REG, R, B, 1e6, 0.2, name="front_left")


@pytest.mark.slow
def test_sinkage_gradient_against_central_differences_and_the_implicit_function_theorem():
    s = 0.3

    @jax.jit
    def theta1(kphi):
        return tm.static_sinkage(REG.replace(k_phi=kphi), R, B, LOAD, s)

    k0 = float(REG.k_phi)
    g = float(jax.grad(theta1)(k0))
    h = 1e-4 * k0
    fd = (float(theta1(k0 + h)) - float(theta1(k0 - h))) / (2 * h)
    assert g == pytest.approx(fd, rel=1e-6)
    t1 = theta1(k0)
    dW_dk = jax.grad(lambda k: tm.normal_load(REG.replace(k_phi=k), R, B, t1, s))(k0)
    dW_dt = jax.grad(lambda t: tm.normal_load(REG, R, B, t, s))(t1)
    assert g == pytest.approx(float(-dW_dk / dW_dt), rel=1e-10)
    # sinkage and its gradient in every soil parameter, all finite, by reverse mode
    gs = jax.grad(lambda so: tm.sinkage_from_angle(tm.static_sinkage(so, R, B, LOAD, s), R))(REG)
    assert all(np.isfinite(float(x)) for x in jax.tree.leaves(gs))
    assert float(gs.k_phi) < 0 and float(gs.n) != 0.0


# ---- the linearised model ----------------------------------------------------------------------


def test_eq28_derivation_by_sympy_matches_the_printed_form():
    t, t1, tm_, sm, km, c = sp.symbols("theta theta1 theta_m sigma_m kappa_m c", positive=True)
    s1 = sm * (t1 - t) / (t1 - tm_)
    s2 = sm * t / tm_
    k1 = km * (t1 - t) / (t1 - tm_)
    k2 = c + (km - c) * t / tm_
    W = (sp.integrate(s2 * sp.cos(t) + k2 * sp.sin(t), (t, 0, tm_))
         + sp.integrate(s1 * sp.cos(t) + k1 * sp.sin(t), (t, tm_, t1)))
    C, S = sp.cos, sp.sin
    printed = (sm * (-tm_ * C(t1) + t1 * C(tm_) - t1 + tm_) - km * (tm_ * S(t1) - t1 * S(tm_))
               - c * (t1 * S(tm_) - tm_ * S(tm_) - tm_ * t1 + tm_**2)) / (tm_ * (t1 - tm_))
    assert sp.simplify(W - printed) == 0
    DP = (sp.integrate(k2 * sp.cos(t) - s2 * sp.sin(t), (t, 0, tm_))
          + sp.integrate(k1 * sp.cos(t) - s1 * sp.sin(t), (t, tm_, t1)))
    mine = ((km - c) * (C(tm_) - 1) / tm_ + km * (C(tm_) - C(t1)) / (t1 - tm_)
            - sm * (t1 * S(tm_) - tm_ * S(t1)) / (tm_ * (t1 - tm_)))
    assert sp.simplify(DP - mine) == 0
    T = sp.integrate(k2, (t, 0, tm_)) + sp.integrate(k1, (t, tm_, t1))
    assert sp.simplify(T - (km * t1 + c * tm_) / 2) == 0


@pytest.mark.parametrize("s", [0.0, 0.35, 0.9])
def test_linearised_closed_forms_against_quadrature_of_eq26(s):
    th1 = 0.62
    theta_m, sm, km = (float(x) for x in tm.linear_peak_stresses(REG, R, B, th1, s))

    def stresses(t):
        sg, ta = tm.linear_stresses(jnp.asarray(t), REG, R, B, th1, s)
        return float(sg), float(ta)

    def q(f):
        return si.quad(f, 0.0, theta_m, epsrel=1e-13)[0] + si.quad(f, theta_m, th1,
                                                                   epsrel=1e-13)[0]

    W = R * B * q(lambda t: stresses(t)[0] * np.cos(t) + stresses(t)[1] * np.sin(t))
    DP = R * B * q(lambda t: stresses(t)[1] * np.cos(t) - stresses(t)[0] * np.sin(t))
    T = R * R * B * q(lambda t: stresses(t)[1])
    F = tm.linear_wheel_forces(REG, R, B, th1, s)
    assert float(F.load) == pytest.approx(W, rel=1e-10)
    assert float(tm.linear_normal_load_printed(REG, R, B, th1, s)) == pytest.approx(W, rel=1e-10)
    assert float(F.drawbar_pull) == pytest.approx(DP, rel=1e-9, abs=1e-9)
    assert float(F.torque) == pytest.approx(T, rel=1e-10)
    assert float(tm.gross_traction(REG, R, B, th1, s)) == pytest.approx(T / R, rel=1e-10)
    # the peak stresses are Wong–Reece's at θ_m (eqs. 24, 25)
    t_m = jnp.asarray(theta_m)
    sg = tm.normal_stress(t_m, th1, t_m, REG, R, B)
    assert float(sg) == pytest.approx(sm, rel=1e-12)
    assert float(tm.shear_stress(sg, tm.shear_displacement(t_m, th1, s, R), REG)) == \
        pytest.approx(km, rel=1e-12)


def test_paper_moduli_round_trip():
    k1, k2 = tm.paper_moduli(tm.SOILS["dry_sand"], B)
    so = tm.Soil.from_paper(1.1, k1, k2, B, 1.04e3, 0.5, 0.01)
    assert float(so.k_c) == pytest.approx(0.99e3, rel=1e-12)
    assert float(so.k_phi) == pytest.approx(1528.43e3, rel=1e-12)
    assert float((k1 + k2 * B) * (R / B) ** 1.1) == pytest.approx(
        float(so.k_eq(B) * R**1.1), rel=1e-12)


# ---- slip kinematics and gradient safety --------------------------------------------------------


def test_slip_ratio_continuous_through_zero_and_locked_wheel():
    eps = tm.V_EPS
    assert float(tm.slip_ratio(0.5, 0.0, R)) == -1.0  # locked, sliding forward
    assert float(tm.slip_ratio(0.0, 2.0, R)) == 1.0  # spinning in place
    assert float(tm.slip_ratio(0.1, 0.1 / R / 0.8, R)) == pytest.approx(0.2, rel=1e-12)
    assert float(tm.slip_ratio(0.1 / 0.8, 0.1 / R, R)) == pytest.approx(-0.2, rel=1e-12)
    # through zero speed along rays v = a t, rω = b t: no jumps, finite gradients
    for a, b in ((1.0, 0.0), (1.0, 1.3), (-0.7, 0.4), (0.0, 1.0)):
        ts = np.linspace(-3 * eps, 3 * eps, 2001)
        sv = np.array([float(tm.slip_ratio(a * t, b * t / R, R)) for t in ts])
        assert np.max(np.abs(np.diff(sv))) < 0.01
    g = jax.grad(lambda v, w: tm.slip_ratio(v, w, R), argnums=(0, 1))(0.0, 0.0)
    assert all(np.isfinite(float(x)) for x in g)
    assert float(tm.slip_angle(0.0, 0.0)) == 0.0
    gb = jax.grad(tm.slip_angle, argnums=(0, 1))(0.0, 0.0)
    assert all(np.isfinite(float(x)) for x in gb)


@pytest.mark.slow
def test_gradients_finite_at_zero_sinkage_and_zero_slip():
    def total(args):
        so, r, b, t1, s, tb = args
        F = tm.wheel_forces(so, r, b, t1, s, tan_beta=tb)
        L = tm.linear_wheel_forces(so, r, b, t1, s)
        return (F.load + F.drawbar_pull + F.torque + F.lateral + L.load + L.drawbar_pull
                + L.torque + tm.entry_angle(t1 * 0.0, r))

    vg = jax.jit(jax.value_and_grad(total))
    for so in (REG, tm.SOILS["clay"]):
        for t1 in (0.0, 1e-9):
            args = (so, jnp.asarray(R), jnp.asarray(B), jnp.asarray(t1), jnp.asarray(0.0),
                    jnp.asarray(0.0))
            val, g = vg(args)
            assert np.isfinite(float(val))
            assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(g))
    gz = jax.grad(lambda z: tm.entry_angle(z, R))(0.0)
    assert np.isfinite(float(gz))
    # the static sinkage at zero slip, differentiated in every soil and wheel parameter
    g = jax.jit(jax.grad(lambda so, r, b: tm.static_sinkage(so, r, b, LOAD, 0.0),
                         argnums=(0, 1, 2)))(REG, R, B)
    assert all(np.isfinite(float(x)) for x in jax.tree.leaves(g))


# ---- the force element --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rig():
    model = rover.single_wheel_rig(R, B, LOAD)
    el = tm.WheelSoil([tm.Wheel("wheel", R, B, name="wheel")], Plane(), REG, model=model)
    return model, el


def test_element_static_balance_direction_and_never_pulls(rig):
    model, el = rig
    s = 0.3
    _, z, F = _static(REG, LOAD, s)
    z = float(z)
    vx = 0.1
    w = vx / (R * (1 - s))
    q = jnp.array([0.0, -z, 0.3])
    _ev = eqx.filter_jit(type(el).evaluate)

    def ev(*a):
        return _ev(el, *a)

    res = ev(model, q, jnp.array([vx, 0.0, w]), jnp.array([z]))
    assert float(res.normal[0]) == pytest.approx(float(F.load), rel=1e-9)
    assert float(res.drawbar_pull[0]) == pytest.approx(float(F.drawbar_pull), rel=1e-9)
    assert float(res.torque[0]) == pytest.approx(float(F.torque), rel=1e-9)
    fx = np.asarray(res.f_ext)
    wb = model.body_index("wheel")
    assert fx[wb, 2] == pytest.approx(float(F.load), rel=1e-9)
    assert fx[wb, 0] == pytest.approx(float(F.drawbar_pull), rel=1e-9)
    assert fx[wb, 4] == pytest.approx(-float(F.torque), rel=1e-9)  # −T about +y
    # one soil per wheel (a sequence) is the same element
    el1 = tm.WheelSoil([tm.Wheel("wheel", R, B, name="wheel")], Plane(), [REG], model=model)
    r1 = _ev(el1, model, q, jnp.array([vx, 0.0, w]), jnp.array([z]))
    assert float(r1.normal[0]) == float(res.normal[0])
    # travelling backwards with the mirrored spin: DP and T change sign, the load does not
    rb_ = ev(model, q, jnp.array([-vx, 0.0, -w]), jnp.array([z]))
    assert float(rb_.normal[0]) == pytest.approx(float(F.load), rel=1e-9)
    assert float(rb_.drawbar_pull[0]) == pytest.approx(-float(F.drawbar_pull), rel=1e-9)
    assert float(rb_.torque[0]) == pytest.approx(-float(F.torque), rel=1e-9)
    # at rest: no drawbar pull, no torque
    r0 = ev(model, q, jnp.zeros(3), jnp.array([z]))
    assert abs(float(r0.drawbar_pull[0])) < 1e-12 and abs(float(r0.torque[0])) < 1e-12
    # moving up fast: damping may cancel the load, never make it pull
    ru = ev(model, q, jnp.array([vx, 5.0, w]), jnp.array([z]))
    assert float(ru.normal[0]) == 0.0 and float(ru.drawbar_pull[0]) == 0.0
    # unloading below the remembered sinkage carries less than the virgin soil
    rm = ev(model, q, jnp.array([vx, 0.0, w]), jnp.array([1.02 * z]))
    assert 0.0 < float(rm.normal[0]) < float(F.load)
    # out of contact: nothing
    ro = ev(model, jnp.array([0.0, 0.01, 0.0]), jnp.array([vx, 0.0, w]), jnp.array([0.0]))
    assert float(jnp.abs(ro.f_ext).max()) == 0.0


@pytest.mark.slow
def test_element_gradients_finite_at_touchdown_and_rest(rig):
    model, el = rig

    @eqx.filter_jit
    def grads(el, q, v):
        return jax.grad(f, argnums=(0, 1, 2))(el, q, v)

    def f(el, q, v):
        _, fe, ds = el.stateful_call(model, 0.0, q, v, None, jnp.zeros(1))
        return jnp.sum(fe**2) + jnp.sum(ds)

    for q, v in ((jnp.zeros(3), jnp.zeros(3)), (jnp.array([0.0, -1e-12, 0.0]), jnp.zeros(3)),
                 (jnp.array([0.0, -0.01, 0.0]), jnp.zeros(3))):
        g = grads(el, q, v)
        assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(g))


@pytest.mark.slow
def test_dynamic_rig_steady_state_matches_the_static_curves():
    """Carriage pulled at 0.2 m/s, wheel spun by a PI drive to constant slip, started at 80 % of
    the static sinkage: after 3 s sinkage, drawbar pull (element and tow force) and torque
    (element and drive torque) agree with the static solution within 1 %."""
    for s in (0.2, 0.6):
        _, z, F = _static(REG, LOAD, s)
        z = float(z)
        out = rover.simulate_single_wheel(s, t1=3.0, dt=1e-3)
        assert out["slip"] == pytest.approx(s, abs=1e-6)
        assert out["sinkage_m"] == pytest.approx(z, rel=1e-2)
        dp = float(F.drawbar_pull)
        for key, ref in (("drawbar_pull_N", dp), ("tow_force_N", -dp),
                         ("torque_Nm", float(F.torque)), ("drive_torque_Nm", float(F.torque))):
            assert out[key] == pytest.approx(ref, rel=1e-2, abs=1e-2 * LOAD * 1e-2), key
        zs = -np.asarray(out["traj"].q[:, 1])
        assert np.ptp(zs) < 1e-3 * z  # steady: the sinkage no longer moves


# ---- physics trends ---------------------------------------------------------------------------


@pytest.mark.slow
def test_published_trends_drawbar_pull_and_torque_rise_with_slip():
    """Wong (Theory of Ground Vehicles, ch. 4, the rigid wheel on dry sand) and Ishigami et al.
    (2007, the regolith simulant): drawbar pull and driving torque increase with slip, DP is
    negative (compaction resistance) at zero slip and positive above a small slip on dry sand;
    the sinkage grows with slip (slip sinkage through θ_m)."""
    sand = tm.single_wheel_curve(tm.SOILS["dry_sand"])
    dp = np.array([r["drawbar_pull_N"] for r in sand])
    T = np.array([r["torque_Nm"] for r in sand])
    assert np.all(np.diff(dp) > 0) and np.all(np.diff(T) > 0)
    assert dp[0] < 0 and np.all(dp[2:] > 0)
    for rows in tm.single_wheel_table().values():
        dp = np.array([r["drawbar_pull_N"] for r in rows])
        T = np.array([r["torque_Nm"] for r in rows])
        assert np.all(np.diff(dp) > 0) and np.all(np.diff(T) > 0)
        assert dp[0] < 0 < dp[-1]
    z = np.array([r["sinkage_m"] for r in tm.single_wheel_curve()])
    assert np.all(np.diff(z[1:]) > 0)
    lin = tm.single_wheel_curve(model="linearised")
    assert all(r["gross_traction_N"] > r["drawbar_pull_N"] for r in lin)


def test_single_wheel_table_layout():
    tab = tm.single_wheel_table()
    assert set(tab) == {"wong_reece", "linearised"}
    for name, rows in tab.items():
        assert [r["slip"] for r in rows] == pytest.approx(np.arange(10) / 10)
        keys = {"slip", "sinkage_m", "drawbar_pull_N", "torque_Nm"}
        if name == "linearised":
            keys.add("gross_traction_N")
        assert all(set(r) == keys for r in rows)
        assert all(0.0 < r["sinkage_m"] < R for r in rows)


# The soil sets as their sources print them, in the printed units: Wong, Theory of Ground
# Vehicles, Table 2.3 (k_c in kN/m^(n+1), k_phi in kN/m^(n+2), c in kPa, phi in degrees);
# Ishigami et al. (2007) (k_c, k_phi in N/m^(n+1), N/m^(n+2), c in kPa, phi in degrees, K in m);
# Chrono's demo_ROBOT_Viper_SCM.cpp and SCMTerrain defaults (Pa, degrees, m).
PRINTED = {
    "dry_sand": dict(n=1.1, k_c=0.99, k_phi=1528.43, c=1.04, phi=28.0, unit=1e3),
    "clay": dict(n=0.5, k_c=13.19, k_phi=692.15, c=4.14, phi=13.0, unit=1e3),
    "regolith_simulant": dict(n=1.0, k_c=1.37e3, k_phi=8.14e5, c=0.8e3, phi=37.2, K=0.036,
                              unit=1.0),
    "lunar_soil": dict(n=1.0, k_c=0.14e4, k_phi=0.82e6, c=0.017e4, phi=35.0, K=1.78e-2,
                       unit=1.0),
    "chrono_scm_default": dict(n=1.1, k_c=0.0, k_phi=2e6, c=50.0, phi=20.0, K=0.01, unit=1.0),
}


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_soils_table_matches_the_printed_sources(name):
    """Every SI field of SOILS against its source's printed numbers and units, and Bekker's
    plate pressure p = (k_c/b + k_phi) z^n in the printed units (kPa for Wong's table) at
    b = 0.1 m, z = 2 cm against the element's k_eq."""
    pr, so = PRINTED[name], tm.SOILS[name]
    u = pr["unit"]
    assert float(so.n) == pr["n"]
    assert float(so.k_c) == pytest.approx(pr["k_c"] * u, rel=1e-12, abs=0.0)
    assert float(so.k_phi) == pytest.approx(pr["k_phi"] * u, rel=1e-12)
    assert float(so.c) == pytest.approx(pr["c"] * u, rel=1e-12)
    assert float(so.phi) == pytest.approx(pr["phi"] * np.pi / 180.0, rel=1e-12)
    if "K" in pr:
        assert float(so.K) == pytest.approx(pr["K"], rel=1e-12)
    b, z = 0.1, 0.02
    p_printed = (pr["k_c"] / b + pr["k_phi"]) * z ** pr["n"] * u  # Pa
    assert float(so.k_eq(b) * z**so.n) == pytest.approx(p_printed, rel=1e-12)
    assert name in tm.SOIL_SOURCES
    assert set(tm.SOILS) == set(tm.SOIL_SOURCES)


def test_lateral_force_opposes_lateral_slip_and_eq32():
    F = tm.wheel_forces(REG, R, B, 0.6, 0.2, tan_beta=0.3)
    Fm = tm.wheel_forces(REG, R, B, 0.6, 0.2, tan_beta=-0.3)
    assert float(F.lateral) < 0 and float(Fm.lateral) == pytest.approx(-float(F.lateral))
    L = tm.lateral_force_eq32(LOAD, jnp.array([-0.2, 0.0, 0.2]), REG, 0.005, 5.0)
    assert float(L[1]) == 0.0 and float(L[2]) == pytest.approx(-float(L[0]))
    assert float(L[2]) == pytest.approx((800 * 0.005 + LOAD * np.tan(REG.phi)) *
                                        (1 - np.exp(-1.0)), rel=1e-12)


def test_element_in_simulate_from_rest_comes_to_rest_in_its_rut():
    """No drive: the rig set down on the soil sinks, overshoots (the memory keeps the deepest
    sinkage m) and comes to rest on the unloading line, W(m)(1 − κ(m − z)/m) = load (or at the
    virgin static sinkage if it never overshot), with no horizontal drift or spin."""
    # the rig of the steady-state test with its drive's gains set to zero (one compilation)
    out = rover.simulate_single_wheel(0.0, speed=0.0, z0=0.0, gains=(0.0, 0.0, 0.0))
    tr = out["traj"]
    z_static = float(_static(REG, LOAD, 0.0)[1])
    z, m = -float(tr.q[-1, 1]), float(tr.aux[0][0][-1, 0])
    if z < m - 1e-9:  # resting on the unloading line of its deepest sinkage m
        Wm = float(jax.jit(tm.normal_load)(REG, R, B, tm.entry_angle(m, R), 0.0))
        assert m > z_static
        assert z == pytest.approx(m - (1.0 - LOAD / Wm) * m / float(REG.unloading), rel=1e-6)
    else:
        assert z == pytest.approx(z_static, rel=1e-4)
    # no drive: no drawbar pull; the averaged sinkage is the rest sinkage
    assert out["drawbar_pull_N"] == pytest.approx(0.0, abs=1e-9)
    assert out["sinkage_m"] == pytest.approx(z, rel=1e-6)
    assert np.max(np.abs(np.asarray(tr.v[-1]))) < 1e-7  # at rest: N = m g


# ---- numbers that have no meaning are refused where they enter ---------------------------------


def _soil(**kw):
    base = dict(n=1.0, k_c=1.37e3, k_phi=8.14e5, c=800.0, phi=0.65, K=0.036)
    base.update(kw)
    return tm.Soil(**base)


BAD = [
    ("c", lambda: _soil(c=-1.0), r"Soil\.c = -1: must be >= 0"),
    ("phi", lambda: _soil(phi=np.pi / 2), r"Soil\.phi = 1\.5708: must be in \[0, 1\.5708\)"),
    ("phi", lambda: _soil(phi=-0.1), r"Soil\.phi = -0\.1"),
    ("n", lambda: _soil(n=-0.5), r"Soil\.n = -0\.5: must be > 0"),
    ("k_phi", lambda: _soil(k_phi=np.nan), r"Soil\.k_phi = nan: must be finite"),
    ("k_c", lambda: _soil(k_c=-1.0), r"Soil\.k_c = -1: must be >= 0"),
    ("k_phi", lambda: _soil(k_c=0.0, k_phi=0.0), r"Soil\.k_c = 0.*k_phi = 0.*must not both"),
    ("K", lambda: _soil(K=0.0), r"Soil\.K = 0: must be > 0"),
    ("K_y", lambda: _soil(K_y=-0.01), r"Soil\.K_y = -0\.01"),
    ("c2", lambda: _soil(c1=0.2, c2=0.3), r"Soil\.c2 = 0\.3: must be in \[-0\.2, 0\.2\]"),
    ("unloading", lambda: _soil(unloading=0.5), r"Soil\.unloading = 0\.5: must be >= 1"),
    ("phi", lambda: REG.replace(phi=2.0), r"Soil\.phi = 2: must be in"),
    ("radius", lambda: tm.Wheel("wheel", -0.1, B), r"Wheel\.radius = -0\.1: must be > 0"),
    ("width", lambda: tm.Wheel("wheel", R, 0.0, name="lf"), r"Wheel 'lf'\.width = 0: must be > 0"),
    ("axis", lambda: tm.Wheel("wheel", R, B, axis=(0.0, 0.0, 0.0)), r"Wheel\.axis = .*nonzero"),
    ("theta2", lambda: tm.Wheel("wheel", R, B, theta2=0.2), r"Wheel\.theta2 = 0\.2"),
    ("b", lambda: tm.single_wheel_curve(b=0.0), r"single_wheel_curve\.b = 0: must be > 0"),
    ("r", lambda: tm.single_wheel_curve(r=-0.09), r"single_wheel_curve\.r = -0\.09"),
    ("slips", lambda: tm.single_wheel_curve(slips=[0.2, 1.5]),
     r"single_wheel_curve\.slips\[1\] = 1\.5: must be in \[-1, 1\]"),
    ("slip", lambda: tm.wheel_forces(REG, R, B, 0.3, -1.2), r"wheel_forces\.slip = -1\.2"),
    ("theta1", lambda: tm.wheel_forces(REG, R, B, 2.0, 0.1), r"wheel_forces\.theta1 = 2"),
    ("load", lambda: tm.static_sinkage(REG, R, B, -5.0, 0.1), r"static_sinkage\.load = -5"),
    ("slip", lambda: tm.static_sinkage(REG, R, B, LOAD, 2.0), r"static_sinkage\.slip = 2"),
    ("v_eps", lambda: tm.WheelSoil([tm.Wheel("wheel", R, B)], Plane(), REG, v_eps=0.0),
     r"WheelSoil\.v_eps = 0: must be > 0"),
    ("slip", lambda: rover.ConstantSlipDrive(1.0, 0.2, R), r"ConstantSlipDrive\.slip = 1: must "
                                                           r"be in \[0, 1\)"),
    ("slip", lambda: rover.simulate_single_wheel(-0.2), r"simulate_single_wheel\.slip = -0\.2"),
]


@pytest.mark.parametrize("field, make, match", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_meaningless_numbers_are_refused_naming_class_field_and_range(field, make, match):
    with pytest.raises(ValueError, match=match) as info:
        make()
    assert field in str(info.value)


def test_indices_beyond_the_model_are_refused_naming_it(rig):
    model, _ = rig
    with pytest.raises(ValueError, match=r"WheelSoil\.wheels\[0\]\.body = 7: must be an index "
                                         r"in \[0, 3\) \(model 'single_wheel_rig'"):
        tm.WheelSoil([tm.Wheel(7, R, B)], Plane(), REG, model=model)
    with pytest.raises(ValueError, match=r"ConstantSlipDrive\.wheel_dof = 3: must be an index in "
                                         r"\[0, 3\)"):
        rover.ConstantSlipDrive(0.2, 0.2, R, wheel_dof=3, model=model)


def test_traced_soil_numbers_are_not_checked():
    c = jax.jit(lambda c: _soil(c=c).c)(-1.0)
    assert float(c) == -1.0


def test_a_zero_width_wheel_gives_no_nan_rows_but_an_error():
    """Before the checks a zero width returned NaN drawbar pulls in the rows; now the call is
    refused before anything is computed, and a valid width gives finite rows."""
    with pytest.raises(ValueError, match="b = 0"):
        tm.single_wheel_curve(b=0.0, slips=[0.3])
    rows = tm.single_wheel_curve(b=B, slips=[0.3])
    assert all(np.isfinite(v) for v in rows[0].values())


def test_wheel_started_below_its_radius_is_refused_by_name(rig):
    """simulate refuses a WheelSoil wheel whose initial sinkage exceeds its radius (θ₁ would
    pass π/2), naming the wheel and the sinkage; one radius deep is still accepted."""
    model, el = rig
    drive = rover.ConstantSlipDrive(0.2, 0.2, R, model=model)
    with pytest.raises(ValueError, match=r"wheel 'wheel' starts 0\.12 m deep in terrain 'plane', "
                                         r"more than its radius 0\.09 m"):
        diffmb.simulate(model, jnp.array([0.0, -0.12, 0.0]), None, t1=0.01, dt=1e-3,
                        forces=(el, drive))
    el.check_initial(model, jnp.array([0.0, -0.9 * R, 0.0]))


@pytest.mark.slow
def test_element_with_linearised_stresses_balances_eq28_and_gives_eq30(rig):
    """stresses='linearised': at the eq. 28 static sinkage (memory at the sinkage, at rest
    vertically) the element's normal load is the carried load, its drawbar pull the closed
    form of the eq. 26 stresses and its torque eq. 30; it refuses a lateral law it has no
    stresses for."""
    model, _ = rig
    el = tm.WheelSoil([tm.Wheel("wheel", R, B, name="wheel")], Plane(), REG, model=model,
                      stresses="linearised", lateral="eq32", lateral_B=1.0)
    s, vx = 0.3, 0.1
    t1 = tm.static_sinkage(REG, R, B, LOAD, s, model="linearised")
    z = float(tm.sinkage_from_angle(t1, R))
    q = jnp.array([0.0, -z, 0.3])
    res = eqx.filter_jit(type(el).evaluate)(el, model, q, jnp.array([vx, 0.0, vx / (R * (1 - s))]),
                                            jnp.array([z]))
    assert float(res.slip[0]) == pytest.approx(s, rel=1e-12)
    assert float(res.normal[0]) == pytest.approx(LOAD, rel=1e-9)
    assert float(res.drawbar_pull[0]) == pytest.approx(
        float(tm.linear_drawbar_pull(REG, R, B, t1, s)), rel=1e-9)
    assert float(res.torque[0]) == pytest.approx(
        float(tm.linear_resistance_torque(REG, R, B, t1, s)), rel=1e-9)
    assert float(res.lateral[0]) == 0.0
    with pytest.raises(ValueError, match="lateral='eq32'"):
        tm.WheelSoil([tm.Wheel("wheel", R, B)], Plane(), REG, stresses="linearised")
