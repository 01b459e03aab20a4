"""``kvcalc kv``: KV bytes per request and per token for models and context lengths."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import (CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, KvGroupSizeOpt,
                               KvResidualOpt, MlaLayoutOpt, MtpOpt, StateDtypeOpt)
from kvcalc.out.units import MAX_TOKENS

DEFAULT_MODELS = ["mha-96l-64h", "llama-3-70b", "deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash",
                  "deepseek-v4-pro"]


def kv(
    ctx: typer.Context,
    models: Annotated[Optional[list[str]], typer.Argument(
        help="model preset names or TOML paths (default: MHA example, Llama-3-70B, DeepSeek V3, V3.2, V4 Flash, V4 Pro)",
        show_default=False)] = None,
    context: Annotated[str, typer.Option("--context", "-c", help=f"context lengths, comma-separated (4k = 4,096; 1m = 1,048,576; each at most {MAX_TOKENS:,})")] = "4k,32k,128k,1m",
    kv_dtype: KvDtypeOpt = None, mla_layout: MlaLayoutOpt = None, indexer_dtype: IndexerDtypeOpt = None,
    state_dtype: StateDtypeOpt = None,
    mtp: MtpOpt = False, kv_group_size: KvGroupSizeOpt = 32, kv_residual_tokens: KvResidualOpt = 128,
    fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """KV cache per request and per token, per layer group; bytes stored vs bytes read per decode step.

    Examples:

    \b
      kvcalc kv deepseek-v4-flash --context 4k,1m --explain
      kvcalc kv llama-3-70b --kv-dtype fp8 --format json
      kvcalc kv llama-3-8b --kv-dtype kivi --kv-group-size 32 --kv-residual-tokens 128 --explain
      kvcalc kv ./my-model.toml --check 'kv_bytes_per_token <= 100000'
    """
    from kvcalc.cli.common import check_format, emit, kv_options, refuse_unused_kv_params
    from kvcalc.model import catalog
    from kvcalc.model.kv import kv_result
    from kvcalc.out.units import parse_token_list

    check_format(fmt)
    opts = kv_options(kv_dtype, mla_layout, indexer_dtype, mtp, state_dtype, kv_group_size, kv_residual_tokens)
    contexts = parse_token_list(context, "--context")
    loaded = [(catalog.name_of(m), catalog.load_model(m)) for m in (models or DEFAULT_MODELS)]
    refuse_unused_kv_params(ctx, kv_dtype, [m for _, m in loaded])
    emit(kv_result(loaded, contexts, opts), fmt, check, explain)
