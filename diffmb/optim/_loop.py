"""Iteration loop shared by :mod:`.sysid` and :mod:`.trajopt`: LM, Gauss–Newton or Adam on
``½‖r(z)‖²``, one iteration at a time from Python so that every iteration can be reported
(tqdm), handed to a callback and checkpointed atomically.

The residual and its Jacobian are computed by jitted JAX functions supplied by the caller
(``res_jac(z) -> (r, J)``, ``res(z) -> r``); the small dense linear algebra of a step is numpy.

* ``"lm"``: Levenberg–Marquardt with Marquardt's diagonal scaling and Nielsen's damping update
  (Madsen, Nielsen & Tingleff, *Methods for Non-Linear Least Squares Problems*, 2004, Alg. 3.16;
  Moré 1978 for the scaling D = max over iterations of diag(JᵀJ)). A step is accepted when the
  gain ratio ρ > 0; non-finite trial residuals (a failed simulation) count as a rejection.
* ``"gn"``: Gauss–Newton step (least-squares solve of J h = −r) with backtracking (halving).
* ``"adam"``: optax.adam on ½‖r‖² (gradient Jᵀr), fixed learning rate.

Checkpoint
----------
After every iteration the loop state (z, damping μ, ν, scaling, iteration, cost history, and for
Adam the optax state) is written to ``checkpoint`` with numpy's ``.npz`` format into a temporary
file in the same folder, flushed and fsynced, then moved over the old one with ``os.replace``
(atomic on POSIX and Windows): a crash leaves either the previous or the new checkpoint, never a
torn one. If ``checkpoint`` exists when the loop starts, it resumes from it (after checking it
belongs to the same problem: parameter names, residual size and solver). No pickle is used.
"""

from __future__ import annotations

import json
import math
import os
import pathlib

import jax
import numpy as np

__all__ = ["run"]


def _save(path: pathlib.Path, meta: dict, arrays: dict):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    payload = {k: np.asarray(v) for k, v in arrays.items()}
    payload["__meta__"] = np.array(json.dumps(meta))
    with open(tmp, "wb") as fh:
        np.savez(fh, **payload)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _load(path: pathlib.Path):
    with np.load(path, allow_pickle=False) as f:
        meta = json.loads(str(f["__meta__"]))
        arrays = {k: f[k] for k in f.files if k != "__meta__"}
    return meta, arrays


def run(
    res_jac,
    res,
    z0: np.ndarray,
    *,
    solver: str = "lm",
    max_steps: int = 100,
    ftol: float = 1e-10,
    xtol: float = 1e-10,
    gtol: float = 0.0,
    learning_rate: float = 1e-2,
    progress: bool = True,
    desc: str = "fit",
    checkpoint=None,
    callback=None,
    fingerprint: dict | None = None,
) -> dict:
    """Minimise ½‖r(z)‖²; returns {z, cost, history, n_iter, success, message, resumed_from}."""
    if solver not in ("lm", "gn", "adam"):
        raise ValueError(f"solver must be 'lm', 'gn' or 'adam', got {solver!r}")
    fingerprint = dict(fingerprint or {})
    fingerprint["solver"] = solver
    z = np.array(z0, dtype=float)
    st = {"mu": None, "nu": 2.0, "k": 0, "done": False, "message": "", "history": []}
    D = None
    opt = opt_state = None
    if solver == "adam":
        import optax

        opt = optax.adam(learning_rate)
        opt_state = opt.init(jax.numpy.asarray(z))
    resumed_from = None
    if checkpoint is not None and pathlib.Path(checkpoint).exists():
        meta, arr = _load(pathlib.Path(checkpoint))
        if meta.get("fingerprint") != json.loads(json.dumps(fingerprint)):
            raise ValueError(
                f"checkpoint {checkpoint} belongs to a different problem "
                f"({meta.get('fingerprint')} != {fingerprint}); delete it or choose another path"
            )
        z = arr["z"].astype(float)
        D = arr["D"] if "D" in arr else None
        st.update(meta["state"])
        if solver == "adam":
            leaves, tdef = jax.tree.flatten(opt_state)
            opt_state = jax.tree.unflatten(
                tdef, [jax.numpy.asarray(arr[f"opt{i}"]) for i in range(len(leaves))]
            )
        resumed_from = st["k"]

    def save():
        if checkpoint is None:
            return
        arrays = {"z": z}
        if D is not None:
            arrays["D"] = D
        if solver == "adam":
            for i, leaf in enumerate(jax.tree.leaves(opt_state)):
                arrays[f"opt{i}"] = np.asarray(leaf)
        _save(pathlib.Path(checkpoint), {"fingerprint": fingerprint, "state": st}, arrays)

    def cost_of(r):
        r = np.asarray(r)
        return 0.5 * float(r @ r) if np.all(np.isfinite(r)) else math.inf

    bar = None
    try:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_steps, initial=min(st["k"], max_steps), desc=desc,
                   disable=not progress, leave=False)
    except ImportError:  # pragma: no cover
        pass

    r, J = (np.asarray(a) for a in res_jac(z))
    F = cost_of(r)
    if not math.isfinite(F):
        raise FloatingPointError(f"{desc}: the residual is not finite at the initial guess")
    if not st["history"]:
        st["history"].append({"iteration": 0, "cost": F})
    while not st["done"] and st["k"] < max_steps:
        g = J.T @ r
        accepted = False
        if solver == "lm":
            A = J.T @ J
            dA = np.diag(A).copy()
            D = dA if D is None else np.maximum(D, dA)
            Ds = np.where(D > 0, D, 1.0)
            if st["mu"] is None:
                st["mu"] = 1e-3
            h = np.linalg.solve(A + st["mu"] * np.diag(Ds), -g)
            if np.linalg.norm(h) <= xtol * (np.linalg.norm(z) + xtol):
                st["done"], st["message"] = True, "converged (step below xtol)"
            else:
                r_new = np.asarray(res(z + h))
                F_new = cost_of(r_new)
                pred = 0.5 * float(h @ (st["mu"] * Ds * h - g))
                rho = (F - F_new) / pred if pred > 0 else -1.0
                if math.isfinite(F_new) and rho > 0:
                    accepted, z = True, z + h
                    st["mu"] *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                    st["nu"] = 2.0
                else:
                    st["mu"] *= st["nu"]
                    st["nu"] *= 2.0
        elif solver == "gn":
            h = np.linalg.lstsq(J, -r, rcond=None)[0]
            if np.linalg.norm(h) <= xtol * (np.linalg.norm(z) + xtol):
                st["done"], st["message"] = True, "converged (step below xtol)"
            else:
                a = 1.0
                for _ in range(30):
                    F_new = cost_of(res(z + a * h))
                    if F_new < F:
                        accepted, z = True, z + a * h
                        break
                    a *= 0.5
                if not accepted:
                    st["done"], st["message"] = True, "no descent along the Gauss–Newton step"
        else:
            import optax

            upd, opt_state = opt.update(jax.numpy.asarray(g), opt_state)
            z = np.asarray(optax.apply_updates(jax.numpy.asarray(z), upd))
            accepted = True
        if accepted:
            r, J = (np.asarray(a) for a in res_jac(z))
            F_prev, F = F, cost_of(r)
            if solver != "adam" and F_prev - F <= ftol * F_prev:
                st["done"], st["message"] = True, "converged (relative cost reduction below ftol)"
            if gtol > 0 and np.max(np.abs(J.T @ r)) <= gtol:
                st["done"], st["message"] = True, "converged (gradient below gtol)"
        st["k"] += 1
        st["history"].append(
            {"iteration": st["k"], "cost": F, "accepted": bool(accepted),
             **({"mu": st["mu"]} if solver == "lm" else {})}
        )
        save()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(cost=f"{F:.6g}")
        if callback is not None:
            callback({"iteration": st["k"], "cost": F, "z": z.copy(), "accepted": accepted})
    if bar is not None:
        bar.close()
    if not st["done"]:
        st["message"] = f"stopped after max_steps = {max_steps} iterations"
    success = st["done"] or solver == "adam"
    save()
    return {
        "z": z,
        "r": r,
        "J": J,
        "cost": F,
        "history": st["history"],
        "n_iter": st["k"],
        "success": bool(success),
        "message": st["message"],
        "resumed_from": resumed_from,
    }
