"""Parsing of ``capacity``'s engine options (sizes with units, fractions, token counts) -> EngineInputs."""

from typing import Optional

MAX_POOL_RATIO = 100  # --swa-full-tokens-ratio / --mamba-full-memory-ratio: above 0, at most 100 (SGLang: 0.8, 0.9)


def check_solve(solve: Optional[str]) -> Optional[str]:
    """Validate --solve early."""
    from kvcalc.memory.engine_common import SOLVES
    from kvcalc.out.errors import InputError

    if solve is not None and solve not in SOLVES:
        raise InputError(f"--solve: {solve!r} is not one of {', '.join(SOLVES)}")
    return solve


def check_sglang_pools(swa_ratio, mamba_ratio, mamba_size):
    """Bounds of SGLang's pool options (checked even without --engine, like every option): ratios above 0 and at
    most 100, state slots 0 to MAX_REQUESTS -> the values."""
    from kvcalc.out.units import MAX_REQUESTS, check_positive

    for flag, value in (("--swa-full-tokens-ratio", swa_ratio), ("--mamba-full-memory-ratio", mamba_ratio)):
        if value is not None:
            check_positive(value, flag, limit=MAX_POOL_RATIO)
    if mamba_size is not None:
        check_positive(mamba_size, "--max-mamba-cache-size", allow_zero=True, limit=MAX_REQUESTS)
    return swa_ratio, mamba_ratio, mamba_size


def engine_inputs(engine, gpus, context_tokens, gpu_memory_utilization, mem_fraction_static, max_model_len,
                  max_num_batched_tokens, max_num_seqs, block_size, total_memory, weights_memory,
                  activation_memory, non_torch_memory, cuda_graph_memory, sglang_pools=(None, None, None),
                  engine_version=None):
    """The flags as an EngineInputs (None = estimate from the presets); bad values name their flag.
    ``sglang_pools``: (--swa-full-tokens-ratio, --mamba-full-memory-ratio, --max-mamba-cache-size)."""
    from kvcalc.memory.engine_common import ENGINES, EngineInputs
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import (MAX_BLOCK_TOKENS, MAX_REQUESTS, check_option, check_positive, parse_bytes,
                                  parse_fraction, parse_tokens)

    if engine not in ENGINES:
        raise InputError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}")

    def size(text, flag, zero_ok=False):
        if text is None:
            return None
        if zero_ok and str(text).strip() in ("0", "0GiB", "0GB", "0B"):
            return 0.0
        return parse_bytes(text, flag)

    if max_num_seqs is not None:
        check_positive(max_num_seqs, "--max-num-seqs", limit=MAX_REQUESTS)
    if block_size is not None:
        check_positive(block_size, "--block-size", limit=MAX_BLOCK_TOKENS)
    swa_ratio, mamba_ratio, mamba_size = check_sglang_pools(*sglang_pools)
    if engine_version is not None:
        from kvcalc.memory.engine_common import parse_version

        parse_version(engine_version)
    return EngineInputs(
        engine=engine, tp=gpus,
        max_model_len=parse_tokens(max_model_len, "--max-model-len") if max_model_len else context_tokens,
        gpu_memory_utilization=parse_fraction(gpu_memory_utilization, "--gpu-memory-utilization"),
        mem_fraction_static=(parse_fraction(mem_fraction_static, "--mem-fraction-static")
                             if mem_fraction_static else None),
        max_num_batched_tokens=(parse_tokens(max_num_batched_tokens, "--max-num-batched-tokens")
                                if max_num_batched_tokens else None),
        max_num_seqs=max_num_seqs, block_size=block_size,
        total_memory_bytes=(check_option("total-memory", size(total_memory, "--total-memory"))
                            if total_memory is not None else None),
        weights_bytes=size(weights_memory, "--weights-memory"),
        activation_bytes=size(activation_memory, "--activation-memory", True),
        non_torch_bytes=size(non_torch_memory, "--non-torch-memory", True),
        cuda_graph_bytes=size(cuda_graph_memory, "--cuda-graph-memory", True),
        swa_full_tokens_ratio=swa_ratio, mamba_full_memory_ratio=mamba_ratio, max_mamba_cache_size=mamba_size,
        engine_version=str(engine_version).strip() if engine_version is not None else None)


def refuse_without_engine(ctx, engine: str, solve: Optional[str]) -> None:
    """capacity: the engine flags apply only with --engine vllm|sglang (with the ideal budget they would be
    silently ignored); --max-model-len also with --solve (the inverse questions read it); --concurrency only with
    --solve gpu-memory-utilization. One line naming the option needed, exit 2."""
    from kvcalc.cli.common import refuse_unless

    engine_flags = [n.replace("-", "_") for n in ENGINE_INPUTS if n != "max-model-len"]
    refuse_unless(ctx, engine != "ideal", engine_flags, "--engine vllm or --engine sglang")
    refuse_unless(ctx, engine != "ideal" or solve is not None, ["max_model_len"],
                  "--engine vllm, --engine sglang or --solve")
    refuse_unless(ctx, solve == "gpu-memory-utilization", ["concurrency"], "--solve gpu-memory-utilization")


# --engine-input NAME=VALUE (cost, compare, trace): capacity's engine flags, named without their dashes
ENGINE_INPUTS = ("gpu-memory-utilization", "mem-fraction-static", "max-model-len", "max-num-batched-tokens",
                 "max-num-seqs", "block-size", "total-memory", "weights-memory", "activation-memory",
                 "non-torch-memory", "cuda-graph-memory", "swa-full-tokens-ratio", "mamba-full-memory-ratio",
                 "max-mamba-cache-size", "engine-version")
_INTS = ("max-num-seqs", "block-size", "max-mamba-cache-size")
_FLOATS = ("swa-full-tokens-ratio", "mamba-full-memory-ratio")


def engine_input_sets(engine: Optional[str], sets: Optional[list[str]]):
    """``--engine-input NAME=VALUE`` (repeatable) -> EngineInputs, or None without any: the values an engine's
    start-up log printed, for the KV pool that cost, compare and trace size with ``--engine`` (the rest estimated,
    as in ``kvcalc capacity --engine``; the pool's function sets the TP size). Bad names, values or a missing
    --engine name the flag."""
    import difflib

    from kvcalc.memory.engine_common import EngineInputs
    from kvcalc.out.errors import InputError

    if not sets:
        return None
    if engine in (None, "ideal"):
        raise InputError("--engine-input: the engine's own inputs; add --engine vllm or --engine sglang")
    values: dict[str, str] = {}
    for text in sets:
        name, sep, value = str(text).partition("=")
        name, value = name.strip().lstrip("-"), value.strip()
        if not sep or not value:
            raise InputError(f"--engine-input: {str(text)[:60]!r}: give NAME=VALUE, e.g. weights-memory=14.08GiB")
        if name not in ENGINE_INPUTS:
            close = difflib.get_close_matches(name, ENGINE_INPUTS, n=2)
            hint = f" (did you mean {' or '.join(close)}?)" if close else f"; one of {', '.join(ENGINE_INPUTS)}"
            raise InputError(f"--engine-input: unknown input {name[:60]!r}{hint}")
        if name in values:
            raise InputError(f"--engine-input: {name} given twice")
        values[name] = value
    numbers: dict[str, object] = {}
    for name in (*_INTS, *_FLOATS):
        if name in values:
            try:
                numbers[name] = int(values[name]) if name in _INTS else float(values[name])
            except ValueError:
                raise InputError(f"--engine-input {name}: cannot read {values[name][:40]!r} as a "
                                 f"{'whole number' if name in _INTS else 'number'}") from None
    v = values.get
    try:
        default = EngineInputs()
        return engine_inputs(engine, default.tp, default.max_model_len, v("gpu-memory-utilization",
                             default.gpu_memory_utilization), v("mem-fraction-static"),
                             v("max-model-len"), v("max-num-batched-tokens"), numbers.get("max-num-seqs"),
                             numbers.get("block-size"), v("total-memory"), v("weights-memory"),
                             v("activation-memory"), v("non-torch-memory"), v("cuda-graph-memory"),
                             (numbers.get("swa-full-tokens-ratio"), numbers.get("mamba-full-memory-ratio"),
                              numbers.get("max-mamba-cache-size")), v("engine-version"))
    except InputError as e:  # name the input as the user wrote it: "--engine-input total-memory: ..."
        if e.message.startswith("--"):
            e.message = "--engine-input " + e.message[2:]
        raise
