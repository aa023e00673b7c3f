from splade_rescale.rule_params import evaluation_spec


rule evaluate:
    input:
        run=res("runs/{backbone}/{run}/{dataset}.trec"),
        run_stats=res("runs/{backbone}/{run}/{dataset}.stats.json"),
        corpus_stats=lambda w: res(f"encoded/{w.backbone}/{w.run}/corpora/{CORPUS_OF[w.dataset]}.stats.json"),
        # efficiency figures only; the query vectors themselves reach the run through the search's params
        query_stats=ancient(res("encoded/{backbone}/{run}/queries/{dataset}.jsonl.stats.json")),
        index=lambda w: res(f"indexes/{w.backbone}/{w.run}/{CORPUS_OF[w.dataset]}"),
        manifest=judged_manifest,
        local=evaluation_files,
        settings=lambda w: settings(f"evaluation.{w.dataset}"),
    output:
        metrics=res("metrics/{backbone}/{run}/{dataset}.json"),
        qrels=res("metrics/{backbone}/{run}/{dataset}.qrels"),
    params:
        dataset=lambda w: as_json(evaluation_spec(w.dataset, config["datasets"][w.dataset])),
    log:
        res("logs/evaluate/{backbone}.{run}.{dataset}.log"),
    benchmark:
        res("benchmarks/evaluate/{backbone}.{run}.{dataset}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale evaluate --run {input.run} --run-stats {input.run_stats} --name {wildcards.dataset} "
        "--dataset {params.dataset:q} --corpus-stats {input.corpus_stats} --query-stats {input.query_stats} "
        "--index {input.index} --training-manifest {input.manifest} --label backbone={wildcards.backbone} "
        "--label variant={wildcards.run} --out {output.metrics} --qrels-out {output.qrels} > {log} 2>&1"


rule evaluate_bm25:
    input:
        run=res("runs/bm25/{dataset}.trec"),
        run_stats=res("runs/bm25/{dataset}.stats.json"),
        index=lambda w: res(f"indexes/bm25/{CORPUS_OF[w.dataset]}"),
        local=evaluation_files,
        settings=lambda w: settings(f"evaluation.{w.dataset}"),
    output:
        metrics=res("metrics/bm25/{dataset}.json"),
        qrels=res("metrics/bm25/{dataset}.qrels"),
    params:
        dataset=lambda w: as_json(evaluation_spec(w.dataset, config["datasets"][w.dataset])),
    log:
        res("logs/evaluate/bm25.{dataset}.log"),
    benchmark:
        res("benchmarks/evaluate/bm25.{dataset}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale evaluate --run {input.run} --run-stats {input.run_stats} --name {wildcards.dataset} "
        "--dataset {params.dataset:q} --index {input.index} --label backbone=bm25 --label variant=bm25 "
        "--out {output.metrics} --qrels-out {output.qrels} > {log} 2>&1"
