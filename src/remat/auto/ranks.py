"""Per-rank pipeline plans for a transformers model (``remat plan --hf --pp P --schedule NAME``): its measured block
as the inputs of the per-rank planner (``remat.planner.ranks``, ``priced=``), measured by remat.auto on a copy with
two blocks, under fake tensors:

* per micro-batch, block 0's options as remat.auto measured them (``measure_model``: stored bytes, the backward's
  transient with what it recomputes and its workspace, seconds on the GPU preset, offload's host bytes), with
  ``retained`` as ``rank_costs.RECOMPUTED`` says;
* outside the blocks, per micro-batch: on stage 0 what the embedding saves, on the last stage what the final norm,
  the head and the loss save, and while its backward runs the rest of the head's measured peak (``floor``);
* parameters: a block's, the embedding's (stage 0), the final norm's and the head's (the last stage; a tied head
  there too, as each stage holds its own copy of the weight);
* one stage-boundary activation s·b·h and the logits s·b·v in the parameters' dtype; the outputs of a block's
  weight-holding modules (their gradients wait for a split backward's weight step), by forward hooks;
* phases: the block's forward and half its gradient work under none (``remat.planner.ranks``).
"""

from __future__ import annotations

from remat.auto.blocks import find_blocks
from remat.auto.measure import default_loss, measure_model
from remat.measure.saved import SavedTensorLog
from remat.planner.rank_costs import RECOMPUTED, RankCosts, weight_outputs


def priced(built, st, gpu) -> tuple[RankCosts, tuple[float, float]]:
    """(RankCosts, phases) of the transformers model ``built`` (remat.auto.hf.Built, on the fake device) under the
    planner settings ``st`` (its policies) on ``gpu`` (a remat.timemodel.gpus.GPU) (module docstring)."""
    model, found = built.model, find_blocks(built.model)
    costs = measure_model(model, (), built.kwargs, found, gpu, None, st.policies)
    block = costs.blocks[0].costs
    none = block["none"]
    options = tuple(dict(policy=p, stored=c.stored_bytes, transient=c.transient_bytes, time=c.time_s,
                         host=c.offload_bytes, flops=c.recompute_flops,
                         retained=max(0, none.stored_bytes - c.stored_bytes) * (p in RECOMPUTED))
                    for p, c in block.items() if p in st.policies)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    with built.mode:
        first, last, outputs = _saved_outside(model, found, built.kwargs, embedding)
    count = lambda module: sum(p.numel() for p in module.parameters())                 # noqa: E731
    layer, e = count(found.modules[0]), next(model.parameters()).element_size()
    rest = count(model) - count(embedding) - layer * len(found.modules)
    tied = head is not None and head.weight is embedding.weight
    s, b, cfg = built.seq, built.micro_batch, built.config
    rc = RankCosts(options, (first, 0), (last, max(0, costs.floor_bytes - last)), layer, 0, count(embedding),
                   rest + (head.weight.numel() if tied else 0), 0, s * b * cfg.hidden_size * e,
                   s * b * cfg.vocab_size * e, outputs)
    return rc, (none.forward_s, none.backward_s / 2)


def _saved_outside(model, found, kwargs, embedding) -> tuple[int, int, int]:
    """(bytes the embedding saves, bytes everything after the blocks saves, bytes of block 0's weight-holding
    modules' outputs) over one forward and loss."""
    names = {id(m): n for n, m in model.named_modules()}
    embed, blocks = names[id(embedding)], found.name
    with weight_outputs(found.modules[0]) as outputs, SavedTensorLog(model) as log:
        default_loss(model(**kwargs))
    records = log.activations()
    first = sum(r.nbytes for r in records if r.module == embed or r.module.startswith(embed + "."))
    inside = lambda r: r.module == blocks or r.module.startswith(blocks + ".")         # noqa: E731
    last = sum(r.nbytes for r in records if not inside(r) and r.module != embed and r.module.startswith(
        tuple(n for n in names.values() if n)))
    return first, last, sum(outputs)
