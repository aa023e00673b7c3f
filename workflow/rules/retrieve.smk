rule impact_retrieve:
    input:
        index=lambda w: f"results/indexes/{w.backbone}/{w.variant}/{CORPUS_OF[w.dataset]}",
        queries="results/encoded/{backbone}/{variant}/queries/{dataset}.jsonl",
    output:
        run="results/runs/{backbone}/{variant}/{dataset}.trec",
        stats="results/runs/{backbone}/{variant}/{dataset}.stats.json",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
        k=config["retrieval"]["k"],
    threads: config["retrieval"]["threads"]
    log:
        "results/logs/retrieve/{backbone}.{variant}.{dataset}.log",
    benchmark:
        "results/benchmarks/retrieve/{backbone}.{variant}.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale retrieve --index {input.index} --queries {input.queries} --name {wildcards.dataset} --dataset {params.dataset:q} "
        "--k {params.k} --threads {threads} --tag {wildcards.backbone}.{wildcards.variant} "
        "--run {output.run} --stats {output.stats} > {log} 2>&1"


rule bm25_retrieve:
    input:
        index=lambda w: f"results/indexes/bm25/{CORPUS_OF[w.dataset]}",
    output:
        run="results/runs/bm25/{dataset}.trec",
        stats="results/runs/bm25/{dataset}.stats.json",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
        k=config["retrieval"]["k"],
    threads: config["retrieval"]["threads"]
    log:
        "results/logs/retrieve/bm25.{dataset}.log",
    benchmark:
        "results/benchmarks/retrieve/bm25.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale bm25-retrieve --index {input.index} --name {wildcards.dataset} --dataset {params.dataset:q} --k {params.k} "
        "--threads {threads} --run {output.run} --stats {output.stats} > {log} 2>&1"
