"""A CPU run's cost from its own measurements, and the same run predicted before it starts.

Over 400 lines because the fit and the measured-against-predicted report read the same tables of
a finished run (benchmarks, disk samples, stats); the cost model itself is :mod:`.plan`.

Why: the paper run's bill (:mod:`splade_rescale.costs.plan`) is only as good as its per-unit figures.
The rehearsal measures them on CPU and checks that the model behind the bill predicts a whole run:

* :func:`dry_run_jobs`: the jobs Snakemake plans for a config and targets (rule, wildcards,
  threads, benchmark file, and which jobs each one waits for), from ``snakemake -n --forceall``;
* :func:`job_units`: the size of each job in the unit its time and output scale with
  (token-parameters for model work, postings for Lucene indexes, queries x documents for search);
* :func:`fit_throughputs`: per rule, ``seconds = fixed + rate x units`` and ``bytes = fixed + per-unit x units``,
  fitted by least squares across jobs of different sizes from a finished run's
  ``results/{experiment}/benchmarks`` and output sizes (a ``cpu`` throughputs section);
* :func:`predict`: the run on ``cores`` cores by list scheduling those jobs (longest remaining path
  first, as many as their threads allow), and its disk over time (outputs appear when a job ends,
  encoded shards go when their index exists): wall time, peak and final bytes of ``results/{experiment}/``;
* :func:`measured` and :func:`render_measured` / :func:`render_comparison`: what the run took
  (benchmarks + the ``rehearsal_data watch`` samples) and the prediction beside it.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from splade_rescale.costs.inputs import PlanError, load_plan_config
from splade_rescale.costs.model_shapes import model_shape
from splade_rescale.costs.plan import models
from splade_rescale.costs.schedule import Job, list_schedule
from splade_rescale.costs.sizes import corpus_size, query_size, tokens, training_lengths
from splade_rescale.data.fixtures.rehearsal import disk_bytes
from splade_rescale.runs import PUBLISHED_RUN
from splade_rescale.training.recipes import resolve_recipe

TOLERANCE = 0.35  # the rehearsal's acceptance: predicted within +-35% of measured

# Where each rule writes (relative to the experiment's results folder), to attribute the final disk to jobs.
OUTPUTS = {
    "fetch_backbone": ["backbones/{backbone}"],
    "rescale_head": ["models/{backbone}/{variant}/init"],
    "train": ["models/{backbone}/{variant}/final", "models/{backbone}/{variant}/checkpoints",
              "models/{backbone}/{variant}/training.json", "models/{backbone}/{variant}/sparsity.csv",
              "models/{backbone}/{variant}/train_log.csv"],
    "judge_training": ["models/{backbone}/{variant}/manifest.json"],
    "encode_queries": ["encoded/{backbone}/{variant}/queries"],  # one job per model, all datasets
    "impact_index": ["indexes/{backbone}/{variant}/{corpus}"],
    "bm25_index": ["indexes/bm25/{corpus}"],
    "impact_retrieve": ["runs/{backbone}/{variant}/{dataset}.trec",
                        "runs/{backbone}/{variant}/{dataset}.stats.json"],
    "bm25_retrieve": ["runs/bm25/{dataset}.trec", "runs/bm25/{dataset}.stats.json"],
    "evaluate": ["metrics/{backbone}/{variant}/{dataset}.json",
                 "metrics/{backbone}/{variant}/{dataset}.qrels"],
    "evaluate_bm25": ["metrics/bm25/{dataset}.json", "metrics/bm25/{dataset}.qrels"],
}
UNIT_NAMES = {
    "encode_corpus": "token-parameters", "encode_queries": "token-parameters", "train": "token-parameters",
    "fetch_backbone": "parameters", "rescale_head": "parameters", "norms_backbone": "parameters",
    "norms_variant": "parameters", "impact_index": "postings", "bm25_index": "words",
    "impact_retrieve": "queries x documents", "bm25_retrieve": "queries x documents",
    "evaluate": "queries", "evaluate_bm25": "queries",
}
# Per-unit seconds from the throughputs' Lucene section, for rules whose jobs all have one size.
LUCENE_RATE = {
    "impact_index": lambda lu, threads, sz: 1 / (float(lu["impact_index_docs_per_s_per_thread"]) * threads * sz.nnz),
    "bm25_index": lambda lu, threads, sz: 1 / (float(lu["bm25_index_docs_per_s_per_thread"]) * threads * 56.0),
    "impact_retrieve": lambda lu, threads, sz: 1 / (float(lu["impact_search_qps_per_thread"]) * threads
                                                   * float(lu["impact_search_index_docs"])),
    "bm25_retrieve": lambda lu, threads, sz: 1 / (float(lu["bm25_search_qps_per_thread"]) * threads
                                                 * float(lu["bm25_search_index_docs"])),
}
BYTE_UNITS = {"encode_queries": "queries", "impact_retrieve": "queries x k", "bm25_retrieve": "queries x k"}


class ThroughputFitError(ValueError):
    """A run folder or throughputs section that cannot be used; one line with the fix."""


# --- the DAG ------------------------------------------------------------------------------------

def dry_run_jobs(configfile: str | Path, targets: Sequence[str] = ("all",), workdir: str | Path = ".",
                 cores: int = 1024, gpus: int | None = None) -> list[dict]:
    """Jobs of ``snakemake <targets> -n --forceall``: rule, wildcards, threads, benchmark, deps (job ids).

    By default on cores enough that Snakemake prints each job's declared threads (with fewer it scales
    them down and a 2-thread training job would look like a 1-thread one); with ``cores`` and ``gpus``
    of a machine, the threads the workflow gives its jobs there."""
    resources = ["--resources", f"gpu={gpus}"] if gpus is not None else []
    proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, "-n", "--forceall", "--cores", str(cores),
                           *resources, "--configfile", str(Path(configfile).resolve())],
                          cwd=workdir, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise ThroughputFitError(f"snakemake dry run of {configfile} failed: {proc.stderr.strip().splitlines()[-1:]}")
    jobs = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", proc.stdout):
        head = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if not head:
            continue
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
        wildcards = dict(kv.split("=", 1) for kv in fields["wildcards"].split(", ")) if "wildcards" in fields else {}
        jobs.append({"rule": head.group(1), "id": int(fields["jobid"]), "wildcards": wildcards,
                     "threads": int(fields.get("threads", 1)), "priority": int(fields.get("priority", 0)),
                     "benchmark": fields.get("benchmark"),
                     "input": _paths(fields.get("input")), "output": _paths(fields.get("output"))})
    producer = {out: job["id"] for job in jobs for out in job["output"]}
    for job in jobs:
        job["deps"] = sorted({producer[i] for i in job["input"] if i in producer})
    return jobs


def _paths(text: str | None) -> list[str]:
    return [p.strip() for p in text.split(",")] if text else []


# --- sizes of jobs ------------------------------------------------------------------------------

class Sizes:
    """Model, corpus and query sizes of a config, as the plan counts them (local files are counted)."""

    def __init__(self, config: Mapping[str, Any], throughputs: Mapping[str, Any], root: Path):
        from splade_rescale.data.corpora import corpora

        self.config, self.root = config, root
        self.of_dataset, specs = corpora(config["datasets"])
        self.corpora = {c: corpus_size(c, s, root) for c, s in specs.items()}
        self.queries = {d: query_size(d, s, root) for d, s in config["datasets"].items()}
        self.shapes = {name: model_shape(name, (config["published_models"] if v == PUBLISHED_RUN
                                                else config["backbones"])[name], throughputs, root)
                       for name, v in models(config)}
        self.tpw = float(throughputs["text"]["tokens_per_word"])
        self.train_q, self.train_d = training_lengths(config["training"]["data"], root)
        self.nnz = (throughputs.get("cpu") or {}).get("doc_nnz_when_unpruned", 180)


def job_units(job: Mapping[str, Any], sizes: Sizes, nnz: float | None = None) -> float:
    """The job's size in the unit of its rule (UNIT_NAMES); 0 for rules of fixed cost.

    ``nnz``: measured non-zeros per document of the encoded corpus (impact_index); by default
    encoding.max_active_dims, else the throughputs' assumption for unpruned documents.
    """
    rule, w, cfg = job["rule"], job["wildcards"], sizes.config
    encoding = cfg["encoding"]
    params = sizes.shapes[w["backbone"]].parameters if "backbone" in w and w["backbone"] in sizes.shapes else 0
    if rule == "encode_corpus":
        size = sizes.corpora[w["corpus"]]
        return size.count * tokens(size.words, sizes.tpw, encoding["doc_max_length"]) * params
    if rule == "encode_queries":  # every dataset's queries, each at its own length
        from splade_rescale.config import query_max_length

        return sum(size.count * tokens(size.words, sizes.tpw, query_max_length(encoding, cfg["datasets"][d])) * params
                   for d, size in sizes.queries.items())
    if rule == "train":
        r = resolve_recipe(cfg, w["backbone"], w["variant"])
        per_query = (tokens(sizes.train_q.words, sizes.tpw, r["query_max_length"])
                     + (1 + r["negatives_per_query"]) * tokens(sizes.train_d.words, sizes.tpw, r["doc_max_length"]))
        return r["steps"] * r["batch_size"] * per_query * params
    if rule in ("fetch_backbone", "rescale_head", "norms_backbone", "norms_variant"):
        return params
    if rule == "impact_index":
        return sizes.corpora[w["corpus"]].count * (nnz or encoding.get("max_active_dims") or sizes.nnz)
    if rule == "bm25_index":
        size = sizes.corpora[w["corpus"]]
        return size.count * size.words
    if rule in ("impact_retrieve", "bm25_retrieve"):
        return sizes.queries[w["dataset"]].count * sizes.corpora[sizes.of_dataset[w["dataset"]]].count
    if rule in ("evaluate", "evaluate_bm25"):
        return sizes.queries[w["dataset"]].count
    return 0.0


def byte_units(job: Mapping[str, Any], sizes: Sizes, nnz: float | None = None) -> float:
    """The unit a job's output bytes scale with (BYTE_UNITS, else its time unit)."""
    rule, w = job["rule"], job["wildcards"]
    if rule == "encode_queries":
        return sum(size.count for size in sizes.queries.values())
    if rule in ("impact_retrieve", "bm25_retrieve"):
        return sizes.queries[w["dataset"]].count * int(sizes.config["retrieval"]["k"])
    if rule == "encode_corpus":  # shards: postings
        return sizes.corpora[w["corpus"]].count * (nnz or sizes.config["encoding"].get("max_active_dims") or sizes.nnz)
    return job_units(job, sizes, nnz)


# --- measurements -------------------------------------------------------------------------------

def read_benchmark(path: Path) -> dict[str, float]:
    """Snakemake's benchmark TSV (one repeat): s, max_rss (MB), io_out (MB), cpu_time."""
    with open(path) as f:
        row = next(csv.DictReader(f, delimiter="\t"))
    return {k: float(row[k]) if row.get(k) not in (None, "", "-", "NA") else 0.0
            for k in ("s", "max_rss", "io_out", "cpu_time")}


def read_disk(path: Path) -> dict[str, float]:
    """The header of ``rehearsal_data watch``'s samples: wall s, peak and final bytes."""
    if not path.is_file():
        raise ThroughputFitError(f"{path}: missing; fix: run the workflow under "
                                 "`python -m splade_rescale.data.fixtures.rehearsal watch` (make rehearsal does)")
    text = path.read_text()
    head = dict(re.findall(r"^# ([\w ]+): (\S+)$", text, re.M))
    first = re.search(r"^seconds\tbytes\n\S+\t(\d+)$", text, re.M)
    return {"wall_s": float(head["wall s"]), "peak_bytes": float(head["peak bytes"]),
            "final_bytes": float(head["final bytes"]), "exit_status": int(head["exit status"]),
            "start_bytes": float(first.group(1)) if first else 0.0}


def experiment_folder(config: Mapping[str, Any], run: str | Path) -> Path:
    """Where a config's outputs lie in the run folder (results/{experiment}), its disk samples too."""
    return Path(run) / "results" / config["experiment"]


def measured_jobs(jobs: list[dict], run: Path, folder: Path) -> list[dict]:
    """Each planned job with its benchmark figures, output bytes and (encode_corpus) corpus stats
    (``folder``: the experiment's results folder)."""
    out = []
    for job in jobs:
        job = dict(job)
        if job["benchmark"] and (run / job["benchmark"]).is_file():
            job.update(read_benchmark(run / job["benchmark"]))
        patterns = OUTPUTS.get(job["rule"], [])
        job["bytes"] = sum(disk_bytes(folder / p.format(**job["wildcards"])) for p in patterns) if patterns else None
        if job["rule"] in ("encode_corpus", "impact_index"):
            w = job["wildcards"]
            stats = folder / f"encoded/{w['backbone']}/{w['variant']}/corpora/{w['corpus']}.stats.json"
            if stats.is_file():
                s = json.loads(stats.read_text())
                job["nnz"] = s.get("mean_nnz_per_doc")
                if job["rule"] == "encode_corpus":
                    job["bytes"] = s.get("shard_bytes")  # temporary: gone by the end
        out.append(job)
    return out


# --- fitting ------------------------------------------------------------------------------------

def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b x`` with a, b >= 0; one size only (or none) gives ``a`` = mean."""
    if not points:
        return 0.0, 0.0
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 1e-12 * max(mx * mx, 1e-300):
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    if b < 0:
        return my, 0.0
    if a < 0:  # through the origin
        return 0.0, sum(x * y for x, y in points) / sum(x * x for x, _ in points)
    return a, b


def fit_throughputs(configfile: str | Path, run: str | Path = ".", targets: Sequence[str] = ("all",),
                    throughputs: Mapping[str, Any] | None = None, machine: str | None = None) -> dict[str, Any]:
    """A ``cpu`` throughputs section fitted to a finished run (its config, benchmarks, outputs, disk).

    A rule whose jobs all have one size cannot separate fixed from per-unit time: it takes the
    per-unit rate of ``throughputs``' own ``cpu`` section (default: config/throughputs-cpu.json,
    the rehearsal's) or, for Lucene rules, of its Lucene figures, and fits the fixed part here.
    """
    from splade_rescale.costs.inputs import THROUGHPUTS_CPU_PATH, load_throughputs

    run = Path(run)
    throughputs = dict(throughputs or load_throughputs(THROUGHPUTS_CPU_PATH))
    prior = throughputs.pop("cpu", None)
    config = load_plan_config(configfile)
    folder = experiment_folder(config, run)
    sizes = Sizes(config, throughputs, run)
    jobs = measured_jobs(dry_run_jobs(configfile, targets, run), run, folder)
    missing = [j["benchmark"] for j in jobs if j["benchmark"] and "s" not in j]
    if missing:
        raise ThroughputFitError(f"{run}: {len(missing)} benchmark files missing (e.g. {missing[0]}); fix: fit "
                                 "a finished run of the same config and targets")
    rules: dict[str, dict[str, Any]] = {}
    for rule in sorted({j["rule"] for j in jobs}):
        mine = [j for j in jobs if j["rule"] == rule and "s" in j]
        if not mine:
            continue
        points = [(job_units(j, sizes, j.get("nnz")), j["s"]) for j in mine]
        fixed, rate = _fit(points)
        one_size = len({x for x, _ in points}) == 1
        if not rate and one_size and rule in LUCENE_RATE:
            # one size only: the per-unit rate from the throughputs' Lucene figures, the rest fixed
            rate = LUCENE_RATE[rule](throughputs["lucene"], int(config["retrieval"]["threads"]), sizes)
            fixed = max(0.0, sum(y - rate * x for x, y in points) / len(points))
        elif not rate and one_size and (prior or {}).get("rules", {}).get(rule, {}).get("s_per_unit"):
            # one size only: the per-unit rate of an earlier fit (the rehearsal's), the rest fixed here
            rate = float(prior["rules"][rule]["s_per_unit"])
            fixed = max(0.0, sum(y - rate * x for x, y in points) / len(points))
        entry = {"jobs": len(mine), "unit": UNIT_NAMES.get(rule, "-"), "fixed_s": round(fixed, 3),
                 "s_per_unit": rate, "max_rss_mb": round(max(j["max_rss"] for j in mine), 1),
                 "cpu_s": round(sum(j["cpu_time"] for j in mine), 1)}
        sized = [j for j in mine if j["bytes"] is not None]
        if sized:
            b0, b1 = _fit([(byte_units(j, sizes, j.get("nnz")), j["bytes"]) for j in sized])
            entry.update(bytes_fixed=round(b0), bytes_per_unit=b1, byte_unit=BYTE_UNITS.get(rule, entry["unit"]))
        rules[rule] = entry
    disk = read_disk(folder / "disk.tsv")
    unattributed = (disk["final_bytes"] - disk["start_bytes"]
                    - sum(j["bytes"] or 0 for j in jobs if j["rule"] != "encode_corpus"))
    cpu = {
        "machine": machine or _machine(),
        "date": datetime.date.today().isoformat(),
        "source": f"`splade-rescale fit-throughputs` of a finished run of {configfile} (its results/<experiment>/: "
                  "benchmarks, output sizes, disk.tsv)",
        "doc_nnz_when_unpruned": sizes.nnz,
        "other_bytes_per_job": round(max(0.0, unattributed) / len(jobs)),
        "snakemake_overhead_s_per_job": 0.0,
        "rules": rules,
    }
    # Snakemake's own time between jobs: the per-job overhead with which the schedule of the measured
    # jobs lasts as long as the run did. Fitted through the schedule itself, not spread over the jobs'
    # core-seconds, so that it carries over to a DAG of another width (a chain pays it once per job).
    cores = _cores_of(folder)

    def schedule(overhead: float) -> float:  # the sizes counted above, not recounted ~30 times
        cpu["snakemake_overhead_s_per_job"] = overhead
        return predict(config, {**throughputs, "cpu": cpu}, jobs, cores, run, disk["start_bytes"], sizes)["wall_s"]

    low, high = 0.0, max(0.0, disk["wall_s"] - schedule(0.0))  # every job paying the whole gap overshoots
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if schedule(middle) < disk["wall_s"] else (low, middle)
    cpu["snakemake_overhead_s_per_job"] = round((low + high) / 2, 3)
    cpu["cores"] = cores
    return cpu


def _machine() -> str:
    """CPU model and cores, for the label of the figures."""
    try:
        model = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M).group(1)
    except (OSError, AttributeError):
        model = platform.machine()
    return f"{model}, {os.cpu_count()} cores"


def _cores_of(folder: Path) -> int:
    head = (folder / "disk.tsv").read_text()
    m = re.search(r"--cores (\d+)", head)
    return int(m.group(1)) if m else 1


def input_bytes(config: Mapping[str, Any], run: Path) -> int:
    """Bytes of the config's local dataset files that lie in its results folder (built before the run)."""
    folder = experiment_folder(config, run)
    paths = set()
    for spec in config["datasets"].values():
        for key in ("corpus", "queries", "qrels", "path"):
            if key in spec and (run / spec[key]).resolve().is_relative_to(folder.resolve()):
                paths.add(spec[key])
    return sum(disk_bytes(run / p) for p in paths)


# --- prediction ---------------------------------------------------------------------------------

def predict(config: Mapping[str, Any], throughputs: Mapping[str, Any], jobs: list[dict], cores: int,
            run: str | Path = ".", start_bytes: float | None = None, sizes: Sizes | None = None) -> dict[str, Any]:
    """Wall seconds, peak and final bytes of ``jobs`` on ``cores`` cores from ``throughputs['cpu']``.

    ``start_bytes``: what the experiment's results folder holds before the run (default: the config's local
    datasets there).
    ``sizes``: the config's counted sizes, when the caller predicts the same jobs several times.
    """
    cpu = throughputs.get("cpu")
    if not cpu:
        raise PlanError("throughputs has no `cpu` section; fix: pass config/throughputs-cpu.json or run "
                        "`splade-rescale fit-throughputs` on a finished rehearsal")
    run = Path(run)
    sizes = sizes or Sizes(config, throughputs, run)
    rules = cpu["rules"]
    default_fixed = sorted(r["fixed_s"] for r in rules.values())[len(rules) // 2] if rules else 0.0
    overhead = float(cpu.get("snakemake_overhead_s_per_job", 0.0))
    by_id = {j["id"]: j for j in jobs}
    seconds, adds = {}, {}
    for j in jobs:
        r = rules.get(j["rule"])
        if j["rule"] == "all":
            seconds[j["id"]], adds[j["id"]] = 0.0, 0.0
            continue
        base = default_fixed if r is None else r["fixed_s"] + r["s_per_unit"] * job_units(j, sizes)
        seconds[j["id"]] = base + overhead
        adds[j["id"]] = (r.get("bytes_fixed", 0) + r.get("bytes_per_unit", 0) * byte_units(j, sizes)) if r else 0.0
    slots = list_schedule([Job(j["id"], j["rule"], j["threads"], seconds[j["id"]], tuple(j["deps"])) for j in jobs],
                          cores)
    other = float(cpu.get("other_bytes_per_job", 0))
    disk = peak = float(input_bytes(config, run) if start_bytes is None else start_bytes)
    for i in sorted(by_id, key=lambda i: (slots[i].end, slots[i].start)):  # outputs land when a job ends
        disk += adds[i] + (other if by_id[i]["rule"] != "all" else 0.0)
        peak = max(peak, disk)
        if by_id[i]["rule"] == "impact_index":  # its temp() shards go once the index exists
            disk -= sum(adds[d] for d in by_id[i]["deps"] if by_id[d]["rule"] == "encode_corpus")
    now = max((s.end for s in slots.values()), default=0.0)
    return {"wall_s": now, "peak_bytes": peak, "final_bytes": disk, "jobs": len(jobs),
            "core_s": sum(seconds[i] * min(by_id[i]["threads"], cores) for i in by_id)}


# --- reports ------------------------------------------------------------------------------------

def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def measured(configfile: str | Path, run: str | Path = ".", targets: Sequence[str] = ("all",)) -> dict[str, Any]:
    """Per rule: jobs, seconds (sum and max), peak RSS, MB written, output bytes; the run's wall and disk."""
    run = Path(run)
    folder = experiment_folder(load_plan_config(configfile), run)
    jobs = measured_jobs(dry_run_jobs(configfile, targets, run), run, folder)
    rules: dict[str, dict[str, float]] = {}
    for j in jobs:
        if "s" not in j:
            continue
        r = rules.setdefault(j["rule"], {"jobs": 0, "s": 0.0, "max_s": 0.0, "max_rss_mb": 0.0, "io_out_mb": 0.0,
                                         "output_bytes": 0.0})
        r["jobs"] += 1
        r["s"] += j["s"]
        r["max_s"] = max(r["max_s"], j["s"])
        r["max_rss_mb"] = max(r["max_rss_mb"], j["max_rss"])
        r["io_out_mb"] += j["io_out"]
        r["output_bytes"] += j["bytes"] or 0
    return {"rules": rules, "jobs": len(jobs), **read_disk(folder / "disk.tsv")}


def render_measured(m: Mapping[str, Any], title: str) -> str:
    """The measured table: one row per rule, then the whole run."""
    lines = [f"## {title}", "",
             "| rule | jobs | total s | max s | max RSS (MB) | written (MB, io_out) | outputs (MB) |",
             "|---|---|---|---|---|---|---|"]
    for rule, r in sorted(m["rules"].items(), key=lambda kv: -kv[1]["s"]):
        lines.append(f"| {rule} | {r['jobs']} | {r['s']:,.0f} | {r['max_s']:,.1f} | {r['max_rss_mb']:,.0f} | "
                     f"{r['io_out_mb']:,.1f} | {_mb(r['output_bytes'])} |")
    lines += ["", f"Whole run: {m['jobs']} jobs, wall {m['wall_s']:,.0f} s ({m['wall_s'] / 60:.1f} min), "
              f"peak disk of results/<experiment>/ {_mb(m['peak_bytes'])} MB, final {_mb(m['final_bytes'])} MB "
              "(encode_corpus outputs: its temporary shards).", ""]
    return "\n".join(lines)


def comparison(predicted: Mapping[str, float], m: Mapping[str, Any]) -> list[tuple[str, float, float, bool]]:
    """(figure, predicted, measured, within TOLERANCE) for wall time, peak and final disk."""
    out = []
    for key in ("wall_s", "peak_bytes", "final_bytes"):
        p, x = float(predicted[key]), float(m[key])
        out.append((key, p, x, abs(p - x) <= TOLERANCE * x))
    return out


def render_comparison(rows: list[tuple[str, float, float, bool]], cores: int, throughputs_file: str) -> str:
    lines = [f"## Predicted (`splade-rescale plan --cores {cores}`, {throughputs_file}) vs measured", "",
             "| figure | predicted | measured | deviation | within ±35% |", "|---|---|---|---|---|"]
    for key, p, x, ok in rows:
        unit = (lambda v: f"{v:,.0f} s") if key == "wall_s" else (lambda v: f"{_mb(v)} MB")
        lines.append(f"| {key} | {unit(p)} | {unit(x)} | {(p - x) / x:+.0%} | {'yes' if ok else 'NO'} |")
    return "\n".join(lines + [""])


def report(configfile: str | Path, throughputs_file: str | Path, out_dir: str | Path, run: str | Path = ".",
           targets: Sequence[str] = ("all",), title: str | None = None) -> tuple[str, bool]:
    """Write measured.md (+ .json) for a finished run with the prediction beside it; return text, all within."""
    from splade_rescale.costs.inputs import load_throughputs

    run, out_dir = Path(run), Path(out_dir)
    m = measured(configfile, run, targets)
    cores = _cores_of(experiment_folder(load_plan_config(configfile), run))
    throughputs = load_throughputs(throughputs_file)
    p = predict(load_plan_config(configfile), throughputs, dry_run_jobs(configfile, targets, run), cores, run,
                m["start_bytes"])
    rows = comparison(p, m)
    text = "\n".join([render_measured(m, title or f"Measured: {configfile}, CPU, {cores} cores, "
                                       f"{datetime.date.today().isoformat()}"),
                      render_comparison(rows, cores, str(throughputs_file))])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "measured.md").write_text(text)
    (out_dir / "measured.json").write_text(json.dumps({"measured": m, "predicted": p}, indent=1) + "\n")
    return text, all(ok for *_, ok in rows)


def predict_config(configfile: str | Path, throughputs: Mapping[str, Any], cores: int,
                   targets: Sequence[str] = ("all",), workdir: str | Path = ".") -> dict[str, Any]:
    """The CPU run of a config on ``cores`` cores, before it starts (``plan --cores``)."""
    return predict(load_plan_config(configfile), throughputs, dry_run_jobs(configfile, targets, workdir), cores,
                   workdir)


def render_prediction(p: Mapping[str, Any], cores: int, cpu: Mapping[str, Any]) -> str:
    return "\n".join([
        f"## CPU run on {cores} cores (throughputs `cpu`: {cpu.get('machine')}, {cpu.get('date')})", "",
        f"{p['jobs']} jobs; predicted wall {p['wall_s']:,.0f} s ({p['wall_s'] / 3600:.2f} h), "
        f"{p['core_s'] / 3600:.2f} core-hours; disk of results/<experiment>/: peak {_mb(p['peak_bytes'])} MB, "
        f"final {_mb(p['final_bytes'])} MB.", "",
        "Model: per rule, seconds = fixed + rate x units (fitted across a measured run's jobs) + Snakemake's "
        "per-job overhead; jobs list-scheduled on the cores by their threads and dependencies, longest remaining "
        "path first; outputs land when a job ends and encoded shards go when their index exists.", ""])
