"""Test configuration: float64 everywhere and strict dtype promotion."""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import diffmb  # noqa: E402,F401  (importing diffmb must also enable x64)
