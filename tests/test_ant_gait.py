"""The equal-time optimiser comparison (diffmb.optim.gaits) and the Ant gait study."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.optim import gaits
from diffmb.studies import ant_gait as ag

SETTINGS = {
    "adam": dict(kind="adam", lr=0.05, batch=2, spread=0.5),
    "line-search": dict(kind="line-search", batch=8, alpha0=0.5, ratio=2.0, jitter=0.1),
    "guided-es": dict(kind="guided-es", pairs=4, sigma=0.1, alpha=0.5, k=2, beta=2.0, lr=0.05),
}


def _bowl(th):  # minimum -1 at θ = 0.3 (every entry)
    return jnp.sum((th - 0.3) ** 2) - 1.0, jnp.zeros(())


@pytest.mark.parametrize("kind", sorted(SETTINGS))
def test_compare_optimisers_finds_the_minimum_of_a_bowl(kind):
    """Both methods on a 4-parameter quadratic bowl whose minimum (J = −1 at θ = 0.3) is known:
    each ends within 1e-3 of it, every seed, and J is never below it; the curves are best-so-far
    (never rising) and the contract keys are there."""
    out = gaits.compare_optimisers(_bowl, 4, lambda s: np.random.default_rng(s).normal(size=4),
                                   seeds=(0, 1), budget_s=0.5, settings=SETTINGS[kind],
                                   clock="cpu", sigma0=0.5, method=kind, log=lambda *a: None)
    fwd, lam = out.pop("_batch")
    assert lam == 4 + int(3 * np.log(4))
    for name in ("gradient", "cmaes"):
        r = out[name]
        assert r["compile_s"] > 0 and len(r["theta_best"]) == 2
        for s, th in zip(r["seeds"], r["theta_best"], strict=True):
            assert -1.0 - 1e-12 <= s["J_final"] < -1.0 + 1e-3, (name, s["seed"], s["J_final"])
            assert np.all(np.diff(s["J"]) <= 0) and np.all(np.diff(s["cpu_s"]) > 0)
            assert np.allclose(th, 0.3, atol=0.04)
    assert out["gradient"]["method"] == kind and out["gradient"]["settings"]["kind"] == kind
    assert out["seeds"] == [0, 1] and out["clock"] == "cpu_s"
    json.dumps(out)


def test_compare_optimisers_on_rosenbrock():
    """Rosenbrock's function in 2-D (minimum 0 at (1, 1)), from (−1.2, 1) ± noise: the line
    search along the gradient and CMA-ES both end below 1e-3."""
    def rosen(th):
        return 100.0 * (th[1] - th[0] ** 2) ** 2 + (1.0 - th[0]) ** 2

    out = gaits.compare_optimisers(
        rosen, 2, lambda s: np.array([-1.2, 1.0]) + 0.1 * np.random.default_rng(s).normal(size=2),
        seeds=(0,), budget_s=1.0, settings=SETTINGS["line-search"], clock="cpu", sigma0=0.5,
        log=lambda *a: None)
    for name in ("gradient", "cmaes"):
        assert 0.0 <= out[name]["median_J_final"] < 1e-3, (name, out[name]["median_J_final"])


def test_compare_optimisers_refuses_bad_settings():
    kw = dict(seeds=(0,), budget_s=1.0, log=lambda *a: None)
    with pytest.raises(ValueError, match="clock = 'gpu'"):
        gaits.compare_optimisers(_bowl, 2, np.zeros, settings=SETTINGS["adam"], clock="gpu",
                                 **kw)
    with pytest.raises(ValueError, match="settings\\['kind'\\] = 'newton'"):
        gaits.compare_optimisers(_bowl, 2, np.zeros, settings={"kind": "newton"}, **kw)
    with pytest.raises(ValueError, match="need seeds and budget_s > 0"):
        gaits.compare_optimisers(_bowl, 2, np.zeros, settings=SETTINGS["adam"], seeds=(),
                                 budget_s=1.0)


def test_periodic_knots_interpolate_their_knots():
    K = np.random.default_rng(0).normal(size=(3, 8))
    for i in range(8):
        assert np.allclose(gaits.periodic_knots(i / 8, K), K[:, i], atol=1e-12)
        assert np.allclose(gaits.periodic_knots(i / 8 + 2.0, K), K[:, i], atol=1e-12)


def test_ant_optimise_result_has_the_contract_keys(monkeypatch):
    """ant_gait.optimise with a bowl in place of the walk: the results keys the study writes."""
    monkeypatch.setattr(ag, "gait_objective", lambda *a, **k: lambda th: _bowl(th - 0.3))
    out = ag.optimise("model", (), None, seeds=(3,), budget_s=0.5, log=lambda *a: None)
    out.pop("_batch")
    assert {"gradient", "cmaes", "budget_s", "clock", "seeds", "objective"} <= set(out)
    for name in ("gradient", "cmaes"):
        assert {"seeds", "compile_s", "compile_wall_s", "compile_cpu_s", "median_J_final",
                "theta_best"} <= set(out[name])
        assert {"seed", "wall_s", "cpu_s", "J", "J_final", "evaluations",
                "gradients"} <= set(out[name]["seeds"][0])
    assert {"time_to_reach_cmaes_final_s", "time_to_reach_cmaes_final_per_seed_s", "method",
            "settings"} <= set(out["gradient"])
    assert out["cmaes"]["population_size"] == 4 + int(3 * np.log(ag.N_PARAMS))
    json.dumps(out)


@pytest.fixture(scope="module")
def ant():
    return ag.load()


def test_zero_gait_stands_as_in_mujoco(ant):
    """θ = 0 (u = 0) for 2 s from the file's init_qpos: the Ant settles on its feet without
    moving sideways (horizontal drift < 1e-6 m); its torso height at 0.5 s, settled, and at
    2 s is MuJoCo's on the same file within 1 cm, and it sinks between the two as MuJoCo's does
    (within 25 %: MuJoCo's soft friction lets the unpowered legs creep apart, some 4 mm/s,
    and so does the contacts' creep). Not closer: the file starts the feet 2.6 cm inside
    their contact margin, which MuJoCo's constraint resolves at 0.47 m/s and the contacts'
    impedance spring (stiffer by 1/(1 − d) in the dynamics, the same at rest) at 2.8 m/s
    (measured with RK4 at 0.2 ms); the study's 10 ms step damps most of that launch (measured:
    7.5 mm below MuJoCo at 0.5 s, 8.4 mm at 2 s)."""
    model, forces, q0 = ant
    st = ag._stand_check(model, forces, q0, ag.ant_path())
    assert st["ok"] and st["xy_drift_m"] < 1e-6
    for z, zm in zip(st["z_m"], st["z_mujoco_m"], strict=True):
        assert abs(z - zm) < 1e-2
    sink, sink_mj = (st["z_m"][0] - st["z_m"][1], st["z_mujoco_m"][0] - st["z_mujoco_m"][1])
    assert sink_mj > 3e-3 and sink == pytest.approx(sink_mj, rel=0.25)


def test_gait_gradient_matches_central_differences(ant):
    """The reverse-mode gradient of J on a 0.2 s horizon from the Ant standing (the file's
    start settled for 1 s at θ = 0; the feet on the ground throughout) at a start θ: finite,
    and its derivative along a random direction is the central difference's (step 1e-5)
    within 1e-6 of the larger (measured: 4e-8 over three directions; on 0.5 s horizons 2e-8
    with a step of 1e-6). From the file's start itself the feet leave the ground (see
    :func:`test_zero_gait_stands_as_in_mujoco`) and stick and slip switch within the
    central difference's steps."""
    model, forces, q0 = ant
    stand = diffmb.simulate(model, jnp.asarray(q0), None, t1=1.0, dt=ag.GAIT["dt"],
                            solver=ag.GAIT["solver"], forces=forces, control=ag.gait_control,
                            params=ag.gait_params(jnp.zeros(ag.N_PARAMS)), saveat=[1.0])
    J = ag.gait_objective(model, forces, stand.q[-1], T=0.2)
    vg = jax.jit(jax.value_and_grad(lambda th: J(th)[0]))
    th = jnp.asarray(ag.start(0))
    d = jnp.asarray(np.random.default_rng(1).normal(size=ag.N_PARAMS))
    _, g = vg(th)
    assert np.all(np.isfinite(g))
    h = 1e-5
    fd = (float(vg(th + h * d)[0]) - float(vg(th - h * d)[0])) / (2 * h)
    ad = float(g @ d)
    assert abs(ad - fd) <= 1e-6 * max(abs(ad), abs(fd)), (ad, fd)


@pytest.mark.slow  # ~90 s: the quick study, compiles included
def test_reproduce_quick(tmp_path):
    res = ag.reproduce(tmp_path, quick=True)
    go = json.loads((tmp_path / "results.json").read_text())["gait_optimisation"]
    assert go["seeds"] == [0] and {"gradient", "cmaes"} <= set(go)
    assert (tmp_path / "report.md").is_file() and (tmp_path / "fig_gait_optimisation.png").is_file()
    assert np.isfinite(res["summary"]["gradient_median_J"])
