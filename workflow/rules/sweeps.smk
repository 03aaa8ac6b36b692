# Sweeps on the torch GPT model, measured beside their closed forms: segment size, depth, sequence/hidden
# size, per-layer timing. The device is config["device"]; each device writes its own table, and a figure
# draws every device's table that exists (CPU and GPU side by side).


rule sweep:
    output:
        "results/sweeps/{sweep}/{device}.csv",
    wildcard_constraints:
        sweep="segments|depth|seq-hidden|layer-timing|time-model",
        device=config["device"],  # another device's tables are inputs only: never rebuilt with these sizes
    params:
        p=lambda wc: params_json("sweeps", wc.sweep, device=wc.device),
    # a sweep that times steps runs alone on the machine (common.smk); one that does not runs beside other jobs
    threads: lambda wc: ALONE if sweep_times(wc.sweep) else 1
    priority: lambda wc: TIMED_FIRST if sweep_times(wc.sweep) else 0
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
        runtime=60,
    log:
        "logs/sweeps/{sweep}/{device}.log",
    benchmark:
        bench("sweep", "sweep", "device"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment sweep-{wildcards.sweep} --params {params.p} --out {output} > {log} 2>&1"


rule sweep_figure:
    input:
        lambda wc: sweep_tables(wc.sweep),
    output:
        png="figures/sweeps_{sweep}.png",
        svg="figures/sweeps_{sweep}.svg",
    wildcard_constraints:
        sweep="segments|depth|seq-hidden|layer-timing|time-model",
    log:
        "logs/figures/sweeps_{sweep}.log",
    benchmark:
        bench("sweep_figure", "sweep"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat figure sweep-{wildcards.sweep} --inputs {input} --out {output.png} > {log} 2>&1"
