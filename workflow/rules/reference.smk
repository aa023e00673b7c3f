rule fetch_reference_model:
    """A published SPLADE checkpoint (reference_models), in place of a trained model: the same
    encode, index, retrieve and evaluate rules then run on it."""
    output:
        manifest="results/models/{ref}/reference/manifest.json",
        model=directory("results/models/{ref}/reference/final"),
    params:
        spec=lambda w: as_json(config["reference_models"][w.ref]),
    log:
        "results/logs/fetch_reference_model/{ref}.log",
    benchmark:
        "results/benchmarks/fetch_reference_model/{ref}.tsv"
    retries: 2
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale fetch-reference --name {wildcards.ref} --spec {params.spec:q} "
        "--out results/models/{wildcards.ref}/reference > {log} 2>&1"
