"""Optimisation on top of :func:`diffmb.simulate`: named parameters and transforms
(:mod:`.params`), output-error identification (:func:`fit`), trajectory optimisation
(:func:`trajopt`), batched and device-sharded simulation (:func:`batch_simulate`), and the
generic least-squares core (:func:`least_squares`)."""

from .lsq import (  # noqa: F401
    LSQResult as LSQResult,
    UnidentifiableWarning as UnidentifiableWarning,
    covariance as covariance,
    least_squares as least_squares,
)
from .params import (  # noqa: F401
    ParamSet as ParamSet,
    Transform as Transform,
    bounded as bounded,
    get_params as get_params,
    positive as positive,
    set_params as set_params,
)
from .sysid import (  # noqa: F401
    FitResult as FitResult,
    Record as Record,
    fit as fit,
    read_joint_csv as read_joint_csv,
    write_joint_csv as write_joint_csv,
)
from .trajopt import TrajoptResult as TrajoptResult, trajopt as trajopt  # noqa: F401
from .batch import batch_map as batch_map, batch_simulate as batch_simulate  # noqa: F401
