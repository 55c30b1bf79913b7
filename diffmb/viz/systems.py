"""What the viewer draws for the systems that are not a :class:`~diffmb.Model`: shapes, body
poses and names registered on :func:`~diffmb.viz.primitives_of`, :func:`~diffmb.viz.poses_of`
and :func:`~diffmb.viz.body_names_of`, from the geometric data the systems carry.

* the UAV (:class:`~diffmb.models.uav.UAVSystem`, q = [r, quat] in north-east-down axes): one
  airframe drawn in a z-up world;
* bodies in absolute coordinates (:class:`~diffmb.formulations.maximal.MaximalDAE`,
  :class:`~diffmb.formulations.variational.VariationalSystem`, q = u = [r_c, quat] per body):
  one box per body with the body's mass and principal inertias.
"""

from __future__ import annotations

import numpy as np

from ..formulations.maximal import MaximalDAE, MaximalSystem
from ..formulations.variational import VariationalSystem
from ..models.uav import UAVSystem
from .scene import PALETTE, Primitive, body_names_of, poses_of, primitives_of, quat_from_matrix

__all__ = ["uav_primitives", "uav_poses", "maximal_primitives", "maximal_poses"]


# --- the UAV --------------------------------------------------------------------------------


def uav_primitives() -> list:
    """Joined wings, fuselage, fin and two rotor discs (body axes: x forward, z down), sized from
    the default parameters (span 1.6 m, chord 0.35 m, rotors at x 0.25 m, y ±0.35 m, 0.4 m
    discs)."""
    blue, grey, red = (0.2, 0.45, 0.8, 1.0), (0.6, 0.6, 0.65, 1.0), (0.85, 0.2, 0.2, 0.6)

    def wing(x, z, name):
        return Primitive("box", (0.09, 0.8, 0.012), 0, pos=(x, 0.0, z), rgba=blue, name=name)

    disc = (np.sqrt(0.5), 0, np.sqrt(0.5), 0)  # the cylinder's axis along body x
    return [wing(0.12, 0.03, "wing_front"), wing(-0.2, -0.08, "wing_rear"),
            Primitive("box", (0.45, 0.05, 0.05), 0, rgba=grey, name="fuselage"),
            Primitive("box", (0.08, 0.005, 0.1), 0, pos=(-0.38, 0, -0.1), rgba=grey, name="fin"),
            Primitive("cylinder", (0.2, 0.005), 0, pos=(0.25, 0.35, 0.0), quat=disc, rgba=red,
                      name="rotor_c"),
            Primitive("cylinder", (0.2, 0.005), 0, pos=(0.25, -0.35, 0.0), quat=disc, rgba=red,
                      name="rotor_d")]


def uav_poses(q) -> np.ndarray:
    """Poses (..., 1, 7) of the airframe for q (..., 7) = [r, quat] (north-east-down) shown in a
    z-up world, i.e. turned by pi about the north axis: r -> (r_x, -r_y, -r_z),
    quat -> q_x(pi) ⊗ quat."""
    q = np.asarray(q, float)
    r, qq = q[..., :3], q[..., 3:7] / np.linalg.norm(q[..., 3:7], axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(qq, -1, 0)
    P = np.stack([r[..., 0], -r[..., 1], -r[..., 2], -x, w, -z, y], -1)  # q_x(pi) = (0, 1, 0, 0)
    return P[..., None, :]


@primitives_of.register
def _(system: UAVSystem):
    return uav_primitives()


@poses_of.register
def _(system: UAVSystem, q):
    return uav_poses(q)


@body_names_of.register
def _(system: UAVSystem):
    return ("airframe",)


# --- bodies in absolute coordinates ----------------------------------------------------------


def maximal_primitives(sysm: MaximalSystem) -> list:
    """One box per body: the uniform box with the body's mass and principal inertias (full side
    a_x = sqrt(6 (J_y + J_z − J_x) / m)), centred on the centre of mass, along the principal
    axes. Exact for uniform boxes."""
    out = []
    for i in range(sysm.n_bodies):
        m = float(sysm.masses[i])
        lam, V = np.linalg.eigh(np.asarray(sysm.inertias[i], float))
        if np.linalg.det(V) < 0:
            V[:, 2] *= -1
        side = np.sqrt(np.maximum(6.0 * (lam.sum() - 2.0 * lam) / max(m, 1e-12), 1e-8))
        out.append(Primitive("box", side / 2, body=i, quat=tuple(quat_from_matrix(V)),
                             rgba=PALETTE[i % len(PALETTE)] + (1.0,), name=sysm.body_names[i]))
    return out


def maximal_poses(u) -> np.ndarray:
    """Body poses (..., n, 7) = [r_c, quat wxyz]: u (..., 7 n) itself, one row a body."""
    u = np.asarray(u, float)
    return u.reshape(*u.shape[:-1], -1, 7)


for _cls in (MaximalDAE, VariationalSystem):
    primitives_of.register(_cls, lambda system: maximal_primitives(system.sysm))
    poses_of.register(_cls, lambda system, q: maximal_poses(q))
    body_names_of.register(_cls, lambda system: system.sysm.body_names)
