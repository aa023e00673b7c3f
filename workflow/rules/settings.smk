# Settings records: a stage's params and local files, written where its inputs can see them.
#
# Some stages read an upstream output as an ancient input (query vectors: a dataset added reruns
# the model's one query job, not every search; the judged manifest: new collapse floors rerun the
# judgement, not the encodings). When that upstream job reruns, Snakemake does not look at the
# stage's own reasons to run (its params, its files' times), so these records carry them: each is an
# ordinary input of the stages it describes, and has no upstream of its own.
from splade_rescale.atomic import write_text


wildcard_constraints:
    record="[A-Za-z0-9_.-]+",


localrules:
    settings,


rule settings:
    """One settings record (rule_params.settings_records): its value as JSON, made from its files."""
    input:
        lambda w: SETTINGS[w.record][1],
    output:
        res("settings/{record}.json"),
    log:
        res("logs/settings/{record}.log"),
    params:
        value=lambda w: as_json(SETTINGS[w.record][0]),
    run:
        write_text(output[0], params.value + "\n")
        write_text(log[0], f"{output[0]}: {params.value}\n")
