# Findings and reports: each report's tables -> results/findings/<report>.csv (the one judge of its claims,
# remat.analysis), then the page, which reads its findings, tables and figures (never runs an experiment).

REPORT_TABLES = {
    "chen2016": expand("results/chen/{t}.csv", t=["check", "segments", "depth", "revolve", "graph-check", "resnet", "lstm"])
    + chen_speed_tables(),
    "korthikanti2022": expand(
        "results/korthikanti/{t}.csv", t=["table2", "items", "flops", "memory", "modern", "table4", "figure8", "table5"]
    ),
    "sweeps": [t for s in SWEEPS for t in sweep_tables(s)],
    "offload": expand("results/offload/{d}/{t}.csv", d=OFFLOAD_DEVICE, t=["bandwidth", "steps", "breakeven"]),
    "planner": expand("results/planner/{t}.csv", t=["paper", "frontier", "schedules"]) + validate_tables()
    + ["results/korthikanti/table5.csv", f"results/planner/tensor/{config['device']}.csv"]
    + [t for t in [f"results/planner/{r}/{config['device']}.csv" for r in ("compile", "paired")]
       + ["results/planner/pipeline/cpu.csv"]
       if Path(t).exists()],  # on request (planner.smk)
}

JUDGES = sorted(str(p) for p in Path("src/remat/analysis").glob("*.py")) + ["src/remat/paper.py"]
"""The code that judges (rules, tolerances, paper values, each report's analysis): a change re-judges every report."""

MODEL_CHECKS = ("sweeps", "offload")   # the findings remat.analysis.times.model_checks reads
USES_MODEL_CHECKS = ("korthikanti2022", "offload", "planner")
REPORT_FIGURES = {
    "chen2016": expand("figures/chen_{f}.png", f=["segments", "depth", "resnet", "lstm"]),
    "korthikanti2022": expand("figures/korthikanti_{f}.png", f=["percent", "memory", "figure8"]),
    "sweeps": expand("figures/sweeps_{s}.png", s=SWEEPS),
    "offload": expand("figures/offload_{f}.png", f=["bandwidth", "breakeven"]),
    "planner": expand("figures/planner_{f}.png", f=["frontier", "measured", "peak"]),
}


rule findings:
    input:
        tables=lambda wc: REPORT_TABLES[wc.name],
        judges=JUDGES,
    output:
        "results/findings/{name}.csv",
    wildcard_constraints:
        name="|".join(REPORT_TABLES),
    params:
        offload_device=OFFLOAD_DEVICE,  # whose offload tables the offload findings judge (offload.report_device)
    log:
        "logs/findings/{name}.log",
    benchmark:
        bench("findings", "name"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "REMAT_OFFLOAD_DEVICE={params.offload_device} remat findings {wildcards.name} > {log} 2>&1"


rule findings_index:
    input:
        findings=expand("results/findings/{name}.csv", name=REPORT_TABLES),
        judges=JUDGES,
    output:
        "results/findings/index.csv",
    log:
        "logs/findings/index.log",
    benchmark:
        bench("findings_index"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat findings index > {log} 2>&1"


rule report:
    input:
        qmd="reports/{name}.qmd",
        findings="results/findings/{name}.csv",
        tables=lambda wc: REPORT_TABLES[wc.name],
        figures=lambda wc: REPORT_FIGURES[wc.name],
        # the time model's direct checks (remat.analysis.times.model_checks) shown where the model carries a claim
        checks=lambda wc: [f"results/findings/{r}.csv" for r in MODEL_CHECKS if wc.name in USES_MODEL_CHECKS],
    output:
        "reports/{name}.html",
    wildcard_constraints:
        name="|".join(REPORT_TABLES),
    params:
        offload_device=OFFLOAD_DEVICE,  # whose offload tables the offload report reads (offload.report_device)
    log:
        "logs/reports/{name}.log",
    benchmark:
        bench("report", "name"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "REMAT_OFFLOAD_DEVICE={params.offload_device} remat report {wildcards.name} --engine auto > {log} 2>&1"


rule scorecard_figure:
    input:
        "results/findings/index.csv",
    output:
        png="figures/scorecard.png",
        svg="figures/scorecard.svg",
    log:
        "logs/figures/scorecard.log",
    benchmark:
        bench("scorecard_figure"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat figure scorecard --inputs {input} --out {output.png} > {log} 2>&1"


rule report_index:
    input:
        qmd="reports/index.qmd",
        findings="results/findings/index.csv",
        figure="figures/scorecard.png",
        reports=expand("reports/{name}.html", name=config["reports"]),
    output:
        "reports/index.html",
    log:
        "logs/reports/index.log",
    benchmark:
        bench("report_index"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat report index --engine auto > {log} 2>&1"
