"""One process of the two-process check in test_distributed.py: joins ``jax.distributed`` on
localhost, simulates a batch of contact rollouts over the devices of both processes and saves
the gathered result. Usage: python _distributed_worker.py PORT PROCESS_ID OUT.npy"""

import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{sys.argv[1]}", num_processes=2,
                           process_id=int(sys.argv[2]))

import numpy as np  # noqa: E402
from _distributed_case import rollouts  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

assert jax.process_count() == 2 and len(jax.devices()) == 2 * len(jax.local_devices())
traj = rollouts(devices=jax.devices())
q, v, status = multihost_utils.process_allgather((traj.q, traj.v, traj.status), tiled=True)
np.savez(sys.argv[3], q=q, v=v, status=status)
