"""Core benchmark: amortised per-state time of the dynamics functions under jit + vmap against
Pinocchio's per-call time from Python, measured in the same run.

    python -m diffmb.bench.core [--quick] --out DIR      (or: diffmb bench --only core)

Cases: a generated 22-joint branching tree (same URDF loaded by both), and two humanoids of
example-robot-data (g1 29 dof, Talos reduced 32 dof). Reports per-state microseconds at batch 1
and at a large batch (4096; 512 with --quick) — once as one ``jit(vmap)`` over the whole batch and
once in blocks of 64 cases (``diffmb.optim.batch_map(..., block=64)``, one device: a block's
intermediates stay in cache) — the ratio to Pinocchio's per-call time from Python (one thread),
and compile times. The JAX runs may use both cores through XLA's intra-op threads. Pinocchio
and example-robot-data are optional: without Pinocchio every ``peer_value`` is null; without
example-robot-data the two humanoids are skipped (and said so). Writes ``DIR/bench_core.json``.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import diffmb
from diffmb.bench import case, main_for, run_module, write_json
from diffmb.optim import batch_map

MODULE = "diffmb.bench.core"  # re-launched by module name (works from an installed wheel)
BLOCK = 64  # cases vectorised together in the blocked runs (diffmb.optim.batch_map(block=...))


def erd(rel) -> str | None:
    """Path of an example-robot-data file (installed by pip under ``cmeel.prefix``), or None."""
    for site in [sysconfig.get_paths()["purelib"], *sys.path]:
        p = os.path.join(site, "cmeel.prefix", "share", "example-robot-data", "robots", rel)
        if site and os.path.isfile(p):
            return p
    return None


def tree_urdf(n=22, seed=0) -> str:
    """A random branching tree of n revolute joints as URDF text (bounded mass/length ratios)."""
    rng = np.random.default_rng(seed)
    parts = ['<robot name="tree22"><link name="base"/>']
    links = ["base"]
    for i in range(n):
        parent = links[rng.integers(max(0, len(links) - 4), len(links))]
        m = rng.uniform(0.5, 2.0)
        ax = rng.normal(size=3)
        ax /= np.linalg.norm(ax)
        xyz = " ".join(f"{x:.6f}" for x in rng.uniform(-0.3, 0.3, 3))
        parts.append(
            f'<link name="l{i}"><inertial><origin xyz="{xyz}"/><mass value="{m:.6f}"/>'
            f'<inertia ixx="{m*0.02:.6f}" iyy="{m*0.03:.6f}" izz="{m*0.025:.6f}" ixy="0.001" ixz="0" iyz="0"/>'
            f"</inertial></link>"
            f'<joint name="j{i}" type="revolute"><parent link="{parent}"/><child link="l{i}"/>'
            f'<origin xyz="{xyz}" rpy="{rng.uniform(-1,1):.4f} {rng.uniform(-1,1):.4f} 0"/>'
            f'<axis xyz="{ax[0]:.6f} {ax[1]:.6f} {ax[2]:.6f}"/>'
            f'<limit lower="-3" upper="3" effort="100" velocity="10"/></joint>'
        )
        links.append(f"l{i}")
    parts.append("</robot>")
    return "".join(parts)


def _time(f, *args, reps):
    jax.block_until_ready(f(*args))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            out = f(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def _pinocchio():
    try:
        import pinocchio
    except ImportError:
        print("pinocchio is not installed: peer values are null", flush=True)
        return None
    return pinocchio


def _pin_time(fn, reps=2000):
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def bench_model(label, path, batch, methods, results):
    pin = _pinocchio()
    model = diffmb.load_urdf(path)
    pin_t = dict.fromkeys(("mass_matrix", "bias_force", "forward"))
    if pin is not None:
        pm = pin.buildModelFromUrdf(path)
        pd = pm.createData()
        qp, vp = pin.randomConfiguration(pm), np.random.default_rng(1).normal(size=pm.nv)
        pin_t = {
            "mass_matrix": _pin_time(lambda: pin.crba(pm, pd, qp)),
            "bias_force": _pin_time(lambda: pin.nle(pm, pd, qp, vp)),
            "forward": _pin_time(lambda: pin.aba(pm, pd, qp, vp, vp)),
        }
    pin_us = {k: None if t is None else t * 1e6 for k, t in pin_t.items()}
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.uniform(-1, 1, model.nq))
    v = jnp.asarray(rng.normal(size=model.nv))
    funcs = {
        "mass_matrix": (lambda q, v: diffmb.mass_matrix(model, q), "mass_matrix"),
        "bias_force": (lambda q, v: diffmb.bias_force(model, q, v), "bias_force"),
    }
    for m in methods:
        funcs[f"forward_{m}"] = (
            (lambda m: lambda q, v: diffmb.forward_dynamics(model, q, v, v, method=m))(m),  # noqa: B023 (bound by the outer lambda)
            "forward",
        )
    for name, (f, peer) in funcs.items():
        t0 = time.perf_counter()
        jax.jit(f).lower(q, v).compile()
        compile_s = time.perf_counter() - t0
        results[f"{label}/{name}/compile"] = case(compile_s, "s", "target 20 s", 20.0)
        fv = jax.jit(jax.vmap(f))
        item = (lambda g: lambda _, b: g(*b))(f)  # noqa: B023 (bound by the outer lambda)
        blocked = lambda qb, vb, item=item: batch_map(item, (qb, vb), shard=False, block=BLOCK)
        runs = [(1, "", fv), (batch, "", fv)]
        if not name.endswith(("lagrange", "kane")):  # (their compile takes minutes: once is enough)
            runs.append((batch, f"_blocked{BLOCK}", blocked))
        for B, how, g in runs:
            qb, vb = jnp.tile(q, (B, 1)), jnp.tile(v, (B, 1))
            per = _time(g, qb, vb, reps=max(3, 2000 // B)) / B
            r = results[f"{label}/{name}/batch{B}{how}"] = case(
                per * 1e6, "us/state", f"pinocchio {peer} per call", pin_us[peer])
            print(f"{label:10s} {name:18s} B={B:5d}{how:10s} {per*1e6:9.2f} us/state  "
                  f"pinocchio {_fmt(r['peer_value'], '7.2f')} us  ratio {_fmt(r['ratio'], '.3g')}"
                  f"  (compile {compile_s:.1f} s)", flush=True)


def _fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def sharded_aba_per_state(path: str, batch: int, block: int) -> float:
    """Seconds per state of forward_dynamics (ABA) over all local devices: batch_map sharded,
    blocks of ``block`` (run in a subprocess whose XLA_FLAGS set the device count)."""
    model = diffmb.load_urdf(path)
    rng = np.random.default_rng(0)
    qb = jnp.tile(jnp.asarray(rng.uniform(-1, 1, model.nq)), (batch, 1))
    vb = jnp.tile(jnp.asarray(rng.normal(size=model.nv)), (batch, 1))
    item = lambda m, b: diffmb.forward_dynamics(m, b[0], b[1], b[1])
    go = lambda qb, vb: batch_map(item, (qb, vb), model, shard=True, block=block)
    return _time(go, qb, vb, reps=3) / batch


def _two_device_aba(label, path, batch, results, pin_us, block=BLOCK):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    args = ["--sharded-aba", path, str(batch), str(block)]
    per = float(run_module(MODULE, args, env, "two-device run", 900))
    r = results[f"{label}/forward_aba/batch{batch}_2dev_blocked{block}"] = case(
        per * 1e6, "us/state", "pinocchio forward per call", pin_us)
    print(f"{label:10s} forward_aba        B={batch:5d}_2dev     {per*1e6:9.2f} us/state  "
          f"pinocchio {_fmt(r['peer_value'], '7.2f')} us  ratio {_fmt(r['ratio'], '.3g')}",
          flush=True)


def run(out_dir: Path, quick: bool = False) -> dict:
    batch = 512 if quick else 4096
    results: dict = {}
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "tree22.urdf"
        p.write_text(tree_urdf())
        bench_model("tree22", str(p), batch, ["aba", "crba", "lagrange", "kane"], results)
        _two_device_aba("tree22", str(p), batch, results,
                        results[f"tree22/forward_aba/batch{batch}"]["peer_value"])
    heavy = ["aba", "crba"] if quick else ["aba", "crba", "lagrange", "kane"]
    for label, rel in (("g1_29dof", "g1_description/urdf/g1_29dof_rev_1_0.urdf"),
                       ("talos", "talos_data/robots/talos_reduced.urdf")):
        path = erd(rel)
        if path is None:
            print(f"{label}: example-robot-data is not installed ({rel}): skipped", flush=True)
            continue
        bench_model(label, path, batch, heavy, results)
        # both cores as two host devices, each vectorising its half of the batch in blocks
        _two_device_aba(label, path, batch, results,
                        results[f"{label}/forward_aba/batch{batch}"]["peer_value"])
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(out_dir) / "bench_core.json", results)
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--sharded-aba":
        print(sharded_aba_per_state(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        sys.exit(0)
    sys.exit(main_for("core", run))
