"""The Snakemake workflow: the paper's DAG, lint, and config errors before any job runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from support.workflow import WITH_BIN, job_counts, planned_jobs, snakemake


def test_paper_dry_run_shows_the_whole_experiment():
    """Corpus work is planned once per corpus: MS MARCO dev, DL19 and DL20 share one corpus.

    The SPLADE++ ED published model is fetched and goes through the same chain, untrained.
    """
    proc = snakemake("all", "-n", "--forceall", "--cores", "8")
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = job_counts(proc.stdout)
    backbones, variants, published, datasets, corpora = 9, 2, 1, 16, 14
    trained = backbones * variants
    models = trained + published
    assert counts["fetch_backbone"] == backbones
    assert counts["fetch_published_model"] == published
    assert counts["norms_backbone"] == backbones
    assert counts["rescale_head"] == trained
    assert counts["norms_variant"] == trained
    assert counts["train"] == trained  # no training for the published model
    assert counts["impact_index"] == models * corpora
    # MS MARCO in 3 parts, FEVER, Climate-FEVER, HotpotQA and DBPedia in 2 (data.corpora.PART_DOCS), joined
    assert counts["encode_corpus"] + counts["join_corpus_parts"] == models * corpora
    assert counts["join_corpus_parts"] == models * 5 and counts["encode_corpus_part"] == models * 11
    assert counts["encode_queries"] == models  # one job per model for all its query sets
    for rule in ("impact_retrieve", "evaluate"):
        assert counts[rule] == models * datasets, rule
    assert counts["bm25_index"] == corpora
    # data preparation on the CPU: each corpus's docs store, each ir_datasets query set, the
    # training triples' caches once, and the examples of the one stream all 18 recipes read
    assert counts["prepare_corpus"] == corpora and counts["prepare_queries"] == datasets
    assert counts["prepare_training_source"] == 1 and counts["prepare_training_data"] == 1
    for rule in ("bm25_retrieve", "evaluate_bm25"):
        assert counts[rule] == datasets, rule
    assert counts["tables"] == 1
    msmarco = re.findall(r"results/paper/indexes/bert-base-uncased/baseline/msmarco-passage\b", proc.stdout)
    assert msmarco and "results/paper/indexes/bert-base-uncased/baseline/dl19" not in proc.stdout
    assert "results/paper/metrics/splade-pp-ed/published/arguana.json" in proc.stdout
    assert "results/paper/models/splade-pp-ed/published/init" not in proc.stdout


def test_the_encode_jobs_are_the_same_on_one_gpu_and_on_eight():
    """A document's vector depends on the document alone, so a big corpus is cut into the same parts
    whatever the GPUs: a run moved to more GPUs (or to SLURM) reruns no finished encode."""
    encodes = {}
    for gpus in (1, 8):
        proc = snakemake("all", "-n", "--forceall", "--cores", "8", "--resources", f"gpu={gpus}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        encodes[gpus] = sorted(tuple(j["output"]) for j in planned_jobs(proc.stdout) if j["rule"].startswith("encode_"))
    assert encodes[1] == encodes[8] and len(encodes[1]) > 19 * 14


def test_miniature_dry_run_plans_the_factor_sweep_on_both_backbones(tmp_path):
    """config/miniature.yaml: 2 backbones x 7 variants (four constant factors, match_reference, a fixed
    and a reference logit shift), the full SciFact test set and the DL19/DL20 pool, the sweep table and figure."""
    import yaml

    config = yaml.safe_load((REPO / "config/miniature.yaml").read_text())
    assert "subset" not in config["datasets"]["scifact"]  # all 5,183 documents, all 300 queries
    policies = [spec["policy"] for spec in config["variants"].values()]
    assert policies.count("constant") == 4 and policies.count("match_reference") == 1
    shifts = sorted(str(spec["shift"]) for spec in config["variants"].values() if "shift" in spec)
    assert shifts == ["15", "reference"]
    for name in ("Snakefile", "workflow", "config", "resources", "envs"):  # apart from a results/ in use here
        (tmp_path / name).symlink_to(REPO / name)
    proc = snakemake("all", "-n", "--forceall", "--cores", "2", "--configfile", "config/miniature.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = job_counts(proc.stdout)
    models, corpora, datasets = 2 * 7, 2, 3
    assert counts["train"] == counts["rescale_head"] == models
    assert counts["encode_corpus"] == counts["impact_index"] == models * corpora
    assert counts["impact_retrieve"] == counts["evaluate"] == models * datasets
    assert counts["mine_negatives"] == 1 and counts["tables"] == counts["figures"] == 1
    for output in ("tables/factor_sweep.md", "figures/factor_sweep.png", "models/minilm-x16/matched/init",
                   "metrics/minilm/k64/scifact.json", "models/minilm-x16/shifted/init"):
        output = f"results/miniature/{output}"
        assert output in proc.stdout, output


def test_corpus_names_follow_the_documents_not_the_query_sets():
    from splade_rescale.data.corpora import corpora

    datasets = {
        "msmarco-dev": {"source": "ir_datasets", "id": "msmarco-passage/dev/small", "metrics": "msmarco"},
        "dl19": {"source": "ir_datasets", "id": "msmarco-passage/trec-dl-2019/judged", "metrics": "trec-dl"},
        "fiqa": {"source": "ir_datasets", "id": "beir/fiqa/test", "metrics": "beir"},
        "a": {"source": "trec_local", "corpus": "x/pool/corpus.jsonl.gz", "queries": "a.tsv", "qrels": "a.txt",
              "metrics": "trec-dl"},
        "b": {"source": "trec_local", "corpus": "x/pool/./corpus.jsonl.gz", "queries": "b.tsv", "qrels": "b.txt",
              "metrics": "trec-dl", "note": "same corpus, other queries"},
        "c": {"source": "trec_local", "corpus": "y/pool/corpus.jsonl.gz", "queries": "b.tsv", "qrels": "b.txt",
              "metrics": "trec-dl"},
        "a-sub": {"source": "trec_local", "corpus": "x/pool/corpus.jsonl.gz", "queries": "a.tsv", "qrels": "a.txt",
                  "metrics": "trec-dl", "subset": {"max_queries": 3, "max_judged_per_query": 2}},
    }
    of, specs = corpora(datasets)
    assert of["msmarco-dev"] == of["dl19"] == "msmarco-passage"
    assert specs["msmarco-passage"] == {"source": "ir_datasets", "id": "msmarco-passage"}
    assert of["fiqa"] == "beir-fiqa"
    assert of["a"] == of["b"] != of["c"]  # same file; a different file with the same folder name
    assert of["a"].startswith("pool-") and of["c"].startswith("pool-")
    assert of["a-sub"] == "a-sub" and "queries" in specs["a-sub"]  # a subset depends on its queries


def test_lint_is_clean():
    proc = snakemake("--lint")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_bad_config_stops_before_any_job(tmp_path):
    text = (REPO / "config/demo.yaml").read_text().replace("factor: 1/16", "factor: 0")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    proc = snakemake("all", "-n", "--cores", "1", "--configfile", str(bad))
    assert proc.returncode != 0
    assert "variants.rescaled.factor = 0" in proc.stderr + proc.stdout
    assert "bad.yaml" in proc.stderr + proc.stdout


def test_a_missing_local_published_model_is_said_first_in_one_line_naming_the_fix(tmp_path):
    """The demo without its model (a by-hand install that skipped it): the first line of the output says so and
    names the fix, before the DAG's errors (Snakemake ended on a misleading wildcard message), and a target
    that does not need the model still plans."""
    text = (REPO / "config/demo.yaml").read_text().replace("models/splade-tiny", "models/not-there")
    bad = tmp_path / "no-model.yaml"
    bad.write_text(text)
    proc = snakemake("all", "-n", "--cores", "1", "--configfile", str(bad))
    output = proc.stderr + proc.stdout
    assert proc.returncode != 0
    assert (proc.stdout or proc.stderr).splitlines()[0] == (
        "published_models.splade-tiny.path: no checkpoint at resources/demo/models/not-there (no config.json); point "
        "it at a saved SPLADE model folder (the demo's: `make demo-model`); errors after this follow from it")
    assert "`make demo-model`" in output
    other = snakemake("results/demo/metrics/bm25/scifact.json", "-n", "--cores", "1", "--configfile", str(bad))
    assert other.returncode == 0, other.stderr[-2000:]


def test_cli_help_names_every_command_and_each_command_has_help(capsys):
    """`splade-rescale --help` once crashed on a '%' in a command's summary (argparse %-formats help)."""
    from splade_rescale.cli import COMMANDS, main

    for argv in (["--help"], *([name, "--help"] for name in COMMANDS)):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0, argv
    text = capsys.readouterr().out
    assert all(name in text for name in COMMANDS)


def _make_recipe_pytest_args(target: str) -> list[str]:
    """The pytest options of the Makefile recipe line of ``target`` that runs pytest."""
    import shlex

    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    recipe = text[text.index(f"\n{target}:"):].split("\n\n")[0]
    line = next(x for x in recipe.splitlines() if "-m pytest" in x)
    return shlex.split(line.split("-m pytest", 1)[1].replace("$(CORES)", "2"))


def test_make_test_starts_the_demo_workflow_first(tmp_path: Path) -> None:
    """The demo's ten-minute workflow must start at once on one xdist worker: xdist's loadscope
    otherwise hands out the modules with the most tests first, and the demo (few tests) started
    minutes late and ran alone at the end, lengthening the parallel phase (docs/measurements.md).

    A miniature suite, run with the Makefile's options and the project's conftest: two modules with
    more tests than the demo's, each test recording its module and worker as it starts. Each
    worker's first record is the first scope it was handed, whatever the machine's load: no
    test waits for the other worker to start."""
    args = _make_recipe_pytest_args("test")
    assert {"--dist", "loadscope"} <= set(args)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text((REPO / "tests/conftest.py").read_text())
    body = ("import os\n\n"
            "def _record(name):\n"
            "    with open({log!r}, 'a') as f:\n"
            "        f.write(name + ' ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n\n")
    log = str(tmp_path / "started.txt")
    (tests / "workflow").mkdir()
    for module, n in (("test_aaa", 6), ("test_bbb", 5), ("workflow/test_demo_workflow", 2)):
        (tests / f"{module}.py").write_text(body.format(log=log) + "".join(
            f"def test_{i}():\n    _record('{module}')\n\n" for i in range(n)))
    proc = subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "tests"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = [line.split() for line in Path(log).read_text().splitlines()]  # appended in each worker's order
    assert len(records) == 13 and {worker for _, worker in records} == {"gw0", "gw1"}, records
    first = {}
    for module, worker in records:
        first.setdefault(worker, module)
    assert "workflow/test_demo_workflow" in first.values(), records  # one of the two workers' first tests


def test_a_results_folder_of_the_old_layout_stops_the_workflow_before_any_job(tmp_path):
    for name in ("Snakefile", "workflow", "config", "resources", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "results/tables").mkdir(parents=True)
    (tmp_path / "results/tables/beir.md").write_text("an old table")
    proc = snakemake("all", "-n", "--cores", "2", "--configfile", "config/demo.yaml", cwd=tmp_path)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "old layout" in line]
    assert len(lines) == 1 and "results/tables/" in lines[0] and "move it" in lines[0], proc.stderr[-2000:]
    assert (tmp_path / "results/tables/beir.md").read_text() == "an old table"


def test_report_needs_no_cores_even_where_a_gpu_is_visible(tmp_path):
    """`snakemake --report` runs no job and takes no --cores: the thread fitting of a run on one GPU
    machine must not ask for them. In an empty folder it gets as far as the DAG (and stops at a missing file)."""
    env = {**WITH_BIN, "CUDA_VISIBLE_DEVICES": "0"}
    proc = snakemake("--report", str(tmp_path / "report.html"), "-s", str(REPO / "Snakefile"),
                     "-d", str(tmp_path), "--configfile", str(REPO / "config/demo.yaml"), env=env)
    assert "--cores" not in proc.stderr, proc.stderr[-2000:]
    assert "Building DAG of jobs" in proc.stderr, proc.stderr[-2000:]
