"""Test configuration: float64 everywhere and strict dtype promotion."""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import diffmb  # noqa: E402,F401  (importing diffmb must also enable x64)

import pathlib  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def data_dir():
    return pathlib.Path(__file__).parent / "data"
