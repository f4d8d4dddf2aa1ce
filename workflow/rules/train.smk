"""One training job per run of the registry: results/<profile>/runs/<setting>/<algorithm>/
<hparams>/<attack>/seed<k>/ holds run.yaml (the exact run config), metrics.csv, per_user.csv,
summary.json and train.log. A run requested by several experiments is one job."""

rule train:
    input:
        train_inputs,
    output:
        cfg=f"{RUNS_DIR}/{{run}}/run.yaml",
        metrics=f"{RUNS_DIR}/{{run}}/metrics.csv",
        per_user=f"{RUNS_DIR}/{{run}}/per_user.csv",
        summary=f"{RUNS_DIR}/{{run}}/summary.json",
    params:
        config=run_yaml,
        outdir=lambda w, output: str(Path(output.summary).parent),
        train=TRAIN,
    log:
        f"{RUNS_DIR}/{{run}}/train.log",
    benchmark:
        f"{R}/benchmarks/train/{{run}}.tsv"
    threads: lambda w: REG.runs[w.run].resources["threads"]
    resources:
        gpu=lambda w: REG.runs[w.run].resources["gpu"],
        mem_mb=lambda w: REG.runs[w.run].resources["mem_mb"],
        runtime=lambda w: REG.runs[w.run].resources["runtime"],
    conda:
        CONDA_ENV
    shell:
        "export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}; "
        "printf '%s' {params.config:q} > {output.cfg} && "
        "{params.train} --config {output.cfg} --out {params.outdir} > {log} 2>&1"
