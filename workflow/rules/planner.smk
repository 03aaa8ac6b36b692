# Planner: exact per-layer policies (none / selective / full / offload) for the paper's models on 80 GB GPUs,
# the Pareto frontier against the baselines (incl. torch's sac_milp), and plans applied to tiny models on
# config.device and measured: one table per device (results/planner/validate/<device>.csv); tensor plans (per block,
# the op outputs kept) beside per-block plans, applied and measured (results/planner/tensor/<device>.csv); and, on
# request, tensor plans beside torch.compile's memory budget (results/planner/compile/<device>.csv) and the same points
# timed step by step in one process (results/planner/paired/<device>.csv).


rule planner_plans:
    output:
        "results/planner/{name}.csv",
    wildcard_constraints:
        name="paper|frontier|schedules",
    params:
        p=lambda wc: params_json("planner", wc.name),
    log:
        "logs/planner/{name}.log",
    benchmark:
        bench("planner_plans", "name"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment planner-{wildcards.name} --params {params.p} --out {output} > {log} 2>&1"


rule planner_validate:
    output:
        "results/planner/validate/{device}.csv",
    wildcard_constraints:
        device=config["device"],  # another device's table is an input only (like the sweeps)
    params:
        p=lambda wc: params_json("planner", "validate", device=wc.device),
    threads: ALONE  # times every plan (time_steps): alone on the machine (common.smk)
    priority: TIMED_FIRST
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    log:
        "logs/planner/validate/{device}.log",
    benchmark:
        bench("planner_validate", "device"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment planner-validate --params {params.p} --out {output} > {log} 2>&1"


rule planner_tensor:
    output:
        "results/planner/tensor/{device}.csv",
    wildcard_constraints:
        device=config["device"],
    params:
        p=lambda wc: params_json("planner", "tensor", device=wc.device),
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    log:
        "logs/planner/tensor/{device}.log",
    benchmark:
        bench("planner_tensor", "device"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment planner-tensor --params {params.p} --out {output} > {log} 2>&1"


rule planner_compile:  # not in the default target: about 50 minutes alone on a 2-core CPU (config.yaml)
    output:
        "results/planner/compile/{device}.csv",
    wildcard_constraints:
        device=config["device"],
    params:
        p=lambda wc: params_json("planner", "compile", device=wc.device),
    threads: ALONE  # times every point: alone on the machine (common.smk)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    log:
        "logs/planner/compile/{device}.log",
    benchmark:
        bench("planner_compile", "device"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment planner-compile --params {params.p} --out {output} > {log} 2>&1"


rule planner_paired:  # not in the default target: about 30 minutes alone on a 2-core CPU, after planner_compile
    input:
        "results/planner/compile/{device}.csv",
    output:
        "results/planner/paired/{device}.csv",
    wildcard_constraints:
        device=config["device"],
    params:
        p=lambda wc, input: params_json("planner", "paired", device=wc.device, table=input[0]),
    threads: ALONE  # times every pair: alone on the machine (common.smk)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    log:
        "logs/planner/paired/{device}.log",
    benchmark:
        bench("planner_paired", "device"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment planner-paired --params {params.p} --out {output} > {log} 2>&1"


rule planner_pipeline:  # not in the default target: p gloo processes per point, about 40 s alone on a 2-core CPU
    output:
        "results/planner/pipeline/cpu.csv",
    params:
        p=lambda wc: params_json("planner", "pipeline"),
    threads: ALONE  # p processes at once; peaks only, but each rank's step is timed too
    log:
        "logs/planner/pipeline/cpu.log",
    benchmark:
        bench("planner_pipeline"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment planner-pipeline --params {params.p} --out {output} > {log} 2>&1"


rule planner_figure:
    input:
        lambda wc: ["results/planner/frontier.csv"] if wc.name == "frontier" else validate_tables(),
    output:
        png="figures/planner_{name}.png",
        svg="figures/planner_{name}.svg",
    wildcard_constraints:
        name="frontier|measured|peak",
    log:
        "logs/figures/planner_{name}.log",
    benchmark:
        bench("planner_figure", "name"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat figure planner-{wildcards.name} --inputs {input} --out {output.png} > {log} 2>&1"
