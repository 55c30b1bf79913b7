"""Test configuration: float64 everywhere and strict dtype promotion.

The suite is dominated by XLA compilation, not by running the programs. LLVM's optimisation
level 0 cuts compile time by about a quarter; it changes no result (no fast-math either way,
IEEE float64 throughout). Benchmarks never run under this setting. A user's own XLA_FLAGS win.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import pathlib  # noqa: E402

import pytest  # noqa: E402

import diffmb  # noqa: E402,F401  (importing diffmb must also enable x64)


@pytest.fixture(scope="session")
def data_dir():
    return pathlib.Path(__file__).parent / "data"


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test file, so that a worker running many files
    does not accumulate them (a worker holding ~7 GB of them crashed inside XLA's compiler)."""
    yield
    jax.clear_caches()
