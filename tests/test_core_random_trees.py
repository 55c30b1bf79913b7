"""Random trees with every joint type: MuJoCo as the oracle; ABA = CRBA = Lagrange = Kane."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffmb
from diffmb.io.mjcf import from_mjmodel

from .oracles import rel_err
from .random_trees import TEMPLATES, random_mjcf
from .test_core_oracles import _mj_random_state, mujoco_reference


@jax.jit
def _four_methods(model, q, v, tau, f_ext):
    return tuple(
        diffmb.forward_dynamics(model, q, v, tau, f_ext, method=m)
        for m in ("aba", "crba", "lagrange", "kane")
    ) + (diffmb.mass_matrix(model, q), diffmb.bias_force(model, q, v))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=st.sampled_from(sorted(TEMPLATES)), seed=st.integers(0, 2**31 - 1))
def test_random_tree_vs_mujoco_and_formulations_agree(template, seed):
    rng = np.random.default_rng(seed)
    mj = mujoco.MjModel.from_xml_string(random_mjcf(template, rng))
    model = from_mjmodel(mj)
    q, v, tau = _mj_random_state(mj, rng)
    xf = rng.normal(size=(mj.nbody - 1, 6))
    Mr, br, ar = mujoco_reference(mj, q, v, tau, xf)
    aba, crba, lag, kane, M, b = (np.asarray(x) for x in _four_methods(model, q, v, tau, xf))
    assert np.linalg.cond(Mr) < 1e6
    assert rel_err(M, Mr) < 1e-9
    assert rel_err(b, br) < 1e-9
    assert rel_err(aba, ar) < 1e-9
    for other in (crba, lag, kane):
        assert rel_err(other, aba) < 1e-10


@pytest.mark.parametrize("template", ["floating_branches"])
def test_inverse_forms_agree(template):
    from diffmb.dynamics.kane import inverse_dynamics_kane
    from diffmb.dynamics.lagrange import inverse_dynamics_lagrange

    rng = np.random.default_rng(7)
    mj = mujoco.MjModel.from_xml_string(random_mjcf(template, rng))
    model = from_mjmodel(mj)
    q, v, a = _mj_random_state(mj, rng)
    xf = jnp.asarray(rng.normal(size=(mj.nbody - 1, 6)))
    forms = jax.jit(lambda q, v, a, xf: tuple(  # one compilation, not one per op
        f(model, q, v, a, xf)
        for f in (diffmb.inverse_dynamics, inverse_dynamics_lagrange, inverse_dynamics_kane)))
    t, t_lag, t_kane = forms(q, v, a, xf)
    assert rel_err(t_lag, t) < 1e-10
    assert rel_err(t_kane, t) < 1e-10
