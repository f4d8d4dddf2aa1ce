"""One rule per table (table_<name>): results/<profile>/tables/<name>.csv and .md, from exactly
the runs of the table's rows (fedmgda.tables)."""

for _name, _spec in REGISTRY.tables.items():

    rule:
        name:
            f"table_{_name}"
        input:
            run_summaries(REGISTRY.runs_of(_spec.experiments)),
        output:
            csv=report(f"{RESULTS}/tables/{_name}.csv", caption=CAPTIONS["table"],
                       category="Tables", subcategory=_name,
                       labels={"table": _name, "file": "csv"}),
            md=report(f"{RESULTS}/tables/{_name}.md", caption=CAPTIONS["table"], category="Tables",
                      subcategory=_name, labels={"table": _name, "file": "markdown"}),
        params:
            title=caption_title(_spec, _name),
            spec=spec_to_json(item_spec(REGISTRY, _spec)),
            runs_dir=lambda w: RUNS_DIR,
            wf=WORKFLOW_CLI,
        log:
            f"{LOGS}/tables/{_name}.log",
        benchmark:
            f"{RESULTS}/benchmarks/tables/{_name}.tsv"
        resources:
            mem_mb=2000,
            runtime=15,
        conda:
            CONDA_ENV
        shell:
            "printf '%s' {params.spec:q} | {params.wf} table --spec - "
            "--runs-dir {params.runs_dir:q} --csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"
