"""A deterministic model of vLLM v1's continuous-batching scheduler.

Each step: running requests first, decodes before chunked prefills (decode-first), then waiting
requests (preempted ones at the front) while ``max_num_seqs`` and the token budget
``max_num_batched_tokens`` allow; a prefill longer than the remaining budget is chunked.
KV memory is ``num_blocks`` pages of ``block_size`` tokens; when a running request cannot get a
page the newest running request is preempted (recompute: its pages freed, its tokens — prompt
plus what it generated — prefilled again later), as in vLLM v1. No waiting request is admitted in
a step that preempted. Prefix caching: a full 512-token prompt block whose ``hash_ids`` chain
(this id and all before it) matches a computed block reuses the same pages, so requests that
share a prefix share block-table entries; freed cached pages stay reusable until evicted (LRU).
At least one prompt token is always computed (as vLLM does). Time only orders arrivals: a step
is modelled to take ``step_base_s + step_per_token_s * tokens``.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from harness.spec.trace.readers import HASH_BLOCK_TOKENS, TraceRequest


@dataclass(frozen=True)
class SchedulerParams:
    max_num_batched_tokens: int = 8192   # vLLM's default token budget per step
    max_num_seqs: int = 256              # vLLM's default
    block_size: int = 16                 # vLLM's default page size; must divide 512
    num_blocks: int = 65536              # KV capacity in pages (1M tokens at block_size 16)
    enable_prefix_caching: bool = True
    step_base_s: float = 0.010
    step_per_token_s: float = 1.2e-5

    def __post_init__(self) -> None:
        if self.block_size <= 0 or HASH_BLOCK_TOKENS % self.block_size:
            raise ValueError(f"block_size {self.block_size} must divide {HASH_BLOCK_TOKENS}")
        if min(self.max_num_batched_tokens, self.max_num_seqs, self.num_blocks) <= 0:
            raise ValueError("max_num_batched_tokens, max_num_seqs, num_blocks must be > 0")


@dataclass(frozen=True)
class StepRequest:
    req_id: int
    query_len: int            # tokens computed this step
    context_len: int          # tokens already in the KV cache before this step
    block_table: tuple[int, ...]  # pages covering context_len + query_len tokens

    @property
    def kind(self) -> str:
        if self.context_len == 0:
            return "prefill"
        return "decode" if self.query_len == 1 else "extend"


@dataclass(frozen=True)
class Step:
    index: int
    time_s: float
    requests: tuple[StepRequest, ...]
    preempted: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(r.query_len for r in self.requests)


@dataclass
class _Req:
    rid: int
    src: TraceRequest
    num_tokens: int
    num_computed: int = 0
    generated: int = 0
    pages: list[int] = field(default_factory=list)


@dataclass
class SimResult:
    steps: list[Step]
    generated: dict[int, int]        # request id -> output tokens produced
    final_len: dict[int, int]        # request id -> prompt + generated tokens at completion
    prefix_hit_tokens: int
    preemptions: int


class _Pool:
    def __init__(self, n: int) -> None:
        self.free: deque[int] = deque(range(n))
        self.ref: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached pages, ref 0, LRU first
        self.cache: dict[int, tuple[int, ...]] = {}   # chain key -> pages of one 512 block
        self.page_key: dict[int, int] = {}

    def available(self) -> int:
        return len(self.free) + len(self.evictable)

    def take(self) -> int:
        if self.free:
            p = self.free.popleft()
        else:
            p, _ = self.evictable.popitem(last=False)
            key = self.page_key.pop(p, None)
            if key is not None and key in self.cache:
                for q in self.cache.pop(key):
                    self.page_key.pop(q, None)
        self.ref[p] = 1
        return p

    def share(self, p: int) -> None:
        self.evictable.pop(p, None)
        self.ref[p] = self.ref.get(p, 0) + 1

    def release(self, p: int) -> None:
        self.ref[p] -= 1
        if self.ref[p] == 0:
            del self.ref[p]
            if p in self.page_key:
                self.evictable[p] = None
            else:
                self.free.append(p)


def simulate(reqs: list[TraceRequest], params: SchedulerParams = SchedulerParams(),
             max_steps: int | None = None) -> SimResult:
    """Run the trace through the scheduler model; every request runs to completion (or until
    ``max_steps``). A request that could never fit in the KV cache raises ValueError."""
    bs, per_hash = params.block_size, HASH_BLOCK_TOKENS // params.block_size
    pool = _Pool(params.num_blocks)
    chain: dict[tuple[int, int], int] = {}

    def keys(r: _Req) -> list[int]:
        out, parent = [], -1
        for h in r.src.hash_ids:
            parent = chain.setdefault((parent, h), len(chain))
            out.append(parent)
        return out

    for i, t in enumerate(reqs):
        if -(-(t.prompt_len + t.output_len) // bs) > params.num_blocks:
            raise ValueError(f"request {i} needs more than num_blocks={params.num_blocks} pages")
    pending = deque(_Req(i, t, t.prompt_len) for i, t in enumerate(reqs))
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    steps: list[Step] = []
    generated: dict[int, int] = {}
    final_len: dict[int, int] = {}
    hits = preemptions = 0
    clock = 0.0

    def grow(r: _Req, tokens: int) -> bool:
        need = -(-tokens // bs) - len(r.pages)
        if need > pool.available():
            return False
        r.pages.extend(pool.take() for _ in range(max(need, 0)))
        return True

    def free(r: _Req) -> None:
        # newest pages first back to the free list, so the oldest stay cached longest
        for p in reversed(r.pages):
            pool.release(p)
        r.pages = []

    while pending or waiting or running:
        if max_steps is not None and len(steps) >= max_steps:
            break
        while pending and pending[0].src.arrival_s <= clock:
            waiting.append(pending.popleft())
        if not waiting and not running:
            clock = pending[0].src.arrival_s
            continue
        budget = params.max_num_batched_tokens
        sched: dict[int, tuple[_Req, int, int]] = {}  # rid -> (req, query_len, context_len)
        preempted: list[int] = []
        order = sorted(running, key=lambda r: (r.num_tokens - r.num_computed != 1,))  # stable
        for r in order:
            if budget == 0:
                break
            if r not in running:      # preempted earlier in this step
                continue
            n = min(r.num_tokens - r.num_computed, budget)
            while not grow(r, r.num_computed + n):
                victim = running.pop()          # newest running request
                if victim.rid in sched:
                    budget += sched.pop(victim.rid)[1]
                free(victim)
                victim.num_computed = 0
                waiting.appendleft(victim)
                preempted.append(victim.rid)
                preemptions += 1
                if victim is r:
                    break
            else:
                sched[r.rid] = (r, n, r.num_computed)
                budget -= n
        while waiting and not preempted and budget > 0 and len(running) < params.max_num_seqs:
            r = waiting[0]
            hit_pages: list[int] = []
            if params.enable_prefix_caching and r.num_computed == 0 and r.src.hash_ids:
                limit = (r.src.prompt_len - 1) // HASH_BLOCK_TOKENS
                for k in keys(r)[:limit]:
                    if k not in pool.cache:
                        break
                    hit_pages.extend(pool.cache[k])
            for p in hit_pages:
                pool.share(p)
            r.pages = hit_pages
            start = len(hit_pages) * bs
            n = min(r.num_tokens - start, budget)
            if not grow(r, start + n):
                free(r)
                break
            waiting.popleft()
            hits += start
            r.num_computed = start
            running.append(r)
            sched[r.rid] = (r, n, start)
            budget -= n
        if not sched:
            raise ValueError("scheduler made no progress (KV cache too small for one request)")
        step_reqs = []
        for r, n, ctx in sched.values():
            step_reqs.append(StepRequest(r.rid, n, ctx, tuple(r.pages[: -(-(ctx + n) // bs)])))
            r.num_computed = ctx + n
            if params.enable_prefix_caching and r.src.hash_ids:
                full = min(r.num_computed, r.src.prompt_len) // HASH_BLOCK_TOKENS
                for i, k in enumerate(keys(r)[:full]):
                    if k not in pool.cache:
                        pages = tuple(r.pages[i * per_hash:(i + 1) * per_hash])
                        if any(p in pool.page_key for p in pages):
                            continue    # these pages already hold another cached block
                        pool.cache[k] = pages
                        for p in pages:
                            pool.page_key[p] = k
            if r.num_computed == r.num_tokens:
                r.generated += 1
                if r.generated == r.src.output_len:
                    running.remove(r)
                    generated[r.rid] = r.generated
                    final_len[r.rid] = r.num_tokens + 1
                    free(r)
                else:
                    r.num_tokens += 1
        tokens = sum(n for _, n, _ in sched.values())
        steps.append(Step(len(steps), clock, tuple(step_reqs), tuple(preempted)))
        clock += params.step_base_s + params.step_per_token_s * tokens
    return SimResult(steps, generated, final_len, hits, preemptions)
