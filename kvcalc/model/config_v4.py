"""DeepSeek V4 configs (``compress_ratios``) -> ``compressed`` layer groups, parameters per component.

``compress_ratios`` holds one ratio per layer, then one per MTP layer (the released V4 Flash config has 44 entries
for 43 layers + 1 MTP layer, V4 Pro 62 for 61 + 1): 0 = sliding-window only, 4 = CSA (compressed 4:1, with a
lightning indexer), 128 = HCA (compressed 128:1). Every layer also keeps the last ``sliding_window`` raw entries.
What the config does not say, taken from DeepSeek's V4 inference code (model.py) and stated as notes:
  - the indexer sits on the ratio-4 layers only (``if compress_ratio == 4: self.indexer = Indexer(...)``; the
    released checkpoints carry ``attn.indexer.*`` on exactly those layers);
  - the compressor overlaps two windows at ratio 4 (``overlap = compress_ratio == 4``, coff = 2), so its fp32
    tail state is 2 (kv, score) x coff x ratio rows x coff x dim x 4 B: CSA 2 x 8 x 1,024 x 4 = 65,536 B plus the
    indexer's own compressor 2 x 8 x 256 x 4 = 16,384 B; HCA 2 x 128 x 512 x 4 = 524,288 B per layer;
  - a KV entry is head_dim - rope fp8 + rope bf16 + one UE8M0 scale per 64 + padding to 8 B: 448 + 128 + 7 + 1 = 584
    (FlashMLA "MODEL1"); indexer keys FP4 (68 B, the paper's setting; vLLM defaults to FP8, 132 B); FlashMLA pads
    pages to multiples of 576 B; blocks are multiples of lcm(ratios) tokens (SGLang asserts page_size % 128 == 0).
Sources: reference/kv-formulas.md section 4.
"""

from __future__ import annotations

from math import lcm

MAX_RATIO = 2**16         # a compression ratio (V4: 4 and 128); past it the compressor state is absurd
STATE_BYTES = 4          # the compressor keeps its tail in fp32
INDEXED_RATIO = 4        # model.py: an Indexer only where compress_ratio == 4
PAGE_ALIGN_BYTES = 576   # FlashMLA page alignment


def _coff(ratio: int) -> int:
    return 2 if ratio == INDEXED_RATIO else 1   # model.py: overlap = compress_ratio == 4


def ratios(cfg, layers: int, mtp: int) -> tuple[list[int], list[int]]:
    """(per-layer ratios, per-MTP-layer ratios); MTP layers absent from the list are sliding-window only."""
    value = cfg.get("compress_ratios")
    if not isinstance(value, list) or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in value):
        cfg.fail("compress_ratios", "needs a list of non-negative integers (0 = sliding window only)")
    big = max(value, default=0)
    if big > MAX_RATIO:
        cfg.fail("compress_ratios", f"a ratio of {big:,} is absurdly large (limit {MAX_RATIO:,})")
    if len(value) not in (layers, layers + mtp):
        cfg.fail("compress_ratios", f"has {len(value)} entries but num_hidden_layers is {layers}"
                 + (f" (+ {mtp} MTP)" if mtp else ""))
    extra = value[layers:]
    if mtp and not extra:
        cfg.note(f"{cfg.name('compress_ratios')} has no entry for the MTP layer(s): assumed sliding-window only")
    return value[:layers], extra or [0] * mtp


def entry_bytes(cfg) -> int:
    """One V4 KV entry [B]: nope dims fp8 + rope dims bf16 + one UE8M0 scale per 64 nope dims, padded to 8 B."""
    dim, rope = cfg.int("head_dim"), cfg.int("qk_rope_head_dim")
    if rope >= dim:
        cfg.fail("qk_rope_head_dim", f"{rope:,} must be below head_dim {dim:,} (the rest are the fp8 nope dims)")
    nope = dim - rope
    raw = nope + 2 * rope + -(-nope // 64)
    return -(-raw // 8) * 8


def state_bytes(ratio: int, dim: int, index_dim: int) -> int:
    """fp32 compressor tail per layer [B] (plus the indexer's compressor on indexed layers)."""
    if not ratio:
        return 0
    c = _coff(ratio)
    n = 2 * c * ratio * c * dim * STATE_BYTES
    if ratio == INDEXED_RATIO:
        n += 2 * c * ratio * c * index_dim * STATE_BYTES
    return n


def _name(ratio: int) -> str:
    return {0: "swa", INDEXED_RATIO: "csa", 128: "hca"}.get(ratio, f"c{ratio}")


def groups(cfg, mtp: int) -> tuple[list[dict], dict]:
    """(compressed layer groups, model-level fields) of a DeepSeek V4 config."""
    layers = cfg.int("num_hidden_layers", what="the layer count")
    main, extra = ratios(cfg, layers, mtp)
    window = cfg.int("sliding_window", what="V4 keeps a raw window in every layer")
    dim, index_dim = cfg.int("head_dim"), cfg.int("index_head_dim", 128)
    entry = entry_bytes(cfg)
    indexer = None
    if INDEXED_RATIO in main:
        indexer = {"head_dim": index_dim, "heads": cfg.int("index_n_heads", 64), "top_k": cfg.int("index_topk")}
        cfg.note(f"indexer on the ratio-{INDEXED_RATIO} (CSA) layers only, FP4 keys (68 B; DeepSeek V4 model.py "
                 "and the paper); vLLM's default FP8 keys are 132 B")
    cfg.note(f"KV entry {entry} B (head_dim - rope fp8 + rope bf16 + UE8M0 scales, FlashMLA MODEL1); compressor "
             "state fp32, overlapping windows at ratio 4 (DeepSeek V4 model.py)")
    out = []
    for r in sorted(set(main)):
        g = {"kind": "compressed", "name": _name(r), "layers": main.count(r), "window_tokens": window,
             "entry_bytes": entry}
        if r:
            g["ratio"] = r
            if r == INDEXED_RATIO and indexer:
                g["indexer"] = dict(indexer)
            g["state_bytes_per_layer"] = state_bytes(r, dim, index_dim)
        out.append(g)
    for r in sorted(set(extra)):
        g = {"kind": "compressed", "name": "mtp", "layers": extra.count(r), "window_tokens": window,
             "entry_bytes": entry}
        if r:
            g |= {"ratio": r, "state_bytes_per_layer": state_bytes(r, dim, index_dim)}
        out.append(g | {"mtp": True})
    heads = cfg.int("num_attention_heads")
    kv = cfg.int("num_key_value_heads", 1)
    if kv != 1:
        cfg.fail("num_key_value_heads", f"{kv}: DeepSeek V4 stores one shared K = V latent (1)")
    block = lcm(*[r for r in main + extra if r]) if any(main + extra) else 1
    top = {"q_heads": heads, "qk_head_dim": dim, "v_head_dim": dim, "indexer_dtype": "fp4" if indexer else None,
           "block_tokens_multiple": block if block > 1 else None, "page_align_bytes": PAGE_ALIGN_BYTES}
    return out, top


# ---------------------------------------------------------------- parameters (decoder only; MTP not counted)

def parts(cfg, mlp) -> tuple[dict, int]:
    """Parameters per component {name: count} and the routed-expert parameters a token leaves idle.

    Per layer (tensor shapes of the released checkpoints): wq_a hidden x q_lora, wq_b q_lora x heads x head_dim,
    wkv hidden x head_dim, wo_a (heads x head_dim / o_groups) x (o_groups x o_lora), wo_b (o_groups x o_lora) x
    hidden; a compressor on each compressed layer: wkv and wgate hidden x coff x dim, ape ratio x coff x dim;
    the indexer: wq_b q_lora x idx_heads x idx_dim, weights_proj hidden x idx_heads and its own compressor;
    hyper-connections (hc_mult m): 2 x ((m^2 + 2m) x m x hidden + m^2 + 2m + 3); every layer is MoE.
    ``mlp(hidden, inter)`` counts one expert.
    """
    layers, hidden = cfg.int("num_hidden_layers"), cfg.int("hidden_size")
    heads, dim = cfg.int("num_attention_heads"), cfg.int("head_dim")
    q_lora, o_lora, o_groups = cfg.int("q_lora_rank"), cfg.int("o_lora_rank"), cfg.int("o_groups", 1)
    idx_heads, idx_dim = cfg.int("index_n_heads", 64), cfg.int("index_head_dim", 128)
    m = cfg.int("hc_mult", 1)
    main = cfg.get("compress_ratios")[:layers]   # checked by groups()
    vocab = cfg.int("vocab_size", 0, minimum=0)
    experts, top_k = cfg.int("n_routed_experts"), cfg.int("num_experts_per_tok")
    from kvcalc.model.config_params import check_top_k

    check_top_k(cfg, experts, top_k)
    inter = cfg.int("moe_intermediate_size")
    expert = mlp(hidden, inter)
    p = {"embedding": vocab * hidden, "lm_head": 0 if cfg.flag("tie_word_embeddings") else vocab * hidden,
         "attention": 0, "dense_mlp": 0, "shared_experts": 0, "routed_experts": 0, "other": 0}
    attn = hidden * q_lora + q_lora * heads * dim + hidden * dim + heads * dim * o_lora + o_groups * o_lora * hidden
    hc = 2 * ((m * m + 2 * m) * m * hidden + m * m + 2 * m + 3) if m > 1 else 0
    for r in main:
        p["attention"] += attn
        p["other"] += q_lora + dim + heads + 2 * hidden + hc + hidden * experts + experts  # norms, sink, router
        if r:
            c = _coff(r)
            p["other"] += 2 * hidden * c * dim + r * c * dim + dim             # compressor
        if r == INDEXED_RATIO:
            p["attention"] += q_lora * idx_heads * idx_dim                        # indexer wq_b (fp8)
            c = _coff(r)
            p["other"] += hidden * idx_heads + 2 * hidden * c * idx_dim + r * c * idx_dim + idx_dim
        p["routed_experts"] += experts * expert
        p["shared_experts"] += cfg.int("n_shared_experts", 0, minimum=0) * expert
    p["other"] += hidden + (2 * (m * hidden * m + m + 1) if m > 1 else 0)           # final norm, hc head
    return p, layers * (experts - top_k) * expert
