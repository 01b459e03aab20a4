"""``kvcalc plan``'s search: the cheapest deployments whose p99 TTFT and TPOT, as the bench core simulates them,
meet the targets.

1. Every family (hardware x TP x DP [x EP for MoE models], plan_space.py) is checked against its lower bounds: memory (the KV pool
   cannot hold the longest request), the TPOT floor and the TTFT floor. A family a bound rejects is never
   simulated (the bound says by how much it misses).
2. The candidates of the families left (family x replicas) are simulated cheapest first ($/hour, then GPUs); a
   family's first candidate that meets both targets is its answer (a dearer one of the same family is never
   better). The search stops once ``top`` families have answers and the next candidate is dearer than the
   ``top``-th answer. Answers at the same $/hour rank by $/M blended (the higher throughput).
3. When a family's cheapest candidate first comes up, the family is simulated once at its lightest load (the
   most replicas --max-gpus allows): a family that misses even there is rejected with the miss and none of its
   other candidates is simulated. This assumes latency does not fall as a replica's load rises (fewer
   replicas), which holds for the scheduler's queueing and batching but is not proven for every run;
   docs/commands/plan.md says so. A family whose cheapest candidate costs more than the ``top``-th answer is
   never simulated at all (Plan.unprobed): it could not be among the answers.

Each simulation is the bench core's (bench.simulate_spec) on the replica's BenchSpec (plan_space.replica_spec):
re-running that spec gives the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvcalc.out.units import fmt_ms
from kvcalc.serve.plan_space import Candidate, Family, Targets, Traffic, candidates, family_bounds, replica_spec


@dataclass
class Plan:
    """What the search found: answers (cheapest first), every simulated row, rejected families, counts."""

    rows: list
    simulated: list
    rejected: list
    enumerated: int      # candidates (family x replicas)
    bound_pruned: int    # candidates of the families a lower bound rejected (never simulated)
    simulations: int     # candidates simulated (the rest were not needed: dearer than the answers)
    families: int
    specs: dict = field(default_factory=dict)  # (family key, replicas) -> the BenchSpecs simulated
    screened: int = 0    # of the simulations, those a short screening run rejected (screen_misses)
    unprobed: int = 0    # families never simulated: their cheapest candidate costs more than the answers
    verified: int = 0    # answers on the search's sample re-simulated with every prompt of their share
    unverified: int = 0  # of those, the ones that then missed a target (not answers)

    @property
    def closest(self):
        """The simulated row nearest the targets (the smallest worst ratio), or None."""
        return min(self.simulated, key=lambda r: (r["miss_ratio"], r["usd_per_hour"]), default=None)


def simulate_candidate(c: Candidate, traffic: Traffic, targets: Targets, full: bool = False,
                       prompts: int | None = None):
    """(row, [BenchSpec]) of candidate ``c``: the bench core's figures for its replicas (see replica_spec; ``full``:
    every prompt of a replica's share, not the search's sample; ``prompts``: at most that many)."""
    from kvcalc.serve.bench import metrics, pool_and_limits, simulate_spec

    f = c.family
    if f.prefill:
        return _simulate_disagg(c, traffic, targets, full, prompts)
    if traffic.split is None:
        spec = replica_spec(c, traffic, full=full, prompts=prompts)
        m, runs, sm, pool, sch = simulate_spec(spec)
        specs = [spec]
        cluster_throughput = m["output_throughput"] * c.replicas
    else:
        runs, specs, lower = [], [], 0
        for part in traffic.split(c.replicas):
            if not len(part.prompt):
                continue
            spec = replica_spec(c, traffic, part)
            if traffic.tiers is not None:  # the lower tiers' hits and load times (trace/plan_tiers.py)
                part, low = traffic.tiers(part, spec, pool_and_limits(spec)[0])
                spec, lower = replace(spec, trace=part), lower + low
            _, r, sm, pool, sch = simulate_spec(spec)
            runs += r
            specs.append(spec)
        m = metrics(runs, replace(f.spec, dp=f.dp * c.replicas))
        cluster_throughput = m["output_throughput"]
        return row_of(c, m, pool, sch, cluster_throughput, targets, lower), specs
    return row_of(c, m, pool, sch, cluster_throughput, targets), specs


SCREEN = 25  # requests per engine of the screening run before a long one


def screen_misses(c: Candidate, traffic: Traffic, targets: Targets):
    """"TTFT" or "TPOT" when a short run (the first SCREEN x dp requests of the replica's own list) already shows that the
    full run's p99 TTFT or TPOT exceeds its target: the full run's p99 is above a target once at least
    n - floor(0.99 (n - 1)) of its n requests are (np.percentile's linear rank), and a request's TTFT and TPOT
    in the short run are no larger than in the full run, where later requests only join after it (first come,
    first served) and add tokens to the steps it shares (an assumption of the scheduler's order, not a proof;
    docs/commands/plan.md). Only for the random dataset's long runs (>= 2 x the short one)."""
    import math

    import numpy as np

    from kvcalc.serve.bench import simulate_spec

    full = replica_spec(c, traffic)
    k = SCREEN * c.family.dp
    if traffic.split is not None or c.family.prefill or full.num_prompts < 2 * k:
        return None
    n = full.num_prompts
    need = n - math.floor(0.99 * (n - 1))
    _, runs, _, _, _ = simulate_spec(replace(full, num_prompts=k))
    ttft = np.concatenate([r.first_s - r.send_s for r in runs])
    out = np.concatenate([r.output for r in runs])
    multi = out > 1
    e2el = np.concatenate([r.done_s - r.send_s for r in runs])
    tpot = (e2el[multi] - ttft[multi]) / (out[multi] - 1)
    if int((ttft > targets.ttft_p99_s).sum()) >= need:
        return "TTFT"
    if full.output_len > 1 and int((tpot > targets.tpot_p99_s).sum()) >= need:
        return "TPOT"
    return None


def _simulate_disagg(c: Candidate, traffic: Traffic, targets: Targets, full: bool = False,
                     prompts: int | None = None):
    """(row, [BenchSpec]) of a disaggregated candidate: each replica through plan_disagg.simulate_pd."""
    from kvcalc.serve.bench import metrics, requests_of
    from kvcalc.serve.plan_disagg import simulate_pd

    f = c.family
    if traffic.split is None:
        spec = replica_spec(c, traffic, full=full, prompts=prompts)
        parts, scale = [requests_of(spec)], c.replicas
    else:
        spec, parts, scale = f.spec, [p for p in traffic.split(c.replicas) if len(p.prompt)], 1
    runs, specs = [], []
    for p in parts:
        run, pool, sch, sp = simulate_pd(spec, p, f.prefill, f.decode, f.pd_link, f.decode_spec)
        runs.append(run)
        specs += sp
    m = metrics(runs, replace(spec, tp=1, dp=f.gpus_per_replica * len(parts)))  # GPU time: every engine's GPUs
    return row_of(c, m, pool, sch, m["output_throughput"] * scale, targets), specs


def row_of(c: Candidate, m: dict, pool, sch, cluster_throughput: float, targets: Targets,
           lower_tier_tokens: int = 0) -> dict:
    """One result row in bench's names (plus the deployment's) [raw SI units, ms where the name says so]."""
    f = c.family
    ttft_ratio = m["p99_ttft_ms"] / 1e3 / targets.ttft_p99_s
    tpot_ratio = m["p99_tpot_ms"] / 1e3 / targets.tpot_p99_s
    return {
        "hardware": f.hw_name, "gpus": c.gpus, "gpus_per_replica": f.gpus_per_replica, "tp": f.tp, "dp": f.dp,
        "replicas": c.replicas, "disagg": f.disagg, "usd_per_hour": c.usd_per_hour,
        "usd_per_mtok_input": m["usd_per_mtok_input"], "usd_per_mtok_output": m["usd_per_mtok_output"],
        "usd_per_mtok_blended": m["usd_per_mtok_blended"],
        "output_throughput": cluster_throughput,
        "output_throughput_per_gpu": cluster_throughput / c.gpus,
        "tokens_per_s_per_user": 1e3 / m["mean_tpot_ms"] if m["mean_tpot_ms"] > 0 else 0.0,
        "median_ttft_ms": m["median_ttft_ms"], "p99_ttft_ms": m["p99_ttft_ms"],
        "median_tpot_ms": m["median_tpot_ms"], "p99_tpot_ms": m["p99_tpot_ms"],
        "mean_ttft_ms": m["mean_ttft_ms"], "mean_tpot_ms": m["mean_tpot_ms"],
        "kv_pool_tokens": int(pool.num_blocks * pool.block_size), "block_size": pool.block_size,
        "hit_rate": m["cached_tokens"] / m["total_input_tokens"] if m["total_input_tokens"] else 0.0,
        "max_num_seqs": sch.max_num_seqs, "max_num_batched_tokens": sch.max_num_batched_tokens,
        "simulated_requests": m["completed"], "preemptions": m["preemptions"],
        "meets": ttft_ratio <= 1 and tpot_ratio <= 1, "miss_ratio": max(ttft_ratio, tpot_ratio),
        "ttft_ratio": ttft_ratio, "tpot_ratio": tpot_ratio,
        # last, so the earlier CSV columns keep their places
        "ep": f.ep_size, "prefill_tp": f.tp if f.prefill else None, "decode_tp": f.decode_tp if f.prefill else None,
        "lower_tier_hit_rate": lower_tier_tokens / m["total_input_tokens"] if m["total_input_tokens"] else 0.0,
    }


def _reject(f: Family, reason: str, detail: str, ratio) -> dict:
    """A rejected family row; ``ratio``: the miss as a multiple of the target (None when unknown)."""
    return {"hardware": f.hw_name, "tp": f.tp, "dp": f.dp, "ep": f.ep_size, "disagg": f.disagg,
            "decode_tp": f.decode_tp if f.prefill else None,
            "gpus_per_replica": f.gpus_per_replica,
            "reason": reason, "detail": detail, "miss_ratio": ratio}


def prune(fams: list[Family], traffic: Traffic, targets: Targets):
    """(families left, rejected rows): the bounds of plan_space.family_bounds against the targets."""
    left, rejected = [], []
    for f in fams:
        b = family_bounds(f, traffic)
        if b.pool_blocks < b.need_blocks:
            what = ("the weights leave no KV memory" if b.pool_blocks <= 0 else
                    f"KV pool {b.pool_blocks:,} blocks of {b.limits['block_size']} tokens")
            rejected.append(_reject(f, "memory", f"{what}; the longest request needs {b.need_blocks:,} blocks",
                                    None))  # not a latency: the blocks say by how much
        elif b.tpot_floor_s > targets.tpot_p99_s:
            rejected.append(_reject(f, "TPOT", f"floor {fmt_ms(b.tpot_floor_s, ',.2f')} (one decode step: weights "
                                    "read + fixed costs) > target", b.tpot_floor_s / targets.tpot_p99_s))
        elif b.ttft_floor_s > targets.ttft_p99_s:
            rejected.append(_reject(f, "TTFT", f"floor {fmt_ms(b.ttft_floor_s, ',.1f')} (front end + own prefill) > "
                                    "target", b.ttft_floor_s / targets.ttft_p99_s))
        else:
            left.append(f)
    return left, rejected


def search(fams: list[Family], traffic: Traffic, targets: Targets, max_gpus: int, top: int = 3) -> Plan:
    """The search of the module docstring -> Plan."""
    from kvcalc.out import progress

    enumerated = len(candidates(fams, max_gpus))
    left, rejected = prune(fams, traffic, targets)
    simulated: list = []
    screened: list = []
    done: dict = {}
    specs: dict = {}

    def run(c: Candidate) -> dict:
        k = (c.family.key(), c.replicas)
        if k not in done:
            try:
                missed = screen_misses(c, traffic, targets)
                if missed:
                    done[k], specs[k] = None, [missed]
                    screened.append(k)
                    return None
                row, sp = simulate_candidate(c, traffic, targets)
            except ValueError as e:  # the scheduler cannot serve the run (a request larger than the pool)
                row, sp = None, [str(e)]
            done[k] = row
            specs[k] = sp
            if row is not None:
                simulated.append(row)
        return done[k]

    def probe(f: Family) -> bool:
        """Simulate ``f`` at its lightest load; False (and a rejected row) when it misses even there."""
        lightest = Candidate(f, max_gpus // f.gpus_per_replica)
        row = run(lightest)
        load = f"at its lightest load ({lightest.replicas} replica{'s' if lightest.replicas > 1 else ''})"
        if (f.key(), lightest.replicas) in screened:
            rejected.append(_reject(f, specs[(f.key(), lightest.replicas)][0], f"{load} a short screening run of "
                                    "its first requests already misses", None))
        elif row is None:
            rejected.append(_reject(f, "memory", specs[(f.key(), lightest.replicas)][0], None))
        elif not row["meets"]:
            which = "TTFT" if row["ttft_ratio"] >= row["tpot_ratio"] else "TPOT"
            rejected.append(_reject(f, which, f"{load}: p99 TTFT "
                                    f"{row['p99_ttft_ms']:,.1f} ms, p99 TPOT {row['p99_tpot_ms']:,.2f} ms",
                                    row["miss_ratio"]))
        else:
            return True
        return False

    checks = {"verified": 0, "unverified": 0}

    def sampled(c: Candidate) -> bool:
        return (traffic.split is None and replica_spec(c, traffic).num_prompts
                < replica_spec(c, traffic, full=True).num_prompts)

    def verify(c: Candidate):
        """Re-simulate a sampled answer with its whole share: the row it is reported (and checked) with. On the
        way, runs of 4x, 16x, ... the sample's prompts (the share's first ones) stop at the first that misses:
        a longer run only waits longer (the search's own assumption), so a configuration the whole share rejects
        usually costs a few short runs, and only an answer pays for the whole one."""
        k = (c.family.key(), c.replicas)
        whole = replica_spec(c, traffic, full=True).num_prompts
        size = 4 * replica_spec(c, traffic).num_prompts
        try:
            row, sp = None, []
            while size < whole:
                row, sp = simulate_candidate(c, traffic, targets, prompts=size)
                if not row["meets"]:
                    break
                size *= 4
            else:
                row, sp = simulate_candidate(c, traffic, targets, full=True)
        except ValueError as e:
            row, sp = None, [str(e)]
        simulated[:] = [r for r in simulated if r is not done[k]] + ([row] if row is not None else [])
        done[k], specs[k] = row, sp
        checks["verified"] += 1
        if row is None or not row["meets"]:
            checks["unverified"] += 1
        return row

    answers: dict = {}
    probed: dict = {}  # family key -> passed its lightest-load run
    tick = progress.counter(len(left), "families")
    for c in candidates(left, max_gpus):
        key = c.family.key()
        if key in answers:
            continue
        if len(answers) >= top and c.usd_per_hour > sorted(answers.values())[top - 1][0]:
            break  # every candidate left is dearer than the top-th answer (equal prices are all simulated)
        if key not in probed:  # a family is first simulated when its cheapest candidate comes up
            probed[key] = probe(c.family)
            if tick is not None:
                tick()
        if not probed[key]:
            continue
        row = run(c)
        if row is not None and row["meets"] and sampled(c):
            row = verify(c)
        if row is not None and row["meets"]:
            answers[key] = (row["usd_per_hour"], row["usd_per_mtok_blended"], c.order(), row)
    rows = [a[3] for a in sorted(answers.values(), key=lambda a: a[:3])][:top]  # equal $/hour: lower $/M first
    bound_pruned = sum(max_gpus // f.gpus_per_replica for f in fams if f not in left)
    return Plan(rows=rows, simulated=simulated, rejected=rejected, enumerated=enumerated,
                bound_pruned=bound_pruned, simulations=len(done), families=len(fams), specs=specs,
                screened=len(screened), unprobed=len(left) - len(probed), **checks)


def row_key(row: dict) -> tuple:
    """The (Family.key(), replicas) of a result row: where Plan.specs keeps its BenchSpecs."""
    return (row["hardware"], row["tp"], row["dp"], row["disagg"], row["ep"], row["decode_tp"]), row["replicas"]


def frontier(rows: list) -> list:
    """The Pareto frontier of rows over (tokens/s per user, output throughput per GPU), both higher-better:
    the rows no other row beats on both, by tokens/s per user."""
    pts = sorted(rows, key=lambda r: (-r["tokens_per_s_per_user"], -r["output_throughput_per_gpu"]))
    out, best = [], -1.0
    for r in pts:
        if r["output_throughput_per_gpu"] > best:
            out.append(r)
            best = r["output_throughput_per_gpu"]
    return sorted(out, key=lambda r: r["tokens_per_s_per_user"])
