"""Peak memory of corpus streaming + encoding and of Lucene impact indexing as the corpus grows.

The claim under test: the pipeline's per-corpus stages use memory that stays roughly flat as
the corpus grows (documents are streamed, encoded in bounded chunks, written in shards;
Anserini indexes from the shard files), so a 8.8M-passage MS MARCO run needs no more RAM
than a small BEIR set, up to a few O(n) bookkeeping structures (the ids of the documents
seen, to catch duplicates: tens of bytes per document).

What runs, for each corpus size (default 25k, 50k, 100k, 200k documents):

1. a SYNTHETIC BEIR folder: random texts over a made-up vocabulary of 4,091 random words
   (title of 2-6 words + 30-60 words per document), a handful of queries and qrels
   (load_dataset needs them);
2. ``splade-rescale encode`` (the real CLI stage of the workflow's encode rule: the 20 queries,
   then the corpus) with a tiny
   random-init BERT masked-LM (2 layers, hidden 32) and a word-level tokenizer over that
   vocabulary (4,096 tokens with the specials: a 30k vocabulary would spend the CPU time in
   the MLM head's matmul), identity head transform and a negative decoder bias so that vectors
   are sparse (~100 non-zeros per document). Tiny so that it is fast: the point is the memory
   of the streaming/sorting/sharding code, not of the model (whose activations are bounded by
   the batch size anyway);
3. ``splade_rescale.retrieval.lucene.run_build_impact_index`` (what ``splade-rescale index`` runs) on the
   resulting JsonVectorCollection, in-process through pyjnius, so the process RSS includes the
   JVM; the JVM's max heap (-Xmx: ``SPLADE_RESCALE_JVM_HEAP`` or the JVM default, 1/4 of RAM) and
   its peak heap use (sum of the heap pools' peak usage) are reported separately.

Each stage runs in a fresh subprocess that reports its own peak RSS (``VmHWM`` of
``/proc/self/status``, read at exit; see ``PEAK_RSS``). A "floor" stage (python + torch + transformers + the package
imported, nothing else) is measured once for reference.

    python benchmarks/bench_scale.py                       # 25k..200k, prints a Markdown table
    python benchmarks/bench_scale.py --sizes 25000 50000 --keep /tmp/scale --jvm-heap 1g

Measured on the 2-core AVX2 development VM: see benchmarks/README.md ("Memory vs corpus size").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent

# Every measured process reports its own peak RSS (VmHWM of /proc/self/status) at exit. The
# parent's os.wait4 / RUSAGE_CHILDREN ru_maxrss would not do: on Linux a child's ru_maxrss keeps
# the high-water mark of the forked copy of the parent from before exec (here ~400 MiB of torch).
PEAK_RSS = r"""
import atexit, sys
def _report_peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("VMHWM_KB " + line.split()[1], file=sys.stderr, flush=True)
atexit.register(_report_peak_rss)
"""
ENCODE_DRIVER = PEAK_RSS + "from splade_rescale.cli import main\nsys.exit(main(sys.argv[1:]))\n"
INDEX_DRIVER = PEAK_RSS + r"""
import json, sys
from splade_rescale.retrieval.lucene import run_build_impact_index, _autoclass
stats = run_build_impact_index(sys.argv[1], sys.argv[2], int(sys.argv[3]))
runtime = _autoclass("java.lang.Runtime").getRuntime()
mf = _autoclass("java.lang.management.ManagementFactory")
heap_type = _autoclass("java.lang.management.MemoryType").HEAP
pools = mf.getMemoryPoolMXBeans()
peak = sum(p.getPeakUsage().getUsed() for p in pools.toArray() if p.getType() == heap_type)
stats["jvm_max_heap_bytes"] = int(runtime.maxMemory())
stats["jvm_committed_heap_bytes"] = int(runtime.totalMemory())
stats["jvm_peak_heap_used_bytes"] = int(peak)
print("RESULT " + json.dumps(stats))
"""

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4
N_WORDS = 4091  # + 5 special tokens = a 4,096-token vocabulary
FLOOR_DRIVER = PEAK_RSS + "import torch, transformers, splade_rescale.retrieval.encode, splade_rescale.data.datasets\n"


def run_measured(cmd: list[str], env: dict[str, str], log: Path) -> tuple[int, float, float]:
    """Run ``cmd`` (a driver with PEAK_RSS) in a fresh process; return (exit code, peak RSS MiB, wall s)."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - t0
    peaks = [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("VMHWM_KB ")]
    return rc, (peaks[-1] / 1024 if peaks else float("nan")), seconds


def make_corpus(folder: Path, n_docs: int, seed: int = 0) -> None:
    """A SYNTHETIC BEIR folder: corpus.jsonl (random-vocabulary texts), queries.jsonl, qrels/test.tsv."""
    rng = random.Random(seed)
    vocab = synthetic_words()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as fh:
        for i in range(n_docs):
            title = " ".join(rng.choices(vocab, k=rng.randint(2, 6)))
            text = " ".join(rng.choices(vocab, k=rng.randint(30, 60)))
            fh.write(json.dumps({"_id": f"doc{i}", "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as fq, open(folder / "qrels/test.tsv", "w") as fr:
        fr.write("query-id\tcorpus-id\tscore\n")
        for q in range(20):
            fq.write(json.dumps({"_id": f"q{q}", "text": " ".join(rng.choices(vocab, k=5))}) + "\n")
            fr.write(f"q{q}\tdoc{rng.randrange(n_docs)}\t1\n")


def synthetic_words(n: int = N_WORDS, seed: int = 0) -> list[str]:
    """A made-up vocabulary: ``n`` distinct random lowercase words."""
    rng, words = random.Random(seed), dict.fromkeys([])
    while len(words) < n:
        words["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9)))] = None
    return list(words)


def make_model(folder: Path, decoder_bias: float) -> None:
    """A tiny random-init BERT masked-LM whose word-level tokenizer covers the synthetic vocabulary."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    from splade_rescale.model.heads import init_identity_transform

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({w: i for i, w in enumerate(synthetic_words(), len(SPECIAL_TOKENS))})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        model_max_length=512)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, pad_token_id=0)
    model = BertForMaskedLM(config)
    init_identity_transform(model, decoder_bias)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def bench(sizes: list[int], work: Path, threads: int, max_length: int, batch_size: int, decoder_bias: float,
          jvm_heap: str | None) -> list[dict[str, Any]]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if jvm_heap:
        env["SPLADE_RESCALE_JVM_HEAP"] = jvm_heap
    model = work / "model"
    make_model(model, decoder_bias)
    rc, floor, _ = run_measured([sys.executable, "-c", FLOOR_DRIVER], env, work / "floor.log")
    assert rc == 0, (work / "floor.log").read_text()[-2000:]
    rows = []
    for n in sizes:
        data = work / f"corpus-{n}"
        make_corpus(data, n)
        spec = {"source": "beir_local", "path": str(data), "split": "test", "metrics": "beir"}
        encoding = {"head": "fused", "precision": "fp32", "doc_max_length": max_length, "batch_size": batch_size,
                    "quantization": 100, "shard_size": 100_000, "index_budget_gb": None, "max_active_dims": None}
        encoded = work / f"encoded-{n}"
        coll = encoded / "corpus"
        cmd = [sys.executable, "-c", ENCODE_DRIVER,
               "encode-corpus", "--model", str(model), "--name", f"synthetic-{n}", "--corpus", json.dumps(spec),
               "--encoding", json.dumps(encoding), "--device", "cpu", "--threads", str(threads), "--out", str(coll)]
        rc, enc_rss, enc_s = run_measured(cmd, env, work / f"encode-{n}.log")
        assert rc == 0, (work / f"encode-{n}.log").read_text()[-3000:]
        stats = json.loads((encoded / "corpus.stats.json").read_text())
        coll_mb = sum(p.stat().st_size for p in coll.glob("*.jsonl.gz")) / 2**20  # gzipped shards
        index = work / f"index-{n}"
        rc, idx_rss, idx_s = run_measured([sys.executable, "-c", INDEX_DRIVER, str(coll), str(index), str(threads)],
                                          env, work / f"index-{n}.log")
        log_text = (work / f"index-{n}.log").read_text()
        assert rc == 0, log_text[-3000:]
        istats = json.loads(next(line for line in log_text.splitlines() if line.startswith("RESULT "))[7:])
        assert istats["n_docs"] == n, istats
        rows.append({"docs": n, "corpus_mb": round((data / "corpus.jsonl").stat().st_size / 2**20, 1),
                     "encode_peak_rss_mib": round(enc_rss), "encode_s": round(enc_s, 1),
                     "mean_nnz_per_doc": round(stats["mean_nnz_per_doc"], 1), "collection_mb": round(coll_mb, 1),
                     "index_peak_rss_mib": round(idx_rss), "index_s": round(idx_s, 1),
                     "index_mb": round(istats["index_size_bytes"] / 2**20, 1),
                     "jvm_max_heap_mib": round(istats["jvm_max_heap_bytes"] / 2**20),
                     "jvm_peak_heap_used_mib": round(istats["jvm_peak_heap_used_bytes"] / 2**20),
                     "floor_rss_mib": round(floor)})
        print(json.dumps(rows[-1]), flush=True)
        shutil.rmtree(encoded)  # keep the disk use of the largest size only
        shutil.rmtree(index)
        shutil.rmtree(data)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| documents (synthetic) | corpus MiB | encode peak RSS MiB | encode s | nnz/doc | collection MiB "
            "| index peak RSS MiB (incl. JVM) | JVM heap peak / max MiB | index s | index MiB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(f"| {r['docs']:,} | {r['corpus_mb']} | {r['encode_peak_rss_mib']} | {r['encode_s']} | "
                     f"{r['mean_nnz_per_doc']} | {r['collection_mb']} | {r['index_peak_rss_mib']} | "
                     f"{r['jvm_peak_heap_used_mib']} / {r['jvm_max_heap_mib']} | {r['index_s']} | {r['index_mb']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[25_000, 50_000, 100_000, 200_000])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-length", type=int, default=64, help="doc_max_length of the encoding")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--decoder-bias", type=float, default=-0.36, help="sparsity of the random-init head")
    p.add_argument("--jvm-heap", help="-Xmx for the indexing JVM (SPLADE_RESCALE_JVM_HEAP); default: JVM default")
    p.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-scale."))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        rows = bench(sorted(a.sizes), work, a.threads, a.max_length, a.batch_size, a.decoder_bias, a.jvm_heap)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nfloor (python + torch + transformers + package imported): {rows[0]['floor_rss_mib']} MiB RSS; "
          f"total {time.perf_counter() - t0:.0f} s; threads {a.threads}; doc_max_length {a.max_length}\n")
    print(markdown(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
