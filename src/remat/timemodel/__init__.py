"""Time, predicted: a per-op roofline model of a layer's forward, backward and recompute, the tensor-parallel
collectives, and the GPU presets (datasheet numbers) they are priced with.

Modules: ``gpus`` (presets: memory, peak FLOP/s, HBM, NVLink and host-link bandwidth, each with its source).
"""
