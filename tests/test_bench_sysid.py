"""The sysid benchmark (diffmb.optim.fit beside mujoco.sysid) in miniature: a short record, four
parameters; both tools must recover the truth within their own 95 % intervals, and the result
records must carry the benchmark contract. No timing is asserted."""

import mujoco.sysid._src.parameter  # noqa: F401  (mujoco[sysid]'s extras, in the test deps)
import numpy as np
import pytest

from diffmb.bench import sysid as B

NAMES = ["joint.shoulder_lift_joint.damping", "joint.elbow_joint.damping",
         "joint.elbow_joint.armature", "body.forearm_link.mass"]


@pytest.mark.slow
def test_arm_and_data_agree_between_the_tools(tmp_path):
    xml, path, data, truth, guess = B.problem(0.4, NAMES, out_dir=tmp_path)
    assert path.is_file() and "integrator" in xml
    assert set(truth) == set(NAMES) and all(guess[k] != truth[k] for k in NAMES)
    assert data["q"].shape == (81, 6) and np.std(data["q"] - data["q_true"]) > 0.5 * B.SIGMA_Q
    # diffmb's RK4 of the true model reproduces MuJoCo's data far below the noise
    assert B.sim_agreement(path, data) < 0.01 * B.SIGMA_Q


@pytest.mark.slow  # ~45 s (both tools compile); `diffmb bench --only sysid` reports the same counts
def test_both_recover_the_truth_within_their_intervals(tmp_path):
    res = B.compare(tmp_path, T=0.6, names=NAMES, reps=1)
    for k in ("fit_speed", "rollouts", "iterations", "max_rel_param_error",
              "params_within_ci95", "compile_s"):
        assert set(res[k]) >= {"value", "unit", "peer", "peer_value", "ratio"}
    assert res["fit_speed"]["peer"] == "mujoco.sysid"
    assert res["fit_speed"]["ratio"] == pytest.approx(
        res["fit_speed"]["peer_wall_s"] / res["fit_speed"]["wall_s"])
    import json

    info = json.loads((tmp_path / "bench_sysid.json").read_text())["info"]
    for tool in ("diffmb", "mujoco.sysid"):
        best = info["best"][tool]
        assert best["n_within_ci95"] == len(NAMES), (tool, best["rel_error"], best["ci95_half"])
        assert best["max_rel_error"] < 0.05, (tool, best["rel_error"])
        assert best["rollouts"] > best["iterations"] > 0
    assert res["params_within_ci95"]["value"] == res["params_within_ci95"]["peer_value"] == 4


def test_thrown_cube_record_and_the_peers_residual():
    """MuJoCo's cube record is what the benchmark says (it lands, slides and stops), and
    mujoco.sysid's residual, as the benchmark builds it, vanishes at the truth on the noise-free
    record (its samples aligned with its rollout) and not at the guess."""
    data = B.cube_record(0.5)
    q = data["q_true"]
    assert q.shape == (251, 7) and q[:, 2].min() < 0.05  # landed
    # slid, stopping (on MuJoCo's pyramidal cone its soft friction still creeps 12 µm in the
    # last 18 ms)
    assert 0.25 < q[-1, 0] < 0.4 and abs(q[-1, 0] - q[-10, 0]) < 5e-5
    assert np.std(data["q"] - q) == pytest.approx(B.CUBE_SIGMA, rel=0.1)
    guess = B.cube_guess()
    params, residual, count = B.mujoco_cube_problem(data, guess, measured="q_true")
    r_true = np.asarray(residual(np.array([B.CUBE_TRUTH[k] for k in guess]), params)[0])
    r_guess = np.asarray(residual(np.array([guess[k] for k in guess]), params)[0])
    assert np.max(np.abs(r_true)) < 1e-12 < np.max(np.abs(r_guess)) and count["rollouts"] == 2
