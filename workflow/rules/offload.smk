# Activation offload: host<->device copy bandwidth (fit t = t0 + bytes/BW), training steps under offload vs
# recompute, and the break-even model with the measured points on it. Without CUDA every number is a
# simulation (host memcpy), labelled so. Tables per device: results/offload/{device}/.


rule offload_experiment:
    output:
        "results/offload/{device}/{name}.csv",
    wildcard_constraints:
        name="bandwidth|steps",
        device=config["device"],  # another device's tables are inputs only: never rebuilt with these sizes
    params:
        p=lambda wc: params_json("offload", wc.name, device=wc.device),
    threads: ALONE  # both tables time (copy benchmark, time_steps): alone on the machine (common.smk)
    priority: TIMED_FIRST
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    log:
        "logs/offload/{device}/{name}.log",
    benchmark:
        bench("offload_experiment", "device", "name"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment offload-{wildcards.name} --params {params.p} --out {output} > {log} 2>&1"


rule offload_breakeven:
    input:
        steps="results/offload/{device}/steps.csv",
        bandwidth="results/offload/{device}/bandwidth.csv",
    output:
        "results/offload/{device}/breakeven.csv",
    wildcard_constraints:
        device=config["device"],
    params:
        p=lambda wc, input: params_json("offload", "breakeven", steps=input.steps, bandwidth=input.bandwidth),
    log:
        "logs/offload/{device}/breakeven.log",
    benchmark:
        bench("offload_breakeven", "device"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment offload-breakeven --params {params.p} --out {output} > {log} 2>&1"


rule offload_figure:
    input:
        lambda wc: f"results/offload/{OFFLOAD_DEVICE}/{wc.name}.csv",
    output:
        png="figures/offload_{name}.png",
        svg="figures/offload_{name}.svg",
    wildcard_constraints:
        name="bandwidth|breakeven",
    log:
        "logs/figures/offload_{name}.log",
    benchmark:
        bench("offload_figure", "name"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat figure offload-{wildcards.name} --inputs {input} --out {output.png} > {log} 2>&1"
