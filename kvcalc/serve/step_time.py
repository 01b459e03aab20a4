"""One engine step's time in closed form: max(compute, memory) + communication + fixed overhead.

A step runs T tokens on one replica of ``tp`` GPUs: the decodes of the running requests (one token each) and the
chunks of prompts being prefilled. Per GPU:

  compute  = [2 x dense params x T / eff(T) + 2 x active expert params x T / eff(T k / D(T))  (each / the
              calibrated dequant efficiency where the weights are dequantised in the kernel: W4A16, W8A16)
              + 2 x LM head x S / eff(S)] / (tp x matmul peak)
             + attention FLOPs / (tp x BF16 peak x attention efficiency)
             + indexer FLOPs / (FP8 peak x attention efficiency)   (DSA/CSA lightning indexer, not split by TP)
             each matmul term also / (N / (N + N_half)), N = the GEMM's output columns per GPU (an expert's
             intermediate / tp; the dense layers' params per layer / (4 x hidden) / tp): narrow TP-split GEMMs
             dense params = active - embedding - LM head - active experts; S = sequences sampling this step;
             attention FLOPs = 2 x q_heads x (d_qk + d_v) x layers x attended(t) per query token (compute.py);
             an MLA decode runs in the latent (vLLM's and SGLang's MLA decode kernels absorb W_UK and W_UV: keys
             of kv_lora_rank + rope, values of kv_lora_rank), 2 x q_heads x (2 x 512 + 64) per entry for
             DeepSeek V3 instead of the prefill's decompressed 2 x q_heads x (192 + 128); the sparse kinds (DSA,
             V4's CSA/HCA: FlashMLA's sparse kernels) prefill in the latent too, and pay for each GPU's query
             heads padded to the kernels' tile of 64 (Hopper) or 128 (Blackwell), in prefill and in vLLM's
             decode (sparse_head_padding);
             indexer FLOPs = 2 x index_heads x index_head_dim x layers x indexed(t) per query token: the indexer
             scores every indexed entry (DSA: all t earlier tokens, O(L^2) over a prefill; CSA: floor(t / 4))
             before the top-k read, on every GPU (vLLM and SGLang replicate it: ReplicatedLinear, "no tensor
             parallel"), in FP8 where the GPU has it (DeepGEMM fp8_mqa_logits), else BF16; it enters the
             attention term as BF16-attention-equivalent FLOPs (x tp x BF16 peak / its peak)
             eff(n) = eff_max x n / (n + n_half): a GEMM of n rows reaches eff_max of the peak once n >> n_half
             (calibrated); an expert's GEMM has the T k / D(T) tokens routed to each expert touched.
  memory   = [dense weight bytes + expert bytes x D(T) / E] / tp + KV read per GPU, / (HBM bandwidth x hbm_eff)
             D(T) = E x (1 - (1 - k/E)^T): the expected distinct experts T tokens touch per layer with k of E each
             (uniform routing); the embedding table is looked up, not read; KV read = each decode's stored-vs-read
             bytes at its context (model/attention.py: sliding min(L, W), sparse CSA top-k) + each prefill
             chunk's prefix, times the GPU's share of the group (KV heads shard over TP, a latent is replicated).
  comm     = 2 x layers x (latency + 2 (tp - 1) / tp x T x hidden x 2 B / link bandwidth)  (two ring all-reduces
             of BF16 activations per layer over the scale-up link; none at tp = 1)
             + with --enable-expert-parallel over DP ranks, two all-to-alls per MoE layer (serve/expert_parallel.py,
             which also shards the experts' weights over tp x dp GPUs)
  overhead = the engine's fixed cost per step (with or without async scheduling) + per_sequence x sequences
             (SGLang and TensorRT-LLM replay a CUDA graph for a decode-only batch they captured: such a step pays
             no engine cost, cuda_graph_batches below; vLLM's, fitted on every step, applies to all)
             + the kernel floor: layers x kernels_per_layer x kernel_us (every kernel of a step pays a fixed
             time beyond its FLOPs and bytes: launch, ramp-up, tail; kernels_per_layer counted from the
             layer's structure, serve/kernel_count.py); each TP all-reduce also pays kernel_us on top of the link's
             latency (an all-reduce is a kernel too).
The matmul peak is the dtype the tensor cores really run (weights_dtype.math_dtype: MXFP4 on Hopper and FP8 on
Ampere run BF16 math). Every function takes numpy arrays: a run of decode steps is one call.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.model import attention as att
from kvcalc.model import weights_dtype as wd
from kvcalc.model.calibration_schema import CalibrationPreset
from kvcalc.model.schema import HardwarePreset, LinkPreset, ModelPreset
from kvcalc.serve import compute
from kvcalc.serve.kernel_count import kernels_per_layer

ACTIVATION_BYTES = 2  # BF16 activations in the TP all-reduce
ALL_REDUCES_PER_LAYER = 2  # after attention and after the MLP (Megatron-style TP)
# checkpoints whose attention has learned sinks (gpt-oss: vLLM runs them on FlashAttention 3 on Hopper, Triton below)
SINK_ARCHITECTURES = ("GptOssForCausalLM",)
# the kinds whose attention runs FlashMLA's sparse kernels (flash_mla_sparse_fwd, flash_mla_with_kvcache with
# indices): DeepSeek V3.2's DSA (vLLM's FLASHMLA_SPARSE backend, SGLang's NSA backend) and V4's compressed layers
SPARSE_MLA_KINDS = ("dsa", "csa", "hca")
ENGINE_STEP_FIELDS = {"vllm": "vllm_step_us", "vllm-async": "vllm_async_step_us", "sglang": "sglang_step_us",
                      "trtllm": "trtllm_step_us"}


def attended(g: att.GroupLayout, t):
    """Entries one query at position ``t`` attends in one layer of group ``g`` (int or numpy array)."""
    k = g.kind
    if k in ("flat", "linear", "mamba"):
        return t * 0
    if k in ("full", "mla"):
        return t
    if k == "chunked":
        return (t - 1) % g.chunk_tokens + 1
    if k == "sliding":
        return att._minimum(t, g.window_tokens)
    if k == "dsa":
        return att._minimum(t, g.top_k)
    window = att._minimum(t, g.window_tokens) if g.window_tokens else t * 0
    if k == "swa":
        return window
    if k == "csa":
        return window + att._minimum(t // g.ratio, g.top_k)
    return window + t // g.ratio  # hca


@dataclass(frozen=True)
class StepModel:
    """The constants of one replica's step time (see the module docstring) [FLOP, B, s, FLOP/s, B/s]."""

    tp: int
    dense_params: float           # per token: active - embedding - LM head - active experts
    expert_active_params: float   # per token: k experts of every MoE layer
    head_params: float            # LM head (vocab x hidden)
    dense_weight_bytes: float     # read every step (everything but the embedding table and the routed experts)
    expert_weight_bytes: float    # all routed experts
    experts: int                  # E (0: dense model)
    top_k: int                    # k
    groups: tuple                 # resolved layer groups
    shares: tuple                 # each group's per-GPU share of its KV
    attn_coef: tuple              # per group: 2 x q_heads x (d_qk + d_v) x layers [FLOP per attended entry]
    recurrent_flops: float        # linear-attention/Mamba FLOPs per token (all layers)
    matmul_peak: float            # per GPU, in the dtype the weights' matmuls run [FLOP/s]
    attn_peak: float              # per GPU, BF16 [FLOP/s]
    hbm_bytes_per_s: float        # per GPU, datasheet [B/s]
    layers: int
    hidden: int
    link_latency_s: float
    link_bytes_per_s: float
    eff_max: float
    half_tokens: float
    hbm_eff: float
    step_overhead_s: float
    per_sequence_s: float
    math_dtype: str
    attn_eff: float = 1.0         # attention kernels' share of the BF16 peak (calibrated)
    dense_width: float = 1.0      # N / (N + N_half) of the dense GEMMs, N = their output columns per GPU
    expert_width: float = 1.0     # the same for the routed experts (N = moe intermediate / tp)
    dense_dequant: float = 1.0    # 1 / efficiency factor of the dense matmuls when dequantised in the kernel
    expert_dequant: float = 1.0   # the same for the routed experts
    kv_scale: float = 1.0         # --kv-compression: KV bytes read x 1 / FACTOR (the article's hypothesis)
    ep: int = 0                   # expert-parallel GPUs the routed experts shard over (0: by TP); expert_parallel.py
    moe_token_scale: float = 1.0  # the MoE layers see this x the step's tokens (dp ranks in lockstep under EP)
    a2a_latency_s: float = 0.0    # the EP all-to-all's link
    a2a_bytes_per_s: float = 1.0
    a2a_ranks: int = 1            # GPUs the all-to-all spans (1: none)
    indexer_coef: tuple = ()      # per group: 2 x index heads x index head dim x layers x tp x BF16 peak /
                                  # the indexer's peak [BF16-attention-equivalent FLOP per indexed entry]
    decode_attn_coef: tuple = ()  # per group, a decode query's FLOP per attended entry (MLA: in the latent);
                                  # () = attn_coef
    kernel_floor_s: float = 0.0   # the kernel floor, already inside step_overhead_s: layers x kernels_per_layer x
                                  # kernel_us [s] (kept apart for --explain)
    kernels_per_layer: float = 0.0  # the kernels one layer launches per step (KERNELS, mean over the layers)
    sparse_heads: tuple = ()      # (query heads per GPU, as the sparse kernels run them) where they pad (--explain)
    graph_max_bs: int = 0         # decode-only batches of at most this many sequences replay a CUDA graph and pay
                                  # no engine step cost (SGLang, TensorRT-LLM: cuda_graph_batches); 0: none do
    graph_exact: tuple = ()       # where set, only batches of exactly these sizes do (TensorRT-LLM, no padding)

    # ---------------------------------------------------------------- terms

    def eff(self, n):
        """Matmul efficiency of a GEMM with ``n`` rows: eff_max x n / (n + n_half) [0..1]."""
        return self.eff_max * n / (n + self.half_tokens)

    def distinct_experts(self, tokens):
        """Expected distinct experts ``tokens`` tokens touch per MoE layer: E (1 - (1 - k/E)^T) [experts]."""
        if not self.experts:
            return tokens * 0
        return self.experts * (1 - (1 - self.top_k / self.experts) ** tokens)

    def kv_read_bytes(self, contexts):
        """KV bytes one GPU reads for queries at these contexts (elementwise) [B]."""
        total = 0
        for g, share in zip(self.groups, self.shares):
            total = total + att.read_bytes_per_step(g, contexts) * share
        return total * self.kv_scale

    def decode_attention_flops(self, contexts):
        """Attention FLOPs of one decode token at each context (elementwise) [FLOP]."""
        total = contexts * 0 + self.recurrent_flops
        for g, c in zip(self.groups, self.decode_attn_coef or self.attn_coef):
            if c:
                total = total + c * attended(g, contexts)
        for g, c in zip(self.groups, self.indexer_coef):
            if c:
                total = total + c * att.indexed_entries(g, contexts)
        return total

    def prefill_attention_flops(self, start: int, tokens: int) -> float:
        """Attention FLOPs of prefilling positions start+1 .. start+tokens: each group's coefficient x
        sum_t attended(t) in closed form (compute.attended_prefix_sum) + the recurrent layers' FLOPs + the
        indexer's, sum_t indexed(t) (compute.indexed_prefix_sum) [FLOP]."""
        total = self.recurrent_flops * tokens
        for g, c in zip(self.groups, self.attn_coef):
            if c:
                total += c * (compute.attended_prefix_sum(g, start + tokens) - compute.attended_prefix_sum(g, start))
        for g, c in zip(self.groups, self.indexer_coef):
            if c:
                total += c * (compute.indexed_prefix_sum(g, start + tokens) - compute.indexed_prefix_sum(g, start))
        return float(total)

    def decode_sums(self, contexts, axis=None):
        """(attention FLOPs, KV bytes read per GPU) of decode queries at ``contexts``, summed over ``axis`` [FLOP,
        B]. Plain full-attention groups (every kind of kvcalc's preset library where the read grows with L, no
        window, compression or sparse read) are linear in L, so their sum needs only sum(L); plain sliding groups
        need sum(min(L, W)); other kinds go through the elementwise model."""
        import numpy as np

        total_l = contexts.sum(axis=axis)
        attn = self.recurrent_flops * (contexts * 0 + 1).sum(axis=axis)
        kv = 0.0
        windows: dict = {}
        for g, share, c in zip(self.groups, self.shares, self.decode_attn_coef or self.attn_coef):
            kind = _plain(g)
            if kind == "full":
                attn = attn + c * total_l
                kv = kv + float(att.read_bytes_per_step(g, 1)) * share * total_l
            elif kind == "sliding":
                if g.window_tokens not in windows:
                    windows[g.window_tokens] = np.minimum(contexts, g.window_tokens).sum(axis=axis)
                s = windows[g.window_tokens]
                attn = attn + c * s
                kv = kv + float(att.read_bytes_per_step(g, 1)) * share * s
            else:
                attn = attn + (c * attended(g, contexts)).sum(axis=axis)
                kv = kv + (att.read_bytes_per_step(g, contexts) * share).sum(axis=axis)
        for g, c in zip(self.groups, self.indexer_coef):
            if c:
                attn = attn + (c * att.indexed_entries(g, contexts)).sum(axis=axis)
        return attn, kv * self.kv_scale

    def _matmul_terms(self, tokens, sampled):
        """The dense, routed-expert and LM-head matmuls' FLOPs, each / its efficiency [FLOP at the peak]."""
        import numpy as np

        t = np.maximum(tokens, 1e-9)
        dense = 2 * self.dense_params * tokens * self.dense_dequant / (self.eff(t) * self.dense_width)
        experts = 0.0
        if self.experts:
            moe_t = t * self.moe_token_scale
            per_expert = moe_t * self.top_k / np.maximum(self.distinct_experts(moe_t), 1e-9)
            experts = (2 * self.expert_active_params * tokens * self.expert_dequant
                       / (self.eff(per_expert) * self.expert_width))
        return dense, experts, 2 * self.head_params * sampled / self.eff(np.maximum(sampled, 1e-9))

    def compute_s(self, tokens, sampled, attn_flops):
        """Compute time of a step of ``tokens`` tokens with ``sampled`` sequences sampling [s]."""
        dense, experts, head = self._matmul_terms(tokens, sampled)
        return ((dense + experts + head) / (self.tp * self.matmul_peak)
                + attn_flops / (self.tp * self.attn_peak * self.attn_eff))

    def compute_parts(self, tokens, sampled, attn_flops) -> dict:
        """compute_s's terms one by one, for --explain and the per-op comparison (docs/serving-model.md): the dense
        matmuls, the routed experts', the LM head's and attention's (with the indexer's); they sum to compute_s [s]."""
        peak = self.tp * self.matmul_peak
        dense, experts, head = self._matmul_terms(tokens, sampled)
        return {"dense_s": dense / peak, "experts_s": experts / peak, "head_s": head / peak,
                "attention_s": attn_flops / (self.tp * self.attn_peak * self.attn_eff)}

    def weight_read_bytes(self, tokens):
        """Weight bytes one GPU reads in a step of ``tokens`` tokens: the dense weights and the experts they touch
        [B]."""
        frac = self.distinct_experts(tokens * self.moe_token_scale) / self.experts if self.experts else 0
        expert = self.expert_weight_bytes * frac
        if self.ep:  # expert parallel: 1 / ep of the experts per GPU
            expert = expert * self.tp / self.ep
        return (self.dense_weight_bytes + expert) / self.tp

    def memory_s(self, tokens, kv_bytes_per_gpu):
        """Memory time: weights read (experts touched) + KV read, per GPU [s]."""
        return (self.weight_read_bytes(tokens) + kv_bytes_per_gpu) / (self.hbm_bytes_per_s * self.hbm_eff)

    def comm_s(self, tokens):
        """Two ring all-reduces per layer of the step's activations over the scale-up link [s]."""
        if self.tp == 1:
            return tokens * 0.0
        moved = 2 * (self.tp - 1) / self.tp * tokens * self.hidden * ACTIVATION_BYTES
        return ALL_REDUCES_PER_LAYER * self.layers * (self.link_latency_s + moved / self.link_bytes_per_s)

    def ep_comm_s(self, tokens):
        """The expert-parallel all-to-alls of a step (serve/expert_parallel.py) [s]."""
        if self.a2a_ranks <= 1:
            return 0.0
        from kvcalc.serve.expert_parallel import all_to_all_s

        return all_to_all_s(tokens, self.top_k, self.hidden, self.a2a_ranks, self.layers, self.a2a_latency_s,
                            self.a2a_bytes_per_s)

    def step_s(self, tokens, sequences, sampled, attn_flops, kv_bytes_per_gpu):
        """max(compute, memory) + communication + overhead of a step [s] (numpy arrays elementwise)."""
        import numpy as np

        return (np.maximum(self.compute_s(tokens, sampled, attn_flops), self.memory_s(tokens, kv_bytes_per_gpu))
                + self.comm_s(tokens) + self.ep_comm_s(tokens) + self.fixed_s(tokens, sequences)
                + self.per_sequence_s * sequences)

    def overhead_s(self, tokens, sequences):
        """The step's overhead [s]: fixed_s + per_sequence x sequences."""
        return self.fixed_s(tokens, sequences) + self.per_sequence_s * sequences

    def fixed_s(self, tokens, sequences):
        """The step's fixed cost [s]: the engine's, unless the step replays a CUDA graph (a decode-only batch the
        engine captured), + the kernel floor."""
        import numpy as np

        if not self.graph_max_bs:
            return self.step_overhead_s
        return np.where(self.replays_graph(tokens, sequences), self.kernel_floor_s, self.step_overhead_s)

    def replays_graph(self, tokens, sequences):
        """Whether a step replays a captured CUDA graph: decode-only (one token per sequence) and a batch the
        engine captured (bool, numpy elementwise)."""
        import numpy as np

        seqs = np.asarray(sequences)
        graph = (np.asarray(tokens) <= seqs) & (seqs <= self.graph_max_bs)
        return graph & np.isin(seqs, self.graph_exact) if self.graph_exact else graph

    def terms(self, tokens, sequences, sampled, attn_flops, kv_bytes_per_gpu) -> dict:
        """The step time's terms, for --explain [s]."""
        out = {"compute_s": float(self.compute_s(tokens, sampled, attn_flops)),
               "memory_s": float(self.memory_s(tokens, kv_bytes_per_gpu)),
               "comm_s": float(self.comm_s(tokens)),
               "overhead_s": float(self.overhead_s(tokens, sequences))}
        if self.a2a_ranks > 1:
            out["ep_comm_s"] = float(self.ep_comm_s(tokens))
        return out

    # ---------------------------------------------------------------- the O(1) step loop (scheduler_fast.py)

    def decode_forms(self):
        """decode_sums of one decode as linear forms of integer atoms of its context (serve/decode_forms.py):
        ({atom: FLOP}, {atom: B}), or None where a group has no such form."""
        from kvcalc.serve import decode_forms

        return decode_forms.decode_forms(self)

    def step_parts(self, tokens, sequences, sampled) -> tuple:
        """step_s at these counts as (c0, c1, m0, m1, rest) with step_s(tokens, sequences, sampled, attn, kv) =
        max(c0 + c1 x attn, m0 + m1 x kv) + rest, read off compute_s, memory_s and step_s themselves (each arm
        is linear in its attention FLOPs or KV bytes; a probe of 1e18 gives the slope to rounding)
        [s, s/FLOP, s, s/B, s]."""
        probe = 1e18
        c0 = float(self.compute_s(tokens, sampled, 0.0))
        m0 = float(self.memory_s(tokens, 0.0))
        c1 = (float(self.compute_s(tokens, sampled, probe)) - c0) / probe
        m1 = (float(self.memory_s(tokens, probe)) - m0) / probe
        return c0, c1, m0, m1, float(self.step_s(tokens, sequences, sampled, 0.0, 0.0)) - max(c0, m0)


def _plain(g: att.GroupLayout) -> str | None:
    """'full' when the group's read is L entries of a fixed size, 'sliding' when min(L, W), else None."""
    if g.ratio is not None or g.top_k is not None or g.indexer_bytes or g.residual_tokens or g.chunk_tokens:
        return None
    if g.kind in ("full", "mla") and g.window_tokens is None:
        return "full"
    if g.kind == "sliding" and g.window_tokens:
        return "sliding"
    return None


def engine_key(engine: str, async_scheduling: bool) -> str:
    """The calibration's overhead field for an engine: vLLM has one with and one without async scheduling."""
    return "vllm-async" if engine == "vllm" and async_scheduling else engine


def step_model(model: ModelPreset, hw: HardwarePreset, link: LinkPreset | None, cal: CalibrationPreset, tp: int,
               engine: str = "vllm", async_scheduling: bool = False,
               opts: att.KvOptions = att.KvOptions()) -> StepModel:
    """The step-time constants of ``model`` on ``tp`` GPUs of ``hw`` (a replica), with ``cal``'s efficiencies."""
    from kvcalc.out import units

    groups = tuple(att.resolve_groups(model, opts))
    emb, head = compute.embedding_params(model)
    expert_params = units.billions_to_count(model.moe_expert_params_b) if model.moe_experts else 0.0
    experts, k = (model.moe_experts or 0), (model.moe_experts_per_token or 0)
    expert_active = expert_params * k / experts if experts else 0.0
    dense = model.params_active - emb - head - expert_active
    expert_bpp = model.moe_expert_weight_bytes_per_param or model.mean_weight_bytes_per_param
    expert_bytes = expert_params * expert_bpp
    emb_bytes = emb * (wd.EMBEDDING_BYTES if model.vocab_size else model.mean_weight_bytes_per_param)
    if not experts and model.params_active < model.params_total:
        # an MoE preset without expert fields: only the active share is read (a lower bound on bytes)
        dense_bytes = model.weight_bytes * model.params_active / model.params_total
    else:
        dense_bytes = model.weight_bytes - expert_bytes - emb_bytes
    coef, decode_coef, sparse = [], [], ()
    latent = {lg.name: lg for lg in model.layer_groups if getattr(lg, "kv_lora_rank", None)}
    for g in groups:
        shape = ((g.q_heads, g.qk_head_dim, g.v_head_dim) if g.q_heads else
                 (model.q_heads, model.qk_head_dim, model.v_head_dim))
        coef.append(2.0 * shape[0] * (shape[1] + shape[2]) * g.layers if all(shape) else 0.0)
        mla = latent.get(g.name) if g.kind in ("mla", "dsa") and shape[0] else None
        decode_coef.append(2.0 * shape[0] * (2 * mla.kv_lora_rank + mla.rope_head_dim) * g.layers if mla
                           else coef[-1])
        if g.kind in SPARSE_MLA_KINDS and shape[0]:
            # FlashMLA's sparse kernels: the prefill runs in the latent too (MQA, 576 / 512 for V3.2), and both
            # prefill and vLLM's decode pay for the heads padded per GPU (sparse_head_padding)
            pad = sparse_head_padding(shape[0], tp, hw)
            if pad > 1:
                per_gpu = -(-shape[0] // tp)
                sparse = (per_gpu, round(per_gpu * pad))
            coef[-1] = (decode_coef[-1] if mla else coef[-1]) * pad
            decode_coef[-1] = decode_coef[-1] * (pad if engine == "vllm" else 1.0)
    attn_peak = hw.peak_flops("bf16")
    # the indexer's logits GEMM (DeepGEMM fp8_mqa_logits) runs FP8 where the GPU has it, every GPU the whole of it
    idx_ratio = tp * attn_peak / hw.peak_flops("fp8")
    idx_coef = tuple(2.0 * g.indexer_heads * g.indexer_head_dim * g.layers * idx_ratio for g in groups)
    storage = wd.storage_dtype(model)
    math = wd.math_dtype(storage, hw.fp8_dense_tflops is not None, hw.fp4_dense_tflops is not None)
    slow = 1.0 / cal.dequant_matmul_efficiency if storage not in ("bf16", math) else 1.0
    # the dense layers' own format (gpt-oss keeps attention in BF16 beside MXFP4 experts): native when >= 2 B/param
    dense_count = model.params_total - expert_params - emb
    dense_bpp = (model.weight_bytes - expert_bytes - emb_bytes) / dense_count if dense_count > 0 else 2.0
    dense_slow = 1.0 if dense_bpp >= 2 - 1e-9 else slow
    overhead_us = getattr(cal, ENGINE_STEP_FIELDS[engine_key(engine, async_scheduling)])
    layers = sum(g.layers for g in groups)
    hidden = model.hidden_size or 0
    # GEMM widths per GPU [columns]: an expert's intermediate (expert params = E x layers x 3 x hidden x inter,
    # a gated MLP) / tp; the dense layers' typical output width, per-layer params / (4 x hidden) / tp
    expert_n = expert_params / (experts * layers * 3 * hidden * tp) if experts and hidden else 1e9
    dense_n = max(dense, 1.0) / (layers * 4 * hidden * tp) if hidden else 1e9

    def width(n: float) -> float:
        return n / (n + cal.matmul_half_width)
    kernels = kernels_per_layer(groups, bool(experts), math == "fp8", bool(experts and model.moe_shared_experts))
    kernel_s = units.us_to_s(cal.kernel_us)
    floor_s = kernels * layers * kernel_s
    return StepModel(
        tp=tp, dense_params=max(dense, 0.0), expert_active_params=expert_active, head_params=float(head),
        dense_weight_bytes=max(dense_bytes, 0.0), expert_weight_bytes=expert_bytes, experts=experts, top_k=k,
        groups=groups, shares=tuple(att.per_gpu_share(g, tp) for g in groups), attn_coef=tuple(coef),
        recurrent_flops=float(sum(g.layers * g.recurrent_flops_per_token for g in groups)),
        matmul_peak=hw.peak_flops(math), attn_peak=attn_peak,
        hbm_bytes_per_s=hw.hbm_bandwidth_bytes_per_s, layers=sum(g.layers for g in groups),
        hidden=model.hidden_size or 0,
        link_latency_s=(link.latency_s if link else 0.0) + kernel_s,
        link_bytes_per_s=link.bandwidth_bytes_per_s() if link else 1.0,
        eff_max=matmul_efficiency(cal, math), half_tokens=float(cal.matmul_half_tokens), hbm_eff=cal.hbm_efficiency,
        step_overhead_s=units.us_to_s(overhead_us) + floor_s, per_sequence_s=units.us_to_s(cal.per_sequence_us),
        math_dtype=math, attn_eff=attention_efficiency(model, hw, cal, engine), dense_width=width(dense_n),
        expert_width=width(expert_n),
        dense_dequant=dense_slow, expert_dequant=slow, indexer_coef=idx_coef,
        decode_attn_coef=tuple(decode_coef) if decode_coef != coef else (), kernel_floor_s=floor_s,
        kernels_per_layer=kernels, sparse_heads=sparse, **cuda_graph_batches(engine, hw, tp))


# TensorRT-LLM's default CudaGraphConfig (llmapi/llm_args.py, validate_cuda_graph_config): max_batch_size 128, no
# padding, batch sizes 1-31, 32, 64, 128; "enabled for batches that consist of decoding requests *only*"
TRTLLM_GRAPH_SIZES = tuple(range(1, 33)) + (64, 128)


def cuda_graph_batches(engine: str, hw: HardwarePreset, tp: int) -> dict:
    """The decode batches that replay a CUDA graph (StepModel.graph_max_bs, graph_exact): SGLang's decode graph up
    to cuda_graph_max_bs (its GPU default, padded to the next captured size); TensorRT-LLM's default sizes, exact;
    vLLM none apart (its per-step cost is fitted on every step, graph or not)."""
    if engine == "sglang":
        from kvcalc.memory import engine_common as ec
        from kvcalc.memory.engine_sglang_args import MIB, gpu_defaults

        total = ec.total_memory(hw, ec.EngineInputs(engine="sglang", tp=tp)).value  # as CUDA reports it [B]
        return {"graph_max_bs": gpu_defaults(total / MIB, tp)[1]}
    if engine == "trtllm":
        return {"graph_max_bs": max(TRTLLM_GRAPH_SIZES), "graph_exact": TRTLLM_GRAPH_SIZES}
    return {}


def matmul_efficiency(cal: CalibrationPreset, math_dtype: str) -> float:
    """The share of the peak of ``math_dtype`` a large matmul reaches: the calibration's FP8 figure where the
    weights run FP8 math and the calibration has one (``fp8_matmul_efficiency``), else matmul_efficiency_max
    [0..1]."""
    if math_dtype == "fp8" and cal.fp8_matmul_efficiency is not None:
        return cal.fp8_matmul_efficiency
    return cal.matmul_efficiency_max


def attention_efficiency(model: ModelPreset, hw: HardwarePreset, cal: CalibrationPreset, engine: str) -> float:
    """The attention kernels' share of the BF16 peak: the calibration's, or on vLLM below Hopper for a model with
    attention sinks (gpt-oss) its Triton backend's (``triton_attention_efficiency``: vLLM's gpt-oss recipe, "GPT-OSS
    works on Ampere devices by default, using the TRITON_ATTN attention backend and Marlin MXFP4 MoE"; the
    FlashAttention 3 that takes sinks is Hopper-only) [0..1]."""
    from kvcalc.memory.engine_vllm_mxfp4 import BELOW_HOPPER_GPUS

    below_hopper = any(g in hw.display_name.upper() for g in BELOW_HOPPER_GPUS)
    if (engine == "vllm" and below_hopper and model.architecture in SINK_ARCHITECTURES
            and cal.triton_attention_efficiency is not None):
        return cal.triton_attention_efficiency
    return cal.attention_efficiency


def sparse_head_padding(q_heads: int, tp: int, hw: HardwarePreset) -> float:
    """The work FlashMLA's sparse attention kernels do per query head actually held by a GPU: each GPU's query heads
    padded up to a multiple of 64 (Hopper and earlier) or 128 (Blackwell, the GPUs with FP4 tensor cores), the
    kernels' tile of heads [x]. vLLM's FlashMLASparseImpl pads the BF16 prefill kernel's query
    (``self.padding = 128 if is_device_capability(100) else 64``: "kernel requires num_local_head to be a multiple
    of 64 on hopper and 128 on blackwell", vllm/v1/attention/backends/mla/flashmla_sparse.py, v0.12-v0.13), and its
    FP8 decode kernel the same ("FP8 decode kernel only supports h_q = 64 or 128, so we need to pad", later
    versions); FlashInfer's NSA test pads the same way before flash_mla_sparse_fwd. DeepSeek V3.2 at TP 8: 128 / 8
    = 16 heads per GPU run as 64, 4x."""
    import math

    per_gpu = math.ceil(q_heads / tp)
    tile = 128 if hw.fp4_dense_tflops else 64
    return math.ceil(per_gpu / tile) * tile / per_gpu
