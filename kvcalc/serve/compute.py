"""Prefill FLOPs, prefill time and decode speed, in closed form.

Prefill of u uncached tokens after c cached ones, as engines spend it:
  matmul term    = 2 x (active_params - input embedding - LM head) x u + 2 x LM head once per request
                   (the embedding is a table lookup, not a matmul; only the last token's logits are computed);
                   embedding = LM head = vocab x hidden, one matrix when tied (counted once in params_total).
                   A preset without vocab_size/hidden_size (the article's) keeps 2 x active_params x u
                   ("2 x 13 B = 26 GFLOP per token").
  attention term = sum over layer groups of 2 x layers x q_heads x (d_qk + d_v) x sum_{t=c+1}^{c+u} attended(t)
where attended(t) is what position t attends: t (full, MLA), min(t, W) (sliding), ((t - 1) mod C) + 1
(chunked), min(t, top_k) (DSA), min(t, W) + min(floor(t/4), top_k) (CSA), min(t, W) + floor(t/128) (HCA);
a group that gives its own q_heads and head dims (per-group shapes) uses them instead of the model's.
Linear-attention and Mamba layers attend nothing; their recurrence costs a fixed
recurrent_flops_per_token per layer per token (attention.py), counted in the same term.
Sparse indexers' own scoring FLOPs are not counted here (the serving model's step time counts them:
indexed_prefix_sum, serve/step_time.py). Every sum is a closed form, so a 1 M-token prefill costs no loop.
"""

from __future__ import annotations

from kvcalc.model import attention as att
from kvcalc.model.schema import ModelPreset


def sum_t(n: int) -> int:
    """sum_{t=1}^{n} t."""
    return n * (n + 1) // 2 if n > 0 else 0


def sum_min(n: int, w: int) -> int:
    """sum_{t=1}^{n} min(t, w)."""
    if n <= w:
        return sum_t(n)
    return sum_t(w) + w * (n - w)


def sum_floor(n: int, r: int) -> int:
    """sum_{t=1}^{n} floor(t / r) = r q (q - 1) / 2 + q (n - q r + 1), q = floor(n / r)."""
    if n <= 0:
        return 0
    q = n // r
    return r * q * (q - 1) // 2 + q * (n - q * r + 1)


def sum_floor_cap(n: int, r: int, k: int) -> int:
    """sum_{t=1}^{n} min(floor(t / r), k): floor(t/r) reaches k at t = k r."""
    edge = k * r - 1
    if n <= edge:
        return sum_floor(n, r)
    return sum_floor(edge, r) + k * (n - edge)


def sum_chunk(n: int, c: int) -> int:
    """sum_{t=1}^{n} (((t - 1) mod c) + 1): q full chunks of c(c+1)/2 plus a partial one, q = floor(n / c)."""
    if n <= 0:
        return 0
    q = n // c
    return q * sum_t(c) + sum_t(n - q * c)


def indexed_prefix_sum(g: att.GroupLayout, n: int) -> int:
    """sum_{t=1}^{n} indexed(t) for one layer of group g: the entries a sparse indexer scores for each query
    (DSA: all t dense entries; CSA: floor(t / ratio) compressed ones) [token pairs]."""
    if g.indexed == "dense":
        return sum_t(n) if g.window_tokens is None else sum_min(n, g.window_tokens)
    if g.indexed == "compressed":
        return sum_floor(n, g.ratio)
    return 0


def attended_prefix_sum(g: att.GroupLayout, n: int) -> int:
    """sum_{t=1}^{n} attended(t) for one layer of group g [token pairs]."""
    if g.kind in ("flat", "linear", "mamba"):
        return 0
    if g.kind == "chunked":
        return sum_chunk(n, g.chunk_tokens)
    if g.kind in ("full", "mla"):
        return sum_t(n)
    if g.kind == "sliding":
        return sum_min(n, g.window_tokens)
    if g.kind == "dsa":
        return sum_min(n, g.top_k)
    window = sum_min(n, g.window_tokens) if g.window_tokens else 0
    if g.kind == "swa":
        return window
    if g.kind == "csa":
        return window + sum_floor_cap(n, g.ratio, g.top_k)
    return window + sum_floor(n, g.ratio)  # hca


def attention_flops(model: ModelPreset, groups: list[att.GroupLayout], cached: int, uncached: int) -> float:
    """Attention FLOPs of prefilling positions cached+1 .. cached+uncached [FLOP], plus the recurrent FLOPs of
    linear-attention/Mamba layers; a group's pairs count 0 when neither it nor the preset gives q_heads and
    head dims (as-stated models)."""
    if uncached <= 0:
        return 0.0
    total = 0
    for g in groups:
        total += g.layers * g.recurrent_flops_per_token * uncached
        shape = ((g.q_heads, g.qk_head_dim, g.v_head_dim) if g.q_heads else
                 (model.q_heads, model.qk_head_dim, model.v_head_dim))
        if not all(shape):
            continue
        pairs = attended_prefix_sum(g, cached + uncached) - attended_prefix_sum(g, cached)
        total += 2 * shape[0] * (shape[1] + shape[2]) * g.layers * pairs
    return float(total)


def embedding_params(model: ModelPreset) -> tuple[int, int]:
    """(input embedding, LM head) parameters that ``params_total`` counts [count]: vocab x hidden each, the
    embedding 0 when tied (one matrix, counted once, serving as the LM head); (0, 0) when the preset does not
    give vocab_size and hidden_size."""
    if not (model.vocab_size and model.hidden_size):
        return 0, 0
    matrix = model.vocab_size * model.hidden_size
    return (0 if model.tie_word_embeddings else matrix), matrix


def per_token_matmul_params(model: ModelPreset) -> float:
    """Parameters every prefilled token multiplies: active minus input embedding and LM head [count]."""
    return model.params_active - sum(embedding_params(model))


def matmul_flops(model: ModelPreset, tokens: float, requests: float = 1) -> float:
    """2 x per-token matmul parameters x tokens + 2 x LM head x requests (the last token's logits) [FLOP];
    nothing for a request with no token to prefill."""
    head = embedding_params(model)[1]
    return 2.0 * per_token_matmul_params(model) * tokens + (2.0 * head * requests if tokens > 0 else 0.0)


def prefill_flops(model: ModelPreset, groups: list[att.GroupLayout], cached: int, uncached: int,
                  with_attention: bool = True) -> float:
    """Matmul + (optionally) attention FLOPs of one request's prefill [FLOP]."""
    flops = matmul_flops(model, uncached)
    if with_attention:
        flops += attention_flops(model, groups, cached, uncached)
    return flops


def prefill_s_per_token(model: ModelPreset, gpus: int, peak_flops_per_gpu: float, mfu: float) -> float:
    """Matmul-only prefill time per extra token of a long prefill: 2 x (active params - embedding - LM head)
    / (gpus x peak x MFU) [s/token] (the LM head runs once per request, not per token)."""
    return compute_time_s(2.0 * per_token_matmul_params(model), gpus, peak_flops_per_gpu, mfu)


def compute_dtype(weight_bytes_per_param: float) -> str:
    """The dtype a model computes in, read from its weights: >= 2 B/param bf16, >= 1 fp8, else fp4; its dense
    peak (HardwarePreset.peak_flops) is what a derived scenario and ``transfer`` divide prefill FLOPs by."""
    if weight_bytes_per_param >= 2:
        return "bf16"
    return "fp8" if weight_bytes_per_param >= 1 else "fp4"


def compute_time_s(flops: float, gpus: int, peak_flops_per_gpu: float, mfu: float) -> float:
    """FLOPs / (gpus x peak x MFU) [s]."""
    return flops / (gpus * peak_flops_per_gpu * mfu)


def decode_step_s(flops: float, bytes_read: float, gpus: int, peak_flops_per_gpu: float, mfu: float,
                  hbm_bytes_per_s: float, bw_utilization: float) -> tuple[float, float]:
    """Roofline step time of one decode step for a batch: (compute-bound time, memory-bound time) [s];
    the step takes the larger."""
    return (flops / (gpus * peak_flops_per_gpu * mfu), bytes_read / (gpus * hbm_bytes_per_s * bw_utilization))
