"""Run the whole test suite as N parallel pytest processes (shards), with plain pytest only.

The GPU machine has no pytest-xdist and cannot download it, and the suite run serially did not
fit a 280 s step there (2026-11-30: 68% done). This splits the collection into N shards balanced
by a per-file cost table (measured on the CPU box, plus an allowance for the files that run GPU
backends when CUDA is present), runs them side by side, each with its own log, junit XML,
basetemp and ceilings cache, round-robin over the visible GPUs, then the GPU-timing tests alone
(a shared GPU would disturb their timing assertions), and writes one combined log.

    python3 ci/pytest_shards.py --log gpu-pytest.log [--shards N] [--timeout S] [--check]

--check plans only: it proves that the shards' union is exactly the collection (no test lost,
none twice) and that every shard's node ids collect back to the same tests; exit 1 otherwise.
Exit status: 0 when every shard passed, 1 when any shard failed, timed out or errored.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Seconds per file, `pytest --junitxml` on the 2-core CPU box under load (2026-11-30, 1087 tests,
# 308 s in all). Files not listed weigh DEFAULT_FILE_S.
CPU_FILE_S = {
    "tests/test_compare.py": 34.7, "tests/test_resume.py": 32.8, "tests/test_report.py": 32.7,
    "tests/test_executor.py": 27.4, "tests/test_ray_executor.py": 24.6, "tests/test_report_browser.py": 21.1,
    "tests/test_cli.py": 16.1, "tests/benchmarks/test_bench_plugin.py": 15.6, "tests/test_gate_noise.py": 15.3,
    "tests/test_mutants.py": 14.9, "tests/test_example_backend.py": 11.3, "tests/test_fuzz_suites.py": 10.9,
    "tests/test_speed.py": 7.2, "tests/test_recommend.py": 5.7, "tests/test_invariants.py": 4.4,
    "tests/test_trace.py": 4.1, "tests/test_cascade.py": 4.1, "tests/test_timing.py": 3.8,
    "tests/test_adversarial.py": 3.7, "tests/test_output_width.py": 3.5, "tests/test_ci_scripts.py": 3.2,
    "tests/test_layout.py": 2.7, "tests/test_conformance_cpu.py": 2.2, "tests/test_suite_input.py": 2.1,
    "tests/test_registry.py": 1.5,
}
DEFAULT_FILE_S = 1.0
# Extra seconds where CUDA is present: these files run the GPU backends (memory-peak test over
# four backends, FlashInfer/FA first calls, cascade and adapter paths) or start a harness worker
# per test, each of which creates a CUDA context on a GPU machine.
GPU_EXTRA_S = {
    "tests/test_executor.py": 60.0, "tests/test_flash_attn_backend.py": 20.0, "tests/test_cascade.py": 20.0,
    "tests/test_flashinfer_backend.py": 10.0, "tests/test_resume.py": 20.0, "tests/test_cli.py": 15.0,
    "tests/test_ray_executor.py": 30.0, "tests/test_speed.py": 10.0, "tests/test_mutants.py": 10.0,
}
# Never split over shards: one Ray local cluster at a time.
WHOLE_FILES = {"tests/test_ray_executor.py"}
# Run after the shards, alone on the machine: they assert on GPU timings (graph vs eager within
# 5%, cold L2 slower than hot, a real 1.5x slowdown flagged by compare) that other processes on
# the same GPU would disturb (the H200 run of 2026-11-30 evening: test_gate_noise's slowed run
# compared as unchanged while 6 shards shared its GPU).
SERIAL_FILES = ("tests/test_timing.py", "tests/test_gate_noise.py")
SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?|skipped|deselected)\b|no tests ran")


def collect(args: list[str] | None = None) -> list[str]:
    """Node ids of the collection, in pytest's order."""
    cmd = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *(args or [])]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    ids = [ln.strip() for ln in r.stdout.splitlines() if "::" in ln and not ln.startswith(("=", " "))]
    if r.returncode not in (0, 5) or (not ids and not args):
        raise SystemExit(f"pytest_shards: collection failed (exit {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return ids


def file_of(node: str) -> str:
    return node.split("::", 1)[0]


def file_weight(path: str, n_tests: int, gpu: bool) -> float:
    w = CPU_FILE_S.get(path, DEFAULT_FILE_S if n_tests < 50 else DEFAULT_FILE_S * 2)
    return w + (GPU_EXTRA_S.get(path, 0.0) if gpu else 0.0)


def plan(ids: list[str], shards: int, gpu: bool) -> tuple[list[list[str]], list[float], list[str]]:
    """(node ids per shard, estimated seconds per shard, serial node ids). Whole files are the
    units, except a file heavier than a fair share, which is cut into chunks of its tests (not
    the WHOLE_FILES); units go heaviest first to the lightest shard (LPT)."""
    by_file: dict[str, list[str]] = defaultdict(list)
    for node in ids:
        by_file[file_of(node)].append(node)
    serial = [n for f in SERIAL_FILES for n in by_file.pop(f, [])]
    weights = {f: file_weight(f, len(nodes), gpu) for f, nodes in by_file.items()}
    share = sum(weights.values()) / max(1, shards)
    units: list[tuple[float, list[str]]] = []
    for f, nodes in by_file.items():
        w = weights[f]
        parts = 1 if f in WHOLE_FILES or shards == 1 else min(len(nodes), max(1, int(-(-w // (share * 0.6)))))
        size = -(-len(nodes) // parts)
        for i in range(0, len(nodes), size):
            chunk = nodes[i:i + size]
            units.append((w * len(chunk) / len(nodes), chunk))
    units.sort(key=lambda u: (-u[0], u[1][0]))
    out: list[list[str]] = [[] for _ in range(shards)]
    load = [0.0] * shards
    for w, chunk in units:
        k = min(range(shards), key=lambda i: (load[i], i))
        out[k].extend(chunk)
        load[k] += w
    order = {n: i for i, n in enumerate(ids)}  # each shard runs its tests in collection order
    return [sorted(s, key=order.__getitem__) for s in out], load, serial


def check(ids: list[str], shards: list[list[str]], serial: list[str]) -> list[str]:
    """Problems with a plan: tests lost or duplicated, node ids that do not collect back."""
    problems = []
    flat = [n for s in shards for n in s] + serial
    if len(flat) != len(set(flat)):
        problems.append(f"{len(flat) - len(set(flat))} test(s) in more than one shard")
    if set(flat) != set(ids):
        problems.append(f"lost: {sorted(set(ids) - set(flat))[:5]}; extra: {sorted(set(flat) - set(ids))[:5]}")
    for k, s in enumerate([*shards, serial]):
        if s and collect(s) != s:
            problems.append(f"shard {k + 1}: its node ids collect to a different set of tests")
    return problems


def visible_gpus() -> list[str]:
    """GPU ids to hand out: those CUDA_VISIBLE_DEVICES already allows, else every device."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def summary_line(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    for ln in reversed(lines):
        if SUMMARY.search(ln):
            return ln.strip("= ").strip()
    return "(no pytest summary line)"


def failures(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith(("FAILED ", "ERROR "))]


def slowest(xmls: list[Path], n: int = 20) -> list[tuple[float, str]]:
    times = []
    for x in xmls:
        try:
            for tc in ET.parse(x).iter("testcase"):
                times.append((float(tc.get("time") or 0), f"{tc.get('classname')}::{tc.get('name')}"))
        except (ET.ParseError, OSError):
            continue
    return sorted(times, reverse=True)[:n]


class Shard:
    def __init__(self, name: str, nodes: list[str], gpu: str | None, folder: Path, estimate: float):
        self.name, self.nodes, self.gpu, self.estimate = name, nodes, gpu, estimate
        self.log, self.xml = folder / f"{name}.log", folder / f"{name}.xml"
        self.proc: subprocess.Popen | None = None
        self.rc: int | None = None
        self.t0 = self.t1 = 0.0
        env = {**os.environ, "ATTN_HARNESS_CACHE_DIR": str(folder / f"{name}-cache")}
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        self.env = env
        self.cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=10",
                    f"--basetemp={folder / (name + '-tmp')}", f"--junitxml={self.xml}", *nodes]

    def start(self) -> None:
        self.t0 = time.monotonic()
        with open(self.log, "w") as fh:  # the shard's own process group: SIGINT reaches pytest alone
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def poll(self) -> bool:
        if self.rc is None and self.proc is not None and self.proc.poll() is not None:
            self.rc, self.t1 = self.proc.returncode, time.monotonic()
        return self.rc is not None

    def interrupt(self) -> None:
        if self.proc is not None and self.rc is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)  # pytest prints its summary on SIGINT
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_all(shards: list[Shard], deadline: float) -> bool:
    """Start every shard, wait until all end or the deadline (then SIGINT, 20 s, SIGKILL).
    Returns False when interrupted by a deadline or SIGINT."""
    for s in shards:
        s.start()
    clean = True
    try:
        while not all(s.poll() for s in shards):
            if time.monotonic() > deadline:
                clean = False
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        clean = False
    if not clean:
        for s in shards:
            s.interrupt()
        end = time.monotonic() + 20
        while not all(s.poll() for s in shards) and time.monotonic() < end:
            time.sleep(0.5)
        for s in shards:
            s.kill()
            s.poll()
            if s.rc is None:
                s.rc, s.t1 = -9, time.monotonic()
    return clean


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", default="gpu-pytest.log", help="combined log (shard logs go to LOG's folder/shards)")
    ap.add_argument("--shards", type=int, default=int(os.environ.get("SHARDS", 0)) or None,
                    help="parallel pytest processes (default: $SHARDS, else cores/4, 1 to 8)")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("SHARD_TIMEOUT", 230)),
                    help="seconds for the parallel part; then shards get SIGINT and print their summary")
    ap.add_argument("--serial-timeout", type=float, default=60.0, help="seconds for the serial GPU-timing tests")
    ap.add_argument("--check", action="store_true", help="plan only: prove the shards cover the collection")
    args = ap.parse_args(argv)
    n = args.shards or max(1, min(8, (os.cpu_count() or 1) // 4))
    gpus = visible_gpus()
    ids = collect()
    parts, load, serial = plan(ids, n, gpu=bool(gpus))
    print(f"pytest_shards: {len(ids)} tests, {n} shard(s) over GPU(s) {','.join(gpus) or 'none'}; "
          f"estimated s per shard {[round(x) for x in load]}; {len(serial)} serial", flush=True)
    if args.check:
        problems = check(ids, parts, serial)
        for k, p in enumerate(parts):
            print(f"  shard {k + 1}: {len(p)} tests, {len({file_of(x) for x in p})} file(s), ~{load[k]:.0f} s")
        print("\n".join(f"  PROBLEM {p}" for p in problems) or "  union of the shards == the collection (no test lost or repeated)")
        return 1 if problems else 0

    log = Path(args.log)
    folder = log.parent / "shards"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    shards = [Shard(f"shard{k + 1}", p, gpus[k % len(gpus)] if gpus else None, folder, load[k])
              for k, p in enumerate(parts) if p]
    clean = run_all(shards, t0 + args.timeout)
    if clean and serial:
        last = Shard("serial", serial, gpus[0] if gpus else None, folder, 0.0)
        clean = run_all([last], time.monotonic() + args.serial_timeout)
        shards.append(last)
    lines = [f"# pytest_shards: {len(ids)} tests in {len(shards)} process(es), GPUs {','.join(gpus) or 'none'}, "
             f"{time.monotonic() - t0:.0f} s wall" + ("" if clean else " (INTERRUPTED: time limit or SIGINT)")]
    for s in shards:
        lines.append(f"{s.name} gpu={s.gpu or '-'} tests={len(s.nodes)} est={s.estimate:.0f}s "
                     f"took={s.t1 - s.t0:.0f}s rc={s.rc}: {summary_line(s.log)}  [{s.log}]")
    fails = [f for s in shards for f in failures(s.log)]
    lines += ["", f"failed/errors ({len(fails)}):", *fails] if fails else ["", "failed/errors: none"]
    lines += ["", "slowest tests (junit times):"] + [f"  {t:7.2f}s {name}" for t, name in slowest([s.xml for s in shards])]
    bad = [s.name for s in shards if s.rc != 0]
    lines.append(f"gpu_pytest: {'FAIL: ' + ' '.join(bad) if bad else 'all shards passed'}")
    text = "\n".join(lines) + "\n"
    with open(log, "a") as fh:
        fh.write(text)
    print(text, end="")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
