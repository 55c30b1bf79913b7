"""A compiled MuJoCo model in absolute coordinates: the bodies and joints of a
``mujoco.MjModel`` as a :class:`~diffmb.formulations.maximal.MaximalSystem`, and a MuJoCo state
as ``(u, udot)`` (centre-of-mass positions and body quaternions, their rates)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..formulations import maximal as mx
from ..spatial import quaternion as quat

__all__ = ["maximal_from_mjmodel", "state_from_mjdata"]


def _rotmat(q):
    return np.asarray(quat.to_rotmat(jnp.asarray(q, dtype=jnp.float64)))


def _qmul(p, q):
    return np.asarray(quat.mul(jnp.asarray(p, dtype=jnp.float64), jnp.asarray(q, dtype=jnp.float64)))


def maximal_from_mjmodel(mj, qpos=None):
    """Convert a compiled ``mujoco.MjModel`` to ``(MaximalSystem, u)`` at ``qpos`` (default qpos0).

    Each MuJoCo body becomes a body whose quaternion is its MuJoCo body frame (``xquat``) and
    whose position is its centre of mass (``xipos``); the inertia is rotated into body axes.
    ``ball`` -> spherical, ``hinge`` -> revolute, ``free`` -> nothing, no joint -> fixed (to the
    pose at ``qpos``). Slide joints and bodies with several joints are not supported (error).
    Gravity comes from ``<option gravity>``. Massless bodies are rejected.
    ``mj``: a ``mujoco.MjModel`` (e.g. ``mujoco.MjModel.from_xml_path(path)``).
    """
    import mujoco

    from .mjcf import object_name

    d = mujoco.MjData(mj)
    if qpos is not None:
        d.qpos[:] = np.asarray(qpos, float)
    mujoco.mj_forward(mj, d)
    bodies, joints = [], []
    poses = {}
    for i in range(1, mj.nbody):
        nm = object_name(mj, "BODY", i)
        Ri = _rotmat(mj.body_iquat[i])
        J = Ri @ np.diag(mj.body_inertia[i]) @ Ri.T
        bodies.append(mx.Body(nm, float(mj.body_mass[i]), 0.5 * (J + J.T)))
        poses[i] = (np.array(d.xipos[i]), np.array(d.xquat[i]) / np.linalg.norm(d.xquat[i]))
    poses[0] = (np.zeros(3), np.array([1.0, 0, 0, 0]))

    def local(i, xw):
        r, q = poses[i]
        return _rotmat(q).T @ (np.asarray(xw) - r)

    def local_dir(i, aw):
        return _rotmat(poses[i][1]).T @ np.asarray(aw)

    for i in range(1, mj.nbody):
        par = int(mj.body_parentid[i])
        js = [j for j in range(mj.njnt) if mj.jnt_bodyid[j] == i]
        bname = bodies[i - 1].name
        a = par - 1
        if len(js) > 1:
            raise ValueError(f"body {bname!r}: {len(js)} joints on one body are not supported")
        if not js:
            r, q = poses[i]
            qa = poses[par][1]
            qrel = _qmul(qa * np.array([1.0, -1, -1, -1]), q)
            joints.append(mx.Joint("fixed", a, i - 1, local(par, r), np.zeros(3), q_rel=qrel,
                                name=f"{bname}_weld"))
            continue
        j = js[0]
        jt = int(mj.jnt_type[j])
        jn = object_name(mj, "JOINT", j)
        anchor = np.array(d.xanchor[j])
        if jt == int(mujoco.mjtJoint.mjJNT_FREE):
            continue
        if jt == int(mujoco.mjtJoint.mjJNT_BALL):
            joints.append(mx.Joint("spherical", a, i - 1, local(par, anchor), local(i, anchor),
                                name=jn))
        elif jt == int(mujoco.mjtJoint.mjJNT_HINGE):
            ax = np.array(d.xaxis[j])
            joints.append(mx.Joint("revolute", a, i - 1, local(par, anchor), local(i, anchor),
                                axis_a=local_dir(par, ax), axis_b=local_dir(i, ax), name=jn))
        else:
            raise ValueError(f"joint {jn!r}: slide joints are not supported in maximal coords")
    for b in bodies:
        if b.mass <= 0:
            raise ValueError(f"body {b.name!r}: massless bodies are not supported")
    sysm = mx.build_system(bodies, joints, gravity=np.array(mj.opt.gravity, float))
    u = np.concatenate([np.concatenate(poses[i]) for i in range(1, mj.nbody)])
    return sysm, jnp.asarray(u)


def state_from_mjdata(mj, d):
    """``(u, udot)`` of a MuJoCo state (after ``mj_forward``): COM positions, body quaternions,
    COM velocities and quaternion rates ``qdot = 1/2 q (x) [0, omega_body]``."""
    import mujoco

    us, uds = [], []
    res = np.zeros(6)
    for i in range(1, mj.nbody):
        q = np.array(d.xquat[i])
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_BODY, i, res, 0)
        w_world, v_com = res[:3].copy(), res[3:].copy()
        w_body = _rotmat(q).T @ w_world
        qd = 0.5 * _qmul(q, np.r_[0.0, w_body])
        us.append(np.concatenate([d.xipos[i], q]))
        uds.append(np.concatenate([v_com, qd]))
    return jnp.asarray(np.concatenate(us)), jnp.asarray(np.concatenate(uds))
