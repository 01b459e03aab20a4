"""``kvcalc capacity``: requests that fit on a node after the weights, block size and page-in time."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import (CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, MlaLayoutOpt, MtpOpt,
                               StateDtypeOpt)
from kvcalc.out.units import MAX_BLOCK_TOKENS, MAX_GPUS, MAX_TOKENS

ARTICLE_MODELS = ["mha-96l-64h", "deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro"]


def capacity(
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
    mtp: MtpOpt = False, fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """Requests that fit in a node's HBM after the weights, 16-token block bytes, page-in time per block.

    With no options: the article's table of five attention generations on 8 x H100 80 GB at 4K tokens.

    Examples:

    \b
      kvcalc capacity
      kvcalc capacity -m llama-3-70b -m deepseek-v4-flash --hardware h200-sxm --context 128k
      kvcalc capacity -m deepseek-v3 --mla-layout fp8-flashmla --format json --check 'max_requests >= 1000'
    """
    from kvcalc.cli.common import check_format, emit, kv_options
    from kvcalc.memory.capacity import CapacityInputs, capacity_result
    from kvcalc.model import catalog
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import check_positive, parse_bytes, parse_fraction, parse_tokens

    check_format(fmt)
    opts = kv_options(kv_dtype, mla_layout, indexer_dtype, mtp, state_dtype)
    if attention not in ("tp", "dp"):
        raise InputError(f"--attention: {attention!r} is not one of tp, dp")
    if bandwidth not in ("measured", "theoretical"):
        raise InputError(f"--bandwidth: {bandwidth!r} is not one of measured, theoretical")
    check_positive(gpus, "--gpus", limit=MAX_GPUS)
    check_positive(block_tokens, "--block-tokens", limit=MAX_BLOCK_TOKENS)
    inp = CapacityInputs(
        gpus=gpus, context_tokens=parse_tokens(context, "--context"),
        hbm_utilization=parse_fraction(hbm_utilization, "--hbm-utilization"),
        reserve_bytes_per_gpu=parse_bytes(reserve, "--reserve") if reserve else 0.0,
        attention=attention, block_tokens=block_tokens, bandwidth=bandwidth)
    hw = catalog.load_hardware(hardware)
    link_ref = link or hw.host_link
    loaded = [(catalog.name_of(m), catalog.load_model(m)) for m in (model or ARTICLE_MODELS)]
    result = capacity_result(loaded, catalog.name_of(hardware), hw, catalog.name_of(link_ref),
                             catalog.load_link(link_ref), inp, opts)
    emit(result, fmt, check, explain)
