"""A Hugging Face ``config.json`` (or a model folder holding one) -> a model preset, read from its fields.

The layer groups come from what the config says about each layer, never from a table of model names:
``hybrid_override_pattern`` (Nemotron-H: M = Mamba-2, * = attention, - and E = no cache), ``layer_types``,
``hybrid_layer_pattern`` + ``swa_*`` (MiMo), ``full_attention_interval`` (Qwen3-Next), ``attention_chunk_size``
+ ``no_rope_layers`` (Llama 4), ``sliding_window_pattern`` (Gemma 3), ``use_sliding_window`` +
``max_window_layers`` (Qwen2), a bare ``sliding_window`` (Mistral), else full attention. MLA comes from
``kv_lora_rank``/``qk_rope_head_dim`` with a DSA indexer from ``index_topk``/``index_head_dim``/
``index_n_heads``; Gemma 4's global layers from ``global_head_dim``/``num_global_key_value_heads``/
``attention_k_eq_v``. Multimodal wrappers nest the language model under ``text_config``. MTP layers
(``num_nextn_predict_layers``, ``mtp_num_hidden_layers``) become a group counted only with ``--mtp``.

Every assumption (a default the config leaves out) is returned as a note; a field that is missing, zero,
negative or contradictory raises :class:`InputError` naming the file and the field. Parameters and weight
bytes are counted in :mod:`kvcalc.model.config_params`. Local files only: nothing is downloaded.
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
# layer_types values -> our kinds (transformers' names, plus the short forms some configs use)
LAYER_TYPES = {"full_attention": "full", "attention": "full", "global": "full", "full": "full",
               "sliding_attention": "sliding", "sliding": "sliding", "local": "sliding",
               "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "mamba"}
HYBRID_CHARS = {"M": "mamba", "*": "full", "-": None, "E": None}  # Nemotron-H: MLP/MoE layers hold no cache
DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}
STATE_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# Fields a released config leaves to its transformers class's defaults, by model_type (the class, its source).
# google/gemma-3-27b-it's text_config has no sliding_window_pattern, vocab_size or max_position_embeddings:
# transformers' Gemma3TextConfig fills them (models/gemma3/configuration_gemma3.py: 6, 262,208, 131,072).
CLASS_DEFAULTS = {"gemma3_text": ("Gemma3TextConfig", {"sliding_window_pattern": 6, "vocab_size": 262_208,
                                                       "max_position_embeddings": 131_072})}


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
    MAX_JSON_BYTES, not UTF-8 or nested too deeply too)."""
    from kvcalc.model.catalog import read_text_bounded

    text = read_text_bounded(path, MAX_JSON_BYTES, "a JSON config")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON: {e.msg} (line {e.lineno})") from None
    except RecursionError:
        raise InputError(f"{path}: not JSON we can read: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a config (a JSON object was expected)")
    return data


class Config:
    """A config's fields (``text_config`` merged over the top level), with typed, named access.
    (Plain classes here, not dataclasses: creating a dataclass costs import time.)"""

    def __init__(self, path: str, data: dict, nested: set | None = None):
        self.path, self.data = path, data
        self.nested = nested or set()   # keys that came from text_config
        self.read: list = []            # field names read, in order (for the preset's source)
        self.notes: list = []           # what was assumed
        self.defaulted: set = set()     # keys filled from CLASS_DEFAULTS (assumed, not read)

    @classmethod
    def of(cls, data: dict, path: str) -> "Config":
        text = data.get("text_config")
        if text is None:
            return cls(path, dict(data)).class_defaults()
        if not isinstance(text, dict):
            raise InputError(f"{path}: field 'text_config': not an object")
        return cls(path, {**data, **text}, set(text)).class_defaults()

    def class_defaults(self) -> "Config":
        """Fill the fields the config leaves to its transformers class (CLASS_DEFAULTS), each with a note."""
        kind = self.data.get("model_type")
        if kind in CLASS_DEFAULTS and isinstance(kind, str):
            owner, defaults = CLASS_DEFAULTS[kind]
            for key, value in defaults.items():
                if self.data.get(key) is None:
                    if "model_type" in self.nested:
                        self.nested.add(key)
                    self.data[key] = self.assume(key, value, f"transformers' {owner} default")
                    self.defaulted.add(key)
        return self

    def name(self, key: str) -> str:
        return f"text_config.{key}" if key in self.nested else key

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
            self.fail(key, f"{value!r} is not an integer")
        if value < minimum:
            self.fail(key, f"{value} must be {'> 0' if minimum == 1 else f'>= {minimum}'}")
        limit = maximum or (MAX_CONFIG_TOKENS if key in LONG_FIELDS else MAX_CONFIG_INT)
        if value > limit:
            shown = f"{value:,}" if value < 10**21 else f"a {len(str(value))}-digit number"
            self.fail(key, f"{shown} is absurdly large (limit {limit:,})")
        return value

    def assume(self, key: str, value, why: str):
        """A default for an absent field, recorded as a note (once)."""
        self.note(f"{self.name(key)} absent: assumed {value} ({why})")
        return value

    def note(self, text: str):
        """Record what was assumed or how a field was read (once)."""
        if text not in self.notes:
            self.notes.append(text)


# ---------------------------------------------------------------- which kind each layer is

def _pattern(cfg: Config, layers: int) -> list:
    """One kind per layer ('full', 'sliding', 'chunked', 'linear', 'mamba', or None for no cache)."""
    if cfg.has("hybrid_override_pattern"):
        pat = cfg.get("hybrid_override_pattern")
        if not isinstance(pat, str) or len(pat) != layers:
            cfg.fail("hybrid_override_pattern", f"needs one character per layer ({layers}), got {len(pat)}")
        bad = sorted(set(pat) - set(HYBRID_CHARS))
        if bad:
            cfg.fail("hybrid_override_pattern", f"unknown layer character(s) {''.join(bad)!r} (known: M * - E)")
        return [HYBRID_CHARS[c] for c in pat]
    if cfg.has("layer_types"):
        types = cfg.get("layer_types")
        if not isinstance(types, list) or len(types) != layers:
            n = len(types) if isinstance(types, list) else "not a list"
            cfg.fail("layer_types", f"has {n} entries but num_hidden_layers is {layers}")
        unknown = sorted({str(t) for t in types if t not in LAYER_TYPES})
        if unknown:
            cfg.fail("layer_types", f"unknown layer type(s) {', '.join(unknown)} (known: {', '.join(LAYER_TYPES)})")
        return [LAYER_TYPES[t] for t in types]
    if cfg.has("hybrid_layer_pattern"):  # MiMo: 1 = sliding-window layer with the swa_* shapes
        pat = cfg.get("hybrid_layer_pattern")
        if not isinstance(pat, list) or len(pat) != layers or any(p not in (0, 1) for p in pat):
            cfg.fail("hybrid_layer_pattern", f"needs {layers} entries of 0 (full) or 1 (sliding window)")
        return ["sliding" if p else "full" for p in pat]
    if cfg.has("full_attention_interval"):  # Qwen3-Next: every n-th layer full, the rest linear attention
        n = cfg.int("full_attention_interval")
        return ["full" if (i + 1) % n == 0 else "linear" for i in range(layers)]
    if cfg.has("attention_chunk_size"):  # Llama 4: no_rope_layers[i] = 1 -> RoPE + chunked; 0 -> global NoPE
        flags = cfg.get("no_rope_layers")
        if not flags:  # absent or [] -> transformers' default: every 4th layer is global (no_rope_layer_interval)
            step = cfg.int("no_rope_layer_interval", 0)
            if not step:
                step = 4
                cfg.assume("no_rope_layers", "every 4th layer global (NoPE), the rest chunked", "transformers' default")
            flags = [int((i + 1) % step != 0) for i in range(layers)]
        if not isinstance(flags, list) or len(flags) != layers:
            cfg.fail("no_rope_layers", f"needs one flag per layer ({layers})")
        return ["chunked" if f else "full" for f in flags]
    if cfg.has("sliding_window_pattern"):  # Gemma 3: every n-th layer global
        n = cfg.int("sliding_window_pattern")
        return ["full" if (i + 1) % n == 0 else "sliding" for i in range(layers)]
    if cfg.get("use_sliding_window") is False:  # Qwen2/Qwen3 ship a sliding_window value that is switched off
        return ["full"] * layers
    if cfg.get("use_sliding_window") is True:  # Qwen2: layers from max_window_layers on use the window
        first = cfg.int("max_window_layers", 0, minimum=0)
        return ["sliding" if i >= first else "full" for i in range(layers)]
    if cfg.has("sliding_window"):  # Mistral 7B v0.1: one window for every layer
        cfg.note(f"{cfg.name('sliding_window')} with no layer pattern: every layer assumed to use the window")
        return ["sliding"] * layers
    return ["full"] * layers


# ---------------------------------------------------------------- groups

def _window(cfg: Config) -> int:
    for key in ("sliding_window", "sliding_window_size"):
        if cfg.has(key):
            return cfg.int(key, what="the sliding window")
    cfg.fail("sliding_window", "missing (the config has sliding-window layers)")


def _attention_shape(cfg: Config, hidden: int) -> tuple[int, int, int, int]:
    """(q heads, KV heads, K head dim, V head dim) of the ordinary attention layers."""
    heads = cfg.int("num_attention_heads", what="query heads")
    kv = cfg.int("num_key_value_heads", 0) or cfg.assume("num_key_value_heads", heads, "= num_attention_heads, MHA")
    if heads % kv:
        cfg.fail("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}")
    dim = cfg.int("head_dim", 0)
    if not dim:
        if hidden % heads:
            cfg.fail("head_dim", f"missing, and hidden_size {hidden} is not a multiple of {heads} heads")
        dim = cfg.assume("head_dim", hidden // heads, f"= hidden_size / num_attention_heads = {hidden} / {heads}")
    return heads, kv, dim, cfg.int("v_head_dim", dim)


def _full_group(name: str, layers: int, kv: int, dk: int, dv: int, **extra) -> dict:
    g = {"kind": "full", "name": name, "layers": layers, "kv_heads": kv, "head_dim": dk}
    if dv != dk:
        g["head_dim_v"] = dv
    return g | {k: v for k, v in extra.items() if v}


def _mla_group(cfg: Config, name: str, layers: int, mtp: bool = False) -> dict:
    g = {"kind": "mla", "name": name, "layers": layers, "kv_lora_rank": cfg.int("kv_lora_rank"),
         "rope_head_dim": cfg.int("qk_rope_head_dim", what="MLA rope key dim")}
    if cfg.has("index_topk"):
        for key, default in (("index_head_dim", 128), ("index_n_heads", 64)):
            if not cfg.has(key):
                cfg.assume(key, default, "DeepSeek V3.2's indexer")
        g["indexer"] = {"top_k": cfg.int("index_topk"), "head_dim": cfg.int("index_head_dim", 128),
                        "heads": cfg.int("index_n_heads", 64)}
    return g | ({"mtp": True} if mtp else {})


def _linear_group(cfg: Config, layers: int) -> dict:
    return {"kind": "linear", "name": "linear", "layers": layers,
            "key_heads": cfg.int("linear_num_key_heads", what="linear attention"),
            "value_heads": cfg.int("linear_num_value_heads", what="linear attention"),
            "key_head_dim": cfg.int("linear_key_head_dim", what="linear attention"),
            "value_head_dim": cfg.int("linear_value_head_dim", what="linear attention"),
            "conv_kernel": cfg.int("linear_conv_kernel_dim", 4)}


def _mamba_group(cfg: Config, layers: int) -> dict:
    return {"kind": "mamba", "name": "mamba", "layers": layers,
            "heads": cfg.int("mamba_num_heads", what="Mamba-2 heads"),
            "head_dim": cfg.int("mamba_head_dim", what="Mamba-2 head dim"),
            "state_size": cfg.int("ssm_state_size", what="Mamba-2 state size"),
            "groups": cfg.int("n_groups", 1), "conv_kernel": cfg.int("conv_kernel", 4)}


def _mtp_layers(cfg: Config) -> int:
    return cfg.int("num_nextn_predict_layers", 0, minimum=0) or cfg.int("mtp_num_hidden_layers", 0, minimum=0)


MULTIMODAL_TOWERS = ("vision_config", "audio_config")


def map_groups(cfg: Config) -> tuple[list[dict], dict]:
    """(layer groups, model-level fields: q_heads, qk_head_dim, v_head_dim) read from the config."""
    if cfg.has("compress_ratios"):  # DeepSeek V4: sliding window + CSA/HCA compressed layers
        from kvcalc.model import config_v4

        return config_v4.groups(cfg, _mtp_layers(cfg))
    layers = cfg.int("num_hidden_layers", what="the layer count", maximum=2**16)
    hidden = cfg.int("hidden_size")
    kinds = _pattern(cfg, layers)
    count = {k: kinds.count(k) for k in ("full", "sliding", "chunked", "linear", "mamba")}
    mtp = _mtp_layers(cfg)
    groups: list[dict] = []
    if cfg.has("kv_lora_rank"):  # MLA: every attention layer stores one latent + rope key
        heads = cfg.int("num_attention_heads")
        nope, rope = cfg.int("qk_nope_head_dim"), cfg.int("qk_rope_head_dim")
        top = {"q_heads": heads, "qk_head_dim": nope + rope, "v_head_dim": cfg.int("v_head_dim")}
        if count["sliding"] or count["chunked"] or count["linear"] or count["mamba"]:
            cfg.fail("kv_lora_rank", "MLA mixed with other layer kinds is not mapped")
        groups.append(_mla_group(cfg, "mla+dsa" if cfg.has("index_topk") else "mla", layers))
        if mtp:
            groups.append(_mla_group(cfg, "mtp", mtp, mtp=True))
        return groups, top
    heads, kv, dk, dv = _attention_shape(cfg, hidden) if count["full"] + count["sliding"] + count["chunked"] \
        else (None, None, None, None)
    top = {"q_heads": heads, "qk_head_dim": dk, "v_head_dim": dv} if heads else {}
    if count["full"]:
        g_kv = cfg.int("num_global_key_value_heads", kv)   # Gemma 4 global layers
        g_dim = cfg.int("global_head_dim", dk)
        k_eq_v = bool(cfg.get("attention_k_eq_v", False))
        if k_eq_v:
            cfg.note(f"{cfg.name('attention_k_eq_v')}: K = V stored once on the full-attention layers")
        own = g_dim != dk or (g_dim if k_eq_v else dv) != dv
        groups.append(_full_group("full", count["full"], g_kv, g_dim, g_dim if k_eq_v else dv, k_eq_v=k_eq_v,
                                  q_heads=heads if own else None))
    if count["sliding"]:
        window = _window(cfg)
        if cfg.has("swa_head_dim"):  # MiMo: its own heads and dims on the sliding layers
            s_heads = cfg.int("swa_num_attention_heads", heads)
            s_kv, s_dk = cfg.int("swa_num_key_value_heads", kv), cfg.int("swa_head_dim")
            groups.append(_full_group("sliding", count["sliding"], s_kv, s_dk, cfg.int("swa_v_head_dim", s_dk),
                                      window_tokens=window, q_heads=s_heads))
        else:
            groups.append(_full_group("sliding", count["sliding"], kv, dk, dv, window_tokens=window))
    if count["chunked"]:
        groups.append(_full_group("chunked", count["chunked"], kv, dk, dv,
                                  chunk_tokens=cfg.int("attention_chunk_size")))
    if count["linear"]:
        groups.append(_linear_group(cfg, count["linear"]))
    if count["mamba"]:
        groups.append(_mamba_group(cfg, count["mamba"]))
    if not groups:
        cfg.fail("num_hidden_layers", "no layer holds a KV cache or a state")
    if mtp:
        if not heads:
            cfg.fail("num_nextn_predict_layers", "MTP layers without attention layers")
        groups.append(_full_group("mtp", mtp, kv, dk, dv, mtp=True))
    return groups, top


def _dtype_bytes(cfg: Config) -> float:
    name = cfg.get("torch_dtype") or cfg.get("dtype")
    if name is None:
        return cfg.assume("torch_dtype", 2, "bf16 weights")
    if name not in DTYPES:
        cfg.fail("torch_dtype" if cfg.has("torch_dtype") else "dtype", f"unknown dtype {name!r}")
    return DTYPES[name]


class Imported:
    """A config read into a preset: the preset's data, what was assumed, parameters and bytes per component
    {name: (params, bytes)}, and the checkpoint's own size where the folder has a safetensors index [B]."""

    def __init__(self, path: Path, preset: dict, notes: tuple, components: dict, measured: float | None):
        self.path, self.preset, self.notes, self.components = path, preset, notes, components
        self.measured_weight_bytes = measured


INDEX_NAME = "model.safetensors.index.json"
HF_QUANT_NAME = "hf_quant_config.json"   # TensorRT Model Optimizer checkpoints (NVFP4, FP8) keep it apart


def _hf_quant_config(cfg: Config, path: Path) -> None:
    """Read a ModelOpt ``hf_quant_config.json`` next to the config as its quantization_config."""
    if not path.is_file():
        return
    q = read_json(path).get("quantization")
    if not isinstance(q, dict) or not q.get("quant_algo"):
        raise InputError(f"{path}: field 'quantization.quant_algo': missing")
    cfg.data["quantization_config"] = {"quant_method": "modelopt", **q}
    cfg.note(f"quantization read from {path.name}")


def measured_weight_bytes(folder: Path) -> float | None:
    """``metadata.total_size`` of the folder's model.safetensors.index.json [B], if there is one."""
    index = folder / INDEX_NAME
    if not index.is_file():
        return None
    size = read_json(index).get("metadata", {}).get("total_size")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        raise InputError(f"{index}: field 'metadata.total_size': missing or not a positive number")
    return float(size)


def import_config(ref: str, data: dict | None = None, origin: str | None = None, name: str | None = None) -> Imported:
    """Read the config.json ``ref`` points at (or ``data``, named ``ref``) into a preset; ``origin`` (where the
    config came from) starts the preset's source; ``name`` is its display name (default: the folder's)."""
    from kvcalc.model import config_params

    path = config_file(ref) if data is None else Path(ref)
    cfg = Config.of(read_json(path) if data is None else data, str(path))
    if data is None and not cfg.has("quantization_config"):
        _hf_quant_config(cfg, path.parent / HF_QUANT_NAME)
    groups, top = map_groups(cfg)
    params = config_params.count(cfg, _dtype_bytes(cfg))
    components = params.pop("components")
    preset = {"schema_version": 1, "source": "",
              "display_name": name or cfg.get("_name_or_path") or path.parent.name or path.stem}
    preset |= params
    preset |= {k: v for k, v in top.items() if v}
    preset |= {"vocab_size": cfg.int("vocab_size", 0, minimum=0) or None, "hidden_size": cfg.int("hidden_size"),
               "tie_word_embeddings": config_params.tied(cfg)}
    kv_quant = (cfg.get("quantization_config") or {}).get("kv_cache_quant_algo")
    if kv_quant:
        if str(kv_quant).lower() != "fp8":
            cfg.fail("quantization_config", f"kv_cache_quant_algo {kv_quant!r} is not mapped (known: FP8)")
        preset["kv_dtype"] = "fp8"
        cfg.note("KV cache in fp8: the checkpoint's kv_cache_quant_algo is FP8")
    state = cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype")
    if state is None and any(g.get("kind") == "mamba" for g in groups) and cfg.get("model_type") == "nemotron_h":
        # vLLM NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype (model_executor/models/config.py): 'auto'
        # -> the config's mamba_ssm_cache_dtype, else float32; SGLang keeps SSM states in float32 by default too
        state = "float32"
        cfg.note("SSM state in fp32: NemotronH's default in vLLM (and SGLang's) when the config names none")
    if state is not None:
        if state not in STATE_DTYPES:
            cfg.fail("mamba_ssm_dtype", f"unknown dtype {state!r}")
        preset["state_dtype"] = STATE_DTYPES[state]
    arch = cfg.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str) and 0 < len(arch[0]) <= 200:
        preset["architecture"] = arch[0]
    if any(cfg.has(k) for k in MULTIMODAL_TOWERS):  # SGLang's multimodal architectures wrap a vision/audio tower
        preset["multimodal"] = True
        cfg.note("multimodal: the config has a " + " and ".join(k for k in MULTIMODAL_TOWERS if cfg.has(k)))
    if cfg.has("max_position_embeddings"):
        preset["max_context_tokens"] = cfg.int("max_position_embeddings")
    preset["layer_groups"] = groups
    preset = {k: v for k, v in preset.items() if v is not None}
    fields = ", ".join(cfg.name(k) for k in cfg.read if not k.startswith("_"))
    preset["source"] = (f"{origin.strip()}; " if origin and origin.strip() else "") + \
        f"kvcalc import of {path.parent.name or '.'}/{path.name}: fields read: {fields}"
    measured = measured_weight_bytes(path.parent) if data is None else None
    return Imported(path, preset, tuple(cfg.notes), components, measured)
