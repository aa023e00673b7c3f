"""The plan as Markdown: totals with their ranges, one row per model, corpora, memory, jobs and
the assumptions every figure rests on."""

from __future__ import annotations

from typing import Any, Mapping

from splade_rescale.costs.sizes import LONG_QUERY_TOKENS


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f}"


def format_hours(n: float) -> str:
    """Hours as the plan prints them: one decimal, or two significant digits below 0.1."""
    return f"{n:,.1f}" if n >= 0.1 else f"{n:.2g}"


def _range(figures: Mapping[str, Any], key: str) -> str:
    """A cost as 'central (low … high)'."""
    low, high = format_hours(figures[key + "_low"]), format_hours(figures[key + "_high"])
    return f"{format_hours(figures[key])} ({low} … {high})"


def _seeds_line(plan: Mapping[str, Any]) -> list[str]:
    """With several training seeds: how many runs, since training, encoding and retrieval are per seed."""
    runs, pairs = plan["jobs"].get("train", 0), plan["jobs"].get("rescale_head", 0)
    if runs <= pairs:
        return []
    return [f"| training seeds: every figure above counts each seed's full chain (train, encode, index, "
            f"retrieve) | {runs} training runs of {pairs} backbone x variant pairs |"]


def render_markdown(plan: Mapping[str, Any], configfile: str, throughputs_file: str) -> str:
    """The plan as Markdown: totals, one row per model, corpora, memory, jobs, assumptions."""
    t, threads = plan["totals"], plan["threads"]
    lines = [f"# What the run costs: {configfile}", "",
             f"Estimated by `splade-rescale plan` from {throughputs_file}; every figure is an estimate "
             "(assumptions below).", "",
             "| total | |", "|---|---|",
             f"| GPU-hours, training (padded micro-batches) | {_range(t, 'train_gpu_h')} |",
             f"| GPU-hours, encoding (corpora + queries) at the {plan['encode_rate']} rate | "
             f"{_range(t, 'encode_gpu_h')} |",
             f"| query encoding, largest share of one model's GPU time | {100 * t['query_share_max']:.2f}% |",
             f"| CPU core-hours, indexing (impact + BM25) | {format_hours(t['index_cpu_h'])} |",
             f"| CPU core-hours, retrieval (search cost model) | {_range(t, 'retrieve_cpu_h')} |",
             f"| wall hours of Lucene work at {threads} threads | {format_hours(t['cpu_h'] / threads)} "
             f"({format_hours(t['cpu_h_low'] / threads)} … {format_hours(t['cpu_h_high'] / threads)}) |",
             f"| disk at the end (GB) | {_gb(t['final_bytes'])} |",
             f"| peak disk (GB): final + one set of shards of the largest corpus ({plan['largest_corpus']}); "
             f"worst case, every shard kept at once | {_gb(t['peak_bytes'])}; {_gb(t['peak_bytes_worst'])} |",
             f"| Snakemake jobs | {plan['jobs']['total']} |", *_seeds_line(plan), "",
             "| model | variant | arch | parameters (M) | train GPU-h | encode GPU-h | index CPU-h | "
             "retrieve CPU-h | shards GB (temp) | index GB | models GB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in plan["models"]:
        s = m["shape"]
        lines.append(f"| {m['name']} | {m['variant']} | {s['architecture']} | {s['parameters'] / 1e6:,.0f} | "
                     f"{format_hours(m['train_gpu_h'])} | {format_hours(m['encode_gpu_h'])} | "
                     f"{format_hours(m['index_cpu_h'])} | "
                     f"{_range(m, 'retrieve_cpu_h')} | {_gb(m['shard_bytes'])} | "
                     f"{_gb(m['index_bytes'])} | {_gb(m['model_bytes'])} |")
    b = plan["bm25"]
    lines += [f"| BM25 | – | – | – | – | – | {format_hours(b['index_cpu_h'])} | {_range(b, 'retrieve_cpu_h')} | – | "
              f"{_gb(b['index_bytes'])} | – |", "",
              "| corpus | documents | mean words |", "|---|---|---|"]
    lines += [f"| {c} | {s['count']:,} | {s['words']:.1f} |" for c, s in plan["corpora"].items()]
    lines += ["", "| dataset | judged queries | mean words |", "|---|---|---|"]
    lines += [f"| {d} | {s['count']:,} | {s['words']:.1f} |" for d, s in plan["queries"].items()]
    lines += ["", "Peak memory per job type (GiB, the largest model):", "",
              "| job | GPU | host |", "|---|---|---|"]
    for job, r in plan["ram"].items():
        host = f"{r['host']:.1f}" + (f" + {r['mapped_index']:.1f} mapped index (page cache)"
                                     if "mapped_index" in r else "")
        lines.append(f"| {job} | {r['gpu']:.1f} | {host} |")
    lines += ["", "Jobs per rule (equal to `snakemake all -n --forceall`'s job stats):", "",
              "| rule | jobs |", "|---|---|"]
    lines += [f"| {rule} | {n} |" for rule, n in plan["jobs"].items()]
    lines += ["", "Assumptions:", "", *[f"* {a}" for a in ASSUMPTIONS], ""]
    return "\n".join(lines)


ASSUMPTIONS = (
    "GPU throughputs are the throughputs file's figures per architecture, each measured on one model shape "
    "(default: sentence-transformers SparseEncoder's forward on an H200, bf16; ours not measured yet). "
    "Encoding uses a measured end-to-end rate (texts in, shards on disk) where the file gives one, else the "
    "forward rate capped at the host side's rate (benchmarks/bench_encode.py --stub); each GPU job adds "
    "gpu.job_startup_s. Figures are scaled to a model by the measured shape's parameters / parameters (with a "
    "tied decoder, forward FLOPs per token are about 2 x parameters) and to a text by the measured tokens / "
    "tokens; training adds attention's quadratic term (2 x layers x hidden x tokens per token, against "
    "2 x parameters). GPU costs are given as central / gpu.range_factor … central x "
    "gpu.range_factor (gpu.range_note).",
    "Text tokens = 2 + words x tokens_per_word (measured 1.37 for BERT WordPiece on MS MARCO passages), cut at "
    "the configured maximum; encoding sorts by length, so little padding. Training pads each micro-batch "
    "to its longest text: its queries to the expected longest of the micro-batch's queries, its positives "
    "and negatives together to theirs, from real length histograms (text.msmarco_*_tokens for MS MARCO, "
    "else counted from the local training files), cut at the recipe's maxima.",
    "Training = recipe steps x batch size queries, each with 1 + negatives_per_query documents.",
    "Lucene throughputs are per thread, scaled linearly up to retrieval.threads (CPU core-hours do not "
    "depend on threads; wall hours = core-hours / threads). Impact indexing assumes ~180 non-zeros per "
    "document as measured; denser models index more slowly and write more.",
    "Retrieval: core-seconds per query from the search cost model (lucene.impact_search_cost, fitted on "
    "impact indexes of several sizes up to 1M documents by benchmarks/bench_retrieval_cost.py): fixed + per "
    "query term + per posting touched ** gamma, the postings from the corpus size and the model's densities; "
    f"queries over {LONG_QUERY_TOKENS} tokens count as long (BEIR ArguAna-like). BM25 searches: the same "
    "model with query words as terms and document words as non-zeros (BM25 not measured at scale). "
    "The range is the model's range_factor (its largest error on the timings it was fitted to, including "
    "extrapolation to the largest index).",
    "Disk: gzipped JsonVectorCollection shards are temp() (deleted once the corpus's impact index exists): "
    "peak = final + the shards awaiting indexing; final = impact and BM25 indexes, models (init + final + "
    "kept checkpoints with AdamW state at 12 B/parameter), backbones, query vectors and runs. The Hugging "
    "Face and ir_datasets caches are not counted.",
    "Memory: training 16 B/parameter + activations 34 B x hidden x layers per token (Korthikanti et al. "
    "2022) at the recipe's maximum lengths + one fp32 vocabulary chunk; encoding fp32 weights + one "
    "layer's activations and one chunk for a batch; Lucene jobs the JVM heap (throughputs lucene.jvm_heap_gib).",
)
