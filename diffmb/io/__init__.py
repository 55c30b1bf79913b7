"""Loaders and data files: URDF, MJCF (through MuJoCo's compiler; also the file's force
elements), :func:`load_model` by suffix, trajectories on disk (:func:`save_trajectory`,
:func:`load_trajectory`), and the one CSV reader/writer of measured data. Nothing below ``io``
imports it."""

from . import csvdata as csvdata
from . import mjcf as mjcf
from . import sources as sources
from . import trajectory as trajectory
from . import urdf as urdf
from .sources import load_model as load_model
from .trajectory import load_trajectory as load_trajectory
from .trajectory import model_from_info as model_from_info
from .trajectory import save_trajectory as save_trajectory
