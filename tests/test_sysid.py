"""Output-error identification. Oracles: the known parameters that generated noisy synthetic
data, and a Monte Carlo over noise seeds (empirical mean and spread of the estimates) for the
standard errors; the uninterrupted fit for the resumed one; a parameter that provably has no
effect (centre-of-mass offset along a hinge axis) for the identifiability warning."""

import warnings

import numpy as np
import pytest

import diffmb
from diffmb.controls import piecewise_linear
from diffmb.forces.elements import JointDamping
from diffmb.optim import UnidentifiableWarning, fit, read_joint_csv, set_params, write_joint_csv

SIGMA = 1e-3
NAMES = ["body.l1.mass", "joint.j1.damping"]
TRUE = {"body.l1.mass": 1.0, "joint.j1.damping": 0.1}


def _pendulum():
    b = diffmb.ModelBuilder("pend")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.02, 0.001),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0), damping=0.1)])
    return b.build()


_CACHE = {}


def _truth():
    if "tr" not in _CACHE:
        m = _pendulum()
        ts = np.linspace(0.0, 1.0, 51)
        tau = 2.0 * np.sin(6.0 * ts)[:, None]
        tr = diffmb.simulate(m, np.array([0.3]), np.zeros(1), t1=1.0, dt=0.01,
                             forces=(JointDamping(),), control=piecewise_linear(ts, tau),
                             saveat=ts)
        _CACHE["tr"] = (m, ts, tau, np.asarray(tr.q))
    return _CACHE["tr"]


def _data(seed):
    m, ts, tau, q = _truth()
    rng = np.random.default_rng(seed)
    return {"t": ts, "q": q + SIGMA * rng.standard_normal(q.shape), "tau": tau}


def _guess():
    return set_params(_pendulum(), {"body.l1.mass": 1.3, "joint.j1.damping": 0.2})


def _fit(data, **kw):
    return fit(_guess(), data, NAMES, forces=(JointDamping(),), simulate_kwargs={"dt": 0.01},
               weights={"q": 1.0 / SIGMA}, progress=False, **kw)


def test_recovers_parameters_and_std_matches_monte_carlo():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnidentifiableWarning)
        r = _fit(_data(0))
    assert r.success
    for n in NAMES:
        assert abs(r.estimates[n] - TRUE[n]) < 4 * r.std[n], (n, r.estimates[n], r.std[n])
    assert r.rms["q"] == pytest.approx(SIGMA, rel=0.3)
    assert r.s2 == pytest.approx(1.0, rel=0.5)  # weights 1/σ: residual variance ~ 1
    # Monte Carlo over noise seeds (compiled once: new data values do not recompile)
    E, S = [], []
    for seed in range(1, 17):
        ri = _fit(_data(seed))
        E.append([ri.estimates[n] for n in NAMES])
        S.append([ri.std[n] for n in NAMES])
    E, S = np.array(E), np.array(S)
    truth = np.array([TRUE[n] for n in NAMES])
    pred = S.mean(axis=0)
    assert np.all(np.abs(E.mean(axis=0) - truth) < 4 * pred / np.sqrt(len(E)))
    ratio = E.std(axis=0, ddof=1) / pred
    assert np.all((ratio > 0.55) & (ratio < 1.6)), ratio  # chi-square(15) 99.8 % band


def test_interrupted_fit_resumes_and_reaches_the_same_answer(tmp_path):
    data = _data(0)
    ref = _fit(data)
    ck = tmp_path / "fit.ckpt"

    class Stop(Exception):
        pass

    def stop_after_2(info):
        if info["iteration"] == 2:
            raise Stop

    with pytest.raises(Stop):
        _fit(data, checkpoint=ck, callback=stop_after_2)
    assert ck.exists()
    assert not list(tmp_path.glob("*.tmp*"))  # atomic write left no temporary file
    seen = []
    r = _fit(data, checkpoint=ck, callback=lambda info: seen.append(info["iteration"]))
    assert r.resumed_from == 2
    assert seen[0] == 3  # continued from the saved iteration, not from scratch
    assert r.n_iter == ref.n_iter
    for n in NAMES:
        assert r.estimates[n] == pytest.approx(ref.estimates[n], rel=1e-10)
        assert r.std[n] == pytest.approx(ref.std[n], rel=1e-8)
    assert [h["cost"] for h in r.history] == pytest.approx([h["cost"] for h in ref.history])
    # a finished checkpoint returns at once with the same answer
    r2 = _fit(data, checkpoint=ck)
    assert r2.resumed_from == r.n_iter and r2.estimates == r.estimates
    # a checkpoint of another problem is refused
    with pytest.raises(ValueError, match="different problem"):
        fit(_guess(), data, ["body.l1.mass"], forces=(JointDamping(),),
            simulate_kwargs={"dt": 0.01}, progress=False, checkpoint=ck)


def test_multiple_shooting_and_unidentifiable_warning():
    data = _data(0)
    with pytest.warns(UnidentifiableWarning, match=r"body\.l1\.com\[1\]") as rec:
        r = fit(_guess(), data, NAMES + ["body.l1.com"], forces=(JointDamping(),),
                simulate_kwargs={"dt": 0.01}, weights={"q": 1.0 / SIGMA}, progress=False,
                shooting="multiple", segments=4)
    msg = " ".join(str(w.message) for w in rec)
    assert "body.l1.mass" not in msg and "joint.j1.damping" not in msg
    assert r.unidentifiable == ("body.l1.com[1]",)
    assert np.isinf(r.std["body.l1.com"][1])
    for n in NAMES:
        assert abs(r.estimates[n] - TRUE[n]) < 5 * r.std[n], (n, r.estimates[n], r.std[n])
    assert len(r.initial_states) == 4


def test_csv_channels(tmp_path):
    m = _pendulum()
    t = np.linspace(0.0, 0.1, 6)
    p = tmp_path / "ok.csv"
    write_joint_csv(p, m, t, q=np.ones((6, 1)), tau=np.zeros((6, 1)), comment="test")
    rec = read_joint_csv(p, m)
    np.testing.assert_array_equal(rec.q, np.ones((6, 1)))
    assert rec.v is None
    bad = tmp_path / "bad.csv"
    bad.write_text("# c\nt,q_j1,q_elbow\n0,1,2\n0.1,1,2\n")
    with pytest.raises(ValueError, match=r"bad\.csv, line 2, column 3: unknown channel 'q_elbow'"):
        read_joint_csv(bad, m)
    nan = tmp_path / "nan.csv"
    nan.write_text("t,q_j1\n0,1\n0.1,nan\n")
    with pytest.raises(ValueError, match=r"nan\.csv, line 3"):
        read_joint_csv(nan, m)
    back = tmp_path / "back.csv"
    back.write_text("t,q_j1\n0,1\n0.2,1\n0.1,1\n")
    with pytest.raises(ValueError, match=r"back\.csv, line 4, column 1"):
        read_joint_csv(back, m)


# ----------------------------------------------------------------------------------------------
# Fits that refuse what the data cannot support. Oracles: counts of residuals and unknowns done
# by hand from the record's shape; a parameter whose zero effect is known analytically (the
# joint damping coefficient when no JointDamping element is simulated: nothing reads it).
# ----------------------------------------------------------------------------------------------


def _no_compile(monkeypatch):
    from diffmb.optim import sysid

    def boom(*a, **k):
        raise AssertionError("compiled/evaluated the residual of a fit that should be refused")

    monkeypatch.setattr(sysid, "_res_jac", boom)
    monkeypatch.setattr(sysid, "_res", boom)


def test_empty_parameter_list_is_refused(monkeypatch):
    _no_compile(monkeypatch)
    with pytest.raises(ValueError, match="no parameters"):
        _fit_names(_data(0), [])


def test_unknown_parameter_name_is_refused(monkeypatch):
    _no_compile(monkeypatch)
    with pytest.raises(KeyError, match="nosuch"):
        _fit_names(_data(0), ["body.nosuch.mass"])


def _fit_names(data, names, forces=(JointDamping(),), **kw):
    return fit(_guess(), data, names, forces=forces, simulate_kwargs={"dt": 0.01},
               weights={"q": 1.0 / SIGMA}, progress=False, **kw)


def test_too_short_record_is_refused_before_compiling(monkeypatch):
    _no_compile(monkeypatch)
    d = _data(0)
    two = {k: v[:2] for k, v in d.items()}
    # single shooting: 2 samples x 1 angle = 2 residuals; 2 parameters + (q0, v0) = 4 unknowns
    with pytest.raises(ValueError, match=r"too short.*2 residuals.*4 unknowns"):
        _fit_names(two, NAMES)
    # multiple shooting, 4 samples in 3 segments: 4 residuals + 2 junctions x 2 = 8;
    # 2 parameters + 3 segments x 2 states = 8 unknowns: no degree of freedom left for s²
    four = {k: v[:4] for k, v in d.items()}
    with pytest.raises(ValueError, match=r"too short.*8 residuals.*8 unknowns"):
        _fit_names(four, NAMES, shooting="multiple", segments=3)
    # a zero-weighted channel carries no information: 20 samples, q weighted 0, v absent
    with pytest.raises(ValueError, match=r"too short.*0 residuals"):
        fit(_guess(), {k: v[:20] for k, v in d.items()}, NAMES, forces=(JointDamping(),),
            simulate_kwargs={"dt": 0.01}, weights={"q": 0.0}, progress=False)


def test_identify_cli_refuses_a_two_row_csv(tmp_path, capsys):
    from diffmb.cli import main
    from diffmb.studies import arm

    lines = arm.CSV.read_text().splitlines()
    hdr = next(i for i, ln in enumerate(lines) if not ln.startswith("#"))
    p = tmp_path / "two.csv"
    p.write_text("\n".join(lines[: hdr + 3]) + "\n")
    rc = main(["identify", "arm", "--data", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1, err  # bad input
    assert len(err.strip().splitlines()) == 1 and "too short" in err, err
    assert str(p) in err
    assert not (tmp_path / "out" / "results.json").exists()


def test_parameter_with_no_effect_is_named_and_fit_not_successful():
    # no JointDamping element is simulated, so joint.j1.damping is read by nothing
    with pytest.warns(UnidentifiableWarning) as rec:
        r = _fit_names(_data(0), NAMES, forces=())
    msgs = [str(w.message) for w in rec]
    assert any("joint.j1.damping" in m and "no element or body uses" in m for m in msgs), msgs
    assert not any("body.l1.mass" in m for m in msgs), msgs
    assert not r.success
    assert "joint.j1.damping" in r.message and "body.l1.mass" not in r.unidentifiable
    assert r.unidentifiable == ("joint.j1.damping",)
    assert np.isinf(r.std["joint.j1.damping"])
    assert r.estimates["joint.j1.damping"] == 0.2  # never moved from the initial guess
    assert np.isfinite(r.std["body.l1.mass"])


def test_fit_of_only_parameters_with_no_effect_is_refused():
    with pytest.raises(ValueError, match=r"joint\.j1\.damping.*no element or body uses"):
        _fit_names(_data(0), ["joint.j1.damping"], forces=())


@pytest.mark.slow
def test_threaded_structured_jacobian_equals_plain_forward_mode(monkeypatch):
    # oracle: jax.jacfwd of the whole residual vector, which knows nothing of the shooting
    # structure, of the direction batches or of the threads
    from concurrent.futures import ThreadPoolExecutor

    import jax

    from diffmb.optim import sysid

    seen = {}
    orig = sysid._res_jac

    def spy(z, args, spec, *a, **k):
        seen.setdefault("problem", (np.asarray(z), args, spec))
        return orig(z, args, spec, *a, **k)

    monkeypatch.setattr(sysid, "_res_jac", spy)
    _fit(_data(0), shooting="multiple", segments=4, max_steps=1, threads=1)
    z, args, spec = seen["problem"]
    z = z + 0.01 * np.arange(z.size)  # away from the data's own states
    J_plain = np.asarray(jax.jacfwd(lambda zz: sysid._residual(zz, args, spec))(z))
    # 2 parameter + 2 state directions in 3 batches of 2 (the last one padded) on 3 threads
    monkeypatch.setattr(sysid, "MAX_LANES", 2)
    with ThreadPoolExecutor(3) as pool:
        r, J = orig(z, args, spec, pool, 3)
    assert J.shape == J_plain.shape == (r.size, 2 + 4 * 2)
    np.testing.assert_allclose(np.asarray(r), np.asarray(sysid._res(z, args, spec)), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(J), J_plain, rtol=1e-10,
                               atol=1e-10 * np.abs(J_plain).max())


def test_a_force_that_is_no_element_is_refused(monkeypatch):
    _no_compile(monkeypatch)
    with pytest.raises(TypeError, match=r"forces\[1\]: expected a force element.*got function"):
        _fit_names(_data(0), NAMES, forces=(JointDamping(), lambda *a: None))
    with pytest.raises(TypeError, match=r"forces\['drag'\]: expected a force element.*got str"):
        _fit_names(_data(0), NAMES, forces={"damping": JointDamping(), "drag": "0.1"})


def test_fit_stopped_by_max_steps_is_not_converged():
    # from the guess (mass 1.3, damping 0.2), one Levenberg–Marquardt step cannot meet a
    # convergence test: the fit converged above in 4 iterations
    r = _fit(_data(0), max_steps=1)
    assert r.n_iter == 1 and not r.converged and not r.success
    assert r.message == "stopped after max_steps = 1 iterations"
    done = _fit(_data(0))
    assert done.converged and done.success and done.message.startswith("converged")


@pytest.mark.slow  # 11 s: the check compiles vmapped losses and gradients of the fit
def test_fit_checks_its_cost_gradient_when_asked():
    # the cost's gradient at the start: reverse mode against central differences (an oracle
    # independent of the autodiff path), and the fit itself unchanged by the check
    r = _fit(_data(0), check_gradient=True)
    chk = r.gradient_check
    assert chk is not None and chk.trusted, chk.verdict
    assert chk.rel_central[chk.best_step] < 1e-5
    assert r.success
    assert _fit(_data(0)).gradient_check is None
