"""Reading a Hugging Face ``config.json``: the file (bounded, UTF-8, JSON object) and its fields, each checked for
type, range and length before any arithmetic uses it (issue 21).

Every field the importer uses is read through one typed accessor of :class:`Config` (``int``, ``text``,
``flag``, ``int_list``, ``text_list``, ``section``); a value of the wrong type, out of range or of the wrong
length raises :class:`InputError` with one line naming the file, the field and what was expected. ``import``,
``kv``, ``capacity`` and every other command read a config.json through this one reader.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvcalc.out.errors import InputError

CONFIG_NAME = "config.json"
# Bounds of a config's integers (layers, heads, dims, vocabulary: a real config is far below; past them a layer
# pattern of that length would be built) and of its token counts (windows, context, top-k).
MAX_CONFIG_INT = 2**24
MAX_CONFIG_TOKENS = 2**40
LONG_FIELDS = {"max_position_embeddings", "sliding_window", "attention_chunk_size", "index_topk"}
# A config.json is a few kB; a model.safetensors.index.json lists every tensor (DeepSeek V3's ~91,000: ~9 MB).
MAX_JSON_BYTES = 64 * 2**20


def config_file(ref: str) -> Path:
    """The config.json a reference points at: the file itself, or ``config.json`` inside a folder."""
    from kvcalc.model.catalog import check_regular_file, is_dir, user_path

    path = user_path(ref)
    if is_dir(ref):
        path = path / CONFIG_NAME
        if not path.exists():
            raise InputError(f"{ref}: no {CONFIG_NAME} in this folder")
    check_regular_file(path, ref)
    return path


def read_json(path: Path) -> dict:
    """Parse a JSON object; not JSON -> InputError naming the file, line and reason (a FIFO, a file over
    MAX_JSON_BYTES, not UTF-8, nested too deeply or an integer over Python's 4,300-digit limit too)."""
    from kvcalc.model.catalog import read_text_bounded

    text = read_text_bounded(path, MAX_JSON_BYTES, "a JSON config")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON: {e.msg} (line {e.lineno})") from None
    except RecursionError:
        raise InputError(f"{path}: not JSON we can read: nested too deeply") from None
    except ValueError:  # int('9' * 4301): Python refuses to convert integers of over 4,300 digits
        raise InputError(f"{path}: not a config we can read: an integer of over 4,300 digits") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a config (a JSON object was expected)")
    return data


def _shown(value) -> str:
    """A config value in an error line, short (a 5,000-entry list or a 1,000-digit number stays one line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**21:
        return f"a {len(str(abs(value)))}-digit number"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


class Config:
    """A config's fields (``text_config`` merged over the top level), with typed, named access.
    (Plain classes here, not dataclasses: creating a dataclass costs import time.)"""

    def __init__(self, path: str, data: dict, nested: set | None = None, prefix: str = ""):
        self.path, self.data, self.prefix = path, data, prefix
        self.nested = nested or set()   # keys that came from text_config
        self.read: list = []            # field names read, in order (for the preset's source)
        self.notes: list = []           # what was assumed
        self.defaulted: set = set()     # keys filled from CLASS_DEFAULTS (assumed, not read)

    @classmethod
    def of(cls, data: dict, path: str) -> "Config":
        text = data.get("text_config")
        if text is None:
            return cls(path, dict(data))
        if not isinstance(text, dict):
            raise InputError(f"{path}: field 'text_config': {_type_name(text)}, not an object")
        return cls(path, {**data, **text}, set(text))

    def name(self, key: str) -> str:
        return self.prefix + (f"text_config.{key}" if key in self.nested else key)

    def fail(self, key: str, why: str):
        raise InputError(f"{self.path}: field {self.name(key)!r}: {why}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default=None):
        if self.has(key):
            if key not in self.read and key not in self.defaulted:
                self.read.append(key)
            return self.data[key]
        return default

    def int(self, key: str, default=None, minimum: int = 1, what: str = "", maximum: int | None = None):
        """An integer field in [minimum, maximum]; absent -> ``default`` (None default = required). ``maximum``
        defaults to MAX_CONFIG_INT, or MAX_CONFIG_TOKENS for the token counts in LONG_FIELDS."""
        value = self.get(key)
        if value is None:
            if default is None:
                self.fail(key, f"missing{' (' + what + ')' if what else ''}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"{_shown(value)} is not an integer")
        if value < minimum:
            self.fail(key, f"{_shown(value)} must be {'> 0' if minimum == 1 else f'>= {minimum}'}")
        limit = maximum or (MAX_CONFIG_TOKENS if key in LONG_FIELDS else MAX_CONFIG_INT)
        if value > limit:
            shown = f"{value:,}" if value < 10**21 else _shown(value)
            self.fail(key, f"{shown} is absurdly large (limit {limit:,})")
        return value

    def text(self, key: str, default=None, choices=None, record: bool = True):
        """A string field (absent -> ``default``); with ``choices``, one of them (the error lists them).
        ``record=False``: checked, but not listed among the fields read (a lookup key, not a number used)."""
        value = self.get(key) if record else self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.fail(key, f"{_type_name(value)} {_shown(value)}, but a string was expected")
        if choices is not None and value not in choices:
            self.fail(key, f"unknown value {_shown(value)} (known: {', '.join(choices)})")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        """A true/false field (absent -> ``default``); "false" as a string would read as true, so it is refused."""
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"{_type_name(value)} {_shown(value)}, but true or false was expected")
        return value

    def _list(self, key: str, length: int | None, what: str) -> list:
        value = self.get(key)
        if not isinstance(value, list):
            self.fail(key, f"{_type_name(value)} {_shown(value)}, but a list of {what} was expected")
        if length is not None and len(value) != length:
            self.fail(key, f"has {len(value):,} entries, but {length:,} were expected (one per layer)"
                      if what != "sizes" else f"has {len(value):,} entries, but {length} were expected")
        return value

    def int_list(self, key: str, length: int | None = None, minimum: int = 0, maximum: int = MAX_CONFIG_INT,
                 what: str = "integers") -> list[int]:
        """A list of integers in [minimum, maximum], of ``length`` entries when given."""
        value = self._list(key, length, what)
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= maximum:
                self.fail(key, f"entry {i} is {_shown(v)}; {what} in {minimum:,}..{maximum:,} were expected")
        return value

    def text_list(self, key: str) -> list[str]:
        """A list of strings (module names, layer kinds)."""
        value = self._list(key, None, "strings")
        for i, v in enumerate(value):
            if not isinstance(v, str):
                self.fail(key, f"entry {i} is {_type_name(v)} {_shown(v)}, but a string was expected")
        return value

    def section(self, key: str) -> "Config | None":
        """An object field (``quantization_config``) as a Config whose errors name ``key.field``; absent -> None."""
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, f"{_type_name(value)} {_shown(value)}, but an object was expected")
        return Config(self.path, value, prefix=self.name(key) + ".")

    def assume(self, key: str, value, why: str):
        """A default for an absent field, recorded as a note (once)."""
        self.note(f"{self.name(key)} absent: assumed {value} ({why})")
        return value

    def note(self, text: str):
        """Record what was assumed or how a field was read (once)."""
        if text not in self.notes:
            self.notes.append(text)
