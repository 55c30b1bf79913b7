"""The underwater self-reconfigurable modular robot of Xu, Yang, Ge & Wang (2018) (seed 004) in its
quadruped walking configuration (Fig. 4), and a single module for identification.

Files: ``diffmb/assets/underwater_quadruped.xml`` (ten box modules s0…s9; s0–s1 welded into the
body; legs s2–s3 left fore, s4–s5 right fore on s1, s6–s7 left hind, s8–s9 right hind on s0; a
pitch hinge at every hip and knee, 8 joint angles, position servos kp = 3000 N m/rad,
kv = 300 N m s/rad) and ``diffmb/assets/underwater_module.xml`` (one module on a free joint).
The same quadruped generated from its module graph (:func:`quadruped_configuration`,
:func:`quadruped`) has the file's Model; the study simulates the generated one.

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
           "GAIT_NAMES", "NOMINAL_GAIT", "total_mass", "net_weight", "VISCOSITY", "module",
           "quadruped_configuration", "nine_module_configuration", "snake_configuration",
           "snake_cpg", "quadruped", "FEET", "foot_geoms"]

MODULES = tuple(f"s{k}" for k in range(10))
LEGS = ("lf", "rf", "lh", "rh")  # CPG.gait's order: left fore, right fore, left hind, right hind
JOINTS = tuple(f"{j}_{leg}" for leg in LEGS for j in ("hip", "knee"))  # actuator order
RHO = 1025.0  # kg/m³
VISCOSITY = 1.08e-3  # Pa·s
MODULE_SIZE = (0.60, 0.12, 0.12)  # m
MODULE_MASS = 9.2  # kg
Z0 = 1.2  # m, start height of the body's centre (the paper's z₀ = −1.2, z down)
STAND_HIP, STAND_KNEE = -0.35, 0.70  # rad: feet 2 cm above the floor at Z0
# the foot geom of each leg in the generated quadruped (the file names them ``foot_<leg>``)
FEET = {"lf": "s3_foot", "rf": "s5_foot", "lh": "s7_foot", "rh": "s9_foot"}

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


# --------------------------------------------------------------------------------------------
# The module and the paper's configurations as diffmb.modular objects
# --------------------------------------------------------------------------------------------
_HALF = np.sqrt(0.5)
SIDE_PORTS = {"left_a": (0.1, 0.12), "left_b": (0.5, 0.12), "right_a": (0.1, -0.12),
              "right_b": (0.5, -0.12)}  # (x, y) in the module frame [m]


def module(foot: bool = False):
    """The module type (:class:`diffmb.modular.Module`): a 0.60 × 0.12 × 0.12 m box of 9.2 kg
    from its start point along +x, MuJoCo fluid coefficients (0.525, 0.25, 1.5, 0, 0); six ports,
    each with a pitch hinge (about the port's y; damping 1 N m s/rad, armature 0.05 kg m², servo
    kp = 3000 N m/rad, kv = 300 N m s/rad): ``a`` at the start (x out = −x), ``b`` at the end
    (x out = +x), and side brackets ``left_a``, ``left_b``, ``right_a``, ``right_b`` at x = 0.1 and
    0.5 m, y = ±0.12 m, x out = −z (a leg hangs down). ``foot=True`` adds the 0.1 kg rubber foot
    (sphere r = 0.05 m at the end, friction 0.9, no fluid) of the quadruped's shins."""
    from ..modular import Geom, Joint, Module, Port

    L = MODULE_SIZE[0]
    hinge = Joint("hinge", (0.0, 1.0, 0.0), damping=1.0, armature=0.05, kp=3000.0, kv=300.0)
    geoms = [Geom("box", tuple(0.5 * np.array(MODULE_SIZE)), MODULE_MASS, pos=(0.5 * L, 0, 0),
                  name="box")]
    if foot:
        geoms.append(Geom("sphere", (0.05,), 0.1, pos=(L, 0, 0), fluid=False, contact=True,
                          friction=0.9, name="foot"))
    ports = [Port("a", (0, 0, 0), (0, 0, 0, 1), hinge), Port("b", (L, 0, 0), joint=hinge)]
    ports += [Port(k, (x, y, 0), (_HALF, 0, _HALF, 0), hinge) for k, (x, y) in SIDE_PORTS.items()]
    return Module("underwater_foot" if foot else "underwater", tuple(geoms), tuple(ports),
                  fluidcoef=(0.525, 0.25, 1.5, 0.0, 0.0))


def quadruped_configuration():
    """The quadruped of Fig. 4 generated from :data:`QUADRUPED_GRAPH`: s0 the root (its body
    frame at its end port ``b``, 1.2 m above the floor), s1 welded to it end to end, the legs on
    the side brackets (fore on s1 at x = 0.5, hind on s0 at x = 0.1), shins with feet; joints
    named as :data:`JOINTS`; sea water and the floor (μ = 0.9). Its Model is that of
    ``underwater_quadruped.xml`` (same bodies, joints, q/v layout, M, forces) except for
    details that change no generalized quantity: each leg's body frame is its module frame
    (turned by π/2 about the hinge axis from the file's), and the feet are named ``s3_foot`` …
    where the file says ``foot_lf`` …"""
    from ..modular import Configuration

    ports = {(0, 1): ("b", "a"), (1, 2): ("left_b", "a"), (1, 4): ("right_b", "a"),
             (0, 6): ("left_a", "a"), (0, 8): ("right_a", "a")}
    ports.update({(t, t + 1): ("b", "a") for t in (2, 4, 6, 8)})
    names = {(1, 2): "hip_lf", (2, 3): "knee_lf", (1, 4): "hip_rf", (4, 5): "knee_rf",
             (0, 6): "hip_lh", (6, 7): "knee_lh", (0, 8): "hip_rh", (8, 9): "knee_rh"}
    mods = [module(foot=k in (3, 5, 7, 9)) for k in range(10)]
    return Configuration.from_graph(QUADRUPED_GRAPH, mods, ports, joint_names=names,
                                    root_port="b", pos=(0.0, 0.0, Z0), density=RHO,
                                    viscosity=VISCOSITY, floor=0.9, name="underwater_quadruped")


def nine_module_configuration(z0: float = Z0):
    """The nine-module, eight-joint robot of Fig. 2 generated from :data:`NINE_MODULE_GRAPH`
    (the figure is lost from the paper's copy; the ports are ours): s1 continues s0 at its end,
    s2 and s3 hang from s0's brackets at x = 0.1, s6 from its left bracket at x = 0.5; s4
    continues s3, s5 on s3's left bracket at x = 0.5; s7 continues s6, s8 on its right bracket at
    x = 0.5. Joints ``j<parent><child>``; free in sea water, no floor."""
    from ..modular import Configuration

    ports = {(0, 1): ("b", "a"), (0, 2): ("left_a", "a"), (0, 3): ("right_a", "a"),
             (3, 4): ("b", "a"), (3, 5): ("left_b", "a"), (0, 6): ("left_b", "a"),
             (6, 7): ("b", "a"), (6, 8): ("right_b", "a")}
    names = {(i, j): f"j{i}{j}" for i, j, _ in NINE_MODULE_GRAPH}
    return Configuration.from_graph(NINE_MODULE_GRAPH, module(), ports, joint_names=names,
                                    pos=(0.0, 0.0, z0), density=RHO, viscosity=VISCOSITY,
                                    name="underwater_nine_module")


def snake_configuration(n: int = 6, z0: float = Z0):
    """A snake of ``n`` ≥ 2 modules, s_k's end ``b`` on s_{k+1}'s start ``a``, the pitch hinges
    ``j1 … j{n-1}`` between them; free in sea water, no floor."""
    from ..modular import Configuration

    if int(n) != n or n < 2:
        raise ValueError(f"a snake needs an integer n >= 2 modules, got {n!r}")
    graph = tuple((k, k + 1, "joint") for k in range(int(n) - 1))
    ports = {(k, k + 1): ("b", "a") for k in range(int(n) - 1)}
    names = {(k, k + 1): f"j{k + 1}" for k in range(int(n) - 1)}
    return Configuration.from_graph(graph, module(), ports, joint_names=names,
                                    pos=(0.0, 0.0, z0), density=RHO, viscosity=VISCOSITY,
                                    name=f"underwater_snake{int(n)}")


def snake_cpg(n: int, *, amplitude=0.5, frequency=0.5, waves=1.0, alpha=10.0, coupling=2.0):
    """A travelling wave for the servos of :func:`snake_configuration` (``n`` modules): a
    :class:`diffmb.controls.CPG` whose joint k (k = 0 … n−2, from s0 to the tail) targets
    ``amplitude`` · cos(2π ``frequency`` t − 2π ``waves`` k / (n − 1)) [rad]: ``waves`` wave
    lengths along the body, travelling from s0 to the tail, so the snake swims towards s0."""
    from ..controls import CPG

    if int(n) != n or n < 2:
        raise ValueError(f"a snake needs an integer n >= 2 modules, got {n!r}")
    m = int(n) - 1
    lags = -2.0 * np.pi * float(waves) * np.arange(m) / m
    return CPG(tuple(range(m)), frequency, np.full(m, float(amplitude)), 0.0, lags, alpha=alpha,
               coupling=coupling)


def quadruped(mjcf_path=None):
    """``(model, forces)`` of the generated quadruped (:func:`quadruped_configuration`), as
    :func:`load` gives the file's: potential-flow added inertia, servos, damping, floor
    contacts, buoyancy and drag. ``mjcf_path``: also write its MJCF there and record it as the
    Model's source (so that viewers draw its geoms)."""
    cfg = quadruped_configuration()
    model, forces = cfg.build()
    if mjcf_path is not None:
        from ..io.sources import with_source

        cfg.to_mjcf(mjcf_path)
        model = with_source(model, mjcf_path, "mjcf")
    return model, forces


def foot_geoms(names) -> list:
    """The foot geom of each leg (:data:`LEGS` order) among ``names``: the generated
    quadruped's (:data:`FEET`) or the file's (``foot_<leg>``)."""
    names = set(names)
    out = []
    for leg in LEGS:
        hit = [g for g in (FEET[leg], f"foot_{leg}") if g in names]
        if not hit:
            raise ValueError(f"no foot geom for leg {leg!r} ({FEET[leg]!r} or 'foot_{leg}') "
                             f"among {sorted(names)}")
        out.append(hit[0])
    return out


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
