"""GPU probe for MLA (issue 39) and two kernel families: which library calls run on this GPU,
how right (relative error against fp32 references) and how fast (CUDA events). Self-contained:
torch and the libraries only (the flex item also reads the flex backend's split rule from this
checkout, with a fallback), so it runs whatever state the harness is in.

    python3 -m tools.mla_probe OUT_DIR [--items env,flashinfer_mla,...] [--timeout 300]

Every item runs in its own subprocess (a library that crashes the process or the CUDA context
takes only its own item down) and writes OUT_DIR/<item>.json after each attempt; the parent
writes OUT_DIR/summary.json (per item: exit code, stderr tail, attempts ok/failed)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ITEMS = ("env", "flashinfer_mla", "fa3_fwd", "flashmla", "cudnn_prefill", "flex_split")  # flex last: most memory


def run_env(rec) -> None:
    import torch

    rec.note("python", platform.python_version())
    rec.note("torch", torch.__version__)
    rec.note("cuda", torch.version.cuda)
    if torch.cuda.is_available():
        rec.note("device", torch.cuda.get_device_name())
        rec.note("capability", list(torch.cuda.get_device_capability()))
    rec.note("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    # flash_mla last: a binary built for another torch may take the process down on import
    for mod in ("flashinfer", "cudnn", "fa3_fwd_interface", "flash_attn_interface", "flash_attn", "flash_attn.cute",
                "flash_mla"):
        def load(mod=mod):
            m = importlib.import_module(mod)
            return {"version": str(getattr(m, "__version__", "unknown")), "file": str(getattr(m, "__file__", ""))}
        rec.attempt(f"import {mod}", {}, load)


def child(item: str, out: Path) -> int:
    from tools.mla_probe.common import Recorder

    rec = Recorder(out, item)
    if item == "env":
        run_env(rec)
    elif item == "flashinfer_mla":
        from tools.mla_probe import flashinfer_mla

        rec.attempt("setup", {}, lambda: (flashinfer_mla.run(rec), {})[1])
    elif item == "fa3_fwd":
        from tools.mla_probe import fa3_flashmla

        rec.attempt("setup", {}, lambda: (fa3_flashmla.run_fa3(rec), {})[1])
    elif item == "flashmla":
        from tools.mla_probe import fa3_flashmla

        fa3_flashmla.run_flashmla(rec)
    elif item == "cudnn_prefill":
        from tools.mla_probe import cudnn_prefill

        rec.attempt("setup", {}, lambda: (cudnn_prefill.run(rec), {})[1])
    elif item == "flex_split":
        from tools.mla_probe import flex_split

        rec.attempt("setup", {}, lambda: (flex_split.run(rec), {})[1])
    else:
        print(f"unknown item {item!r}; expected one of {', '.join(ITEMS)}", file=sys.stderr)
        return 2
    return 0


def summarize(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return {"json": f"unreadable: {e}"}
    att = [a for a in data.get("attempts", []) if a["name"] != "setup" or not a.get("ok")]
    return {"ok": sum(1 for a in att if a.get("ok") and a.get("passed", True)),
            "failed_or_mismatch": [f"{a['name']} {json.dumps(a['params'], default=str)[:160]}: "
                                   f"{a.get('error', 'mismatch ' + str(a.get('rel_err')))[:200]}"
                                   for a in att if not (a.get("ok") and a.get("passed", True))]}


def table(out: Path, items: list[str]) -> str:
    """summary.md: one line per attempt (what ran, error or relative errors, time)."""
    lines = ["| item | attempt | params | result | rel err | lse rel err | median us | TB/s |", "|---" * 8 + "|"]
    for item in items:
        try:
            data = json.loads((out / f"{item}.json").read_text())
        except (OSError, ValueError):
            lines.append(f"| {item} | - | - | no JSON | | | | |")
            continue
        for a in data.get("attempts", []):
            if a["name"] == "setup" and a.get("ok"):
                continue
            params = json.dumps(a.get("params", {}), default=str).replace("|", "/")[:110]
            if not a.get("ok"):
                result = "error: " + a.get("error", "")[:160].replace("|", "/").replace("\n", " ")
            else:
                result = "pass" if a.get("passed", True) else "MISMATCH"
            lines.append(f"| {item} | {a['name']} | {params} | {result} | {a.get('rel_err', '')} | "
                         f"{a.get('lse_rel_err', '')} | {a.get('median_us', '')} | {a.get('tb_per_s', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tools.mla_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--items", default=",".join(ITEMS))
    p.add_argument("--timeout", type=int, default=240, help="seconds per item (default 240)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.child:
        return child(a.child, a.out)
    summary: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": argv, "items": {}}
    for item in [i for i in a.items.split(",") if i]:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "tools.mla_probe", str(a.out), "--child", item]
        print(f"== {item}: {' '.join(cmd)}", flush=True)
        try:
            r = subprocess.run(cmd, timeout=a.timeout, stderr=subprocess.PIPE, text=True)
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired as e:
            rc, err = "timeout", (e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr) or ""
        entry = {"rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "stderr_tail": err[-2000:],
                 **summarize(a.out / f"{item}.json")}
        summary["items"][item] = entry
        (a.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        print(f"== {item}: rc={rc} {entry['wall_s']}s ok={entry.get('ok')} "
              f"failed={len(entry.get('failed_or_mismatch', []))}", flush=True)
    (a.out / "summary.md").write_text(table(a.out, list(summary["items"])))
    print(f"wrote {a.out}/summary.json, summary.md and one JSON per item")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
