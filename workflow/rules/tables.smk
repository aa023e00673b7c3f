# Per-backbone summaries, the paper's tables and figures, and what `snakemake --report` shows.
from splade_rescale.report.figures import FORMATS as FIGURE_FORMATS, figure_names
from splade_rescale.report.tables import FORMATS as TABLE_FORMATS, table_names
from splade_rescale.rule_params import figure_config, report_config


report: "../report/workflow.rst"


TABLE_NAMES = table_names(config)  # + factor_sweep when the config has > 2 constant factors
TABLE_FILES = [res(f"tables/{t}.{ext}") for t in TABLE_NAMES for ext in TABLE_FORMATS]
FIGURE_FILES = [res(f"figures/{f}.{ext}") for f in figure_names(config) for ext in FIGURE_FORMATS]
TABLE_TARGETS = TABLE_FILES + FIGURE_FILES


rule backbone_summary:
    """One backbone's whole chain: `snakemake results/{experiment}/summary/{backbone}.json` reruns just it."""
    input:
        lambda w: [res(f"backbones/{w.backbone}/manifest.json")] + backbone_targets(w.backbone)
        + [res(f"models/{w.backbone}/{run}/train_log.csv") for run in backbone_runs(w.backbone)],
    output:
        res("summary/{backbone}.json"),
    log:
        res("logs/summary/{backbone}.log"),
    benchmark:
        res("benchmarks/summary/{backbone}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale summary --backbone {wildcards.backbone} --inputs {input} --out {output} > {log} 2>&1"


rule tables:
    input:
        summaries=expand(res("summary/{backbone}.json"), backbone=BACKBONES),
        bm25=expand(res("metrics/bm25/{dataset}.json"), dataset=DATASETS),
        published=published_metrics(),
        norms=res("tables/norms.csv"),
    output:
        # HTML tables go into `snakemake --report`, with workflow/report/tables_{name}.rst as caption
        [
            report(f, caption=f"../report/tables_{Path(f).stem}.rst", category="Tables")
            if f.endswith(".html")
            else f
            for f in TABLE_FILES
        ],
    params:
        config=as_json(report_config(config)),
        out_dir=lambda w, output: Path(output[0]).parent,
    log:
        res("logs/tables.log"),
    benchmark:
        res("benchmarks/tables.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale tables --config {params.config:q} --summaries {input.summaries} "
        "--bm25 {input.bm25} --published {input.published} --norms-csv {input.norms} "
        "--out-dir {params.out_dir} > {log} 2>&1"


rule figures:
    input:
        summaries=expand(res("summary/{backbone}.json"), backbone=BACKBONES),
    output:
        # PNG figures go into the report, with workflow/report/figures_{name}.rst as caption
        [
            report(f, caption=f"../report/figures_{Path(f).stem}.rst", category="Figures")
            if f.endswith(".png")
            else f
            for f in FIGURE_FILES
        ],
    params:
        config=as_json(figure_config(config)),
        out_dir=lambda w, output: Path(output[0]).parent,
    log:
        res("logs/figures.log"),
    benchmark:
        res("benchmarks/figures.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale figures --config {params.config:q} --summaries {input.summaries} "
        "--out-dir {params.out_dir} > {log} 2>&1"
