"""Parameters and weight bytes of a model, counted from its config.json, component by component.

Per decoder layer (matrices only; norms add hidden-sized vectors):
  attention  q: hidden x heads x d_k (twice with attn_output_gate), k: hidden x kv x d_k, v: hidden x kv x d_v
             (none when K = V), o: heads x d_v x hidden (+ biases with attention_bias);
  MLA        q_a hidden x q_lora + q_b q_lora x heads x (nope + rope) (or q hidden x heads x (nope + rope)),
             kv_a hidden x (kv_lora + rope), kv_b kv_lora x heads x (nope + v), o heads x v x hidden,
             DSA indexer wq_b q_lora x idx_heads x idx_dim + wk hidden x idx_dim + weights hidden x idx_heads;
  linear     (Gated DeltaNet) in_proj hidden x (2 hk dk + 2 hv dv) + hidden x 2 hv, conv (2 hk dk + hv dv) x K,
             out hv dv x hidden;
  Mamba-2    in_proj hidden x (2 H P + 2 G N + H), conv (H P + 2 G N) x K, out H P x hidden;
  MLP        gated: 3 x hidden x intermediate; relu2 (Nemotron-H): 2 x hidden x intermediate;
  MoE        routed experts E x MLP(moe_intermediate), shared experts, router hidden x E.
Embedding = vocab x hidden; the LM head another vocab x hidden unless tied. Active = total - the routed experts a
token does not use (E - top_k per MoE layer). Biases of MoE experts and attention sinks are not in the configs
and not counted (gpt-oss-120b: ~40 M of 116.8 B).

Weight bytes per component from the dtype and ``quantization_config``: fp8 with block scales (1 B + 4 B per
block of 128 x 128), mxfp4 (0.5 B + one 1-byte E8M0 scale per 32 = 0.53125 B/param), nvfp4 (0.5 B + one FP8
scale per 16 = 0.5625 B/param); modules listed as not converted keep the base dtype, and so do the
embedding and LM head unless listed as quantized.
"""

from __future__ import annotations

# bytes per parameter of a quantized linear layer, scales included (nvfp4: 0.5 + 1 / group_size)
QUANT_BYTES = {"mxfp4": 0.5 + 1 / 32}
# ``expert_dtype`` (DeepSeek V4): fp4 = 0.5 B + one 1-byte UE8M0 scale per 32 elements
EXPERT_BYTES = {"fp4": 0.5 + 1 / 32, "fp8": 1 + 1 / (128 * 128)}
COMPONENTS = ("embedding", "lm_head", "attention", "dense_mlp", "shared_experts", "routed_experts", "other")


def _mlp(cfg, hidden: int, inter: int) -> int:
    """One MLP (or expert): 3 matrices when gated, 2 with relu2 (Nemotron-H's mlp_hidden_act)."""
    mats = 2 if cfg.text("mlp_hidden_act") in ("relu2", "relu_squared") else 3
    return mats * hidden * inter


def _attention(cfg, kind: str, hidden: int, top: dict) -> int:
    """Attention (or recurrent mixer) parameters of one layer of ``kind``."""
    if kind == "linear":
        hk, hv = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
        dk, dv = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
        k = cfg.int("linear_conv_kernel_dim", 4)
        conv = 2 * hk * dk + hv * dv
        return hidden * (2 * hk * dk + 2 * hv * dv) + hidden * 2 * hv + conv * k + 2 * hv + dv + hv * dv * hidden
    if kind == "mamba":
        h, p, n = cfg.int("mamba_num_heads"), cfg.int("mamba_head_dim"), cfg.int("ssm_state_size")
        g, k = cfg.int("n_groups", 1), cfg.int("conv_kernel", 4)
        conv = h * p + 2 * g * n
        return hidden * (2 * h * p + 2 * g * n + h) + conv * (k + 1) + 3 * h + h * p + h * p * hidden
    if cfg.has("kv_lora_rank"):
        heads, nope, rope = cfg.int("num_attention_heads"), cfg.int("qk_nope_head_dim"), cfg.int("qk_rope_head_dim")
        v, kv_lora, q_lora = cfg.int("v_head_dim"), cfg.int("kv_lora_rank"), cfg.int("q_lora_rank", 0)
        q = hidden * q_lora + q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        n = q + hidden * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v) + heads * v * hidden
        if cfg.has("index_topk"):
            ih, idim = cfg.int("index_n_heads", 64), cfg.int("index_head_dim", 128)
            n += (q_lora or hidden) * ih * idim + hidden * idim + 2 * idim + hidden * ih
        return n
    heads, kv, dk, dv = top["q_heads"], top["kv"], top["dk"], top["dv"]
    if kind == "full" and (cfg.has("global_head_dim") or cfg.has("num_global_key_value_heads")):
        kv, dk = cfg.int("num_global_key_value_heads", kv), cfg.int("global_head_dim", dk)
        dv = dk
    if kind == "sliding" and cfg.has("swa_head_dim"):
        heads, kv = cfg.int("swa_num_attention_heads", heads), cfg.int("swa_num_key_value_heads", kv)
        dk = cfg.int("swa_head_dim")
        dv = cfg.int("swa_v_head_dim", dk)
    v_proj = 0 if (kind == "full" and cfg.flag("attention_k_eq_v")) else hidden * kv * dv
    n = hidden * heads * dk + hidden * kv * dk + v_proj + heads * dv * hidden
    if cfg.flag("attn_output_gate"):  # Qwen3.5: q_proj also yields a per-head output gate (heads x d_k more)
        n += hidden * heads * dk
    if cfg.flag("attention_bias"):
        n += heads * dk + kv * dk + (kv * dv if v_proj else 0) + hidden
    return n


def _moe_layers(cfg, layers: int, mlp_kinds: list) -> list[bool]:
    """Which layers hold a MoE block."""
    if not (cfg.has("n_routed_experts") or cfg.has("num_experts") or cfg.has("num_local_experts")):
        return [False] * layers
    if mlp_kinds is not None:  # Nemotron-H: E in the pattern
        return [k == "moe" for k in mlp_kinds]
    first = cfg.int("first_k_dense_replace", 0, minimum=0)
    step = cfg.int("decoder_sparse_step", 0) or cfg.int("interleave_moe_layer_step", 1)
    dense = set(cfg.int_list("mlp_only_layers", maximum=layers - 1, what="layer indices")
                if cfg.has("mlp_only_layers") else [])
    if isinstance(cfg.get("moe_layer_freq"), list):  # one 0/1 flag per layer
        return [bool(f) for f in cfg.int_list("moe_layer_freq", layers, maximum=1, what="flags 0 or 1")]
    freq = cfg.int("moe_layer_freq", 1)
    return [i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in dense for i in range(layers)]


def count(cfg, dtype_bytes: float) -> dict:
    """Preset fields from the config: params_total_b, params_active_b, weight_bytes_per_param, weights_gb,
    and per-component parameters and bytes (``components``) for the import report."""
    from kvcalc.model.config_import import HYBRID_CHARS, _pattern

    if cfg.has("compress_ratios"):  # DeepSeek V4: its own tensor shapes
        from kvcalc.model import config_v4

        parts, inactive = config_v4.parts(cfg, lambda hidden, inter: _mlp(cfg, hidden, inter))
        return _totals(cfg, parts, inactive, dtype_bytes)
    layers, hidden = cfg.int("num_hidden_layers"), cfg.int("hidden_size")
    vocab = cfg.int("vocab_size", 0, minimum=0)
    kinds = _pattern(cfg, layers)
    mlp_kinds = None
    if cfg.has("hybrid_override_pattern"):  # one block per layer: M/* mixers, - MLP, E MoE
        pat = cfg.get("hybrid_override_pattern")
        mlp_kinds = ["mlp" if c == "-" else "moe" if c == "E" else None for c in pat]
        assert set(pat) <= set(HYBRID_CHARS)
    top = {}
    if any(k in ("full", "sliding", "chunked") for k in kinds) and not cfg.has("kv_lora_rank"):
        heads = cfg.int("num_attention_heads")
        kv = cfg.int("num_key_value_heads", heads)
        dk = cfg.int("head_dim", 0) or hidden // heads
        top = {"q_heads": heads, "kv": kv, "dk": dk, "dv": cfg.int("v_head_dim", dk)}
    parts = dict.fromkeys(COMPONENTS, 0)
    parts["embedding"] = vocab * hidden
    parts["lm_head"] = 0 if tied(cfg) else vocab * hidden
    moe = _moe_layers(cfg, layers, mlp_kinds)
    experts = cfg.int("n_routed_experts", 0) or cfg.int("num_experts", 0) or cfg.int("num_local_experts", 0)
    top_k = cfg.int("num_experts_per_tok", 0) or cfg.int("experts_per_token", 1)
    check_top_k(cfg, experts, top_k)
    inter = cfg.int("intermediate_size", 0, minimum=0)
    dense_inter = cfg.int("intermediate_size_mlp", 0) or inter
    moe_inter = cfg.int("moe_intermediate_size", 0) or inter
    shared = _shared_params(cfg, hidden, moe_inter)
    inactive = 0
    for i, kind in enumerate(kinds):
        if kind is not None:
            parts["attention"] += _attention(cfg, kind, hidden, top)
        parts["other"] += 2 * hidden  # the layer's norms
        if mlp_kinds is not None and mlp_kinds[i] is None:
            continue  # a Nemotron-H mixer layer has no MLP
        if moe[i]:
            parts["routed_experts"] += experts * _mlp(cfg, hidden, moe_inter)
            parts["shared_experts"] += shared
            parts["other"] += hidden * experts  # router
            inactive += (experts - top_k) * _mlp(cfg, hidden, moe_inter)
        elif mlp_kinds is not None or kind is not None:
            parts["dense_mlp"] += _mlp(cfg, hidden, dense_inter)
    parts["other"] += hidden  # final norm
    out = _totals(cfg, parts, inactive, dtype_bytes)
    if experts and parts["routed_experts"]:  # what a decode step's expert reads are computed from (serve/)
        from kvcalc.out import units

        out["moe_experts"], out["moe_experts_per_token"] = experts, top_k
        if shared:
            out["moe_shared_experts"] = _shared_count(cfg)
        out["moe_expert_params_b"] = units.count_to_billions(parts["routed_experts"])
        expert_bytes = out["components"]["routed_experts"][1] / parts["routed_experts"]
        if expert_bytes != out["weight_bytes_per_param"]:
            out["moe_expert_weight_bytes_per_param"] = expert_bytes
    return out


def check_top_k(cfg, experts: int, top_k: int) -> None:
    """A token cannot use more experts than the layer has."""
    if experts and top_k > experts:
        key = "num_experts_per_tok" if cfg.has("num_experts_per_tok") else "experts_per_token"
        cfg.fail(key, f"{top_k:,} experts per token, but the model has only {experts:,}")


def _totals(cfg, parts: dict, inactive: int, dtype_bytes: float) -> dict:
    from kvcalc.out import units

    total = sum(parts.values())
    comp_bytes = _component_bytes(cfg, parts, dtype_bytes)
    weight_bytes = sum(comp_bytes.values())
    return {"params_total_b": units.count_to_billions(total),
            "params_active_b": units.count_to_billions(total - inactive),
            "weight_bytes_per_param": weight_bytes / total,
            "weights_gb": units.bytes_to_gb(weight_bytes),
            "components": {k: (parts[k], comp_bytes[k]) for k in COMPONENTS if parts[k]}}


def tied(cfg) -> bool:
    """Whether the LM head shares the embedding; absent = tied, transformers' PretrainedConfig default."""
    if "tie_word_embeddings" not in cfg.data:
        cfg.assume("tie_word_embeddings", "true", "transformers' default: the LM head is the embedding")
        return True
    return cfg.flag("tie_word_embeddings")


def _shared_params(cfg, hidden: int, moe_inter: int) -> int:
    """Shared experts of one MoE layer: n_shared_experts x expert (DeepSeek, Nemotron-H's own size), or one of
    shared_expert_intermediate_size plus its hidden x 1 gate (Qwen2-MoE, Qwen3-Next)."""
    if cfg.has("shared_expert_intermediate_size"):
        size = cfg.int("shared_expert_intermediate_size", 0, minimum=0)
        return _mlp(cfg, hidden, size) + hidden if size else 0
    if (cfg.text("model_type") or "").startswith("llama4"):
        cfg.note("Llama 4: one shared expert of intermediate_size per MoE layer (modeling_llama4.py; "
                         "the config has no field for it)")
        return _mlp(cfg, hidden, cfg.int("intermediate_size"))
    n = cfg.int("n_shared_experts", 0, minimum=0)
    size = cfg.int("moe_shared_expert_intermediate_size", 0) or moe_inter
    return n * _mlp(cfg, hidden, size)


def _shared_count(cfg) -> int:
    """Shared experts per MoE layer, as _shared_params counts them: n_shared_experts, else one."""
    if cfg.has("shared_expert_intermediate_size") or (cfg.text("model_type") or "").startswith("llama4"):
        return 1
    return cfg.int("n_shared_experts", 0, minimum=0)


def _quant(cfg) -> tuple[str | None, float, list[str]]:
    """(method, bytes per quantized param, patterns left unquantized) from quantization_config."""
    q = cfg.section("quantization_config")
    if q is None or not q.data:
        return None, 0, []
    method = (q.text("quant_method") or "").lower()
    algo = (q.text("quant_algo") or "").lower()
    skip_key = next((k for k in ("modules_to_not_convert", "ignored_layers", "exclude_modules") if q.has(k)), None)
    skip = q.text_list(skip_key) if skip_key else []
    if method == "fp8":  # one scale per block: fp32 (DeepSeek V3's scale_inv) or UE8M0 (1 B, scale_fmt ue8m0)
        block = q.int_list("weight_block_size", 2, minimum=1, what="sizes") if q.has("weight_block_size") \
            else [128, 128]
        scale = 1 if (q.text("scale_fmt") or "").lower() == "ue8m0" else 4
        return "fp8", 1 + scale / (block[0] * block[1]), skip
    if method == "mxfp4":
        return "mxfp4", QUANT_BYTES["mxfp4"], skip
    if algo == "nvfp4" or method == "nvfp4":  # 4-bit elements + one FP8 scale per group (16)
        group = q.int("group_size", 16)  # elements per FP8 scale
        return "nvfp4", 0.5 + 1 / group, skip
    if method == "modelopt" and algo == "fp8":  # per-tensor scales: 1 B/param
        return "fp8", 1.0, skip
    cfg.note(f"{cfg.name('quantization_config')}: quant_method {method or algo!r} not mapped; "
                     "weights counted at the base dtype")
    return None, 0, []


# which module-name fragments of modules_to_not_convert keep a component unquantized
_SKIP_MARKS = {"embedding": ("embed",), "lm_head": ("lm_head",), "attention": ("attn", "mixer", "linear_attn"),
               "dense_mlp": ("mlp.down", "mlp.up", "mlp.gate_proj"), "shared_experts": ("shared_expert",),
               "routed_experts": ("experts",), "other": ()}


def _component_bytes(cfg, parts: dict, dtype_bytes: float) -> dict:
    method, qbytes, skip = _quant(cfg)
    out = {}
    for name, n in parts.items():
        quantized = method is not None and name not in ("embedding", "lm_head", "other")
        if quantized and any(m in s for s in skip for m in _SKIP_MARKS[name]):
            quantized = False
        out[name] = n * (qbytes if quantized else dtype_bytes)
    if cfg.has("expert_dtype"):  # DeepSeek V4: routed experts stored apart from the FP8 backbone
        kind = cfg.text("expert_dtype").lower()
        if kind not in EXPERT_BYTES:
            cfg.fail("expert_dtype", f"{kind!r} is not mapped (known: {', '.join(EXPERT_BYTES)})")
        out["routed_experts"] = parts["routed_experts"] * EXPERT_BYTES[kind]
        cfg.note(f"routed experts in {kind} ({EXPERT_BYTES[kind]:g} B/param: 4-bit elements + one UE8M0 scale per "
                 "32, as the V4 checkpoints store them: I8-packed [2,048, 2,048] with F8_E8M0 scales [2,048, 128])")
    if method is not None:
        cfg.note(f"weights: {method} ({qbytes:g} B/param with scales) on the decoder's linear layers "
                         f"except {', '.join(skip) if skip else 'none listed'}; embedding, LM head and norms at "
                         f"{dtype_bytes:g} B/param")
    return out
