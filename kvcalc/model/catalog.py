"""Find, load and validate presets: by name from the shipped catalogue, or by path from a user's file.

Presets live in ``kvcalc/presets/<kind>/<name>.toml`` in an installed wheel, or in the top-level ``presets/``
of a source checkout. A bad file raises :class:`~kvcalc.out.errors.InputError` with one line naming the file,
the field and the problem; an unknown name lists close matches.
"""

from __future__ import annotations

import difflib
import functools
import tomllib
from pathlib import Path
from typing import Any

from kvcalc.out.errors import InputError, PresetNotFound

KINDS = ("models", "hardware", "links", "workloads", "scenarios", "calibration")


@functools.cache
def presets_root() -> Path:
    """The directory holding the shipped presets (installed wheel first, then a source checkout)."""
    package = Path(__file__).resolve().parents[1]  # kvcalc/ (model/ is one level down)
    for candidate in (package / "presets", package.parent / "presets"):
        if (candidate / "models").is_dir():
            return candidate
    raise InputError("cannot find the shipped presets directory (is the installation complete?)")


def _schema_for(kind: str):
    from kvcalc.model import schema
    if kind in schema.PRESET_KINDS:
        return schema.PRESET_KINDS[kind]
    if kind == "calibration":
        from kvcalc.model import calibration_schema
        return calibration_schema.PRESET_KINDS[kind]
    from kvcalc.model import workload_schema
    return workload_schema.PRESET_KINDS[kind]


def names(kind: str) -> list[str]:
    """Sorted names of the shipped presets of one kind."""
    return sorted(p.stem for p in (presets_root() / kind).glob("*.toml"))


def _looks_like_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or "\\" in ref


# A preset file is a few kB; a user's file past this is a mistake (or hostile: millions of keys), refused before
# it is parsed, in bounded memory (at most MAX_PRESET_BYTES + 1 bytes are read).
MAX_PRESET_BYTES = 2**20


def _shown(ref: str, limit: int = 80) -> str:
    """``ref`` as quoted in a message, cut to ``limit`` characters (a name may be hundreds long)."""
    return repr(ref) if len(ref) <= limit else repr(ref[:limit]) + f"... ({len(ref):,} characters)"


def check_regular_file(path: Path, shown: str) -> int:
    """The size of ``path`` [B] if it is a regular file; else InputError naming it and saying what it is. Uses
    stat, never open, so a FIFO or a device does not block."""
    import stat

    try:
        st = path.stat()
    except OSError as e:
        reason = "no such file" if isinstance(e, FileNotFoundError) else f"cannot read: {e.strerror or e}"
        raise InputError(f"{shown}: {reason}") from None
    except ValueError as e:  # e.g. an embedded NUL byte
        raise InputError(f"{shown}: not a usable file name ({e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{shown}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{shown}: not a regular file (a FIFO, socket or device?)")
    return st.st_size


def user_path(ref: str) -> Path:
    """A path a user gave, with ``~`` and ``~user`` expanded (InputError when the user does not exist)."""
    try:
        return Path(ref).expanduser()
    except RuntimeError:  # Path.expanduser: "Could not determine home directory."
        raise InputError(f"{_shown(ref)}: cannot expand {ref.split('/')[0]!r} (no such user or no home "
                         "directory)") from None


def preset_path(kind: str, ref: str) -> Path:
    """Resolve a preset name or a file path to an existing regular file, or raise with close matches."""
    if _looks_like_path(ref):
        path = user_path(ref)
        check_regular_file(path, ref)
        return path
    what = kind[:-1] if kind.endswith("s") else kind
    if not ref.strip() or "\0" in ref:
        raise PresetNotFound(f"unknown {what} preset {_shown(ref)}; known: {', '.join(names(kind))}")
    path = presets_root() / kind / f"{ref}.toml"
    try:
        if path.is_file():
            return path
    except OSError:  # "File name too long" and the like: not a preset name
        pass
    known = names(kind)
    close = difflib.get_close_matches(ref, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(known)}"
    raise PresetNotFound(f"unknown {what} preset {_shown(ref)}{hint}")


def is_dir(ref: str) -> bool:
    """Whether a reference names an existing directory (False for names the OS refuses: too long, NUL, ~nobody)."""
    try:
        return Path(ref).expanduser().is_dir()
    except (OSError, ValueError, RuntimeError):
        return False


def read_text_bounded(path: Path, limit: int, what: str = "a preset") -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes, reading at most limit + 1 bytes; InputError
    naming the file when it is not a regular file, too large (the limit said) or not UTF-8 (the byte said)."""
    shown_limit = f"{limit:,} B = {limit / 2**20:g} MiB"
    size = check_regular_file(path, str(path))
    if size > limit:
        raise InputError(f"{path}: {size:,} bytes is too large for {what} (limit {shown_limit})")
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(raw) > limit:  # grew since stat
        raise InputError(f"{path}: too large for {what} (limit {shown_limit})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start:,}: {raw[e.start:e.start + 1]!r})") from None


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file -> dict; InputError naming the file when it is not a regular file, is larger than
    MAX_PRESET_BYTES (read at most that + 1 bytes), is not UTF-8, nests too deeply or is malformed TOML."""
    text = read_text_bounded(path, MAX_PRESET_BYTES)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: malformed TOML: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: malformed TOML: nested too deeply") from None


def validation_message(path: Path | str, err) -> str:
    """One line from a pydantic ValidationError: file, field (dotted) and reason of the first error."""
    first = err.errors()[0]
    tags = ("full", "mla", "compressed", "linear", "mamba")  # union tags pydantic puts in the location
    loc = ".".join(str(p) for p in first["loc"] if not (isinstance(p, str) and p in tags))
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        msg = "unknown key"
    if first["type"] in ("missing", "missing_argument"):
        msg = "missing (required)"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    where = f"field {loc!r}: " if loc else ""
    return f"{path}: {where}{msg}{more}"


@functools.cache
def _adapter(cls):
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def validate(kind: str, data: dict[str, Any], path: Path | str):
    """Validate parsed TOML against the kind's schema (pydantic, strict) -> a preset object, or InputError."""
    from pydantic import ValidationError

    try:
        return _adapter(_schema_for(kind)).validate_python(data)
    except ValidationError as e:
        raise InputError(validation_message(path, e)) from None


def json_schema(kind: str) -> dict:
    """The JSON Schema of one preset kind."""
    return _adapter(_schema_for(kind)).json_schema()


@functools.cache
def _load(kind: str, path: Path, shipped: bool):
    data = read_toml(path)
    if shipped:  # validated by the test suite: build directly, without loading pydantic (fast start-up)
        from kvcalc.model.schema import build

        try:
            return build(_schema_for(kind), data)
        except (TypeError, ValueError, KeyError, StopIteration):
            pass  # not as shipped: validate it properly to say what is wrong
    return validate(kind, data, path)


def load(kind: str, ref: str):
    """Load one preset of ``kind`` by name or path -> a preset dataclass (cached). Files given by path are
    validated strictly; shipped presets are built directly."""
    return _load(kind, preset_path(kind, ref), not _looks_like_path(ref))


def load_model(ref: str):
    """A model preset by name, TOML path, or a Hugging Face config.json (or a folder holding one)."""
    if ref.endswith(".json") or (not ref.endswith(".toml") and is_dir(ref)):
        return _load_config(str(Path(ref).expanduser().resolve()))  # config_import is loaded only here
    return load("models", ref)


@functools.cache
def _load_config(ref: str):
    """A model read from a config.json: the importer checks every field it reads, so the preset is built
    directly (no pydantic: reading a config costs little more than a shipped preset)."""
    from kvcalc.model.config_import import import_config

    return import_config(ref).model  # built and bounded there, as for `kvcalc import` (one set of rules)


def load_hardware(ref: str):
    """A hardware preset by name or path."""
    return load("hardware", ref)


def load_link(ref: str):
    """A link preset by name or path."""
    return load("links", ref)


def name_of(ref: str) -> str:
    """The display name of a reference: a config.json's model label (its ``_name_or_path``, a hub cache's
    ``models--ORG--NAME``, else its folder: :func:`kvcalc.model.config_import.config_label`), the stem of another
    path, or the name itself."""
    path = Path(ref)
    if path.name == "config.json" or (not ref.endswith((".toml", ".json")) and is_dir(ref)):
        return _config_name(str((path if path.name == "config.json" else path / "config.json").expanduser().resolve()))
    return path.stem if _looks_like_path(ref) or ref.endswith(".json") else ref


@functools.cache
def _config_name(config: str) -> str:
    """The label of the config.json at ``config`` (its folder's name when it cannot be read: loading it says why)."""
    from kvcalc.model.config_import import config_label, read_json

    path = Path(config)
    try:
        name_or_path = read_json(path).get("_name_or_path")
    except (InputError, OSError):
        name_or_path = None
    return config_label(name_or_path, path)
