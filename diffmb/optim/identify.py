"""Identification for any robot file: ``diffmb identify --model robot.xml --data log.csv``.

    res = diffmb.optim.identify("arm.xml", "log.csv", params="body.*.mass,joint.*.damping",
                                sensors="q_*.bias,q_elbow.delay", out="fit/")
    res.identified  # {name: {"estimate": float | list, "std": float | list}}

What it does, in order:

1. **Model and forces** from the file, loaded by :func:`diffmb.io.load_model`: for an MJCF
   (``.xml``) the forces of :func:`~diffmb.io.mjcf.mjcf_forces` (damping, springs, actuators,
   limits, friction, tendons, equalities, contacts: what MuJoCo simulates), for a URDF those of
   :func:`~diffmb.io.urdf.urdf_forces` (``floating_base``: its root link on a free joint); or a
   :class:`~diffmb.Model` with ``forces``. The simulation step ``dt`` defaults to the MJCF's
   ``timestep`` (1 ms for a URDF); the integrator is RK4.
2. **Data**: CSV files of joint channels (``t``, ``q_<joint>``, optional ``v_<joint>``, inputs
   ``ctrl_<actuator>`` or ``tau_<joint>``), read by
   :func:`~diffmb.optim.sysid.read_joint_csv`; inputs are interpolated linearly between samples
   and the simulated outputs to the sample times, which need not lie on the step grid. Refused
   with a message naming the file, row and column: unknown or missing channels, a non-finite
   value, an implausible one (beyond :data:`ABSURD`), a time gap (an interval over 5 times the
   median: split the record into files), a constant measured channel, a saturated one
   (``SATURATION_RUN`` or more consecutive samples at the column's extreme value).
3. **Parameters**: names of :mod:`diffmb.optim.params` with shell wildcards in the body or joint
   name; default :data:`DEFAULT_PARAMS` (the mass of every moving body that has one, massless
   frames left out, and the damping of every joint). Inertial parameters stay physically
   realisable (log-Cholesky of the pseudo-inertia for ``body.<b>.inertial``, of the com second
   moment for ``body.<b>.inertia``, log(m) for masses).
4. **Sensors** (``sensors=``, the ``--sensors`` syntax): comma-separated
   ``<channel-pattern>.<field>``, field ``gain``, ``bias``, ``delay`` (identified with the
   parameters, :mod:`diffmb.optim.sensors`) or ``noise``.
5. **Noise and weights**: every measured channel is weighted by 1/σ, σ first estimated from the
   data alone (the spread of its second differences, :func:`noise_from_data`); channels named
   ``<ch>.noise`` are then re-estimated by maximum likelihood (the rms of their residuals at the
   estimate) and the fit is repeated once with those weights; their σ is reported with its
   standard error σ/√(2n).
6. **Fit** by :func:`diffmb.optim.fit` (Levenberg–Marquardt on exact forward-mode Jacobians,
   standard errors from the Laplace approximation cov = s²(JᵀJ)⁻¹ at the optimum, checkpointed
   and resumable).
7. **Identifiability**: :func:`base_parameters` names the combinations the data determine when
   the sensitivity matrix is rank deficient ("body.l2.mass and body.l3.com[0] are identifiable
   only as body.l2.mass + 0.4·body.l3.com[0]"), with their estimates and standard errors.
8. **Results**: ``DIR/results.json`` (``identified`` as ``{name: {"estimate", "std"}}``,
   vectors as lists; ``ci95``; ``correlation``; ``base_parameters``; ``noise``; ``rms``;
   ``converged``, ``success`` and ``message``: a fit that did not converge is reported, not
   raised) and
   ``DIR/report.md`` with the fit, residual and correlation figures.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import warnings
from collections.abc import Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from ..forces.elements import ActivatedActuators, Actuators
from ..model import Model
from .lsq import UnidentifiableWarning
from .params import ParamSet, control_consumer, default_transform, expand, force_elements
from .sensors import Sensors, expand_sensors
from .sysid import FitResult, Record, fit, joint_channels, load_data

__all__ = ["identify", "IdentifyResult", "base_parameters", "profile_likelihood",
           "noise_from_data", "check_record", "DEFAULT_PARAMS", "load_robot"]

DEFAULT_PARAMS = "body.*.mass,joint.*.damping"
GAP_FACTOR = 5.0  # an interval over 5 x the median is a gap
SATURATION_RUN = 8  # consecutive samples at a column's extreme value
ZERO_START = 1e-3  # starting value of a positive parameter that the file sets to 0 (SI units)
# largest plausible magnitude per channel group (SI units: rad, m, rad/s, m/s; N m, N, controls)
ABSURD = {"q": 1e6, "v": 1e6, "tau": 1e9, "ctrl": 1e9}


# ----------------------------------------------------------------------------------------------
# Model and data
# ----------------------------------------------------------------------------------------------


def load_robot(path, ignore=(), floating_base: bool = False) -> tuple[Model, dict, float]:
    """(Model, named force elements, default dt) of an MJCF or URDF file, loaded by
    :func:`diffmb.io.load_model`; ``ignore``: what :func:`~diffmb.io.mjcf.mjcf_forces` may leave
    out (e.g. ``("unsupported_contacts",)``); ``floating_base``: a URDF's root link on a free
    joint."""
    from ..io import load_model

    model = load_model(path, floating_base=floating_base)
    if model.source.kind == "mjcf":
        from ..io.mjcf import file_timestep, mjcf_forces

        forces = mjcf_forces(path, ignore=ignore)
        dt = file_timestep(path)
    else:
        from ..io.urdf import urdf_forces

        forces = urdf_forces(path, model, floating_base=floating_base)
        dt = 1e-3
    return model, _named(forces), dt


def _named(forces) -> dict:
    """{name: element}: a dict as given, a sequence named by the elements' classes."""
    forces = forces if isinstance(forces, Mapping) else tuple(forces)
    force_elements(forces)  # refuses anything that is not a force element
    if isinstance(forces, Mapping):
        return dict(forces)
    out: dict = {}
    for e in forces:
        base = type(e).__name__.lower()
        k, i = base, 1
        while k in out:
            i += 1
            k = f"{base}{i}"
        out[k] = e
    return out


def _channels(rec: Record, model: Model, actuators: Sequence[str] = ()):
    """(group, array, column names) of the record's measured and input channels."""
    out = [(k, a, joint_channels(model, k)) for k, a in (("q", rec.q), ("v", rec.v),
                                                         ("tau", rec.tau)) if a is not None]
    if rec.ctrl is not None:
        nu = rec.ctrl.shape[1]
        out.append(("ctrl", rec.ctrl, [f"ctrl_{a}" for a in actuators] if len(actuators) == nu
                    else [f"ctrl[{k}]" for k in range(nu)]))
    return out


def _check_magnitudes(rec: Record, model: Model, actuators: Sequence[str] = ()) -> None:
    """Refuse a value beyond :data:`ABSURD` (non-finite ones are refused when read)."""
    t = np.asarray(rec.t)
    for k, a, chans in _channels(rec, model, actuators):
        big = np.abs(np.asarray(a, float)) > ABSURD[k]
        if big.any():
            i, c = (int(x) for x in np.argwhere(big)[0])
            raise ValueError(
                f"{rec.source}: data row {i + 1} (t = {t[i]:.6g}), column {chans[c]!r}: "
                f"{a[i, c]:.6g} is not a plausible value (|value| > {ABSURD[k]:g} in SI units); "
                "fix or remove that row")


def check_record(rec: Record, model: Model, actuators: Sequence[str] = ()) -> None:
    """Refuse (``ValueError`` naming the file, data rows, times and column) a record with an
    implausible value (:data:`ABSURD`), a time gap, a constant measured channel (no
    information, and no noise level to weight it by) or a saturated one; ``actuators`` names
    the ``ctrl`` columns in messages."""
    _check_magnitudes(rec, model, actuators)
    t = np.asarray(rec.t)
    dt = np.diff(t)
    med = float(np.median(dt))
    gaps = np.nonzero(dt > GAP_FACTOR * med)[0]
    if gaps.size:
        k = int(gaps[0])
        raise ValueError(
            f"{rec.source}: time gap of {dt[k]:.6g} s between t = {t[k]:.6g} and t = "
            f"{t[k + 1]:.6g} (data rows {k + 1}-{k + 2}), {dt[k] / med:.0f} times the median "
            f"sample interval {med:.3g} s: split the record into separate files (each is fitted "
            "from its own initial state), or resample it")
    for prefix, a in (("q", rec.q), ("v", rec.v)):
        if a is None:
            continue
        for c, name in enumerate(joint_channels(model, prefix)):
            col = a[:, c]
            if np.ptp(col) == 0.0:
                raise ValueError(
                    f"{rec.source}: measured column {name!r} is constant ({col[0]:.6g} in all "
                    f"{col.size} data rows): it carries no information and no noise level to "
                    "weight it by (a sensor that did not move or was not recorded); record "
                    "a motion of that joint, or fit a model without it")
            _check_saturation(rec, t, name, col)


def _check_saturation(rec: Record, t, name: str, col) -> None:
    for ext, what in ((col.max(), "maximum"), (col.min(), "minimum")):
        at = np.concatenate([[False], col == ext, [False]])
        starts = np.nonzero(at[1:] & ~at[:-1])[0]
        ends = np.nonzero(~at[1:] & at[:-1])[0]
        runs = ends - starts
        if runs.size and runs.max() >= SATURATION_RUN:
            i = int(np.argmax(runs))
            a0, a1 = int(starts[i]), int(ends[i]) - 1
            raise ValueError(
                f"{rec.source}: column {name!r} stays at its {what} {ext:.6g} for "
                f"{runs[i]} consecutive samples (data rows {a0 + 1}-{a1 + 1}, t = "
                f"{t[a0]:.6g}-{t[a1]:.6g} s): a saturated sensor or a clipped signal; "
                "remove those rows (split the file) or that channel")


def noise_from_data(rec: Record, model: Model) -> dict:
    """σ per measured channel from the data alone: for a signal that is smooth on the sampling
    scale, the second difference of white noise of variance σ² has variance 6σ², so
    σ ≈ 1.4826·MAD(Δ²y)/√6 (robust to the few samples where the signal itself bends)."""
    out = {}
    for prefix, a in (("q", rec.q), ("v", rec.v)):
        if a is None:
            continue
        for c, name in enumerate(joint_channels(model, prefix)):
            d2 = np.diff(a[:, c], 2)
            mad = np.median(np.abs(d2 - np.median(d2))) if d2.size else 0.0
            out[name] = float(1.4826 * mad / np.sqrt(6.0))
    return out


def _dof_weights(model: Model, sigma: Mapping, prefix: str) -> np.ndarray:
    """Weights 1/σ per dof (the fit's residuals are per dof): a hinge/slide dof takes its
    channel's σ, the dofs of a ball/free joint the mean of its channels'."""
    from ..model import JointType

    w = []
    for j, jn in enumerate(model.joint_names):
        jt = JointType(model.joint_types[j])
        n = jt.nq if prefix == "q" else jt.nv
        chans = [f"{prefix}_{jn}"] if n == 1 else [f"{prefix}_{jn}_{k}" for k in range(n)]
        s = float(np.mean([sigma[c] for c in chans]))
        w += [s] * jt.nv
    s = np.asarray(w)
    floor = 1e-9 if not np.any(s > 0) else 1e-3 * np.median(s[s > 0])
    return 1.0 / np.maximum(s, floor)


# ----------------------------------------------------------------------------------------------
# Identifiable combinations
# ----------------------------------------------------------------------------------------------


def base_parameters(J, names: Sequence[str], p, cov=None, *, rtol: float = 1e-8) -> list[dict]:
    """The parameter combinations a rank-deficient fit determines.

    ``J`` (m, n_all): residual Jacobian whose first ``len(names)`` columns are the parameters'
    (original units) and the rest nuisance unknowns (initial states, projected out first);
    ``p``: the estimates; ``cov``: their covariance (for the combinations' standard errors).
    Columns are scaled by |p| as in :func:`diffmb.optim.lsq.covariance`; the null space of the
    scaled sensitivity (singular values below ``rtol`` of the largest) is eliminated by pivoting on
    its largest entries, which picks the *dependent* parameters D; with J_D = J_B β, the data
    determine θ_b + Σ_d β_bd θ_d for every base parameter b. Returns one dict per dependent
    group: ``{"parameters": [names], "combination": "a + 0.4·b", "coefficients": {name: c},
    "estimate", "std", "message"}``; a parameter with no effect at all comes alone with
    combination None. Empty when every parameter is identifiable.
    """
    names = list(names)
    n = len(names)
    J = np.asarray(J, float)
    Jp, Js = J[:, :n], J[:, n:]
    if Js.shape[1]:
        U, S, _ = np.linalg.svd(Js, full_matrices=False)
        U = U[:, S > 1e-10 * (S[0] if S.size else 0.0)]
        Jp = Jp - U @ (U.T @ Jp)
    p = np.asarray(p, float)
    scale = np.where(p != 0.0, np.abs(p), 1.0)
    Jsc = Jp * scale[None, :]
    _, sv, vt = np.linalg.svd(Jsc, full_matrices=False)
    smax = sv[0] if sv.size else 0.0
    r = int(np.sum(sv > rtol * smax)) if smax > 0 else 0
    if r == n:
        return []
    N = vt[r:].copy()  # (k, n) null-space rows
    dep: list[int] = []
    for i in range(N.shape[0]):  # Gauss–Jordan with full pivoting on the null-space rows
        j = int(np.argmax(np.abs(N[i])))
        dep.append(j)
        N[i] /= N[i, j]
        for i2 in range(N.shape[0]):
            if i2 != i:
                N[i2] -= N[i2, j] * N[i]
    base = [j for j in range(n) if j not in dep]
    beta = np.linalg.lstsq(Jsc[:, base], Jsc[:, dep], rcond=None)[0] if base else \
        np.zeros((0, len(dep)))  # Jsc_D = Jsc_B beta
    colnorm = np.linalg.norm(Jsc, axis=0)
    out = []
    dead = [d for d in dep if colnorm[d] <= 1e-12 * max(colnorm.max(), 1e-300)]
    for d in dead:
        out.append({"parameters": [names[d]], "combination": None, "coefficients": {},
                    "estimate": None, "std": None,
                    "message": f"{names[d]} has no effect on the data: not identifiable at all"})
    for bi, b in enumerate(base):
        coefs = {}
        for di, d in enumerate(dep):
            if d in dead:
                continue
            c = beta[bi, di] * scale[b] / scale[d]
            if abs(beta[bi, di]) > 1e-6:
                coefs[names[d]] = float(c)
        if not coefs:
            continue
        a = np.zeros(n)
        a[b] = 1.0
        for nm, c in coefs.items():
            a[names.index(nm)] = c
        est = float(a @ p)
        std = float(np.sqrt(max(a @ np.asarray(cov) @ a, 0.0))) if cov is not None else None
        combo = names[b] + "".join(f" {'+' if c >= 0 else '-'} {abs(c):.4g}·{nm}"
                                   for nm, c in coefs.items())
        members = [names[b]] + list(coefs)
        out.append({"parameters": members, "combination": combo,
                    "coefficients": {names[b]: 1.0, **coefs}, "estimate": est, "std": std,
                    "message": f"{' and '.join(members) if len(members) == 2 else ', '.join(members)}"
                               f" are identifiable only as {combo}"})
    # dependents that enter no base combination (pure null directions among dependents)
    named = {m for g in out for m in g["parameters"]}
    for d in dep:
        if names[d] not in named:
            out.append({"parameters": [names[d]], "combination": None, "coefficients": {},
                        "estimate": None, "std": None,
                        "message": f"{names[d]} is not identifiable from these data"})
    return out


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class IdentifyResult:
    """``identified``: {name: {"estimate", "std"}} (lists for vectors); ``fit``: the
    :class:`~diffmb.optim.sysid.FitResult`; ``results``: what ``results.json`` holds."""

    identified: dict
    fit: FitResult
    results: dict
    model: Model
    forces: dict
    records: list


def _jsonable(x):
    a = np.asarray(x, dtype=float)
    if a.ndim == 0:
        f = float(a)
        return f if np.isfinite(f) else None
    return [_jsonable(v) for v in a]


def _model_and_forces(model, forces, dt, ignore, floating_base):
    """(Model, named force elements, dt, the file's path or None) from a file or a Model."""
    if isinstance(model, (str, pathlib.Path)):
        source = str(model)
        model, fdict, dt_file = load_robot(model, ignore, floating_base)
        if forces is not None:
            fdict.update(_named(forces))
        return model, fdict, dt_file if dt is None else dt, source
    if dt is None:
        raise ValueError("identify: give dt (the simulation step) with a Model")
    if floating_base:
        raise ValueError("identify: floating_base applies to a URDF file, not to a Model")
    return model, _named(forces or ()), dt, None


def _parameter_names(model, params, sensors, fdict) -> tuple[list, list]:
    """(parameter names, channels whose noise is estimated); adds ``fdict["sensors"]``."""
    default = params is None
    names = expand(model, DEFAULT_PARAMS if default else params, fdict)
    if default:  # bodies that no joint moves, and massless frames, carry no information
        def moving_mass(n):
            i = model.body_names.index(n.split(".")[1])
            return model.body_node[i] >= 0 and float(model.body_mass[i]) > 0.0

        names = [n for n in names if not n.startswith("body.") or moving_mass(n)]
    sens_names, noise_chans = expand_sensors(model, sensors) if sensors else ([], [])
    if sens_names:
        fdict["sensors"] = Sensors(model)
    names = names + sens_names
    ParamSet(model, names, fdict)  # unknown names fail here, before anything compiles
    return names, noise_chans


def _zero_starts(model, names, fdict, init) -> tuple[dict, list]:
    """A positive parameter (mass, damping, armature) that the file sets to 0 cannot start
    there (its log): (init with ZERO_START for those, their names)."""
    init = dict(init or {})
    zero_started = []
    for n in names:
        if n in init or default_transform(n).kind != "positive":
            continue
        v = np.asarray(ParamSet(model, [n], fdict).get(model, fdict)[n])
        if np.any(v <= 0.0):
            init[n] = np.where(v > 0.0, v, ZERO_START) if v.ndim else ZERO_START
            zero_started.append(n)
    return init, zero_started


def _records(model, data, fdict) -> tuple[list, dict]:
    """(checked records, the elements to simulate: without the actuators when the record
    holds joint torques)."""
    act = control_consumer(fdict)
    act_names = tuple(act.names) if isinstance(act, Actuators | ActivatedActuators) else ()
    recs = load_data(model, data, act_names)
    for r in recs:
        check_record(r, model, act_names)
    if any(r.tau is not None for r in recs) and act is not None:
        # torques measured at the joints: the actuators are not in the loop
        fdict = {k: e for k, e in fdict.items() if e is not act}
        act = None
    if any(r.tau is None and r.ctrl is None for r in recs) and act is not None:
        raise ValueError(f"{recs[0].source}: the model has actuators {list(act_names)} but the "
                         "record has no ctrl_<actuator> (or tau_<joint>) columns: the input is "
                         "unknown")
    return recs, fdict


def _prior_weights(model, recs) -> tuple[dict, dict]:
    """(σ per channel from the data alone, the fit's weights 1/σ per dof)."""
    sigma = {}
    for r in recs:
        for k, s in noise_from_data(r, model).items():
            sigma[k] = max(sigma.get(k, 0.0), s)
    weights = {}
    if any(r.q is not None for r in recs):
        weights["q"] = _dof_weights(model, sigma, "q")
    if any(r.v is not None for r in recs):
        weights["v"] = _dof_weights(model, sigma, "v")
    return sigma, weights


def _fit_with_noise(model, recs, names, sigma, weights, noise_chans, checkpoint, dt, kw):
    """The fit; with ``noise_chans``, their σ re-estimated at the estimate and the fit repeated
    once with those weights. Returns (fit, noise, simulated outputs or None, weights,
    identifiability warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnidentifiableWarning)
        res = fit(model, recs, names, weights=weights, checkpoint=checkpoint, **kw)
        noise, sim = {}, None
        if noise_chans:
            sigma2 = _residual_sigma(_simulate_fit(res, model, recs, dt), model, recs)
            for c in noise_chans:
                sigma[c] = sigma2[c]
            weights = {k: _dof_weights(model, sigma, k) for k in weights}
            init2 = {k: (v if np.ndim(v) == 0 else np.asarray(v)) for k, v in res.estimates.items()}
            ck2 = None if checkpoint is None else pathlib.Path(checkpoint).with_suffix(
                ".reweighted.npz")  # the second fit resumes too
            chk = res.gradient_check
            res = fit(model, recs, names, weights=weights, checkpoint=ck2,
                      **{**kw, "init": init2, "check_gradient": False})
            res.gradient_check = chk
            sim = _simulate_fit(res, model, recs, dt)  # the final fit's outputs, also plotted
            sigma2 = _residual_sigma(sim, model, recs)
            for c in noise_chans:
                n_c = sum(r.t.shape[0] for r in recs)
                noise[c] = {"estimate": sigma2[c], "std": sigma2[c] / np.sqrt(2.0 * n_c)}
    unident_warn = [str(w.message) for w in caught if issubclass(w.category, UnidentifiableWarning)]
    for w in caught:
        if not issubclass(w.category, UnidentifiableWarning):
            warnings.warn(w.message, w.category, stacklevel=3)
    return res, noise, sim, weights, unident_warn


def _results(res: FitResult, names, recs, source, model, sigma, noise, unident_warn, dt,
             profiles, zero_started) -> dict:
    """What ``results.json`` holds."""
    p_hat = np.concatenate([np.reshape(np.asarray(res.estimates[n], float), -1) for n in names])
    identified = {n: {"estimate": _jsonable(res.estimates[n]), "std": _jsonable(res.std[n])}
                  for n in names}
    ci = {n: _jsonable(np.stack([np.asarray(res.estimates[n]) - 1.96 * np.asarray(res.std[n]),
                                 np.asarray(res.estimates[n]) + 1.96 * np.asarray(res.std[n])],
                                axis=-1)) for n in names}
    return {
        "status": "complete",
        "model": source or model.name,
        "data": [r.source for r in recs],
        "parameters": list(names),
        "identified": identified,
        "ci95": ci,
        "noise": noise,
        "noise_prior": sigma,
        "base_parameters": base_parameters(res.jacobian, res.names, p_hat, res.cov),
        "unidentifiable": list(res.unidentifiable),
        "warnings": unident_warn,
        "success": bool(res.success),
        "converged": bool(res.converged),
        "message": res.message,
        "iterations": int(res.n_iter),
        "cost": float(res.cost),
        "s2": _jsonable(res.s2),
        "rms": res.rms,
        "dt": dt,
        "correlation": {"names": list(res.names), "matrix": _jsonable(res.correlation)},
        "profiles": profiles,
        "started_from_zero_start": zero_started,
        "gradient_check": None if res.gradient_check is None else {
            "trusted": bool(res.gradient_check.trusted), "verdict": res.gradient_check.verdict},
    }


def identify(model, data, *, params=None, sensors=None, forces=None, dt: float | None = None,
             out=None, checkpoint=None, shooting: str = "single", segments: int = 4,
             max_steps: int = 50, progress: bool = True, report: bool = True,
             init: Mapping | None = None, bounds: Mapping | None = None,
             ignore=(), profile: Sequence[str] = (), profile_points: int = 9,
             floating_base: bool = False, check_gradient: bool = False,
             backward_smoothing: float | None = None) -> IdentifyResult:
    """Identify ``params`` of any robot from measured data (see the module docstring).

    Args:
        model: an MJCF/URDF path, or a :class:`~diffmb.Model` (then ``forces`` as a dict or
            sequence of elements, and ``dt``).
        data: CSV path(s), :class:`~diffmb.optim.sysid.Record` (s) or dicts (t, q, v, tau,
            ctrl).
        params: names or patterns (comma-separated string or list); default
            :data:`DEFAULT_PARAMS`.
        sensors: ``--sensors`` spec (``"q_*.bias,q_elbow.delay,q_*.noise"``) or None.
        out: directory for ``results.json``, ``report.md`` and figures (None: nothing written).
        checkpoint: resumable fit state (see :func:`diffmb.optim.fit`); with ``out`` and None,
            no checkpoint.
        shooting, segments, max_steps, init, bounds: passed to :func:`diffmb.optim.fit`.
        ignore: features of an MJCF file to simulate without (see
            :func:`~diffmb.io.mjcf.mjcf_forces`), e.g. ``("unsupported_contacts",)``.
        profile: scalar parameters whose profile likelihood is computed (:func:`profile`):
            ``profile_points`` refits with the parameter held on a grid of ±3 standard errors
            around the estimate; the 95 % interval where the profiled cost stays within
            χ²₁(0.95)/2 · s² of the optimum, beside the Laplace interval.
        floating_base: a URDF's root link on a free joint (:func:`diffmb.io.load_model`).
        check_gradient: check the cost's gradient at the start with
            :func:`diffmb.optim.check_gradient` (``results["gradient_check"]``: trusted and the
            verdict; a warning when it is not trusted).
        backward_smoothing: a width [m]: every contact element differentiates its normal law
            smoothed over it, the simulation unchanged (:func:`diffmb.contacts.
            backward_smoothed`; ``results["backward_smoothing"]``, None: exact derivatives).

    Returns:
        :class:`IdentifyResult`. A fit that ends without converging, or with a parameter the
        data cannot identify, is returned, not raised: ``results["converged"]`` says whether
        the solver met a convergence test (False when ``max_steps`` ended it),
        ``results["success"]`` whether it did and every parameter is identifiable, and
        ``results["message"]`` gives the reason (``fit.converged``, ``fit.success``,
        ``fit.message``).
    """
    model, fdict, dt, source = _model_and_forces(model, forces, dt, ignore, floating_base)
    if backward_smoothing is not None:
        from ..contacts import backward_smoothed

        fdict = dict(zip(fdict, backward_smoothed(tuple(fdict.values()), backward_smoothing),
                         strict=True))
    names, noise_chans = _parameter_names(model, params, sensors, fdict)
    init, zero_started = _zero_starts(model, names, fdict, init)
    recs, fdict = _records(model, data, fdict)
    sigma, weights = _prior_weights(model, recs)
    kw = dict(forces=fdict, simulate_kwargs={"dt": dt}, shooting=shooting, segments=segments,
              max_steps=max_steps, progress=progress, init=init, bounds=bounds,
              check_gradient=check_gradient)
    res, noise, sim, weights, unident_warn = _fit_with_noise(
        model, recs, names, sigma, weights, noise_chans, checkpoint, dt, kw)
    profiles = {}
    for pn in profile:
        if pn not in names or np.ndim(res.estimates[pn]) != 0:
            raise KeyError(f"profile: {pn!r} is not a scalar parameter of this fit; parameters: "
                           f"{names}")
        profiles[pn] = profile_likelihood(res, model, recs, fdict, names, pn, weights=weights,
                                          n=profile_points,
                                          **{k: v for k, v in kw.items()
                                             if k not in ("forces", "check_gradient")})
    results = _results(res, names, recs, source, model, sigma, noise, unident_warn, dt, profiles,
                       zero_started)
    results["backward_smoothing"] = backward_smoothing
    out_res = IdentifyResult(results["identified"], res, results, res.model, res.forces, recs)
    if out is not None:
        out = pathlib.Path(out)
        out.mkdir(parents=True, exist_ok=True)
        if report:
            results["figures"] = _figures(out_res, out, sim)
            _report(out_res, out)
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return out_res


CHI2_1_95 = 3.841458820694124  # 95 % quantile of χ² with one degree of freedom


def profile_likelihood(res: FitResult, model: Model, recs, forces: Mapping, names, name: str, *,
                       weights, n: int = 9, span: float = 3.0, **kw) -> dict:
    """Profile of the cost over one scalar parameter: on ``n`` values in ±``span`` standard
    errors of the estimate, the other parameters (and initial states) are refitted with it held.
    With the residuals scaled by their variance s², 2Δcost/s² is the likelihood-ratio statistic;
    the 95 % interval is where it stays below χ²₁(0.95) = 3.84 (linear interpolation between
    grid values; an open end is reported as None). For a parameter the model is linear in, the
    profile is a parabola and the interval equals the Laplace one (±1.96 σ).

    Returns ``{"values", "cost", "statistic", "ci95", "laplace_ci95"}``."""
    from .params import ParamSet

    est, std = float(res.estimates[name]), float(res.std[name])
    if not (np.isfinite(std) and std > 0):
        raise ValueError(f"profile: {name!r} has no finite standard error to scale the grid")
    others = [x for x in names if x != name]
    init = {k: (v if np.ndim(v) == 0 else np.asarray(v)) for k, v in res.estimates.items()
            if k != name}
    kw = {**kw, "init": init, "progress": False, "max_steps": 30,
          "bounds": {k: v for k, v in (kw.get("bounds") or {}).items() if k != name}}
    grid = est + std * np.linspace(-span, span, n)
    one = ParamSet(model, [name], dict(forces))
    cost = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in grid:
            m2, f2 = one.set(model, dict(forces), {name: jnp.asarray(v)}, check=False)
            if others:
                cost.append(fit(m2, recs, others, forces=f2, weights=weights, **kw).cost)
            else:
                cost.append(float("nan"))
    cost = np.asarray(cost)
    stat = 2.0 * (cost - res.cost) / res.s2
    ci: list = [None, None]
    k0 = int(np.argmin(stat))
    for side, rng in ((0, range(k0, 0, -1)), (1, range(k0, n - 1))):
        for k in rng:
            a, b = (k - 1, k) if side == 0 else (k, k + 1)
            lo_s, hi_s = stat[a], stat[b]
            if (lo_s - CHI2_1_95) * (hi_s - CHI2_1_95) <= 0 and lo_s != hi_s:
                ci[side] = float(grid[a] + (CHI2_1_95 - lo_s) / (hi_s - lo_s) * (grid[b] - grid[a]))
                break
    return {"values": grid.tolist(), "cost": cost.tolist(), "statistic": stat.tolist(),
            "ci95": ci, "laplace_ci95": [est - 1.96 * std, est + 1.96 * std]}


def _residual_sigma(sim, model: Model, recs) -> dict:
    """rms of the unweighted residuals per channel (maximum-likelihood σ) of the simulated
    outputs ``sim`` (:func:`_simulate_fit`) at the estimate."""
    out = {}
    for r, (tq, tv) in zip(recs, sim, strict=True):
        for prefix, meas, s in (("q", r.q, tq), ("v", r.v, tv)):
            if meas is None:
                continue
            for c, name in enumerate(joint_channels(model, prefix)):
                e = float(np.sqrt(np.mean((meas[:, c] - s[:, c]) ** 2)))
                out[name] = max(out.get(name, 0.0), e)
    return out


def _simulate_fit(res: FitResult, model: Model, recs, dt: float) -> list:
    """Simulated (q, v) at every record's sample times with the estimates, from the fitted
    initial state of the record's first segment, with the fitted sensor models applied."""
    from ..controls import KnotTable
    from ..simulation import simulate
    from .shooting import Shifted
    from .sysid import measured_outputs

    forces = dict(res.forces) if isinstance(res.forces, Mapping) else {}
    sens = forces.pop("sensors", None)
    m = res.model
    out = []
    seg = 0
    for r in recs:
        q0, v0 = res.initial_states[seg]
        seg += max(1, len(res.initial_states) // len(recs))
        if r.tau is not None:
            ctrl = KnotTable(jnp.asarray(r.t), jnp.asarray(r.tau))
        elif r.ctrl is not None:
            ctrl = KnotTable(jnp.asarray(r.t), jnp.asarray(r.ctrl))
        else:
            ctrl = None
        T = float(r.t[-1] - r.t[0])
        n = max(1, int(round(T / dt)))
        tr = simulate(m, jnp.asarray(q0), jnp.asarray(v0), t1=T, dt=T / n,
                      forces=tuple(forces.values()), control=None if ctrl is None else
                      Shifted(ctrl, jnp.asarray(float(r.t[0]))), throw=False)
        qs, vs = measured_outputs(m, sens, tr, r.t - r.t[0], T, n)
        out.append((np.asarray(qs), np.asarray(vs)))
    return out


def _figures(ir: IdentifyResult, out: pathlib.Path, sim=None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res, model = ir.fit, ir.model
    if sim is None:
        sim = _simulate_fit(res, model, ir.records, ir.results["dt"])
    files = []
    r, (qs, vs) = ir.records[0], sim[0]
    for prefix, meas, s in (("q", r.q, qs), ("v", r.v, vs)):
        if meas is None:
            continue
        chans = joint_channels(model, prefix)
        k = len(chans)
        fig, axes = plt.subplots(k, 2, figsize=(10, 1.8 * k + 0.6), squeeze=False,
                                 sharex=True)
        for c, name in enumerate(chans):
            ax = axes[c, 0]
            ax.plot(r.t, meas[:, c], ".", ms=2, color="0.5", label="measured")
            ax.plot(r.t, s[:, c], "-", lw=1.2, color="C0", label="identified model")
            ax.set_ylabel(name, fontsize=8)
            axes[c, 1].plot(r.t, meas[:, c] - s[:, c], lw=0.8, color="C3")
            axes[c, 1].axhline(0, color="k", lw=0.5)
        axes[0, 0].legend(fontsize=7, loc="upper right")
        axes[0, 0].set_title("measured and simulated")
        axes[0, 1].set_title("residual (measured − simulated)")
        axes[-1, 0].set_xlabel("t [s]")
        axes[-1, 1].set_xlabel("t [s]")
        fig.tight_layout()
        f = f"fit_{prefix}.png"
        fig.savefig(out / f, dpi=110)
        plt.close(fig)
        files.append(f)
    for pn, pr in ir.results.get("profiles", {}).items():
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot(pr["values"], pr["statistic"], "o-", label="profile (refitted)")
        e = float(res.estimates[pn])
        s = float(res.std[pn])
        x = np.linspace(min(pr["values"]), max(pr["values"]), 100)
        ax.plot(x, ((x - e) / s) ** 2, "--", label="Laplace (quadratic)")
        ax.axhline(CHI2_1_95, color="k", lw=0.7)
        ax.set_xlabel(pn)
        ax.set_ylabel("2 Δcost / s²")
        ax.legend(fontsize=7)
        fig.tight_layout()
        f = "profile_" + pn.replace(".", "_").replace("[", "_").replace("]", "") + ".png"
        fig.savefig(out / f, dpi=110)
        plt.close(fig)
        files.append(f)
    C = np.asarray(res.correlation)
    if C.shape[0] > 1:
        fig, ax = plt.subplots(figsize=(1.0 + 0.45 * C.shape[0], 0.6 + 0.45 * C.shape[0]))
        im = ax.imshow(np.nan_to_num(C), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(len(res.names)), res.names, rotation=90, fontsize=7)
        ax.set_yticks(range(len(res.names)), res.names, fontsize=7)
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.set_title("correlation of the estimates")
        fig.tight_layout()
        fig.savefig(out / "correlation.png", dpi=110)
        plt.close(fig)
        files.append("correlation.png")
    return files


def _fmt(x):
    if x is None:
        return "—"
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return f"{x:.6g}"


def _report(ir: IdentifyResult, out: pathlib.Path) -> None:
    R = ir.results
    lines = [f"# Identification of {R['model']}", "",
             f"Data: {', '.join(R['data'])}. Simulation: RK4, dt = {R['dt']:g} s. "
             f"{R['iterations']} Levenberg–Marquardt iterations, cost {R['cost']:.6g}, "
             f"residual variance s² = {_fmt(R['s2'])} (weighted; 1 when the noise levels are "
             "right).", "",
             f"**{'Success' if R['success'] else 'Not a successful fit'}**: {R['message']}", "",
             "## Estimates", "",
             "Standard errors from the Laplace approximation (s²(JᵀJ)⁻¹ at the optimum); the "
             "95 % interval is ±1.96 σ.", "",
             "| parameter | estimate | std | 95 % interval |", "|---|---|---|---|"]
    for n in R["parameters"]:
        e, s = R["identified"][n]["estimate"], R["identified"][n]["std"]
        lines.append(f"| `{n}` | {_fmt(e)} | {_fmt(s)} | {_fmt(R['ci95'][n])} |")
    if R["noise"]:
        lines += ["", "## Noise levels (maximum likelihood)", "", "| channel | σ | std |",
                  "|---|---|---|"]
        lines += [f"| `{c}` | {v['estimate']:.4g} | {v['std']:.2g} |" for c, v in R["noise"].items()]
    if R.get("profiles"):
        lines += ["", "## Profile likelihoods", "",
                  "| parameter | profile 95 % interval | Laplace 95 % interval |", "|---|---|---|"]
        lines += [f"| `{k}` | {_fmt(v['ci95'])} | {_fmt(v['laplace_ci95'])} |"
                  for k, v in R["profiles"].items()]
    lines += ["", "## Identifiability", ""]
    if R["base_parameters"]:
        lines += [f"- {g['message']}" + (f": {g['estimate']:.6g} ± {g['std']:.2g}"
                                         if g.get("estimate") is not None and g.get("std")
                                         is not None else "") for g in R["base_parameters"]]
    else:
        lines.append("Every parameter is identifiable from these data (full-rank sensitivity).")
    lines += ["", "## Figures", ""]
    for f in R.get("figures", []):
        lines += [f"![{f}]({f})", ""]
    rms = ", ".join(f"{k}: {v:.3g}" for k, v in R["rms"].items())
    lines += [f"Unweighted rms residuals per channel group: {rms}.", ""]
    (out / "report.md").write_text("\n".join(lines))
