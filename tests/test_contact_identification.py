"""Contact parameters identified from a noisy simulated record of a ball that bounces and
slides: friction, stiffness and damping recovered with standard
errors that cover the truth."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Contacts, Plane, Sphere

_BALL = """<mujoco><option gravity="0 0 -9.81"/><worldbody>
  <body name="ball" pos="0 0 0.3"><freejoint/><geom type="sphere" size="0.1" mass="1"/></body>
</worldbody></mujoco>"""

TRUE = {"mu": 0.3, "stiffness": 4.0e3, "damping": 20.0}


def _floor(model, mu, k, b):
    # the stiction spring is not identified here: the same in the truth and the guess
    return Contacts([Sphere("ball", 0.1, name="ball")], Plane(name="floor"), model=model,
                    mu=mu, stiffness=k, damping=b, tangential_stiffness=4.0e3,
                    tangential_damping=120.0)


@pytest.mark.slow
def test_friction_stiffness_and_damping_from_a_bouncing_sliding_record(tmp_path):
    f = tmp_path / "ball.xml"
    f.write_text(_BALL)
    model = diffmb.load_mjcf(f)
    q0 = jnp.asarray(model.qpos0)
    v0 = jnp.array([2.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # thrown sideways, no spin
    truth = _floor(model, TRUE["mu"], TRUE["stiffness"], TRUE["damping"])
    ts = np.linspace(0.0, 0.6, 121)
    clean = diffmb.simulate(model, q0, v0, t1=0.6, dt=1e-3, forces=(truth,), saveat=ts)
    rng = np.random.default_rng(1)
    sigma = 2e-4
    q = np.asarray(clean.q) + sigma * rng.normal(size=clean.q.shape)
    # the record covers the fall, two bounces and sliding into rolling
    guess = _floor(model, 0.45, 2.5e3, 12.0)
    names = ["force.floor.mu", "force.floor.stiffness", "force.floor.damping"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", diffmb.optim.lsq.UnidentifiableWarning)
        res = diffmb.optim.fit(model, {"t": ts, "q": q}, names, forces={"floor": guess},
            simulate_kwargs={"dt": 1e-3}, shooting="multiple", segments=6, weights={"q": 1.0 / sigma}, progress=False)
    assert res.success, res.message
    for n, key in zip(names, ("mu", "stiffness", "damping"), strict=True):
        est, std = float(np.ravel(res.estimates[n])[0]), float(np.ravel(res.std[n])[0])
        assert np.isfinite(std) and std > 0
        assert abs(est - TRUE[key]) < 4 * std, (n, est, std)
        assert abs(est - TRUE[key]) < 0.05 * TRUE[key], (n, est)
