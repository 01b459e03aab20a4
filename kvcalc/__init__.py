"""kvcalc: KV-cache cost-and-capacity calculator."""

__version__ = "0.1.0"
