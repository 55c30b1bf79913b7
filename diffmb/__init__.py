"""diffmb: differentiable multibody dynamics in pure JAX.

Importing diffmb enables float64 in JAX (``jax_enable_x64``): multibody dynamics compared with
Pinocchio and MuJoCo at 1e-9 needs double precision. It also turns on JAX's persistent
compilation cache in the user's cache directory (``DIFFMB_COMPILATION_CACHE=0`` to not). The public surface is listed in
``docs/api.md``; subpackages (``diffmb.spatial``, ``diffmb.dynamics``, ``diffmb.formulations``,
``diffmb.forces``, ``diffmb.io``, ``diffmb.optim``, ``diffmb.models``, ...) are importable as
attributes.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)


def _persistent_compilation_cache() -> None:
    """JAX's persistent compilation cache in the user's cache directory, so that a model
    compiled once compiles from disk in the next process (``$XDG_CACHE_HOME/diffmb/jax`` or
    ``~/.cache/diffmb/jax``, at most 2 GiB; none where that cannot be written). A cache
    directory set for JAX already (``JAX_COMPILATION_CACHE_DIR``) is kept;
    ``DIFFMB_COMPILATION_CACHE=0`` turns it off."""
    import os

    if os.environ.get("DIFFMB_COMPILATION_CACHE", "1").strip().lower() in ("0", "false", "off"):
        return
    if _jax.config.jax_compilation_cache_dir:
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    where = os.path.join(base, "diffmb", "jax")
    try:  # a cache directory that cannot be written is no cache (not a warning per compile)
        os.makedirs(where, exist_ok=True)
        if not os.access(where, os.W_OK):
            return
    except OSError:
        return
    _jax.config.update("jax_compilation_cache_dir", where)
    if _jax.config.jax_compilation_cache_max_size < 0:
        _jax.config.update("jax_compilation_cache_max_size", 2 * 1024**3)


_persistent_compilation_cache()

# --- subpackages and modules ------------------------------------------------------------------
from . import contacts as contacts  # noqa: E402
from . import controls as controls
from . import dynamics as dynamics
from . import forces as forces
from . import formulations as formulations
from . import io as io
from . import models as models
from . import modular as modular
from . import optim as optim
from . import spatial as spatial
from . import systems as systems
from . import topology as topology
from ._version import __version__ as __version__

# --- models and loaders -----------------------------------------------------------------------
from .model import InertiaIssue as InertiaIssue
from .model import InertiaWarning as InertiaWarning
from .model import check_inertia as check_inertia
from .model import with_added_inertia as with_added_inertia
from .model import Model as Model
from .model import ModelBuilder as ModelBuilder
from .model import ModelSource as ModelSource
from .io.mjcf import load_mjcf as load_mjcf
from .io.mjcf import mjcf_forces as mjcf_forces
from .io.urdf import load_urdf as load_urdf
from .io.urdf import urdf_forces as urdf_forces

# --- rigid-body dynamics ----------------------------------------------------------------------
from .dynamics.api import bias_force as bias_force
from .dynamics.api import forward_dynamics as forward_dynamics
from .dynamics.api import inverse_dynamics as inverse_dynamics
from .dynamics.api import mass_matrix as mass_matrix
from .dynamics.configuration import difference as difference
from .dynamics.configuration import integrate as integrate
from .dynamics.kinematics import body_jacobian as body_jacobian
from .dynamics.kinematics import body_pose as body_pose
from .dynamics.kinematics import body_poses as body_poses
from .dynamics.kinematics import body_velocity as body_velocity
from .dynamics.kinematics import center_of_mass as center_of_mass
from .dynamics.kinematics import frame_point as frame_point
from .dynamics.kinematics import kinetic_energy as kinetic_energy
from .dynamics.kinematics import momentum as momentum
from .dynamics.kinematics import point_jacobian as point_jacobian
from .dynamics.kinematics import potential_energy as potential_energy
from .dynamics.regressor import inertial_regressor as inertial_regressor

# --- force elements and controls --------------------------------------------------------------
from .controls import CPG as CPG
from .controls import KnotTable as KnotTable
from .forces import AbstractForce as AbstractForce
from .forces import AbstractStatefulForce as AbstractStatefulForce
from .forces import Actuators as Actuators
from .forces import BodyAerodynamics as BodyAerodynamics
from .forces import BodyWrench as BodyWrench
from .forces import Couplings as Couplings
from .forces import FixedTendons as FixedTendons
from .forces import GeneralizedForce as GeneralizedForce
from .forces import Hydrodynamics as Hydrodynamics
from .forces import JointDamping as JointDamping
from .forces import JointFriction as JointFriction
from .forces import JointLimits as JointLimits
from .forces import JointSpring as JointSpring

# --- simulation -------------------------------------------------------------------------------
from .simulation import SimulationError as SimulationError
from .simulation import Trajectory as Trajectory
from .simulation import simulate as simulate
from .systems import AbstractDiscreteSystem as AbstractDiscreteSystem
from .systems import AbstractODESystem as AbstractODESystem
from .systems import STATUS as STATUS
from .systems import AbstractSecondOrderSystem as AbstractSecondOrderSystem
from .systems import AbstractStatefulControl as AbstractStatefulControl
from .systems import AbstractSystem as AbstractSystem
from .systems import TreeSystem as TreeSystem
from .systems import forward as forward
from .systems import unilateral_forces as unilateral_forces

def __getattr__(name):  # studies, benchmarks and viz import plotting and peers: load on demand
    if name in ("studies", "bench", "cli", "viz"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'diffmb' has no attribute {name!r}")
