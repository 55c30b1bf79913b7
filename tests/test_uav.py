"""The seed-000 UAV: formulations against each other and against MuJoCo; gradients; data file.

Oracles: Kane's equations and the core's RNEA/CRBA tree (independent of the Lagrange code);
MuJoCo's own mass matrix and bias forces (mj_forward, mj_solveM) in a Python RK4; central
finite differences for gradients; the seed's printed initial state.
"""

import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb  # noqa: F401
from diffmb.models import uav
from diffmb.studies import uav as study

P = uav.default_params()
X0 = uav.initial_state()
CSV = pathlib.Path(diffmb.__file__).parent / "assets" / "uav_flight.csv"


def test_initial_state_is_the_seeds():
    out = np.asarray(uav.flight_outputs(X0[None]))[0]
    np.testing.assert_allclose(out, [60.0, 12.0, np.deg2rad(3.0), np.deg2rad(3.0)], atol=1e-14)
    Om = np.asarray(uav.rotor_speeds(P))
    np.testing.assert_allclose(Om, [2000 * np.pi / 30, -2000 * np.pi / 30])


def _flights(t1, names):
    forms = study.formulations(P)

    @jax.jit
    def run(p):
        return {k: uav.fly(forms[k], X0, p, t1, 0.01, 10)[1] for k in names}

    return {k: np.asarray(v) for k, v in run(P).items()}


@pytest.mark.slow
def test_formulations_agree_short():
    X = _flights(2.0, ("lagrange", "kane", "tree"))
    for k in ("kane", "tree"):
        assert np.abs(X["lagrange"] - X[k]).max() < 1e-9, k
    assert np.abs(np.linalg.norm(X["lagrange"][:, 3:7], axis=1) - 1).max() < 1e-9


@pytest.mark.slow
def test_formulations_agree_20s():
    X = _flights(20.0, ("lagrange", "lagrange_closed", "kane", "tree"))
    for k in ("lagrange_closed", "kane", "tree"):
        assert np.abs(X["lagrange"] - X[k]).max() < 1e-9, k


def test_mujoco_reference_agrees():
    Xm = study.mujoco_reference(P, X0, 0.5, 0.01, 10)
    Xk = np.asarray(jax.jit(lambda p: uav.fly(uav.rhs_kane, X0, p, 0.5, 0.01, 10)[1])(P))
    assert np.abs(Xm[:, :3] - Xk[:, :3]).max() < 1e-9
    assert np.abs(Xm - Xk).max() < 1e-9


@pytest.mark.slow
def test_trim_is_an_equilibrium_of_the_lagrange_equations():
    p_t, x_t, tr = study.trim(P)  # solved with Kane's equations
    assert tr["residual"] < 1e-10
    xd = np.asarray(jax.jit(uav.rhs_lagrange)(0.0, x_t, p_t))
    np.testing.assert_allclose(xd[7:], 0.0, atol=1e-10)
    np.testing.assert_allclose(xd[:3], [12.0, 0.0, 0.0], atol=1e-12)


@pytest.mark.slow
def test_gradient_of_final_state_wrt_aero_coefficients():
    names = ("CLa", "CD0", "Cma", "Cmq")

    def final(c):
        a = P.aero
        for i, k in enumerate(names):
            a = eqx.tree_at(lambda a, k=k: getattr(a, k), a, c[i])
        p = eqx.tree_at(lambda p: p.aero, P, a)
        return uav.fly(uav.rhs_kane, X0, p, 1.0, 0.01, 100)[1][-1]

    c0 = jnp.array([float(getattr(P.aero, k)) for k in names])
    # one compilation: value and forward-mode Jacobian together
    both = jax.jit(lambda c: (final(c), jax.jacfwd(final)(c)))
    J = np.asarray(both(c0)[1])
    for i in range(len(names)):
        h = 1e-5 * max(1.0, abs(float(c0[i])))
        e = jnp.zeros(4).at[i].set(h)
        fd = (np.asarray(both(c0 + e)[0]) - np.asarray(both(c0 - e)[0])) / (2 * h)
        scale = max(1e-3, np.abs(fd).max())
        assert np.abs(J[:, i] - fd).max() / scale < 1e-6, names[i]
        assert np.abs(fd).max() > 0  # the coefficient does move the state


def test_shipped_csv(tmp_path):
    assert CSV.stat().st_size < 300_000
    t, ch = study.read_flight_csv(CSV)
    assert set(ch) == set(study.CHANNELS)
    assert np.all(np.diff(t) > 0) and t[0] == 0.0
    assert np.ptp(ch["elevator"]) > np.deg2rad(5.0)  # the doublet is in the data
    bad = tmp_path / "bad.csv"
    lines = CSV.read_text().splitlines()
    lines[3], lines[4] = lines[4], lines[3]
    bad.write_text("\n".join(lines))
    with pytest.raises(ValueError, match="row 5, column 't'"):
        study.read_flight_csv(bad)


@pytest.mark.slow
def test_identify_shipped_csv(tmp_path):
    res = study.identify(CSV, tmp_path)
    for k, v in res["identified"].items():
        assert abs(v["estimate"] - v["true"]) < 4 * v["std"], (k, v)
    assert (tmp_path / "results.json").exists()
