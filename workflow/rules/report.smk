"""The report: notebooks/report.ipynb executed by papermill (a shell rule, so the executed
notebook is a tracked output) into results/<profile>/report/report.ipynb, then nbconvert -> HTML
without the code cells (--no-input: the HTML shows results; the executed notebook keeps the code)."""

# each run's config hash (fedmgda.config.config_hash) as the registry's rows hold it: hashed once
RUN_HASHES = {key: digest for rows in REGISTRY.rows.values() for row in rows
              for key, digest in zip(row.runs, row.config_hashes)}


localrules:
    registry_json,


rule registry_json:
    output:
        f"{RESULTS}/registry.json",
    params:
        runs={} if JOB_SCOPE is not None else {  # a cluster job's scope has no rows
            k: {"experiments": v.experiments, "dataset": v.dataset,
                "algorithm": v.config["algorithm"], "seed": v.config["seed"],
                "config_hash": RUN_HASHES[k]}
            for k, v in REGISTRY.runs.items()},
    log:
        f"{LOGS}/registry.log",
    run:
        write_json(output[0], params.runs)


rule runs_index:
    input:
        # the summaries unnamed: Snakemake hashes a named group once per file it holds
        ALL_RUNS,
        registry=f"{RESULTS}/registry.json",
    output:
        f"{RESULTS}/runs_index.csv",
    params:
        runs_dir=lambda w: RUNS_DIR,
        wf=WORKFLOW_CLI,
    log:
        f"{LOGS}/runs_index.log",
    conda:
        CONDA_ENV
    shell:
        "{params.wf} runs-index --runs-dir {params.runs_dir:q} --registry {input.registry:q} "
        "--out {output:q} > {log:q} 2>&1"


rule report_notebook:
    input:
        notebook=config["report"]["notebook"],
        index=f"{RESULTS}/runs_index.csv",
        tables=TABLE_FILES,
        figures=FIGURE_FILES,
        claims=CLAIM_FILES,
    output:
        f"{RESULTS}/report/report.ipynb",
    params:
        results_dir=lambda w: RESULTS,
        profile=PROFILE,
        tables=" ".join(REGISTRY.tables),
        figures=" ".join(REGISTRY.figures),
        bare=" ".join(bare_experiments(
            {e for spec in REGISTRY.runs.values() for e in spec.experiments},
            [*REGISTRY.tables.values(), *REGISTRY.figures.values()])),
    log:
        f"{LOGS}/report/papermill.log",
    benchmark:
        f"{RESULTS}/benchmarks/report/papermill.tsv"
    conda:
        CONDA_ENV
    shell:
        "MPLBACKEND=Agg \"$FEDMGDA_PYTHON\" -m papermill {input.notebook:q} {output:q} "
        "-k python3 --cwd . -p results_dir {params.results_dir:q} -p profile {params.profile:q} "
        "-p tables '{params.tables}' -p figures '{params.figures}' -p bare '{params.bare}' "
        "> {log:q} 2>&1"


rule report_html:
    input:
        f"{RESULTS}/report/report.ipynb",
    output:
        report(f"{RESULTS}/report/report.html", caption=CAPTIONS["notebook"], category="Report"),
    log:
        f"{LOGS}/report/nbconvert.log",
    benchmark:
        f"{RESULTS}/benchmarks/report/nbconvert.tsv"
    conda:
        CONDA_ENV
    shell:
        "\"$FEDMGDA_PYTHON\" -m nbconvert --to html --no-input "
        "--output-dir \"$(dirname {output:q})\" --output \"$(basename {output:q} .html)\" "
        "{input:q} > {log:q} 2>&1"
