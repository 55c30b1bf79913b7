"""Truncated backpropagation through a fixed-step run (:class:`diffmb.simulation.
TruncatedBackprop`): the forward run is unchanged bit for bit, the gradient with the cut beyond
the horizon is the full gradient, and with cuts it is the sum of the segments' gradients, each
from its own run started at the segment's (held) start state.

Expected values: the uncut run itself (bit for bit, and its gradient) and per-segment runs of
``simulate`` from the saved states (to round-off: their time grids differ in the last bit)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.simulation import SOLVERS, TruncatedBackprop

from ._box_scene import H, box_model, contacts

T, DT, SEG = 0.4, 0.01, 0.1
TS = np.round(np.arange(1, int(round(T / DT)) + 1) * DT, 10)


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    return box_model(tmp_path_factory)


def push(t, q, v, p):
    """A generalized force (6,) on the cube: p[:3] constant, p[3:] times sin 10 t."""
    return jnp.concatenate([p[:3] + p[3:] * jnp.sin(10.0 * t), jnp.zeros(3)])


def _cost(tr):
    return jnp.sum(tr.q[:, 0] ** 2 + 0.3 * tr.q[:, 2] + 0.1 * tr.v[:, 1] ** 2)


def _run(box, forces, solver, p, q0, v0, t0=0.0, t1=T, loop_steps=None):
    ts = TS[(TS > t0 + 1e-9) & (TS <= t1 + 1e-9)]
    return diffmb.simulate(box, q0, v0, t0=t0, t1=t1, dt=DT, solver=solver, forces=forces,
                           control=push, params=p, saveat=ts, loop_steps=loop_steps)


P0 = jnp.array([3.0, -1.0, 0.5, 2.0, 1.0, -0.5])
Q0 = jnp.array([0.0, 0.0, H + 0.01, 1.0, 0.0, 0.0, 0.0])


def test_forward_unchanged_and_cut_beyond_horizon_is_the_full_gradient(box):
    """On the cube dropped onto the floor with stiction (contacts, the implicit step): the cut
    run's saves equal the plain run's bit for bit; cut every T (no cut inside the run) its
    gradient is the plain gradient; cut every 0.1 s it is finite and not the plain one."""
    forces = (contacts(box),)
    base = SOLVERS["implicit"]

    def loss(p, solver):
        return _cost(_run(box, forces, solver, p, Q0, jnp.zeros(6)))

    a = _run(box, forces, base, P0, Q0, jnp.zeros(6))
    b = _run(box, forces, TruncatedBackprop(base, SEG), P0, Q0, jnp.zeros(6))
    assert bool(a.ok) and np.array_equal(np.asarray(a.q), np.asarray(b.q))
    assert np.array_equal(np.asarray(a.v), np.asarray(b.v))
    g = jax.grad(loss)(P0, base)
    g_T = jax.grad(loss)(P0, TruncatedBackprop(base, T))
    g_s = jax.grad(loss)(P0, TruncatedBackprop(base, SEG))
    assert np.allclose(g_T, g, rtol=1e-12, atol=1e-14)
    assert np.all(np.isfinite(g_s)) and not np.allclose(g_s, g, rtol=1e-3)


def test_cut_gradient_is_the_sum_of_the_segments_gradients(box):
    """In free flight (RK4), cut every 0.1 s: the gradient of a cost summed over the saves is
    the sum over the segments of the gradient of that segment's saves' cost, each from a run of
    the segment alone started at the saved state (held fixed)."""
    def loss(p):
        return _cost(_run(box, (), TruncatedBackprop(SOLVERS["rk4"], SEG), p, Q0, jnp.zeros(6)))

    g = np.asarray(jax.grad(loss)(P0))
    full = _run(box, (), "rk4", P0, Q0, jnp.zeros(6))
    want = np.zeros(6)
    for k in range(int(round(T / SEG))):
        t0 = k * SEG
        if k == 0:
            q0, v0 = Q0, jnp.zeros(6)
        else:
            i = int(round(t0 / DT)) - 1  # the save at t0
            q0, v0 = full.q[i], full.v[i]
        want += np.asarray(jax.grad(lambda p, q0=q0, v0=v0, t0=t0: _cost(  # one compile
            _run(box, (), "rk4", p, q0, v0, t0=t0, t1=t0 + SEG, loop_steps=10)))(P0))
    assert np.allclose(g, want, rtol=1e-7, atol=1e-9)


def test_bad_segment_length():
    with pytest.raises(ValueError, match="every must be a positive finite time"):
        TruncatedBackprop(SOLVERS["rk4"], 0.0)
