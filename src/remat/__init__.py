"""remat: activation recomputation (gradient checkpointing), replicated and planned.

Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost") and Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models"), replicated by a Snakemake pipeline, plus an exact
per-layer planner (none / selective / full / offload). See README.md and docs/.
"""

__version__ = "0.1.0"
