"""Output-error identification: fit named physical parameters so that simulations match data.

    res = diffmb.optim.fit(model, data, ["body.upper_arm_link.mass", "joint.elbow_joint.damping"],
                           forces={"damping": JointDamping()},
                           simulate_kwargs={"dt": 0.005}, weights={"q": 1 / 1e-3})
    res.estimates, res.std, res.cov, res.cost, res.history

Problem
-------
Unknowns are the chosen parameters θ (see :mod:`diffmb.optim.params` for the names) and the
initial state x₀ = (q₀, v₀) of every *shooting segment*. Each segment is simulated with
:func:`diffmb.simulate` from its own initial state over its own stretch of the record, and

    r = [ w_q ⊙ (q_sim(t_k) ⊖ q_meas(t_k)),  w_v ⊙ (v_sim(t_k) − v_meas(t_k)),     (samples)
          w_c (x_end,s ⊖ x₀,s+1) ]                                                (continuity)

is minimised in least squares (⊖ is :func:`diffmb.dynamics.configuration.difference`, the
plain difference for hinge/slide joints and the rotation vector for quaternions).

* ``shooting="single"``: one segment per trajectory; its initial state is estimated too (the
  measured first sample is noisy), initialised from the data.
* ``shooting="multiple"`` with ``segments=S``: each trajectory is cut into S segments
  (:mod:`diffmb.optim.shooting`) whose initial states are extra unknowns, initialised from the
  measured samples (v by finite differences of q if v is not measured); continuity at the
  S − 1 junctions enters as residuals with weight ``continuity_weight`` (default: the largest
  data weight, so that a gap of one noise standard deviation costs as much as a one-σ
  residual; much larger weights make the problem stiff and Levenberg–Marquardt slow). Long or
  chaotic records then stay near the data during the fit instead of diverging (Bock & Plitt
  1984; Voss, Timmer & Kurths 2004, "Nonlinear dynamical system identification from uncertain
  and indirect measurements").

Segments are simulated in local time from 0 with the input shifted by the segment's start, so
all segments of equal length share one compiled simulation (``vmap``); force elements must not
depend on absolute time.

Inputs
------
If the data hold torques (``tau`` (n, nv), CSV channels ``tau_<joint>``) they drive the
simulation as a generalized force interpolated piecewise-linearly (``input_interp="linear"``)
or held (``"zoh"``) between samples. Otherwise ``simulate_kwargs`` may carry ``control`` and
``params`` for :func:`diffmb.simulate` (shared by all trajectories, called with absolute time).

Solvers and statistics
----------------------
``solver="lm"`` (default), ``"gn"`` or ``"adam"`` (see :mod:`diffmb.optim.lsq`), in
transformed coordinates (positivity by default for masses, damping, armature; ``bounds``
``{name: (lo, hi)}`` with a logistic map). At the optimum the Jacobian in the original
coordinates gives s² = ‖r‖²/(m − n) and cov = s² (JᵀJ)⁻¹ over all unknowns; the parameters'
block is their covariance with the nuisance initial states marginalised out. Parameters on
which the column-scaled Jacobian is rank deficient (singular value < ``rank_rtol`` σ_max) are
named in an :class:`~diffmb.optim.lsq.UnidentifiableWarning` and get std = inf. Weights only
set the relative scale of channels; s² is estimated from the residuals, so the standard errors
do not depend on the weights' absolute scale.

Refusals
--------
No silent wrong answers: before anything is compiled, an empty parameter list, an unknown
parameter name (``KeyError``), an entry of ``forces`` that is not a force element
(``TypeError``), a non-finite value (named with its data row and column) and a record too
short for the problem (no more informative
residuals — kept samples times channels with nonzero weight, plus weighted continuity residuals
— than unknowns, the parameters and every segment's initial state) raise. At the initial guess
a parameter whose Jacobian column is zero to round-off (relative 1e-12 of the largest scaled
column) is named in an :class:`~diffmb.optim.lsq.UnidentifiableWarning` ("no element or body
uses it, or the data do not excite it"); if every parameter is such, ``ValueError``. After the
fit, ``success`` is False, and ``message`` names the parameters, when the rank test flags any
unknown or a parameter's standard error is not finite; ``converged`` is False, and ``message``
says so, when ``max_steps`` ended the iterations before a convergence test held.

Structure
---------
:func:`fit` builds the problem once (:func:`_problem`: records, shooting segments grouped by
shape, the unknowns' start, the residual and its structured Jacobian), solves it with
:func:`~diffmb.optim.lsq.solve` (:func:`_solve`: the Jacobian's directions on a thread pool)
and summarises the optimum (:func:`_summary`: covariance, verdict, estimates, rms, initial
states).

Checkpoint
----------
``checkpoint=path``: the fit state is written atomically after every iteration (see
:func:`diffmb.optim.lsq.solve`), with the named parameters and the cost of the iterate; calling
:func:`fit` again with the same arguments and path resumes from the last saved iteration (and
returns at once if the saved fit had converged). A file at ``path`` that is not a checkpoint,
or is the checkpoint of another problem (other parameters, data or shooting), raises
``ValueError`` naming the file and the reason.

CSV
---
:func:`read_joint_csv` reads the CSV format of :func:`diffmb.io.csvdata.read_csv` with
channels ``q_<joint>`` [rad or m], ``v_<joint>`` [rad/s or m/s] and ``tau_<joint>`` [N m or N]
(for a joint with several dofs, ``q_<joint>_<k>`` etc. with k from 0 over its q or v entries).
Each group must be complete (all joints) or absent; a column that is none of these is an error
naming file, line and column.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import pathlib
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from threadpoolctl import ThreadpoolController

from ..controls import KnotTable
from ..dynamics.configuration import difference
from ..forces.elements import ActivatedActuators, Actuators
from ..io.csvdata import read_csv, write_csv
from ..model import JointType, Model
from . import shooting as ms
from .batch import available_cpus
from .lsq import UnidentifiableWarning, covariance, original_jacobian, solve
from .params import (
    ParamSet,
    Transform,
    Transforms,
    bounded,
    control_consumer,
    default_transform,
    force_elements,
)

__all__ = [
    "fit",
    "FitResult",
    "Record",
    "read_joint_csv",
    "write_joint_csv",
    "joint_channels",
    "load_data",
]


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Record:
    """One measured trajectory: t (n,), q (n, nq) | None, v (n, nv) | None, tau (n, nv) | None,
    ctrl (n, nu) | None.

    ``q0``/``v0``: optional initial state used when q/v are not measured.
    """

    t: np.ndarray
    q: np.ndarray | None = None
    v: np.ndarray | None = None
    tau: np.ndarray | None = None
    q0: np.ndarray | None = None
    v0: np.ndarray | None = None
    source: str = "<data>"
    ctrl: np.ndarray | None = None  # (n, nu): the actuators' controls, channels ctrl_<actuator>


def joint_channels(model: Model, prefix: str) -> list[str]:
    """Channel names ``<prefix>_<joint>`` in q (prefix "q") or v order (others)."""
    out = []
    for j, name in enumerate(model.joint_names):
        jt = JointType(model.joint_types[j])
        n = jt.nq if prefix == "q" else jt.nv
        out += [f"{prefix}_{name}"] if n == 1 else [f"{prefix}_{name}_{k}" for k in range(n)]
    return out


def read_joint_csv(path, model: Model, actuators: Sequence[str] = ()) -> Record:
    """Read a joint-space record (channels ``q_*``, ``v_*``, ``tau_*``, see module docstring;
    ``ctrl_<actuator>`` for the names in ``actuators``)."""
    path = pathlib.Path(path)
    groups = {p: joint_channels(model, p) for p in ("q", "v", "tau")}
    if actuators:
        groups["ctrl"] = [f"ctrl_{a}" for a in actuators]
    t, ch = read_csv(path, allowed=[c for cs in groups.values() for c in cs],
                     expected="q_<joint>, v_<joint>, tau_<joint> for joints "
                     f"{list(model.joint_names)}"
                     + (f", ctrl_<actuator> for actuators {list(actuators)}" if actuators
                        else ""))  # errors name file, line and column
    arrays = {}
    for p, cs in groups.items():
        present = [c for c in cs if c in ch]
        if present and len(present) != len(cs):
            missing = [c for c in cs if c not in ch]
            raise ValueError(f"{path}: channel group '{p}_*' is incomplete: missing {missing}")
        arrays[p] = np.column_stack([ch[c] for c in cs]) if present else None
    if arrays["q"] is None and arrays["v"] is None:
        raise ValueError(f"{path}: no measured channel (q_<joint> or v_<joint>) in the file")
    return Record(t=t, q=arrays["q"], v=arrays["v"], tau=arrays["tau"], ctrl=arrays.get("ctrl"),
                  source=str(path))


def write_joint_csv(path, model: Model, t, q=None, v=None, tau=None, fmt="%.10g", comment=None,
                    ctrl=None, actuators: Sequence[str] = ()):
    """Write a record in the format :func:`read_joint_csv` reads (``ctrl`` (n, nu) as
    ``ctrl_<actuator>`` columns, names from ``actuators``)."""
    channels = {}
    for p, a in (("q", q), ("v", v), ("tau", tau)):
        if a is not None:
            a = np.asarray(a, float)
            channels.update({c: a[:, k] for k, c in enumerate(joint_channels(model, p))})
    if ctrl is not None:
        ctrl = np.asarray(ctrl, float).reshape(len(t), -1)
        if len(actuators) != ctrl.shape[1]:
            raise ValueError(f"ctrl has {ctrl.shape[1]} columns but {len(actuators)} actuator "
                             "names were given")
        channels.update({f"ctrl_{a}": ctrl[:, k] for k, a in enumerate(actuators)})
    write_csv(path, t, channels, fmt=fmt, comment=comment)


def _check_finite(source, t, a, names) -> None:
    """Refuse a non-finite value, naming its data row, time and column."""
    a = np.asarray(a, float)
    if not np.all(np.isfinite(a)):
        i, c = (int(x) for x in np.argwhere(~np.isfinite(a))[0])
        raise ValueError(f"{source}: data row {i + 1} (t = {t[i]:.6g}), column {names[c]!r}: "
                         f"non-finite value {a[i, c]}")


def load_data(model: Model, data, actuators: Sequence[str] = ()) -> list[Record]:
    """Normalise ``data`` (Record, dict with t/q/v/tau/ctrl, CSV path, or a list of them);
    ``actuators``: the names of the ``ctrl_<actuator>`` channels a CSV may hold."""
    if isinstance(data, (str, pathlib.Path, Record, Mapping)):
        data = [data]
    out = []
    for i, d in enumerate(data):
        if isinstance(d, (str, pathlib.Path)):
            rec = read_joint_csv(d, model, actuators)
        elif isinstance(d, Record):
            rec = d
        elif isinstance(d, Mapping):
            keys = ("t", "q", "v", "tau", "q0", "v0", "ctrl")
            unknown = set(d) - set(keys)
            if unknown:
                raise KeyError(f"data[{i}]: unknown keys {sorted(unknown)} ({', '.join(keys)})")
            rec = Record(**{k: (None if d.get(k) is None else np.asarray(d[k], float))
                            for k in keys}, source=f"data[{i}]")
        else:
            raise TypeError(f"data[{i}]: expected a dict, Record or CSV path, got {type(d)}")
        t = np.asarray(rec.t, float)
        n = t.shape[0]
        if t.ndim != 1 or n < 2 or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
            raise ValueError(f"{rec.source}: t must be 1-D, finite, >= 2 samples, strictly "
                             "increasing")
        for k, w in (("q", model.nq), ("v", model.nv), ("tau", model.nv)):
            a = getattr(rec, k)
            if a is not None and np.shape(a) != (n, w):
                raise ValueError(f"{rec.source}: {k} has shape {np.shape(a)}, expected ({n}, {w})")
            if a is not None:
                _check_finite(rec.source, t, a, joint_channels(model, k))
        if rec.ctrl is not None and (np.ndim(rec.ctrl) != 2 or np.shape(rec.ctrl)[0] != n):
            raise ValueError(f"{rec.source}: ctrl must be a ({n}, nu) array, got shape "
                             f"{np.shape(rec.ctrl)}")
        if rec.ctrl is not None:
            nu = np.shape(rec.ctrl)[1]
            _check_finite(rec.source, t, rec.ctrl, [f"ctrl_{a}" for a in actuators]
                          if len(actuators) == nu else [f"ctrl[{c}]" for c in range(nu)])
        if rec.ctrl is not None and rec.tau is not None:
            raise ValueError(f"{rec.source}: the record holds both joint torques (tau) and "
                             "actuator controls (ctrl); give one input")
        if rec.q is None and rec.q0 is None:
            raise ValueError(f"{rec.source}: q is not measured: give q0 (the initial position)")
        out.append(rec)
    return out


# ----------------------------------------------------------------------------------------------
# Fit
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class FitResult:
    """Outcome of :func:`fit`.

    ``estimates``/``std``: {parameter name: float or array}; ``cov``: covariance of the scalar
    entries ``names`` (``ParamSet.scalar_names``, parameters in the order given); ``cost`` =
    ½‖r‖² (weighted); ``history``: one dict per iteration (iteration, cost, ...); ``model`` and
    ``forces``: with the estimates written in; ``initial_states``: [(q0, v0)] per segment;
    ``rms``: unweighted rms residual per measured channel group; ``unidentifiable``: names
    flagged by the rank test; ``s2``, ``dof``, ``singular_values``: see
    :func:`diffmb.optim.lsq.covariance`; ``jacobian``/``residuals``: the weighted residuals and
    their Jacobian in original coordinates at the estimate (columns: the parameters' scalar
    entries, then the segments' initial-state unknowns), e.g. for
    :func:`diffmb.optim.identify.base_parameters`. ``converged``: the solver stopped on a
    convergence test (``message`` names it; False when ``max_steps`` ended the fit, and for
    Adam); ``success`` is ``converged`` (or Adam's ``max_steps``) and every parameter
    identifiable with a finite standard error in a physical model.
    """

    estimates: dict
    std: dict
    cov: np.ndarray
    names: tuple
    cost: float
    history: list
    model: Model
    forces: object
    success: bool
    message: str
    n_iter: int
    resumed_from: int | None
    unidentifiable: tuple
    s2: float
    dof: int
    singular_values: np.ndarray
    initial_states: list
    rms: dict
    jacobian: np.ndarray | None = None  # ∂r/∂(parameters, initial states), kept rows
    residuals: np.ndarray | None = None  # weighted residuals r, kept rows
    converged: bool = False
    gradient_check: object = None  # check_gradient's result at the start (check_gradient=True)

    @property
    def correlation(self) -> np.ndarray:
        d = np.sqrt(np.diag(self.cov))
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.cov / np.outer(d, d)


def _as_weight(w, n, what):
    a = np.broadcast_to(np.asarray(1.0 if w is None else w, float), (n,)).copy()
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"weights[{what!r}] must be finite and >= 0")
    return a


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Static (hashable) description of a fit problem: one compilation per distinct spec."""

    names: tuple
    transforms: Transforms
    groups: tuple  # (idx, rel_ts, T, has_q, has_v, has_tau, has_ctrl, n_dense) per group
    pairs: tuple
    n_p: int
    ns: int
    wc: float
    input_interp: str
    sim: tuple
    force_keys: tuple
    uniform: bool = False  # every record evenly sampled: O(1) input lookup
    known_state: bool = False  # initial states given (args[7]), not unknowns
    fixed_step: bool = False  # segments step by dt, rounded to divide each segment's span


def _setup(args, spec):
    model, fvals = args[:2]
    fdict = dict(zip(spec.force_keys, fvals, strict=True))
    return model, fdict, ParamSet(model, spec.names, fdict)


def _hermite_columns(model: Model):
    """(mask (nq,) of q entries that are plain numbers, their v index (nq,))."""
    mask, vidx = np.zeros(model.nq, bool), np.zeros(model.nq, int)
    qa, va = 0, 0
    for jt in model.joint_types:
        jt = JointType(jt)
        if jt in (JointType.HINGE, JointType.SLIDE):
            mask[qa], vidx[qa] = True, va
        qa, va = qa + jt.nq, va + jt.nv
    return mask, vidx


def _interp(Y, h, n, tq, slope=None, vidx=None, mask=None):
    """Y (n + 1, C) saved at t = k h, at times tq (R, C): cubic Hermite with ``slope`` (the
    derivative, columns ``vidx``) where ``mask``, linear elsewhere."""
    tq = jnp.clip(tq, 0.0, n * h)
    i = jnp.clip(jnp.floor(tq / h).astype(jnp.int32), 0, n - 1)
    x = tq / h - i.astype(tq.dtype)
    cols = jnp.arange(Y.shape[1])[None, :]
    y0, y1 = Y[i, cols], Y[i + 1, cols]
    lin = y0 + x * (y1 - y0)
    if slope is None:
        return lin
    m0, m1 = slope[i, vidx[None, :]] * h, slope[i + 1, vidx[None, :]] * h
    x2, x3 = x * x, x * x * x
    herm = ((2 * x3 - 3 * x2 + 1) * y0 + (x3 - 2 * x2 + x) * m0 + (3 * x2 - 2 * x3) * y1
            + (x3 - x2) * m1)
    return jnp.where(mask[None, :], herm, lin)


def measured_outputs(m: Model, sens, traj, rel, T: float, n_dense: int):
    """(q, v) the sensors report at the sample times ``rel`` (relative to the simulation's
    start): the saved states themselves (``n_dense`` = 0: saved at the sample times), or, for a
    trajectory saved at each of ``n_dense`` steps over [0, T], interpolated to the sample times
    minus each channel's delay; then each channel's gain and bias (``sens``: a
    :class:`~diffmb.optim.sensors.Sensors` or None)."""
    nq = m.nq
    if n_dense:
        d = jnp.zeros(nq + m.nv) if sens is None else sens.delay
        tq = jnp.asarray(rel)[:, None] - d[None, :]
        mask, vidx = _hermite_columns(m)
        q_s = _interp(traj.q, T / n_dense, n_dense, tq[:, :nq], traj.v, vidx, mask)
        v_s = _interp(traj.v, T / n_dense, n_dense, tq[:, nq:])
    else:
        q_s, v_s = traj.q, traj.v
    if sens is not None:
        q_s = sens.gain[:nq] * q_s + sens.bias[:nq]
        v_s = sens.gain[nq:] * v_s + sens.bias[nq:]
    return q_s, v_s


def _seg_fn(m, f, g, s, a, args, spec):
    """One segment: (weighted sample residuals (R,), q_end, v_end, q0)."""
    from ..simulation import simulate

    _, _, _, wq, wv, user_control, sim_params = args[:7]
    sk = dict(spec.sim)
    dt = sk.pop("dt", None)
    _, rel, T, has_q, has_v, has_tau, has_ctrl, n_dense = g
    sens = f.get("sensors")
    forces = tuple(e for k, e in f.items() if k != "sensors")
    q0, v0 = ms.start_state(m, a["q_ref"], s)
    if has_tau:
        base = KnotTable(a["tau_t"], a["tau"], spec.input_interp, uniform=spec.uniform)
    elif has_ctrl:
        base = KnotTable(a["ctrl_t"], a["ctrl"], spec.input_interp, uniform=spec.uniform)
    else:
        base = user_control
    ctrl = None if base is None else ms.Shifted(base, a["offset"])
    rel = np.asarray(rel)
    if spec.fixed_step:  # the nearest step that divides the segment's span
        dt = T / max(1, int(round(T / dt)))
    traj = simulate(m, q0, v0, t1=T, dt=dt, saveat=None if n_dense else list(rel),
                    forces=forces, control=ctrl, params=sim_params, **sk)
    q_s, v_s = measured_outputs(m, sens, traj, rel, T, n_dense)
    parts = []
    if has_q:
        dqs = jax.vmap(lambda qm, qs: difference(m, qm, qs))(a["q"], q_s)
        parts.append((dqs * wq * a["mask"][:, None]).reshape(-1))
    if has_v:
        parts.append(((v_s - a["v"]) * wv * a["mask"][:, None]).reshape(-1))
    return jnp.concatenate(parts), traj.q[-1], traj.v[-1], q0


def _groups_out(p, S, args, spec, sequential=False):
    """Per group: segment outputs (res (G, R), qend (G, nq), vend (G, nv), q0 (G, nq)), by
    ``vmap`` or, ``sequential``, one segment after the other."""
    model, fdict, ps = _setup(args, spec)
    m, f = ps.set(model, fdict, ps.unflatten(p))
    outs = []
    for g, arr in zip(spec.groups, args[2], strict=True):
        idx = np.array(g[0])
        fn = lambda s_, a_, g=g: _seg_fn(m, f, g, s_, a_, args, spec)
        if sequential:
            outs.append(jax.lax.map(lambda x, fn=fn: fn(*x), (S[idx], arr)))
        else:
            outs.append(jax.vmap(fn)(S[idx], arr))
    return outs


def _assemble_r(outs, S, m, spec):
    ns = spec.ns
    rs, qend, vend, q0s = [], [None] * ns, [None] * ns, [None] * ns
    for g, out in zip(spec.groups, outs, strict=True):
        rs.append(out[0].reshape(-1))
        for gi, si in enumerate(g[0]):
            qend[si], vend[si], q0s[si] = out[1][gi], out[2][gi], out[3][gi]
    nv = m.nv
    for a_, b_ in spec.pairs:
        rs.append(ms.continuity(m, qend[a_], vend[a_], q0s[b_], S[b_, nv:], spec.wc))
    return jnp.concatenate(rs), qend, vend, q0s


def _states(z, args, spec, nv):
    """(ns, 2 nv) segment unknowns [dq, v]: from z, or the given ones (``known_state``)."""
    return args[7] if spec.known_state else z[spec.n_p :].reshape(spec.ns, 2 * nv)


def _residual(z, args, spec: _Spec):
    model, fdict, ps = _setup(args, spec)
    n_p, nv = spec.n_p, model.nv
    p = spec.transforms.forward(z[:n_p])
    S = _states(z, args, spec, nv)
    outs = _groups_out(p, S, args, spec)
    return _assemble_r(outs, S, model, spec)[0]


_res = eqx.filter_jit(_residual)


@eqx.filter_jit
def _tangents(z, args, spec, Tp, Ts):
    """Segment outputs (as :func:`_groups_out`) and their derivatives along K directions:
    ``Tp`` (K, n_p) in the parameters' z coordinates and ``Ts`` (K, 2 nv) in every segment's own
    initial state. One direction serves all segments at once: a segment's outputs depend on the
    parameters and on its own initial state only. The segments run one after the other (with
    all K directions): vmapping them too makes batches too wide for the cache."""
    n_p, nv = spec.n_p, args[0].nv
    S = _states(z, args, spec, nv)

    def outs_of(zp, S_):
        return _groups_out(spec.transforms.forward(zp), S_, args, spec, sequential=True)

    def along(tp, ts):
        return jax.jvp(outs_of, (z[:n_p], S), (tp, jnp.broadcast_to(ts, S.shape)))

    return jax.vmap(along, out_axes=(None, 0))(Tp, Ts)


@eqx.filter_jit
def _assemble_rj(z, args, spec, outs, douts):
    """(r, J) from the segment outputs and their derivatives along the unit directions (the
    parameters' n_p, then, unless the initial states are known, a segment state's 2 nv)."""
    model = args[0]
    n_p, ns, nv = spec.n_p, spec.ns, model.nv
    S = _states(z, args, spec, nv)
    r, qend, vend, q0s = _assemble_r(outs, S, model, spec)
    if spec.known_state:  # single shooting from given states: parameter columns only
        return r, jnp.concatenate([d[0].reshape(n_p, -1).T for d in douts])
    n = n_p + ns * 2 * nv
    J = jnp.zeros((r.shape[0], n))
    row = 0
    d_end = [None] * ns  # per segment: (dq_end, dv_end, dq0), each (K, ·)
    for g, d in zip(spec.groups, douts, strict=True):
        G, R = d[0].shape[1], d[0].shape[2]
        for gi, si in enumerate(g[0]):
            c0 = n_p + 2 * nv * si
            rows = slice(row + gi * R, row + (gi + 1) * R)
            J = J.at[rows, :n_p].set(d[0][:n_p, gi].T)
            J = J.at[rows, c0 : c0 + 2 * nv].set(d[0][n_p:, gi].T)
            d_end[si] = (d[1][:, gi].T, d[2][:, gi].T, d[3][:, gi].T)
        row += G * R
    dv0b = jnp.concatenate([jnp.zeros((nv, nv)), jnp.eye(nv)], axis=1)
    for a_, b_ in spec.pairs:
        cfun = lambda qa, va, qb, vb: ms.continuity(model, qa, va, qb, vb, spec.wc)
        Cqa, Cva, Cqb, Cvb = jax.jacfwd(cfun, argnums=(0, 1, 2, 3))(
            qend[a_], vend[a_], q0s[b_], S[b_, nv:])
        k = 2 * nv
        dA = Cqa @ d_end[a_][0] + Cva @ d_end[a_][1]  # (k, K): the end of segment a
        J = J.at[row : row + k, :n_p].set(dA[:, :n_p])
        ca, cb = n_p + 2 * nv * a_, n_p + 2 * nv * b_
        J = J.at[row : row + k, ca : ca + 2 * nv].set(dA[:, n_p:])
        J = J.at[row : row + k, cb : cb + 2 * nv].set(Cqb @ d_end[b_][2][:, n_p:] + Cvb @ dv0b)
        row += k
    return r, J


_BLAS: list = []  # the process's ThreadpoolController, made once (it scans the loaded libraries)


def _one_blas_thread():
    """A context holding numpy's BLAS to one thread: its threads, spinning after each of the
    fit's small products, would slow XLA's threads."""
    if not _BLAS:
        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


_COMPILED: set = set()  # (spec, args' structure, chunk size) of _tangents compiled so far
# directions per forward pass: wider batches spill the sweeps' per-lane arrays out of cache
MAX_LANES = 16


def _res_jac(z, args, spec, pool=None, threads: int = 1):
    """Residual and Jacobian, exploiting the shooting structure.

    Forward mode along n_p parameter directions and, for the initial states, 2 nv directions
    shared by all segments (each segment's own state), so the cost does not grow with the
    square of the segment count. The directions are split into equal batches of at most
    :data:`MAX_LANES` (padded with zero directions), as many as ``threads`` or a multiple,
    evaluated on the threads of ``pool`` when given: XLA runs computations called from
    different threads concurrently. The first batch of a problem not compiled yet runs alone
    (one compilation, not one per thread)."""
    nv = args[0].nv
    K = spec.n_p + (0 if spec.known_state else 2 * nv)
    threads = max(1, int(threads))
    chunks = min(K, threads * -(-K // (threads * MAX_LANES)))
    c = -(-K // chunks)
    E = np.eye(chunks * c, K)
    Tp = E[:, : spec.n_p]
    Ts = np.zeros((chunks * c, 2 * nv)) if spec.known_state else E[:, spec.n_p :]
    z = jnp.asarray(z)

    def run(i):
        return jax.block_until_ready(_tangents(z, args, spec, jnp.asarray(Tp[i * c:(i + 1) * c]),
                                               jnp.asarray(Ts[i * c:(i + 1) * c])))

    key = (spec, jax.tree.structure(args), c)
    first = [] if key in _COMPILED else [run(0)]
    _COMPILED.add(key)
    rest = range(len(first), chunks)
    parts = first + (list(pool.map(run, rest)) if pool is not None else [run(i) for i in rest])
    douts = jax.tree.map(lambda *d: jnp.concatenate(d)[:K], *[p[1] for p in parts])
    return _assemble_rj(z, args, spec, parts[0][0], douts)


def _check_enough_data(recs, segs, gdata, pairs, wq, wv, wc, n_p, n_unknowns, nv):
    """Refuse (ValueError) a record with fewer informative residuals than unknowns.

    Informative residuals: kept samples (a segment's last sample is the next one's first) times
    the measured channels with nonzero weight, plus the continuity residuals if weighted. At
    least one more than the unknowns is needed (m − n > 0 for the noise variance s²)."""
    m = 0
    for g in gdata:
        per_sample = (int(np.count_nonzero(wq)) if g["has_q"] else 0) + (
            int(np.count_nonzero(wv)) if g["has_v"] else 0)
        m += int((g["mask"] > 0).sum()) * per_sample
    if wc > 0:
        m += len(pairs) * 2 * nv
    if m > n_unknowns:
        return
    lengths = ", ".join(f"{r.source}: {r.t.shape[0]} samples" for r in recs)
    cont = f" + {len(pairs)} junctions x {2 * nv}" if pairs and wc > 0 else ""
    raise ValueError(
        f"fit: the data are too short for this fit ({lengths}): {m} residuals (samples x "
        f"channels with nonzero weight{cont}) for {n_unknowns} unknowns ({n_p} parameter "
        f"entries + {len(segs)} segment initial states x {2 * nv}); need more residuals than "
        "unknowns: give a longer record, fewer parameters or fewer segments")


def _no_effect(J_z, dpdz, p, scalar_names, keep, rtol: float = 1e-12):
    """Scalar parameter names whose Jacobian column (original coordinates, scaled by |p| as in
    :func:`~diffmb.optim.lsq.covariance`) is zero to round-off relative to the largest column."""
    n_p = len(scalar_names)
    J = original_jacobian(J_z, dpdz)[keep]
    scale = np.ones(J.shape[1])
    scale[:n_p] = np.where(p != 0.0, np.abs(p), 1.0)
    norms = np.linalg.norm(J * scale[None, :], axis=0)
    if not np.all(np.isfinite(norms)):
        return ()
    top = norms.max() if norms.size else 0.0
    return tuple(n for n, c in zip(scalar_names, norms[:n_p], strict=True) if c <= rtol * top)


def _judge(ok, message, unident, scalar_names, std_flat, bad_states, s2):
    """Success only if the solver converged and every parameter has a finite standard error
    from a full-rank Jacobian; otherwise the message says which parameters are the problem."""
    problems = []
    if unident:
        problems.append(f"the data cannot identify {', '.join(unident)} (rank-deficient "
                        "Jacobian; std = inf)")
    nonfinite = [n for n, s in zip(scalar_names, std_flat, strict=True)
                 if not np.isfinite(s) and n not in unident]
    if nonfinite:
        problems.append(f"non-finite standard errors for {', '.join(nonfinite)}")
    if bad_states:
        problems.append(f"{len(bad_states)} initial-state unknown(s) not identifiable "
                        f"({', '.join(bad_states[:4])}{', ...' if len(bad_states) > 4 else ''})")
    if not np.isfinite(s2):
        problems.append("the residual variance s² is not finite")
    if not problems:
        return bool(ok), message
    return False, f"{message}; not a successful fit: " + "; ".join(problems)


# ----------------------------------------------------------------------------------------------
# The problem, built once: records, segments, unknowns, residual and Jacobian
# ----------------------------------------------------------------------------------------------


def _sim_options(simulate_kwargs, input_interp):
    """(keywords of the segments' simulations, the user's control, its params)."""
    if input_interp not in ("linear", "zoh"):
        raise ValueError(f"input_interp must be 'linear' or 'zoh', got {input_interp!r}")
    sk = dict(simulate_kwargs or {})
    for bad in ("saveat", "t0", "t1"):
        if bad in sk:
            raise ValueError(f"simulate_kwargs[{bad!r}] is set by the data; remove it")
    user_control = sk.pop("control", None)
    sim_params = sk.pop("params", None)
    sk["throw"] = False
    sk.setdefault("adjoint", "direct")  # Jacobians are taken in forward mode (jacfwd)
    return sk, user_control, sim_params


def _records(model, data, fdict, user_control) -> list[Record]:
    """The records, refused when their inputs do not match the elements that would take them."""
    act = control_consumer(fdict)
    recs = load_data(model, data, tuple(act.names) if isinstance(act, Actuators | ActivatedActuators)
                     else ())
    if any(r.tau is not None or r.ctrl is not None for r in recs) and user_control is not None:
        raise ValueError("the data hold inputs (tau or ctrl) and simulate_kwargs has a control: "
                         "use one")
    for r in recs:
        if r.ctrl is not None and act is None:
            raise ValueError(f"{r.source}: the record holds actuator controls (ctrl) but no "
                             "force element consumes them: pass the actuators in forces")
        if (r.ctrl is not None and isinstance(act, Actuators | ActivatedActuators)
                and r.ctrl.shape[1] != act.nu):
            raise ValueError(f"{r.source}: ctrl has {r.ctrl.shape[1]} columns, the actuators "
                             f"take {act.nu}")
        if r.tau is not None and act is not None:
            raise ValueError(f"{r.source}: the record holds joint torques (tau) but the forces "
                             "include actuators, which would take them as controls: drop the "
                             "actuators, or give the inputs as ctrl_<actuator> channels")
    return recs


def _takes_fixed_steps(sk) -> bool:
    """Whether the simulations step by ``dt``: a solver without error estimate (rk4 by
    default), or ``adaptive=False``."""
    import diffrax

    from ..simulation import SOLVERS

    if sk.get("adaptive") is not None:
        return not sk["adaptive"]
    solver = sk.get("solver", "rk4")
    return not isinstance(SOLVERS.get(solver) if isinstance(solver, str) else solver,
                          diffrax.AbstractAdaptiveSolver)


def _fixed_step(sk, fdict, params):
    """(the fixed step dt or None, whether sensor delays need the dense trajectory)."""
    sens = fdict.get("sensors")
    dt_fixed = sk.get("dt") if _takes_fixed_steps(sk) else None
    needs_delay = sens is not None and (any(n.endswith(".delay") for n in params)
                                        or np.any(np.asarray(sens.delay) != 0))
    if needs_delay and dt_fixed is None:
        raise ValueError("fit: sensor delays need a fixed-step simulation (simulate_kwargs dt "
                         "with solver 'rk4'): the trajectory is interpolated between steps")
    return dt_fixed, needs_delay


def _transforms(ps, model, fdict, bounds, transforms, init):
    """(the parameters' Transforms, their starting point in transformed coordinates)."""
    bounds = dict(bounds or {})
    transforms = dict(transforms or {})
    for k in list(bounds) + list(transforms) + list(init or {}):
        if k not in ps.names:
            raise KeyError(f"bounds/transforms/init given for {k!r}, not among params {ps.names}")
    tr: list[Transform] = []
    for p in ps.params:
        if p.name in transforms:
            t_ = transforms[p.name]
        elif p.name in bounds:
            t_ = bounded(*bounds[p.name])
        else:
            t_ = default_transform(p.name)
        tr += [t_] * p.size
    tr = Transforms(tuple(tr))
    p0 = ps.get(model, fdict)
    for k, v in (init or {}).items():
        p0[k] = jnp.asarray(v, dtype=jnp.float64)
    try:
        return tr, tr.inverse(np.asarray(ps.flatten(p0)), ps.scalar_names)
    except ValueError as e:
        raise ValueError(f"{e} (pass init= or bounds=)") from None


def _weights(weights, nv, recs, continuity_weight):
    """(w_q (nv,), w_v (nv,), continuity weight)."""
    wq = _as_weight((weights or {}).get("q"), nv, "q")
    wv = _as_weight((weights or {}).get("v"), nv, "v")
    for k in (weights or {}):
        if k not in ("q", "v"):
            raise KeyError(f"weights: unknown channel group {k!r} (use 'q' and 'v')")
    wc = float(continuity_weight) if continuity_weight is not None else max(
        wq.max() if any(r.q is not None for r in recs) else 0.0,
        wv.max() if any(r.v is not None for r in recs) else 0.0,
    )
    return wq, wv, wc


def _start_states(model, recs, segs, known):
    """Per segment (q_ref, v0): the given initial state (``known``) or one from the samples."""
    if known:
        for r in recs:
            if r.q0 is None or r.v0 is None:
                raise ValueError(f"{r.source}: initial_state='known' needs the record's q0 and "
                                 "v0 (the state the experiment started from)")
    s0 = [ms.state_from_samples(model, recs[s.rec].t, recs[s.rec].q, recs[s.rec].v, s.a,
                                recs[s.rec].q0, recs[s.rec].v0) for s in segs]
    if known:
        s0 = [(np.asarray(recs[s.rec].q0, float), np.asarray(recs[s.rec].v0, float))
              for s in segs]
    return s0


def _group_segments(recs, segs) -> dict:
    """{key: [segment index]}: segments that share one compiled simulation (same sample times
    relative to their start, same channels and input shapes)."""
    groups: dict = {}
    for si, s in enumerate(segs):
        r = recs[s.rec]
        rel = r.t[s.a : s.b + 1] - r.t[s.a]
        key = (
            s.b - s.a,
            hashlib.sha1(np.round(rel, 12).tobytes()).hexdigest(),
            r.q is not None,
            r.v is not None,
            None if r.tau is None else r.tau.shape,
            None if r.ctrl is None else r.ctrl.shape,
        )
        groups.setdefault(key, []).append(si)
    return groups


def _group_arrays(recs, segs, s0, idx, has):
    """The stacked arrays of one group's segments (traced: new data values do not recompile)."""
    has_q, has_v, has_tau, has_ctrl = has
    sl = lambda si, a: a[segs[si].a : segs[si].b + 1]
    mask = np.ones((len(idx), segs[idx[0]].b - segs[idx[0]].a + 1))
    for gi, si in enumerate(idx):
        if not segs[si].last:
            mask[gi, -1] = 0.0  # that sample is the next segment's first
    arr = {
        "q_ref": jnp.asarray(np.stack([s0[si][0] for si in idx])),
        "offset": jnp.asarray(np.array([recs[segs[si].rec].t[segs[si].a] for si in idx])),
        "mask": jnp.asarray(mask),
    }
    if has_q:
        arr["q"] = jnp.asarray(np.stack([sl(si, recs[segs[si].rec].q) for si in idx]))
    if has_v:
        arr["v"] = jnp.asarray(np.stack([sl(si, recs[segs[si].rec].v) for si in idx]))
    for k, on in (("tau", has_tau), ("ctrl", has_ctrl)):
        if on:
            arr[f"{k}_t"] = jnp.asarray(np.stack([recs[segs[si].rec].t for si in idx]))
            arr[k] = jnp.asarray(np.stack([getattr(recs[segs[si].rec], k) for si in idx]))
    return mask, arr


def _groups(recs, segs, s0, dt_fixed, needs_delay) -> list[dict]:
    """Per group: its segments, relative sample times, channels, dense-output steps (samples
    off the step grid, or delayed: interpolated from every step) and stacked arrays."""
    gdata = []
    for key, idx in _group_segments(recs, segs).items():
        s_first = segs[idx[0]]
        r0 = recs[s_first.rec]
        rel = r0.t[s_first.a : s_first.b + 1] - r0.t[s_first.a]
        has = (key[2], key[3], key[4] is not None, key[5] is not None)
        n_dense = 0
        if dt_fixed is not None:
            n_steps = max(1, int(round(rel[-1] / dt_fixed)))
            k = rel / rel[-1] * n_steps
            if needs_delay or np.any(np.abs(k - np.round(k)) > 1e-9 * np.maximum(1.0, k)):
                n_dense = n_steps
        mask, arr = _group_arrays(recs, segs, s0, idx, has)
        gdata.append({"idx": idx, "rel": rel, "T": float(rel[-1]), "has_q": has[0],
                      "has_v": has[1], "has_tau": has[2], "has_ctrl": has[3],
                      "n_dense": n_dense, "mask": mask, "arr": arr})
    return gdata


def _kept_rows(gdata, n_pairs, nv) -> np.ndarray:
    """Mask of the residual rows kept for statistics (a masked duplicate sample is a zero row)."""
    keep = []
    for g in gdata:
        nparts = int(g["has_q"]) + int(g["has_v"])
        for mk in g["mask"]:
            keep.append(np.concatenate([np.repeat(mk > 0, nv)] * nparts))
    keep.append(np.ones(n_pairs * 2 * nv, bool))
    return np.concatenate(keep)


@dataclasses.dataclass
class _Problem:
    """A fit problem, built once by :func:`_problem`: the parameters and their transforms, the
    records cut into segments, the static ``spec`` (one compilation per spec) and traced
    ``args`` of the residual, the unknowns' start ``z0`` and the rows kept for statistics."""

    model: Model
    fdict: dict
    named_forces: bool
    ps: ParamSet
    recs: list
    segs: list
    s0: list
    gdata: list
    spec: _Spec
    args: tuple
    z0: np.ndarray
    keep: np.ndarray
    fingerprint: dict

    @property
    def n_p(self) -> int:
        return self.spec.n_p

    def residual(self, z):
        return _res(jnp.asarray(z), self.args, self.spec)

    def res_jac(self, z, pool=None, threads: int = 1):
        return _res_jac(z, self.args, self.spec, pool, threads)

    def params_of(self, z) -> dict:
        """{scalar name: value} of the parameters of an iterate."""
        p = self.spec.transforms.forward(jnp.asarray(z[: self.n_p]))
        return dict(zip(self.ps.scalar_names, np.asarray(p), strict=True))


def _problem(model, data, params, forces, simulate_kwargs, shooting, segments, weights, bounds,
             transforms, init, continuity_weight, input_interp, initial_state) -> _Problem:
    """Validate everything and build the problem; refusals come before anything compiles."""
    if shooting not in ("single", "multiple"):
        raise ValueError(f"shooting must be 'single' or 'multiple', got {shooting!r}")
    if initial_state not in ("estimate", "known"):
        raise ValueError(f"initial_state must be 'estimate' or 'known', got {initial_state!r}")
    known = initial_state == "known"
    if known and shooting != "single":
        raise ValueError("initial_state='known' needs shooting='single' (the interior segments' "
                         "states are unknowns of multiple shooting)")
    sk, user_control, sim_params = _sim_options(simulate_kwargs, input_interp)
    fdict, named = force_elements(forces)
    params = [params] if isinstance(params, str) else params
    if len(params) == 0:
        raise ValueError("fit: no parameters to identify (params is empty); name at least one, "
                         "e.g. 'body.<body>.mass'")
    recs = _records(model, data, fdict, user_control)
    dt_fixed, needs_delay = _fixed_step(sk, fdict, params)
    ps = ParamSet(model, params, fdict)
    tr, z0_p = _transforms(ps, model, fdict, bounds, transforms, init)
    segs = ms.segments([r.t.shape[0] for r in recs], 1 if shooting == "single" else segments)
    nv = model.nv
    wq, wv, wc = _weights(weights, nv, recs, continuity_weight)
    s0 = _start_states(model, recs, segs, known)
    gdata = _groups(recs, segs, s0, dt_fixed, needs_delay)
    pairs = ms.junctions(segs)
    spec = _Spec(
        names=ps.names, transforms=tr, pairs=tuple(pairs), n_p=ps.size, ns=len(segs), wc=wc,
        groups=tuple((tuple(g["idx"]), tuple(float(x) for x in g["rel"]), g["T"], g["has_q"],
                      g["has_v"], g["has_tau"], g["has_ctrl"], g["n_dense"]) for g in gdata),
        input_interp=input_interp, sim=tuple(sorted(sk.items())), force_keys=tuple(fdict),
        uniform=all(np.allclose(np.diff(r.t), (r.t[-1] - r.t[0]) / (len(r.t) - 1), rtol=1e-6,
                                atol=0.0) for r in recs),
        known_state=known, fixed_step=dt_fixed is not None,
    )
    S_given = jnp.asarray(np.stack([np.concatenate([np.zeros(nv), v0]) for _, v0 in s0]))
    args = (model, tuple(fdict.values()), tuple(g["arr"] for g in gdata), jnp.asarray(wq),
            jnp.asarray(wv), user_control, sim_params, S_given)
    z0 = np.concatenate([z0_p] + ([] if known else [np.asarray(x) for x in S_given]))
    keep = _kept_rows(gdata, len(pairs), nv)
    _check_enough_data(recs, segs, gdata, pairs, wq, wv, wc, ps.size, int(z0.size), nv)
    fp = {
        "params": list(ps.scalar_names),
        "n_unknowns": int(z0.size),
        "n_residuals": int(keep.size),
        "shooting": shooting,
        "data": hashlib.sha1(b"".join(
            np.ascontiguousarray(a).tobytes() for r in recs
            for a in (r.t, r.q, r.v, r.tau, r.ctrl) if a is not None)).hexdigest(),
    }
    return _Problem(model, fdict, named, ps, recs, segs, s0, gdata, spec, args, z0, keep, fp)


# ----------------------------------------------------------------------------------------------
# Solving: the Jacobian's threads, parameters without effect, lsq.solve
# ----------------------------------------------------------------------------------------------


def _warn_no_effect(pb: _Problem, J0, stacklevel: int):
    """Name the parameters whose Jacobian column at the start is zero; refuse if all are."""
    z0_p = jnp.asarray(pb.z0[: pb.n_p])
    tr = pb.spec.transforms
    dead = _no_effect(J0, tr.jacobian(z0_p), np.asarray(tr.forward(z0_p)), pb.ps.scalar_names,
                      pb.keep)
    if dead and len(dead) == pb.n_p:
        raise ValueError(
            f"fit: no parameter has any effect on the simulated data ({', '.join(dead)}: the "
            "Jacobian column is zero at the initial guess): no element or body uses it, or the "
            "data do not excite it; nothing can be identified")
    if dead:
        warnings.warn(
            f"fit: parameter(s) {', '.join(dead)} have no effect on the simulated data (zero "
            "Jacobian column at the initial guess): no element or body uses them, or the data do "
            "not excite them; they cannot be identified and stay at their initial values",
            UnidentifiableWarning, stacklevel=stacklevel)


def _solve(pb: _Problem, threads, solve_kw: dict, stacklevel: int):
    """:func:`~diffmb.optim.lsq.solve` on the problem, the Jacobian's direction batches spread
    over ``threads`` (default: the CPUs this process may use) with numpy's BLAS on one."""
    n_threads = available_cpus() if threads is None else int(threads)
    if n_threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads!r}")
    with contextlib.ExitStack() as stack:
        pool = None if n_threads == 1 else stack.enter_context(
            ThreadPoolExecutor(n_threads, thread_name_prefix="diffmb-fit"))
        stack.enter_context(_one_blas_thread())
        # the Jacobian at the initial guess (reused by solve): parameters with no effect at all
        r0, J0 = (np.asarray(a) for a in pb.res_jac(pb.z0, pool, n_threads))
        _warn_no_effect(pb, J0, stacklevel + 1)
        z0_key = np.asarray(pb.z0, float).tobytes()

        def res_jac(z):
            if np.asarray(z, float).tobytes() == z0_key:
                return r0, J0
            return pb.res_jac(z, pool, n_threads)

        return solve(res_jac, pb.z0, res=pb.residual, desc="fit", fingerprint=pb.fingerprint,
                     params_of=pb.params_of, **solve_kw)


# ----------------------------------------------------------------------------------------------
# Summary: covariance, verdict, estimates in the model, rms, fitted initial states
# ----------------------------------------------------------------------------------------------


def _statistics(pb: _Problem, out, rank_rtol, stacklevel: int):
    """(p̂, J in original coordinates, :func:`~diffmb.optim.lsq.covariance` of all unknowns)."""
    n_p, z = pb.n_p, out.z
    zp = jnp.asarray(z[:n_p])
    p_hat = np.asarray(pb.spec.transforms.forward(zp))
    J = original_jacobian(out.J, pb.spec.transforms.jacobian(zp))  # states: not transformed
    nv = pb.model.nv
    state_names = [] if pb.spec.known_state else [
        f"rec{s.rec}.seg{i}.{w}[{k}]" for i, s in enumerate(pb.segs) for w in ("dq", "v")
        for k in range(nv)]
    all_names = tuple(pb.ps.scalar_names) + tuple(state_names)
    with warnings.catch_warnings(), _one_blas_thread():
        warnings.simplefilter("always")
        # the rank test scales parameters by their size; initial states (whose value, often
        # near 0, is no scale) by 1
        scale = np.concatenate([np.where(p_hat != 0.0, np.abs(p_hat), 1.0),
                                np.ones(z.size - n_p)])
        stats = covariance(all_names, np.concatenate([p_hat, z[n_p:]]), J[pb.keep],
                           out.r[pb.keep], rank_rtol, report=pb.ps.scalar_names,
                           stacklevel=stacklevel + 1, scale=scale)
    return p_hat, J, stats


def _rms(pb: _Problem, r) -> dict:
    """Unweighted rms residual per measured channel group (kept rows, weighted channels)."""
    nv = pb.model.nv
    wq, wv = np.asarray(pb.args[3]), np.asarray(pb.args[4])
    rr = r[pb.keep]
    off = 0
    acc = {"q": [], "v": []}
    for g in pb.gdata:
        for mk in g["mask"]:
            n_k = int((mk > 0).sum()) * nv
            for nm, w, has in (("q", wq, g["has_q"]), ("v", wv, g["has_v"])):
                if has:
                    blk = rr[off : off + n_k].reshape(-1, nv)
                    off += n_k
                    with np.errstate(divide="ignore", invalid="ignore"):
                        acc[nm].append(blk / np.where(w > 0, w, np.nan))
    return {nm: float(np.sqrt(np.nanmean(np.concatenate(lst) ** 2)))
            for nm, lst in acc.items() if lst}


def _fitted_states(pb: _Problem, z, m_hat) -> list:
    """[(q0, v0)] per segment at the estimate."""
    nv, n_p = pb.model.nv, pb.n_p
    out = []
    for i, (q_ref, _) in enumerate(pb.s0):
        s = np.asarray(pb.args[7][i]) if pb.spec.known_state else \
            z[n_p + 2 * nv * i : n_p + 2 * nv * (i + 1)]
        q0, v0 = ms.start_state(m_hat, jnp.asarray(q_ref), s)
        out.append((np.asarray(q0), np.array(v0)))
    return out


def _summary(pb: _Problem, out, rank_rtol, stacklevel: int) -> FitResult:
    """The :class:`FitResult` of a solved problem."""
    p_hat, J, stats = _statistics(pb, out, rank_rtol, stacklevel + 1)
    names = pb.ps.scalar_names
    std_flat = np.array([stats["std"][n] for n in names])
    unident = tuple(n for n in stats["bad"] if n in set(names))
    success, message = _judge(out.success, out.message, unident, names, std_flat,
                              [n for n in stats["bad"] if n not in set(names)], stats["s2"])
    est = pb.ps.unflatten(jnp.asarray(p_hat))
    stdd = pb.ps.unflatten(jnp.asarray(std_flat))
    to_py = lambda a: float(a) if np.ndim(a) == 0 else np.asarray(a)
    try:
        m_hat, f_hat = pb.ps.set(pb.model, pb.fdict, est)
    except ValueError as e:  # a non-physical estimate: keep the numbers, do not claim success
        m_hat, f_hat = pb.ps.set(pb.model, pb.fdict, est, check=False)
        success, message = False, f"{message}; not a physical model: {e}"
    return FitResult(
        estimates={k: to_py(v) for k, v in est.items()},
        std={k: to_py(v) for k, v in stdd.items()},
        cov=stats["cov"][: pb.n_p, : pb.n_p], names=tuple(names), cost=float(out.cost),
        history=out.history, model=m_hat,
        forces=f_hat if pb.named_forces else tuple(f_hat.values()),
        success=success, message=message, n_iter=out.n_iter, resumed_from=out.resumed_from,
        unidentifiable=unident, s2=stats["s2"], dof=stats["dof"], singular_values=stats["sv"],
        initial_states=_fitted_states(pb, out.z, m_hat), rms=_rms(pb, out.r),
        jacobian=J[pb.keep], residuals=np.asarray(out.r)[pb.keep], converged=out.converged,
    )


def fit(model: Model, data, params: Sequence[str], *, forces=(),
        simulate_kwargs: Mapping | None = None, solver: str = "lm", shooting: str = "single",
        segments: int = 4, weights: Mapping | None = None, bounds: Mapping | None = None,
        transforms: Mapping | None = None, init: Mapping | None = None,
        continuity_weight: float | None = None, input_interp: str = "linear",
        max_steps: int = 100, ftol: float = 1e-10, xtol: float = 1e-10, offset_tol: float = 1e-3,
        ptol: float = 0.0,
        learning_rate: float = 1e-2, rank_rtol: float = 1e-8, progress: bool = True,
        checkpoint=None, callback=None, initial_state: str = "estimate",
        threads: int | None = None, check_gradient: bool = False) -> FitResult:
    """Identify ``params`` (names, see :mod:`diffmb.optim.params`) from measured ``data``.

    Args:
        model: the Model (its values are the starting point unless ``init`` overrides them).
        data: a dict ``{"t": (n,), "q": (n, nq), "v": (n, nv), "tau": (n, nv)}`` (q and/or v
            measured; tau an optional input), a :class:`Record`, a CSV path (see
            :func:`read_joint_csv`), or a list of these (several trajectories, fitted jointly).
        params: parameter names.
        forces: force elements for :func:`diffmb.simulate`: a sequence, or a dict
            ``{name: element}`` (needed for ``force.<name>.<field>`` parameters).
        simulate_kwargs: passed to :func:`diffmb.simulate` (``dt``, ``solver``, ``method``,
            ``control``, ``params``, ...); not ``saveat``/``t0``/``t1`` (set by the data).
        solver: ``"lm"``, ``"gn"`` or ``"adam"``.
        shooting: ``"single"`` or ``"multiple"`` (``segments`` per trajectory).
        weights: ``{"q": w, "v": w}``, scalars or per-dof (nv,) arrays, e.g. 1/σ.
        bounds: ``{name: (lo, hi)}`` (either may be None) on every entry of the parameter.
        transforms: ``{name: Transform}`` overriding :func:`~.params.default_transform`.
        init: ``{name: value}`` starting values (default: the model's values).
        continuity_weight: weight of the multiple-shooting continuity residuals.
        input_interp: ``"linear"`` or ``"zoh"`` for measured torques.
        max_steps, ftol, xtol, offset_tol, learning_rate: iteration controls (see
            :func:`.lsq.solve`; ``offset_tol``: Bates and Watts' relative offset, the distance
            to the least-squares solution over the radius of the confidence region).
        ptol: stop when an accepted step moved every parameter by at most ``ptol`` of its
            standard error (the segments' states not counted), e.g. 0.01: the iterations that
            would follow only refine the states, or chase the small jumps of a cost through
            contact (0, the default: off).
        rank_rtol: identifiability threshold (relative singular value).
        progress: show a tqdm bar. checkpoint: path of the resumable state file.
        callback: ``callback(info)`` after each iteration (info: iteration, cost, z).
        initial_state: ``"estimate"`` (default: every segment's initial state is an unknown)
            or ``"known"``: single shooting from each record's given ``q0``, ``v0`` (an
            experiment started from a measured rest state), with the parameters the only
            unknowns — fewer tangents per Jacobian.
        threads: the Jacobian's directions are split over this many threads (default: the
            CPUs this process may use; 1: none).
        check_gradient: before fitting, check the gradient of the cost ½‖r‖² at the starting
            point with :func:`diffmb.optim.check_gradient` (kept as ``gradient_check``; a
            warning when it is not trusted).

    Returns:
        :class:`FitResult`: ``success`` is True only when the solver converged (``message``
        says on which test) and every parameter has a finite standard error; otherwise
        ``message`` gives the reason (iteration cap, unidentifiable or non-physical estimate).

    Raises:
        ValueError: no parameters, a record too short for the unknowns, or no parameter with
            any effect (see "Refusals" in the module docstring). KeyError: an unknown name.
        TypeError: an entry of ``forces`` that is not a force element.
    """
    pb = _problem(model, data, params, forces, simulate_kwargs, shooting, segments, weights,
                  bounds, transforms, init, continuity_weight, input_interp, initial_state)
    chk = _check_cost_gradient(pb) if check_gradient else None
    out = _solve(pb, threads, dict(
        solver=solver, max_steps=max_steps, ftol=ftol, xtol=xtol, offset_tol=offset_tol,
        ptol=ptol, n_params=pb.n_p,
        learning_rate=learning_rate, progress=progress, checkpoint=checkpoint,
        callback=callback), stacklevel=3)
    res = _summary(pb, out, rank_rtol, stacklevel=3)
    res.gradient_check = chk
    return res


def _check_cost_gradient(pb: _Problem):
    """:func:`~diffmb.optim.check_gradient` of the cost ½‖r‖² at the starting point (in the
    fit's internal coordinates); a warning naming the verdict when it is not trusted."""
    from .gradcheck import check_gradient

    chk = check_gradient(lambda z: 0.5 * jnp.sum(pb.residual(z) ** 2), jnp.asarray(pb.z0),
                         samples=8)
    if not chk.trusted:
        warnings.warn(f"fit: the cost's gradient at the start is {chk.verdict}", stacklevel=3)
    return chk
