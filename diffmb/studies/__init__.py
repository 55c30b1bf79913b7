"""Studies for ``diffmb reproduce``: each computes, plots and writes its report (``arm``,
``uav``, ``chain``, ``flexible_arm``)."""
