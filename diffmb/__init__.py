"""diffmb: differentiable multibody dynamics in pure JAX.

Importing diffmb enables float64 in JAX (``jax_enable_x64``): multibody dynamics compared with
Pinocchio and MuJoCo at 1e-9 needs double precision.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from ._version import __version__ as __version__  # noqa: E402
from .model import Model as Model, ModelBuilder as ModelBuilder, State as State  # noqa: E402
from .dynamics.api import (  # noqa: E402
    bias_force as bias_force,
    forward_dynamics as forward_dynamics,
    inverse_dynamics as inverse_dynamics,
    mass_matrix as mass_matrix,
)
from .io.urdf import load_urdf as load_urdf  # noqa: E402
from .io.mjcf import load_mjcf as load_mjcf  # noqa: E402
from .dynamics.kinematics import (  # noqa: E402
    body_jacobian as body_jacobian,
    body_pose as body_pose,
    body_poses as body_poses,
    body_velocity as body_velocity,
    center_of_mass as center_of_mass,
    frame_point as frame_point,
    kinetic_energy as kinetic_energy,
    momentum as momentum,
    point_jacobian as point_jacobian,
    potential_energy as potential_energy,
)
from .dynamics.regressor import inertial_regressor as inertial_regressor  # noqa: E402
from . import spatial as spatial, topology as topology  # noqa: E402
from .simulate import simulate as simulate, Trajectory as Trajectory  # noqa: E402
