"""Algorithms on a :class:`~diffmb.Model`: kinematics, RNEA, CRBA, ABA, recursive Lagrange, Kane,
the inertial regressor, configuration maps (integrate/difference) and the small dense
solves of a time step."""

from . import aba as aba
from . import api as api
from . import configuration as configuration
from . import crba as crba
from . import kane as kane
from . import kinematics as kinematics
from . import lagrange as lagrange
from . import regressor as regressor
from . import rnea as rnea
from . import small_linalg as small_linalg
