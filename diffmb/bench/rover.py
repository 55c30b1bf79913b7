"""The rover's speed: the 5 s rough-ground traverse of ``diffmb reproduce
rover`` against real time, and 256 rovers on 256 soils in one batched call.

What is measured (:func:`diffmb.studies.rover.speed`)
    * realtime: the traverse (24 dofs, the exact differential, six Wong–Reece wheels on a
      rough height field) with the study's method (``SOLVER`` at ``DT``), batch 1, compiled
      once (cold: no persistent compilation cache), then the best of 5 runs, in a child
      process bound to one core before JAX starts; the peer is real time itself (ratio = the
      realtime factor). Its compile time is its own case and stands beside it. The study's
      ``realtime_factor`` is the same function with the same defaults.
    * batch: 256 rovers, k_phi drawn in [5e5, 1.2e6] N/m^(n+2), in one ``jit(vmap)`` over
      ``batch_horizon`` (1 s; 0.25 s with ``--quick``), this process, all its cores: rovers per
      second of wall time, and whether every run finished.

Run: ``python -m diffmb.bench.rover [--quick] --out DIR`` or ``diffmb bench --only rover``.
"""

from __future__ import annotations

import pathlib
import sys

from diffmb.bench import case, main_for, write_json


def run(out: pathlib.Path, quick: bool = False) -> dict:
    from diffmb.models import rover
    from diffmb.studies import rover as study

    model, forces, _ = rover.load()
    r = study.speed(model, forces, batch=256, batch_horizon=0.25 if quick else 1.0)
    method = (f"{study.SOLVER} (Jacobian every {study.JACOBIAN_EVERY} steps) at dt = "
              f"{study.DT} s, ABA with the exact differential, {study.N_NODES} nodes per segment")
    res = {
        "realtime_factor": case(r["realtime_factor"], "x real time", "real time", 1.0,
                                wall_s=r["wall_s"], horizon_s=r["realtime_horizon_s"],
                                reps=r["realtime_reps"], cores=r["realtime_cores"],
                                walls_s=r["realtime_walls_s"], method=method,
                                compile_s=r["compile_s"]),
        "compile_s": case(r["compile_s"], "s", "none", None, cold=r["compile_cold"],
                          horizon_s=r["realtime_horizon_s"]),
        "batch_rovers_per_s": case(r["batch_rovers_per_s"], "rovers/s", "none", None,
                                   batch=256, horizon_s=r["batch_horizon_s"],
                                   all_finished=r["batch_all_ok"], wall_s=r["batch_wall_s"]),
    }
    write_json(pathlib.Path(out) / "bench_rover.json", {"cases": res})
    return res


if __name__ == "__main__":
    sys.exit(main_for("rover", run))
