"""The rover model: drive kinematics against closed forms, the differential held to round-off,
the recursive Lagrange formulation against ABA on the rover's tree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Contacts, Cylinder, Plane
from diffmb.models import rover


def test_drive_command_closed_forms():
    xy = rover.STEER_XY
    d, w = rover.drive_command(0.1, 0.0)
    np.testing.assert_allclose(np.asarray(d), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(w), 0.1 / rover.WHEEL_RADIUS, rtol=1e-12)
    # an arc of radius R to the left: each axis perpendicular to the line to the centre (0, R)
    R = 2.0
    d, _ = rover.drive_command(0.1, 0.1 / R)
    np.testing.assert_allclose(np.asarray(d), np.arctan(xy[:, 0] / (R - xy[:, 1])), atol=1e-12)
    # in place: every axis tangent to its circle about the body centre (wrapped to ±π/2)
    d, w = rover.drive_command(0.0, 0.2)
    tangent = np.arctan(-xy[:, 0] / xy[:, 1])
    np.testing.assert_allclose(np.asarray(d), tangent, atol=1e-12)
    assert np.all(np.sign(np.asarray(w)) == -np.sign(xy[:, 1]))  # left wheels roll back


def _rigid_ground(model):
    geoms = [Cylinder(f"wheel_{w}", rover.WHEEL_RADIUS, rover.WHEEL_WIDTH / 2,
                      quat=(0.7071068, 0.7071068, 0, 0), name=f"wheel_{w}") for w in rover.WHEELS]
    return Contacts(geoms, Plane(name="ground"), model=model, mu=0.8)


@pytest.mark.slow
def test_straight_drive_on_rigid_ground_holds_the_differential_exactly():
    model, forces, _ = rover.load()
    tr = diffmb.simulate(model, jnp.asarray(model.qpos0), None, t1=3.0, dt=1e-3,
                         forces=forces + (_rigid_ground(model),),
                         control=rover.behaviour_control("straight"),
                         saveat=np.linspace(0, 3, 31))
    q = np.asarray(tr.q)
    il, ir = model.joint_q[model.joint_index("diff_l")], model.joint_q[model.joint_index("diff_r")]
    assert np.max(np.abs(q[:, il] + q[:, ir])) < 1e-12
    # rolling without slip: the body advances r θ (θ the wheels' mean angle), at 0.1 m/s
    wheels = [model.joint_q[model.joint_index(f"wheel_{w}")] for w in rover.WHEELS]
    theta = np.mean(q[-1, wheels])
    assert abs(q[-1, 0] - rover.WHEEL_RADIUS * theta) < 0.01 * q[-1, 0]
    assert abs(float(tr.v[-1, 0]) - 0.1) < 1e-3
    assert abs(q[-1, 1]) < 1e-3


@pytest.mark.slow
def test_recursive_lagrange_equals_aba_on_the_rover():
    model, _, _ = rover.load()
    rng = np.random.default_rng(3)
    aba = jax.jit(lambda q, v, t: diffmb.forward_dynamics(model, q, v, t, method="aba"))
    lag = jax.jit(lambda q, v, t: diffmb.forward_dynamics(model, q, v, t, method="lagrange"))
    for _ in range(3):
        q = np.array(model.qpos0)
        q[3:7] = rng.normal(size=4)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = 0.4 * rng.normal(size=model.nq - 7)
        v, tau = rng.normal(size=model.nv), rng.normal(size=model.nv)
        np.testing.assert_allclose(np.asarray(lag(q, v, tau)), np.asarray(aba(q, v, tau)),
                                   atol=1e-9)


@pytest.mark.slow
def test_identify_rover_from_the_shipped_single_wheel_csv(tmp_path):
    """`diffmb identify rover --data rover_wheel.csv`: the rig's soil (k_phi, c, phi, K) within
    3 standard errors; c and phi are strongly correlated at one load (wide but honest errors)."""
    from diffmb.cli import main
    from diffmb.studies import rover as study

    out = tmp_path / "id"
    assert main(["identify", "rover", "--data", str(study.wheel_csv_path()),
                 "--out", str(out)]) == 0
    import json

    res = json.loads((out / "results.json").read_text())
    for name, v in res["identified"].items():
        assert np.isfinite(v["std"]) and v["std"] > 0, name
        assert abs(v["estimate"] - v["true"]) < 3 * v["std"], (name, v)
    assert abs(res["identified"]["k_phi"]["estimate"] / 8.14e5 - 1) < 0.02


@pytest.mark.slow
def test_coupled_aba_equals_the_mass_matrix_projection_and_holds_the_differential():
    """The exact differential by ABA over two right-hand sides (no mass matrix) against the
    projection with the CRBA mass matrix (Gauss's principle), at random states; C a = 0 to
    round-off."""
    from diffmb.systems import (
        _exact_coupling_matrix,
        coupled_forward_dynamics,
        project_accelerations,
    )

    model, forces, _ = rover.load()
    C = _exact_coupling_matrix(forces)
    rng = np.random.default_rng(5)
    new = jax.jit(lambda q, v, t, f: coupled_forward_dynamics(model, q, v, t, f, C))
    old = jax.jit(lambda q, v, t, f: project_accelerations(
        model, q, diffmb.forward_dynamics(model, q, v, t, f), C))
    for _ in range(3):
        q = np.array(model.qpos0)
        q[3:7] = rng.normal(size=4)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = 0.4 * rng.normal(size=model.nq - 7)
        v, tau = rng.normal(size=model.nv), 10 * rng.normal(size=model.nv)
        f = 20 * rng.normal(size=(model.n_bodies, 6))
        a, a_ref = np.asarray(new(q, v, tau, f)), np.asarray(old(q, v, tau, f))
        np.testing.assert_allclose(a, a_ref, atol=1e-10 * max(1.0, np.max(np.abs(a_ref))))
        assert np.max(np.abs(np.asarray(C) @ a)) < 1e-12
        # and the constraint force is not zero: the projection did something
        a_free = np.asarray(diffmb.forward_dynamics(model, q, v, tau, f))
        assert np.max(np.abs(np.asarray(C) @ a_free)) > 1e-3
