"""Cost from a trace: the trace's requests and measured prefix reuse feed strategies A and C of the cost model.

One streaming pass measures each request's reuse at a single LRU capacity C (the semantics of
:mod:`kvcalc.trace.result`), read off the stack-depth engine exactly: a request's hit run at C is the number of
its blocks whose prefix-maximum depth is <= C (:class:`kvcalc.trace.lru_curve.DepthChunk`). Then:

- A ``lru``: every request prefills its whole input (cached tokens 0), as A does on a workload.
- C ``prefix-tree``: every request reuses what the LRU cache held for it when it arrived (its measured
  reused tokens at capacity C; default an infinite cache, i.e. the trace's maximum).
- C's prefix cache = the cache's peak content, ``peak_cached_blocks x block_tokens`` tokens, counted both as
  ``prefix_cache_tokens`` and as ``extra_cache_tokens``: the cache is held beside the requests.
- Requests are grouped into slices of equal (input, reused, output) tokens, so the mix stays small; each slice
  is labelled by input length (:data:`INPUT_CLASSES`, K = 1,024 tokens), which gives the per-class TTFT table.
- The trace replaces the scenario's workload. On a scenario costed by the serving model (every one but the
  article's, see serve/served.py) with the default infinite cache and no ``--replicas``, A and C run the trace's
  own requests through the scheduler as ``kvcalc bench --trace`` does: their send times, lengths, and for C the
  hash ids as the prefix cache's keys (a cache that never evicts, which is why a finite ``--capacity`` or
  ``--replicas`` keep the stated path); the times, TTFT, throughput and dollars are the run's, the token counts,
  FLOPs and KV held the replay's. A trace of more than the serving model simulates (served.MAX_SIMULATED_REQUESTS)
  and the other cases keep the stated closed forms: all requests are one concurrent batch, as for workloads (the
  model's even split of compute), and a note says which path was taken.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kvcalc.out.errors import InputError
from kvcalc.serve.strategies import RequestMix, Slice
from kvcalc.trace.lru_curve import DepthChunk
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS
from kvcalc.trace.result import capacity_blocks_for

INPUT_CLASSES = ((4096, "input <= 4K"), (16384, "input 4K-16K"), (65536, "input 16K-64K"), (None, "input > 64K"))


def input_class(input_length: int) -> str:
    """The class label of a request of ``input_length`` [tokens]: bucketed at 4K, 16K and 64K (K = 1,024)."""
    for bound, label in INPUT_CLASSES:
        if bound is None or input_length <= bound:
            return label
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class TraceMixes:
    """The two request mixes of a trace and what the replay measured."""

    lru: RequestMix
    prefix_tree: RequestMix
    capacity_tokens: Optional[int]  # [tokens]; None = infinite
    block_tokens: int  # [tokens]
    requests: int
    input_tokens: int  # [tokens]
    reused_tokens: int  # [tokens]
    peak_cached_blocks: int  # [blocks]
    skipped_lines: int
    first_problem: Optional[str]
    trace_format: str = "mooncake"  # the format the trace was read as (kvcalc.trace.engine.format_read)


def _mix(counts: Counter, cache_tokens: int) -> RequestMix:
    """Slices sorted by class then lengths; labels in class order (only those present)."""
    order = {label: i for i, (_, label) in enumerate(INPUT_CLASSES)}
    slices = tuple(Slice(label, context, cached, output, n)
                   for (label, context, cached, output), n in sorted(counts.items(), key=lambda kv: (order[kv[0][0]],
                                                                                                      kv[0][1:])))
    labels = tuple(label for _, label in INPUT_CLASSES if any(s.label == label for s in slices))
    return RequestMix(slices, cache_tokens, cache_tokens, labels)


def trace_mixes(path: str | Path, capacity_tokens: Optional[int], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                skip_bad: bool = False, replicas: Optional[int] = None, router: str = "round-robin",
                trace_format: str = "mooncake") -> TraceMixes:
    """Stream the trace once, measuring each request's LRU reuse at ``capacity_tokens`` [tokens] (None =
    infinite) -> mixes. Nothing is kept per request beyond one engine chunk: slices are counted as chunks end.
    With ``replicas``: each request's reuse on the replica ``router`` sends it to, each replica an LRU cache of
    ``capacity_tokens`` (:mod:`kvcalc.trace.replicas`); C's cache is then the replicas' peaks together.
    ``trace_format``: any hash-id format of :mod:`kvcalc.trace.formats` (``auto`` detects it)."""
    lru: Counter = Counter()
    tree: Counter = Counter()

    def count(input_length: int, cached: int, output: int) -> None:
        label = input_class(input_length)
        lru[(label, input_length, 0, output)] += 1
        tree[(label, input_length, cached, output)] += 1

    capacity_blocks = capacity_blocks_for(capacity_tokens, block_tokens)
    if replicas is not None:
        from kvcalc.trace.engine import run_pass
        from kvcalc.trace.formats import open_replay_trace
        from kvcalc.trace.replicas import ReplicaEngine

        engine = ReplicaEngine(replicas, capacity_tokens, block_tokens, "lru", router, on_request=lambda n, out, hit:
                               count(n, min(hit * block_tokens, n), out))
        reader = open_replay_trace(path, block_tokens, skip_bad, trace_format)
        from kvcalc.trace.engine import format_read

        r = run_pass(reader, engine, block_tokens)[1].total
        first_problem, read = reader.first_problem, format_read(reader)
    else:
        import numpy as np

        from kvcalc.trace.analysis import analyze_trace

        def sink(chunk: DepthChunk) -> None:
            reused = np.minimum(chunk.hit_blocks(capacity_blocks) * block_tokens, chunk.inputs)
            for input_length, cached, output in zip(chunk.inputs.tolist(), reused.tolist(), chunk.outputs):
                count(input_length, cached, output)

        analysis = analyze_trace(path, [capacity_tokens], block_tokens, "lru", skip_bad, sink=sink,
                                 trace_format=trace_format)
        r = analysis.results[0]
        first_problem, read = analysis.first_problem, analysis.trace_format
    if r.input_tokens == 0:
        raise InputError(f"{path}: the trace's requests have no input tokens: nothing to prefill or reuse")
    peak = r.peak_cached_blocks
    return TraceMixes(lru=_mix(lru, 0), prefix_tree=_mix(tree, peak * block_tokens), capacity_tokens=capacity_tokens,
                      block_tokens=block_tokens, requests=r.requests, input_tokens=r.input_tokens,
                      reused_tokens=r.reused_tokens, peak_cached_blocks=peak, skipped_lines=r.skipped_lines,
                      first_problem=first_problem, trace_format=read)


def _given_requests(inp, path, capacity_tokens, block_tokens: int, skip_bad: bool, replicas, trace_format: str):
    """(the trace's requests for the serving model or None, why not [text]): see the module docstring."""
    from kvcalc.serve.served import MAX_SIMULATED_REQUESTS, GivenRequests
    from kvcalc.trace.bench_input import trace_requests

    if inp.decode_model != "serving":
        return None, ""
    if capacity_tokens is not None or replicas is not None:
        return None, (" (the serving model's prefix cache never evicts and serves one replica: a finite --capacity "
                      "or --replicas keep the replay's reuse on the stated closed forms)")
    req = trace_requests(str(path), MAX_SIMULATED_REQUESTS + 1, block_tokens, trace_format, skip_bad)
    if len(req.prompt) > MAX_SIMULATED_REQUESTS:
        return None, f" (more than {MAX_SIMULATED_REQUESTS:,} requests, more than the serving model simulates)"
    labels = tuple(input_class(n) for n in req.prompt.tolist())
    order = tuple(label for _, label in INPUT_CLASSES if label in set(labels))
    return GivenRequests(req, labels, order), ""


def trace_compare_result(inp, path: str | Path, capacity, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                         skip_bad: bool = False, replicas: Optional[int] = None, router: str = "round-robin",
                         trace_format: str = "mooncake"):
    """``kvcalc compare --trace``: A vs C on the scenario's model and hardware with the trace's requests.

    ``inp`` is the resolved scenario (cost.CostInputs); ``capacity`` a trace_report.CapacitySpec (tokens, bytes
    converted with the scenario's model, or infinite). ``replicas``: C's reuse is measured on that many
    replicas behind ``router``, each with that cache (the cost is still the scenario's node serving them all).
    """
    from kvcalc.out.units import fmt_count, fmt_percent
    from kvcalc.serve.cost import compare_result
    from kvcalc.trace.report import block_bytes_of, conversion_line, resolve_capacities

    block = block_bytes_of(inp.model_name, inp.model, block_tokens, inp.kv_options)
    cap = resolve_capacities([capacity], block_tokens, block)[0]
    m = trace_mixes(path, cap.tokens, block_tokens, skip_bad, replicas, router, trace_format)
    name = Path(path).name
    cap_text = "infinite" if cap.tokens is None else f"{cap.spec.text} = {fmt_count(cap.tokens)} tokens"
    if replicas is not None:
        cap_text = f"{cap_text} on each of {replicas} replicas behind {router} routing"
    traced = dataclasses.replace(
        inp, workload_name=name, workload_title=f"trace {name} (LRU cache {cap_text})", warm=False,
        sources=inp.sources | {
            "workload": f"request trace {path}: {m.requests:,} requests, {fmt_count(m.input_tokens)} input tokens "
                        f"(replaces the scenario's workload {inp.workload_name})",
            "prefix_cache": f"measured: LRU replay of the trace, {block_tokens}-token blocks, cache {cap_text}, "
                            "empty at the start"})
    given, why = _given_requests(inp, path, cap.tokens, block_tokens, skip_bad, replicas, trace_format)
    result = compare_result(traced, {"lru": m.lru, "prefix-tree": m.prefix_tree}, given)
    timing = (f"its {m.requests:,} requests run through the serving model's scheduler at their trace times, as "
              "kvcalc bench --trace runs them: A without prefix caching, C with the trace's hash ids as the "
              "prefix cache's keys (a cache that never evicts)" if given is not None else
              f"its timing is not simulated{why}: all {m.requests:,} requests are treated as one concurrent batch, "
              "as for workloads")
    notes = [
        f"the trace replaced the scenario's workload ({inp.workload_name}); {timing}",
        f"C reuses what an LRU cache ({cap_text}) held for each request when it arrived: "
        f"{fmt_count(m.reused_tokens)} of {fmt_count(m.input_tokens)} input tokens "
        f"({fmt_percent(m.reused_tokens / m.input_tokens)}); A reuses nothing",
        f"C's KV held includes the cache's peak content ({fmt_count(m.peak_cached_blocks)} blocks = "
        f"{fmt_count(m.peak_cached_blocks * block_tokens)} tokens) beside the requests",
        "classes: requests bucketed by input length at 4K, 16K and 64K tokens (K = 1,024)",
    ]
    explain = []
    if cap.spec.bytes is not None:
        from kvcalc.trace.report import block_line

        explain += [block_line(block), conversion_line(cap, block)]
        notes.append(f"capacity {conversion_line(cap, block)}")
    if m.skipped_lines:
        notes.append(f"--skip-bad: skipped {m.skipped_lines:,} bad line(s); first: {m.first_problem}")
    if replicas is not None:
        notes.append(f"replicas: each request reuses what its replica's cache held; the scenario's node is still "
                     f"the one whose time and cost are counted for all {m.requests:,} requests")
    inputs = result.inputs | {"trace": str(path), "capacity": cap.spec.text,
                              "capacity_tokens": cap.tokens, "block_tokens": block_tokens, "skip_bad": skip_bad,
                              "trace_format": m.trace_format}
    if replicas is not None:
        inputs |= {"replicas": replicas, "router": router}
    return dataclasses.replace(result, inputs=inputs, notes=result.notes + tuple(notes),
                               explain=tuple(explain) + result.explain)
