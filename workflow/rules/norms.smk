rule norms_backbone:
    input:
        model="results/backbones/{backbone}/model",
        probe=[config["probe"]["queries"], config["probe"]["passages"]],
    output:
        "results/norms/{backbone}.json",
    params:
        probe=as_json(config["probe"]),
    log:
        "results/logs/norms/{backbone}.log",
    benchmark:
        "results/benchmarks/norms/{backbone}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale measure-norms --model {input.model} --probe {params.probe:q} --out {output} "
        "--label backbone={wildcards.backbone} --label variant=backbone > {log} 2>&1"


rule norms_variant:
    wildcard_constraints:
        variant=VARIANT_PATTERN,  # a variant's, shared by its seeds' runs
    input:
        model="results/models/{backbone}/{variant}/init",
        probe=[config["probe"]["queries"], config["probe"]["passages"]],
    output:
        "results/norms/{backbone}/{variant}.json",
    params:
        probe=as_json(config["probe"]),
    log:
        "results/logs/norms/{backbone}.{variant}.log",
    benchmark:
        "results/benchmarks/norms/{backbone}.{variant}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale measure-norms --model {input.model} --probe {params.probe:q} --out {output} "
        "--label backbone={wildcards.backbone} --label variant={wildcards.variant} > {log} 2>&1"


rule norms_table:
    input:
        norm_files(),
    output:
        md="results/tables/norms.md",
        csv="results/tables/norms.csv",
    log:
        "results/logs/norms_table.log",
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale norms-table --inputs {input} --md {output.md} --csv {output.csv} > {log} 2>&1"
