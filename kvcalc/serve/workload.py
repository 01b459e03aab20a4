"""Workloads from command-line flags: one request class and nested shared prefixes (``--requests``,
``--context``, ``--output-tokens``, ``--shared-prefix TOKENS[:GROUPS]``). The preset schema is
:mod:`kvcalc.model.workload_schema`."""

from kvcalc.model.workload_schema import RequestClass, SharedSegment, WorkloadPreset
from kvcalc.out.errors import InputError


def inline_workload(requests: int, context_tokens: int, output_tokens: int,
                    shared: list[tuple[int, int]]) -> WorkloadPreset:
    """A one-class workload from command-line flags (each already parsed and bounded); InputError names the
    flag when the segments do not fit the requests."""
    try:
        return WorkloadPreset(
            schema_version=1, source="command line", display_name=f"{requests} x {context_tokens:,} tokens",
            classes=[RequestClass(count=requests, context_tokens=context_tokens, output_tokens=output_tokens)],
            shared=[SharedSegment(name=f"shared {i + 1}", tokens=t, groups=g) for i, (t, g) in enumerate(shared)])
    except ValueError as e:
        raise InputError(f"--shared-prefix: {e}") from None


def parse_shared_prefix(text: str) -> tuple[int, int]:
    """``TOKENS[:GROUPS]`` -> (tokens, groups); e.g. ``1500`` (shared by all) or ``500:5``."""
    from kvcalc.out.units import parse_tokens

    tokens, _, groups = text.partition(":")
    t = parse_tokens(tokens, "--shared-prefix")
    g = parse_tokens(groups, "--shared-prefix groups") if groups else 1
    return t, g
