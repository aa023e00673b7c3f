from splade_rescale.rule_params import reference_model_spec


rule fetch_reference_model:
    """A published SPLADE checkpoint (reference_models), in place of a trained model: the same
    encode, index, retrieve and evaluate rules then run on it."""
    output:
        manifest=res("models/{ref}/reference/manifest.json"),
        model=directory(res("models/{ref}/reference/final")),
    params:
        spec=lambda w: as_json(reference_model_spec(config["reference_models"][w.ref])),
        out_dir=lambda w, output: Path(output.manifest).parent,
    log:
        res("logs/fetch_reference_model/{ref}.log"),
    benchmark:
        res("benchmarks/fetch_reference_model/{ref}.tsv")
    retries: 2
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale fetch-reference --name {wildcards.ref} --spec {params.spec:q} "
        "--out {params.out_dir} > {log} 2>&1"
