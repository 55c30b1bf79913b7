"""Articulated-body algorithm (forward dynamics), Featherstone Table 7.1, in world coordinates.

Each sweep runs level by level over the span tree: in world coordinates a child's articulated
inertia adds to its parent's without a transform. Armature enters each pivot Dᵢ = Sᵀ Iᴬ S as a
joint-space inertia, as in Pinocchio and MuJoCo. Added inertia (``Model.has_added_inertia``) is
part of each node's inertia; gravity then enters as the rigid part's weight, not as a base
acceleration.

Derivatives (``aba`` is a ``jax.custom_jvp``). Differentiating the sweeps themselves works but is
slow in reverse mode: their transpose is hundreds of tiny kernels (docs/performance.md).
Instead the tangent comes from inverse dynamics, as in
Carpentier & Mansard (RSS 2018): with a = FD(x) and ID(q, v, a; params) = τ,

    ȧ = M(q)⁻¹ (τ̇ − ∂ID/∂(q, v, params, f_ext) · (q̇, v̇, ṗ, ḟ))     (a held fixed in ID),

where M⁻¹ reuses the pivots of the forward call (two more sweeps, linear in the tangent) and the
ID tangent is the forward-mode derivative of RNEA. Forward mode, reverse mode, vmap and higher
derivatives all go through this rule (nothing in it is stop-gradiented, so its own derivative
is exact: second derivatives agree with plain differentiation of the sweeps). Only the
symmetric part of a derivative with respect to an inertia matrix is meaningful (the sweeps
assume symmetric inertias); it agrees with plain differentiation of the sweeps to round-off
(tests/test_aba_derivatives.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..model import Model
from ..spatial.spatial import cross_force
from ._world import (
    _inv3,
    ext_wrenches,
    mm,
    mmt,
    mtm,
    mtv,
    mv,
    node_dofs,
    scatter_dofs,
    sum_to_parents,
    take,
)
from .kinematics import KinematicsData, body_coms, gravity_wrenches, kinematics
from .rnea import rnea_kin


class _Pivots:
    """The q-dependent part of ABA: per level U = Iᴬ S, D⁻¹ and the articulated inertias."""

    def _static(self, S, topo):
        self.S, self.topo = S, topo
        self.mask = jnp.asarray(topo.slot_mask)  # (n, w)
        self.sl = [slice(*bd) for bd in topo.bounds]
        # levels whose joints all have one dof (hinges, slides) take a scalar path: no padding,
        # no 3 x 3 pivots — most robot levels are like this
        self.single = [bool((topo.nv_node[s_] == 1).all()) for s_ in self.sl]

    def __init__(self, model: Model, k: KinematicsData):
        self._static(k.S, k.topo)
        topo, sl = k.topo, self.sl
        arm = node_dofs(topo, model.armature)
        pad = jnp.eye(topo.width) * (1.0 - self.mask)[:, None, :]  # identity on padded slots
        L = len(sl)
        IA = [k.I[s_] for s_ in sl]
        self.U, self.Dinv, self.Ia = [None] * L, [None] * L, [None] * L
        for d in reversed(range(L)):
            S = k.S[sl[d]]
            if self.single[d]:
                s1 = S[:, :, 0]
                Ul = mv(IA[d], s1)
                Di = 1.0 / (jnp.sum(s1 * Ul, axis=-1) + arm[sl[d]][:, 0])
                Ia = IA[d] - (Ul * Di[:, None])[:, :, None] * Ul[:, None, :]
            else:
                Ul = mm(IA[d], S)
                Dl = mtm(S, Ul) + jnp.eye(topo.width) * arm[sl[d]][:, None, :] + pad[sl[d]]
                Di = _inv3(Dl)
                Ia = IA[d] - mmt(mm(Ul, Di), Ul)
            self.U[d], self.Dinv[d], self.Ia[d] = Ul, Di, Ia
            if d > 0:
                IA[d - 1] = IA[d - 1] + sum_to_parents(topo, d, Ia)

    def solve(self, taun, pA=None, c=None, a_root=None, linear=False):
        """The two τ-dependent sweeps: joint accelerations (n, w) for joint forces ``taun``
        (n, w), node bias forces ``pA`` (n, 6), velocity-product accelerations ``c`` (n, 6)
        and root acceleration ``a_root`` (6,). With ``pA = c = a_root = None`` this is
        M⁻¹ τ. ``linear=True`` writes the products as reductions, whose transposes are cheap
        (used on tangents)."""
        topo, S_, sl, L = self.topo, self.S, self.sl, len(self.sl)
        if linear:
            _mv = lambda A, x: jnp.sum(A * x[..., None, :], axis=-1)
            _mtv = lambda A, x: jnp.sum(A * x[..., :, None], axis=-2)
        else:
            _mv, _mtv = mv, mtv
        pA = [None if pA is None else pA[s_] for s_ in sl]
        u = [None] * L
        for d in reversed(range(L)):
            s_, S, Ul, Di = sl[d], S_[sl[d]], self.U[d], self.Dinv[d]
            if self.single[d]:
                s1 = S[:, :, 0]
                ul = taun[s_][:, 0] - (0.0 if pA[d] is None else jnp.sum(s1 * pA[d], axis=-1))
                pa = (Ul * Di[:, None]) * ul[:, None]
            else:
                ul = taun[s_] if pA[d] is None else taun[s_] - _mtv(S, pA[d])
                ul = ul * self.mask[s_]
                pa = _mv(Ul, _mv(Di, ul))
            if c is not None:
                pa = pa + _mv(self.Ia[d], c[s_])
            if pA[d] is not None:
                pa = pA[d] + pa
            u[d] = ul
            if d > 0:
                up = sum_to_parents(topo, d, pa)
                pA[d - 1] = up if pA[d - 1] is None else pA[d - 1] + up
        acc, qdd = a_root, []
        for d in range(L):
            s_, S = sl[d], S_[sl[d]]
            a_ = None if acc is None else (acc if d == 0 else take(acc, topo.level_parent[d]))
            if c is not None:
                a_ = c[s_] if a_ is None else a_ + c[s_]
            if self.single[d]:
                ud = u[d] if a_ is None else u[d] - jnp.sum(self.U[d] * a_, axis=-1)
                q1 = self.Dinv[d] * ud
                dacc = S[:, :, 0] * q1[:, None]
                ql = jnp.concatenate([q1[:, None], jnp.zeros((q1.shape[0], topo.width - 1))], 1)
            else:
                ud = u[d] if a_ is None else u[d] - _mtv(self.U[d], a_)
                ql = _mv(self.Dinv[d], ud) * self.mask[s_]
                dacc = _mv(S, ql)
            acc = dacc if a_ is None else a_ + dacc
            qdd.append(ql)
        return scatter_dofs(None, topo, jnp.concatenate(qdd))


def _aba(model: Model, q, v, tau, f_ext):
    return _aba_kin(model, kinematics(model, q, v), tau, f_ext)


def _aba_kin(model: Model, k: KinematicsData, tau, f_ext):
    piv = _Pivots(model, k)
    pA = cross_force(k.vel, mv(k.I, k.vel))
    if f_ext is not None:
        pA = pA - ext_wrenches(model, k.topo, body_coms(model, k), f_ext)
    if k.I_added is None:  # gravity as a base acceleration
        ag = jnp.concatenate([jnp.zeros(3), -model.gravity])
    else:  # added inertia has no weight: gravity as the rigid part's weight
        pA, ag = pA + gravity_wrenches(model, k), None
    return piv.solve(node_dofs(k.topo, tau), pA, k.c, ag), piv


@jax.custom_jvp
def aba(model: Model, q, v, tau, f_ext=None):
    """Joint accelerations (nv,) of the model at (q, v) under joint forces τ and external
    wrenches f_ext (nb, 6) [force, torque] at the body coms, world axes."""
    return _aba(model, q, v, tau, f_ext)[0]


@aba.defjvp
def _aba_jvp(primals, tangents):
    model, q, v, tau, f_ext = primals
    dmodel, dq, dv, dtau, df_ext = tangents
    # a and the pivots from the primal values; the ID tangent at a held fixed (a enters the
    # inner jvp as a constant). Nothing is stopped, so differentiating this rule (second and
    # higher derivatives) follows every path of a and of the pivots.
    a, piv = _aba(model, q, v, tau, f_ext)
    _, did = jax.jvp(lambda m, q_, v_, f: rnea_kin(m, kinematics(m, q_, v_), a, f),
                     (model, q, v, f_ext), (dmodel, dq, dv, df_ext))
    da = piv.solve(node_dofs(piv.topo, dtau - did), linear=True)
    return a, da
