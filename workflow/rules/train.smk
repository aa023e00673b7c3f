from splade_rescale.data.corpora import dataset_files
from splade_rescale.retrieval.lucene import MEM_MB
from splade_rescale.rule_params import training_recipe, verdict_floors


rule mine_negatives:
    """BM25 hard negatives for a local BEIR-format train split (Pyserini), mined once."""
    input:
        dataset_files(TRAIN_DATA, "corpus", "queries", "qrels") if MINED else [],
    output:
        res("training/examples.jsonl"),
    params:
        data=as_json(TRAIN_DATA),
    threads: 2
    resources:
        mem_mb=MEM_MB["mine_negatives"],
    log:
        res("logs/mine_negatives.log"),
    benchmark:
        res("benchmarks/mine_negatives.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale mine-negatives --data {params.data:q} --threads {threads} --mem-mb {resources.mem_mb} --out {output} "
        "> {log} 2>&1"


# results/{experiment}/models/{name}/published/ of a published model matches the training paths too.
ruleorder: fetch_published_model > judge_training
ruleorder: fetch_published_model > train


rule train:
    """One training run: the model, its log, its per-step non-zeros and its record. Params hold the
    recipe's trajectory keys only: logging and checkpoint cadence come through SPLADE_RESCALE_RUNTIME
    (common.smk), the collapse floors go to judge_training. With train_gpus > 1 the command starts
    itself under torchrun (DDP)."""
    input:
        init=lambda w: res(f"models/{w.backbone}/{split_run(w.run)[0]}/init"),  # shared by its seeds
        examples=(res("training/examples.jsonl") if MINED  # other sources: prepared in data.smk
                  else lambda w: PREPARED_EXAMPLES.get((w.backbone, w.run), [])),
        streamed=streamed_inputs,
    output:
        record=res("models/{backbone}/{run}/training.json"),
        series=res("models/{backbone}/{run}/sparsity.csv"),
        model=directory(res("models/{backbone}/{run}/final")),
        log_csv=res("models/{backbone}/{run}/train_log.csv"),
    params:
        recipe=lambda w: as_json(training_recipe(resolve_recipe(config, w.backbone, w.run))),
        data=as_json(TRAIN_DATA),
        examples=lambda w, input: f"--{'examples' if MINED else 'prepared'} {input.examples}" if input.examples else "",
        # a param, not an output: it outlives a failed job, with the log rows up to each checkpoint
        checkpoints=res("models/{backbone}/{run}/checkpoints"),
    threads: THREADS["train"]
    priority: lambda w: TRAIN_JOB_PRIORITY[w.backbone]
    resources:
        gpu=lambda w: train_gpus(w.backbone),
        mem_mb=lambda w: train_mem_mb(w.backbone),
    log:
        res("logs/train/{backbone}.{run}.log"),
    benchmark:
        res("benchmarks/train/{backbone}.{run}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale train --gpus {resources.gpu} --init {input.init} --recipe {params.recipe:q} "
        "--data {params.data:q} {params.examples} --runtime \"$SPLADE_RESCALE_RUNTIME\" "
        "--run-key {wildcards.backbone}/{wildcards.run} --device \"$SPLADE_RESCALE_DEVICE\" --threads {threads} "
        "--checkpoints {params.checkpoints} --final {output.model} --log-csv {output.log_csv} "
        "--record {output.record} --series {output.series} > {log} 2>&1"


localrules:
    judge_training,


rule judge_training:
    """The sparsity verdict on a finished run under the collapse floors (splade_rescale.training.verdict):
    seconds on the host, so new floors rerun this and the tables, not the training."""
    input:
        record=res("models/{backbone}/{run}/training.json"),
        series=res("models/{backbone}/{run}/sparsity.csv"),
    output:
        res("models/{backbone}/{run}/manifest.json"),
    params:
        floors=lambda w: as_json(verdict_floors(resolve_recipe(config, w.backbone, w.run))),
    log:
        res("logs/judge_training/{backbone}.{run}.log"),
    benchmark:
        res("benchmarks/judge_training/{backbone}.{run}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale judge-training --record {input.record} --series {input.series} --floors {params.floors:q} "
        "--out {output} > {log} 2>&1"
