"""Plain help (click's formatter, no rich/markdown import) with options grouped under their panels.

typer groups options by ``rich_help_panel`` only in its rich help, which imports markdown and pygments (~100 ms);
this keeps the plain formatter and adds the panel headings (Options, Scenario overrides, KV layout, Output, ...).
"""

import types

# the placeholder each option shows in help (instead of typer's <str>/<int>): what the value is read as.
# tests/test_cli_conventions.py checks that every option of every command has one.
_PRESET = "NAME|FILE"
METAVARS = {
    **dict.fromkeys(("--activation-memory", "--cuda-graph-memory", "--non-torch-memory", "--total-memory",
                     "--weights-memory", "--reserve", "--dram", "--ssd", "--max-memory"), "SIZE"),
    **dict.fromkeys(("--context", "--max-model-len", "--max-num-batched-tokens"), "TOKENS"),
    **dict.fromkeys(("--gpu-memory-utilization", "--hbm-utilization", "--mem-fraction-static", "--mfu",
                     "--mfu-prefill", "--max-overhead", "--sample-rate"), "FRACTION"),
    **dict.fromkeys(("--hardware", "--model", "--workload", "--scenario", "--link", "--pd-link", "--ssd-link"),
                    _PRESET),
    **dict.fromkeys(("--block-size", "--block-tokens", "--concurrency", "--curve-points", "--gpus",
                     "--kv-group-size", "--max-mamba-cache-size", "--max-num-seqs", "--max-points", "--requests", "--replicas",
                     "--tp", "--dp", "--num-prompts", "--max-concurrency", "--seed",
                     "--tables"), "INTEGER"),
    **dict.fromkeys(("--output-tokens", "--sink-tokens", "--window-tokens", "--kv-residual-tokens", "--random-input-len",
                     "--random-output-len"), "TOKENS"),
    **dict.fromkeys(("--mamba-full-memory-ratio", "--swa-full-tokens-ratio"), "RATIO"),
    **dict.fromkeys(("--overlap-us", "--pd-overlap-us"), "MICROSECONDS"),
    "--max-seconds": "SECONDS",
    **dict.fromkeys(("--ttft-p99", "--tpot-p99"), "DURATION"),
    **dict.fromkeys(("--max-gpus", "--top"), "INTEGER"),
    "--rate-scale": "FACTOR", "--disagg": "off|on|auto",
    **dict.fromkeys(("--kv-dtype", "--indexer-dtype", "--state-dtype"), "DTYPE"),
    **dict.fromkeys(("--output", "--plot", "--trace", "--engine-log", "--measured"), "FILE"),
    "--engine-version": "VERSION",
    **dict.fromkeys(("--x", "--y"), "FIELD"),
    "--attention": "tp|dp", "--bandwidth": "measured|theoretical", "--engine": "ideal|vllm|sglang",
    "--format": "FORMAT", "--policy": "lru|fifo|lfu|s3fifo", "--weights-dtype": "DTYPE", "--kv-compression": "FACTOR", "--dataset": "random",
    "--burstiness": "FACTOR",
    "--request-rate": "inf|REQ/S", "--router": "ROUTER", "--trace-format": "FORMAT", "--strategy": "lru|prefix-tree",
    "--tier-copies": "coalesced|per-block", "--ttft-model": "MODEL", "--solve": "QUESTION", "--mla-layout": "LAYOUT",
    "--kind": "KIND", "--name": "NAME", "--source": "TEXT", "--check": "'FIELD OP NUMBER'",
    "--capacity": "CAPACITY", "--decode-tokens-per-s": "TOKENS/S", "--entry-bytes": "BYTES",
    "--engine-input": "NAME=VALUE", "--price-per-gpu-hour": "USD", "--set": "NAME=VALUE", "--vary": "NAME=SPEC",
    "--shared-prefix": "TOKENS[:GROUPS]", "--pd-split": "P:D", "--tier-capacity": "TIER=SIZE", "--tier-curve": "TIER[=SIZES]",
    "--tier-link": "TIER=LINK", "--tiers": "TIERS",
}


def placeholders(command) -> None:
    """Each option's METAVARS placeholder (options with a value only; a flag has none)."""
    for param in command.params:
        if param.param_type_name == "option" and not param.is_flag and param.metavar is None:
            param.metavar = METAVARS.get(max(param.opts, key=len))


def _format_options(self, ctx, formatter) -> None:
    sections: dict[str, list] = {}
    for param in self.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        title = ("Arguments" if param.param_type_name == "argument" else
                 getattr(param, "rich_help_panel", None) or "Options")
        sections.setdefault(title, []).append(record)
    for title, records in sections.items():
        with formatter.section(title):
            formatter.write_dl(records)


def _no_hyphen_breaks() -> None:
    """Wrap help text at spaces only, so ``--skip-bad`` in a sentence never becomes ``--skip-`` / ``bad``: click's
    TextWrapper (vendored in typer) splits words with the standard library's hyphen-aware pattern."""
    import textwrap

    try:
        from typer._click._textwrap import TextWrapper
    except ImportError:  # another typer layout: its help may break at hyphens, nothing else changes
        return
    TextWrapper.wordsep_re = textwrap.TextWrapper.wordsep_simple_re


def group_options(command) -> None:
    """Give ``command`` and every subcommand under it the panel-grouped options section (and wrap its help at
    spaces only)."""
    _no_hyphen_breaks()
    if getattr(command, "params", None) is not None and not hasattr(command, "commands"):
        command.format_options = types.MethodType(_format_options, command)
        placeholders(command)
    for sub in getattr(command, "commands", {}).values():
        group_options(sub)
