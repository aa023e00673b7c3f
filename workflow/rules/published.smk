from splade_rescale.rule_params import published_model_spec


rule fetch_published_model:
    """A published SPLADE checkpoint (published_models), in place of a trained model: the same
    encode, index, retrieve and evaluate rules then run on it."""
    input:
        published_checkpoint_files,
    output:
        manifest=res("models/{published}/published/manifest.json"),
        model=directory(res("models/{published}/published/final")),
    params:
        spec=lambda w: as_json(published_model_spec(config["published_models"][w.published])),
        out_dir=lambda w, output: Path(output.manifest).parent,
    log:
        res("logs/fetch_published_model/{published}.log"),
    benchmark:
        res("benchmarks/fetch_published_model/{published}.tsv")
    retries: 2
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale fetch-published --name {wildcards.published} --spec {params.spec:q} "
        "--out {params.out_dir} > {log} 2>&1"
