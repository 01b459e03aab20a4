"""kvcalc: KV-cache cost-and-capacity calculator.

The Python API is the same functions the CLI calls, importable from here. Nothing is imported until a
name is first used (PEP 562 ``__getattr__``), so ``import kvcalc`` costs what the CLI's start-up costs.

    import kvcalc
    model = kvcalc.load_model("deepseek-v4-flash")          # a preset name, a TOML file, or a config.json
    kvcalc.kv_profile("v4-flash", model, 4096).kv_bytes_per_request   # 29814784 [B]
    result = kvcalc.compare_result(kvcalc.resolve_scenario("article"))
    print(kvcalc.to_json(result))                            # the CLI's JSON envelope

Every ``*_result`` function returns a :class:`Result` (tables of raw SI numbers plus notes and derivations);
``to_json``/``to_csv``/``to_markdown``/``to_table`` render it exactly as ``--format`` does. Bad input raises
:class:`InputError` (a :class:`KvcalcError`) with a one-line message.
"""

from kvcalc.out.version import __version__

# name -> (module, attribute); grouped by layer, lowest first.
_API = {
    # out: results, rendering, errors
    "Result": ("kvcalc.out.results", "Result"),
    "to_json": ("kvcalc.out.render", "to_json"),
    "to_csv": ("kvcalc.out.render", "to_csv"),
    "to_markdown": ("kvcalc.out.render", "to_markdown"),
    "to_table": ("kvcalc.out.render", "to_table"),
    "KvcalcError": ("kvcalc.out.errors", "KvcalcError"),
    "InputError": ("kvcalc.out.errors", "InputError"),
    # model: presets and KV bytes
    "load_model": ("kvcalc.model.catalog", "load_model"),
    "load_hardware": ("kvcalc.model.catalog", "load_hardware"),
    "load_link": ("kvcalc.model.catalog", "load_link"),
    "load_preset": ("kvcalc.model.catalog", "load"),
    "preset_names": ("kvcalc.model.catalog", "names"),
    "KvOptions": ("kvcalc.model.attention", "KvOptions"),
    "kv_profile": ("kvcalc.model.kv", "kv_profile"),
    "kv_result": ("kvcalc.model.kv", "kv_result"),
    "import_config": ("kvcalc.model.config_import", "import_config"),
    "import_result": ("kvcalc.model.config_report", "import_result"),
    # move: links
    "transfer_time_s": ("kvcalc.move.links", "transfer_time_s"),
    # memory: capacity and paged blocks
    "CapacityInputs": ("kvcalc.memory.capacity", "CapacityInputs"),
    "capacity_result": ("kvcalc.memory.capacity", "capacity_result"),
    "EngineInputs": ("kvcalc.memory.engine_common", "EngineInputs"),
    "engine_result": ("kvcalc.memory.engine_report", "engine_result"),
    "engine_solve_result": ("kvcalc.memory.engine_report", "solve_result"),
    "BlockInputs": ("kvcalc.memory.blocks", "BlockInputs"),
    "blocks_result": ("kvcalc.memory.blocks", "blocks_result"),
    # serve: transfers vs prefill, scenarios, strategies and cost
    "TransferInputs": ("kvcalc.serve.transfer", "TransferInputs"),
    "transfer_result": ("kvcalc.serve.transfer", "transfer_result"),
    "Overrides": ("kvcalc.serve.scenario", "Overrides"),
    "resolve_scenario": ("kvcalc.serve.scenario", "resolve"),
    "CostInputs": ("kvcalc.serve.cost", "CostInputs"),
    "cost_result": ("kvcalc.serve.cost", "cost_result"),
    "compare_result": ("kvcalc.serve.cost", "compare_result"),
    "parse_sweep_axes": ("kvcalc.serve.sweep", "parse_axes"),
    "sweep_result": ("kvcalc.serve.sweep", "sweep_result"),
    # trace: request traces
    "read_trace": ("kvcalc.trace.reader", "read_trace"),
    "analyze_trace": ("kvcalc.trace.analysis", "analyze_trace"),
    "TraceInputs": ("kvcalc.trace.report", "TraceInputs"),
    "trace_result": ("kvcalc.trace.report", "trace_result"),
    "trace_compare_result": ("kvcalc.trace.cost", "trace_compare_result"),
    "tiered_profile": ("kvcalc.trace.tiers", "tiered_profile"),
    "TierRequest": ("kvcalc.trace.tier_report", "TierRequest"),
    "tier_trace_result": ("kvcalc.trace.tier_report", "tier_trace_result"),
    "tier_curve_result": ("kvcalc.trace.tier_report", "tier_curve_result"),
    "tier_curve": ("kvcalc.trace.tier_curve", "tier_curve"),
    "tier_compare_result": ("kvcalc.trace.tier_compare", "tier_compare_result"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    """Import an API name on first use and cache it on the package."""
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'kvcalc' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
