"""Which FlashInfer kernel families import and run here: one short check before a long run.

Prints, per family (decode_backend x prefill_backend as suites/other_kernels.yaml runs them),
whether the backend is available for it (FlashInfer's version, or why not), then runs
suites/conformance-kernel-families.yaml's smallest decode, prefill and mixed cases once each
(``harness run --no-time``) and prints one line per row: status, the kernel that ran
(``call.decode_kernel`` / ``call.prefill_backend_resolved``) and the reason where it did not run.
Exit 0 when no row is ``error``/``mismatch``. Usage: python -m backends.flashinfer.probe OUT_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from backends.flashinfer import FlashInferBackend, families

CASES = ("decode[num_heads=4,head_size=128,dtype=bfloat16,block_size=16]",
         "prefill[num_heads=4,head_size=128,block_size=16]", "mixed[block_size=16]")


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "results/flashinfer-families")
    for db in families.DECODE_BACKENDS:
        a = FlashInferBackend.availability({"decode_backend": db})
        print(f"decode_backend={db:<11} {'available ' + str(a.versions) if a.available else 'unavailable: ' + a.reason}")
    for pb in families.PREFILL_BACKENDS:
        a = FlashInferBackend.availability({"prefill_backend": pb})
        print(f"prefill_backend={pb:<10} {'available ' + str(a.versions) if a.available else 'unavailable: ' + a.reason}")
    cmd = [sys.executable, "-m", "harness", "run", "suites/conformance-kernel-families.yaml", "--no-time",
           "--backends", "flashinfer", *[a for c in CASES for a in ("--case", c)], "--out", str(out)]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if not (out / "results.jsonl").exists():
        print(f"no results.jsonl under {out} (harness run exited {rc})")
        return 2
    bad = 0
    for line in (out / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        call = row.get("call") or {}
        kernel = call.get("decode_kernel") or "-", call.get("prefill_backend_resolved") or "-"
        bad += row["status"] in ("error", "mismatch")
        print(f"{row['case']:<55} {json.dumps(row['variant'], sort_keys=True):<100} {row['status']:<11} "
              f"decode={kernel[0]} prefill={kernel[1]} {row.get('reason') or ''}"[:400])
    return 1 if bad or rc not in (0, 1) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
