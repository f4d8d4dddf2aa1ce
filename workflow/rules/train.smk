"""Training jobs: results/<profile>/runs/<setting>/<algorithm>/<hparams>/<attack>/seed<k>/ holds
run.yaml (the exact run config), metrics.csv, per_user.csv, summary.json and train.log. A run
requested by several experiments is trained once.

Runs that share the samples, model and local training are trained in packs of at most
resources.<dataset>.pack runs, one job per pack
(rule train_pack_<experiment>_<group>_pack<k>, fedmgda.packs): the pack rules name their runs
explicitly, and `train` only trains the runs outside packs (one job per run). A run already
trained with today's config (fedmgda.packs.trained_runs) is made by no rule, so adding seeds or
changing `pack` trains only what is missing.

Recovery never deletes finished work (docs/running.md, "Runs that survive the real world"): a job
declares of each run only summary.json, which the trainer writes last, marked update() so that
Snakemake neither removes one before the job nor, after a failed job, one the job found; the
trainer writes run.yaml with the outputs, and train.log is appended to, not a Snakemake log. The
trainer waits for a folder another trainer writes (FEDMGDA_WAIT_FOR_LOCK) and leaves a run it
finds finished as it is, so a job does not fail because of an orphaned or concurrent trainer.
SIGINT / SIGTERM reach the trainer (exec; the pack script passes them on): every run stops at the
end of its round with a checkpoint."""

from fedmgda.planning import drop_rule_function

# (threads, gpu, mem_mb, runtime) of each run the train rule makes
SINGLE_RESOURCES = {k: (REGISTRY.runs[k].resources["threads"],
                        job_gpu(REGISTRY.runs[k].config, REGISTRY.runs[k].resources),
                        REGISTRY.runs[k].resources["mem_mb"], REGISTRY.runs[k].resources["runtime"])
                    for k in SINGLE_RUNS}


def single_resource(index):
    """The train rule's threads (index 0) or resource (1: gpu, 2: mem_mb, 3: runtime): the one
    value every run shares, so that Snakemake calls no function per job, or a look-up by run."""
    values = {res[index] for res in SINGLE_RESOURCES.values()}
    if len(values) <= 1:
        return values.pop() if values else 1
    return lambda w: SINGLE_RESOURCES[w.run][index]


# No wildcard constraint names the runs `train` makes: the readers of a summary.json name its
# producer (run_summaries), and a pack rule, which has no wildcards, is preferred to `train` for
# a file both match. (A constraint is written into the output pattern, which Snakemake scans
# again for every job: a list of the runs would make planning quadratic.)
rule train:
    input:
        train_inputs,
    output:
        summary=update(f"{RUNS_DIR}/{{run}}/summary.json"),
    params:
        config=run_yaml,
        outdir=lambda w: f"{RUNS_DIR}/{w.run}",
        train=TRAIN,
    benchmark:
        f"{RESULTS}/benchmarks/train/{{run}}.tsv"
    threads: single_resource(0)
    resources:
        gpu=single_resource(1),
        mem_mb=single_resource(2),
        runtime=single_resource(3),
    conda:
        CONDA_ENV
    shell:
        "export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} FEDMGDA_WAIT_FOR_LOCK=1; "
        "exec {params.train} --config - --out {params.outdir:q} "
        "< <(printf '%s' {params.config:q}) >> {params.outdir:q}/train.log 2>&1"


for _pack, _keys in PACKS.items():
    _res = pack_resources([REGISTRY.runs[k] for k in _keys])

    rule:
        name:
            pack_rule_name(_pack)
        input:
            sorted({f for k in _keys for f in run_inputs(k)}),
        output:
            [update(f"{RUNS_DIR}/{k}/summary.json") for k in _keys],
        params:
            members=[{"config": run_config_text(k), "out": f"{RUNS_DIR}/{k}",
                      "log": f"{RUNS_DIR}/{k}/train.log"} for k in _keys],
            train=config["train_command"],  # null: the script's own Python (PYTHON)
        log:
            pack=f"{LOGS}/packs/{_pack}.log",
        benchmark:
            f"{RESULTS}/benchmarks/packs/{_pack}.tsv"
        threads: _res["threads"]
        resources:
            gpu=_res["gpu"],
            mem_mb=_res["mem_mb"],
            runtime=_res["runtime"],
        conda:
            CONDA_ENV
        script:
            "../scripts/train_pack.py"

    SUMMARY_PRODUCERS.update(dict.fromkeys(_keys, workflow.get_rule(pack_rule_name(_pack))))
    # not a global of the Snakefile per pack, which Snakemake copies for every shell job
    drop_rule_function(globals(), workflow.get_rule(pack_rule_name(_pack)))

SUMMARY_PRODUCERS.update(dict.fromkeys(SINGLE_RUNS, workflow.get_rule("train")))

ALL_RUNS = run_summaries(REGISTRY.runs)
