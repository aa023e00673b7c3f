TRAIN_DATA = config["training"]["data"]
MINED = TRAIN_DATA["source"] == "beir_local" and TRAIN_DATA.get("negatives") == "bm25"


rule mine_negatives:
    """BM25 hard negatives for a local BEIR-format train split (Pyserini), mined once."""
    output:
        "results/training/examples.jsonl",
    params:
        data=as_json(TRAIN_DATA),
    threads: 2
    log:
        "results/logs/mine_negatives.log",
    benchmark:
        "results/benchmarks/mine_negatives.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale mine-negatives --data {params.data:q} --threads {threads} --out {output} > {log} 2>&1"


# results/models/{name}/reference/ of a reference model matches train's paths too.
ruleorder: fetch_reference_model > train


rule train:
    input:
        init=lambda w: f"results/models/{w.backbone}/{split_run(w.variant)[0]}/init",  # shared by its seeds
        examples=("results/training/examples.jsonl" if MINED  # other sources: prepared in data.smk
                  else lambda w: PREPARED_EXAMPLES.get((w.backbone, w.variant), [])),
    output:
        manifest="results/models/{backbone}/{variant}/manifest.json",
        model=directory("results/models/{backbone}/{variant}/final"),
        log_csv="results/models/{backbone}/{variant}/train_log.csv",
    params:
        recipe=lambda w: as_json(resolve_recipe(config, w.backbone, w.variant)),
        data=as_json(TRAIN_DATA),
        examples=lambda w, input: f"--{'examples' if MINED else 'prepared'} {input.examples}" if input.examples else "",
        # a param, not an output: it outlives a failed job, with the log rows up to each checkpoint
        checkpoints="results/models/{backbone}/{variant}/checkpoints",
        launcher=lambda w, resources: training_launcher(resources.gpu),
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: train_gpus(w.backbone),
    log:
        "results/logs/train/{backbone}.{variant}.log",
    benchmark:
        "results/benchmarks/train/{backbone}.{variant}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "{params.launcher} train --init {input.init} --recipe {params.recipe:q} --data {params.data:q} "
        "{params.examples} --device \"$SPLADE_RESCALE_DEVICE\" --threads {threads} --checkpoints {params.checkpoints} "
        "--final {output.model} --log-csv {output.log_csv} --manifest {output.manifest} > {log} 2>&1"
