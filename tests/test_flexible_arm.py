"""Flexible-arm model and study tests. Oracles: an independent sympy derivation of the mass
matrix from the kinetic energy (1- and 2-element meshes), Table 1 of the paper (constrained
frequencies; unconstrained ones with the coupling as printed), the limit J_ay → ∞, the paper's
qualitative conclusions, and recovery of known parameters from the shipped synthetic record."""

import json
from importlib.resources import files

import numpy as np
import pytest
import sympy as sp

from diffmb.formulations import modal
from diffmb.models import flexible_arm as fa
from diffmb.studies import flexible_arm as study

PAPER_C = [0.3275, 3.4017, 9.1453, 22.4248, 43.2550, 71.2867, 106.6182]
PAPER_U = [0.9229, 3.4028, 9.3963, 22.4271, 43.3252, 71.2899, 106.6542]


@pytest.mark.parametrize("n_el", [1, 2])
def test_mass_matrix_from_sympy_kinetic_energy(n_el):
    """2T = J_ay θ̇² + ∫ρA(ẇ − (r_a+x)θ̇)² + m_c(ẇ_L − Rθ̇)² + J_cy(θ̇ − ẇ'_L)², w along +z."""
    vals = dict(J_ay=3.0, r_a=0.4, rho=50.0, D_o=0.1, D_i=0.08, l_b=2.0, E=2e8, J_cy=0.7,
                m_c=1.3)
    x = sp.symbols("x")
    th = sp.symbols("thdot")
    q = sp.symbols(f"q1:{2 * n_el + 1}")  # nodal rates of nodes 1..n (root clamped)
    h = sp.Rational(vals["l_b"]).limit_denominator() / n_el
    area = sp.pi / 4 * (sp.nsimplify(vals["D_o"]) ** 2 - sp.nsimplify(vals["D_i"]) ** 2)
    rho_a = sp.nsimplify(vals["rho"]) * area
    ra = sp.nsimplify(vals["r_a"])
    T2 = sp.nsimplify(vals["J_ay"]) * th**2
    nodes = [(0, 0)] + [(q[2 * k], q[2 * k + 1]) for k in range(n_el)]
    for e in range(n_el):
        xi = (x - e * h) / h
        N = [1 - 3 * xi**2 + 2 * xi**3, h * (xi - 2 * xi**2 + xi**3), 3 * xi**2 - 2 * xi**3,
             h * (-(xi**2) + xi**3)]
        wd = N[0] * nodes[e][0] + N[1] * nodes[e][1] + N[2] * nodes[e + 1][0] \
            + N[3] * nodes[e + 1][1]
        T2 += sp.integrate(rho_a * (wd - (ra + x) * th) ** 2, (x, e * h, (e + 1) * h))
    R = ra + n_el * h
    T2 += sp.nsimplify(vals["m_c"]) * (q[-2] - R * th) ** 2 + sp.nsimplify(vals["J_cy"]) * (
        th - q[-1]) ** 2
    coords = [th, *q]
    Msym = np.array(sp.hessian(T2 / 2, coords).evalf(), dtype=float)
    arm = fa.paper_arm(n_el=n_el, **vals)
    J, I, M, K = fa.system_matrices(arm)
    Mf, _ = modal.full_matrices(J, I, M, K)
    np.testing.assert_allclose(np.asarray(Mf), Msym, rtol=1e-12, atol=1e-12 * np.abs(Msym).max())


def test_table1_constrained_and_printed_unconstrained():
    arm = fa.paper_arm()
    J, I, M, K = fa.system_matrices(arm)
    fc = np.asarray(modal.constrained_modes(M, K).hz[:7])
    fu_printed = np.asarray(modal.unconstrained_modes(J, fa.paper_coupling(arm), M, K).hz[:7])
    fu = np.asarray(modal.unconstrained_modes(J, I, M, K).hz[:7])
    # the table prints 4 decimals
    np.testing.assert_allclose(fc, PAPER_C, atol=6e-5)
    np.testing.assert_allclose(fu_printed, PAPER_U, atol=6e-5)
    # the derived (factor-1) coupling gives a different first mode; all above constrained
    assert abs(fu[0] - PAPER_U[0]) > 0.05
    assert np.all(fu > fc) and np.all(fu_printed > fc)


def test_unconstrained_approach_constrained_as_hub_inertia_grows():
    gaps = []
    for jh in (40.0, 4e2, 4e3, 4e4, 4e5, 4e8):
        J, I, M, K = fa.system_matrices(fa.paper_arm(J_ay=jh))
        fu = np.asarray(modal.unconstrained_modes(J, I, M, K).hz[:5])
        fc = np.asarray(modal.constrained_modes(M, K).hz[:5])
        gaps.append((fu - fc) / fc)
    gaps = np.array(gaps)
    assert np.all(gaps > -1e-9)
    assert np.all(np.diff(gaps[:, 0]) < 0.0)
    assert np.all(gaps[-1] < 1e-6)
    # first-order: gap ∝ 1/J_ay for large J_ay
    assert gaps[-3, 0] / gaps[-2, 0] == pytest.approx(10.0, rel=0.05)


@pytest.fixture(scope="module")
def responses():
    ts = np.arange(0, 32001) * 2.5e-4
    orders = {"Nc2": ("c", 2), "Nu2": ("u", 2), "Nc3": ("c", 3), "Nu3": ("u", 3),
              "Nc5": ("c", 5)}
    return ts, study.step_responses(fa.paper_arm(), orders, ts)


def _err(r, lab, c):
    return r[lab][c] - r["full"][c]


def test_paper_conclusions(responses):
    ts, r = responses
    for c in ("theta", "wp", "thetap"):
        # equal order: unconstrained reduction is more accurate
        assert np.abs(_err(r, "Nu2", c)).max() < np.abs(_err(r, "Nc2", c)).max()
        assert np.abs(_err(r, "Nu3", c)).max() < np.abs(_err(r, "Nc3", c)).max()
    n1 = 4000  # one second
    for lab, grows in (("Nc2", True), ("Nc3", True), ("Nu2", False), ("Nu3", False)):
        e = np.abs(_err(r, lab, "theta"))
        ratio = e[-n1:].max() / e[: n1 + 1].max()
        assert (ratio > 3.0) if grows else (ratio < 1.2), (lab, ratio)
    # Fig. 6: a higher N_c (5) is needed to match N_u = 3
    e_nu3 = np.abs(_err(r, "Nu3", "theta")).max()
    assert np.abs(_err(r, "Nc5", "theta")).max() < e_nu3 < np.abs(_err(r, "Nc3", "theta")).max()
    # sanity on magnitudes ("small errors")
    assert np.abs(_err(r, "Nc2", "theta")).max() < 1e-4 * np.abs(r["full"]["theta"]).max()


def test_error_spectra_sit_at_unconstrained_frequencies(responses):
    ts, r = responses
    J, I, M, K = fa.system_matrices(fa.paper_arm())
    fu = np.asarray(modal.unconstrained_modes(J, I, M, K).hz)
    _, _, pf3, pa3 = study.error_spectrum_peaks(_err(r, "Nu3", "wp"), 2.5e-4)
    _, _, pfc, pac = study.error_spectrum_peaks(_err(r, "Nc3", "wp"), 2.5e-4)
    for pf in (pf3, pfc):
        nearest = np.abs(pf[:, None] - fu[None, :]).min(axis=1)
        assert np.all(nearest < 0.05 * np.maximum(1.0, pf)), pf
    # N_u = 3: only truncated modes (4, 5, ...), mode 4 dominant; N_c = 3: mode 1 dominant
    assert pf3.min() > fu[2] + 1.0
    assert abs(pf3[np.argmax(pa3)] - fu[3]) < 0.1
    assert abs(pfc[np.argmax(pac)] - fu[0]) < 0.05


def test_identify_shipped_csv(tmp_path):
    path = files("diffmb") / "assets" / "flexible_arm_tip.csv"
    out = study.identify(path, tmp_path, plot=False)
    assert abs(out["E"]["estimate"] - 1e9) / 1e9 < 0.01
    assert abs(out["zeta"]["estimate"] - 0.02) / 0.02 < 0.05
    # the reported standard errors are consistent with the actual error
    assert abs(out["E"]["estimate"] - 1e9) < 5 * out["E"]["std"]
    assert abs(out["zeta"]["estimate"] - 0.02) < 5 * out["zeta"]["std"]
    saved = json.loads((tmp_path / "identification.json").read_text())
    assert saved["converged"]


def test_model_validation():
    with pytest.raises(ValueError, match="E"):
        fa.paper_arm(E=-1.0)
    with pytest.raises(ValueError, match="D_i"):
        fa.paper_arm(D_i=0.3)
