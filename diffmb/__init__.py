"""diffmb: differentiable multibody dynamics in pure JAX.

Importing diffmb enables float64 in JAX (``jax_enable_x64``): multibody dynamics compared with
Pinocchio and MuJoCo at 1e-9 needs double precision.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from . import spatial as spatial  # noqa: E402
from . import topology as topology
from ._version import __version__ as __version__  # noqa: E402
from .dynamics.api import (  # noqa: E402
    bias_force as bias_force,
)
from .dynamics.api import (
    forward_dynamics as forward_dynamics,
)
from .dynamics.api import (
    inverse_dynamics as inverse_dynamics,
)
from .dynamics.api import (
    mass_matrix as mass_matrix,
)
from .dynamics.kinematics import (  # noqa: E402
    body_jacobian as body_jacobian,
)
from .dynamics.kinematics import (
    body_pose as body_pose,
)
from .dynamics.kinematics import (
    body_poses as body_poses,
)
from .dynamics.kinematics import (
    body_velocity as body_velocity,
)
from .dynamics.kinematics import (
    center_of_mass as center_of_mass,
)
from .dynamics.kinematics import (
    frame_point as frame_point,
)
from .dynamics.kinematics import (
    kinetic_energy as kinetic_energy,
)
from .dynamics.kinematics import (
    momentum as momentum,
)
from .dynamics.kinematics import (
    point_jacobian as point_jacobian,
)
from .dynamics.kinematics import (
    potential_energy as potential_energy,
)
from .dynamics.regressor import inertial_regressor as inertial_regressor  # noqa: E402
from .io.mjcf import load_mjcf as load_mjcf  # noqa: E402
from .io.urdf import load_urdf as load_urdf  # noqa: E402
from .model import Model as Model  # noqa: E402
from .model import ModelBuilder as ModelBuilder
from .model import State as State
from .simulate import Trajectory as Trajectory
from .simulate import simulate as simulate  # noqa: E402
