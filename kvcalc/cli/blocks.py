"""``kvcalc blocks``: paged block size sweep: bytes, padding, block-table overhead, validity, last-block waste."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, MlaLayoutOpt, MtpOpt
from kvcalc.out.units import MAX_BLOCK_TABLES, MAX_BLOCK_TOKENS, MAX_ENTRY_BYTES, MAX_TOKENS

DEFAULT_MODELS = ["llama-3-70b", "deepseek-v3.2", "deepseek-v4-flash"]


def blocks(
    model: Annotated[Optional[list[str]], typer.Option(
        "--model", "-m", help="model preset or TOML path (repeatable; default: Llama-3-70B, DeepSeek V3.2, V4 Flash)",
        show_default=False)] = None,
    block_tokens: Annotated[str, typer.Option("--block-tokens", "-b", help=f"block sizes to sweep [tokens], comma-separated (each at most {MAX_BLOCK_TOKENS:,})")] = "16,32,64,128,256,512,1024",
    entry_bytes: Annotated[float, typer.Option("--entry-bytes", help=f"block-table entry [B]: 4 = int32 (vLLM, FlashMLA); the article assumes 16-24; at most {MAX_ENTRY_BYTES:,}")] = 4.0,
    tables: Annotated[int, typer.Option("--tables", help=f"block tables per request (vLLM keeps one per KV-cache group; 1 to {MAX_BLOCK_TABLES:,})")] = 1,
    max_overhead: Annotated[str, typer.Option("--max-overhead", help="table overhead target for the recommendation, e.g. 1% or 0.01")] = "1%",
    context: Annotated[str, typer.Option("--context", "-c", help=f"request length for the last-block waste [tokens] (default: the article's mean request; 4k = 4,096; at most {MAX_TOKENS:,})")] = "3200",
    kv_dtype: KvDtypeOpt = None, mla_layout: MlaLayoutOpt = None, indexer_dtype: IndexerDtypeOpt = None,
    mtp: MtpOpt = False,
    engine: Annotated[str, typer.Option("--engine", help="ideal | vllm | sglang: add what that engine pages (block "
                                        "size, KV-cache groups, one pool block) as a note")] = "ideal",
    fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """Block size sweep: block bytes (padded as the kernel pages them), block-table overhead, whether the size is
    valid for the model (V4: multiple of 128 tokens), last-block waste, and the smallest valid size under the target.

    Examples:

    \b
      kvcalc blocks -m deepseek-v4-flash --explain
      kvcalc blocks -m deepseek-v4-flash-article --block-tokens 16,256 --entry-bytes 16
      kvcalc blocks -m llama-3-70b --format json --check 'metadata_overhead <= 0.0001'
      kvcalc blocks -m qwen3-next-80b-a3b --engine vllm
    """
    from kvcalc.cli.common import check_format, emit, kv_options
    from kvcalc.memory.blocks import BlockInputs, blocks_result
    from kvcalc.model import catalog
    from kvcalc.out.units import check_positive, parse_fraction, parse_token_list, parse_tokens

    check_format(fmt)
    from kvcalc.memory.engine_common import ENGINES
    from kvcalc.out.errors import InputError

    if engine not in ENGINES:
        raise InputError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}")
    opts = kv_options(kv_dtype, mla_layout, indexer_dtype, mtp)
    inp = BlockInputs(
        block_tokens=tuple(parse_token_list(block_tokens, "--block-tokens", limit=MAX_BLOCK_TOKENS)),
        entry_bytes=check_positive(entry_bytes, "--entry-bytes", limit=MAX_ENTRY_BYTES),
        tables=int(check_positive(tables, "--tables", limit=MAX_BLOCK_TABLES)),
        context_tokens=parse_tokens(context, "--context"),
        max_overhead=parse_fraction(max_overhead, "--max-overhead"))
    loaded = [(catalog.name_of(m), catalog.load_model(m)) for m in (model or DEFAULT_MODELS)]
    emit(blocks_result(loaded, inp, opts, engine), fmt, check, explain)
