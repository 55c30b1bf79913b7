"""The least-squares core of :mod:`diffmb.optim`: every fit and every trajectory optimisation
minimises ``½‖r(z)‖²`` with :func:`solve`, and reports statistics with :func:`covariance`.

:func:`solve` iterates from Python, one step at a time, so that every iteration is shown (tqdm),
handed to a callback and checkpointed. The caller supplies ``res_jac(z) -> (r, J)`` (jitted JAX;
the small dense linear algebra of a step is numpy) and, optionally, a cheaper ``res(z) -> r``
for trial points (without it trial points are evaluated by ``res_jac``, and an accepted trial's
Jacobian is reused).

* ``"lm"``: Levenberg–Marquardt with Marquardt's diagonal scaling and Nielsen's damping update
  (Madsen, Nielsen & Tingleff, *Methods for Non-Linear Least Squares Problems*, 2004, Alg. 3.16;
  Moré 1978 for the scaling D = max over iterations of diag(JᵀJ)). A step is accepted when the
  gain ratio ρ > 0; non-finite trial residuals (a failed simulation) count as a rejection.
* ``"gn"``: Gauss–Newton step (least-squares solve of J h = −r) with backtracking (halving).
* ``"adam"``: optax.adam on ½‖r‖² (gradient Jᵀr), fixed learning rate.

It stops when a step is below ``xtol·‖z‖ + atol``, when an accepted step lowers the cost by
less than ``ftol`` relatively, when ``max|Jᵀr| ≤ gtol`` (if ``gtol > 0``), when the relative
offset is below ``offset_tol`` (if ``offset_tol > 0``), or after ``max_steps`` iterations (then
``success`` is False; Adam always runs ``max_steps``).

The relative offset (Bates & Watts 1981, "A relative offset orthogonality convergence
criterion for nonlinear least squares", *Technometrics* 23:179) measures the distance to the
least-squares solution against the statistical uncertainty: with P the projection on the
columns of J, m the informative residuals (rows not identically zero) and n the unknowns,

    √(‖P r‖² / n) / √(‖r − P r‖² / (m − n)),

the Gauss–Newton step's length over the radius of the confidence region. 1e-3, their
suggestion, leaves every estimate within a thousandth of that radius of the optimum; it saves
the last iterations that move the estimates by a small fraction of their standard errors.

Checkpoint
----------
After every iteration the loop state (z, damping μ, ν, scaling, iteration, cost history, and for
Adam the optax state) is written to ``checkpoint`` with numpy's ``.npz`` format into a temporary
file in the same folder, flushed and fsynced, then moved over the old one with ``os.replace``
(atomic on POSIX and Windows): a crash leaves either the previous or the new checkpoint, never a
torn one. If ``checkpoint`` exists when the loop starts, it resumes from it (after checking it
belongs to the same problem: the caller's fingerprint, the solver and the number of unknowns).
A file there that is not such a checkpoint (not an ``.npz``, truncated or corrupt, without
diffmb's metadata) or that belongs to another problem is refused with a ``ValueError`` naming
the file and the reason (:func:`read_checkpoint`); it is never overwritten. No pickle is used.

Named parameters
----------------
``least_squares(residual_fn, params0, args)`` is the front end for named scalar parameters,
solved in transformed coordinates (:class:`~diffmb.optim.params.Transform`):

* ``positive`` names: ``p = exp(z)``;
* a lower bound only: ``p = lo + exp(z)``; an upper bound only: ``p = hi − exp(z)``;
* both bounds: ``p = lo + (hi − lo) σ(z)`` with σ the logistic function;
* otherwise ``p = z``.

Statistics
----------
At the optimum the Jacobian ``J = ∂r/∂p`` is taken in the *original* coordinates (the transform
is diagonal: ``J_p = J_z / (dp/dz)``), and

    s² = ‖r‖² / (m − n_p),   cov = s² (JᵀJ)⁻¹,   std = √diag(cov)

(the Gauss–Newton / Fisher approximation, e.g. Seber & Wild, *Nonlinear Regression*, §2.1).
Identifiability is judged on the column-scaled Jacobian ``J diag(|p|)`` (relative sensitivities;
columns of zero-valued parameters are left unscaled) by its singular values: any singular value
below ``rank_rtol · σ_max`` names the parameters with a large component in its right singular
vector; they are reported in a ``UserWarning``, their standard errors are ``inf`` and the
covariance uses the pseudo-inverse.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import warnings
from collections.abc import Callable, Iterable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .params import Transforms, bounded

__all__ = ["LSQResult", "least_squares", "covariance", "UnidentifiableWarning", "solve",
           "Solution", "read_checkpoint"]

SOLVERS = ("lm", "gn", "adam")


class UnidentifiableWarning(UserWarning):
    """The data cannot identify some parameters (rank-deficient Fisher information)."""


# ----------------------------------------------------------------------------------------------
# The iteration
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Solution:
    """Outcome of :func:`solve`: ``z`` (n,), ``r`` (m,) and ``J`` (m, n) at z, ``cost`` = ½‖r‖²,
    ``history`` (one dict per iteration: iteration, cost, accepted, mu), ``n_iter``,
    ``success``, ``message``, ``resumed_from`` (the iteration a checkpoint held, or None),
    ``converged``: a convergence test held (``message`` says which; False when ``max_steps``
    ended the loop, and always for Adam, which has none)."""

    z: np.ndarray
    r: np.ndarray
    J: np.ndarray
    cost: float
    history: list
    n_iter: int
    success: bool
    message: str
    resumed_from: int | None
    converged: bool = False


_STATE_KEYS = ("mu", "nu", "k", "done", "message", "history")


def _save(path: pathlib.Path, meta: dict, arrays: dict):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    payload = {k: np.asarray(v) for k, v in arrays.items()}
    payload["__meta__"] = np.array(json.dumps(meta))
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # an interrupt while writing: the previous checkpoint stays
        tmp.unlink(missing_ok=True)
        raise


def read_checkpoint(path) -> tuple[dict, dict]:
    """``(meta, arrays)`` of a checkpoint written by :func:`solve`: ``meta`` holds
    ``fingerprint``, ``state`` (``k`` the iterations done, ``done``, ``history``, ...) and, when
    the caller named them, ``cost`` and ``params`` of the saved iterate; ``arrays`` holds ``z``.

    Raises ``ValueError`` naming the file and the reason when it is not such a checkpoint: not
    readable, not an ``.npz`` file, truncated or corrupt, or without diffmb's metadata.
    """
    path = pathlib.Path(path)

    def bad(why):
        return ValueError(f"checkpoint {path}: {why}; delete it or choose another path")

    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror or e})") from None
    if not head:
        raise bad("the file is empty")
    if head != b"PK\x03\x04":
        raise bad("not a checkpoint (not an .npz file)")
    try:
        with np.load(path, allow_pickle=False) as f:
            files = list(f.files)
            raw = f["__meta__"] if "__meta__" in files else None
            arrays = {k: np.asarray(f[k]) for k in files if k != "__meta__"}
    except Exception as e:  # zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, ...
        raise bad(f"truncated or corrupt .npz file ({type(e).__name__}: {e})") from None
    if raw is None:
        raise bad("an .npz file without diffmb's '__meta__' entry, not a checkpoint of "
                  "diffmb.optim")
    try:
        meta = json.loads(str(raw)) if raw.ndim == 0 and raw.dtype.kind == "U" else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise bad("its '__meta__' entry is not diffmb's JSON metadata")
    state = meta.get("state")
    missing = [k for k in _STATE_KEYS if not isinstance(state, dict) or k not in state]
    if not isinstance(meta.get("fingerprint"), dict) or missing:
        raise bad("its metadata lacks " + ", ".join(
            (["fingerprint"] if not isinstance(meta.get("fingerprint"), dict) else [])
            + [f"state.{k}" for k in missing]))
    if not isinstance(state["k"], int) or state["k"] < 0 or not isinstance(state["history"], list):
        raise bad(f"its metadata is inconsistent (iteration {state['k']!r})")
    z = arrays.get("z")
    if z is None or z.ndim != 1 or z.dtype.kind != "f" or not np.all(np.isfinite(z)):
        raise bad("no finite iterate 'z' (a 1-D float array) in it")
    return meta, arrays


def _check_fingerprint(path, meta: dict, fingerprint: dict):
    """Refuse a checkpoint of another problem, naming what differs."""
    saved = meta["fingerprint"]
    if saved == json.loads(json.dumps(fingerprint)):
        return
    keys = sorted(set(saved) | set(fingerprint), key=str)
    diff = []
    for k in keys:
        a, b = saved.get(k, "(absent)"), json.loads(json.dumps(fingerprint.get(k, "(absent)")))
        if a != b:
            shown = lambda x: (repr(x) if len(repr(x)) <= 60 else repr(x)[:57] + "...")
            diff.append(f"{k}: saved {shown(a)}, now {shown(b)}")
    raise ValueError(f"checkpoint {path} belongs to a different problem ({'; '.join(diff)}); "
                     "delete it or choose another path")


def _jsonable(x):
    """Numbers and arrays in nested dicts as JSON-able floats and lists."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    a = np.asarray(x, dtype=float)
    return float(a) if a.ndim == 0 else a.tolist()


def _cost(r) -> float:
    r = np.asarray(r)
    return 0.5 * float(r @ r) if np.all(np.isfinite(r)) else math.inf


def _relative_offset(J, r, g, A=None) -> float:
    """Bates and Watts' relative offset of the iterate (see the module docstring), g = Jᵀr and
    A = JᵀJ (computed if not given); inf when there are no more informative residuals than
    unknowns."""
    m = int(np.count_nonzero(np.any(J != 0, axis=1) | (r != 0)))
    n = J.shape[1]
    if m <= n:
        return math.inf
    d = np.linalg.norm(J, axis=0)
    d = np.where(d > 0, d, 1.0)  # columns scaled to unit norm: units do not matter
    A, gs = (J.T @ J if A is None else A) / np.outer(d, d), g / d
    p2 = max(float(gs @ np.linalg.lstsq(A, gs, rcond=None)[0]), 0.0)  # ‖P r‖² = gᵀ(JᵀJ)⁺g
    rest = max(float(r @ r) - p2, 0.0)
    return math.inf if rest == 0.0 else math.sqrt((p2 / n) / (rest / (m - n)))


class _Loop:
    """The iteration's state (what a checkpoint holds: z, μ, ν, the scaling D, the iteration,
    the cost history and Adam's optax state) and its steps."""

    def __init__(self, res_jac, res, z0, solver, learning_rate, xtol, atol):
        self.res_jac, self.res, self.solver = res_jac, res, solver
        self.xtol, self.atol = xtol, atol
        self.z = np.array(z0, dtype=float)
        self.st = {"mu": None, "nu": 2.0, "k": 0, "done": False, "message": "", "history": []}
        self.D = None
        self.opt = self.opt_state = None
        self._last: dict = {}
        if solver == "adam":
            import optax

            self.opt = optax.adam(learning_rate)
            self.opt_state = self.opt.init(jnp.asarray(self.z))

    def eval_rj(self, z):
        """``res_jac`` with a one-entry cache (an accepted trial's J is reused)."""
        key = np.asarray(z, float).tobytes()
        if self._last.get("key") != key:
            r_, J_ = self.res_jac(z)
            self._last.update(key=key, rj=(np.asarray(r_), np.asarray(J_)))
        return self._last["rj"]

    def eval_r(self, z):
        return np.asarray(self.res(z)) if self.res is not None else self.eval_rj(z)[0]

    def resume(self, checkpoint, fingerprint) -> int:
        """Load the state of ``checkpoint`` (refused when it belongs to another problem)."""
        meta, arr = read_checkpoint(checkpoint)
        _check_fingerprint(checkpoint, meta, fingerprint)
        if arr["z"].shape != self.z.shape:
            raise ValueError(f"checkpoint {checkpoint} belongs to a different problem (its "
                             f"iterate has {arr['z'].size} unknowns, this problem "
                             f"{self.z.size}); delete it or choose another path")
        self.z = arr["z"].astype(float)
        self.D = arr["D"] if "D" in arr else None
        self.st.update({k: meta["state"][k] for k in _STATE_KEYS})
        if self.solver == "adam":
            leaves, tdef = jax.tree.flatten(self.opt_state)
            saved = [arr.get(f"opt{i}") for i in range(len(leaves))]
            if any(a is None or a.shape != np.shape(l) for a, l in zip(saved, leaves,
                                                                       strict=True)):
                raise ValueError(f"checkpoint {checkpoint}: its Adam state does not match this "
                                 "problem; delete it or choose another path")
            self.opt_state = jax.tree.unflatten(tdef, [jnp.asarray(a) for a in saved])
        return self.st["k"]

    def save(self, checkpoint, fingerprint, F, params_of):
        if checkpoint is None:
            return
        arrays = {"z": self.z}
        if self.D is not None:
            arrays["D"] = self.D
        if self.solver == "adam":
            for i, leaf in enumerate(jax.tree.leaves(self.opt_state)):
                arrays[f"opt{i}"] = np.asarray(leaf)
        meta = {"fingerprint": fingerprint, "state": self.st, "cost": F}
        if params_of is not None:
            meta["params"] = _jsonable(params_of(self.z))
        _save(pathlib.Path(checkpoint), meta, arrays)

    def _small(self, h) -> bool:
        if np.linalg.norm(h) <= self.xtol * np.linalg.norm(self.z) + self.atol:
            self.st["done"], self.st["message"] = True, "converged (step below xtol)"
            return True
        return False

    def lm_step(self, F, g, A) -> bool:
        """One Levenberg–Marquardt trial (Nielsen's damping update); True when accepted."""
        st = self.st
        dA = np.diag(A).copy()
        self.D = dA if self.D is None else np.maximum(self.D, dA)
        Ds = np.where(self.D > 0, self.D, 1.0)
        if st["mu"] is None:
            st["mu"] = 1e-3
        h = np.linalg.solve(A + st["mu"] * np.diag(Ds), -g)
        if self._small(h):
            return False
        F_new = _cost(self.eval_r(self.z + h))
        pred = 0.5 * float(h @ (st["mu"] * Ds * h - g))
        rho = (F - F_new) / pred if pred > 0 else -1.0
        if math.isfinite(F_new) and rho > 0:
            self.z = self.z + h
            st["mu"] *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
            st["nu"] = 2.0
            return True
        st["mu"] *= st["nu"]
        st["nu"] *= 2.0
        return False

    def gn_step(self, F, J, r) -> bool:
        """One Gauss–Newton step with backtracking (halving); True when accepted."""
        h = np.linalg.lstsq(J, -r, rcond=None)[0]
        if self._small(h):
            return False
        a = 1.0
        for _ in range(30):
            if _cost(self.eval_r(self.z + a * h)) < F:
                self.z = self.z + a * h
                return True
            a *= 0.5
        self.st["done"], self.st["message"] = True, "no descent along the Gauss–Newton step"
        return False

    def adam_step(self, g) -> bool:
        import optax

        upd, self.opt_state = self.opt.update(jnp.asarray(g), self.opt_state)
        self.z = np.asarray(optax.apply_updates(jnp.asarray(self.z), upd))
        return True

    def iterate(self, r, J, F, ftol, gtol, offset_tol, ptol=0.0, n_params=None):
        """One iteration from (r, J, F) at z: ``(r, J, F, accepted)`` after it, or None when the
        relative offset says the iterate has converged."""
        st, solver = self.st, self.solver
        z_before = self.z.copy()
        g = J.T @ r
        A = J.T @ J if solver == "lm" or offset_tol > 0 else None
        if offset_tol > 0 and solver != "adam" and _relative_offset(J, r, g, A) < offset_tol:
            st["done"] = True
            st["message"] = f"converged (relative offset below {offset_tol:g})"
            return None
        if solver == "lm":
            accepted = self.lm_step(F, g, A)
        elif solver == "gn":
            accepted = self.gn_step(F, J, r)
        else:
            accepted = self.adam_step(g)
        if accepted:
            r, J = self.eval_rj(self.z)
            F_prev, F = F, _cost(r)
            if solver != "adam" and F_prev - F <= ftol * F_prev:
                st["done"] = True
                st["message"] = "converged (relative cost reduction below ftol)"
            if gtol > 0 and np.max(np.abs(J.T @ r)) <= gtol:
                st["done"], st["message"] = True, "converged (gradient below gtol)"
            if ptol > 0 and solver != "adam" and not st["done"] and _within_errors(
                    self.z - z_before, J, F, ptol, n_params):
                st["done"] = True
                st["message"] = (f"converged (parameter step below ptol = {ptol:g} of its "
                                 "standard error)")
        st["k"] += 1
        st["history"].append({"iteration": st["k"], "cost": F, "accepted": bool(accepted),
                              **({"mu": st["mu"]} if solver == "lm" else {})})
        return r, J, F, accepted


def _within_errors(h, J, F, ptol, n_params=None) -> bool:
    """Whether the step ``h`` moved each of the first ``n_params`` unknowns (default all) by
    at most ``ptol`` of its standard error at the new iterate, s √((JᵀJ)⁻¹ᵢᵢ) with
    s² = 2F/(m − n): a step the data cannot tell from no step (the others, e.g. the states of
    multiple shooting, are nuisance unknowns)."""
    m, n = J.shape
    k = n if n_params is None else int(n_params)
    if m <= n or k == 0:
        return False
    cov = np.linalg.pinv(J.T @ J) * (2.0 * F / (m - n))
    se = np.sqrt(np.maximum(np.diag(cov)[:k], 0.0))
    return bool(np.all(np.abs(h[:k]) <= ptol * se))


def _bar(max_steps, initial, desc, progress):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=max_steps, initial=min(initial, max_steps), desc=desc,
                disable=not progress, leave=False)


def solve(res_jac: Callable, z0, *, res: Callable | None = None, solver: str = "lm",
          max_steps: int = 100, ftol: float = 1e-10, xtol: float = 1e-10,
          atol: float | None = None, gtol: float = 0.0, offset_tol: float = 0.0,
          ptol: float = 0.0, n_params: int | None = None,
          learning_rate: float = 1e-2, progress: bool = True, desc: str = "fit",
          checkpoint=None, callback: Callable | None = None, fingerprint: dict | None = None,
          params_of: Callable | None = None) -> Solution:
    """Minimise ½‖r(z)‖² from ``z0`` (n,) (see the module docstring).

    Args:
        res_jac: ``z -> (r (m,), J (m, n))``; res: ``z -> r`` for trial points (optional).
        solver: ``"lm"``, ``"gn"`` or ``"adam"``; max_steps: iteration cap.
        ftol, xtol, atol, gtol, offset_tol: stopping tolerances (``atol`` defaults to
            ``xtol²``; ``offset_tol`` is the relative offset's, not for Adam).
        ptol: stop when an accepted step moved each of the first ``n_params`` unknowns
            (default all) by at most ``ptol`` of its standard error (0: off; not for Adam).
        learning_rate: Adam's. progress: tqdm bar labelled ``desc``.
        checkpoint: path of the resumable state file; fingerprint: a JSON-able dict that
            identifies the problem (a checkpoint of another problem is refused).
        callback: ``callback({"iteration", "cost", "z", "accepted"})`` after each iteration
            (with ``"params"`` when ``params_of`` is given).
        params_of: ``z -> {name: value}``, the named parameters of an iterate: stored in the
            checkpoint (``meta["params"]``, with ``meta["cost"]``) for whoever reads it.

    Returns:
        :class:`Solution`; ``success`` is False when ``max_steps`` ended the loop before a
        convergence test held (Adam, which has none, always runs ``max_steps``).

    Raises:
        ValueError: ``checkpoint`` exists but is not a checkpoint (see :func:`read_checkpoint`)
            or belongs to another problem (``fingerprint``, solver or size differ).
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be 'lm', 'gn' or 'adam', got {solver!r}")
    atol = xtol * xtol if atol is None else float(atol)
    fingerprint = {**(fingerprint or {}), "solver": solver}
    loop = _Loop(res_jac, res, z0, solver, learning_rate, xtol, atol)
    st = loop.st
    resumed_from = None
    if checkpoint is not None and pathlib.Path(checkpoint).exists():
        resumed_from = loop.resume(checkpoint, fingerprint)
    bar = _bar(max_steps, st["k"], desc, progress)
    try:  # the bar is closed also when an interrupt or an error ends the loop
        r, J = loop.eval_rj(loop.z)
        F = _cost(r)
        if not math.isfinite(F):
            raise FloatingPointError(f"{desc}: the residual is not finite at the initial guess")
        if not st["history"]:
            st["history"].append({"iteration": 0, "cost": F})
        while not st["done"] and st["k"] < max_steps:
            step = loop.iterate(r, J, F, ftol, gtol, offset_tol, ptol, n_params)
            if step is None:
                break
            r, J, F, accepted = step
            loop.save(checkpoint, fingerprint, F, params_of)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(cost=f"{F:.6g}")
            if callback is not None:
                info = {"iteration": st["k"], "cost": F, "z": loop.z.copy(), "accepted": accepted}
                if params_of is not None:
                    info["params"] = params_of(loop.z)
                callback(info)
    finally:
        if bar is not None:
            bar.close()
    if not st["done"]:
        st["message"] = f"stopped after max_steps = {max_steps} iterations"
    loop.save(checkpoint, fingerprint, F, params_of)
    return Solution(z=loop.z, r=r, J=J, cost=F, history=st["history"], n_iter=st["k"],
                    success=bool(st["done"] or solver == "adam"), message=st["message"],
                    resumed_from=resumed_from, converged=bool(st["done"]))



# ----------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------


def covariance(names, p, J, r, rank_rtol: float = 1e-8, *, warn: bool = True,
               report=None, stacklevel: int = 2, scale=None) -> dict:
    """Covariance, standard errors and identifiability from the Jacobian at an optimum.

    names (n,), p (n,) estimates, J (m, n) = ∂r/∂p in original coordinates, r (m,) residuals.
    Returns a dict with ``rss``, ``s2 = rss/(m − n)``, ``dof``, ``cov`` (n, n), ``std``
    ({name: float}, inf for unidentifiable), ``sv`` (singular values of ``J diag(|p|)``) and
    ``bad`` (names flagged, see the module docstring). ``report``: optional subset of names to
    name in the warning (others, e.g. nuisance states, are still treated as unidentifiable but
    not named); a warning is issued only if ``warn`` and a reported name is flagged. ``scale``
    (n,): the column scales of the rank test (default |p|, 1 where p = 0); pass 1 for unknowns
    whose value is no natural scale (an initial state near 0).
    """
    names = tuple(names)
    p_np = np.asarray(p, dtype=float)
    J = np.asarray(J, dtype=float)
    r = np.asarray(r, dtype=float)
    m, n_p = J.shape
    rss = float(r @ r)
    dof = m - n_p
    s2 = rss / dof if dof > 0 else float("nan")
    if scale is None:
        scale = np.where(p_np != 0.0, np.abs(p_np), 1.0)
    scale = np.asarray(scale, dtype=float)
    Js = J * scale[None, :]
    _, sv, vt = np.linalg.svd(Js, full_matrices=False)
    smax = sv[0] if sv.size else 0.0
    bad = set()
    for k, s in enumerate(sv):
        if not s > rank_rtol * smax or smax == 0.0:
            v = np.abs(vt[k])
            bad.update(names[i] for i in np.nonzero(v > 0.1 * v.max())[0])
    bad_t = tuple(n for n in names if n in bad)
    shown = bad_t if report is None else tuple(n for n in bad_t if n in set(report))
    if warn and shown:
        warnings.warn(
            "least_squares: the data cannot identify parameter(s) "
            f"{', '.join(shown)} (rank-deficient Fisher information JᵀJ; scaled singular "
            + (f"values {np.array2string(sv, precision=3)})" if sv.size <= 12 else
               f"values: largest {sv[0]:.3e}, smallest {np.array2string(sv[-3:], precision=3)})"),
            UnidentifiableWarning,
            stacklevel=stacklevel,
        )
    # covariance in scaled coordinates, pseudo-inverse with the same cut-off
    inv_s = np.where(sv > rank_rtol * smax, 1.0 / np.where(sv > 0, sv, 1.0) ** 2, 0.0)
    cov_s = (vt.T * inv_s[None, :]) @ vt
    cov = s2 * cov_s * np.outer(scale, scale)
    std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    std_d = {n: (float("inf") if n in bad else float(std[i])) for i, n in enumerate(names)}
    return {"rss": rss, "s2": s2, "dof": dof, "cov": cov, "std": std_d, "sv": sv, "bad": bad_t}


def original_jacobian(J_z, dpdz, n_p: int | None = None) -> np.ndarray:
    """``J_p = J_z (dp/dz)⁻¹`` on the first ``n_p`` columns (all if None): the Jacobian in
    original coordinates of a problem solved in transformed ones; ``dpdz`` is the diagonal (n,)
    of an entrywise transform or the full (n, n) Jacobian of a block transform."""
    J = np.array(J_z, dtype=float)
    dpdz = np.asarray(dpdz, dtype=float)
    if dpdz.ndim == 2:
        n_p = dpdz.shape[0] if n_p is None else n_p
        J[:, :n_p] = np.linalg.solve(dpdz.T, J[:, :n_p].T).T
        return J
    n_p = dpdz.size if n_p is None else n_p
    J[:, :n_p] = J[:, :n_p] / dpdz[None, :]
    return J


# ----------------------------------------------------------------------------------------------
# Named scalar parameters
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LSQResult:
    """Outcome of :func:`least_squares`; all numbers are numpy / Python floats.

    ``params`` and ``std`` map names to estimates and standard errors; ``cov`` is (n_p, n_p) in
    the order of ``names``; ``residual_norm = ‖r‖₂`` at the optimum, ``cost = ½‖r‖²``,
    ``s2`` the residual variance estimate, ``dof = m − n_p``; ``jac`` the Jacobian in original
    coordinates; ``singular_values`` those of the column-scaled Jacobian; ``unidentifiable`` the
    names flagged; ``success`` whether the solver converged within ``max_steps``;
    ``history``, ``message``, ``resumed_from``: see :class:`Solution`.
    """

    params: dict[str, float]
    std: dict[str, float]
    cov: np.ndarray
    names: tuple[str, ...]
    residual_norm: float
    cost: float
    s2: float
    dof: int
    n_steps: int
    success: bool
    jac: np.ndarray
    singular_values: np.ndarray
    unidentifiable: tuple[str, ...]
    history: list = dataclasses.field(default_factory=list)
    message: str = ""
    resumed_from: int | None = None

    @property
    def correlation(self) -> np.ndarray:
        d = np.sqrt(np.diag(self.cov))
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.cov / np.outer(d, d)


def _named_transforms(names, params0, positive, lower, upper) -> Transforms:
    """The transform of each named parameter (see the module docstring)."""
    positive = set(positive)
    lower = dict(lower or {})
    upper = dict(upper or {})
    for n in list(positive) + list(lower) + list(upper):
        if n not in params0:
            raise ValueError(f"bound or positivity given for unknown parameter {n!r}")
    items = []
    for n in names:
        try:
            items.append(bounded(lower.get(n, 0.0 if n in positive else None), upper.get(n)))
        except ValueError as e:
            raise ValueError(f"parameter {n!r}: {e}") from None
    return Transforms(tuple(items))


def least_squares(residual_fn: Callable, params0: Mapping[str, float], args=None, *,
                  positive: Iterable[str] = (), lower: Mapping[str, float] | None = None,
                  upper: Mapping[str, float] | None = None, solver: str = "lm",
                  rtol: float = 1e-10, atol: float = 1e-10, max_steps: int = 200,
                  rank_rtol: float = 1e-8, learning_rate: float = 1e-2, progress: bool = False,
                  checkpoint=None, callback: Callable | None = None) -> LSQResult:
    """Fit named scalar parameters by nonlinear least squares.

    Args:
        residual_fn: ``residual_fn(params, args) -> r`` with ``params`` a dict of scalar JAX
            arrays (keys of ``params0``) and ``r`` any pytree of arrays (flattened, m entries).
            Must be traceable by JAX (it is differentiated and jitted; array leaves of
            ``args`` are traced, so new data values do not recompile).
        params0: initial values, strictly inside any bounds.
        positive: names constrained to be > 0 (log transform).
        lower, upper: optional bounds per name (open intervals).
        solver: ``"lm"`` (Levenberg–Marquardt), ``"gn"`` (Gauss–Newton) or ``"adam"``.
        rtol, atol: stop when a step is below ``rtol·‖z‖ + atol`` or the cost falls by less
            than ``rtol`` relatively; max_steps: iteration cap (``success`` is False if hit).
        rank_rtol: relative singular-value threshold for the identifiability check.
        learning_rate: Adam's. progress: tqdm bar. checkpoint: path of the resumable state
            file (see the module docstring). callback: called after each iteration.

    Returns:
        :class:`LSQResult`. Warns :class:`UnidentifiableWarning` naming parameters the data
        cannot identify.
    """
    names = tuple(params0)
    if not names:
        raise ValueError("params0 is empty")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be 'lm', 'gn' or 'adam', got {solver!r}")
    tr = _named_transforms(names, params0, positive, lower, upper)
    z0 = tr.inverse([float(params0[n]) for n in names], names)

    def fn_z(z, a):
        p = tr.forward(z)
        r, _ = ravel_pytree(residual_fn({n: p[i] for i, n in enumerate(names)}, a))
        return r, r

    @eqx.filter_jit
    def res_jac_jit(z, a):  # r and J from one forward-mode pass (one trace of the residual)
        J, r = jax.jacfwd(fn_z, has_aux=True)(z, a)
        return r, J

    m = int(eqx.filter_eval_shape(res_jac_jit, jnp.asarray(z0), args)[0].shape[0])
    sol = solve(lambda z: res_jac_jit(jnp.asarray(z), args), z0, solver=solver,
                max_steps=max_steps, ftol=rtol, xtol=rtol, atol=atol, learning_rate=learning_rate,
                progress=progress, desc="least_squares", checkpoint=checkpoint, callback=callback,
                fingerprint={"params": list(names), "n_residuals": m},
                params_of=lambda z: dict(zip(names, np.asarray(tr.forward(jnp.asarray(z))),
                                             strict=True)))
    zj = jnp.asarray(sol.z)
    p = np.asarray(tr.forward(zj))
    J = original_jacobian(sol.J, tr.derivative(zj))
    stats = covariance(names, p, J, sol.r, rank_rtol, stacklevel=3)
    return LSQResult(
        params={n: float(p[i]) for i, n in enumerate(names)},
        std=stats["std"],
        cov=stats["cov"],
        names=names,
        residual_norm=math.sqrt(stats["rss"]),
        cost=0.5 * stats["rss"],
        s2=stats["s2"],
        dof=stats["dof"],
        n_steps=sol.n_iter,
        success=sol.success,
        jac=J,
        singular_values=stats["sv"],
        unidentifiable=stats["bad"],
        history=sol.history,
        message=sol.message,
        resumed_from=sol.resumed_from,
    )
