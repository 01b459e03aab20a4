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

from pathlib import Path

from kvcalc.model.config_fields import (CONFIG_NAME, MAX_CONFIG_INT, MAX_CONFIG_TOKENS, MAX_JSON_BYTES,  # noqa: F401
                                        Config, config_file, read_json)
from kvcalc.out.errors import InputError

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


def config_label(name_or_path, path: Path) -> str:
    """A config's model label [text]: from its ``_name_or_path`` (the last two parts: "Qwen/Qwen3-8B"), else
    from a Hugging Face hub cache folder above it (``models--Qwen--Qwen3-8B/snapshots/<hash>/``), else its
    folder's name. A hub-cache part wins wherever it appears, so a snapshot's 40-character hash never names a
    model."""
    import re

    def hub(parts) -> str | None:
        for part in reversed(parts):
            if part.startswith("models--") and part.count("--") >= 2:
                return "/".join(part.split("--", 2)[1:])
        return None

    if isinstance(name_or_path, str):  # "/" or "\\" separated, wherever the config was written
        parts = [p for p in re.split(r"[\\/]+", name_or_path.strip()) if p not in ("", ".", "..")]
        if parts:
            return hub(parts) or "/".join(parts[-2:])
    return hub(path.resolve().parent.parts) or path.resolve().parent.name or path.stem


def class_defaults(cfg: Config) -> Config:
    """Fill the fields the config leaves to its transformers class (CLASS_DEFAULTS), each with a note."""
    kind = cfg.text("model_type", record=False)
    if kind in CLASS_DEFAULTS:
        owner, defaults = CLASS_DEFAULTS[kind]
        for key, value in defaults.items():
            if cfg.data.get(key) is None:
                if "model_type" in cfg.nested:
                    cfg.nested.add(key)
                cfg.data[key] = cfg.assume(key, value, f"transformers' {owner} default")
                cfg.defaulted.add(key)
    return cfg


# ---------------------------------------------------------------- which kind each layer is

def _pattern(cfg: Config, layers: int) -> list:
    """One kind per layer ('full', 'sliding', 'chunked', 'linear', 'mamba', or None for no cache)."""
    if cfg.has("hybrid_override_pattern"):
        pat = cfg.text("hybrid_override_pattern")
        if len(pat) != layers:
            cfg.fail("hybrid_override_pattern", f"needs one character per layer ({layers}), got {len(pat):,}")
        bad = sorted(set(pat) - set(HYBRID_CHARS))
        if bad:
            cfg.fail("hybrid_override_pattern", f"unknown layer character(s) {''.join(bad)!r} (known: M * - E)")
        return [HYBRID_CHARS[c] for c in pat]
    if cfg.has("layer_types"):
        types = cfg.text_list("layer_types")
        if len(types) != layers:
            cfg.fail("layer_types", f"has {len(types):,} entries but num_hidden_layers is {layers}")
        unknown = sorted({t[:40] for t in types if t not in LAYER_TYPES})
        if unknown:
            cfg.fail("layer_types", f"unknown layer type(s) {', '.join(unknown)} (known: {', '.join(LAYER_TYPES)})")
        return [LAYER_TYPES[t] for t in types]
    if cfg.has("hybrid_layer_pattern"):  # MiMo: 1 = sliding-window layer with the swa_* shapes
        pat = cfg.int_list("hybrid_layer_pattern", layers, maximum=1, what="0 (full) or 1 (sliding window)")
        return ["sliding" if p else "full" for p in pat]
    if cfg.has("full_attention_interval"):  # Qwen3-Next: every n-th layer full, the rest linear attention
        n = cfg.int("full_attention_interval")
        return ["full" if (i + 1) % n == 0 else "linear" for i in range(layers)]
    if cfg.has("attention_chunk_size"):  # Llama 4: no_rope_layers[i] = 1 -> RoPE + chunked; 0 -> global NoPE
        flags = cfg.get("no_rope_layers")
        if flags is not None and flags != []:
            flags = cfg.int_list("no_rope_layers", layers, maximum=1, what="flags 0 (global NoPE) or 1 (RoPE)")
        else:  # absent or [] -> transformers' default: every 4th layer is global (no_rope_layer_interval)
            step = cfg.int("no_rope_layer_interval", 0)
            if not step:
                step = 4
                cfg.assume("no_rope_layers", "every 4th layer global (NoPE), the rest chunked", "transformers' default")
            flags = [int((i + 1) % step != 0) for i in range(layers)]
        return ["chunked" if f else "full" for f in flags]
    if cfg.has("sliding_window_pattern"):  # Gemma 3: every n-th layer global
        n = cfg.int("sliding_window_pattern")
        return ["full" if (i + 1) % n == 0 else "sliding" for i in range(layers)]
    use_window = cfg.flag("use_sliding_window", None)
    if use_window is False:  # Qwen2/Qwen3 ship a sliding_window value that is switched off
        return ["full"] * layers
    if use_window is True:  # Qwen2: layers from max_window_layers on use the window
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
        k_eq_v = cfg.flag("attention_k_eq_v")
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
    key = "torch_dtype" if cfg.has("torch_dtype") else "dtype"
    name = cfg.text(key, choices=DTYPES)
    if name is None:
        return cfg.assume("torch_dtype", 2, "bf16 weights")
    return DTYPES[name]


class Imported:
    """A config read into a preset: the preset's data, what was assumed, parameters and bytes per component
    {name: (params, bytes)}, and the checkpoint's own size where the folder has a safetensors index [B]."""

    def __init__(self, path: Path, preset: dict, notes: tuple, components: dict, measured: float | None):
        self.path, self.preset, self.notes, self.components = path, preset, notes, components
        self.measured_weight_bytes = measured
        self.model = checked_model(path, preset)   # the ModelPreset every command uses


def checked_model(path: Path, preset: dict):
    """The preset built and bounded as a user's TOML file is (hidden_size 2^24 everywhere -> params absurd):
    the one check ``import``, ``kv``, ``capacity`` and the rest share; InputError naming the file."""
    from kvcalc.model.schema import ModelPreset, build, check_bounds

    try:
        model = build(ModelPreset, preset)
        check_bounds(model)
        return model
    except (TypeError, ValueError) as e:
        raise InputError(f"{path}: {e}") from None


INDEX_NAME = "model.safetensors.index.json"
HF_QUANT_NAME = "hf_quant_config.json"   # TensorRT Model Optimizer checkpoints (NVFP4, FP8) keep it apart


def _hf_quant_config(cfg: Config, path: Path) -> None:
    """Read a ModelOpt ``hf_quant_config.json`` next to the config as its quantization_config."""
    if not path.is_file():
        return
    q = Config(str(path), read_json(path)).section("quantization")
    if q is None or not q.text("quant_algo"):
        raise InputError(f"{path}: field 'quantization.quant_algo': missing")
    q = q.data
    cfg.data["quantization_config"] = {"quant_method": "modelopt", **q}
    cfg.note(f"quantization read from {path.name}")


def measured_weight_bytes(folder: Path) -> float | None:
    """``metadata.total_size`` of the folder's model.safetensors.index.json [B], if there is one."""
    index = folder / INDEX_NAME
    if not index.is_file():
        return None
    meta = Config(str(index), read_json(index)).section("metadata")
    size = meta.get("total_size") if meta is not None else None
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not 0 < size < float("inf"):
        raise InputError(f"{index}: field 'metadata.total_size': missing or not a positive number")
    return float(size)


def import_config(ref: str, data: dict | None = None, origin: str | None = None, name: str | None = None) -> Imported:
    """Read the config.json ``ref`` points at (or ``data``, named ``ref``) into a preset; ``origin`` (where the
    config came from) starts the preset's source; ``name`` is its display name (default: the folder's)."""
    from kvcalc.model import config_params

    path = config_file(ref) if data is None else Path(ref)
    cfg = class_defaults(Config.of(read_json(path) if data is None else data, str(path)))
    if data is None and not cfg.has("quantization_config"):
        _hf_quant_config(cfg, path.parent / HF_QUANT_NAME)
    groups, top = map_groups(cfg)
    params = config_params.count(cfg, _dtype_bytes(cfg))
    components = params.pop("components")
    preset = {"schema_version": 1, "source": "",
              "display_name": name or config_label(cfg.text("_name_or_path"), path)}
    preset |= params
    preset |= {k: v for k, v in top.items() if v}
    preset |= {"vocab_size": cfg.int("vocab_size", 0, minimum=0) or None, "hidden_size": cfg.int("hidden_size"),
               "tie_word_embeddings": config_params.tied(cfg)}
    quant = cfg.section("quantization_config")
    kv_quant = quant.text("kv_cache_quant_algo") if quant is not None else None
    if kv_quant:
        if kv_quant.lower() != "fp8":
            quant.fail("kv_cache_quant_algo", f"{kv_quant!r} is not mapped (known: FP8)")
        preset["kv_dtype"] = "fp8"
        cfg.note("KV cache in fp8: the checkpoint's kv_cache_quant_algo is FP8")
    state_key = "mamba_ssm_dtype" if cfg.has("mamba_ssm_dtype") else "mamba_ssm_cache_dtype"
    state = cfg.text(state_key, choices=STATE_DTYPES)
    if state is None and any(g.get("kind") == "mamba" for g in groups) and \
            cfg.text("model_type", record=False) == "nemotron_h":
        # vLLM NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype (model_executor/models/config.py): 'auto'
        # -> the config's mamba_ssm_cache_dtype, else float32; SGLang keeps SSM states in float32 by default too
        state = "float32"
        cfg.note("SSM state in fp32: NemotronH's default in vLLM (and SGLang's) when the config names none")
    if state is not None:
        preset["state_dtype"] = STATE_DTYPES[state]
    arch = cfg.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str) and 0 < len(arch[0]) <= 200:
        preset["architecture"] = arch[0]
    if any(cfg.has(k) for k in MULTIMODAL_TOWERS):  # SGLang's multimodal architectures wrap a vision/audio tower
        preset["multimodal"] = True
        cfg.note("multimodal: the config has a " + " and ".join(k for k in MULTIMODAL_TOWERS if cfg.has(k)))
        vision = cfg.section("vision_config")
        if vision is not None:  # what SGLang's adjust_mem_fraction_for_vlm reads (getattr, defaults 24 / 1,024)
            preset["vision_layers"] = vision.int("num_hidden_layers", 0) or None
            preset["vision_hidden_size"] = vision.int("hidden_size", 0) or None
    if cfg.has("max_position_embeddings"):
        preset["max_context_tokens"] = cfg.int("max_position_embeddings")
    preset["layer_groups"] = groups
    preset = {k: v for k, v in preset.items() if v is not None}
    fields = ", ".join(cfg.name(k) for k in cfg.read if not k.startswith("_"))
    preset["source"] = (f"{origin.strip()}; " if origin and origin.strip() else "") + \
        f"kvcalc import of {path.parent.name or '.'}/{path.name}: fields read: {fields}"
    measured = measured_weight_bytes(path.parent) if data is None else None
    return Imported(path, preset, tuple(cfg.notes), components, measured)
