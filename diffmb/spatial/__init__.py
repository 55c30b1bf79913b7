"""Conventions and algebra: quaternions (scalar-first, Hamilton, body → world), rotations and the
papers' quaternion-rate maps, 6-D spatial motion/force algebra, gradient-safe maths."""

from . import quaternion as quaternion
from . import rotation as rotation
from . import safe as safe
from . import spatial as spatial
