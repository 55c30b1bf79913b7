"""Constrained (component) and unconstrained (system) modes of a flexible body on a rigid base.

The linear hybrid system (Zhao et al. 2012, eq. 3; any FEM body whose root rides on r rigid
coordinates of a tree, linearised about rest)

    [ J   I ] [θ̈]   [0  0] [θ]   [T  ]
    [ Iᵀ  M ] [d̈] + [0  K] [d] = [f_d]                                           (3)

with ``J`` (r, r) the rigid inertia about the joint(s), ``I`` (r, n) the rigid–flexible coupling,
``M``, ``K`` (n, n) the constrained (root-clamped) FEM mass and stiffness, is reduced in two ways:

* **constrained modes** (eqs. 5–8): ``K Φ_c = M Φ_c ω_c²`` with the base held, ``Φ_cᵀ M Φ_c = E``;
  ``d = Φ_c η_c`` gives ``[[J, H_c], [H_cᵀ, E]] [θ̈; η̈_c] + diag(0, ω_c²) [θ; η_c] = [T; Φ_cᵀ f_d]``
  with ``H_c = I Φ_c`` (r, N_c);
* **unconstrained modes** (eqs. 9–13): ``K D = (M − Iᵀ J⁻¹ I) D ω_u²`` (the free system's elastic
  modes, the rigid mode condensed out), ``Dᵀ (M − Iᵀ J⁻¹ I) D = E``; with
  ``θ = θ_u − J⁻¹ I D η_u`` and ``d = D η_u`` the equations decouple into
  ``J θ̈_u = T`` and ``η̈_u + ω_u² η_u = Dᵀ f_d − H_u θ̈_u``, ``H_u = Dᵀ Iᵀ`` (N_u, r).

Eigen-solves are the generalized symmetric problem reduced by a Cholesky factor of the mass
matrix and ``jnp.linalg.eigh``: differentiable (for distinct eigenvalues) with respect to every
entry of the matrices. Truncation to any N_c / N_u is slicing (:func:`truncate`).

Responses are exact for these linear systems: closed-form modal superposition for a constant
load from rest (:func:`step_response`, :func:`unconstrained_step_response`), and the exact
zero-order-hold discretisation of each damped mode for sampled piecewise-constant loads
(:func:`modal_zoh_response`, :func:`unconstrained_zoh_response`; the same recursion stepped by
:func:`diffmb.simulate` is the discrete system :class:`ModalZOHSystem`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular
from jaxtyping import Array, ArrayLike

from ..systems import AbstractDiscreteSystem, AbstractODESystem, check_initial

__all__ = [
    "generalized_eigh",
    "ConstrainedModes",
    "UnconstrainedModes",
    "constrained_modes",
    "unconstrained_modes",
    "truncate",
    "full_matrices",
    "reduced_constrained",
    "reduced_unconstrained",
    "recover_constrained",
    "recover_unconstrained",
    "step_response",
    "constrained_step_response",
    "unconstrained_step_response",
    "modal_zoh_response",
    "unconstrained_zoh_response",
    "ModalZOHSystem",
    "LinearSecondOrderSystem",
]


def _as_rigid(J: ArrayLike, I: ArrayLike) -> tuple[Array, Array]:
    """Promote a scalar J / vector I (one rigid coordinate) to (1, 1) / (1, n)."""
    J = jnp.atleast_2d(jnp.asarray(J))
    I = jnp.atleast_2d(jnp.asarray(I))
    return J, I


@jax.jit
def generalized_eigh(K: Array, M: Array):
    """Solve ``K φ = λ M φ`` for symmetric K and symmetric positive-definite M.

    Returns ``(lam (n,), phi (n, n))``, eigenvalues ascending, columns mass-normalised
    (``phiᵀ M phi = E``) and signed so that each column's largest-magnitude entry is positive.
    Uses ``M = L Lᵀ`` and ``eigh(L⁻¹ K L⁻ᵀ)``; differentiable for distinct eigenvalues.
    """
    L = jnp.linalg.cholesky(M)
    X = solve_triangular(L, K, lower=True)  # L⁻¹ K
    C = solve_triangular(L, X.T, lower=True)  # L⁻¹ K L⁻ᵀ
    C = 0.5 * (C + C.T)
    lam, V = jnp.linalg.eigh(C)
    phi = solve_triangular(L.T, V, lower=False)
    idx = jnp.argmax(jnp.abs(phi), axis=0)
    sign = jnp.sign(phi[idx, jnp.arange(phi.shape[1])])
    sign = jnp.where(sign == 0.0, 1.0, sign)
    return lam, phi * sign[None, :]


def _omega(lam: Array) -> Array:
    return jnp.sqrt(jnp.maximum(lam, 0.0))


class ConstrainedModes(eqx.Module):
    """Component modes with the base held: ``omega`` (N,) rad/s, ``phi`` (n, N) mass-normalised."""

    omega: Array
    phi: Array

    @property
    def hz(self) -> Array:
        return self.omega / (2.0 * jnp.pi)


class UnconstrainedModes(eqx.Module):
    """System (free-base) elastic modes: ``omega`` (N,), ``D`` (n, N) normalised on
    ``M − Iᵀ J⁻¹ I``; ``J`` (r, r) and ``I`` (r, n) are kept for the recovery of θ."""

    omega: Array
    D: Array
    J: Array
    I: Array

    @property
    def hz(self) -> Array:
        return self.omega / (2.0 * jnp.pi)

    @property
    def induced(self) -> Array:
        """Induced rigid shapes ``Φ_u = −J⁻¹ I D`` (eq. 10)."""
        return -jnp.linalg.solve(self.J, self.I @ self.D)


@eqx.filter_jit
def constrained_modes(M: Array, K: Array) -> ConstrainedModes:
    """Eqs. 6–7: all constrained modes of the flexible body (base held)."""
    lam, phi = generalized_eigh(K, M)
    return ConstrainedModes(_omega(lam), phi)


@eqx.filter_jit
def unconstrained_modes(J: ArrayLike, I: ArrayLike, M: Array, K: Array) -> UnconstrainedModes:
    """Eqs. 10–11: all elastic modes of the free system (rigid coordinates condensed)."""
    J, I = _as_rigid(J, I)
    Mt = M - I.T @ jnp.linalg.solve(J, I)
    lam, D = generalized_eigh(K, 0.5 * (Mt + Mt.T))
    return UnconstrainedModes(_omega(lam), D, J, I)


def truncate(modes, n: int):
    """Keep the first ``n`` (lowest) modes; ``n`` is a static Python int."""
    if isinstance(modes, ConstrainedModes):
        return ConstrainedModes(modes.omega[:n], modes.phi[:, :n])
    return UnconstrainedModes(modes.omega[:n], modes.D[:, :n], modes.J, modes.I)


@eqx.filter_jit
def full_matrices(J: ArrayLike, I: ArrayLike, M: Array, K: Array) -> tuple[Array, Array]:
    """Mass and stiffness of eq. 3 in ``q = [θ; d]``: two (r+n, r+n) matrices."""
    J, I = _as_rigid(J, I)
    r, n = I.shape
    Mf = jnp.block([[J, I], [I.T, M]])
    Kf = jnp.block([[jnp.zeros((r, r)), jnp.zeros((r, n))], [jnp.zeros((n, r)), K]])
    return Mf, Kf


@eqx.filter_jit
def reduced_constrained(J: ArrayLike, I: ArrayLike, modes: ConstrainedModes):
    """Eq. 8 in ``[θ; η_c]``: (Mr, Kr), symmetric, size r + N_c."""
    J, I = _as_rigid(J, I)
    r = J.shape[0]
    nc = modes.omega.shape[0]
    H = I @ modes.phi  # (r, Nc)
    Mr = jnp.block([[J, H], [H.T, jnp.eye(nc)]])
    Kr = jnp.zeros((r + nc, r + nc)).at[r:, r:].set(jnp.diag(modes.omega**2))
    return Mr, Kr


@eqx.filter_jit
def reduced_unconstrained(modes: UnconstrainedModes):
    """Eq. 13 in ``[θ_u; η_u]``: (Mr, Kr) with ``Mr = [[J, 0], [H_u, E]]`` (not symmetric)."""
    J = modes.J
    r = J.shape[0]
    nu = modes.omega.shape[0]
    H = modes.D.T @ modes.I.T  # (Nu, r)
    Mr = jnp.block([[J, jnp.zeros((r, nu))], [H, jnp.eye(nu)]])
    Kr = jnp.zeros((r + nu, r + nu)).at[r:, r:].set(jnp.diag(modes.omega**2))
    return Mr, Kr


def recover_constrained(modes: ConstrainedModes, theta: Array, eta: Array):
    """``(θ, d = Φ_c η_c)``; ``eta`` (..., N_c) → d (..., n)."""
    return theta, eta @ modes.phi.T


def recover_unconstrained(modes: UnconstrainedModes, theta_u: Array, eta: Array):
    """Eq. 12: ``θ = θ_u − J⁻¹ I D η_u``, ``d = D η_u``.

    ``theta_u`` (..., r), ``eta`` (..., N_u) → ``(θ (..., r), d (..., n))``.
    """
    d = eta @ modes.D.T
    corr = jnp.linalg.solve(modes.J, modes.I @ d.reshape(-1, d.shape[-1]).T).T
    theta = theta_u - corr.reshape(*d.shape[:-1], -1)
    return theta, d


def _step_modal(omega: Array, ts: Array, rigid: Array) -> Array:
    """g(t) with ``q̈ + ω² q = 1``, q(0) = q̇(0) = 0: t²/2 (rigid) or (1 − cos ωt)/ω²; (nt, N)."""
    t = ts[:, None]
    w = jnp.where(rigid, 1.0, omega)[None, :]
    flex = (1.0 - jnp.cos(w * t)) / w**2
    return jnp.where(rigid[None, :], 0.5 * t**2, flex)


@functools.partial(jax.jit, static_argnames="n_rigid")
def step_response(Mr: Array, Kr: Array, f: Array, ts: Array, n_rigid: int) -> Array:
    """Exact response q(t) (nt, n) of ``Mr q̈ + Kr q = f`` (f constant) from rest.

    ``Mr`` symmetric positive definite, ``Kr`` symmetric positive semi-definite with exactly
    ``n_rigid`` zero eigenvalues (a static int; they are the lowest and are set to zero exactly).
    """
    lam, phi = generalized_eigh(Kr, Mr)
    n = lam.shape[0]
    rigid = jnp.arange(n) < n_rigid
    omega = jnp.where(rigid, 0.0, _omega(lam))
    g = _step_modal(omega, jnp.asarray(ts), rigid)  # (nt, N)
    return (g * (phi.T @ f)[None, :]) @ phi.T


@eqx.filter_jit
def constrained_step_response(J, I, modes: ConstrainedModes, T: Array, ts: Array):
    """Eq. 8 under constant torque ``T`` (r,) from rest: ``(θ (nt, r), d (nt, n))``."""
    J, I = _as_rigid(J, I)
    r = J.shape[0]
    Mr, Kr = reduced_constrained(J, I, modes)
    f = jnp.concatenate([jnp.atleast_1d(T), jnp.zeros(modes.omega.shape)])
    q = step_response(Mr, Kr, f, ts, r)
    return recover_constrained(modes, q[:, :r], q[:, r:])


@eqx.filter_jit
def unconstrained_step_response(modes: UnconstrainedModes, T: Array, ts: Array):
    """Eq. 13 under constant torque ``T`` (r,) from rest, recovered by eq. 12: ``(θ, d)``."""
    ts = jnp.asarray(ts)
    acc = jnp.linalg.solve(modes.J, jnp.atleast_1d(T))  # θ̈_u (r,)
    theta_u = 0.5 * ts[:, None] ** 2 * acc[None, :]
    fm = -(modes.D.T @ modes.I.T) @ acc  # modal force −H_u θ̈_u (N,)
    w = modes.omega[None, :]
    eta = fm[None, :] * (1.0 - jnp.cos(w * ts[:, None])) / w**2
    return recover_unconstrained(modes, theta_u, eta)


def _transition(omega: Array, zeta: Array, t: Array):
    """Entries of exp(A t), A = [[0, 1], [−ω², −2ζω]] (underdamped), broadcast over t and modes."""
    sig = zeta * omega
    wd = omega * jnp.sqrt(1.0 - zeta**2)
    e = jnp.exp(-sig * t)
    c = jnp.cos(wd * t)
    s = jnp.sin(wd * t)
    return (e * (c + sig / wd * s), e * s / wd, -e * omega**2 / wd * s, e * (c - sig / wd * s))


@jax.jit
def modal_zoh_response(
    omega: Array, zeta: Array, force: Array, dt: ArrayLike
) -> tuple[Array, Array]:
    """Exact sampled response of ``η̈ + 2ζω η̇ + ω² η = g(t)`` from rest, g held constant on
    ``[t_k, t_k + dt)`` (zero-order hold). ``omega`` (N,) > 0, ``0 ≤ zeta < 1`` (scalar or (N,)).

    Returns ``(eta, eta_dot)``, each (nt, N), at ``t_k = k dt``, k = 0..nt−1 (η(0) = 0).
    Each mode's transition matrix Φ = exp(A dt) and input vector Γ = A⁻¹(Φ − I)[0, 1]ᵀ are in
    closed form, so the result is exact (to rounding) for any ω dt and differentiable in ω, ζ, g.
    The discrete convolution ``x_k = Σ_{j<k} Φ^{k−1−j} Γ g_j`` with ``Φ^m = exp(A m dt)``
    evaluated in closed form is done by FFT (fast to compile and run); the recursion
    ``x_{k+1} = Φ x_k + Γ g_k`` itself is :class:`ModalZOHSystem`, stepped by
    :func:`diffmb.simulate`.
    """
    zeta = jnp.broadcast_to(jnp.asarray(zeta, dtype=jnp.float64), omega.shape)
    p00, p01, p10, p11 = _transition(omega, zeta, dt)
    g0 = -2.0 * zeta / omega * p01 - (p11 - 1.0) / omega**2  # Γ = A⁻¹ (Φ − I) [0, 1]ᵀ
    g1 = p01
    nt = force.shape[0]
    tm = (jnp.arange(nt, dtype=jnp.float64) * dt)[:, None]  # lags m = 0..nt-1
    q00, q01, q10, q11 = _transition(omega[None, :], zeta[None, :], tm)
    hq = q00 * g0 + q01 * g1  # (nt, N): response at lag m+1 to a unit held sample
    hv = q10 * g0 + q11 * g1
    nfft = 2 * nt
    G = jnp.fft.rfft(force, nfft, axis=0)
    conv_q = jnp.fft.irfft(jnp.fft.rfft(hq, nfft, axis=0) * G, nfft, axis=0)[: nt - 1]
    conv_v = jnp.fft.irfft(jnp.fft.rfft(hv, nfft, axis=0) * G, nfft, axis=0)[: nt - 1]
    z = jnp.zeros((1, omega.shape[0]))
    return jnp.concatenate([z, conv_q]), jnp.concatenate([z, conv_v])


@eqx.filter_jit
def unconstrained_zoh_response(
    modes: UnconstrainedModes, zeta: ArrayLike, torque: Array, dt: ArrayLike
):
    """Exact response of the free system (eq. 13 with modal damping ζ on the elastic modes) to a
    zero-order-held torque sampled every ``dt``: ``(θ (nt, r), d (nt, n))`` from rest.

    With all modes kept this is the full model of eq. 3 (plus modal damping), exactly.
    """
    torque = jnp.atleast_2d(jnp.asarray(torque).T).T if jnp.ndim(torque) == 1 else torque
    acc = jnp.linalg.solve(modes.J, torque.T).T  # θ̈_u (nt, r), piecewise constant
    # rigid part: exact double integration of the held acceleration
    vel = jnp.concatenate([jnp.zeros((1, acc.shape[1])), jnp.cumsum(acc[:-1] * dt, axis=0)])
    pos_inc = vel[:-1] * dt + 0.5 * acc[:-1] * dt**2
    theta_u = jnp.concatenate([jnp.zeros((1, acc.shape[1])), jnp.cumsum(pos_inc, axis=0)])
    fm = -acc @ (modes.D.T @ modes.I.T).T  # (nt, N)
    eta, _ = modal_zoh_response(modes.omega, zeta, fm, dt)
    return recover_unconstrained(modes, theta_u, eta)


class ModalZOHSystem(AbstractDiscreteSystem):
    """Modal coordinates ``η̈ + 2ζω η̇ + ω² η = g`` with g held constant over each sample: the
    exact discrete step ``x_{k+1} = Φ x_k + Γ g_k`` (Φ = exp(A dt) in closed form).

    Time is counted in samples: simulate it with ``dt=1`` (step k applies ``force[k]``). Φ and Γ
    are formed once, from ω, ζ and the sample period ``dt`` (all traced, so differentiable).
    State y = (η, η̇), each (N,); starts from rest unless q0/v0 are given.
    """

    phi: tuple  # (Φ00, Φ01, Φ10, Φ11), each (N,)
    gamma: tuple  # (Γ0, Γ1), each (N,)
    force: Array  # (nt, N)

    def __init__(self, omega, zeta, force, dt):
        omega = jnp.asarray(omega, dtype=jnp.float64)
        zeta = jnp.broadcast_to(jnp.asarray(zeta, dtype=jnp.float64), omega.shape)
        self.phi = _transition(omega, zeta, jnp.asarray(dt, dtype=jnp.float64))
        p01, p11 = self.phi[1], self.phi[3]
        self.gamma = (-2.0 * zeta / omega * p01 - (p11 - 1.0) / omega**2, p01)
        self.force = jnp.asarray(force, dtype=jnp.float64)

    def init(self, q0, v0, params, h):
        n = self.force.shape[1:]
        z = jnp.zeros(n)
        return (z if q0 is None else check_initial("modal", "eta0", q0, n),
                z if v0 is None else check_initial("modal", "eta_dot0", v0, n))

    def step(self, t, y, h, params):
        p00, p01, p10, p11 = self.phi
        g0, g1 = self.gamma
        k = jnp.clip(jnp.round(t).astype(jnp.int32), 0, self.force.shape[0] - 1)
        gk = self.force[k]
        q, v = y
        return (p00 * q + p01 * v + g0 * gk, p10 * q + p11 * v + g1 * gk), jnp.asarray(0)

    def outputs(self, ys, params):
        return ys[0], ys[1], None


class LinearSecondOrderSystem(AbstractODESystem):
    """``M q̈ + C q̇ + K q = f(t, params)`` (a reduced modal model, eqs. 8 and 13 of the flexible
    arm) as an ODE system for :func:`diffmb.simulate`. ``force`` is a static callable; M, C, K
    are traced. State y = (q, q̇)."""

    M: Array
    C: Array
    K: Array
    force: Callable = eqx.field(static=True)

    def init(self, q0, v0, params, dt):
        n = (self.M.shape[0],)
        z = jnp.zeros(n)
        return (z if q0 is None else check_initial("linear system", "q0", q0, n),
                z if v0 is None else check_initial("linear system", "v0", v0, n))

    def vector_field(self, t, y, params):
        q, v = y
        f = self.force(t, params)
        return (v, jnp.linalg.solve(self.M, f - self.C @ v - self.K @ q))

    def outputs(self, ys, params):
        return ys[0], ys[1], None
