"""diffmb.dynamics.small_linalg: the loop factorisations and solves against numpy/scipy and
against jnp.linalg.solve's derivatives; non-finite results for singular or indefinite input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from diffmb.dynamics import small_linalg as sl

SIZES = (1, 2, 3, 5, 8, 13, 23, 40)


def _general(rng, n, batch=None):
    shape = (n, n) if batch is None else (batch, n, n)
    return rng.normal(size=shape) + 2.0 * np.sqrt(n) * np.eye(n)  # well conditioned


def _spd(rng, n, batch=None):
    G = rng.normal(size=(n, n) if batch is None else (batch, n, n))
    return G @ np.swapaxes(G, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("n", SIZES)
def test_solves_match_numpy(n):
    rng = np.random.default_rng(n)
    A, S = _general(rng, n), _spd(rng, n)
    b, B = rng.normal(size=n), rng.normal(size=(n, 3))
    for rhs in (b, B):
        np.testing.assert_allclose(sl.solve(A, rhs), np.linalg.solve(A, rhs), rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(sl.spd_solve(S, rhs), scipy.linalg.solve(S, rhs,
                                   assume_a="pos"), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sl.cholesky(S), np.linalg.cholesky(S), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sl.inv(A), np.linalg.inv(A), rtol=1e-10, atol=1e-12)
    # the packed factors: a[perm] = L U
    f = sl.lu_factor(A)
    L = np.tril(np.asarray(f.lu), -1) + np.eye(n)
    np.testing.assert_allclose(L @ np.triu(np.asarray(f.lu)), A[np.asarray(f.perm)],
                               rtol=1e-12, atol=1e-12)


def test_pivoting_takes_the_largest_entry():
    # a zero leading entry needs a row exchange; the pivots are scipy's (partial pivoting)
    A = np.array([[0.0, 2.0, 1.0], [1e-3, 1.0, 0.0], [4.0, 0.0, 3.0]])
    lu, piv = scipy.linalg.lu_factor(A)
    f = sl.lu_factor(A)
    np.testing.assert_allclose(f.lu, lu, rtol=1e-13, atol=1e-15)
    perm = np.arange(3)
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    np.testing.assert_array_equal(f.perm, perm)


@pytest.mark.parametrize("n", (1, 4, 18, 23))
def test_batched_under_vmap_and_jit(n):
    rng = np.random.default_rng(100 + n)
    A, S, b = _general(rng, n, 16), _spd(rng, n, 16), rng.normal(size=(16, n))
    x = jax.jit(jax.vmap(sl.solve))(A, b)
    np.testing.assert_allclose(x, np.linalg.solve(A, b[..., None])[..., 0], rtol=1e-10,
                               atol=1e-12)
    y = jax.jit(jax.vmap(sl.spd_solve))(S, b)
    np.testing.assert_allclose(y, np.linalg.solve(S, b[..., None])[..., 0], rtol=1e-10,
                               atol=1e-12)
    # one factorisation, several solves
    f = jax.vmap(sl.lu_factor)(A)
    z = jax.vmap(sl.lu_solve)(f, b)
    np.testing.assert_allclose(z, x, rtol=1e-12, atol=1e-14)


def _loss(solve):
    return lambda A, b: jnp.sum(jnp.sin(solve(A, b)) * jnp.arange(1.0, b.shape[0] + 1))


@pytest.mark.parametrize("n", (1, 3, 12))
def test_derivatives_match_jnp_and_differences(n):
    rng = np.random.default_rng(200 + n)
    A, S, b = _general(rng, n), _spd(rng, n), rng.normal(size=n)
    dA, db = rng.normal(size=(n, n)), rng.normal(size=n)
    dS = dA + dA.T  # a symmetric direction keeps S symmetric
    for ours, M, dM in ((sl.solve, A, dA), (sl.spd_solve, S, dS)):
        ref = jnp.linalg.solve
        _, t = jax.jvp(ours, (M, b), (dM, db))
        _, t0 = jax.jvp(ref, (M, b), (dM, db))
        np.testing.assert_allclose(t, t0, rtol=1e-10, atol=1e-12)
        eps = 1e-6
        fd = (np.asarray(ours(M + eps * dM, b + eps * db))
              - np.asarray(ours(M - eps * dM, b - eps * db))) / (2 * eps)
        np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-8)
        g = jax.grad(_loss(ours), argnums=(0, 1))(M, b)
        g0 = jax.grad(_loss(ref), argnums=(0, 1))(M, b)
        for a, a0 in zip(g, g0, strict=True):
            np.testing.assert_allclose(a, a0, rtol=1e-10, atol=1e-12)
    # matrix right-hand sides, batched, reverse mode
    As, Bs = _general(rng, n, 4), rng.normal(size=(4, n, 2))
    g = jax.grad(lambda A, B: jnp.sum(jax.vmap(sl.solve)(A, B) ** 2), argnums=(0, 1))(As, Bs)
    g0 = jax.grad(lambda A, B: jnp.sum(jnp.linalg.solve(A, B) ** 2), argnums=(0, 1))(As, Bs)
    for a, a0 in zip(g, g0, strict=True):
        np.testing.assert_allclose(a, a0, rtol=1e-10, atol=1e-12)


def test_cholesky_factor_is_differentiable():
    rng = np.random.default_rng(7)
    S, dS = _spd(rng, 6), rng.normal(size=(6, 6))
    dS = dS + dS.T
    _, t = jax.jvp(sl.cholesky, (S,), (dS,))
    _, t0 = jax.jvp(jnp.linalg.cholesky, (S,), (dS,))
    np.testing.assert_allclose(t, t0, rtol=1e-10, atol=1e-12)
    # as a jax.scipy cho_factor pair
    b = rng.normal(size=6)
    f = lambda S: jnp.sum(jax.scipy.linalg.cho_solve((sl.cholesky(S), True), b) ** 2)  # noqa: E731
    f0 = lambda S: jnp.sum(jnp.linalg.solve(S, b) ** 2)  # noqa: E731
    # only the lower triangle is read: compare along a symmetric direction
    np.testing.assert_allclose(np.vdot(jax.grad(f)(S), dS), np.vdot(jax.grad(f0)(S), dS),
                               rtol=1e-9)


def test_singular_indefinite_and_nan_inputs_are_not_finite():
    b = np.ones(3)
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])
    for A in (np.zeros((3, 3)), singular):
        assert not np.all(np.isfinite(sl.solve(A, b)))
        assert not np.all(np.isfinite(jnp.linalg.solve(A, b)))  # as jnp does
    for S in (-np.eye(3), np.diag([1.0, 0.0, 1.0]), np.array([[1.0, 2.0], [2.0, 1.0]])):
        assert np.all(np.isnan(sl.cholesky(S)))
        assert not np.any(np.isfinite(sl.spd_solve(S, np.ones(len(S)))))
    A = np.eye(3)
    A[1, 2] = np.nan
    assert np.isnan(sl.solve(A, b)).any() and np.isnan(sl.spd_solve(A.T, b)).any()
    assert np.isnan(sl.solve(np.eye(3), np.array([1.0, np.nan, 1.0]))).any()
    # a batch member's failure stays its own
    As = np.stack([np.eye(3), np.zeros((3, 3))])
    x = jax.vmap(sl.solve)(As, np.ones((2, 3)))
    np.testing.assert_array_equal(x[0], np.ones(3))
    assert not np.all(np.isfinite(x[1]))


def test_large_matrices_take_lapack():
    n = sl.MAX_ORDER + 1
    assert sl.uses_loops(sl.MAX_ORDER) and not sl.uses_loops(n)
    rng = np.random.default_rng(3)
    A, S, b = _general(rng, n), _spd(rng, n), rng.normal(size=n)
    np.testing.assert_allclose(sl.solve(A, b), np.linalg.solve(A, b), rtol=1e-10)
    np.testing.assert_allclose(sl.spd_solve(S, b), np.linalg.solve(S, b), rtol=1e-10)
    g = jax.grad(_loss(sl.solve))(A, b)
    g0 = jax.grad(_loss(jnp.linalg.solve))(A, b)
    np.testing.assert_allclose(g, g0, rtol=1e-9, atol=1e-12)


def test_no_lapack_custom_call_under_vmap():
    n = 18
    A, S, b = np.eye(n)[None].repeat(4, 0), np.eye(n)[None].repeat(4, 0), np.ones((4, n))

    def step(A, S, b):
        f = sl.cho_factor(S)
        return sl.solve(A, sl.cho_solve(f, b)) + sl.cholesky(S) @ b

    hlo = jax.jit(jax.vmap(step)).lower(A, S, b).as_text()
    assert "custom_call" not in hlo and "lapack" not in hlo
    hlo = jax.jit(jax.grad(lambda A: jnp.sum(jax.vmap(sl.solve)(A, b)))).lower(A).as_text()
    assert "custom_call" not in hlo and "lapack" not in hlo
