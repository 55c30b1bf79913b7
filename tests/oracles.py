"""Shared helpers for comparing diffmb with Pinocchio and MuJoCo (conventions converted here)."""

from __future__ import annotations

import glob
import os

import jax
import jax.numpy as jnp
import numpy as np

import diffmb


def erd_path(rel: str) -> str:
    """Path of a file installed by example-robot-data (under cmeel.prefix/share)."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    path = os.path.join(site, "cmeel.prefix", "share", "example-robot-data", "robots", rel)
    if not os.path.exists(path):
        hits = glob.glob(os.path.join(site, "**", "example-robot-data", "robots", rel), recursive=True)
        assert hits, f"example-robot-data file {rel} not found under {site}"
        path = hits[0]
    return path


def rel_err(a, ref):
    a, ref = np.asarray(a), np.asarray(ref)
    return np.abs(a - ref).max() / max(1.0, np.abs(ref).max())


@jax.jit
def all_quantities(model, q, v, tau, f_ext):
    """M, bias, ABA, CRBA-solve and RNEA in one compiled function (one compile per model)."""
    M = diffmb.mass_matrix(model, q)
    b = diffmb.bias_force(model, q, v)
    a = diffmb.forward_dynamics(model, q, v, tau, f_ext)
    a2 = diffmb.forward_dynamics(model, q, v, tau, f_ext, method="crba")
    t = diffmb.inverse_dynamics(model, q, v, a, f_ext)
    return M, b, a, a2, t


class PinocchioPair:
    """A URDF loaded by both; maps diffmb's q/v to Pinocchio's (continuous joints as cos/sin,
    free-flyer quaternion xyzw with local linear velocity)."""

    def __init__(self, path, floating=False):
        import pinocchio as pin

        self.pin = pin
        self.model = diffmb.load_urdf(path, floating_base=floating)
        if floating:
            self.pm = pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer())
        else:
            self.pm = pin.buildModelFromUrdf(path)
        self.pd = self.pm.createData()
        self.vidx = []
        for i in range(1, self.pm.njoints):
            nm = self.pm.names[i]
            j = self.model.joint_index("root_joint" if nm == "root_joint" else nm)
            self.vidx.append(j)

    def random_state(self, rng):
        m = self.model
        q = np.array(m.qpos0)
        for j, jt in enumerate(m.joint_types):
            s = m.joint_q[j]
            if jt == "free":
                q[s : s + 3] = rng.normal(size=3)
                qq = rng.normal(size=4)
                q[s + 3 : s + 7] = qq / np.linalg.norm(qq)
            else:
                q[s] = rng.uniform(-np.pi, np.pi)
        return q, rng.normal(size=m.nv), rng.normal(size=m.nv)

    def to_pin(self, q, v, tau):
        pm, m = self.pm, self.model
        qp, vp, tp = np.zeros(pm.nq), np.zeros(pm.nv), np.zeros(pm.nv)
        perm = []
        for k, i in enumerate(range(1, pm.njoints)):
            jm = pm.joints[i]
            j = self.vidx[k]
            sq, sv = m.joint_q[j], m.joint_v[j]
            if m.joint_types[j] == "free":
                p, quat = q[sq : sq + 3], q[sq + 3 : sq + 7]
                R = np.array(diffmb.spatial.quaternion.to_rotmat(jnp.asarray(quat)))
                qp[jm.idx_q : jm.idx_q + 7] = np.concatenate([p, quat[1:], quat[:1]])
                # Pinocchio: v = [R^T pdot, omega_body]
                vp[jm.idx_v : jm.idx_v + 6] = np.concatenate([R.T @ v[sv : sv + 3], v[sv + 3 : sv + 6]])
                tp[jm.idx_v : jm.idx_v + 6] = np.concatenate([R.T @ tau[sv : sv + 3], tau[sv + 3 : sv + 6]])
                perm += list(range(sv, sv + 6))
            else:
                if jm.nq == 2:
                    qp[jm.idx_q : jm.idx_q + 2] = [np.cos(q[sq]), np.sin(q[sq])]
                else:
                    qp[jm.idx_q] = q[sq]
                vp[jm.idx_v], tp[jm.idx_v] = v[sv], tau[sv]
                perm.append(sv)
        return qp, vp, tp, np.array(perm)
