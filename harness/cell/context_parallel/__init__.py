"""Context-parallel conformance: each request's KV sharded over ranks, each rank's backend call
merged by its LSE with vLLM's two decode-context-parallel combines (docs/context-parallel.md).

    shard     which KV positions each rank holds; a rank's sub-batch (its shard's pages, the
              full queries, absolute-position causal masking)
    combine   the two strategies (all-gather LSEs + reduce-scatter outputs; all-to-all), written
              once against a small collective interface
    ranks     that interface: threads in one process (simulated) or torch.distributed ranks
              (gloo on CPU, NCCL on GPUs), and the per-rank worker
    cell      one case x backend x variant as a normal result row, with the CP invariants
"""
