"""Loaders and data files: URDF, MJCF (through MuJoCo's compiler; also the file's force
elements), and the one CSV reader/writer of measured data. Nothing below ``io`` imports it."""

from . import csvdata as csvdata
from . import mjcf as mjcf
from . import urdf as urdf
