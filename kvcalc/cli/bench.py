"""``kvcalc bench``: predict what ``vllm bench serve`` prints, with its option names (parsing only)."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, ExplainOpt, FormatOpt, KvDtypeOpt, WeightsDtypeOpt
from kvcalc.out.units import MAX_BENCH_PROMPTS, MAX_GPUS, MAX_REQUESTS, MAX_TOKENS

S = "Server"
C = "Client (vllm bench serve)"


def bench(
    model: Annotated[str, typer.Option("--model", "-m", help="model preset, TOML path or config.json",
                                       rich_help_panel=S)],
    hardware: Annotated[str, typer.Option("--hardware", help="hardware preset or TOML path", rich_help_panel=S)] = "h100-sxm",
    gpus: Annotated[Optional[int], typer.Option("--gpus", help=f"GPUs in all (default tp x dp; 1 to {MAX_GPUS:,})", rich_help_panel=S)] = None,
    tp: Annotated[Optional[int], typer.Option("--tp", help="tensor-parallel size of one replica (default: --gpus / --dp)", rich_help_panel=S)] = None,
    dp: Annotated[int, typer.Option("--dp", help="data-parallel replicas, each taking every dp-th request (with --trace: as --router sends them); per-replica hit rate and load in the output", rich_help_panel=S)] = 1,
    router: Annotated[str, typer.Option("--router", help="with --trace and --dp: round-robin (every dp-th) | least-loaded (fewest requests in flight when the request is sent, on the serving clock) | session (by the first block, as kvcalc trace --router) | prefix (the replica whose prefix cache holds the longest run of the request's blocks already prefilled when it is sent; ties by least-loaded's rule)", rich_help_panel=S)] = "round-robin",
    attention: Annotated[Optional[str], typer.Option("--attention", help="tp (attention sharded like the rest); dp: each --dp rank runs its own batch while the experts shard over all GPUs, which is what --enable-expert-parallel does with --dp > 1 (default: dp there, else tp)", show_default=False, rich_help_panel=S)] = None,
    expert_parallel: Annotated[bool, typer.Option("--enable-expert-parallel", "--ep", help="vLLM's expert parallelism: the routed experts shard over all tp x dp GPUs (E / (tp x dp) whole experts each); with --dp > 1 attention is data-parallel and each MoE layer pays a dispatch and a combine all-to-all", rich_help_panel=S)] = False,
    engine: Annotated[str, typer.Option("--engine", metavar="vllm|sglang|trtllm", help="the engine whose scheduler and per-step cost are modelled", rich_help_panel=S)] = "vllm",
    async_scheduling: Annotated[bool, typer.Option("--async-scheduling", help="vLLM's --async-scheduling (a smaller per-step cost)", rich_help_panel=S)] = False,
    max_num_seqs: Annotated[Optional[int], typer.Option("--max-num-seqs", help="sequences per step (default: the engine's for the GPU)", rich_help_panel=S)] = None,
    max_num_batched_tokens: Annotated[Optional[str], typer.Option("--max-num-batched-tokens", help="token budget per step (default: the engine's for the GPU)", rich_help_panel=S)] = None,
    max_model_len: Annotated[Optional[str], typer.Option("--max-model-len", help="the server's --max-model-len (default: the model's context)", rich_help_panel=S)] = None,
    kv_dtype: KvDtypeOpt = None,
    weights_dtype: WeightsDtypeOpt = None,
    prefix_caching: Annotated[bool, typer.Option("--enable-prefix-caching", help="reuse computed prefix blocks", rich_help_panel=S)] = False,
    kv_compression: Annotated[Optional[float], typer.Option("--kv-compression", help="what-if (the article's section 11, an unproven hypothesis): KV stored and read / FACTOR", rich_help_panel=S)] = None,
    price_per_gpu_hour: Annotated[Optional[float], typer.Option("--price-per-gpu-hour", help="USD per GPU-hour (default: the hardware preset's)", rich_help_panel=S)] = None,
    dataset: Annotated[str, typer.Option("--dataset", help="random (fixed lengths, as --random-range-ratio 0)", rich_help_panel=C)] = "random",
    input_len: Annotated[Optional[str], typer.Option("--random-input-len", help="prompt tokens per request (default 1024; with --measured: each request's, or the run's mean)", show_default=False, rich_help_panel=C)] = None,
    output_len: Annotated[Optional[str], typer.Option("--random-output-len", help="output tokens per request, as with --ignore-eos (default 128; with --measured: each request's, or the run's mean)", show_default=False, rich_help_panel=C)] = None,
    num_prompts: Annotated[Optional[int], typer.Option("--num-prompts", help=f"requests (default 1000, at most {MAX_BENCH_PROMPTS:,}; with --trace: the trace's first N; with --measured: the run's successful requests)", show_default=False, rich_help_panel=C)] = None,
    request_rate: Annotated[Optional[str], typer.Option("--request-rate", help="inf (all at t = 0, the default) or requests/s (Poisson arrivals; 1e-6 to 1e9)", show_default=False, rich_help_panel=C)] = None,
    burstiness: Annotated[Optional[float], typer.Option("--burstiness", help="vllm's --burstiness with a finite --request-rate: gamma inter-arrival times of this shape (default 1: Poisson; below 1 burstier, above 1 more even)", show_default=False, rich_help_panel=C)] = None,
    max_concurrency: Annotated[Optional[int], typer.Option("--max-concurrency", help="client-side cap on requests in flight", rich_help_panel=C)] = None,
    shared_prefix: Annotated[Optional[str], typer.Option("--shared-prefix", help="TOKENS[:GROUPS]: a prefix of TOKENS before every prompt, one per group (vllm's --random-prefix-len with groups)", rich_help_panel=C)] = None,
    trace: Annotated[Optional[str], typer.Option("--trace", help="request trace instead of the random dataset: arrivals and lengths, and hash ids (prefix reuse) where the format has them: Mooncake JSONL, full-block JSONL, kv-cache-tester JSON, Azure or BurstGPT CSV (lengths only); .gz/.zst too", rich_help_panel=C)] = None,
    trace_format: Annotated[str, typer.Option("--trace-format", help="auto (by content) | mooncake | full-blocks | kv-cache-tester | azure-csv | burstgpt-csv (see kvcalc trace --trace-format)", rich_help_panel=C)] = "auto",
    block_tokens: Annotated[Optional[int], typer.Option("--block-tokens", help="tokens per hash id in the trace (default: the trace's own block_size (kv-cache-tester), else 512 as Mooncake)", show_default=False, rich_help_panel=C)] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="with --trace: leave out bad lines (malformed, or a failed request of 0 tokens) and count them in a note, instead of refusing the trace", rich_help_panel=C)] = False,
    seed: Annotated[int, typer.Option("--seed", help="seed of the Poisson arrivals", rich_help_panel=C)] = 0,
    measured: Annotated[Optional[str], typer.Option("--measured", help="a measured run to hold kvcalc against: what vllm bench serve (or SGLang's bench_serving) printed (its result block, in a log or alone) or saved (--save-result JSON; --save-detailed adds each request's lengths); its requests, lengths, rate and concurrency fill the options not given, and its figures are shown beside kvcalc's with the error of each", show_default=False, rich_help_panel=C)] = None,
    fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """Predict what `vllm bench serve` prints: TTFT, TPOT, ITL, throughput, GPU-seconds and $ per M tokens.

    A vLLM-V1-like scheduler (continuous batching, chunked prefill, KV pool in blocks, preemption, prefix cache)
    stepped over the whole run; each step's time is max(compute, memory) + communication + overhead with the
    GPU's calibration (docs/serving-model.md shows its error on 78 measured runs).

    Examples:

    \b
      kvcalc bench --model gpt-oss-120b --hardware h100-sxm --random-input-len 4000 --random-output-len 200 --num-prompts 500
      kvcalc bench --model qwen3-32b --gpus 2 --max-concurrency 16 --request-rate 4 --format json
      kvcalc bench --model qwen3-14b --enable-prefix-caching --shared-prefix 2k:4 --explain
      kvcalc bench --model qwen3-14b --trace AzureLLMInferenceTrace_conv.csv --num-prompts 2000
      kvcalc bench --model qwen3-14b --enable-prefix-caching --trace trace_0002.json  # kv-cache-tester
      kvcalc bench --model qwen3-14b --gpus 4 --dp 4 --router prefix --enable-prefix-caching --trace t.jsonl.zst
      kvcalc bench --model qwen3-235b-a22b --hardware h200-sxm --tp 1 --dp 8 --enable-expert-parallel
      kvcalc bench --model qwen3-8b --hardware h100-sxm --measured vllm-bench-output.txt --check 'max_abs_error <= 0.25'
    """
    from kvcalc.cli.bench_parse import parse_and_run

    parse_and_run(locals())
