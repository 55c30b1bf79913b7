"""Every published URDF of example-robot-data that Pinocchio loads, loaded by diffmb and compared
with Pinocchio: mass matrix, inverse dynamics (RNEA) and forward dynamics (ABA) at a random
configuration, fixed base (floating base where the fixed-base model has no joint).

Many of these files carry implausible but harmless inertias (round-off negative eigenvalues,
triangle-inequality violations, massless links with inertia): they load with an InertiaWarning,
as Pinocchio loads them. The files diffmb refuses are listed below with the reason, and the
reason is checked against Pinocchio itself. The full sweep is ``slow``; the fast suite covers the
four robots that were refused before (ANYmal B, HyQ, iCub, Romeo).
"""

from __future__ import annotations

import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import diffmb
from diffmb.model import InertiaWarning
from diffmb.spatial import quaternion as Q

from .oracles import PinocchioPair, erd_path, rel_err

TOL = 1e-9  # relative error max|Δ| / max(1, max|ref|), as everywhere in the suite
# Measured (slow sweep, 66 files, one random state each): M <= 1.2e-15, RNEA <= 1.3e-15,
# ABA <= 3.8e-10 (iCub, cond(M) = 1.5e7; all others <= 1e-11)
ROBOTS_DIR = erd_path("")
ALL_URDFS = sorted(
    os.path.relpath(os.path.join(d, f), ROBOTS_DIR)
    for d, _, fs in os.walk(ROBOTS_DIR)
    for f in fs
    if f.endswith(".urdf")
)

# Files Pinocchio itself refuses: not in the sweep (checked below to still be refused by both).
PINOCCHIO_REFUSES = {
    "ur_description/urdf/ur3.urdf": "an empty <robot> left over from xacro: no name, no links",
}
# Files Pinocchio loads but cannot simulate: its mass matrix is singular and its ABA returns NaN.
# diffmb refuses them with a message naming the body and joint (checked below).
SINGULAR = {
    "romeo_description/urdf/romeo.urdf": (
        "24 massless, inertia-free finger links on (mimic) revolute joints", "mass matrix would be singular"),
    "romeo_description/urdf/romeo_laas_small.urdf": (
        "massless gripper links on joints, and link 'LHipPitch_link' with inertia eigenvalue -0.0027"
        " of 0.054 kg·m² (clearly negative, not round-off)", "LHipPitch_link"),
}
# Fixed to the world these have no joint at all: compared with a free-flyer base instead.
NO_JOINT = {"hector_description/robots/quadrotor_base.urdf", "iris_description/robots/iris_simple.urdf"}
SWEEP = [r for r in ALL_URDFS if r not in PINOCCHIO_REFUSES and r not in SINGULAR]

PREVIOUSLY_REFUSED = [  # the robot files example-robot-data's loaders use for these four
    "anymal_b_simple_description/robots/anymal.urdf",
    "hyq_description/robots/hyq_no_sensors.urdf",
    "icub_description/robots/icub.urdf",
    "romeo_description/urdf/romeo_small.urdf",
]


@jax.jit
def _dynamics(model, q, v, a, tau):
    """M, RNEA and ABA in one compiled function (one compilation per robot)."""
    return (diffmb.mass_matrix(model, q), diffmb.inverse_dynamics(model, q, v, a),
            diffmb.forward_dynamics(model, q, v, tau))


def _pair(rel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InertiaWarning)
        return PinocchioPair(erd_path(rel), floating=rel in NO_JOINT)


def _compare(pair, rng):
    """Relative errors of diffmb's M, RNEA, ABA against Pinocchio's at one random state."""
    m = pair.model
    q, v, tau = pair.random_state(rng)
    a = rng.normal(size=m.nv)
    M, t, acc = (np.asarray(x) for x in _dynamics(m, q, v, a, tau))
    qp, vp, tp, perm = pair.to_pin(q, v, tau)
    _, _, ap_, _ = pair.to_pin(q, v, a)
    if "free" in m.joint_types:  # Pinocchio's free flyer: local linear velocity (see oracles.py)
        assert m.joint_types[0] == "free"
        R = np.asarray(Q.to_rotmat(jnp.asarray(q[3:7])))
        T = np.eye(m.nv)
        T[:3, :3] = R
        M = T.T @ M @ T
        t = np.array(t)
        t[:3] = R.T @ t[:3]
        ap_[:3] -= np.cross(v[3:6], R.T @ v[:3])  # a_pin_lin = Rᵀ p̈ − ω × v_lin
        acc = np.array(acc)
        acc[:3] = R.T @ acc[:3] - np.cross(v[3:6], R.T @ v[:3])
    Mp = pin.crba(pair.pm, pair.pd, qp)
    Mp = np.triu(Mp) + np.triu(Mp, 1).T
    return dict(
        M=rel_err(M[np.ix_(perm, perm)], Mp),
        rnea=rel_err(t[perm], pin.rnea(pair.pm, pair.pd, qp, vp, ap_)),
        aba=rel_err(acc[perm], pin.aba(pair.pm, pair.pd, qp, vp, tp)),
        cond=np.linalg.cond(Mp),
    )


def _check(rel, seed=0):
    errs = _compare(_pair(rel), np.random.default_rng(seed))
    print(f"{rel}: " + ", ".join(f"{k} {v:.2g}" for k, v in errs.items()))
    assert max(errs["M"], errs["rnea"]) < TOL, (rel, errs)
    # forward dynamics solves M a = τ − b: its error grows with cond(M), which exceeds the 1e6 of
    # the suite's random models on real robots (iCub 1.5e7, Tiago 4.6e6)
    assert errs["aba"] < max(TOL, 10 * np.finfo(float).eps * errs["cond"]), (rel, errs)
    return errs


# --- fast suite --------------------------------------------------------------------------------


def test_every_file_is_swept_or_listed_with_a_reason():
    assert len(ALL_URDFS) >= 60, ALL_URDFS  # the package's robots are all found
    listed = set(PINOCCHIO_REFUSES) | set(SINGULAR) | NO_JOINT
    assert listed <= set(ALL_URDFS), listed - set(ALL_URDFS)
    assert set(PREVIOUSLY_REFUSED) <= set(SWEEP)
    for rel in PINOCCHIO_REFUSES:  # Pinocchio refuses it, and so does diffmb, with a reason
        with pytest.raises(ValueError, match="valid URDF"):
            pin.buildModelFromUrdf(erd_path(rel))
        with pytest.raises(ValueError, match="no <link> elements"):
            diffmb.load_urdf(erd_path(rel))


@pytest.mark.parametrize("rel", sorted(SINGULAR))
def test_singular_files_are_refused_like_pinocchio_fails(rel):
    # Pinocchio loads the file, but its mass matrix is singular and its ABA returns NaN
    pm = pin.buildModelFromUrdf(erd_path(rel))
    pd = pm.createData()
    q = pin.randomConfiguration(pm, -np.ones(pm.nq), np.ones(pm.nq))
    M = pin.crba(pm, pd, q)
    ev = np.linalg.eigvalsh(np.triu(M) + np.triu(M, 1).T)
    assert ev[0] <= 1e-12 * ev[-1]
    assert not np.all(np.isfinite(pin.aba(pm, pd, q, np.zeros(pm.nv), np.zeros(pm.nv))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InertiaWarning)
        with pytest.raises(ValueError, match=SINGULAR[rel][1]) as e:
            diffmb.load_urdf(erd_path(rel))
    assert erd_path(rel) in str(e.value) and "body '" in str(e.value)


@pytest.mark.parametrize("rel", PREVIOUSLY_REFUSED)
def test_previously_refused_robots_load_and_agree_with_pinocchio(rel):
    with pytest.warns(InertiaWarning, match=re.escape(erd_path(rel))):
        diffmb.load_urdf(erd_path(rel))
    errs = _check(rel)
    assert errs["cond"] < 1e12  # the loaded model's mass matrix is far from singular


@pytest.mark.parametrize(
    "rel, body, numbers",
    [
        ("anymal_b_simple_description/robots/anymal.urdf", "base", "triangle inequality"),
        ("hyq_description/robots/hyq_no_sensors.urdf", "base_link", "triangle inequality"),
        ("icub_description/robots/icub.urdf", "l_ankle_2", r"eigenvalue -1.36e-20 < 0 at round-off"),
        ("romeo_description/urdf/romeo_small.urdf", "RShoulderYawLink",
         r"0.00134114 < 0.00656531"),
        ("tiago_description/robots/tiago.urdf", "base_antenna_left_link", "welded to the world"),
        ("bolt_description/robots/bolt.urdf", "FL_FOOT", "zero mass with non-zero inertia"),
    ],
)
def test_warning_names_the_body_and_strict_refuses(rel, body, numbers):
    path = erd_path(rel)
    with pytest.warns(InertiaWarning) as rec:
        diffmb.load_urdf(path)
    msgs = [str(w.message) for w in rec if issubclass(w.category, InertiaWarning)]
    assert any(f"body {body!r}" in s and path in s and numbers in s for s in msgs), msgs
    with pytest.raises(ValueError, match="strict=True") as e:
        diffmb.load_urdf(path, strict=True)
    assert path in str(e.value) and "body '" in str(e.value)


# --- slow: the whole collection ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("rel", SWEEP)
def test_every_published_urdf_agrees_with_pinocchio(rel):
    _check(rel, seed=1)
