rule evaluate:
    input:
        run="results/runs/{backbone}/{variant}/{dataset}.trec",
        stats="results/runs/{backbone}/{variant}/{dataset}.stats.json",
        corpus="results/encoded/{backbone}/{variant}/{dataset}/corpus",
        queries="results/encoded/{backbone}/{variant}/{dataset}/queries.jsonl",
        index="results/indexes/{backbone}/{variant}/{dataset}",
        manifest="results/models/{backbone}/{variant}/manifest.json",
    output:
        "results/metrics/{backbone}/{variant}/{dataset}.json",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
    log:
        "results/logs/evaluate/{backbone}.{variant}.{dataset}.log",
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale evaluate --run {input.run} --run-stats {input.stats} --dataset {params.dataset:q} "
        "--corpus-dir {input.corpus} --queries {input.queries} --index {input.index} "
        "--training-manifest {input.manifest} --out {output} > {log} 2>&1"


rule evaluate_bm25:
    input:
        run="results/runs/bm25/{dataset}.trec",
        stats="results/runs/bm25/{dataset}.stats.json",
        index="results/indexes/bm25/{dataset}",
    output:
        "results/metrics/bm25/{dataset}.json",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
    log:
        "results/logs/evaluate/bm25.{dataset}.log",
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale evaluate --run {input.run} --run-stats {input.stats} --dataset {params.dataset:q} "
        "--index {input.index} --out {output} > {log} 2>&1"
