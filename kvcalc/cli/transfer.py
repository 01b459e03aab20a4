"""``kvcalc transfer``: a block, a request and a batch of KV over links; latency-bound or bandwidth-bound."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, MlaLayoutOpt, MtpOpt
from kvcalc.out.units import MAX_BLOCK_TOKENS, MAX_GPUS, MAX_OVERLAP_US, MAX_REQUESTS, MAX_TOKENS, MIN_MFU


def transfer(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", "-m", help="model preset or TOML path")] = "deepseek-v4-flash",
    context: Annotated[str, typer.Option("--context", "-c", help=f"tokens per request (4k = 4,096; at most {MAX_TOKENS:,})")] = "4k",
    requests: Annotated[int, typer.Option("--requests", "-n", help=f"requests in the batch payload (1 to {MAX_REQUESTS:,})")] = 100,
    block_tokens: Annotated[int, typer.Option("--block-tokens", "-b", help=f"tokens per paged block (V4 needs a multiple of 128; at most {MAX_BLOCK_TOKENS:,})")] = 256,
    link: Annotated[Optional[list[str]], typer.Option(
        "--link", "-l", help="link preset or TOML path with bandwidth and latency (repeatable; default: PCIe Gen5, "
        "NVLink4, IB NDR400, 100 GbE, 10 GbE, NVMe Gen5)", show_default=False)] = None,
    bandwidth: Annotated[str, typer.Option("--bandwidth", help="measured | theoretical link bandwidth")] = "measured",
    overlap_us: Annotated[float, typer.Option("--overlap-us", help=f"window a speculative prefetch hides behind [us] (exposed = max(0, time - overlap); at most {MAX_OVERLAP_US:,.0f})")] = 0.0,
    hardware: Annotated[str, typer.Option("--hardware", help="hardware preset or TOML path (prefill time, host link)")] = "h100-sxm",
    gpus: Annotated[int, typer.Option("--gpus", help=f"GPUs doing the prefill (1 to {MAX_GPUS:,})")] = 8,
    mfu: Annotated[str, typer.Option("--mfu", help=f"prefill share of the dense peak for the model's weight dtype, e.g. 0.2 or 20% (end to end: ~15-24%; at least {MIN_MFU:g})")] = "0.2",
    tiers: Annotated[bool, typer.Option("--tiers", help="add the DRAM/SSD tier table: prefix-cache hit load vs recompute")] = False,
    dram: Annotated[str, typer.Option("--dram", help="host DRAM per node for --tiers, e.g. 1TB or 1TiB")] = "1TB",
    ssd: Annotated[str, typer.Option("--ssd", help="SSD per node for --tiers")] = "8TB",
    ssd_link: Annotated[str, typer.Option("--ssd-link", help="link from SSD for --tiers")] = "nvme-gen5",
    kv_dtype: KvDtypeOpt = None, mla_layout: MlaLayoutOpt = None, indexer_dtype: IndexerDtypeOpt = None,
    mtp: MtpOpt = False, fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """Time to move one block, one request's KV and a batch's KV over each link: latency + bytes / bandwidth,
    the share spent in latency, effective bandwidth, separate copies per block vs one coalesced copy, and the
    prefill time that produced the payload.

    Examples:

    \b
      kvcalc transfer
      kvcalc transfer -m llama-3-70b --block-tokens 16 --link pcie-gen5-x16 --bandwidth theoretical --explain
      kvcalc transfer --link ./my-link.toml --tiers --check 'latency_share < 0.5'
    """
    from kvcalc.cli.common import check_format, emit, kv_options, refuse_unless
    from kvcalc.model import catalog
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import check_positive, parse_bytes, parse_fraction, parse_tokens, us_to_s
    from kvcalc.serve.transfer import DEFAULT_LINKS, TransferInputs, transfer_result

    check_format(fmt)
    refuse_unless(ctx, tiers, ["dram", "ssd", "ssd_link"], "--tiers")
    opts = kv_options(kv_dtype, mla_layout, indexer_dtype, mtp)
    if bandwidth not in ("measured", "theoretical"):
        raise InputError(f"--bandwidth: {bandwidth!r} is not one of measured, theoretical")
    inp = TransferInputs(
        context_tokens=parse_tokens(context, "--context"), requests=int(check_positive(requests, "--requests", limit=MAX_REQUESTS)),
        block_tokens=int(check_positive(block_tokens, "--block-tokens", limit=MAX_BLOCK_TOKENS)), bandwidth=bandwidth,
        overlap_s=us_to_s(check_positive(overlap_us, "--overlap-us", allow_zero=True, limit=MAX_OVERLAP_US)),
        gpus=int(check_positive(gpus, "--gpus", limit=MAX_GPUS)), mfu=parse_fraction(mfu, "--mfu", MIN_MFU))
    dram_bytes, ssd_bytes = parse_bytes(dram, "--dram"), parse_bytes(ssd, "--ssd")
    hw = catalog.load_hardware(hardware)
    links = [(catalog.name_of(ref), catalog.load_link(ref)) for ref in (link or DEFAULT_LINKS)]
    tier_links = None
    if tiers:
        tier_links = [("dram", dram_bytes, catalog.name_of(hw.host_link), catalog.load_link(hw.host_link)),
                      ("ssd", ssd_bytes, catalog.name_of(ssd_link), catalog.load_link(ssd_link))]
    result = transfer_result(catalog.name_of(model), catalog.load_model(model), links, catalog.name_of(hardware), hw,
                             inp, opts, tier_links)
    emit(result, fmt, check, explain)
