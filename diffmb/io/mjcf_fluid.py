"""Fluid force elements and added inertia read from a compiled ``mujoco.MjModel``.

The physics lives in :mod:`diffmb.forces.hydro`; this module only reads MuJoCo's arrays
(``<option density viscosity wind>``, geoms, ``fluidshape``/``fluidcoef`` as ``geom_fluid``,
principal inertia axes) and builds those elements from them:

* :func:`mujoco_fluid_forces`: MuJoCo's inertia-box and ellipsoid models, as MuJoCo applies them;
* :func:`potential_flow_from_mjmodel`: buoyancy, drag and current of the fluid-displacing geoms;
* :func:`potential_added_inertia_from_mjmodel`: each body's potential-flow added inertia.

Body indices are diffmb's (MuJoCo's minus the world).
"""

from __future__ import annotations

import numpy as np

from ..forces.hydro import (
    _BOX,
    _CAPSULE,
    _CYLINDER,
    _ELLIPSOID,
    _MINVAL,
    _SPHERE,
    Hydrodynamics,
    MujocoEllipsoidFluid,
    MujocoInertiaBoxFluid,
    _motion_transform,
    _projected_areas,
    _semiaxes,
    geom_added_inertia,
    geom_volume,
)
from ..spatial.quaternion import to_rotmat

__all__ = ["mujoco_fluid_forces", "potential_flow_from_mjmodel",
           "potential_added_inertia_from_mjmodel"]


def _quat_R(q):
    """Rotation matrix (body -> world) of MuJoCo's scalar-first quaternion, as numpy."""
    return np.asarray(to_rotmat(np.asarray(q, dtype=np.float64)))


def _geom_name(mj, g):
    from .mjcf import object_name

    return object_name(mj, "GEOM", g)


def _check_fluid(mj, where):
    """Refuse a negative or non-finite ``<option density viscosity>`` or a non-finite wind."""
    for name, x in (("density", mj.opt.density), ("viscosity", mj.opt.viscosity)):
        if not (np.isfinite(x) and x >= 0):
            raise ValueError(f"{where}: <option {name}=\"{x:g}\">: must be finite and >= 0")
    if not np.all(np.isfinite(mj.opt.wind)):
        raise ValueError(f"{where}: <option wind=\"{' '.join(f'{w:g}' for w in mj.opt.wind)}\">"
                         ": must be finite")


def mujoco_fluid_forces(mj, where="<MjModel>") -> tuple:
    """The fluid force elements of a compiled ``mujoco.MjModel``, as MuJoCo applies them.

    Empty when ``density`` and ``viscosity`` are both 0. A body with at least one geom whose
    ``fluidshape="ellipsoid"`` uses the ellipsoid model on those geoms (with the compiler's
    virtual masses and inertias, ``geom_fluid``), every other body with mass ≥ 1e-15 the
    inertia-box model. ``where`` names the file in messages.
    """
    _check_fluid(mj, where)
    rho, mu = float(mj.opt.density), float(mj.opt.viscosity)
    if rho == 0.0 and mu == 0.0:
        return ()
    wind = np.array(mj.opt.wind, float)
    box_b, box_R = [], []
    el = dict(b=[], r=[], pos=[], rot=[], coef=[], vm=[], vi=[], scale=[])
    fl = np.asarray(mj.geom_fluid).reshape(mj.ngeom, -1)
    for i in range(1, mj.nbody):
        if float(mj.body_mass[i]) < _MINVAL:
            continue
        geoms = range(int(mj.body_geomadr[i]), int(mj.body_geomadr[i]) + int(mj.body_geomnum[i]))
        ell = [g for g in geoms if fl[g, 0] > 0]
        if not ell:
            box_b.append(i - 1)
            box_R.append(_quat_R(mj.body_iquat[i]))
            continue
        for g in ell:
            el["b"].append(i - 1)
            el["r"].append(_semiaxes(int(mj.geom_type[g]), mj.geom_size[g]))
            el["pos"].append(np.array(mj.geom_pos[g], float))
            el["rot"].append(_quat_R(mj.geom_quat[g]))
            el["coef"].append(fl[g, 1:6])
            el["vm"].append(fl[g, 6:9])
            el["vi"].append(fl[g, 9:12])
            el["scale"].append(fl[g, 0])
    out = []
    if box_b:
        out.append(MujocoInertiaBoxFluid(box_b, np.array(box_R), density=rho, viscosity=mu,
                                         wind=wind))
    if el["b"]:
        out.append(MujocoEllipsoidFluid(
            el["b"], np.array(el["r"]), np.array(el["pos"]), np.array(el["rot"]), density=rho,
            viscosity=mu, wind=wind, coef=np.array(el["coef"]), virtual_mass=np.array(el["vm"]),
            virtual_inertia=np.array(el["vi"]), scale=np.array(el["scale"])))
    return tuple(out)


def _potential_geoms(mj, where="<MjModel>"):
    """(diffmb body index, geom id) of the geoms that displace fluid: on each moving body, its
    ``fluidshape="ellipsoid"`` geoms if it has any, else its volumetric geoms except visual-only
    ones (contype = conaffinity = 0) unless it has nothing else."""
    out = []
    fl = np.asarray(mj.geom_fluid).reshape(mj.ngeom, -1)
    for i in range(1, mj.nbody):
        if int(mj.body_weldid[i]) == 0:
            continue  # welded to the world: never moves
        geoms = list(range(int(mj.body_geomadr[i]),
                           int(mj.body_geomadr[i]) + int(mj.body_geomnum[i])))
        chosen = [g for g in geoms if fl[g, 0] > 0]
        if not chosen:
            solid = [g for g in geoms if int(mj.geom_contype[g]) or int(mj.geom_conaffinity[g])]
            chosen = solid or geoms
        for g in chosen:
            if int(mj.geom_type[g]) not in (_SPHERE, _CAPSULE, _ELLIPSOID, _CYLINDER, _BOX):
                raise NotImplementedError(
                    f"{where}: geom {_geom_name(mj, g)!r}: potential-flow buoyancy and added "
                    "mass need a sphere, capsule, ellipsoid, cylinder or box (give it "
                    "contype=conaffinity=0 if it is visual only)")
            out.append((i - 1, g))
    return out


def potential_added_inertia_from_mjmodel(mj, density=None, where="<MjModel>") -> np.ndarray:
    """Added inertia (nb, 6, 6) of each body (about its frame origin, body axes, [angular;
    linear]) from its fluid-displacing geoms (:func:`~diffmb.forces.hydro.geom_added_inertia`,
    summed: hydrodynamic interaction between geoms of one body is neglected). ``density``
    defaults to ``<option density>``."""
    rho = float(mj.opt.density if density is None else density)
    if not (rho > 0 and np.isfinite(rho)):
        raise ValueError(f"{where}: added_mass='potential' needs a positive fluid density, got "
                         f"{rho}: set <option density=...> in the file (1000 for water)")
    M = np.zeros((mj.nbody - 1, 6, 6))
    for b, g in _potential_geoms(mj, where):
        Mg = geom_added_inertia(int(mj.geom_type[g]), mj.geom_size[g], rho)
        X = _motion_transform(_quat_R(mj.geom_quat[g]), np.asarray(mj.geom_pos[g], float))
        M[b] += X.T @ Mg @ X
    return 0.5 * (M + np.swapaxes(M, 1, 2))


def potential_flow_from_mjmodel(mj, *, current=None, where="<MjModel>") -> Hydrodynamics:
    """:class:`~diffmb.forces.hydro.Hydrodynamics` of an MJCF's fluid-displacing geoms, one
    entry per geom at its centre, in its axes, with ``<option density viscosity wind>``
    (``current`` overrides ``wind``):

    - volume: the geom's (:func:`~diffmb.forces.hydro.geom_volume`), fully immersed;
    - quadratic drag ½ρ C_d A_i per axis, A_i the geom's projected area normal to axis i and
      C_d = 2 × its blunt ``fluidcoef`` (1.0 by default: MuJoCo's blunt drag ρ C_blunt A |v| v
      for motion along an axis); angular ρ C_ang (8π/15) r_i max(r_j, r_k)⁴ per axis
      (MuJoCo's angular drag, C_ang = ``fluidcoef[2]``, r the geom's semi-axes);
    - linear drag: Stokes on the equivalent sphere, 3πμD and πμD³, D = ⅔ Σ r (MuJoCo's).
    """
    rho, mu = float(mj.opt.density), float(mj.opt.viscosity)
    _check_fluid(mj, where)
    if not rho > 0:
        raise ValueError(f"{where}: fluid='potential' needs a positive fluid density, got {rho}: "
                         "set <option density=...> in the file (1000 for water)")
    fl = np.asarray(mj.geom_fluid).reshape(mj.ngeom, -1)
    rows = dict(b=[], pos=[], rot=[], vol=[], lf=[], qf=[], lt=[], qt=[])
    for b, g in _potential_geoms(mj, where):
        k, s = int(mj.geom_type[g]), np.asarray(mj.geom_size[g], float)
        coef = fl[g, 1:6] if fl[g, 0] > 0 else np.array([0.5, 0.25, 1.5, 1.0, 1.0])
        r = _semiaxes(k, s)
        D = 2.0 / 3.0 * r.sum()
        r4 = r**4
        m4 = np.array([max(r4[1], r4[2]), max(r4[2], r4[0]), max(r4[0], r4[1])])
        rows["b"].append(b)
        rows["pos"].append(np.asarray(mj.geom_pos[g], float))
        rows["rot"].append(_quat_R(mj.geom_quat[g]))
        rows["vol"].append(geom_volume(k, s))
        rows["qf"].append(0.5 * rho * 2.0 * coef[0] * _projected_areas(k, s))
        rows["qt"].append(rho * coef[2] * 8.0 * np.pi / 15.0 * r * m4)
        rows["lf"].append(np.full(3, 3.0 * np.pi * mu * D))
        rows["lt"].append(np.full(3, np.pi * mu * D**3))
    cur = np.array(mj.opt.wind, float) if current is None else np.asarray(current, float)
    k = len(rows["b"])
    arr = lambda key, shape: np.array(rows[key], float).reshape(shape)  # noqa: E731
    return Hydrodynamics(rows["b"], density=rho, pos=arr("pos", (k, 3)), rot=arr("rot", (k, 3, 3)),
                         volume=arr("vol", (k,)), lin_force=arr("lf", (k, 3)),
                         quad_force=arr("qf", (k, 3)), lin_torque=arr("lt", (k, 3)),
                         quad_torque=arr("qt", (k, 3)), current=cur)
