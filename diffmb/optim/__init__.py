"""Optimisation on top of :func:`diffmb.simulate`: named parameters and transforms
(:mod:`.params`), output-error identification (:func:`fit`), trajectory optimisation
(:func:`trajopt`), batched and device-sharded simulation (:func:`batch_simulate`).

One place per concept: :mod:`.lsq` is the one least-squares core (Levenberg–Marquardt,
Gauss–Newton or optax's Adam with atomic checkpoints and a progress bar; covariance and
identifiability), which :func:`least_squares`, :func:`fit` and :func:`trajopt` use;
:mod:`.params` holds the parameter transforms and the check that ``forces`` are force elements
(:func:`~.params.force_elements`); :mod:`.shooting` the multiple-shooting
mechanics of :func:`fit` and :func:`trajopt`; measured CSV data are read by
:mod:`diffmb.io.csvdata` (:func:`read_joint_csv` and :func:`write_joint_csv` are its joint-space
front ends)."""

from .batch import batch_map as batch_map  # noqa: F401
from .batch import batch_simulate as batch_simulate
from .excitation import ExcitationResult as ExcitationResult  # noqa: F401
from .excitation import design_excitation as design_excitation
from .excitation import fisher_information as fisher_information
from .gradcheck import GradientCheck as GradientCheck  # noqa: F401
from .gradcheck import check_gradient as check_gradient
from .gradcheck import smoothed_gradient as smoothed_gradient
from .identify import IdentifyResult as IdentifyResult  # noqa: F401
from .identify import base_parameters as base_parameters
from .identify import identify as identify
from .lsq import (  # noqa: F401
    LSQResult as LSQResult,
)
from .lsq import (
    UnidentifiableWarning as UnidentifiableWarning,
)
from .lsq import (
    covariance as covariance,
)
from .lsq import (
    least_squares as least_squares,
)
from .params import (  # noqa: F401
    ParamSet as ParamSet,
)
from .params import (
    Transform as Transform,
)
from .params import (
    bounded as bounded,
)
from .params import expand as expand  # noqa: F401
from .params import (
    get_params as get_params,
)
from .params import physical_inertia as physical_inertia
from .params import (
    positive as positive,
)
from .params import (
    set_params as set_params,
)
from .sensors import Sensors as Sensors  # noqa: F401
from .sysid import (  # noqa: F401
    FitResult as FitResult,
)
from .sysid import (
    Record as Record,
)
from .sysid import (
    fit as fit,
)
from .sysid import (
    read_joint_csv as read_joint_csv,
)
from .sysid import (
    write_joint_csv as write_joint_csv,
)
from .trajopt import TrajoptResult as TrajoptResult  # noqa: F401
from .trajopt import trajopt as trajopt
