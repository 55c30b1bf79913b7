"""The rover model: drive kinematics against closed forms, the differential held to round-off,
the recursive Lagrange formulation against ABA on the rover's tree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Contacts, Cylinder, Plane
from diffmb.models import rover


def test_drive_command_closed_forms():
    xy = rover.STEER_XY
    d, w = rover.drive_command(0.1, 0.0)
    np.testing.assert_allclose(np.asarray(d), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(w), 0.1 / rover.WHEEL_RADIUS, rtol=1e-12)
    # an arc of radius R to the left: each axis perpendicular to the line to the centre (0, R)
    R = 2.0
    d, _ = rover.drive_command(0.1, 0.1 / R)
    np.testing.assert_allclose(np.asarray(d), np.arctan(xy[:, 0] / (R - xy[:, 1])), atol=1e-12)
    # in place: every axis tangent to its circle about the body centre (wrapped to ±π/2)
    d, w = rover.drive_command(0.0, 0.2)
    tangent = np.arctan(-xy[:, 0] / xy[:, 1])
    np.testing.assert_allclose(np.asarray(d), tangent, atol=1e-12)
    assert np.all(np.sign(np.asarray(w)) == -np.sign(xy[:, 1]))  # left wheels roll back


def _rigid_ground(model):
    geoms = [Cylinder(f"wheel_{w}", rover.WHEEL_RADIUS, rover.WHEEL_WIDTH / 2,
                      quat=(0.7071068, 0.7071068, 0, 0), name=f"wheel_{w}") for w in rover.WHEELS]
    return Contacts(geoms, Plane(name="ground"), model=model, mu=0.8)


@pytest.mark.slow
def test_straight_drive_on_rigid_ground_holds_the_differential_exactly():
    model, forces, _ = rover.load()
    tr = diffmb.simulate(model, jnp.asarray(model.qpos0), None, t1=3.0, dt=1e-3,
                         forces=forces + (_rigid_ground(model),),
                         control=rover.behaviour_control("straight"),
                         saveat=np.linspace(0, 3, 31))
    q = np.asarray(tr.q)
    il, ir = model.joint_q[model.joint_index("diff_l")], model.joint_q[model.joint_index("diff_r")]
    assert np.max(np.abs(q[:, il] + q[:, ir])) < 1e-12
    # rolling without slip: the body advances r θ (θ the wheels' mean angle), at 0.1 m/s
    wheels = [model.joint_q[model.joint_index(f"wheel_{w}")] for w in rover.WHEELS]
    theta = np.mean(q[-1, wheels])
    assert abs(q[-1, 0] - rover.WHEEL_RADIUS * theta) < 0.01 * q[-1, 0]
    assert abs(float(tr.v[-1, 0]) - 0.1) < 1e-3
    assert abs(q[-1, 1]) < 1e-3


@pytest.mark.slow
def test_recursive_lagrange_equals_aba_on_the_rover():
    model, _, _ = rover.load()
    rng = np.random.default_rng(3)
    aba = jax.jit(lambda q, v, t: diffmb.forward_dynamics(model, q, v, t, method="aba"))
    lag = jax.jit(lambda q, v, t: diffmb.forward_dynamics(model, q, v, t, method="lagrange"))
    for _ in range(3):
        q = np.array(model.qpos0)
        q[3:7] = rng.normal(size=4)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = 0.4 * rng.normal(size=model.nq - 7)
        v, tau = rng.normal(size=model.nv), rng.normal(size=model.nv)
        np.testing.assert_allclose(np.asarray(lag(q, v, tau)), np.asarray(aba(q, v, tau)),
                                   atol=1e-9)


@pytest.mark.slow
def test_identify_rover_from_the_shipped_single_wheel_csv(tmp_path):
    """`diffmb identify rover --data rover_wheel.csv`: the rig's soil (k_phi, c, phi, K) within
    3 standard errors; c and phi are strongly correlated at one load (wide but honest errors)."""
    from diffmb.cli import main
    from diffmb.studies import rover as study

    out = tmp_path / "id"
    assert main(["identify", "rover", "--data", str(study.wheel_csv_path()),
                 "--out", str(out)]) == 0
    import json

    res = json.loads((out / "results.json").read_text())
    for name, v in res["identified"].items():
        assert np.isfinite(v["std"]) and v["std"] > 0, name
        assert abs(v["estimate"] - v["true"]) < 3 * v["std"], (name, v)
    assert abs(res["identified"]["k_phi"]["estimate"] / 8.14e5 - 1) < 0.02


@pytest.mark.slow
def test_coupled_aba_equals_the_mass_matrix_projection_and_holds_the_differential():
    """The exact differential by ABA over two right-hand sides (no mass matrix) against the
    projection with the CRBA mass matrix (Gauss's principle), at random states; C a = 0 to
    round-off."""
    from diffmb.systems import (
        _exact_coupling_matrix,
        coupled_forward_dynamics,
        project_accelerations,
    )

    model, forces, _ = rover.load()
    C = _exact_coupling_matrix(forces)
    rng = np.random.default_rng(5)
    new = jax.jit(lambda q, v, t, f: coupled_forward_dynamics(model, q, v, t, f, C))
    old = jax.jit(lambda q, v, t, f: project_accelerations(
        model, q, diffmb.forward_dynamics(model, q, v, t, f), C))
    for _ in range(3):
        q = np.array(model.qpos0)
        q[3:7] = rng.normal(size=4)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = 0.4 * rng.normal(size=model.nq - 7)
        v, tau = rng.normal(size=model.nv), 10 * rng.normal(size=model.nv)
        f = 20 * rng.normal(size=(model.n_bodies, 6))
        a, a_ref = np.asarray(new(q, v, tau, f)), np.asarray(old(q, v, tau, f))
        np.testing.assert_allclose(a, a_ref, atol=1e-10 * max(1.0, np.max(np.abs(a_ref))))
        assert np.max(np.abs(np.asarray(C) @ a)) < 1e-12
        # and the constraint force is not zero: the projection did something
        a_free = np.asarray(diffmb.forward_dynamics(model, q, v, tau, f))
        assert np.max(np.abs(np.asarray(C) @ a_free)) > 1e-3


def test_thin_shell_wheel_inertia_is_m_r2_and_reaches_the_mass_matrix():
    """The physical wheel: axial m r² (all of the mass on the rim), transverse m (r²/2 + b²/12);
    swapped into the model it is the wheel joint's diagonal of the mass matrix (the wheel spins
    about its centre of mass), plus the joint's armature; nothing else changes."""
    m, r, b = 3.674, 0.15, 0.15
    tr, ax, tr2 = rover.thin_shell_wheel_inertia()
    assert ax == pytest.approx(m * r * r, rel=1e-14) and ax == pytest.approx(0.082665, rel=1e-6)
    assert tr == tr2 == pytest.approx(m * (r * r / 2 + b * b / 12), rel=1e-14)
    assert rover.PAPER_WHEEL_INERTIA[1] / ax > 24  # the paper's value is impossible for the wheel
    model, _, _ = rover.load()
    phys = rover.with_wheel_inertia(model, (tr, ax, tr2))
    q = jnp.asarray(model.qpos0)
    mm = jax.jit(diffmb.mass_matrix)
    M0, M1 = np.asarray(mm(model, q)), np.asarray(mm(phys, q))
    arm = np.asarray(model.armature)
    wheels = [model.joint_v[model.joint_index(f"wheel_{w}")] for w in rover.WHEELS]
    for j in wheels:
        assert M0[j, j] == pytest.approx(rover.PAPER_WHEEL_INERTIA[1] + arm[j], rel=1e-12)
        assert M1[j, j] == pytest.approx(ax + arm[j], rel=1e-12)
    np.testing.assert_array_equal(np.asarray(phys.body_mass), np.asarray(model.body_mass))
    assert M1[0, 0] == pytest.approx(M0[0, 0], rel=1e-14)  # the total mass


def test_steady_window_starts_after_the_ramp():
    from diffmb.studies import rover as study

    t2 = np.round(np.arange(201) * 0.01, 10)
    mask, win = study.steady_window(t2)
    assert win == (1.0, 2.0) and t2[mask][0] == pytest.approx(1.0) and mask[-1]
    t5 = np.round(np.arange(501) * 0.01, 10)
    mask, win = study.steady_window(t5)
    assert win == (3.0, 5.0) and np.sum(mask) == 201
    with pytest.raises(ValueError, match="before the steady window"):
        study.steady_window(t2[:90])


def test_drawbar_pull_crossing_against_the_curve_and_K():
    """The zero-drawbar-pull slip: the single-wheel curve changes sign across it, it grows with
    the shear deformation modulus K (shear stress mobilised over j ~ K), and a soil that
    mobilises its strength at once (K → 0) pulls at zero slip."""
    from diffmb.contacts import terramechanics as tm
    from diffmb.studies import rover as study

    soil = tm.SOILS["regolith_simulant"]
    r, b, w = 0.15, 0.15, 107.287
    cross = [study.drawbar_pull_crossing(soil.replace(K=K), r, b, w)["crossing_slip"]
             for K in (0.01, 0.02, 0.036)]
    assert 0.0 < cross[0] < cross[1] < cross[2] < 0.5
    for K, s in zip((0.01, 0.036), (cross[0], cross[2]), strict=True):
        rows = tm.single_wheel_curve(soil.replace(K=K), r, b, w, [s - 0.005, s + 0.005])
        assert rows[0]["drawbar_pull_N"] < 0 < rows[1]["drawbar_pull_N"]
    assert study.drawbar_pull_crossing(soil.replace(K=1e-4), r, b, w)["crossing_slip"] == 0.0
    # K large: the shear never builds up enough, no crossing below s = 0.99 on the test bed
    assert study.drawbar_pull_crossing(soil.replace(K=0.06), 0.09, 0.11, 64.68)[
        "crossing_slip"] is None


def test_measured_single_wheel_table_and_the_model_beside_it():
    """The stored measured curve (C. Pavlov, robomechanics/3d-terramechanics, commit 55a6e92b:
    a smooth wheel r = 0.058 m, b = 0.05 m at slip angle 0, three runs per slip) holds the
    source's numbers, and the statements docs/rover.md makes about the static Wong–Reece model
    beside it hold against them."""
    from diffmb.studies import rover as study

    d = study.MEASURED_SINGLE_WHEEL
    assert "robomechanics/3d-terramechanics" in d["source"] and "55a6e92b" in d["source"]
    assert "all_smooth_data.mat" in d["source"]
    assert (d["r_m"], d["b_m"]) == (0.058, 0.05)
    assert d["soil"] == {"n": 1.46, "k_c": 0.0, "k_phi": 8.0e6, "c": 1000.0, "phi_deg": 29.0,
                         "K": 0.021}
    rows = d["rows"]
    assert len(rows) == 5 and all(len(r) == 4 and len(r[1]) == 3 for r in rows)
    slips = [r[0] for r in rows]
    np.testing.assert_allclose(slips, [-0.001, 0.2312, 0.5, 0.7502, 0.8997])
    # the source's runs: means of the drawbar pull, the normal loads, the sinkages
    np.testing.assert_allclose([np.mean(r[1]) for r in rows],
                               [-1.343, 0.703, 0.967, 0.816, 1.511], atol=1e-3)
    np.testing.assert_allclose([r[2] for r in rows], [24.58, 24.62, 25.28, 24.00, 25.67])
    np.testing.assert_allclose([r[3] for r in rows], [14.43, 17.88, 22.74, 25.44, 25.73])

    m = study.measured_single_wheel()
    meas = np.asarray(m["measured_N"])
    lo, hi = m["measured_crossing_bracket"]
    assert (lo, hi) == (slips[0], slips[1]) and meas[0] < 0.0 < meas[1]
    assert m["measured_crossing_interpolated"] == pytest.approx(0.151, abs=1e-3)
    # as the study's model stands (θ₂ = 0) it never pulls, and lies 1.5 N or more below every
    # measured mean
    a = m["model"]
    assert a["crossing_slip"] is None
    assert np.all(np.asarray(a["N"]) < meas - 1.5)
    assert a["rms_difference_N"] == pytest.approx(4.10, abs=0.01) == m["rms_difference_N"]
    # with the source's fitted exit angle it crosses zero inside the measured bracket (by
    # 0.002 below its upper end) and overpredicts the pull by more than 1 N from slip 0.5
    e = m["model_exit_angle"]
    assert lo < e["crossing_slip"] < hi
    assert np.all(np.asarray(e["N"])[2:] > meas[2:] + 1.0)
    assert e["rms_difference_N"] == pytest.approx(1.93, abs=0.01)
    assert m["model_exit_angle_earlier"]["crossing_slip"] == pytest.approx(0.542, abs=1e-3)
    # slip sinkage: the measured sinkage grows by over 11 mm from slip 0 to 0.9, the static
    # model's by under 3 mm
    zm = m["measured_sinkage_mm"]
    assert zm[-1] - zm[0] > 11.0
    for key in ("model", "model_exit_angle"):
        z = m[key]["sinkage_mm"]
        assert 0.0 < z[-1] - z[0] < 3.0


def _flat_run(name, horizon, model=None):
    from diffmb.studies import rover as study

    m, forces, _ = rover.load()
    model = m if model is None else model
    ws = study.rover_wheel_soil(model, Plane(name="ground"))
    return model, study.run_behaviour(model, forces, ws, name, horizon)


@pytest.mark.slow
def test_lift_wheel_takes_the_named_wheel_off_the_ground():
    """lift_wheel: the wheel named by LIFTED_WHEEL carries no load, the others carry the
    rover's weight between them."""
    from diffmb.studies import rover as study

    model, run = _flat_run("lift_wheel", 2.0)
    mask, _ = study.steady_window(run["t"])
    n = np.mean(np.asarray(run["eval"].normal)[mask], axis=0)
    k = rover.WHEELS.index(rover.LIFTED_WHEEL)
    assert n[k] < 1.0
    assert np.all(np.delete(n, k) > 20.0)
    weight = float(np.sum(model.body_mass)) * rover.MARS_G
    assert abs(np.sum(n) / weight - 1) < 0.01


@pytest.mark.slow
def test_turn_in_place_rate_is_the_command_less_slip_and_servo_lag():
    from diffmb.studies import rover as study

    _, run = _flat_run("turn_in_place", 2.0)
    tr = study.turn_rate(run, 0.1)
    assert tr["commanded_deg_s"] == pytest.approx(np.degrees(0.1))
    assert tr["ratio"] < 0.8  # well short of the command
    assert abs(tr["ratio"] - tr["predicted_ratio"]) < 0.02
    assert max(tr["wheel_slip"].values()) > 0.2


@pytest.mark.slow
def test_straight_drive_slips_at_its_wheels_zero_drawbar_pull():
    """On flat ground in steady driving each wheel pulls no net load, so the rover's slip is
    the static single-wheel zero-DP slip of its wheel under a sixth of its weight; with a thin
    shell's wheel inertia the steady state is the same."""
    from diffmb.contacts import terramechanics as tm
    from diffmb.studies import rover as study

    model, run = _flat_run("straight", 2.0)
    phys_model, phys = _flat_run(
        "straight", 2.0, rover.with_wheel_inertia(rover.load()[0],
                                                  rover.thin_shell_wheel_inertia()))
    w = float(np.sum(model.body_mass)) * rover.MARS_G / 6
    cross = study.drawbar_pull_crossing(tm.SOILS["regolith_simulant"], rover.WHEEL_RADIUS,
                                        rover.WHEEL_WIDTH, w)["crossing_slip"]
    a, b = study._startup(run, 0.1), study._startup(phys, 0.1)
    assert abs(a["steady_slip"] - cross) < 0.02
    assert abs(b["steady_slip"] - a["steady_slip"]) < 0.005
    assert abs(b["steady_speed_m_s"] / a["steady_speed_m_s"] - 1) < 0.01
    assert b["peak_drive_torque_Nm"] < a["peak_drive_torque_Nm"]


def test_ar1_noise_has_unit_variance_and_the_lag_one_correlation():
    from diffmb.studies import rover as study

    e = study.ar1_noise(np.random.default_rng(3), 200_000, 0.8)
    assert np.var(e) == pytest.approx(1.0, abs=0.03)
    assert np.corrcoef(e[:-1], e[1:])[0, 1] == pytest.approx(0.8, abs=0.01)


@pytest.mark.slow
def test_cross_model_fit_recovers_its_own_model_and_judges_the_other_by_its_criteria():
    """Noiseless records of the linearised model give back the soil that made them (all six
    parameters, two widths); on Wong–Reece records with AR(1) noise the fit's verdict follows
    its stated acceptance rules, k_c is flagged, and each parameter's error is the estimate
    against the generating soil."""
    from diffmb.contacts import terramechanics as tm
    from diffmb.studies import rover as study

    true = tm.SOILS[study.SOIL]
    own = study.cross_model_fit(study.cross_model_records(model="linearised", noise_scale=0.0))
    for n, v in own["params"].items():
        assert v["estimate"] == pytest.approx(float(getattr(true, n)), rel=1e-6), n
    assert own["rms_weighted"] < 1e-6

    x = study.cross_model_fit(study.cross_model_records())
    a = x["acceptance"]
    assert "k_c" in x["rank_test_flagged"] and not x["params"]["k_c"]["identifiable"]
    for n, v in x["params"].items():
        assert v["true"] == float(getattr(true, n))
        assert v["rel_error"] == pytest.approx(v["estimate"] / v["true"] - 1.0, abs=1e-12)
        if v["identifiable"]:
            assert v["std"] <= a["max_rel_std_identifiable"] * abs(v["estimate"])
    ok = x["rms_weighted"] <= a["max_rms_weighted"] and all(
        abs(v["rel_error"]) <= a["max_rel_error"]
        and abs(v["estimate"] - v["true"]) <= a["max_abs_z"] * v["std"]
        for v in x["params"].values() if v["identifiable"])
    assert x["accepted"] == ok
    assert x["std_inflation"] == pytest.approx(3.0)  # sqrt((1 + 0.8)/(1 − 0.8))


@pytest.mark.slow
def test_eq32_lateral_on_the_rover_is_the_published_formula_of_the_elements_load():
    """With lateral='eq32' each wheel's lateral force is −(c A + N tan φ) sign(β)(1 − e^(−B|β|))
    of its own normal load N, slip angle β and contact area A = b r θ₁ (eq. 32, evaluated
    by terramechanics.lateral_force_eq32); normal load, drawbar pull and torque are those of
    the default element."""
    import equinox as eqx

    from diffmb.contacts import terramechanics as tm
    from diffmb.studies import rover as study

    model, _, _ = rover.load()
    shear = study.rover_wheel_soil(model, Plane(name="ground"))
    B = 0.9
    e32 = tm.WheelSoil(shear.wheels, shear.terrain, tm.SOILS[study.SOIL], model=model,
                       n_nodes=study.N_NODES, v_eps=study.V_EPS,
                       memory_rate=study.MEMORY_RATE, lateral="eq32", lateral_B=B)
    q = study._settled_q0(model)
    v = jnp.zeros(model.nv).at[0].set(0.1).at[1].set(0.02)  # forward and sideways
    ev = eqx.filter_jit(lambda el, q, v: el.evaluate(model, q, v, None))
    a, b = ev(shear, q, v), ev(e32, q, v)
    soil = tm.SOILS[study.SOIL]
    for k in range(6):
        n, beta, t1 = float(b.normal[k]), float(b.slip_angle[k]), float(b.theta1[k])
        assert n > 10.0 and abs(beta) > 0.05
        A = rover.WHEEL_WIDTH * rover.WHEEL_RADIUS * t1
        want = -float(tm.lateral_force_eq32(n, beta, soil, A, B))
        assert float(b.lateral[k]) == pytest.approx(want, rel=1e-12)
        assert float(b.normal[k]) == float(a.normal[k])
        assert float(b.drawbar_pull[k]) == float(a.drawbar_pull[k])
        assert np.sign(float(b.lateral[k])) == np.sign(float(a.lateral[k])) == -np.sign(beta)
    with pytest.raises(ValueError, match="lateral_B"):
        tm.WheelSoil(shear.wheels, shear.terrain, soil, lateral="eq32")


@pytest.mark.slow
def test_eq32_B_reproduces_the_lateral_shear_it_is_fitted_to():
    """The B of eq. 32 fitted by the study matches the Wong–Reece/Ishigami lateral shear of the
    rover's wheel at slip angles inside and outside the fitted range's grid."""
    from diffmb.contacts import terramechanics as tm
    from diffmb.studies import rover as study

    soil, r, b, load, s = tm.SOILS[study.SOIL], rover.WHEEL_RADIUS, rover.WHEEL_WIDTH, 107.3, 0.27
    B, rms = study.eq32_B(load=load, slip=s)
    assert 0.1 < B < 10.0 and rms < 0.05
    t1 = tm.static_sinkage(soil, r, b, load, s)
    for deg in (1.3, 4.1, 7.7):
        beta = np.radians(deg)
        fy = float(tm.wheel_forces(soil, r, b, t1, s, tan_beta=np.tan(beta)).lateral)
        L = float(tm.lateral_force_eq32(load, beta, soil, b * r * float(t1), B))
        assert -fy == pytest.approx(L, rel=0.02)


def test_fig7_statements_judge_a_constructed_run():
    """A run built by hand with known answers: wheel speeds within the paper's printed ranges,
    the right side varying more, Σ N below the weight, still steering, 0.1 m/s, a yawing
    body and deeper front wheels: every statement agrees but the step's; flipping the
    sinkages and raising the loads flips those two."""
    from types import SimpleNamespace

    from diffmb.studies import rover as study

    t = np.round(np.arange(201) * 0.01, 10)
    n = len(t)
    ws = np.zeros((n, 6))
    ws[:, :3] = np.radians(np.linspace(-1.0, 1.0, n))[:, None]
    ws[:, 3:] = np.radians(np.linspace(-1.0, 2.0, n))[:, None]
    yaw = 0.2 * t  # rad: 11.5° over 2 s, no roll or pitch
    quat = np.stack([np.cos(yaw / 2), 0 * t, 0 * t, np.sin(yaw / 2)], axis=1)
    sink = np.tile([0.02, 0.015, 0.01, 0.02, 0.015, 0.01], (n, 1))
    normal = np.full((n, 6), 100.0)
    run = {"t": t, "wheel_speed": ws, "quat": quat, "steer_angle": np.zeros((n, 6)),
           "vel": np.tile([0.1, 0.0, 0.0], (n, 1)),
           "eval": SimpleNamespace(normal=normal, sinkage=sink)}
    rows = study.fig7_statements(run, weight=700.0, dt=0.005)
    agree = [r["agree"] for r in rows]
    assert agree == [False] + [True] * 8
    assert all((r["why_not"] is None) == r["agree"] for r in rows)
    run["eval"] = SimpleNamespace(normal=normal * 1.2, sinkage=sink[:, ::-1])
    flipped = [r["agree"] for r in study.fig7_statements(run, 700.0)]
    assert flipped == [False] + [True] * 3 + [False] + [True] * 3 + [False]
