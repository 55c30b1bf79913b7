"""Public API properties: gradients, vmap, no retracing, energy/momentum, regressor, errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from jax.test_util import check_grads

import diffmb
from diffmb.io.mjcf import from_mjmodel

from .random_trees import random_mjcf


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(11)
    mj = mujoco.MjModel.from_xml_string(random_mjcf("chain_mixed", rng))
    model = from_mjmodel(mj)
    q = np.array(model.qpos0)
    q[0] += 0.3
    q[1] += 0.1
    qq = rng.normal(size=4)
    q[2:6] = qq / np.linalg.norm(qq)
    q[6:] += 0.2
    return model, jnp.asarray(q), jnp.asarray(rng.normal(size=model.nv))


@pytest.fixture(scope="module")
def floating():
    rng = np.random.default_rng(12)
    mj = mujoco.MjModel.from_xml_string(random_mjcf("floating_branches", rng, gravity=(0, 0, 0)))
    model = from_mjmodel(mj)
    q = np.array(model.qpos0)
    qq = rng.normal(size=4)
    q[3:7] = qq / np.linalg.norm(qq)
    return model, jnp.asarray(q), jnp.asarray(rng.normal(size=model.nv))


@pytest.mark.slow
def test_check_grads_public_functions(small):
    model, q, v = small
    tau = jnp.linspace(-1.0, 1.0, model.nv)

    def with_mass(m):
        return eqx.tree_at(lambda mm: mm.body_mass, model, m)

    # two functions covering every public entry point and every kind of argument (torques,
    # masses, velocities, accelerations, a hinge angle), each checked in forward and reverse
    # mode: few compilations, the same coverage
    def fd(t, m, x):
        return diffmb.forward_dynamics(with_mass(m), q.at[0].set(x), v, t)

    def others(m, vv, a):
        mm = with_mass(m)
        return (diffmb.mass_matrix(mm, q), diffmb.bias_force(mm, q, vv),
                diffmb.inverse_dynamics(mm, q, vv, a))

    check_grads(jax.jit(fd), (tau, model.body_mass, q[0]), order=1, modes=("fwd", "rev"))
    check_grads(jax.jit(others), (model.body_mass, v, tau), order=1, modes=("fwd", "rev"))


@pytest.mark.slow
def test_vmap_equals_loop_and_no_retrace(small):
    model, q, v = small
    rng = np.random.default_rng(0)
    V = jnp.asarray(rng.normal(size=(5, model.nv)))
    f = eqx.filter_jit(eqx.debug.assert_max_traces(
        lambda m, q, v: diffmb.forward_dynamics(m, q, v, jnp.zeros(m.nv)), max_traces=1))
    batched = jax.vmap(lambda vv: diffmb.forward_dynamics(model, q, vv, jnp.zeros(model.nv)))(V)
    for k in range(5):
        assert np.allclose(batched[k], f(model, q, V[k]), rtol=0, atol=1e-12)
    heavier = eqx.tree_at(lambda m: m.body_mass, model, model.body_mass * 1.7)
    f(heavier, q, V[0])  # new parameter values: must not retrace (would raise)


@pytest.mark.slow
def test_energy_rate_equals_power(small):
    """d/dt (T + V) = τ · v along the motion, with a from forward dynamics (no dissipation)."""
    model, q, v = small
    tau = jnp.linspace(-1.0, 1.0, model.nv)
    a = diffmb.forward_dynamics(model, q, v, tau)
    qdot = _qdot(model, q, v)

    def energy(q, v):
        return diffmb.kinetic_energy(model, q, v) + diffmb.potential_energy(model, q)

    _, dE = jax.jvp(energy, (q, v), (qdot, a))
    assert abs(dE - jnp.dot(tau, v)) < 1e-10 * max(1.0, float(jnp.abs(tau @ v)))
    M = diffmb.mass_matrix(model, q)
    assert abs(diffmb.kinetic_energy(model, q, v) - 0.5 * v @ M @ v) < 1e-12


def _qdot(model, q, v):
    """q̇ from v: quaternion rates ½ q ⊗ (0, ω) for balls, identity elsewhere (written here so the
    test does not depend on the simulator)."""
    from diffmb.spatial import quaternion as Q

    out = []
    for j, jt in enumerate(model.joint_types):
        sq, sv = model.joint_q[j], model.joint_v[j]
        if jt == "ball":
            out.append(0.5 * Q.mul(q[sq:sq + 4], jnp.concatenate([jnp.zeros(1), v[sv:sv + 3]])))
        elif jt == "free":
            out.append(v[sv:sv + 3])
            out.append(0.5 * Q.mul(q[sq + 3:sq + 7],
                                   jnp.concatenate([jnp.zeros(1), v[sv + 3:sv + 6]])))
        else:
            out.append(v[sv:sv + 1])
    return jnp.concatenate(out)


def test_momentum_conserved_free_floating(floating):
    model, q, v = floating

    @jax.jit
    def momentum_rate(tau):
        a = diffmb.forward_dynamics(model, q, v, tau)
        return jax.jvp(lambda q, v: diffmb.momentum(model, q, v), (q, v), (_qdot(model, q, v), a))[1]

    # no gravity, no external force: constant momentum, also under internal joint torques
    for tau in (jnp.zeros(model.nv), jnp.zeros(model.nv).at[6:].set(1.0)):
        dp, dL = momentum_rate(tau)
        assert np.abs(dp).max() < 1e-10 and np.abs(dL).max() < 1e-10


def test_jacobians_match_finite_differences(small):
    model, q, v = small
    names = model.body_names
    J = diffmb.point_jacobian(model, q, names[-1], (0.1, -0.2, 0.05))
    w, vel = diffmb.body_velocity(model, q, v, names[-1], point=(0.1, -0.2, 0.05))
    assert np.allclose(J @ v, vel, atol=1e-12)
    qdot = _qdot(model, q, v)
    h = 1e-6
    x = lambda q: diffmb.frame_point(model, q, names[-1], (0.1, -0.2, 0.05))
    fd = (x(q + h * qdot) - x(q - h * qdot)) / (2 * h)
    assert np.allclose(fd, vel, atol=1e-7)
    Jb = diffmb.body_jacobian(model, q, names[-1])
    assert np.allclose(Jb[:3] @ v, w, atol=1e-12)


@pytest.mark.slow
def test_regressor_is_linear_in_parameters(small):
    from diffmb.dynamics.regressor import inertial_parameters, inertial_regressor

    model, q, v = small
    a = jnp.linspace(0.5, -0.5, model.nv)
    Y = inertial_regressor(model, q, v, a)
    m0 = eqx.tree_at(lambda m: m.armature, model, jnp.zeros_like(model.armature))
    tau = diffmb.inverse_dynamics(m0, q, v, a)
    assert np.abs(Y @ inertial_parameters(model).ravel() - tau).max() < 1e-10
    # linear: the regressor does not depend on the parameter values
    heavier = eqx.tree_at(lambda m: (m.body_mass, m.body_inertia), model,
                          (model.body_mass * 2.0, model.body_inertia * 3.0))
    assert np.abs(inertial_regressor(heavier, q, v, a) - Y).max() < 1e-10


def test_bad_shapes_are_named(small):
    model, q, v = small
    with pytest.raises(ValueError, match="q has shape"):
        diffmb.mass_matrix(model, q[:-1])
    with pytest.raises(ValueError, match="f_ext"):
        diffmb.forward_dynamics(model, q, v, v, jnp.zeros((1, 6)))
    with pytest.raises(ValueError, match="unknown method"):
        diffmb.forward_dynamics(model, q, v, v, method="newton")


def _python(code, env):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip().splitlines()[-1]


def test_compilation_cache_lives_in_the_user_cache_directory(tmp_path):
    """Importing diffmb points JAX's persistent compilation cache at $XDG_CACHE_HOME/diffmb/jax
    (a program compiled there is written to it), keeps a directory the user gave JAX, and
    DIFFMB_COMPILATION_CACHE=0 turns it off, as does a directory that cannot be written."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(XDG_CACHE_HOME=str(tmp_path), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    code = ("import diffmb, jax, jax.numpy as jnp; jax.jit(lambda x: jnp.sin(x) * 2)"
            "(jnp.ones(3)).block_until_ready(); print(jax.config.jax_compilation_cache_dir)")
    where = tmp_path / "diffmb" / "jax"
    assert _python(code, env) == str(where)
    assert any(where.iterdir())
    assert _python(code, dict(env, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"))) == \
        str(tmp_path / "mine")
    assert _python(code, dict(env, DIFFMB_COMPILATION_CACHE="0")) == "None"
    # a cache directory that cannot be made is no cache, and no warning at each compile
    assert _python(code, dict(env, XDG_CACHE_HOME="/proc/1/no-such-dir")) == "None"
