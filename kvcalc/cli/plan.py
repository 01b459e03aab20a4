"""``kvcalc plan``: the cheapest deployment that meets a latency target (parsing only; kvcalc/serve/plan_*.py)."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, ExplainOpt, FormatOpt, KvDtypeOpt, WeightsDtypeOpt
from kvcalc.out.units import MAX_PLAN_GPUS, MAX_PLAN_PROMPTS, MAX_PLAN_TOP

S = "Search"
T = "Traffic (as kvcalc bench takes it, or a workload, or a trace)"


def plan(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", "-m", help="model preset, TOML path or config.json", rich_help_panel=S)],
    ttft_p99: Annotated[str, typer.Option("--ttft-p99", help="target p99 time to first token, with its unit (2s, 500ms)", rich_help_panel=S)] = "2s",
    tpot_p99: Annotated[str, typer.Option("--tpot-p99", help="target p99 time per output token, with its unit (50ms)", rich_help_panel=S)] = "50ms",
    hardware: Annotated[str, typer.Option("--hardware", help="hardware presets to choose from, comma-separated", rich_help_panel=S)] = "h100-sxm,h200-sxm,b200",
    max_gpus: Annotated[int, typer.Option("--max-gpus", help=f"GPUs in all at most (1 to {MAX_PLAN_GPUS:,})", rich_help_panel=S)] = 64,
    disagg: Annotated[str, typer.Option("--disagg", help="prefill/decode disaggregation: off (aggregated only), on (P:D pairs only), auto (both)", rich_help_panel=S)] = "off",
    pd_link: Annotated[Optional[str], typer.Option("--pd-link", help="link preset the KV is handed over with --disagg (default: each hardware's scale-up link)", rich_help_panel=S)] = None,
    strategy: Annotated[str, typer.Option("--strategy", help="lru: no prefix reuse; prefix-tree: vLLM's prefix cache (--enable-prefix-caching)", rich_help_panel=S)] = "lru",
    top: Annotated[int, typer.Option("--top", help=f"configurations to show, cheapest first (1 to {MAX_PLAN_TOP:,})", rich_help_panel=S)] = 3,
    price_per_gpu_hour: Annotated[Optional[float], typer.Option("--price-per-gpu-hour", help="USD per GPU-hour for every hardware (default: each preset's)", rich_help_panel=S)] = None,
    kv_dtype: KvDtypeOpt = None,
    weights_dtype: WeightsDtypeOpt = None,
    input_len: Annotated[str, typer.Option("--random-input-len", help="prompt tokens per request", rich_help_panel=T)] = "1024",
    output_len: Annotated[str, typer.Option("--random-output-len", help="output tokens per request", rich_help_panel=T)] = "128",
    num_prompts: Annotated[int, typer.Option("--num-prompts", help=f"requests (at most {MAX_PLAN_PROMPTS:,}; with --trace: the trace's first N)", rich_help_panel=T)] = 1000,
    request_rate: Annotated[str, typer.Option("--request-rate", help="inf (all at t = 0) or requests/s (Poisson arrivals; 1e-6 to 1e9), for all replicas together", rich_help_panel=T)] = "inf",
    max_concurrency: Annotated[Optional[int], typer.Option("--max-concurrency", help="client-side cap on requests in flight, for all replicas together", rich_help_panel=T)] = None,
    shared_prefix: Annotated[Optional[str], typer.Option("--shared-prefix", help="TOKENS[:GROUPS]: a prefix before every prompt, one per group", rich_help_panel=T)] = None,
    workload: Annotated[Optional[str], typer.Option("--workload", help="workload preset or TOML path (its classes and shared prefixes) instead of the random dataset", rich_help_panel=T)] = None,
    trace: Annotated[Optional[str], typer.Option("--trace", help="request trace: arrivals, lengths and, where the format has them, hash ids (Mooncake or full-block JSONL, Azure or BurstGPT CSV: lengths only; .gz/.zst too)", rich_help_panel=T)] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="with --trace: leave out bad lines (malformed, or a failed request of 0 tokens) and count them in a note, instead of refusing the trace", rich_help_panel=T)] = False,
    rate_scale: Annotated[float, typer.Option("--rate-scale", help="with --trace: arrivals at FACTOR x the trace's rate", rich_help_panel=T)] = 1.0,
    router: Annotated[str, typer.Option("--router", help="with --trace or --workload: round-robin | least-loaded | session | prefix (cache-aware)", rich_help_panel=T)] = "round-robin",
    block_tokens: Annotated[Optional[int], typer.Option("--block-tokens", help="tokens per hash id in the trace (default: the trace's own block_size (kv-cache-tester), else 512 as Mooncake)", show_default=False, rich_help_panel=T)] = None,
    tiers: Annotated[Optional[str], typer.Option("--tiers", help="with --trace --strategy prefix-tree: each engine's prefix cache as exclusive LRU tiers, fastest first (hbm,dram,ssd): hbm = its KV pool, lower-tier hits load over the tier's link", show_default=False, rich_help_panel=T)] = None,
    tier_capacity: Annotated[Optional[list[str]], typer.Option("--tier-capacity", help="with --tiers: tier=VALUE, bytes per GPU (dram=1TB) or tokens per engine (hbm=2m); default: hbm = the engine's KV pool, dram/ssd from the hardware preset", show_default=False, rich_help_panel=T)] = None,
    tier_link: Annotated[Optional[list[str]], typer.Option("--tier-link", help="with --tiers: tier=LINK a lower tier loads over (default: dram = the hardware's host_link, ssd = nvme-gen5)", show_default=False, rich_help_panel=T)] = None,
    seed: Annotated[int, typer.Option("--seed", help="seed of the Poisson arrivals", rich_help_panel=T)] = 0,
    plot: Annotated[Optional[str], typer.Option("--plot", help="write the Pareto frontier to FILE.png | .svg | .html (needs the extra: pip install 'kvcalc[plot]')", rich_help_panel="Output")] = None,
    fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """The cheapest deployment that meets p99 TTFT and TPOT targets: hardware, TP x DP, replicas, $/hour, $/M.

    Searches hardware x TP x DP (or x P:D prefill/decode engines with --disagg) x replicas (up to --max-gpus), prunes by memory and lower bounds on TPOT and TTFT,
    simulates the rest with the serving model of `kvcalc bench`, cheapest first, and prints the cheapest that
    meet the targets with the `vllm serve` flags they assume, why each rejected family fails, and the Pareto
    frontier (throughput per GPU vs tokens/s per user). Exit 2 when nothing meets the targets, naming the closest.

    Examples:

    \b
      kvcalc plan --model qwen3-32b --ttft-p99 2s --tpot-p99 50ms --request-rate 8 --random-input-len 2000 --random-output-len 200
      kvcalc plan --model gpt-oss-120b --hardware h100-sxm,b200 --max-gpus 16 --request-rate 4 --format json
      kvcalc plan --model qwen3-14b --trace conversation.jsonl --strategy prefix-tree --router prefix --rate-scale 2
      kvcalc plan --model qwen3-14b --trace conversation.jsonl --strategy prefix-tree --tiers hbm,dram,ssd
      kvcalc plan --model qwen3-32b --disagg auto --pd-link ib-ndr400 --request-rate 8 --random-input-len 8k
    """
    from kvcalc.cli.plan_parse import parse_and_run

    parse_and_run(ctx, locals())
