"""Options shared by every command and the one function that renders a Result and applies --check."""

import sys
from typing import Annotated, Optional

import typer

from kvcalc.out.units import MAX_KV_GROUP_SIZE, MAX_TOKENS

FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table | json | csv | markdown",
                                        rich_help_panel="Output")]
CheckOpt = Annotated[Optional[list[str]], typer.Option(
    "--check", help="'FIELD OP NUMBER' tested on every result row (repeatable); exit 1 if one fails, "
    "e.g. --check 'max_requests >= 100'", rich_help_panel="Output")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="show each formula with the numbers substituted",
                                          rich_help_panel="Output")]
KvDtypeOpt = Annotated[Optional[str], typer.Option(
    "--kv-dtype", help="full-attention KV format: bf16 | fp16 | fp32 | fp8 | int8 | int4 | fp8-per-token-head | "
    "nvfp4 | int4-grouped | kivi (scales counted; see kv --explain; default: the model's)",
    rich_help_panel="KV layout")]
KvGroupSizeOpt = Annotated[int, typer.Option(
    "--kv-group-size", help=f"int4-grouped/kivi: elements per FP16 scale+zero group (KIVI: 32; 1 to {MAX_KV_GROUP_SIZE:,})",
    rich_help_panel="KV layout")]
KvResidualOpt = Annotated[int, typer.Option(
    "--kv-residual-tokens", help=f"kivi: most recent tokens kept in BF16 (KIVI: 128; at most {MAX_TOKENS:,})", rich_help_panel="KV layout")]
MlaLayoutOpt = Annotated[Optional[str], typer.Option(
    "--mla-layout", help="MLA entry: bf16 (1,152 B/layer) | fp8 (576) | fp8-flashmla (656); default: the model's",
    rich_help_panel="KV layout")]
IndexerDtypeOpt = Annotated[Optional[str], typer.Option(
    "--indexer-dtype", help="sparse indexer key: fp8 (132 B) | fp4 (68 B); default: the model's",
    rich_help_panel="KV layout")]
MtpOpt = Annotated[bool, typer.Option("--mtp", help="count the multi-token-prediction layer (speculative decoding)",
                                      rich_help_panel="KV layout")]

WeightsDtypeOpt = Annotated[Optional[str], typer.Option(
    "--weights-dtype", help="weights of the linear layers: bf16 | fp8 | int8 | int4 | mxfp4 | nvfp4 (scales counted; "
    "embedding and LM head stay BF16; default: the model's)", rich_help_panel="KV layout")]


def check_weights_dtype(dtype):
    """Validate --weights-dtype -> the name, or None."""
    from kvcalc.model.weights_dtype import WEIGHT_DTYPES
    from kvcalc.out.errors import InputError

    if dtype is not None and dtype not in WEIGHT_DTYPES:
        raise InputError(f"--weights-dtype: {str(dtype)[:40]!r} is not one of {', '.join(WEIGHT_DTYPES)}")
    return dtype


def weights_dtype(model, dtype):
    """``model`` with --weights-dtype applied (validated) -> a model preset."""
    from kvcalc.model.weights_dtype import with_weights_dtype

    return with_weights_dtype(model, check_weights_dtype(dtype))


StateDtypeOpt = Annotated[Optional[str], typer.Option(
    "--state-dtype", help="recurrent state of linear-attention/Mamba layers: bf16 | fp16 | fp32 (default: the "
    "model's; bf16 as vLLM keeps it unless told otherwise)", rich_help_panel="KV layout")]


def kv_options(kv_dtype, mla_layout, indexer_dtype, mtp, state_dtype=None, kv_group_size=None,
               kv_residual_tokens=None):
    """Validate the layout choices -> attention.KvOptions."""
    from typing import get_args

    from kvcalc.model import kv_formats
    from kvcalc.model.attention import KvOptions
    from kvcalc.model.schema import IndexerDtype, MlaLayout, StateDtype
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import check_option

    for flag, value, allowed in (("--kv-dtype", kv_dtype, kv_formats.FORMATS),
                                 ("--mla-layout", mla_layout, get_args(MlaLayout)),
                                 ("--indexer-dtype", indexer_dtype, get_args(IndexerDtype)),
                                 ("--state-dtype", state_dtype, get_args(StateDtype))):
        if value is not None and value not in allowed:
            raise InputError(f"{flag}: {value!r} is not one of {', '.join(allowed)}")
    gs = kv_formats.DEFAULT_GROUP_SIZE if kv_group_size is None else kv_group_size
    residual = kv_formats.DEFAULT_RESIDUAL_TOKENS if kv_residual_tokens is None else kv_residual_tokens
    check_option("kv-group-size", gs)   # the bounds sweep's kv-group-size / kv-residual-tokens axes share
    check_option("kv-residual-tokens", residual)
    return KvOptions(kv_dtype=kv_dtype, mla_layout=mla_layout, indexer_dtype=indexer_dtype, mtp=mtp,
                     state_dtype=state_dtype, kv_group_size=gs, kv_residual_tokens=residual)


GROUPED_FORMATS = ("int4-grouped", "kivi")  # the KV formats --kv-group-size applies to (kivi: --kv-residual-tokens)


def refuse_unused_kv_params(ctx, kv_dtype, models) -> None:
    """--kv-group-size only applies when some layer's KV format is int4-grouped or kivi (--kv-dtype, or the
    model's own), --kv-residual-tokens only with kivi; else they are refused rather than ignored."""
    dtypes = {kv_dtype} if kv_dtype else {getattr(g, "kv_dtype", None) or m.kv_dtype
                                          for m in models for g in (getattr(m, "layer_groups", None) or ())}
    refuse_unless(ctx, bool(dtypes & set(GROUPED_FORMATS)), ["kv_group_size"],
                  "--kv-dtype int4-grouped or --kv-dtype kivi")
    refuse_unless(ctx, "kivi" in dtypes, ["kv_residual_tokens"], "--kv-dtype kivi")


def check_format(fmt: str) -> str:
    """Validate --format early (before any work)."""
    from kvcalc.out.errors import InputError
    from kvcalc.out.render import FORMATS

    if fmt not in FORMATS:
        raise InputError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    return fmt


def emit(result, fmt: str, checks: Optional[list[str]], explain: bool, block: Optional[str] = None) -> None:
    """Render ``result`` to stdout in ``fmt``; evaluate --check; exit 1 listing failures. ``block``: text that
    replaces the main table in the table format (``bench``'s copy of vLLM's result block), notes and
    derivations still following it."""
    from kvcalc.out import checks as chk
    from kvcalc.out import render
    check_format(fmt)
    parsed = [chk.parse_check(c) for c in (checks or [])]
    outcomes = chk.evaluate(parsed, result.rows)
    render.write(result, fmt, sys.stdout, outcomes, explain, block)
    _report(outcomes)


def emit_chunks(result, chunks, fmt: str, checks: Optional[list[str]], stream=None) -> None:
    """:func:`emit` for a result whose main rows come as ``chunks`` (lists of rows), written on ``stream``
    (default stdout) as they come (render.write_chunks: json, csv, markdown); --check evaluated chunk by chunk,
    failures listed after."""
    from kvcalc.out import checks as chk
    from kvcalc.out import render

    checker = chk.Checker([chk.parse_check(c) for c in (checks or [])], keep_passed=fmt == "json")
    render.write_chunks(result, chunks, fmt, stream or sys.stdout, checker)
    _report(checker.outcomes())


def _report(outcomes: list[dict]) -> None:
    """Each failed --check on stderr; exit 1 when one failed."""
    failed = [o for o in outcomes if not o["passed"]]
    for o in failed:
        sys.stderr.write(f"check failed: {o['check']} (row {o['row']}: value {o['value']})\n")
    if failed:
        from kvcalc.out.errors import EXIT_CHECK_FAILED

        raise typer.Exit(EXIT_CHECK_FAILED)


def given(ctx, name: str) -> bool:
    """True when parameter ``name`` (its Python name) came from the command line or the environment, not from
    its default: an option whose default equals a typed value (``--gpu-memory-utilization 0.9``) still counts."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")


def flag_of(ctx, name: str) -> str:
    """The longest spelling of parameter ``name`` (``--gpu-memory-utilization``), as the user may have typed it."""
    for param in ctx.command.params:
        if param.name == name:
            return max(param.opts, key=len)
    raise KeyError(name)


def refuse_unless(ctx, applies: bool, names, needs: str) -> None:
    """Options that only apply with another: when ``applies`` is false, the first of ``names`` (Python names)
    given on the command line is refused with one line naming what it needs (``needs``: e.g. "--engine vllm or
    --engine sglang"), instead of being silently ignored."""
    if applies:
        return
    for name in names:
        if given(ctx, name):
            from kvcalc.out.errors import InputError

            raise InputError(f"{flag_of(ctx, name)}: only applies with {needs}")
