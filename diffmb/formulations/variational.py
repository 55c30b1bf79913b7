"""Symplectic variational integrator in absolute coordinates (seed 001, eqs. 33-39).

Xu & Zhong (2014), section 4 (``001_fc471e0f5a9ec7a1.txt``). The system is a
:class:`~diffmb.formulations.maximal.MaximalSystem`: ``u = [r_c, q]`` per body (7 numbers each),
constraints ``C(u) = [g(u); Phi(u)]`` (quaternion norms, then joints).

Discretisation
--------------
On a segment ``(t_k, t_{k+1})`` of length ``h`` the action (eq. 33) is approximated with the
midpoint position ``u_m = (u_k + u_{k+1}) / 2`` and the difference velocity
``v = (u_{k+1} - u_k) / h`` (eq. 35)::

    L_d(u_k, u_{k+1}) = h [ 1/2 v . Gbar(u_m)^T J Gbar(u_m) v - V(u_m) ]

while the constraints enter only at the nodes, through multipliers (eq. 34), so that
``C(u_k) = 0`` holds exactly (to the Newton tolerance) at every node. The dual equations
(eq. 36) define the node momenta ``f_k = dS_k/du_k = D_2 L_d(u_{k-1}, u_k) - C'(u_k)^T mu_k``
and ``f_k = -dS_{k+1}/du_k = -D_1 L_d(u_k, u_{k+1}) + C'(u_k)^T nu_k``. One step (eqs. 38-39)
solves, for ``(u_{k+1}, nu_k)``::

    f_k + D_1 L_d(u_k, u_{k+1}) - C'(u_k)^T nu_k = 0,      C(u_{k+1}) = 0

by Newton's method (``optimistix.Newton``), then sets ``f_{k+1} = D_2 L_d(u_k, u_{k+1}) -
C'(u_{k+1})^T mu_{k+1}``. The right-end multipliers ``mu_{k+1}`` do not change the positions
(the next step's ``nu`` absorbs them); we choose them so that ``f_{k+1} = M(u_{k+1}) v_{k+1}``
for a velocity ``v_{k+1}`` tangent to the constraints (``C'(u_{k+1}) v_{k+1} = 0``), i.e. the
momentum is the Legendre transform (eq. 37) of a consistent velocity -- the RATTLE choice. The
map ``(u_k, f_k) -> (u_{k+1}, f_{k+1})`` is symplectic on the constrained phase space and
second-order accurate; the Hamiltonian ``H = 1/2 v.M v + V`` at the nodes oscillates without
drift.

Scaling and tolerance: the momentum rows of the residual are multiplied by ``h / m_row`` (body
mass for ``r_c`` rows, ``4 tr(J')/3`` for quaternion rows), so every residual component is a
length (m) or a quaternion increment, like the constraint rows; Newton stops when the scaled
residual is below ``atol`` (default 1e-12) and the last update is below ``atol + rtol |y|``.
Gradients of a step are obtained by the implicit function theorem (optimistix's default
``ImplicitAdjoint``): the Newton iterations are never unrolled in reverse mode.

What is ``v``: in :class:`VariationalTrajectory`, ``q`` is ``u`` (7 numbers per body: centre of
mass, quaternion) and ``v`` is ``udot`` (7 numbers per body: centre-of-mass velocity and
quaternion rate ``qdot = 1/2 q (x) [0, omega_body]``) recovered from the node momentum ``p`` by
the constrained Legendre map above; ``p`` is the node momentum ``f_k`` itself.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx

from . import maximal as mx

__all__ = [
    "VariationalTrajectory",
    "discrete_lagrangian",
    "legendre",
    "project_momentum",
    "hamiltonian",
    "step",
    "simulate_variational",
    "STATUS",
]

#: status codes of :func:`simulate_variational`
STATUS = {0: "success", 1: "Newton did not converge", 2: "non-finite state"}


class VariationalTrajectory(eqx.Module):
    """Saved nodes of a variational simulation.

    ``ts`` (ns,), ``q`` = u (ns, 7n), ``v`` = udot (ns, 7n), ``p`` node momenta (ns, 7n),
    ``energy`` the Hamiltonian at the nodes (ns,), ``status`` (0 = success, see ``STATUS``),
    ``t_fail`` the node time at which the first step failed (inf if none), ``newton_steps_max``
    the largest Newton iteration count of any step. Nodes after a failure are NaN.
    """

    ts: jax.Array
    q: jax.Array
    v: jax.Array
    p: jax.Array
    energy: jax.Array
    status: jax.Array
    t_fail: jax.Array
    newton_steps_max: jax.Array


def discrete_lagrangian(sysm: mx.MaximalSystem, ua, ub, h):
    """Midpoint discrete Lagrangian (eq. 35 without the constraint terms)."""
    um = 0.5 * (ua + ub)
    v = (ub - ua) / h
    return h * (mx.kinetic_energy(sysm, um, v) - mx.potential_energy(sysm, um))


def legendre(sysm: mx.MaximalSystem, u, udot):
    """``f = Gbar^T J Gbar udot`` (eq. 37)."""
    return mx.mass_matrix(sysm, u) @ udot


def project_momentum(sysm: mx.MaximalSystem, u, p):
    """Remove the constraint-force part of ``p``: returns ``(p_c, v)`` with ``p_c = M v``,
    ``C'(u) v = 0`` and ``p - p_c`` in the range of ``C'(u)^T``."""
    M = mx.mass_matrix(sysm, u)
    Cu = mx.constraint_jacobian(sysm, u)
    v, _ = mx._kkt_solve(M, Cu, p, jnp.zeros(Cu.shape[0], u.dtype))
    return M @ v, v


def hamiltonian(sysm: mx.MaximalSystem, u, p):
    """``H = 1/2 v.M v + V`` with ``v`` from :func:`project_momentum` (zero of V at r = 0)."""
    pc, v = project_momentum(sysm, u, p)
    return 0.5 * (v @ pc) + mx.potential_energy(sysm, u)


def _row_weights(sysm, h):
    n = sysm.n_bodies
    jbar = 4.0 * jnp.trace(sysm.inertias, axis1=-2, axis2=-1) / 3.0
    w = jnp.concatenate(
        [jnp.repeat(sysm.masses[:, None], 3, axis=1), jnp.repeat(jbar[:, None], 4, axis=1)],
        axis=1,
    ).reshape(7 * n)
    return h / w


def _nu_scale(sysm, h):
    """Multipliers are solved for in units of length: ``nu = nu_hat * m_ref / h``."""
    return jnp.mean(1.0 / _row_weights(sysm, h))


def _residual(y, args):
    sysm, u, p, CuT, h = args
    n7 = u.shape[0]
    ub, nu = y[:n7], y[n7:] * _nu_scale(sysm, h)
    d1 = jax.grad(discrete_lagrangian, argnums=1)(sysm, u, ub, h)
    r1 = _row_weights(sysm, h) * (p + d1 - CuT @ nu)
    r2 = mx.constraints(sysm, ub)
    return jnp.concatenate([r1, r2])


def step(sysm: mx.MaximalSystem, u, p, h, guess=None, *, rtol=1e-12, atol=1e-12, max_steps=32):
    """One step ``(u_k, f_k) -> (u_{k+1}, f_{k+1})``.

    ``p`` may carry any constraint-force part (it does not change ``u_{k+1}``); the returned
    momentum is the raw ``D_2 L_d(u_k, u_{k+1})`` (apply :func:`project_momentum` for the
    canonical one). ``guess``: optional ``(u_guess, nu_guess)`` for Newton (``nu`` as returned
    here). Returns ``(u_next, p_next, nu, ok, newton_steps)``; ``ok`` is False when Newton
    failed or the result is not finite. Differentiable by the implicit function theorem.
    """
    n7 = u.shape[0]
    nc = sysm.n_constraints
    if guess is None:
        _, v = project_momentum(sysm, u, p)
        guess = (u + h * v, jnp.zeros(nc, u.dtype))
    y0 = jax.lax.stop_gradient(jnp.concatenate([guess[0], guess[1] / _nu_scale(sysm, h)]))
    CuT = mx.constraint_jacobian(sysm, u).T
    solver = optx.Newton(rtol=rtol, atol=atol, linear_solver=lx.LU())
    sol = optx.root_find(
        _residual, solver, y0, args=(sysm, u, p, CuT, h), max_steps=max_steps, throw=False
    )
    ub, nu = sol.value[:n7], sol.value[n7:] * _nu_scale(sysm, h)
    p_next = jax.grad(discrete_lagrangian, argnums=2)(sysm, u, ub, h)
    finite = jnp.all(jnp.isfinite(ub)) & jnp.all(jnp.isfinite(p_next))
    ok = (sol.result == optx.RESULTS.successful) & finite
    return ub, p_next, nu, ok, sol.stats["num_steps"]


def _save_indices(t0, t1, dt, saveat):
    n_total = int(round((t1 - t0) / dt))
    if n_total < 1 or abs(n_total * dt - (t1 - t0)) > 1e-9 * max(1.0, abs(t1 - t0)):
        raise ValueError(f"(t1 - t0) = {t1 - t0} is not a whole number of steps dt = {dt}")
    if saveat is None:
        return list(range(n_total + 1)), n_total
    idx = []
    for t in np.atleast_1d(np.asarray(saveat, float)):
        k = int(round((t - t0) / dt))
        if abs(t0 + k * dt - t) > 1e-9 * max(1.0, abs(t)) or not 0 <= k <= n_total:
            raise ValueError(f"save time {t} is not a node t0 + k dt in [{t0}, {t1}] (dt = {dt})")
        idx.append(k)
    if any(b < a for a, b in zip(idx, idx[1:], strict=False)):
        raise ValueError("saveat must be non-decreasing")
    return idx, n_total


@eqx.filter_jit
def _run(sysm, u0, p0, h, t0, sel, n_chunks, stride, rtol, atol, max_newton):
    """``n_chunks * stride`` steps; saves node ``sel[i] * stride``. ``h``, ``t0``, ``sel`` are
    traced, so runs that differ only in dt or save nodes share one compilation."""
    p0, v0 = project_momentum(sysm, u0, p0)
    nc = sysm.n_constraints
    carry0 = (u0, u0 - h * v0, p0, jnp.zeros(nc, u0.dtype), jnp.array(0), jnp.array(jnp.inf),
              jnp.array(0), jnp.array(0))

    def one(carry, _):
        u, u_prev, p, nu, status, tfail, k, nmax = carry
        un, pn, nun, ok, ns = step(
            sysm, u, p, h, (2.0 * u - u_prev, nu), rtol=rtol, atol=atol, max_steps=max_newton
        )
        fresh = (status == 0) & ~ok
        code = jnp.where(jnp.all(jnp.isfinite(un)), 1, 2)
        status = jnp.where(fresh, code, status)
        tfail = jnp.where(fresh, t0 + (k + 1).astype(u.dtype) * h, tfail)
        good = status == 0
        pick = lambda a, b: jnp.where(good, a, b)  # noqa: E731
        nmax = jnp.maximum(nmax, jnp.where(good, ns, 0))
        return (pick(un, u), pick(u, u_prev), pick(pn, p), pick(nun, nu), status, tfail, k + 1,
                nmax), None

    def chunk(carry, _):
        carry, _ = jax.lax.scan(one, carry, None, length=stride)
        u, _, p, _, status, *_ = carry
        bad = status != 0
        nanify = lambda a: jnp.where(bad, jnp.nan, a)  # noqa: E731
        return carry, (nanify(u), nanify(p))

    carry, (us, ps) = jax.lax.scan(chunk, carry0, None, length=n_chunks)
    us = jnp.concatenate([u0[None], us])[sel]
    ps = jnp.concatenate([p0[None], ps])[sel]
    ps, vs = jax.vmap(lambda u, p: project_momentum(sysm, u, p))(us, ps)
    H = 0.5 * jnp.sum(vs * ps, axis=-1) + jax.vmap(lambda u: mx.potential_energy(sysm, u))(us)
    ts = t0 + (sel * stride).astype(u0.dtype) * h
    _, _, _, _, status, tfail, _, nmax = carry
    return VariationalTrajectory(ts, us, vs, ps, H, status, tfail, nmax)


def simulate_variational(
    sysm: mx.MaximalSystem,
    u0,
    udot0=None,
    *,
    p0=None,
    t1: float,
    dt: float,
    t0: float = 0.0,
    saveat=None,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    max_newton: int = 32,
    throw: bool = True,
) -> VariationalTrajectory:
    """Integrate ``sysm`` from ``u0`` with the symplectic variational integrator.

    Args:
        sysm: a :class:`~diffmb.formulations.maximal.MaximalSystem`.
        u0: (7n,) initial positions and quaternions; should satisfy the constraints.
        udot0: (7n,) initial ``udot`` (COM velocities, quaternion rates); the initial momentum is
            its Legendre transform (eq. 37). Give either ``udot0`` or ``p0`` (default: at rest).
        p0: (7n,) initial momentum ``f_0`` instead. Either way, the constraint-force part is
            removed (the velocity is projected onto the constraint tangent space).
        t1, dt, t0: horizon and fixed step; ``(t1 - t0) / dt`` must be a whole number.
        saveat: save times (each a node ``t0 + k dt``), or None for every node.
        rtol, atol: Newton tolerances (atol bounds the scaled residual, see module docs).
        max_newton: Newton iterations per step before the step counts as failed.
        throw: outside ``jit``, raise ``RuntimeError`` if a step failed (otherwise read
            ``traj.status``; failed nodes are NaN).

    Returns a :class:`VariationalTrajectory` (``q`` = u, ``v`` = udot, ``p``, ``energy``,
    ``status``, ``t_fail``).
    """
    u0 = jnp.asarray(u0, dtype=jnp.float64)
    if u0.shape != (sysm.nq,):
        raise ValueError(f"u0 has shape {u0.shape}, expected ({sysm.nq},)")
    if udot0 is not None and p0 is not None:
        raise ValueError("give udot0 or p0, not both")
    if p0 is None:
        ud = jnp.zeros_like(u0) if udot0 is None else jnp.asarray(udot0, dtype=jnp.float64)
        p0 = legendre(sysm, u0, ud)
    p0 = jnp.asarray(p0, dtype=jnp.float64)
    idx, _ = _save_indices(float(t0), float(t1), float(dt), saveat)
    last = max(idx)
    nz = [k for k in idx if k > 0]
    stride = math.gcd(*nz) if nz else 1
    n_chunks = last // stride
    sel = jnp.asarray(np.asarray(idx) // stride)
    traj = _run(sysm, u0, p0, jnp.asarray(float(dt)), jnp.asarray(float(t0)), sel, n_chunks,
                stride, float(rtol), float(atol), int(max_newton))
    if throw and not isinstance(traj.status, jax.core.Tracer):
        st = int(traj.status)
        if st != 0:
            raise RuntimeError(
                f"variational integrator: {STATUS.get(st, st)} at t = {float(traj.t_fail)} "
                f"(dt = {dt}); pass throw=False to get the partial trajectory"
            )
    return traj
