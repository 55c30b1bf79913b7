"""Symplectic variational integrator in absolute coordinates (Xu & Zhong 2014, section 4,
eqs. 33-39).

The mechanism is a
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

The step is the discrete system :class:`VariationalSystem`, integrated by
:func:`diffmb.simulate` on its fixed grid::

    traj = diffmb.simulate(VariationalSystem(sysm), u0, udot0, t1=2.0, dt=0.002)

In the returned :class:`~diffmb.simulation.Trajectory`, ``q`` is ``u`` (7 numbers per body:
centre of mass, quaternion), ``v`` is ``udot`` (7 numbers per body: centre-of-mass velocity and
quaternion rate ``qdot = 1/2 q (x) [0, omega_body]``) recovered from the node momentum by the
constrained Legendre map above, and ``aux`` holds ``p`` (the node momenta ``f_k``), ``energy``
(the Hamiltonian at the nodes) and ``newton_steps_max``. A failed Newton solve is the status
``SOLVER_FAILURE`` of :data:`diffmb.STATUS`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx

from ..systems import NONFINITE, SOLVER_FAILURE, SUCCESS, AbstractDiscreteSystem, check_initial
from . import maximal as mx

__all__ = [
    "discrete_lagrangian",
    "legendre",
    "project_momentum",
    "hamiltonian",
    "step",
    "VariationalSystem",
]


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
    v, _ = mx.kkt_solve(M, Cu, p, jnp.zeros(Cu.shape[0], u.dtype))
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


class VariationalSystem(AbstractDiscreteSystem):
    """The symplectic variational step (eqs. 33-38) as a discrete system for
    :func:`diffmb.simulate`.

    State y = (u_k, u_{k-1}, f_k, ν_k, n_max): positions, the previous node (the Newton guess
    extrapolates 2 u_k − u_{k−1}), the node momentum, the last multipliers and the largest Newton
    count so far. ``init(u0, w0)`` takes u̇0 (or, with ``momentum=True``, the momentum f_0) and
    removes its constraint-force part; either should satisfy the constraints. ``outputs`` gives
    q = u, v = u̇ (from the projected momentum) and ``aux = {"p", "energy",
    "newton_steps_max"}``; saves after a failed step are NaN. ``rtol``, ``atol``: Newton's
    tolerances (``atol`` bounds the scaled residual, see the module docstring); ``max_newton``:
    iterations per step before the step counts as failed.
    """

    sysm: mx.MaximalSystem
    momentum: bool = eqx.field(static=True, default=False)
    rtol: float = eqx.field(static=True, default=1e-12)
    atol: float = eqx.field(static=True, default=1e-12)
    max_newton: int = eqx.field(static=True, default=32)

    def init(self, q0, v0, params, dt):
        n = self.sysm.nq
        u0 = check_initial("variational", "u0", q0, (n,))
        w0 = jnp.zeros(n) if v0 is None else check_initial(
            "variational", "p0" if self.momentum else "udot0", v0, (n,))
        p0 = w0 if self.momentum else legendre(self.sysm, u0, w0)
        p0, v0 = project_momentum(self.sysm, u0, p0)
        nc = self.sysm.n_constraints
        return (u0, u0 - dt * v0, p0, jnp.zeros(nc, u0.dtype), jnp.array(0.0))

    def step(self, t, y, h, params):
        u, u_prev, p, nu, nmax = y
        un, pn, nun, ok, ns = step(self.sysm, u, p, h, (2.0 * u - u_prev, nu), rtol=self.rtol,
                                   atol=self.atol, max_steps=self.max_newton)
        code = jnp.where(ok, SUCCESS, jnp.where(jnp.all(jnp.isfinite(un)), SOLVER_FAILURE,
                                                NONFINITE))
        return (un, u, pn, nun, jnp.maximum(nmax, jnp.asarray(ns, jnp.float64))), code

    def outputs(self, ys, params):
        us, _, ps, _, nmax = ys
        ok = jnp.all(jnp.isfinite(us), axis=-1)
        us_ = jnp.where(ok[:, None], us, 0.0)  # failed saves: no Newton solve on inf
        ps_ = jnp.where(ok[:, None], ps, 0.0)
        pc, vs = jax.vmap(lambda u, p: project_momentum(self.sysm, u, p))(us_, ps_)
        H = 0.5 * jnp.sum(vs * pc, axis=-1) + jax.vmap(
            lambda u: mx.potential_energy(self.sysm, u))(us_)
        nan = lambda a: jnp.where(ok.reshape((-1,) + (1,) * (a.ndim - 1)), a, jnp.nan)
        return nan(us), nan(vs), {"p": nan(pc), "energy": nan(H),
                                  "newton_steps_max": jnp.max(jnp.where(ok, nmax, 0))}
