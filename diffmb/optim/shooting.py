"""Multiple shooting, shared by :func:`~diffmb.optim.fit` and :func:`~diffmb.optim.trajopt`.

A horizon is cut into segments, each simulated from its own initial state; those states are
unknowns of the optimisation next to the parameters, and continuity at each junction enters as
residuals (Bock & Plitt 1984; Voss, Timmer & Kurths 2004). Long or chaotic horizons then stay
near the data (or the target) during the optimisation instead of diverging.

* A segment's state is parameterised around a reference configuration ``q_ref`` as
  ``s = [dq (nv), v (nv)]`` with ``q0 = q_ref ⊕ dq`` (:func:`start_state`; ⊕ is
  :func:`~diffmb.dynamics.configuration.integrate`), so the unknowns are unconstrained and
  quaternions stay unit.
* The continuity residual of a junction from segment a to segment b is
  ``w [q_end,a ⊖ q0,b, v_end,a − v0,b]`` (2 nv, :func:`continuity`; ⊖ is
  :func:`~diffmb.dynamics.configuration.difference`).
* Segments are simulated in local time from 0, so segments of equal length share one compiled
  simulation (``vmap``); a control is evaluated at ``t + offset`` (:class:`Shifted`).
* Initial guesses: from measured samples (:func:`state_from_samples`, for identification) or on
  the straight line from the start to a target (:func:`states_on_line`, for trajectories).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..dynamics.configuration import difference, integrate
from ..model import Model

__all__ = ["Segment", "segments", "junctions", "start_state", "continuity", "Shifted",
           "state_from_samples", "states_on_line"]


@dataclasses.dataclass(frozen=True)
class Segment:
    """Samples ``a..b`` (inclusive) of record ``rec``; ``last``: the record's last segment
    (the sample ``b`` of any other segment is the next segment's first)."""

    rec: int
    a: int
    b: int
    last: bool


def segments(lengths: Sequence[int], n_segments: int) -> list[Segment]:
    """Cut records of ``lengths[i]`` samples each into ``n_segments`` nearly equal segments
    (at most ``n − 1``: a segment spans at least one interval), in record order."""
    segs = []
    for i, n in enumerate(lengths):
        S = max(1, min(int(n_segments), n - 1))
        bnd = np.unique(np.round(np.linspace(0, n - 1, S + 1)).astype(int))
        for s in range(len(bnd) - 1):
            segs.append(Segment(i, int(bnd[s]), int(bnd[s + 1]), s == len(bnd) - 2))
    return segs


def junctions(segs: Sequence[Segment]) -> list[tuple[int, int]]:
    """Pairs (a, a + 1) of consecutive segments of the same record."""
    return [(i, i + 1) for i in range(len(segs) - 1) if segs[i].rec == segs[i + 1].rec]


def start_state(model: Model, q_ref, s):
    """(q0 (nq,), v0 (nv,)) of a segment from its unknowns ``s = [dq, v]`` (2 nv,)."""
    nv = model.nv
    return integrate(model, q_ref, s[:nv], 1.0), s[nv:]


def continuity(model: Model, q_end, v_end, q_next, v_next, weight):
    """``weight · [q_end ⊖ q_next, v_end − v_next]`` (2 nv,): zero when the segment that ends
    in (q_end, v_end) meets the next one's start (q_next, v_next)."""
    return weight * jnp.concatenate([difference(model, q_next, q_end), v_end - v_next])


class Shifted(eqx.Module):
    """A control evaluated at ``t + offset`` (segments are simulated in local time)."""

    base: object
    offset: jnp.ndarray

    def __call__(self, t, q=None, v=None, params=None):
        return self.base(t + self.offset, q, v, params)


def state_from_samples(model: Model, t, q, v, a: int, q0=None, v0=None):
    """(q_ref (nq,), v (nv,)): a first guess of the state at sample ``a`` of a record.

    q: the measured sample (``q0`` if q is not measured); v: measured, else the central (one-
    sided at the ends) finite difference of q, else ``v0`` (zero if None).
    """
    q_ref = np.asarray(q[a]) if q is not None else np.asarray(q0)
    if v is not None:
        vs = np.asarray(v[a])
    elif q is not None:
        n = len(t)
        i0, i1 = (a, a + 1) if a == 0 else ((a - 1, a + 1) if a + 1 < n else (a - 1, a))
        d = np.asarray(difference(model, jnp.asarray(q[i0]), jnp.asarray(q[i1])))
        vs = d / (t[i1] - t[i0])
    else:
        vs = np.zeros(model.nv) if v0 is None else np.asarray(v0)
    return q_ref, vs


def states_on_line(model: Model, q0, q_target, t1: float, n_segments: int):
    """(q_refs (S − 1, nq), s0 (S − 1, 2 nv)): references and unknowns of the states at the
    interior junctions ``k t1 / S`` on the straight line from ``q0`` to ``q_target`` travelled
    at constant speed (at rest at ``q0`` if ``q_target`` is None)."""
    S, nv = int(n_segments), model.nv
    fr = np.arange(1, S) / S
    if q_target is not None:
        dtot = np.asarray(difference(model, jnp.asarray(q0), jnp.asarray(q_target)))
        q_refs = np.stack([np.asarray(integrate(model, jnp.asarray(q0), jnp.asarray(dtot * f),
                                                1.0)) for f in fr])
        v_line = dtot / t1
    else:
        q_refs = np.stack([np.asarray(q0)] * (S - 1))
        v_line = np.zeros(nv)
    s0 = np.concatenate([np.zeros((S - 1, nv)), np.tile(v_line, (S - 1, 1))], axis=1)
    return q_refs, s0
