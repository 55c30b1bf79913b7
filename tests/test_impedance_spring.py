"""The contact spring that follows MuJoCo's impedance (a contact element's ``solimp``).

Expected values: the integral of the spring force by composite Simpson on a fine grid in numpy
(the energy), the spring's own force as the energy's derivative, and the constructor's ranges.
MuJoCo's rest forces at any load are checked in tests/test_mjcf_contacts.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb.contacts import Box, Contacts, Plane
from diffmb.contacts import law as L
from diffmb.forces.elements import soft_impedance

SOLIMPS = [(0.9, 0.95, 0.001, 0.5, 2.0), (0.015, 1.0, 0.031, 0.5, 2.0),
           (0.2, 1.0, 0.01, 0.7, 3.0), (0.5, 0.99, 0.01, 0.5, 1.0), (0.9, 0.9, 0.0, 0.5, 2.0)]


def _simpson_energy(delta, k, si, depth, n=2_000_001):
    s = np.linspace(0.0, delta, n)
    g = lambda r: (lambda d: d * d / (1 - d))(soft_impedance(r, np.asarray(si), xp=np))  # noqa: E731
    f = k * g(s) / g(depth) * s
    h = s[1] - s[0]
    return h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


@pytest.mark.parametrize("si", SOLIMPS)
def test_energy_is_the_integral_of_the_spring_force(si):
    w = si[2] or 1e-3
    k, depth = 2.0e4, 0.3 * w
    for delta in (0.2 * w, 0.6 * w, 0.99 * w, 1.7 * w):
        e = float(L.impedance_energy(jnp.asarray(delta), jnp.asarray(k), jnp.asarray(si),
                                     jnp.asarray(depth)))
        assert e == pytest.approx(_simpson_energy(delta, k, si, depth), rel=1e-9)
    assert float(L.impedance_energy(jnp.asarray(-1e-3), jnp.asarray(k), jnp.asarray(si),
                                    jnp.asarray(depth))) == 0.0


@pytest.mark.parametrize("si", SOLIMPS)
def test_the_spring_force_is_the_energys_derivative_and_k_at_its_depth(si):
    w = si[2] or 1e-3
    k, depth = 3.0e3, 0.4 * w
    args = (jnp.asarray(k), jnp.asarray(si), jnp.asarray(depth))
    for delta in (0.1 * w, 0.45 * w, 0.8 * w, 1.3 * w):
        dE = float(jax.grad(L.impedance_energy)(jnp.asarray(delta), *args))
        f = float(L.impedance_stiffness(jnp.asarray(delta), *args)) * delta
        assert dE == pytest.approx(f, rel=1e-9)
    assert float(L.impedance_stiffness(jnp.asarray(depth), *args)) == pytest.approx(k, rel=1e-14)


def _cube(**kw):
    return Contacts([Box("b", (0.1, 0.1, 0.1))], Plane(), stiffness=1e4, damping=10.0,
                    tangential_stiffness=1e4, tangential_damping=10.0, **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(solimp=(0.9, 0.95, 0.001, 0.5, 2.0)), "together"),
    (dict(solimp_depth=1e-3), "together"),
    (dict(solimp=(0.9, 0.95, 0.001, 0.5, 2.0), solimp_depth=1e-3, normal="hunt_crossley"),
     "linear"),
    (dict(solimp=(-0.1, 0.95, 0.001, 0.5, 2.0), solimp_depth=1e-3), r"solimp\[0\]: d_min"),
    (dict(solimp=(0.9, 1.2, 0.001, 0.5, 2.0), solimp_depth=1e-3), "d_max"),
    (dict(solimp=(0.9, 0.95, -1.0, 0.5, 2.0), solimp_depth=1e-3), "width"),
    (dict(solimp=(0.9, 0.95, 0.001, 1.5, 2.0), solimp_depth=1e-3), "mid"),
    (dict(solimp=(0.9, 0.95, 0.001, 0.5, 0.5), solimp_depth=1e-3), "power"),
    (dict(solimp=(0.9, 0.95, np.nan, 0.5, 2.0), solimp_depth=1e-3), "width"),
    (dict(solimp=(0.9, 0.95, 0.001, 0.5, 2.0), solimp_depth=-1e-3), "solimp_depth"),
])
def test_solimp_is_checked_where_it_enters(kw, match):
    with pytest.raises(ValueError, match=match):
        _cube(**kw)


@pytest.mark.parametrize("kw", [dict(solimp=(0.9, 0.95, 0.001), solimp_depth=1e-3),
                                dict(solimp=np.ones((2, 5)) * 0.5, solimp_depth=1e-3),
                                dict(solimp=(0.9, 0.95, 0.001, 0.5, 2.0), solimp_depth=[1, 2])])
def test_solimp_shapes_are_checked(kw):
    with pytest.raises(TypeError, match="solimp"):
        _cube(**kw)
