"""Beyond one machine: two processes joined by ``jax.distributed`` on localhost (the
coordinator on a free port, CPU collectives by gloo) shard a batch of contact rollouts with
``diffmb.optim.batch_simulate`` over the devices of both, and get what one process gets."""

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_give_the_one_process_result(tmp_path):
    from ._distributed_case import rollouts

    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(HERE))
    env.pop("XLA_FLAGS", None)  # one device per process
    port = _free_port()
    outs = [tmp_path / f"p{i}.npz" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, str(HERE / "_distributed_worker.py"), str(port),
                               str(i), str(outs[i])], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for r in procs:
                r.kill()
            raise
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-3000:]
    one = rollouts(shard=False)
    for out in outs:  # each process holds the whole gathered batch
        got = np.load(out)
        assert got["q"].shape == (6, 2, 7)
        assert np.all(got["status"] == 0)
        np.testing.assert_allclose(got["q"], np.asarray(one.q), rtol=0, atol=1e-12)
        np.testing.assert_allclose(got["v"], np.asarray(one.v), rtol=0, atol=1e-10)
