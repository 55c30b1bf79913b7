"""diffmb.modular: a module type's parameters shared by every module of the type.

Oracles: the potential-flow added inertia of MuJoCo's geoms (diffmb.io.mjcf_fluid, built
independently of the per-type mapping), finite differences of the accelerations, and the truth
that generated the snake's record (diffmb.studies.underwater.shared_parameters_run)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb.forces.hydro import Hydrodynamics
from diffmb.models import underwater as uw
from diffmb.modular import shared_parameters, with_shared_parameters
from diffmb.systems import forward


def _hydro(forces):
    return next(f for f in forces if isinstance(f, Hydrodynamics))


def test_every_module_of_a_type_gets_the_types_parameters():
    cfg = uw.quadruped_configuration()
    model, forces = cfg.build()
    sp = shared_parameters(cfg, model, forces)
    assert set(sp) == {"underwater", "underwater_foot"}
    box = uw.module().name
    assert sp[box]["mass"] == pytest.approx(uw.MODULE_MASS)
    assert sp["underwater_foot"]["mass"] == pytest.approx(uw.MODULE_MASS + 0.1)
    # the identity map
    m1, f1 = with_shared_parameters(cfg, model, forces, sp)
    np.testing.assert_allclose(m1.body_added_inertia, model.body_added_inertia, atol=1e-12)
    np.testing.assert_allclose(_hydro(f1).quad_force, _hydro(forces).quad_force, rtol=1e-15)
    # the box type doubled: its modules' mass, inertia, added inertia and drag double, the
    # foot modules (another type) keep theirs
    new = {box: {"mass": 2 * sp[box]["mass"], "added_inertia": 2 * sp[box]["added_inertia"],
                 "quad_force": 2 * sp[box]["quad_force"]}}
    m2, f2 = with_shared_parameters(cfg, model, forces, new)
    feet = {"s3", "s5", "s7", "s9"}
    h0, h2 = _hydro(forces), _hydro(f2)
    for n in cfg.names:
        b = model.body_index(n)
        k = 1.0 if n in feet else 2.0
        assert float(m2.body_mass[b]) == pytest.approx(k * float(model.body_mass[b]))
        np.testing.assert_allclose(m2.body_inertia[b], k * model.body_inertia[b], rtol=1e-12)
        np.testing.assert_allclose(m2.body_added_inertia[b], k * model.body_added_inertia[b],
                                   rtol=1e-10, atol=1e-12)
        rows = [i for i, bb in enumerate(h0.bodies) if bb == b]
        np.testing.assert_allclose(np.asarray(h2.quad_force)[rows],
                                   k * np.asarray(h0.quad_force)[rows], rtol=1e-15)
    np.testing.assert_allclose(h2.quad_torque, h0.quad_torque)


@pytest.mark.slow  # compiles the accelerations and their gradient
def test_shared_gradient_matches_finite_differences():
    cfg = uw.snake_configuration(3)
    model, forces = cfg.build()
    sp = shared_parameters(cfg, model, forces)["underwater"]
    rng = np.random.default_rng(1)
    q = np.array(model.qpos0, float)
    q[7:] = rng.uniform(-0.5, 0.5, model.nq - 7)
    v = jnp.asarray(rng.normal(size=model.nv))
    u = jnp.asarray(rng.uniform(-0.3, 0.3, model.nv - 6))
    x0 = jnp.array([sp["mass"], sp["quad_force"][1], sp["added_inertia"][4]])

    def loss(x):
        fields = {"mass": x[0], "quad_force": jnp.asarray(sp["quad_force"]).at[1:].set(x[1]),
                  "added_inertia": jnp.asarray(sp["added_inertia"]).at[4:].set(x[2])}
        m, f = with_shared_parameters(cfg, model, forces, {"underwater": fields})
        a = forward(m, jnp.asarray(q), v, forces=f, ctrl=u)
        return jnp.sum(a[:6] ** 2) + jnp.sum(jnp.sin(a[6:]))

    g = np.asarray(jax.jit(jax.grad(loss))(x0))
    loss = jax.jit(loss)
    for i in range(3):
        h = 1e-5 * float(x0[i])
        e = jnp.zeros(3).at[i].set(h)
        fd = (float(loss(x0 + e)) - float(loss(x0 - e))) / (2 * h)
        assert g[i] == pytest.approx(fd, rel=1e-5, abs=1e-9)
    assert np.all(np.abs(g) > 0)


def test_bad_shared_parameters_are_refused():
    cfg = uw.snake_configuration(3)
    model, forces = cfg.build()
    ok = shared_parameters(cfg, model, forces)["underwater"]
    cases = [({"propeller": {"mass": 1.0}}, "no module type 'propeller'"),
             ({"underwater": {"colour": 1.0}}, "unknown field 'colour'"),
             ({"underwater": {"quad_force": np.ones(2)}}, "shape"),
             ({"underwater": {"mass": -1.0}}, "finite and > 0"),
             ({"underwater": {"quad_torque": np.array([1.0, np.nan, 1.0])}}, "finite"),
             ({"underwater": 3.0}, "field: value")]
    for params, match in cases:
        with pytest.raises(ValueError, match=match):
            with_shared_parameters(cfg, model, forces, params)
    dry, dry_forces = cfg.build(fluid=False)
    with pytest.raises(ValueError, match="added inertia"):
        with_shared_parameters(cfg, dry, dry_forces, {"underwater": {"added_inertia": ok[
            "added_inertia"]}})
    with pytest.raises(ValueError, match="Hydrodynamics"):
        with_shared_parameters(cfg, dry, dry_forces, {"underwater": {"quad_force": ok[
            "quad_force"]}})
    other, _ = uw.snake_configuration(4).build()
    with pytest.raises(ValueError, match="not its modules"):
        with_shared_parameters(cfg, other, forces, {"underwater": {"mass": 9.0}})


@pytest.mark.slow  # minutes: Levenberg–Marquardt through 3 s of the snake's swim
def test_identified_on_the_snake_predicts_the_nine_module_robot():
    from diffmb.studies.underwater import shared_parameters_run

    r = shared_parameters_run()
    assert r["fit"]["success"]
    assert 0.7 < r["fit"]["residual_rms"] < 1.3  # the residuals are the stated noise
    for k, t in r["true"].items():
        assert abs(r["error_in_std"][k]) < 4.0, k
        assert abs(r["rel_error"][k]) < 0.10, (k, r["identified"][k], t)
    p = r["prediction"]
    assert p["identified"]["root_position_m"] < 0.1 * p["guess"]["root_position_m"]
    assert p["identified"]["joint_rad"] < 0.1 * p["guess"]["joint_rad"]
    p = r["prediction_quadruped"]  # the quadruped paddling in open water
    assert p["module_types"] == ["underwater", "underwater_foot"]
    assert p["truth_sink_m"] > 0.1
    assert p["identified"]["root_position_m"] < 0.1 * p["guess"]["root_position_m"]
    assert p["identified"]["joint_rad"] < 0.1 * p["guess"]["joint_rad"]
