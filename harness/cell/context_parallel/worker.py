"""One distributed CP rank (``python -m harness.cell.context_parallel.worker JOB.json``, RANK and
WORLD_SIZE, MASTER_ADDR/PORT in the environment): regenerate the case's batch from its seed,
compute this rank's partial per TP slice, run each combine over the process group (gloo on CPU,
NCCL on the GPU of this rank), and write the merged result (rank 0) and this rank's info."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main(job_path: str) -> int:
    from harness.cell.context_parallel.cell import rank_partial
    from harness.cell.context_parallel.combine import combine_rank
    from harness.cell.context_parallel.ranks import DistComm
    from harness.cell.context_parallel.shard import tp_batch
    from harness.registry import resolve
    from harness.spec import CaseSpec
    from harness.case.workload import generate

    job = json.loads(Path(job_path).read_text())
    out_dir = Path(job["out"])
    if job["device"] == "cuda":
        import os

        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank)
        device, backend_name = torch.device("cuda", rank), "nccl"
    else:
        device, backend_name = torch.device("cpu"), "gloo"
    dist.init_process_group(backend_name)
    try:
        comm = DistComm()
        case = CaseSpec.model_validate(job["case"])
        cp = case.context_parallel
        assert cp is not None  # the runner sends context-parallel cases only
        backend = resolve(job["backend"])
        batch = generate(case, device)
        merged: dict[str, list] = {c: [] for c in job["combines"]}
        infos = []
        for t in range(cp.tp_size):
            part = tp_batch(batch, cp.tp_size, t)
            out, lse, info = rank_partial(backend, job["variant"], part, cp.degree, comm.rank, cp.sharding, device)
            infos.append({**info, "tp_rank": t})
            for name in job["combines"]:
                merged[name].append(combine_rank(out, lse, comm, name))
        (out_dir / f"info{comm.rank}.json").write_text(json.dumps(infos))
        if comm.rank == 0:
            res = {c: (torch.cat([o for o, _ in v], 1).cpu(), torch.cat([l for _, l in v], 1).cpu())
                   for c, v in merged.items()}
            torch.save(res, out_dir / "result.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
