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
