rule evaluate:
    input:
        run="results/runs/{backbone}/{variant}/{dataset}.trec",
        run_stats="results/runs/{backbone}/{variant}/{dataset}.stats.json",
        corpus_stats=lambda w: f"results/encoded/{w.backbone}/{w.variant}/corpora/{CORPUS_OF[w.dataset]}.stats.json",
        query_stats="results/encoded/{backbone}/{variant}/queries/{dataset}.jsonl.stats.json",
        index=lambda w: f"results/indexes/{w.backbone}/{w.variant}/{CORPUS_OF[w.dataset]}",
        manifest="results/models/{backbone}/{variant}/manifest.json",
    output:
        metrics="results/metrics/{backbone}/{variant}/{dataset}.json",
        qrels="results/metrics/{backbone}/{variant}/{dataset}.qrels",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
    log:
        "results/logs/evaluate/{backbone}.{variant}.{dataset}.log",
    benchmark:
        "results/benchmarks/evaluate/{backbone}.{variant}.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale evaluate --run {input.run} --run-stats {input.run_stats} --name {wildcards.dataset} "
        "--dataset {params.dataset:q} --corpus-stats {input.corpus_stats} --query-stats {input.query_stats} "
        "--index {input.index} --training-manifest {input.manifest} --label backbone={wildcards.backbone} "
        "--label variant={wildcards.variant} --out {output.metrics} --qrels-out {output.qrels} > {log} 2>&1"


rule evaluate_bm25:
    input:
        run="results/runs/bm25/{dataset}.trec",
        run_stats="results/runs/bm25/{dataset}.stats.json",
        index=lambda w: f"results/indexes/bm25/{CORPUS_OF[w.dataset]}",
    output:
        metrics="results/metrics/bm25/{dataset}.json",
        qrels="results/metrics/bm25/{dataset}.qrels",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
    log:
        "results/logs/evaluate/bm25.{dataset}.log",
    benchmark:
        "results/benchmarks/evaluate/bm25.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale evaluate --run {input.run} --run-stats {input.run_stats} --name {wildcards.dataset} "
        "--dataset {params.dataset:q} --index {input.index} --label backbone=bm25 --label variant=bm25 "
        "--out {output.metrics} --qrels-out {output.qrels} > {log} 2>&1"
