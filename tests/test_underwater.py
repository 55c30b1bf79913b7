"""The underwater modular robot (seed 004): path matrices of the paper's module graphs, Kane
against ABA with full hydrodynamics, the CPG-driven quadruped on the sea floor, identification of
drag from a free-swimming module, and ``diffmb identify underwater`` on the shipped CSV."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb import topology
from diffmb.models import underwater as uw
from diffmb.studies import underwater as study


def test_path_matrices_of_the_papers_graphs():
    """Rows in the paper's order (paths ending at s3, s5, s7, s9; columns s0…s9), written by
    hand from §4: s0 s1 s2 s3; s0 s1 s4 s5; s0 s6 s7; s0 s8 s9. The nine-module example (§2,
    six paths {s0 s1}, {s0 s2}, {s0 s3 s4}, {s0 s3 s5}, {s0 s6 s7}, {s0 s6 s8})."""
    expected = [[1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
                [1, 1, 0, 0, 1, 1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0, 0, 1, 1, 0, 0],
                [1, 0, 0, 0, 0, 0, 0, 0, 1, 1]]
    P = uw.path_matrix(uw.QUADRUPED_GRAPH)
    assert P.dtype.kind == "i" and P.tolist() == expected
    nine = [[1, 1, 0, 0, 0, 0, 0, 0, 0],
            [1, 0, 1, 0, 0, 0, 0, 0, 0],
            [1, 0, 0, 1, 1, 0, 0, 0, 0],
            [1, 0, 0, 1, 0, 1, 0, 0, 0],
            [1, 0, 0, 0, 0, 0, 1, 1, 0],
            [1, 0, 0, 0, 0, 0, 1, 0, 1]]
    assert uw.path_matrix(uw.NINE_MODULE_GRAPH).tolist() == nine
    # the paper: P's rows are columns 2, 3, 5, 6, 8, 9 (1-based) of A + I
    A = topology.accessibility_matrix(9, uw.NINE_MODULE_GRAPH)
    assert np.array_equal((A + np.eye(9, dtype=int))[:, [1, 2, 4, 5, 7, 8]].T, nine)
    # the loaded Model's tree (s0–s1 welded into one node) has the same four paths
    model, _ = uw.load()
    Pm = topology.path_matrix_from_parent(topology.world_rooted(model.node_parent))
    assert Pm.shape[0] == 4
    assert study.path_results()["path_matrix"] == expected


@pytest.mark.slow
def test_kane_equals_aba_with_hydrodynamics():
    model, forces = uw.quadruped()  # the study's, generated from its module graph
    assert model.has_added_inertia
    assert any(isinstance(f, diffmb.forces.hydro.Hydrodynamics) for f in forces)
    assert study.kane_vs_aba(model, forces, n=3, seed=1) < 1e-9


@pytest.mark.slow
def test_cpg_quadruped_steps_on_the_floor():
    """2.5 s of the nominal walk of the generated quadruped (the study's): finite, every foot
    carries load at some time, the body moves forward and stays above the floor; near-neutral
    buoyancy (net weight 37.7 N)."""
    model, forces = uw.quadruped()
    hydro = next(f for f in forces if isinstance(f, diffmb.forces.hydro.Hydrodynamics))
    assert 30.0 < uw.net_weight(model, hydro) < 45.0
    run = study.walk(model, forces, uw.NOMINAL_GAIT, 2.5)
    assert run["ok"] and np.all(np.isfinite(run["q"]))
    assert np.all(run["foot_fn"].max(axis=0) > 1.0)
    assert run["q"][-1, 0] > 0.02
    assert 1.0 < run["q"][:, 2].min() and run["q"][:, 2].max() < 1.3


@pytest.mark.slow
def test_short_record_recovers_drag_and_added_mass():
    """The study's least squares on a 3 s fresh noisy record (seed 5), from a 30 % wrong
    start: drag (per axis and angular), transverse added mass and inertia within 5 %; the
    axial added mass (0.52 kg beside the module's 9.2 kg) within 3 standard errors (the 4 s
    record of the study and the CLI gets it within 5 %)."""
    t, q = study.module_record(seed=5, T=3.0)
    res, true = study.fit_module(t, q)
    for n in study.ID_PARAMS:
        err = abs(float(res.params[n]) - true[n])
        if n == "added_mass_x":
            assert err < 3.0 * float(res.std[n])
        else:
            assert err < 0.05 * true[n], n


@pytest.mark.slow  # ~30 s, mostly compiling fit's Jacobian
def test_fit_recovers_quadratic_drag_of_a_module():
    """``diffmb.optim.fit`` of ``force.hydro.quad_force`` (per body axis) from a 1 s noisy
    record of a released, spinning module: within 5 % from a 30 % wrong start."""
    model, hydro = uw.load_module()
    ts = np.round(np.arange(21) * 0.05, 10)
    tr = diffmb.simulate(model, jnp.asarray(model.qpos0), jnp.asarray(study.ID_V0), t1=1.0,
                         dt=study.ID_DT, forces=(hydro,), saveat=ts)
    rng = np.random.default_rng(3)
    q = np.asarray(tr.q).copy()
    q[:, :3] += 1e-4 * rng.normal(size=(len(ts), 3))
    true = np.asarray(hydro.quad_force)
    res = diffmb.optim.fit(model, {"t": ts, "q": q}, ["force.hydro.quad_force"],
                           forces={"hydro": hydro}, simulate_kwargs={"dt": study.ID_DT},
                           init={"force.hydro.quad_force": 1.3 * true}, progress=False,
                           weights={"q": 1e4})
    est = np.asarray(res.estimates["force.hydro.quad_force"])
    assert np.max(np.abs(est - true) / true) < 0.05


@pytest.mark.slow  # ~40 s: the study's fit compiles; the fast suite fits a short record
def test_identify_cli_on_the_shipped_csv(tmp_path):
    out = tmp_path / "id"
    rc = diffmb.cli.main(["identify", "underwater", "--data", str(study.module_csv_path()),
                          "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete"
    assert set(res["identified"]) == set(study.ID_PARAMS)
    for v in res["identified"].values():
        assert abs(v["estimate"] - v["true"]) < 0.05 * v["true"] and 0 < v["std"] < np.inf


def test_knot_table_at_theta_zero_is_the_nominal_cpg_walk():
    """θ = 0 is the nominal lateral-sequence walk: at any time the knot table's targets equal
    offset + amplitude cos(2π(f t + φ_leg)) for the hips and the same with the knee's lag for
    the knees, written here from NOMINAL_GAIT (the CPG's limit cycle)."""
    assert study.N_GAIT_PARAMS >= 64
    g = uw.NOMINAL_GAIT
    p = study.gait_params(jnp.zeros(study.N_GAIT_PARAMS))
    assert abs(float(p[0]) - g["frequency"]) < 1e-12 and p[1].shape == (8, 8)
    legs = (0.0, g["phase_rf"], g["phase_lh"], g["phase_rh"])
    for t in (0.0, 0.37, 1.9, 3.14159):
        u = np.asarray(study.knot_targets(t, None, None, p))
        for i, ph in enumerate(legs):
            a = 2 * np.pi * (g["frequency"] * t + ph)
            assert abs(u[2 * i] - (g["off_hip"] + g["amp_hip"] * np.cos(a))) < 1e-12
            assert abs(u[2 * i + 1] - (g["off_knee"] + g["amp_knee"]
                                       * np.cos(a + g["knee_lag"]))) < 1e-12


def test_knot_table_passes_through_its_knots_and_is_periodic():
    rng = np.random.default_rng(0)
    K = rng.normal(size=(8, 8))
    f = 0.7
    for j in range(8):
        t = j / 8 / f
        assert np.allclose(np.asarray(study.knot_targets(t, None, None, (f, K))), K[:, j],
                           atol=1e-12)
        assert np.allclose(np.asarray(study.knot_targets(t + 3 / f, None, None, (f, K))),
                           K[:, j], atol=1e-9)


def test_gait_parameters_bounds_and_bad_shape():
    lo, hi = study.F_RANGE
    for x in (-50.0, 0.0, 50.0):
        f = float(study.gait_params(jnp.full(study.N_GAIT_PARAMS, x))[0])
        assert lo <= f <= hi
    g = jax.grad(lambda th: study.gait_params(th)[0])(jnp.zeros(study.N_GAIT_PARAMS))
    assert float(g[0]) > 0 and np.all(np.asarray(g[1:]) == 0)
    with pytest.raises(ValueError, match=r"theta has shape \(9,\), expected \(65,\)"):
        study.gait_params(jnp.zeros(9))
    with pytest.raises(ValueError, match="window = 4.0 s must lie in"):
        study.gait_objective(None, (), T=4.0, window=4.0)


@pytest.mark.parametrize("gradient", sorted(study.GRADIENT_METHODS))
def test_both_methods_call_one_objective(monkeypatch, gradient):
    """optimise_gait builds the objective once and both methods call that function: here a
    quadratic bowl stands in for the walk (minimum J = -1 at θ = 0.3), so the run is short; the
    result holds every contract key, every seed of both methods, J never below the bowl's
    minimum and best-so-far curves that never rise; every gradient method descends the bowl.
    A truncated-gradient method builds a second one for its gradient, the same but for its
    segment."""
    built = []

    def fake_objective(model, forces, **kw):
        def J(th):
            return jnp.sum((th - 0.3) ** 2) - 1.0, (jnp.zeros(()), jnp.zeros(()))

        built.append(kw)
        return J

    compiled, compile_ = [], study._compile

    def counted_compile(fn, *args):  # every compile charged is a function of its own
        compiled.append(fn)
        return compile_(fn, *args)

    monkeypatch.setattr(study, "gait_objective", fake_objective)
    monkeypatch.setattr(study, "_compile", counted_compile)
    out = study.optimise_gait(None, (), seeds=(3, 4), budget_s=0.6, clock="cpu",
                              gradient=gradient, log=lambda *a: None)
    segment = study.GRADIENT_METHODS[gradient].get("segment")
    assert built[0] == {"width": study.GAIT["width"]}
    assert built[1:] == ([] if segment is None else [dict(built[0], segment=segment)])
    assert len({id(f) for f in compiled}) == len(compiled) >= 2
    out.pop("_batch")
    assert out["seeds"] == [3, 4] and out["budget_s"] == 0.6 and out["clock"] == "cpu_s"
    for name in ("gradient", "cmaes"):
        r = out[name]
        assert [s["seed"] for s in r["seeds"]] == [3, 4]
        assert r["compile_s"] > 0 and np.isfinite(r["median_J_final"])
        for s in r["seeds"]:
            assert len(s["wall_s"]) == len(s["cpu_s"]) == len(s["J"]) >= 1
            assert -1.0 <= s["J_final"] and s["J_final"] in s["J"]
            assert np.all(np.diff(s["J"]) <= 0) and np.all(np.diff(s["wall_s"]) > 0)
    g = out["gradient"]
    assert g["method"] == gradient
    assert g["settings"]["kind"] in ("adam", "line-search", "guided-es")
    for s in g["seeds"]:  # the gradient method descends the bowl
        assert s["J"][-1] < s["J"][0] - 0.5 and s["gradients"] >= 1
    assert out["cmaes"]["population_size"] == 4 + int(3 * np.log(study.N_GAIT_PARAMS))
    assert "time_to_reach_cmaes_final_s" in g
    json.dumps(out)


def test_optimise_gait_rejects_bad_settings():
    with pytest.raises(ValueError, match="gradient = 'newton', expected one of"):
        study.optimise_gait(None, (), seeds=(0,), budget_s=1.0, gradient="newton")
    with pytest.raises(ValueError, match="clock = 'gpu'"):
        study.optimise_gait(None, (), seeds=(0,), budget_s=1.0, clock="gpu")
    with pytest.raises(ValueError, match="need seeds and budget_s > 0"):
        study.optimise_gait(None, (), seeds=(), budget_s=1.0)
    with pytest.raises(ValueError, match="'line-search' has none"):
        study.optimise_gait(None, (), seeds=(0,), budget_s=1.0, gradient="line-search", lr=0.1)


def test_cmaes_is_imported_only_by_the_proof():
    import subprocess
    import sys

    code = ("import sys, diffmb, diffmb.studies.underwater, diffmb.cli; "
            "assert 'cmaes' not in sys.modules, 'cmaes imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow  # ~40 s: the objective and a walk compile
def test_gait_objective_scores_the_walk():
    """The objective measures what a walk of the same gait shows: its v̄ and P̄·Δt over
    [window, T] equal gait_metrics of a walk (same solver and step) of a perturbed knot table,
    and J = −v̄ + λ P̄/(m g)."""
    model, forces = uw.quadruped()
    T, window = 2.0, 0.5
    th = jnp.asarray(study._start(7))
    J, (v, P) = jax.jit(study.gait_objective(model, forces, T=T, window=window,
                                             width=1e-3))(th)
    f, K = study.gait_params(th)
    run = study.walk(model, forces, {"frequency": float(f), "knots": np.asarray(K)}, T,
                     dt=study.GAIT["dt"], solver=study.GAIT["solver"])
    met = study.gait_metrics(run, uw.total_mass(model), start=window)
    assert run["ok"] and abs(float(v) - met["speed_mps"]) < 1e-9
    assert abs(float(P) * (T - window) - met["energy_J"]) < 1e-6 * met["energy_J"]
    mg = uw.total_mass(model) * 9.81
    assert abs(float(J) - (-float(v) + study.LAMBDA * float(P) / mg)) < 1e-12


def test_truncated_gait_objective_has_the_same_value():
    """Truncated backpropagation (``segment``) leaves the objective's value alone, bit for bit
    (a short walk, cut every 0.05 s); a segment off the step grid is refused."""
    model, forces = uw.quadruped()
    kw = dict(T=0.2, window=0.1, width=1e-3)
    th = jnp.asarray(study._start(7))
    a = jax.jit(study.gait_objective(model, forces, **kw))(th)
    b = jax.jit(study.gait_objective(model, forces, segment=0.05, **kw))(th)
    assert np.isfinite(float(a[0])) and float(a[0]) == float(b[0])
    assert all(float(x) == float(y) for x, y in zip(a[1], b[1], strict=True))
    with pytest.raises(ValueError, match="segment = 0.0125 s must be a positive multiple"):
        study.gait_objective(model, forces, segment=0.0125, **kw)


@pytest.mark.slow  # ~90 s: three gradients of a short walk compile
def test_truncated_gait_gradient():
    """The truncated gradient of a short walk: with the segment covering the horizon it is
    the full gradient (to round-off), cut every 0.05 s it is finite, differs from it and its
    value is J's."""
    model, forces = uw.quadruped()
    kw = dict(T=0.2, window=0.1, width=1e-3)
    th = jnp.asarray(study._start(7))

    def vg(**k):
        J = study.gait_objective(model, forces, **kw, **k)
        return jax.jit(jax.value_and_grad(lambda x: J(x)[0]))(th)

    (v, g), (v_T, g_T), (v_s, g_s) = vg(), vg(segment=0.2), vg(segment=0.05)
    assert float(v) == float(v_T) and abs(float(v_s) - float(v)) < 1e-15
    assert np.allclose(g_T, g, rtol=1e-10, atol=1e-12)
    assert np.all(np.isfinite(g_s)) and not np.allclose(g_s, g, rtol=1e-2)


def test_foot_geoms_of_the_generated_quadruped_and_of_the_file():
    assert uw.foot_geoms(["s3_foot", "s5_foot", "s7_foot", "s9_foot", "s0"]) == [
        "s3_foot", "s5_foot", "s7_foot", "s9_foot"]
    assert uw.foot_geoms([f"foot_{leg}" for leg in uw.LEGS]) == [f"foot_{leg}" for leg in uw.LEGS]
    with pytest.raises(ValueError, match=r"no foot geom for leg 'rh'"):
        uw.foot_geoms(["s3_foot", "s5_foot", "s7_foot"])


@pytest.mark.slow  # ~50 s: three configurations compile Kane, a snake and Fig. 2's robot swim
def test_study_generated_configurations():
    """The study's new keys on short runs: Kane along the paths = ABA on the quadruped, the
    nine-module robot and the snake (1e-9); the swimming snake's v̇ = MuJoCo's qacc on its MJCF
    export (1e-6) while it moves towards its head; Fig. 2's robot, heavier than the water it
    displaces (net weight 30.4 N), sinks and its joints follow the flapping servos."""
    per = study.kane_paths_vs_aba(1)
    assert set(per) == {"quadruped", "nine_module", "snake5"} and max(per.values()) < 1e-9
    sn = study.snake_swim(2.0)
    assert sn["max_rel"] < 1e-6 and sn["states"] == 8 and sn["distance_towards_s0_m"] > 0.02
    nm = study.nine_module_run(1.0)
    assert nm["finite"] and 0.05 < nm["sink_m"] < 0.5
    assert abs(nm["net_weight_N"] - 9 * (9.2 - 1025 * 0.6 * 0.12 * 0.12) * 9.81) < 1e-9
    # the servos at t = 1 s target 0.3 sin(π) = 0 having swept through 0.3: joints within 0.15
    assert len(nm["final_joint_angles_rad"]) == 8
    assert all(abs(x) < 0.15 for x in nm["final_joint_angles_rad"].values())


@pytest.mark.slow  # ~50 s: five models compile
def test_study_docking_in_phases():
    """The study's docking: the two snakes meet within tolerance, lock with momentum (bodies and
    the fluid's impulse) kept to 1e-9 and kinetic energy lost (a head-on plastic impact), then
    undock keeping it, and part."""
    dk = study.docking_run(True)
    assert dk["momentum_err"] < 1e-9 and dk["undocking_momentum_err"] < 1e-9
    assert dk["gap_at_dock_m"] <= study.DOCK["tol"] and 0 < dk["t_dock_s"] < 0.6
    assert dk["kinetic_energy_J"]["after"] < 0.2 * dk["kinetic_energy_J"]["before"]
    xa, xb = dk["final_root_positions_m"]["snake_a"], dk["final_root_positions_m"]["snake_b"]
    assert xb[0] - xa[0] > 3 * 0.6  # b's start lies beyond a's three modules
