"""The underwater self-reconfigurable modular robot of Xu, Yang, Ge & Wang (2018) (seed 004) in its
quadruped walking configuration (Fig. 4), and a single module for identification.

Files: ``diffmb/assets/underwater_quadruped.xml`` (ten box modules s0…s9; s0–s1 welded into the
body; legs s2–s3 left fore, s4–s5 right fore on s1, s6–s7 left hind, s8–s9 right hind on s0; a
pitch hinge at every hip and knee, 8 joint angles, position servos kp = 3000 N m/rad,
kv = 300 N m s/rad) and ``diffmb/assets/underwater_module.xml`` (one module on a free joint).

Numbers (the paper prints none; ours, stated):

=========================  ===========================  =======================================
module                     box 0.60 × 0.12 × 0.12 m     "each module is approximately a cuboid"
                                                        (paper §1); size ours
module mass                9.2 kg                       ours: density 1065 kg/m³
sea water                  ρ = 1025 kg/m³,              standard sea water (ITTC 2011); the
                           μ = 1.08e-3 Pa·s             paper gives none
displaced per module       8.856 kg (V = 8.64e-3 m³)
robot                      92.0 kg + 4 feet × 0.1 kg    net weight (92.4 − 88.56) × 9.81
                           = 92.4 kg                    = 37.7 N, 4.2 % of its weight in air
added mass                 potential flow, per module   Lamb's ellipsoid of the box's volume and
                                                        proportions (diffmb.forces.hydro)
quadratic drag             ½ρ C_d A per axis, C_d 1.05  face-on cube (Hoerner, *Fluid-Dynamic
                                                        Drag*, 1965, ch. 3): MJCF blunt 0.525
angular drag               MuJoCo's ellipsoid law,      ``fluidcoef[2]`` default
                           C_ang = 1.5
linear (Stokes) drag       3πμD, πμD³                   MuJoCo's, negligible here
floor                      plane z = 0, μ = 0.9         rubber feet on rock, ours
=========================  ===========================  =======================================

Frames: z-up, g = 9.81 m/s² (the paper writes g = [0 0 9.8]ᵀ in its z-down frame); the body
starts 1.2 m above the floor (the paper's z₀ = −1.2 m). The free joint's q is MuJoCo's
(position, quaternion), its v = (ṗ_world, ω_body): Kane's generalized speeds.
"""

from __future__ import annotations

import pathlib
from importlib import resources

import jax.numpy as jnp
import numpy as np

__all__ = ["MODULES", "LEGS", "JOINTS", "QUADRUPED_GRAPH", "NINE_MODULE_GRAPH", "Z0",
           "STAND_HIP", "STAND_KNEE", "RHO", "MODULE_SIZE", "MODULE_MASS", "quadruped_path",
           "module_path", "load", "load_module", "path_matrix", "stand_q0", "gait_cpg",
           "GAIT_NAMES", "NOMINAL_GAIT", "total_mass", "net_weight"]

MODULES = tuple(f"s{k}" for k in range(10))
LEGS = ("lf", "rf", "lh", "rh")  # CPG.gait's order: left fore, right fore, left hind, right hind
JOINTS = tuple(f"{j}_{leg}" for leg in LEGS for j in ("hip", "knee"))  # actuator order
RHO = 1025.0  # kg/m³
MODULE_SIZE = (0.60, 0.12, 0.12)  # m
MODULE_MASS = 9.2  # kg
Z0 = 1.2  # m, start height of the body's centre (the paper's z₀ = −1.2, z down)
STAND_HIP, STAND_KNEE = -0.35, 0.70  # rad: feet 2 cm above the floor at Z0

# the module graph (links s0…s9; 'rigid' = welded, 'joint' = one hinge), the paper's Fig. 4:
# paths s0 s1 s2 s3 | s0 s1 s4 s5 | s0 s6 s7 | s0 s8 s9
QUADRUPED_GRAPH = ((0, 1, "rigid"), (1, 2, "joint"), (2, 3, "joint"), (1, 4, "joint"),
                   (4, 5, "joint"), (0, 6, "joint"), (6, 7, "joint"), (0, 8, "joint"),
                   (8, 9, "joint"))
# the paper's nine-module, eight-joint example (Fig. 2), read from its six path rows (§2):
# {s0 s1}, {s0 s2}, {s0 s3 s4}, {s0 s3 s5}, {s0 s6 s7}, {s0 s6 s8}: s1, s2, s3, s6 hang on s0,
# s4 and s5 on s3, s7 and s8 on s6; terminal links s1 s2 s4 s5 s7 s8 (the paper's "columns 2, 3,
# 5, 6, 8 and 9 of A + I")
NINE_MODULE_GRAPH = ((0, 1, "joint"), (0, 2, "joint"), (0, 3, "joint"), (3, 4, "joint"),
                     (3, 5, "joint"), (0, 6, "joint"), (6, 7, "joint"), (6, 8, "joint"))

# gait parameters (the CPG's): frequency [Hz], hip and knee amplitudes and offsets [rad], the
# phases of legs RF, LH, RH relative to LF [cycles] and the knee's lag behind its hip [rad]
GAIT_NAMES = ("frequency", "amp_hip", "amp_knee", "off_hip", "off_knee", "phase_rf",
              "phase_lh", "phase_rh", "knee_lag")
NOMINAL_GAIT = {"frequency": 0.4, "amp_hip": 0.12, "amp_knee": 0.12, "off_hip": STAND_HIP,
                "off_knee": STAND_KNEE, "phase_rf": 0.5, "phase_lh": 0.75, "phase_rh": 0.25,
                "knee_lag": -0.5 * np.pi}  # a lateral-sequence walk (diffmb.controls.GAITS)


def _asset(name) -> pathlib.Path:
    return pathlib.Path(str(resources.files("diffmb") / "assets" / name))


def quadruped_path() -> pathlib.Path:
    return _asset("underwater_quadruped.xml")


def module_path() -> pathlib.Path:
    return _asset("underwater_module.xml")


def load(path=None):
    """``(model, forces)``: the quadruped with potential-flow added inertia in the Model and the
    file's elements (joint damping, servos, floor contacts, buoyancy and drag)."""
    from ..io.mjcf import load_mjcf, mjcf_forces

    path = quadruped_path() if path is None else path
    return load_mjcf(path, added_mass="potential"), mjcf_forces(path, fluid="potential")


def load_module(path=None):
    """``(model, hydro)``: one module on a free joint with its added inertia and its
    :class:`~diffmb.forces.hydro.Hydrodynamics` element (buoyancy, drag)."""
    from ..forces.hydro import Hydrodynamics
    from ..io.mjcf import load_mjcf, mjcf_forces

    path = module_path() if path is None else path
    hydro = next(f for f in mjcf_forces(path, fluid="potential") if isinstance(f, Hydrodynamics))
    return load_mjcf(path, added_mass="potential"), hydro


def path_matrix(graph=QUADRUPED_GRAPH, n_links=None) -> np.ndarray:
    """The paper's path matrix (Definition 2) of a module graph, by the core's
    :func:`diffmb.topology.path_matrix`: rows = paths to the terminal modules in increasing
    order, columns s0…s_n, 0/1."""
    from ..topology import path_matrix as pm

    n = 1 + max(max(a, b) for a, b, _ in graph) if n_links is None else n_links
    return pm(n, graph)


def total_mass(model) -> float:
    return float(np.sum(np.asarray(model.body_mass)))


def net_weight(model, hydro) -> float:
    """Weight minus buoyancy [N] (positive: the robot sinks)."""
    g = float(-np.asarray(model.gravity)[2])
    return (total_mass(model) - float(hydro.density) * float(np.sum(hydro.volume))) * g


def stand_q0(model, z0=Z0, hip=STAND_HIP, knee=STAND_KNEE):
    """The start pose: body level at height ``z0``, every hip at ``hip`` and knee at ``knee``."""
    q = np.array(model.qpos0, float)
    q[2] = z0
    for leg in LEGS:
        q[model.joint_q[model.joint_index(f"hip_{leg}")]] = hip
        q[model.joint_q[model.joint_index(f"knee_{leg}")]] = knee
    return jnp.asarray(q)


def gait_cpg(p, *, alpha=10.0, coupling=2.0):
    """The CPG (:class:`diffmb.controls.CPG`, Hopf oscillators) of a gait ``p`` (a mapping with
    :data:`GAIT_NAMES`; values may be traced): 8 oscillators in actuator order (:data:`JOINTS`),
    hip i at phase 2π·φ_leg, its knee at 2π·φ_leg + ``knee_lag``; targets
    offset + amplitude · cos(phase)."""
    from ..controls import CPG

    legs = (0.0, p["phase_rf"], p["phase_lh"], p["phase_rh"])
    lags = jnp.stack([x for ph in legs for x in (2 * jnp.pi * jnp.asarray(ph, float),
                                                  2 * jnp.pi * jnp.asarray(ph, float)
                                                  + p["knee_lag"])])
    amps = jnp.stack([x for _ in legs for x in (jnp.asarray(p["amp_hip"], float),
                                               jnp.asarray(p["amp_knee"], float))])
    offs = jnp.stack([x for _ in legs for x in (jnp.asarray(p["off_hip"], float),
                                               jnp.asarray(p["off_knee"], float))])
    return CPG(tuple(range(8)), p["frequency"], amps, offs, lags, alpha=alpha, coupling=coupling)
