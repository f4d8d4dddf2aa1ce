"""One rule per figure file (figure_<name>): results/<profile>/figures/<name>.pdf and .png, from
exactly the runs the figure shows (fedmgda.figures). Delete one figure and ask for it: only its
rule runs."""

for _name, _spec in REGISTRY.figures.items():
    _fig_spec = item_spec(REGISTRY, _spec)

    rule:
        name:
            f"figure_{_name}"
        input:
            run_summaries([r for row in _fig_spec.rows for r in row.runs]),
        output:
            pdf=report(f"{RESULTS}/figures/{_name}.pdf", caption=CAPTIONS["figure"],
                       category="Figures", subcategory=_name,
                       labels={"figure": _name, "file": "pdf"}),
            png=report(f"{RESULTS}/figures/{_name}.png", caption=CAPTIONS["figure"],
                       category="Figures", subcategory=_name,
                       labels={"figure": _name, "file": "png"}),
        params:
            title=caption_title(_spec, _name),
            spec=spec_to_json(_fig_spec),
            runs_dir=lambda w: RUNS_DIR,
            wf=WORKFLOW_CLI,
        log:
            f"{LOGS}/figures/{_name}.log",
        benchmark:
            f"{RESULTS}/benchmarks/figures/{_name}.tsv"
        resources:
            mem_mb=2000,
            runtime=15,
        conda:
            CONDA_ENV
        shell:
            "printf '%s' {params.spec:q} | MPLBACKEND=Agg {params.wf} figure --spec - "
            "--runs-dir {params.runs_dir:q} --pdf {output.pdf:q} --png {output.png:q} "
            "> {log:q} 2>&1"
