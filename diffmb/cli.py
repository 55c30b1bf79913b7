"""The ``diffmb`` command line: reproduce the studies, identify parameters from data, benchmark.

    diffmb reproduce <study>|all --out DIR [--quick] [--jobs N]
    diffmb identify <study> --data FILE.csv --out DIR [--resume]
    diffmb identify --model ROBOT.xml|.urdf --data FILE.csv --out DIR [--params P] [--sensors S]
                    [--floating-base] [--max-steps N] [--max-sim-steps N] [--replay] [--check-gradient]
                    [--backward-smoothing METRES] ...
    diffmb bench [--quick] [--only NAMES] --out DIR
    diffmb list
    diffmb replay RESULT.npz | --model FILE [--floating-base] --traj FILE.csv --out DIR
                  [--format html|gif|mp4|png]

Each study is a module ``diffmb.studies.<name>`` with ``reproduce(out_dir, quick)`` (and, where
it identifies parameters, ``identify(data_csv, out_dir, checkpoint=path)``); the benchmarks are
the modules of ``diffmb.bench``; this file is only the registry.

Exit codes (:data:`EXIT_CODES`): 0 success (a fit that converged); 1 bad input (a data, model or
checkpoint file that cannot be used, or a study that failed); 2 usage (a wrong, missing or
conflicting argument); 3 a fit that stopped without converging (its last estimates are written,
the reason goes to stderr); 130 Ctrl-C; 143 SIGTERM. Errors are one line naming the file, row,
column or argument, never a traceback. ``identify --model`` refuses, before anything compiles,
a record whose duration implies more than ``--max-sim-steps`` (:data:`MAX_SIM_STEPS`)
simulation steps, and warns when the step is longer than the record's sampling interval.

``identify`` checkpoints its fit in ``DIR/checkpoint.npz`` after every iteration. An existing
checkpoint in DIR is never silently reused nor overwritten: without ``--resume`` the command
refuses (exit 2) and suggests ``--resume`` or a fresh ``--out``; with ``--resume`` it continues
from the saved iteration (a finished fit returns at once), and says from which. A checkpoint
that is corrupt or belongs to other data or another study is refused (exit 1). Interrupted
(Ctrl-C, SIGTERM), it keeps the checkpoint and writes ``DIR/results.json`` with
``"status": "interrupted"``, the last saved iteration, its cost and named parameters, and the
command that resumes it. An interrupted ``reproduce`` deletes nothing it has written; the
message says the output is incomplete (``reproduce all`` also writes its index, marking the
interrupted study and those not run).
"""

from __future__ import annotations

import _thread
import argparse
import importlib
import inspect
import json
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

# study name on the command line -> module; order is the order of `reproduce all`
STUDIES = {
    "arm": "diffmb.studies.arm",
    "uav": "diffmb.studies.uav",
    "chain": "diffmb.studies.chain",
    "flexible-arm": "diffmb.studies.flexible_arm",
    "rover": "diffmb.studies.rover",
    "underwater": "diffmb.studies.underwater",
    "excitation": "diffmb.studies.excitation",
    "contact-gradients": "diffmb.studies.contact_gradients",
    "ant-gait": "diffmb.studies.ant_gait",
}

EXIT_CODES = {"ok": 0, "bad_input": 1, "usage": 2, "not_converged": 3, "interrupted": 130,
              "terminated": 143}

# a record implying more simulation steps than this is refused before anything compiles
MAX_SIM_STEPS = 200_000
MAX_FIT_ITERATIONS = 50  # identify --model: Levenberg–Marquardt iterations at most


class CLIError(Exception):
    """A usage error (a wrong, missing or conflicting argument): one line, exit code 2."""

    code = EXIT_CODES["usage"]


class InputError(CLIError):
    """Bad input (a data, model or checkpoint file that cannot be used): one line, exit code 1."""

    code = EXIT_CODES["bad_input"]


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` keeps going)."""


def _out_dir(path) -> Path:
    """Create the output directory ``path``, or say in one line why it cannot be."""
    out = Path(path)
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                what = "is" if p == out else f"is under {p}, which is"
                raise CLIError(f"--out {out}: {what} a file, not a directory")
            break
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CLIError(f"--out {out}: cannot create the directory ({e.strerror or e})") from None
    return out


def _study_module(name: str):
    if name not in STUDIES:
        raise CLIError(f"unknown study {name!r}; choose one of: {', '.join(STUDIES)} (or 'all')")
    try:
        return importlib.import_module(STUDIES[name])
    except ModuleNotFoundError as e:
        if e.name == STUDIES[name]:
            raise CLIError(f"study {name!r} is registered but not installed ({e.name})") from None
        raise


def _reproduce(args) -> int:
    names = list(STUDIES) if args.study == "all" else [args.study]
    for n in names:
        _study_module(n)  # fail fast on unknown names
    jobs = getattr(args, "jobs", 1)
    if jobs < 1:
        raise CLIError(f"--jobs {jobs}: expected a positive number of processes")
    out = _out_dir(args.out)
    failed = []
    if args.study == "all" and jobs > 1:
        return _reproduce_parallel(args, out, names, failed, jobs)
    args.on_interrupt = lambda how: _reproduce_interrupted(args, out, names, failed, how)
    for n in names:
        mod = _study_module(n)
        d = _out_dir(out / n) if args.study == "all" else out
        args.running = n
        t0 = time.perf_counter()
        print(f"[diffmb] reproduce {n} -> {d} ({'quick' if args.quick else 'full'})", flush=True)
        try:
            mod.reproduce(d, quick=args.quick)
        except Exception:  # keep going with the other studies; report at the end
            if args.study != "all":
                raise
            traceback.print_exc()
            failed.append(n)
            continue
        print(f"[diffmb] {n}: done in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.study == "all":
        _write_index(out, names, failed)
    return _report_failed(failed)


def _report_failed(failed) -> int:
    if failed:
        print(f"[diffmb] failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


# `reproduce all --jobs N` starts the longest studies first (their quick CPU time, longest first)
LONGEST_FIRST = ("rover", "underwater", "contact-gradients", "excitation", "arm", "ant-gait",
                 "uav", "chain", "flexible-arm")


def _reproduce_parallel(args, out: Path, names, failed, jobs: int) -> int:
    """Every study in its own ``diffmb reproduce`` child process, ``jobs`` at a time, longest
    first; each child's output goes to ``<out>/<study>/reproduce.log`` (its tail is printed
    when a study fails). An interruption terminates the children and keeps what they wrote."""
    import subprocess

    rank = {n: i for i, n in enumerate(LONGEST_FIRST)}
    pending = sorted(names, key=lambda n: rank.get(n, len(rank)))
    running = {}  # study -> (process, start time, log file)
    finished = set()

    def interrupted(how):
        for p, _, _ in running.values():
            p.terminate()
        for p, _, log in running.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
            log.close()
        _write_index(out, names, failed, interrupted=tuple(running),
                     not_run=tuple(n for n in names if n not in finished and n not in running))
        what = ", ".join(repr(n) for n in running) or "none"
        return (f"diffmb: reproduce {how}; the output in {out} is incomplete (running: {what}); "
                "the files already written are kept")

    args.on_interrupt = interrupted
    mode = "quick" if args.quick else "full"
    print(f"[diffmb] reproduce all -> {out} ({mode}, {jobs} processes)", flush=True)
    while pending or running:
        while pending and len(running) < jobs:
            n = pending.pop(0)
            d = _out_dir(out / n)
            log = open(d / "reproduce.log", "w")  # noqa: SIM115 - closed when the child ends
            p = subprocess.Popen(_study_command(n, d, args.quick), stdout=log,
                                 stderr=subprocess.STDOUT)
            running[n] = (p, time.perf_counter(), log)
            print(f"[diffmb] {n}: started -> {d} (log: {d / 'reproduce.log'})", flush=True)
        time.sleep(0.2)
        for n, (p, t0, log) in list(running.items()):
            if p.poll() is None:
                continue
            log.close()
            del running[n]
            finished.add(n)
            if p.returncode == 0:
                print(f"[diffmb] {n}: done in {time.perf_counter() - t0:.1f} s", flush=True)
                continue
            failed.append(n)
            tail = (out / n / "reproduce.log").read_text(errors="replace").splitlines()[-15:]
            print(f"[diffmb] {n}: FAILED (exit {p.returncode}) after "
                  f"{time.perf_counter() - t0:.1f} s; the end of its log:", file=sys.stderr)
            print("\n".join("    " + line for line in tail), file=sys.stderr, flush=True)
    _write_index(out, names, failed)
    return _report_failed(failed)


def _study_command(name: str, out_dir: Path, quick: bool) -> list:
    """The command line of one study's child process."""
    cmd = [sys.executable, "-m", "diffmb.cli", "reproduce", name, "--out", str(out_dir)]
    return cmd + (["--quick"] if quick else [])


def _write_index(out: Path, names, failed, interrupted=(), not_run=()):
    lines = ["# diffmb studies", ""]
    for n in names:
        if n in interrupted:
            status = "INTERRUPTED (its output is incomplete)"
        elif n in not_run:
            status = "not run (interrupted before)"
        else:
            status = "FAILED" if n in failed else f"[report]({n}/report.md)"
        lines.append(f"- **{n}**: {status}")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _reproduce_interrupted(args, out: Path, names, failed, how: str) -> str:
    """After an interruption: nothing written is deleted; the index says what is missing."""
    n = getattr(args, "running", None)
    if args.study == "all" and n is not None:
        _write_index(out, names, failed, interrupted=(n,),
                     not_run=tuple(names[names.index(n) + 1:]))
    what = f"study {n!r} did not finish" if n else "no study started"
    return (f"diffmb: reproduce {how}; the output in {out} is incomplete ({what}); the files "
            "already written are kept")


CHECKPOINT = "checkpoint.npz"  # identify's resumable state, in --out


def _names(text) -> tuple:
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def _model_path(path, flag="--model") -> Path:
    from .io.sources import SUFFIXES

    p = Path(path)
    if not p.is_file():
        raise CLIError(f"{flag} {p}: no such file")
    if p.suffix.lower() not in SUFFIXES:
        raise CLIError(f"{flag} {p}: unknown model file type {p.suffix!r} (MJCF .xml or .urdf)")
    return p


def _file_dt(path: Path) -> float:
    """The simulation step ``identify`` uses for a file: the MJCF's timestep, 1 ms for a URDF."""
    if path.suffix.lower() == ".urdf":
        return 1e-3
    from .io.mjcf import file_timestep

    try:
        return file_timestep(path)
    except ValueError as e:  # MuJoCo's compiler refuses the file (the message names it)
        raise InputError(str(e).strip()) from None


def check_record_steps(data: Path, dt: float, limit: int) -> int:
    """Refuse (``InputError``) a record whose duration implies more than ``limit`` simulation
    steps of ``dt``; the estimated number of steps otherwise. Reads only the CSV."""
    import numpy as np

    from .io.csvdata import read_csv

    try:
        t, _ = read_csv(data, channels=[])
    except ValueError as e:
        raise InputError(str(e)) from None
    span = float(t[-1] - t[0])
    steps = span / dt
    if steps > limit:
        raise InputError(
            f"{data}: the record spans {span:.6g} s (t = {t[0]:.6g} to {t[-1]:.6g}, "
            f"{t.size} rows), about {steps:.3g} simulation steps of dt = {dt:g} s, more than "
            f"the limit of {limit} (--max-sim-steps); t must be in seconds (is it in "
            "milliseconds?); to run it anyway, raise --max-sim-steps")
    med = float(np.median(np.diff(t))) if t.size > 1 else np.inf
    if dt > med:
        print(f"[diffmb] warning: the simulation step dt = {dt:g} s is longer than {data}'s "
              f"median sample interval {med:.6g} s: the fit cannot resolve what was measured; "
              "give a smaller --dt", file=sys.stderr, flush=True)
    return int(round(steps))


def _identify_model(args):
    """``identify --model FILE``: :func:`diffmb.optim.identify.identify` on any robot file, as
    ``identify(data, out, checkpoint=...)`` like a study's."""
    model = _model_path(args.model)
    if args.floating_base and model.suffix.lower() != ".urdf":
        raise CLIError(f"--floating-base applies to a URDF; {model} is an MJCF, whose free "
                       "joint (if any) is stated in the file")
    dt = args.dt if args.dt is not None else _file_dt(model)

    def run(data, out, checkpoint=None):
        from .optim.identify import identify

        check_record_steps(data, dt, args.max_sim_steps)  # before anything compiles
        kw = dict(params=args.params, sensors=args.sensors, out=out, checkpoint=checkpoint,
                  shooting="multiple" if args.segments > 1 else "single",
                  segments=args.segments, ignore=_names(args.ignore),
                  profile=_names(args.profile), max_steps=args.max_steps,
                  check_gradient=args.check_gradient,
                  backward_smoothing=args.backward_smoothing)
        try:
            if args.floating_base:
                m, forces = _floating_urdf(model)
                res = identify(m, data, forces=forces, dt=dt, **kw)
                res.results.update(model=str(model), floating_base=True)  # the file, not its name
                if (Path(out) / "results.json").is_file():
                    _write_json(Path(out) / "results.json", res.results)
            else:
                res = identify(model, data, dt=args.dt, **kw)
        except KeyError as e:  # an unknown parameter, channel or profile name
            raise CLIError(str(e).strip("'\"")) from None
        except ValueError as e:
            if str(e).startswith("--"):  # names the argument it refuses (--sensors, ...)
                raise CLIError(str(e)) from None
            raise
        except (NotImplementedError, FileNotFoundError) as e:  # what the file asks for
            raise InputError(str(e).strip("'\"")) from None
        if args.replay:
            _identify_replay(res, out, dt)
        return res.results

    return run


def _floating_urdf(path: Path):
    """A URDF with its root link on a free joint, and the forces MuJoCo would apply."""
    from .io import load_model
    from .io.urdf import urdf_forces

    m = load_model(path, floating_base=True)
    return m, urdf_forces(path, m, floating_base=True)


def _identify_replay(res, out: Path, dt: float) -> None:
    """``identify --replay``: DIR/replay.html with the measured motion and the fitted model's
    (simulated from the fitted initial state, the sensor models applied) overlaid, and
    DIR/fitted.npz, the fitted motion, which ``diffmb replay`` reads; one pair per record
    (``replay_<k>``, ``fitted_<k>`` for the k-th record after the first)."""
    import numpy as np

    from . import viz
    from .io.trajectory import save_trajectory
    from .optim.identify import _simulate_fit
    from .simulation import Trajectory

    def traj(t, q):
        n = len(t)
        return Trajectory(ts=np.asarray(t), q=np.asarray(q), v=np.zeros((n, res.model.nv)),
                          status=np.int32(0), t_fail=np.inf, num_steps=np.int32(n))

    sims = _simulate_fit(res.fit, res.model, res.records, dt)
    written = []
    for k, (rec, (q_fit, _)) in enumerate(zip(res.records, sims, strict=True)):
        if rec.q is None:
            print(f"[diffmb] identify --replay: {rec.source} has no q_<joint> columns; no "
                  "replay of it", file=sys.stderr)
            continue
        tag = "" if k == 0 else f"_{k}"
        measured, fitted = traj(rec.t, rec.q), traj(rec.t, q_fit)
        save_trajectory(fitted, out / f"fitted{tag}.npz", model=res.model)
        written.append(viz.replay(res.model, [measured, fitted], out / f"replay{tag}.html",
                                  labels=["measured", "fitted"]))
    for p in written:
        print(f"[diffmb] replay -> {p}", file=sys.stderr)


def _identify(args) -> int:
    from .optim.lsq import read_checkpoint

    if (args.study is None) == (args.model is None):
        raise CLIError("identify: give exactly one of STUDY and --model FILE")
    if args.study is not None:
        for flag in ("params", "sensors", "ignore", "dt", "profile", "backward_smoothing"):
            if getattr(args, flag) is not None:
                raise CLIError(f"identify: --{flag.replace('_', '-')} applies to --model FILE, "
                               "not to a study")
        for flag, default in (("floating_base", False), ("replay", False), ("segments", 1),
                              ("check_gradient", False),
                              ("max_steps", MAX_FIT_ITERATIONS),
                              ("max_sim_steps", MAX_SIM_STEPS)):
            if getattr(args, flag) != default:
                raise CLIError(f"identify: --{flag.replace('_', '-')} applies to --model FILE, "
                               "not to a study")
        mod = _study_module(args.study)
        if not hasattr(mod, "identify"):
            raise CLIError(f"study {args.study!r} has no identification")
        ident = mod.identify
    else:
        ident = _identify_model(args)
    what = args.study if args.study is not None else str(args.model)
    data = Path(args.data)
    if not data.is_file():
        raise CLIError(f"--data {data}: no such file")
    resumable = "checkpoint" in inspect.signature(ident).parameters
    if args.resume and not resumable:
        raise CLIError(f"{what}: its identification cannot be resumed")
    out = _out_dir(args.out)
    ck = out / CHECKPOINT
    if resumable and ck.exists():
        try:
            meta, _ = read_checkpoint(ck)
        except ValueError as e:
            raise InputError(str(e)) from None
        k, done = meta["state"]["k"], meta["state"]["done"]
        if not args.resume:
            raise CLIError(
                f"--out {out} holds the checkpoint of an earlier identification ({ck.name}, "
                f"{'finished' if done else 'unfinished'}, {k} iterations): pass --resume to "
                "continue from it, or choose a fresh --out")
        print(f"[diffmb] identify {what}: resuming from iteration {k} of {ck}",
              file=sys.stderr, flush=True)
    elif args.resume:
        print(f"[diffmb] identify {what}: no checkpoint in {out}; starting from the "
              "beginning", file=sys.stderr, flush=True)
    cmd = ["diffmb", "identify"] + ([args.study] if args.study else ["--model", str(args.model)])
    for flag in ("params", "sensors", "ignore", "dt", "profile"):
        if getattr(args, flag, None) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    if args.segments > 1:
        cmd += ["--segments", str(args.segments)]
    if args.study is None:
        if args.max_steps != MAX_FIT_ITERATIONS:
            cmd += ["--max-steps", str(args.max_steps)]
        if args.check_gradient:
            cmd += ["--check-gradient"]
        if args.backward_smoothing is not None:
            cmd += ["--backward-smoothing", str(args.backward_smoothing)]
        if args.max_sim_steps != MAX_SIM_STEPS:
            cmd += ["--max-sim-steps", str(args.max_sim_steps)]
        cmd += ["--floating-base"] * bool(args.floating_base) + ["--replay"] * bool(args.replay)
    resume_cmd = shlex.join(cmd + ["--data", str(data), "--out", str(out), "--resume"])
    if resumable:
        args.on_interrupt = lambda how: _identify_interrupted(out, ck, resume_cmd, how)
    try:
        res = ident(data, out, checkpoint=ck) if resumable else ident(data, out)
    except ValueError as e:  # bad data or checkpoint: the message names the file and reason
        raise InputError(str(e)) from None
    except (OverflowError, FloatingPointError, ZeroDivisionError) as e:
        raise InputError(f"{data}: the fit failed on these data ({type(e).__name__}: {e})") \
            from None
    args.on_interrupt = None
    results = out / "results.json"
    if isinstance(res, dict) and _status(results) == "interrupted":  # not left stale
        _write_json(results, {"status": "complete", **res})
    if isinstance(res, dict):
        print(json.dumps(res.get("identified", res), indent=2, default=float))
    converged, reason = fit_convergence(res)
    if not converged:
        print(f"diffmb: identify {what}: the fit did not converge ({reason}); the last "
              f"estimates are in {results}; raise --max-steps, start from a closer guess or "
              "record a more informative motion", file=sys.stderr)
        return EXIT_CODES["not_converged"]
    return 0


def fit_convergence(res) -> tuple[bool, str]:
    """(converged, reason) from an identification's results: its ``converged`` flag, at the top
    level or under ``"fit"``, else its ``success`` flag (a fit whose solver converged but which
    is not a success for another reason, e.g. a parameter the data cannot identify, says so in
    its results and counts as converged), with ``reason`` or ``message``. Results that state
    neither count as converged unless the message says the iteration cap stopped the fit."""
    if not isinstance(res, dict):
        return True, ""
    parts = [d for d in (res, res.get("fit")) if isinstance(d, dict)]
    for key in ("converged", "success"):
        for d in parts:
            flag = d.get(key)
            if isinstance(flag, bool) or hasattr(flag, "dtype"):  # a Python or numpy bool
                msg = str(d.get("reason") or d.get("message") or "no reason given")
                if key == "success" and not flag and msg.startswith("converged"):
                    return True, msg
                return bool(flag), msg
    msg = next((d["message"] for d in parts if isinstance(d.get("message"), str)), "")
    if msg.startswith("stopped after"):  # the solver's iteration cap
        return False, msg
    return True, ""


def _status(path: Path):
    try:
        return json.loads(path.read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def _write_json(path: Path, obj):
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=float) + "\n")
    os.replace(tmp, path)


def _identify_interrupted(out: Path, ck: Path, resume_cmd: str, how: str) -> str:
    """Write ``out/results.json`` marked ``"interrupted"`` from the last checkpoint; the
    one-line message says how to resume."""
    from .optim.lsq import read_checkpoint

    res = {"status": "interrupted", "reason": how}
    try:
        meta, _ = read_checkpoint(ck) if ck.exists() else (None, None)
    except ValueError as e:
        meta, res["checkpoint_error"] = None, str(e)
    if meta is None:
        res.update(iteration=0, note="interrupted before the first iteration was saved")
        _write_json(out / "results.json", res)
        return (f"diffmb: identify {how} before the first iteration was saved; "
                f"{out / 'results.json'} is marked interrupted; run it again to start over")
    st = meta["state"]
    res.update(iteration=st["k"], cost=meta.get("cost", st["history"][-1]["cost"]),
               params=meta.get("params"), checkpoint=str(ck), resume=resume_cmd)
    _write_json(out / "results.json", res)
    return (f"diffmb: identify {how} after iteration {st['k']}; partial results in "
            f"{out / 'results.json'}; resume with: {resume_cmd}")


def _bench(args) -> int:
    from . import bench

    try:
        bench.select(args.only)  # unknown names fail before anything runs
    except bench.UnknownBenchmark as e:
        raise CLIError(str(e)) from None
    out = _out_dir(args.out)
    bench.print_table(bench.run_and_write(out, quick=args.quick, only=args.only))
    return 0


def _replay(args) -> int:
    """``diffmb replay``: a trajectory saved by :func:`diffmb.io.save_trajectory` (its model from
    the recorded file or the embedded text, with the recorded floating base; or --model), or a
    CSV record on --model with the channels ``identify --model`` reads (``t``, ``q_<joint>``,
    ``v_<joint>``, ``tau_<joint>``, ``ctrl_<actuator>``: the poses come from q, the other
    channels are checked but not drawn), written to DIR/replay.<format> (diffmb.viz)."""
    from . import viz
    from .io import load_trajectory, model_from_info

    if args.result is not None and args.traj is not None:
        raise CLIError("replay: give RESULT.npz or --traj FILE.csv, not both")
    if args.result is None and (args.traj is None or args.model is None):
        raise CLIError("replay: give RESULT.npz, or both --model FILE and --traj FILE.csv")
    if args.floating_base and args.model is not None and Path(args.model).suffix.lower() != ".urdf":
        raise CLIError(f"replay: --floating-base applies to a URDF --model, not {args.model}")
    try:
        if args.result is not None:
            if not Path(args.result).is_file():
                raise InputError(f"{args.result}: no such file")
            traj, info = load_trajectory(args.result)
            if args.floating_base and not args.model and info.get("model_kind") != "urdf":
                raise CLIError(f"replay: --floating-base applies to a URDF; {args.result} "
                               f"records {info.get('model_path') or 'no model file'}")
            model = (_replay_model(args.model, args.floating_base) if args.model else
                     model_from_info(info, where=str(args.result),
                                     floating_base=True if args.floating_base else None))
        else:
            model = _replay_model(args.model, args.floating_base)
            traj = _replay_record(args.traj, model)
        out = _out_dir(args.out)
        path = viz.replay(model, traj, out / f"replay.{args.format}", frames=args.frames)
    except (ValueError, FileNotFoundError, TypeError, NotImplementedError, RuntimeError) as e:
        raise InputError(str(e)) from None
    print(f"[diffmb] replay -> {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def _replay_model(path, floating_base=False):
    from .io import load_model

    p = Path(path)
    if not p.is_file():
        raise InputError(f"--model {p}: no such file")
    return load_model(p, floating_base=floating_base or None)


def _replay_record(path, model):
    """The q of a CSV record as a Trajectory; the file may hold every channel ``identify
    --model`` reads for ``model`` (its actuators' ``ctrl_<actuator>`` included)."""
    from .optim.sysid import read_joint_csv
    from .viz import frames

    if not Path(path).is_file():
        raise InputError(f"--traj {path}: no such file")
    rec = read_joint_csv(path, model, _actuator_names(model))
    if rec.q is None:
        raise InputError(f"{path}: no q_<joint> columns to draw the poses from (joints "
                         f"{list(model.joint_names)})")
    return frames(rec.t, rec.q, rec.v)


def _actuator_names(model) -> tuple:
    """The names of the ``ctrl_<actuator>`` channels of ``model``'s file (MJCF actuators)."""
    if model.source is None or model.source.kind != "mjcf":
        return ()
    from .io.mjcf import read_actuators

    return tuple(read_actuators(model.source.path)["names"])


def _number(flag, **bounds):
    """An argparse type: a float checked by :func:`diffmb.validation.check_value`, refused as a
    usage error naming ``flag``."""
    def parse(text):
        from .validation import check_value

        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        try:
            check_value("", flag, v, **bounds)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"got {text}; {str(e).split(': ', 1)[-1]}") \
                from None
        return v
    return parse


def _integer(flag, **bounds):
    """An argparse type: an integer within ``bounds`` (see :func:`_number`)."""
    real = _number(flag, **bounds)

    def parse(text):
        try:
            int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        return int(real(text))
    return parse


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit code 2), pointing at ``--help``."""

    def error(self, message):
        self.exit(EXIT_CODES["usage"], f"{self.prog}: error: {message} (see: {self.prog} "
                  "--help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="diffmb", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reproduce", help="run a study and write results.json, figures, report.md")
    r.add_argument("study", help=f"one of {', '.join(STUDIES)}, or all")
    r.add_argument("--out", required=True, help="output directory")
    r.add_argument("--quick", action="store_true", help="shorter horizons, same contract keys")
    r.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with 'all': run N studies at once, each in its own process (default 1)")
    i = sub.add_parser("identify", help="fit parameters of a study or of any robot file to "
                       "measured data (CSV)")
    i.add_argument("study", nargs="?", default=None,
                   help=f"one of {', '.join(STUDIES)} (or give --model)")
    i.add_argument("--model", default=None,
                   help="a robot file (MJCF .xml or .urdf) instead of a study")
    i.add_argument("--params", default=None,
                   help="with --model: comma-separated parameter names, wildcards in body/joint "
                        "names (default: 'body.*.mass,joint.*.damping'), e.g. "
                        "'body.*.inertial,joint.*.armature'")
    i.add_argument("--sensors", default=None,
                   help="with --model: comma-separated <channel>.<field>, field gain, bias, "
                        "delay or noise, e.g. 'q_*.bias,q_elbow.delay,q_*.noise'")
    i.add_argument("--ignore", default=None,
                   help="with --model: MJCF features to simulate without, e.g. "
                        "'unsupported_contacts'")
    i.add_argument("--floating-base", action="store_true",
                   help="with --model FILE.urdf: the root link moves freely (a free joint, "
                        "channels q_root_joint_0..6 = [x, y, z, qw, qx, qy, qz])")
    i.add_argument("--dt", type=_number("--dt", lo=0.0, lo_open=True, hi=1.0), default=None,
                   help="with --model: simulation step [s], in (0, 1] (default: the MJCF "
                        "timestep; 1 ms for a URDF)")
    i.add_argument("--profile", default=None,
                   help="with --model: comma-separated scalar parameters whose profile "
                        "likelihood (refits on a grid) is reported beside the Laplace interval")
    i.add_argument("--check-gradient", action="store_true",
                   help="with --model: check the cost's gradient at the start (reverse mode, "
                        "central differences, smoothed estimates: diffmb.optim.check_gradient); "
                        "the verdict is in results.json")
    i.add_argument("--backward-smoothing", type=_number("--backward-smoothing", lo=0.0,
                                                         lo_open=True, hi=1.0), default=None,
                   metavar="METRES",
                   help="with --model: the contacts' derivatives see their normal law smoothed "
                        "over this width, the simulation unchanged (diffmb.contacts."
                        "backward_smoothed); recorded in results.json")
    i.add_argument("--max-steps", type=_integer("--max-steps", lo=1),
                   default=MAX_FIT_ITERATIONS,
                   help="with --model: Levenberg–Marquardt iterations at most (default "
                        f"{MAX_FIT_ITERATIONS}); a fit stopped by it exits with code 3")
    i.add_argument("--max-sim-steps", type=_integer("--max-sim-steps", lo=1),
                   default=MAX_SIM_STEPS,
                   help="with --model: refuse a record whose duration implies more simulation "
                        f"steps than this (default {MAX_SIM_STEPS}), before anything compiles")
    i.add_argument("--segments", type=_integer("--segments", lo=1), default=1,
                   help="with --model: multiple shooting with this many segments per record "
                        "(default 1: single shooting)")
    i.add_argument("--data", required=True, help="CSV: first column t [s], then named channels")
    i.add_argument("--out", required=True,
                   help=f"output directory; the fit is checkpointed in DIR/{CHECKPOINT}")
    i.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint in --out (without it, an existing "
                        "checkpoint is refused)")
    i.add_argument("--replay", action="store_true",
                   help="with --model: also write DIR/replay.html (the measured and the fitted "
                        "motion overlaid) and DIR/fitted.npz (the fitted trajectory, for "
                        "'diffmb replay')")
    from .bench import add_arguments

    add_arguments(sub.add_parser("bench", help="benchmarks against peers measured in the same "
                                 "run; writes DIR/bench.json"))
    sub.add_parser("list", help="list the studies")
    v = sub.add_parser("replay", help="write a replay (HTML page, GIF, MP4 or PNG) of a saved "
                       "trajectory or a CSV record")
    v.add_argument("result", nargs="?", default=None,
                   help="a trajectory saved by diffmb.io.save_trajectory (.npz)")
    v.add_argument("--model", default=None, help="robot file (MJCF .xml or .urdf)")
    v.add_argument("--floating-base", action="store_true",
                   help="with a URDF --model: its root link on a free joint (q_root_joint_*)")
    v.add_argument("--traj", default=None,
                   help="CSV record: t, then q_<joint> columns (and any other channel identify "
                        "--model reads: v_, tau_, ctrl_<actuator>; not drawn)")
    v.add_argument("--out", required=True, help="output directory (writes DIR/replay.<format>)")
    v.add_argument("--format", default="html", choices=("html", "gif", "mp4", "png"))
    v.add_argument("--frames", action="store_true", help="draw every body's axes")
    return p


def _run(args) -> int:
    if args.cmd == "reproduce":
        return _reproduce(args)
    if args.cmd == "identify":
        return _identify(args)
    if args.cmd == "bench":
        return _bench(args)
    if args.cmd == "replay":
        return _replay(args)
    for n, m in STUDIES.items():
        print(f"{n:14s} {m}")
    return 0


class _Signals:
    """SIGINT and SIGTERM raised as exceptions in the main thread (KeyboardInterrupt, _Terminated)
    and raised again every second until ``main`` has caught one: an exception raised while a
    garbage-collector callback runs (JAX registers one) is printed and swallowed by Python."""

    def __init__(self):
        self.caught = False
        self.previous = {}

    def install(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # a background job ignores ^C
                    self.previous[sig] = signal.signal(sig, self._raise)
            except ValueError:  # not the main thread: leave the handlers as they are
                return

    def restore(self):
        self.caught = True
        for sig, h in self.previous.items():
            signal.signal(sig, h if h is not None else signal.SIG_DFL)

    def _raise(self, signum, frame):
        if not self.caught:
            timer = threading.Timer(1.0, self._again, (signum,))
            timer.daemon = True
            timer.start()
        raise KeyboardInterrupt if signum == signal.SIGINT else _Terminated

    def _again(self, signum):
        if not self.caught:
            _thread.interrupt_main(signum)


def _after_interrupt(args, how: str) -> str:
    """Keep the partial results of the interrupted command; its one-line message."""
    hook = getattr(args, "on_interrupt", None)
    if hook is not None:
        try:
            return hook(how)
        except Exception as e:  # noqa: BLE001 - the interruption is what is reported
            return f"diffmb: {args.cmd} {how} (its partial results could not be written: {e})"
    return f"diffmb: {args.cmd} {how}"


def _one_line(text: str) -> str:
    """``text`` on one line (a loader's multi-line message joined with spaces)."""
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def _interrupted(code: int, message: str, hard: bool) -> int:
    print(message, file=sys.stderr)
    if hard:  # the process's own command line: leave at once, without the interpreter's
        # finalisation, during which XLA's still-running threads can crash the process
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``: then an interruption ends the
    process at once with its exit code); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        if argv is None:
            raise
        return e.code if isinstance(e.code, int) else EXIT_CODES["usage"]
    signals = _Signals()
    signals.install()
    try:
        return _run(args)
    except CLIError as e:
        print(f"diffmb: error: {_one_line(str(e))}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        signals.restore()
        msg = _after_interrupt(args, "interrupted (Ctrl-C)")
        return _interrupted(130, f"\n{msg}", argv is None)
    except _Terminated:
        signals.restore()
        return _interrupted(143, _after_interrupt(args, "terminated (SIGTERM)"), argv is None)
    finally:
        signals.restore()


if __name__ == "__main__":
    sys.exit(main())
