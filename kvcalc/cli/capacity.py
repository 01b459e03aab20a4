"""``kvcalc capacity``: requests that fit on a node after the weights, block size and page-in time."""

from dataclasses import replace
from typing import Annotated, Optional

import typer

from kvcalc.cli.common import (WeightsDtypeOpt, CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, KvGroupSizeOpt,
                               KvResidualOpt, MlaLayoutOpt, MtpOpt, StateDtypeOpt)
from kvcalc.out.units import MAX_BLOCK_TOKENS, MAX_GPUS, MAX_REQUESTS, MAX_TOKENS

E = "Engine (what vLLM/SGLang allocate)"
ARTICLE_MODELS = ["mha-96l-64h", "deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro"]
# the article's table states V3.2 in DeepSeek's FP8 FlashMLA layout (656 B + 132 B indexer per layer); the preset
# follows the config.json and the engines' default (bf16), so the article view asks for its own layout explicitly
ARTICLE_LAYOUTS = {"deepseek-v3.2": {"mla_layout": "fp8-flashmla"}}


def capacity(
    ctx: typer.Context,
    model: Annotated[Optional[list[str]], typer.Option(
        "--model", "-m", help="model preset or TOML path (repeatable; default: the article's five generations)",
        show_default=False)] = None,
    hardware: Annotated[str, typer.Option("--hardware", help="hardware preset or TOML path")] = "h100-sxm",
    gpus: Annotated[int, typer.Option("--gpus", help=f"GPUs in the node (weights spread over all; 1 to {MAX_GPUS:,})")] = 8,
    context: Annotated[str, typer.Option("--context", "-c", help=f"tokens per request (4k = 4,096; at most {MAX_TOKENS:,})")] = "4k",
    hbm_utilization: Annotated[str, typer.Option("--hbm-utilization", help="usable share of HBM, e.g. 0.9 or 90%")] = "0.9",
    reserve: Annotated[Optional[str], typer.Option("--reserve", help="HBM reserved per GPU for activations etc., e.g. 4GB or 4GiB")] = None,
    attention: Annotated[str, typer.Option("--attention", help="tp: attention tensor-parallel (latent KV replicated per GPU) | dp: data-parallel attention")] = "tp",
    block_tokens: Annotated[int, typer.Option("--block-tokens", help=f"tokens per paged block (the article's 16; at most {MAX_BLOCK_TOKENS:,})")] = 16,
    link: Annotated[Optional[str], typer.Option("--link", help="link for the page-in time (default: the hardware's host link)")] = None,
    bandwidth: Annotated[str, typer.Option("--bandwidth", help="measured | theoretical link bandwidth")] = "measured",
    kv_dtype: KvDtypeOpt = None, mla_layout: MlaLayoutOpt = None, indexer_dtype: IndexerDtypeOpt = None,
    state_dtype: StateDtypeOpt = None,
    mtp: MtpOpt = False, weights_dtype: WeightsDtypeOpt = None,
    kv_compression: Annotated[Optional[float], typer.Option("--kv-compression", help="what-if (the article's section 11, an unproven hypothesis): KV stored and paged in / FACTOR (1 to 10,000; --engine ideal only)", show_default=False)] = None,
    kv_group_size: KvGroupSizeOpt = 32, kv_residual_tokens: KvResidualOpt = 128,
    engine: Annotated[str, typer.Option("--engine", help="ideal (the architecture's bytes on datasheet memory) | "
                                        "vllm | sglang (what the engine allocates and logs)", rich_help_panel=E)] = "ideal",
    solve: Annotated[Optional[str], typer.Option("--solve", help="max-model-len | max-concurrency | "
                                                 "gpu-memory-utilization (the inverse questions)", rich_help_panel=E)] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="--solve gpu-memory-utilization: requests of "
                                             f"--max-model-len tokens to serve at once (1 to {MAX_REQUESTS:,})", rich_help_panel=E)] = 1,
    gpu_memory_utilization: Annotated[str, typer.Option("--gpu-memory-utilization", help="vLLM's share of the "
                                                        "CUDA total, e.g. 0.9", rich_help_panel=E)] = "0.9",
    mem_fraction_static: Annotated[Optional[str], typer.Option("--mem-fraction-static", help="SGLang's static "
                                   "share (default by TP: 0.88 at 1 ... 0.79 at 16)", rich_help_panel=E)] = None,
    max_model_len: Annotated[Optional[str], typer.Option("--max-model-len", help="tokens per request for the "
                             "engine's max concurrency (default: --context)", rich_help_panel=E)] = None,
    max_num_batched_tokens: Annotated[Optional[str], typer.Option("--max-num-batched-tokens", help="vLLM's "
                                      "profiling batch (default 8,192 on >= 70 GiB GPUs, else 2,048)",
                                      rich_help_panel=E)] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option("--max-num-seqs", help="vLLM's sequence limit (default "
                            f"1,024 on >= 70 GiB GPUs, else 256; sizes the sampler warm-up in the estimated activation; the "
                            f"logged concurrency ignores it; 1 to {MAX_REQUESTS:,})",
                            rich_help_panel=E)] = None,
    block_size: Annotated[Optional[int], typer.Option("--block-size", help="vLLM's block size in tokens "
                          f"(default 16; 1 to {MAX_BLOCK_TOKENS:,})", rich_help_panel=E)] = None,
    total_memory: Annotated[Optional[str], typer.Option("--total-memory", help="vLLM: total_gpu_memory; SGLang: "
                            "free memory at start, e.g. 79.19GiB (default: the preset's CUDA total)",
                            rich_help_panel=E)] = None,
    weights_memory: Annotated[Optional[str], typer.Option("--weights-memory", help="weights per GPU as logged, "
                              "e.g. 14.08GiB (default: model weights / GPUs)", rich_help_panel=E)] = None,
    activation_memory: Annotated[Optional[str], typer.Option("--activation-memory", help="vLLM's activation "
                                 "peak, e.g. 1.97GiB (default: estimated from batched tokens and shapes)",
                                 rich_help_panel=E)] = None,
    non_torch_memory: Annotated[Optional[str], typer.Option("--non-torch-memory", help="vLLM's non-torch "
                                "memory, e.g. 0.07GiB (default 0.07 GiB at TP 1, 0.4 GiB above)",
                                rich_help_panel=E)] = None,
    cuda_graph_memory: Annotated[Optional[str], typer.Option("--cuda-graph-memory", help="CUDA-graph memory "
                                 "inside the budget (vLLM v0.21+), e.g. 0.5GiB (default 0)", rich_help_panel=E)] = None,
    swa_full_tokens_ratio: Annotated[Optional[float], typer.Option(
        "--swa-full-tokens-ratio", help="SGLang hybrid sliding/full models: sliding pool tokens per full pool token "
        "(default 0.8; above 0, at most 100)", rich_help_panel=E)] = None,
    mamba_full_memory_ratio: Annotated[Optional[float], typer.Option(
        "--mamba-full-memory-ratio", help="SGLang Mamba/linear hybrids: state pool memory per attention pool memory "
        "(default 0.9; above 0, at most 100)", rich_help_panel=E)] = None,
    max_mamba_cache_size: Annotated[Optional[int], typer.Option(
        "--max-mamba-cache-size", help=f"SGLang: state slots, instead of the ratio (0 to {MAX_REQUESTS:,})",
        rich_help_panel=E)] = None,
    engine_version: Annotated[Optional[str], typer.Option(
        "--engine-version", help="whose rules: vLLM 0.33 and SGLang 0.5.23 by default; e.g. 0.20 for vLLM before "
        "async scheduling's 2x in-flight tokens (0.26) and the group-aware logged count (0.21)",
        rich_help_panel=E)] = None,
    engine_log: Annotated[Optional[str], typer.Option(
        "--engine-log", help="a vLLM or SGLang start-up log: its memory lines fill the engine inputs (flags given "
        "win) and its KV figures are shown beside kvcalc's", rich_help_panel=E)] = None,
    fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """Requests that fit in a node's HBM after the weights, 16-token block bytes, page-in time per block.

    With no options: the article's table of five attention generations on 8 x H100 80 GB at 4K tokens.

    Examples:

    \b
      kvcalc capacity
      kvcalc capacity -m llama-3-70b -m deepseek-v4-flash --hardware h200-sxm --context 128k
      kvcalc capacity -m deepseek-v3 --mla-layout fp8-flashmla --format json --check 'max_requests >= 1000'
      kvcalc capacity -m llama-3-8b --gpus 1 --engine vllm --total-memory 79.19GiB --weights-memory 14.08GiB \\
          --activation-memory 1.97GiB --non-torch-memory 0.07GiB --explain
      kvcalc capacity -m qwen2.5-7b --gpus 1 --engine sglang --solve max-model-len
      kvcalc capacity -m qwen3-14b --gpus 1 --engine-log vllm-startup.log
    """
    from dataclasses import replace

    from kvcalc.cli.common import check_format, emit, kv_options, refuse_unused_kv_params
    from kvcalc.cli.engine_opts import check_solve, refuse_without_engine
    from kvcalc.memory.capacity import CapacityInputs, capacity_result
    from kvcalc.model import catalog
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import check_option, check_positive, parse_bytes, parse_fraction, parse_tokens

    check_format(fmt)
    opts = kv_options(kv_dtype, mla_layout, indexer_dtype, mtp, state_dtype, kv_group_size, kv_residual_tokens)
    if attention not in ("tp", "dp"):
        raise InputError(f"--attention: {attention!r} is not one of tp, dp")
    if bandwidth not in ("measured", "theoretical"):
        raise InputError(f"--bandwidth: {bandwidth!r} is not one of measured, theoretical")
    check_option("gpus", gpus)   # the bounds sweep capacity's gpus / block-tokens axes share
    check_option("block-tokens", block_tokens)
    check_positive(concurrency, "--concurrency", limit=MAX_REQUESTS)  # checked even when no engine reads it
    if max_num_seqs is not None:
        check_positive(max_num_seqs, "--max-num-seqs", limit=MAX_REQUESTS)
    if block_size is not None:
        check_positive(block_size, "--block-size", limit=MAX_BLOCK_TOKENS)
    from kvcalc.cli.engine_opts import check_sglang_pools

    check_sglang_pools(swa_full_tokens_ratio, mamba_full_memory_ratio, max_mamba_cache_size)
    log = None
    if engine_log is not None:
        from kvcalc.memory.engine_log import read_log_file

        log = read_log_file(engine_log)
        if engine not in ("ideal", log.engine):
            raise InputError(f"--engine-log: {engine_log} is a {log.engine} log, not {engine}")
        engine = log.engine
    refuse_without_engine(ctx, engine, solve)  # after the bounds: a 400-digit value is absurd before unused
    inp = CapacityInputs(
        gpus=gpus, context_tokens=parse_tokens(context, "--context"),
        hbm_utilization=parse_fraction(hbm_utilization, "--hbm-utilization"),
        reserve_bytes_per_gpu=parse_bytes(reserve, "--reserve") if reserve else 0.0,
        attention=attention, block_tokens=block_tokens, bandwidth=bandwidth,
        kv_compression=1.0 if kv_compression is None else check_option("kv-compression", kv_compression))
    if kv_compression is not None and (engine != "ideal" or solve is not None):
        raise InputError("--kv-compression: only with --engine ideal (an engine's sizing knows no such format)")
    hw = catalog.load_hardware(hardware)
    link_ref = link or hw.host_link
    from kvcalc.cli.common import weights_dtype as with_dtype

    loaded = [(catalog.name_of(m), with_dtype(catalog.load_model(m), weights_dtype)) for m in (model or ARTICLE_MODELS)]
    if not model:  # the article's view: its own stated layouts, and its stated 80 GB (datasheet GB) per GPU
        loaded = [(n, replace(m, **ARTICLE_LAYOUTS.get(n, {}))) for n, m in loaded]
        if engine == "ideal":
            hw = replace(hw, cuda_total_gib=None, cuda_total_source=None)
    refuse_unused_kv_params(ctx, kv_dtype, [m for _, m in loaded])
    args = (loaded, catalog.name_of(hardware), hw, catalog.name_of(link_ref), catalog.load_link(link_ref), inp)
    if engine == "ideal" and solve is None:
        result = capacity_result(*args, opts)
    else:
        from kvcalc.cli.engine_opts import engine_inputs

        if attention == "dp" and engine != "ideal":
            raise InputError("--attention dp: not modelled with --engine (the engines' sizing is per TP rank); "
                             "use --attention tp")
        from kvcalc.memory.engine_report import engine_result, solve_result

        einp = engine_inputs(engine, gpus, inp.context_tokens, gpu_memory_utilization, mem_fraction_static,
                             max_model_len, max_num_batched_tokens, max_num_seqs, block_size, total_memory,
                             weights_memory, activation_memory, non_torch_memory, cuda_graph_memory,
                             (swa_full_tokens_ratio, mamba_full_memory_ratio, max_mamba_cache_size), engine_version)
        if log is not None:
            from kvcalc.memory.engine_log import apply_log, log_comparison

            flags = {"total_memory_bytes": total_memory, "weights_bytes": weights_memory,
                     "activation_bytes": activation_memory, "non_torch_bytes": non_torch_memory,
                     "max_model_len": max_model_len, "mem_fraction_static": mem_fraction_static}
            einp = apply_log(einp, log, {k for k, v in flags.items() if v is not None})
        if solve is None:
            result = engine_result(*args, einp, opts)
            if log is not None:
                from kvcalc.memory.engine_log import rounding_windows

                given = {k for k, v in flags.items() if v is not None}
                windows = rounding_windows(log, lambda corner: engine_result(
                    *args, apply_log(einp, corner, given), opts).rows)
                result = replace(result, notes=tuple(log_comparison(log, result.rows, windows)) + result.notes)
        else:
            solve_inp = replace(inp, context_tokens=einp.max_model_len)
            result = solve_result(*args[:5], solve_inp, einp, opts, check_solve(solve), concurrency)
    emit(result, fmt, check, explain)
