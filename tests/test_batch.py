"""Batch simulation sharded over devices. Oracle: the same cases simulated one by one with
diffmb.simulate (unsharded), in a subprocess with 4 forced host devices (XLA_FLAGS must be
set before jax is imported)."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import jax, numpy as np, diffmb
    from diffmb.forces.elements import JointDamping
    from diffmb.optim import batch_simulate, set_params
    assert len(jax.devices()) == 4, jax.devices()
    b = diffmb.ModelBuilder("pend")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.02, 0.001),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0), damping=0.1)])
    b.add_body("l2", "l1", pos=(0, 0, -1.0), mass=0.5, com=(0, 0, -0.4),
               inertia=(0.01, 0.01, 0.001),
               joints=[dict(name="j2", type="hinge", axis=(0, 1, 0), damping=0.05)])
    m = b.build()
    rng = np.random.default_rng(0)
    B = 6                                   # not a multiple of 4: exercises the padding
    q0s = rng.uniform(-1, 1, (B, 2)); v0s = rng.uniform(-1, 1, (B, 2))
    kw = dict(t1=0.5, dt=0.01, saveat=[0.25, 0.5], forces=(JointDamping(),))
    sh = batch_simulate(m, q0s, v0s, shard=True, **kw)
    one = np.stack([np.asarray(diffmb.simulate(m, q0s[i], v0s[i], **kw).q) for i in range(B)])
    assert sh.q.shape == (B, 2, 2)
    np.testing.assert_allclose(np.asarray(sh.q), one, rtol=0, atol=1e-12)
    onev = np.stack([np.asarray(diffmb.simulate(m, q0s[i], v0s[i], **kw).v) for i in range(B)])
    np.testing.assert_allclose(np.asarray(sh.v), onev, rtol=0, atol=1e-12)
    # blocks of 4 on one device: a full block plus a remainder of 2
    bl = batch_simulate(m, q0s, v0s, shard=False, block=4, **kw)
    np.testing.assert_allclose(np.asarray(bl.q), one, rtol=0, atol=1e-12)
    # a batch of models (different link masses), sharded
    masses = np.linspace(0.5, 2.0, B)
    models = jax.vmap(lambda x: set_params(m, {"body.l2.mass": x}))(masses)
    bm = batch_simulate(models, q0s, v0s, batched_model=True, **kw)
    ref = np.stack([np.asarray(diffmb.simulate(set_params(m, {"body.l2.mass": masses[i]}),
                                               q0s[i], v0s[i], **kw).q) for i in range(B)])
    np.testing.assert_allclose(np.asarray(bm.q), ref, rtol=0, atol=1e-12)
    # one case: run where it is, equal to simulate
    b1 = batch_simulate(m, q0s[:1], v0s[:1], **kw)
    np.testing.assert_allclose(np.asarray(b1.q), one[:1], rtol=0, atol=1e-12)
    # the model is copied to the devices once while it lives, not at every call
    placed = len(diffmb.optim.batch._PLACED)
    again = batch_simulate(m, q0s, v0s, shard=True, **kw)
    assert len(diffmb.optim.batch._PLACED) == placed
    np.testing.assert_allclose(np.asarray(again.q), one, rtol=0, atol=1e-12)
    # the inputs really were split over the 4 devices
    x = jax.device_put(np.zeros((8, 2)), jax.sharding.NamedSharding(
        diffmb.optim.batch.batch_mesh(), jax.sharding.PartitionSpec("batch")))
    assert len(x.sharding.device_set) == 4
    print("OK", len(sh.q.sharding.device_set))
    """
)


@pytest.mark.slow
def test_sharded_equals_unsharded_on_4_devices():
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK" in p.stdout, p.stdout


def _pendulum():
    import diffmb

    b = diffmb.ModelBuilder("pend")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.02, 0.001),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0), damping=0.1)])
    b.add_body("l2", "l1", pos=(0, 0, -1.0), mass=0.5, com=(0, 0, -0.4),
               inertia=(0.01, 0.01, 0.001),
               joints=[dict(name="j2", type="hinge", axis=(0, 1, 0), damping=0.05)])
    return b.build()


@pytest.mark.slow
def test_a_failing_member_does_not_fail_the_batch():
    """Oracle: the healthy members simulated one by one; the NaN member's own status."""
    import warnings

    import jax
    import numpy as np
    import pytest

    import diffmb
    from diffmb.forces.elements import JointDamping
    from diffmb.optim import batch_simulate
    from diffmb.simulation import NONFINITE, SimulationError

    m = _pendulum()
    q0s = np.array([[0.3, -0.2], [np.nan, 0.1], [-0.5, 0.4], [0.1, 0.0]])
    v0s = np.zeros((4, 2))
    kw = dict(t1=0.1, dt=0.01, saveat=[0.05, 0.1], forces=(JointDamping(),))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        tr = batch_simulate(m, q0s, v0s, shard=False, **kw)
    status = np.asarray(tr.status)
    assert status.shape == (4,)
    assert status[1] != 0 and all(status[i] == 0 for i in (0, 2, 3)), status
    assert status[1] == NONFINITE  # a NaN state: "the state became non-finite"
    for i in (0, 2, 3):
        ref = diffmb.simulate(m, q0s[i], v0s[i], **kw)
        np.testing.assert_allclose(np.asarray(tr.q[i]), np.asarray(ref.q), rtol=0, atol=1e-12)
    mine = [w for w in got if "batch_simulate" in str(w.message)]
    assert len(mine) == 1 and len(got) == 1, [str(w.message) for w in got]
    msg = str(mine[0].message)
    assert "pend" in msg and "1 of 4" in msg and "index 1" in msg, msg
    # raising only when asked, naming the first failed member
    with pytest.raises(SimulationError, match="index 1"):
        batch_simulate(m, q0s, v0s, shard=False, throw=True, **kw)
    # a healthy batch: no warning
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ok = batch_simulate(m, q0s[[0, 2]], v0s[[0, 2]], shard=False, **kw)
    assert not got and np.all(np.asarray(ok.status) == 0)
    # under a trace: no warning, no error, the statuses come back
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        st = jax.jit(lambda q: batch_simulate(m, q, v0s, shard=False, throw=True,
                                              **kw).status)(q0s)
    assert not got
    np.testing.assert_array_equal(np.asarray(st), status)
