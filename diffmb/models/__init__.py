"""Named systems: all the physics of one vehicle or mechanism (the UAV, the flexible arm)."""

from . import flexible_arm as flexible_arm
from . import uav as uav
