"""least_squares tests. Oracles: closed-form OLS (numpy lstsq, s²(XᵀX)⁻¹) and
scipy.optimize.curve_fit (estimates and covariance) on an exponential decay."""

import json
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import curve_fit

from diffmb.optim.lsq import UnidentifiableWarning, least_squares, read_checkpoint, solve


def _linreg_data():
    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 2.0, 40)
    X = np.column_stack([np.ones_like(x), x, x**2])
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.05 * rng.standard_normal(x.size)
    return x, X, y


def test_linear_regression_matches_ols():
    x, X, y = _linreg_data()

    def res(p, a):
        xx, yy = a
        return p["c0"] + p["c1"] * xx + p["c2"] * xx**2 - yy

    with warnings.catch_warnings():  # a well-posed problem does not warn
        warnings.simplefilter("error", UnidentifiableWarning)
        r = least_squares(res, {"c0": 0.0, "c1": 0.0, "c2": 0.0},
                          (jnp.asarray(x), jnp.asarray(y)))
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    s2 = resid @ resid / (x.size - 3)
    cov = s2 * np.linalg.inv(X.T @ X)
    np.testing.assert_allclose([r.params[k] for k in ("c0", "c1", "c2")], beta, rtol=1e-9)
    np.testing.assert_allclose(r.cov, cov, rtol=1e-8)
    np.testing.assert_allclose([r.std[k] for k in ("c0", "c1", "c2")], np.sqrt(np.diag(cov)),
                               rtol=1e-8)
    assert r.residual_norm == pytest.approx(np.linalg.norm(resid), rel=1e-10)
    assert r.dof == 37 and r.success and r.unidentifiable == ()
    assert r.n_steps >= 1


def test_exponential_decay_positive_matches_curve_fit():
    rng = np.random.default_rng(1)
    t = np.linspace(0.0, 3.0, 60)
    y = 2.5 * np.exp(-1.3 * t) + 0.02 * rng.standard_normal(t.size)

    def res(p, a):
        return p["a"] * jnp.exp(-p["k"] * a[0]) - a[1]

    r = least_squares(res, {"a": 1.0, "k": 0.3}, (jnp.asarray(t), jnp.asarray(y)),
                      positive={"a", "k"}, solver="gn")
    popt, pcov = curve_fit(lambda tt, a, k: a * np.exp(-k * tt), t, y, p0=[1.0, 0.3])
    np.testing.assert_allclose([r.params["a"], r.params["k"]], popt, rtol=1e-7)
    np.testing.assert_allclose(r.cov, pcov, rtol=1e-5)
    assert abs(r.params["k"] - 1.3) < 4 * r.std["k"]


def test_bounds_keep_iterates_inside_and_find_interior_optimum():
    rng = np.random.default_rng(2)
    t = np.linspace(0.0, 3.0, 50)
    y = 2.5 * np.exp(-1.3 * t) + 0.01 * rng.standard_normal(t.size)

    def res(p, a):
        return p["a"] * jnp.exp(-p["k"] * a[0]) - a[1]

    args = (jnp.asarray(t), jnp.asarray(y))
    popt, _ = curve_fit(lambda tt, a, k: a * np.exp(-k * tt), t, y, p0=[1.0, 0.5])
    bnd = least_squares(res, {"a": 1.0, "k": 0.5}, args, lower={"k": 0.1, "a": 0.0},
                        upper={"k": 5.0})
    np.testing.assert_allclose([bnd.params["a"], bnd.params["k"]], popt, rtol=1e-7)
    assert 0.1 < bnd.params["k"] < 5.0


def test_unidentifiable_parameters_are_named():
    x = np.linspace(0.0, 1.0, 20)
    y = 3.0 * x

    def res(p, a):  # only the product a*b matters; c has no effect at all
        return p["a"] * p["b"] * a[0] + 0.0 * p["c"] - a[1]

    with pytest.warns(UnidentifiableWarning, match=r"a, b, c"):
        r = least_squares(res, {"a": 1.0, "b": 2.0, "c": 0.5},
                          (jnp.asarray(x), jnp.asarray(y + 1e-3 * np.sin(7 * x))))
    assert set(r.unidentifiable) == {"a", "b", "c"}
    assert np.isinf(r.std["a"]) and np.isinf(r.std["c"])
    assert r.params["a"] * r.params["b"] == pytest.approx(3.0, rel=1e-3)


def test_input_validation():
    f = lambda p, a: p["x"] - 1.0
    with pytest.raises(ValueError, match="'x'.*lower"):
        least_squares(f, {"x": -1.0}, positive={"x"})
    with pytest.raises(ValueError, match="solver"):
        least_squares(f, {"x": 0.5}, solver="bfgs")
    with pytest.raises(ValueError, match="unknown parameter 'y'"):
        least_squares(f, {"x": 0.5}, positive={"y"})


def test_interrupted_least_squares_resumes(tmp_path):
    # the same core as fit(): an interrupted run resumes from its atomic checkpoint and reaches
    # the uninterrupted answer (oracle: the uninterrupted run)
    rng = np.random.default_rng(3)
    t = np.linspace(0.0, 3.0, 40)
    y = 2.5 * np.exp(-1.3 * t) + 0.02 * rng.standard_normal(t.size)
    args = (jnp.asarray(t), jnp.asarray(y))

    def res(p, a):
        return p["a"] * jnp.exp(-p["k"] * a[0]) - a[1]

    p0 = {"a": 1.0, "k": 0.3}
    ref = least_squares(res, p0, args, positive={"k"})
    ck = tmp_path / "lsq.ckpt"

    class Stop(Exception):
        pass

    def stop(info):
        if info["iteration"] == 2:
            raise Stop

    with pytest.raises(Stop):
        least_squares(res, p0, args, positive={"k"}, checkpoint=ck, callback=stop)
    assert ck.exists() and not list(tmp_path.glob("*.tmp*"))
    r = least_squares(res, p0, args, positive={"k"}, checkpoint=ck)
    assert r.resumed_from == 2 and r.n_steps == ref.n_steps
    assert r.params == pytest.approx(ref.params, rel=1e-12)
    assert [h["cost"] for h in r.history] == pytest.approx([h["cost"] for h in ref.history])


# --- checkpoints that are not this problem's are refused (issue "No silent wrong answers") --


def _linear_problem(n=3):
    """½‖A z − b‖² solved by solve() with a numpy res_jac (nothing to compile)."""
    A = np.vander(np.linspace(0.0, 1.0, 12), n)
    b = A @ np.arange(1.0, n + 1.0) + 0.01 * np.sin(np.arange(12.0))
    return (lambda z: (A @ z - b, A)), np.zeros(n)


def _real_checkpoint(path, n=3, steps=2):
    res_jac, z0 = _linear_problem(n)
    solve(res_jac, z0, max_steps=steps, progress=False, checkpoint=path,
          fingerprint={"problem": f"linear{n}"})
    return path


def _corrupt(kind, path, tmp_path):
    if kind == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        data = _real_checkpoint(tmp_path / "whole.npz").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "no_meta":
        np.savez(path, z=np.zeros(3))
    elif kind == "meta_not_json":
        np.savez(path, z=np.zeros(3), __meta__=np.array("{not json"))
    elif kind == "meta_incomplete":
        np.savez(path, z=np.zeros(3), __meta__=np.array(json.dumps({"fingerprint": {}})))
    elif kind == "npy":
        with open(path, "wb") as fh:
            np.save(fh, np.zeros(3))
    elif kind == "directory":
        path.mkdir()
    return path


@pytest.mark.parametrize("kind, reason", [
    ("garbage", "not an .npz file"),
    ("empty", "the file is empty"),
    ("truncated", "truncated or corrupt"),
    ("no_meta", "without diffmb's '__meta__'"),
    ("meta_not_json", "not diffmb's JSON metadata"),
    ("meta_incomplete", "lacks state.mu"),
    ("npy", "not an .npz file"),
    ("directory", "cannot be read"),
])
def test_foreign_or_corrupt_checkpoint_is_refused_naming_file_and_reason(tmp_path, kind, reason):
    path = _corrupt(kind, tmp_path / "ck.npz", tmp_path)
    before = path.read_bytes() if path.is_file() else None
    res_jac, z0 = _linear_problem()
    with pytest.raises(ValueError) as e:
        solve(res_jac, z0, progress=False, checkpoint=path, fingerprint={"problem": "linear3"})
    msg = str(e.value)
    assert type(e.value) is ValueError and str(path) in msg and reason in msg, msg
    assert "\n" not in msg
    if before is not None:
        assert path.read_bytes() == before  # refused, not overwritten
    with pytest.raises(ValueError, match=reason):
        read_checkpoint(path)


def test_checkpoint_of_another_problem_is_refused(tmp_path):
    ck = _real_checkpoint(tmp_path / "ck.npz")
    meta, arrays = read_checkpoint(ck)
    assert meta["state"]["k"] == 2 and arrays["z"].shape == (3,)
    res_jac, z0 = _linear_problem()
    # another fingerprint: the keys that differ are named
    with pytest.raises(ValueError, match=r"different problem \(problem: saved 'linear3', now "
                                         r"'other'\)"):
        solve(res_jac, z0, progress=False, checkpoint=ck, fingerprint={"problem": "other"})
    # another solver
    with pytest.raises(ValueError, match="different problem.*solver: saved 'lm', now 'gn'"):
        solve(res_jac, z0, solver="gn", progress=False, checkpoint=ck,
              fingerprint={"problem": "linear3"})
    # same fingerprint, another number of unknowns (a caller that fingerprints too little)
    res_jac4, z04 = _linear_problem(4)
    with pytest.raises(ValueError, match="3 unknowns, this problem 4"):
        solve(res_jac4, z04, progress=False, checkpoint=ck, fingerprint={"problem": "linear3"})
    # and through least_squares: other parameter names
    t = jnp.linspace(0.0, 1.0, 12)
    ck2 = tmp_path / "ls.npz"
    least_squares(lambda p, a: p["a"] * a - 1.0, {"a": 0.5}, t, checkpoint=ck2, max_steps=2)
    with pytest.raises(ValueError, match=f"checkpoint {ck2} belongs to a different problem"):
        least_squares(lambda p, a: p["b"] * a - 1.0, {"b": 0.5}, t, checkpoint=ck2)


def test_checkpoint_holds_cost_and_named_parameters(tmp_path):
    t = jnp.linspace(0.0, 1.0, 12)
    ck = tmp_path / "ls.npz"
    seen = []
    r = least_squares(lambda p, a: p["k"] * a - 2.0 * a, {"k": 0.5}, t, positive={"k"},
                      checkpoint=ck, callback=seen.append)
    meta, _ = read_checkpoint(ck)
    assert meta["params"]["k"] == pytest.approx(r.params["k"], rel=1e-12)
    assert meta["cost"] == pytest.approx(r.cost, rel=1e-9, abs=1e-20)
    assert seen[-1]["params"]["k"] == pytest.approx(r.params["k"], rel=1e-12)


def test_relative_offset_is_bates_watts_on_a_linear_model():
    # linear model: the least-squares solution is known in closed form (numpy lstsq), so the
    # relative offset of any point is ‖X(β̂ − β)‖/√p over ‖y − Xβ̂‖/√(n − p)
    from diffmb.optim.lsq import _relative_offset

    x, X, y = _linreg_data()
    beta_hat = np.linalg.lstsq(X, y, rcond=None)[0]
    n, p = X.shape
    s = np.linalg.norm(y - X @ beta_hat) / np.sqrt(n - p)
    for beta in (np.zeros(3), beta_hat + 0.01, beta_hat):
        r = X @ beta - y
        expected = np.linalg.norm(X @ (beta_hat - beta)) / np.sqrt(p) / s
        assert _relative_offset(X, r, X.T @ r) == pytest.approx(expected, rel=1e-7, abs=1e-12)
    # zero rows (masked residuals) are not data: appending them changes nothing
    Xz = np.vstack([X, np.zeros((5, 3))])
    r0 = -y
    rz0 = np.concatenate([r0, np.zeros(5)])
    assert _relative_offset(Xz, rz0, Xz.T @ rz0) == pytest.approx(
        _relative_offset(X, r0, X.T @ r0), rel=1e-12)


def _decay_problem(seed):
    """(t, z -> (r, J)) of a noisy exponential decay a e^(−k t), a = 2.5, k = 1.3."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 3.0, 80)
    y = 2.5 * np.exp(-1.3 * t) + 0.02 * rng.standard_normal(t.size)
    res = lambda z: z[0] * jnp.exp(-z[1] * t) - y  # noqa: E731
    jac = lambda z: jnp.stack([jnp.exp(-z[1] * t), -z[0] * t * jnp.exp(-z[1] * t)], 1)  # noqa: E731

    def rj(z):
        return np.asarray(res(jnp.asarray(z))), np.asarray(jac(jnp.asarray(z)))

    return t, rj


def test_offset_tolerance_stops_within_its_fraction_of_the_confidence_radius():
    # exponential decay: solved to the end (ftol 1e-15, the reference) and with offset_tol.
    # An offset ρ puts the optimum ρ√p away in the metric JᵀJ/s², so every estimate lies
    # within ρ√p of its standard errors of it (Cauchy–Schwarz), to first order: 1.5x allowed
    t, rj = _decay_problem(3)
    ref = solve(rj, [1.0, 0.3], ftol=1e-15, xtol=1e-15, progress=False)
    early = solve(rj, [1.0, 0.3], ftol=0.0, xtol=0.0, offset_tol=1e-3, progress=False)
    assert early.message.startswith("converged (relative offset")
    assert early.n_iter < ref.n_iter
    J = ref.J
    s2 = float(ref.r @ ref.r) / (t.size - 2)
    std = np.sqrt(np.diag(s2 * np.linalg.inv(J.T @ J)))
    assert np.all(np.abs(early.z - ref.z) / std < 1e-3 * np.sqrt(2) * 1.5)


def test_parameter_tolerance_stops_when_a_step_is_below_its_share_of_the_standard_error():
    # the exponential decay solved to the end (the reference) and with ptol on its first
    # unknown alone (the second counted as a nuisance): the early stop is a step below 1 % of
    # the amplitude's standard error, and near the optimum the Gauss–Newton steps shrink, so
    # the rest of the way is smaller than that step: within 2 % of a standard error
    t, rj = _decay_problem(4)
    ref = solve(rj, [1.0, 0.3], ftol=1e-15, xtol=1e-15, progress=False)
    early = solve(rj, [1.0, 0.3], ftol=0.0, xtol=0.0, ptol=1e-2, n_params=1, progress=False)
    assert early.message.startswith("converged (parameter step below ptol")
    assert early.n_iter < ref.n_iter
    s2 = float(ref.r @ ref.r) / (t.size - 2)
    std = np.sqrt(np.diag(s2 * np.linalg.inv(ref.J.T @ ref.J)))
    assert abs(early.z[0] - ref.z[0]) / std[0] < 2e-2
    # off by default: the same call without ptol runs on to another test
    assert not solve(rj, [1.0, 0.3], ftol=0.0, xtol=1e-12, progress=False,
                     max_steps=early.n_iter).message.startswith("converged (parameter")
