"""The implicit contact step linearises only the nearest contact points (``max_points``) and
evaluates only the nearest geom pairs of a large batch (their bounding spheres): the step must
equal the one over every candidate wherever no more than that many push, and stop with
CONTACT_OVERFLOW, not silently, where more do."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import AbstractContacts, Contacts, Plane, Sphere
from diffmb.simulation import SimulationError
from diffmb.systems import CONTACT_OVERFLOW, SUCCESS

# five 0.05 m balls: b1 falls onto b0 and rolls off it, the others drop alone; every pair of
# balls is a candidate (10 ball-ball directions, one point each, and 5 on the floor)
POS = [(0, 0, 0.05), (0.06, 0, 0.2), (1, 0, 0.06), (2, 0, 0.08), (3, 0, 0.1)]
XML = """<mujoco><option timestep="0.005"/><worldbody>
<geom name="floor" type="plane" size="5 5 .1"/>{}</worldbody></mujoco>"""
T, DT = 0.6, 0.005


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    bodies = "".join(f'<body name="b{i}" pos="{x} {y} {z}"><freejoint/><geom name="s{i}" '
                     f'type="sphere" size="0.05" mass="0.5"/></body>'
                     for i, (x, y, z) in enumerate(POS))
    p = tmp_path_factory.mktemp("balls") / "balls.xml"
    p.write_text(XML.format(bodies))
    model = diffmb.load_mjcf(p)
    forces = diffmb.mjcf_forces(p)
    k = next(i for i, f in enumerate(forces) if isinstance(f, AbstractContacts))
    assert forces[k].n_points == 15 and forces[k].max_points == 64

    def with_points(n):
        fs = list(forces)
        fs[k] = forces[k].with_max_points(n)
        return tuple(fs)

    return model, with_points


def _run(model, forces, v0=None, throw=False, **kw):
    v0 = jnp.zeros(model.nv) if v0 is None else v0
    return diffmb.simulate(model, jnp.asarray(model.qpos0), v0, t1=T, dt=DT, forces=forces,
                           solver="implicit", saveat=np.linspace(0.0, T, 7), throw=throw, **kw)


@pytest.mark.parametrize("points", [6, 12])
def test_nearest_points_give_the_step_over_every_candidate(scene, points):
    # 6 points linearised of 15, and 6 of the 10 ball-ball directions evaluated (12: all
    # directions, 12 points): at most the five floor points and one ball-ball point push
    model, with_points = scene
    every = _run(model, with_points(10**6))
    near = _run(model, with_points(points))
    assert int(every.status) == SUCCESS and int(near.status) == SUCCESS
    np.testing.assert_allclose(near.q, every.q, rtol=0, atol=1e-12)
    # the falling ball was deflected by the resting one (the pair did act)
    assert abs(float(every.q[-1, 7])) > 0.07
    np.testing.assert_allclose(every.q[-1, 2::7], every.q[-1, 2], atol=1e-6)  # all on the floor


def test_gradients_through_the_nearest_points_equal_the_full_ones(scene):
    model, with_points = scene

    def loss(forces):
        return lambda v0: _run(model, forces, v0).q[-1, 7]  # the deflected ball's x

    v0 = jnp.zeros(model.nv).at[6].set(0.3)  # b1 pushed sideways
    g_every = jax.grad(loss(with_points(10**6)))(v0)
    g_near = jax.grad(loss(with_points(6)))(v0)
    assert np.all(np.isfinite(g_every)) and np.abs(g_every).max() > 0
    np.testing.assert_allclose(g_near, g_every, rtol=1e-9, atol=1e-12)


def test_more_pushing_points_than_linearised_is_a_failure(scene):
    model, with_points = scene
    tr = _run(model, with_points(3))  # five balls land on the floor
    assert int(tr.status) == CONTACT_OVERFLOW
    assert 0 < float(tr.t_fail) < T and "max_points" in tr.message()
    with pytest.raises(SimulationError, match="max_points"):
        _run(model, with_points(3), throw=True)
    # diffrax's own loop (a progress bar) reports the same
    assert int(_run(model, with_points(3), progress=True).status) == CONTACT_OVERFLOW


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "64"])
def test_max_points_is_checked_where_it_enters(scene, bad):
    model, with_points = scene
    with pytest.raises(ValueError, match="max_points"):
        Contacts([Sphere("b0", 0.05)], Plane(), model=model, max_points=bad)
    with pytest.raises(ValueError, match="max_points"):
        with_points(bad)


def test_gradient_from_rest_is_finite_and_exact_in_flight(scene):
    # every ball starts at rest (zero tangential speed at the points: the stiction force's
    # norm at zero); b2 flies 0.05 s before it lands, so d x(T) / d vx(0) = T exactly
    model, with_points = scene
    t = 0.05

    def x4(v0):
        return diffmb.simulate(model, jnp.asarray(model.qpos0), v0, t1=t, dt=DT,
                               forces=with_points(64), solver="implicit", saveat=[t]).q[-1, 28]

    g = jax.grad(x4)(jnp.zeros(model.nv))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g[24], t, rtol=1e-12)
