"""Algorithms on a :class:`~diffmb.Model`: kinematics, RNEA, CRBA, ABA, recursive Lagrange, Kane,
the inertial regressor and configuration maps (integrate/difference)."""

from . import aba as aba
from . import api as api
from . import configuration as configuration
from . import crba as crba
from . import kane as kane
from . import kinematics as kinematics
from . import lagrange as lagrange
from . import regressor as regressor
from . import rnea as rnea
